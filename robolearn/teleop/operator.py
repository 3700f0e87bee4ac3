"""The emulated operator: the person at an emulated robot's table, for sessions without a human.

Why: HIL-SERL-style work on a robot needs a person three times: to teleoperate demonstrations
and failures while marking the frames that show success (the reward classifier's data), and
to put the object back when a reset fails. On the emulated robot that person is emulated
here, with the senses and hands a person has and nothing more:

- **eyes**: the emulator's /truth.json (drivers/truth.py), as a person at the table sees the
  cube and the gripper; used to drive and to mark success, as a person's judgement would be.
  Nothing a learner or a policy reads comes from it: the device's marks become labels of
  recorded frames (`success_mark`), exactly as a keyboard's `g` key does;
- **hands on a teleop device**: `OperatorDevice` (`--device operator`) drives the task's
  scripted lift through the env's action interface (like a SpaceMouse), in `demo` mode (lift
  the cube) or `fail` mode (a near miss: lifted too low, grasped beside the cube, hovering
  without closing), and emits `mark` while the true cube is lifted;
- **a hand on the table**: `OperatorPrompt` answers the reset supervisor's prompt
  (robolearn/resets/prompt.py) by putting the cube back in the start region through the
  emulator's explicit endpoint (drivers/emulated_hand.py), then asks for the reset to be
  retried. Every answer is a human prompt in the statistics.

On a physical arm the same roles are the keyboard/SpaceMouse/leader devices (docs/finetune.md).
"""
from __future__ import annotations

import json
import logging
import math
import time
import urllib.request
from dataclasses import dataclass

import numpy as np

from robolearn.errors import ConfigError, DeviceError
from robolearn.teleop.base import DeviceCommand, action_dim, clip_action

log = logging.getLogger(__name__)

MODES = ("demo", "fail", "alternate")
FAIL_STYLES = ("low", "beside", "hover")
#: a hand this near the cube's centre in x/y, and this near the grasp height, has the cube between
#: its fingers (the scripted descent's own arrival tolerance is 8 mm; the fingers open 4 cm around a 3 cm cube)
GRASP_XY_M = 0.008
GRASP_Z_M = 0.008
#: the lowest a hand moves across to over the cube: its grasp point 4 cm above the cube's centre,
#: the fingertips clear of the cube's top
CLEAR_DZ_M = 0.04
#: aiming by eye (`aim_by_eye`): a hand that moved less than this over a control step is still, and
#: one still this many steps with its command there has stopped short (a person looks, then nudges)
STILL_M = 0.0015
STILL_STEPS = 3
#: the most a person's nudges move the command off the goal (a hand further off is not a tracking
#: error the person corrects, it is a hand that cannot get there)
AIM_MAX_M = 0.025


def hand_place_cube(url: str, xy=None, timeout: float = 5.0) -> dict:
    """POST to the emulator's hand: the cube back to `xy` (m) or a random start-region point."""
    body = json.dumps({} if xy is None else {"xy": [float(xy[0]), float(xy[1])]}).encode()
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except (OSError, ValueError) as exc:
        raise DeviceError(f"the emulated operator's hand at {url} did not answer: {exc}") from None


class OperatorPrompt:
    """A reset prompt answered by the emulated operator's hand (see module docstring).

    Answers RETRY after putting the cube back (the reset controller then brings the arm
    home); after `max_retries` prompts within `window_s` it answers CONTINUE instead (the
    cube is in place, the episode starts where the arm is), so a broken controller cannot
    keep the operator in a loop."""

    def __init__(self, hand, max_retries: int = 2, window_s: float = 300.0, settle_s: float = 0.5):
        """hand: the emulator's hand URL, or a callable `place(xy=None) -> {"cube": [x, y, z]}`
        (`sim_hand`: the same hand in a simulator, for sim sessions in physical reset mode)."""
        if not hand:
            raise ConfigError("the emulated operator needs the emulator's hand URL "
                              "(`robolearn emulate` prints it as \"hand\")")
        if callable(hand):
            self.hand_url, self._place = None, hand
        else:
            self.hand_url = hand
            self._place = lambda xy=None: hand_place_cube(hand, xy=xy)
        self.max_retries = int(max_retries)
        self.window_s = float(window_s)
        self.settle_s = float(settle_s)
        self.asked = 0
        self.placed = 0
        self._recent: list[float] = []

    def put_cube(self, xy, message: str = "") -> None:
        """The operator puts the cube at `xy` (m) when asked to (a prompt; counted)."""
        self.asked += 1
        placed = self._place(xy)
        self.placed += 1
        time.sleep(self.settle_s)
        log.warning("[prompt] %s\n[prompt] emulated operator: put the cube by hand at (%.3f, %.3f) m",
                    message, placed["cube"][0], placed["cube"][1])

    def ask(self, message: str) -> str:
        from robolearn.resets.prompt import CONTINUE, RETRY

        self.asked += 1
        now = time.monotonic()
        self._recent = [t for t in self._recent if now - t < self.window_s] + [now]
        placed = self._place()
        self.placed += 1
        time.sleep(self.settle_s)           # the cube settles; the camera sends fresh frames
        answer = RETRY if len(self._recent) <= self.max_retries else CONTINUE
        if answer == CONTINUE:
            self._recent.clear()
        log.warning("[reset] %s\n[reset] emulated operator: put the cube back by hand at (%.3f, %.3f) m; "
                    "answer: %s", message, placed["cube"][0], placed["cube"][1], answer)
        return answer


@dataclass
class OperatorConfig:
    truth_url: str = ""         # the emulator's /truth.json: what the person at the table sees
    mode: str = "demo"          # demo | fail | alternate (demo, fail, demo, ... per episode)
    seed: int = 0
    success_frames: int = 8     # demo: frames marked "lifted" before the operator says success
    look_patience_s: float = 10.0   # a truth that does not answer within this is an emulator gone; a late
                                    # one is a person who looked away (lift session 31 ended on one 1 s timeout)
    fail_hold: int = 10         # fail: frames held at the end of the near miss before "failure"
    aim_by_eye: bool = False    # steer by where the hand is seen, not by the command alone: a hand that
                                # stopped short is nudged by the miss, a finger stopped on the cube's top
                                # goes back up and comes down again re-aimed (a person at a SpaceMouse)


class OperatorDevice:
    """Teleop device of the emulated operator: drives ArmLift like a person with a SpaceMouse
    who sees the table (module docstring). `mark` = "the cube is lifted now" (truth)."""

    name = "operator"
    wait_for_operator = False

    def __init__(self, env, config: OperatorConfig | None = None, truth=None):
        """`truth`: a callable returning the scene in /truth.json's shape, for a scene that is not
        an emulator (a sim twin, a test); by default the operator fetches `config.truth_url`."""
        from robolearn.tasks.arm_scripted import LiftController

        self.config = cfg = config or OperatorConfig()
        self._see = truth
        if cfg.mode not in MODES:
            raise ConfigError(f"operator mode={cfg.mode!r}: choose one of {', '.join(MODES)} (or intervene: "
                              "the operator who takes over a stuck policy, teleop/intervening_operator.py)")
        if truth is None and not cfg.truth_url:
            raise ConfigError("the operator device needs truth_url: the emulator's /truth.json "
                              "(`robolearn emulate` prints it); a person at a physical arm uses "
                              "--device keyboard / spacemouse / leader instead")
        task = getattr(env.unwrapped, "task", None)
        if getattr(task, "name", None) != "lift":
            raise ConfigError("the emulated operator drives robolearn/ArmLift-v0 (lift) only")
        self.env, self.task = env, task
        self.dim = action_dim(env)
        self.rng = np.random.default_rng(cfg.seed)
        self.episodes = 0
        self._ctrl = LiftController(task, env)
        self.style = "demo"
        self.late_looks = 0          # truth requests that failed or timed out and were tried again
        self.reaims = 0              # aim_by_eye: returns from a finger stopped on the cube's top
        # how near the commanded target must be to the goal to count as there: exact for clean
        # hands; a noisy hand (the intervening operator) never lands exactly, so it widens this
        self.cmd_tol = 1e-6

    # what the person sees
    def seen(self) -> dict:
        """The scene now. A slow or failed answer is tried again for `look_patience_s` (the
        control step waits, as a person who looked away a moment): on a loaded 2-core machine the
        emulator's truth once took over its 1 s timeout, and that one request ended lift session
        31 before its final evaluation. Only no answer for the whole patience is an error."""
        if self._see is not None:
            return self._see()
        from robolearn.drivers.truth import fetch_truth

        deadline = time.monotonic() + float(self.config.look_patience_s)
        while True:
            try:
                return fetch_truth(self.config.truth_url)
            except DeviceError as exc:
                self.late_looks += 1
                if time.monotonic() >= deadline:
                    raise DeviceError(f"the emulated operator saw nothing for {self.config.look_patience_s:g} s: "
                                      f"{exc}") from None
                log.warning("emulated operator: the truth did not answer (%s); looking again", exc)
                time.sleep(0.05)

    def reset(self) -> None:
        from robolearn.sim.arm_workspace import CUBE_HALF, LIFT_HEIGHT

        mode = self.config.mode
        if mode == "alternate":
            mode = "demo" if self.episodes % 2 == 0 else "fail"
        self.episodes += 1
        self.style = "demo" if mode == "demo" else str(self.rng.choice(FAIL_STYLES))
        self.offset = np.zeros(2)
        self.closes = True
        self.lift_z = CUBE_HALF + LIFT_HEIGHT + 0.05     # the scripted lift's height
        if self.style == "low":                           # grasped, lifted 1.5-3.5 cm only
            self.lift_z = 0.02 + self.rng.uniform(0.015, 0.035)
        elif self.style == "beside":                      # closes on air next to the cube, lifts
            ang = self.rng.uniform(-np.pi, np.pi)
            self.offset = self.rng.uniform(0.035, 0.05) * np.array([np.cos(ang), np.sin(ang)])
        elif self.style == "hover":                       # comes down, never closes, goes up
            self.closes = False
        self.phase, self.count, self.target = "above", 0, None
        self.hover = self._ctrl.hover                     # how high over the cube's centre "above" is
        self.marks, self.held = 0, 0
        self.aim = np.zeros(3)                            # the person's nudges on the command (aim_by_eye)
        self._last_ee, self._still = None, 0

    def take_over(self, truth: dict) -> str:
        """Plan the lift from where the hand is, as a person taking the device mid-attempt does:
        fingers already around the cube at the grasp height -> close and lift; the hand over the
        cube, above the grasp height and below the hover -> come down; else over the cube at the
        hand's own height (the fingertips clear of the cube, at most the hover), then down. Returns
        the phase it starts in. Why: starting every takeover from above opened a grasp the policy had
        under way and took the hand 5 cm up and back (lift sessions 32-35: the takeovers came at a
        median 3.2-3.8 s, at the policy's own grasps), and the policy, a clone of the driven rows,
        learnt that detour at the grasp. Used only with the intervening operator's `resume_grasp`,
        off by default: on the hard robot its takeovers lifted less often (lift session 36)."""
        self.reset()
        cube = np.asarray(truth["bodies"]["cube"][:3], float)
        ee = np.asarray(truth["sites"]["ee"], float)
        c = self._ctrl
        off_xy = float(np.linalg.norm(ee[:2] - cube[:2]))
        if off_xy < GRASP_XY_M and abs(ee[2] - c.grasp_z) < GRASP_Z_M:
            self.phase, self.count = "close", 0
        elif off_xy < GRASP_XY_M and c.grasp_z <= ee[2] < cube[2] + c.hover:
            self.phase = "descend"
        else:
            self.hover = float(np.clip(ee[2] - cube[2], CLEAR_DZ_M, c.hover))
        return self.phase

    def read(self, obs=None) -> DeviceCommand:
        return self.drive(self.seen())

    def drive(self, truth: dict) -> DeviceCommand:
        """One step of the person's hands, given what they see now (`truth`, /truth.json)."""
        from robolearn.sim.arm_workspace import CUBE_HALF, LIFT_HEIGHT
        from robolearn.tasks.arm_scripted import CLOSED, OPEN

        cube = np.asarray(truth["bodies"]["cube"][:3])
        ee = np.asarray(truth["sites"]["ee"])
        c = self._ctrl
        events = set()
        if cube[2] - CUBE_HALF >= LIFT_HEIGHT:      # what a person sees: the cube is up now
            events.add("mark")
            self.marks += 1
        if self.marks > self.config.success_frames or (self.marks and self.held > self.config.fail_hold):
            events.add("success")                     # ends the episode, labelled a success
        elif self.held > self.config.fail_hold:
            events.add("failure")                     # the near miss is over
        grip = CLOSED if self.closes else OPEN
        by_eye = self.config.aim_by_eye
        if by_eye:
            moved = math.inf if self._last_ee is None else float(np.linalg.norm(ee - self._last_ee))
            self._still = self._still + 1 if moved < STILL_M else 0
            self._last_ee = np.array(ee, float)
        if self.target is None or (by_eye and self.phase == "above"):   # by eye: where the cube is now
            self.target = cube[:2] + self.offset
        xy = self.target
        if self.phase == "above":
            goal = np.array([xy[0], xy[1], cube[2] + self.hover])
            if self._arrived(goal, ee, 0.012):
                self.phase = "descend"
            elif by_eye:
                self._nudge(goal, ee)
            a = c.toward(goal + self.aim, OPEN)
        elif self.phase == "descend":
            goal = np.array([xy[0], xy[1], c.grasp_z])
            if self._arrived(goal, ee, 0.008):
                self.phase, self.count = "close", 0
            elif by_eye and self._stopped_short(goal):
                miss = goal - ee
                if ee[2] - goal[2] > 0.008 and float(np.linalg.norm(miss[:2])) > 0.004:
                    # a finger on the cube's top: up again, the miss across taken off the aim
                    self.aim[:2] = np.clip(self.aim[:2] + miss[:2], -AIM_MAX_M, AIM_MAX_M)
                    self.phase, self.reaims, self._still = "above", self.reaims + 1, 0
                    log.info("operator: a finger stopped on the cube's top %.1f mm across: up again, re-aimed",
                             1000 * float(np.linalg.norm(miss[:2])))
                else:
                    self._nudge(goal, ee)
            a = c.toward(goal + self.aim, OPEN, speed=0.6)
        elif self.phase == "close":
            self.count += 1
            if self.count >= c.close_steps:
                self.phase = "lift"
            a = c.toward(self.task.ee_cmd, grip)
        else:
            goal = np.array([self.task.ee_cmd[0], self.task.ee_cmd[1], self.lift_z])
            if (self.style == "demo" and ee[2] - cube[2] > 0.04 and cube[2] - CUBE_HALF < 0.01):
                self.phase, self.target, self.hover = "above", None, c.hover   # the grasp slipped: a person tries again
                a = c.toward(self.task.ee_cmd + np.array([0, 0, 0.02]), OPEN)
            else:
                a = c.toward(goal, grip, speed=0.6)
                if self._arrived(goal, ee, 0.02):
                    self.held += 1
        return DeviceCommand(clip_action(a, self.dim), True, events)

    def _arrived(self, goal, ee_true, tol: float) -> bool:
        """The commanded target is there (with the person's nudges) and the person sees the
        gripper there."""
        from robolearn.sim.arm_workspace import WORKSPACE_HIGH, WORKSPACE_LOW

        return (self._commanded_there(goal)
                and float(np.linalg.norm(ee_true - np.clip(goal, WORKSPACE_LOW, WORKSPACE_HIGH))) < tol)

    def _commanded_there(self, goal) -> bool:
        """The device's command is at `goal` plus the person's nudges (inside the workspace)."""
        from robolearn.sim.arm_workspace import WORKSPACE_HIGH, WORKSPACE_LOW

        cmd_goal = np.clip(goal + self.aim, WORKSPACE_LOW, WORKSPACE_HIGH)
        return float(np.abs(self.task.ee_cmd - cmd_goal).max()) < self.cmd_tol

    def _stopped_short(self, goal) -> bool:
        """The command is where the person aimed it and the hand has not moved for STILL_STEPS."""
        return self._still >= STILL_STEPS and self._commanded_there(goal)

    def _nudge(self, goal, ee_true) -> None:
        """A hand stopped short of `goal`: aim the command further by the miss the person sees."""
        if self._stopped_short(goal):
            self.aim = np.clip(self.aim + (goal - np.asarray(ee_true, float)), -AIM_MAX_M, AIM_MAX_M)
            self._still = 0

    def help(self) -> str:
        return (f"operator (emulated person, sees {self.config.truth_url}): {self.config.mode} episodes; "
                "marks frames where the cube is truly lifted (Ctrl-C stops)")

    def close(self) -> None:
        pass


def sim_hand(sim, seed: int = 0):
    """The emulated operator's hand in a simulator (`ArmSim`): `place(xy=None)` puts the cube
    back as `drivers/emulated_hand.py` does in the emulator's plant. Not a teleport (the sim's
    `teleports` counter is for resets that write state; physical mode forbids those): a
    person's move, made only when a prompt is answered, counted in `OperatorPrompt.placed` and as a human
    prompt in the reset statistics."""
    import threading

    from robolearn.drivers.emulated_hand import EmulatedHand

    if sim is None or not hasattr(sim, "cube_pose"):
        raise ConfigError('reset_prompt="operator:sim": the hand puts a cube back, so it needs a '
                          'simulated arm (on an emulated robot give "operator:HAND_URL", on a real '
                          'one "terminal")')
    hand = EmulatedHand(sim.model, sim.data, threading.Lock(), seed=seed)

    def place(xy=None) -> dict:
        return hand.place_cube({} if xy is None else {"xy": [float(xy[0]), float(xy[1])]})

    return place


def make_prompt(spec, sim=None):
    """A reset prompt from a launch-file string: "terminal" (the operator at this terminal,
    robolearn/resets/prompt.py), "operator:HAND_URL" (the emulated operator at an emulated
    robot), "operator:sim" (the same operator's hand in the simulator `sim`) or "operator:car"
    (the emulated person at the emulated car, who cannot lift it: retry, then continue)."""
    if not isinstance(spec, str):
        return spec
    if spec == "terminal":
        from robolearn.resets.prompt import HumanPrompt

        return HumanPrompt()
    if spec == "operator:sim":
        return OperatorPrompt(sim_hand(sim), settle_s=0.0)
    if spec == "operator:car":  # the emulated person at the emulated car (teleop/car_operator.py)
        from robolearn.teleop.car_operator import CarOperatorPrompt

        return CarOperatorPrompt()
    if spec.startswith("operator:"):
        return OperatorPrompt(spec.partition(":")[2])
    raise ConfigError(f"reset_prompt={spec!r}: give \"terminal\", \"operator:URL\" (the emulated "
                      "operator's hand, printed by `robolearn emulate`) or \"operator:sim\" (its hand in "
                      "the simulator)")

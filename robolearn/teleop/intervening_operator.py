"""The emulated operator who intervenes (HIL-SERL): watches the policy, takes over when it is stuck.

Why: HIL-SERL fine-tunes on a robot with a person at a teleop device who takes over when the
policy is stuck and hands back once past the trouble; the steps the person drives are
flagged `intervention` and join the prior (RLPD) buffer and the critic's replay. On the
emulated robot that person is emulated here, with a person's senses, hands and rule:

- **eyes**: the emulator's /truth.json, read each control step as a person at the table sees
  the cube and the gripper (nothing of it reaches a policy, a reward or a learner: the only
  trace is which steps were driven and the actions applied);
- **rule** (what a person watching does): *progress* is the gripper `progress_m` (1 cm) nearer
  the cube than at the last progress, the cube `progress_m` higher, or (with `grasp_progress`,
  the default) the fingers closing on the cube: within `near_m` (5 cm) of it, their gap `grip_progress_m` (5 mm) narrower than at
  its widest since the last progress (a person sees a grasp under way, or a new attempt after
  the fingers reopened; a closed gripper that stays closed is no progress). Nearer and higher
  are measured from the best so far (a hand that backs off and returns has not progressed), and
  only `grasp_tries` (2) grasps count until the hand gets nearer or the cube higher: a person
  stops counting a gripper that fumbles open and shut beside the cube. Without that limit the
  policy's fumbling reset the patience at every close: 9-11 episodes of each of lift sessions
  11, 18 and 19 failed with no takeover at all, the gripper closing 11 times each (median; 2-3
  in the policy's own lifts; docs/bench/finetune/README.md, "Lift: a fumbling gripper is not
  progress"). Without the grasp, the rule fired on the slow hard arm while
  the policy was closing on the cube, in episodes it went on to lift alone (8-9 of the fires
  in 30 sampled episodes of the sessions' final policies in the servo-fitted sim, against 0-2
  with it: docs/bench/finetune/README.md, "Lift: what the operator counts as progress"). The lift
  session's launch file sets `grasp_progress = false` again (stop 52): the policy it fine-tunes is
  a clone of what the operator drives (the anchor's pull on the operator's rows is ~30x the
  critic's), and takeovers that start at the policy's own grasps teach it the grasp: finals
  0.75-0.90 in 10 of 11 sessions without the grasp counted (sessions 1-9, 25, 26), against
  0.50-0.80 in 14 with it; the share driven fell in session 25 and rose in 26
  (docs/bench/finetune/README.md, "Lift: the operator as the teacher"). With no progress for
  `patience_s` (2 s) of robot time and the cube not lifted, the operator decides to take over.
  With `landing_m` > 0 (e.g. 0.02) the operator also decides at once on seeing a finger **come
  down on the cube**: a fingertip over the cube's top face, within `landing_m` above it and going
  down (or touching it), the cube not between the fingers. With the 4 cm gripper and the 3 cm
  cube that is an offset of 5 mm or more along the fingers' closing axis, how the failed lifts
  since stop 45 push the cube. Off by default (the stop-49 rule alone): the lift policies come
  down fast and re-aim, so in the twin it fired in 8 of 11 episodes the policy then lifted alone,
  and sessions 23-24 with it ended at 0.60 and 0.70 (docs/bench/finetune/README.md, "Lift: the
  operator sees a finger land on the cube").
  Either way
  at most `max_per_episode` (1) takeovers an episode (a person does not wrestle a policy all
  episode long). There is no "leaving the workspace" rule: the arm's action mapping clips the
  commanded gripper to the workspace box, so the arm cannot leave it.
- **reaction delay**: the hands reach the device `reaction_s` (0.3 s, rounded up to control
  steps) after the decision; the policy drives meanwhile. Letting go also comes `reaction_s`
  after the person sees the cube lifted.
- **hands**: the same device interface as a SpaceMouse: `OperatorDevice` drives the scripted
  lift (above the cube, descend, close, lift), from the 7 cm hover above the cube whatever the
  policy was doing (the default, sessions 1-35). With `resume_grasp = true` (stop 57) it takes up
  the lift from where the hand is: fingers already around the cube at the grasp height close and
  lift; a hand over the cube on its way down comes down; any other hand moves across at its own
  height (at least 4 cm over the cube's centre, at most the hover) and comes down. In the
  servo-fitted twin with sessions 33-35's last policies it drove less (share 0.34-0.37 -> 0.25-0.29)
  and lifted more (26-29 -> 29-30 of 30); on the hard robot (lift session 36) its takeovers lifted
  less often (53 of 81, against 71-82 % in sessions 33-35) and the share driven did not fall, so it
  stays off (docs/bench/finetune/README.md, "Lift: the operator takes over from where the hand is").
  With `aim_by_eye = true` (stop 61, the lift file's) the hands steer by where they see the hand,
  not by the command alone: a hand stopped short of a waypoint (a hard arm's sag, lag or a finger
  stopped on the cube's top) is nudged by the miss, a finger on the cube's top goes back up and
  comes down re-aimed, and over the hover the hands aim at where the cube is now
  (`OperatorConfig.aim_by_eye`; without it the person waits out `max_takeover_s`).
  Plus Gaussian hand noise
  of std `noise` (0.05 action units = 1.25 mm per step) on the three translation dims; the
  gripper is a button (no noise). The operator hands back when the cube is lifted, or after
  `max_takeover_s` (6 s) without a lift (the person gives up and lets the policy try).
  The demo device's labels ("mark", "success") are dropped: an intervention never labels an
  outcome, or truth would leak into the reward.

On a physical arm the person does the same with a SpaceMouse, a gamepad or a leader arm
(`[actor] intervene = "spacemouse"`, docs/finetune.md).
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

from robolearn.env import env_control_hz
from robolearn.errors import ConfigError
from robolearn.teleop.base import DeviceCommand, action_dim, clip_action

log = logging.getLogger(__name__)


#: points of a fingertip's bottom face in its finger's frame (the model's finger box: 24 x 8 mm,
#: its centre 4 mm inward of the finger body and 52 mm below it; y mirrored for the right finger)
_FINGER_TIP_GRID = np.array([[x, y, -0.052] for x in (-0.012, 0.0, 0.012) for y in (0.0, 0.008)])
_DOWN_M = 0.001    # a fingertip this much lower than a step ago is going down
_TOUCH_M = 0.003   # ... and one this close to the top face is on it


def cube_turn_deg(bodies: dict) -> float | None:
    """How far the cube is turned about the vertical from square to the fingers, 0-45 degrees
    (None without the fingers' or the cube's orientation). Why: the fingers open 4 cm around a
    3 cm cube, and its half-diagonal is 2.1 cm, so a cube turned near 45 degrees puts a corner under
    each fingertip however well the hand is aimed, and the actions (x, y, z, gripper) cannot turn
    the wrist."""
    if "finger_left" not in bodies or len(bodies.get("cube", ())) < 7 or len(bodies["finger_left"]) < 7:
        return None
    cube_x = _rotation(bodies["cube"])[:2, 0]
    hand_x = _rotation(bodies["finger_left"])[:2, 0]
    turn = math.degrees(math.atan2(hand_x[0] * cube_x[1] - hand_x[1] * cube_x[0], float(hand_x @ cube_x)))
    turn = abs(turn) % 90.0
    return round(min(turn, 90.0 - turn), 1)


def _rotation(pose) -> np.ndarray:
    """The body's rotation matrix from its /truth.json pose [x, y, z, qw, qx, qy, qz] (identity if absent)."""
    import mujoco

    mat = np.eye(3).ravel()
    if len(pose) >= 7:
        mujoco.mju_quat2Mat(mat, np.asarray(pose[3:7], np.float64))
    return mat.reshape(3, 3)


@dataclass
class InterveneConfig:
    truth_url: str = ""          # the emulator's /truth.json: what the person at the table sees
    seed: int = 0
    patience_s: float = 2.0      # robot seconds without progress before the person decides
    progress_m: float = 0.01     # progress: gripper this much nearer the cube, or the cube this much higher
    grip_progress_m: float = 0.005   # ... or the fingers' gap this much narrower within near_m of the cube
    near_m: float = 0.05
    grasp_progress: bool = True  # a grasp under way (the fingers closing near the cube) counts as progress
    grasp_tries: int = 2         # grasps that count as progress until the hand gets nearer or the cube higher
    landing_m: float = 0.0       # > 0: a fingertip this close above the cube's top face, going down: take over
    reaction_s: float = 0.3      # decision -> hands on the device; lift seen -> hands off
    noise: float = 0.05          # std of the hand's noise on the translation dims (action units)
    max_takeover_s: float = 6.0  # hand back after this long even without a lift
    max_per_episode: int = 1     # takeovers per episode
    resume_grasp: bool = False   # true: the hands start from where the arm is (a grasp under way is closed and lifted)
    aim_by_eye: bool = False     # true: the hands steer by where the hand is seen (OperatorConfig.aim_by_eye)

    def check(self) -> "InterveneConfig":
        for k in ("patience_s", "progress_m", "grip_progress_m", "near_m", "max_takeover_s"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ConfigError(f"intervening operator: {k}={v!r} must be a number > 0")
        for k in ("reaction_s", "noise", "landing_m"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
                raise ConfigError(f"intervening operator: {k}={v!r} must be a number >= 0")
        for k in ("grasp_progress", "resume_grasp", "aim_by_eye"):
            if not isinstance(getattr(self, k), bool):
                raise ConfigError(f"intervening operator: {k}={getattr(self, k)!r} must be true or false")
        for k in ("max_per_episode", "grasp_tries"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"intervening operator: {k}={v!r} must be an integer >= 1")
        return self


class InterveningOperator:
    """Device of the emulated intervening operator (module docstring): `engaged` only while
    the person has taken over."""

    name = "operator"
    wait_for_operator = False

    def __init__(self, env, config: InterveneConfig | None = None, truth=None):
        """`truth`: the scene as a callable (OperatorDevice); by default `config.truth_url`."""
        from robolearn.teleop.operator import OperatorConfig, OperatorDevice

        self.config = cfg = (config or InterveneConfig()).check()
        self.hands = OperatorDevice(env, OperatorConfig(truth_url=cfg.truth_url, mode="demo", seed=cfg.seed,
                                                        aim_by_eye=cfg.aim_by_eye),
                                    truth=truth)
        hz = env_control_hz(env, 0.0)
        if hz <= 0:
            raise ConfigError("the intervening operator counts robot time in control steps: the env "
                              "declares no control_hz")
        from robolearn.sim.arm_workspace import EE_STEP

        self.hz = hz
        self.dim = action_dim(env)
        self.patience_steps = max(1, math.ceil(cfg.patience_s * hz - 1e-9))
        self.reaction_steps = math.ceil(cfg.reaction_s * hz - 1e-9)
        self.max_takeover_steps = max(1, math.ceil(cfg.max_takeover_s * hz - 1e-9))
        # a noisy hand never puts the commanded target exactly on a waypoint
        self.hands.cmd_tol = max(1e-6, 4.0 * cfg.noise * EE_STEP)
        self.rng = np.random.default_rng(cfg.seed + 1)
        self.takeovers = 0           # over the device's life
        self.driven_steps = 0
        self.handbacks = {"lifted": 0, "gave_up": 0}
        self.reasons = {"stuck": 0, "landing": 0}   # why each takeover was decided
        self.start_phases: dict[str, int] = {}       # where the hands began each takeover: above | descend | close
        self.give_up_phases: dict[str, int] = {}     # where the hands were when the person gave up
        self.reset()

    def reset(self) -> None:
        self.state = "watching"      # watching -> reacting -> driving -> (handing back) -> watching
        self.step = 0
        self.episode_takeovers = 0
        self._ref = None             # (nearest gripper-cube distance, highest cube, widest finger gap since the last progress)
        self._grasps = 0             # grasps counted since the hand last got nearer or the cube higher
        self._last_progress = 0
        self._until = None           # step at which the reaction ends (take over / let go)
        self._since = 0              # step the takeover began
        self._why = ""               # why the operator hands back: lifted | gave_up
        self._reason = ""            # why the operator decided to take over: stuck | landing
        self._tip_height = math.inf  # the lowest fingertip over the cube's top face, last step

    def _seen(self, truth: dict) -> tuple[float, float, float]:
        """(gripper-cube distance, cube height, finger gap) as a person at the table sees them."""
        from robolearn.sim.arm_workspace import CUBE_HALF

        bodies = truth["bodies"]
        cube = np.asarray(bodies["cube"][:3], float)
        ee = np.asarray(truth["sites"]["ee"], float)
        gap = (float(np.linalg.norm(np.subtract(bodies["finger_left"][:3], bodies["finger_right"][:3])))
               if "finger_left" in bodies and "finger_right" in bodies else math.inf)
        return float(np.linalg.norm(ee - cube)), float(cube[2] - CUBE_HALF), gap

    def sees_finger_landing(self, truth: dict) -> bool:
        """A fingertip over the cube's top face, at most `landing_m` above it and lower than a
        step ago (or touching it): a finger is coming down on the cube, not beside it. Call it once
        a control step (it remembers the last step's fingertip height); False with `landing_m` 0."""
        from robolearn.sim.arm_workspace import CUBE_HALF

        cfg, bodies = self.config, truth["bodies"]
        if not cfg.landing_m or "finger_left" not in bodies or "finger_right" not in bodies:
            return False
        cube = np.asarray(bodies["cube"][:3], float)
        to_cube = _rotation(bodies["cube"]).T             # world -> the cube's own axes
        lowest = math.inf
        for name, side in (("finger_left", 1.0), ("finger_right", -1.0)):
            pose = bodies[name]
            tips = np.asarray(pose[:3], float) + _FINGER_TIP_GRID * (1.0, side, 1.0) @ _rotation(pose).T
            local = (tips - cube) @ to_cube.T
            over = (np.abs(local[:, 0]) < CUBE_HALF) & (np.abs(local[:, 1]) < CUBE_HALF)
            if over.any():
                lowest = min(lowest, float(local[over, 2].min()) - CUBE_HALF)
        before, self._tip_height = self._tip_height, lowest
        going_down = math.isfinite(before) and lowest < before - _DOWN_M   # over the face a step ago too
        return 0.0 <= lowest <= cfg.landing_m and (going_down or lowest < _TOUCH_M)

    def _progressed(self, dist: float, height: float, gap: float) -> bool:
        if gap > self._ref[2]:       # the fingers reopen: a new grasp from here counts again
            self._ref = (*self._ref[:2], gap)
        ref_dist, ref_height, ref_gap = self._ref
        cfg = self.config
        if dist < ref_dist - cfg.progress_m or height > ref_height + cfg.progress_m:
            self._grasps = 0
            return True
        if (cfg.grasp_progress and dist < cfg.near_m and gap < ref_gap - cfg.grip_progress_m
                and self._grasps < cfg.grasp_tries):
            self._grasps += 1
            return True
        return False

    def _restart_watch(self, dist: float, height: float, gap: float) -> None:
        """Watch afresh from the scene now (the episode's first step, a lift, a hand-back)."""
        self._ref, self._last_progress, self._grasps = (dist, height, gap), self.step, 0

    def read(self, obs=None) -> DeviceCommand:
        from robolearn.sim.arm_workspace import LIFT_HEIGHT

        cfg = self.config
        truth = self.hands.seen()
        self.step += 1
        dist, height, gap = self._seen(truth)
        lifted = height >= LIFT_HEIGHT
        if self._ref is None:
            self._restart_watch(dist, height, gap)
        landing = self.sees_finger_landing(truth)
        if self.state == "watching":
            can_take = not lifted and self.episode_takeovers < cfg.max_per_episode
            if can_take and landing:
                self.state, self._until, self._reason = "reacting", self.step + self.reaction_steps, "landing"
                log.info("operator: a finger is coming down on the cube (%.3f m above its top): taking over "
                         "in %.1f s", self._tip_height, self.reaction_steps / self.hz)
            elif self._progressed(dist, height, gap):   # measured from the best so far from now on
                self._ref, self._last_progress = (min(dist, self._ref[0]), max(height, self._ref[1]), gap), self.step
            elif can_take and self.step - self._last_progress >= self.patience_steps:
                self.state, self._until, self._reason = "reacting", self.step + self.reaction_steps, "stuck"
                log.info("operator: no progress for %.1f s (gripper %.3f m from the cube, cube %.3f m up): "
                         "taking over in %.1f s", (self.step - self._last_progress) / self.hz, dist, height,
                         self.reaction_steps / self.hz)
        if self.state == "reacting" and lifted:    # the policy lifted it meanwhile: hands stay off
            self.state, self._until = "watching", None
            self._restart_watch(dist, height, gap)
        if self.state == "reacting" and self.step >= self._until:
            self.state, self._since, self._until = "driving", self.step, None
            self.episode_takeovers += 1
            self.takeovers += 1
            self.reasons[self._reason] += 1
            if cfg.resume_grasp:         # plan the lift from where the hand is now
                start = self.hands.take_over(truth)
            else:                        # ... or from above, whatever the policy was doing
                self.hands.reset()
                start = self.hands.phase
            self.start_phases[start] = self.start_phases.get(start, 0) + 1
        if self.state == "driving" and self._until is None:
            if lifted:
                self._until, self._why = self.step + self.reaction_steps, "lifted"
            elif self.step - self._since >= self.max_takeover_steps:
                self._until, self._why = self.step, "gave_up"
                self._log_give_up(truth)
        if self.state == "driving" and self._until is not None and self.step >= self._until:
            self.state, self._until = "watching", None
            self.handbacks[self._why] += 1
            self._restart_watch(dist, height, gap)
            log.info("operator: hands back after %.1f s (%s)", (self.step - self._since) / self.hz, self._why)
        if self.state != "driving":
            return DeviceCommand(np.zeros(self.dim, np.float32), False, set())
        self.driven_steps += 1
        a = np.asarray(self.hands.drive(truth).action, np.float64)   # its labels are dropped
        if cfg.noise > 0:
            a[:3] += self.rng.normal(0.0, cfg.noise, size=3)
        return DeviceCommand(clip_action(a, self.dim), True, set())

    def _log_give_up(self, truth: dict) -> None:
        """Where the hands were when the person gave up: the phase of the scripted lift, how far
        the hand truly is from the cube and from where the device commands it (the hard arm's
        tracking error), and how far the cube is turned from the fingers, so a session's log says
        why its takeovers failed."""
        cube = np.asarray(truth["bodies"]["cube"][:3], float)
        ee = np.asarray(truth["sites"]["ee"], float)
        cmd = np.asarray(self.hands.task.ee_cmd, float)
        phase = self.hands.phase
        self.give_up_phases[phase] = self.give_up_phases.get(phase, 0) + 1
        log.info("operator: giving up in phase %s: hand - cube %s mm, hand - command %s mm, the cube turned "
                 "%s deg from square to the fingers", phase, np.round((ee - cube) * 1000, 1).tolist(),
                 np.round((ee - cmd) * 1000, 1).tolist(), cube_turn_deg(truth["bodies"]))

    def stats(self) -> dict:
        return {"takeovers": self.takeovers, "driven_steps": self.driven_steps,
                "handbacks": dict(self.handbacks), "takeover_reasons": dict(self.reasons),
                "takeover_starts": dict(self.start_phases), "give_up_phases": dict(self.give_up_phases),
                "reaims": self.hands.reaims,
                "late_looks": self.hands.late_looks}

    def help(self) -> str:
        c = self.config
        return (f"operator (emulated person, sees {c.truth_url}): takes over after {c.patience_s:g} s without "
                f"progress{' or on seeing a finger come down on the cube' if c.landing_m else ''} "
                f"(reaction {c.reaction_s:g} s, hand noise {c.noise:g}), hands back after the lift "
                f"or {c.max_takeover_s:g} s, at most {c.max_per_episode} takeover(s) an episode")

    def close(self) -> None:
        self.hands.close()

"""The emulated person at the emulated car: drives demonstration laps through the gamepad, and
answers the reset prompt.

Why: FastRLAP-style practice starts from a few laps a person drives with a gamepad. On the
emulated car that person is emulated with a person's senses and hands, nothing more:
- **eyes**: the emulator's /truth.json (the car where it truly is, as a person at the track
  sees it), seen `reaction_s` late (a person reacts to what they saw a quarter second ago);
- **thumbs**: the gamepad's sticks. The operator decides a steering and throttle (pure pursuit
  on what it sees, at a person's cautious speed, with a slow wobble of the thumbs), turns them
  into stick positions (raw evdev axis values) and feeds them through `GamepadState`, the
  gamepad device's own event mapping (axis signs, ranges, dead zone, the hold-to-drive
  button); the env gets what a real gamepad would send. Stuck against a wall, it backs off
  with the wheels turned the other way, as a person would. After `demo_laps` laps it presses
  "success" (A) to end the demonstration.
- **the prompt**: `CarOperatorPrompt` answers the reset supervisor when the car's recovery has
  failed repeatedly. The emulated operator cannot lift the car (the emulator has no hand for
  it), so it looks and asks for another recovery; after `max_retries` it lets the episode
  start where the car is. Every answer is a human prompt in the statistics.
Nothing a policy or a learner reads comes from the truth: it only moves the sticks.
"""
from __future__ import annotations

import collections
import logging
import time
from dataclasses import dataclass

import numpy as np

from robolearn.env import env_control_hz
from robolearn.errors import ConfigError
from robolearn.teleop.base import DeviceCommand
from robolearn.teleop.gamepad import GamepadConfig, GamepadState

log = logging.getLogger(__name__)

#: the car's gamepad layout (teleop/__init__.py: left stick steers, right stick throttle)
CAR_AXES = ("-ABS_X", "-ABS_RY")
STICK_RANGE = (-32768, 32767)
#: the person judges speed and turn rate over this much of what they saw
ANTICIPATE_FROM_S = 0.1
#: stuck: slower than this (m/s) for this long (s) with throttle on -> back off this long, reversing
STUCK_SPEED, STUCK_S, BACK_OFF_S, BACK_OFF_THROTTLE = 0.2, 0.75, 1.0, 0.6


@dataclass
class CarOperatorConfig:
    truth_url: str = ""        # the emulator's /truth.json: what the person at the track sees
    reaction_s: float = 0.2    # they act on what they saw this long ago (and anticipate)
    wobble: float = 0.06       # std of the thumbs' slow wobble (action units)
    wobble_tau_s: float = 0.6  # its correlation time
    v_straight: float = 2.0    # m/s: a person drives below the pure pursuit's 3.5 m/s
    a_lat: float = 3.0         # m/s^2 in corners (pure pursuit: 4.5)
    demo_laps: int = 2         # laps before pressing "success"
    seed: int = 0


def stick_value(x: float) -> int:
    """Axis position in [-1, 1] -> the raw evdev value of a +-32767 stick."""
    lo, hi = STICK_RANGE
    return int(round(lo + (float(np.clip(x, -1, 1)) + 1.0) * 0.5 * (hi - lo)))


class CarGamepadOperator:
    """Teleop device: the emulated person driving the car through the gamepad (module docstring)."""

    name = "car_operator"
    wait_for_operator = False

    def __init__(self, env, config: CarOperatorConfig | None = None):
        from robolearn.drivers.truth import LiveTruth, car_pose
        from robolearn.tasks.car_scripted import PurePursuit, PurePursuitConfig

        self.config = cfg = config or CarOperatorConfig()
        if not cfg.truth_url:
            raise ConfigError("the emulated car operator needs the emulator's truth URL (what the "
                              "person sees): `robolearn emulate car` prints it as \"truth\"")
        if cfg.reaction_s < 0 or cfg.wobble < 0 or cfg.wobble_tau_s <= 0 or cfg.demo_laps < 1:
            raise ConfigError("car operator: reaction_s and wobble >= 0, wobble_tau_s > 0, demo_laps >= 1")
        # polled beside the loop: a late answer is a moment the person did not see the car
        self.truth = LiveTruth(cfg.truth_url)
        self._car_pose = car_pose
        self.driver = PurePursuit(env, PurePursuitConfig(v_straight=cfg.v_straight, a_lat=cfg.a_lat),
                                  locate=self._seen_pose)
        self.dt = 1.0 / env_control_hz(env, 20.0)
        self.pad = GamepadState(2, GamepadConfig(axes=CAR_AXES),
                                {a.lstrip("-"): STICK_RANGE for a in CAR_AXES})
        self._rng = np.random.default_rng(cfg.seed)
        self.reset()

    def _seen_pose(self):
        """Where the person thinks the car is now: the newest pose they saw at least
        `reaction_s` ago, carried forward by `reaction_s` at the speed and turn rate they saw
        just before it (people anticipate; steering a stale pose as if it were now weaves).
        None until they have seen enough."""
        now = time.monotonic()
        got = self.truth.latest()
        if got is not None and (not self._seen or got[0] > self._seen[-1][0]):
            self._seen.append((got[0], self._car_pose(got[1])))
        lag = self.config.reaction_s
        if not self._seen or now - self._seen[-1][0] > lag + self.truth.stale_after:
            return None                      # they have not seen the car for a while: brake
        while len(self._seen) > 1 and now - self._seen[1][0] >= lag:
            self._old.append(self._seen.popleft())
        t, pose = self._seen[0]
        if now - t < lag:
            return None
        past = [p for p in self._old if t - p[0] >= ANTICIPATE_FROM_S]
        if not past or lag == 0:
            return pose
        t0, (x0, y0, yaw0) = past[-1]
        x, y, yaw = pose
        dt = max(t - t0, 1e-3)
        dyaw = (yaw - yaw0 + np.pi) % (2 * np.pi) - np.pi
        v = float(np.hypot(x - x0, y - y0)) / dt
        self._seen_speed = v
        yaw_mid = yaw + 0.5 * dyaw / dt * lag
        return (x + v * lag * np.cos(yaw_mid), y + v * lag * np.sin(yaw_mid), yaw + dyaw / dt * lag)

    def observe(self, info: dict) -> None:
        self._laps = int(info.get("laps", 0))

    def read(self, obs=None) -> DeviceCommand:
        cfg = self.config
        a = self.driver.act(obs)
        # stuck against a wall (the car does not move although they give throttle): a person
        # backs off with the wheels turned the other way, then drives on
        if self._backing > 0:
            self._backing -= self.dt
            a = np.array([-self._backing_steer, -BACK_OFF_THROTTLE])
        elif a[1] > 0.3 and self._seen_speed < STUCK_SPEED:   # seen, not odometry: wheels spin
            self._stuck += self.dt
            if self._stuck >= STUCK_S:
                self._stuck, self._backing = 0.0, BACK_OFF_S
                self._backing_steer = 1.0 if a[0] >= 0 else -1.0
        else:
            self._stuck = 0.0
        k = self.dt / cfg.wobble_tau_s               # Ornstein-Uhlenbeck thumbs
        self._wobble += -k * self._wobble + cfg.wobble * np.sqrt(2 * k) * self._rng.normal(size=2)
        a = np.clip(a + self._wobble, -1.0, 1.0)
        # the action's sign conventions are the gamepad's (axis '-ABS_X' = steer left), so the
        # thumb positions are the negated actions
        self.pad.apply("EV_KEY", "BTN_TL", 1)         # holds the take-over button
        self.pad.apply("EV_ABS", "ABS_X", stick_value(-a[0]))
        self.pad.apply("EV_ABS", "ABS_RY", stick_value(-a[1]))
        if self._laps >= cfg.demo_laps and not self._pressed:
            self.pad.apply("EV_KEY", "BTN_SOUTH", 1)  # "success": the demonstration is done
            self._pressed = True
        return self.pad.command()

    def reset(self) -> None:
        self.driver.reset()
        self._seen: collections.deque = collections.deque()
        self._old: collections.deque = collections.deque(maxlen=20)
        self._wobble = np.zeros(2)
        self._laps = 0
        self._pressed = False
        self._stuck = self._backing = self._backing_steer = 0.0
        self._seen_speed = float("inf")    # not judged before they have seen it move
        self.pad.events.clear()

    def help(self) -> str:
        c = self.config
        return (f"emulated car operator on the gamepad: sees the car {c.reaction_s:.2f} s late, "
                f"drives {c.demo_laps} laps at <= {c.v_straight} m/s, then presses success")

    def close(self) -> None:
        self.truth.close()


class CarOperatorPrompt:
    """The car's reset prompt answered by the emulated operator (module docstring): RETRY (another
    recovery) up to `max_retries` times within `window_s`, then CONTINUE. Counted by the
    supervisor as human prompts; `asked` counts them here too."""

    def __init__(self, max_retries: int = 2, window_s: float = 300.0):
        self.max_retries = int(max_retries)
        self.window_s = float(window_s)
        self.asked = 0
        self._recent: list[float] = []

    def ask(self, message: str) -> str:
        from robolearn.resets.prompt import CONTINUE, RETRY

        self.asked += 1
        now = time.monotonic()
        self._recent = [t for t in self._recent if now - t < self.window_s] + [now]
        answer = RETRY if len(self._recent) <= self.max_retries else CONTINUE
        if answer == CONTINUE:
            self._recent.clear()
        log.warning("[reset] %s\n[reset] emulated car operator: looked at the car; answer: %s", message, answer)
        return answer

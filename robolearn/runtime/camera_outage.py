"""What the actor does when a camera stops mid-episode: hold the robot, drop the episode, wait.

Why: a pixel policy with no image is blind. Acting on the last frame drives the robot on an
old picture, and letting the camera's error end the actor ends the whole session (`robolearn
finetune` stops on an actor's device error) for a fault that usually heals by itself (a USB
camera that re-enumerates, an IP camera's stream that hangs). `OpenCVCamera` raises
`CameraError` once its newest frame is older than its `stale_after` and reconnects on its own,
so the actor's loop (`ControlLoop(on_camera_error=...)`) hands the error here and:
- holds the robot where it is: an arm's goal becomes its measured position (one goal write),
  a car gets zero steering and throttle; nothing is commanded after that until the cameras
  are back;
- discards the episode in progress with the reason `camera_dropped` (`RecordingWrapper.
  discard_episode`): a partial episode is not written, the episodes before it are untouched;
- polls the cameras every tick (the loop stays paused); once each has given fresh frames for
  `SETTLE_S` the loop starts a new episode (reset), and the session goes on;
- gives up after `actor.camera_outage_s` of outage: `CameraError`, which ends the actor as any
  device fault does (the robot held, then made safe by `env.close()`).
Counts go into the actor summary (`episodes_discarded`, `camera_outages`) and from there into
the session report.
"""
from __future__ import annotations

import logging
import time

import numpy as np

from robolearn.errors import CameraError

log = logging.getLogger("robolearn.runtime.actor")

REASON = "camera_dropped"
#: seconds every camera must keep giving fresh frames before a new episode starts (a stream
#: that flaps on and off must not start an episode it drops again at once)
SETTLE_S = 0.5


def hold_robot(robot) -> dict:
    """Hold still where the robot is now: an arm's goal = its measured joints and gripper, a
    car's steering and throttle = 0. Returns what was commanded. A robot that cannot be held
    (bus gone, safety trip) is made safe (`safe_stop`) and the error is raised."""
    try:
        state = robot.read()
        if hasattr(state, "q"):   # an arm (ArmState)
            q = np.asarray(state.q, dtype=np.float64)
            robot.command(q, float(state.gripper))
            return {"q": [round(float(v), 5) for v in q], "gripper": round(float(state.gripper), 5)}
        robot.command(0.0, 0.0)   # a car (CarState): stop where it is
        return {"steer": 0.0, "throttle": 0.0}
    except BaseException:
        robot.safe_stop()
        raise


def _recorder(env):
    """The `RecordingWrapper` in `env`'s wrapper chain (the object with `discard_episode`), or None."""
    while env is not None:
        if hasattr(type(env), "discard_episode"):
            return env
        env = getattr(env, "env", None)
    return None


class CameraOutage:
    """The actor's state through camera outages: `dropped(exc)` from the loop, `poll()` from
    `before_tick` ("pause" while the cameras are out, None once they are back)."""

    def __init__(self, env, max_outage_s: float, clock=time.monotonic):
        self.env = env
        self.max_outage_s = float(max_outage_s)
        self.clock = clock
        self.active = False
        self.outages: list[dict] = []
        self.discarded: dict[str, int] = {}
        self._since = 0.0
        self._fresh_since: float | None = None
        self._error = ""

    @property
    def cameras(self) -> dict:
        """Every camera of the robot's backend (those the policy sees and those a reward model
        reads): the next episode needs them all."""
        return dict(self.env.unwrapped.backend.cameras)

    def dropped(self, exc: BaseException, episode_steps: int | None) -> None:
        """A camera gave no fresh frame in an episode's step (`episode_steps` done before it)
        or in a reset (None): hold the robot, discard the episode, start waiting."""
        now = self.clock()
        held = hold_robot(self.env.unwrapped.backend.robot)
        rec = _recorder(self.env)
        if rec is not None:
            rec.discard_episode(REASON)
        steps = episode_steps
        if steps is not None:
            self.discarded[REASON] = self.discarded.get(REASON, 0) + 1
        self.active, self._since = True, now
        self.outages.append({"reason": REASON, "error": str(exc)[:300], "t": now,
                             "episode_steps_discarded": steps, "held": held})
        self._fresh_since = None
        self._error = str(exc)
        what = (f"the episode in progress ({steps} steps) discarded as {REASON}" if steps is not None
                else "during a reset (no episode in progress)")
        log.warning("camera dropped (%s): robot held at its measured position, %s; waiting up to "
                    "%.0f s for the camera", exc, what, self.max_outage_s)

    def poll(self) -> str | None:
        """One tick of an outage: "pause" while any camera gives no fresh frame, None when the
        loop may start a new episode. Raises `CameraError` after `max_outage_s`."""
        if not self.active:
            return None
        now = self.clock()
        bad = []
        for name, cam in self.cameras.items():
            try:
                cam.read()
            except CameraError as exc:
                bad.append(name)
                self._error = str(exc)
        if bad:
            self._fresh_since = None
            if now - self._since > self.max_outage_s:
                raise CameraError(
                    f"camera(s) {bad} gave no fresh frame for {now - self._since:.0f} s "
                    f"(actor.camera_outage_s = {self.max_outage_s:g}); the robot was held still. "
                    f"Check the camera's cable / USB port / URL and restart the session with --resume. "
                    f"Last error: {self._error}")
            return "pause"
        if self._fresh_since is None:
            self._fresh_since = now
        if now - self._fresh_since < SETTLE_S:
            return "pause"
        last = self.outages[-1]
        last["outage_s"] = round(now - self._since, 2)
        self.active = False
        log.warning("camera back after %.1f s: a new episode starts", now - self._since)
        return None

    def summary(self) -> dict:
        """For the actor summary: discarded episodes by reason, each outage (`outage_s` absent
        while it goes on) and the seconds spent in outages."""
        return {"episodes_discarded": dict(self.discarded),
                "camera_outages": [{k: v for k, v in o.items() if k != "t"} for o in self.outages],
                "camera_outage_s": round(sum(o.get("outage_s", self.clock() - o["t"])
                                             for o in self.outages), 2)}

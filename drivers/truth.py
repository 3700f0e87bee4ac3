"""Ground truth from an emulated robot, for session reports: `info["true_success"]`.

Why: on emulated hardware the task can only judge what the hardware measures (joint
encoders through kinematics, a reward model on camera frames), and that judgement is what
a reality gap corrupts: miscalibrated joints move the measured gripper, a reward model makes
mistakes. The emulator knows the truth (its physics), served at /truth.json beside its
cameras, as a motion-capture system would in a lab. This wrapper asks it after every step
and applies the task's own success test to the *true* poses. It feeds reports and
benchmarks only: the learner and the policy never see it.
"""
from __future__ import annotations

import json
import math
import threading
import time
import urllib.request

import gymnasium as gym
import numpy as np

from robolearn.errors import ConfigError, DeviceDisconnectedError, DeviceError

#: s the truth may go unanswered before a driver reading it stops (a loaded machine answers late)
TRUTH_LOST_AFTER = 10.0


def fetch_truth(url: str, timeout: float = 1.0) -> dict:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return json.loads(r.read())
    except (OSError, ValueError) as exc:
        raise DeviceError(f"ground truth at {url} unavailable: {exc}") from None


class LiveTruth:
    """The emulator's truth polled every `period` s by a background thread, for drivers that steer
    by it (the session's reference lap, the emulated operator's eyes).

    Why not one blocking fetch per control step: on a loaded machine one answer took over the
    1 s timeout and stopped a whole session at its reference lap (docs/bench/finetune/README.md),
    and a control loop that waits on HTTP leaves the car uncommanded meanwhile. So a late
    answer is late: `pose()` is None while the newest answer is older than `stale_after` (the
    driver brakes, as on a tracker dropout) and it is counted (`stats()`); only no answer for
    `lost_after` s is an emulator gone (`DeviceDisconnectedError`)."""

    def __init__(self, url: str, period: float = 0.05, stale_after: float = 0.3,
                 lost_after: float = TRUTH_LOST_AFTER, request_timeout: float = 2.0):
        if not 0 < float(stale_after) < float(lost_after):
            raise ConfigError(f"truth stale_after={stale_after!r}, lost_after={lost_after!r}: "
                              "choose 0 < stale_after < lost_after (seconds)")
        self.url, self.period = url, float(period)
        self.stale_after, self.lost_after = float(stale_after), float(lost_after)
        self.request_timeout = float(request_timeout)
        self.answers = self.failures = self.stale_reads = 0
        self.longest_wait_s = 0.0
        self.error: str | None = None
        self._latest: tuple[float, dict] | None = None
        self._since = time.monotonic()        # no answer yet: the silence counts from here
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="truth-poll", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                truth = fetch_truth(self.url, timeout=self.request_timeout)
            except DeviceError as exc:
                with self._lock:
                    self.failures += 1
                    self.error = str(exc)
            else:
                now = time.monotonic()
                with self._lock:
                    prev = self._latest[0] if self._latest else self._since
                    self.longest_wait_s = max(self.longest_wait_s, now - prev)
                    self._latest = (now, truth)
                    self.answers += 1
            self._stop.wait(max(0.0, self.period - (time.monotonic() - t0)))

    def latest(self) -> tuple[float, dict] | None:
        """(arrival time, truth) of the newest answer if it is current, else None (late);
        raises `DeviceDisconnectedError` after `lost_after` s without any answer."""
        now = time.monotonic()
        with self._lock:
            last = self._latest[0] if self._latest else self._since
            if now - last > self.lost_after:
                raise DeviceDisconnectedError(
                    f"ground truth at {self.url} did not answer for {now - last:.1f} s (limit "
                    f"{self.lost_after:g} s; {self.error or 'no error, no answer'}): is the emulator running?")
            if self._latest is None or now - self._latest[0] > self.stale_after:
                self.stale_reads += 1
                return None
            return self._latest

    def car_pose(self) -> tuple[float, float, float] | None:
        """`car_pose` of the newest current answer, None while the truth is late."""
        got = self.latest()
        return None if got is None else car_pose(got[1])

    def stats(self) -> dict:
        with self._lock:
            return {"answers": self.answers, "failures": self.failures, "stale_reads": self.stale_reads,
                    "longest_wait_s": round(self.longest_wait_s, 3)}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.request_timeout + 0.5)


def car_pose(truth: dict) -> tuple[float, float, float]:
    """(x, y, yaw) of the emulated car's chassis origin in the track frame, from /truth.json:
    what a person watching the car sees (the emulated operator) and the reference pure pursuit
    of a session report; never a policy's or a learner's input."""
    x, y, _, w, qx, qy, qz = (float(v) for v in truth["bodies"]["chassis"][:7])
    return x, y, math.atan2(2.0 * (w * qz + qx * qy), 1.0 - 2.0 * (qy * qy + qz * qz))


def true_success(task, truth: dict) -> bool | None:
    """The arm task's success test on true poses (None where no test applies)."""
    from robolearn.sim.arm_workspace import CUBE_HALF, LIFT_HEIGHT, PUSH_RADIUS, REACH_RADIUS

    name = getattr(task, "name", None)
    if name == "reach":
        ee = np.asarray(truth["sites"]["ee"])
        return bool(np.linalg.norm(ee - task.goal) < REACH_RADIUS)
    if name == "push":
        cube = np.asarray(truth["bodies"]["cube"][:3])
        return bool(math.hypot(cube[0] - task.goal[0], cube[1] - task.goal[1]) < PUSH_RADIUS)
    if name == "lift":
        cube = np.asarray(truth["bodies"]["cube"][:3])
        return bool(cube[2] - CUBE_HALF >= LIFT_HEIGHT)
    return None


class TruthOracle(gym.Wrapper):
    """Adds `info["true_success"]` (and `info["truth_error"]` on a fetch failure, never an
    exception: a report's oracle must not stop the robot)."""

    def __init__(self, env: gym.Env, url: str):
        super().__init__(env)
        self.url = url
        self.failures = 0

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        try:
            ok = true_success(self.env.unwrapped.task, fetch_truth(self.url))
            if ok is not None:
                info["true_success"] = ok
        except DeviceError as exc:
            self.failures += 1
            info["truth_error"] = str(exc)
        return obs, reward, terminated, truncated, info

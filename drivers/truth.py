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
import urllib.request

import gymnasium as gym
import numpy as np

from robolearn.errors import DeviceError


def fetch_truth(url: str, timeout: float = 1.0) -> dict:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return json.loads(r.read())
    except (OSError, ValueError) as exc:
        raise DeviceError(f"ground truth at {url} unavailable: {exc}") from None


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

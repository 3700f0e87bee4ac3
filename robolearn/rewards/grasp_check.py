"""A physical check under a camera success classifier: a lift needs the gripper closed on something.

Why: a camera classifier can be fooled by poses that look like a lift (the open gripper held in
front of the cube, a low lift seen at an angle: docs/rewards.md). What the servos measure
cannot be fooled that way, and a real system checks it before paying a reward: the gripper
was *commanded* closed (the closed half of its range) and its *measured* angle stopped short
of closed (at least `held_margin` rad open) and short of the command (at least
`blocked_margin` rad: the fingers are pushing against something; the command-position gap is
the servo's load, which needs no load register). An open gripper, or one closed on nothing,
is no success whatever the camera says. Measured on the sim arm (range 0 closed .. 1.6 rad
open): holding the cube, commanded 0, the gripper reads 1.30-1.46 rad; closed on nothing it
reads ~0; open, 1.6.

For a lift the check also asks the arm's kinematics: the measured grasp point (forward
kinematics of the measured joints) must be at the lift height, with the held cube's centre
`GRASP_OFFSET_M` below it (measured on the sim arm's scripted lifts: 3.3-4.2 mm). The camera
classifier's false positives in the wrist sessions were cubes held low or seen at an angle
(docs/bench/finetune/): a height the joints measure cannot be faked by a view.
"""
from __future__ import annotations

import numpy as np

from robolearn.rewards.base import RewardModelError, is_missing
from robolearn.sim.arm_workspace import CUBE_HALF, LIFT_HEIGHT

GRASP_OFFSET_M = 0.0035   # grasp point above the held cube's centre (sim arm, scripted lifts)


def lifted_height(ee_z: float) -> float:
    """The held cube's lift (m above its resting height) from the measured grasp-point height."""
    return float(ee_z) - GRASP_OFFSET_M - CUBE_HALF


def gripper_holds(measured: float, commanded: float, closed: float, opened: float,
                  held_margin: float = 0.35, blocked_margin: float = 0.35) -> bool:
    """Commanded closed, yet stopped open by something between the fingers (all in rad)."""
    sign = 1.0 if opened >= closed else -1.0
    span = abs(opened - closed)
    meas = (float(measured) - closed) * sign   # 0: fully closed .. span: fully open
    cmd = (float(commanded) - closed) * sign
    if not (np.isfinite(meas) and np.isfinite(cmd)):
        return False
    return cmd <= 0.5 * span and meas >= held_margin and meas - cmd >= blocked_margin


class GripperHoldCheck:
    """RewardSource: `inner`'s success only while the gripper holds something (for a lift: at
    the lift height), else reward 0, no success; counted in `vetoes`. Reads the arm task of the
    env it is bound to."""

    def __init__(self, inner, held_margin: float = 0.35, blocked_margin: float = 0.35):
        self.inner = inner
        self.held_margin = float(held_margin)
        self.blocked_margin = float(blocked_margin)
        self.env = None
        self.vetoes = 0
        self.last_vetoed = False

    def bind(self, env) -> None:
        self.env = env
        if hasattr(self.inner, "bind"):
            self.inner.bind(env)

    def reset(self) -> None:
        self.last_vetoed = False
        self.inner.reset()

    @property
    def latencies(self):
        return getattr(self.inner, "latencies", [])

    def holds(self) -> bool:
        task = getattr(self.env, "task", None)
        spec = getattr(task, "spec", None)
        if task is None or spec is None or not hasattr(task, "measured_gripper"):
            raise RewardModelError("[reward] require_grasp reads the arm's gripper: it needs an arm env "
                                   "and where = \"env\" (the model in the control loop)")
        held = gripper_holds(task.measured_gripper, task.gripper_cmd, float(spec.gripper_closed),
                             float(spec.gripper_open), self.held_margin, self.blocked_margin)
        if held and getattr(task, "name", "") == "lift":
            return lifted_height(task.ee_pos[2]) >= LIFT_HEIGHT
        return held

    def __call__(self, obs: dict, info: dict) -> tuple[float, bool]:
        reward, success = self.inner(obs, info)
        self.last_vetoed = False
        if success and not is_missing(reward) and not self.holds():
            self.vetoes += 1
            self.last_vetoed = True
            return 0.0, False
        return reward, success

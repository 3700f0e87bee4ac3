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
(docs/bench/finetune/): a height the joints measure cannot be faked by a view. The lift must
also be measured on `LIFT_HOLD_STEPS` consecutive steps: every false positive of lift sessions
16-17 (9 of them) was a fast policy-alone lift ended on the one step where the grasp point,
rising 1.5-2 cm a step, first crossed the lift height while the true cube was still below it
(the cube lags a fast-rising hand; a real system asks for a success that lasts, too).

The fingers must also be AT REST (`GRIPPER_AT_REST`): a slow servo closing on nothing reads
"commanded closed, measured open, short of the command" for as long as it is still moving. On
the hard arm's fitted servos (launch/hard_arm_sim_params.toml) a close from fully open passes
through that band for 7 control steps (0.7 s), so a lift policy that closed in the air at the
lift height was paid whenever the classifier agreed: the 4 false positives of lift session 4
(docs/bench/finetune/README.md), at grasp heights 6.9-9.2 cm with the cube on the table.
Nor may they be at the open stop (`OPEN_STOP_MARGIN`): the step a close is commanded, a servo
that has not started yet is at rest and short of the command with nothing in the hand.
"""
from __future__ import annotations

import numpy as np

from robolearn.rewards.base import RewardModelError, is_missing
from robolearn.sim.arm_workspace import CUBE_HALF, LIFT_HEIGHT

GRASP_OFFSET_M = 0.0035   # grasp point above the held cube's centre (sim arm, scripted lifts)
#: rad per control step: a gripper moving less than this has stopped (closed on something, or
#: done); a held cube reads steady to ~0.003 rad (the hard arm's sensor noise), a closing
#: servo moves 0.2 rad per step on the hard arm, 0.5 on the nominal one
GRIPPER_AT_REST = 0.03
#: rad: a gripper within this of its open stop holds nothing. Why: on the hard arm the step a
#: close is commanded, the fingers still read open and unmoved (at rest, short of the command):
#: lift session 8's one false positive with an open hand (1.577 rad of 1.6). A held cube reads
#: 1.17-1.29 rad on the hard arm (93 true lifts, sessions 7-8), 1.30-1.46 on the sim arm.
OPEN_STOP_MARGIN = 0.1
#: control steps in a row the held cube must be measured at the lift height before a lift is paid
LIFT_HOLD_STEPS = 2


def lifted_height(ee_z: float) -> float:
    """The held cube's lift (m above its resting height) from the measured grasp-point height."""
    return float(ee_z) - GRASP_OFFSET_M - CUBE_HALF


def gripper_holds(measured: float, commanded: float, closed: float, opened: float,
                  held_margin: float = 0.35, blocked_margin: float = 0.35,
                  open_margin: float = OPEN_STOP_MARGIN) -> bool:
    """Commanded closed, yet stopped open by something between the fingers (all in rad): short
    of closed by `held_margin`, of the command by `blocked_margin`, and off the open stop by
    `open_margin` (fingers that have not left it hold nothing)."""
    sign = 1.0 if opened >= closed else -1.0
    span = abs(opened - closed)
    meas = (float(measured) - closed) * sign   # 0: fully closed .. span: fully open
    cmd = (float(commanded) - closed) * sign
    if not (np.isfinite(meas) and np.isfinite(cmd)):
        return False
    return (cmd <= 0.5 * span and meas >= held_margin and meas - cmd >= blocked_margin
            and meas <= span - open_margin)


class GripperHold:
    """Whether the gripper holds something now: `gripper_holds` on the task's measured and
    commanded gripper, with the fingers at rest (moved less than `tolerance` since the last
    reading). Call it once per control step; `reset()` per episode (False on the first step).
    The lift's grasp check and the push reward's in-hand test share it."""

    def __init__(self, held_margin: float = 0.35, blocked_margin: float = 0.35,
                 tolerance: float = GRIPPER_AT_REST):
        self.held_margin = float(held_margin)
        self.blocked_margin = float(blocked_margin)
        self.tolerance = float(tolerance)
        self.last: float | None = None

    def reset(self) -> None:
        self.last = None

    def __call__(self, task) -> bool:
        g = float(task.measured_gripper)
        prev, self.last = self.last, g
        at_rest = prev is not None and abs(g - prev) < self.tolerance
        spec = task.spec
        return at_rest and gripper_holds(g, task.gripper_cmd, float(spec.gripper_closed),
                                         float(spec.gripper_open), self.held_margin, self.blocked_margin)


class GripperHoldCheck:
    """RewardSource: `inner`'s success only while the gripper holds something (closed on it, at
    rest; for a lift: at the lift height on `lift_steps` steps in a row), else reward 0, no
    success; counted in `vetoes`. Reads the arm task of the env it is bound to, every step (the
    at-rest and in-a-row tests need each reading)."""

    def __init__(self, inner, held_margin: float = 0.35, blocked_margin: float = 0.35,
                 lift_steps: int = LIFT_HOLD_STEPS):
        self.inner = inner
        self.hold = GripperHold(held_margin, blocked_margin)
        self.lift_steps = max(1, int(lift_steps))
        self.lifted_steps = 0
        self.env = None
        self.vetoes = 0
        self.last_vetoed = False

    def bind(self, env) -> None:
        self.env = env
        if hasattr(self.inner, "bind"):
            self.inner.bind(env)

    def reset(self) -> None:
        self.last_vetoed = False
        self.lifted_steps = 0
        self.hold.reset()
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
        held = self.hold(task)
        if getattr(task, "name", "") == "lift":
            up = held and lifted_height(task.ee_pos[2]) >= LIFT_HEIGHT
            self.lifted_steps = self.lifted_steps + 1 if up else 0
            return self.lifted_steps >= self.lift_steps
        return held

    def __call__(self, obs: dict, info: dict) -> tuple[float, bool]:
        reward, success = self.inner(obs, info)
        self.last_vetoed = False
        holds = self.holds()          # every step: the at-rest test compares successive readings
        if success and not is_missing(reward) and not holds:
            self.vetoes += 1
            self.last_vetoed = True
            return 0.0, False
        return reward, success

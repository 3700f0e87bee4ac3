"""Scripted reset controllers: bring a robot back to a start pose through its protocol only.

Why through the protocol: the same reset must run on the simulator and on hardware, where the
only way to move is `command` + `advance`. `MoveToJoints` ramps the joint targets toward a pose
at a fraction of the servos' speed (gentle on a real arm) and fails loudly if the arm does not
get there (blocked, unpowered, miscalibrated) instead of letting an episode start anywhere.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from robolearn.errors import ConfigError, ResetError, SafetyError
from robolearn.robot import Arm


@dataclass
class MoveToJoints:
    """Move an `Arm` to joint angles `q` (rad) and gripper angle `gripper` (rad).

    speed_fraction: fraction of `spec.max_velocity` the targets ramp at.
    tolerance: max |q - target| (rad) accepted as arrived.
    timeout: seconds of (robot) time before giving up with `SafetyError`.
    settle: after arriving, hold the pose until every joint moves slower than this (rad/s), for
        at most `settle_timeout` s (then go on: a servo that never reads still is no failure).
        Resets pass it so that an episode starts with the arm at rest, as a teleport start does
        (measured: without it an arm reset ended with joints still swinging at ~1 rad/s, and a
        reset-free policy scored 0.0 from such starts, 0.20 once the arm was left still).
        None: return as soon as the pose is reached.
    """

    q: np.ndarray
    gripper: float
    speed_fraction: float = 0.3
    tolerance: float = 0.03
    timeout: float = 10.0
    dt: float = 0.05
    settle: float | None = None
    settle_timeout: float = 2.0

    def __post_init__(self):
        self.q = np.asarray(self.q, dtype=np.float64)
        if not 0 < self.speed_fraction <= 1:
            raise ConfigError(f"speed_fraction={self.speed_fraction}: must be in (0, 1]")
        if self.dt <= 0 or self.timeout <= 0:
            raise ConfigError("MoveToJoints needs dt > 0 and timeout > 0")

    def run(self, arm: Arm) -> float:
        """Drive `arm` to the pose; returns the time taken (s). Raises SafetyError on timeout."""
        return float(sum(self.motion(arm)))

    def motion(self, arm: Arm):
        """The same move as a generator yielding each period's robot seconds, so a
        `ResetSupervisor` can interleave its own time limits (see robolearn.resets.supervisor)."""
        spec = arm.spec
        if self.q.shape != (spec.n_joints,):
            raise ConfigError(f"reset pose has {self.q.shape} joints, the arm has {spec.n_joints}")
        goal = np.clip(self.q, spec.lower, spec.upper)
        g_goal = float(np.clip(self.gripper, min(spec.gripper_closed, spec.gripper_open),
                               max(spec.gripper_closed, spec.gripper_open)))
        step = np.asarray(spec.max_velocity) * self.speed_fraction * self.dt
        g_rate = float(np.max(spec.max_velocity)) * self.speed_fraction * self.dt
        state = arm.read()
        cmd = np.clip(state.q, spec.lower, spec.upper)
        g_cmd = float(np.clip(state.gripper, min(spec.gripper_closed, spec.gripper_open),
                              max(spec.gripper_closed, spec.gripper_open)))  # a wedged object may push it past
        elapsed = 0.0
        while True:
            cmd = cmd + np.clip(goal - cmd, -step, step)
            g_cmd = g_cmd + float(np.clip(g_goal - g_cmd, -g_rate, g_rate))
            arm.command(cmd, g_cmd)
            arm.advance(self.dt)
            elapsed += self.dt
            yield self.dt
            state = arm.read()
            if np.max(np.abs(state.q - goal)) <= self.tolerance and np.allclose(cmd, goal):
                yield from self._settle(arm, cmd, g_cmd)
                return
            if elapsed >= self.timeout:
                worst = int(np.argmax(np.abs(state.q - goal)))
                name = spec.joint_names[worst]
                raise SafetyError(
                    f"reset did not reach the home pose within {self.timeout:.1f} s: joint {name!r} "
                    f"is at {state.q[worst]:.3f} rad, target {goal[worst]:.3f} rad (is the arm "
                    "blocked, unpowered or miscalibrated? clear it and reset again)")

    def _settle(self, arm: Arm, cmd: np.ndarray, g_cmd: float):
        if self.settle is None:
            return
        waited = 0.0
        while waited < self.settle_timeout and np.max(np.abs(arm.read().dq)) > self.settle:
            arm.command(cmd, g_cmd)
            arm.advance(self.dt)
            waited += self.dt
            yield self.dt


#: how still (rad/s) a reset leaves the arm before an episode starts (see `MoveToJoints.settle`)
RESET_SETTLE = 0.05


def move_home(task):
    """The task's home pose, gripper open, ending at rest: the last move of every arm reset."""
    return MoveToJoints(task.home_q, task.home_gripper, dt=1.0 / task.control_hz,
                        settle=RESET_SETTLE).motion(task.arm)


@dataclass
class ArmHome:
    """Reset controller (`ResetSupervisor` protocol): the arm task's home pose, gripper open.

    lift: first raise the grasp point straight up to this height (m above the table, gripper
    open) when it is lower, so the joint-space move home does not sweep an object that lies
    next to the fingers (0: straight home, as ArmReach needs)."""

    lift: float = 0.0

    kind = "scripted"

    def run(self, task, rng):
        if self.lift > 0 and hasattr(task, "kin"):
            mover = EeMover(task, step=0.02)
            if mover.ee[2] < self.lift:
                yield from mover.to((mover.ee[0], mover.ee[1], self.lift), open_=True, max_periods=20, soft=True)
        yield from move_home(task)


class EeMover:
    """Straight-line grasp-point moves through the task's IK, one control period per yield."""

    def __init__(self, task, step: float):
        self.task = task
        self.step = float(step)
        self.dt = 1.0 / task.control_hz
        st = task.arm.read()
        self.q = np.clip(np.array(st.q, dtype=np.float64), task.kin.lower, task.kin.upper)
        self.roll0 = float(task.home_q[4])
        self.roll = float(self.q[4])
        self.ee = task.kin.fk(self.q)
        self.gripper = float(st.gripper)

    def _send(self, open_: bool):
        t = self.task
        g = t.spec.gripper_open if open_ else t.spec.gripper_closed
        self.gripper = float(g)
        t.arm.command(self.q, self.gripper)
        t.arm.advance(self.dt)
        return self.dt

    def to(self, target, open_: bool, roll: float | None = None, speed: float = 1.0, tol: float = 0.006,
           max_periods: int = 150, soft: bool = False):
        """Move; returns True on arrival. Not arrived in `max_periods`: False if `soft`, else raise."""
        t = self.task
        target = np.asarray(target, dtype=np.float64)
        want_roll = self.roll if roll is None else self.roll0 + roll
        for _ in range(max_periods):
            d = target - self.ee
            n = float(np.linalg.norm(d))
            lim = self.step * speed
            self.ee = target.copy() if n <= lim else self.ee + d * (lim / n)
            q, _ = t.kin.ik(self.ee, self.q)
            self.roll += float(np.clip(want_roll - self.roll, -0.3, 0.3))
            q[4] = min(max(self.roll, t.kin.lower[4]), t.kin.upper[4])
            self.q = q
            yield self._send(open_)
            if n <= lim and float(np.linalg.norm(t.kin.fk(t.arm.read().q) - target)) < tol \
                    and abs(want_roll - self.roll) < 1e-9:
                return True
        if soft:
            return False
        raise ResetError(f"the arm did not reach {np.round(target, 3).tolist()} m while resetting the cube "
                         "(blocked?)")

    def hold(self, periods: int, open_: bool):
        for _ in range(periods):
            yield self._send(open_)

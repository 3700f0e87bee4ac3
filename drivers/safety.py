"""Safety supervisor shared by the real backends: limits, watchdog, latched e-stop.

Why a separate object: the checks must be the same whichever policy, teleop device or
script drives the robot, and the e-stop must reach the hardware even when the caller is in
trouble. Every refusal raises `SafetyError` saying what was violated (which joint, which
limit, by how much); nothing is silently clamped. Once tripped, the e-stop latches: stop
callbacks (torque off / neutral throttle) run once, and every further command is refused
until `reset()` is called by a human who has looked at the robot.
"""
from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np

from robolearn.errors import SafetyError


class Supervisor:
    """The e-stop latch and the stale-observation watchdog (common to arm and car)."""

    def __init__(self, stale_after: float = 0.25, on_estop: Sequence[Callable[[], None]] = ()):
        self.stale_after = float(stale_after)
        self._callbacks = list(on_estop)
        self.tripped: str | None = None

    def add_stop(self, fn: Callable[[], None]) -> None:
        self._callbacks.append(fn)

    def estop(self, reason: str) -> None:
        """Cut power to the actuators now. Never raises (a failing callback is skipped)."""
        first = self.tripped is None
        if first:
            self.tripped = reason
        for fn in self._callbacks:
            try:
                fn()
            except Exception:  # noqa: BLE001 - the e-stop path must run every callback
                pass

    def reset(self) -> None:
        self.tripped = None

    def trip(self, reason: str) -> SafetyError:
        """E-stop and return the error to raise."""
        self.estop(reason)
        return SafetyError(f"{reason}; e-stop engaged (torque off / throttle neutral). "
                           "Check the robot, then call reset() on its safety supervisor.")

    def check_enabled(self) -> None:
        if self.tripped is not None:
            raise SafetyError(f"e-stop is latched ({self.tripped}); command refused. "
                              "Check the robot, then call reset() on its safety supervisor.")

    def check_fresh(self, stamp: float, now: float | None = None, what: str = "observation") -> None:
        age = (time.monotonic() if now is None else now) - stamp
        if age > self.stale_after:
            raise self.trip(f"{what} is {age * 1e3:.0f} ms old (watchdog limit "
                            f"{self.stale_after * 1e3:.0f} ms): sensor or link stalled")


class ArmSafety(Supervisor):
    """Joint limits and workspace box on commands; velocity limits on measurements.

    lower/upper: joint limits (rad); tolerance: how far outside a command may be (rad);
    max_velocity: rad/s per joint, tripped at `velocity_margin` times it;
    workspace: optional ((lo_xyz), (hi_xyz)) box for `fk(q) -> xyz` (end effector, m).
    """

    def __init__(self, names, lower, upper, max_velocity, gripper_range=(-np.inf, np.inf),
                 tolerance: float = 1e-3, velocity_margin: float = 1.5, workspace=None,
                 fk: Callable[[np.ndarray], np.ndarray] | None = None, **kw):
        super().__init__(**kw)
        self.names = list(names)
        self.lower, self.upper = np.asarray(lower, float), np.asarray(upper, float)
        self.max_velocity = np.asarray(max_velocity, float)
        self.gripper_range = tuple(sorted(map(float, gripper_range)))
        self.tolerance = float(tolerance)
        self.velocity_margin = float(velocity_margin)
        self.workspace = None if workspace is None else (np.asarray(workspace[0], float),
                                                         np.asarray(workspace[1], float))
        self.fk = fk

    def check_command(self, q: np.ndarray, gripper: float) -> None:
        self.check_enabled()
        q = np.asarray(q, dtype=float)
        if q.shape != self.lower.shape:
            raise SafetyError(f"joint command has shape {q.shape}, expected {self.lower.shape}")
        if not np.all(np.isfinite(q)) or not np.isfinite(gripper):
            raise SafetyError(f"non-finite joint command q={q.tolist()}, gripper={gripper}")
        for i, name in enumerate(self.names):
            lo, hi = self.lower[i] - self.tolerance, self.upper[i] + self.tolerance
            if not lo <= q[i] <= hi:
                raise SafetyError(
                    f"joint {name!r} command {q[i]:.4f} rad outside its limits "
                    f"[{self.lower[i]:.4f}, {self.upper[i]:.4f}]: clip targets in the task or "
                    "policy, or fix the calibration range")
        g_lo, g_hi = self.gripper_range
        if not g_lo - self.tolerance <= gripper <= g_hi + self.tolerance:
            raise SafetyError(f"gripper command {gripper:.4f} rad outside [{g_lo:.4f}, {g_hi:.4f}]")
        if self.workspace is not None and self.fk is not None:
            p = np.asarray(self.fk(q), float)
            lo, hi = self.workspace
            if np.any(p < lo) or np.any(p > hi):
                raise SafetyError(f"end effector target {np.round(p, 3).tolist()} m outside the "
                                  f"workspace box {lo.tolist()}..{hi.tolist()}")

    def check_state(self, q: np.ndarray, dq: np.ndarray, stamp: float, now: float | None = None) -> None:
        self.check_fresh(stamp, now, "arm state")
        fast = np.abs(np.asarray(dq, float)) > self.velocity_margin * self.max_velocity
        if np.any(fast):
            i = int(np.flatnonzero(fast)[0])
            raise self.trip(f"joint {self.names[i]!r} moving at {dq[i]:.2f} rad/s, over "
                            f"{self.velocity_margin:g} x its {self.max_velocity[i]:.2f} rad/s limit")
        q = np.asarray(q, float)
        margin = 0.05
        out = (q < self.lower - margin) | (q > self.upper + margin)
        if np.any(out):
            i = int(np.flatnonzero(out)[0])
            raise self.trip(f"joint {self.names[i]!r} measured at {q[i]:.3f} rad, beyond its "
                            f"limits [{self.lower[i]:.3f}, {self.upper[i]:.3f}] (+{margin} rad)")


class CarSafety(Supervisor):
    """Steering and throttle limits on commands; stale telemetry trips the e-stop."""

    def __init__(self, max_steer: float, max_throttle: float = 1.0, **kw):
        super().__init__(**kw)
        self.max_steer = float(max_steer)
        self.max_throttle = float(max_throttle)

    def check_command(self, steer: float, throttle: float) -> None:
        self.check_enabled()
        if not (np.isfinite(steer) and np.isfinite(throttle)):
            raise SafetyError(f"non-finite car command steer={steer}, throttle={throttle}")
        if abs(steer) > self.max_steer + 1e-6:
            raise SafetyError(f"steer {steer:.3f} rad beyond +-{self.max_steer:.3f} rad")
        if abs(throttle) > self.max_throttle + 1e-6:
            raise SafetyError(f"throttle {throttle:.3f} beyond +-{self.max_throttle:.3f} "
                              "(the configured throttle cap)")

    def check_state(self, stamp: float, now: float | None = None) -> None:
        self.check_fresh(stamp, now, "car telemetry")

"""Absolute-deadline pacing: tick k is due at t0 + k * period on the monotonic clock.

Why a module of its own at the bottom: the control loop (runtime), the teleop session and the
benchmarks pace themselves the same way, and a teleop session must not import the runtime.
Sleeping is hybrid: `time.sleep` until ~1 ms before the deadline, then a short busy-wait.
"""
from __future__ import annotations

import math
import time

from robolearn.errors import ConfigError

SPIN_S = 0.001  # busy-wait this long before a deadline instead of trusting sleep()


class Clock:
    """The monotonic clock and a sleep; tests inject a simulated one."""

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, dt: float) -> None:
        time.sleep(dt)


class Rate:
    """Deadline scheduler: `wait()` returns when the next tick on the grid t0 + k*period is due."""

    def __init__(self, hz: float, clock: Clock | None = None, spin_s: float = SPIN_S):
        if not (isinstance(hz, (int, float)) and math.isfinite(hz) and hz > 0):
            raise ConfigError(f"loop rate hz={hz!r}: must be a positive number")
        self.period = 1.0 / float(hz)
        self.clock = clock or Clock()
        self.spin_s = spin_s
        self.t0: float | None = None
        self.k = 0
        self.skipped = 0

    def restart(self) -> float:
        """Anchor the grid at now (after a reset or a pause, which are not real-time)."""
        self.t0 = self.clock.now()
        self.k = 0
        return self.t0

    def deadline(self, k: int | None = None) -> float:
        return self.t0 + (self.k if k is None else k) * self.period

    def wait(self) -> float:
        """Advance to the next grid point and wait for it; return the scheduled time."""
        if self.t0 is None:
            return self.restart()
        self.k += 1
        now = self.clock.now()
        due = self.deadline()
        if now > due + self.period:  # missed whole periods: skip them, keep the grid
            late_k = int((now - self.t0) / self.period)
            self.skipped += late_k - self.k + 1
            self.k = late_k + 1
            due = self.deadline()
        remaining = due - now
        if remaining > self.spin_s:
            self.clock.sleep(remaining - self.spin_s)
        while self.clock.now() < due:
            pass
        return due

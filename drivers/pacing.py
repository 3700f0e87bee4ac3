"""Fixed-period pacing for real backends: `advance(dt)` waits to the period deadline.

Why: the `Arm`/`Car` protocols say `advance(dt)` is where time passes; on hardware that means
sleeping until `dt` after the previous period started, and reporting how late we were when
the caller (policy, learner, GC) took longer than the period. A late period restarts the
schedule from now instead of bursting to catch up, which would send commands back to back.
"""
from __future__ import annotations

import time


class Pacer:
    """`advance(dt)`: return `dt` after the previous advance returned (its scheduled time)."""

    def __init__(self):
        self._t_prev: float | None = None      # scheduled end of the previous period
        self.overruns = 0

    def reset(self) -> None:
        self._t_prev = None

    def advance(self, dt: float) -> float:
        dt = max(float(dt), 0.0)
        now = time.monotonic()
        if self._t_prev is None or dt == 0.0:  # first call, or the caller paces (advance(0))
            self._t_prev = now
            if dt == 0.0:
                return 0.0
        target = self._t_prev + dt
        overrun = now - target
        if overrun > 0:
            self.overruns += 1
            self._t_prev = now
            return overrun
        time.sleep(-overrun)
        self._t_prev = target
        return 0.0

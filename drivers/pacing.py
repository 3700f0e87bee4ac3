"""Fixed-period pacing for real backends: `advance(dt)` waits to the period deadline.

Why: the `Arm`/`Car` protocols say `advance(dt)` is where time passes; on hardware that means
sleeping until `dt` after the previous period started, and reporting how late we were when
the caller (policy, learner, GC) took longer than the period. A late period restarts the
schedule from now instead of bursting to catch up, which would send commands back to back.
"""
from __future__ import annotations

import time


class Pacer:
    def __init__(self):
        self._deadline: float | None = None
        self.overruns = 0

    def reset(self) -> None:
        self._deadline = None

    def advance(self, dt: float) -> float:
        dt = max(float(dt), 0.0)
        now = time.monotonic()
        if self._deadline is None or dt == 0.0:
            self._deadline = now + dt
        overrun = now - self._deadline
        if overrun > 0:
            self.overruns += 1
            self._deadline = now
        elif overrun < 0:
            time.sleep(-overrun)
        self._deadline += dt
        return max(overrun, 0.0)

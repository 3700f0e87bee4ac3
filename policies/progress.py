"""Time left in a training run, for its progress bar."""
from __future__ import annotations

import time


class Eta:
    """Time left, from what the steps still to come will cost: random-action steps (before
    `learning_starts`) are far cheaper than learning steps (act + `utd` updates + periodic
    evaluations), so one average rate (tqdm's own estimate) is wrong by up to the UTD factor.
    Each phase's cost per step is measured as wall time per step in that phase."""

    MIN_LEARNING_STEPS = 10  # measured learning steps before a learning-phase ETA is given
    REFRESH_S = 1.0          # the bar's eta is recomputed at most this often

    def __init__(self, total: int, learning_starts: int, start: int = 0, clock=time.perf_counter):
        self.total, self.learning_starts = int(total), int(learning_starts)
        self.clock = clock
        self.step, self._t = int(start), clock()
        self.n = [0, 0]      # steps measured: random phase, learning phase
        self.t = [0.0, 0.0]  # seconds in each phase

    def update(self, step: int) -> None:
        """Called after env step `step` (all updates / evaluations of that step done)."""
        now = self.clock()
        phase = 1 if step > self.learning_starts else 0
        self.n[phase] += step - self.step
        self.t[phase] += now - self._t
        self.step, self._t = step, now

    def remaining_s(self) -> float | None:
        """Seconds left, or None while the learning phase's cost is still unknown."""
        left_random = max(0, min(self.total, self.learning_starts) - self.step)
        left_learn = self.total - self.step - left_random
        secs = left_random * (self.t[0] / self.n[0]) if left_random and self.n[0] else 0.0
        if left_learn:
            if self.n[1] < self.MIN_LEARNING_STEPS:
                return None
            secs += left_learn * self.t[1] / self.n[1]
        return secs

    def text(self) -> str:
        s = self.remaining_s()
        if s is None:
            return "?"
        s = int(round(s))
        return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"

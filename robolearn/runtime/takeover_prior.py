"""Which operator takeovers join the prior (RLPD) buffer: all of them, or only those that succeeded.

Why: HIL-SERL puts every step a person drives into the prior ("demo") buffer. In a
fine-tuning session whose actor is anchored on the prior rows (`bc_weight`), that buffer is
also what the actor clones, and a takeover that fails teaches the failure: in lift sessions
27-31 every failed takeover but 3 of 58 ended with the hand pressing on the cube's top for its
last 2 s, and those takeovers held 45-58 % of the rows the operator drove
(docs/bench/finetune/README.md). With `successful`, a takeover's rows wait here until it ends
(the operator hands back, or the episode ends) and join the prior only if the session's reward
called one of its steps a success; the critic's replay keeps every row either way. The
judgement is the reward model's, never the simulator's truth, so a physical session filters
the same way.
"""
from __future__ import annotations

from dataclasses import dataclass, field

MODES = ("all", "successful")


@dataclass
class _Takeover:
    rows: list = field(default_factory=list)
    succeeded: bool = False


class TakeoverPrior:
    """Per actor, the rows of the takeover under way; `offer` returns the rows that join the prior now."""

    def __init__(self, mode: str = "all"):
        if mode not in MODES:
            raise ValueError(f"prior_takeovers must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self._open: dict[str, _Takeover] = {}
        self.kept = self.dropped = 0            # takeovers
        self.rows_kept = self.rows_dropped = 0  # their rows

    def offer(self, actor: str, row, intervention: bool, success: bool, episode_end: bool) -> list:
        """One step of `actor`: `row` (None when it is not stored, e.g. no reward) and whether the
        operator drove it, the reward called it a success, and it ended the episode."""
        if self.mode == "all":
            if intervention and row is not None:
                self.rows_kept += 1
                return [row]
            return []
        out = []
        take = self._open.get(actor)
        if take is not None and not intervention:   # handed back: the takeover is over
            out += self._close(actor)
            take = None
        if intervention:
            take = take if take is not None else self._open.setdefault(actor, _Takeover())
            if row is not None:
                take.rows.append(row)
            take.succeeded = take.succeeded or bool(success)
        if episode_end and actor in self._open:
            out += self._close(actor)
        return out

    def _close(self, actor: str) -> list:
        take = self._open.pop(actor)
        if take.succeeded:
            self.kept += 1
            self.rows_kept += len(take.rows)
            return take.rows
        self.dropped += 1
        self.rows_dropped += len(take.rows)
        return []

    def report(self) -> dict:
        return {"mode": self.mode, "kept": self.kept, "dropped": self.dropped,
                "rows_kept": self.rows_kept, "rows_dropped": self.rows_dropped,
                "open": sum(len(t.rows) for t in self._open.values())}


def successful_takeover_mask(intervention, terminated, truncated) -> "np.ndarray":
    """The rows of a replay (one actor's steps in order) that belong to takeovers ending in a
    success. The replay keeps no success flag; in the arm tasks a success ends the episode
    (`success_terminates`), so a takeover succeeded when its episode terminated (not truncated)
    during it. Used when a resumed session refills the prior from the replay."""
    import numpy as np

    interv = np.asarray(intervention, bool)
    term, trunc = np.asarray(terminated, bool), np.asarray(truncated, bool)
    keep = np.zeros(len(interv), bool)
    start = None
    for i in range(len(interv) + 1):
        inside = i < len(interv) and interv[i]
        if inside and start is None:
            start = i
        if start is not None and (not inside or term[i] or trunc[i]):
            end = i + 1 if inside else i          # the episode's last row belongs to the takeover
            if inside and term[i] and not trunc[i]:
                keep[start:end] = True
            start = None
    return keep

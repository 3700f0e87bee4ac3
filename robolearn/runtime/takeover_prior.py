"""Which operator takeovers join the prior (RLPD) buffer: all of them, or only those that succeeded.

Why: HIL-SERL puts every step a person drives into the prior ("demo") buffer. In a
fine-tuning session whose actor is anchored on the prior rows (`bc_weight`), that buffer is
also what the actor clones, and a takeover that fails teaches the failure: in lift sessions
27-31 every failed takeover but 3 of 58 ended with the hand pressing on the cube's top for its
last 2 s, and those takeovers held 45-58 % of the rows the operator drove
(docs/bench/finetune/README.md). With `successful`, a takeover's rows wait here until it ends
and join the prior only if the session's reward called a success on one of its steps or within
`GRACE_S` after the hand-back; the critic's replay keeps every row either way. The grace is
there because a person lets go as soon as the cube is up and the reward confirms the lift a
moment later: in lift session 32, run without it, 6 of the 12 takeovers it dropped had lifted
the cube, the reward's success coming 1-16 control steps after the hand-back (its lift must hold
on two steps in a row, and the gripper must be measured closed at the lift height). The
judgement is the reward model's, never the simulator's truth, so a physical session filters
the same way.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

MODES = ("all", "successful")
GRACE_S = 2.0   # after the hand-back, a success still counts for the takeover (see above)


@dataclass
class _Takeover:
    rows: list = field(default_factory=list)
    succeeded: bool = False
    grace_left: int | None = None     # None while the operator drives; then steps left to confirm


class TakeoverPrior:
    """Per actor, the rows of the takeover under way; `offer` returns the rows that join the prior now."""

    def __init__(self, mode: str = "all", grace_steps: int = 20):
        if mode not in MODES:
            raise ValueError(f"prior_takeovers must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.grace_steps = int(grace_steps)
        self._open: dict[str, _Takeover] = {}
        self.kept = self.dropped = 0            # takeovers
        self.rows_kept = self.rows_dropped = 0  # their rows

    @classmethod
    def at_rate(cls, mode: str, control_hz: float) -> "TakeoverPrior":
        return cls(mode, math.ceil(GRACE_S * control_hz))

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
        if take is not None and take.grace_left is not None and intervention:   # a new takeover
            out += self._close(actor)
            take = None
        if intervention:
            take = take if take is not None else self._open.setdefault(actor, _Takeover())
            if row is not None:
                take.rows.append(row)
        elif take is not None:
            if take.grace_left is None:         # handed back: the reward may still confirm the lift
                take.grace_left = self.grace_steps
            take.grace_left -= 1
        if take is not None:
            take.succeeded = take.succeeded or bool(success)
            if episode_end or take.succeeded and take.grace_left is not None or (
                    take.grace_left is not None and take.grace_left <= 0):
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
        return {"mode": self.mode, "grace_steps": self.grace_steps, "kept": self.kept, "dropped": self.dropped,
                "rows_kept": self.rows_kept, "rows_dropped": self.rows_dropped,
                "open": sum(len(t.rows) for t in self._open.values())}


def successful_takeover_mask(intervention, terminated, truncated, grace_steps: int = 20) -> np.ndarray:
    """The rows of a replay (one actor's steps in order) that belong to takeovers ending in a
    success, by the same rule as `TakeoverPrior`. The replay keeps no success flag; in the arm
    tasks a success ends the episode (`success_terminates`), so a terminated (not truncated) step
    is the success, except a policy step the operator's takeover follows: `takeover_penalty`
    ended it (runtime/takeover_penalty.py). Used when a resumed session refills the prior from
    the replay."""
    interv = np.asarray(intervention, bool)
    term, trunc = np.asarray(terminated, bool), np.asarray(truncated, bool)
    into_takeover = term & ~interv & np.append(interv[1:], False)
    term = term & ~into_takeover
    rule = TakeoverPrior("successful", grace_steps)
    keep = np.zeros(len(interv), bool)
    for i in range(len(interv)):
        keep[rule.offer("replay", i, bool(interv[i]), bool(term[i] and not trunc[i]),
                        bool(term[i] or trunc[i]))] = True
    return keep

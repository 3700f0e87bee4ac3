"""A takeover ends the policy's attempt as a failure (RLIF: the intervention is the reward).

Why: HIL-SERL's replay keeps the policy's step into a takeover as an ordinary step, so the critic
bootstraps it from the state the operator then lifts from: being stuck until a person helps looks
as good as lifting. In lift sessions 33-38 the policy took 2 s of no progress 41-52 % of its
training episodes, hovering 3-4 cm over the cube with the fingers open and a weak, dithering
descent (the episodes it lifted alone came down 2-3x faster), and the share the operator drove
never fell in most sessions (docs/bench/finetune/README.md). RLIF (Luo et al. 2023) learns from
the intervention signal itself: the person taking over says the policy's last actions were bad.
With `[finetune] takeover_penalty = P`, the last policy step before each takeover is stored
terminal with `P` taken off its reward: the critic then values the road into a takeover at -P,
not at what the operator went on to do, and the actor's Q term pushes away from it. The
operator's own steps are stored as before (their episode goes on from that state). Measured in
one lift session (39), before the anchor fix: the rate flat, the hover unchanged (docs/finetune.md).
"""
from __future__ import annotations

import math


class TakeoverPenalty:
    """Per actor, the replay slot of its last policy step; `offer` returns the slot to end, if any."""

    def __init__(self, penalty: float | None = None):
        if penalty is not None and not (math.isfinite(penalty) and penalty >= 0):
            raise ValueError(f"takeover_penalty={penalty!r} must be a finite number >= 0 (or unset: off)")
        self.penalty = penalty
        self._last: dict[str, int | None] = {}
        self.ended = 0   # policy steps ended by a takeover

    @property
    def on(self) -> bool:
        return self.penalty is not None

    def offer(self, actor: str, slot: int | None, intervention: bool, episode_end: bool) -> int | None:
        """One stored step of `actor` (`slot` None when it was not stored): the slot of the policy
        step just before it when this step is the first the operator drives, else None."""
        if not self.on:
            return None
        before = self._last.get(actor)
        self._last[actor] = None if (intervention or episode_end or slot is None) else slot
        if intervention and before is not None:
            self.ended += 1
            return before
        return None

    def report(self) -> dict:
        return {"penalty": self.penalty, "policy_steps_ended": self.ended}

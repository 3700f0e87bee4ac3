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

With `climb` set (a lift session's `[finetune] prior_takeover_climbs = false`) the rows in
which the operator raises an open hand stay out of the prior too (the replay keeps them): the
hands climb to their 7 cm hover before coming down on the cube, and re-aim by going back up, from
wherever the policy stalled over the cube, so the anchor cloned "go up" in the states where the
policy should come down; the robot policy's descent over the cube weakened as a session went on
(docs/bench/finetune/README.md, "Lift: the estimate's jitter over the cube" and stop 63).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

MODES = ("all", "successful")
GRACE_S = 2.0   # after the hand-back, a success still counts for the takeover (see above)
CLIMB_CMD = 0.1  # a height command above this (0.1 = 2.5 mm a step) with the gripper open: a climb


def climb_dims(env_id: str, action_dim: int) -> tuple[int, int] | None:
    """(height, gripper) indices of the action where the task has both (the arm's end-effector
    actions), else None: only there is "raising an open hand" defined."""
    from robolearn.data.feature_names import action_names

    names = action_names(env_id, action_dim)
    if "ee.dz" in names and "gripper.cmd" in names:
        return names.index("ee.dz"), names.index("gripper.cmd")
    return None


def takeover_climb_dims(cfg, env) -> tuple[int, int] | None:
    """The climb dims a session's `[finetune] prior_takeover_climbs = false` asks for (None when
    it is true or there is no [finetune]); a clear error where the actions have no height and gripper."""
    ft = getattr(cfg, "finetune", None)
    if ft is None or ft.prior_takeover_climbs:
        return None
    dims = climb_dims(cfg.env, int(np.prod(env.action_space.shape)))
    if dims is None:
        from robolearn.errors import ConfigError

        raise ConfigError(f"finetune.prior_takeover_climbs = false needs end-effector actions with a height "
                          f"and a gripper (ee.dz, gripper.cmd); {cfg.env}'s have neither: leave it true")
    return dims


def climb_mask(actions, dims: tuple[int, int]) -> np.ndarray:
    """Rows whose action raises the hand with the gripper open (+1 open, -1 closed)."""
    a = np.asarray(actions, np.float64).reshape(len(actions), -1)
    return (a[:, dims[0]] > CLIMB_CMD) & (a[:, dims[1]] > 0.0)


@dataclass
class _Takeover:
    rows: list = field(default_factory=list)
    succeeded: bool = False
    grace_left: int | None = None     # None while the operator drives; then steps left to confirm


class TakeoverPrior:
    """Per actor, the rows of the takeover under way; `offer` returns the rows that join the prior now."""

    def __init__(self, mode: str = "all", grace_steps: int = 20, climb: tuple[int, int] | None = None):
        """`climb`: the (height, gripper) action indices whose climbs stay out (None: every row joins)."""
        if mode not in MODES:
            raise ValueError(f"prior_takeovers must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.grace_steps = int(grace_steps)
        self.climb = climb
        self._open: dict[str, _Takeover] = {}
        self.kept = self.dropped = 0            # takeovers
        self.rows_kept = self.rows_dropped = 0  # their rows
        self.climbs_left_out = 0                # rows of kept takeovers left out as climbs

    @classmethod
    def at_rate(cls, mode: str, control_hz: float, climb: tuple[int, int] | None = None) -> "TakeoverPrior":
        return cls(mode, math.ceil(GRACE_S * control_hz), climb)

    def _climbs(self, row) -> bool:
        return self.climb is not None and bool(climb_mask([row[1]], self.climb)[0])

    def offer(self, actor: str, row, intervention: bool, success: bool, episode_end: bool) -> list:
        """One step of `actor`: `row` (None when it is not stored, e.g. no reward) and whether the
        operator drove it, the reward called it a success, and it ended the episode."""
        if self.mode == "all":
            if intervention and row is not None:
                if self._climbs(row):
                    self.climbs_left_out += 1
                    return []
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
            rows = [r for r in take.rows if not self._climbs(r)]
            self.climbs_left_out += len(take.rows) - len(rows)
            self.rows_kept += len(rows)
            return rows
        self.dropped += 1
        self.rows_dropped += len(take.rows)
        return []

    def report(self) -> dict:
        return {"mode": self.mode, "grace_steps": self.grace_steps, "kept": self.kept, "dropped": self.dropped,
                "rows_kept": self.rows_kept, "rows_dropped": self.rows_dropped,
                "climbs_left_out": self.climbs_left_out if self.climb is not None else None,
                "open": sum(len(t.rows) for t in self._open.values())}


def successful_takeover_mask(intervention, terminated, truncated, grace_steps: int = 20,
                             actions=None, climb: tuple[int, int] | None = None) -> np.ndarray:
    """The rows of a replay (one actor's steps in order) that belong to takeovers ending in a
    success, by the same rule as `TakeoverPrior`. The replay keeps no success flag; in the arm
    tasks a success ends the episode (`success_terminates`), so a terminated (not truncated) step
    is the success, except a policy step the operator's takeover follows: `takeover_penalty`
    ended it (runtime/takeover_penalty.py). Used when a resumed session refills the prior from
    the replay. With `climb` (and the rows' `actions`) a kept takeover's climbs stay out, as there."""
    interv = np.asarray(intervention, bool)
    term, trunc = np.asarray(terminated, bool), np.asarray(truncated, bool)
    into_takeover = term & ~interv & np.append(interv[1:], False)
    term = term & ~into_takeover
    rule = TakeoverPrior("successful", grace_steps)
    keep = np.zeros(len(interv), bool)
    for i in range(len(interv)):
        keep[rule.offer("replay", i, bool(interv[i]), bool(term[i] and not trunc[i]),
                        bool(term[i] or trunc[i]))] = True
    if climb is not None:
        keep &= ~climb_mask(actions, climb)
    return keep

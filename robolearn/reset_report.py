"""Per-episode reset records and their running totals.

Why: a reset-free pipeline is only as good as its resets, so every episode says how it began
(kind, robot seconds spent resetting, failures, human prompts, teleports) in `info["reset"]`,
and the trainer totals them into `metrics.jsonl` and `summary.json`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

#: reset kinds: the simulator wrote the state / a scripted controller / a learned backward
#: agent / the operator (after a failed reset) / no reset was run (episode starts where it is)
RESET_KINDS = ("teleport", "scripted", "learned", "human", "none")


@dataclass
class ResetReport:
    """How one episode began."""

    kind: str = "teleport"
    ok: bool = True                 # reached the start distribution without human help
    seconds: float = 0.0            # robot (sim or wall) time the reset controller ran
    wall_s: float = 0.0             # wall-clock time of the whole reset (prompts included)
    failures: int = 0               # controller attempts that failed (timeout, raised, out of reach)
    human_prompts: int = 0          # times the operator was asked
    teleports: int = 0              # simulator state writes during this reset (0 in physical mode)
    message: str = ""               # why the last attempt failed ("" when ok)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class ResetStats:
    """Totals over many episodes (what `summary.json["resets"]` holds)."""

    episodes: int = 0
    ok: int = 0
    seconds: float = 0.0
    failures: int = 0
    human_prompts: int = 0
    teleports: int = 0
    kinds: dict = field(default_factory=dict)

    def add(self, r: ResetReport | dict) -> None:
        d = r.as_dict() if isinstance(r, ResetReport) else r
        self.episodes += 1
        self.ok += int(bool(d["ok"]))
        self.seconds += float(d["seconds"])
        self.failures += int(d["failures"])
        self.human_prompts += int(d["human_prompts"])
        self.teleports += int(d["teleports"])
        self.kinds[d["kind"]] = self.kinds.get(d["kind"], 0) + 1

    def as_dict(self) -> dict:
        d = asdict(self)
        d["success_rate"] = self.ok / self.episodes if self.episodes else None
        d["seconds"] = round(self.seconds, 3)
        return d

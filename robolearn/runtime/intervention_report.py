"""Interventions over robot time, for the session report: does the operator take over less and less?

Why per block of robot time (not per episode): HIL-SERL's measure of a policy that needs the
person less is the share of robot time the person drives; episodes differ in length (success
ends one early), so a per-episode share would weigh a short success like a long failure.
Robot time here is policy time (control steps / control rate), the x axis of the session plot.
Steps are read from each recorded episode's per-step `intervention` flags, so a block boundary
may cut an episode.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

#: robot seconds per block of the intervention rate (a 5-minute session: 5 blocks)
BLOCK_S = 60.0


def episode_flags(root: str | Path) -> list[np.ndarray]:
    """Per-step intervention flags of every recorded episode of a dataset, in episode order
    (an unreadable episode is skipped, as the report's other counts skip it)."""
    root = Path(root)
    out = []
    for p in sorted(root.glob("episode_*/episode.json")):
        try:
            json.loads(p.read_text())
            with np.load(p.parent / "data.npz") as z:
                out.append(np.asarray(z["intervention"], bool))
        except (OSError, ValueError, KeyError):
            continue
    return out


def intervention_rate_by_block(flags: list[np.ndarray], control_hz: float, block_s: float = BLOCK_S) -> list[dict]:
    """[{t_start_s, t_end_s, steps, intervention_steps, takeovers, rate}] per `block_s` of robot
    time. A session that ends inside a block: a tail shorter than half a block joins the block
    before it (a few steps' rate would decide "did it fall"), a longer one is a block of its own.
    `takeovers` counts the starts of driven stretches (an episode's first step driven counts)."""
    if not flags:
        return []
    steps = np.concatenate(flags)
    starts = np.concatenate([np.diff(np.concatenate([[False], f]).astype(np.int8)) == 1 for f in flags])
    per = max(1, int(round(block_s * control_hz)))
    bounds = list(range(0, len(steps), per)) + [len(steps)]
    if len(bounds) > 2 and bounds[-1] - bounds[-2] < per / 2:
        del bounds[-2]
    blocks = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        s = slice(lo, hi)
        n = s.stop - s.start
        k = int(steps[s].sum())
        blocks.append({"t_start_s": round(s.start / control_hz, 2), "t_end_s": round(s.stop / control_hz, 2),
                       "steps": n, "intervention_steps": k, "takeovers": int(starts[s].sum()),
                       "rate": round(k / n, 4)})
    return blocks


def _share(blocks: list[dict]) -> float:
    return round(sum(b["intervention_steps"] for b in blocks) / max(1, sum(b["steps"] for b in blocks)), 4)


def intervention_report(episodes_dir: str | Path, control_hz: float, block_s: float | None = None) -> dict:
    """The report's intervention keys: the rate per block, first and last block, the first and
    last third of the session, and whether it fell. "Fell" compares thirds, not the first and
    last block: one minute holds ~8 episodes, and single blocks swung 0.23-0.40 in a session
    whose rate did not move (lift sessions 7-9), so first-vs-last block called a flat rate fallen."""
    block_s = BLOCK_S if block_s is None else block_s
    blocks = intervention_rate_by_block(episode_flags(episodes_dir), control_hz, block_s)
    out = {"intervention_block_s": block_s, "intervention_rate_by_block": blocks,
           "takeovers": int(sum(b["takeovers"] for b in blocks))}
    if blocks:
        out["intervention_rate_first_block"] = blocks[0]["rate"]
        out["intervention_rate_last_block"] = blocks[-1]["rate"]
        third = max(1, len(blocks) // 3)
        out["intervention_rate_first_third"] = _share(blocks[:third])
        out["intervention_rate_last_third"] = _share(blocks[-third:])
        out["intervention_rate_fell"] = (len(blocks) > 1 and out["intervention_rate_last_third"]
                                         < out["intervention_rate_first_third"])
    return out


def plot_intervention_rate(ax, report: dict) -> None:
    """The intervention rate per block on a right-hand axis of the session plot (minutes)."""
    blocks = report.get("intervention_rate_by_block") or []
    if not blocks:
        return
    right = ax.twinx()
    edges = [b["t_start_s"] / 60.0 for b in blocks] + [blocks[-1]["t_end_s"] / 60.0]
    rates = [b["rate"] for b in blocks]
    label = f"intervention rate per {report.get('intervention_block_s', BLOCK_S):g} s (right)"
    right.stairs(rates, edges, baseline=None, color="tab:red", lw=1.5)
    right.set_ylabel("intervention rate (share of steps driven)", color="tab:red")
    right.set_ylim(-0.05, 1.05)
    ax.plot([], [], color="tab:red", lw=1.5, label=label)   # in the main legend, drawn on top
    ax.set_zorder(right.get_zorder() + 1)
    ax.patch.set_visible(False)

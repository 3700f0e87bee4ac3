"""The reward's precision and recall against the truth per block of robot time in a session.

Why per block and per episode: a session's reward must stay trustworthy all the way through,
and the policy's search for the classifier's blind spots shows up as a block whose precision
drops, which one number for the whole session would hide. The unit is the episode, as the
policy experiences it: the reward called it a success (`reward_success`, at `fire_step`,
which ends the episode) or did not; the truth is the emulator's verdict at that same frame
(`true_at_fire`) and, for recall, whether the episode was truly a success at any step
(`true_any`). Precision over a block with no reward success is None (nothing to be wrong
about), not 1.
"""
from __future__ import annotations

import numpy as np


def precision_by_block(episodes: list[dict], control_hz: float, block_s: float = 600.0) -> list[dict]:
    """One dict per block of `block_s` robot seconds (an episode belongs to the block it started in)."""
    if control_hz <= 0 or block_s <= 0:
        raise ValueError(f"control_hz={control_hz}, block_s={block_s}: both must be > 0")
    starts = np.concatenate([[0], np.cumsum([int(e.get("steps", 0)) for e in episodes])])[:-1] / control_hz
    blocks: dict[int, dict] = {}
    for e, t in zip(episodes, starts):
        b = blocks.setdefault(int(t // block_s), {"tp": 0, "fp": 0, "fn": 0, "tn": 0, "episodes": 0,
                                                   "no_truth": 0, "labels_used": 0, "flagged": 0,
                                                   "model_versions": [], "reward_missing_steps": 0})
        b["episodes"] += 1
        b["reward_missing_steps"] += int(e.get("reward_missing", 0))   # steps the reward had no answer for
        b["labels_used"] += int(e.get("label") is not None)
        b["flagged"] += int(bool(e.get("flagged")))
        v = e.get("model_version")
        if v is not None and v not in b["model_versions"]:
            b["model_versions"].append(v)
        fired = bool(e.get("reward_success"))
        truth = e.get("true_at_fire") if fired else e.get("true_any")
        if truth is None:
            b["no_truth"] += 1
            continue
        key = ("tp" if truth else "fp") if fired else ("fn" if truth else "tn")
        b[key] += 1
    out, labels_so_far = [], 0
    for i in sorted(blocks):
        b = blocks[i]
        labels_so_far += b["labels_used"]
        pos, true = b["tp"] + b["fp"], b["tp"] + b["fn"]
        out.append({"block": i, "start_min": i * block_s / 60.0, "end_min": (i + 1) * block_s / 60.0,
                    "precision": b["tp"] / pos if pos else None,
                    "recall": b["tp"] / true if true else None,
                    **b, "labels_total": labels_so_far})
    return out

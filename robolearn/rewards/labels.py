"""Per-frame success labels from a recorded dataset (what a success classifier learns from).

Frame t+1 (the observation after step t) is positive when the env said success after step t
(`success`, the sim's ground truth or a reward source's verdict) or a human pressed the
"success now" key during step t (`success_mark`, see robolearn/teleop/keyboard.py). An episode a
human labelled successful at its end (Enter) with no positive frame gets its last frame
positive. Everything else is negative: failed episodes are the negatives' main source.
"""
from __future__ import annotations

import numpy as np


def frame_labels(ep) -> np.ndarray:
    """(N+1,) bool labels for the N+1 frames of a loaded dataset `Episode`."""
    n = ep.steps
    labels = np.zeros(n + 1, bool)
    labels[1:] |= np.asarray(ep.data["success"], bool)
    if "success_mark" in ep.data:
        labels[1:] |= np.asarray(ep.data["success_mark"], bool)
    if ep.meta.get("success") and ep.meta.get("label_source", "env") != "env" and not labels.any():
        labels[-1] = True
    return labels

"""Scores against ground truth: precision/recall/F1, the precision-first threshold, rank
correlation. One place, so `reward train` (held-out split) and `reward eval` (fresh sim
episodes) report the same numbers the same way."""
from __future__ import annotations

import numpy as np


def binary_metrics(scores: np.ndarray, truth: np.ndarray, threshold: float) -> dict:
    pred = np.asarray(scores) >= threshold
    truth = np.asarray(truth, bool)
    tp = int((pred & truth).sum())
    fp = int((pred & ~truth).sum())
    fn = int((~pred & truth).sum())
    tn = int((~pred & ~truth).sum())
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"threshold": float(threshold), "precision": precision, "recall": recall, "f1": f1,
            "tp": tp, "fp": fp, "fn": fn, "tn": tn, "positives": int(truth.sum()), "frames": int(truth.size)}


def threshold_for_precision(scores: np.ndarray, truth: np.ndarray, target: float = 0.99) -> float:
    """Lowest threshold whose precision on (scores, truth) is >= target (most recall at that
    precision). False positives are what breaks RL on a robot, so precision comes first; if no
    threshold reaches the target, the one with the best precision (ties: lowest) is returned."""
    scores = np.asarray(scores, np.float64)
    truth = np.asarray(truth, bool)
    cands = np.unique(scores)
    best, best_prec = float(cands[-1]) if cands.size else 0.5, -1.0
    for t in cands:  # ascending: the first that reaches the target keeps the most recall
        pred = scores >= t
        prec = float(truth[pred].mean()) if pred.any() else 1.0
        if prec >= target and truth[pred].any():
            return float(t)
        if prec > best_prec:
            best, best_prec = float(t), prec
    return best


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation (average ranks for ties); NaN if either side is constant."""
    def rank(x):
        x = np.asarray(x, np.float64)
        order = np.argsort(x, kind="mergesort")
        r = np.empty(len(x))
        r[order] = np.arange(len(x))
        for v in np.unique(x):  # average ties
            m = x == v
            if m.sum() > 1:
                r[m] = r[m].mean()
        return r
    ra, rb = rank(a), rank(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])

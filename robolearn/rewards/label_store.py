"""Operator labels of reward-model frames, kept on disk for the whole session.

Why append-only and never filtered: an operator's label that contradicts a classifier which
was certain is either the operator's slip or exactly the mistake the classifier must unlearn;
which one is decided later (by more labels, by a person reading the flags), never by dropping
it at the door. So every label is written with the classifier's score at that frame and
`flagged: true` when it contradicts a confident score.

Layout (`DIR`, e.g. `RUN/reward_labels/`):
- `labels.jsonl`: one record per labelled frame (id, episode, step, label, score, threshold,
  flagged, model version, who labelled it, ...), appended and fsynced after its frames;
- `frames/NNNNNN.npz`: that frame's camera images {camera: uint8 HxWx3}, written to a temp
  file and renamed, so a record never points at a torn file.
A torn last line (a kill mid-append) is skipped with a warning; every earlier label loads.
"""
from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path

import numpy as np

from robolearn.errors import DatasetError

log = logging.getLogger(__name__)

LABELS = "labels.jsonl"
FRAMES = "frames"


def contradicts_confident(label: bool, score: float, confidence: float) -> bool:
    """The label says the opposite of a classifier that was at least `confidence` sure."""
    if not np.isfinite(score):
        return False
    return (bool(label) and score <= 1.0 - confidence) or (not label and score >= confidence)


class LabelStore:
    """Append labelled frames; read them all back (`records`, `arrays`)."""

    def __init__(self, root: str | os.PathLike, confidence: float = 0.9):
        if not 0.5 < confidence <= 1.0:
            raise DatasetError(f"label store confidence={confidence!r}: must be in (0.5, 1]")
        self.root = Path(root)
        self.confidence = float(confidence)
        (self.root / FRAMES).mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._next = len(self.records())

    def append(self, images: dict[str, np.ndarray], label: bool, score: float, threshold: float,
               **fields) -> dict:
        """Store one labelled frame; returns its record (with `flagged`). Never drops a label."""
        if not images:
            raise DatasetError("a labelled frame needs its camera images")
        with self._lock:
            idx = self._next
            self._next += 1
            name = f"{idx:06d}.npz"
            tmp = self.root / FRAMES / f".{name}.tmp.npz"
            np.savez_compressed(tmp, **{c: np.asarray(v, np.uint8) for c, v in images.items()})
            os.replace(tmp, self.root / FRAMES / name)
            score = float(score)
            rec = {"id": idx, "frames": f"{FRAMES}/{name}", "label": bool(label),
                   "score": score if np.isfinite(score) else None, "threshold": float(threshold),
                   "flagged": contradicts_confident(label, score, self.confidence), **fields}
            with open(self.root / LABELS, "ab+") as f:
                f.seek(0, os.SEEK_END)
                torn = f.tell() > 0 and (f.seek(-1, os.SEEK_END) or f.read(1) != b"\n")
                # after a torn line (a kill mid-append) start a fresh one, or this label would be lost too
                f.write((("\n" if torn else "") + json.dumps(rec) + "\n").encode())
                f.flush()
                os.fsync(f.fileno())
        return rec

    def records(self) -> list[dict]:
        path = self.root / LABELS
        if not path.is_file():
            return []
        out = []
        lines = path.read_text(errors="replace").splitlines()
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except ValueError:
                where = "last line (torn by a kill mid-append)" if i == len(lines) - 1 else f"line {i + 1}"
                log.warning("%s: skipped an unreadable %s", path, where)
        return out

    def __len__(self) -> int:
        return self._next

    def arrays(self, records: list[dict] | None = None) -> tuple[dict[str, np.ndarray], np.ndarray, list[dict]]:
        """({camera: (N, H, W, 3) uint8}, labels (N,) bool, the records) of every stored label."""
        records = self.records() if records is None else records
        frames: dict[str, list] = {}
        kept = []
        for rec in records:
            try:
                with np.load(self.root / rec["frames"]) as z:
                    imgs = {k: z[k] for k in z.files}
            except (OSError, ValueError, KeyError) as exc:
                raise DatasetError(f"{self.root / rec.get('frames', '?')}: label {rec.get('id')} has "
                                   f"unreadable frames ({exc})") from None
            for c, v in imgs.items():
                frames.setdefault(c, []).append(v)
            kept.append(rec)
        labels = np.array([bool(r["label"]) for r in kept], bool)
        return {c: np.stack(v) for c, v in frames.items()}, labels, kept

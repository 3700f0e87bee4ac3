"""Retrain the session's success classifier from operator labels, off the control loop.

Why a new model from scratch, with the model's own recipe: the threshold is chosen the way the
first model's was (held-out precision >= its target, robolearn/rewards/classifier.py), now on
held-out episodes *and* held-out operator labels, so a mistake the operator caught moves the
threshold as well as the weights; fine-tuning the old weights on a handful of labels would not.
Each operator label is its own "episode" of source `operator` (so a quarter of them, of each
answer, is held out) and is repeated `label_weight` times in training: a few dozen labels
against a thousand base frames would otherwise not count.

A retrain that raises, or whose weights, held-out threshold or scores on the labelled frames
are not finite, or whose held-out F1 falls more than `max_f1_drop` below the model in use's,
publishes nothing (measured: a retrain on 20 labels chose a threshold of 0.95 for its precision
target, held-out recall 0.07 against 0.29, and the learner's reward fired on 6 of 20 true lifts;
docs/bench/finetune/README.md): the model in use stays (`model_versions.publish` moves
CURRENT only after a complete folder exists), and `retrains.jsonl` says why.

`RetrainWorker` runs this in a thread of the session process (never the actor's: the control
loop does not wait for it), every `every_labels` new labels or `every_s` seconds with new
labels, at a lower CPU priority.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from robolearn.errors import ConfigError, DatasetError
from robolearn.rewards.checkpoint import read_meta, save_model
from robolearn.rewards.label_store import LabelStore
from robolearn.rewards.model_versions import current_dir, current_version, publish, versions

log = logging.getLogger(__name__)

RETRAINS = "retrains.jsonl"


class RetrainError(DatasetError):
    """This retrain produced no usable model; the previous one stays in use."""


@dataclass
class RetrainConfig:
    every_labels: int = 20           # retrain after this many new operator labels
    every_s: float = 0.0             # ... or this often while there are new labels (0: off)
    label_weight: int = 10           # copies of each labelled frame in the training set
    epochs: int | None = None        # None: the model's own recipe (reward.json config)
    poll_s: float = 2.0
    nice: int = 10                   # the retraining thread's CPU priority (the robot's loop first)
    max_f1_drop: float = 0.1         # refuse a model whose held-out F1 is this far below the parent's

    def validate(self) -> "RetrainConfig":
        for name in ("every_labels", "label_weight"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"retrain {name}={v!r}: must be an integer >= 1")
        if not isinstance(self.every_s, (int, float)) or self.every_s < 0:
            raise ConfigError(f"retrain every_s={self.every_s!r}: must be >= 0 seconds")
        return self


def training_set(base: dict | None, frames: dict[str, np.ndarray], labels: np.ndarray,
                 cameras: list[str], image_shape: tuple, env_id: str, label_weight: int) -> dict:
    """`fit_classifier`'s data: the base frames (`load_frames` layout, or None) + each label as
    its own episode of source "operator", its frame repeated `label_weight` times."""
    missing = [c for c in cameras if c not in frames]
    if missing:
        raise RetrainError(f"the labelled frames lack camera(s) {missing} of the model")
    for c in cameras:
        if tuple(frames[c].shape[1:]) != tuple(image_shape):
            raise RetrainError(f"labelled frames of {c!r} are {frames[c].shape[1:]}, the model takes {image_shape}")
    first = (max(base["episodes"]) + 1) if base else 0
    n = len(labels)
    ep_ids = first + np.arange(n)
    rep = np.repeat(np.arange(n), label_weight)
    new = {"frames": {c: frames[c][rep] for c in cameras}, "labels": labels[rep].astype(bool),
           "episode": ep_ids[rep], "episodes": [int(e) for e in ep_ids],
           "episode_has_success": [bool(x) for x in labels], "episode_source": ["operator"] * n}
    if not base:
        return {**new, "cameras": list(cameras), "image_shape": tuple(image_shape), "env_id": env_id}
    src = list(base.get("episode_source") or [""] * len(base["episodes"]))
    return {"frames": {c: np.concatenate([base["frames"][c], new["frames"][c]]) for c in cameras},
            "labels": np.concatenate([np.asarray(base["labels"], bool), new["labels"]]),
            "episode": np.concatenate([base["episode"], new["episode"]]),
            "episodes": list(base["episodes"]) + new["episodes"],
            "episode_has_success": list(base["episode_has_success"]) + new["episode_has_success"],
            "episode_source": src + new["episode_source"], "cameras": list(cameras),
            "image_shape": tuple(image_shape), "env_id": env_id}


def check_model(model: torch.nn.Module, threshold: float, scores: np.ndarray) -> None:
    """RetrainError unless every weight, the threshold and the scores are finite."""
    bad = [k for k, v in model.state_dict().items() if v.is_floating_point() and not torch.isfinite(v).all()]
    if bad:
        raise RetrainError(f"non-finite weights in {bad[:3]}")
    if not np.isfinite(threshold):
        raise RetrainError(f"non-finite threshold {threshold}")
    if not np.isfinite(scores).all():
        raise RetrainError(f"{int((~np.isfinite(scores)).sum())} non-finite scores on the labelled frames")


def check_not_worse(new: dict, parent: dict, max_drop: float) -> None:
    """RetrainError if the new model's held-out F1 is more than `max_drop` below the parent's:
    a classifier tuned to its precision target on a few labels can keep its precision by
    finding almost no success, which starves the learner of its reward."""
    if parent.get("f1") is None or new.get("f1") is None:
        return
    if float(new["f1"]) < float(parent["f1"]) - max_drop:
        raise RetrainError(
            f"held-out F1 {new['f1']:.3f} (precision {new.get('precision', float('nan')):.2f}, recall "
            f"{new.get('recall', float('nan')):.2f}) is more than {max_drop} below the model in use's "
            f"{parent['f1']:.3f} (recall {parent.get('recall', float('nan')):.2f})")


def retrain_classifier(root: str | os.PathLike, store: LabelStore, base: dict | None = None,
                       cfg: RetrainConfig | None = None, say: Callable[[str], None] = log.info) -> dict:
    """One retrain: publishes the next version and returns its summary, or raises (the model
    in use unchanged). `base`: the first model's training frames (`load_frames` layout)."""
    from robolearn.rewards.classifier import ClassifierConfig, fit_classifier, predict

    cfg = cfg or RetrainConfig()
    root = Path(root)
    parent = current_version(root)
    meta = read_meta(current_dir(root), "classifier")
    frames, labels, records = store.arrays()
    if not len(labels):
        raise RetrainError("no operator labels yet")
    data = training_set(base, frames, labels, meta["cameras"], tuple(meta["image_shape"]),
                        meta.get("env_id", ""), cfg.label_weight)
    known = set(ClassifierConfig.__dataclass_fields__)
    ccfg = ClassifierConfig(**{k: v for k, v in (meta.get("config") or {}).items() if k in known})
    ccfg.cameras = list(meta["cameras"])
    ccfg.seed = int(ccfg.seed) + len(versions(root))
    if cfg.epochs is not None:
        ccfg.epochs = int(cfg.epochs)
    t0 = time.monotonic()
    reward, report = fit_classifier(data, ccfg, out=None, log=lambda m: None,
                                    source=f"{meta.get('dataset', '')} + {len(labels)} operator labels")
    scores = predict(reward.model, frames)
    check_model(reward.model, float(reward.meta["threshold"]), scores)
    check_not_worse(report["held_out"], ((meta.get("report") or {}).get("held_out") or {}), cfg.max_f1_drop)
    new_meta = dict(reward.meta)
    new_meta.update(parent=parent, operator_labels=int(len(labels)),
                    flagged_labels=int(sum(1 for r in records if r.get("flagged"))),
                    dataset=meta.get("dataset", ""))
    version = publish(root, lambda tmp: save_model(tmp, reward.model, new_meta))
    out = {"version": version, "parent": parent, "labels": int(len(labels)),
           "threshold": float(new_meta["threshold"]), "held_out": report["held_out"],
           "train_s": round(time.monotonic() - t0, 1)}
    say(f"reward model {version} from {parent} + {len(labels)} operator labels: held-out "
        f"precision {report['held_out']['precision']:.3f} recall {report['held_out']['recall']:.3f}")
    return out


class RetrainWorker(threading.Thread):
    """Retrains in the background whenever enough new labels arrived; logs every attempt
    (ok or why not) to `store.root/retrains.jsonl`. `stop()` then `join()` to end it."""

    def __init__(self, root: str | os.PathLike, store: LabelStore, cfg: RetrainConfig | None = None,
                 base: Callable[[], dict | None] | None = None,
                 train: Callable[..., dict] = retrain_classifier):
        super().__init__(name="reward-retrain", daemon=True)
        self.root, self.store = Path(root), store
        self.cfg = (cfg or RetrainConfig()).validate()
        self._base_fn = base
        self._base: dict | None = None
        self._base_loaded = False
        self.train = train
        self._halt = threading.Event()
        self.attempts = self.failures = 0
        self.last_labels = len(store.records())
        self.last_t = time.monotonic()

    def stop(self) -> None:
        self._halt.set()

    def due(self, n: int, now: float) -> bool:
        new = n - self.last_labels
        return new >= self.cfg.every_labels or (self.cfg.every_s > 0 and new > 0
                                                and now - self.last_t >= self.cfg.every_s)

    def base(self) -> dict | None:
        if not self._base_loaded:
            self._base_loaded = True
            self._base = self._base_fn() if self._base_fn else None
        return self._base

    def attempt(self) -> dict:
        n = len(self.store.records())
        self.attempts += 1
        self.last_labels, self.last_t = n, time.monotonic()
        rec = {"t_wall": time.time(), "labels": n, "cfg": asdict(self.cfg)}
        try:
            rec.update(ok=True, **self.train(self.root, self.store, self.base(), self.cfg))
        except Exception as exc:  # noqa: BLE001 - any failure keeps the model in use
            self.failures += 1
            rec.update(ok=False, reason=f"{type(exc).__name__}: {exc}", kept=current_version(self.root))
            log.error("reward retrain with %d labels failed, keeping %s: %s", n, rec["kept"], rec["reason"])
        try:
            with open(self.store.root / RETRAINS, "a") as f:
                f.write(json.dumps(rec, default=float) + "\n")
        except OSError as exc:
            log.error("could not log the retrain: %s", exc)
        return rec

    def run(self) -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self.cfg.nice)
        except (OSError, AttributeError):
            pass
        while not self._halt.wait(self.cfg.poll_s):
            if self.due(len(self.store.records()), time.monotonic()):
                self.attempt()

"""Success classifier (SERL / HIL-SERL, LeRobot's reward classifier): camera frames -> P(success).

A conv encoder per camera (`robolearn.policies.encoders.PixelEncoder`, trained here or loaded
frozen from a local safetensors file) + an MLP head, trained on the frames of a recorded
dataset with labels from `labels.frame_labels`. Why the threshold is chosen for precision
(>= 0.99 by default) on held-out episodes: in RL a false positive pays the agent for a state
that is not a success and ends the episode there, which the agent then learns to reach; a
false negative only delays the reward. Held-out = whole episodes, never frames of an episode
whose neighbours were trained on.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from robolearn.errors import DatasetError
from robolearn.rewards.base import MISSING, RewardModelError, camera_images
from robolearn.rewards.checkpoint import load_weights, read_meta, save_model
from robolearn.rewards.labels import frame_labels
from robolearn.rewards.metrics import binary_metrics, threshold_for_precision

KIND = "classifier"


@dataclass
class ClassifierConfig:
    cameras: list[str] = field(default_factory=list)  # empty: every camera of the dataset
    feature_dim: int = 50
    filters: int = 32
    layers: int = 4
    hidden: int = 256
    pretrained: str | None = None       # local safetensors of a ConvEncoder / PixelEncoder
    freeze_encoder: bool = False        # keep a pretrained backbone fixed (train the head only)
    epochs: int = 30                    # 15 left the two-camera classifier blind to low lifts
    batch_size: int = 128
    lr: float = 3e-4
    augment_pad: int = 4                # DrQ random shift (pixels); 0: off
    colour_jitter: bool = False         # random tint/brightness/contrast: survive another camera's colours
    val_fraction: float = 0.25          # held-out episodes (per outcome class)
    target_precision: float = 0.99
    seed: int = 0
    select_from_epoch: int = 0          # > 0: from this epoch on, keep the epoch whose held-out F1 (at
                                        # the target precision) is best, not the last one


class SuccessClassifier(nn.Module):
    """uint8 images {camera: (B, H, W, 3)} -> success logit (B,)."""

    def __init__(self, image_shape: tuple[int, int, int], cameras: list[str], feature_dim: int = 50,
                 filters: int = 32, layers: int = 4, hidden: int = 256):
        super().__init__()
        from robolearn.policies.encoders import PixelEncoder

        self.cameras = list(cameras)
        self.image_shape = tuple(image_shape)
        self.encoder = PixelEncoder({c: self.image_shape for c in self.cameras}, feature_dim, filters, layers)
        self.head = nn.Sequential(nn.Linear(self.encoder.feature_dim, hidden), nn.ReLU(),
                                  nn.Linear(hidden, 1))

    def forward(self, images: dict[str, torch.Tensor]) -> torch.Tensor:
        x = {c: images[c].permute(0, 3, 1, 2).float() for c in self.cameras}
        return self.head(self.encoder(x)).squeeze(-1)


def _arch(cfg: ClassifierConfig) -> dict:
    return {"feature_dim": cfg.feature_dim, "filters": cfg.filters, "layers": cfg.layers, "hidden": cfg.hidden}


def load_frames(dataset: str | Path, cameras: list[str] | None = None) -> dict[str, Any]:
    """Every frame of a dataset with its label and episode index (for episode-level splits)."""
    from robolearn.data.dataset import Dataset

    ds = Dataset(dataset)
    if not ds.cameras:
        raise DatasetError(f"{dataset}: no camera videos; record with --obs pixels or both to train "
                           "an image reward model")
    cams = list(cameras) if cameras else list(ds.cameras)
    bad = [c for c in cams if c not in ds.cameras]
    if bad:
        raise RewardModelError(f"camera(s) {bad} not in dataset {dataset} (cameras: {ds.cameras})")
    frames: dict[str, list] = {c: [] for c in cams}
    labels, episode, outcome, source = [], [], [], []
    for ep in ds.episodes():
        lab = frame_labels(ep)
        for c in cams:
            frames[c].append(ep.frames(c))
        labels.append(lab)
        episode.append(np.full(len(lab), ep.index))
        outcome.append(bool(lab.any()))
        source.append(str(ep.meta.get("kind") or ep.meta.get("device") or ""))
    return {"frames": {c: np.concatenate(v) for c, v in frames.items()}, "labels": np.concatenate(labels),
            "episode": np.concatenate(episode), "episode_has_success": outcome, "episode_source": source,
            "episodes": [int(i) for i in ds.indices], "cameras": cams,
            "image_shape": tuple(ds.observation_space[cams[0]].shape), "env_id": ds.env_id}


def split_episodes(episodes: list[int], positive: list[bool], val_fraction: float,
                   rng: np.random.Generator, source: list[str] | None = None) -> tuple[set, set]:
    """Held-out episodes drawn from successful and failed episodes alike and, within each, from
    every way they were recorded (`source`: the episode kind or teleop device) with at least one
    each: the threshold is chosen on the held-out frames, so a kind of hard negative missing
    there would set it blind to that kind."""
    source = source or [""] * len(episodes)
    val: set = set()
    for key in dict.fromkeys(zip(positive, source)):
        group = [e for e, p, s in zip(episodes, positive, source) if (p, s) == key]
        rng.shuffle(group)
        k = max(1, int(round(val_fraction * len(group)))) if len(group) > 1 else 0
        val.update(group[:k])
    return set(episodes) - val, val


def train_classifier(dataset: str | Path, cfg: ClassifierConfig | None = None, out: str | Path | None = None,
                     log: Callable[[str], None] = print) -> tuple["ClassifierReward", dict]:
    """Train on a recorded dataset; choose the threshold on held-out episodes; save to `out`."""
    cfg = cfg or ClassifierConfig()
    return fit_classifier(load_frames(dataset, cfg.cameras or None), cfg, out, log, source=str(dataset))


def fit_classifier(data: dict, cfg: ClassifierConfig | None = None, out: str | Path | None = None,
                   log: Callable[[str], None] = print, source: str = "") -> tuple["ClassifierReward", dict]:
    """`train_classifier` on frames already in memory (`load_frames`' layout: frames {camera:
    uint8 (N,H,W,3)}, labels, episode, episodes, episode_has_success, cameras, image_shape,
    env_id, optional episode_source), e.g. camera frames a robot labelled itself (robolearn/runtime/perception_calibration.py)."""
    cfg = cfg or ClassifierConfig()
    dataset = source
    cams, shape = data["cameras"], data["image_shape"]
    labels = data["labels"]
    if labels.all() or not labels.any():
        raise DatasetError(f"{dataset}: all {labels.size} frames are labelled "
                           f"{'success' if labels.any() else 'failure'}; a classifier needs both (record "
                           "failed episodes too, or mark success frames with the 'g' key)")
    rng = np.random.default_rng(cfg.seed)
    torch.manual_seed(cfg.seed)
    train_eps, val_eps = split_episodes(data["episodes"], data["episode_has_success"], cfg.val_fraction, rng,
                                        data.get("episode_source"))
    tr = np.isin(data["episode"], list(train_eps))
    va = np.isin(data["episode"], list(val_eps))
    model = SuccessClassifier(shape, cams, **_arch(cfg))
    if cfg.pretrained:
        model.encoder.load_pretrained(cfg.pretrained)
    if cfg.freeze_encoder:
        for p in model.encoder.parameters():
            p.requires_grad_(False)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=cfg.lr)
    frames = {c: torch.from_numpy(v) for c, v in data["frames"].items()}
    y = torch.from_numpy(labels.astype(np.float32))
    tr_idx = np.flatnonzero(tr)
    n_pos = max(1, int(labels[tr].sum()))
    pos_weight = torch.tensor((len(tr_idx) - n_pos) / n_pos)  # balance the rare success frames
    loss_fn = nn.BCEWithLogitsLoss(pos_weight=pos_weight)
    from robolearn.policies.encoders import colour_jitter, random_shift

    gen = torch.Generator().manual_seed(cfg.seed)
    t0 = time.perf_counter()
    best = None  # (held-out F1, epoch, weights) with select_from_epoch
    f1_by_epoch: dict[int, float] = {}
    for epoch in range(cfg.epochs):
        model.train()
        perm = rng.permutation(tr_idx)
        total = 0.0
        for s in range(0, len(perm), cfg.batch_size):
            b = torch.from_numpy(perm[s:s + cfg.batch_size])
            imgs = {}
            for c in cams:
                x = frames[c][b].float()
                x = colour_jitter(x, gen) if cfg.colour_jitter else x
                x = x.permute(0, 3, 1, 2)
                x = random_shift(x, cfg.augment_pad, gen) if cfg.augment_pad else x
                imgs[c] = x.permute(0, 2, 3, 1)
            loss = loss_fn(model(imgs), y[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(b)
        log(f"epoch {epoch + 1}/{cfg.epochs}: train loss {total / len(perm):.4f}")
        if cfg.select_from_epoch and epoch + 1 >= cfg.select_from_epoch and labels[va].any():
            model.eval()
            f1 = _held_out_f1(model, data["frames"], va, labels, cfg.target_precision)
            f1_by_epoch[epoch + 1] = round(f1, 4)
            if best is None or f1 >= best[0]:
                best = (f1, epoch + 1, {k: v.detach().clone() for k, v in model.state_dict().items()})
    if best is not None:
        model.load_state_dict(best[2])
    model.eval()
    scores = predict(model, data["frames"], np.flatnonzero(va))
    truth = labels[va]
    if truth.any():
        threshold = threshold_for_precision(scores, truth, cfg.target_precision)
    else:
        threshold = 0.5
        log("warning: held-out episodes have no success frame; threshold left at 0.5")
    report = {"held_out": binary_metrics(scores, truth, threshold),
              "epoch": best[1] if best is not None else cfg.epochs, "held_out_f1_by_epoch": f1_by_epoch,
              "train_frames": int(tr.sum()), "held_out_frames": int(va.sum()),
              "train_episodes": sorted(train_eps), "held_out_episodes": sorted(val_eps),
              "train_seconds": round(time.perf_counter() - t0, 1)}
    meta = {"kind": KIND, "cameras": cams, "image_shape": list(shape), "arch": _arch(cfg),
            "threshold": threshold, "dataset": str(dataset), "env_id": data["env_id"],
            "config": asdict(cfg), "report": report}
    if out is not None:
        save_model(out, model, meta)
    return ClassifierReward(model=model, meta=meta), report


def _held_out_f1(model: SuccessClassifier, frames: dict, va: np.ndarray, labels: np.ndarray,
                 target_precision: float) -> float:
    """Held-out F1 at the threshold the target precision picks: what `select_from_epoch` keeps.
    Why: that threshold sits just above the highest-scoring held-out failure, so recall swings
    from epoch to epoch (0.13-0.88 at 15 or 30 epochs on the same robot frames, stop 46)."""
    scores = predict(model, frames, np.flatnonzero(va))
    truth = labels[va]
    return float(binary_metrics(scores, truth, threshold_for_precision(scores, truth, target_precision))["f1"])


@torch.no_grad()
def predict(model: SuccessClassifier, frames: dict[str, np.ndarray], idx: np.ndarray | None = None,
            batch: int = 256) -> np.ndarray:
    n = len(next(iter(frames.values()))) if idx is None else len(idx)
    idx = np.arange(n) if idx is None else idx
    out = []
    for s in range(0, n, batch):
        b = idx[s:s + batch]
        out.append(torch.sigmoid(model({c: torch.from_numpy(np.ascontiguousarray(frames[c][b]))
                                        for c in model.cameras})).numpy())
    return np.concatenate(out) if out else np.zeros(0)


class ClassifierReward:
    """RewardSource: reward 1 and success when P(success) >= threshold, else 0.

    Reads its cameras from the observation, or from the env's cameras when bound to an env
    whose policy observes state only (`bind`, called by RobotEnv). A NaN probability gives a
    MISSING reward, never 0. `latencies` holds the last per-frame inference times (s)."""

    def __init__(self, path: str | Path | None = None, *, model: SuccessClassifier | None = None,
                 meta: dict | None = None, threshold: float | None = None, device: str = "cpu"):
        if model is None:
            if path is None:
                raise RewardModelError("ClassifierReward needs a model folder path")
            meta = read_meta(path, KIND)
            try:
                model = SuccessClassifier(tuple(meta["image_shape"]), meta["cameras"], **meta["arch"])
            except (KeyError, TypeError) as exc:
                raise RewardModelError(f"reward model {path}: reward.json lacks a valid architecture ({exc})") from None
            load_weights(path, model)
        self.model = model.to(device).eval()
        self.device = device
        self.meta = meta or {}
        self.cameras = list(model.cameras)
        self.image_shape = tuple(model.image_shape)
        self.threshold = float(threshold if threshold is not None else self.meta.get("threshold", 0.5))
        self.env = None
        self.latencies: list[float] = []
        self.last_score = float("nan")
        self.last_images: dict[str, np.ndarray] | None = None  # the frames last scored (operator labels)

    def bind(self, env) -> None:
        self.env = env

    def reset(self) -> None:
        pass

    @torch.no_grad()
    def score(self, images: dict[str, np.ndarray]) -> np.ndarray:
        """P(success) for a batch {camera: (B, H, W, 3) uint8} (or single frames (H, W, 3))."""
        single = next(iter(images.values())).ndim == 3
        x = {c: torch.from_numpy(np.ascontiguousarray(images[c][None] if single else images[c])).to(self.device)
             for c in self.cameras}
        p = torch.sigmoid(self.model(x)).cpu().numpy()
        return p

    def __call__(self, obs: dict, info: dict) -> tuple[float, bool]:
        t0 = time.perf_counter()
        imgs = camera_images(obs, self.cameras, self.image_shape, self.env)
        p = float(self.score(imgs)[0])
        self.latencies.append(time.perf_counter() - t0)
        del self.latencies[:-1000]
        self.last_score = p
        self.last_images = imgs
        if not np.isfinite(p):
            return MISSING, False
        ok = p >= self.threshold
        return (1.0 if ok else 0.0), ok

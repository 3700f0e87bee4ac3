"""Progress reward (VLAC-style): (earlier frame, current frame, task) -> progress delta + done.

Trained from demonstrations by time order alone (no reward labels needed): a frame t of a
demonstration whose first success frame is T has time progress p(t) = min(t, T) / T; for frames
i < j the target delta is p(j) - p(i), the reversed pair (j, i) gets the negative of it, and a
stalled pair (the same frame twice, i.e. no change) gets 0, so the model must look at what
changed rather than at the frame alone. The done head learns the demonstration's success frames.

Whole demonstrations, with progress saturating at 1 after the first success (`whole_episodes`):
a policy whose done flag misses a success keeps going, and a model that never saw a solved
state rates it at random (cut demonstrations gave ~0.5 correlation on such frames). A share of
pairs starts at the demonstration's first frame (`anchor_fraction`): that is the pair
`predict_episode` asks about (progress since reset).

Dense reward for a step = the delta between the previous and the current frame;
`progress(frame_0, frame_t)` ranks frames by how far the task has come, which
`robolearn reward eval` compares with the sim's true progress.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import nn

from robolearn.errors import DatasetError
from robolearn.rewards.base import MISSING, RewardModelError, camera_images
from robolearn.rewards.checkpoint import load_weights, read_meta, save_model
from robolearn.rewards.labels import frame_labels

KIND = "progress"


@dataclass
class ProgressConfig:
    cameras: list[str] = field(default_factory=list)
    task: str = ""                      # task text (default: the dataset's env id)
    feature_dim: int = 64
    filters: int = 32
    layers: int = 4
    hidden: int = 256
    epochs: int = 15
    pairs_per_epoch: int = 4096
    batch_size: int = 128
    lr: float = 3e-4
    stalled_fraction: float = 0.2       # share of (i, i) pairs, target 0
    reversed_fraction: float = 0.3      # share of (j, i) pairs, target -(p(j) - p(i))
    anchor_fraction: float = 0.0        # share of pairs whose earlier frame is the first frame
    whole_episodes: bool = False        # keep frames after the first success (progress 1 there)
    val_fraction: float = 0.2
    augment_pad: int = 4
    seed: int = 0


class ProgressModel(nn.Module):
    """({cam: (B,H,W,3)} earlier, {cam: (B,H,W,3)} current, task index (B,)) -> (delta (B,), done logit (B,))."""

    def __init__(self, image_shape, cameras, tasks: list[str], feature_dim=64, filters=32, layers=4, hidden=256):
        super().__init__()
        from robolearn.policies.encoders import PixelEncoder

        self.cameras, self.image_shape, self.tasks = list(cameras), tuple(image_shape), list(tasks)
        self.encoder = PixelEncoder({c: self.image_shape for c in self.cameras}, feature_dim, filters, layers)
        f = self.encoder.feature_dim
        self.task_emb = nn.Embedding(max(1, len(self.tasks)), 16)
        self.trunk = nn.Sequential(nn.Linear(3 * f + 16, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.delta = nn.Linear(hidden, 1)
        self.done = nn.Linear(f + 16, 1)

    def encode(self, imgs):
        return self.encoder({c: imgs[c].permute(0, 3, 1, 2).float() for c in self.cameras})

    def forward(self, earlier, current, task):
        a, b = self.encode(earlier), self.encode(current)
        t = self.task_emb(task)
        h = self.trunk(torch.cat([a, b, b - a, t], -1))
        return torch.tanh(self.delta(h)).squeeze(-1), self.done(torch.cat([b, t], -1)).squeeze(-1)


def _arch(cfg):
    return {"feature_dim": cfg.feature_dim, "filters": cfg.filters, "layers": cfg.layers, "hidden": cfg.hidden}


def train_progress(dataset: str | Path, cfg: ProgressConfig | None = None, out: str | Path | None = None,
                   log: Callable[[str], None] = print):
    """Train on the successful episodes of a dataset: whole (`cfg.whole_episodes`, progress
    saturating at the first success) or cut at their first success frame."""
    from robolearn.data.dataset import Dataset
    from robolearn.policies.encoders import random_shift
    from robolearn.rewards.metrics import spearman

    cfg = cfg or ProgressConfig()
    ds = Dataset(dataset)
    cams = list(cfg.cameras) or list(ds.cameras)
    if not cams or any(c not in ds.cameras for c in cams):
        raise RewardModelError(f"dataset {dataset} has cameras {ds.cameras}; the progress model needs {cams or 'one'}")
    task = cfg.task or ds.env_id
    demos = []  # (frames {cam: (N+1,...)}, success labels (N+1,), time progress (N+1,))
    for ep in ds.episodes():
        lab = frame_labels(ep)
        if not lab.any():
            continue
        first = int(np.flatnonzero(lab)[0])
        if first < 2:
            continue
        end = len(lab) if cfg.whole_episodes else first + 1
        demos.append(({c: ep.frames(c)[:end] for c in cams}, lab[:end], time_progress(end, first)))
    if len(demos) < 2:
        raise DatasetError(f"{dataset}: {len(demos)} successful episode(s); the progress model needs at least 2 "
                           "demonstrations that reach success")
    rng = np.random.default_rng(cfg.seed)
    torch.manual_seed(cfg.seed)
    order = rng.permutation(len(demos))
    n_val = max(1, int(round(cfg.val_fraction * len(demos))))
    val, train = [demos[i] for i in order[:n_val]], [demos[i] for i in order[n_val:]]
    shape = tuple(ds.observation_space[cams[0]].shape)
    model = ProgressModel(shape, cams, [task], **_arch(cfg))
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    gen = torch.Generator().manual_seed(cfg.seed)

    def sample(n):
        e_idx = rng.integers(len(train), size=n)
        ea = {c: [] for c in cams}
        cu = {c: [] for c in cams}
        delta, done = np.zeros(n, np.float32), np.zeros(n, np.float32)
        for k, e in enumerate(e_idx):
            fr, lab, prog = train[e]
            i, j = sorted(rng.integers(0, len(lab), size=2))
            if rng.random() < cfg.anchor_fraction:
                i = 0
            u = rng.random()
            if u < cfg.stalled_fraction:
                j = i
            d = prog[j] - prog[i]
            if cfg.stalled_fraction <= u < cfg.stalled_fraction + cfg.reversed_fraction:
                i, j, d = j, i, -d
            for c in cams:
                ea[c].append(fr[c][i])
                cu[c].append(fr[c][j])
            delta[k], done[k] = d, float(lab[j])
        def t(x, aug):
            x = torch.from_numpy(np.stack(x)).permute(0, 3, 1, 2).float()
            return (random_shift(x, cfg.augment_pad, gen) if aug and cfg.augment_pad else x).permute(0, 2, 3, 1)
        return ({c: t(ea[c], True) for c in cams}, {c: t(cu[c], True) for c in cams},
                torch.from_numpy(delta), torch.from_numpy(done))

    t0 = time.perf_counter()
    tz = torch.zeros(cfg.batch_size, dtype=torch.long)
    bce = nn.BCEWithLogitsLoss(pos_weight=torch.tensor(5.0))
    for epoch in range(cfg.epochs):
        model.train()
        tot = 0.0
        for _ in range(max(1, cfg.pairs_per_epoch // cfg.batch_size)):
            a, b, d, dn = sample(cfg.batch_size)
            pd, pdone = model(a, b, tz)
            loss = ((pd - d) ** 2).mean() + 0.1 * bce(pdone, dn)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item()
        log(f"epoch {epoch + 1}/{cfg.epochs}: loss {tot / max(1, cfg.pairs_per_epoch // cfg.batch_size):.4f}")
    model.eval()
    meta = {"kind": KIND, "cameras": cams, "image_shape": list(shape), "tasks": [task], "arch": _arch(cfg),
            "threshold": 0.5, "dataset": str(dataset), "env_id": ds.env_id, "config": asdict(cfg)}
    src = ProgressReward(model=model, meta=meta)
    rhos = []
    for fr, lab, prog in val:
        p, _ = src.predict_episode(fr)
        rhos.append(spearman(p, prog))
    report = {"held_out_time_spearman": float(np.nanmean(rhos)), "train_demos": len(train), "held_out_demos": len(val),
              "train_seconds": round(time.perf_counter() - t0, 1)}
    meta["report"] = report
    log(f"held-out demos: Spearman(progress, time) = {report['held_out_time_spearman']:.3f}")
    if out is not None:
        save_model(out, model, meta)
    return src, report


def time_progress(n: int, first_success: int) -> np.ndarray:
    """(n,) progress of a demonstration's frames by time: t / T up to the first success frame T,
    1 after it (the task is done; what the arm does then is no further progress)."""
    return np.minimum(np.arange(n), first_success) / first_success


class ProgressReward:
    """RewardSource: reward = progress delta from the previous frame to this one; success = the
    done head's probability >= `threshold`. The first step after reset compares with the reset
    frame, which `reset()` cannot see, so the env's first call scores (frame, frame) = 0."""

    def __init__(self, path=None, *, model: ProgressModel | None = None, meta: dict | None = None,
                 task: str | None = None, threshold: float | None = None, device: str = "cpu"):
        if model is None:
            if path is None:
                raise RewardModelError("ProgressReward needs a model folder path")
            meta = read_meta(path, KIND)
            try:
                model = ProgressModel(tuple(meta["image_shape"]), meta["cameras"], meta["tasks"], **meta["arch"])
            except (KeyError, TypeError) as exc:
                raise RewardModelError(f"reward model {path}: reward.json lacks a valid architecture ({exc})") from None
            load_weights(path, model)
        self.model = model.to(device).eval()
        self.meta, self.device = meta or {}, device
        self.cameras, self.image_shape = list(model.cameras), tuple(model.image_shape)
        task = task or model.tasks[0]
        if task not in model.tasks:
            raise RewardModelError(f"progress model knows tasks {model.tasks}, not {task!r}")
        self.task_index = model.tasks.index(task)
        self.threshold = float(threshold if threshold is not None else self.meta.get("threshold", 0.5))
        self.env = None
        self._prev = None
        self.latencies: list[float] = []

    def bind(self, env) -> None:
        self.env = env

    def reset(self) -> None:
        self._prev = None

    @torch.no_grad()
    def pair(self, earlier: dict, current: dict) -> tuple[np.ndarray, np.ndarray]:
        """Batched (delta, done probability) for {cam: (B,H,W,3)} frame pairs."""
        a = {c: torch.from_numpy(np.ascontiguousarray(earlier[c])).to(self.device) for c in self.cameras}
        b = {c: torch.from_numpy(np.ascontiguousarray(current[c])).to(self.device) for c in self.cameras}
        n = len(a[self.cameras[0]])
        d, done = self.model(a, b, torch.full((n,), self.task_index, dtype=torch.long, device=self.device))
        return d.cpu().numpy(), torch.sigmoid(done).cpu().numpy()

    def score(self, images: dict) -> np.ndarray:
        """Done probability of single frames / a batch (the success-detector view)."""
        single = next(iter(images.values())).ndim == 3
        imgs = {c: images[c][None] if single else images[c] for c in self.cameras}
        return self.pair(imgs, imgs)[1]

    def predict_episode(self, frames: dict, batch: int = 256) -> tuple[np.ndarray, np.ndarray]:
        """(progress of every frame relative to frame 0, done probability per frame)."""
        n = len(frames[self.cameras[0]])
        prog, done = [], []
        for s in range(0, n, batch):
            cur = {c: frames[c][s:s + batch] for c in self.cameras}
            first = {c: np.repeat(frames[c][:1], len(cur[c]), 0) for c in self.cameras}
            d, p = self.pair(first, cur)
            prog.append(d)
            done.append(p)
        return np.concatenate(prog), np.concatenate(done)

    def __call__(self, obs: dict, info: dict) -> tuple[float, bool]:
        t0 = time.perf_counter()
        imgs = camera_images(obs, self.cameras, self.image_shape, self.env)
        cur = {c: v[None] for c, v in imgs.items()}
        prev = self._prev if self._prev is not None else cur
        d, p = self.pair(prev, cur)
        self._prev = {c: v.copy() for c, v in cur.items()}
        self.latencies.append(time.perf_counter() - t0)
        del self.latencies[:-1000]
        if not (np.isfinite(d[0]) and np.isfinite(p[0])):
            return MISSING, False
        return float(d[0]), bool(p[0] >= self.threshold)

"""The success model of start states that ends a learned reset: p(state is a start state).

Why a density ratio: trained on example start states (positives) against reference states
drawn uniformly over the range the examples span (padded), its p(start) is high where start
states are dense and near 0 elsewhere. "States seen while practising" as negatives failed:
most of them ARE start states (on ArmPush 99 % of the cube positions the scripted push and
random actions visit lie in the start region), so that classifier answered ~0.5 everywhere
(34 % agreement with the ground truth on a grid; this one: 98 %).
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from robolearn.errors import ConfigError


class StartStateClassifier:
    """p(state is a start state). `fit(pos, neg)` then `prob(states)` (numpy in, numpy out)."""

    def __init__(self, dim: int, hidden: int = 64, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 1))
        for p in self.net.parameters():        # seeded init, independent of the global RNG
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=g) * (0.1 if p.ndim > 1 else 0.0))
        self.mean = np.zeros(dim, np.float32)
        self.std = np.ones(dim, np.float32)
        self.low = np.full(dim, -np.inf, np.float32)     # the box the training data spans
        self.high = np.full(dim, np.inf, np.float32)
        self._g = g

    def fit(self, pos: np.ndarray, neg: np.ndarray, steps: int = 1500, lr: float = 3e-3) -> float:
        """Balanced logistic regression by Adam; returns the training accuracy."""
        x = np.concatenate([pos, neg]).astype(np.float32)
        y = np.concatenate([np.ones(len(pos)), np.zeros(len(neg))]).astype(np.float32)
        self.mean, self.std = x.mean(0), x.std(0) + 1e-3
        self.low, self.high = x.min(0), x.max(0)
        xt = torch.as_tensor((x - self.mean) / self.std)
        yt = torch.as_tensor(y)
        w = torch.as_tensor(np.where(y > 0, len(y) / (2 * len(pos)), len(y) / (2 * len(neg))).astype(np.float32))
        opt = torch.optim.Adam(self.net.parameters(), lr=lr)
        for _ in range(steps):
            idx = torch.randint(0, len(xt), (256,), generator=self._g)
            logit = self.net(xt[idx]).squeeze(-1)
            loss = (nn.functional.binary_cross_entropy_with_logits(logit, yt[idx], reduction="none") * w[idx]).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        return float(((self.prob(x) > 0.5) == (y > 0.5)).mean())

    @torch.no_grad()
    def logit(self, states: np.ndarray) -> np.ndarray:
        """log p / (1 - p): of a density ratio, it falls about linearly with the distance from
        the start region (on ArmPush ~ -2.5 per cm of cube), which gives the backward agent a
        direction where p itself is a flat 0."""
        raw = np.asarray(states, np.float32).reshape(-1, len(self.mean))
        # outside the box it was trained on an MLP's answer is an extrapolation that may even say
        # "start" (a cube flung 20 m away): judge the box's nearest point, less the distance out
        inside = np.clip(raw, self.low, self.high)
        out = np.linalg.norm((raw - inside) / self.std, axis=-1)
        x = torch.as_tensor((inside - self.mean) / self.std)
        return self.net(x).squeeze(-1).numpy() - 50.0 * out

    def prob(self, states: np.ndarray) -> np.ndarray:
        return sigmoid(self.logit(states))

    def save(self, path) -> None:
        """Weights and input scaling as safetensors (a resumed run judges as this one did)."""
        from safetensors.torch import save_file

        tensors = {f"net.{k}": v.detach().contiguous() for k, v in self.net.state_dict().items()}
        for name in ("mean", "std", "low", "high"):
            tensors[name] = torch.as_tensor(np.asarray(getattr(self, name), np.float32))
        save_file(tensors, str(path))

    @classmethod
    def load(cls, path) -> "StartStateClassifier":
        from robolearn.policies.checkpoints import read_tensors_file

        t = read_tensors_file(path)
        clf = cls(int(t["mean"].numel()), hidden=int(t["net.0.weight"].shape[0]))
        clf.net.load_state_dict({k[4:]: v for k, v in t.items() if k.startswith("net.")})
        for name in ("mean", "std", "low", "high"):
            setattr(clf, name, t[name].numpy())
        return clf


def sigmoid(logit):
    """1 / (1 + e^-x) without overflow for large |x|."""
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(logit)))


def start_state_examples(env, n: int, seed: int = 0, key: str = "state",
                         idx=slice(None)) -> tuple[np.ndarray, np.ndarray]:
    """(start states, visited states) from a sim env: start states of `n` teleported resets (on
    hardware: states recorded after resets by hand), and the states the task's scripted
    controller and random actions visit after the first steps of `n` episodes (they only widen
    the range `reference_states` covers)."""
    base = env.unwrapped
    if getattr(base, "reset_mode", None) != "teleport":
        raise ConfigError("collect start-state examples with a teleport-reset sim env")
    ctrl = base.scripted_controller()
    rng = np.random.default_rng(seed)
    pos, neg = [], []
    for ep in range(n):
        obs, _ = env.reset(seed=seed + 50_000 + ep)
        pos.append(obs[key][idx])
        ctrl.reset()
        random_ep = ep % 2 == 1
        for t in range(int(rng.integers(15, 60))):
            a = rng.uniform(-1, 1, env.action_space.shape) if random_ep else ctrl.act(obs)
            obs, _, term, trunc, _ = env.step(np.asarray(a, np.float32))
            if t >= 8:
                neg.append(obs[key][idx])
            if term or trunc:
                break
    return np.asarray(pos), np.asarray(neg)


def reference_states(pos: np.ndarray, visited: np.ndarray, n: int, rng: np.random.Generator,
                     pad: float = 0.5) -> np.ndarray:
    """`n` states uniform over the box spanned by the start examples padded by `pad` x their
    range on every side, widened to every visited state: the negatives of the start-state
    classifier (no labels needed, so the same works with start states recorded on a robot)."""
    pos = np.asarray(pos, np.float64)
    span = pos.max(0) - pos.min(0)
    lo, hi = pos.min(0) - pad * span, pos.max(0) + pad * span
    if len(visited):
        lo, hi = np.minimum(lo, np.min(visited, 0)), np.maximum(hi, np.max(visited, 0))
    return rng.uniform(lo, hi, size=(n, pos.shape[1])).astype(np.float32)


def fit_start_classifier(pos: np.ndarray, visited: np.ndarray, seed: int = 0, steps: int = 1500,
                         references: int = 4000) -> tuple[StartStateClassifier, float, float]:
    """(classifier, threshold, training accuracy): p(start) from `pos` against
    `reference_states`; the threshold is what 80 % of the true start states reach (at most 0.5:
    start states near the region's edge score lower, as the MLP smooths the boundary)."""
    clf = StartStateClassifier(pos.shape[1], seed=seed)
    ref = reference_states(pos, visited, references, np.random.default_rng(seed + 13))
    acc = clf.fit(pos, ref, steps=steps)
    threshold = float(min(0.5, np.quantile(clf.prob(pos), 0.2)))
    return clf, threshold, acc

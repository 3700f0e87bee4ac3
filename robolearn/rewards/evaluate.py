"""Validate a reward model in sim against ground truth on fresh episodes.

Classifier: per-frame precision / recall / F1 of `score >= threshold` against the sim's
success. Progress model: Spearman rank correlation, per episode, of the predicted progress
with the true progress (mean over episodes), and of its done flag as a success detector.
Latency is the wall time of one single-frame call as the env would make it (batch 1).

Progress is scored against two truths and over two spans (all four are reported):
- truths: `task_potential` (the task's own dense-reward potential, `sim_episodes.task_progress`)
  and `cube_goal` (push: 1 - cube-goal distance / initial; the first definition, which is flat,
  all ties, while the arm approaches the cube);
- spans: `episode` = reset to the first success frame, where a task that ends on success
  (ArmPush, ArmLift) ends its episode, so these are the frames the model rewards in RL; and
  `rollout` = the whole validation rollout, which runs on past success (for the classifier's
  sake) through frames whose true progress is a tie of ~1 and whose ranking is noise.
The headline (`progress_spearman_mean`) is task_potential over the episode.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import numpy as np

from robolearn.rewards.checkpoint import read_meta
from robolearn.rewards.metrics import binary_metrics, spearman

#: default fresh-episode mix: (kind, count) per 50 episodes
DEFAULT_MIX = (("scripted", 0.4), ("random", 0.15), ("no_grasp", 0.15), ("low_lift", 0.15), ("hover", 0.15))
#: (truth key in a sim episode, name in the results): see the module doc
PROGRESS_TRUTHS = (("task_progress", "task_potential"), ("progress", "cube_goal"))
PROGRESS_SPANS = ("episode", "rollout")
HEADLINE = ("task_potential", "episode")


def episode_span(success: np.ndarray) -> int:
    """Frames of the task's own episode: up to and including the first success frame."""
    success = np.asarray(success, bool)
    return int(np.argmax(success)) + 1 if success.any() else len(success)


def span_of(pred: np.ndarray, ep: dict, key: str, span: str) -> tuple[np.ndarray, np.ndarray]:
    """(predicted, true) progress of one sim episode over `span` (see the module doc)."""
    n = len(pred) if span == "rollout" else episode_span(ep["success"])
    return pred[:n], np.asarray(ep[key])[:n]


def time_oracle(ep: dict) -> np.ndarray:
    """The progress a perfect time-order model would give: the training target, frame index /
    first success frame, 1 after it (frame index / length without a success)."""
    from robolearn.rewards.progress import time_progress

    n = len(ep["success"])
    first = episode_span(ep["success"]) - 1
    return time_progress(n, first if first > 0 and np.asarray(ep["success"]).any() else n - 1)


def progress_table(episodes: list[tuple[np.ndarray, dict]]) -> dict:
    """{truth: {span: mean / min / pooled Spearman, and the same mean for `time_oracle`}} over
    (predicted progress, sim episode) pairs: the oracle says how much of the gap to 1 is the
    truth's, not the model's (a model trained by time order cannot beat it by much)."""
    table: dict = {}
    for key, name in PROGRESS_TRUTHS:
        for span in PROGRESS_SPANS:
            cut = [span_of(p, ep, key, span) for p, ep in episodes]
            rhos = [r for r in (spearman(a, b) for a, b in cut) if np.isfinite(r)]
            oracle = [r for r in (spearman(*span_of(time_oracle(ep), ep, key, span)) for _, ep in episodes)
                      if np.isfinite(r)]
            table.setdefault(name, {})[span] = {
                "mean": float(np.mean(rhos)) if rhos else float("nan"),
                "min": float(np.min(rhos)) if rhos else float("nan"), "episodes": len(rhos),
                "pooled": spearman(np.concatenate([a for a, _ in cut]), np.concatenate([b for _, b in cut])),
                "time_oracle_mean": float(np.mean(oracle)) if oracle else float("nan")}
    return table


def episode_plan(n: int, with_policy: bool = False) -> list[tuple[str, int]]:
    mix = list(DEFAULT_MIX) + ([("policy", 0.2)] if with_policy else [])
    total = sum(w for _, w in mix)
    counts = [int(n * w / total) for _, w in mix]
    counts[0] += n - sum(counts)
    return [(k, c) for (k, _), c in zip(mix, counts) if c > 0]


def env_kwargs_for(meta: dict) -> dict:
    cams = meta["cameras"]
    return {"camera": cams[0] if len(cams) == 1 else cams, "image_size": list(meta["image_shape"][:2])}


def evaluate_model(env_id: str, model_dir: str | Path, episodes: int = 50, seed: int = 100_000,
                   policy: Callable | None = None, png: str | Path | None = None,
                   plan: list[tuple[str, int]] | None = None, log: Callable[[str], None] = print) -> dict:
    from robolearn.policies.env_building import make_env
    from robolearn.rewards.sim_episodes import check_env, fresh_episodes

    meta = read_meta(model_dir)
    kind = meta["kind"]
    model = load_model(model_dir)
    env = make_env(env_id, "both", env_kwargs=env_kwargs_for(meta))
    check_env(env)
    scores, truth, kinds, prog_pred, prog_true, prog_eps = [], [], [], [], [], []
    lat = []
    try:
        for ep_kind, ep in fresh_episodes(env, plan or episode_plan(episodes, policy is not None), seed, policy):
            frames = {c: np.stack([o[c] for o in ep["obs"]]) for c in model.cameras}
            for _ in range(3):  # per-frame latency as the env calls it (batch of 1)
                t0 = time.perf_counter()
                model.score({c: v[-1] for c, v in frames.items()})
                lat.append(time.perf_counter() - t0)
            if kind == "classifier":
                s = model.score(frames)
            else:
                p, d = model.predict_episode(frames)
                s = d
                prog_pred.append(p)
                prog_true.append(ep["task_progress"])
                prog_eps.append((p, {k: ep[k] for k in ("success", "progress", "task_progress")}))
            scores.append(s)
            truth.append(ep["success"])
            kinds.append(np.full(len(s), ep_kind))
            log(f"{ep_kind} episode: {int(ep['success'].sum())} success frames, "
                f"{int((s >= model.threshold).sum())} predicted")
    finally:
        env.close()
    scores_a, truth_a, kinds_a = np.concatenate(scores), np.concatenate(truth), np.concatenate(kinds)
    res = {"env_id": env_id, "model": str(model_dir), "kind": kind, "episodes": episodes, "seed": seed,
           "threshold": model.threshold, "overall": binary_metrics(scores_a, truth_a, model.threshold),
           "by_kind": {k: binary_metrics(scores_a[kinds_a == k], truth_a[kinds_a == k], model.threshold)
                       for k in dict.fromkeys(kinds_a.tolist())},
           "latency_ms_per_frame": {"median": 1e3 * float(np.median(lat)), "p95": 1e3 * float(np.percentile(lat, 95))}}
    if kind == "progress":
        table = res["progress_spearman"] = progress_table(prog_eps)
        head = table[HEADLINE[0]][HEADLINE[1]]
        res["progress_spearman_definition"] = f"{HEADLINE[0]} over the {HEADLINE[1]} (see robolearn.rewards.evaluate)"
        res["progress_spearman_mean"] = head["mean"]
        res["progress_spearman_episodes"] = head["episodes"]
        res["progress_spearman_pooled"] = head["pooled"]
    if png:
        plot(png, scores, truth, model.threshold, prog_pred, prog_true, title=f"{kind} on {env_id}")
        res["png"] = str(png)
    return res


def load_model(model_dir):
    meta = read_meta(model_dir)
    if meta["kind"] == "classifier":
        from robolearn.rewards.classifier import ClassifierReward

        return ClassifierReward(model_dir)
    from robolearn.rewards.progress import ProgressReward

    return ProgressReward(model_dir)


def plot(png, scores, truth, threshold, prog_pred, prog_true, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = 2 if prog_pred else 1
    fig, axes = plt.subplots(n, 1, figsize=(10, 3.2 * n), squeeze=False)
    ax = axes[0, 0]
    s, t = np.concatenate(scores), np.concatenate(truth)
    ax.plot(s, lw=0.7, label="model score")
    ax.fill_between(np.arange(len(t)), 0, t.astype(float), color="g", alpha=0.2, step="mid", label="true success")
    ax.axhline(threshold, color="r", ls="--", lw=0.8, label=f"threshold {threshold:.3f}")
    ax.set_xlabel("frame (episodes concatenated)")
    ax.set_title(title)
    ax.legend(loc="upper right", fontsize=7)
    if prog_pred:
        ax = axes[1, 0]
        ax.plot(np.concatenate(prog_pred), lw=0.7, label="predicted progress")
        ax.plot(np.concatenate(prog_true), lw=0.7, label="true progress (task potential)")
        ax.set_xlabel("frame")
        ax.legend(loc="upper right", fontsize=7)
    fig.tight_layout()
    Path(png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=90)
    plt.close(fig)

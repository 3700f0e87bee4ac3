"""Evaluate a policy on an env and record what it does.

Evaluation is kept apart from training so `robolearn eval`, the training loop and the
benchmark all measure a policy the same way: a fixed list of episode seeds (so two evaluations
of the same policy see the same start states and are comparable across a learning curve),
deterministic actions, success = the env reported `info["success"]` at any step.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from robolearn.errors import ConfigError

Policy = Callable[[dict], np.ndarray]
# Episode seeds for evaluation are offset from the training seed so the eval start states
# are not the ones the training env saw first.
EVAL_SEED_OFFSET = 10_000


@dataclass
class EvalResult:
    """Per-episode outcomes of one evaluation."""

    returns: list[float] = field(default_factory=list)
    successes: list[bool] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)

    @property
    def mean_return(self) -> float:
        return float(np.mean(self.returns)) if self.returns else math.nan

    @property
    def success_rate(self) -> float:
        return float(np.mean(self.successes)) if self.successes else math.nan

    def as_dict(self) -> dict:
        return {
            "return": self.mean_return,
            "return_std": float(np.std(self.returns)) if self.returns else math.nan,
            "success_rate": self.success_rate,
            "episodes": len(self.returns),
            "mean_length": float(np.mean(self.lengths)) if self.lengths else math.nan,
        }


def run_episode(env, policy: Policy, seed: int | None, frames: list | None = None,
                max_steps: int | None = None) -> tuple[float, bool, int]:
    """One episode; returns (return, success at any step, length). Appends renders to `frames`."""
    obs, info = env.reset(seed=seed)
    total, success, length = 0.0, bool(info.get("success", False)), 0
    if frames is not None:
        _grab(env, frames)
    while True:
        obs, reward, terminated, truncated, info = env.step(policy(obs))
        total += float(reward)
        success = success or bool(info.get("success", False))
        length += 1
        if frames is not None:
            _grab(env, frames)
        if terminated or truncated or (max_steps is not None and length >= max_steps):
            return total, success, length


def evaluate(env, policy: Policy, episodes: int, seed: int = 0) -> EvalResult:
    """Run `episodes` episodes with seeds seed+EVAL_SEED_OFFSET+i (the same set every call)."""
    if episodes < 1:
        raise ConfigError(f"eval episodes={episodes}: must be >= 1")
    result = EvalResult()
    for i in range(episodes):
        ret, ok, n = run_episode(env, policy, seed + EVAL_SEED_OFFSET + i)
        result.returns.append(ret)
        result.successes.append(ok)
        result.lengths.append(n)
    return result


def _grab(env, frames: list) -> None:
    frame = env.render()
    if frame is None:
        raise ConfigError("the env returned no frame from render(); make it with render_mode='rgb_array'")
    frames.append(np.asarray(frame, dtype=np.uint8))


def record(env, policy: Policy, path: str | Path, episodes: int = 1, seed: int = 0,
           fps: int | None = None) -> tuple[Path, EvalResult]:
    """Record `episodes` evaluation episodes to an MP4 at `path`.

    If MP4 writing fails (no ffmpeg), write a PNG strip of evenly spaced frames next to it
    instead, so a run always leaves something a person can look at. Returns the file written.
    """
    frames: list[np.ndarray] = []
    result = EvalResult()
    for i in range(episodes):
        ret, ok, n = run_episode(env, policy, seed + EVAL_SEED_OFFSET + i, frames=frames)
        result.returns.append(ret)
        result.successes.append(ok)
        result.lengths.append(n)
    fps = int(fps or env.metadata.get("render_fps") or 10)
    return write_frames(frames, path, fps), result


def write_frames(frames: list[np.ndarray], path: str | Path, fps: int = 10) -> Path:
    """MP4 via imageio-ffmpeg; on failure a PNG strip `<stem>_strip.png`. Returns the path written."""
    import imageio.v2 as imageio

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not frames:
        raise ConfigError(f"no frames to write to {path}")
    if path.suffix.lower() in (".mp4", ".mov", ".mkv", ".gif"):
        try:
            # macro_block_size=1: odd frame sizes are written as they are, not rescaled.
            with imageio.get_writer(path, fps=fps, macro_block_size=1) as writer:
                for f in frames:
                    writer.append_data(f)
            return path
        except Exception as exc:  # any ffmpeg/codec failure: fall back to an image strip
            print(f"video writing failed ({exc}); writing an image strip instead")
            path.unlink(missing_ok=True)
    strip = path if path.suffix.lower() == ".png" else path.with_name(path.stem + "_strip.png")
    idx = np.linspace(0, len(frames) - 1, num=min(8, len(frames))).round().astype(int)
    imageio.imwrite(strip, np.concatenate([frames[i] for i in idx], axis=1))
    return strip

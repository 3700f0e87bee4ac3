"""Reward sources: where reward and success come from when the simulator cannot say.

On hardware there is no privileged state, so a task's reward comes from a `RewardSource`
(a learned success classifier, a CLIP/VLM reward, a progress model, a human label). In sim
the task's own ground-truth evaluation is used unless a source is passed, which is how reward
models are validated in sim before they run on a robot.

Missing is not zero: a source that has no answer for a step (its model was killed, its
output was NaN) returns `MISSING` (NaN) as the reward. The env flags the step
(`info["reward_missing"]`), and the training loop / learner drop the transition instead of
storing it, so an absent reward model never teaches the agent "this state is worth 0".
"""
from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np

from robolearn.errors import ConfigError, RobolearnError

#: the reward of a step whose reward model gave no answer (never stored in a replay buffer)
MISSING = float("nan")


class RewardModelError(ConfigError):
    """A reward model cannot be used as asked: missing checkpoint, wrong architecture, images
    of the wrong size or camera name. The message says which file / key / shape to fix."""


class RewardRejected(RobolearnError, ValueError):
    """A reward model produced a non-finite score; the step is rejected, not stored."""


class RewardSource(Protocol):
    def reset(self) -> None: ...
    def __call__(self, obs: dict[str, np.ndarray], info: dict[str, Any]) -> tuple[float, bool]:
        """Return (reward, success) for the observation just reached; reward `MISSING` (NaN)
        when there is no answer for this step."""


def is_missing(reward: float) -> bool:
    return not math.isfinite(float(reward))


def camera_images(obs: dict[str, np.ndarray], cameras: list[str], image_shape: tuple[int, int, int],
                  env=None) -> dict[str, np.ndarray]:
    """The model's camera frames, from `obs` or (when the policy observes state only) read
    from the env's backend cameras; a wrong camera name or image size is a RewardModelError."""
    out = {}
    for cam in cameras:
        img = obs.get(cam) if obs is not None else None
        if img is None and env is not None:
            backend_cams = getattr(env, "backend", None) and env.backend.cameras
            if not backend_cams or cam not in backend_cams:
                have = sorted(backend_cams or {})
                raise RewardModelError(f"reward model needs camera {cam!r}; the env has {have or 'no cameras'} "
                                       f"(make the env with camera={cam!r})")
            img = backend_cams[cam].read().image
        if img is None:
            raise RewardModelError(f"reward model needs camera {cam!r}; the observation has "
                                   f"{sorted(obs or {})} (use obs='pixels'/'both' or pass the env)")
        img = np.asarray(img)
        if img.shape[-3:] != tuple(image_shape):
            raise RewardModelError(f"camera {cam!r} gives images of shape {img.shape[-3:]}, the reward "
                                   f"model was trained on {tuple(image_shape)} (make the env with "
                                   f"image_size={list(image_shape[:2])})")
        out[cam] = img
    return out

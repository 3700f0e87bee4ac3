"""Where a reward model runs, and what happens when it cannot answer.

- In the loop (`where = "env"`): the env calls the source every step. Only for cheap models
  (the small success classifier: about a millisecond per 64x64 frame on a CPU, measured by
  `robolearn reward eval`). `GuardedReward` turns a crash or a NaN score into a MISSING reward
  (NaN, flagged in `info["reward_missing"]`), never a 0, and the loop keeps its rate.
- Beside the learner (`where = "learner"`): the actor sends transitions with a placeholder
  reward; the learner's `TransitionLabeler` scores each `next_obs` batch as it arrives, before
  it enters replay, and drops transitions it has no answer for (the actor never waits).
- In a process of its own (`where = "server"`, `address`, `timeout_s`, `max_held`): `robolearn
  reward serve` loads the model with `build_model` and scores with `TransitionLabeler`
  (runtime/reward_server.py); the learner asks it, and holds transitions while it is down
  (runtime/reward_client.py). The actor's side is as for "learner".

The `[reward]` table of a launch file (and `reward_source=` for gymnasium.make, which also
takes a model folder path or this table as a dict) is read into `RewardConfig`.
"""
from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from robolearn.errors import ConfigError
from robolearn.reward_config import RewardConfig, reward_config
from robolearn.rewards.base import MISSING, RewardModelError

log = logging.getLogger(__name__)
def build_model(cfg: RewardConfig):
    """The RewardSource a config names (not yet guarded), under the gripper check when
    `require_grasp` is set."""
    source = _build_model(cfg)
    if cfg.require_grasp:
        from robolearn.rewards.grasp_check import GripperHoldCheck

        return GripperHoldCheck(source)
    return source


def _build_model(cfg: RewardConfig):
    from robolearn.rewards.model_versions import ReloadingReward, current_dir, is_versioned

    kind = cfg.kind
    if kind == "reach_distance":  # ArmReach's rule as a model folder (rewards/reach_distance.py)
        from robolearn.rewards.reach_distance import ReachDistanceReward

        if not cfg.model:
            raise ConfigError("[reward] kind='reach_distance' needs model = \"DIR\" (save_reach_distance)")
        return ReachDistanceReward(cfg.model, threshold=cfg.threshold)
    if kind == "cube_finder":   # ArmPush: the task's reward at the camera's cube position
        from robolearn.rewards.push_camera import CubeFinderPushReward

        return CubeFinderPushReward(cfg.model, hidden=cfg.hidden)
    versioned = bool(cfg.model) and is_versioned(cfg.model)  # retrained in the session: follow CURRENT
    if kind is None:
        from robolearn.rewards.checkpoint import read_meta

        kind = read_meta(current_dir(cfg.model) if versioned else cfg.model)["kind"]
        if kind == "reach_distance":
            return _build_model(RewardConfig(**{**cfg.__dict__, "kind": kind}))
    if kind in ("classifier", "progress") and not cfg.model:
        raise ConfigError(f"[reward] kind={kind!r} needs model = \"DIR\" (from `robolearn reward train`)")
    if versioned:
        if kind != "classifier":
            raise ConfigError(f"[reward] model {cfg.model}: versioned (retrained) models are classifiers, "
                              f"this one is {kind!r}")
        return ReloadingReward(cfg.model, threshold=cfg.threshold, device=cfg.device)
    if kind == "classifier":
        from robolearn.rewards.classifier import ClassifierReward

        return ClassifierReward(cfg.model, threshold=cfg.threshold, device=cfg.device)
    if kind == "progress":
        from robolearn.rewards.progress import ProgressReward

        return ProgressReward(cfg.model, device=cfg.device)
    if kind == "clip":
        from robolearn.rewards.vlm import CLIPReward

        if not cfg.model:
            raise ConfigError("[reward] kind='clip' needs model = \"DIR\": a local CLIP folder (see docs/rewards.md)")
        return CLIPReward(cfg.model, goal=cfg.goal, baseline=cfg.baseline, alpha=cfg.alpha,
                          threshold=cfg.threshold, camera=cfg.camera, device=cfg.device)
    from robolearn.rewards.human import HumanLabelReward

    return HumanLabelReward()  # fed by a device: HumanLabelReward.tap / attach_human_labels


def make_reward_source(spec: Any):
    """`reward_source=` for gymnasium.make: a RewardSource object, a model folder path, or a
    `[reward]` table (dict). Path/dict sources come wrapped in `GuardedReward`."""
    if spec is None:
        return None
    if isinstance(spec, (str, os.PathLike)):
        if not Path(spec).exists():
            raise RewardModelError(f"reward_source={str(spec)!r}: no such model folder (train one with "
                                   "`robolearn reward train DATASET --kind classifier --out DIR`)")
        return GuardedReward(build_model(RewardConfig(model=str(spec))))
    if isinstance(spec, (dict, RewardConfig)):
        return GuardedReward(build_model(reward_config(spec, "reward_source")))
    if not callable(spec) or not hasattr(spec, "reset"):
        raise ConfigError(f"reward_source={spec!r}: pass a RewardSource (reset() + __call__(obs, info)), "
                          "a model folder path, or a [reward] table as a dict")
    return spec


class GuardedReward:
    """Wraps a RewardSource: an exception or a non-finite reward gives MISSING for that step
    (counted in `missing`), not a crash of the control loop and never a 0 reward. A source
    that was never able to start (a bad path) fails at construction instead, loudly."""

    def __init__(self, inner):
        self.inner = inner
        self.missing = 0
        self.calls = 0

    def bind(self, env) -> None:
        if hasattr(self.inner, "bind"):
            self.inner.bind(env)

    def reset(self) -> None:
        try:
            self.inner.reset()
        except Exception as exc:  # noqa: BLE001 - a dead model must not stop the robot
            log.error("reward model reset failed: %s", exc)

    @property
    def latencies(self):
        return getattr(self.inner, "latencies", [])

    def __call__(self, obs: dict, info: dict) -> tuple[float, bool]:
        self.calls += 1
        try:
            reward, success = self.inner(obs, info)
            reward = float(reward)
        except RewardModelError:
            raise  # a configuration error (wrong camera/size): the user must fix it
        except Exception as exc:  # noqa: BLE001 - model process gone, CUDA error, ...
            self.missing += 1
            if self.missing in (1, 10, 100, 1000):
                log.error("reward model failed (%d steps so far), reward labelled missing: %s", self.missing, exc)
            return MISSING, False
        if not math.isfinite(reward):
            self.missing += 1
            return MISSING, False
        return reward, bool(success)


class TransitionLabeler:
    """Beside the learner: label a batch of transitions from their `next_obs` before replay.

    Returns (reward, success, ok) arrays; `ok` is False where the model had no answer (those
    transitions are dropped by the learner, and counted)."""

    def __init__(self, source):
        self.source = source if isinstance(source, GuardedReward) else GuardedReward(source)

    def label(self, next_obs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = len(next(iter(next_obs.values())))
        reward = np.full(n, np.nan, np.float32)
        success = np.zeros(n, bool)
        for i in range(n):
            r, s = self.source({k: v[i] for k, v in next_obs.items()}, {})
            reward[i], success[i] = r, s
        ok = np.isfinite(reward)
        return reward, success & ok, ok


class PendingReward:
    """The actor's reward source when the model runs beside the learner: every step is
    "labelled later" (reward 0 placeholder, never stored: the learner relabels each transition
    before replay), and success/termination wait for that label too."""

    def reset(self) -> None:
        pass

    def __call__(self, obs: dict, info: dict) -> tuple[float, bool]:
        return 0.0, False


def actor_env_kwargs(env_kwargs: dict, reward: dict) -> dict:
    """env kwargs for an actor's env under a `[reward]` table: the model itself in the loop
    (where = "env"), or `PendingReward` when the learner labels (where = "learner", or "server":
    the learner asks `robolearn reward serve`, runtime/reward_client.py)."""
    if not reward or reward.get("kind") == "human":
        return dict(env_kwargs)
    cfg = reward_config(reward)
    later = cfg.where in ("learner", "server")  # the learner labels (itself, or by asking the server)
    return {**env_kwargs, "reward_source": PendingReward() if later else dict(reward)}


def learner_labeler(reward: dict, observation_space) -> "TransitionLabeler | None":
    """The learner's labeler for `where = "learner"` (None otherwise); the transitions must
    carry the model's cameras."""
    if not reward:
        return None
    cfg = reward_config(reward)
    if cfg.where != "learner":
        return None
    labeler = TransitionLabeler(build_model(cfg))
    need = getattr(labeler.source.inner, "cameras", [])
    have = list(getattr(observation_space, "spaces", {}))
    missing = [c for c in need if c not in have]
    if missing:
        raise ConfigError(f"[reward] where='learner' needs camera(s) {missing} in the transitions, which carry "
                          f"{have}; set obs = \"both\" (and env_kwargs camera/image_size as the model was trained)")
    return labeler

"""Trainer construction: a `TrainConfig` becomes a `Trainer` with the hooks and env wrappers
its options ask for.

Why here, at the top: `resets = "learned"` needs the reset-free hooks (robolearn/resets),
`[reward] kind = "human"` and `intervene = DEVICE` need teleop devices (robolearn/teleop), all
layers above the trainer (robolearn/policies/trainer.py), which receives them as objects.
`robolearn train`, the benchmarks and scripts build trainers through these functions.
"""
from __future__ import annotations

from pathlib import Path

from robolearn.policies.train_config import TrainConfig
from robolearn.policies.trainer import Trainer
from robolearn.policies.trainer_hooks import TrainerHooks
from robolearn.resets.learned import make_forward_backward_hooks
from robolearn.resets.practice_trainer import PracticeHooks
from robolearn.rewards.human import attach_human_labels
from robolearn.teleop.intervention import maybe_intervene


def make_hooks(cfg: TrainConfig, resumed_state: dict | None = None) -> TrainerHooks:
    """The hooks `cfg.resets` asks for: env (plain), learned (forward/backward agents,
    robolearn/resets/learned.py) or practice (robolearn/resets/practice_trainer.py)."""
    if cfg.resets == "learned":
        return make_forward_backward_hooks(cfg, resumed_state)
    if cfg.resets == "practice":
        return PracticeHooks(cfg)
    return TrainerHooks()


def env_wrapper(cfg: TrainConfig):
    """The training env's human in the loop: with `[reward] kind = "human"` the `intervene`
    device (default keyboard) both drives and labels success; otherwise `intervene = DEVICE`
    lets a person take over (no wrapper when unset)."""
    if cfg.reward.get("kind") == "human":
        return lambda env: attach_human_labels(env, cfg.intervene or "keyboard")
    if cfg.intervene:
        return lambda env: maybe_intervene(env, cfg.intervene)
    return None


def build_trainer(cfg: TrainConfig, resumed_state: dict | None = None) -> Trainer:
    """A `Trainer` for `cfg` (validated first, so a bad option fails before any env is built)."""
    cfg = cfg.validate()
    return Trainer(cfg, hooks=make_hooks(cfg, resumed_state), wrap_env=env_wrapper(cfg),
                   _resumed_state=resumed_state)


def resume_trainer(run_dir: str | Path, steps: int | None = None, progress: bool | None = None,
                   video: bool | None = None) -> Trainer:
    """The run in `run_dir`, rebuilt from its latest checkpoint with its own kind of hooks."""
    return Trainer.resume(run_dir, steps=steps, progress=progress, video=video, build=build_trainer)


def train(cfg: TrainConfig) -> dict:
    """Run a whole training (convenience for scripts and the benchmarks)."""
    trainer = build_trainer(cfg)
    try:
        return trainer.run()
    finally:
        trainer.close()

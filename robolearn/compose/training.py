"""Trainer construction: a `TrainConfig` becomes a `Trainer` with the hooks and env wrappers
its options ask for.

Why here, at the top: `resets = "learned"` needs the reset-free hooks (robolearn/resets),
`[reward] kind = "human"` and `intervene = DEVICE` need teleop devices (robolearn/teleop), all
layers above the trainer (robolearn/policies/trainer.py), which receives them as objects.
`robolearn train`, the benchmarks and scripts build trainers through these functions.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from robolearn.errors import ConfigError
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


def prior_relabeler(cfg: TrainConfig):
    """`relabel(transitions, path) -> rewards` for earlier runs' data ([replay] prior_runs) whose
    stored reward means something else than this run's: this run's `[reward]` model scores each
    transition's `next_obs` (NaN where it has no answer: that transition is dropped, counted).
    None when the run has no reward model (a human's labels cannot score recorded data)."""
    if not cfg.reward or cfg.reward.get("kind") == "human" or not cfg.prior_runs:
        return None
    from robolearn.reward_config import reward_config
    from robolearn.rewards.serving import TransitionLabeler, build_model

    labeler = []  # built on first use: only when some prior data needs it

    def relabel(transitions: dict, path: str):
        if not labeler:
            labeler.append(TransitionLabeler(build_model(reward_config(cfg.reward))))
        need = list(getattr(labeler[0].source.inner, "cameras", []) or [])
        have = sorted(transitions["next_obs"])
        missing = [c for c in need if c not in have]
        if missing:
            raise ConfigError(f"[replay] prior_runs {path}: the [reward] model reads camera(s) {missing}, "
                              f"but the stored observations carry {have}; relabelling needs them: train "
                              "with obs = \"both\" (and the model's camera options) or drop this path")
        reward, _, _ = labeler[0].label(transitions["next_obs"])
        return reward

    return relabel


def build_trainer(cfg: TrainConfig, resumed_state: dict | None = None, relabel_prior=None) -> Trainer:
    """A `Trainer` for `cfg` (validated first, so a bad option fails before any env is built).
    `relabel_prior` replaces the `[reward]` model's relabelling of prior runs (tests)."""
    cfg = cfg.validate()
    starting_from = cfg.init_from and resumed_state is None
    if starting_from and cfg.buffer_size is None:  # its replay loads into a buffer of its size
        from robolearn.policies.trainer_state import init_state

        cfg = dataclasses.replace(cfg, buffer_size=init_state(cfg.init_from)[1].get("replay_capacity"))
    if relabel_prior is None and resumed_state is None:
        relabel_prior = prior_relabeler(cfg)
    trainer = Trainer(cfg, hooks=make_hooks(cfg, resumed_state), wrap_env=env_wrapper(cfg),
                      _resumed_state=resumed_state, relabel_prior=relabel_prior)
    if starting_from:
        from robolearn.policies.trainer_state import init_trainer_from

        try:
            done = init_trainer_from(trainer, cfg.init_from)
        except BaseException:
            trainer.close()
            raise
        print(f"init_from {done['run']}: agent and {done['replay']} replay transitions of its "
              f"checkpoint at {done['env_steps']} env steps", flush=True)
    return trainer


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

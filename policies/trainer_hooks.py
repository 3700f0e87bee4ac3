"""What differs between kinds of training, as hooks of the one `Trainer` loop.

Why: plain training, reset-free training with forward/backward agents
(robolearn/resets/learned.py) and autonomous practice (robolearn/resets/practice_trainer.py)
share the order of events and everything that keeps a run safe (Ctrl-C, checkpoints, resume,
run-folder protection, NaN rewards, interventions, failed resets); only these decisions differ.
The default is plain training on the env's own resets.
"""
from __future__ import annotations

from pathlib import Path

import gymnasium as gym

from robolearn.policies.train_config import TrainConfig


class TrainerHooks:
    """Plain training on the env's own resets. Subclasses change only what differs; every
    method gets the `Trainer` and may read its env, agent, replay and counters."""

    #: `cfg.resets` value these hooks implement (kept in config.json and summary.json)
    kind = "env"

    # ----------------------------------------------------------------- construction
    def env_kwargs(self, cfg: TrainConfig) -> dict:
        """Options of the training env (e.g. physical resets)."""
        return cfg.env_kwargs

    def replay_capacity(self, cfg: TrainConfig) -> int | None:
        """Online replay capacity (None: `cfg.steps`)."""
        return cfg.buffer_size

    def wrap_env(self, env: gym.Env) -> gym.Env:
        return env

    def setup(self, trainer, resumed_state: dict | None) -> None:
        """After the env, agent and replay exist: build what else the run needs."""

    def config_record(self, trainer) -> dict:
        """Extra keys of config.json."""
        return {}

    # ------------------------------------------------------------------------ loop
    def first_reset_options(self, trainer) -> dict:
        return {}

    def acting_agent(self, trainer):
        return trainer.agent

    def store(self, trainer, obs, action, reward, nxt, terminated, truncated, info,
              intervened) -> tuple[float, bool, bool, bool]:
        """Store the step; return (reward for the episode return, terminated, truncated,
        success) as the episode sees them."""
        stored = trainer.add_transition(obs, action, reward, nxt, terminated, truncated, intervened)
        return (float(reward) if stored else 0.0), bool(terminated), bool(truncated), \
            bool(info.get("success", False))

    def update(self, trainer) -> None:
        """Called once per env step after the main agent's updates (once learning started)."""

    def end_episode(self, trainer, rec: dict) -> dict:
        """An episode ended (`rec` is its metrics record, which may be edited); return the
        `reset()` options of the next one."""
        return {}

    def counts_as_episode(self, rec: dict) -> bool:
        return True

    def note_reset(self, trainer, reset: dict | None, ended: dict | None) -> dict | None:
        """The reset record to log with the coming episode (None: none), and add it to
        `trainer.reset_stats`; `ended` is the record of the episode before (None at the start)."""
        if reset:
            trainer.reset_stats.add(reset)
        return reset

    def summary(self, trainer) -> dict:
        """Extra keys of summary.json."""
        return {}

    # --------------------------------------------------------------------- checkpoints
    def checkpoint_state(self, trainer) -> dict:
        """JSON-able state of the hooks (loop phase, counters), kept in trainer.json."""
        return {}

    def checkpoint_buffers(self, trainer) -> dict:
        """Other replay buffers to save, {folder name: buffer or None}."""
        return {}

    def write_checkpoint_files(self, trainer, folder: Path) -> None:
        """Other learners' weights (safetensors) into the checkpoint folder."""

    def restore(self, trainer, ckpt: Path, state: dict) -> None:
        """Load what `checkpoint_state` / `checkpoint_buffers` / `write_checkpoint_files` saved."""

    def resume_reset_options(self, trainer) -> dict:
        """`reset()` options of the first episode after a resume (the checkpoint was taken at an
        episode boundary, after `end_episode`)."""
        return {}


def reset_record(info: dict) -> dict | None:
    """An episode's reset record (robolearn envs: kind, seconds, failures, prompts) as logged:
    wall-clock time stays out of metrics.jsonl, so a resumed run logs what a straight one does."""
    rec = info.get("reset")
    return {k: v for k, v in rec.items() if k != "wall_s"} if rec else None

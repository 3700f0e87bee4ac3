"""Learning by autonomous practice (FastRLAP): `robolearn train ... --resets practice`.

Why hooks and not a new loop: practice changes only where episodes end and how the world is
put back, not the order of events (act -> step -> store -> updates). So the training env runs
with `reset_mode="physical"` inside `AutonomousPractice`: a crash ends the learner's episode
(terminated), a stall truncates it, and the next `reset()` is the task's physical reset (the
car's `RecoverOntoTrack`), whose steps the learner never sees or stores. Everything else (demos
/ prior data, logging, checkpoints, resume, evaluation) is `Trainer`'s. Evaluation keeps
teleport resets (`Trainer`'s in sim) so laps are timed from the start line, as the baseline's.
"""
from __future__ import annotations

from robolearn.errors import ConfigError
from robolearn.policies.trainer_hooks import TrainerHooks
from robolearn.resets.practice import AutonomousPractice


class PracticeHooks(TrainerHooks):
    """`Trainer` on a physical-reset env wrapped in `AutonomousPractice`; summary.json gains
    `practice` (collisions, stalls: the episode ends the practice caused)."""

    kind = "practice"

    def __init__(self, cfg):
        if not cfg.env.startswith("robolearn/"):
            raise ConfigError("--resets practice needs a robolearn env (it runs them with reset_mode='physical')")

    def env_kwargs(self, cfg) -> dict:
        return {**cfg.env_kwargs, "reset_mode": "physical"}

    def wrap_env(self, env):
        return AutonomousPractice(env)   # ConfigError for a task without progress/collisions

    def summary(self, trainer) -> dict:
        env = trainer.env
        return {"resets_mode": "practice",
                "practice": {"collisions": env.collisions, "stalls": env.stalls,
                             "teleports": env.unwrapped.teleport_count()}}

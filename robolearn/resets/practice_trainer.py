"""Learning by autonomous practice (FastRLAP): `robolearn train ... --resets practice`.

Why a `Trainer` subclass and not a new loop: practice changes only where episodes end and how
the world is put back, not the order of events (act -> step -> store -> updates). So the
training env runs with `reset_mode="physical"` inside `AutonomousPractice`: a crash ends the
learner's episode (terminated), a stall truncates it, and the next `reset()` is the task's
physical reset (the car's `RecoverOntoTrack`), whose steps the learner never sees or stores.
Everything else (demos / prior data, logging, checkpoints, resume, evaluation) is `Trainer`'s.
Evaluation keeps teleport resets (`Trainer`'s in sim) so laps are timed from the start line, as the
baseline's.
"""
from __future__ import annotations

from dataclasses import replace

from robolearn.errors import ConfigError
from robolearn.policies.training import Trainer
from robolearn.resets.practice import AutonomousPractice


class PracticeTrainer(Trainer):
    """`Trainer` on a physical-reset env wrapped in `AutonomousPractice`; summary.json gains
    `practice` (collisions, stalls: the episode ends the practice caused)."""

    def _build(self, cfg, _resumed_state):
        if not cfg.env.startswith("robolearn/"):
            raise ConfigError("--resets practice needs a robolearn env (it runs them with reset_mode='physical')")
        phys = {**cfg.env_kwargs, "reset_mode": "physical"}
        super()._build(replace(cfg, env_kwargs=phys), _resumed_state)
        self.env = AutonomousPractice(self.env)   # ConfigError for a task without progress/collisions

    def _finish(self) -> dict:
        summary = super()._finish()
        summary.update(resets_mode="practice",
                       practice={"collisions": self.env.collisions, "stalls": self.env.stalls,
                                 "teleports": self.env.unwrapped.teleport_count()})
        self._write_json("summary.json", summary)
        return summary

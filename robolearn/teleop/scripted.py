"""The scripted "device": the task's scripted controller behind the Device protocol.

Why: every teleop path (record, teleop, interventions) must be testable without a human or
hardware. The scripted controller solves the task from the env itself, so a recording made
with it is a real demonstration set (and sim replays of it are deterministic).

Optional `end_on_success`: emit a "success" event once the env reported success for
`success_hold` consecutive steps, as a human pressing Enter would.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from robolearn.teleop.base import DeviceCommand, action_dim, clip_action


@dataclass
class ScriptedConfig:
    end_on_success: bool = False   # emit "success" when the env reports it
    success_hold: int = 1          # ... for this many consecutive steps
    noise: float = 0.0             # Gaussian action noise (diverse demos), 0 = exact
    seed: int = 0


class ScriptedDevice:
    name = "scripted"
    wait_for_operator = False  # no human to wait for: episodes start at once

    def __init__(self, env, config: ScriptedConfig | None = None):
        from robolearn.tasks.scripted import make_scripted

        self.config = config or ScriptedConfig()
        self.env = env
        self.controller = make_scripted(env)
        self.dim = action_dim(env)
        self._rng = np.random.default_rng(self.config.seed)
        self._success_run = 0

    def observe(self, info: dict) -> None:
        """Feed the last step's info (the recorder does) so `end_on_success` can fire."""
        self._success_run = self._success_run + 1 if info.get("success") else 0

    def read(self, obs=None) -> DeviceCommand:
        if obs is None:
            obs = getattr(self.env.unwrapped, "_last_obs", None)
        a = np.asarray(self.controller.act(obs), dtype=np.float64)
        if self.config.noise > 0:
            a = a + self._rng.normal(0.0, self.config.noise, size=a.shape)
        events = set()
        if self.config.end_on_success and self._success_run >= self.config.success_hold:
            events.add("success")
        return DeviceCommand(clip_action(a, self.dim), True, events)

    def reset(self) -> None:
        self.controller.reset()
        self._success_run = 0

    def help(self) -> str:
        return "scripted: the task's scripted controller drives (Ctrl-C stops)"

    def close(self) -> None:
        pass

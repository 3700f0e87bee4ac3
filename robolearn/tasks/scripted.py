"""Scripted controllers for any env: `make_scripted(env)` finds the task's own controller."""
from __future__ import annotations

import gymnasium as gym

from robolearn.errors import ConfigError
from robolearn.tasks.base import Controller


def make_scripted(env: gym.Env) -> Controller:
    base = env.unwrapped
    factory = getattr(base, "scripted_controller", None)
    if factory is None:
        raise ConfigError(f"{base.spec.id if base.spec else base!r} has no scripted controller")
    return factory()

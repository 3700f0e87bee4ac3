"""Gymnasium registration of every `robolearn/...` env ID.

Why a module of its own: importing it is cheap (entry points are strings, resolved by
Gymnasium when an env is made), so `import robolearn`, the CLI's `envs` listing and the
learners' ID checks need none of the layers that build an env. The arm and car entry points
name the composition layer (`robolearn.compose.envs`), which turns options into objects.
"""
from __future__ import annotations

import importlib
from typing import Callable

import gymnasium as gym

from robolearn.errors import ConfigError


def register_all() -> None:
    """Register the arm, car and dm_control IDs (idempotent)."""
    from robolearn.sim import dmc
    from robolearn.tasks.arm import MAX_EPISODE_STEPS as ARM_STEPS
    from robolearn.tasks.car import ENV_ID as CAR_ID
    from robolearn.tasks.car import MAX_EPISODE_STEPS as CAR_STEPS

    for task, env_name in (("reach", "ArmReach"), ("push", "ArmPush"), ("lift", "ArmLift")):
        register_once(f"robolearn/{env_name}-v0", entry_point="robolearn.compose.envs:make_arm_env",
                      kwargs={"task": task}, max_episode_steps=ARM_STEPS[task])
    register_once(CAR_ID, "robolearn.compose.envs:make_car_env", max_episode_steps=CAR_STEPS)
    for env_id, kwargs in dmc.registrations():
        register_once(env_id, entry_point="robolearn.sim.dmc:DmcEnv", kwargs=kwargs)


def resolve_env_id(env_id: str) -> str:
    """Gymnasium's `module:EnvId-v0` syntax: import `module` (which registers its envs) and
    return the plain ID; a plain ID is returned as it is."""
    if ":" not in env_id:
        return env_id
    module, _, plain = env_id.partition(":")
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(f"env {env_id!r}: cannot import module {module!r} ({exc}); install it "
                          "or put it on PYTHONPATH") from None
    return plain


def registered_ids() -> list[str]:
    """Env IDs in the `robolearn/` namespace, sorted."""
    register_all()
    return sorted(k for k in gym.registry if k.startswith("robolearn/"))


def register_once(env_id: str, entry_point: str | Callable, **kwargs) -> None:
    if env_id not in gym.registry:
        gym.register(id=env_id, entry_point=entry_point, **kwargs)

"""Argument checks shared by every env, wrapper and task: one wording for one mistake.

Why at the bottom: the tasks, the dm_control adapter and the latency wrapper (all below
`robolearn.env`) reject a bad action or option exactly as `RobotEnv` does.
"""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from robolearn.errors import ConfigError, InvalidActionError

OBS_MODES = ("state", "pixels", "both")
# Actions are rejected beyond this (float32 rounding of a tanh squash stays inside it).
ACTION_TOLERANCE = 1e-5


def validate_action(action, space: gym.spaces.Box) -> np.ndarray:
    """Return `action` as float64 of `space`'s shape, or raise InvalidActionError.

    Module-level so every env and action wrapper (dm_control adapter, latency) rejects bad
    actions the same way `RobotEnv` does.
    """
    try:
        a = np.asarray(action, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidActionError(f"action {action!r} is not numeric: {exc}") from None
    shape = space.shape
    if a.shape != shape:
        raise InvalidActionError(f"action has shape {a.shape}, expected {shape}")
    lo, hi = space.low, space.high
    # One comparison pass on the hot path; NaN fails it too and is reported as NaN below.
    if not ((a >= lo - ACTION_TOLERANCE) & (a <= hi + ACTION_TOLERANCE)).all():
        if not np.all(np.isfinite(a)):
            bad = np.flatnonzero(~np.isfinite(a)).tolist()
            raise InvalidActionError(f"action has NaN/inf at indices {bad}: {a.tolist()}")
        bad = np.flatnonzero((a < lo - ACTION_TOLERANCE) | (a > hi + ACTION_TOLERANCE)).tolist()
        raise InvalidActionError(
            f"action out of range [-1, 1] at indices {bad}: {a.tolist()} "
            "(squash or clip in the policy; the env does not clamp silently)")
    return np.minimum(np.maximum(a, lo), hi)  # == np.clip(a, lo, hi), without its overhead


def check_obs_mode(obs: str) -> None:
    if obs not in OBS_MODES:
        raise ConfigError(f"obs={obs!r}: choose one of {', '.join(OBS_MODES)}")


def check_control_hz(control_hz: float, max_hz: float = 1000.0) -> float:
    try:
        hz = float(control_hz)
    except (TypeError, ValueError):
        raise ConfigError(f"control_hz={control_hz!r} is not a number") from None
    if not np.isfinite(hz) or hz <= 0 or hz > max_hz:
        raise ConfigError(f"control_hz={control_hz!r}: must be in (0, {max_hz}]")
    return hz


def check_choice(name: str, value: Any, choices: tuple) -> Any:
    if value not in choices:
        raise ConfigError(f"{name}={value!r}: choose one of {', '.join(map(repr, choices))}")
    return value

"""The learners' env: `gymnasium.make` plus what every learner expects of it.

Why: learners need dict observations, [-1, 1] actions and clear errors for unknown IDs, on any
Gymnasium env; and sim training adds fitted physics (`sim_params`), a reality gap, or a frozen
perception model. Strings inside `env_kwargs` (a reward model folder, a prompt name) are
resolved by the envs' composition-layer entry points (robolearn/compose/envs.py).
"""
from __future__ import annotations

import difflib

import gymnasium as gym
import numpy as np

from robolearn.errors import ConfigError


def perception_digest(env: gym.Env) -> str | None:
    """sha256 of the frozen localiser's weights in `env` (None without perception)."""
    from robolearn.policies.perception import find_localiser

    loc = find_localiser(env)
    return loc.digest if loc is not None else None


class DictObs(gym.ObservationWrapper):
    """Expose a plain Box observation as {"state": obs} so any Gymnasium env (Pendulum-v1,
    ...) fits the dict-observation contract the learners use."""

    def __init__(self, env):
        super().__init__(env)
        space = env.observation_space
        self.observation_space = gym.spaces.Dict({"state": gym.spaces.Box(
            space.low.astype(np.float32), space.high.astype(np.float32), dtype=np.float32)})

    def observation(self, obs):
        return {"state": np.asarray(obs, dtype=np.float32)}


def make_env(env_id: str, obs: str = "state", render_mode: str | None = None,
             max_episode_steps: int | None = None, env_kwargs: dict | None = None,
             reality_gap: dict | None = None, sim_params: str | None = None) -> gym.Env:
    """gymnasium.make with a clear error for unknown IDs; robolearn envs get `obs=`;
    `sim_params` (a calibrate-sim TOML) sets the sim's fitted physics; a non-empty
    `reality_gap` table wraps the env with domain randomization / latency / jitter."""
    from robolearn.registry import registered_ids, resolve_env_id

    ours = registered_ids()
    env_id = resolve_env_id(env_id)  # "module:EnvId-v0" imports module first, as gymnasium does
    if env_id not in gym.registry:
        close = difflib.get_close_matches(env_id, list(gym.registry), n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ConfigError(f"unknown env {env_id!r}.{hint} Registered robolearn envs: "
                          f"{', '.join(ours) or '(none)'} (run `robolearn envs`).")
    kwargs = dict(env_kwargs or {})
    if env_id.startswith("robolearn/"):
        kwargs.setdefault("obs", obs)
    elif obs != "state":
        raise ConfigError(f"obs={obs!r} is only supported for robolearn/ envs; {env_id} gives state vectors")
    if max_episode_steps is not None:
        kwargs["max_episode_steps"] = max_episode_steps
    # env_kwargs perception = DIR: a frozen sim-pretrained localiser appends its estimate to state
    from robolearn.policies.perception import PerceptionFeatures, wrap_env_kwargs

    kwargs, localiser = wrap_env_kwargs(env_id, obs, kwargs)
    try:
        env = gym.make(env_id, render_mode=render_mode, **kwargs)
    except TypeError as exc:
        raise ConfigError(f"env {env_id}: bad env_kwargs {env_kwargs}: {exc}") from None
    if localiser is not None:
        env = PerceptionFeatures(env, localiser, keep_images=obs in ("pixels", "both"))
    if not isinstance(env.observation_space, gym.spaces.Dict):
        if not isinstance(env.observation_space, gym.spaces.Box):
            raise ConfigError(f"env {env_id}: observation space {env.observation_space} is neither Dict nor Box")
        env = DictObs(env)
    if not isinstance(env.action_space, gym.spaces.Box):
        raise ConfigError(f"env {env_id}: the SAC family needs a continuous Box action space, "
                          f"got {env.action_space}")
    if not (np.all(env.action_space.low == -1) and np.all(env.action_space.high == 1)):
        # learners emit [-1, 1]; map it onto the env's bounds (robolearn envs already are [-1, 1])
        env = gym.wrappers.RescaleAction(env, -1.0, 1.0)
    if sim_params:
        from robolearn.sim.sysid import apply_sim_params, load_sim_params

        try:
            env = apply_sim_params(env, load_sim_params(sim_params))
        except BaseException:
            env.close()
            raise
    if reality_gap:
        from robolearn.sim.randomization import RealityGapConfig, apply_reality_gap

        try:
            env = apply_reality_gap(env, RealityGapConfig.from_dict(reality_gap))
        except BaseException:
            env.close()
            raise
    return env


#: env options that only say how episodes are reset: a sim evaluation drops them
RESET_OPTIONS = ("reset_mode", "reset_on_failure", "reset_prompt")


def evaluation_env_kwargs(env_kwargs: dict) -> dict:
    """The eval env's options: the training env's, but in sim always with teleport resets, so a
    policy trained from physical, practice or learned resets is judged from the task's own start
    distribution, the same starts as a teleport-trained one (on `backend="real"` physical resets
    are the only kind and nothing changes)."""
    if env_kwargs.get("backend", "sim") == "real":
        return dict(env_kwargs)
    return {k: v for k, v in env_kwargs.items() if k not in RESET_OPTIONS}

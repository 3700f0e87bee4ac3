"""Named presets of the one SAC-family learner, and `make_agent`.

Each preset is a set of `AgentConfig` overrides following its paper (see docs/learners.md).
`drq` (pixels + conv encoder + random shift) composes with the others: `make_agent("rlpd",
obs_space, act_space, pixels=True)` is SERL's pixel RLPD.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from robolearn.errors import ConfigError
from robolearn.policies.sac import Agent, AgentConfig

# Overrides of AgentConfig per preset. policy_delay=0 means "actor once per env step" (every
# `utd` critic updates, as REDQ/DroQ/RLPD do), so overriding utd keeps that schedule.
PRESETS: dict[str, dict[str, Any]] = {
    # Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications"
    "sac": {},
    # Chen et al. 2021, "Randomized Ensembled Double Q-Learning" (N=10, M=2, G=20)
    "redq": dict(num_critics=10, num_target_min=2, actor_q="mean", utd=20, policy_delay=0),
    # Hiraoka et al. 2022, "Dropout Q-Functions for Doubly Efficient RL"
    "droq": dict(num_critics=2, critic_dropout=0.01, critic_layer_norm=True, actor_q="mean",
                 utd=20, policy_delay=0),
    # Bhatt et al. 2024, "CrossQ: Batch Normalization in Deep RL for Greater Sample Efficiency
    # and Simplicity"
    "crossq": dict(target_network=False, critic_batch_renorm=True, critic_hidden=(2048, 2048),
                   adam_beta1=0.5, actor_lr=1e-3, critic_lr=1e-3, temperature_lr=1e-3, utd=1,
                   policy_delay=3),
    # Ball et al. 2023, "Efficient Online Reinforcement Learning with Offline Data"
    "rlpd": dict(num_critics=10, num_target_min=2, critic_layer_norm=True, actor_q="mean",
                 utd=20, policy_delay=0, prior_fraction=0.5, target_entropy_scale=0.5),
    # Kostrikov et al. 2021 (DrQ) / Yarats et al. 2022 (DrQ-v2): pixels + random shift
    "drq": dict(pixels=True, init_temperature=0.1, target_entropy_scale=0.5, replay_capacity=100_000),
}


def _factory(name: str) -> Callable[..., Agent]:
    def build(observation_space, action_space, seed: int = 0, **overrides) -> Agent:
        return Agent(observation_space, action_space, make_config(name, **overrides), seed=seed)

    build.__name__ = f"make_{name}"
    build.__doc__ = f"Build the `{name}` preset (overrides: AgentConfig fields)."
    return build


ALGOS: dict[str, Callable[..., Agent]] = {name: _factory(name) for name in PRESETS}
_FIELDS = {f.name: f for f in dataclasses.fields(AgentConfig)}


def make_config(algo: str, **overrides) -> AgentConfig:
    """The preset's AgentConfig with `overrides` applied (unknown keys -> ConfigError)."""
    if algo not in PRESETS:
        raise ConfigError(f"unknown algo {algo!r}; choose one of: {', '.join(PRESETS)}")
    unknown = sorted(set(overrides) - set(_FIELDS) - {"algo"})
    if unknown:
        raise ConfigError(f"unknown option(s) {unknown} for algo {algo!r}; valid options: "
                          f"{', '.join(k for k in _FIELDS if k != 'algo')}")
    values = {**PRESETS[algo], **overrides, "algo": algo}
    for k, v in list(values.items()):  # TOML/JSON give lists where the config has tuples
        if isinstance(v, list):
            values[k] = tuple(v)
    return AgentConfig(**values).validate()


def make_agent(algo: str, observation_space, action_space, seed: int = 0, **overrides) -> Agent:
    """Build a learner by preset name, e.g. `make_agent("rlpd", obs_space, act_space,
    pixels=True, utd=10)`."""
    if algo not in ALGOS:
        raise ConfigError(f"unknown algo {algo!r}; choose one of: {', '.join(ALGOS)}")
    return ALGOS[algo](observation_space, action_space, seed=seed, **overrides)


def agent_from_state(state: dict, observation_space, action_space) -> Agent:
    """Rebuild an Agent from `Agent.state_dict()` (config included) and load it. For an
    asymmetric-critic agent (privileged="critic") and a space without `privileged` (the robot's),
    only the policy is loaded: that agent acts but does not train."""
    cfg = dict(state["config"])
    algo = cfg.pop("algo")
    agent = make_agent(algo, observation_space, action_space, seed=int(state.get("seed", 0)), **cfg)
    if agent.can_learn:
        agent.load_state_dict(state)
    else:
        agent.load_policy_state({f"{part}.{k}": v for part in ("actor", "encoder", "obs_norm")
                                 for k, v in state.get(part, {}).items()})
    return agent

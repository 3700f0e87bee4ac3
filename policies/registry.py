"""Named presets of the one SAC-family learner, and `make_agent`.

Each preset is a set of `AgentConfig` overrides following its paper (see docs/learners.md).
`drq` (pixels + conv encoder + random shift) composes with the others: `make_agent("rlpd",
obs_space, act_space, pixels=True)` is SERL's pixel RLPD.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from robolearn.errors import ConfigError
from robolearn.policies.agent_config import AgentConfig
from robolearn.policies.sac import Agent

# Overrides of AgentConfig per preset. policy_delay=0 means "actor once per env step" (every
# `utd` critic updates, as REDQ/DroQ/RLPD do), so overriding utd keeps that schedule.
PRESETS: dict[str, dict[str, Any]] = {
    # Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications"
    "sac": {},
    # Chen et al. 2021, "Randomized Ensembled Double Q-Learning" (N=10, M=2, G=20). Target
    # entropy -|A|, the reference code's 'auto': its default 'mbpo' is a per-task table for five
    # MuJoCo tasks that has no entry for ours (docs/learners.md "Fidelity").
    "redq": dict(num_critics=10, num_target_min=2, actor_q="mean", utd=20, policy_delay=0),
    # Hiraoka et al. 2022, "Dropout Q-Functions for Doubly Efficient RL" (built on REDQ's
    # code: same target-entropy rule as redq)
    "droq": dict(num_critics=2, critic_dropout=0.01, critic_layer_norm=True, actor_q="mean",
                 utd=20, policy_delay=0),
    # Bhatt et al. 2024, "CrossQ: Batch Normalization in Deep RL for Greater Sample Efficiency
    # and Simplicity"
    "crossq": dict(target_network=False, critic_batch_renorm=True, actor_batch_renorm=True,
                   critic_hidden=(2048, 2048),
                   adam_beta1=0.5, actor_lr=1e-3, critic_lr=1e-3, temperature_lr=1e-3, utd=1,
                   policy_delay=3),
    # Ball et al. 2023, "Efficient Online Reinforcement Learning with Offline Data". Its
    # sparse-task settings (Adroit; AntMaze adds num_target_min=1): no entropy term in the TD
    # target and 3x256 networks (the reference's hidden_dims is shared by actor and critics).
    # Our arm tasks end the episode on success, where an entropy bonus in the backup pays the
    # agent for not finishing; the locomotion settings (backup on, 2x256) are
    # `--set backup_entropy=true --set critic_hidden=[256,256] --set actor_hidden=[256,256]`.
    "rlpd": dict(num_critics=10, num_target_min=2, critic_layer_norm=True, actor_q="mean",
                 utd=20, policy_delay=0, prior_fraction=0.5, target_entropy_scale=0.5,
                 backup_entropy=False, critic_hidden=(256, 256, 256), actor_hidden=(256, 256, 256)),
    # Kostrikov et al. 2021 (DrQ) / Yarats et al. 2022 (DrQ-v2): pixels + random shift
    "drq": dict(pixels=True, init_temperature=0.1, target_entropy_scale=0.5, replay_capacity=100_000),
}


#: Named hardware profiles: options that make a preset fit a machine, applied under the user's
#: own options. `cpu`: the high-UTD ensembles cut to what a 2-core CPU trains in minutes (RLPD's
#: paper setting, 10 critics at UTD 20, is ~20x the work of 2 critics at UTD 5).
PROFILES: dict[str, dict[str, dict[str, Any]]] = {
    "cpu": {"rlpd": {"num_critics": 2, "utd": 5}, "redq": {"num_critics": 5, "utd": 5},
            "droq": {"utd": 5}},
}


def profile_overrides(profile: str | None, algo: str) -> dict[str, Any]:
    """The options profile `profile` gives `algo` ({} for none or for a preset it leaves alone)."""
    if not profile:
        return {}
    if profile not in PROFILES:
        raise ConfigError(f"unknown profile {profile!r}; choose one of: {', '.join(PROFILES)}")
    return dict(PROFILES[profile].get(algo, {}))


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
    if values.get("network") == "simba" and "normalize_obs" not in overrides:
        values["normalize_obs"] = True  # SimBa's running normaliser is part of the architecture
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
    # an option added after the checkpoint was written did not exist then: the learner ran
    # without it (its dataclass default), whatever the preset says today
    defaults = {f.name: f.default for f in dataclasses.fields(AgentConfig) if f.name != "algo"}
    cfg = {**{k: v for k, v in defaults.items() if k not in cfg}, **cfg}
    agent = make_agent(algo, observation_space, action_space, seed=int(state.get("seed", 0)), **cfg)
    if agent.can_learn:
        agent.load_state_dict(state)
    else:
        agent.load_policy_state({f"{part}.{k}": v for part in ("actor", "encoder", "obs_norm")
                                 for k, v in state.get(part, {}).items()})
    return agent

"""Replay buffers for an agent: the online replay, an optional prior-data buffer, the sampler.

Why one function: the trainer, the reset-free trainer's backward agent, the async learner and
fine-tuning each pair a buffer with an agent's n-step / discount and, with RLPD-style prior
data, draw a `prior_fraction` of every batch from the prior buffer (demos, interventions).
"""
from __future__ import annotations

from robolearn.data.replay import MixedSampler, ReplayBuffer, transitions_to_buffer


def n_step_gamma(agent_config) -> tuple[int, float]:
    return int(getattr(agent_config, "n_step", 1)), float(getattr(agent_config, "gamma", 0.99))


def make_buffer(observation_space, action_space, agent_config, capacity: int, seed: int) -> ReplayBuffer:
    n_step, gamma = n_step_gamma(agent_config)
    return ReplayBuffer(observation_space, action_space, capacity, n_step=n_step, gamma=gamma, seed=seed)


def build_replays(observation_space, action_space, agent_config, capacity: int, seed: int,
                  demos: dict | None = None, prior_capacity: int = 0,
                  prior_fraction: float | None = None, prior_data: list[dict] | None = None,
                  demos_in_prior: bool = True):
    """(replay, prior, sampler). With `prior_capacity` > 0 a prior buffer (seeded `seed + 1`)
    holds `demos` (unless `demos_in_prior` is False) then `prior_data` (earlier runs'
    transitions, Replay across Experiments: policies/prior_runs.py), and the sampler mixes
    `prior_fraction` of it into every batch; otherwise the demos, if any, seed the online replay."""
    replay = make_buffer(observation_space, action_space, agent_config, capacity, seed)
    prior, sampler = None, replay
    if prior_capacity:
        prior, sampler = add_prior(replay, observation_space, action_space, agent_config,
                                   demos if demos_in_prior else None, prior_capacity, seed + 1,
                                   prior_fraction)
        for data in prior_data or []:
            transitions_to_buffer(data, prior)
        if demos is not None and not demos_in_prior:
            transitions_to_buffer(demos, replay)
    elif demos is not None:
        transitions_to_buffer(demos, replay)
    return replay, prior, sampler


def add_prior(replay, observation_space, action_space, agent_config, data: dict | None, capacity: int,
              seed: int, prior_fraction: float):
    """(prior buffer holding `data`, sampler mixing it into `replay`'s batches)."""
    prior = make_buffer(observation_space, action_space, agent_config, capacity, seed)
    if data is not None:
        transitions_to_buffer(data, prior)
    return prior, MixedSampler(replay, prior, prior_fraction=prior_fraction)

"""Replay buffers for an agent: the online replay, an optional prior-data buffer, the sampler.

Why one function: the trainer, the reset-free trainer's backward agent, the async learner and
fine-tuning each pair a buffer with an agent's n-step / discount and, with RLPD-style prior
data, draw a `prior_fraction` of every batch from the prior buffer (demos, interventions).
Earlier runs' data (Replay across Experiments) share that buffer, or, when it holds demos,
get a buffer and a batch share of their own (`batch_shares`).
"""
from __future__ import annotations

from robolearn.data.replay import MixedSampler, ReplayBuffer, slots_needed, transitions_to_buffer
from robolearn.errors import ConfigError
from robolearn.policies.train_config import RAE_PRIOR_FRACTION


def n_step_gamma(agent_config) -> tuple[int, float]:
    return int(getattr(agent_config, "n_step", 1)), float(getattr(agent_config, "gamma", 0.99))


def make_buffer(observation_space, action_space, agent_config, capacity: int, seed: int) -> ReplayBuffer:
    n_step, gamma = n_step_gamma(agent_config)
    return ReplayBuffer(observation_space, action_space, capacity, n_step=n_step, gamma=gamma, seed=seed)


def batch_shares(agent_fraction: float, rae_fraction: float | None, prior_runs: bool,
                 demos_in_prior: bool) -> tuple[float | None, float | None]:
    """(prior buffer's share, earlier runs' own share or None) of every batch.

    Without earlier runs: the agent's own share (rlpd: 0.5 demos), or None. With them and no
    demos in the prior buffer: they fill it, `[replay] prior_fraction` else the agent's share
    else RaE's 0.5. With demos in it (rlpd + demos): the demos keep the agent's share and the
    earlier runs get a buffer of their own, `[replay] prior_fraction` of the batch, by default
    RaE's ratio applied to the rest (earlier : online = 1 : 1, i.e. 0.25 beside 0.5 of demos);
    in one buffer 5000 earlier transitions would cut 500 demos' share tenfold."""
    if not prior_runs:
        return (agent_fraction or None), None
    if not demos_in_prior:
        return (rae_fraction or agent_fraction or RAE_PRIOR_FRACTION), None
    earlier = rae_fraction if rae_fraction is not None else RAE_PRIOR_FRACTION * (1.0 - agent_fraction)
    if agent_fraction + earlier >= 1.0:
        raise ConfigError(f"[replay] prior_fraction={earlier}: the demos already take "
                          f"{agent_fraction} of every batch (the agent's prior_fraction), so the "
                          f"earlier runs' share must be below {1.0 - agent_fraction:g} for online "
                          "data to keep a share")
    return agent_fraction, earlier


def build_replays(observation_space, action_space, agent_config, capacity: int, seed: int,
                  demos: dict | None = None, prior_capacity: int = 0,
                  prior_fraction: float | None = None, prior_data: list[dict] | None = None,
                  demos_in_prior: bool = True, earlier_fraction: float | None = None,
                  earlier_capacity: int | None = None):
    """(replay, prior, earlier, sampler). With `prior_capacity` > 0 a prior buffer (seeded
    `seed + 1`) holds `demos` (unless `demos_in_prior` is False) then `prior_data` (earlier
    runs' transitions, Replay across Experiments: policies/prior_runs.py), and the sampler mixes
    `prior_fraction` of it into every batch; otherwise the demos, if any, seed the online replay.
    With `earlier_fraction` the earlier runs' data go to a buffer of their own (seeded
    `seed + 2`, `earlier_capacity` slots: a resumed run's, else what the data need) with that
    share of every batch (`batch_shares`)."""
    replay = make_buffer(observation_space, action_space, agent_config, capacity, seed)
    prior, earlier, sampler = None, None, replay
    if earlier_fraction is not None:
        if earlier_capacity is None:
            earlier_capacity = max(sum(slots_needed(d) for d in prior_data or []), 2)
        earlier = make_buffer(observation_space, action_space, agent_config, earlier_capacity, seed + 2)
        for data in prior_data or []:
            transitions_to_buffer(data, earlier)
        prior_data = None
    if prior_capacity:
        prior, sampler = add_prior(replay, observation_space, action_space, agent_config,
                                   demos if demos_in_prior else None, prior_capacity, seed + 1,
                                   prior_fraction, earlier, earlier_fraction)
        for data in prior_data or []:
            transitions_to_buffer(data, prior)
        if demos is not None and not demos_in_prior:
            transitions_to_buffer(demos, replay)
    elif demos is not None:
        transitions_to_buffer(demos, replay)
    return replay, prior, earlier, sampler


def add_prior(replay, observation_space, action_space, agent_config, data: dict | None, capacity: int,
              seed: int, prior_fraction: float, earlier: ReplayBuffer | None = None,
              earlier_fraction: float | None = None):
    """(prior buffer holding `data`, sampler mixing it, and `earlier` if given, into `replay`'s
    batches)."""
    prior = make_buffer(observation_space, action_space, agent_config, capacity, seed)
    if data is not None:
        transitions_to_buffer(data, prior)
    return prior, MixedSampler(replay, prior, prior_fraction=prior_fraction, earlier=earlier,
                               earlier_fraction=earlier_fraction or 0.0)

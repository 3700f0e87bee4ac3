"""`bc_weight`: the Gaussian actor's behaviour-cloning anchor on prior rows (TD3+BC-style), the
fine-tuning guard against a fresh critic unlearning a loaded actor."""
import dataclasses
import math

import numpy as np
import pytest
import torch

from robolearn.data.replay import MixedSampler, ReplayBuffer
from robolearn.errors import ConfigError
from robolearn.policies.registry import make_agent

from test_learners import ACT, STATE, TINY


def _buffers(n=64):
    online, prior = (ReplayBuffer(STATE, ACT, 200, seed=s) for s in (0, 1))
    rng = np.random.default_rng(0)
    for buf in (online, prior):
        for _ in range(n):
            o = {"state": rng.standard_normal(STATE["state"].shape).astype(np.float32)}
            buf.add(o, rng.uniform(-0.9, 0.9, ACT.shape).astype(np.float32), 0.0, o, False, False)
    return online, prior


def test_bc_term_reads_the_prior_buffers_rows_or_without_one_the_driven_rows():
    online, prior = _buffers()
    b = MixedSampler(online, prior, prior_fraction=0.25).sample(8)
    agent = make_agent("rlpd", STATE, ACT, seed=0, bc_weight=1.0, utd=1, **TINY)
    m = agent.update(b)
    assert m["bc_loss"] > 0 and math.isfinite(m["actor_loss"])
    none = dataclasses.replace(b, prior=np.zeros(8, bool), intervention=np.zeros(8, bool))
    assert agent.update(none)["bc_loss"] == 0.0
    # a driven row of the online replay is not cloned when a prior buffer decides what is (the
    # failed takeovers stay in the replay only, `prior_takeovers = "successful"`) ...
    driven_online = dataclasses.replace(none, intervention=np.ones(8, bool))
    assert agent.update(driven_online)["bc_loss"] == 0.0
    # ... and is when there is no prior buffer (HIL-SERL's interventions in the replay alone)
    no_prior_buffer = dataclasses.replace(driven_online, prior=None)
    assert agent.update(no_prior_buffer)["bc_loss"] > 0
    assert agent.update(dataclasses.replace(none, prior=None))["bc_loss"] == 0.0
    assert "bc_loss" not in make_agent("rlpd", STATE, ACT, seed=0, utd=1, **TINY).update(b)


def test_bc_anchor_holds_the_actor_on_the_prior_actions_against_the_critic():
    """Prior rows whose action is a fixed function of the state: with the anchor the actor's
    deterministic action converges to it; without it, the same updates (a critic fitted on
    random online data) leave it far off."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((STATE["state"].shape[0], ACT.shape[0])).astype(np.float32) * 0.3
    online, prior = (ReplayBuffer(STATE, ACT, 600, seed=s) for s in (0, 1))
    for _ in range(500):
        o = {"state": rng.standard_normal(STATE["state"].shape).astype(np.float32)}
        online.add(o, rng.uniform(-1, 1, ACT.shape).astype(np.float32), float(rng.standard_normal()),
                   o, False, False)
        prior.add(o, np.tanh(o["state"] @ w), 0.0, o, False, False)
    probe = torch.as_tensor(np.stack([prior.sample(1).obs["state"][0] for _ in range(64)]))
    errors = {}
    for weight in (0.0, 10.0):
        agent = make_agent("rlpd", STATE, ACT, seed=0, bc_weight=weight, utd=1, **TINY)
        sampler = MixedSampler(online, prior, prior_fraction=0.5)
        for _ in range(400):
            agent.update(sampler.sample(64))
        with torch.no_grad():
            feat = agent._features({"state": probe})
            errors[weight] = (agent.actor.mode(feat) - torch.tanh(probe @ torch.as_tensor(w))).abs().mean().item()
    assert errors[10.0] < 0.15 < errors[0.0], errors


def test_bad_bc_weight_is_a_config_error():
    with pytest.raises(ConfigError, match=r"bc_weight=-1"):
        make_agent("rlpd", STATE, ACT, bc_weight=-1.0)
    with pytest.raises(ConfigError, match=r"bc_weight=1.0.*flow_bc_weight"):
        make_agent("rlpd", STATE, ACT, actor="flow", bc_weight=1.0, **TINY)

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


def test_bc_weight_eases_off_over_its_decay_updates_on_every_update_path():
    """`bc_weight_final`: the anchor's weight is bc_weight until the decay's start, linear to the
    final weight at its end, held after; the weight the update used is the one reported, on the
    hand-written CPU update and the autograd one alike."""
    online, prior = _buffers()
    sampler = MixedSampler(online, prior, prior_fraction=0.5)
    for manual in (True, False):
        agent = make_agent("rlpd", STATE, ACT, seed=0, bc_weight=10.0, bc_weight_final=2.0,
                           bc_decay_updates=[2, 6], utd=1, cpu_update="manual" if manual else "autograd", **TINY)
        assert (agent._manual is not None) == manual
        seen = [round(float(agent.update(sampler.sample(8))["bc_weight"]), 4) for _ in range(8)]
        assert seen == [10.0, 10.0, 8.0, 6.0, 4.0, 2.0, 2.0, 2.0], (manual, seen)
    constant = make_agent("rlpd", STATE, ACT, seed=0, bc_weight=3.0, utd=1, **TINY)
    assert {float(constant.update(sampler.sample(8))["bc_weight"]) for _ in range(3)} == {3.0}
    assert constant.config.bc_weight_at(10**9) == 3.0


def test_an_eased_anchor_weights_the_actor_loss_by_the_eased_weight():
    """The same agent twice, one with the anchor eased to 0 by update 1: its actor loss lacks the
    bc term the constant one carries (the loss differs by exactly bc_weight x bc_loss)."""
    online, prior = _buffers()
    b = MixedSampler(online, prior, prior_fraction=0.5).sample(16)
    held = make_agent("rlpd", STATE, ACT, seed=0, bc_weight=10.0, utd=1, **TINY).update(b)
    eased = make_agent("rlpd", STATE, ACT, seed=0, bc_weight=10.0, bc_weight_final=0.0,
                       bc_decay_updates=[0, 0], utd=1, **TINY).update(b)
    assert float(eased["bc_weight"]) == 0.0 and float(held["bc_loss"]) > 0
    assert math.isclose(float(held["actor_loss"]) - float(eased["actor_loss"]),
                        10.0 * float(held["bc_loss"]), rel_tol=1e-4, abs_tol=1e-5)


@pytest.mark.parametrize("kwargs, match", [
    ({"bc_weight": 10.0, "bc_weight_final": -1.0}, r"bc_weight_final=-1.0 must be"),
    ({"bc_weight": 10.0, "bc_weight_final": "low"}, r"bc_weight_final='low' must be"),
    ({"bc_weight": 0.0, "bc_weight_final": 1.0}, r"eases the anchor off bc_weight, which is 0"),
    ({"bc_weight": 10.0, "bc_weight_final": 1.0, "bc_decay_updates": [5, 2]}, r"bc_decay_updates=\[5, 2\]"),
    ({"bc_weight": 10.0, "bc_weight_final": 1.0, "bc_decay_updates": [5]}, r"bc_decay_updates=\[5\]"),
])
def test_bad_bc_decay_is_a_config_error(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        make_agent("rlpd", STATE, ACT, **kwargs)

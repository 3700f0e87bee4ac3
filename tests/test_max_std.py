"""`max_std`: a cap on the Gaussian actor's spread, for fine-tuning beside a fresh critic.

Why: the BC anchor holds only the actor's mean; lift session 27's spread near the cube went
from 0.4-0.5 to 1.2-3.5 (random +-1 actions) within 600 env steps and stayed wide all session."""
import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from robolearn.errors import ConfigError
from robolearn.policies.registry import make_agent

STATE = gym.spaces.Dict({"state": gym.spaces.Box(-np.inf, np.inf, (6,), np.float32)})
ACT = gym.spaces.Box(-1, 1, (4,), np.float32)


def _widest(agent):
    """The actor's last layer set so that every log std is the network's widest (e^2)."""
    with torch.no_grad():
        agent.actor.net[-1].weight[4:] = 0.0
        agent.actor.net[-1].bias[4:] = 50.0
    return agent


def test_the_spread_never_exceeds_the_cap():
    capped = _widest(make_agent("rlpd", STATE, ACT, seed=0, max_std=0.3))
    free = _widest(make_agent("rlpd", STATE, ACT, seed=0))
    feat = torch.randn(4096, capped.actor.in_features)
    with torch.no_grad():
        _, log_std = capped.actor(feat)
        assert torch.allclose(log_std, torch.full_like(log_std, math.log(0.3)))
        assert torch.allclose(free.actor(feat)[1], torch.full_like(log_std, 2.0))
        mean = capped.actor(feat)[0]
        u = torch.atanh(capped.actor.sample(feat)[0].clamp(-1 + 1e-6, 1 - 1e-6))
    assert float((u - mean).std()) == pytest.approx(0.3, rel=0.05)     # the samples' own spread
    # the deterministic action (evaluation, export) is the mean either way
    torch.testing.assert_close(capped.actor.mode(feat), free.actor.mode(feat))


def test_below_the_cap_nothing_changes():
    capped = make_agent("rlpd", STATE, ACT, seed=0, max_std=7.0)
    free = make_agent("rlpd", STATE, ACT, seed=0)
    feat = torch.randn(64, capped.actor.in_features)
    with torch.no_grad():
        torch.testing.assert_close(capped.actor(feat)[1], free.actor(feat)[1])


def test_the_launch_files_cap_reaches_the_learner_and_the_actors_agent():
    """Learner and actor build their agents from the same overrides: a cap on the learner alone
    would let the robot sample wider actions than the learner trains."""
    from robolearn.runtime.actor import agent_overrides
    from robolearn.runtime.config import config_from_dict

    cfg = config_from_dict({"env": "robolearn/ArmLift-v0", "algo": "rlpd",
                            "learner": {"agent": {"max_std": 0.3}}})
    assert agent_overrides(cfg)["max_std"] == 0.3
    agent = make_agent("rlpd", STATE, ACT, **agent_overrides(cfg))
    assert agent.actor.max_log_std == pytest.approx(math.log(0.3))


@pytest.mark.parametrize("value", [0, -0.1, True, "wide", float("inf")])
def test_bad_values_are_refused(value):
    with pytest.raises(ConfigError, match="max_std"):
        make_agent("rlpd", STATE, ACT, max_std=value)


def test_the_flow_actor_has_no_std_to_cap():
    with pytest.raises(ConfigError, match="max_std"):
        make_agent("sac", STATE, ACT, actor="flow", max_std=0.3)

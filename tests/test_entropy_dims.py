"""`entropy_dims`: only the first N action dims carry SAC's entropy (the gripper left out)."""
import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from robolearn.errors import ConfigError
from robolearn.policies.registry import make_agent

STATE = gym.spaces.Dict({"state": gym.spaces.Box(-np.inf, np.inf, (6,), np.float32)})
ACT = gym.spaces.Box(-1, 1, (4,), np.float32)


def _tanh_gaussian_logp(mean, log_std, eps):
    u = mean + log_std.exp() * eps
    a = torch.tanh(u)
    return (torch.distributions.Normal(mean, log_std.exp()).log_prob(u) - torch.log1p(-a.pow(2) + 1e-12))


def test_the_target_and_the_log_probability_cover_only_the_leading_dims():
    agent = make_agent("rlpd", STATE, ACT, entropy_dims=3, target_entropy_scale=0.5)
    assert agent.target_entropy == -1.5
    feat = torch.randn(64, agent.actor.in_features)
    g = torch.Generator().manual_seed(3)
    _, logp = agent.actor.sample(feat, g)
    mean, log_std = agent.actor(feat)
    eps = torch.randn(mean.shape, generator=torch.Generator().manual_seed(3))
    per_dim = _tanh_gaussian_logp(mean, log_std, eps)
    torch.testing.assert_close(logp, per_dim[:, :3].sum(-1), rtol=1e-4, atol=1e-4)
    assert not torch.allclose(logp, per_dim.sum(-1), atol=1e-3), "the gripper's dim must be left out"


def test_a_saturated_last_dim_no_longer_pays_the_entropy_target():
    """Why the option exists: a last dim driven to +-1 makes the whole-action entropy fall with no
    bound, so the temperature sees the target met while the other dims stay wide."""
    agent_all = make_agent("rlpd", STATE, ACT, seed=0)
    agent_3 = make_agent("rlpd", STATE, ACT, seed=0, entropy_dims=3)
    feat = torch.randn(256, agent_all.actor.in_features)
    with torch.no_grad():
        for agent in (agent_all, agent_3):   # output 3: the gripper's pre-tanh mean, held at 6
            agent.actor.net[-1].bias[3] = 6.0
            agent.actor.net[-1].weight[3] = 0.0
        ent_all = -agent_all.actor.sample(feat)[1].mean()
        ent_3 = -agent_3.actor.sample(feat)[1].mean()
    assert ent_all < ent_3 - 3.0, (float(ent_all), float(ent_3))


def test_bad_values_are_refused():
    with pytest.raises(ConfigError, match="entropy_dims"):
        make_agent("rlpd", STATE, ACT, entropy_dims=5)
    with pytest.raises(ConfigError, match="entropy_dims"):
        make_agent("rlpd", STATE, ACT, entropy_dims=-1)
    with pytest.raises(ConfigError, match="entropy_dims"):
        make_agent("sac", STATE, ACT, actor="flow", entropy_dims=3)


def test_updates_run_and_the_temperature_chases_the_smaller_target():
    from robolearn.data.replay import Batch

    agent = make_agent("sac", STATE, ACT, seed=0, batch_size=32, entropy_dims=2, init_temperature=0.1,
                       learning_starts=0)
    rng = np.random.default_rng(0)
    for _ in range(5):
        n = 32
        m = agent.update(Batch(obs={"state": rng.standard_normal((n, 6)).astype(np.float32)},
                               action=rng.uniform(-1, 1, (n, 4)).astype(np.float32),
                               reward=rng.standard_normal(n).astype(np.float32),
                               next_obs={"state": rng.standard_normal((n, 6)).astype(np.float32)},
                               discount=np.full(n, 0.99, np.float32), intervention=np.zeros(n, bool)))
    assert math.isfinite(float(m["entropy"]))
    assert agent.target_entropy == -2.0

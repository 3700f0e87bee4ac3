"""`actor_frozen_updates`: the first N updates move the critic only (fine-tuning a loaded actor)."""
import numpy as np
import pytest
import torch

from robolearn.data.replay import Batch
from robolearn.errors import ConfigError
from robolearn.policies.registry import make_agent
import gymnasium as gym


def _batch(rng, n=32):
    obs = {"state": rng.standard_normal((n, 6)).astype(np.float32)}
    nxt = {"state": rng.standard_normal((n, 6)).astype(np.float32)}
    return Batch(obs=obs, action=rng.uniform(-1, 1, (n, 2)).astype(np.float32),
                 reward=rng.standard_normal(n).astype(np.float32), next_obs=nxt,
                 discount=np.full(n, 0.99, np.float32), intervention=np.zeros(n, bool))


def _snap(module):
    return [p.detach().clone() for p in module.parameters()]


def _same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


def test_actor_and_temperature_wait_for_the_critic():
    obs_space = gym.spaces.Dict({"state": gym.spaces.Box(-np.inf, np.inf, (6,), np.float32)})
    act_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    agent = make_agent("sac", obs_space, act_space, seed=0, batch_size=32, actor_frozen_updates=3)
    rng = np.random.default_rng(0)
    actor0, critic0, alpha0 = _snap(agent.actor), _snap(agent.critic), agent.log_alpha.detach().clone()
    for _ in range(3):
        agent.update(_batch(rng))
    assert _same(actor0, _snap(agent.actor)), "the actor moved while frozen"
    assert torch.equal(alpha0, agent.log_alpha.detach()), "the temperature moved while the actor was frozen"
    assert not _same(critic0, _snap(agent.critic)), "the critic must learn meanwhile"
    agent.update(_batch(rng))
    assert not _same(actor0, _snap(agent.actor)), "update N+1 must move the actor"


def test_negative_value_refused():
    obs_space = gym.spaces.Dict({"state": gym.spaces.Box(-np.inf, np.inf, (6,), np.float32)})
    with pytest.raises(ConfigError, match="actor_frozen_updates"):
        make_agent("sac", obs_space, gym.spaces.Box(-1, 1, (2,), np.float32), actor_frozen_updates=-1)

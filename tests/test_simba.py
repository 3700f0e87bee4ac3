"""`network = "simba"` (Lee et al. 2024): residual pre-LayerNorm blocks + running observation
normaliser, composing with the presets; state round trips, NaN guard, export parity, learning."""
import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from robolearn.errors import ConfigError
from robolearn.policies.networks import EnsembleSimba, Simba
from robolearn.policies.registry import ALGOS, make_agent

from test_learners import ACT, STATE, TINY, PointGoal, batch_for, check_nan_guard, learn_point_goal, space_for

SMALL = dict(TINY, simba_actor_width=16, simba_actor_blocks=1, simba_critic_width=16, simba_critic_blocks=2)


@pytest.mark.parametrize("algo", sorted(ALGOS))
def test_simba_composes_with_every_preset(algo):
    space = space_for(algo)
    agent = make_agent(algo, space, ACT, seed=0, network="simba", **SMALL)
    assert isinstance(agent.actor.net, Simba) and isinstance(agent.critic.mlp, EnsembleSimba)
    assert agent.config.normalize_obs and agent.obs_norm is not None   # part of the architecture
    assert len(agent.critic.mlp.blocks) == 2 and agent.critic.mlp.ensemble_size == agent.config.num_critics
    for _ in range(agent.config.actor_every):
        m = agent.update(batch_for(space))
    assert all(math.isfinite(v) for v in m.values())
    a = agent.act({k: v[0] for k, v in batch_for(space, 1).obs.items()})
    assert a.shape == (2,) and np.all(np.abs(a) <= 1)


def test_crossq_simba_normalises_with_batch_renorm_not_layer_norm():
    """CrossQ has no target network: its critic needs batch statistics shared by (s, a) and
    (s', a'); SimBa's LayerNorms become BatchRenorms there (and in its actor), plus one on the
    input, as crossq's MLP has. Training mode moves the running statistics, eval does not."""
    from robolearn.policies.batchrenorm import BatchRenorm, EnsembleBatchRenorm

    agent = make_agent("crossq", STATE, ACT, seed=0, network="simba", **SMALL)
    critic, actor = agent.critic.mlp, agent.actor.net
    assert isinstance(critic.inp, EnsembleBatchRenorm) and isinstance(critic.norm, EnsembleBatchRenorm)
    assert all(isinstance(b[0], EnsembleBatchRenorm) for b in critic.blocks)
    assert isinstance(actor.inp, BatchRenorm) and isinstance(actor.norm, BatchRenorm)
    assert not any(isinstance(m, (torch.nn.LayerNorm,)) for m in actor.modules())
    stats = [b.clone() for b in critic.buffers()]
    for i in range(4):
        m = agent.update(batch_for(STATE, seed=i))
    assert all(math.isfinite(v) for v in m.values())
    assert any(not torch.equal(a, b) for a, b in zip(stats, critic.buffers()))   # the statistics moved
    with pytest.raises(NotImplementedError, match="member subsets"):
        critic(torch.randn(4, critic.proj.weight.shape[1]), members=torch.tensor([0]))


def test_simba_with_a_bad_size_is_a_clear_error():
    with pytest.raises(ConfigError, match="network='resnet'.*'mlp', 'simba'"):
        make_agent("sac", STATE, ACT, network="resnet")
    with pytest.raises(ConfigError, match="simba_critic_blocks=0"):
        make_agent("sac", STATE, ACT, network="simba", simba_critic_blocks=0)


def test_paper_defaults_and_the_normaliser_can_be_turned_off():
    cfg = make_agent("sac", STATE, ACT, network="simba").config
    assert (cfg.simba_actor_width, cfg.simba_actor_blocks) == (128, 1)
    assert (cfg.simba_critic_width, cfg.simba_critic_blocks) == (512, 2)
    assert not make_agent("sac", STATE, ACT, network="simba", normalize_obs=False, **SMALL).config.normalize_obs


def test_ensemble_simba_equals_its_members_one_by_one():
    torch.manual_seed(0)
    net = EnsembleSimba(3, 5, 8, 2, 1)
    x = torch.randn(7, 5)
    full = net(x)
    for m in range(3):
        np.testing.assert_allclose(net(x, members=torch.tensor([m]))[0].detach(), full[m].detach(),
                                   rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("algo", ["sac", "droq", "drq", "crossq"])
def test_simba_state_dict_round_trip_is_exact(algo):
    space = space_for(algo)
    a = make_agent(algo, space, ACT, seed=1, network="simba", **SMALL)
    for i in range(3):
        a.update(batch_for(space, seed=i))
    b = make_agent(algo, space, ACT, seed=2, network="simba", **SMALL)
    b.load_state_dict(a.state_dict())
    o = {k: v[0] for k, v in batch_for(space, 1, seed=7).obs.items()}
    np.testing.assert_array_equal(a.act(o, deterministic=True), b.act(o, deterministic=True))
    batch = batch_for(space, seed=9)
    assert a.update(batch) == b.update(batch)


def test_simba_nan_guard():
    check_nan_guard(make_agent("sac", STATE, ACT, network="simba", **SMALL),
                    lambda a: a.critic.mlp.proj.weight.__setitem__((0, 0, 0), float("nan")))


@pytest.mark.parametrize("algo", ["sac", "crossq"])
@pytest.mark.parametrize("fmt,suffix", [("onnx", ".onnx"), ("torchscript", ".pt")])
def test_simba_actor_exports_with_parity(tmp_path, fmt, suffix, algo):
    pytest.importorskip("onnxruntime")
    from test_export import assert_export_parity, reach_agent

    agent = reach_agent(algo, network="simba", simba_actor_width=32, simba_critic_width=32)
    assert_export_parity(agent, fmt, tmp_path / f"p{suffix}")


def test_simba_sac_learns_the_tiny_task():
    env = PointGoal()
    agent = make_agent("sac", env.observation_space, env.action_space, seed=0, network="simba",
                       simba_actor_width=32, simba_critic_width=64, batch_size=64)
    learned, random_ret = learn_point_goal(agent)
    assert learned > random_ret + 4 and learned > -4.0, (learned, random_ret)

"""Each preset option the papers fix (docs/learners.md "Fidelity"): one test per option, on the
built agent, not only on the config dict."""
import math

import gymnasium as gym
import numpy as np
import torch

from robolearn.policies.networks import EnsembleBatchRenorm, EnsembleLayerNorm, EnsembleLinear
from robolearn.policies.registry import make_agent, make_config

ACT = gym.spaces.Box(-1, 1, (4,), np.float32)
STATE = gym.spaces.Dict({"state": gym.spaces.Box(-np.inf, np.inf, (6,), np.float32)})


def hidden_linears(mlp) -> list[EnsembleLinear]:
    return [m for m in mlp.modules() if isinstance(m, EnsembleLinear)][:-1]


def test_sac_default_temperature_and_target_entropy():
    agent = make_agent("sac", STATE, ACT)
    assert math.isclose(float(agent.log_alpha.detach().exp()), 0.1, rel_tol=1e-6)  # pytorch_sac / DrQ
    assert agent.target_entropy == -4.0  # -|A| (Haarnoja et al. 2018)
    assert agent.config.backup_entropy and tuple(agent.config.critic_hidden) == (256, 256)


def test_rlpd_sparse_settings_no_entropy_backup():
    assert make_config("rlpd").backup_entropy is False


def test_rlpd_three_layer_layernorm_critics_and_actor():
    agent = make_agent("rlpd", STATE, ACT)
    linears = hidden_linears(agent.critic.mlp)
    assert [m.weight.shape[-1] for m in linears] == [256, 256, 256]
    assert agent.critic.num_critics == 10 and agent.config.num_target_min == 2
    assert sum(isinstance(m, EnsembleLayerNorm) for m in agent.critic.mlp.modules()) == 3
    actor_linears = [m for m in agent.actor.modules() if isinstance(m, torch.nn.Linear)]
    assert [m.out_features for m in actor_linears[:3]] == [256, 256, 256]
    assert agent.config.utd == 20 and agent.config.prior_fraction == 0.5
    assert agent.target_entropy == -0.5 * 4


def test_redq_droq_target_entropy_is_minus_action_dim():
    for algo in ("redq", "droq"):
        assert make_agent(algo, STATE, ACT).target_entropy == -4.0, algo


def test_crossq_critic_batch_renorm_no_target():
    agent = make_agent("crossq", STATE, ACT, critic_hidden=(32, 32))
    assert agent.critic_target is None and agent.config.target_network is False
    assert sum(isinstance(m, EnsembleBatchRenorm) for m in agent.critic.mlp.modules()) == 3
    assert agent.config.adam_beta1 == 0.5 and agent.config.policy_delay == 3

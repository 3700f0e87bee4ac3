"""Each preset option the papers fix (docs/learners.md "Fidelity"): one test per option, on the
built agent, not only on the config dict."""
import math

import gymnasium as gym
import numpy as np
import torch

from robolearn.data.replay import Batch
from robolearn.policies.batchrenorm import BatchRenorm
from robolearn.policies.networks import EnsembleBatchRenorm, EnsembleLayerNorm, EnsembleLinear
from robolearn.policies.registry import agent_from_state, make_agent, make_config

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
        # the documented per-task route: MBPO's table is mostly -|A|/2
        assert make_agent(algo, STATE, ACT, target_entropy_scale=0.5).target_entropy == -2.0, algo


def test_rlpd_documented_variants_build():
    """docs/learners.md "Fidelity": AntMaze's 1-critic target min and the locomotion settings."""
    ant = make_agent("rlpd", STATE, ACT, num_target_min=1)
    assert ant.config.num_target_min == 1 and ant.critic.num_critics == 10
    loco = make_agent("rlpd", STATE, ACT, backup_entropy=True, critic_hidden=(256, 256),
                      actor_hidden=(256, 256))
    assert loco.config.backup_entropy and [m.weight.shape[-1] for m in hidden_linears(loco.critic.mlp)] == [256, 256]


def test_crossq_critic_batch_renorm_no_target():
    agent = make_agent("crossq", STATE, ACT, critic_hidden=(32, 32))
    assert agent.critic_target is None and agent.config.target_network is False
    assert sum(isinstance(m, EnsembleBatchRenorm) for m in agent.critic.mlp.modules()) == 3
    assert agent.config.adam_beta1 == 0.5 and agent.config.policy_delay == 3


def test_crossq_actor_batch_renorm_before_every_layer():
    """sbx CrossQ's actor: BatchRenorm on the input and after every hidden ReLU, i.e. before
    each Dense layer (the plain presets' actors have none)."""
    agent = make_agent("crossq", STATE, ACT, critic_hidden=(32, 32), actor_hidden=(16, 16))
    kinds = [type(m).__name__ for m in agent.actor.net]
    assert kinds == ["BatchRenorm", "Linear", "ReLU", "BatchRenorm", "Linear", "ReLU",
                     "BatchRenorm", "Linear"], kinds
    assert [m.running_mean.shape[-1] for m in agent.actor.net if isinstance(m, BatchRenorm)] == [6, 16, 16]
    for algo in ("sac", "redq", "droq", "rlpd"):
        assert not any(isinstance(m, BatchRenorm) for m in make_agent(algo, STATE, ACT).actor.modules()), algo


def _batch(n=32, seed=0):
    rng = np.random.default_rng(seed)
    obs = {"state": (rng.normal(size=(n, 6)) * 3 + 2).astype(np.float32)}
    nxt = {"state": (rng.normal(size=(n, 6)) * 3 + 2).astype(np.float32)}
    return Batch(obs=obs, action=rng.uniform(-1, 1, (n, 4)).astype(np.float32), next_obs=nxt,
                 reward=rng.normal(size=n).astype(np.float32), discount=np.full(n, 0.99, np.float32),
                 intervention=np.zeros(n, bool))


def test_crossq_actor_statistics_move_only_in_the_actor_loss():
    """Train mode (batch statistics, running estimates updated) in the actor loss only; the TD
    target's next action and acting use running statistics, as in sbx (train=False there)."""
    agent = make_agent("crossq", STATE, ACT, seed=0, critic_hidden=(32, 32), actor_hidden=(16, 16),
                       batch_size=32)
    brs = [m for m in agent.actor.modules() if isinstance(m, BatchRenorm)]
    steps = lambda: [int(m.steps) for m in brs]  # noqa: E731
    obs = {"state": np.ones(6, np.float32)}
    a0 = agent.act(obs, deterministic=True)
    assert steps() == [0, 0, 0] and not agent.actor.training
    agent.update(_batch(seed=1))                  # policy_delay 3: critic only
    agent.update(_batch(seed=2))
    assert steps() == [0, 0, 0]                   # the next-action sample did not touch them
    np.testing.assert_array_equal(agent.act(obs, deterministic=True), a0)
    agent.update(_batch(seed=3))                  # third update: actor + temperature
    assert steps() == [1, 1, 1] and not agent.actor.training
    first = brs[0].running_mean.flatten()
    assert torch.allclose(first, 0.01 * torch.as_tensor(_batch(seed=3).obs["state"]).mean(0), atol=1e-6)
    # acting reads running statistics: one observation's action does not depend on the batch
    batch_act = agent.actor.mode(torch.as_tensor(np.stack([obs["state"], -obs["state"]])))[0]
    np.testing.assert_allclose(agent.act(obs, deterministic=True), batch_act.detach().numpy(), atol=1e-6)


def test_crossq_actor_statistics_travel_with_the_policy_and_old_checkpoints_load():
    agent = make_agent("crossq", STATE, ACT, seed=0, critic_hidden=(32, 32), actor_hidden=(16, 16),
                       batch_size=32, policy_delay=1)
    for i in range(3):
        agent.update(_batch(seed=i))
    ps = agent.policy_state()
    assert any(k.endswith("running_mean") for k in ps)   # actors normalise like the learner
    other = make_agent("crossq", STATE, ACT, seed=9, critic_hidden=(32, 32), actor_hidden=(16, 16))
    other.load_policy_state(ps)
    obs = {"state": np.full(6, 0.5, np.float32)}
    np.testing.assert_array_equal(agent.act(obs, deterministic=True), other.act(obs, deterministic=True))
    # a checkpoint written before actor_batch_renorm existed ran without it: it loads as such
    old = make_agent("crossq", STATE, ACT, seed=0, critic_hidden=(32, 32), actor_batch_renorm=False)
    state = old.state_dict()
    del state["config"]["actor_batch_renorm"]
    rebuilt = agent_from_state(state, STATE, ACT)
    assert rebuilt.config.actor_batch_renorm is False
    np.testing.assert_array_equal(rebuilt.act(obs, deterministic=True), old.act(obs, deterministic=True))


def _adam(opt):
    g = opt.param_groups
    return [(grp["lr"], grp["betas"][0]) for grp in g]


def test_crossq_learning_rates_and_adam_beta_on_the_optimisers():
    """CrossQ (Bhatt et al. 2024): lr 1e-3 for actor, critic and temperature, Adam beta1 0.5,
    actor every 3 critic steps."""
    agent = make_agent("crossq", STATE, ACT)
    assert _adam(agent.critic_opt) == [(1e-3, 0.5)]
    assert _adam(agent.actor_opt) == [(1e-3, 0.5), (1e-3, 0.5)]      # actor, temperature
    assert agent.config.actor_every == 3
    sac = make_agent("sac", STATE, ACT)
    assert _adam(sac.critic_opt) == [(3e-4, 0.9)]


def test_droq_dropout_comes_before_layer_norm_in_every_hidden_layer():
    """DroQ (Hiraoka et al. 2022): Linear -> Dropout -> LayerNorm -> ReLU, dropout 0.01."""
    from robolearn.policies.networks import Dropout

    agent = make_agent("droq", STATE, ACT)
    kinds = [type(m).__name__ for m in agent.critic.mlp.net]
    assert kinds[:4] == ["EnsembleLinear", "Dropout", "EnsembleLayerNorm", "ReLU"]
    assert kinds[4:8] == ["EnsembleLinear", "Dropout", "EnsembleLayerNorm", "ReLU"]
    assert all(m.p == 0.01 for m in agent.critic.mlp.net if isinstance(m, Dropout))


def _batch(n=8, seed=0):
    rng = np.random.default_rng(seed)
    o = lambda: {"state": rng.standard_normal((n, 6)).astype(np.float32)}  # noqa: E731
    return Batch(obs=o(), action=rng.uniform(-1, 1, (n, 4)).astype(np.float32),
                 reward=rng.standard_normal(n).astype(np.float32), next_obs=o(),
                 discount=np.full(n, 0.99, np.float32), intervention=np.zeros(n, bool))


def test_rlpd_policy_delay_zero_means_one_actor_step_per_env_step():
    """policy_delay=0: the actor and temperature step once every `utd` critic steps (once per
    env step), whatever utd is set to."""
    for utd in (20, 4):
        agent = make_agent("rlpd", STATE, ACT, utd=utd, batch_size=8, num_critics=2,
                           critic_hidden=(8,), actor_hidden=(8,))
        assert agent.config.policy_delay == 0 and agent.config.actor_every == utd
        before = [p.detach().clone() for p in agent.actor.parameters()]
        for i in range(utd - 1):
            agent.update(_batch(seed=i))
        assert all(torch.equal(a, b) for a, b in zip(before, agent.actor.parameters()))
        agent.update(_batch(seed=99))
        assert not all(torch.equal(a, b) for a, b in zip(before, agent.actor.parameters()))


def test_drq_target_entropy_temperature_and_replay_capacity():
    """DrQ as configured here: target entropy -|A|/2 (RLPD's DrQLearner), initial temperature
    0.1, replay capacity 100k (honoured by the Trainer, tests/test_training.py)."""
    pix = gym.spaces.Dict({"front": gym.spaces.Box(0, 255, (16, 16, 3), np.uint8)})
    agent = make_agent("drq", pix, ACT, feature_dim=8, encoder_filters=4, encoder_layers=2)
    assert agent.target_entropy == -0.5 * 4
    assert math.isclose(float(agent.log_alpha.detach().exp()), 0.1, rel_tol=1e-6)
    assert agent.config.replay_capacity == 100_000

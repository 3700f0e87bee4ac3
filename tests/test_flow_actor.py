"""`actor = "flow"` (SAC Flow, Zhang et al. 2025, Flow-G): the chain's exact log-likelihood,
reparameterised sampling, sac/rlpd updates, exact resume, the NaN guard, export parity, a
bimodal target and the config errors."""
import math

import numpy as np
import pytest
import torch

from robolearn.errors import ConfigError
from robolearn.policies.networks import Actor, FlowActor
from robolearn.policies.registry import agent_from_state, make_agent

from test_learners import ACT, STATE, TINY, batch_for, check_nan_guard

FLOW = dict(TINY, actor="flow")


def test_log_prob_is_the_sum_of_the_chains_gaussian_densities_and_the_tanh_correction():
    torch.manual_seed(0)
    actor = FlowActor(5, 3, (16, 16), steps=4).double()
    with torch.no_grad():  # a gate that is not ~1 everywhere, a noise that varies with the state
        actor.gate[-1].weight.normal_(0, 1.0)
        actor.gate[-1].bias.zero_()
    feat = torch.randn(64, 5, dtype=torch.float64)
    with torch.no_grad():
        action, log_prob = actor.sample(feat, torch.Generator().manual_seed(3))
        chain, _ = actor.rollout(feat, torch.Generator().manual_seed(3))
        # independently: log N(a_0; 0, I) + sum_k log N(a_{k+1}; a_k + dt v(t_k, a_k, s), sigma^2 I)
        sigma = actor.log_sigma(feat).exp()
        std_normal = torch.distributions.Normal(torch.zeros_like(chain[0]), torch.ones_like(chain[0]))
        expected = std_normal.log_prob(chain[0]).sum(-1)
        dt = 1.0 / actor.steps
        for k in range(actor.steps):
            mean = chain[k] + dt * actor.velocity(feat, chain[k], k * dt)
            expected = expected + torch.distributions.Normal(mean, sigma).log_prob(chain[k + 1]).sum(-1)
        u = chain[-1]
        expected = expected - torch.log(1.0 - torch.tanh(u).pow(2)).sum(-1)
    assert len(chain) == actor.steps + 1
    torch.testing.assert_close(action, torch.tanh(u), rtol=0, atol=0)
    torch.testing.assert_close(log_prob, expected, rtol=1e-9, atol=1e-9)
    # the noise really is in the chain: each transition's residual is sigma * eps, not zero
    with torch.no_grad():
        residual = chain[1] - chain[0] - dt * actor.velocity(feat, chain[0], 0.0)
    assert float(residual.abs().mean()) > 1e-3


def test_mode_is_the_noise_free_chain_from_zero():
    torch.manual_seed(1)
    actor = FlowActor(4, 2, (16,), steps=3)
    feat = torch.randn(8, 4)
    a = torch.zeros(8, 2)
    for k in range(3):
        a = a + actor.velocity(feat, a, k / 3) / 3
    torch.testing.assert_close(actor.mode(feat), torch.tanh(a))
    torch.testing.assert_close(actor.mode(feat), actor.mode(feat), rtol=0, atol=0)


def test_sample_is_reparameterised_through_all_steps():
    torch.manual_seed(2)
    actor = FlowActor(4, 2, (16, 16), steps=4)
    with torch.no_grad():  # the gate's output layer starts at zero (its hidden layers get no
        actor.gate[-1].weight.normal_(0, 0.1)  # gradient until it moves): one update's worth
    action, log_prob = actor.sample(torch.randn(32, 4), torch.Generator().manual_seed(0))
    (action.pow(2).sum() + log_prob.sum()).backward()
    for name, p in actor.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert float(p.grad.abs().sum()) > 0, name
    # the first step's input matters to the final action (gradient through the whole chain)
    feat = torch.randn(4, 4)
    a0 = torch.randn(4, 2, requires_grad=True)
    a = a0
    for k in range(actor.steps):
        a = a + actor.velocity(feat, a, k / actor.steps) / actor.steps
    a.sum().backward()
    assert float(a0.grad.abs().sum()) > 0


@pytest.mark.parametrize("algo", ["sac", "rlpd"])
def test_flow_actor_updates_are_finite_and_train_the_actor(algo):
    agent = make_agent(algo, STATE, ACT, seed=0, **FLOW)
    assert isinstance(agent.actor, FlowActor) and agent.actor.steps == 4
    before = [p.detach().clone() for p in agent.actor.parameters()]
    for _ in range(2 * agent.config.actor_every):
        m = agent.update(batch_for(STATE))
    assert {"critic_loss", "actor_loss", "entropy", "alpha"} <= set(m)
    assert all(math.isfinite(v) for v in m.values()), m
    assert any(not torch.equal(a, b) for a, b in zip(before, agent.actor.parameters()))
    o = {"state": batch_for(STATE, 1).obs["state"][0]}
    for det in (False, True):
        a = agent.act(o, deterministic=det)
        assert a.dtype == np.float32 and a.shape == (2,) and np.all(np.abs(a) <= 1)
    np.testing.assert_array_equal(agent.act(o, deterministic=True), agent.act(o, deterministic=True))


@pytest.mark.parametrize("algo", ["sac", "rlpd"])
def test_flow_state_dict_round_trip_is_exact(algo, tmp_path):
    from robolearn.policies.serialize import load_state, save_state

    a = make_agent(algo, STATE, ACT, seed=1, policy_delay=2, **FLOW)
    for i in range(3):
        a.update(batch_for(STATE, seed=i))
    o = {"state": batch_for(STATE, 1, seed=7).obs["state"][0]}
    a.act(o)
    save_state(tmp_path / "agent.safetensors", a.state_dict())
    b = agent_from_state(load_state(tmp_path / "agent.safetensors"), STATE, ACT)
    assert isinstance(b.actor, FlowActor) and b.config.actor == "flow" and b.num_updates == 3
    np.testing.assert_array_equal(a.act(o, deterministic=True), b.act(o, deterministic=True))
    np.testing.assert_array_equal(a.act(o), b.act(o))
    batch = batch_for(STATE, seed=9)
    assert a.update(batch) == b.update(batch)
    for p, q in zip(a.actor.parameters(), b.actor.parameters()):
        assert torch.equal(p, q)
    # the weights an actor process receives
    c = make_agent(algo, STATE, ACT, seed=5, **FLOW)
    c.load_policy_state(a.policy_state())
    np.testing.assert_array_equal(a.act(o, deterministic=True), c.act(o, deterministic=True))


def test_flow_nan_in_batch_or_parameter_raises_with_update_number():
    check_nan_guard(make_agent("sac", STATE, ACT, **FLOW),
                    lambda a: a.actor.candidate[0].weight.__setitem__((0, 0), float("nan")))


@pytest.mark.parametrize("fmt,suffix", [("onnx", ".onnx"), ("torchscript", ".pt")])
def test_flow_actor_exports_with_parity(tmp_path, fmt, suffix):
    pytest.importorskip("onnxruntime")
    from robolearn.policies.export import ExportedPolicy
    from test_export import assert_export_parity, reach_agent

    agent = reach_agent("rlpd", actor="flow", actor_hidden=(64, 64))
    assert_export_parity(agent, fmt, tmp_path / f"p{suffix}")
    obs = {"state": np.random.default_rng(0).standard_normal(agent.obs_norm.mean.shape[0]).astype(np.float32)}
    got = ExportedPolicy(tmp_path / f"p{suffix}")(obs)
    np.testing.assert_allclose(got, agent.act(obs, deterministic=True), atol=1e-5)


def test_flow_covers_both_modes_of_a_bimodal_target_where_the_gaussian_averages():
    """Targets at -0.7 and +0.7 (a person grasping from the left or the right). The flow is
    fitted by flow matching (`FlowActor.flow_matching_loss`, the BC term of `flow_bc_weight`;
    the usual maximum-likelihood surrogate of a flow: its marginal density has no closed
    form), the Gaussian by maximum likelihood, both for 600 steps."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    n, feat = 256, torch.ones(256, 4)
    u_mode = math.atanh(0.7)
    flow, gauss = FlowActor(4, 1, (64, 64)), Actor(4, 1, (64, 64))
    f_opt = torch.optim.Adam(flow.parameters(), lr=3e-3)
    g_opt = torch.optim.Adam(gauss.parameters(), lr=3e-3)
    for _ in range(600):
        u1 = torch.where(torch.rand(n, 1, generator=g) < 0.5, -u_mode, u_mode)  # pre-tanh targets
        # the product's BC term (flow_bc_weight), every row a demo row
        loss = flow.flow_matching_loss(feat, torch.tanh(u1), torch.ones(n), generator=g)
        f_opt.zero_grad()
        loss.backward()
        f_opt.step()
        mean, log_std = gauss(feat)
        nll = (0.5 * ((u1 - mean) / log_std.exp()).pow(2) + log_std).mean()
        g_opt.zero_grad()
        nll.backward()
        g_opt.step()
    with torch.no_grad():
        f = torch.ones(4000, 4)
        a = torch.randn(4000, 1, generator=g)
        for k in range(flow.steps):  # the flow's chain from a_0 ~ N(0, I)
            a = a + flow.velocity(f, a, k / flow.steps) / flow.steps
        a = torch.tanh(a)[:, 0]
        gs = gauss.sample(f, g)[0][:, 0]
        g_mean = float(gauss.mode(f[:1]))
    left, right = float(((a + 0.7).abs() < 0.2).float().mean()), float(((a - 0.7).abs() < 0.2).float().mean())
    middle = float((a.abs() < 0.3).float().mean())
    assert left > 0.3 and right > 0.3 and middle < 0.15, (left, right, middle)
    assert abs(g_mean) < 0.15, g_mean  # the Gaussian's mean: between the two grasps
    assert float((gs.abs() < 0.3).float().mean()) > 2 * middle  # and its mass there


def test_flow_config_errors_name_the_field():
    with pytest.raises(ConfigError, match=r"actor='flow'.*actor_batch_renorm.*crossq"):
        make_agent("crossq", STATE, ACT, actor="flow")
    agent = make_agent("crossq", STATE, ACT, actor="flow", actor_batch_renorm=False, **TINY)
    assert isinstance(agent.actor, FlowActor)
    assert math.isfinite(agent.update(batch_for(STATE))["critic_loss"])
    with pytest.raises(ConfigError, match=r"actor='flow'.*network='simba'"):
        make_agent("sac", STATE, ACT, actor="flow", network="simba")
    with pytest.raises(ConfigError, match=r"actor='diffusion'.*'gaussian', 'flow'"):
        make_agent("sac", STATE, ACT, actor="diffusion")
    with pytest.raises(ConfigError, match=r"flow_variant='transformer'.*'gated'"):
        make_agent("rlpd", STATE, ACT, actor="flow", flow_variant="transformer")
    with pytest.raises(ConfigError, match=r"flow_steps=0"):
        make_agent("sac", STATE, ACT, actor="flow", flow_steps=0)


def test_flow_actor_reads_pixel_features():
    from test_learners import PIXELS

    agent = make_agent("drq", PIXELS, ACT, seed=0, **FLOW)
    m = agent.update(batch_for(PIXELS))
    assert all(math.isfinite(v) for v in m.values())
    assert agent.actor.in_features == agent.encoder.feature_dim + 4


def test_flow_bc_term_reads_only_the_prior_rows():
    """`flow_bc_weight`: the flow-matching BC term sees the prior part of a mixed batch (demos,
    the takeovers let in) and nothing else; on a batch with no prior row it is exactly zero."""
    import dataclasses

    from robolearn.data.replay import MixedSampler, ReplayBuffer

    online, prior = (ReplayBuffer(STATE, ACT, 100, seed=s) for s in (0, 1))
    rng = np.random.default_rng(0)
    for buf in (online, prior):
        for _ in range(20):
            o = {"state": rng.standard_normal(STATE["state"].shape).astype(np.float32)}
            buf.add(o, rng.uniform(-1, 1, ACT.shape).astype(np.float32), 0.0, o, False, False)
    b = MixedSampler(online, prior, prior_fraction=0.25).sample(8)
    assert b.prior.tolist() == [False] * 6 + [True] * 2
    agent = make_agent("rlpd", STATE, ACT, seed=0, actor="flow", flow_bc_weight=1.0, utd=1, **TINY)
    m = agent.update(b)
    assert m["flow_bc_loss"] > 0 and math.isfinite(m["actor_loss"])
    none = dataclasses.replace(b, prior=np.zeros(8, bool), intervention=np.zeros(8, bool))
    assert agent.update(none)["flow_bc_loss"] == 0.0
    # driven rows: with a prior buffer only those it holds count; without one, the replay's
    driven_online = dataclasses.replace(none, intervention=np.ones(8, bool))
    assert agent.update(driven_online)["flow_bc_loss"] == 0.0
    assert agent.update(dataclasses.replace(driven_online, prior=None))["flow_bc_loss"] > 0
    assert "flow_bc_loss" not in make_agent("rlpd", STATE, ACT, seed=0, actor="flow", utd=1, **TINY).update(b)
    with pytest.raises(ConfigError, match=r"flow_bc_weight=1.0.*actor='flow'"):
        make_agent("rlpd", STATE, ACT, flow_bc_weight=1.0)
    with pytest.raises(ConfigError, match=r"flow_bc_weight=-1"):
        make_agent("rlpd", STATE, ACT, actor="flow", flow_bc_weight=-1.0)

"""The oneDNN linear path (`cpu_matmul="onednn"`) computes what F.linear / baddbmm compute.

Numerics only (never timing): forward, grad_x, grad_w, grad_b against F.linear on the same
tensors, with and without the folded ReLU, on strided inputs, for the critic ensemble, the
fallback when the op is missing, and an agent's update with the option on vs off.
"""
from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from robolearn.data.replay import ReplayBuffer
from robolearn.errors import ConfigError
from robolearn.policies import onednn
from robolearn.policies.networks import EnsembleMLP, mlp
from robolearn.policies.registry import make_agent

needs_op = pytest.mark.skipif(not onednn.available(), reason="this torch build has no oneDNN linear")


def _grads(fn, x, w, b):
    x, w, b = (t.detach().clone().requires_grad_(True) for t in (x, w, b))
    y = fn(x, w, b)
    g = torch.linspace(-1, 1, y.numel()).reshape(y.shape)
    (y * g).sum().backward()
    return y.detach(), x.grad, w.grad, b.grad


@needs_op
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("shape", [(64, 23, 256), (32, 256, 128)])
def test_linear_matches_f_linear(relu, shape):
    torch.manual_seed(0)
    n, i, o = shape
    x, w, b = torch.randn(n, i), torch.randn(o, i) / i ** 0.5, torch.randn(o)
    ref = _grads(lambda x, w, b: (F.relu if relu else (lambda t: t))(F.linear(x, w, b)), x, w, b)
    got = _grads(lambda x, w, b: onednn.linear(x, w, b, relu), x, w, b)
    for name, r, g in zip(("y", "grad_x", "grad_w", "grad_b"), ref, got):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-4, msg=name)


@needs_op
def test_linear_strided_inputs():
    torch.manual_seed(1)
    x = torch.randn(128, 96).t()  # (96, 128), transposed storage
    w = torch.randn(128, 80).t()  # (80, 128) weight as a transposed view
    b = torch.randn(80)
    ref = _grads(F.linear, x, w, b)
    got = _grads(onednn.linear, x, w, b)
    for r, g in zip(ref, got):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-4)


@needs_op
def test_fast_path_is_taken_and_fallback_when_op_missing(monkeypatch):
    x, w, b = torch.randn(8, 16), torch.randn(64, 16), torch.randn(64)
    calls = []
    real = onednn._OP
    monkeypatch.setattr(onednn, "_OP", lambda *a: calls.append(1) or real(*a))
    onednn.linear(x, w, b)
    assert calls, "the oneDNN op was not called on a CPU fp32 input"
    monkeypatch.setattr(onednn, "_OP", None)
    assert not onednn.available()
    torch.testing.assert_close(onednn.linear(x, w, b, relu=True), F.relu(F.linear(x, w, b)))
    ens = EnsembleMLP(3, 16, (64,), 1)
    assert onednn.ensemble_linear(x, ens.net[0].weight, ens.net[0].bias) is None


@needs_op
@pytest.mark.parametrize("shared_input", [True, False])
def test_ensemble_matches_batched(shared_input):
    torch.manual_seed(2)
    ref = EnsembleMLP(4, 23, (96, 96), 1)
    fast = onednn.use_onednn(copy.deepcopy(ref))
    assert fast.net[0].matmul == "onednn" and fast.net[0].relu and isinstance(fast.net[1], torch.nn.Identity)
    assert fast.state_dict().keys() == ref.state_dict().keys()
    x = torch.randn(32, 23) if shared_input else torch.randn(4, 32, 23)
    outs = []
    for net in (ref, fast):
        xi = x.clone().requires_grad_(True)
        y = net(xi)
        (y * torch.linspace(-1, 1, y.numel()).reshape(y.shape)).sum().backward()
        outs.append([y.detach(), xi.grad] + [p.grad for p in net.parameters()])
    for r, g in zip(*outs):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-4)
    members = torch.tensor([2, 0])
    torch.testing.assert_close(fast(x if shared_input else x[:2], members),
                               ref(x if shared_input else x[:2], members), rtol=1e-4, atol=1e-4)


@needs_op
def test_actor_mlp_converted_keeps_state_dict():
    torch.manual_seed(3)
    ref = mlp(10, (128, 128), 4)
    fast = onednn.use_onednn(copy.deepcopy(ref))
    assert isinstance(fast[0], onednn.Linear) and fast[0].relu and isinstance(fast[1], torch.nn.Identity)
    assert not fast[-1].relu  # the output layer has no ReLU after it
    assert fast.state_dict().keys() == ref.state_dict().keys()
    x = torch.randn(5, 10)
    torch.testing.assert_close(fast(x), ref(x), rtol=1e-5, atol=1e-5)


STATE = gym.spaces.Dict({"state": gym.spaces.Box(-np.inf, np.inf, (7,), np.float32)})
ACT = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)


def _buffer(n=300):
    rng = np.random.default_rng(0)
    buf = ReplayBuffer(STATE, ACT, n + 10, seed=0)
    obs = rng.standard_normal((n + 1, 7)).astype(np.float32)
    for t in range(n):
        buf.add({"state": obs[t]}, rng.uniform(-1, 1, 3).astype(np.float32), float(rng.standard_normal()),
                {"state": obs[t + 1]}, False, bool(t % 50 == 49))
    return buf


@needs_op
@pytest.mark.parametrize("algo,extra", [("sac", {}), ("redq", {}), ("droq", {}), ("crossq", {}), ("rlpd", {}),
                                        ("sac", {"network": "simba", "simba_actor_width": 64,
                                                 "simba_critic_width": 64}),
                                        ("sac", {"actor": "flow"})])
def test_agent_update_onednn_matches_torch(algo, extra):
    """Same seed, same batches: 20 updates with cpu_matmul onednn vs torch end at the same
    parameters (fp32 summation-order differences only), for every network kind."""
    opts = dict(actor_hidden=(64, 64), critic_hidden=(64, 64), batch_size=32, device="cpu", **extra)
    agents = {m: make_agent(algo, STATE, ACT, seed=0, cpu_matmul=m, **opts) for m in ("onednn", "torch")}
    kinds = {k: {type(m) for m in a.actor.modules()} for k, a in agents.items()}
    assert onednn.Linear in kinds["onednn"] and onednn.Linear not in kinds["torch"]
    buf = _buffer()
    for _ in range(20):
        batch = buf.sample(32)
        m = {k: a.update(batch) for k, a in agents.items()}
    assert m["onednn"].keys() == m["torch"].keys()
    for k in m["torch"]:
        assert m["onednn"][k] == pytest.approx(m["torch"][k], rel=1e-3, abs=1e-4), k
    for name in ("actor", "critic"):
        sa, sb = (getattr(agents[k], name).state_dict() for k in ("onednn", "torch"))
        for key in sb:
            torch.testing.assert_close(sa[key], sb[key], rtol=1e-3, atol=1e-4, msg=f"{name}.{key}")


def test_cpu_matmul_is_validated():
    with pytest.raises(ConfigError, match="cpu_matmul"):
        make_agent("sac", STATE, ACT, cpu_matmul="mkl")


@needs_op
def test_speed_suite_gemm_paths_compute_the_product():
    """Every fp32 path `measure_gemm_limit` times computes a real n x n x n product (so the
    limit is a rate of that product, not of a no-op), and the oneDNN routes are all there."""
    from robolearn.policies.speed import _gemm_paths

    paths = _gemm_paths(64, "cpu")
    names = " | ".join(paths)
    for route in ("mm ", "bmm ", "oneDNN linear dense", "oneDNN linear packed", "mkldnn_linear mkldnn tensors"):
        assert route in names, route
    for name, (fn, flops) in paths.items():
        out = fn()
        out = out.to_dense() if out.layout == torch._mkldnn else out
        assert out.shape[-2:] == (64, 64) and flops >= 2 * 64 ** 3, name
        assert torch.isfinite(out).all() and out.abs().sum() > 0, name

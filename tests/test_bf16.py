"""`cpu_matmul="bf16"`: the update's products in bf16 on oneDNN, everything else fp32.

Numerics only (never timing): the bf16 layers match fp32 within bf16 tolerance and really run
bf16 (operand dtypes recorded at the kernel), only inside the update (acting stays fp32); an
agent update is close to the fp32 one on a fixed batch; every preset trains without NaN; a
bf16 checkpoint is an fp32 checkpoint (loads into a `torch`-path agent) and resumes exactly.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from robolearn.policies import onednn
from robolearn.policies.networks import EnsembleMLP, mlp
from robolearn.policies.registry import make_agent
from tests.test_onednn import ACT, STATE, _buffer, _grads

needs_bf16 = pytest.mark.skipif(not onednn.bf16_available(), reason="oneDNN has no bf16 linear here")
SMALL = dict(actor_hidden=(64, 64), critic_hidden=(64, 64), batch_size=32, device="cpu")


# bf16 keeps 8 significant bits (relative rounding 2^-9 ~ 0.2 %); a random-sign dot product over
# 256 terms cancels by ~sqrt(256), so a few % relative error (in norm) is the format's, not a bug
BF16_REL = 8e-2


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp(min=1e-12))


@pytest.fixture
def kernel_dtypes(monkeypatch):
    """Record the dtype of the first operand of every oneDNN linear and bf16 `mm` call."""
    seen: list[torch.dtype] = []
    real_op, real_mm = onednn._OP, torch.mm

    def op(x, *a):
        seen.append(x.dtype)
        return real_op(x, *a)

    def mm(x, *a, **k):
        seen.append(x.dtype)
        return real_mm(x, *a, **k)

    monkeypatch.setattr(onednn, "_OP", op)
    monkeypatch.setattr(onednn.torch, "mm", mm)
    return seen


@needs_bf16
@pytest.mark.parametrize("relu,out_bf16", [(False, False), (True, False), (True, True)])
def test_bf16_linear_close_to_fp32(relu, out_bf16):
    torch.manual_seed(0)
    x, w, b = torch.randn(64, 256), torch.randn(128, 256) / 16, torch.randn(128)
    ref = _grads(lambda x, w, b: onednn.linear(x, w, b, relu), x, w, b)
    with onednn.bf16_region():
        got = _grads(lambda x, w, b: onednn.linear(x, w, b, relu, bf16=True, out_bf16=out_bf16), x, w, b)
    assert got[0].dtype == (torch.bfloat16 if out_bf16 else torch.float32)
    assert all(g.dtype == torch.float32 for g in got[1:])  # fp32 gradients for fp32 masters
    for r, g in zip(ref, got):
        assert _rel(g.float(), r) < BF16_REL
    assert _rel(got[2], ref[2]) > 1e-5  # bf16 rounding is visible: not the fp32 path
    # outside the region the same layer is the fp32 path
    out = _grads(lambda x, w, b: onednn.linear(x, w, b, relu, bf16=True, out_bf16=out_bf16), x, w, b)
    for r, g in zip(ref, out):
        torch.testing.assert_close(g, r)


@needs_bf16
@pytest.mark.parametrize("shared", [True, False])
def test_bf16_ensemble_close_to_fp32(shared):
    torch.manual_seed(0)
    ref = EnsembleMLP(3, 23 if shared else 256, (256, 256), 1)
    fast = onednn.use_onednn(copy.deepcopy(ref), bf16=True)
    assert fast.net[0].out_bf16 and fast.net[2].out_bf16  # each ReLU feeds another product
    x = torch.randn(64, 23) if shared else torch.randn(3, 64, 256)
    outs = []
    for net, bf16 in ((ref, False), (fast, True)):
        xi = x.clone().requires_grad_(True)
        with onednn.bf16_region(bf16):
            y = net(xi)
        (y * torch.linspace(-1, 1, y.numel()).reshape(y.shape)).sum().backward()
        outs.append([y.detach(), xi.grad] + [p.grad for p in net.parameters()])
    assert outs[1][0].dtype == torch.float32  # the Q head reads bf16 and returns fp32
    for r, g in zip(*outs):
        assert g.dtype == r.dtype
        assert _rel(g, r) < BF16_REL


@needs_bf16
def test_bf16_only_inside_the_update(kernel_dtypes):
    """The option really computes in bf16 (fails if it silently ran fp32), and only in the
    update: acting is fp32."""
    agent = make_agent("sac", STATE, ACT, seed=0, cpu_matmul="bf16", **SMALL)
    buf = _buffer()
    obs = {"state": np.zeros(7, np.float32)}
    agent.act(obs)
    agent.act(obs, deterministic=True)
    assert kernel_dtypes and set(kernel_dtypes) == {torch.float32}
    kernel_dtypes.clear()
    agent.update(buf.sample(32))
    n_bf16 = sum(d == torch.bfloat16 for d in kernel_dtypes)
    assert n_bf16 >= 10, kernel_dtypes  # critic, target, actor, the actor loss's critic
    kernel_dtypes.clear()
    agent.act(obs)
    assert set(kernel_dtypes) == {torch.float32}


@needs_bf16
def test_bf16_update_close_to_fp32_on_a_fixed_batch():
    """First update, same seed and batch: every gradient of the bf16 update within a few % of
    the fp32 (oneDNN) one, metrics within 1 %, and not identical (bf16 really ran)."""
    agents = {m: make_agent("sac", STATE, ACT, seed=0, cpu_matmul=m, actor_hidden=(256, 256),
                            critic_hidden=(256, 256), batch_size=256, device="cpu")
              for m in ("onednn", "bf16")}
    grads: dict[str, dict[str, torch.Tensor]] = {m: {} for m in agents}
    for m, a in agents.items():
        for net in ("actor", "critic"):
            for name, p in getattr(a, net).named_parameters():
                p.register_post_accumulate_grad_hook(
                    lambda p, m=m, key=f"{net}.{name}": [grads[m].setdefault(key, p.grad.clone())] and None)
    batch = _buffer(600).sample(256)
    metrics = {m: a.update(batch) for m, a in agents.items()}
    for k, v in metrics["onednn"].items():
        assert metrics["bf16"][k] == pytest.approx(v, rel=1e-2, abs=1e-3), k
    assert grads["bf16"].keys() == grads["onednn"].keys() and len(grads["onednn"]) >= 8
    worst = max(_rel(grads["bf16"][k], grads["onednn"][k]) for k in grads["onednn"])
    assert 1e-5 < worst < 5e-2, worst


@needs_bf16
@pytest.mark.parametrize("algo,extra", [("sac", {}), ("redq", {}), ("droq", {}), ("crossq", {}), ("rlpd", {}),
                                        ("sac", {"network": "simba", "simba_actor_width": 64,
                                                 "simba_critic_width": 64}),
                                        ("sac", {"actor": "flow"})])
def test_bf16_presets_train_with_fp32_state(algo, extra):
    """Every network kind trains (update raises TrainingError on NaN/inf) with fp32 parameters
    and optimiser state, and stays near the fp32 path over a few updates."""
    agents = {m: make_agent(algo, STATE, ACT, seed=0, cpu_matmul=m, **SMALL, **extra)
              for m in ("onednn", "bf16")}
    buf = _buffer()
    for _ in range(10):
        batch = buf.sample(32)
        m = {k: a.update(batch) for k, a in agents.items()}
    assert m["bf16"]["critic_loss"] == pytest.approx(m["onednn"]["critic_loss"], rel=0.1, abs=1e-2)
    sd = agents["bf16"].state_dict()
    for net in ("actor", "critic"):
        assert all(v.dtype in (torch.float32, torch.int64) for v in sd[net].values()), net
    for opt in ("actor_opt", "critic_opt"):
        for st in sd[opt]["state"].values():
            assert st["exp_avg"].dtype == torch.float32 and st["exp_avg_sq"].dtype == torch.float32


@needs_bf16
def test_bf16_checkpoint_is_an_fp32_checkpoint():
    """A bf16 run's state loads into a default (`torch` path) agent and acts the same; an fp32
    run's state loads into a bf16 agent."""
    bf = make_agent("sac", STATE, ACT, seed=0, cpu_matmul="bf16", **SMALL)
    buf = _buffer()
    for _ in range(5):
        bf.update(buf.sample(32))
    fp = make_agent("sac", STATE, ACT, seed=1, **SMALL)
    fp.load_state_dict(bf.state_dict())
    obs = {"state": np.linspace(-1, 1, 7).astype(np.float32)}
    np.testing.assert_allclose(fp.act(obs, deterministic=True), bf.act(obs, deterministic=True), atol=1e-5)
    fp.update(buf.sample(32))
    back = make_agent("sac", STATE, ACT, seed=2, cpu_matmul="bf16", **SMALL)
    back.load_state_dict(fp.state_dict())
    back.update(buf.sample(32))


@needs_bf16
def test_bf16_resume_is_exact():
    buf = _buffer()
    batches = [buf.sample(32) for _ in range(10)]
    a = make_agent("sac", STATE, ACT, seed=0, cpu_matmul="bf16", **SMALL)
    for batch in batches[:5]:
        a.update(batch)
    saved = a.state_dict()
    for batch in batches[5:]:
        a.update(batch)
    b = make_agent("sac", STATE, ACT, seed=3, cpu_matmul="bf16", **SMALL)
    b.load_state_dict(saved)
    for batch in batches[5:]:
        b.update(batch)
    for net in ("actor", "critic", "critic_target"):
        for k, v in a.state_dict()[net].items():
            assert torch.equal(v, b.state_dict()[net][k]), f"{net}.{k}"


def test_bf16_folding_keeps_fp32_where_it_feeds_other_ops():
    """A bf16 output only where a ReLU feeds another product: the actor's last hidden layer
    feeds the fp32 head through its ReLU, batch renorm and LayerNorm inputs stay fp32."""
    actor = onednn.use_onednn(mlp(7, (64, 64), 6), bf16=True)
    assert actor[0].bf16 and actor[0].out_bf16 and actor[2].out_bf16 and not actor[4].out_bf16
    crossq = onednn.use_onednn(mlp(7, (64, 64), 6, batch_renorm={}), bf16=True)
    assert not any(getattr(m, "out_bf16", False) for m in crossq)  # ReLU -> BatchRenorm
    plain = onednn.use_onednn(mlp(7, (64, 64), 6))
    assert not any(getattr(m, "bf16", False) for m in plain)

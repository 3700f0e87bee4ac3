"""The update's fast paths compute what the reference paths compute (numerics, not timing).

- the actor loss through a detached-weight alias of the critic == toggling requires_grad_;
- reading metrics every k updates (the GPU default) trains exactly like reading every update,
  and still stops on NaN;
- device-side replay sampling returns the host sampler's transitions;
- the FLOP count and GEMM limit of the speed suite are measured, not constants;
- on CUDA (skipped without a GPU): the CUDA-graph update == the eager update.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from robolearn.data.replay import DeviceReplay, ReplayBuffer
from robolearn.errors import TrainingError
from robolearn.policies.networks import detached_alias
from robolearn.policies.registry import make_agent

STATE = gym.spaces.Dict({"state": gym.spaces.Box(-np.inf, np.inf, (7,), np.float32)})
ACT = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
SMALL = dict(actor_hidden=(32, 32), critic_hidden=(32, 32), batch_size=16, device="cpu")


def _filled_buffer(n=300, seed=0, n_step=1):
    rng = np.random.default_rng(seed)
    buf = ReplayBuffer(STATE, ACT, n + 50, n_step=n_step, gamma=0.9, seed=seed)
    obs = rng.standard_normal((n + 1, 7)).astype(np.float32)
    for t in range(n):
        buf.add({"state": obs[t]}, rng.uniform(-1, 1, 3).astype(np.float32), float(rng.standard_normal()),
                {"state": obs[t + 1]}, bool(t % 37 == 36), bool(t % 50 == 49))
    return buf


class _ToggleCritic:
    """The reference actor-loss path: the critic itself with requires_grad_ switched off."""

    def __init__(self, critic, batch_renorm: bool):
        self.critic, self.batch_renorm = critic, batch_renorm

    def __call__(self, feat, action):
        self.critic.requires_grad_(False)
        if self.batch_renorm:
            self.critic.eval()
        q = self.critic(feat, action)
        self.critic.train()
        self.critic.requires_grad_(True)
        return q


def _params(agent):
    return [p.detach().clone() for p in list(agent.actor.parameters()) + list(agent.critic.parameters())
            + [agent.log_alpha]]


@pytest.mark.parametrize("algo", ["sac", "redq", "droq", "crossq"])
def test_detached_alias_actor_loss_equals_requires_grad_toggle(algo):
    opts = dict(SMALL, utd=2) if algo != "sac" else SMALL
    if algo == "crossq":
        opts["critic_hidden"] = (32, 32)
    fast = make_agent(algo, STATE, ACT, seed=3, **opts)
    ref = make_agent(algo, STATE, ACT, seed=3, **opts)
    ref._critic_frozen = _ToggleCritic(ref.critic, ref.config.critic_batch_renorm)
    buf = _filled_buffer()
    for _ in range(6):
        batch = buf.sample(16)
        assert fast.update(batch) == ref.update(batch)
    for a, b in zip(_params(fast), _params(ref)):
        assert torch.equal(a, b)  # bit-identical, so learning curves are too
    # the alias sees the critic's in-place optimiser steps and holds no grad of its own
    for p, q in zip(fast.critic.parameters(), fast._critic_frozen.parameters()):
        assert q.data_ptr() == p.data_ptr() and not q.requires_grad


def test_detached_alias_shares_storage_and_follows_load_state_dict():
    critic = torch.nn.Linear(4, 2)
    alias = detached_alias(critic)
    with torch.no_grad():
        critic.load_state_dict({"weight": torch.ones(2, 4), "bias": torch.zeros(2)})
    assert torch.equal(alias.weight, torch.ones(2, 4))
    assert not alias.weight.requires_grad and critic.weight.requires_grad


def test_check_every_trains_identically_and_still_stops_on_nan():
    every = make_agent("sac", STATE, ACT, seed=1, **SMALL)
    sparse = make_agent("sac", STATE, ACT, seed=1, check_every=4, **SMALL)
    buf = _filled_buffer()
    for i in range(1, 9):
        batch = buf.sample(16)
        m, s = every.update(batch), sparse.update(batch)
        assert s == (m if i % 4 == 0 else {})
    for a, b in zip(_params(every), _params(sparse)):
        assert torch.equal(a, b)
    with torch.no_grad():
        sparse.critic.mlp.net[0].weight[0, 0, 0] = float("nan")
    for i in range(9, 12):
        assert sparse.update(buf.sample(16)) == {}
    with pytest.raises(TrainingError, match=r"update 12: non-finite .*checked every 4 updates"):
        sparse.update(buf.sample(16))


@pytest.mark.parametrize("n_step", [1, 3])
def test_device_replay_samples_the_host_transitions(n_step):
    buf = _filled_buffer(n_step=n_step)
    dev = DeviceReplay(buf, "cpu", seed=5)
    idx = torch.as_tensor(np.arange(0, 290, 7))
    got, want = dev.gather(idx), buf.gather(idx.numpy())
    for k in ("action", "reward", "discount", "intervention"):
        np.testing.assert_allclose(getattr(got, k).numpy(), getattr(want, k), rtol=1e-6, err_msg=k)
    np.testing.assert_array_equal(got.obs["state"].numpy(), want.obs["state"])
    np.testing.assert_array_equal(got.next_obs["state"].numpy(), want.next_obs["state"])
    batch = dev.sample(64)  # uniform over sampleable slots only
    assert batch.action.shape == (64, 3) and isinstance(batch.action, torch.Tensor)
    valid = set(np.flatnonzero(buf._valid).tolist())
    assert set(dev.last_indices.tolist()) <= valid
    # new transitions reach the device copy
    before = dev.size
    buf.add({"state": np.zeros(7, np.float32)}, np.zeros(3, np.float32), 1.0,
            {"state": np.ones(7, np.float32)}, False, False)
    dev.refresh()
    assert dev.size == before + 1


def test_agent_updates_from_device_batches_like_host_batches():
    buf = _filled_buffer()
    dev = DeviceReplay(buf, "cpu", seed=0)
    a = make_agent("sac", STATE, ACT, seed=2, **SMALL)
    b = make_agent("sac", STATE, ACT, seed=2, **SMALL)
    for _ in range(3):
        idx = torch.randint(0, 290, (16,))
        ma, mb = a.update(dev.gather(idx)), b.update(buf.gather(idx.numpy()))
        assert ma.keys() == mb.keys()
        for k in ma:
            assert ma[k] == pytest.approx(mb[k], rel=1e-5, abs=1e-6)


def test_speed_suite_counts_flops_and_measures_gemm_limit():
    from robolearn.policies.speed import measure_gemm_limit
    from robolearn.policies.speed_harness import count_update_flops

    buf = _filled_buffer()
    small = count_update_flops("sac", STATE, ACT, buf, 16, "cpu", 0,
                               actor_hidden=(32, 32), critic_hidden=(32, 32))
    big = count_update_flops("sac", STATE, ACT, buf, 16, "cpu", 0,
                             actor_hidden=(64, 64), critic_hidden=(64, 64))
    assert 0 < small < big  # counted from the layers that ran, not a constant
    # 2 critics x (10x32 + 32x32 + 32x1) + actor (7x32 + 32x32 + 32x6) forward products alone
    assert small > 2 * 16 * (2 * (10 * 32 + 32 * 32 + 32) + (7 * 32 + 32 * 32 + 32 * 6))
    lim = measure_gemm_limit("cpu", sizes=(64,), min_time=0.01)
    assert lim["limit_gflops"]["cpu"] == max(v["cpu"] for v in lim["paths_gflops"].values()) > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("algo", ["sac", "redq"])
def test_cuda_graph_update_equals_eager(algo):
    opts = dict(SMALL, device="cuda", check_every=1)
    if algo == "redq":
        opts["utd"] = 4
    graphed = make_agent(algo, STATE, ACT, seed=4, **opts)
    eager = make_agent(algo, STATE, ACT, seed=4, cuda_graph=False, **opts)
    buf = _filled_buffer()
    for _ in range(12):
        batch = buf.sample(16)
        mg, me = graphed.update(batch), eager.update(batch)
        for k in me:
            assert mg[k] == pytest.approx(me[k], rel=1e-4, abs=1e-5), k
    for a, b in zip(_params(graphed), _params(eager)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_graph_resume_and_nan_check():
    opts = dict(SMALL, device="cuda", check_every=1)
    graphed = make_agent("sac", STATE, ACT, seed=6, **opts)
    buf = _filled_buffer()
    for _ in range(6):
        graphed.update(buf.sample(16))
    state = graphed.state_dict()
    eager = make_agent("sac", STATE, ACT, seed=6, cuda_graph=False, **opts)
    eager.load_state_dict(state)
    graphed.load_state_dict(state)  # new optimiser tensors: the graphs are captured again
    for _ in range(6):
        batch = buf.sample(16)
        mg, me = graphed.update(batch), eager.update(batch)
        for k in me:
            assert mg[k] == pytest.approx(me[k], rel=1e-4, abs=1e-5), k
    with torch.no_grad():
        graphed.critic.mlp.net[0].weight[0, 0, 0] = float("nan")
    with pytest.raises(TrainingError, match="non-finite"):
        graphed.update(buf.sample(16))


def test_two_agents_loaded_from_one_state_do_not_share_optimiser_moments():
    buf = _filled_buffer()
    src = make_agent("sac", STATE, ACT, seed=7, **SMALL)
    for _ in range(3):
        src.update(buf.sample(16))
    state = src.state_dict()
    a = make_agent("sac", STATE, ACT, seed=7, **SMALL)
    b = make_agent("sac", STATE, ACT, seed=7, **SMALL)
    a.load_state_dict(state)
    b.load_state_dict(state)
    for _ in range(3):
        batch = buf.sample(16)
        assert a.update(batch) == b.update(batch)


def test_speed_suite_reports_everything_in_one_run_and_names_non_plain_presets():
    pytest.importorskip("stable_baselines3")
    from robolearn.bench.learners import speed_markdown
    from robolearn.policies.speed import measure_speed_suite

    lines = []
    out = measure_speed_suite(threads=(1,), steps=4, obs_dim=5, action_dim=2, warmup=1, rounds=2,
                              batch_size=32, print_fn=lines.append)
    r = out["per_threads"]["1"]
    assert out["sac_update_flops"] > 0 and out["gemm_limit_gflops"] > 0
    achieved = r["ours_sac_cpu_updates_per_s"] * out["sac_update_flops"] / 1e9
    assert out["sac_fraction_of_limit"] == pytest.approx(achieved / out["gemm_limit_gflops"])
    assert out["sac_speedup_vs_sb3_1thread"] == pytest.approx(r["sac_speedup_vs_sb3_cpu"])
    assert out["redq10_vs_2_flop_ratio"] > 1
    md = "\n".join(speed_markdown(out))
    # "ours" is the fastest fp32 path of this run (it depends on the CPU), named with its options;
    # batch 32 is not the preset's 256: the report must say so rather than call it plain `sac`
    paths = r["cpu_paths_updates_per_s"]
    assert set(paths) == {"manual+onednn", "manual+torch", "autograd+onednn", "autograd+torch (default)"}
    fp32 = {k: v for k, v in paths.items() if "default" not in k}
    assert r["ours_sac_cpu_updates_per_s"] == max(fp32.values())
    assert f"`sac` preset with {out['ours_sac_preset_overrides']}" in md and "sac_fraction_of_limit" in md
    assert out["ours_sac_preset_overrides"]["batch_size"] == 32
    assert out["cpu"]["torch_cpu_capability"] and "- CPU: " in md
    assert any("sac preset with" in line for line in lines)
    from robolearn.policies import onednn
    if onednn.bf16_available():  # the bf16 option is timed in the same rounds, with its limit
        gemm = r["gemm"]
        assert gemm["bf16_limit_gflops_cpu"] == max(gemm["bf16_mm_256_gflops_cpu"],
                                                     gemm["bf16_onednn_linear_256_gflops_cpu"]) > 0
        assert out["sac_bf16_speedup_vs_sb3"] == pytest.approx(
            r["ours_sac_bf16_updates_per_s"] / r["sb3_sac_cpu_updates_per_s"])
        assert out["sac_bf16_fraction_of_bf16_limit"] == pytest.approx(
            r["ours_sac_bf16_updates_per_s"] * out["sac_update_flops"] / 1e9 / gemm["bf16_limit_gflops_cpu"])
        assert "cpu_matmul=\"bf16\"" in md and any("cpu_matmul='bf16'" in line for line in lines)

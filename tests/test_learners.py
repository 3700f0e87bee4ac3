"""SAC-family learner: presets, batched ensembles, CrossQ batching, NaN guard, state round trips."""
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from robolearn.data.replay import Batch, ReplayBuffer
from robolearn.errors import ConfigError, DatasetError, TrainingError
from robolearn.policies.encoders import random_shift
from robolearn.policies.networks import EnsembleBatchRenorm, EnsembleMLP
from robolearn.policies.registry import ALGOS, make_agent, make_config

ACT = gym.spaces.Box(-1, 1, (2,), np.float32)
STATE = gym.spaces.Dict({"state": gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)})
PIXELS = gym.spaces.Dict({"state": gym.spaces.Box(-np.inf, np.inf, (4,), np.float32),
                          "front": gym.spaces.Box(0, 255, (16, 16, 3), np.uint8)})
TINY = dict(actor_hidden=(32, 32), critic_hidden=(32, 32), batch_size=16, feature_dim=8,
            encoder_filters=4, encoder_layers=2)


def batch_for(space, n=16, seed=0):
    rng = np.random.default_rng(seed)

    def obs():
        o = {"state": rng.standard_normal((n, 4)).astype(np.float32)}
        if "front" in space.spaces:
            o["front"] = rng.integers(0, 256, (n, 16, 16, 3), dtype=np.uint8)
        return o

    return Batch(obs=obs(), action=rng.uniform(-1, 1, (n, 2)).astype(np.float32),
                 reward=rng.standard_normal(n).astype(np.float32), next_obs=obs(),
                 discount=np.full(n, 0.99, np.float32), intervention=np.zeros(n, bool))


def space_for(algo):
    return PIXELS if algo == "drq" else STATE


@pytest.mark.parametrize("algo", sorted(ALGOS))
def test_each_preset_builds_acts_and_updates(algo):
    space = space_for(algo)
    agent = make_agent(algo, space, ACT, seed=0, **TINY)
    cfg = agent.config
    for _ in range(cfg.actor_every):
        m = agent.update(batch_for(space))
    assert agent.num_updates == cfg.actor_every
    assert {"critic_loss", "actor_loss", "alpha", "q"} <= set(m)
    assert all(math.isfinite(v) for v in m.values())
    o = {k: v[0] for k, v in batch_for(space, 1).obs.items()}
    for det in (False, True):
        a = agent.act(o, deterministic=det)
        assert a.dtype == np.float32 and a.shape == (2,) and np.all(np.abs(a) <= 1)


@pytest.mark.parametrize("algo", sorted(set(ALGOS) - {"drq"}))
def test_each_preset_composes_with_pixels(algo):
    agent = make_agent(algo, PIXELS, ACT, seed=0, pixels=True, **TINY)
    before = [p.detach().clone() for p in agent.encoder.parameters()]
    m = agent.update(batch_for(PIXELS))
    assert all(math.isfinite(v) for v in m.values())
    assert any(not torch.equal(a, b) for a, b in zip(before, agent.encoder.parameters()))
    o = {k: v[0] for k, v in batch_for(PIXELS, 1).obs.items()}
    assert agent.act(o).shape == (2,)


def test_presets_follow_the_papers():
    assert make_config("redq").num_critics == 10 and make_config("redq").num_target_min == 2
    assert make_config("redq").utd == 20 and make_config("redq").actor_q == "mean"
    assert make_config("redq").actor_every == 20  # actor once per env step ...
    assert make_config("redq", utd=5).actor_every == 5  # ... also when utd is overridden
    droq = make_config("droq")
    assert droq.critic_dropout == 0.01 and droq.critic_layer_norm and droq.utd == 20
    cq = make_config("crossq")
    assert not cq.target_network and cq.critic_batch_renorm and cq.adam_beta1 == 0.5
    assert cq.utd == 1 and cq.policy_delay == 3 and cq.critic_hidden == (2048, 2048)
    rl = make_config("rlpd")
    assert rl.prior_fraction == 0.5 and rl.critic_layer_norm and rl.num_critics == 10
    assert make_config("drq").pixels
    sac = make_config("sac")
    assert (sac.tau, sac.gamma, sac.batch_size, sac.critic_lr, sac.utd) == (0.005, 0.99, 256, 3e-4, 1)


def test_pixels_compose_with_other_presets():
    agent = make_agent("rlpd", PIXELS, ACT, pixels=True, **TINY)
    assert agent.encoder is not None and agent.config.num_critics == 10
    agent.update(batch_for(PIXELS))
    with pytest.raises(ConfigError, match="pixels=True"):
        make_agent("sac", PIXELS, ACT)
    with pytest.raises(ConfigError, match="no uint8"):
        make_agent("drq", STATE, ACT)


def test_encoder_trained_by_critic_only_and_freezable(tmp_path):
    agent = make_agent("drq", PIXELS, ACT, **TINY)
    enc = set(map(id, agent.encoder.parameters()))
    assert enc <= {id(p) for g in agent.critic_opt.param_groups for p in g["params"]}
    assert not enc & {id(p) for g in agent.actor_opt.param_groups for p in g["params"]}
    # the actor step must not write into encoder grads: after update only critic grads exist
    before = [p.detach().clone() for p in agent.encoder.parameters()]
    agent.update(batch_for(PIXELS))
    assert any(not torch.equal(a, b) for a, b in zip(before, agent.encoder.parameters()))
    # pretrained from a local safetensors file, frozen
    from safetensors.torch import save_file

    path = tmp_path / "enc.safetensors"
    save_file({k: v.contiguous() for k, v in agent.encoder.encoders["front"].state_dict().items()}, str(path))
    frozen = make_agent("drq", PIXELS, ACT, encoder_checkpoint=str(path), freeze_encoder=True, **TINY)
    for a, b in zip(frozen.encoder.parameters(), agent.encoder.parameters()):
        assert torch.equal(a, b)
    frozen.update(batch_for(PIXELS))
    for a, b in zip(frozen.encoder.parameters(), agent.encoder.parameters()):
        assert torch.equal(a, b)
    with pytest.raises(DatasetError, match="not found"):
        make_agent("drq", PIXELS, ACT, encoder_checkpoint=str(tmp_path / "missing.safetensors"), **TINY)


def test_random_shift_is_a_shift_of_the_padded_image():
    g = torch.Generator().manual_seed(0)
    x = torch.arange(2 * 3 * 10 * 12, dtype=torch.float32).reshape(2, 3, 10, 12)
    y = random_shift(x, 4, g)
    assert y.shape == x.shape
    padded = F.pad(x, (4, 4, 4, 4), mode="replicate")
    for b in range(2):
        hits = [(dy, dx) for dy in range(9) for dx in range(9)
                if torch.equal(y[b], padded[b, :, dy:dy + 10, dx:dx + 12])]
        assert len(hits) == 1


def test_ensemble_equals_loop_over_members():
    torch.manual_seed(0)
    E, B, D, H = 3, 5, 6, 7
    mlp = EnsembleMLP(E, D, (H, H), 1, layer_norm=True)
    with torch.no_grad():  # give each member distinct LayerNorm affines
        for m in mlp.modules():
            if hasattr(m, "weight") and m.weight.dim() == 3 and m.weight.shape[1] == 1:
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
    x = torch.randn(B, D)
    out = mlp(x)
    assert out.shape == (E, B, 1)
    linears = [m for m in mlp.net if type(m).__name__ == "EnsembleLinear"]
    norms = [m for m in mlp.net if type(m).__name__ == "EnsembleLayerNorm"]
    for e in range(E):
        h = x
        for i, lin in enumerate(linears):
            h = h @ lin.weight[e] + lin.bias[e, 0]
            if i < len(norms):
                h = F.layer_norm(h, (H,), norms[i].weight[e, 0], norms[i].bias[e, 0]).relu()
        torch.testing.assert_close(out[e], h)
    members = torch.tensor([2, 0])  # REDQ target subset: only these members are evaluated
    torch.testing.assert_close(mlp(x, members), out[members])


def test_batch_renorm_per_member_stats_and_eval_mode():
    brn = EnsembleBatchRenorm(2, 3, momentum=0.5, warmup_steps=0)
    x = torch.randn(2, 64, 3) * torch.tensor([1.0, 5.0]).view(2, 1, 1) + 3.0
    brn.train()
    brn(x)
    torch.testing.assert_close(brn.running_mean, 0.5 * x.mean(1, keepdim=True))
    brn.eval()
    y = brn(x)
    ref = (x - brn.running_mean) / torch.sqrt(brn.running_var + brn.eps)
    torch.testing.assert_close(y, ref)


def test_crossq_passes_current_and_next_in_one_batch():
    agent = make_agent("crossq", STATE, ACT, seed=0, **TINY)
    assert agent.critic_target is None
    b = batch_for(STATE)
    first = agent.critic.mlp.net[0]
    assert isinstance(first, EnsembleBatchRenorm)
    agent.update(b)
    # input BRN statistics were computed over [s; s'] (2B rows): state part of the mean
    m = agent.config.renorm_momentum
    expect = m * np.concatenate([b.obs["state"], b.next_obs["state"]]).mean(0)
    np.testing.assert_allclose(first.running_mean[0, 0, :4].numpy(), expect, rtol=1e-5, atol=1e-6)
    wrong = m * b.obs["state"].mean(0)
    assert not np.allclose(first.running_mean[0, 0, :4].numpy(), wrong, atol=1e-4)


def test_redq_update_uses_a_random_subset():
    agent = make_agent("redq", STATE, ACT, **TINY)
    assert agent.critic.mlp.net[0].weight.shape[0] == 10  # one batched ensemble of 10
    subsets = []
    for i in range(8):
        agent.update(batch_for(STATE, seed=i))
        members = agent.last_target_members.tolist()
        assert len(set(members)) == 2 and all(0 <= m < 10 for m in members)
        subsets.append(tuple(sorted(members)))
    assert len(set(subsets)) > 1  # a fresh random pair per update
    sac = make_agent("sac", STATE, ACT, **TINY)
    sac.update(batch_for(STATE))
    assert sac.last_target_members is None  # min over both critics


def check_nan_guard(agent, poison) -> None:
    """A NaN reward in a batch stops update 2, a NaN weight (`poison(agent)`) stops update 4,
    each naming the update: shared by every network and actor kind."""
    agent.update(batch_for(STATE))
    bad = batch_for(STATE)
    bad.reward[3] = np.nan
    with pytest.raises(TrainingError, match="update 2"):
        agent.update(bad)
    agent.update(batch_for(STATE))
    with torch.no_grad():
        poison(agent)
    with pytest.raises(TrainingError, match=r"update 4: non-finite .*critic_loss"):
        agent.update(batch_for(STATE))


def test_nan_in_batch_or_parameter_raises_with_update_number():
    check_nan_guard(make_agent("sac", STATE, ACT, **TINY),
                    lambda a: a.critic.mlp.net[0].weight.__setitem__((0, 0, 0), float("nan")))


def test_unknown_algo_and_option():
    with pytest.raises(ConfigError, match="sac, redq, droq, crossq, rlpd, drq"):
        make_agent("ppo", STATE, ACT)
    with pytest.raises(ConfigError, match="unknown option"):
        make_agent("sac", STATE, ACT, hidden_size=3)
    with pytest.raises(ConfigError, match="num_target_min"):
        make_agent("redq", STATE, ACT, num_critics=1)
    with pytest.raises(ConfigError, match="RescaleAction"):
        make_agent("sac", STATE, gym.spaces.Box(-2, 2, (1,), np.float32))
    assert list(ALGOS) == ["sac", "redq", "droq", "crossq", "rlpd", "drq"]


@pytest.mark.parametrize("algo", ["sac", "droq", "redq", "crossq", "drq"])
def test_state_dict_round_trip_is_exact(algo):
    space = space_for(algo)
    a = make_agent(algo, space, ACT, seed=1, policy_delay=2, **TINY)
    for i in range(3):
        a.update(batch_for(space, seed=i))
    o = {k: v[0] for k, v in batch_for(space, 1, seed=7).obs.items()}
    a.act(o)
    sd = a.state_dict()
    b = make_agent(algo, space, ACT, seed=2, policy_delay=2, **TINY)
    b.load_state_dict(sd)
    assert b.num_updates == 3
    np.testing.assert_array_equal(a.act(o, deterministic=True), b.act(o, deterministic=True))
    np.testing.assert_array_equal(a.act(o), b.act(o))
    batch = batch_for(space, seed=9)
    assert a.update(batch) == b.update(batch)
    for (n, p), q in zip(a.critic.state_dict().items(), b.critic.state_dict().values()):
        assert torch.equal(p, q), n
    for p, q in zip(a.actor.parameters(), b.actor.parameters()):
        assert torch.equal(p, q)


def test_policy_state_is_safetensors_serialisable(tmp_path):
    from safetensors.torch import load_file, save_file

    a = make_agent("drq", PIXELS, ACT, seed=0, **TINY)
    a.update(batch_for(PIXELS))
    ps = a.policy_state()
    assert all(isinstance(v, torch.Tensor) for v in ps.values())
    assert any(k.startswith("encoder.") for k in ps) and any(k.startswith("actor.") for k in ps)
    save_file(ps, str(tmp_path / "policy.safetensors"))
    b = make_agent("drq", PIXELS, ACT, seed=5, **TINY)
    b.load_policy_state(load_file(str(tmp_path / "policy.safetensors")))
    o = {k: v[0] for k, v in batch_for(PIXELS, 1).obs.items()}
    np.testing.assert_array_equal(a.act(o, deterministic=True), b.act(o, deterministic=True))
    other = make_agent("drq", PIXELS, ACT, actor_hidden=(8,), **{k: v for k, v in TINY.items()
                                                                  if k != "actor_hidden"})
    with pytest.raises(DatasetError, match="does not fit"):
        other.load_policy_state(ps)
    with pytest.raises(ConfigError, match="lacks"):
        a.act({"state": o["state"]})


class PointGoal(gym.Env):
    """1-D point to a random goal in 20 steps: reward -|x - goal|. A random policy scores
    about -10; a good one about -2."""

    observation_space = gym.spaces.Dict({"state": gym.spaces.Box(-2, 2, (2,), np.float32)})
    action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x, self.goal, self.t = 0.0, float(self.np_random.uniform(-1, 1)), 0
        return self._obs(), {}

    def _obs(self):
        return {"state": np.array([self.x, self.goal], np.float32)}

    def step(self, action):
        self.x = float(np.clip(self.x + 0.2 * float(action[0]), -2, 2))
        self.t += 1
        return self._obs(), -abs(self.x - self.goal), False, self.t >= 20, {}


def run_episodes(env, policy, n, seed):
    total = 0.0
    for ep in range(n):
        o, _ = env.reset(seed=seed + ep)
        done = False
        while not done:
            o, r, term, trunc, _ = env.step(policy(o))
            total += r
            done = term or trunc
    return total / n


def learn_point_goal(agent, steps: int = 1500, start: int = 200, batch: int = 64) -> tuple[float, float]:
    """Train `agent` online on PointGoal; (its deterministic return, a random policy's)."""
    env = PointGoal()
    buf = ReplayBuffer(env.observation_space, env.action_space, 5000, seed=0)
    rng = np.random.default_rng(0)
    o, _ = env.reset(seed=0)
    for step in range(steps):
        a = rng.uniform(-1, 1, 1).astype(np.float32) if step < start else agent.act(o)
        o2, r, term, trunc, _ = env.step(a)
        buf.add(o, a, r, o2, term, trunc)
        o = o2
        if term or trunc:
            o, _ = env.reset()
        if step >= start:
            agent.update(buf.sample(batch))
    random_ret = run_episodes(env, lambda o: rng.uniform(-1, 1, 1), 10, seed=100)
    learned = run_episodes(env, lambda o: agent.act(o, deterministic=True), 10, seed=100)
    return learned, random_ret


def test_sac_learns_a_tiny_task():
    env = PointGoal()
    agent = make_agent("sac", env.observation_space, env.action_space, seed=0,
                       actor_hidden=(64, 64), critic_hidden=(64, 64), batch_size=64)
    learned, random_ret = learn_point_goal(agent)
    assert learned > random_ret + 4, (learned, random_ret)
    assert learned > -4.0, learned


@pytest.mark.parametrize("algo", ["droq", "drq"])
def test_state_dict_saved_without_pickle_resumes_exactly(tmp_path, algo):
    from robolearn.policies.serialize import load_state, save_state

    space = space_for(algo)
    a = make_agent(algo, space, ACT, seed=3, policy_delay=1, **TINY)
    a.update(batch_for(space, seed=1))
    save_state(tmp_path / "agent.safetensors", a.state_dict())
    loaded = load_state(tmp_path / "agent.safetensors")
    assert loaded["config"]["critic_hidden"] == (32, 32) and loaded["num_updates"] == 1
    from robolearn.policies.registry import agent_from_state

    b = agent_from_state(loaded, space, ACT)
    batch = batch_for(space, seed=2)
    assert a.update(batch) == b.update(batch)
    for p, q in zip(a.critic.parameters(), b.critic.parameters()):
        assert torch.equal(p, q)
    with pytest.raises(DatasetError, match="not found"):
        load_state(tmp_path / "missing.safetensors")


def test_measure_update_speed_runs_both_learners():
    pytest.importorskip("stable_baselines3")
    from robolearn.policies.speed import measure_update_speed

    lines = []
    out = measure_update_speed(obs_dim=5, action_dim=2, steps=4, warmup=1, rounds=2, batch_size=32,
                               print_fn=lines.append)
    for k in ("ours_sac_updates_per_s", "sb3_sac_updates_per_s", "redq10_updates_per_s",
              "redq2_updates_per_s"):
        assert out[k] > 0
    assert out["sac_speedup_vs_sb3"] == pytest.approx(out["ours_sac_updates_per_s"] / out["sb3_sac_updates_per_s"])
    assert any("SB3" in line for line in lines)


def test_speed_suite_measures_rlpd_against_its_bound_and_a_10hz_robot():
    """Issue 25: `rlpd` (10 critics, UTD 20) must keep up with a 10 Hz robot (200 updates/s).
    The suite measures it on the last thread count, with its bound: every counted FLOP at the
    same run's fastest GEMM rate (so a bound below 200 means no implementation can)."""
    from robolearn.bench.learners import speed_markdown
    from robolearn.policies.speed import RLPD_KEEP_UP_UPDATES_PER_S, measure_speed_suite

    out = measure_speed_suite(threads=(1,), steps=3, obs_dim=5, action_dim=2, warmup=1, rounds=1,
                              batch_size=32, include_sb3=False, print_fn=lambda *_: None)
    assert out["rlpd_updates_per_s"] > 0 and out["rlpd_threads"] == 1
    assert out["rlpd_keep_up_updates_per_s"] == RLPD_KEEP_UP_UPDATES_PER_S == 200
    limit = out["per_threads"]["1"]["gemm_limit_gflops"]
    for key in ("rlpd", "rlpd_2x256"):
        assert out[f"{key}_bound_updates_per_s"] == pytest.approx(limit * 1e9 / out[f"{key}_update_flops"])
    # the paper's 3x256 networks cost more than 2x256 ones, and both exceed a 2-critic sac's
    assert out["rlpd_update_flops"] > out["rlpd_2x256_update_flops"] > out["sac_update_flops"]
    text = "\n".join(speed_markdown(out))
    assert "`rlpd` (10 critics, 3x256, UTD 20) on 1 thread(s)" in text and "a 10 Hz robot needs 200" in text


@pytest.mark.slow
def test_update_speed_claims():
    """Issue 4: our sac beats SB3 SAC in updates/s; a 10-critic update costs well under 10x."""
    pytest.importorskip("stable_baselines3")
    from robolearn.policies.speed import measure_update_speed

    out = measure_update_speed(steps=150, rounds=5)
    assert out["sac_speedup_vs_sb3"] > 1.0, out
    assert out["redq10_vs_2_cost_ratio"] < 6.0, out


class DictObs(gym.ObservationWrapper):
    """Pendulum's vector obs as robolearn's {'state': ...} dict."""

    def __init__(self, env):
        super().__init__(env)
        self.observation_space = gym.spaces.Dict({"state": env.observation_space})

    def observation(self, obs):
        return {"state": np.asarray(obs, np.float32)}


@pytest.mark.slow
def test_sac_learns_pendulum():
    """8000 env steps: at 5000 (the old budget) sac ended at -145..-458 over seeds 0-3, one
    below -400, so the check depended on the unseeded warm-up; at 8000 seeds 0, 1, 4 end at
    about -143 (the optimum is about -150)."""
    one = np.ones(1, np.float32)
    env = DictObs(gym.wrappers.RescaleAction(gym.make("Pendulum-v1"), -one, one))
    env.action_space.seed(0)  # the random warm-up actions, so the test is repeatable
    agent = make_agent("sac", env.observation_space, env.action_space, seed=0,
                       actor_hidden=(128, 128), critic_hidden=(128, 128))
    buf = ReplayBuffer(env.observation_space, env.action_space, 10_000, seed=0)
    o, _ = env.reset(seed=0)
    for step in range(8000):
        a = env.action_space.sample() if step < 500 else agent.act(o)
        o2, r, term, trunc, _ = env.step(a)
        buf.add(o, a, r, o2, term, trunc)
        o = o2
        if term or trunc:
            o, _ = env.reset()
        if step >= 500:
            agent.update(buf.sample(256))
    ret = run_episodes(env, lambda o: agent.act(o, deterministic=True), 5, seed=1000)
    assert ret > -400, ret  # random policy: about -1200


@pytest.mark.slow
@pytest.mark.parametrize("algo,utd", [("sac", 1), ("redq", 5), ("droq", 5), ("crossq", 1), ("rlpd", 5)])
def test_every_preset_learns_the_tiny_task(algo, utd):
    """800 env steps: high-UTD presets reach about -2.3 here where sac at UTD 1 is near -6."""
    env = PointGoal()
    agent = make_agent(algo, env.observation_space, env.action_space, seed=0, actor_hidden=(64, 64),
                       critic_hidden=(64, 64), batch_size=64, utd=utd,
                       policy_delay=3 if algo == "crossq" else utd)
    buf = ReplayBuffer(env.observation_space, env.action_space, 5000, seed=0)
    rng = np.random.default_rng(0)
    o, _ = env.reset(seed=0)
    for step in range(800 if algo != "sac" else 1500):
        a = rng.uniform(-1, 1, 1).astype(np.float32) if step < 200 else agent.act(o)
        o2, r, term, trunc, _ = env.step(a)
        buf.add(o, a, r, o2, term, trunc)
        o = o2
        if term or trunc:
            o, _ = env.reset()
        if step >= 200:
            for _ in range(utd):
                agent.update(buf.sample(64))
    learned = run_episodes(env, lambda o: agent.act(o, deterministic=True), 10, seed=100)
    assert learned > -4.0, learned


def test_running_norm_merges_batches_exactly():
    from robolearn.policies.networks import RunningNorm

    x = torch.randn(300, 3, dtype=torch.float64) * torch.tensor([1.0, 10.0, 0.1], dtype=torch.float64) + 5
    norm = RunningNorm(3).double()
    for chunk in x.split([100, 50, 150]):
        norm.update(chunk)
    torch.testing.assert_close(norm.mean, x.mean(0))
    torch.testing.assert_close(norm.var, x.var(0, unbiased=False))
    y = norm(x)
    torch.testing.assert_close(y.mean(0), torch.zeros(3, dtype=torch.float64), atol=1e-6, rtol=0)


def test_obs_normalisation_travels_with_the_policy():
    a = make_agent("sac", STATE, ACT, seed=0, normalize_obs=True, **TINY)
    b = batch_for(STATE)
    b.obs["state"] *= 100.0
    a.update(b)
    np.testing.assert_allclose(a.obs_norm.mean.numpy(), b.obs["state"].mean(0), rtol=1e-5, atol=1e-4)
    ps = a.policy_state()
    assert {"obs_norm.mean", "obs_norm.var"} <= set(ps)
    c = make_agent("sac", STATE, ACT, seed=1, normalize_obs=True, **TINY)
    c.load_policy_state(ps)
    o = {"state": b.obs["state"][0]}
    np.testing.assert_array_equal(a.act(o, deterministic=True), c.act(o, deterministic=True))
    d = make_agent("sac", STATE, ACT, seed=1, normalize_obs=True, **TINY)
    d.load_state_dict(a.state_dict())
    assert a.update(b) == d.update(b)


def test_cpu_allocator_tuning_stops_page_faults():
    import platform
    import resource

    from robolearn.policies.cpu import keep_freed_memory

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc only")
    assert keep_freed_memory() is True and keep_freed_memory() is True  # idempotent
    mlp_ = EnsembleMLP(10, 23, (256, 256), 1)
    x = torch.randn(256, 23)
    for _ in range(3):
        mlp_(x).square().mean().backward()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        mlp_(x).square().mean().backward()
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5
    assert faults < 200, faults  # untuned glibc: ~1700 per step (fresh mmap'd pages)


@pytest.mark.parametrize("backup_entropy", [True, False])
def test_td_target_entropy_term_follows_backup_entropy(backup_entropy):
    """target = r + discount * (min_e Q'(s', a') [- alpha log pi(a'|s')]): the sparse-reward
    runs (claims-rlpd) drop the entropy term, as SERL does, so it must really be gone."""
    agent = make_agent("sac", STATE, ACT, seed=3, init_temperature=5.0,
                       backup_entropy=backup_entropy, **TINY)
    b = batch_for(STATE, seed=7)
    gen = torch.Generator().manual_seed(0)
    gen.set_state(agent.generator.get_state())  # the update's own random stream, replayed
    with torch.no_grad():
        s, s2 = torch.as_tensor(b.obs["state"]), torch.as_tensor(b.next_obs["state"])
        a2, logp2 = agent.actor.sample(s2, gen)
        v = agent.critic_target(s2, a2).min(0).values
        q = agent.critic(s, torch.as_tensor(b.action))
        r, d = torch.as_tensor(b.reward), torch.as_tensor(b.discount)
        with_ent = r + d * (v - 5.0 * logp2)
        without = r + d * v
        loss = {True: 0.5 * (q - with_ent).pow(2).mean(1).sum(),
                False: 0.5 * (q - without).pow(2).mean(1).sum()}
    assert abs(float(loss[True] - loss[False])) > 1e-3  # the two targets really differ here
    got = agent.update(b)["critic_loss"]
    assert got == pytest.approx(float(loss[backup_entropy]), rel=1e-5)

"""`cpu_update="manual"`: the hand-written SAC/REDQ update must be the autograd update.

Each check starts two agents from one state, feeds them the same batches and compares what
autograd computes (losses, every gradient, the random draws) with the hand-written path. A
wrong sign, a missing term (the squash correction, the entropy-dims slice, the REDQ subset,
the min's argmin routing) or a draw out of order fails these at once.
"""
import gymnasium as gym
import numpy as np
import pytest
import torch

from robolearn.data.replay import Batch
from robolearn.errors import ConfigError
from robolearn.policies.manual_update import adam_step
from robolearn.policies.registry import make_agent

OBS, PRIV, ACT_DIM, B = 9, 4, 5, 64
SPACES = gym.spaces.Dict({"state": gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)})
SPACES_PRIV = gym.spaces.Dict({"state": gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32),
                               "privileged": gym.spaces.Box(-np.inf, np.inf, (PRIV,), np.float32)})
ACT = gym.spaces.Box(-1, 1, (ACT_DIM,), np.float32)


def _batch(rng: np.random.Generator, privileged: bool = False) -> Batch:
    def obs():
        d = {"state": rng.standard_normal((B, OBS)).astype(np.float32)}
        if privileged:
            d["privileged"] = rng.standard_normal((B, PRIV)).astype(np.float32)
        return d

    return Batch(obs=obs(), action=rng.uniform(-1, 1, (B, ACT_DIM)).astype(np.float32),
                 reward=rng.standard_normal(B).astype(np.float32), next_obs=obs(),
                 discount=np.full(B, 0.99, np.float32) * (rng.random(B) > 0.1),
                 intervention=rng.random(B) < 0.2, prior=rng.random(B) < 0.5)


def _pair(algo: str, spaces=SPACES, **options):
    options = {"critic_hidden": (32, 32), "actor_hidden": (32, 32), **options}
    auto = make_agent(algo, spaces, ACT, seed=3, batch_size=B, **options)
    manual = make_agent(algo, spaces, ACT, seed=3, batch_size=B, cpu_update="manual", **options)
    manual.load_state_dict(auto.state_dict())
    return auto, manual


CASES = {
    "sac": ("sac", {}),
    # 64 wide: oneDNN takes products with >= onednn.MIN_OUT outputs
    "sac-onednn": ("sac", {"cpu_matmul": "onednn", "critic_hidden": (64, 64), "actor_hidden": (64, 64)}),
    "redq-subset-mean": ("redq", {"num_critics": 5, "num_target_min": 2, "utd": 1}),
    "sac-options": ("sac", {"entropy_dims": 3, "backup_entropy": False, "grad_clip": 0.5,
                            "normalize_obs": True, "n_step": 3}),
    "sac-3-layers": ("sac", {"critic_hidden": (32, 32, 32), "actor_hidden": (32, 32, 32)}),
    # LayerNorm critics, 3 layers, no entropy backup, the BC anchor on prior rows
    "rlpd": ("rlpd", {"num_critics": 4, "utd": 1, "bc_weight": 2.5, "entropy_dims": 4}),
    # the std cap (fine-tuning): about half the fresh actor's log stds sit above log 0.22
    "rlpd-max-std": ("rlpd", {"num_critics": 2, "utd": 1, "bc_weight": 2.5, "entropy_dims": 3, "max_std": 0.22}),
    # dropout masks from the agent's generator, in the target, the critic and the actor loss
    "droq": ("droq", {"utd": 1, "critic_dropout": 0.2}),
    "droq-onednn": ("droq", {"utd": 1, "cpu_matmul": "onednn", "critic_hidden": (64, 64),
                             "actor_hidden": (64, 64)}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_one_update_matches_autograd_in_losses_gradients_and_draws(case):
    algo, options = CASES[case]
    auto, manual = _pair(algo, **options)
    batch = _batch(np.random.default_rng(0))
    m_auto, m_manual = auto.update(batch), manual.update(batch)
    assert list(m_auto) == list(m_manual)
    for k in m_auto:
        assert m_manual[k] == pytest.approx(m_auto[k], rel=1e-5, abs=1e-6), k
    nets = [("critic", auto.critic, manual.critic), ("actor", auto.actor, manual.actor)]
    for name, a, m in nets:
        for (pname, pa), pm in zip(a.named_parameters(), m.parameters()):
            assert pm.grad is not None and pm.grad.shape == pa.shape, f"{name}.{pname}"
            torch.testing.assert_close(pm.grad, pa.grad, rtol=1e-4, atol=1e-6, msg=f"{name}.{pname}")
    torch.testing.assert_close(manual.log_alpha.grad, auto.log_alpha.grad, rtol=1e-5, atol=1e-7)
    # the same random numbers, drawn in the same order (next action, REDQ subset, policy sample)
    assert torch.equal(manual.generator.get_state(), auto.generator.get_state())
    if auto.last_target_members is not None:
        assert torch.equal(manual.last_target_members, auto.last_target_members)


def test_the_asymmetric_critic_reads_the_privileged_vector():
    auto, manual = _pair("sac", SPACES_PRIV, privileged="critic", normalize_obs=True)
    batch = _batch(np.random.default_rng(1), privileged=True)
    m_auto, m_manual = auto.update(batch), manual.update(batch)
    assert m_manual["critic_loss"] == pytest.approx(m_auto["critic_loss"], rel=1e-5)
    first = manual.critic.mlp.net[0].weight
    assert first.shape[1] == OBS + PRIV + ACT_DIM
    torch.testing.assert_close(first.grad, auto.critic.mlp.net[0].weight.grad, rtol=1e-4, atol=1e-6)


def test_many_updates_stay_on_the_autograd_trajectory():
    """fp32 summation order differs, so parameters drift apart slowly; the losses must track."""
    auto, manual = _pair("sac")
    rng = np.random.default_rng(2)
    for _ in range(30):
        batch = _batch(rng)
        m_auto, m_manual = auto.update(batch), manual.update(batch)
    for k in ("critic_loss", "actor_loss", "entropy", "alpha"):
        assert m_manual[k] == pytest.approx(m_auto[k], rel=1e-3, abs=1e-4), k
    assert manual.num_updates == auto.num_updates == 30
    assert int(manual.critic_opt.state[manual.critic.mlp.net[0].weight]["step"]) == 30


def test_a_checkpoint_moves_between_the_two_paths():
    auto, manual = _pair("sac")
    rng = np.random.default_rng(4)
    for _ in range(3):
        manual.update(_batch(rng))
    auto.load_state_dict(manual.state_dict())
    batch = _batch(rng)
    assert manual.update(batch)["critic_loss"] == pytest.approx(auto.update(batch)["critic_loss"], rel=1e-5)


def test_adam_step_is_opt_step_bit_for_bit():
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(7, 3)), torch.nn.Parameter(torch.randn(3))]
    twins = [torch.nn.Parameter(p.detach().clone()) for p in params]
    opt = torch.optim.Adam([{"params": params[:1], "lr": 1e-3}, {"params": params[1:], "lr": 3e-2}],
                           betas=(0.5, 0.999), fused=True)
    opt2 = torch.optim.Adam([{"params": twins[:1], "lr": 1e-3}, {"params": twins[1:], "lr": 3e-2}],
                            betas=(0.5, 0.999), fused=True)
    for step in range(5):
        grads = [torch.randn_like(p) for p in params]
        for p, q, g in zip(params, twins, grads):
            p.grad, q.grad = g.clone(), g.clone()
        opt.step()
        adam_step(opt2)  # the first call initialises the state through opt.step()
        for p, q in zip(params, twins):
            assert torch.equal(p, q), step
    for p, q in zip(params, twins):
        assert torch.equal(opt.state[p]["exp_avg_sq"], opt2.state[q]["exp_avg_sq"])
        assert torch.equal(opt.state[p]["step"], opt2.state[q]["step"])


@pytest.mark.parametrize("algo, options, reason", [
    ("crossq", {}, "batch renorm"),
    ("sac", {"cpu_matmul": "bf16"}, "fp32"),
    ("sac", {"actor": "flow"}, "actor='flow'"),
    ("sac", {"network": "simba"}, "network='simba'"),
    ("drq", {}, "pixel"),
])
def test_what_it_does_not_cover_is_a_clear_error(algo, options, reason):
    spaces = SPACES
    if algo == "drq":
        spaces = gym.spaces.Dict({**SPACES.spaces, "front": gym.spaces.Box(0, 255, (16, 16, 3), np.uint8)})
    with pytest.raises(ConfigError, match="cpu_update='autograd'") as err:
        make_agent(algo, spaces, ACT, cpu_update="manual", **options)
    assert reason in str(err.value)


def test_an_unknown_update_is_refused():
    with pytest.raises(ConfigError, match="cpu_update='fused'"):
        make_agent("sac", SPACES, ACT, cpu_update="fused")

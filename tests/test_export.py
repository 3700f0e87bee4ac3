"""Policy export (ONNX / TorchScript): parity with torch, running with no learner, refusals."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import robolearn  # noqa: F401  (registers the envs)
from robolearn.errors import ConfigError, DatasetError, InvalidActionError
from robolearn.policies.export import (DeterministicPolicy, ExportedPolicy, export_policy,
                                       sample_observations)
from robolearn.policies.registry import make_agent

pytest.importorskip("onnxruntime", reason="ONNX export is tested with the [export] extra installed")

ROOT = Path(__file__).resolve().parents[1]


def _agent(obs="state", algo="sac"):
    kw = {} if obs == "state" else dict(obs="both", camera="front")
    env = gym.make("robolearn/ArmReach-v0", **kw)
    try:
        agent = make_agent(algo, env.observation_space, env.action_space, seed=3,
                           **({"normalize_obs": True} if obs == "state" else {}))
    finally:
        env.close()
    if agent.obs_norm is not None:  # non-trivial normaliser statistics, as after training
        agent.obs_norm.update(torch.randn(512, agent.obs_norm.mean.shape[0]) * 3 + 1)
    return agent


def reach_agent(algo: str = "sac", **options):
    """An ArmReach state agent whose observation normaliser has non-trivial statistics (as
    after training), for export parity checks of every network / actor kind."""
    env = gym.make("robolearn/ArmReach-v0")
    try:
        agent = make_agent(algo, env.observation_space, env.action_space, seed=3, normalize_obs=True, **options)
    finally:
        env.close()
    agent.obs_norm.update(torch.randn(512, agent.obs_norm.mean.shape[0]) * 3 + 1)
    return agent


def assert_export_parity(agent, fmt: str, path: Path, samples: int = 300) -> None:
    spec = export_policy(agent, fmt, path, env_id="robolearn/ArmReach-v0", parity_samples=samples)
    assert spec["parity_max_abs_error"] < 1e-5


@pytest.mark.parametrize("fmt,suffix", [("onnx", ".onnx"), ("torchscript", ".pt")])
@pytest.mark.parametrize("obs", ["state", "pixels"])
def test_parity_on_1000_observations(tmp_path, fmt, suffix, obs):
    agent = _agent(obs, "sac" if obs == "state" else "drq")
    out = tmp_path / f"policy{suffix}"
    spec = export_policy(agent, fmt, out, env_id="robolearn/ArmReach-v0", parity_samples=1000)
    assert out.is_file() and Path(f"{out}.json").is_file()
    assert not list(tmp_path.glob("*.tmp"))
    # independent check against the torch agent's own deterministic act()
    obs_batch = sample_observations(agent, 1000, seed=7)
    policy = ExportedPolicy(out)
    got = policy.act_batch(obs_batch)
    names = DeterministicPolicy(agent).input_names
    ref = np.stack([agent.act({k: obs_batch[k][i] for k in names}, deterministic=True)
                    for i in range(1000)])
    assert np.max(np.abs(ref - got)) < 1e-5
    assert spec["parity_max_abs_error"] < 1e-5 and spec["parity_samples"] == 1000
    one = {k: obs_batch[k][0] for k in names}
    assert np.allclose(policy(one), ref[0], atol=1e-5)


@pytest.mark.parametrize("fmt,suffix", [("onnx", ".onnx"), ("torchscript", ".pt")])
def test_crossq_actor_batch_renorm_exports_with_running_statistics(tmp_path, fmt, suffix):
    """CrossQ's actor normalises with running statistics when it acts: the export folds them
    in (eval mode) and matches act() on 1000 observations."""
    agent = _agent("state", "crossq")
    brn = [m for m in agent.actor.modules() if type(m).__name__ == "BatchRenorm"]
    assert brn
    with torch.no_grad():  # statistics as after training, far from the identity
        for i, m in enumerate(brn):
            m.running_mean.normal_(generator=torch.Generator().manual_seed(i))
            m.running_var.uniform_(0.5, 4.0, generator=torch.Generator().manual_seed(100 + i))
    out = tmp_path / f"crossq{suffix}"
    spec = export_policy(agent, fmt, out, parity_samples=1000)
    assert spec["parity_max_abs_error"] < 1e-5 and not agent.actor.training
    obs = sample_observations(agent, 50, seed=1)
    ref = np.stack([agent.act({"state": obs["state"][i]}, deterministic=True) for i in range(50)])
    assert np.max(np.abs(ExportedPolicy(out).act_batch(obs) - ref)) < 1e-5


def test_nan_observation_gives_refused_action(tmp_path):
    agent = _agent()
    export_policy(agent, "onnx", tmp_path / "p.onnx", parity_samples=10)
    policy = ExportedPolicy(tmp_path / "p.onnx")
    obs = {"state": np.full(agent.obs_norm.mean.shape, np.nan, np.float32)}
    agent.obs_norm = None  # the raw path: NaN flows straight into the actor
    export_policy(agent, "onnx", tmp_path / "raw.onnx", parity_samples=10)
    with pytest.raises(InvalidActionError, match="non-finite action"):
        ExportedPolicy(tmp_path / "raw.onnx")(obs)
    # with normalisation the clamp keeps NaN -> NaN too: either way it never reaches the robot
    try:
        a = policy(obs)
        assert np.all(np.isfinite(a))
    except InvalidActionError:
        pass


def test_broken_weights_fail_export_parity(tmp_path):
    agent = _agent()
    with torch.no_grad():
        agent.actor.net[0].weight.fill_(float("nan"))
    with pytest.raises(DatasetError, match="not safe"):
        export_policy(agent, "onnx", tmp_path / "bad.onnx", parity_samples=10)


def test_loader_errors(tmp_path):
    with pytest.raises(DatasetError, match="not found"):
        ExportedPolicy(tmp_path / "missing.onnx")
    agent = _agent()
    export_policy(agent, "torchscript", tmp_path / "p.pt", parity_samples=10)
    policy = ExportedPolicy(tmp_path / "p.pt")
    with pytest.raises(ConfigError, match="shape"):
        policy({"state": np.zeros(3, np.float32)})
    with pytest.raises(ConfigError, match="lacks"):
        policy({"front": np.zeros((84, 84, 3), np.uint8)})
    Path(f"{tmp_path / 'p.pt'}.json").unlink()
    with pytest.raises(DatasetError, match="sidecar"):
        ExportedPolicy(tmp_path / "p.pt")
    with pytest.raises(ConfigError, match="unknown export format"):
        export_policy(agent, "tflite", tmp_path / "p.tflite")
    (tmp_path / "junk.onnx").write_bytes(b"not an onnx file")
    Path(f"{tmp_path / 'junk.onnx'}.json").write_text(json.dumps(
        {"format": "onnx", "inputs": [{"name": "state", "shape": [20], "dtype": "float32"}],
         "action_dim": 4}))
    with pytest.raises(DatasetError, match="cannot load"):
        ExportedPolicy(tmp_path / "junk.onnx")


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "reach"
    subprocess.run([sys.executable, "-m", "robolearn.cli", "train", "--env", "robolearn/ArmReach-v0",
                    "--algo", "sac", "--steps", "300", "--out", str(out), "--eval-episodes", "1",
                    "--no-video"],
                   check=True, cwd=ROOT, capture_output=True, timeout=300)
    return out


def test_cli_export_and_actor_runs_it_without_a_learner(trained_run, tmp_path):
    onnx = tmp_path / "policy.onnx"
    r = subprocess.run([sys.executable, "-m", "robolearn.cli", "export", str(trained_run),
                        "--format", "onnx", "--out", str(onnx)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["parity_max_abs_error"] < 1e-5 and report["parity_samples"] == 1000
    assert report["latency"]["p50_ms"] > 0
    r = subprocess.run([sys.executable, "-m", "robolearn.cli", "actor",
                        str(ROOT / "launch/sim_arm_reach_async.toml"), "--policy", str(onnx),
                        "--episodes", "2", "--hz", "0", "--out", str(tmp_path / "actor")],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr + r.stdout
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["episodes"] == 2 and summary["exit_reason"] == "episodes"
    assert summary["env_steps"] >= 2 and summary["format"] == "onnx"

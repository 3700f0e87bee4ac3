"""The sampled policy's spread per policy snapshot (runtime/policy_spread.py) and its place in
the session report: what told lift session 27 (spread blown up, the operator taking over all
session) from session 28 (spread fallen back, the rate falling)."""
from __future__ import annotations

import json
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from robolearn.policies.registry import make_agent
from robolearn.runtime.policy_spread import checkpoint_spread, recorded_states, session_spread

STATE_DIM, ACT_DIM = 17, 4
OBS = gym.spaces.Dict({"state": gym.spaces.Box(-np.inf, np.inf, (STATE_DIM,), np.float32)})
ACT = gym.spaces.Box(-1, 1, (ACT_DIM,), np.float32)
OPTIONS = {"actor_hidden": [32, 32], "critic_hidden": [32, 32], "entropy_dims": 3}


def _snapshot(root, step: int, log_std: float, **options):
    """A policy snapshot folder as the learner keeps it, whose actor's std is exp(log_std) everywhere."""
    agent = make_agent("rlpd", OBS, ACT, seed=0, **OPTIONS, **options)
    with torch.no_grad():       # the log std head: a constant (the network's smooth bound inverted)
        agent.actor.net[-1].weight[ACT_DIM:] = 0.0
        agent.actor.net[-1].bias[ACT_DIM:] = math.atanh((log_std + 5.0) / 3.5 - 1.0)
    path = root / "policy_snapshots" / f"step_{step:09d}"
    path.mkdir(parents=True)
    save_file(agent.policy_state(), str(path / "policy.safetensors"))
    (path / "trainer.json").write_text(json.dumps({
        "env_steps": step, "agent_overrides": {**OPTIONS, **options},
        "train": {"algo": "rlpd", "env": "robolearn/ArmLift-v0"}}))
    return path


def _episodes(root, n: int = 3, steps: int = 40):
    rng = np.random.default_rng(0)
    (root / "episodes").mkdir(parents=True)
    (root / "episodes" / "meta.json").write_text(json.dumps({"env_id": "robolearn/ArmLift-v0"}))
    for i in range(n):
        d = root / "episodes" / f"episode_{i:06d}"
        d.mkdir()
        np.savez(d / "data.npz", **{"obs.state": rng.standard_normal((steps + 1, STATE_DIM)).astype(np.float32),
                                     "action": rng.uniform(-1, 1, (steps + 1, ACT_DIM)).astype(np.float32)})
        (d / "episode.json").write_text(json.dumps({"index": i, "steps": steps, "success": False}))


def test_each_snapshot_is_measured_at_the_sessions_states(tmp_path):
    _episodes(tmp_path)
    _snapshot(tmp_path, 500, math.log(1.5))       # blown up (session 27 at step 600: 1.1-1.8)
    _snapshot(tmp_path, 1000, math.log(0.1))      # fallen back (session 28 from step 1500)
    (tmp_path / "episodes" / "episode_000009").mkdir()
    (tmp_path / "episodes" / "episode_000009" / "data.npz").write_bytes(b"not a zip")   # skipped
    s = session_spread(tmp_path)
    assert s["states"] == 3 * 40 and s["env_steps"] == [500, 1000]
    assert s["action_names"] == ["ee.dx", "ee.dy", "ee.dz", "gripper.cmd"]
    np.testing.assert_allclose(s["pre_tanh_std"][0], [1.5] * 4, rtol=1e-3)
    np.testing.assert_allclose(s["pre_tanh_std"][1], [0.1] * 4, rtol=1e-3)
    wide, narrow = np.asarray(s["sampled_action_std"])
    assert (wide > 3 * narrow).all() and (narrow > 0.02).all()


def test_a_capped_snapshot_reports_its_cap(tmp_path):
    """max_std travels in the snapshot's options: the spread measured is the one the actor sampled."""
    _episodes(tmp_path, n=1)
    path = _snapshot(tmp_path, 500, math.log(1.5), max_std=0.2)
    states, act_dim = recorded_states(tmp_path / "episodes")
    np.testing.assert_allclose(checkpoint_spread(path, states, act_dim)["pre_tanh_std"], [0.2] * 4, rtol=1e-3)


def test_nothing_to_measure_is_none(tmp_path):
    assert session_spread(tmp_path) is None                 # no snapshots, no episodes
    _snapshot(tmp_path, 500, 0.0)
    assert session_spread(tmp_path) is None                 # no episodes
    assert recorded_states(tmp_path / "episodes") is None


def test_the_session_report_carries_and_plots_it_and_survives_a_broken_snapshot(tmp_path, caplog):
    from robolearn.runtime.finetune_report import session_report

    _episodes(tmp_path)
    _snapshot(tmp_path, 40, math.log(1.5))
    _snapshot(tmp_path, 80, math.log(0.1))
    report = session_report(tmp_path, control_hz=10.0)
    spread = json.loads((tmp_path / "session_report.json").read_text())["policy_spread"]
    assert spread == report["policy_spread"] and spread["env_steps"] == [40, 80]
    assert spread["robot_time_s"] == [4.0, 8.0]            # env step 40 at 10 Hz: 4 s of robot time
    assert (tmp_path / "session_report.png").stat().st_size > 0
    (tmp_path / "policy_snapshots" / "step_000000080" / "trainer.json").write_text("{")   # truncated
    report = session_report(tmp_path, control_hz=10.0)
    assert "policy_spread" not in report and "policy_spread not measured" in caplog.text
    assert json.loads((tmp_path / "session_report.json").read_text())["episodes"] == 3

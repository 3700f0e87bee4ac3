"""Smoke: RLPD trains end to end from a dataset recorded with `robolearn record`."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from robolearn.data.dataset import Dataset, load_transitions

ENV_ID = "robolearn/ArmReach-v0"


def _cli(*argv, timeout=300):
    env = dict(os.environ, MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"))
    return subprocess.run([sys.executable, "-m", "robolearn.cli", *argv], capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    out = tmp_path_factory.mktemp("rlpd") / "demos"
    # recorded with a camera too (the record default is both): learners pick the keys they use
    r = _cli("record", ENV_ID, "--device", "scripted", "--episodes", "5", "--out", str(out), "--obs", "both",
             "--env-kw", 'camera="front"', "--env-kw", "image_size=[32,32]", "--seed", "11")
    assert r.returncode == 0, r.stderr
    return out


def test_rlpd_updates_from_recorded_demos(demos):
    """The learner API path: load_transitions -> transitions_to_buffer -> MixedSampler -> rlpd."""
    from robolearn.data.replay import MixedSampler, ReplayBuffer, transitions_to_buffer
    from robolearn.policies.registry import make_agent

    torch.manual_seed(0)
    import gymnasium as gym

    ds = Dataset(demos)
    assert set(ds.observation_space.spaces) == {"state", "front"}
    space = gym.spaces.Dict({"state": ds.observation_space["state"]})
    tr = load_transitions(demos, keys=["state"])
    prior = ReplayBuffer(space, ds.action_space, capacity=1000, seed=0)
    transitions_to_buffer(tr, prior)
    online = ReplayBuffer(space, ds.action_space, capacity=1000, seed=1)
    # a few online transitions (random actions) so the symmetric sampler has both halves
    from robolearn.teleop.session import open_env

    env = open_env(ENV_ID, "state")
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(20):
        a = rng.uniform(-1, 1, 4).astype(np.float32)
        nxt, r, term, trunc, _ = env.step(a)
        online.add(obs, a, r, nxt, term, trunc)
        obs = nxt
        if term or trunc:
            obs, _ = env.reset()
    env.close()
    agent = make_agent("rlpd", space, ds.action_space, seed=0, batch_size=16)
    sampler = MixedSampler(online, prior, prior_fraction=0.5)
    before = {k: v.clone() for k, v in agent.policy_state().items()}
    changed = []
    # the actor steps once per `utd` critic updates (RLPD: once per env step); allow a few
    for _ in range(3 * agent.config.utd):
        metrics = agent.update(sampler.sample(16))
        assert all(np.isfinite(v) for v in metrics.values())
        changed = [k for k, v in agent.policy_state().items() if not torch.equal(v, before[k])]
        if changed:
            break
    assert changed, f"no actor parameter moved in {agent.num_updates} updates"
    act = agent.act({"state": tr["obs"]["state"][0]})
    assert act.shape == (4,) and np.all(np.abs(act) <= 1)


def test_train_command_with_demos(demos, tmp_path):
    """`robolearn train --algo rlpd --demos DATASET` (state obs from a state+camera dataset) runs
    end to end and uses every demo step."""
    run_dir = tmp_path / "run"
    r = _cli("train", "--env", ENV_ID, "--algo", "rlpd", "--demos", str(demos), "--steps", "40",
             "--learning-starts", "20", "--utd", "1", "--eval-episodes", "1", "--out", str(run_dir),
             "--no-video", "--no-progress", "--threads", "1", "--set", "batch_size=32")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    n_demo = Dataset(demos).summary()["steps"]
    assert summary["demo_transitions"] == n_demo > 0
    assert summary["env_steps"] == 40 and summary["updates"] > 0
    assert np.isfinite(summary["eval_return"])

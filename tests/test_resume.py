"""Kill training mid-run, resume from the checkpoint, and get the uninterrupted run back exactly."""
import json
import os
import signal
import subprocess
import sys
import time

import torch

from robolearn.policies.serialize import flatten_state
from robolearn.policies.train_config import TrainConfig
from robolearn.policies.trainer import Trainer
from robolearn.policies.checkpoints import find_checkpoint

REACH = "robolearn/ArmReach-v0"
SMALL = {"actor_hidden": [64, 64], "critic_hidden": [64, 64], "batch_size": 64}
STEPS, CKPT_EVERY, STARTS = 400, 120, 60


def assert_same_agent(a, b):
    """Every tensor and value of the agents' full state (nets, targets, optimisers, RNG) equal."""
    ta, tree_a = flatten_state(a.agent.state_dict())
    tb, tree_b = flatten_state(b.agent.state_dict())
    assert tree_a == tree_b  # structure, counters, config
    assert ta.keys() == tb.keys() and len(ta) > 10
    for k in ta:
        assert torch.equal(ta[k], tb[k]), f"agent state tensor {k} differs"


def _strip_timing(path):
    recs = []
    for ln in path.read_text().splitlines():
        r = json.loads(ln)
        r.pop("updates_per_s", None)
        recs.append(r)
    return recs


def test_sigkill_then_resume_continues_bit_identically(tmp_path):
    common = ["--env", REACH, "--algo", "sac", "--steps", str(STEPS), "--seed", "3",
              "--learning-starts", str(STARTS), "--checkpoint-every", str(CKPT_EVERY),
              "--eval-every", "200", "--eval-episodes", "1", "--no-progress", "--no-video",
              "--set", "actor_hidden=[64, 64]", "--set", "critic_hidden=[64, 64]", "--set", "batch_size=64"]
    killed = tmp_path / "killed"
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    proc = subprocess.Popen([sys.executable, "-m", "robolearn.cli", "train", *common, "--out", str(killed)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    latest = killed / "checkpoints" / "latest.json"
    deadline = time.monotonic() + 240
    try:
        while not latest.exists():
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "no checkpoint written in time"
            time.sleep(0.05)
        assert proc.poll() is None, "training finished before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    ckpt_steps = json.loads(latest.read_text())["env_steps"]
    assert CKPT_EVERY <= ckpt_steps < STEPS

    # resume (in this process) and finish the run
    resumed = Trainer.resume(killed)
    assert resumed.env_steps == ckpt_steps
    assert resumed.updates == ckpt_steps - STARTS + 1
    assert len(resumed.replay) == ckpt_steps
    resumed.run()
    resumed.close()

    # the same run without interruption
    cfg = TrainConfig(env=REACH, algo="sac", steps=STEPS, seed=3, learning_starts=STARTS,
                      checkpoint_every=CKPT_EVERY, eval_every=200, eval_episodes=1, progress=False,
                      video=False, agent=SMALL, out=str(tmp_path / "straight"))
    straight = Trainer(cfg)
    straight.run()
    straight.close()

    assert resumed.env_steps == straight.env_steps == STEPS
    assert resumed.updates == straight.updates == STEPS - STARTS + 1
    assert resumed.episodes == straight.episodes
    assert resumed.replay.state_equal(straight.replay)  # contents, counters and sampling RNG
    assert_same_agent(resumed, straight)
    # the logs match record for record (timings aside), evaluations included
    assert _strip_timing(killed / "metrics.jsonl") == _strip_timing(tmp_path / "straight" / "metrics.jsonl")
    s1 = json.loads((killed / "summary.json").read_text())
    s2 = json.loads((tmp_path / "straight" / "summary.json").read_text())
    assert (s1["eval_return"], s1["updates"]) == (s2["eval_return"], s2["updates"])


def test_rlpd_resume_restores_prior_buffer_and_extends_budget(tmp_path):
    cfg = TrainConfig(env=REACH, algo="rlpd", steps=160, seed=1, learning_starts=40, demos="scripted:2",
                      checkpoint_every=60, eval_every=0, eval_episodes=1, progress=False, video=False,
                      agent={**SMALL, "utd": 2, "num_critics": 4}, out=str(tmp_path / "a"))
    straight = Trainer(cfg)
    assert straight.prior is not None and len(straight.prior) == straight.demo_count > 0
    straight.run()
    straight.close()

    cfg.out = str(tmp_path / "b")
    first = Trainer(cfg)
    first.run(stop_at=130)  # an in-process interruption after a checkpoint
    first.close()
    ckpt = find_checkpoint(tmp_path / "b")
    resumed = Trainer.resume(tmp_path / "b")
    assert resumed.env_steps == json.loads((ckpt / "trainer.json").read_text())["env_steps"] < 130
    assert resumed.demo_count == straight.demo_count
    resumed.run()
    resumed.close()
    assert resumed.replay.state_equal(straight.replay)
    assert resumed.prior.state_equal(straight.prior)
    assert_same_agent(resumed, straight)

    # a finished run can be extended with a larger budget
    more = Trainer.resume(tmp_path / "b", steps=200)
    assert more.env_steps == 160
    more.run()
    more.close()
    assert json.loads((tmp_path / "b" / "summary.json").read_text())["env_steps"] == 200

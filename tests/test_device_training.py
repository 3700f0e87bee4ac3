"""Training on a CUDA device draws batches on the device and runs the graphed update.

- without a GPU: `--device cuda` is one clear line;
- the device sampler keeps MixedSampler's shares, sees writes made after it was built, and its
  generators' state round-trips (what a checkpoint saves);
- the Trainer's device path (forced on CPU here, where it is deterministic) resumes exactly,
  and a plain CPU run still draws from the host sampler;
- on CUDA (skipped without a GPU): `robolearn train --device cuda` on ArmReach really draws
  on the device and replays CUDA graphs, reads metrics every `--metrics-every` updates,
  learns, and resumes.
"""
from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch

from robolearn.cli import main
from robolearn.data.replay import ReplayBuffer
from robolearn.policies import device_sampling
from robolearn.policies.device_sampling import DeviceSampler, GraphedDraw
from robolearn.policies.train_config import TrainConfig
from robolearn.policies.trainer import Trainer

from test_resume import assert_same_agent

REACH = "robolearn/ArmReach-v0"
SMALL_AGENT = {"actor_hidden": [64, 64], "critic_hidden": [64, 64], "batch_size": 64}
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

STATE = gym.spaces.Dict({"state": gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)})
ACT = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


def _buffer(n: int, reward: float, seed: int) -> ReplayBuffer:
    buf = ReplayBuffer(STATE, ACT, n + 20, seed=seed)
    for t in range(n):
        buf.add({"state": np.full(3, t, np.float32)}, np.zeros(2, np.float32), reward,
                {"state": np.full(3, t + 1, np.float32)}, False, t % 10 == 9)
    return buf


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_device_cuda_without_a_gpu_is_one_clear_line(tmp_path, capsys):
    rc = main(["train", "--env", REACH, "--steps", "10", "--device", "cuda", "--no-progress",
               "--out", str(tmp_path / "run")])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert "sees no CUDA GPU" in err and "--device cpu" in err and len(err.splitlines()) == 1


def test_device_replay_without_cuda_is_one_clear_line(tmp_path, capsys):
    rc = main(["train", "--env", REACH, "--steps", "60", "--learning-starts", "50", "--device-replay",
               "--no-progress", "--no-video", "--eval-episodes", "1", "--out", str(tmp_path / "run")])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert "add --device cuda" in err and len(err.splitlines()) == 1


def test_device_sampler_mixes_like_the_host_sampler_and_round_trips_its_draws():
    online, prior = _buffer(50, 1.0, 0), _buffer(30, -1.0, 1)
    ds = DeviceSampler(online, prior, prior_fraction=0.25, device="cpu", seed=0)
    b = ds.sample(16)
    assert b.prior.tolist() == [False] * 12 + [True] * 4  # MixedSampler's order and share
    assert b.reward.tolist() == [1.0] * 12 + [-1.0] * 4
    assert isinstance(b.action, torch.Tensor) and ds.draws == 1
    # a write after the mirror was built is drawn (the draw refreshes the mirror first)
    online.add({"state": np.full(3, 99, np.float32)}, np.zeros(2, np.float32), 7.0,
               {"state": np.full(3, 100, np.float32)}, False, True)
    assert any(7.0 in ds.sample(64).reward.tolist() for _ in range(20))
    # the saved generators give the same next batch
    state = ds.state()
    first = ds.sample(32)
    ds.load_state(json.loads(json.dumps(state)))  # as trainer.json stores it
    again = ds.sample(32)
    assert torch.equal(first.obs["state"], again.obs["state"]) and torch.equal(first.prior, again.prior)
    # one side empty: the whole batch from the other, as MixedSampler does
    empty = ReplayBuffer(STATE, ACT, 10, seed=0)
    only_prior = DeviceSampler(empty, prior, prior_fraction=0.25, device="cpu")
    assert only_prior.sample(8).prior.all()


def _cfg(out, steps, **kw) -> TrainConfig:
    return TrainConfig(env=REACH, algo="sac", steps=steps, seed=2, learning_starts=50,
                       checkpoint_every=100, eval_every=0, eval_episodes=1, progress=False,
                       video=False, agent=dict(SMALL_AGENT), out=str(out), **kw)


def _stopped_then_resumed(tmp_path, steps: int, stop: int, **kw) -> tuple[Trainer, Trainer]:
    """(straight run, run stopped past its first checkpoint then resumed from it)."""
    straight = Trainer(_cfg(tmp_path / "straight", steps, **kw))
    straight.run()
    straight.close()
    first = Trainer(_cfg(tmp_path / "stopped", steps, **kw))
    first.run(stop_at=stop)
    first.close()
    resumed = Trainer.resume(tmp_path / "stopped")
    assert resumed.env_steps < stop  # it really restarted from the checkpoint
    resumed.run()
    resumed.close()
    return straight, resumed


def test_trainer_device_path_resumes_exactly(tmp_path, monkeypatch):
    # the device path on the CPU device: the same code as on CUDA, but deterministic here
    monkeypatch.setattr(device_sampling, "on_device_replay", lambda agent: True)
    straight, resumed = _stopped_then_resumed(tmp_path, steps=320, stop=260, device_replay=True)
    for t in (straight, resumed):
        assert isinstance(t.batches, DeviceSampler)
    assert straight.batches.draws == straight.updates == 320 - 50 + 1
    assert resumed.updates == straight.updates
    assert resumed.replay.state_equal(straight.replay)
    assert resumed.batches.state() == straight.batches.state()  # same draws, same generators
    assert_same_agent(resumed, straight)


def test_cpu_training_still_draws_host_batches(tmp_path):
    t = Trainer(_cfg(tmp_path / "cpu", 80))
    t.run()
    t.close()
    assert t.batches is t.sampler and t.agent._graphs is None
    assert json.loads((tmp_path / "cpu" / "summary.json").read_text())["batches"] == "host"


# ------------------------------------------------------------------------------ on CUDA
def _capture_trainers(monkeypatch) -> list:
    """Record the trainers `robolearn train` builds (new and resumed), to inspect them."""
    from robolearn.compose import training

    made = []
    for name in ("build_trainer", "resume_trainer"):
        real = getattr(training, name)

        def wrapped(*a, _real=real, **k):
            made.append(_real(*a, **k))
            return made[-1]

        monkeypatch.setattr(training, name, wrapped)
    return made


def _check_on_device(t: Trainer, metrics_every: int) -> None:
    s = t.batches
    assert isinstance(s, DeviceSampler) and s.device.type == "cuda"
    mirror = [*s.online._obs.values(), s.online._action, s.online._reward, *s.online._flags.values()]
    assert all(x.is_cuda for x in mirror)
    assert s.draws == t.updates - getattr(t, "_updates_at_start", 0)
    draw = s._draw[id(s.online)]  # the draw itself replays a captured graph after its warm-up
    assert isinstance(draw, GraphedDraw) and draw.replays == s.draws - GraphedDraw.WARMUP
    g = t.agent._graphs
    assert g is not None and set(g.graphs) == {True} | ({False} if t.agent.config.actor_every > 1 else set())
    # every update after the 3 eager warm-ups of each schedule replayed a captured graph
    assert g.replays == sum(max(c - g.warmup, 0) for c in g.calls.values()) > 0
    assert t.agent._check_every == metrics_every


@CUDA
def test_train_on_cuda_draws_on_the_device_replays_graphs_learns_and_resumes(tmp_path, monkeypatch):
    made = _capture_trainers(monkeypatch)
    out = tmp_path / "run"
    rc = main(["train", "--env", REACH, "--algo", "sac", "--device", "cuda", "--device-replay",
               "--metrics-every", "50",
               "--steps", "4000", "--seed", "0", "--eval-every", "1000", "--eval-episodes", "10",
               "--checkpoint-every", "1000", "--log-every", "250", "--no-video", "--no-progress",
               "--out", str(out)])
    assert rc == 0
    t = made[-1]
    _check_on_device(t, 50)
    recs = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in recs if r["kind"] == "train" and r["updates"] > 0]
    assert train and all(np.isfinite(r["critic_loss"]) for r in train if "critic_loss" in r)
    assert sum("critic_loss" in r for r in train) >= len(train) - 1  # read back every 50 updates
    summary = json.loads((out / "summary.json").read_text())
    assert summary["batches"] == "device"
    print("cuda ArmReach summary:", {k: summary[k] for k in ("eval_return", "eval_success_rate",
                                                              "updates_per_s", "wall_s")})
    assert summary["eval_success_rate"] >= 0.5, summary  # CPU sac reaches 90 % by 3-5k steps
    # resume on CUDA: the run goes on from its checkpoint on the device path again
    rc = main(["train", "--resume", str(out), "--steps", "4300", "--no-video", "--no-progress"])
    assert rc == 0
    r = made[-1]
    assert r is not t and r.env_steps == 4300
    r._updates_at_start = t.updates
    _check_on_device(r, 50)
    assert json.loads((out / "summary.json").read_text())["updates"] == r.updates


@CUDA
def test_cuda_device_path_resumes_exactly(tmp_path):
    straight, resumed = _stopped_then_resumed(tmp_path, steps=320, stop=260, device="cuda",
                                              device_replay=True)
    assert isinstance(resumed.batches, DeviceSampler) and resumed.agent._graphs.replays > 0
    assert resumed.replay.state_equal(straight.replay)
    assert resumed.batches.state() == straight.batches.state()
    assert_same_agent(resumed, straight)


def test_device_replay_defaults_on_for_camera_frames_on_cuda_only(monkeypatch):
    """`device_replay` None (the default): the GPU mirror for camera observations on CUDA, where it
    measured 1.2-1.4x the host path; host batches for state, where it measured 0.77-0.86x, on the CPU,
    and with an earlier-runs share; True / False as given."""
    from types import SimpleNamespace

    from robolearn.policies.device_sampling import has_camera_frames, wants_device_replay

    cams = gym.spaces.Dict({"state": STATE["state"], "front": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8)})
    pixels, state = ReplayBuffer(cams, ACT, 10), ReplayBuffer(STATE, ACT, 10)
    assert has_camera_frames(pixels) and not has_camera_frames(state)
    cpu, cuda = SimpleNamespace(device=torch.device("cpu")), SimpleNamespace(device=torch.device("cuda"))
    plain = SimpleNamespace()
    assert wants_device_replay(cuda, pixels, plain, None)
    assert not wants_device_replay(cuda, state, plain, None)
    assert not wants_device_replay(cpu, pixels, plain, None)
    assert not wants_device_replay(cuda, pixels, SimpleNamespace(earlier=object()), None)
    assert not wants_device_replay(cuda, pixels, plain, False)
    assert wants_device_replay(cpu, state, plain, True)  # forced: batch_source then says why not
    assert TrainConfig().device_replay is None


def test_no_device_replay_flag_reaches_the_config():
    import argparse

    from robolearn.commands.train import add_arguments

    p = argparse.ArgumentParser()
    add_arguments(p)
    assert p.parse_args(["--no-device-replay"]).device_replay is False
    assert p.parse_args(["--device-replay"]).device_replay is True
    assert p.parse_args([]).device_replay is None

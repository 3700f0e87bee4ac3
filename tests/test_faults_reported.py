"""Issue 29 items 2-3: output paths checked before work starts (one-line errors), a full disk
at a checkpoint explained, and no fault dropped silently."""
import errno
import json
import logging

import numpy as np
import pytest
import zmq

from robolearn.cli import main
from robolearn.errors import DatasetError, DeviceError
from robolearn.jsonfile import write_json_atomic
from robolearn.policies import checkpoints
from robolearn.policies.train_config import TrainConfig
from robolearn.policies.trainer import Trainer

PEND = dict(env="Pendulum-v1", steps=60, learning_starts=30, eval_every=0, eval_episodes=1,
            max_episode_steps=20, checkpoint_every=20, progress=False, video=False,
            agent={"actor_hidden": [8], "critic_hidden": [8], "batch_size": 8})


@pytest.mark.parametrize("argv", [
    ["keygen", "{b}/keys"],
    ["record", "robolearn/ArmReach-v0", "--device", "scripted", "--out", "{b}/ds"],
    ["dataset", "export", "{ds}", "--out", "{b}/exp"],
])
def test_unwritable_output_is_one_line_before_work(tmp_path, capsys, argv):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    ds = tmp_path / "nods"
    ds.mkdir()
    argv = [a.format(b=blocker, ds=ds) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "cannot write" in err and str(blocker) in err and len(err.strip().splitlines()) == 1, err


def test_play_video_broken_pipe_is_one_line(tmp_path, capsys, monkeypatch):
    import imageio.v2 as imageio

    class Broken:
        def append_data(self, frame):
            raise BrokenPipeError(32, "Broken pipe")

        def close(self):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(imageio, "get_writer", lambda *a, **k: Broken())
    rc = main(["play", "robolearn/ArmReach-v0", "--episodes", "1", "--steps", "2",
               "--video", str(tmp_path / "v.mp4")])
    err = capsys.readouterr().err
    assert rc == 2 and "ffmpeg stopped taking frames" in err and "Traceback" not in err, err


@pytest.mark.parametrize("kind", ["oserror", "safetensors"])
def test_full_disk_at_checkpoint_says_space_needed_and_leaves_no_tmp(tmp_path, monkeypatch, kind):
    from safetensors import SafetensorError

    out = tmp_path / "run"
    trainer = Trainer(TrainConfig(out=str(out), **PEND))

    def full(path, tree):
        open(f"{path}.tmp", "wb").write(b"partial")
        if kind == "oserror":
            raise OSError(errno.ENOSPC, "No space left on device")
        raise SafetensorError("Error while serializing: IoError(No space left on device)")

    monkeypatch.setattr(checkpoints, "save_state", full)
    try:
        with pytest.raises(DatasetError) as exc:
            trainer.run()
    finally:
        trainer.close()
    msg = str(exc.value)
    assert "MB needed" in msg and "MB free" in msg and "cannot write checkpoint" in msg
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]


def test_json_is_strict(tmp_path):
    write_json_atomic(tmp_path / "a.json", {"x": float("nan"), "y": [float("inf"), 1.5]})
    text = (tmp_path / "a.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"x": None, "y": [None, 1.5]}


def test_held_still_unpaced_loop_does_not_spin():
    import time

    from robolearn.runtime.loop import ControlLoop

    loop = ControlLoop(None, lambda: None, 0, before_tick=lambda: "pause")
    t0 = time.monotonic()
    stats = loop.run(max_seconds=0.3)
    assert time.monotonic() - t0 < 1.0 and stats.ticks < 100, stats.ticks


def _actor_cfg(tmp_path, **actor):
    from robolearn.runtime.config import config_from_dict

    return config_from_dict({"env": "Pendulum-v1", "max_episode_steps": 20, "out": str(tmp_path),
                             "learner": {"agent": {"actor_hidden": [8], "critic_hidden": [8]}},
                             "actor": {"loop_hz": 100, "realtime": False, "act_without_learner": True,
                                       **actor}})


def test_actor_stopping_on_a_device_error_writes_its_summary(tmp_path):
    from robolearn.runtime.actor import Actor
    from robolearn.runtime.transport import free_port

    actor = Actor(_actor_cfg(tmp_path, random_until_weights=True), "a0",
                  f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}", out_dir=tmp_path)
    calls = [0]
    real = actor.env.step

    def step(a):
        calls[0] += 1
        if calls[0] > 5:
            raise DeviceError("servo bus lost")
        return real(a)

    actor.env.step = step
    with pytest.raises(DeviceError):
        actor.run()
    s = json.loads((tmp_path / "actor_a0.json").read_text())   # strict JSON (no bare NaN)
    assert "servo bus lost" in s["error"] and s["exit_reason"].startswith("error: DeviceError")


def test_learner_counts_and_logs_oversized_frames_and_refused_handshakes(tmp_path, caplog):
    """Measured: libzmq drops a frame over maxmsgsize by closing the sender's connection
    (EVENT_DISCONNECTED); an unauthorised Curve key gives EVENT_HANDSHAKE_FAILED_AUTH."""
    from robolearn.runtime import messages as M
    from robolearn.runtime.learner import Learner
    from robolearn.runtime.transport import free_port, generate_keys
    from tests.test_transport import _curve_with, dealer, exchange, small_cfg

    caplog.set_level(logging.WARNING, logger="robolearn.runtime.learner")
    cfg = small_cfg(tmp_path)
    cfg.learner.max_message_bytes = 1 << 16
    lrn = Learner(cfg)
    lrn.bind(free_port(), free_port())
    ctx = zmq.Context()
    try:
        assert lrn.sockets.router.maxmsgsize == 1 << 16          # the documented limit itself
        s = dealer(lrn, ctx)
        big = M.encode(M.HEARTBEAT, pad=b"x" * (17 << 16), max_bytes=1 << 30)  # 17x the limit
        assert exchange(lrn, s, big, wait_ms=1000) is None
        assert lrn.progress()["peer_disconnects"] >= 1
        assert "max_message_bytes = 65536" in caplog.text
    finally:
        ctx.destroy(0)
        lrn.close()
    keys, stranger = tmp_path / "keys", tmp_path / "stranger"
    generate_keys(keys)
    generate_keys(stranger, names=("actor",))
    lrn = Learner(small_cfg(tmp_path / "c", keys=str(keys)))
    lrn.bind(free_port(), free_port())
    ctx = zmq.Context()
    try:
        bad = dealer(lrn, ctx, identity=b"bad", curve=lambda s: _curve_with(
            s, stranger / "actor.key_secret", keys / "learner.key"))
        assert exchange(lrn, bad, M.encode(M.HELLO, actor_id="x", fingerprint=lrn.fingerprint),
                        wait_ms=1500) is None
        assert lrn.progress()["rejected_handshakes"] >= 1
        assert "Curve key is not authorised" in caplog.text
    finally:
        ctx.destroy(0)
        lrn.close()


def test_recorder_lost_device_says_how_many_episodes_were_kept(tmp_path):
    from robolearn.data.dataset_writer import DatasetWriter
    from robolearn.teleop.recorder import record
    from robolearn.teleop import make_device
    from robolearn.teleop.session import open_env

    env = open_env("robolearn/ArmReach-v0", "state")
    w = DatasetWriter(tmp_path / "ds", env_id="robolearn/ArmReach-v0", control_hz=10.0,
                      observation_space=env.observation_space, action_space=env.action_space)
    dev = make_device("scripted", env, seed=0)
    real, n = dev.read, [0]

    def read(obs):
        n[0] += 1
        if n[0] > 12:
            raise DeviceError("gamepad unplugged")
        return real(obs)

    dev.read = read
    try:
        with pytest.raises(DeviceError) as exc:
            record(env, dev, w, 5, max_steps=25)
        assert "gamepad unplugged" in str(exc.value) and "episode(s) of this session were kept" in str(exc.value)
        assert f"({w.num_episodes} in" in str(exc.value)
    finally:
        w.close()
        env.close()

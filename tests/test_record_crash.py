"""SIGKILL a real `robolearn record` mid-episode: earlier episodes survive, no partial is visible."""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from robolearn.data.dataset import Dataset, load_transitions
from robolearn.data.dataset_writer import DatasetWriter


def _wait_for(pred, timeout, proc):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.01)
    return False


def test_sigkill_mid_episode_keeps_earlier_episodes(tmp_path):
    out = tmp_path / "demos"
    env = dict(os.environ, MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"))
    # 2 Hz pacing: a reach episode takes a few steps, so each episode lasts ~1 s (>= 0.5 s) and the kill
    # lands while episode 2 is being written (camera video streaming into .tmp-000002/).
    cmd = [sys.executable, "-m", "robolearn.cli", "record", "robolearn/ArmReach-v0", "--device", "scripted",
           "--episodes", "20", "--out", str(out), "--obs", "both", "--rate", "2",
           "--env-kw", 'camera="front"', "--env-kw", "image_size=[48,48]"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        tmp2 = out / ".tmp-000002"
        started = _wait_for(lambda: (out / "episode_000001").is_dir() and tmp2.is_dir()
                            and (tmp2 / "front.mp4").exists(), 120, proc)
        assert started, f"recorder did not reach episode 2: {proc.communicate()[0].decode()[-2000:]}"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert tmp2.is_dir(), "the kill did not land mid-episode (episode 2 had already been committed)"
    assert not (out / "episode_000002").exists()

    ds = Dataset(out)
    assert ds.indices == [0, 1]                       # no partial episode visible
    for ep in ds.episodes():                          # every earlier episode fully loadable
        assert ep.steps >= 1 and ep.frames("front").shape[0] == ep.steps + 1
        assert ep.meta["success"] is True
    tr = load_transitions(out)
    assert tr["action"].shape[0] == sum(ds.episode(i).steps for i in ds.indices)
    assert np.isfinite(tr["obs"]["state"]).all()

    # a new recorder session cleans the stale temp folder and continues numbering
    import gymnasium as gym

    space = ds.observation_space
    w = DatasetWriter(out, env_id=ds.env_id, control_hz=ds.control_hz, observation_space=space,
                      action_space=ds.action_space)
    assert not tmp2.exists() and w.next_index() == 2
    w.close()
    assert isinstance(space, gym.spaces.Dict)


def test_ctrl_c_mid_episode_discards_it_cleanly(tmp_path):
    out = tmp_path / "demos"
    # faulthandler: if it ever hangs after Ctrl-C, SIGABRT makes it print every thread's stack
    env = dict(os.environ, MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"), PYTHONFAULTHANDLER="1")
    cmd = [sys.executable, "-m", "robolearn.cli", "record", "robolearn/ArmReach-v0", "--device", "scripted",
           "--episodes", "20", "--out", str(out), "--obs", "both", "--rate", "2",
           "--env-kw", 'camera="front"', "--env-kw", "image_size=[48,48]"]
    # started with SIGINT ignored, as a non-interactive shell's `cmd &` does: Ctrl-C (kill -INT)
    # must still stop it (robolearn.cli restores the handler; Python alone keeps SIG_IGN)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        tmp1 = out / ".tmp-000001"
        assert _wait_for(lambda: (out / "episode_000000").is_dir() and (tmp1 / "front.mp4").exists(), 120, proc)
        os.kill(proc.pid, signal.SIGINT)
        try:
            output = proc.communicate(timeout=60)[0].decode()
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGABRT)
            pytest.fail("record did not exit within 60 s of Ctrl-C; its stacks:\n"
                        + proc.communicate(timeout=30)[0].decode()[-8000:])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, output
    assert "interrupted" in output
    assert not tmp1.exists()                          # the partial episode was removed on the way out
    assert Dataset(out).indices == [0]

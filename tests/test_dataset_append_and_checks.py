"""Appending continues seeds; other-task datasets, truncated
episodes and 10 Hz durations are handled and reported correctly."""
import json

import numpy as np
import pytest

from robolearn.cli import main
from robolearn.data.dataset import Dataset


def _record(out, n, *extra, env="robolearn/ArmReach-v0"):
    return main(["record", env, "--device", "scripted", "--episodes", str(n), "--obs", "state",
                 "--max-steps", "8", "--out", str(out), *extra])


def test_appending_continues_seeds_after_the_last_episode(tmp_path, capsys):
    out = tmp_path / "ds"
    assert _record(out, 2) == 0
    assert _record(out, 2) == 0
    ds = Dataset(out)
    seeds = [e["seed"] for e in ds.meta["episodes"]]
    assert seeds == [0, 1, 2, 3]
    goals = [tuple(np.round(ds.episode(i).data["obs.state"][0], 6)) for i in ds.indices]
    assert len(set(goals)) == 4  # four different episodes, not two recorded twice
    # an explicit --seed that repeats recorded seeds is allowed but said out loud
    capsys.readouterr()
    assert _record(out, 1, "--seed", "1") == 0
    assert "already recorded" in capsys.readouterr().err


@pytest.fixture(scope="module")
def reach_ds(tmp_path_factory):
    out = tmp_path_factory.mktemp("ds") / "reach"
    assert _record(out, 3) == 0
    return out


def test_dataset_from_another_task_names_the_mismatch(reach_ds, tmp_path, capsys):
    rc = main(["train", "--env", "robolearn/ArmLift-v0", "--algo", "rlpd", "--demos", str(reach_ds),
               "--steps", "10", "--no-video", "--no-progress", "--out", str(tmp_path / "run")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "robolearn/ArmReach-v0" in err and "robolearn/ArmLift-v0" in err
    import gymnasium as gym

    there = Dataset(reach_ds).observation_space["state"].shape
    env = gym.make("robolearn/ArmLift-v0", obs="state")
    here = env.observation_space["state"].shape
    env.close()
    if there != here:  # the shapes that differ are named
        assert "'state'" in err and str(there) in err and str(here) in err


def test_truncated_episode_is_skipped_with_a_warning_and_info_reports_it(reach_ds, tmp_path, capsys):
    import shutil

    from robolearn.data.dataset import load_transitions

    ds_dir = tmp_path / "ds"
    shutil.copytree(reach_ds, ds_dir)
    npz = ds_dir / "episode_000001" / "data.npz"
    npz.write_bytes(npz.read_bytes()[:100])
    n_ok = sum(Dataset(reach_ds).episode(i).steps for i in (0, 2))
    with pytest.warns(UserWarning, match="episode_000001"):
        tr = load_transitions(ds_dir)
    assert len(tr["action"]) == n_ok
    capsys.readouterr()
    assert main(["dataset", "info", str(ds_dir)]) == 0
    out = capsys.readouterr().out
    assert "unreadable" in out and "episode_000001" in out
    assert main(["dataset", "info", "--json", str(ds_dir)]) == 0
    assert list(json.loads(capsys.readouterr().out)["unreadable"]) == ["episode_000001"]


def test_episode_with_object_arrays_does_not_suggest_allow_pickle(reach_ds, tmp_path):
    """The dataset twin of the .npz demo message: an episode holding pickled Python objects is
    refused without echoing numpy's `allow_pickle` hint, and not called truncated."""
    import shutil

    ds_dir = tmp_path / "ds"
    shutil.copytree(reach_ds, ds_dir)
    npz = ds_dir / "episode_000000" / "data.npz"
    with np.load(npz) as z:
        data = {k: z[k] for k in z.files}
    data["action"] = np.array([object()] * len(data["action"]), dtype=object)
    np.savez(npz, **data)
    from robolearn.errors import DatasetError

    with pytest.raises(DatasetError) as exc:
        Dataset(ds_dir).episode(0)
    msg = str(exc.value)
    assert "allow_pickle" not in msg and "truncated" not in msg and "Python objects" in msg


def test_info_duration_is_steps_over_control_rate(reach_ds, capsys):
    s = Dataset(reach_ds).summary()
    hz = s["control_hz"]
    assert hz == 10.0
    assert s["duration_s"] == pytest.approx(s["steps"] / hz)
    assert main(["dataset", "info", str(reach_ds)]) == 0
    assert f"{s['steps']} ({s['steps'] / hz:.1f} s at 10 Hz" in capsys.readouterr().out


def test_keyboard_recording_starts_the_episode_when_the_operator_is_ready(tmp_path, term):
    """No env step (and no time-limit step) passes before the operator's first key."""
    import os
    import threading
    import time

    import gymnasium as gym

    from robolearn.data.dataset_writer import DatasetWriter
    from robolearn.teleop.keyboard import KeyboardConfig, KeyboardDevice
    from robolearn.teleop.recorder import record

    master, slave = term
    env = gym.make("robolearn/ArmReach-v0", obs="state")
    steps = []
    real_step = env.step
    env.step = lambda a: (steps.append(time.monotonic()), real_step(a))[1]
    device = KeyboardDevice(4, KeyboardConfig(fd=slave, absolute_dims=(3,)))
    writer = DatasetWriter(tmp_path / "kb", env_id="robolearn/ArmReach-v0", control_hz=10,
                           observation_space=env.observation_space, action_space=env.action_space)
    th = threading.Thread(target=record, args=(env, device, writer, 1),
                          kwargs=dict(max_steps=4, rate_hz=20), daemon=True)
    try:
        th.start()
        time.sleep(1.0)                       # the operator reads the help, gets ready ...
        assert steps == [], "the episode ran before the operator touched a key"
        os.write(master, b"w")                # ... and starts driving
        th.join(10)
        assert not th.is_alive()
    finally:
        os.write(master, b"\x1b")
        th.join(5)
        device.close()
        writer.close()
        env.close()
    ep = Dataset(tmp_path / "kb").episode(0)
    assert ep.steps == 4 and ep.data["action"][0, 0] == pytest.approx(0.5)  # the key, not idle zeros

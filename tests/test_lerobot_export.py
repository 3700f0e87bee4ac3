"""LeRobot v2.1 export (`--lerobot-version v2.1`), read back with pyarrow; v3.0 is test_lerobot_v30.py."""
import json
import os
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

from robolearn.data.dataset import Dataset
from robolearn.data.dataset_writer import DatasetWriter
from robolearn.data.video import read_video
from robolearn.errors import DatasetError
from robolearn.teleop import make_device
from robolearn.teleop.recorder import record
from robolearn.teleop.session import Readout, open_env

ENV_ID = "robolearn/ArmReach-v0"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("lr") / "src"
    env = open_env(ENV_ID, "both", camera="front", image_size=(32, 32))
    w = DatasetWriter(root, env_id=ENV_ID, control_hz=10.0, observation_space=env.observation_space,
                      action_space=env.action_space)
    record(env, make_device("scripted", env), w, episodes=3, seed=3, readout=Readout(open(os.devnull, "w")))
    w.close()
    env.close()
    return root


def test_export_layout_features_fps_and_videos(dataset, tmp_path):
    out = tmp_path / "lerobot"
    r = subprocess.run([sys.executable, "-m", "robolearn.cli", "dataset", "export", str(dataset),
                        "--format", "lerobot", "--lerobot-version", "v2.1", "--out", str(out),
                        "--task", "reach the red target"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    src = Dataset(dataset)
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["codebase_version"] == "v2.1" and info["fps"] == 10
    assert info["total_episodes"] == 3 and info["total_videos"] == 3 and info["total_tasks"] == 1
    n_total = sum(src.episode(i).steps for i in src.indices)
    assert info["total_frames"] == n_total and info["splits"] == {"train": "0:3"}
    feats = info["features"]
    assert feats["observation.state"]["shape"] == [20] and feats["observation.state"]["dtype"] == "float32"
    assert feats["action"]["shape"] == [4]
    cam = feats["observation.images.front"]
    assert cam["dtype"] == "video" and cam["shape"] == [32, 32, 3]
    assert cam["names"] == ["height", "width", "channels"] and cam["info"]["video.fps"] == 10.0
    for k in ("timestamp", "frame_index", "episode_index", "index", "task_index"):
        assert k in feats

    tasks = [json.loads(line) for line in (out / "meta" / "tasks.jsonl").read_text().splitlines()]
    assert tasks == [{"task_index": 0, "task": "reach the red target"}]
    eps = [json.loads(line) for line in (out / "meta" / "episodes.jsonl").read_text().splitlines()]
    assert [e["episode_index"] for e in eps] == [0, 1, 2]
    stats = [json.loads(line) for line in (out / "meta" / "episodes_stats.jsonl").read_text().splitlines()]
    assert len(stats) == 3 and np.asarray(stats[0]["stats"]["observation.images.front"]["mean"]).shape == (3, 1, 1)
    glob = json.loads((out / "meta" / "stats.json").read_text())
    assert glob["action"]["count"] == [n_total]

    index = 0
    for e, i in zip(eps, src.indices):
        ep = src.episode(i)
        data_path = out / info["data_path"].format(episode_chunk=0, episode_index=e["episode_index"])
        table = pq.read_table(data_path)
        # every non-video feature is a parquet column, and nothing else is
        assert set(table.column_names) == {k for k, f in feats.items() if f["dtype"] != "video"}
        assert table.num_rows == e["length"] == ep.steps
        cols = table.to_pydict()
        assert cols["episode_index"] == [e["episode_index"]] * ep.steps
        assert cols["frame_index"] == list(range(ep.steps))
        assert cols["index"] == list(range(index, index + ep.steps))
        index += ep.steps
        np.testing.assert_allclose(cols["timestamp"], np.arange(ep.steps) / 10.0, atol=1e-6)
        np.testing.assert_array_equal(np.asarray(cols["action"], np.float32), ep.data["action"])
        np.testing.assert_array_equal(np.asarray(cols["observation.state"], np.float32),
                                      ep.data["obs.state"][:-1])
        assert cols["next.done"][-1] is True and not any(cols["next.done"][:-1])
        assert table.schema.field("action").type.list_size == 4
        hf = json.loads(table.schema.metadata[b"huggingface"])
        assert hf["info"]["features"]["action"] == {"feature": {"dtype": "float32", "_type": "Value"},
                                                    "length": 4, "_type": "Sequence"}

        vpath = out / info["video_path"].format(episode_chunk=0, video_key="observation.images.front",
                                                episode_index=e["episode_index"])
        frames = read_video(vpath)
        assert frames.shape == (ep.steps, 32, 32, 3)            # one frame per LeRobot frame
        mae = np.abs(frames.astype(int) - ep.frames("front")[:-1].astype(int)).mean()
        assert mae < 6, f"exported video too far from the recording (MAE {mae:.1f})"
    assert index == n_total


def test_export_refuses_non_empty_out(dataset, tmp_path):
    from robolearn.data.lerobot_export import export_lerobot

    out = tmp_path / "o"
    out.mkdir()
    (out / "x").write_text("keep me")
    with pytest.raises(DatasetError, match="not empty"):
        export_lerobot(dataset, out)
    export_lerobot(dataset, out, overwrite=True)
    assert (out / "meta" / "info.json").is_file() and not (out / "x").exists()


def test_info_and_view_commands(dataset, tmp_path):
    r = subprocess.run([sys.executable, "-m", "robolearn.cli", "dataset", "info", str(dataset), "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["episodes"] == 3 and s["cameras"] == ["front"] and s["success_rate"] == 1.0
    png = tmp_path / "sheet.png"
    r = subprocess.run([sys.executable, "-m", "robolearn.cli", "dataset", "view", str(dataset),
                        "--episode", "1", "--out", str(png)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    import imageio.v3 as iio

    img = iio.imread(png)
    assert img.ndim == 3 and img.shape[0] > 200 and img.std() > 10
    mp4 = tmp_path / "ep.mp4"
    r = subprocess.run([sys.executable, "-m", "robolearn.cli", "dataset", "view", str(dataset), "--episode", "0",
                        "--video", "--out", str(mp4)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert read_video(mp4).shape[0] == Dataset(dataset).episode(0).steps + 1
    r = subprocess.run([sys.executable, "-m", "robolearn.cli", "dataset", "info", str(tmp_path / "missing")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "no such dataset directory" in r.stderr


def test_export_names_joints_robot_type_and_task(dataset, tmp_path):
    """observation.state / action carry per-element names as LeRobot datasets do, robot_type is
    the robot, and the default task string in meta/tasks.parquet is the task's description."""
    from robolearn.data.feature_names import action_names, state_names
    from robolearn.data.lerobot_export import export_lerobot
    from robolearn.tasks.arm import DESCRIPTIONS

    info = export_lerobot(dataset, tmp_path / "lr")
    feats = info["features"]
    assert info["robot_type"] == "so100"
    assert feats["observation.state"]["names"] == [
        "shoulder_pan.pos", "shoulder_lift.pos", "elbow_flex.pos", "wrist_flex.pos", "wrist_roll.pos",
        "shoulder_pan.vel", "shoulder_lift.vel", "elbow_flex.vel", "wrist_flex.vel", "wrist_roll.vel",
        "gripper.pos", "ee.x", "ee.y", "ee.z", "target.x", "target.y", "target.z",
        "target_minus_ee.x", "target_minus_ee.y", "target_minus_ee.z"]
    assert feats["action"]["names"] == ["ee.dx", "ee.dy", "ee.dz", "gripper.cmd"]
    tasks = pq.read_table(tmp_path / "lr" / "meta" / "tasks.parquet").to_pydict()
    assert tasks["__index_level_0__"] == [DESCRIPTIONS["reach"]] and tasks["task_index"] == [0]
    # the values under a name are that element of the recorded state
    data = pq.read_table(tmp_path / "lr" / "data" / "chunk-000" / "file-000.parquet").to_pydict()
    ep = Dataset(dataset).episode(Dataset(dataset).indices[0])
    row = np.asarray(data["observation.state"][3], np.float32)
    i = feats["observation.state"]["names"].index("elbow_flex.pos")
    assert row[i] == ep.data["obs.state"][3][2]
    # other layouts: joint actions, the push goal, the car, an unknown wider state
    assert action_names("robolearn/ArmPush-v0", 6)[0] == "shoulder_pan.delta"
    assert state_names("robolearn/ArmPush-v0", 17)[-3:] == ["goal.x", "goal.y", "goal.z"]
    assert state_names("robolearn/ArmLift-v0", 17)[-3:] == ["state_14", "state_15", "state_16"]
    assert action_names("robolearn/CarLap-v0", 2) == ["steer", "throttle"]
    assert state_names("dmc/cheetah-run-v0", 2) == ["state_0", "state_1"]

"""LeRobot v3.0 export, read back by the real `lerobot` package and by a mirror of its read path.

The real package cannot share the project's venv: lerobot 0.4.4 (the newest release for Python
3.11; 0.6.x needs Python >= 3.12) pins torch<2.11 while the project pins torch 2.13.0, and
PyPI's torchvision wheels are CUDA builds whose ops cannot load beside the CPU torch
(`torchvision::nms does not exist`). It runs in a side environment instead:
`test_real_lerobot_dataset_loads_the_export` runs tests/lerobot_real_check.py (real
`LeRobotDataset`, local root, no Hub) in ROBOLEARN_LEROBOT_PYTHON, or here if lerobot imports.
So that the suite checks the format without it, `LeRobotV30Reader` below mirrors LeRobot's
loader code paths (src/lerobot/datasets/lerobot_dataset.py, utils.py and video_utils.py of
0.4.4, read from the released wheel):
info.json + version check; tasks.parquet read as pandas does and looked up by position
(`tasks.iloc[task_index].name`); episodes from meta/episodes/*/*.parquet, looked up by row
(`meta.episodes[ep_idx]`); frames from data/*/*.parquet concatenated in sorted path order and
cast to the `datasets.Features` that `get_hf_features_from_features` derives from info.json
(the columns must be exactly those features, with castable types); the cache-sufficiency
check (every episode present, every video file there; otherwise LeRobot goes to the Hub);
data/video files resolved from the per-episode chunk/file indices with the info.json
templates; and frames decoded at `from_timestamp + timestamp` both ways LeRobot decodes them:
pyav's nearest frame within tolerance, and torchcodec's frame `round(ts * average_fps)`
whose timestamp must lie within tolerance.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.parquet as pq
import pytest

from robolearn.data.dataset import Dataset
from robolearn.data.dataset_writer import DatasetWriter
from robolearn.data.lerobot_export import export_lerobot
from robolearn.data.video import read_video
from robolearn.data.feature_names import action_names, state_names, task_description
from robolearn.teleop import make_device
from robolearn.teleop.recorder import record
from robolearn.teleop.session import Readout, open_env

ENV_ID = "robolearn/ArmReach-v0"
TOLERANCE_S = 1e-4          # LeRobotDataset's default tolerance_s
CAM = "observation.images.front"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("lr3") / "src"
    env = open_env(ENV_ID, "both", camera="front", image_size=(32, 32))
    w = DatasetWriter(root, env_id=ENV_ID, control_hz=10.0, observation_space=env.observation_space,
                      action_space=env.action_space)
    record(env, make_device("scripted", env), w, episodes=3, seed=5, readout=Readout(open(os.devnull, "w")))
    w.close()
    env.close()
    return root


def _pts(path: Path) -> tuple[np.ndarray, float]:
    """Presentation timestamps of every frame, as a decoder reports them (ffmpeg showinfo), and
    the stream's average frame rate from its header (torchcodec's `metadata.average_fps`)."""
    import imageio_ffmpeg

    r = subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-hide_banner", "-i", str(path), "-vf", "showinfo",
                        "-f", "null", "-"], capture_output=True, text=True, timeout=60)
    fps = re.search(r"Video: .*?, ([0-9.]+) fps", r.stderr)
    assert fps, r.stderr[-500:]
    return np.array([float(t) for t in re.findall(r"pts_time:([0-9.]+)", r.stderr)]), float(fps.group(1))


def _hf_arrow_types(features: dict) -> dict:
    """`get_hf_features_from_features` (utils.py), as the arrow types `datasets` casts to:
    shape (1,) -> Value(dtype), shape (N,) -> Sequence(length=N) (a fixed-size list)."""
    out = {}
    for key, ft in features.items():
        if ft["dtype"] == "video":
            continue
        assert ft["dtype"] != "image" and len(ft["shape"]) == 1, (key, ft)  # not written by the export
        value = pa.from_numpy_dtype(np.dtype(ft["dtype"]))
        out[key] = value if tuple(ft["shape"]) == (1,) else pa.list_(value, ft["shape"][0])
    return out


def _castable(col: pa.ChunkedArray, want: pa.DataType) -> bool:
    """What `datasets.table.cast_array_to_feature` accepts here: the same scalar type, or a list
    of the value type whose rows all have the fixed length."""
    if pa.types.is_fixed_size_list(want):
        if not (pa.types.is_list(col.type) or pa.types.is_fixed_size_list(col.type)):
            return False
        lengths = pa.compute.list_value_length(col).to_numpy(zero_copy_only=False)
        return col.type.value_type == want.value_type and bool((lengths == want.list_size).all())
    return col.type == want


class LeRobotV30Reader:
    """LeRobot 0.4's local-root read path, without torch / datasets / pandas."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.info = json.loads((self.root / "meta" / "info.json").read_text())
        # check_version_compatibility: v3.x only (0.4 raises BackwardCompatibilityError for v2)
        major = int(self.info["codebase_version"].lstrip("v").split(".")[0])
        assert major == 3, self.info["codebase_version"]
        for key in ("fps", "features", "data_path", "video_path", "chunks_size", "total_episodes",
                    "total_frames", "data_files_size_in_mb", "video_files_size_in_mb"):
            assert key in self.info, key
        for ft in self.info["features"].values():           # load_info
            assert "dtype" in ft and "shape" in ft and "names" in ft, ft
        # load_tasks: pd.read_parquet -> DataFrame indexed by the task string (pandas metadata)
        t = pq.read_table(self.root / "meta" / "tasks.parquet")
        pmeta = json.loads(t.schema.metadata[b"pandas"])
        (index_col,) = pmeta["index_columns"]
        self.tasks = t.column(index_col).to_pylist()          # row order: tasks.iloc[i].name
        assert t.column("task_index").to_pylist() == list(range(len(self.tasks)))
        # load_episodes: load_nested_dataset(meta/episodes) = sorted glob("*/*.parquet"), stats/ dropped;
        # meta.episodes[ep_idx] is a row position
        ep_files = sorted((self.root / "meta" / "episodes").glob("*/*.parquet"))
        assert ep_files, "meta/episodes has no parquet file"
        eps = pa.concat_tables([pq.read_table(p) for p in ep_files]).to_pylist()
        self.episodes = [{k: v for k, v in e.items() if not k.startswith("stats/")} for e in eps]
        self.episode_stats = [{k: v for k, v in e.items() if k.startswith("stats/")} for e in eps]
        # load_hf_dataset: load_nested_dataset(data, features=get_hf_features_from_features(...))
        # concatenates every data file in path order and casts it to those features
        data_files = sorted((self.root / "data").glob("*/*.parquet"))
        table = pa.concat_tables([pq.read_table(p) for p in data_files])
        want = _hf_arrow_types(self.info["features"])
        assert set(table.column_names) == set(want), (sorted(table.column_names), sorted(want))
        for key, typ in want.items():
            assert _castable(table.column(key), typ), (key, table.column(key).type, typ)
        self.hf = table.to_pydict()
        self.video_keys = [k for k, f in self.info["features"].items() if f["dtype"] == "video"]
        self._videos: dict[Path, tuple[np.ndarray, np.ndarray, float]] = {}
        # _check_cached_episodes_sufficient: otherwise LeRobotDataset downloads from the Hub
        assert set(range(self.info["total_episodes"])) <= set(self.hf["episode_index"])
        for ep_idx in range(self.info["total_episodes"]):
            for key in self.video_keys:
                assert self.video_file(ep_idx, key).is_file(), self.video_file(ep_idx, key)

    def __len__(self):
        return self.info["total_frames"]

    def data_file(self, ep_idx: int) -> Path:             # meta.get_data_file_path
        e = self.episodes[ep_idx]
        return self.root / self.info["data_path"].format(chunk_index=e["data/chunk_index"],
                                                         file_index=e["data/file_index"])

    def video_file(self, ep_idx: int, key: str) -> Path:   # meta.get_video_file_path
        e = self.episodes[ep_idx]
        return self.root / self.info["video_path"].format(
            video_key=key, chunk_index=e[f"videos/{key}/chunk_index"], file_index=e[f"videos/{key}/file_index"])

    def _decode(self, path: Path, timestamps: list[float]) -> np.ndarray:
        """decode_video_frames, both backends: pyav (decode_video_frames_torchvision) takes the
        nearest frame, which must lie within tolerance; torchcodec takes frame
        round(ts * average_fps), whose timestamp must lie within tolerance. Both must agree."""
        if path not in self._videos:
            self._videos[path] = (read_video(path), *_pts(path))
        frames, pts, average_fps = self._videos[path]
        assert len(frames) == len(pts)
        out = []
        for ts in timestamps:
            i = int(np.argmin(np.abs(pts - ts)))
            assert abs(pts[i] - ts) < TOLERANCE_S, f"{path.name}: no frame within {TOLERANCE_S}s of {ts}"
            j = round(ts * average_fps)                     # torchcodec's get_frames_at(indices)
            assert j < len(pts) and abs(pts[j] - ts) < TOLERANCE_S, \
                f"{path.name}: torchcodec's frame {j} for {ts} s is at {pts[min(j, len(pts) - 1)]} s"
            assert i == j
            out.append(frames[i])
        return np.stack(out)

    def __getitem__(self, idx: int) -> dict:
        item = {k: v[idx] for k, v in self.hf.items()}
        ep_idx = item["episode_index"]
        e = self.episodes[ep_idx]
        assert e["dataset_from_index"] <= item["index"] < e["dataset_to_index"]
        for key in self.video_keys:                          # _query_videos
            shifted = e[f"videos/{key}/from_timestamp"] + item["timestamp"]
            item[key] = self._decode(self.video_file(ep_idx, key), [shifted])[0]
        item["task"] = self.tasks[item["task_index"]]
        return item


def _check_against_source(reader: LeRobotV30Reader, src: Dataset, task: str):
    assert len(reader) == sum(src.episode(i).steps for i in src.indices)
    idx = 0
    for new_idx, i in enumerate(src.indices):
        ep = src.episode(i)
        e = reader.episodes[new_idx]
        assert e["length"] == ep.steps and e["tasks"] == [task]
        assert (e["dataset_from_index"], e["dataset_to_index"]) == (idx, idx + ep.steps)
        v_to = e[f"videos/{CAM}/to_timestamp"] - e[f"videos/{CAM}/from_timestamp"]
        assert abs(v_to - ep.steps / reader.info["fps"]) < 1e-9
        # the data file the episode row names really holds this episode's frames
        t = pq.read_table(reader.data_file(new_idx)).to_pydict()
        assert t["episode_index"].count(new_idx) == ep.steps
        decoded = []
        for k in range(ep.steps):
            item = reader[idx + k]
            assert item["episode_index"] == new_idx and item["frame_index"] == k and item["task"] == task
            np.testing.assert_array_equal(np.asarray(item["action"], np.float32), ep.data["action"][k])
            np.testing.assert_array_equal(np.asarray(item["observation.state"], np.float32),
                                          ep.data["obs.state"][k])
            decoded.append(item[CAM])
        mae = np.abs(np.stack(decoded).astype(int) - ep.frames("front")[:ep.steps].astype(int)).mean()
        assert mae < 6, f"episode {new_idx}: decoded frames too far from the recording (MAE {mae:.1f})"
        st = reader.episode_stats[new_idx]
        np.testing.assert_allclose(st["stats/action/mean"], ep.data["action"].mean(0), rtol=1e-5, atol=1e-6)
        assert np.asarray(st[f"stats/{CAM}/mean"]).shape == (3, 1, 1)
        idx += ep.steps


def test_cli_export_writes_v30_that_lerobots_read_path_loads(dataset, tmp_path):
    out = tmp_path / "lerobot"
    r = subprocess.run([sys.executable, "-m", "robolearn.cli", "dataset", "export", str(dataset),
                        "--format", "lerobot", "--out", str(out), "--task", "reach the red target"],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    assert "LeRobot v3.0" in r.stdout
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["fps"] == 10 and info["total_episodes"] == 3
    assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    assert info["video_path"] == "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    # many episodes per file: exactly one data file, one video file, one episodes file
    assert [p.relative_to(out).as_posix() for p in sorted(out.rglob("*.parquet"))] == [
        "data/chunk-000/file-000.parquet", "meta/episodes/chunk-000/file-000.parquet", "meta/tasks.parquet"]
    assert [p.relative_to(out).as_posix() for p in out.rglob("*.mp4")] == [
        f"videos/{CAM}/chunk-000/file-000.mp4"]
    assert not list(out.rglob("*.jsonl"))
    data = pq.read_table(out / "data" / "chunk-000" / "file-000.parquet")
    assert set(data.column_names) == {k for k, f in info["features"].items() if f["dtype"] != "video"}
    stats = json.loads((out / "meta" / "stats.json").read_text())
    assert stats["action"]["count"] == [info["total_frames"]]
    _check_against_source(LeRobotV30Reader(out), Dataset(dataset), "reach the red target")


def test_v30_rolls_over_files_and_chunks_like_lerobot(dataset, tmp_path):
    """Tiny size limits: every episode opens a new data/video file; chunks_size=2 advances the
    chunk after two files (LeRobot's update_chunk_file_indices). The read path still agrees."""
    out = tmp_path / "small"
    export_lerobot(dataset, out, task="t", data_files_size_in_mb=1e-6, video_files_size_in_mb=1e-6,
                   chunks_size=2)
    files = sorted(p.relative_to(out).as_posix() for p in (out / "data").rglob("*.parquet"))
    assert files == ["data/chunk-000/file-000.parquet", "data/chunk-000/file-001.parquet",
                     "data/chunk-001/file-000.parquet"]
    vids = sorted(p.relative_to(out / "videos" / CAM).as_posix() for p in out.rglob("*.mp4"))
    assert vids == ["chunk-000/file-000.mp4", "chunk-000/file-001.mp4", "chunk-001/file-000.mp4"]
    reader = LeRobotV30Reader(out)
    assert [reader.episodes[i][f"videos/{CAM}/from_timestamp"] for i in range(3)] == [0.0, 0.0, 0.0]
    _check_against_source(reader, Dataset(dataset), "t")


def test_v21_stays_available(dataset, tmp_path):
    info = export_lerobot(dataset, tmp_path / "old", version="v2.1")
    assert info["codebase_version"] == "v2.1"
    assert (tmp_path / "old" / "meta" / "episodes.jsonl").is_file()
    assert (tmp_path / "old" / "data" / "chunk-000" / "episode_000002.parquet").is_file()
    from robolearn.errors import DatasetError

    with pytest.raises(DatasetError, match="v2.0"):
        export_lerobot(dataset, tmp_path / "x", version="v2.0")


# ---------------------------------------------------------------- the real lerobot package
CHECKER = Path(__file__).with_name("lerobot_real_check.py")
NO_LEROBOT = (
    "the real lerobot package is not importable here and ROBOLEARN_LEROBOT_PYTHON is not set. "
    "lerobot 0.4.4 (the newest for Python 3.11; 0.6.x needs Python >= 3.12) pins torch<2.11 "
    "while the project pins torch 2.13.0, and PyPI's torchvision wheels are CUDA builds that "
    "cannot load beside the CPU torch (`torchvision::nms does not exist`), so it cannot share "
    "this venv. Give it its own: `python3.11 -m venv L && L/bin/pip install lerobot==0.4.4`, "
    "then ROBOLEARN_LEROBOT_PYTHON=L/bin/python (docs/datasets.md). LeRobotV30Reader above "
    "mirrors its read path meanwhile.")


def _lerobot_python() -> list[str]:
    """The interpreter that runs lerobot_real_check.py: this one if lerobot imports here, else
    ROBOLEARN_LEROBOT_PYTHON (a side environment); skip when there is neither."""
    import importlib.util

    if importlib.util.find_spec("lerobot") is not None:
        return [sys.executable]
    side = os.environ.get("ROBOLEARN_LEROBOT_PYTHON")
    if not side:
        pytest.skip(NO_LEROBOT)
    return [side]


def _expected(src: Dataset, task: str, path: Path) -> Path:
    """The source's per-frame values in LeRobot's frame order, for the checker."""
    act, state, frames, ep_idx, frame_idx = [], [], [], [], []
    for n, i in enumerate(src.indices):
        ep = src.episode(i)
        act.append(ep.data["action"])
        state.append(ep.data["obs.state"][:ep.steps])
        frames.append(ep.frames("front")[:ep.steps])
        ep_idx += [n] * ep.steps
        frame_idx += list(range(ep.steps))
    np.savez(path, action=np.concatenate(act).astype(np.float32), state=np.concatenate(state).astype(np.float32),
             frames=np.concatenate(frames), episode_index=np.array(ep_idx), frame_index=np.array(frame_idx),
             task=np.array(task), state_names=np.array(state_names(src.env_id, state[0].shape[1])),
             action_names=np.array(action_names(src.env_id, act[0].shape[1])), robot_type=np.array("so100"))
    return path


@pytest.mark.parametrize("layout", ["default", "rolled-over"])
def test_real_lerobot_dataset_loads_the_export(dataset, tmp_path, layout):
    """lerobot 0.4.4's own `LeRobotDataset(repo_id, root=OUT)` loads the v3.0 export: every frame's
    action, state, indices, task and decoded camera frame match the source (each video backend
    in ROBOLEARN_LEROBOT_BACKENDS, default pyav; torchcodec, LeRobot's default, needs the
    system's FFmpeg libraries). The v2.1 export is refused with BackwardCompatibilityError."""
    python = _lerobot_python()
    out = tmp_path / "real"
    small = dict(data_files_size_in_mb=1e-6, video_files_size_in_mb=1e-6, chunks_size=2)
    # the default layout keeps the default task string: the task's description
    task = "reach" if layout == "rolled-over" else task_description(ENV_ID)
    export_lerobot(dataset, out, **({"task": "reach", **small} if layout == "rolled-over" else {}))
    expected = _expected(Dataset(dataset), task, tmp_path / "expected.npz")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    for backend in os.environ.get("ROBOLEARN_LEROBOT_BACKENDS", "pyav").split(","):
        r = subprocess.run(python + [str(CHECKER), "load", str(out), str(expected), backend],
                           capture_output=True, text=True, timeout=600, env=env)
        assert r.returncode == 0, r.stdout + r.stderr[-3000:]
        report = json.loads(r.stdout.strip().splitlines()[-1])
        assert report["frames"] == len(np.load(expected)["action"]) and report["episodes"] == 3
    if layout == "default":
        export_lerobot(dataset, tmp_path / "old", task="reach", version="v2.1")
        r = subprocess.run(python + [str(CHECKER), "refuse", str(tmp_path / "old")],
                           capture_output=True, text=True, timeout=600, env=env)
        assert r.returncode == 0, r.stdout + r.stderr[-3000:]

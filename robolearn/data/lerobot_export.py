"""Export a robolearn dataset to the LeRobot dataset layout: codebase v3.0 (default) or v2.1.

Why: users can then train ACT / Diffusion policies on their demos with LeRobot unchanged.
Current LeRobot (0.4+) reads only v3.0 and refuses v2.1 (`BackwardCompatibilityError`); v2.1
stays available (`version="v2.1"`) for older LeRobot installs, at the cost of a few lines.

v3.0 packs many episodes per file and finds each one through relational metadata
(paths are LeRobot's `DEFAULT_DATA_PATH` / `DEFAULT_VIDEO_PATH` / `DEFAULT_EPISODES_PATH`):

    OUT/meta/info.json                            codebase_version "v3.0", fps, features, templates
    OUT/meta/stats.json                           min/max/mean/std/count of every feature
    OUT/meta/tasks.parquet                        task_index, indexed by the task string (pandas)
    OUT/meta/episodes/chunk-000/file-000.parquet  one row per episode: length, tasks, the data
                                                  file and frame range, each video's file and
                                                  from/to timestamps, flattened per-episode stats
    OUT/data/chunk-000/file-000.parquet           the frames of many episodes, in order
    OUT/videos/<key>/chunk-000/file-000.mp4       the episodes' frames, concatenated

A new data (video) file starts once the current one reaches `data_files_size_in_mb`
(`video_files_size_in_mb`); after `chunks_size` files the chunk index advances, as LeRobot's
`update_chunk_file_indices` does. v2.1 writes one parquet and one MP4 per episode plus JSONL
metadata (meta/episodes.jsonl, tasks.jsonl, episodes_stats.jsonl).

Names (robolearn/data/feature_names.py): `observation.state` and `action` carry one name per
element as LeRobot datasets do (`shoulder_pan.pos`, ..., `ee.x`, ...; actions `ee.dx` ... or
`shoulder_pan.delta` ...), `robot_type` is the robot ("so100", "rc_car"), and the task string is
the task's description unless `task=` is given.

LeRobot frames pair observation t with action t, so an episode of N steps becomes N frames
(the final observation, which has no action, is dropped; videos are cut to match). Videos are
re-encoded to H.264 yuv420p, which every LeRobot decoder and the Hub viewer read.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np

from robolearn.data.dataset import Dataset
from robolearn.data.feature_names import action_names, robot_type as env_robot_type, state_names, task_description
from robolearn.data.video import PORTABLE, VideoWriter, write_video
from robolearn.errors import DatasetError

VERSIONS = ("v3.0", "v2.1")
CODEBASE_VERSION = "v3.0"
CHUNKS_SIZE = 1000
DATA_FILES_SIZE_IN_MB = 100          # LeRobot's DEFAULT_DATA_FILE_SIZE_IN_MB
VIDEO_FILES_SIZE_IN_MB = 200         # LeRobot's DEFAULT_VIDEO_FILE_SIZE_IN_MB
# v3.0
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
TASKS_PATH = "meta/tasks.parquet"
# v2.1
V21_DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
V21_VIDEO_PATH = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"


def _feature_key(obs_key: str, cameras: list[str]) -> str:
    if obs_key in cameras:
        return f"observation.images.{obs_key}"
    return "observation.state" if obs_key == "state" else f"observation.{obs_key}"


def next_chunk_file(chunk: int, file: int, chunks_size: int) -> tuple[int, int]:
    """The file after (chunk, file): LeRobot's `update_chunk_file_indices`."""
    return (chunk + 1, 0) if file == chunks_size - 1 else (chunk, file + 1)


def export_lerobot(src: str | os.PathLike, out: str | os.PathLike, task: str | None = None,
                   robot_type: str | None = None, overwrite: bool = False, version: str = CODEBASE_VERSION,
                   data_files_size_in_mb: float = DATA_FILES_SIZE_IN_MB,
                   video_files_size_in_mb: float = VIDEO_FILES_SIZE_IN_MB,
                   chunks_size: int = CHUNKS_SIZE) -> dict:
    """Write the LeRobot layout (`version` "v3.0" or "v2.1") of dataset `src` to `out`;
    return the info.json dict."""
    if version not in VERSIONS:
        raise DatasetError(f"LeRobot version {version!r} is not supported; choose one of {list(VERSIONS)}")
    if chunks_size < 1 or data_files_size_in_mb <= 0 or video_files_size_in_mb <= 0:
        raise DatasetError("chunks_size and the file size limits must be positive")
    ds = Dataset(src)
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise DatasetError(f"{out}: exists and is not empty; choose another --out or pass --overwrite")
        shutil.rmtree(out)
    if len(ds) == 0:
        raise DatasetError(f"{ds.root}: has no episodes to export")
    fps = int(round(ds.control_hz))
    if abs(fps - ds.control_hz) > 1e-6:
        raise DatasetError(f"{ds.root}: control rate {ds.control_hz} Hz is not an integer; LeRobot needs an "
                           "integer fps (record at an integer control_hz)")
    task = task or task_description(ds.env_id)
    cams = ds.cameras
    features = _features(ds, fps)
    (out / "meta").mkdir(parents=True, exist_ok=True)
    common = dict(codebase_version=version, robot_type=robot_type or env_robot_type(ds.env_id))
    if version == "v2.1":
        return _export_v21(ds, out, task, fps, features, common)
    return _export_v30(ds, out, task, fps, features, common, chunks_size,
                       data_files_size_in_mb, video_files_size_in_mb)


def _features(ds: Dataset, fps: int) -> dict[str, dict]:
    cams = ds.cameras
    vec_keys = [k for k in ds.observation_space.spaces if k not in cams]
    act_dim = int(np.prod(ds.action_space.shape))
    features: dict[str, dict] = {}
    for k in vec_keys:
        shape = list(ds.observation_space[k].shape)
        dim = int(np.prod(shape))
        names = state_names(ds.env_id, dim) if k == "state" else [f"{k}_{i}" for i in range(dim)]
        features[_feature_key(k, cams)] = {"dtype": "float32", "shape": [dim], "names": names}
    for c in cams:
        h, w, ch = ds.observation_space[c].shape
        even = h % 2 == 0 and w % 2 == 0
        features[_feature_key(c, cams)] = {
            "dtype": "video", "shape": [h, w, ch], "names": ["height", "width", "channels"],
            "info": {"video.fps": float(fps), "video.height": h, "video.width": w, "video.channels": ch,
                     "video.codec": "h264", "video.pix_fmt": "yuv420p" if even else "yuv444p",
                     "video.is_depth_map": False, "has_audio": False}}
    features["action"] = {"dtype": "float32", "shape": [act_dim], "names": action_names(ds.env_id, act_dim)}
    features["next.reward"] = {"dtype": "float32", "shape": [1], "names": None}
    features["next.done"] = {"dtype": "bool", "shape": [1], "names": None}
    features["next.success"] = {"dtype": "bool", "shape": [1], "names": None}
    features["intervention"] = {"dtype": "bool", "shape": [1], "names": None}
    features["timestamp"] = {"dtype": "float32", "shape": [1], "names": None}
    for k in ("frame_index", "episode_index", "index", "task_index"):
        features[k] = {"dtype": "int64", "shape": [1], "names": None}
    return features


def _episode_columns(ds: Dataset, ep, ep_idx: int, first_index: int, fps: int) -> dict[str, np.ndarray]:
    """One episode as LeRobot frame columns (observation t paired with action t)."""
    n = ep.steps
    cams = ds.cameras
    cols: dict[str, np.ndarray] = {}
    for k in ds.observation_space.spaces:
        if k not in cams:
            cols[_feature_key(k, cams)] = ep.data[f"obs.{k}"][:n].reshape(n, -1).astype(np.float32)
    cols["action"] = ep.data["action"].reshape(n, -1).astype(np.float32)
    cols["next.reward"] = ep.data["reward"].astype(np.float32)
    done = np.zeros(n, bool)
    done[-1] = True
    cols["next.done"] = done
    cols["next.success"] = ep.data["success"].astype(bool)
    cols["intervention"] = ep.data["intervention"].astype(bool)
    cols["timestamp"] = (np.arange(n) / fps).astype(np.float32)
    cols["frame_index"] = np.arange(n, dtype=np.int64)
    cols["episode_index"] = np.full(n, ep_idx, np.int64)
    cols["index"] = np.arange(first_index, first_index + n, dtype=np.int64)
    cols["task_index"] = np.zeros(n, np.int64)
    return cols


def _frame_table(cols: dict[str, np.ndarray]):
    import pyarrow as pa

    arrays, fields = [], []
    for name, arr in cols.items():
        if arr.ndim == 2:
            typ = pa.list_(pa.float32(), arr.shape[1])
            arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(arr.reshape(-1)), arr.shape[1]))
        else:
            typ = pa.from_numpy_dtype(arr.dtype)
            arrays.append(pa.array(arr, type=typ))
        fields.append(pa.field(name, typ))
    schema = pa.schema(fields, metadata={"huggingface": json.dumps({"info": {"features": _hf_features(cols)}})})
    return pa.Table.from_arrays(arrays, schema=schema)


def _video_settings(features: dict, key: str) -> dict:
    return PORTABLE if features[key]["info"]["video.pix_fmt"] == "yuv420p" else dict(PORTABLE, pix_fmt_out="yuv444p")


def _export_v21(ds: Dataset, out: Path, task: str, fps: int, features: dict, common: dict) -> dict:
    import pyarrow.parquet as pq

    cams = ds.cameras
    episodes_jsonl, stats_jsonl, all_stats = [], [], []
    index = 0
    for new_idx, ep in enumerate(ds.episodes()):
        n = ep.steps
        chunk = new_idx // CHUNKS_SIZE
        cols = _episode_columns(ds, ep, new_idx, index, fps)
        index += n
        path = out / V21_DATA_PATH.format(episode_chunk=chunk, episode_index=new_idx)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(_frame_table(cols), path)
        ep_stats = {k: _stats(v) for k, v in cols.items()}
        for c in cams:
            frames = ep.frames(c)[:n]
            key = _feature_key(c, cams)
            vpath = out / V21_VIDEO_PATH.format(episode_chunk=chunk, video_key=key, episode_index=new_idx)
            vpath.parent.mkdir(parents=True, exist_ok=True)
            write_video(vpath, frames, fps, _video_settings(features, key))
            ep_stats[key] = _image_stats(frames)
        all_stats.append(ep_stats)
        episodes_jsonl.append({"episode_index": new_idx, "tasks": [task], "length": n})
        stats_jsonl.append({"episode_index": new_idx, "stats": ep_stats})

    n_eps = len(episodes_jsonl)
    info = {
        **common, "total_episodes": n_eps, "total_frames": index, "total_tasks": 1,
        "total_videos": n_eps * len(cams), "total_chunks": (n_eps - 1) // CHUNKS_SIZE + 1,
        "chunks_size": CHUNKS_SIZE, "fps": fps, "splits": {"train": f"0:{n_eps}"},
        "data_path": V21_DATA_PATH, "video_path": V21_VIDEO_PATH if cams else None, "features": features,
    }
    _write_json(out / "meta" / "info.json", info)
    _write_jsonl(out / "meta" / "episodes.jsonl", episodes_jsonl)
    _write_jsonl(out / "meta" / "tasks.jsonl", [{"task_index": 0, "task": task}])
    _write_jsonl(out / "meta" / "episodes_stats.jsonl", stats_jsonl)
    _write_json(out / "meta" / "stats.json", _aggregate(all_stats))
    return info


class _VideoFiles:
    """One camera's concatenated MP4 files: episodes are appended to the open file until it
    reaches the size limit, then the next (chunk, file) is opened."""

    def __init__(self, out: Path, key: str, shape, fps: int, settings: dict, limit_mb: float, chunks_size: int):
        self.out, self.key, self.shape, self.fps, self.settings = out, key, shape, fps, settings
        self.limit_bytes, self.chunks_size = limit_mb * 1024 * 1024, chunks_size
        self.chunk, self.file = 0, 0
        self.writer: VideoWriter | None = None

    def append(self, frames: np.ndarray) -> dict:
        if self.writer is not None and self.writer.path.stat().st_size >= self.limit_bytes:
            self.writer.close()
            self.writer = None
            self.chunk, self.file = next_chunk_file(self.chunk, self.file, self.chunks_size)
        if self.writer is None:
            path = self.out / VIDEO_PATH.format(video_key=self.key, chunk_index=self.chunk, file_index=self.file)
            path.parent.mkdir(parents=True, exist_ok=True)
            self.writer = VideoWriter(path, self.shape, self.fps, self.settings)
        start = self.writer.frames
        for f in frames:
            self.writer.write(f)
        p = f"videos/{self.key}/"
        return {p + "chunk_index": self.chunk, p + "file_index": self.file,
                p + "from_timestamp": start / self.fps, p + "to_timestamp": self.writer.frames / self.fps}

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def _export_v30(ds: Dataset, out: Path, task: str, fps: int, features: dict, common: dict,
                chunks_size: int, data_mb: float, video_mb: float) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    cams = ds.cameras
    videos = {c: _VideoFiles(out, _feature_key(c, cams), ds.observation_space[c].shape, fps,
                             _video_settings(features, _feature_key(c, cams)), video_mb, chunks_size)
              for c in cams}
    pending: list = []                 # frame tables of the data file being filled
    chunk, file, pending_bytes = 0, 0, 0

    def flush():
        path = out / DATA_PATH.format(chunk_index=chunk, file_index=file)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.concat_tables(pending), path)
        pending.clear()

    rows, all_stats = [], []
    index = 0
    try:
        for new_idx, ep in enumerate(ds.episodes()):
            n = ep.steps
            cols = _episode_columns(ds, ep, new_idx, index, fps)
            table = _frame_table(cols)
            if pending and pending_bytes + table.nbytes > data_mb * 1024 * 1024:
                flush()
                chunk, file = next_chunk_file(chunk, file, chunks_size)
                pending_bytes = 0
            pending.append(table)
            pending_bytes += table.nbytes
            row = {"episode_index": new_idx, "tasks": [task], "length": n,
                   "data/chunk_index": chunk, "data/file_index": file,
                   "dataset_from_index": index, "dataset_to_index": index + n}
            index += n
            ep_stats = {k: _stats(v) for k, v in cols.items()}
            for c in cams:
                frames = ep.frames(c)[:n]
                row.update(videos[c].append(frames))
                ep_stats[_feature_key(c, cams)] = _image_stats(frames)
            row["meta/episodes/chunk_index"] = 0
            row["meta/episodes/file_index"] = 0
            for feat, st in ep_stats.items():
                for name, value in st.items():
                    row[f"stats/{feat}/{name}"] = value
            rows.append(row)
            all_stats.append(ep_stats)
        flush()
    finally:
        for v in videos.values():
            v.close()

    ep_path = out / EPISODES_PATH.format(chunk_index=0, file_index=0)
    ep_path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), ep_path)
    _write_tasks(out / TASKS_PATH, [task])
    n_eps = len(rows)
    info = {
        **common, "total_episodes": n_eps, "total_frames": index, "total_tasks": 1,
        "chunks_size": chunks_size, "data_files_size_in_mb": data_mb, "video_files_size_in_mb": video_mb,
        "fps": fps, "splits": {"train": f"0:{n_eps}"},
        "data_path": DATA_PATH, "video_path": VIDEO_PATH if cams else None, "features": features,
    }
    _write_json(out / "meta" / "info.json", info)
    _write_json(out / "meta" / "stats.json", _aggregate(all_stats))
    return info


def _write_tasks(path: Path, tasks: list[str]) -> None:
    """meta/tasks.parquet as pandas writes `DataFrame({"task_index": ...}, index=tasks)`: LeRobot
    reads it with `pd.read_parquet` and looks tasks up by index, so the pandas metadata that
    restores the string index is part of the format (written here without needing pandas)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pandas_meta = {
        "index_columns": ["__index_level_0__"],
        "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode",
                            "numpy_type": "object", "metadata": {"encoding": "UTF-8"}}],
        "columns": [{"name": "task_index", "field_name": "task_index", "pandas_type": "int64",
                     "numpy_type": "int64", "metadata": None},
                    {"name": None, "field_name": "__index_level_0__", "pandas_type": "unicode",
                     "numpy_type": "object", "metadata": None}],
        "creator": {"library": "pyarrow", "version": pa.__version__}, "pandas_version": "2.2.0"}
    table = pa.table({"task_index": pa.array(range(len(tasks)), pa.int64()),
                      "__index_level_0__": pa.array(tasks, pa.string())})
    table = table.replace_schema_metadata({"pandas": json.dumps(pandas_meta)})
    pq.write_table(table, path)


def _hf_features(cols: dict[str, np.ndarray]) -> dict:
    """The `datasets` Features description LeRobot stores in parquet metadata."""
    feats = {}
    for name, arr in cols.items():
        dtype = "float32" if arr.dtype == np.float32 else str(arr.dtype)
        value = {"dtype": dtype, "_type": "Value"}
        feats[name] = {"feature": value, "length": int(arr.shape[1]), "_type": "Sequence"} if arr.ndim == 2 else value
    return feats


def _stats(arr: np.ndarray) -> dict:
    a = np.asarray(arr).reshape(len(arr), -1).astype(np.float64)
    return {"min": a.min(0).tolist(), "max": a.max(0).tolist(), "mean": a.mean(0).tolist(),
            "std": a.std(0).tolist(), "count": [int(len(a))]}


def _image_stats(frames: np.ndarray) -> dict:
    """Per-channel stats in [0, 1], shaped (3, 1, 1) as LeRobot stores image statistics."""
    x = frames.astype(np.float64).reshape(-1, frames.shape[-1]) / 255.0

    def c(v):
        return [[[float(e)]] for e in v]
    return {"min": c(x.min(0)), "max": c(x.max(0)), "mean": c(x.mean(0)), "std": c(x.std(0)),
            "count": [int(len(frames))]}


def _aggregate(per_episode: list[dict]) -> dict:
    """Pooled statistics (count-weighted mean, parallel variance) over episodes."""
    out = {}
    for key in per_episode[0]:
        ss = [e[key] for e in per_episode]
        n = np.array([s["count"][0] for s in ss], np.float64)
        mean = np.array([np.asarray(s["mean"]) for s in ss])
        var = np.array([np.asarray(s["std"]) ** 2 for s in ss])
        w = (n / n.sum()).reshape(-1, *[1] * (mean.ndim - 1))
        m = (w * mean).sum(0)
        v = (w * (var + (mean - m) ** 2)).sum(0)
        out[key] = {"min": np.min([s["min"] for s in ss], axis=0).tolist(),
                    "max": np.max([s["max"] for s in ss], axis=0).tolist(),
                    "mean": m.tolist(), "std": np.sqrt(v).tolist(), "count": [int(n.sum())]}
    return out


def _write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=4) + "\n")


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))

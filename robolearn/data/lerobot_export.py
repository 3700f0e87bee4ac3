"""Export a robolearn dataset to the LeRobot dataset layout (codebase v2.1).

Why: users can then train ACT / Diffusion policies on their demos with LeRobot unchanged.
Layout written (paths as LeRobot's `DEFAULT_PARQUET_PATH` / `DEFAULT_VIDEO_PATH`):

    OUT/meta/info.json               codebase_version, fps, features, path templates, totals
    OUT/meta/episodes.jsonl          {"episode_index", "tasks": [...], "length"} per episode
    OUT/meta/tasks.jsonl             {"task_index", "task"}
    OUT/meta/episodes_stats.jsonl    per-episode min/max/mean/std/count of every feature
    OUT/meta/stats.json              the same over the whole dataset
    OUT/data/chunk-000/episode_000000.parquet
    OUT/videos/chunk-000/observation.images.<camera>/episode_000000.mp4

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
from robolearn.data.video import PORTABLE, write_video
from robolearn.errors import DatasetError

CODEBASE_VERSION = "v2.1"
CHUNKS_SIZE = 1000
DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
VIDEO_PATH = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"


def _feature_key(obs_key: str, cameras: list[str]) -> str:
    if obs_key in cameras:
        return f"observation.images.{obs_key}"
    return "observation.state" if obs_key == "state" else f"observation.{obs_key}"


def export_lerobot(src: str | os.PathLike, out: str | os.PathLike, task: str | None = None,
                   robot_type: str | None = None, overwrite: bool = False) -> dict:
    """Write the LeRobot layout of dataset `src` to `out`; return the info.json dict."""
    import pyarrow as pa
    import pyarrow.parquet as pq

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
    task = task or ds.env_id
    cams = ds.cameras
    vec_keys = [k for k in ds.observation_space.spaces if k not in cams]
    act_dim = int(np.prod(ds.action_space.shape))
    features: dict[str, dict] = {}
    for k in vec_keys:
        shape = list(ds.observation_space[k].shape)
        features[_feature_key(k, cams)] = {"dtype": "float32", "shape": shape,
                                           "names": [f"{k}_{i}" for i in range(int(np.prod(shape)))]}
    for c in cams:
        h, w, ch = ds.observation_space[c].shape
        even = h % 2 == 0 and w % 2 == 0
        features[_feature_key(c, cams)] = {
            "dtype": "video", "shape": [h, w, ch], "names": ["height", "width", "channels"],
            "info": {"video.fps": float(fps), "video.height": h, "video.width": w, "video.channels": ch,
                     "video.codec": "h264", "video.pix_fmt": "yuv420p" if even else "yuv444p",
                     "video.is_depth_map": False, "has_audio": False}}
    features["action"] = {"dtype": "float32", "shape": [act_dim], "names": [f"a_{i}" for i in range(act_dim)]}
    features["next.reward"] = {"dtype": "float32", "shape": [1], "names": None}
    features["next.done"] = {"dtype": "bool", "shape": [1], "names": None}
    features["next.success"] = {"dtype": "bool", "shape": [1], "names": None}
    features["intervention"] = {"dtype": "bool", "shape": [1], "names": None}
    for k in ("timestamp",):
        features[k] = {"dtype": "float32", "shape": [1], "names": None}
    for k in ("frame_index", "episode_index", "index", "task_index"):
        features[k] = {"dtype": "int64", "shape": [1], "names": None}

    (out / "meta").mkdir(parents=True, exist_ok=True)
    episodes_jsonl, stats_jsonl = [], []
    all_stats: list[dict] = []
    index = 0
    for new_idx, ep in enumerate(ds.episodes()):
        n = ep.steps
        chunk = new_idx // CHUNKS_SIZE
        cols: dict[str, np.ndarray] = {}
        for k in vec_keys:
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
        cols["episode_index"] = np.full(n, new_idx, np.int64)
        cols["index"] = np.arange(index, index + n, dtype=np.int64)
        cols["task_index"] = np.zeros(n, np.int64)
        index += n
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
        path = out / DATA_PATH.format(episode_chunk=chunk, episode_index=new_idx)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_arrays(arrays, schema=schema), path)

        ep_stats = {k: _stats(v) for k, v in cols.items()}
        for c in cams:
            frames = ep.frames(c)[:n]
            key = _feature_key(c, cams)
            vpath = out / VIDEO_PATH.format(episode_chunk=chunk, video_key=key, episode_index=new_idx)
            vpath.parent.mkdir(parents=True, exist_ok=True)
            settings = PORTABLE if features[key]["info"]["video.pix_fmt"] == "yuv420p" else \
                dict(PORTABLE, pix_fmt_out="yuv444p")
            write_video(vpath, frames, fps, settings)
            ep_stats[key] = _image_stats(frames)
        all_stats.append(ep_stats)
        episodes_jsonl.append({"episode_index": new_idx, "tasks": [task], "length": n})
        stats_jsonl.append({"episode_index": new_idx, "stats": ep_stats})

    n_eps = len(episodes_jsonl)
    info = {
        "codebase_version": CODEBASE_VERSION, "robot_type": robot_type or ds.env_id.split("/")[-1],
        "total_episodes": n_eps, "total_frames": index, "total_tasks": 1,
        "total_videos": n_eps * len(cams), "total_chunks": (n_eps - 1) // CHUNKS_SIZE + 1,
        "chunks_size": CHUNKS_SIZE, "fps": fps, "splits": {"train": f"0:{n_eps}"},
        "data_path": DATA_PATH, "video_path": VIDEO_PATH if cams else None, "features": features,
    }
    _write_json(out / "meta" / "info.json", info)
    _write_jsonl(out / "meta" / "episodes.jsonl", episodes_jsonl)
    _write_jsonl(out / "meta" / "tasks.jsonl", [{"task_index": 0, "task": task}])
    _write_jsonl(out / "meta" / "episodes_stats.jsonl", stats_jsonl)
    _write_json(out / "meta" / "stats.json", _aggregate(all_stats))
    return info


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

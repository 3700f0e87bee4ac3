"""Crash-safe recording of episodes into a dataset folder (each episode committed by one atomic rename)."""
from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from robolearn.data.dataset_format import (DEVICE_DTYPE, FORMAT, FORMAT_VERSION, META, TMP_RE, _check_format,
                                           _episode_dirs, _read_json, describe_space, episode_dirname,
                                           is_camera_space, space_to_json)
from robolearn.data.video import VideoWriter
from robolearn.jsonfile import fsync_dir, write_json_atomic
from robolearn.run_lock import lock_folder
from robolearn.errors import ConfigError, DatasetError

log = logging.getLogger(__name__)


def to_jsonable(x: Any, _depth: int = 0) -> Any:
    """Best-effort conversion of info/calibration values to JSON (numpy -> lists)."""
    if _depth > 8:
        return repr(x)
    if x is None or isinstance(x, (bool, int, str)):
        return x
    if isinstance(x, float):
        return x if np.isfinite(x) else repr(x)
    if isinstance(x, np.generic):
        return to_jsonable(x.item(), _depth + 1)
    if isinstance(x, np.ndarray):
        if x.size > 4096:
            return f"<array {x.shape} {x.dtype}>"
        return to_jsonable(x.tolist(), _depth + 1)
    if isinstance(x, dict):
        return {str(k): to_jsonable(v, _depth + 1) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_jsonable(v, _depth + 1) for v in x]
    if hasattr(x, "__dataclass_fields__"):
        return {k: to_jsonable(getattr(x, k), _depth + 1) for k in x.__dataclass_fields__}
    return repr(x)


# ------------------------------------------------------------------------------- writing
class DatasetWriter:
    """Appends episodes to a dataset directory (created if absent).

    Holds an exclusive lock on the directory so two recorders cannot interleave episodes. On
    open it removes stale `.tmp-*` folders (episodes a crashed recorder never finished) and
    rebuilds the episode index from the `episode_*` folders.
    """

    def __init__(self, root: str | os.PathLike, *, env_id: str, control_hz: float,
                 observation_space: gym.spaces.Dict, action_space: gym.spaces.Box,
                 obs_mode: str | None = None, extra: dict | None = None):
        self.root = Path(root)
        if self.root.exists() and not self.root.is_dir():
            raise DatasetError(f"{self.root}: exists and is not a directory; choose another --out")
        self._lock = lock_folder(self.root, what="dataset", error=DatasetError,
                                 busy="another process is recording into this dataset",
                                 busy_hint="wait for it to finish or choose another --out")
        try:
            self._open(env_id, control_hz, observation_space, action_space, obs_mode, extra)
        except BaseException:
            self.close()
            raise

    def _open(self, env_id, control_hz, observation_space, action_space, obs_mode, extra) -> None:
        if not isinstance(observation_space, gym.spaces.Dict):
            raise ConfigError("DatasetWriter needs a Dict observation space (the RobotEnv contract)")
        self.observation_space = observation_space
        self.action_space = action_space
        self.cameras = [k for k, s in observation_space.spaces.items() if is_camera_space(s)]
        self.vector_keys = [k for k in observation_space.spaces if k not in self.cameras]
        self.control_hz = float(control_hz)
        meta_path = self.root / META
        if meta_path.exists():
            self.meta = _read_json(meta_path)
            _check_format(self.meta, meta_path)
            mine = {"env_id": env_id, "observation_space": space_to_json(observation_space),
                    "action_space": space_to_json(action_space)}
            for k, v in mine.items():
                if self.meta.get(k) != v:
                    have, want = self.meta.get(k), v
                    if k != "env_id":
                        have, want = describe_space(have), describe_space(want)
                    raise DatasetError(f"{meta_path}: dataset was recorded with a different {k} "
                                       f"({have} there, {want} now: another env, --obs mode, camera or "
                                       "image size); record into a new --out")
        else:
            self.meta = {
                "format": FORMAT, "format_version": FORMAT_VERSION, "env_id": env_id,
                "control_hz": self.control_hz, "obs_mode": obs_mode,
                "observation_space": space_to_json(observation_space),
                "action_space": space_to_json(action_space),
                "cameras": self.cameras, "state_keys": self.vector_keys,
                "created": _now(), "episodes": [], "total_steps": 0,
                **(extra or {}),
            }
        self._clean_and_reindex()

    # ---------------------------------------------------------------------------- index
    def _clean_and_reindex(self) -> None:
        for p in self.root.iterdir():
            if TMP_RE.match(p.name) and p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
        entries = []
        for idx, path in _episode_dirs(self.root):
            try:
                ep = _read_json(path / "episode.json")
            except DatasetError:
                continue  # not ours / unreadable: left alone, skipped by loaders with an error
            entries.append(_index_entry(idx, ep))
        self.meta["episodes"] = entries
        self.meta["total_steps"] = int(sum(e["steps"] for e in entries))
        write_json_atomic(self.root / META, self.meta, indent=2, durable=True)

    @property
    def num_episodes(self) -> int:
        return len(self.meta["episodes"])

    def recorded_seeds(self) -> list[int]:
        """Reset seeds of the episodes already in the dataset (appending continues after them)."""
        return sorted(e["seed"] for e in self.meta["episodes"] if isinstance(e.get("seed"), int))

    def next_seed(self) -> int:
        """The first reset seed after every recorded one: appended demos never repeat earlier ones."""
        seeds = self.recorded_seeds()
        return seeds[-1] + 1 if seeds else 0

    def next_index(self) -> int:
        used = [e["index"] for e in self.meta["episodes"]]
        return max(used) + 1 if used else 0

    def start_episode(self, *, seed: int | None = None, device: str = "", reset_info: dict | None = None,
                      task: str | None = None, backend: str | None = None, calibration: Any = None,
                      extra: dict | None = None) -> "EpisodeWriter":
        return EpisodeWriter(self, self.next_index(), seed=seed, device=device, reset_info=reset_info or {},
                             task=task, backend=backend, calibration=calibration, extra=extra or {})

    def _commit(self, index: int, tmp: Path, episode_json: dict) -> Path:
        final = self.root / episode_dirname(index)
        fsync_dir(tmp)
        os.rename(tmp, final)            # the atomic step: before it the episode is absent
        fsync_dir(self.root)
        self.meta["episodes"].append(_index_entry(index, episode_json))
        self.meta["total_steps"] = int(sum(e["steps"] for e in self.meta["episodes"]))
        try:
            write_json_atomic(self.root / META, self.meta, indent=2, durable=True)
        except OSError as exc:
            # the episode is whole on disk (loaders list the folders); only the index summary is
            # behind, rewritten by the next commit or when the dataset is opened: not a lost episode
            log.warning("episode %d written, but %s not updated (%s): it is rebuilt at the next "
                        "episode or when the dataset is opened", index, META, exc)
        return final

    def close(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class EpisodeWriter:
    """One episode being recorded into `.tmp-<n>/`; `finish()` commits it, `discard()` drops it."""

    def __init__(self, ds: DatasetWriter, index: int, *, seed, device, reset_info, task, backend,
                 calibration, extra):
        self.ds = ds
        self.index = index
        self.tmp = ds.root / f".tmp-{index:06d}"
        if self.tmp.exists():
            shutil.rmtree(self.tmp)
        self.tmp.mkdir()
        self.seed = seed
        self.device = device
        self.reset_info = reset_info
        self.meta = {"task": task, "backend": backend, "calibration": to_jsonable(calibration),
                     "randomization": to_jsonable(reset_info.get("randomization")), **to_jsonable(extra)}
        self._videos: dict[str, VideoWriter] = {}
        self._vec: dict[str, list] = {k: [] for k in ds.vector_keys}
        self._steps: dict[str, list] = {k: [] for k in ("action", "reward", "success", "terminated", "truncated",
                                                          "intervention", "device", "overrun", "success_mark")}
        self._timestamp: list[float] = []
        self._t_obs: list[float] = []
        self._t0 = time.monotonic()
        self._started = False
        self.done = False

    @property
    def steps(self) -> int:
        return len(self._steps["action"])

    def _add_obs(self, obs: dict, info: dict) -> None:
        missing = [k for k in self.ds.observation_space.spaces if k not in obs]
        if missing:
            raise DatasetError(f"observation lacks {missing} of the dataset's observation space "
                               f"({list(self.ds.observation_space.spaces)}); record with the same --obs mode")
        for k in self.ds.vector_keys:
            space = self.ds.observation_space[k]
            a = np.asarray(obs[k], dtype=space.dtype)
            if a.shape != space.shape:
                raise DatasetError(f"observation {k!r} has shape {a.shape}, the dataset's space says {space.shape}")
            self._vec[k].append(a.copy())
        for cam in self.ds.cameras:
            if cam not in self._videos:
                shape = self.ds.observation_space[cam].shape
                self._videos[cam] = VideoWriter(self.tmp / f"{cam}.mp4", shape, self.ds.control_hz)
            self._videos[cam].write(obs[cam])
        self._timestamp.append(time.monotonic() - self._t0)
        self._t_obs.append(float(info.get("t_obs", np.nan)))

    def add_reset(self, obs: dict, info: dict | None = None) -> None:
        """The observation returned by `env.reset` (frame 0)."""
        if self._started:
            raise DatasetError("add_reset called twice for one episode")
        self._started = True
        self._t0 = time.monotonic()
        self._add_obs(obs, info or {})

    def add_step(self, action, obs: dict, reward: float, terminated: bool, truncated: bool,
                 info: dict | None = None, device: str | None = None, intervention: bool | None = None) -> None:
        """One env step: the action applied and what it led to."""
        if not self._started:
            raise DatasetError("add_step before add_reset: record the reset observation first")
        info = info or {}
        a = np.asarray(action, dtype=np.float32).reshape(self.ds.action_space.shape)
        if intervention is None:
            intervention = bool(info.get("intervention", False))
        s = self._steps
        s["action"].append(a.copy())
        s["reward"].append(float(reward))
        s["success"].append(bool(info.get("success", False)))
        s["terminated"].append(bool(terminated))
        s["truncated"].append(bool(truncated))
        s["intervention"].append(bool(intervention))
        s["device"].append(str(device if device is not None else self.device)[:16])
        s["overrun"].append(float(info.get("overrun", 0.0)))
        s["success_mark"].append(bool(info.get("success_mark", False)))
        self._add_obs(obs, info)

    def finish(self, success: bool | None = None, label_source: str = "env") -> int:
        """Write data.npz + episode.json, fsync, rename to `episode_<n>/`. Returns the index.

        `success=None` takes the env's verdict on the last step.
        """
        if self.done:
            raise DatasetError(f"episode {self.index} already finished or discarded")
        if self.steps == 0:
            raise DatasetError(f"episode {self.index} has no steps; discard it instead")
        n = self.steps
        s = self._steps
        truncated = np.asarray(s["truncated"], bool)
        terminated = np.asarray(s["terminated"], bool)
        if not (terminated[-1] or truncated[-1]):
            truncated[-1] = True  # ended by the recorder (time, human label): not an env terminal
        if success is None:
            success, label_source = bool(s["success"][-1]), "env"
        arrays = {
            "action": np.stack(s["action"]).astype(np.float32),
            "reward": np.asarray(s["reward"], np.float32),
            "success": np.asarray(s["success"], bool),
            "terminated": terminated,
            "truncated": truncated,
            "intervention": np.asarray(s["intervention"], bool),
            "device": np.asarray(s["device"], dtype=DEVICE_DTYPE),
            "overrun": np.asarray(s["overrun"], np.float64),
            "success_mark": np.asarray(s["success_mark"], bool),
            "timestamp": np.asarray(self._timestamp, np.float64),
            "t_obs": np.asarray(self._t_obs, np.float64),
        }
        for k, v in self._vec.items():
            arrays[f"obs.{k}"] = np.stack(v)
        for w in self._videos.values():
            w.close()
        with open(self.tmp / "data.npz", "wb") as f:
            np.savez_compressed(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        ep = {
            "index": self.index, "env_id": self.ds.meta["env_id"], "steps": n,
            "success": bool(success), "label_source": label_source, "seed": self.seed,
            "device": self.device, "devices": sorted(set(s["device"])),
            "interventions": int(arrays["intervention"].sum()),
            "return": float(arrays["reward"].sum()), "terminated": bool(terminated[-1]),
            "truncated": bool(truncated[-1]), "control_hz": self.ds.control_hz,
            "duration_s": float(self._timestamp[-1]),
            "cameras": {c: {"file": f"{c}.mp4", "frames": n + 1, "shape": list(self.ds.observation_space[c].shape)}
                        for c in self.ds.cameras},
            "created": _now(), **self.meta,
        }
        with open(self.tmp / "episode.json", "w") as f:
            json.dump(ep, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        self.done = True
        self.ds._commit(self.index, self.tmp, ep)
        return self.index

    def discard(self) -> None:
        """Drop the episode: nothing of it becomes visible."""
        if self.done:
            return
        self.done = True
        for w in self._videos.values():
            w.abort()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if not self.done:
            self.discard()  # an exception mid-episode never leaves a partial episode


# ------------------------------------------------------------------------------- helpers
def _index_entry(idx: int, ep: dict) -> dict:
    return {"index": idx, "dir": episode_dirname(idx), "steps": int(ep.get("steps", 0)),
            "success": bool(ep.get("success", False)), "seed": ep.get("seed"), "device": ep.get("device")}


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")

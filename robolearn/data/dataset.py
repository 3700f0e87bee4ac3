"""Episode datasets on disk: crash-safe writing, validated loading, transitions for learners.

Layout (see docs/datasets.md)::

    DATASET/
      meta.json                  format version, env id, control_hz, spaces, episode index
      episode_000000/
        data.npz                 state obs, actions, rewards, flags, timestamps, device per step
        <camera>.mp4             one lossless video per camera (N+1 frames)
        episode.json             task, backend, seed, success label, device, randomization...
      .tmp-000001/               an episode being written (never read; removed on next open)

Why this shape: an episode is written into `.tmp-<n>/`, every file fsynced, then renamed to
`episode_<n>/` in one atomic `os.rename`, so a Ctrl-C, a crash or a SIGKILL leaves each
episode either complete or absent. The episode folders are the truth; `meta.json` is an index
rewritten atomically after each episode and rebuilt from the folders when a writer opens.
Nothing is pickled: arrays are `.npz` loaded with `allow_pickle=False`, metadata is JSON.

An episode of N steps holds N+1 observations (the reset observation, then one per step) and N
actions/rewards/flags, so transitions are `(obs[t], action[t], reward[t], obs[t+1])`.
"""
from __future__ import annotations

import datetime as _dt
import fcntl
import json
import os
import re
import shutil
import time
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import gymnasium as gym
import numpy as np

from robolearn.data.video import VideoWriter, fsync_dir, read_video
from robolearn.errors import ConfigError, DatasetError
from robolearn.jsonfile import read_json

FORMAT = "robolearn-dataset"
FORMAT_VERSION = 1
META = "meta.json"
EPISODE_RE = re.compile(r"^episode_(\d+)$")
TMP_RE = re.compile(r"^\.tmp-(\d+)$")
DEVICE_DTYPE = "<U16"


def episode_dirname(index: int) -> str:
    return f"episode_{index:06d}"


# ------------------------------------------------------------------------------- spaces
def is_camera_space(space: gym.Space) -> bool:
    """Camera observations are uint8 HxWx3 boxes (the RobotEnv contract); they go to MP4."""
    return (isinstance(space, gym.spaces.Box) and space.dtype == np.uint8
            and len(space.shape) == 3 and space.shape[2] == 3)


def space_to_json(space: gym.Space) -> dict:
    if isinstance(space, gym.spaces.Dict):
        return {"type": "dict", "spaces": {k: space_to_json(s) for k, s in space.spaces.items()}}
    if isinstance(space, gym.spaces.Box):
        def bound(b):
            b = np.asarray(b)
            flat = b.reshape(-1)
            if flat.size and np.all(flat == flat[0]):
                return _scalar(flat[0])
            return [_scalar(x) for x in flat]
        return {"type": "box", "shape": list(space.shape), "dtype": str(space.dtype),
                "low": bound(space.low), "high": bound(space.high)}
    raise ConfigError(f"cannot record a {type(space).__name__} space: only Dict of Box and Box are supported")


def describe_space(d: dict | None) -> str:
    """Short text of a JSON space: `{front: 48x48x3 uint8, state: 20 float32}`."""
    if not isinstance(d, dict):
        return repr(d)
    if d.get("type") == "dict":
        return "{" + ", ".join(f"{k}: {describe_space(s)}" for k, s in d["spaces"].items()) + "}"
    return f"{'x'.join(map(str, d.get('shape', [])))} {d.get('dtype')}"


def space_from_json(d: dict) -> gym.Space:
    if d["type"] == "dict":
        return gym.spaces.Dict({k: space_from_json(s) for k, s in d["spaces"].items()})
    if d["type"] == "box":
        shape = tuple(d["shape"])
        dtype = np.dtype(d["dtype"])

        def bound(b):
            if isinstance(b, list):
                return np.asarray([np.inf if x == "inf" else -np.inf if x == "-inf" else x for x in b],
                                  dtype=dtype).reshape(shape)
            b = np.inf if b == "inf" else -np.inf if b == "-inf" else b
            return np.full(shape, b, dtype=dtype)
        return gym.spaces.Box(bound(d["low"]), bound(d["high"]), shape=shape, dtype=dtype)
    raise DatasetError(f"unknown space type {d.get('type')!r} in {META}")


def _scalar(x):
    x = x.item() if hasattr(x, "item") else x
    if isinstance(x, float) and not np.isfinite(x):
        return "inf" if x > 0 else "-inf"
    return x


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


def _write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def _read_json(path: Path) -> dict:
    return read_json(path, DatasetError, f"{path}: missing; is this a robolearn dataset directory?")


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
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise DatasetError(f"{self.root}: another process is recording into this dataset; "
                               "wait for it to finish or choose another --out") from None
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
        _write_json_atomic(self.root / META, self.meta)

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
        _write_json_atomic(self.root / META, self.meta)
        return final

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

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


# ------------------------------------------------------------------------------- reading
@dataclass
class Episode:
    """A loaded episode: N steps, N+1 observations. Camera frames decode on first access."""

    index: int
    path: Path
    meta: dict
    data: dict[str, np.ndarray]
    cameras: list[str]
    _frames: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def steps(self) -> int:
        return len(self.data["action"])

    def frames(self, camera: str) -> np.ndarray:
        if camera not in self.cameras:
            raise DatasetError(f"{self.path}: no camera {camera!r}; cameras: {self.cameras}")
        if camera not in self._frames:
            self._frames[camera] = read_video(self.path / f"{camera}.mp4", expect_frames=self.steps + 1)
        return self._frames[camera]

    def observations(self, keys: Iterable[str] | None = None) -> dict[str, np.ndarray]:
        """All N+1 observations per key (vectors from data.npz, images decoded from MP4)."""
        out = {}
        vec = [k[4:] for k in self.data if k.startswith("obs.")]
        for k in (keys if keys is not None else vec + self.cameras):
            out[k] = self.frames(k) if k in self.cameras else self._vector(k)
        return out

    def _vector(self, key: str) -> np.ndarray:
        if f"obs.{key}" not in self.data:
            raise DatasetError(f"{self.path / 'data.npz'}: no observation {key!r}")
        return self.data[f"obs.{key}"]


class Dataset:
    """Read-only view of a dataset directory (ignores `.tmp-*` folders of unfinished episodes)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        if not self.root.is_dir():
            raise DatasetError(f"{self.root}: no such dataset directory (record one with `robolearn record`)")
        self.meta = _read_json(self.root / META)
        _check_format(self.meta, self.root / META)
        self.observation_space = space_from_json(self.meta["observation_space"])
        self.action_space = space_from_json(self.meta["action_space"])
        self.cameras = [k for k, s in self.observation_space.spaces.items() if is_camera_space(s)]
        self.indices = [i for i, _ in _episode_dirs(self.root)]

    @property
    def env_id(self) -> str:
        return self.meta["env_id"]

    @property
    def control_hz(self) -> float:
        return float(self.meta["control_hz"])

    def __len__(self) -> int:
        return len(self.indices)

    def episode(self, index: int) -> Episode:
        path = self.root / episode_dirname(index)
        if not path.is_dir():
            raise DatasetError(f"{path}: no such episode; episodes: {self.indices}")
        meta = _read_json(path / "episode.json")
        npz = path / "data.npz"
        if not npz.is_file():
            raise DatasetError(f"{npz}: missing (episode folder is incomplete)")
        try:
            with np.load(npz, allow_pickle=False) as z:
                data = {k: z[k] for k in z.files}
        except ValueError as exc:
            if "pickle" in str(exc):  # never offer to unpickle: a dataset must not run code
                raise DatasetError(f"{npz}: holds Python objects (pickled arrays); robolearn reads "
                                   "only plain numeric/bool arrays (write episodes with "
                                   "DatasetWriter)") from None
            raise DatasetError(f"{npz}: cannot read ({exc}); the file is truncated or corrupt") from None
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise DatasetError(f"{npz}: cannot read ({exc}); the file is truncated or corrupt") from None
        _check_episode(npz, data, self.observation_space, self.action_space, self.cameras)
        if int(meta.get("steps", -1)) != len(data["action"]):
            raise DatasetError(f"{path / 'episode.json'}: says {meta.get('steps')} steps but "
                               f"data.npz holds {len(data['action'])}")
        return Episode(index, path, meta, data, list(self.cameras))

    def episodes(self) -> Iterable[Episode]:
        for i in self.indices:
            yield self.episode(i)

    def unreadable(self) -> dict[str, str]:
        """Episode folder -> why it cannot be loaded (truncated data.npz, bad episode.json, ...).
        Loaders skip these with a warning; `dataset info` lists them."""
        bad = {}
        for i in self.indices:
            try:
                self.episode(i)
            except DatasetError as exc:
                bad[episode_dirname(i)] = str(exc)
        return bad

    def summary(self) -> dict:
        unreadable = self.unreadable()
        eps = [_read_json(self.root / episode_dirname(i) / "episode.json") for i in self.indices
               if episode_dirname(i) not in unreadable]
        steps = sum(int(e["steps"]) for e in eps)
        succ = [bool(e["success"]) for e in eps]
        return {
            "path": str(self.root), "env_id": self.env_id, "control_hz": self.control_hz,
            "episodes": len(eps), "steps": steps,
            "success_rate": float(np.mean(succ)) if succ else 0.0,
            "cameras": self.cameras,
            "state_keys": [k for k in self.observation_space.spaces if k not in self.cameras],
            "action_dim": int(np.prod(self.action_space.shape)),
            "devices": sorted({d for e in eps for d in e.get("devices", [e.get("device", "")])}),
            "interventions": int(sum(e.get("interventions", 0) for e in eps)),
            # what the data covers at its control rate (an unpaced scripted recording takes less
            # wall time than that: recording_s)
            "duration_s": steps / self.control_hz if self.control_hz > 0 else 0.0,
            "recording_s": float(sum(e.get("duration_s", 0.0) for e in eps)),
            "unreadable": unreadable,
            "stale_tmp": sorted(p.name for p in self.root.iterdir() if TMP_RE.match(p.name)),
        }


def check_compatible(ds: "Dataset", env_id: str | None, observation_space: gym.spaces.Dict,
                     action_space: gym.Space, keys: Iterable[str]) -> None:
    """Raise DatasetError naming what differs (env id, observation/action shapes) when a
    dataset recorded on one task is fed to a learner of another; warn when only the id differs."""
    problems = []
    for k in keys:
        if k in ds.observation_space.spaces and k in observation_space.spaces:
            a, b = ds.observation_space[k].shape, observation_space[k].shape
            if a != b:
                problems.append(f"observation {k!r} is {a} there, {b} here")
    if ds.action_space.shape != action_space.shape:
        problems.append(f"action is {ds.action_space.shape} there, {action_space.shape} here")
    other_env = env_id is not None and ds.env_id != env_id
    if problems:
        raise DatasetError(f"{ds.root}: recorded on {ds.env_id}, but this run uses "
                           f"{env_id or 'another env'}: " + "; ".join(problems)
                           + ". Record demos on the same task (and --obs mode), or pick another --demos")
    if other_env:
        warnings.warn(f"{ds.root}: recorded on {ds.env_id}, used for {env_id} (shapes match)", stacklevel=2)


def load_transitions(path: str | os.PathLike, keys: Iterable[str] | None = None,
                     episodes: Iterable[int] | None = None, successful_only: bool = False) -> dict:
    """Flatten a dataset into the transition dict `replay.transitions_to_buffer` takes.

    Returns `obs` / `next_obs` ({key: (N, ...)}), `action` (N, A) float32, `reward` (N,)
    float32, `terminated`, `truncated`, `intervention` (N,) bool. `keys` picks observation keys
    (default: all recorded ones; pass the learner's obs keys when it uses fewer).
    """
    ds = Dataset(path)
    all_keys = list(ds.observation_space.spaces)
    keys = all_keys if keys is None else list(keys)
    missing = [k for k in keys if k not in all_keys]
    if missing:
        hint = ("; `privileged` (simulator truth) exists only in sim datasets recorded with "
                "privileged_obs=True: record one, or train without it" if "privileged" in missing else "")
        raise DatasetError(f"{ds.root}: observation keys {missing} were not recorded (recorded: {all_keys}); "
                           f"record with a matching --obs mode{hint}")
    idx = ds.indices if episodes is None else list(episodes)
    obs: dict[str, list] = {k: [] for k in keys}
    nxt: dict[str, list] = {k: [] for k in keys}
    cols: dict[str, list] = {k: [] for k in ("action", "reward", "terminated", "truncated", "intervention")}
    used = 0
    for i in idx:
        try:
            ep = ds.episode(i)
            if successful_only and not ep.meta.get("success"):
                continue
            o = ep.observations(keys)
        except DatasetError as exc:  # one damaged episode must not make the dataset unusable
            warnings.warn(f"skipped {episode_dirname(i)}: {exc}", stacklevel=2)
            continue
        used += 1
        for k in keys:
            obs[k].append(o[k][:-1])
            nxt[k].append(o[k][1:])
        for k in cols:
            cols[k].append(ep.data[k])
    if used == 0:
        raise DatasetError(f"{ds.root}: no episodes to load"
                           + (" (none marked successful)" if successful_only else ""))
    out = {"obs": {k: np.concatenate(v) for k, v in obs.items()},
           "next_obs": {k: np.concatenate(v) for k, v in nxt.items()}}
    for k, v in cols.items():
        out[k] = np.concatenate(v)
    out["action"] = out["action"].astype(np.float32)
    out["reward"] = out["reward"].astype(np.float32)
    return out


# ------------------------------------------------------------------------------- helpers
def _episode_dirs(root: Path) -> list[tuple[int, Path]]:
    found = []
    for p in root.iterdir():
        m = EPISODE_RE.match(p.name)
        if m and p.is_dir():
            found.append((int(m.group(1)), p))
    return sorted(found)


def _index_entry(idx: int, ep: dict) -> dict:
    return {"index": idx, "dir": episode_dirname(idx), "steps": int(ep.get("steps", 0)),
            "success": bool(ep.get("success", False)), "seed": ep.get("seed"), "device": ep.get("device")}


def _check_format(meta: dict, path: Path) -> None:
    if meta.get("format") != FORMAT:
        raise DatasetError(f"{path}: not a robolearn dataset (format={meta.get('format')!r})")
    v = meta.get("format_version")
    if not isinstance(v, int) or v > FORMAT_VERSION:
        raise DatasetError(f"{path}: format_version {v!r} is newer than this robolearn reads "
                           f"({FORMAT_VERSION}); upgrade robolearn")


def _check_episode(npz: Path, data: dict, obs_space: gym.spaces.Dict, act_space: gym.spaces.Box,
                   cameras: list[str]) -> None:
    need = ["action", "reward", "terminated", "truncated", "intervention", "success", "timestamp"]
    need += [f"obs.{k}" for k in obs_space.spaces if k not in cameras]
    missing = [k for k in need if k not in data]
    if missing:
        raise DatasetError(f"{npz}: missing arrays {missing}")
    n = len(data["action"])
    if data["action"].shape[1:] != act_space.shape:
        raise DatasetError(f"{npz}: action has shape {data['action'].shape}, dataset action space is "
                           f"{act_space.shape}")
    for k in ("reward", "terminated", "truncated", "intervention", "success"):
        if data[k].shape != (n,):
            raise DatasetError(f"{npz}: {k} has shape {data[k].shape}, expected ({n},) like action")
    for k in obs_space.spaces:
        if k in cameras:
            continue
        a = data[f"obs.{k}"]
        if a.shape != (n + 1, *obs_space[k].shape):
            raise DatasetError(f"{npz}: obs.{k} has shape {a.shape}, expected {(n + 1, *obs_space[k].shape)} "
                               f"(N+1 observations for N={n} steps)")


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")

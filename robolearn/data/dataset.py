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

This module reads (`Dataset`, `load_transitions`); `dataset_writer.py` writes (`DatasetWriter`);
`dataset_format.py` holds what both share (names, version, spaces as JSON).
"""
from __future__ import annotations

import os
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import gymnasium as gym
import numpy as np

from robolearn.data.dataset_format import (META, TMP_RE, _check_format, _episode_dirs, _read_json,
                                           episode_dirname, is_camera_space, space_from_json)
from robolearn.data.video import read_video
from robolearn.errors import DatasetError


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

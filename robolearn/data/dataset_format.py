"""The on-disk dataset format shared by the writer and the reader: names, version, spaces as JSON, checks."""
from __future__ import annotations

import re
from pathlib import Path

import gymnasium as gym
import numpy as np

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


def _read_json(path: Path) -> dict:
    return read_json(path, DatasetError, f"{path}: missing; is this a robolearn dataset directory?")


def _episode_dirs(root: Path) -> list[tuple[int, Path]]:
    found = []
    for p in root.iterdir():
        m = EPISODE_RE.match(p.name)
        if m and p.is_dir():
            found.append((int(m.group(1)), p))
    return sorted(found)


def _check_format(meta: dict, path: Path) -> None:
    if meta.get("format") != FORMAT:
        raise DatasetError(f"{path}: not a robolearn dataset (format={meta.get('format')!r})")
    v = meta.get("format_version")
    if not isinstance(v, int) or v > FORMAT_VERSION:
        raise DatasetError(f"{path}: format_version {v!r} is newer than this robolearn reads "
                           f"({FORMAT_VERSION}); upgrade robolearn")

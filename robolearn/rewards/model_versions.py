"""A reward model that is retrained during a session: numbered versions and one pointer.

Why a pointer file: the model in the control loop must change only between episodes and only
to a complete model. A retrain writes its whole model folder under a temporary name, renames
the folder into place (`ROOT/v0003`), and only then rewrites `ROOT/CURRENT` (temp file +
`os.replace`, atomic on one file system). A reader that follows CURRENT therefore sees the old
model or the new one, never a half-written one, and a retrain that fails before the pointer
moves changes nothing. Old versions are kept (which model paid which reward stays on disk).

`ReloadingReward` is the loop's side: a classifier reward source that looks at CURRENT at
every episode reset and loads a new version there; a version that will not load is logged and
the previous model stays in use.
"""
from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from robolearn.rewards.base import RewardModelError

log = logging.getLogger(__name__)

CURRENT = "CURRENT"


def is_versioned(path: str | os.PathLike) -> bool:
    return (Path(path) / CURRENT).is_file()


def current_version(root: str | os.PathLike) -> str:
    """The version name CURRENT points at (e.g. "v0003")."""
    path = Path(root) / CURRENT
    try:
        name = path.read_text().strip()
    except OSError as exc:
        raise RewardModelError(f"{path}: cannot read the model pointer ({exc})") from None
    if not name or "/" in name or name.startswith("."):
        raise RewardModelError(f"{path}: holds {name!r}, not a version name like v0003")
    return name


def current_dir(root: str | os.PathLike) -> Path:
    return Path(root) / current_version(root)


def versions(root: str | os.PathLike) -> list[str]:
    return sorted(p.name for p in Path(root).glob("v[0-9]*") if p.is_dir())


def _point_at(root: Path, name: str) -> None:
    tmp = root / f".{CURRENT}.tmp"
    tmp.write_text(name + "\n")
    os.replace(tmp, root / CURRENT)


def publish(root: str | os.PathLike, write) -> str:
    """Make the next version: `write(folder)` fills a temp folder (e.g. `save_model`), which is
    renamed to `ROOT/vNNNN`, then CURRENT moves to it. An exception in `write` leaves CURRENT
    and every existing version as they were (the temp folder is removed) and propagates."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    have = versions(root)
    name = f"v{(int(have[-1][1:]) + 1) if have else 0:04d}"
    tmp = root / f".tmp-{name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        write(tmp)
        os.replace(tmp, root / name)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _point_at(root, name)
    return name


def start_versions(root: str | os.PathLike, model_dir: str | os.PathLike) -> str:
    """ROOT/v0000 = a copy of an existing model folder, CURRENT -> it (a session's start).
    An existing ROOT (a resumed session) is left as it is."""
    root = Path(root)
    if is_versioned(root):
        return current_version(root)
    src = Path(model_dir)
    if not src.is_dir():
        raise RewardModelError(f"reward model {src}: no such folder to start the versions from")
    return publish(root, lambda tmp: shutil.copytree(src, tmp))


class ReloadingReward:
    """A ClassifierReward over a versioned ROOT: reloads CURRENT between episodes (`reset`)."""

    def __init__(self, root: str | os.PathLike, threshold: float | None = None, device: str = "cpu"):
        self.root = Path(root)
        self.threshold_override = threshold
        self.device = device
        self.env = None
        self.reloads = 0
        self.reload_failures = 0
        self.version = current_version(self.root)
        self.inner = self._load(self.version)

    def _load(self, name: str):
        from robolearn.rewards.classifier import ClassifierReward

        model = ClassifierReward(self.root / name, threshold=self.threshold_override, device=self.device)
        if self.env is not None:
            model.bind(self.env)
        return model

    def bind(self, env) -> None:
        self.env = env
        self.inner.bind(env)

    def maybe_reload(self) -> bool:
        """Load the version CURRENT names if it is not the one in use; False if nothing changed
        or the new one would not load (then the previous model stays, and the reason is logged)."""
        try:
            name = current_version(self.root)
        except RewardModelError as exc:
            self.reload_failures += 1
            log.error("reward model pointer unreadable, keeping %s: %s", self.version, exc)
            return False
        if name == self.version:
            return False
        try:
            model = self._load(name)
        except Exception as exc:  # noqa: BLE001 - a bad new model must not stop the robot
            self.reload_failures += 1
            log.error("reward model %s does not load, keeping %s: %s", name, self.version, exc)
            return False
        self.inner, self.version = model, name
        self.reloads += 1
        log.info("reward model now %s", name)
        return True

    def reset(self) -> None:
        self.maybe_reload()
        self.inner.reset()

    @property
    def threshold(self) -> float:
        return self.inner.threshold

    @property
    def cameras(self):
        return self.inner.cameras

    @property
    def latencies(self):
        return self.inner.latencies

    def __call__(self, obs: dict, info: dict) -> tuple[float, bool]:
        return self.inner(obs, info)

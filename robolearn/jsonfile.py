"""The project's JSON files, read and written one way.

Reading (dataset and replay metadata, reward-model metadata, calibrations, checkpoints) has one
error shape: a missing file says what makes it, a torn or garbage file says it is corrupt, each
in the caller's error type, never a bare JSONDecodeError. Writing is atomic (temp file + rename),
so a kill mid-write leaves the previous file, never a torn one; `durable=True` also fsyncs the
file and its folder (datasets: a power cut must not lose a committed episode).
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any


def read_json(path: str | os.PathLike, error: type[Exception], missing: str,
              corrupt: str = "the file is truncated or corrupt") -> Any:
    """The parsed contents of `path`; `error(missing)` if it is not a file, `error` naming the
    file, the parser's complaint and `corrupt` (what to do) if it is not valid UTF-8 JSON."""
    path = Path(path)
    if not path.is_file():
        raise error(missing)
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise error(f"{path}: not valid JSON ({exc}); {corrupt}") from None


def finite(obj: Any) -> Any:
    """`obj` with every NaN / inf float replaced by None (strict JSON has no NaN)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def write_json_atomic(path: str | os.PathLike, obj: Any, indent: int | None = None,
                      durable: bool = False) -> None:
    """Write `obj` as strict JSON (NaN / inf become null) via a temp file + rename; the temp
    file never outlives a failure."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w") as f:
            json.dump(finite(obj), f, indent=indent, allow_nan=False)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)


def fsync_dir(path: str | os.PathLike) -> None:
    """Make a rename/creation inside `path` durable (POSIX: fsync the directory itself)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)

"""Reading the project's JSON files (dataset and replay metadata, reward-model metadata,
calibrations) with one error shape: a missing file says what makes it, a torn or garbage file
says it is corrupt, each in the caller's error type, never a bare JSONDecodeError."""
from __future__ import annotations

import json
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

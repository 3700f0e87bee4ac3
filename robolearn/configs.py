"""Reading config tables: one place for unknown-key checks and TOML loading.

Configs are dataclasses filled from TOML launch files; a misspelt key must stop the run with
its name and the nearest valid one, never be silently ignored.
"""
from __future__ import annotations

import difflib
import tomllib
from pathlib import Path
from typing import Iterable

from robolearn.errors import ConfigError


def check_keys(data: dict, known: Iterable[str], where: str) -> None:
    """Raise ConfigError naming every key of `data` not in `known` (with a did-you-mean hint)."""
    known = sorted(known)
    unknown = sorted(set(data) - set(known))
    if unknown:
        hints = [f"{k!r} (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(k, known, 1))
                 else repr(k) for k in unknown]
        raise ConfigError(f"{where}: unknown key(s) {', '.join(hints)}; valid keys: {', '.join(known)}")


def read_toml(path: str | Path, what: str = "launch file", example: str = "launch/") -> dict:
    """Parse a TOML file, or raise ConfigError saying the file is missing or where it is broken."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{what} {path} not found (see {example} for examples)")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset "
                          f"{exc.start}); TOML files must be UTF-8: re-save it as UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{what} {path}: not valid TOML ({exc})") from None

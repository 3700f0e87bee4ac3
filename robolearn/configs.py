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


def dump_toml(data: dict) -> str:
    """A config dict (str/int/float/bool, lists of those, nested dicts) as TOML text; None
    values are left out (TOML has no null: the reader's default applies). Used to hand a
    resolved launch config to child processes through the one reader above."""
    import json
    import math

    def value(v) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            return str(v)
        if isinstance(v, float):
            return ("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")) if not math.isfinite(v) \
                else repr(v)
        if isinstance(v, str):
            return json.dumps(v)  # a JSON string is a valid TOML basic string
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(x) for x in v if x is not None) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{json.dumps(str(k))} = {value(x)}" for k, x in v.items()
                                   if x is not None) + "}"
        raise ConfigError(f"cannot write {type(v).__name__} {v!r} to TOML")

    lines: list[str] = []

    def table(d: dict, prefix: str) -> None:
        subs = []
        for k, v in d.items():
            if v is None:
                continue
            if isinstance(v, dict):
                subs.append((k, v))
            else:
                lines.append(f"{json.dumps(str(k))} = {value(v)}")
        for k, v in subs:
            name = f"{prefix}.{json.dumps(str(k))}" if prefix else json.dumps(str(k))
            lines.append(f"\n[{name}]")
            table(v, name)

    table(data, "")
    return "\n".join(lines) + "\n"

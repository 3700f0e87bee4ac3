"""`--env-kw KEY=VALUE`: the one env-keyword flag of every verb that makes an env.

`train`, `play`, `eval`, `teleop`, `record`, `finetune`, `actor` and `calibrate-sim` all add it
with `add_env_kw_argument` and read it with `parse_env_kwargs`, so the spelling and the value
parsing are the same everywhere. Values given here win over the same keys from a launch file
(or, for `eval`, the training run's saved env options).
"""
from __future__ import annotations

import json

HELP = ("env keyword argument, repeatable, e.g. --env-kw image_size=[64,64] --env-kw backend=real; "
        "VALUE is read as JSON when it parses (numbers, lists, true/false, \"quoted\"), else kept "
        "as the raw string")


def add_env_kw_argument(parser, over: str = "", note: str = "", aliases: tuple[str, ...] = ()) -> None:
    """Add `--env-kw KEY=VALUE` (plus old spellings in `aliases`) to `parser`, as `args.env_kw`.

    `over` names what the values override in this verb, e.g. "the launch file's [env_kwargs]";
    `note` adds a verb-specific sentence to the help."""
    parser.add_argument("--env-kw", *aliases, dest="env_kw", action="append", default=None,
                        metavar="KEY=VALUE",
                        help=HELP + (f"; overrides the same key in {over}" if over else "")
                        + (f"; {note}" if note else "")
                        + (f" (old spelling: {', '.join(aliases)})" if aliases else ""))


def parse_env_kwargs(items: list[str] | None) -> dict:
    """`["image_size=[64,64]", "backend=sim"]` -> `{"image_size": [64, 64], "backend": "sim"}`.

    Values are JSON when they parse (numbers, lists, bools, null, quoted strings), else the raw
    string; a later item with the same key wins."""
    from robolearn.errors import ConfigError

    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--env-kw {item!r}: write KEY=VALUE, e.g. --env-kw image_size=[64,64]")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value  # a bare word (backend=real, port=/dev/ttyACM0): the string
    return out

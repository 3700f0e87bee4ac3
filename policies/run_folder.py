"""A training run's folder: who may write into it, and its metrics log.

Why: a run folder holds results (checkpoints, metrics, TensorBoard logs) and is never wiped
unless the user says so (`--overwrite`); and a resumed run must log exactly what a straight
one does, so records written after the checkpoint it resumes from are dropped first.
"""
from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

from robolearn.errors import ConfigError
from robolearn.policies.checkpoints import CHECKPOINTS

# what a run writes into its folder (a new run refuses to start over them unless overwrite=True)
RUN_FILES = ("config.json", "metrics.jsonl", "tb", CHECKPOINTS, "summary.json", "learning_curve.png",
             "eval.mp4", "eval_strip.png")


def run_state(run_dir: Path) -> str:
    """"finished", "interrupted" (summary.json says interrupted: resumable) or "unfinished"."""
    summary = run_dir / "summary.json"
    if not summary.exists():
        return "unfinished"
    try:
        s = json.loads(summary.read_text())
    except (OSError, ValueError):
        return "unfinished"
    return "interrupted" if isinstance(s, dict) and s.get("interrupted") else "finished"


def clear_earlier_run(run_dir: Path, overwrite: bool, resume: str | None = "train",
                      files: tuple = RUN_FILES) -> None:
    """Refuse to start over an earlier run's files, or delete them when `overwrite`.

    `resume`: how a run that did not finish continues ("train": `robolearn train --resume
    RUN`; another string: that command; None: it cannot be continued)."""
    found = [name for name in files if (run_dir / name).exists()]
    if not found:
        return
    if not overwrite:
        state = run_state(run_dir)
        how = f"robolearn train --resume {run_dir}" if resume == "train" else resume
        article = "an" if state in ("interrupted", "unfinished") else "a"
        raise ConfigError(
            f"run folder {run_dir} already holds {article} {state} run "
            f"({', '.join(found)}): pick another --out, "
            + (f"continue it with `{how}`, " if how and state != "finished" else "")
            + "or pass --overwrite to delete it and start again")
    print(f"--overwrite: deleting the earlier run in {run_dir}")
    for name in found:
        p = run_dir / name
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink(missing_ok=True)


class MetricsLog:
    """metrics.jsonl (one JSON record per line) mirrored to TensorBoard (`tb/`)."""

    def __init__(self, run_dir: Path, env_steps: int):
        from torch.utils.tensorboard import SummaryWriter

        path = run_dir / "metrics.jsonl"
        if path.exists():  # resumed: drop records written after the checkpoint we resumed from
            keep = [ln for ln in path.read_text().splitlines()
                    if ln.strip() and _safe_step(ln) <= env_steps]
            path.write_text("".join(ln + "\n" for ln in keep))
        self._file = open(path, "a", buffering=1)
        self._writer = SummaryWriter(str(run_dir / "tb"), purge_step=env_steps or None)

    def write(self, rec: dict) -> None:
        self._file.write(json.dumps(rec) + "\n")
        kind = rec["kind"]
        for k, v in rec.items():
            if k not in ("kind", "step") and isinstance(v, (int, float)) and not isinstance(v, bool):
                self._writer.add_scalar(f"{kind}/{k}", v, rec["step"])
            elif isinstance(v, bool):
                self._writer.add_scalar(f"{kind}/{k}", float(v), rec["step"])

    def close(self) -> None:
        if self._file:
            self._file.close()
            self._file = None
        if self._writer:
            self._writer.close()
            self._writer = None


def config_dict(c) -> dict:
    """A dataclass / dict config as JSON-able values (anything else as its repr)."""
    if dataclasses.is_dataclass(c):
        return {k: (v if isinstance(v, (int, float, str, bool, type(None), list, dict)) else repr(v))
                for k, v in dataclasses.asdict(c).items()}
    return dict(c) if isinstance(c, dict) else {"repr": repr(c)}


def _safe_step(line: str) -> float:
    try:
        return json.loads(line).get("step", 0)
    except json.JSONDecodeError:  # a line torn by a kill
        return math.inf

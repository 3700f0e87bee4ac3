"""The policy snapshots a finetune session keeps: RUN/policy_snapshots/step_N.

Why a module of its own: the learner writes them, and two readers use them after training: the
final policy's choice (policy_selection.py) and the sampled spread in the report
(policy_spread.py). Each snapshot is what `load_policy` needs (the actor's weights and the
run's trainer.json), copied whole or not at all.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

SNAPSHOTS = "policy_snapshots"
#: what a snapshot folder holds: enough for `load_policy` (an actor's weights and the run's config)
FILES = ("policy.safetensors", "trainer.json")


def keep_policy_snapshot(checkpoint: Path, run_dir: Path) -> Path:
    """Copy a just-written checkpoint's policy into RUN/policy_snapshots/<its name> (whole or
    not at all: a temp folder swapped in)."""
    root = Path(run_dir) / SNAPSHOTS
    final, tmp = root / checkpoint.name, root / (checkpoint.name + ".tmp")
    root.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for name in FILES:
        shutil.copy2(checkpoint / name, tmp / name)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return final


def kept_snapshots(run_dir: str | Path) -> list[Path]:
    """The complete snapshot folders of a run, by env step (a half-copied `.tmp` is not one)."""
    return sorted((p for p in (Path(run_dir) / SNAPSHOTS).glob("step_*")
                   if p.is_dir() and not p.name.endswith(".tmp") and all((p / f).is_file() for f in FILES)),
                  key=snapshot_step)


def snapshot_step(path: Path) -> int:
    """The env step of a step_N folder."""
    return int(Path(path).name.split("_")[-1])

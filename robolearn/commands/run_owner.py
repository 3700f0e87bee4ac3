"""The run folder of `launch`, `learner` and `finetune`: one owner, no silent overwrite.

The verb the user started takes the folder's lock (robolearn/run_lock.py) and refuses an
earlier run unless `--overwrite` (or, for `finetune`, `--resume`); the children it starts into
the same folder (the learner) get `--owned-by PID` and only check that the lock names it, so
they neither deadlock on their parent's lock nor need one of their own. A learner restarted
inside `finetune` is such a child: it resumes the session's checkpoint as before.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from robolearn.policies.run_folder import RUN_FILES, clear_earlier_run
from robolearn.run_lock import FolderLock, check_owned_by, lock_folder

# what an actor/learner run or a fine-tuning session writes (besides actor_<id>.json)
ASYNC_RUN_FILES = RUN_FILES + ("launch.json", "logs", "session_report.json", "session_report.png",
                               "finetune_launch.toml", "episodes")


def add_owner_arguments(parser, overwrite_help: str) -> None:
    parser.add_argument("--overwrite", action="store_true", help=overwrite_help)
    parser.add_argument("--owned-by", dest="owned_by", type=int, default=None, help=argparse.SUPPRESS)


def take_run_folder(run_dir: Path, *, overwrite: bool, owned_by: int | None = None,
                    resume: str | None = None, keep_existing: bool = False) -> FolderLock | None:
    """Lock `run_dir` for this process (None for a child of the verb that holds it), then
    refuse an earlier run there, or delete it with `overwrite`; `keep_existing`: continue it."""
    run_dir = Path(run_dir)
    if owned_by is not None:
        check_owned_by(run_dir, owned_by)
        return None
    lock = lock_folder(run_dir, what="run folder",
                       busy_hint="wait for that run to end, or choose another --out")
    try:
        if not keep_existing:
            actors = sorted(p.name for p in run_dir.glob("actor_*.json") if not _still_running(p))
            clear_earlier_run(run_dir, overwrite, resume=resume, files=ASYNC_RUN_FILES + tuple(actors))
    except BaseException:
        lock.release()
        raise
    return lock


def _still_running(actor_summary: Path) -> bool:
    """An actor's periodic summary (`exit_reason: "running"`, rewritten every few seconds while
    it streams) belongs to the run going on, e.g. an actor waiting for its restarted learner:
    not an earlier run."""
    import json

    try:
        return json.loads(actor_summary.read_text()).get("exit_reason") == "running"
    except (OSError, ValueError, AttributeError):  # unreadable: an earlier run's file
        return False

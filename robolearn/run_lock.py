"""Output folders with one owner, and output paths checked before any work starts.

Why: a run folder (training, async learner, launch, fine-tuning session) or a dataset being
recorded must never have two writers: two processes appending to one metrics.jsonl or
interleaving episodes silently corrupt results. `lock_folder` holds an exclusive
`fcntl.flock` on FOLDER/.lock for the owner's lifetime; the file names the owner (pid, host),
so a refusal says who holds it. The kernel drops a flock when its process dies, so a lock
file that still names a pid that is not running is stale: it is named ("... is locked by pid N
(not running): ...") and taken over. A second lock of a held folder is refused even in the
same process (flock belongs to the open file). Children that a verb starts into its own
folder (the learner of `launch` / `finetune`) do not lock: the verb passes them its pid
(`--owned-by PID`) and `check_owned_by` verifies that the folder's lock names that pid.

`check_writable_dir` / `check_writable_file`: the one-line `ConfigError` for an output path
that cannot be written (read-only, a file in the way, no permission), raised before any work.
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
from pathlib import Path

from robolearn.errors import ConfigError

LOCK_FILE = ".lock"


def pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_owner(fd: int) -> dict:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        data = os.read(fd, 4096).decode(errors="replace").strip()
        owner = json.loads(data) if data else {}
        return owner if isinstance(owner, dict) else {}
    except (OSError, ValueError):
        return {}


def read_owner(folder: str | os.PathLike) -> dict:
    """{"pid": N, "host": H} of the folder's lock file ({} if none)."""
    try:
        fd = os.open(Path(folder) / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return {}
    try:
        return _read_owner(fd)
    finally:
        os.close(fd)


class FolderLock:
    """An exclusive lock on a folder, held until `release()` (or the process ends)."""

    def __init__(self, fd: int, folder: Path):
        self.fd, self.folder = fd, folder

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            os.ftruncate(self.fd, 0)  # released cleanly: the file names no owner
        except OSError:
            pass
        os.close(self.fd)  # releases the flock
        self.fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def lock_folder(folder: str | os.PathLike, what: str = "run folder",
                busy: str = "another process is writing into it",
                busy_hint: str = "wait for it to finish, or choose another --out",
                error: type[Exception] = ConfigError, flag: str = "--out") -> FolderLock:
    """Create `folder` if needed and hold its exclusive lock. A live owner -> ConfigError with
    its pid; a stale lock file from a dead process -> a warning naming it, then taken over."""
    folder = Path(folder)
    check_writable_dir(folder, what, error, flag)
    try:
        fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise error(f"cannot write {what} {folder} ({exc.strerror or exc}): choose a writable "
                    f"{flag}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        owner = _read_owner(fd)
        os.close(fd)
        pid, host = owner.get("pid"), owner.get("host")
        who = f"pid {pid}" + (f" on {host}" if host and host != socket.gethostname() else "")
        if pid is None:
            who = "another process"
        raise error(f"{what} {folder} is locked by {who} (running): {busy}; {busy_hint}") from None
    old = _read_owner(fd)
    pid = old.get("pid")
    if isinstance(pid, int) and old.get("host") in (None, socket.gethostname()) \
            and pid != os.getpid():
        state = "running, but it no longer holds the lock" if pid_running(pid) else "not running"
        print(f"warning: {what} {folder} is locked by pid {pid} ({state}): a stale lock from "
              "a process that did not stop cleanly; taking it over", file=sys.stderr, flush=True)
    try:
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode())
    except OSError:
        pass
    return FolderLock(fd, folder)


def check_owned_by(folder: str | os.PathLike, pid: int, what: str = "run folder") -> None:
    """A child started by the verb that owns `folder`: its lock must name that pid."""
    owner = read_owner(folder)
    if owner.get("pid") != pid or not pid_running(pid):
        raise ConfigError(f"{what} {folder} is not locked by pid {pid} (its lock names "
                          f"{owner or 'no owner'}); --owned-by is for the children `robolearn "
                          "launch` / `finetune` start, run without it")


def check_writable_dir(folder: str | os.PathLike, what: str = "output folder",
                       error: type[Exception] = ConfigError, flag: str = "--out") -> Path:
    """Create `folder` (and parents) and check a file can be created in it."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise error(f"cannot write {what} {folder} (it exists and is not a folder): choose "
                    f"another {flag}")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise error(f"cannot write {what} {folder} ({exc.strerror or exc}): choose a writable "
                    f"{flag}") from None
    return folder


def check_writable_file(path: str | os.PathLike, what: str = "output file",
                        flag: str = "--out") -> Path:
    """The folder of `path` exists (created) and is writable; `path` is not a folder."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"cannot write {what} {path} (it is a folder): give a file name to {flag}")
    check_writable_dir(path.parent, what=f"the folder of {what}", flag=flag)
    if path.exists() and not os.access(path, os.W_OK):
        raise ConfigError(f"cannot write {what} {path} (permission denied): choose a writable {flag}")
    return path


def no_space_message(folder: str | os.PathLike, need_bytes: int) -> str:
    """'N MB needed, M MB free on FOLDER' (the free-space part of a disk-full error)."""
    import shutil

    try:
        free = shutil.disk_usage(folder).free
        free_s = f"{free / 1e6:.1f} MB free"
    except OSError:
        free_s = "free space unknown"
    return f"about {need_bytes / 1e6:.1f} MB needed, {free_s} on {folder}"


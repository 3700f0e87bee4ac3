"""Child processes die with the process that started them.

Why: `launch` and `finetune` start a learner, actors and an emulated robot as separate
processes (their own sessions, so Ctrl-C reaches the parent first and it stops them in order).
A parent killed hard (SIGKILL, OOM killer) runs no cleanup, and its children would go on as
orphans: an actor still driving a robot, a learner holding its ports. The kernel can send each
child SIGTERM when its parent dies (Linux `PR_SET_PDEATHSIG`); the children stop on SIGTERM
as they do on a normal shutdown.
"""
from __future__ import annotations

import os
import sys


def die_with_parent(parent_pid: int | None = None, signum=None):
    """`preexec_fn` for `subprocess.Popen`: SIGTERM the child when its parent dies; exits at
    once if the parent is already gone. None (no preexec) outside Linux.

    The kernel ties the signal to the parent *thread* that forks the child, so start children
    from a thread that lives as long as the parent (the main thread). `signum`: the signal
    (default SIGTERM, so the child stops cleanly; SIGKILL for workers whose results only the
    parent could have used)."""
    if not sys.platform.startswith("linux"):
        return None
    parent_pid = os.getpid() if parent_pid is None else parent_pid

    def preexec():
        import ctypes
        import signal

        PR_SET_PDEATHSIG = 1
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM if signum is None else signum), 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return preexec

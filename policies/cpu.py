"""CPU allocator tuning for the learner process.

Why: a batched critic ensemble works on multi-megabyte activations. glibc hands blocks that
large out as fresh mmap'd pages and gives them back to the OS on free, so every update pays
thousands of page faults (measured: ~1700 per 10-critic forward+backward, about 20% of its
time). Raising the mmap and trim thresholds keeps freed blocks in the heap for reuse: the
same effect as PyTorch's CPU tuning advice (MALLOC_MMAP_THRESHOLD_ / jemalloc), applied in
process. It only changes thresholds, never correctness; on non-glibc systems it does nothing.
"""
from __future__ import annotations

import ctypes
import ctypes.util

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD = 32 << 20  # glibc's maximum on 64-bit: blocks below this come from the heap
_TRIM_THRESHOLD = 256 << 20  # keep up to this much freed memory before returning it
_done: bool | None = None


def keep_freed_memory() -> bool:
    """Apply the thresholds once per process; True if glibc accepted them."""
    global _done
    if _done is not None:
        return _done
    _done = False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    _done = bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))
    return _done

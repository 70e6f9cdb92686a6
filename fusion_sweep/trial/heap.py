"""A trial process's allocator (glibc; a no-op elsewhere): freed memory kept for reuse within
a trial, and handed back to the OS between trials.

`keep_freed_memory()` (`SpeedOptions.heap_reuse`, called by the trainer): glibc serves an
allocation above 32 MB with fresh mmap'd pages and unmaps it on free, so the next tensor of
that size page-faults and is zeroed by the kernel again, page by page. A dense (B, H, L, L)
attention tensor at batch 64 and L 540 is 155 MB: for ReSSFormer without ASAM those faults
doubled the time of a training step (benchmarks/README.md). With `M_MMAP_MAX = 0` every
block comes from the heap, and with a 2 GB trim threshold freed blocks stay there for the
next step. The values computed do not change; the process keeps its peak memory. Idempotent;
False where the C library has no mallopt (musl, macOS), and then it changes nothing.

`release_freed_memory()` (the sweep, after each trial of a reused Ray actor): Tune runs each
trial of a reused actor in a new thread, and glibc gives each new thread its own malloc arena
(up to 8 x cores), which keeps the pages its trial freed. A long-regime actor grew by ~200 MB
per trial, to 2.2 GB over the default sweep, where the same trials in one process stay at
~0.75 GB (benchmarks/README.md, trial memory). `malloc_trim(0)` releases free pages of every
arena, between trials, so it cannot slow a trial. Capping the arenas instead
(MALLOC_ARENA_MAX=2) also removed the growth, but it changes allocation inside every trial
(it looked 4-8% slower in one small A/B here).
"""
from __future__ import annotations

import ctypes
from functools import lru_cache
from typing import Any

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc <malloc.h>
TRIM_THRESHOLD = 2**31 - 1  # mallopt takes an int


@lru_cache(maxsize=None)
def _libc(name: str) -> Any:
    """A function of the process's own C library, looked up once (None if it has none)."""
    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None


@lru_cache(maxsize=1)
def keep_freed_memory() -> bool:
    """Switch this process's allocator to heap-only, freed memory kept; True if it took."""
    mallopt = _libc("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(M_MMAP_MAX, 0) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1


def release_freed_memory() -> None:
    """Hand the memory freed so far back to the OS (`malloc_trim(0)`)."""
    trim = _libc("malloc_trim")
    if trim is not None:
        trim(0)

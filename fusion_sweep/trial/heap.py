"""Process-wide: keep freed memory for reuse instead of handing large blocks back to the OS.

glibc serves an allocation above 32 MB with fresh mmap'd pages and unmaps it on free, so the
next tensor of that size page-faults and is zeroed by the kernel again, page by page. A
dense (B, H, L, L) attention tensor at batch 64 and L 540 is 155 MB: for ReSSFormer without
ASAM those faults doubled the time of a training step (benchmarks/README.md). With
`M_MMAP_MAX = 0` every block comes from the heap, and with a 2 GB trim threshold freed
blocks stay there for the next step. The values computed do not change; the process keeps
its peak memory until it exits (a trial process).

`keep_freed_memory()` is idempotent; it returns False where the C library has no mallopt
(musl, macOS), and then changes nothing.
"""
from __future__ import annotations

import ctypes
from functools import lru_cache

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc <malloc.h>
TRIM_THRESHOLD = 2**31 - 1  # mallopt takes an int


@lru_cache(maxsize=1)
def keep_freed_memory() -> bool:
    """Switch this process's allocator to heap-only, freed memory kept; True if it took."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(M_MMAP_MAX, 0) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1

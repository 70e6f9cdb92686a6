"""Process helpers for the tests that start servers, clusters and CLI drivers (no psutil here):
a free loopback port, a process's descendants from /proc, killing what a test started, and the
resources of one node of the shared Ray cluster.

Shared by tests/conftest.py (the session's Ray cluster and MLflow server) and the end-to-end
modules; `tests.test_sweep_e2e` re-exports them under the names it always had.
"""
from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

# One node of the session's Ray cluster (tests/conftest.py), and of a node added back to it:
# 1 CPU and bounded memory, so a 2-node cluster fits a 2-core machine.
NODE_ARGS = dict(num_cpus=1, memory=1536 << 20, object_store_memory=96 << 20)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _parent_of(pid: str) -> int:
    """The parent pid in /proc/<pid>/stat, read with one open, read and close: every test
    outside the processes group scans all of /proc two or more times (tests/conftest.py's
    watch), and pathlib's read_text took 2.7 times as long (4.1 against 1.5 ms a scan)."""
    fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    try:
        stat = os.read(fd, 4096)
    finally:
        os.close(fd)
    return int(stat.rsplit(b")", 1)[1].split()[1])  # after the command, which may hold ")"


def children_of(pid: int) -> set[int]:
    """Every descendant of `pid` (from /proc; no psutil here)."""
    parent: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                parent[int(name)] = _parent_of(name)
            except (OSError, IndexError, ValueError):
                pass  # gone since the listing
    out, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier} - out
        out |= frontier
    return out


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_pids(pids: set[int], wait: float = 10.0) -> None:
    """SIGKILL the given processes (ones this test started) that are still alive."""
    deadline = time.time() + wait
    while time.time() < deadline and any(alive(p) for p in pids):
        time.sleep(0.5)
    for p in pids:
        if alive(p):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass

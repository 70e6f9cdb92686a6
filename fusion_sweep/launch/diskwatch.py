"""Says so, in the launch's own output, when a filesystem the sweep writes to fills up or
turns read-only.

Why a watcher: while Ray Tune's storage or a local MLflow store has no space, the writes that
fail are inside trial workers and the MLflow server, and both retry (mlflow_query.retry, MLflow's
HTTP retries) for minutes: the sweep survives a short outage, but the only trace of it would
be a line in a server log. The launching process checks the filesystems of its local write
paths every few seconds and prints one `error:` line when one is full or read-only, and one
line when it is writable again. Stdlib only.
"""
from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path
from typing import Iterable, TextIO

# Below this many free bytes a filesystem counts as full: a trial's result (metrics, a
# result.json, a checkpoint of a small model, Tune's state files) needs a few MiB.
FULL_BELOW = 4 << 20
POLL_S = 2.0


def _existing(path: Path) -> Path | None:
    """The path, or its nearest existing ancestor (the filesystem it will be created on)."""
    for p in (path, *path.parents):
        if p.exists():
            return p
    return None


def problem(path: Path, full_below: int = FULL_BELOW) -> str:
    """'' when `path`'s filesystem is writable with space, else what is wrong with it."""
    p = _existing(path)
    if p is None:
        return ""
    try:
        st = os.statvfs(p)
        free = shutil.disk_usage(p).free
    except OSError:
        return ""
    if st.f_flag & os.ST_RDONLY:
        return "the filesystem is read-only"
    if free < full_below:
        return (f"No space left on the filesystem ({free / (1 << 20):.1f} MiB free of "
                f"{st.f_blocks * st.f_frsize / (1 << 20):.0f} MiB)")
    return ""


class DiskWatch:
    """Polls the filesystems of `paths` in a daemon thread; prints each change of state."""

    def __init__(self, paths: Iterable[tuple[str, Path]], out: TextIO, poll_s: float = POLL_S,
                 full_below: int = FULL_BELOW):
        # one entry per filesystem: the first (label, path) that lives on it
        self.paths: dict[int, tuple[str, Path]] = {}
        for label, path in paths:
            p = _existing(Path(path))
            if p is not None:
                self.paths.setdefault(os.stat(p).st_dev, (label, Path(path)))
        self.out, self.poll_s, self.full_below = out, poll_s, full_below
        self.state: dict[int, str] = {dev: "" for dev in self.paths}
        self.events: list[str] = []  # every line printed, for the launch summary and tests
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fusion-sweep-diskwatch",
                                        daemon=True)

    def __enter__(self) -> "DiskWatch":
        if self.paths:
            self.check()
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.poll_s + 1)

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.check()

    def check(self) -> None:
        for dev, (label, path) in self.paths.items():
            now = problem(path, self.full_below)
            if now == self.state[dev]:
                continue
            if now:
                line = (f"error: {now}: {path} ({label}). Trials cannot save their results "
                        f"there; they retry for a few minutes. Free space (or remount it "
                        f"read-write) and the sweep goes on; if trials fail meanwhile, run the "
                        f"same command again once there is space: finished trials are kept")
            else:
                line = f"{label} at {path} is writable again"
            self.state[dev] = now
            self.events.append(line)
            print(f"\n{line}", file=self.out, flush=True)

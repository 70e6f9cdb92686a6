"""One driver per sweep: `SweepLock`, an exclusive `flock` on a file in the sweep's Tune folder."""
from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from fusion_sweep.errors import UserError


class SweepLock:
    """One driver per sweep: an exclusive `flock` on a file in the sweep's local Tune directory.

    Atomic (two launches starting within the same millisecond: exactly one gets it) and never
    stale (the kernel releases it when the driver dies, even by SIGKILL). The file keeps the
    holder's pid and host for the refusal message; it is not deleted on exit (deleting it
    would let a waiter lock the unlinked inode while a newcomer locks a new file).
    """

    def __init__(self, exp_dir: str):
        self.path = Path(exp_dir) / ".driver.lock" if "://" not in exp_dir else None
        self._fd: int | None = None

    def __enter__(self) -> "SweepLock":
        if self.path is None:
            return self
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            try:
                info = json.loads(self.path.read_text() or "{}")
            except (OSError, json.JSONDecodeError):
                info = {}
            holder = f"driver pid {info.get('pid', '?')} on {info.get('host', '?')}"
            raise UserError(f"sweep already running: {holder} holds {self.path}; wait for it, "
                             f"or stop it to resume here") from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode())
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)
            finally:
                os.close(self._fd)  # releases the flock
                self._fd = None

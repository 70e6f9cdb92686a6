"""Stop signals as Ctrl-C: the one way `launch`, `tune` and `ui` turn SIGTERM (`kill PID`, a
scheduler's stop) and SIGINT (also where it was inherited ignored) into a KeyboardInterrupt,
so their `finally` blocks run (stop the Ray instance this process started, mark the sweep's
parent run, stop the MLflow server's process group) instead of the process vanishing and
leaving its children behind."""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Any, Iterable, Iterator

# SIGINT too, set explicitly: a process started in the background by a non-interactive shell
# (`fusion-sweep launch &` in a script) inherits SIGINT ignored, and `kill -INT` must stop
# it as Ctrl-C does (the test that stops a driver with SIGINT starts it so).
STOP_SIGNALS: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)


def raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()  # only it can set handlers


@contextmanager
def interrupting(signums: Iterable[int] = STOP_SIGNALS) -> Iterator[None]:
    """Within the block, each of `signums` raises KeyboardInterrupt; the old handlers come
    back on exit. Outside the main thread: nothing changes."""
    old = {s: signal.getsignal(s) for s in signums} if _main_thread() else {}
    for s in old:
        signal.signal(s, raise_interrupt)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def reclaim(signums: Iterable[int] = STOP_SIGNALS) -> None:
    """Put our handler back after `ray.init`, which installs Ray's native failure-signal
    handler: that one aborts the driver on SIGTERM without running any `finally`."""
    if _main_thread():
        for s in signums:
            signal.signal(s, raise_interrupt)


def ignore(signums: Iterable[int]) -> None:
    """Ignore `signums` for the rest of an `interrupting` block: a second Ctrl-C must not cut
    a cleanup short."""
    if _main_thread():
        for s in signums:
            signal.signal(s, signal.SIG_IGN)


@contextmanager
def ignored(signums: Iterable[int]) -> Iterator[None]:
    """Within the block, `signums` are ignored (a second Ctrl-C must not cut a cleanup short);
    the old handlers come back on exit. Outside the main thread: nothing changes."""
    old = {s: signal.getsignal(s) for s in signums} if _main_thread() else {}
    for s in old:
        signal.signal(s, signal.SIG_IGN)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)

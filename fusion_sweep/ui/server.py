"""The MLflow server behind `fusion-sweep ui`: one store, its own process group, stopped with
every process it started; and whether a port is free."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import IO, Any

from fusion_sweep.schema import sqlite_path
from fusion_sweep.tracking.store import LOCAL_ARTIFACTS


def port_free(host: str, port: int) -> bool:
    """True when nothing listens on host:port (binding it would succeed)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


class UIServer:
    """`mlflow server` for one store, in its own process group, stopped with all its processes.

    `mlflow server` runs uvicorn as a child process; stopping only the parent would orphan it
    (still bound to the port). The server is started in a new session, so Ctrl-C in the
    terminal reaches only `fusion-sweep ui`, which then signals the whole group: SIGTERM, and
    SIGKILL for what is left after `grace` seconds.

        with UIServer(store, "127.0.0.1", 5000) as srv:
            srv.wait_ready()
            ...
    """

    def __init__(self, store: str, host: str = "127.0.0.1", port: int = 5000,
                 artifacts: Path | None = None, quiet: bool = True, log: IO[str] | None = None):
        self.store, self.host, self.port, self.quiet = store, host, port, quiet
        self.log = log  # its output (startup lines, the port, errors); None: the terminal
        if artifacts is None:
            db = sqlite_path(store)
            artifacts = (db.resolve().parent if db is not None else Path.cwd()) / LOCAL_ARTIFACTS
        self.artifacts = artifacts
        self.proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        shown = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://[{shown}]:{self.port}" if ":" in shown else f"http://{shown}:{self.port}"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", self.store,
               "--host", self.host, "--port", str(self.port), "--workers", "1",
               "--serve-artifacts", "--artifacts-destination", self.artifacts.as_uri()]
        if self.quiet:  # no line per HTTP request (a page load makes ~40)
            cmd += ["--uvicorn-opts", "--no-access-log"]
        return cmd

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        # A default `mlflow server` forks a job executor too (~15 processes, 2.4 GB); off.
        env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
        if self.quiet:
            env.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning,"
                           "ignore:starlette.middleware.wsgi is deprecated")
        return env

    def start(self) -> "UIServer":
        self.proc = subprocess.Popen(self.command(), env=self.env(), start_new_session=True,
                                     stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT if self.log else None)
        return self

    def wait_ready(self, timeout: float = 120.0) -> bool:
        """True once /health answers; False when the server exited or `timeout` passed."""
        assert self.proc is not None, "start() first"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with urllib.request.urlopen(self.base_url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return True
            except OSError:
                time.sleep(0.3)
        return False

    def group_alive(self) -> list[int]:
        """Pids (not zombies) still in the server's process group."""
        if self.proc is None:
            return []
        pgid, alive = self.proc.pid, []
        proc_dir = Path("/proc")
        if not proc_dir.is_dir():  # not Linux: ask the kernel about the group as a whole
            try:
                os.killpg(pgid, 0)
                return [pgid]
            except (ProcessLookupError, PermissionError):
                return []
        for d in proc_dir.iterdir():
            if not d.name.isdigit():
                continue
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
            if fields[0] != "Z" and int(fields[2]) == pgid:
                alive.append(int(d.name))
        return alive

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM to the whole group, SIGKILL after `grace` s; returns once none is left."""
        if self.proc is None:
            return
        pgid = self.proc.pid
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            if not self.group_alive() and self.proc.poll() is not None:
                break
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                if self.proc.poll() is not None and not self.group_alive():
                    break
                time.sleep(0.1)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def __enter__(self) -> "UIServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

"""Fixtures the whole suite shares, each made once per session (issue 40).

* `ray_cluster`: one real 2-node Ray cluster (`ray.cluster_utils.Cluster`, 1 CPU and bounded
  memory per node, auth disabled). Every test that needs a cluster attaches to it (in-process
  `launch(address=...)`, or `fusion-sweep launch --address` for a CLI driver), so no test
  starts a local Ray instance beside it unless the local instance is what it tests. A test
  that starts a cluster or a local Ray of its own says why in its docstring.
* `mlflow_server`: one real `mlflow server` on 127.0.0.1 (sqlite backend, proxied artifacts).
  Tests keep apart by sweep name, as sweeps in one store do.
* `migrated_store` and `new_sqlite_store`: an MLflow sqlite store migrated once, then copied
  (a file copy) wherever a test or a module fixture wants a fresh store, so that no test pays
  the alembic migrations a new store runs. The copy is a fresh store in every other
  way: it holds the tables and no experiment; MLflow creates its Default experiment when the
  copy is first opened, as it does in a new store.

The tests that use the cluster or the server run last, together, in their collected order:
first those on the cluster, then those that use only the server (the ones that start a local
Ray of their own). The cluster and the server start at the first test that asks for one and
stop right after the last test that asks for it (or at the session's end), so neither idles
beside the rest of the suite, and no test's own Ray runs beside the idle cluster. Both are
session-wide processes behind function-scoped fixtures: `ray_cluster` also sets, for the
test, the environment every driver of the cluster must share.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
import warnings
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.processes import NODE_ARGS, children_of, free_port, kill_pids

# What the cluster and every driver that attaches to it must agree on (Ray 2.60: a driver
# whose RAY_AUTH_MODE differs from the cluster's fails after ~20 s).
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
SHARED = ("ray_cluster", "mlflow_server")


class _Shared:
    """A process (or group of them) started on first use and stopped on `close`."""

    def __init__(self, start: Callable[[], Any], stop: Callable[[Any], None]) -> None:
        self._start, self._stop, self.value = start, stop, None

    def get(self) -> Any:
        if self.value is None:
            self.value = self._start()
        return self.value

    def close(self) -> None:
        value, self.value = self.value, None
        if value is not None:
            self._stop(value)


_RUNNING: dict[str, _Shared] = {}  # fixture name -> its shared process, while the session runs
_LAST_USER: dict[str, str] = {}  # fixture name -> node id of the last test that uses it


def _uses(item: pytest.Item, name: str) -> bool:
    return name in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    on_cluster = [i for i in items if _uses(i, "ray_cluster")]
    on_server = [i for i in items if _uses(i, "mlflow_server") and not _uses(i, "ray_cluster")]
    moved = {id(i) for i in on_cluster + on_server}
    items[:] = [i for i in items if id(i) not in moved] + on_cluster + on_server


def pytest_collection_finish(session: pytest.Session) -> None:
    for item in session.items:
        for name in SHARED:
            if _uses(item, name):
                _LAST_USER[name] = item.nodeid


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    result = yield
    for name in SHARED:  # the test's own fixtures are torn down by now
        if _LAST_USER.get(name) == item.nodeid and name in _RUNNING:
            _RUNNING[name].close()
    return result


# ------------------------------------------------------------------------- sqlite stores
@pytest.fixture(scope="session")
def migrated_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An MLflow sqlite store with every migration applied and no experiment in it, made once
    per session: what MLflow's own store makes of an empty database before it adds the
    Default experiment (`SqlAlchemyStore.__init__`: `_initialize_tables`, then the
    experiment). Copy it, never open it: `new_sqlite_store`."""
    import sqlalchemy
    from mlflow.store.db import utils

    path = tmp_path_factory.mktemp("migrated_store") / "mlflow.db"
    engine = sqlalchemy.create_engine(f"sqlite:///{path}")
    try:
        with warnings.catch_warnings():  # mlflow 3.17's migrations + SQLAlchemy 2: not ours
            warnings.simplefilter("ignore", DeprecationWarning)
            utils._initialize_tables(engine)
        assert utils._all_tables_exist(engine)
    finally:
        engine.dispose()
    assert [p.name for p in path.parent.iterdir()] == ["mlflow.db"]  # no journal left beside it
    return path


@pytest.fixture(scope="session")
def new_sqlite_store(migrated_store: Path) -> Callable[..., str]:
    """`new_sqlite_store(directory, name="mlflow.db")` -> the `sqlite:///` URI of a fresh,
    migrated store at directory/name (a copy of `migrated_store`; the directory is made)."""
    def make(directory: Path, name: str = "mlflow.db") -> str:
        directory.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(migrated_store, directory / name)
        return f"sqlite:///{directory / name}"
    return make


@pytest.fixture
def sqlite_store(tmp_path: Path, new_sqlite_store: Callable[..., str]) -> str:
    """The URI of a fresh migrated store at tmp_path/mlflow.db."""
    return new_sqlite_store(tmp_path)


# ---------------------------------------------------------------------------- Ray cluster
def _start_cluster():
    from ray.cluster_utils import Cluster

    with pytest.MonkeyPatch.context() as mp:  # read by every Ray process the cluster starts
        for k, v in RAY_ENV.items():
            mp.setenv(k, v)
        cluster = Cluster(initialize_head=True,
                          head_node_args={**NODE_ARGS, "include_dashboard": False})
        try:
            cluster.worker = cluster.add_node(**NODE_ARGS)
            cluster.wait_for_nodes()
        except BaseException:
            cluster.shutdown()
            raise
    return cluster


@pytest.fixture(scope="session")
def _ray_cluster_session():
    _RUNNING["ray_cluster"] = shared = _Shared(_start_cluster, lambda c: c.shutdown())
    try:
        yield shared
    finally:
        shared.close()
        _RUNNING.pop("ray_cluster", None)


@pytest.fixture
def ray_cluster(_ray_cluster_session: _Shared, monkeypatch: pytest.MonkeyPatch):
    """The session's real 2-node Ray cluster on this machine (1 CPU and bounded memory per
    node; `.address`, and `.worker`, its worker node). For the test, the environment every
    driver of the cluster needs (auth disabled, no usage stats), for in-process drivers and
    for CLI drivers that inherit it. A test that removes a node adds one back
    (`add_node(**NODE_ARGS)`, kept as `.worker`)."""
    for k, v in RAY_ENV.items():
        monkeypatch.setenv(k, v)
    return _ray_cluster_session.get()


# -------------------------------------------------------------------------- MLflow server
def _start_server(directory: Path, store: Path) -> tuple[str, subprocess.Popen]:
    shutil.copyfile(store, directory / "mlflow.db")  # migrated already: the server starts sooner
    port = free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", f"sqlite:///{directory / 'mlflow.db'}", "--serve-artifacts",
         "--artifacts-destination", str(directory / "artifacts"), "--workers", "1"],
        env=env, stdout=open(directory / "server.log", "w"), stderr=subprocess.STDOUT,
        start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            try:
                with urllib.request.urlopen(uri + "/health", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError("mlflow server did not start:\n"
                                       + (directory / "server.log").read_text())
                time.sleep(0.5)
    except BaseException:
        _stop_server((uri, proc))
        raise
    return uri, proc


def _stop_server(server: tuple[str, subprocess.Popen]) -> None:
    _, proc = server
    pids = children_of(proc.pid) | {proc.pid}
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        pass
    kill_pids(pids, wait=5)


@pytest.fixture(scope="session")
def _mlflow_server_session(tmp_path_factory: pytest.TempPathFactory, migrated_store: Path):
    shared = _Shared(lambda: _start_server(tmp_path_factory.mktemp("mlflow_server"),
                                           migrated_store), _stop_server)
    _RUNNING["mlflow_server"] = shared
    try:
        yield shared
    finally:
        shared.close()
        _RUNNING.pop("mlflow_server", None)


@pytest.fixture
def mlflow_server(_mlflow_server_session: _Shared) -> str:
    """The URI of the session's `mlflow server` on 127.0.0.1 (a sqlite backend and proxied
    artifacts); tests keep apart by sweep name."""
    return _mlflow_server_session.get()[0]

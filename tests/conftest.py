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
* `svg_figures` and `no_pdf_figures`: for one test, reports write their figures as SVG only, or
  as SVG and PNG (see the figures section at the end: the PDFs and PNGs are most of a report's
  CPU, and each format is checked where it is the subject).

The suite runs on two pytest-xdist workers (pyproject's addopts: `-n 2 --dist loadscope
--no-loadscope-reorder`, with the scopes `pytest_xdist_make_scheduler` below gives). Every
module with a test that starts Ray or an MLflow server (one that uses `ray_cluster` or
`mlflow_server`, or is marked `processes`: a Ray, a cluster or a `fusion-sweep ui` of its own)
is in one scope, `processes`, that xdist hands out first, to one worker, which runs it in
order: so only that worker ever starts the cluster, the server or any other Ray or MLflow
process, and no two Ray instances run at once. Every other module is a scope of its own (its
module-scoped fixtures are made once, on one worker), the modules with more tests first (so
that no long one is handed out last). The controller, which collects nothing, knows those
modules by their source (`GROUP_MODULES`); each worker checks at collection that every module
with such a test is among them. On a worker, a test outside the group that starts a Ray or
MLflow process fails at teardown (`_ProcessWatch`): mark it `processes`. (Not xdist's
`--dist loadgroup`: pytest-xdist 3.8 marks a group in `item._nodeid`, which pytest 9 no
longer reads, so its groups are silently ignored.) `pytest -n 0` runs everything in one
process.

In the `processes` group the tests on the cluster run first, then those that use only the
server (the ones that start a local Ray of their own), then the rest of those modules. The
cluster and the server start at the first test that asks for one and stop right after the
last test that asks for it (or at the session's end), so neither idles beside the other
tests, and no test's own Ray runs beside the idle cluster. Both are session-wide processes
behind function-scoped fixtures: `ray_cluster` also sets, for the test, the environment every
driver of the cluster must share.
"""
from __future__ import annotations

import compileall
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
import warnings
from pathlib import Path
from typing import Any, Callable

import pytest
from xdist.scheduler import LoadScopeScheduling

from tests.processes import NODE_ARGS, children_of, free_port, kill_pids

# What the cluster and every driver that attaches to it must agree on (Ray 2.60: a driver
# whose RAY_AUTH_MODE differs from the cluster's fails after ~20 s).
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
SHARED = ("ray_cluster", "mlflow_server")
# The xdist scope (and marker) of every module with a test that starts Ray or an MLflow server.
GROUP = "processes"
# Those modules, by their source: what the xdist controller, which collects nothing, can know.
_GROUP_SOURCE = re.compile(r"\b(ray_cluster|mlflow_server)\b|pytest\.mark\.processes\b")
GROUP_MODULES = frozenset(p.name for p in Path(__file__).parent.glob("test_*.py")
                          if _GROUP_SOURCE.search(p.read_text()))


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


def _starts_processes(item: pytest.Item) -> bool:
    return any(_uses(item, n) for n in SHARED) or item.get_closest_marker(GROUP) is not None


def _in_group(item: pytest.Item) -> bool:
    return item.path.name in GROUP_MODULES


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    missing = sorted({i.path.name for i in items if _starts_processes(i) and not _in_group(i)})
    if missing:  # a fixture that asks for a shared one, say, in a module that names neither
        raise pytest.UsageError(f"{', '.join(missing)}: a test starts Ray or an MLflow server, "
                                f"but the module is not in GROUP_MODULES (tests/conftest.py): "
                                f"name the fixture or mark the test `{GROUP}`")
    on_cluster = [i for i in items if _uses(i, "ray_cluster")]
    on_server = [i for i in items if _uses(i, "mlflow_server") and not _uses(i, "ray_cluster")]
    moved = {id(i) for i in on_cluster + on_server}
    in_group = [i for i in items if _in_group(i) and id(i) not in moved]
    moved |= {id(i) for i in in_group}
    rest = [i for i in items if id(i) not in moved]
    size = {path: sum(i.path == path for i in rest) for path in {i.path for i in rest}}
    rest.sort(key=lambda i: -size[i.path])  # stable: the larger modules first, so no long one
    items[:] = on_cluster + on_server + in_group + rest  # is left last (xdist: scopes in order)
    _fastest_first_under_a_mutant(items)


def _fastest_first_under_a_mutant(items: list[pytest.Item]) -> None:
    """Under a mutmut mutant, run the mutant's tests fastest first (by the durations mutmut
    recorded): mutmut runs them with `-x`, so a killed mutant costs only the tests up to the
    first that fails, and an 18-s report test run first costs 18 s for a mutant a 0.1-s test
    kills. Nothing changes outside mutmut (`mutants/`, where mutmut runs, holds the stats)."""
    if "__mutmut_" not in os.environ.get("MUTANT_UNDER_TEST", ""):
        return
    stats = Path("mutmut-stats.json")
    if not stats.is_file():
        return
    took = json.loads(stats.read_text()).get("duration_by_test", {})
    items.sort(key=lambda i: took.get(i.nodeid, float("inf")))  # stable: ties keep their order


class _Scheduling(LoadScopeScheduling):
    """xdist's load-by-scope, with one scope for the modules in GROUP_MODULES."""

    def _split_scope(self, nodeid: str) -> str:
        module = nodeid.split("::", 1)[0]
        return GROUP if Path(module).name in GROUP_MODULES else module


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> _Scheduling | None:
    return _Scheduling(config, log) if config.getvalue("dist") == "loadscope" else None


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


# An xdist worker starts with COLUMNS=80 and LINES=24 in its environment wherever the run's
# own has none; the width of `stats`' text (analysis.text.terminal_width) follows COLUMNS, so
# the workers get the run's own values (or none), as one process (`-n 0`) has.
_TERMINAL = ("COLUMNS", "LINES")


def pytest_configure_node(node: Any) -> None:  # on the controller, for each worker
    node.workerinput["terminal_env"] = {k: os.environ.get(k) for k in _TERMINAL}


# Each worker's torch runs on one intra-op thread (unless the run's environment says
# otherwise): the workers are the parallelism. With torch's default, one thread per core, two
# workers put four spinning OpenMP threads on two cores: four torch-heavy modules
# (test_ressformer_equality, test_kernels, test_ressformer_determinism, test_code_components)
# took 175 s under `-n 2` with the default (load 0.22 before) and 93 s with one thread each
# (load about 2 before, decaying; 2-core EPYC).
# Set before any worker imports torch, which reads it once; trials set their own
# (`num_threads`), and Ray sets it for its workers.
_WORKER_ENV = {"OMP_NUM_THREADS": "1"}


# Bytecode: every process of the suite writes what it compiles, as Python does by default.
# The suite starts a few hundred Python processes (xdist workers, Ray workers, CLI drivers,
# trainers, MLflow servers). Where PYTHONDONTWRITEBYTECODE is set (this project's reference
# machine) none of them kept what it compiled, so each compiled torch, Ray, MLflow and the
# package again, unless pip had written the bytecode of every installed file: 100 s of a
# 180-s install, on one core, most of it for modules no test imports. README command 2 installs
# with `pip install --no-compile` (81 s), and the suite writes the bytecode of what it
# imports, once: importing torch, Ray, MLflow, scipy, pandas, matplotlib, statsmodels, optuna
# and datasets took 28 s the first time and 11 s from then on (2-vCPU Intel Xeon). Set here, at the
# conftest's import, so that the xdist workers and every process they start inherit it (not
# restored: every process that would read it is the suite's own).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
# The package's own bytecode, written once before the workers start (compileall writes it
# whatever the environment says), so that the two workers do not both compile it.
PACKAGE = Path(__file__).resolve().parent.parent / "fusion_sweep"


def pytest_configure(config: pytest.Config) -> None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:  # the controller, or `-n 0`: one process, torch's own default
        compileall.compile_dir(PACKAGE, quiet=1)
        return
    for k, v in workerinput.get("terminal_env", {}).items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    for k, v in _WORKER_ENV.items():
        os.environ.setdefault(k, v)


# ------------------------------------------------- no Ray or MLflow outside the one group
# A process of a Ray instance or of an MLflow server, by its command line.
_RAY_OR_MLFLOW = re.compile(r"\b(raylet|gcs_server)\b|\bmlflow\s+server\b|\bmlflow\.server\b")


def _ray_or_mlflow_processes() -> dict[int, str]:
    """{pid: command line} of this process's descendants that are Ray or MLflow servers."""
    out = {}
    for pid in children_of(os.getpid()):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if _RAY_OR_MLFLOW.search(cmd):
            out[pid] = cmd
    return out


class _ProcessWatch:
    """While a test outside the `processes` group runs on an xdist worker, polls the worker's
    descendants for a Ray or MLflow process that was not there when the test started: only
    the group's worker may start one (two Ray instances on one machine contend for its cores
    and memory, and the group's cluster must be the only one)."""

    def __init__(self) -> None:
        self.before = set(_ray_or_mlflow_processes())
        self.seen: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while True:
            self.seen.update({p: c for p, c in _ray_or_mlflow_processes().items()
                              if p not in self.before})
            if self._stop.wait(1.0):  # their servers live for seconds
                return

    def stop(self) -> dict[int, str]:
        self._stop.set()
        self._thread.join()
        return self.seen


_WATCH = pytest.StashKey[_ProcessWatch]()


def pytest_runtest_setup(item: pytest.Item) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER") and not _in_group(item):
        item.stash[_WATCH] = _ProcessWatch()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    watch = item.stash.get(_WATCH, None)
    if call.when == "teardown" and watch is not None:
        started = watch.stop()
        if started and report.passed:
            report.outcome = "failed"
            report.longrepr = (f"{item.nodeid} started a Ray or MLflow process outside the "
                               f"xdist group '{GROUP}' (mark it `{GROUP}`, tests/conftest.py):\n"
                               + "\n".join(f"  {p}: {c}" for p, c in sorted(started.items())))
    return report


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


# ------------------------------------------------------------------------------- figures
# A report writes every figure as SVG, PDF and a 300-dpi PNG (plots.FIGURE_FORMATS). Of the
# 27 s of CPU an adaptive report took to write, the PDFs took 11 s (7 s of it fontTools
# subsetting the embedded TrueType fonts) and the PNGs 7 s (2-vCPU Intel Xeon). A test that
# reads only a report's text, its HTML (which embeds each figure's SVG) or its SVGs asks for
# `svg_figures`; one that also reads the PNGs the Markdown links asks for `no_pdf_figures`.
# Every format is still written and checked where it is the subject:
# test_report_figures.py (each figure as SVG, PDF and a 300-dpi PNG, each format drawn once)
# and test_analysis_mlflow.py (every format attached to the parent run).
def _figure_formats(monkeypatch: pytest.MonkeyPatch, formats: tuple[str, ...]) -> None:
    from fusion_sweep.analysis import plots

    assert set(formats) < set(plots.FIGURE_FORMATS), formats
    monkeypatch.setattr(plots, "FIGURE_FORMATS", formats)


@pytest.fixture
def svg_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    """For this test, reports write each figure as SVG only."""
    _figure_formats(monkeypatch, ("svg",))


@pytest.fixture
def no_pdf_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    """For this test, reports write each figure as SVG and PNG (the PNG last, as always)."""
    _figure_formats(monkeypatch, ("svg", "png"))

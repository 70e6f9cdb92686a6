"""`fusion-sweep ui`: the URL it prints opens the sweep's trial runs, and it stops cleanly.

A tiny sqlite store (one sweep, three trial runs, made through MlflowClient without training)
is served by the real command on a free port. Checked: the printed URL (model-training
layout + the trials view), the page and the REST API behind it, what headless Chromium shows
there (when chromium is installed), and that SIGTERM and SIGINT stop the server with every
process it started, leaving the port free.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator, NamedTuple

import numpy as np
import pytest

from fusion_sweep.tracking import runs as tracking
from fusion_sweep.errors import UserError  # noqa: E402
from fusion_sweep.tracking import view as ui_view  # noqa: E402
from fusion_sweep.ui import server as ui_server  # noqa: E402
from fusion_sweep import schema  # noqa: E402
from fusion_sweep.schema import PARENT, ROLE, SWEEP

# `fusion-sweep ui` starts an MLflow server: the module runs in the xdist group that may.
pytestmark = pytest.mark.processes

_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "check_report_html.py"
_spec = importlib.util.spec_from_file_location("check_report_html", _SCRIPT)
check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check)
CHROMIUM = check.find_chromium()

SWEEP_NAME = "tiny"
# MLflow 3.17's ExperimentPageUIState fields and search facets: what a saved view may hold.
UI_STATE_FIELDS = {"selectedColumns", "columnOrder", "columnWidths", "runsExpanded", "runsPinned",
                   "runsHidden", "runsVisibilityMap", "runsHiddenMode", "compareRunCharts",
                   "compareRunSections", "viewMaximized", "runListHidden", "isAccordionReordered",
                   "groupBy", "groupsExpanded", "autoRefreshEnabled", "useGroupedValuesInCharts",
                   "hideEmptyCharts", "globalLineChartConfig", "chartsSearchFilter"}
FACET_FIELDS = {"searchFilter", "orderByKey", "orderByAsc", "startTime", "lifecycleFilter",
                "modelVersionFilter", "datasetsFilter"}
TRIALS = [("synthetic-short", "sinusoidal", "add", 0, 0.625),
          ("synthetic-short", "sinusoidal", "concat", 0, 0.75),
          ("synthetic-short", "sinusoidal", "gate-scalar", 1, 0.5)]


# --------------------------------------------------------------------------- helpers
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after `pid (comm)`: [state, ppid, pgid, ...]."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def descendants(pid: int) -> set[int]:
    parent = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and (st := _stat(int(d.name))):
            parent[int(d.name)] = int(st[1])
    out, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier} - out
        out |= frontier
    return out


def alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[0] != "Z"


def make_store(uri: str) -> tuple[str, str]:
    """(store URI, experiment id): a sweep parent run and its trial runs, as launch writes,
    in the (new) store at `uri`."""
    from mlflow.entities import Metric, Param, RunTag

    tracker = tracking.SweepTracker(uri)
    exp_id = tracker.experiment_id
    client = tracker.client
    parent = client.create_run(exp_id, run_name=SWEEP_NAME,
                               tags={ROLE: "sweep", SWEEP: SWEEP_NAME}).info.run_id
    now = int(time.time() * 1000)
    for d, pe, fusion, seed, acc in TRIALS:
        run = client.create_run(exp_id, run_name=f"{d}.{pe}.{fusion}.s{seed}",
                                tags={ROLE: "trial", SWEEP: SWEEP_NAME, PARENT: parent})
        client.log_batch(run.info.run_id,
                         params=[Param(k, str(v)) for k, v in
                                 dict(dataset=d, pe=pe, fusion=fusion, seed=seed).items()],
                         metrics=[Metric("test_acc", acc, now, 0),
                                  Metric("best_val_acc", acc - 0.05, now, 0)],
                         tags=[RunTag("fusion_sweep.trial_key", f"k{seed}{fusion}")])
        client.set_terminated(run.info.run_id, "FINISHED")
    client.set_terminated(parent, "FINISHED")
    return uri, exp_id


def start_ui(store: str, port: int, cwd: Path) -> tuple[subprocess.Popen, str, set[int]]:
    """Run `fusion-sweep ui`; returns (process, the URL it printed, its descendants)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.Popen([sys.executable, "-m", "fusion_sweep.cli", "ui", "--port", str(port),
                             "--backend-store-uri", store], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    seen = descendants(proc.pid)
    # issue 33: `ui` prints the URL to open and nothing before it (no MLflow startup lines,
    # no internal port); the first line decides (a wrong one fails at once, not after a wait)
    line = proc.stdout.readline()
    seen |= descendants(proc.pid)
    if not re.fullmatch(r"http://\S+\n", line):
        for p in seen | {proc.pid}:  # the server too: it runs in a session of its own
            if alive(p):
                os.kill(p, signal.SIGKILL)
        pytest.fail(f"expected one line, the URL; the first line was: {line!r}")
    return proc, line.strip(), seen


def assert_stops_cleanly(proc: subprocess.Popen, sig: int, port: int, seen: set[int]) -> None:
    """After `sig`: exit 0 within 20 s, nothing it started alive, the port free."""
    assert len(seen) >= 2, f"expected mlflow server + uvicorn under the ui process, saw {seen}"
    groups = {int(_stat(p)[2]) for p in seen if _stat(p)}
    proc.send_signal(sig)
    try:
        rc = proc.wait(timeout=20)
    finally:
        for p in seen | {proc.pid}:  # clean up what this test started, whatever happened
            if alive(p):
                os.kill(p, signal.SIGKILL)
    assert rc == 0, proc.stdout.read()
    left = [p for p in seen if alive(p)]
    assert not left, f"orphans after {signal.Signals(sig).name}: {left}"
    in_groups = [p for p in map(int, filter(str.isdigit, os.listdir("/proc")))
                 if (st := _stat(p)) and st[0] != "Z" and int(st[2]) in groups - {os.getpgid(0)}]
    assert not in_groups, f"processes left in the server's process group: {in_groups}"
    assert ui_server.port_free("127.0.0.1", port), f"port {port} still in use"


def chromium(*args: str, profile: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    # A fresh profile each time: a first visit, nothing remembered in localStorage.
    shutil.rmtree(profile, ignore_errors=True)
    return subprocess.run([CHROMIUM, *check.BASE_FLAGS, f"--user-data-dir={profile}",
                           "--window-size=1600,1000", "--virtual-time-budget=15000", *args],
                          capture_output=True, text=True, timeout=timeout)


# ----------------------------------------------------------------------------- tests
def test_view_state_and_url():
    url = ui_view.ui_url("http://127.0.0.1:5000", "7")
    assert url == ("http://127.0.0.1:5000/#/experiments/7/runs?workflowType=machine_learning"
                   "&viewStateShareKey=fusion-sweep-trials")
    assert ui_view.ui_url("http://127.0.0.1:5000/") == \
        "http://127.0.0.1:5000/#/experiments?workflowType=machine_learning"
    st = ui_view.trials_view_state()
    assert st["selectedColumns"][:5] == ["params.`dataset`", "params.`pe`", "params.`fusion`",
                                         "params.`seed`", "metrics.`test_acc`"]
    # widths apply only to the columns columnOrder lists (the grid's applyColumnState): the
    # run name and Created first, under the grid's own column ids
    assert st["columnOrder"] == ["attributes.`Run Name`", "runDateAndNestInfo",
                                 *st["selectedColumns"]]
    assert set(st["columnWidths"]) == set(st["columnOrder"])
    assert st["searchFilter"] == "tags.`fusion_sweep.role` = 'trial'"
    assert st["orderByKey"] == "tags.`fusion_sweep.ui_order`"
    one = ui_view.trials_view_state("tiny")
    assert one["searchFilter"] == ("tags.`fusion_sweep.role` = 'trial' and "
                                   "tags.`fusion_sweep.sweep` = 'tiny'")


def test_view_groups_by_dataset_and_fusion_and_pins_the_test_acc_chart():
    """Issue 33: rows grouped by dataset and variant (a group row: the mean over its seeds),
    every group in the charts, test_acc the first chart of the first section."""
    st = ui_view.trials_view_state()
    assert st["groupBy"] == {"aggregateFunction": "average", "groupByKeys": [
        {"mode": "param", "groupByData": "dataset"}, {"mode": "param", "groupByData": "fusion"}]}
    assert st["useGroupedValuesInCharts"] is True and st["runsHiddenMode"] == "SHOW_ALL"
    first = st["compareRunSections"][0]
    assert first["display"] and first["name"] == "Result"
    # sections other than MLflow's own two sort first: those two must stay last
    assert [s["name"] for s in st["compareRunSections"][-2:]] == ["Model metrics",
                                                                  "System metrics"]
    chart = st["compareRunCharts"][0]
    assert (chart["type"], chart["metricKey"], chart["metricSectionId"], chart["deleted"]) == \
        ("BAR", "test_acc", first["uuid"], False)
    # every key is one MLflow 3.17 reads (EXPERIMENT_PAGE_UI_STATE_FIELDS + search facets)
    assert set(st) <= UI_STATE_FIELDS | FACET_FIELDS, set(st) - UI_STATE_FIELDS - FACET_FIELDS
    varied = ui_view.TrialsLayout(("dataset", "encoder", "pe", "fusion", "seed"),
                                  ("dataset", "pe", "fusion"))
    keys = ui_view.trials_view_state(layout=varied)["groupBy"]["groupByKeys"]
    assert [k["groupByData"] for k in keys] == ["dataset", "pe", "fusion"]
    with pytest.raises(ValueError, match="grouped by 'pe', which is not a column"):
        ui_view.TrialsLayout(("dataset", "fusion", "seed"), ("dataset", "pe"))


def test_rows_are_grouped_by_dataset_fusion_and_the_variant_fields_that_vary():
    one = [{"dataset": d, "encoder": "standard", "pe": "sinusoidal", "fusion": "add", "seed": s}
           for d in ("synthetic-short", "synthetic-long") for s in "01"]
    assert ui_view._layout_of(one) == (("dataset", "pe", "fusion", "seed"), ("dataset", "fusion"))
    pes = [{**p, "pe": pe} for p in one for pe in ("sinusoidal", "learned")]
    assert ui_view._layout_of(pes)[1] == ("dataset", "pe", "fusion")
    enc = [{**p, "encoder": "ressformer"} for p in one]  # one encoder, not the default: shown
    assert ui_view._layout_of(enc) == (("dataset", "encoder", "pe", "fusion", "seed"),
                                       ("dataset", "fusion"))


def test_group_ids_and_names_are_mlflows():
    """A group row's colour is found by MLflow's group id (createGroupId)."""
    values = {"dataset": "synthetic-long", "fusion": "concat"}
    assert ui_view.group_id(values) == "param.dataset.synthetic-long,param.fusion.concat"
    assert ui_view.group_name(values) == "dataset: synthetic-long, fusion: concat"
    assert ui_view.group_name({"fusion": "add"}) == "add"


def test_one_colour_per_fusion():
    colors = ui_view.fusion_colors()
    from fusion_sweep.trial.models.fusion import FUSIONS

    assert set(colors) == set(FUSIONS)
    assert len(set(colors.values())) == len(colors)  # no two fusions share a colour
    assert all(re.fullmatch(r"#[0-9a-f]{6}", c) for c in colors.values())


def test_column_widths_fit_every_identity_value():
    """The old view had 8 widths for 9 columns: `fusion` was cut to 'con…' at any width."""
    values = {"params.`fusion`": ["add", "concat", "gate-scalar"],
              "params.`dataset`": ["synthetic-medium"]}
    widths = ui_view.column_widths(values)
    assert set(widths) == {"attributes.`Run Name`", *ui_view.view_columns()}
    px = ui_view._CHAR_PX
    for col, vals in values.items():
        assert widths[col] >= px * max(map(len, vals)) + 24, col
    assert schema.sqlite_path("sqlite:////a/b.db") == Path("/a/b.db")
    assert schema.sqlite_path("http://h:5000") is None


def test_proxy_script_sets_the_layout_group_colours_and_closes_the_assistant():
    from fusion_sweep.ui import proxy as ui_proxy

    js = ui_proxy.training_script("#/experiments/1/runs", {"param.fusion.add": "#1f77b4"})
    assert 'localStorage.setItem("mlflow.workflowType_v1","\\"machine_learning\\"")' in js
    # only on a first visit: a user who opened the Assistant keeps it open
    assert ('if(localStorage.getItem("mlflow.assistant.fab.autoOpenedOnFirstLoad_v1")===null)'
            '{localStorage.setItem("mlflow.assistant.fab.autoOpenedOnFirstLoad_v1","true");'
            'localStorage.setItem("mlflow.assistant.panelOpen_v1","false");}') in js
    assert 'Object.assign(c,{"param.fusion.add": "#1f77b4"})' in js
    assert "experimentRunColors" not in ui_proxy.training_script(None)


@pytest.fixture(scope="module")
def store(tmp_path_factory, new_sqlite_store) -> tuple[str, str]:
    """One store for the module, a migrated copy (tests/conftest.py)."""
    return make_store(new_sqlite_store(tmp_path_factory.mktemp("store")))


def test_mark_training_experiment_is_idempotent(store):
    uri, exp_id = store
    client = tracking.SweepTracker(uri).client
    if ui_view.EXPERIMENT_KIND_TAG in client.get_experiment(exp_id).tags:
        client.delete_experiment_tag(exp_id, ui_view.EXPERIMENT_KIND_TAG)
    assert ui_view.mark_training_experiment(client, exp_id)
    assert not ui_view.mark_training_experiment(client, exp_id)  # nothing left to write
    tags = client.get_experiment(exp_id).tags
    assert tags["mlflow.experimentKind"] == "custom_model_development"
    view = json.loads(tags["mlflow.sharedViewState.fusion-sweep-trials"])
    assert view["name"] == ui_view.TRIALS_VIEW_NAME and isinstance(view["createdAt"], int)
    assert json.loads(view["state"]) == ui_view.trials_view_state()
    # the view's filter is valid MLflow search syntax and selects exactly the trials
    runs = client.search_runs([exp_id], filter_string=json.loads(view["state"])["searchFilter"])
    assert len(runs) == len(TRIALS)


class Served(NamedTuple):
    proc: subprocess.Popen
    url: str  # what `ui` printed
    port: int
    seen: set[int]  # what it started


@pytest.fixture(scope="module")
def served(store, tmp_path_factory) -> Iterator[Served]:
    """One `fusion-sweep ui` on the module's store for the page tests and the SIGTERM test
    after them (each start is three Python processes, about 12 s of CPU)."""
    port = free_port()
    proc, url, seen = start_ui(store[0], port, tmp_path_factory.mktemp("ui"))
    ui = Served(proc, url, port, seen)
    yield ui
    for p in ui.seen | {ui.proc.pid}:  # whatever test_ui_stops_on_sigterm left (if it failed)
        if alive(p):
            os.kill(p, signal.SIGKILL)


def test_ui_opens_the_trials(store, served, tmp_path):
    uri, exp_id = store
    url, port = served.url, served.port
    base = f"http://127.0.0.1:{port}"
    assert url == ui_view.ui_url(base, exp_id)
    with urllib.request.urlopen(base + "/", timeout=10) as r:
        assert r.status == 200 and b'id="root"' in r.read()
    req = urllib.request.Request(
        base + "/api/2.0/mlflow/experiments/get?experiment_id=" + exp_id)
    with urllib.request.urlopen(req, timeout=10) as r:
        tags = {t["key"]: t["value"] for t in json.load(r)["experiment"]["tags"]}
    assert tags[ui_view.EXPERIMENT_KIND_TAG] == ui_view.TRAINING_KIND
    state = json.loads(json.loads(tags["mlflow.sharedViewState.fusion-sweep-trials"])["state"])
    body = json.dumps({"experiment_ids": [exp_id], "filter": state["searchFilter"]}).encode()
    req = urllib.request.Request(base + "/api/2.0/mlflow/runs/search", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        runs = json.load(r)["runs"]
    assert sorted(r["info"]["run_name"] for r in runs) == sorted(
        f"{d}.{pe}.{f}.s{s}" for d, pe, f, s, _ in TRIALS)

    if CHROMIUM is not None:  # what a person sees at that URL
        png = Path(os.environ.get("FUSION_UI_SCREENSHOT") or tmp_path / "ui.png")
        dom = chromium("--dump-dom", f"--screenshot={png}", url,
                       profile=tmp_path / "prof").stdout  # one first visit: DOM and picture
        for text in ("dataset", "fusion", "seed", "test_acc",
                     "gate-scalar", "0.75"):
            assert text in dom, f"{text!r} not on the page"
        assert "Token Usage" not in dom and "Traces</h" not in dom  # not the GenAI overview
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if CHROMIUM is None:  # the API checks above ran; say what did not
        pytest.skip("chromium not installed (apt-get install chromium): the page-content and "
                    "screenshot checks of the UI did not run")


def test_sweeps_lists_the_store_and_ui_orders_the_trials(store, capsys):
    from fusion_sweep.cli import main

    uri, exp_id = store
    assert main(["sweeps", "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["sweep", "state", "trials"]
    assert out[1].split()[:3] == [SWEEP_NAME, "finished", "3/3"]
    landing = ui_view.prepare_ui_experiment(uri, sweep=SWEEP_NAME)
    assert (landing.experiment_id, landing.sweep) == (exp_id, SWEEP_NAME)
    newest = ui_view.prepare_ui_experiment(uri)
    assert (newest.experiment_id, newest.sweep) == (exp_id, SWEEP_NAME)
    client = tracking.SweepTracker(uri).client
    runs = client.search_runs([exp_id], filter_string="tags.`fusion_sweep.role` = 'trial'",
                              order_by=["tags.`fusion_sweep.ui_order` ASC"])
    assert [(r.data.params["fusion"], r.data.params["seed"]) for r in runs] == [
        ("add", "0"), ("concat", "0"), ("gate-scalar", "1")]
    # one colour per fusion: on each run (its tag) and on each group row (the browser's)
    colors = ui_view.fusion_colors()
    assert [r.data.tags["mlflow.runColor"] for r in runs] == [
        colors[f] for f in ("add", "concat", "gate-scalar")]
    assert landing.group_colors == {
        f"param.dataset.synthetic-short,param.fusion.{f}": colors[f]
        for f in ("add", "concat", "gate-scalar")}
    # the saved view: only the columns that say something (one encoder: no encoder column),
    # the run name wide enough for the group rows' names
    view = json.loads(client.get_experiment(exp_id).tags[
        "mlflow.sharedViewState.fusion-sweep-trials"])
    state = json.loads(view["state"])
    assert "params.`encoder`" not in state["selectedColumns"]
    longest = len("dataset: synthetic-short, fusion: gate-scalar")
    assert state["columnWidths"]["attributes.`Run Name`"] >= ui_view._CHAR_PX * longest
    # what a 1600 px window must show without scrolling: run name, Created, the identity
    # columns and test_acc, in the width the runs table has there (the left navigation and
    # the row checkboxes take the rest)
    upto = state["columnOrder"][:state["columnOrder"].index("metrics.`test_acc`") + 1]
    assert sum(state["columnWidths"][c] for c in upto) <= 1600 - 250 - 73
    with pytest.raises(UserError, match="--sweep nope: no such sweep in .* sweeps: tiny"):
        ui_view.prepare_ui_experiment(uri, sweep="nope")
    with pytest.raises(UserError, match=r"--sweep tin: no such sweep \(did you mean 'tiny'\?\) "
                                        r"in .* sweeps: tiny \("):
        ui_view.prepare_ui_experiment(uri, sweep="tin")
    assert main(["ui", "--sweep", "nope", "--backend-store-uri", uri, "--port",
                 str(free_port())]) == 2
    assert "error: --sweep nope" in capsys.readouterr().err


def test_root_and_run_pages_open_the_training_layout(store, served, tmp_path):
    """A plain root URL and a trial run's own page, first visit (empty localStorage): the
    model-training layout, on the sweep's trials; screenshots checked."""
    if CHROMIUM is None:
        pytest.skip("no chromium")
    from PIL import Image

    uri, exp_id = store
    port = served.port
    base = f"http://127.0.0.1:{port}"
    client = tracking.SweepTracker(uri).client
    run_id = client.search_runs([exp_id], filter_string="tags.`fusion_sweep.role` = "
                                "'trial'")[0].info.run_id
    shots = Path(os.environ.get("FUSION_UI_SCREENSHOT_DIR") or tmp_path)
    for name, page, want in (
            ("root", base + "/", ("gate-scalar", "synthetic-short", "Sort: fusion_sweep.ui_order")),
            ("run", f"{base}/#/experiments/{exp_id}/runs/{run_id}", ("Model metrics",))):
        png = shots / f"ui_{name}.png"
        dom = chromium("--dump-dom", f"--screenshot={png}", page,
                       profile=tmp_path / "prof").stdout  # one first visit: DOM and picture
        for text in want:
            assert text in dom, f"{text!r} not on the {name} page"
        assert "Evaluation runs" not in dom and "Token Usage" not in dom, name  # not GenAI
        img = Image.open(png).convert("L")
        assert img.size == (1600, 1000)
        assert len(np.unique(np.asarray(img.resize((64, 40))))) > 8  # a drawn page, not blank


def test_ui_stops_on_sigterm(served):
    """After the page tests: exit 0 on SIGTERM, nothing it started alive, the port free."""
    assert_stops_cleanly(served.proc, signal.SIGTERM, served.port, served.seen)


def test_ui_stops_on_sigint_and_refuses_a_busy_port(store, tmp_path):
    uri, _ = store
    port = free_port()
    proc, url, seen = start_ui(uri, port, tmp_path)
    try:
        assert url.startswith(f"http://127.0.0.1:{port}/#/experiments/")
        r = subprocess.run([sys.executable, "-m", "fusion_sweep.cli", "ui", "--port", str(port),
                            "--backend-store-uri", uri], capture_output=True, text=True,
                           timeout=60, cwd=tmp_path)
        assert r.returncode == 2 and "already in use" in r.stderr
    finally:
        assert_stops_cleanly(proc, signal.SIGINT, port, seen)

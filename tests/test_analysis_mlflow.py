"""`fusion-sweep stats` on a real local MLflow store (sqlite) with the sweep tag schema."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

mlflow = pytest.importorskip("mlflow")
from mlflow.entities import Metric, Param  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

from analysis import cli  # noqa: E402
from analysis.demo import synthetic_results  # noqa: E402

EXP = "fusion-sweep"
# mlflow 3.17 + SQLAlchemy 2 emit SADeprecationWarning on store start-up; not ours.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _log_sweep(client: MlflowClient, exp_id: str, sweep: str,
               datasets: tuple[str, ...] = ("synthetic-short", "synthetic-long")) -> str:
    """A parent run + one child per trial (datasets x {add, gate-vector} x 5 seeds)."""
    parent = client.create_run(exp_id, run_name=sweep, tags={
        "fusion_sweep.role": "sweep", "fusion_sweep.sweep": sweep})
    df = synthetic_results(pes=("sinusoidal",))
    df = df[df["dataset"].isin(datasets)
            & df["fusion"].isin(["add", "gate-vector"])]
    for row in df.itertuples(index=False):
        fp_batch = row.fp_batch_order
        if (row.dataset, row.fusion, row.seed) == ("synthetic-long", "gate-vector", 4):
            fp_batch = "badbadbad0"  # a broken pairing the analysis must refuse
        run = client.create_run(exp_id, run_name=f"{row.dataset}-{row.fusion}-{row.seed}", tags={
            "fusion_sweep.role": "trial", "fusion_sweep.sweep": sweep,
            "mlflow.parentRunId": parent.info.run_id,
            "fusion_sweep.trial_key": f"{row.dataset}|{row.pe}|{row.fusion}|{row.seed}",
            "fp.split": row.fp_split, "fp.batch_order": fp_batch,
            "fp.shared_init": row.fp_shared_init})
        rid = run.info.run_id
        params = {"dataset": row.dataset, "pe": row.pe, "fusion": row.fusion,
                  "seed": str(row.seed), "lr": "0.0003", "d_model": "256"}
        metrics = {"test_acc": row.test_acc, "best_val_acc": row.best_val_acc,
                   "test_macro_f1": row.test_macro_f1, "median_tokens": row.median_tokens,
                   "latency_ms_per_sample": row.latency_ms_per_sample, "params": row.params,
                   "train_seconds": 12.0, "tokens_per_second": 1e4}
        client.log_batch(rid, metrics=[Metric(k, float(v), 0, 0) for k, v in metrics.items()],
                         params=[Param(k, v) for k, v in params.items()], tags=[])
        failed = (row.dataset, row.fusion, row.seed) == ("synthetic-short", "gate-vector", 2)
        client.set_terminated(rid, status="FAILED" if failed else "FINISHED")
    client.set_terminated(parent.info.run_id)
    return parent.info.run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp_id = client.create_experiment(EXP, artifact_location=(root / "artifacts").as_uri())
    first = _log_sweep(client, exp_id, "smoke-a")
    second = _log_sweep(client, exp_id, "smoke-b", datasets=("synthetic-short",))
    return {"uri": uri, "client": client, "exp_id": exp_id, "a": first, "b": second, "root": root}


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    args = cli.build_parser().parse_args(["stats", *argv])
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_stats_reads_sweep_and_logs_stats_run(store: dict, tmp_path: Path, capsys) -> None:
    report = tmp_path / "rep"
    code, out, err = _run(["--tracking-uri", store["uri"], "--sweep", "smoke-a", "--format",
                           "json", "--bootstrap", "500", "--report", str(report)], capsys)
    assert code == 0, err
    rep = json.loads(out)
    assert rep["source"]["kind"] == "mlflow" and rep["source"]["sweep"] == "smoke-a"
    assert rep["source"]["parent_run_id"] == store["a"] and rep["source"]["n_runs"] == 20
    reasons = {(d["dataset"], d["seed"], d["reason"]) for d in rep["dropped"]}
    assert reasons == {("synthetic-short", 2, "failed_trial"),
                       ("synthetic-long", 4, "fingerprint_mismatch")}
    assert [c["n"] for c in rep["comparisons"]] == [4, 4]
    assert [r["median_tokens"] for r in rep["regimes"]] == [48.0, 1890.0]

    client: MlflowClient = store["client"]
    stats_runs = client.search_runs([store["exp_id"]], "tags.`fusion_sweep.role` = 'stats'")
    mine = [r for r in stats_runs if r.data.tags["mlflow.parentRunId"] == store["a"]]
    assert len(mine) == 1
    run = mine[0]
    assert run.info.run_name == "stats" and run.info.status == "FINISHED"
    assert run.data.tags["fusion_sweep.sweep"] == "smoke-a"
    names = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"report.html", "report.md", "stats.json"} <= names
    assert any(n.endswith(".png") for n in names)
    assert run.data.metrics["n_comparisons"] == 2.0


def test_default_is_latest_sweep_and_no_log_flag(store: dict, capsys) -> None:
    code, out, _ = _run(["--tracking-uri", store["uri"], "--format", "json", "--bootstrap", "500",
                         "--no-mlflow-log"], capsys)
    assert code == 0
    assert json.loads(out)["source"]["parent_run_id"] == store["b"]
    client: MlflowClient = store["client"]
    logged = client.search_runs([store["exp_id"]], "tags.`fusion_sweep.role` = 'stats'")
    assert all(r.data.tags["mlflow.parentRunId"] != store["b"] for r in logged)


@pytest.mark.parametrize("argv,match", [
    (["--sweep", "nope"], r"unknown --sweep 'nope' in experiment 'fusion-sweep'; sweeps present: "
                          r"smoke-a, smoke-b"),
    (["--experiment", "other"], r"unknown MLflow experiment 'other'; experiments present: "),
])
def test_mlflow_input_errors(store: dict, capsys, argv: list[str], match: str) -> None:
    import re
    code, _, err = _run(["--tracking-uri", store["uri"], *argv], capsys)
    assert code == 2 and re.search(match, err), err


def test_missing_default_store_is_a_clear_error(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    code, _, err = _run([], capsys)
    assert code == 2 and "no MLflow store at" in err and "--results" in err
    assert not (tmp_path / "mlflow.db").exists()


def test_sweep_space_choices_are_the_defaults(tmp_path: Path, capsys) -> None:
    """baseline / metric / equivalence margin come from the sweep's space unless flags say otherwise."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp_id = client.create_experiment(EXP, artifact_location=(tmp_path / "art").as_uri())
    parent = _log_sweep(client, exp_id, "own-space", datasets=("synthetic-short",))
    for k, v in {"baseline": "gate-vector", "metric": "best_val_acc", "equivalence_margin": "0.02"}.items():
        client.log_param(parent, k, v)
    base = ["--tracking-uri", uri, "--format", "json", "--bootstrap", "200", "--no-mlflow-log"]
    code, out, err = _run(base, capsys)
    assert code == 0, err
    (c,) = json.loads(out)["comparisons"]
    assert (c["baseline"], c["fusion"], c["metric"]) == ("gate-vector", "add", "best_val_acc")
    assert c["tost_p"] is not None  # the sweep's margin enabled TOST
    code, out, err = _run([*base, "--baseline", "add", "--metric", "test_acc"], capsys)
    (c,) = json.loads(out)["comparisons"]
    assert (c["baseline"], c["fusion"], c["metric"]) == ("add", "gate-vector", "test_acc")

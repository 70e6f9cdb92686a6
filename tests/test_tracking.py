"""MLflow tracking: the run schema, re-attaching by trial key, orphan reconciliation.

Runs against a real local sqlite store (no server) and a hand-made TrialResult, so no
training happens here; the end-to-end tests cover the same code under Ray and a server.
"""
from __future__ import annotations

import csv
import json
import socket
from pathlib import Path

import pytest

from fusion_sweep.tracking import runs as tracking
from fusion_sweep.tracking import store as tracking_store  # noqa: E402
from fusion_sweep import schema  # noqa: E402
from fusion_sweep.trial.config import TrialConfig
from fusion_sweep.plan.space import load_space
from fusion_sweep.trial.models.encoder import ENCODERS
from fusion_sweep.trial.trainer import EpochRecord, TrialResult


@pytest.fixture(scope="module")
def store(tmp_path_factory, new_sqlite_store):
    d = tmp_path_factory.mktemp("mlflow")
    uri = new_sqlite_store(d)  # a migrated copy (tests/conftest.py)
    t = tracking.SweepTracker(uri, "fusion-sweep-test")
    t.ensure_experiment()
    return t


def config(seed=0, fusion="add") -> TrialConfig:
    return load_space("smoke").grid()[0].replace(seed=seed, fusion=fusion)


def ctx_for(t: tracking.SweepTracker, sweep: str, parent: str, launch="L1") -> tracking.TrackingContext:
    return tracking.TrackingContext(tracking_uri=t.tracking_uri, experiment_id=t.experiment_id,
                                    parent_run_id=parent, sweep=sweep, code_fingerprint="c0de",
                                    git_commit="abc123", launch_id=launch)


def fake_result(cfg: TrialConfig, epochs=2) -> TrialResult:
    curve = [EpochRecord(e, 1.0 / e, 0.5 + e / 10, 1.1 / e, 0.4 + e / 10, 0.5, 1000.0)
             for e in range(1, epochs + 1)]
    return TrialResult(
        config=cfg.to_dict(), test_acc=0.61, test_macro_f1=0.6, best_val_acc=0.6, best_epoch=epochs,
        epochs_run=epochs, params=1234, fusion_params=32, train_seconds=1.0, tokens_per_second=1000.0,
        latency_ms_per_sample=0.5, median_tokens=40.0, flops_per_token=2.0e4, curve=curve,
        fingerprints={"split": "s1", "batch_order": "b1", "shared_init": "i1", "dropout": "d1",
                      "encoder_init": "e1"},
        num_classes=2, test_majority_rate=2 / 3, test_n=3,
        predictions={"index": [0, 1, 2], "label": [0, 1, 1], "pred": [0, 1, 0],
                     "probs": [[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]]},
        device="cpu", checkpoint=None)


def start(t, sweep):
    return t.start_parent(sweep, grid_hash="g1", n_trials=2, commit="abc123",
                          params={"datasets": "synthetic-short"}, code="5eed")


# --------------------------------------------------------------------------- locations
def test_default_store_is_sqlite_under_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert schema.resolve_tracking_uri() == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")
    assert schema.resolve_tracking_uri() == "http://127.0.0.1:9"
    assert schema.resolve_tracking_uri("http://h:5000") == "http://h:5000"


def test_unreachable_server_fails_fast_with_a_clear_error(monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    calls: list[tuple[str, float | None]] = []
    real = schema.urllib.request.urlopen

    def urlopen(url, *a, timeout=None, **kw):
        calls.append((url, timeout))
        return real(url, *a, timeout=timeout, **kw)
    monkeypatch.setattr(schema.urllib.request, "urlopen", urlopen)
    with pytest.raises(ValueError, match=rf"MLflow tracking server http://127.0.0.1:{port} is not "
                                         r"reachable.*local store sqlite:///"):
        tracking_store.check_tracking_uri(f"http://127.0.0.1:{port}")
    # fails fast: one probe of /health, bounded by a timeout, no retries
    assert calls == [(f"http://127.0.0.1:{port}/health", 5.0)]


def test_file_store_and_missing_directory_rejected(tmp_path):
    with pytest.raises(ValueError, match="refuses file stores"):
        tracking_store.check_tracking_uri(f"file://{tmp_path}/mlruns")
    with pytest.raises(ValueError, match="does not exist or is not writable"):
        tracking_store.check_tracking_uri(f"sqlite:///{tmp_path}/nope/mlflow.db")
    tracking_store.check_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")


def test_local_experiment_keeps_artifacts_next_to_the_db(store):
    exp = store.client.get_experiment(store.experiment_id)
    db_dir = Path(store.tracking_uri[len("sqlite:///"):]).parent
    assert exp.artifact_location == (db_dir / "mlartifacts").as_uri()


# ------------------------------------------------------------------------------ schema
def test_parent_run_is_reused(store):
    a = start(store, "sweep-a")
    b = start(store, "sweep-a")
    assert a == b
    run = store.client.get_run(a)
    assert run.info.run_name == "sweep-a"
    assert run.data.tags[schema.ROLE] == "sweep" and run.data.tags[schema.SWEEP] == "sweep-a"
    assert run.data.params["datasets"] == '"synthetic-short"'  # JSON: structure survives
    assert run.data.tags[schema.CODE_FINGERPRINT] == "5eed"  # the grid's (`grid.code_of`)


def test_parent_params_are_json(store):
    from fusion_sweep.schema import decode_param

    run_id = store.start_parent("sweep-j", grid_hash="g1", n_trials=2, commit="abc",
                                params={"equivalence_margin": {"arxiv": 0.005}, "metric": "test_acc",
                                        "baseline": None})
    params = store.client.get_run(run_id).data.params
    assert decode_param(params["equivalence_margin"]) == {"arxiv": 0.005}
    assert decode_param(params["metric"]) == "test_acc" and decode_param(params["baseline"]) is None


def test_trial_run_schema(store, tmp_path):
    parent = start(store, "sweep-b")
    ctx = ctx_for(store, "sweep-b", parent)
    cfg = config()
    key = cfg.trial_key(ctx.code_fingerprint)
    run = tracking.TrialRun.open(ctx, cfg, key, tags={"fusion_sweep.node_id": "n1"})
    res = fake_result(cfg)
    for rec in res.curve:
        run.log_epoch(rec)
    run.log_result(res)

    r = store.client.get_run(run.run_id)
    assert r.info.status == "FINISHED"
    assert r.info.run_name == "short·add·s0"  # issue 33: fits the UI's run-name column
    tags, params, metrics = r.data.tags, r.data.params, r.data.metrics
    assert tags[schema.ROLE] == "trial" and tags[schema.SWEEP] == "sweep-b"
    assert tags["mlflow.parentRunId"] == parent and tags[schema.TRIAL_KEY] == key
    assert (tags["fp.split"], tags["fp.batch_order"], tags["fp.shared_init"],
            tags["fp.dropout"]) == ("s1", "b1", "i1", "d1")
    assert tags[schema.CODE_FINGERPRINT] == "c0de"
    assert tags[schema.GIT_COMMIT] == "abc123" and tags[schema.VERSION]
    assert tags["fusion_sweep.node_id"] == "n1" and tags[schema.ATTEMPTS] == "1"
    assert {"dataset", "pe", "fusion", "seed"} <= set(params)
    assert set(cfg.hyperparameters()) <= set(params)
    assert params["d_model"] == "16" and params["seed"] == "0"
    for m in schema.FINAL_METRICS:
        assert m in metrics, m
    assert metrics["test_acc"] == pytest.approx(0.61)
    hist = store.client.get_metric_history(run.run_id, "val_acc")
    assert sorted((h.step, round(h.value, 3)) for h in hist) == [(1, 0.5), (2, 0.6)]
    for m in schema.EPOCH_METRICS:
        assert len(store.client.get_metric_history(run.run_id, m)) == 2
    names = {a.path for a in store.client.list_artifacts(run.run_id)}
    assert {"predictions.csv", "result.json"} <= names
    local = Path(store.client.download_artifacts(run.run_id, "predictions.csv", str(tmp_path)))
    rows = list(csv.reader(local.open()))
    assert rows[0] == ["index", "label", "pred", "prob_0", "prob_1"] and len(rows) == 4
    res_json = json.loads(Path(store.client.download_artifacts(run.run_id, "result.json",
                                                               str(tmp_path))).read_text())
    assert res_json["fingerprints"]["split"] == "s1" and len(res_json["curve"]) == 2

    # opening the same key again finds the finished run: nothing new is created
    again = tracking.TrialRun.open(ctx, cfg, key)
    assert again.finished and again.run_id == run.run_id
    assert again.final_metrics()["test_acc"] == pytest.approx(0.61)
    assert len(store.trial_runs("sweep-b")) == 1


def test_checkpoint_artifact_when_requested(store):
    parent = start(store, "sweep-ckpt")
    ctx = ctx_for(store, "sweep-ckpt", parent)
    cfg = config().replace(save_checkpoint=True)
    run = tracking.TrialRun.open(ctx, cfg, cfg.trial_key("0.1.0"))
    import torch

    res = fake_result(cfg)
    res.checkpoint = {"w": torch.zeros(2)}
    run.log_result(res)
    assert "checkpoint.pt" in {a.path for a in store.client.list_artifacts(run.run_id)}


def test_orphans_reconciled_then_reattached(store):
    parent = start(store, "sweep-c")
    ctx1 = ctx_for(store, "sweep-c", parent, launch="first")
    cfg = config(seed=1)
    key = cfg.trial_key("0.1.0")
    run = tracking.TrialRun.open(ctx1, cfg, key)  # the driver "dies" here: run left RUNNING
    other = tracking.TrialRun.open(ctx_for(store, "sweep-other", start(store, "sweep-other")), cfg, key)
    killed = store.reconcile_orphans("sweep-c")
    assert killed == [run.run_id]
    r = store.client.get_run(run.run_id)
    assert r.info.status == "KILLED" and "fusion_sweep.reconciled" in r.data.tags
    assert store.client.get_run(other.run_id).info.status == "RUNNING"  # other sweeps untouched

    ctx2 = ctx_for(store, "sweep-c", parent, launch="second")
    again = tracking.TrialRun.open(ctx2, cfg, key)
    assert again.run_id == run.run_id and not again.finished
    r = store.client.get_run(run.run_id)
    assert r.info.status == "RUNNING"
    assert r.data.tags[schema.ATTEMPTS] == "2" and r.data.tags[schema.LAUNCH_ID] == "second"
    assert len(store.trial_runs("sweep-c")) == 1


def test_a_run_killed_before_its_params_gets_them_when_reattached(store):
    """A driver SIGKILLed between MLflow's create_run and the params' log_batch (seen in the
    killed adaptive sweep's resume test) leaves a run with the trial's key and no params;
    the relaunch that re-attaches to it logs them, so no finished trial lacks its seed."""
    parent = start(store, "sweep-p")
    cfg = config(seed=3)
    key = cfg.trial_key("0.1.0")
    run = tracking.TrialRun.open(ctx_for(store, "sweep-p", parent, launch="first"), cfg, key)
    bare = store.client.create_run(store.experiment_id, tags={
        k: v for k, v in store.client.get_run(run.run_id).data.tags.items()
        if not k.startswith("mlflow.")})
    store.client.delete_run(run.run_id)  # only the run without params is left
    assert store.client.get_run(bare.info.run_id).data.params == {}
    again = tracking.TrialRun.open(ctx_for(store, "sweep-p", parent, launch="second"), cfg, key)
    assert again.run_id == bare.info.run_id and not again.finished
    params = store.client.get_run(bare.info.run_id).data.params
    assert params["seed"] == "3" and params == tracking._params(cfg)


def test_failed_trial_is_marked_failed_with_its_error(store):
    parent = start(store, "sweep-d")
    ctx = ctx_for(store, "sweep-d", parent)
    cfg = config(seed=2)
    run = tracking.TrialRun.open(ctx, cfg, cfg.trial_key("0.1.0"))
    try:
        raise RuntimeError("out of memory, pretend")
    except RuntimeError as e:
        run.fail(e)
    r = store.client.get_run(run.run_id)
    assert r.info.status == "FAILED"
    assert r.data.tags["fusion_sweep.error"] == "RuntimeError: out of memory, pretend"
    assert "error.txt" in {a.path for a in store.client.list_artifacts(run.run_id)}
    # a retry re-attaches to the same run
    again = tracking.TrialRun.open(ctx, cfg, cfg.trial_key("0.1.0"))
    assert again.run_id == run.run_id
    assert "fusion_sweep.error" in store.client.get_run(run.run_id).data.tags  # kept for history


def test_finish_parent_logs_summary(store, tmp_path):
    parent = start(store, "sweep-e")
    f = tmp_path / "results.csv"
    f.write_text("dataset\nx\n")
    store.finish_parent(parent, "FINISHED", {"trials_finished": 2}, [f])
    store.start_parent("sweep-e", grid_hash="g1", n_trials=2, commit="abc123", params={})
    store.finish_parent(parent, "FAILED", {"trials_finished": 3})
    r = store.client.get_run(parent)
    assert r.info.status == "FAILED"
    steps = [m.step for m in store.client.get_metric_history(parent, "trials_finished")]
    assert steps == [0, 1]
    assert "results.csv" in {a.path for a in store.client.list_artifacts(parent)}


# ------------------------------------------------------------------------- code changes
def _point(cfg: TrialConfig, components: dict):
    from fusion_sweep.plan.grid import GridPoint
    from fusion_sweep.plan.trialcode import TrialCode

    code = TrialCode(components, schema.code_fingerprint(components))
    return GridPoint(cfg, cfg.trial_key(code.fingerprint), code)


def test_code_change_refused_unless_allowed_and_recorded(store, capsys):
    """A sweep whose finished trials ran other code is not resumed silently: the launch names
    how many trials retrain and which component changed, refuses without
    --allow-code-change, and with it supersedes (never deletes) the old runs."""
    import io

    from fusion_sweep.launch.preflight import check_code, code_history

    old = {"trainer": "t1", "fusion:add": "a1"}
    parent_id = store.start_parent("sweep-code", grid_hash="g1", n_trials=2, commit="abc",
                                   params={}, code="c0de")
    ctx = ctx_for(store, "sweep-code", parent_id)
    a, b = config(fusion="add"), config(fusion="concat")
    olds = [_point(a, old), _point(b, {"trainer": "t1", "fusion:concat": "c1"})]
    for p in olds:
        run = tracking.TrialRun.open(ctx, p.config, p.key, tags={
            schema.CODE_FINGERPRINT: p.code.fingerprint, schema.CODE_COMPONENTS: p.code.tag()})
        run.log_result(fake_result(p.config))
    parent = store.find_parent("sweep-code")
    assert check_code(parent, store, "sweep-code", olds, False, io.StringIO()) == {}
    new = [_point(a, {**old, "fusion:add": "a2"}), olds[1]]  # add's code changed
    with pytest.raises(ValueError, match=r"sweep 'sweep-code' has finished trials trained by other "
                                         r"code \(1 of 2 trials: fusion add's code changed; 1 kept\)"
                                         r".*Pass --allow-code-change to retrain those 1"):
        check_code(parent, store, "sweep-code", new, False, io.StringIO())
    out = io.StringIO()
    superseded = check_code(parent, store, "sweep-code", new, True, out)
    old_run = tracking.TrialRun.find(ctx, olds[0].key).info.run_id
    assert superseded == {old_run: new[0].key}
    assert "1 of 2 trials: fusion add's code changed; 1 kept" in out.getvalue()
    store.mark_superseded(superseded)
    tags = store.client.get_run(old_run).data.tags
    assert tags[schema.SUPERSEDED] == new[0].key  # marked, never deleted
    assert store.client.get_run(old_run).info.status == "FINISHED"
    history = code_history(parent, "beef")
    store.start_parent("sweep-code", grid_hash="g1", n_trials=2, commit="abc", params={},
                       code="beef", code_history=history)
    tags = store.client.get_run(parent_id).data.tags
    assert tags[schema.CODE_FINGERPRINT] == "beef" and tags[schema.CODE_HISTORY] == "c0de,beef"
    # the trial key changes with the code, so the old run is never found for the new code
    assert new[0].key != olds[0].key and new[1].key == olds[1].key


@pytest.mark.parametrize("encoder", sorted(ENCODERS))
def test_a_trial_run_logs_only_its_own_encoders_fields(store, encoder):
    """A standard-encoder run carries no ReSSFormer switches (soes, asam, topk, ...): a user
    filtering on params.soes must not find standard trials (issue 18); each encoder's own
    fields are logged."""
    sweep = f"sweep-enc-{encoder}"
    parent = start(store, sweep)
    ctx = ctx_for(store, sweep, parent)
    cfg = config().replace(encoder=encoder, pe="none")  # pe none: valid for every encoder
    run = tracking.TrialRun.open(ctx, cfg, cfg.trial_key(ctx.code_fingerprint))
    params = store.client.get_run(run.run_id).data.params
    others = {f for name, e in ENCODERS.items() if name != encoder for f in e.OPTION_FIELDS}
    assert set(ENCODERS[encoder].OPTION_FIELDS) <= set(params)
    assert not others & set(params)
    assert ("soes" in params) == ("soes" in ENCODERS[encoder].OPTION_FIELDS)
    assert params["encoder"] == encoder


# ------------------------------------------------------------------ the code fingerprint
TRIAL = Path(tracking.__file__).resolve().parents[1] / "trial"


@pytest.mark.parametrize("dataset, changes, name", [
    ("synthetic-long", dict(fusion="concat"), "long·concat·s0"),
    ("synthetic-medium-shuffled", dict(fusion="gate-scalar", seed=4),
     "medium-shuffled·gate-scalar·s4"),
    ("agnews", dict(fusion="add", seed=2), "agnews·add·s2"),  # a hub dataset keeps its name
    ("synthetic-long", dict(pe="learned", fusion="add", seed=1), "long·learned·add·s1"),
    ("synthetic-long", dict(encoder="ressformer", pe="none", fusion="add"),
     "long·ressformer·none·add·s0"),
])
def test_a_trial_runs_name_is_short(dataset, changes, name):
    """Issue 33: `long·concat·s0`, not `synthetic-long.standard.sinusoidal.concat.s0.1a2b3c4d`
    (cut in the UI): the dataset without its kind's prefix, the encoder and pe only when not
    the defaults, the seed; two trials of one sweep never share a name."""
    cfg = TrialConfig.build(dataset, **changes)
    assert tracking.trial_run_name(cfg) == name
    grid = load_space("default").grid()
    names = [tracking.trial_run_name(c) for c in grid]
    assert len(set(names)) == len(grid) and max(map(len, names)) <= 24


@pytest.fixture
def package_copy(tmp_path):
    """A copy of the package, and the keys of a small grid under it (which must equal the
    checkout's: where the code lies is not what it is)."""
    import shutil

    from fusion_sweep.plan import trialcode

    copy = tmp_path / "fusion_sweep"
    shutil.copytree(TRIAL.parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    keys = _grid_keys(copy)
    assert keys == _grid_keys(None)
    trialcode.forget()
    return copy, keys


GRID = [TrialConfig.build("synthetic-short", fusion=f) for f in ("add", "concat", "gate-cnn")] \
    + [TrialConfig.build("synthetic-short", encoder="ressformer", pe="none", fusion="add")]


def _grid_keys(package_dir):
    from fusion_sweep.plan import trialcode

    trialcode.forget()
    return [c.trial_key(trialcode.trial_code(c, package_dir).fingerprint) for c in GRID]


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def test_code_fingerprint_ignores_comments_docstrings_formatting_and_moves(package_copy):
    copy, keys = package_copy
    trainer, batching = copy / "trial" / "trainer.py", copy / "trial" / "batching.py"
    _edit(trainer, '"""One trial in plain PyTorch', '"""Docstring edited. One trial in PyTorch')
    _edit(trainer, "def macro_f1(labels: np.ndarray, preds: np.ndarray) -> float:\n",
          "def macro_f1(labels: np.ndarray,\n             preds: np.ndarray) -> float:  # reformatted\n")
    _edit(trainer, "Mean F1 over classes", "The mean F1 over the classes")
    fusion = copy / "trial" / "models" / "fusion.py"
    fusion.write_text(fusion.read_text() + "\n# a trailing comment\n")
    assert _grid_keys(copy) == keys
    # moving code only: macro_f1 from trainer.py to batching.py, imported back
    text = trainer.read_text()
    start = text.index("def macro_f1(")
    end = text.index("\n\n\n", start) + 3
    trainer.write_text(text[:start] + text[end:])
    _edit(trainer, "from fusion_sweep.trial.batching import (",
          "from fusion_sweep.trial.batching import macro_f1\nfrom fusion_sweep.trial.batching import (")
    batching.write_text(batching.read_text() + "\n\n" + text[start:end])
    assert _grid_keys(copy) == keys


def test_code_fingerprint_ignores_messages_annotations_and_code_no_trial_runs(package_copy):
    """Issue 41: a reworded error, warning or config-rule message, an annotation, the launch's
    memory estimator, a new registry entry, the CLI, the statistics: no key moves."""
    copy, keys = package_copy
    trial = copy / "trial"
    _edit(trial / "models" / "fusion.py", 'f"gate_cnn_kernel must be odd (2K+1), got {k}"',
          'f"gate_cnn_kernel has to be odd (2K+1); it is {k}"')  # a config rule's message
    _edit(trial / "models" / "fusion.py", 'raise ValueError(f"gate_cnn_kernel must be odd and positive',
          'raise ValueError(f"the gate-cnn kernel must be odd and positive')  # a raise
    _edit(trial / "trainer.py", "def majority_rate(labels: np.ndarray) -> float:",
          "def majority_rate(labels: np.ndarray | list) -> float:")  # an annotation
    _edit(trial / "data" / "__init__.py", 'warnings.warn(f"dataset {spec.name!r}: {source.description}',
          'warnings.warn(f"note: dataset {spec.name!r}: {source.description}')
    _edit(trial / "memory.py", "import math\n", "import math\n\nMEMORY_PROBE = 3\n")
    (trial / "memory.py").write_text((trial / "memory.py").read_text().replace("2**30", "2**31"))
    _edit(trial / "models" / "fusion.py", '    "mul": MulFusion,\n}',
          '    "mul": MulFusion,\n    "sub": MulFusion,\n}')  # a new registry entry
    _edit(copy / "cli" / "__init__.py", "import", "import os as _probe_os\nimport")
    stats = copy / "analysis" / "stats.py"
    stats.write_text(stats.read_text() + "\nPROBE = 1\n")
    assert _grid_keys(copy) == keys


@pytest.mark.parametrize("rel, old, new, changed", [
    ("trial/trainer.py", "return float(np.mean(scores)) if scores else float(\"nan\")",
     "return float(np.mean(scores)) if scores else 0.0", [0, 1, 2, 3]),
    ("trial/batching.py", None, None, [0, 1, 2, 3]),
    ("trial/models/fusion.py", "self.proj = nn.Linear(2 * d_model, d_model)",
     "self.proj = nn.Linear(2 * d_model, d_model, bias=False)", [1]),
    ("trial/models/ressformer.py", None, None, [3]),
    ("trial/data/synthetic.py", None, None, [0, 1, 2, 3]),
])
def test_code_fingerprint_changes_with_a_changed_constant(package_copy, rel, old, new, changed):
    """A changed constant or expression changes the key of exactly the trials that run it
    (None: the file's first numeric literal)."""
    copy, keys = package_copy
    path = copy / rel
    if old is None:
        line, a, b, text = _first_number(path)
        lines = path.read_text().splitlines(keepends=True)
        lines[line - 1] = lines[line - 1][:a] + f"({text} + 1)" + lines[line - 1][b:]
        path.write_text("".join(lines))
    else:
        _edit(path, old, new)
    after = _grid_keys(copy)
    assert [i for i, (x, y) in enumerate(zip(keys, after)) if x != y] == changed


def _first_number(path: Path) -> tuple[int, int, int, str]:
    """(line, start col, end col, text) of the first int/float literal of the file's code."""
    import ast

    source = path.read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and type(node.value) in (int, float) \
                and node.lineno == node.end_lineno:
            return node.lineno, node.col_offset, node.end_col_offset, \
                ast.get_source_segment(source, node)
    raise AssertionError(f"{path} has no numeric literal")


# ------------------------------------------------------------- the run of a trial key
def _fake_run(key: str, status: str, start: int, run_id: str):
    from types import SimpleNamespace

    return SimpleNamespace(info=SimpleNamespace(status=status, start_time=start, run_id=run_id),
                           data=SimpleNamespace(tags={schema.TRIAL_KEY: key}))


@pytest.mark.parametrize("runs, chosen", [
    ([("FAILED", "a"), ("FINISHED", "b"), ("FINISHED", "c")], "b"),  # the oldest FINISHED
    ([("KILLED", "a"), ("FAILED", "b")], "b"),  # none finished: the newest
    ([("FINISHED", "a"), ("RUNNING", "b")], "a"),
])
def test_every_reader_takes_the_same_run_of_a_trial_key(runs, chosen, monkeypatch):
    """The resume rule (SweepTracker.trial_status), the launch summary (runs_by_key), the
    adaptive values (finished_values), re-attaching (TrialRun.find) and `stats`
    (analysis.mlflow_io.runs_of_keys) all pick one run per key by schema.run_of_key."""
    from fusion_sweep.analysis.mlflow_io import runs_of_keys

    fakes = [_fake_run("k1", st, i, rid) for i, (st, rid) in enumerate(runs)]
    assert [r.info.run_id for r in runs_of_keys(list(reversed(fakes)))] == [chosen]
    tracker = object.__new__(tracking.SweepTracker)
    tracker._by_key = {}
    monkeypatch.setattr(tracker, "trial_runs", lambda sweep: fakes, raising=False)
    assert tracker.trial_status("s", "k1")[1] == chosen
    assert tracker.runs_by_key("s")["k1"].info.run_id == chosen

    class Client:
        def search_runs(self, *a, **kw):
            return fakes
    ctx = tracking.TrackingContext("sqlite:///x.db", "0", "p", "s", "c", "g", "l")
    assert tracking.TrialRun.find(ctx, "k1", Client()).info.run_id == chosen


@pytest.mark.parametrize("name", ["plain", "it's", 'say "hi"', "both'\"", "back\\slash"])
def test_runs_are_found_by_any_sweep_name(store, name):
    """One query helper for writer and reader: a sweep name with quotes or a backslash finds
    its parent and trial runs (MLflow unescapes nothing in a filter literal)."""
    parent = start(store, name)
    assert store.find_parent(name).info.run_id == parent
    ctx = ctx_for(store, name, parent)
    run = tracking.TrialRun.open(ctx, config(seed=3), "k-" + str(abs(hash(name))))
    assert tracking.TrialRun.find(ctx, "k-" + str(abs(hash(name)))).info.run_id == run.run_id
    assert [r.info.run_id for r in store.trial_runs(name)] == [run.run_id]


def test_run_searches_page_through_every_run(store):
    from fusion_sweep import mlflow_query

    ids = [store.client.create_run(store.experiment_id, tags={schema.ROLE: "trial", schema.SWEEP: "paged"})
           .info.run_id for _ in range(5)]
    found = mlflow_query.search_runs(store.client, [store.experiment_id], page_size=2,
                                     tags={schema.ROLE: "trial", schema.SWEEP: "paged"})
    assert sorted(r.info.run_id for r in found) == sorted(ids)
    assert len(mlflow_query.search_runs(store.client, [store.experiment_id], page_size=2, limit=3,
                                        tags={schema.SWEEP: "paged"})) == 3


def test_an_interrupted_trial_is_killed_not_failed(store):
    """Ctrl-C or a stop signal in a trial ends its run KILLED with the reason; no error tag."""
    parent = start(store, "interrupted")
    ctx = ctx_for(store, "interrupted", parent)
    run = tracking.TrialRun.open(ctx, config(seed=5), "k-int")
    run.interrupt()
    got = store.client.get_run(run.run_id)
    assert got.info.status == "KILLED" and schema.ERROR not in got.data.tags
    assert got.data.tags[schema.RECONCILED] == tracking.INTERRUPTED
    left = tracking.TrialRun.open(ctx, config(seed=6), "k-left")  # a worker shut down mid-trial
    assert store.reconcile_orphans("interrupted", tracking.INTERRUPTED) == [left.run_id]
    assert store.client.get_run(left.run_id).info.status == "KILLED"


def test_results_csv_carries_code_family_and_design(store, tmp_path):
    """results.csv (issue 31 item 5): each row's code fingerprint, the comparison family and
    the adaptive design on every row, and the test split's majority rate column."""
    import io

    from fusion_sweep.plan.grid import plan
    from fusion_sweep.launch.summary import LaunchSummary, summarize

    points = plan(load_space("smoke"))
    parent = start(store, "csvcols")
    ctx = ctx_for(store, "csvcols", parent)
    run = tracking.TrialRun.open(ctx, points[0].config, points[0].key)
    run.log_result(fake_result(points[0].config))
    s = LaunchSummary(name="csvcols", total=len(points), experiment_path=str(tmp_path / "rr"))
    family = {"m": 1, "members": [{"dataset": "synthetic-short"}]}
    summarize(s, store, points, ctx, io.StringIO(), family=family, adaptive='{"method": "betting"}')
    rows = list(csv.DictReader(open(s.results_csv)))
    assert rows[0]["code_fingerprint"] == "c0de" and rows[1]["code_fingerprint"] == ""
    assert {r["comparison_family"] for r in rows} == {json.dumps(family, sort_keys=True)}
    assert {r["adaptive"] for r in rows} == {'{"method": "betting"}'}
    assert "test_majority_rate" in rows[0] and s.finished == 1 and s.missing == len(points) - 1


def test_trial_key_ignores_field_order():
    """A trial key is a fact of the config's values, not of the order its fields were built
    in (a resumed sweep rebuilds configs through another path)."""
    from fusion_sweep.schema import trial_key

    d = config(seed=2).to_dict()
    assert trial_key(d, "c0de") == trial_key(dict(reversed(list(d.items()))), "c0de")
    assert trial_key(d, "c0de") != trial_key({**d, "lr": d["lr"] * 2}, "c0de")

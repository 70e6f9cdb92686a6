"""MLflow tracking for sweeps: one parent run per sweep, one child run per trial.

The schema (tag, param and metric names, which `stats` reads back) is defined once, in
`fusion_sweep.schema`; docs/architecture.md shows it run by run.

A trial's run is found by its deterministic trial key (never by an in-memory map, unlike
Ray's `MLflowLoggerCallback`, ray#48664), so a restored or retried trial re-attaches to
its run instead of opening a duplicate. Runs left RUNNING by a crashed driver are marked
KILLED by `SweepTracker.reconcile_orphans` on the next launch.

We talk to MLflow only through `MlflowClient` with explicit run ids: no fluent
`mlflow.start_run` state, which would leak between trials when Ray reuses an actor.
"""
from __future__ import annotations

import csv
import json
import logging
import math
import os
import subprocess
import tempfile
import time
import traceback
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import fusion_sweep

if TYPE_CHECKING:  # pragma: no cover
    from mlflow.entities import Run

    from fusion_sweep.config import TrialConfig
    from fusion_sweep.trainer import EpochRecord, TrialResult

# The schema's one home (tag names, fingerprints, identity): fusion_sweep.schema.
from fusion_sweep.schema import (ATTEMPTS, CODE_FINGERPRINT, CODE_HISTORY,  # noqa: E402,F401
                                 DEFAULT_EXPERIMENT, EPOCH_METRICS, ERROR, FINAL_METRICS,
                                 FINGERPRINT_TAGS, GIT_COMMIT, GRID_HASH, IDENTITY_FIELDS,
                                 LAUNCH_ID, PARENT, ROLE, SWEEP, TRIAL_KEY, VERSION,
                                 code_fingerprint, default_tracking_uri, encode_param,
                                 resolve_tracking_uri)

log = logging.getLogger(__name__)


# ------------------------------------------------------------------ where runs go
def is_local_store(uri: str) -> bool:
    return uri.startswith("sqlite:") or uri.startswith("file:") or "://" not in uri


def check_tracking_uri(uri: str, timeout: float = 5.0) -> None:
    """Fail fast (ValueError) when the tracking store cannot be reached — before any trial."""
    if uri.startswith(("http://", "https://")):
        url = uri.rstrip("/") + "/health"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r:
                if r.status != 200:
                    raise OSError(f"HTTP {r.status}")
        except (OSError, urllib.error.URLError) as e:
            reason = getattr(e, "reason", e)
            raise ValueError(
                f"MLflow tracking server {uri} is not reachable ({reason}). Start it (e.g. "
                f"`mlflow server --host 127.0.0.1 --port 5000 --backend-store-uri "
                f"sqlite:///mlflow.db`), fix --tracking-uri / MLFLOW_TRACKING_URI, or leave both "
                f"unset to use the local store {default_tracking_uri()}"
            ) from None
    elif uri.startswith("sqlite:///"):
        db = Path(uri[len("sqlite:///"):])
        if not db.parent.is_dir() or not os.access(db.parent, os.W_OK):
            raise ValueError(f"tracking store {uri}: directory {db.parent} does not exist or is "
                             f"not writable")
    elif uri.startswith("file:") or "://" not in uri:
        raise ValueError(f"tracking URI {uri!r}: MLflow 3 refuses file stores; use "
                         f"{default_tracking_uri()} or an http(s):// server")


def git_commit(path: str | Path | None = None) -> str:
    """The checkout's commit (+ '-dirty' for uncommitted tracked changes), or 'unknown'."""
    root = Path(path or Path(fusion_sweep.__file__).resolve().parents[1])
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=5).stdout.strip()
        if not sha:
            return "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


@dataclass(frozen=True)
class TrackingContext:
    """Everything a trial needs to find its run; small and picklable (sent to Ray workers)."""

    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    sweep: str
    code_fingerprint: str  # the launching driver's; part of every trial key
    git_commit: str
    launch_id: str


_QUIETED = False


def _quiet_mlflow() -> None:
    """Once per process: no run link printed on every set_terminated (it would flood the
    progress display) and no alembic/sqlalchemy INFO lines on every store open. Process-wide
    on purpose: MLflow reads the variable, and these loggers are module-global."""
    global _QUIETED
    if _QUIETED:
        return
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    for name in ("alembic", "mlflow.store.db.utils", "mlflow.store.tracking.sqlalchemy_store"):
        logging.getLogger(name).setLevel(logging.WARNING)
    _QUIETED = True


def _client(uri: str):
    from mlflow.tracking import MlflowClient

    _quiet_mlflow()
    return MlflowClient(tracking_uri=uri)


def _q(value: str) -> str:
    return "'" + str(value).replace("'", "\\'") + "'"


def _params(config: "TrialConfig") -> dict[str, str]:
    """Identity fields first, then every hyperparameter (execution fields are tags)."""
    d = config.to_dict()
    out = {k: d[k] for k in IDENTITY_FIELDS}
    out.update(config.hyperparameters())
    return {k: str(v) for k, v in out.items()}


def _retry(fn, *args, tries: int = 5, **kwargs):
    """SQLite can report 'database is locked' under parallel writers: back off and retry."""
    for i in range(tries):
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - mlflow wraps sqlalchemy errors variously
            if i == tries - 1 or "locked" not in str(e).lower():
                raise
            time.sleep(0.2 * 2 ** i)


# ------------------------------------------------------------------- the driver side
class SweepTracker:
    """The launching process's view: experiment, parent run, orphan reconciliation, summary."""

    def __init__(self, tracking_uri: str, experiment: str = DEFAULT_EXPERIMENT):
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.client = _client(tracking_uri)
        self._experiment_id: str | None = None

    @property
    def experiment_id(self) -> str:
        if self._experiment_id is None:
            self._experiment_id = self.ensure_experiment()
        return self._experiment_id

    def ensure_experiment(self) -> str:
        exp = self.client.get_experiment_by_name(self.experiment)
        if exp is not None:
            if exp.lifecycle_stage == "deleted":
                self.client.restore_experiment(exp.experiment_id)
            return exp.experiment_id
        # A local store keeps artifacts next to mlflow.db; a server decides for itself
        # (`--serve-artifacts` proxies uploads from every node).
        location = None
        if self.tracking_uri.startswith("sqlite:///"):
            location = (Path(self.tracking_uri[len("sqlite:///"):]).parent / "mlartifacts").as_uri()
        try:
            return self.client.create_experiment(self.experiment, artifact_location=location)
        except Exception:  # created concurrently
            exp = self.client.get_experiment_by_name(self.experiment)
            if exp is None:
                raise
            return exp.experiment_id

    # parent run -----------------------------------------------------------------
    def find_parent(self, sweep: str) -> "Run | None":
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`{ROLE}` = 'sweep' and tags.`{SWEEP}` = {_q(sweep)}",
            order_by=["attributes.start_time ASC"], max_results=10)
        return runs[0] if runs else None

    def start_parent(self, sweep: str, *, grid_hash: str, n_trials: int, commit: str,
                     params: Mapping[str, Any], description: str = "",
                     code: str = "", code_history: str = "") -> str:
        """Create the sweep's parent run, or re-attach to it (status back to RUNNING).

        `params` values are logged as JSON (`schema.encode_param`), so `stats` reads dicts
        (per-dataset margins, metric directions) back as they were written.
        """
        run = self.find_parent(sweep)
        code = code or code_fingerprint()
        tags = {ROLE: "sweep", SWEEP: sweep, GRID_HASH: grid_hash, GIT_COMMIT: commit,
                CODE_FINGERPRINT: code, CODE_HISTORY: code_history or code,
                VERSION: fusion_sweep.__version__, "mlflow.source.git.commit": commit.split("-")[0],
                "fusion_sweep.n_trials": str(n_trials)}
        if description:
            tags["mlflow.note.content"] = description
        if run is None:
            run = self.client.create_run(self.experiment_id, run_name=sweep, tags=tags)
            from mlflow.entities import Param
            self.client.log_batch(run.info.run_id, params=[
                Param(k, encode_param(v)[:6000]) for k, v in params.items()])
            return run.info.run_id
        run_id = run.info.run_id
        self.client.update_run(run_id, status="RUNNING")
        for k, v in tags.items():
            self.client.set_tag(run_id, k, v)
        return run_id

    def finish_parent(self, run_id: str, status: str, metrics: Mapping[str, float],
                      artifacts: Iterable[Path] = ()) -> None:
        from mlflow.entities import Metric

        now, step = int(time.time() * 1000), self._next_step(run_id)
        self.client.log_batch(run_id, metrics=[Metric(k, float(v), now, step) for k, v in metrics.items()])
        for p in artifacts:
            self.client.log_artifact(run_id, str(p))
        self.client.set_terminated(run_id, status)

    def _next_step(self, run_id: str) -> int:
        hist = self.client.get_metric_history(run_id, "trials_finished")
        return max((m.step for m in hist), default=-1) + 1

    # trial runs ---------------------------------------------------------------------
    def trial_runs(self, sweep: str) -> list["Run"]:
        """Every trial run of the sweep (all statuses), oldest first."""
        out, token = [], None
        while True:
            page = self.client.search_runs(
                [self.experiment_id],
                filter_string=f"tags.`{ROLE}` = 'trial' and tags.`{SWEEP}` = {_q(sweep)}",
                order_by=["attributes.start_time ASC"], max_results=1000, page_token=token)
            out.extend(page)
            token = page.token
            if not token:
                return out

    def reconcile_orphans(self, sweep: str) -> list[str]:
        """Mark this sweep's runs still RUNNING (their driver died) as KILLED.

        Call before any trial of the sweep starts: at that moment nothing can be running.
        """
        killed = []
        for run in self.trial_runs(sweep):
            if run.info.status == "RUNNING":
                self.client.set_tag(run.info.run_id, "fusion_sweep.reconciled",
                                    "RUNNING at launch; its driver or node died")
                self.client.set_terminated(run.info.run_id, "KILLED")
                killed.append(run.info.run_id)
        return killed


# -------------------------------------------------------------------- the trial side
class TrialRun:
    """One trial's MLflow run, found (or created) by its trial key."""

    def __init__(self, ctx: TrackingContext, run_id: str, status: str, client):
        self.ctx, self.run_id, self.status, self.client = ctx, run_id, status, client

    @property
    def finished(self) -> bool:
        return self.status == "FINISHED"

    @classmethod
    def find(cls, ctx: TrackingContext, key: str, client=None) -> "Run | None":
        client = client or _client(ctx.tracking_uri)
        runs = _retry(
            client.search_runs, [ctx.experiment_id],
            filter_string=(f"tags.`{ROLE}` = 'trial' and tags.`{SWEEP}` = {_q(ctx.sweep)} "
                           f"and tags.`{TRIAL_KEY}` = {_q(key)}"),
            order_by=["attributes.start_time ASC"], max_results=10)
        if len(runs) > 1:  # should never happen; prefer a finished one, then the oldest
            log.warning("trial %s has %d MLflow runs in sweep %s", key, len(runs), ctx.sweep)
            runs = sorted(runs, key=lambda r: r.info.status != "FINISHED")
        return runs[0] if runs else None

    @classmethod
    def open(cls, ctx: TrackingContext, config: "TrialConfig", key: str,
             tags: Mapping[str, str] | None = None) -> "TrialRun":
        """Re-attach to the trial's run if one exists, else create it.

        A FINISHED run is returned untouched (`finished` is True): the caller skips training.
        Otherwise the run is (re)set RUNNING and its attempt counter incremented.
        """
        from mlflow.entities import Param, RunTag

        client = _client(ctx.tracking_uri)
        run = cls.find(ctx, key, client)
        extra = {k: str(v) for k, v in (tags or {}).items()}
        extra[LAUNCH_ID] = ctx.launch_id
        if run is not None:
            if run.info.status == "FINISHED":
                return cls(ctx, run.info.run_id, "FINISHED", client)
            attempts = int(run.data.tags.get(ATTEMPTS, "0") or 0) + 1
            _retry(client.update_run, run.info.run_id, status="RUNNING")
            extra[ATTEMPTS] = str(attempts)
            extra.pop(ERROR, None)
            _retry(client.log_batch, run.info.run_id, tags=[RunTag(k, v) for k, v in extra.items()])
            return cls(ctx, run.info.run_id, "RUNNING", client)

        c = config
        run_tags = {
            ROLE: "trial", SWEEP: ctx.sweep, PARENT: ctx.parent_run_id, TRIAL_KEY: key,
            GIT_COMMIT: ctx.git_commit, VERSION: fusion_sweep.__version__,
            CODE_FINGERPRINT: ctx.code_fingerprint,
            "mlflow.source.git.commit": ctx.git_commit.split("-")[0],
            ATTEMPTS: "1", **extra,
        }
        name = f"{c.dataset}.{c.pe}.{c.fusion}.s{c.seed}.{key[:8]}"
        run = _retry(client.create_run, ctx.experiment_id, run_name=name, tags=run_tags)
        _retry(client.log_batch, run.info.run_id,
               params=[Param(k, v) for k, v in _params(config).items()])
        return cls(ctx, run.info.run_id, "RUNNING", client)

    # logging ---------------------------------------------------------------------
    def log_epoch(self, record: "EpochRecord") -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        values = {k: getattr(record, k) for k in EPOCH_METRICS}
        values["epoch_seconds"] = record.seconds
        values["epoch_tokens_per_second"] = record.tokens_per_second
        _retry(self.client.log_batch, self.run_id, metrics=[
            Metric(k, float(v), now, int(record.epoch)) for k, v in values.items()])

    def log_result(self, result: "TrialResult") -> None:
        """Final metrics, fingerprints, artifacts; then FINISHED (last, so FINISHED ⇒ complete)."""
        from mlflow.entities import Metric, RunTag

        now = int(time.time() * 1000)
        metrics = result.metrics()
        missing = [k for k in FINAL_METRICS if k not in metrics]
        if missing:
            raise ValueError(f"TrialResult.metrics() lacks {missing}")
        tags = [RunTag(FINGERPRINT_TAGS[k], str(v)) for k, v in result.fingerprints.items()
                if k in FINGERPRINT_TAGS]
        tags.append(RunTag("fusion_sweep.device", result.device))
        _retry(self.client.log_batch, self.run_id, tags=tags, metrics=[
            Metric(k, float(v), now, 0) for k, v in metrics.items()
            if v is not None and not (isinstance(v, float) and math.isnan(v))])
        with tempfile.TemporaryDirectory(prefix="fusion_sweep_") as tmp:
            tmp = Path(tmp)
            (tmp / "result.json").write_text(json.dumps(result.to_json_dict(), indent=1, default=str))
            files = [tmp / "result.json"]
            if result.predictions:
                files.append(write_predictions_csv(result.predictions, tmp / "predictions.csv"))
            if result.checkpoint is not None:
                import torch

                torch.save(result.checkpoint, tmp / "checkpoint.pt")
                files.append(tmp / "checkpoint.pt")
            for f in files:
                _retry(self.client.log_artifact, self.run_id, str(f))
        _retry(self.client.set_terminated, self.run_id, "FINISHED")
        self.status = "FINISHED"

    def fail(self, exc: BaseException) -> None:
        """Record the error and end the run FAILED (Ray Tune may retry it: it re-attaches)."""
        msg = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        try:
            self.client.set_tag(self.run_id, ERROR, f"{type(exc).__name__}: {exc}"[:4000])
            with tempfile.TemporaryDirectory(prefix="fusion_sweep_") as tmp:
                p = Path(tmp) / "error.txt"
                p.write_text(msg)
                self.client.log_artifact(self.run_id, str(p))
        finally:
            self.client.set_terminated(self.run_id, "FAILED")
            self.status = "FAILED"

    def final_metrics(self) -> dict[str, float]:
        run = self.client.get_run(self.run_id)
        return {k: v for k, v in run.data.metrics.items() if k not in EPOCH_METRICS}


def write_predictions_csv(pred: Mapping[str, list], path: Path) -> Path:
    """index,label,pred,prob_0..prob_{k-1}: one row per test example."""
    probs = pred.get("probs") or []
    k = len(probs[0]) if probs else 0
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["index", "label", "pred"] + [f"prob_{j}" for j in range(k)])
        for i, row in enumerate(zip(pred["index"], pred["label"], pred["pred"])):
            w.writerow(list(row) + (list(probs[i]) if probs else []))
    return path


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
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timezone
from statistics import median as _median
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import fusion_sweep

if TYPE_CHECKING:  # pragma: no cover
    from mlflow.entities import Run

    from fusion_sweep.trial.config import TrialConfig
    from fusion_sweep.trial.trainer import EpochRecord, TrialResult

# The schema's one home (tag names, fingerprints, identity): fusion_sweep.schema.
from fusion_sweep.schema import (ATTEMPTS, CODE_FINGERPRINT, CODE_HISTORY,  # noqa: E402,F401
                                 DEFAULT_EXPERIMENT, DEVICE, EPOCH_EXTRA_METRICS, EPOCH_METRICS,
                                 ERROR, FINAL_METRICS, MLFLOW_GIT_COMMIT, MLFLOW_NOTE, N_TRIALS,
                                 PARENT_METRICS, RECONCILED,
                                 FINGERPRINT_TAGS, GIT_COMMIT, GRID_HASH, IDENTITY_FIELDS,
                                 IDENTITY_TAG,
                                 FINISHED, LAUNCH_ID, PARENT, ROLE, SWEEP, TRIAL_KEY, UI_ORDER,
                                 VERSION, code_fingerprint, default_tracking_uri, encode_param,
                                 is_server, resolve_tracking_uri, run_of_key, server_unreachable,
                                 sqlite_path)
from fusion_sweep.schema import KNOWN_DATASETS, PLATFORM_FIELD_TAGS  # noqa: E402
from fusion_sweep.trial.data.registry import DATASETS  # noqa: E402  (stdlib only)

log = logging.getLogger(__name__)

# A local store keeps its runs' artifacts in this folder next to its database file (the
# sweep's experiment and the `fusion-sweep ui` server agree on it).
LOCAL_ARTIFACTS = "mlartifacts"


# ------------------------------------------------------------------ where runs go
def is_local_store(uri: str) -> bool:
    return uri.startswith("sqlite:") or uri.startswith("file:") or "://" not in uri


def check_tracking_uri(uri: str, timeout: float = 5.0) -> None:
    """Fail fast (ValueError) when the tracking store cannot be reached — before any trial."""
    db = sqlite_path(uri)
    if is_server(uri):
        reason = server_unreachable(uri, timeout)
        if reason is not None:
            raise ValueError(
                f"MLflow tracking server {uri} is not reachable ({reason}). Start it (e.g. "
                f"`mlflow server --host 127.0.0.1 --port 5000 --backend-store-uri "
                f"sqlite:///mlflow.db`), fix --tracking-uri / MLFLOW_TRACKING_URI, or leave both "
                f"unset to use the local store {default_tracking_uri()}"
            ) from None
    elif db is not None:
        if not db.parent.is_dir() or not os.access(db.parent, os.W_OK):
            raise ValueError(f"tracking store {uri}: directory {db.parent} does not exist or is "
                             f"not writable")
    elif uri.startswith("file:") or "://" not in uri:
        raise ValueError(f"tracking URI {uri!r}: MLflow 3 refuses file stores; use "
                         f"{default_tracking_uri()} or an http(s):// server")
    else:  # ftp://, mysql://, ...: not a store this tool checks and writes to
        raise ValueError(f"tracking URI {uri!r}: unsupported scheme {uri.split('://', 1)[0]!r}; "
                         f"use an http(s):// MLflow server or a sqlite:/// store (default "
                         f"{default_tracking_uri()})")


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


def _status(run: "Run") -> str:
    return run.info.status


def _q(value: str) -> str:
    return "'" + str(value).replace("'", "\\'") + "'"


def _params(config: "TrialConfig") -> dict[str, str]:
    """Identity fields first, then every hyperparameter (execution fields are tags)."""
    out = config.identity()
    out.update(config.hyperparameters())  # `encoder` here is the registry name
    return {k: str(v) for k, v in out.items()}


# How long a trial keeps retrying an unreachable tracking server (a restart, a network blip)
# before its MLflow call fails (and the trial with it: Tune then retries the trial).
RETRY_SECONDS_ENV = "FUSION_SWEEP_MLFLOW_RETRY_SECONDS"
DEFAULT_RETRY_SECONDS = 90.0
# Substrings of errors worth retrying: SQLite's lock, and a server that is down, restarting or
# overloaded (requests/urllib3 connection errors as MLflow wraps them, 5xx gateway answers).
_TRANSIENT_MARKERS = ("database is locked", "locked", "connection refused", "connectionerror",
                      "max retries exceeded", "failed to establish a new connection",
                      "connection reset", "connection aborted", "remotedisconnected",
                      "read timed out", "timed out", "bad gateway", "service unavailable",
                      "gateway timeout", "response code 502", "response code 503",
                      "response code 504", "temporarily unavailable")


def _transient(exc: BaseException) -> bool:
    """True for errors a retry can cure: a locked SQLite store or an unreachable server."""
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    text = f"{type(exc).__name__}: {exc}".lower()
    return any(m in text for m in _TRANSIENT_MARKERS)


def _brief(exc: BaseException, width: int = 110) -> str:
    """An error in one line: its start and its end (where requests puts the cause)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 2 * width else f"{text[:width]} … {text[-width:]}"


def _retry_budget() -> float:
    try:
        return max(0.0, float(os.environ.get(RETRY_SECONDS_ENV, DEFAULT_RETRY_SECONDS)))
    except ValueError:
        return DEFAULT_RETRY_SECONDS


def _retry(fn, *args, tries: int | None = None, budget: float | None = None,
           sleep=time.sleep, **kwargs):
    """Call fn; on a transient error (SQLite 'database is locked', the tracking server down or
    restarting) back off exponentially (0.2 s doubling, at most 8 s a wait) and try again,
    until `budget` seconds of waiting are spent ($FUSION_SWEEP_MLFLOW_RETRY_SECONDS, default
    90 s; MLflow's own HTTP retries run inside each call too) or `tries` calls were made.
    Other errors, and the last transient one, are raised: the trial then fails and Tune
    retries it, re-attaching to its run by key.

    Not idempotent calls (create_run) are retried too: a server killed after committing but
    before answering could leave a second run; TrialRun.find then prefers the FINISHED one.
    """
    budget = _retry_budget() if budget is None else budget
    waited, i = 0.0, 0
    while True:
        i += 1
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - mlflow wraps sqlalchemy/requests errors variously
            delay = min(8.0, 0.2 * 2 ** (i - 1))
            if not _transient(e) or (tries is not None and i >= tries) or waited + delay > budget:
                raise
            log.warning("MLflow call %s failed (%s); retrying in %.1f s (%.0f of %.0f s spent)",
                        getattr(fn, "__name__", fn), _brief(e), delay, waited, budget)
            sleep(delay)
            waited += delay


# ------------------------------------------------------------------- the driver side
class SweepTracker:
    """The launching process's view: experiment, parent run, orphan reconciliation, summary."""

    def __init__(self, tracking_uri: str, experiment: str = DEFAULT_EXPERIMENT):
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.client = _client(tracking_uri)
        self._experiment_id: str | None = None
        self._by_key: dict[str, dict[str, "Run"]] = {}

    @property
    def experiment_id(self) -> str:
        if self._experiment_id is None:
            self._experiment_id = self.ensure_experiment()
        return self._experiment_id

    def ensure_experiment(self) -> str:
        """The experiment's id (created or restored), marked for the model-training UI."""
        exp_id = self._find_or_create_experiment()
        try:
            mark_training_experiment(self.client, exp_id)
        except Exception as e:  # noqa: BLE001 - a UI nicety must never stop a sweep
            log.warning("could not set the MLflow UI view of experiment %s: %s", exp_id, e)
        return exp_id

    def _find_or_create_experiment(self) -> str:
        exp = self.client.get_experiment_by_name(self.experiment)
        if exp is not None:
            if exp.lifecycle_stage == "deleted":
                self.client.restore_experiment(exp.experiment_id)
            return exp.experiment_id
        # A local store keeps artifacts next to mlflow.db; a server decides for itself
        # (`--serve-artifacts` proxies uploads from every node).
        db = sqlite_path(self.tracking_uri)
        location = (db.parent / LOCAL_ARTIFACTS).as_uri() if db is not None else None
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
                VERSION: fusion_sweep.__version__, MLFLOW_GIT_COMMIT: commit.split("-")[0],
                N_TRIALS: str(n_trials), KNOWN_DATASETS: json.dumps(sorted(DATASETS))}
        if description:
            tags[MLFLOW_NOTE] = description
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
        hist = self.client.get_metric_history(run_id, PARENT_METRICS[0])
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

    def runs_by_key(self, sweep: str) -> dict[str, "Run"]:
        """{trial key: the key's run (`schema.run_of_key`)} of the sweep; cached for the length
        of one launch round (`forget` drops the cache once the round's trials have run)."""
        if sweep not in self._by_key:
            grouped: dict[str, list] = {}
            for r in self.trial_runs(sweep):  # oldest first
                grouped.setdefault(r.data.tags.get(TRIAL_KEY, ""), []).append(r)
            self._by_key[sweep] = {k: run_of_key(rs, _status) for k, rs in grouped.items()}
        return self._by_key[sweep]

    def forget(self) -> None:
        """Read MLflow afresh on the next `runs_by_key` (trials have run since)."""
        self._by_key.clear()

    def trial_status(self, sweep: str, key: str) -> tuple[str, str]:
        """(status, run id) of the trial's run, ("", "") when it has none: the resume rule's
        one question."""
        r = self.runs_by_key(sweep).get(key)
        return (r.info.status, r.info.run_id) if r is not None else ("", "")

    def finished_values(self, sweep: str, metric: str) -> dict[str, float]:
        """{trial key: metric} of the sweep's FINISHED trials with a finite metric."""
        out: dict[str, float] = {}
        for key, r in self.runs_by_key(sweep).items():
            v = r.data.metrics.get(metric)
            if r.info.status == FINISHED and v is not None and math.isfinite(v):
                out[key] = float(v)
        return out

    def reconcile_orphans(self, sweep: str) -> list[str]:
        """Mark this sweep's runs still RUNNING (their driver died) as KILLED.

        Call before any trial of the sweep starts: at that moment nothing can be running.
        """
        killed = []
        for run in self.trial_runs(sweep):
            if run.info.status == "RUNNING":
                self.client.set_tag(run.info.run_id, RECONCILED,
                                    "RUNNING at launch; its driver or node died")
                self.client.set_terminated(run.info.run_id, "KILLED")
                killed.append(run.info.run_id)
        self.forget()
        return killed

    def fail_dead_trials(self, sweep: str, reasons: Mapping[str, str]) -> list[str]:
        """End FAILED, with its reason, the run of every trial key in `reasons` that is still
        RUNNING: its worker died (killed by Ray's memory monitor, a signal, a lost node) on
        Tune's last attempt, so no trial code was left to close it. One search for the sweep.
        Returns the run ids it failed."""
        failed = []
        for run in self.trial_runs(sweep):
            reason = reasons.get(run.data.tags.get(TRIAL_KEY, ""))
            if reason is not None and run.info.status == "RUNNING":
                _retry(self.client.set_tag, run.info.run_id, ERROR, reason[:4000])
                _retry(self.client.set_terminated, run.info.run_id, "FAILED")
                failed.append(run.info.run_id)
        self.forget()
        return failed


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
        if len(runs) > 1:  # should never happen (see schema.run_of_key)
            log.warning("trial %s has %d MLflow runs in sweep %s", key, len(runs), ctx.sweep)
        return run_of_key(runs, _status)

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
        extra.update(config.label_tags())
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
            IDENTITY_TAG: json.dumps(config.identity(), sort_keys=True),
            MLFLOW_GIT_COMMIT: ctx.git_commit.split("-")[0],
            ATTEMPTS: "1", **extra,
        }
        ident = c.identity()
        name = ".".join(str(ident[k]) for k in IDENTITY_FIELDS if k != "seed") + f".s{c.seed}.{key[:8]}"
        run = _retry(client.create_run, ctx.experiment_id, run_name=name, tags=run_tags)
        _retry(client.log_batch, run.info.run_id,
               params=[Param(k, v) for k, v in _params(config).items()])
        return cls(ctx, run.info.run_id, "RUNNING", client)

    # logging ---------------------------------------------------------------------
    def log_epoch(self, record: "EpochRecord") -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        values = {k: getattr(record, k) for k in EPOCH_METRICS}
        values.update(zip(EPOCH_EXTRA_METRICS, (record.seconds, record.tokens_per_second)))
        _retry(self.client.log_batch, self.run_id, metrics=[
            Metric(k, float(v), now, int(record.epoch)) for k, v in values.items()])

    def log_result(self, result: "TrialResult", extra_metrics: Mapping[str, float] | None = None
                   ) -> None:
        """Final metrics, fingerprints, artifacts; then FINISHED (last, so FINISHED ⇒ complete).
        `extra_metrics`: what the sweep layer measured around the trial (e.g. peak RSS)."""
        from mlflow.entities import Metric, RunTag

        now = int(time.time() * 1000)
        metrics = {**result.metrics(), **(extra_metrics or {})}
        missing = [k for k in FINAL_METRICS if k not in metrics]
        if missing:
            raise ValueError(f"TrialResult.metrics() lacks {missing}")
        tags = [RunTag(FINGERPRINT_TAGS[k], str(v)) for k, v in result.fingerprints.items()
                if k in FINGERPRINT_TAGS]
        tags.append(RunTag(DEVICE, result.device))
        # The platform's fields, readable (its hash is the fp.platform fingerprint above).
        tags += [RunTag(PLATFORM_FIELD_TAGS[k], str(v)) for k, v in result.platform.items()
                 if k in PLATFORM_FIELD_TAGS]
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



# ------------------------------------------------------------------ the MLflow UI
# What `fusion-sweep ui` serves and where it lands. Measured on MLflow 3.17 (its JS bundle,
# mlflow/server/js/build): the experiment page picks its GenAI ("Overview": traces, latency,
# tokens) or model-training ("Runs") layout from the *workflow type* — the `workflowType` URL
# query parameter (`genai` | `machine_learning`), else the browser's localStorage, default
# `genai` — not from the experiment tag `mlflow.experimentKind` (the tag is read only when
# that switch is off, which 3.17 hard-codes on). So the printed URL carries
# `workflowType=machine_learning`; the tag is still set for MLflow versions that read it.
# A URL without the parameter (the plain root, a run's own page) would open the GenAI layout;
# `fusion-sweep ui` therefore serves mlflow behind fusion_sweep.ui_proxy, which stores the
# training layout in the browser's localStorage and sends a bare root to the trials view.
# Columns, filter, sort and grouping are UI state, not URL parameters: MLflow keeps shareable
# views as experiment tags `mlflow.sharedViewState.<id>` and opens one with
# `?viewStateShareKey=<id>`; `mark_training_experiment` writes such a view of the trials.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
TRAINING_KIND = "custom_model_development"  # the other value: genai_development
SHARED_VIEW_PREFIX = "mlflow.sharedViewState."
TRIALS_VIEW_ID = "fusion-sweep-trials"
TRIALS_VIEW_NAME = "fusion-sweep: trials by sweep"
UI_COLUMNS_METRICS = ("test_acc", "best_val_acc", "test_macro_f1", "train_seconds")


def default_ui_store() -> str:
    """What `fusion-sweep ui` serves without --backend-store-uri: $MLFLOW_TRACKING_URI when it
    names a sqlite store (a tracking *server* is browsed directly), else ./mlflow.db."""
    env = os.environ.get("MLFLOW_TRACKING_URI", "")
    return env if env.startswith("sqlite:") else default_tracking_uri()


def view_columns() -> list[str]:
    """The runs table's columns after the run name: identity params, then final metrics."""
    return ([f"params.`{k}`" for k in IDENTITY_FIELDS]
            + [f"metrics.`{m}`" for m in UI_COLUMNS_METRICS])


RUN_NAME_COLUMN = "tags.`mlflow.runName`"
# Pixels per character of the runs table's font, and room for the header's sort/menu icons.
_CHAR_PX, _PAD_PX, _MIN_PX, _MAX_PX = 8, 44, 70, 440


def column_widths(values: Mapping[str, Iterable[str]] | None = None) -> dict[str, int]:
    """A width for every view column: wide enough for its header and for every value given
    (column -> the strings it shows), so no identity value is cut ('con…')."""
    out = {}
    for col in [RUN_NAME_COLUMN, *view_columns()]:
        name = "Run Name" if col == RUN_NAME_COLUMN else col.split("`")[1]
        longest = max([len(name), *(len(str(v)) for v in (values or {}).get(col, ()))])
        out[col] = min(_MAX_PX, max(_MIN_PX, _CHAR_PX * longest + _PAD_PX))
    return out


def trials_view_state(sweep: str | None = None,
                      widths: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The runs-table view `fusion-sweep ui` opens: one sweep's trial runs (every trial
    without `sweep`), sorted short -> long regime, then variant, then seed (the UI_ORDER
    tag), identity params and the final metrics as columns, one width per column. No
    grouping: a group row's aggregates (mean test_acc over every trial, mean seed) mean
    nothing. Keys are MLflow 3.17's runs-page UI state and search facets."""
    cols = view_columns()
    where = f"tags.`{ROLE}` = 'trial'" + (f" and tags.`{SWEEP}` = {_q(sweep)}" if sweep else "")
    return {
        "searchFilter": where,
        "orderByKey": f"tags.`{UI_ORDER}`", "orderByAsc": True,
        "startTime": "ALL", "lifecycleFilter": "Active", "modelVersionFilter": "All Runs",
        "datasetsFilter": [],
        "selectedColumns": cols,
        # The grid puts metric columns before params unless told; Created/Duration go last.
        "columnOrder": [RUN_NAME_COLUMN, *cols, "attributes.start_time", "duration"],
        "columnWidths": dict(widths or column_widths()),
    }


def order_trials(client, experiment_id: str, sweep: str) -> dict[str, list[str]]:
    """Tag each trial run of `sweep` with UI_ORDER (regime short -> long by the median
    token length it logged, else by dataset name; then encoder/pe/fusion; then seed), and
    return the identity values shown (view column -> strings), for the column widths."""
    runs = client.search_runs([experiment_id], max_results=50_000, filter_string=(
        f"tags.`{ROLE}` = 'trial' and tags.`{SWEEP}` = {_q(sweep)}"))
    tokens: dict[str, list[float]] = {}
    for r in runs:
        t = r.data.metrics.get("median_tokens")
        if t is not None and math.isfinite(t):
            tokens.setdefault(r.data.params.get("dataset", ""), []).append(t)
    datasets = {r.data.params.get("dataset", "") for r in runs}
    ranked = sorted(datasets, key=lambda d: (_median(tokens.get(d) or [math.inf]), d))
    rank = {d: i for i, d in enumerate(ranked)}
    shown: dict[str, list[str]] = {}
    for r in runs:
        p = r.data.params
        variant = "/".join(p.get(k, "") for k in IDENTITY_FIELDS if k not in ("dataset", "seed"))
        seed = p.get("seed", "")
        order = f"{rank[p.get('dataset', '')]:02d}/{variant}/{seed.zfill(6)}"
        if r.data.tags.get(UI_ORDER) != order:
            _retry(client.set_tag, r.info.run_id, UI_ORDER, order)
        for k in IDENTITY_FIELDS:
            shown.setdefault(f"params.`{k}`", []).append(p.get(k, ""))
        shown.setdefault(RUN_NAME_COLUMN, []).append(r.info.run_name or "")
    return shown


def sweep_runs(client, experiment_id: str) -> list["Run"]:
    """The experiment's sweep parent runs, newest first."""
    return client.search_runs([experiment_id], filter_string=f"tags.`{ROLE}` = 'sweep'",
                              order_by=["attributes.start_time DESC"], max_results=1000)


def list_sweeps(store: str, experiment: str = DEFAULT_EXPERIMENT) -> list[dict[str, Any]]:
    """Every sweep of `experiment` in `store`, newest first: name, state, trial counts by
    status (and the planned total), code fingerprint, start and end (UTC, ISO); [] when
    the store or the experiment does not exist."""
    db = sqlite_path(store)
    if db is not None and not db.is_file():
        return []
    client = _client(store)
    exp = client.get_experiment_by_name(experiment)
    if exp is None or exp.lifecycle_stage == "deleted":
        return []
    out = []
    for parent in sweep_runs(client, exp.experiment_id):
        name = parent.data.tags.get(SWEEP, parent.info.run_name)
        trials = client.search_runs([exp.experiment_id], max_results=50_000, filter_string=(
            f"tags.`{ROLE}` = 'trial' and tags.`{SWEEP}` = {_q(name)}"))
        counts: dict[str, int] = {}
        for t in trials:
            counts[t.info.status] = counts.get(t.info.status, 0) + 1
        out.append({"sweep": name, "state": parent.info.status,
                    "planned": parent.data.tags.get(N_TRIALS),
                    "trials": counts, "code_fingerprint": parent.data.tags.get(CODE_FINGERPRINT),
                    "start": _iso(parent.info.start_time), "end": _iso(parent.info.end_time)})
    return out


def _iso(ms: int | None) -> str | None:
    if not ms:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")


def mark_training_experiment(client, experiment_id: str, sweep: str | None = None,
                             widths: Mapping[str, int] | None = None) -> bool:
    """Mark an experiment as model training for the MLflow UI and (re)write the trials view.

    Sets `mlflow.experimentKind=custom_model_development` and the experiment tag
    `mlflow.sharedViewState.fusion-sweep-trials` (a saved view, listed under "Views" on the
    Runs page). Idempotent: writes only what differs. Returns True when something was written.
    Call where the experiment is created (SweepTracker.ensure_experiment) and before serving.
    """
    exp = client.get_experiment(experiment_id)
    tags = dict(exp.tags or {})
    wrote = False
    if tags.get(EXPERIMENT_KIND_TAG) != TRAINING_KIND:
        client.set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, TRAINING_KIND)
        wrote = True
    state = json.dumps(trials_view_state(sweep, widths), sort_keys=True)
    key = SHARED_VIEW_PREFIX + TRIALS_VIEW_ID
    try:
        old = json.loads(tags.get(key) or "{}")
    except json.JSONDecodeError:
        old = {}
    if not isinstance(old, dict) or old.get("state") != state or old.get("name") != TRIALS_VIEW_NAME:
        now = int(time.time() * 1000)
        created = old.get("createdAt") if isinstance(old, dict) else None
        client.set_experiment_tag(experiment_id, key, json.dumps({
            "name": TRIALS_VIEW_NAME, "createdAt": created if isinstance(created, int) else now,
            "updatedAt": now, "state": state}))
        wrote = True
    return wrote


def ui_url(base: str, experiment_id: str | None = None) -> str:
    """The page `fusion-sweep ui` prints: the experiment's Runs tab in the model-training
    layout with the trials view, e.g.
    http://127.0.0.1:5000/#/experiments/1/runs?workflowType=machine_learning&viewStateShareKey=fusion-sweep-trials;
    without an experiment, the experiment list in that layout."""
    base = base.rstrip("/")
    if experiment_id is None:
        return f"{base}/#/experiments?workflowType=machine_learning"
    return (f"{base}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"
            f"&viewStateShareKey={TRIALS_VIEW_ID}")


def prepare_ui_experiment(store: str, experiment: str = DEFAULT_EXPERIMENT,
                          sweep: str | None = None) -> tuple[str | None, str | None]:
    """(experiment id, sweep) the UI opens on: `experiment` in `store` marked for the UI
    (`mark_training_experiment`), its trials tagged in order (`order_trials`), the view
    filtered to `sweep` (default: the newest sweep). (None, None) when the store or the
    experiment does not exist yet (never creates either); ValueError for an unknown sweep."""
    db = sqlite_path(store)
    if db is not None and not db.is_file():
        if sweep:
            raise ValueError(f"--sweep {sweep}: no store at {db} (no sweep launched here)")
        return None, None
    client = _client(store)
    exp = client.get_experiment_by_name(experiment)
    if exp is None or exp.lifecycle_stage == "deleted":
        if sweep:
            raise ValueError(f"--sweep {sweep}: no experiment {experiment!r} in {store}")
        return None, None
    names = [r.data.tags.get(SWEEP, r.info.run_name) for r in sweep_runs(client, exp.experiment_id)]
    if sweep is not None and sweep not in names:
        raise ValueError(f"--sweep {sweep}: no such sweep in experiment {experiment!r} of "
                         f"{store}; sweeps: {', '.join(names) or 'none'} "
                         f"(`fusion-sweep sweeps` lists them)")
    sweep = sweep or (names[0] if names else None)
    shown = _retry(order_trials, client, exp.experiment_id, sweep) if sweep else {}
    _retry(mark_training_experiment, client, exp.experiment_id, sweep, column_widths(shown))
    return exp.experiment_id, sweep


def port_free(host: str, port: int) -> bool:
    """True when nothing listens on host:port (binding it would succeed)."""
    import socket

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
                 artifacts: Path | None = None, quiet: bool = True):
        self.store, self.host, self.port, self.quiet = store, host, port, quiet
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
        import sys

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
                                     stdin=subprocess.DEVNULL)
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
        import signal

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

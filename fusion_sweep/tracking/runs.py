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
import dataclasses
import json
import logging
import math
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import fusion_sweep
from fusion_sweep import mlflow_query
from fusion_sweep.mlflow_query import retry
from fusion_sweep.schema import (ATTEMPTS, CODE_FINGERPRINT, CODE_HISTORY, DEFAULT_EXPERIMENT, DEVICE,
                                 EPOCH_EXTRA_METRICS, EPOCH_METRICS, ERROR, FINAL_METRICS,
                                 FINGERPRINT_TAGS, FINISHED, GIT_COMMIT, GRID_HASH, IDENTITY_FIELDS,
                                 IDENTITY_TAG, KNOWN_DATASETS, KNOWN_FUSIONS, LAUNCH_ID, MLFLOW_GIT_COMMIT,
                                 MLFLOW_NOTE, N_TRIALS, PARENT, PARENT_METRICS, PLATFORM_FIELD_TAGS,
                                 RECONCILED, ROLE, SUPERSEDED, SWEEP, TRIAL_KEY, VERSION,
                                 encode_param, run_of_key, sqlite_path)
from fusion_sweep.tracking.store import LOCAL_ARTIFACTS
from fusion_sweep.tracking.store import client as _client
from fusion_sweep.trial.data.registry import DATASETS
from fusion_sweep.tracking.view import mark_training_experiment

if TYPE_CHECKING:  # pragma: no cover
    from mlflow.entities import Run

    from fusion_sweep.trial.config import TrialConfig
    from fusion_sweep.trial.trainer import EpochRecord, TrialResult

log = logging.getLogger(__name__)

# Why a trial's run ended KILLED when its sweep was stopped (its RECONCILED tag).
INTERRUPTED = "interrupted: the sweep was stopped (Ctrl-C or a stop signal) while it ran"


@dataclass(frozen=True)
class TrackingContext:
    """Everything a trial needs to find its run; small and picklable (sent to Ray workers)."""

    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    sweep: str
    code_fingerprint: str  # the sweep's (`grid.code_of`); each trial run tags its own
    git_commit: str
    launch_id: str



def _status(run: "Run") -> str:
    return run.info.status


def _params(config: "TrialConfig") -> dict[str, str]:
    """Identity fields first, then every hyperparameter (execution fields are tags)."""
    out = config.identity()
    out.update(config.hyperparameters())  # `encoder` here is the registry name
    return {k: str(v) for k, v in out.items()}


# How long a trial keeps retrying an unreachable tracking server (a restart, a network blip)

# ------------------------------------------------------------------- the driver side
def _fusion_order() -> list[str]:
    """The FUSIONS registry's names in order (its place fixes a fusion's colour)."""
    from fusion_sweep.trial.models.fusion import FUSIONS  # torch: only where a sweep starts
    return list(FUSIONS)


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
        runs = mlflow_query.search_runs(self.client, [self.experiment_id],
                                        tags={ROLE: "sweep", SWEEP: sweep}, limit=1)
        return runs[0] if runs else None

    def start_parent(self, sweep: str, *, grid_hash: str, n_trials: int, commit: str,
                     params: Mapping[str, Any], description: str = "",
                     code: str = "", code_history: str = "") -> str:
        """Create the sweep's parent run, or re-attach to it (status back to RUNNING).

        `params` values are logged as JSON (`schema.encode_param`), so `stats` reads dicts
        (per-dataset margins, metric directions) back as they were written.
        """
        run = self.find_parent(sweep)
        tags = {ROLE: "sweep", SWEEP: sweep, GRID_HASH: grid_hash, GIT_COMMIT: commit,
                CODE_FINGERPRINT: code, CODE_HISTORY: code_history or code,
                VERSION: fusion_sweep.__version__, MLFLOW_GIT_COMMIT: commit.split("-")[0],
                N_TRIALS: str(n_trials), KNOWN_DATASETS: json.dumps(sorted(DATASETS)),
                KNOWN_FUSIONS: json.dumps(_fusion_order())}
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

    def mark_superseded(self, superseded: Mapping[str, str]) -> None:
        """Tag each old run (id -> the key of the trial that replaces it) `SUPERSEDED`: a
        relaunch retrains its trial under new code. The run itself is kept."""
        for run_id, key in superseded.items():
            retry(self.client.set_tag, run_id, SUPERSEDED, key)
        if superseded:
            self.forget()

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
        return mlflow_query.search_runs(self.client, [self.experiment_id],
                                        tags={ROLE: "trial", SWEEP: sweep})

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

    def reconcile_orphans(self, sweep: str,
                          reason: str = "RUNNING at launch; its driver or node died") -> list[str]:
        """Mark this sweep's runs still RUNNING as KILLED, with `reason`.

        Call when nothing of the sweep can be running: before any trial starts (their driver
        died), or after an interrupted launch shut Ray down (`INTERRUPTED`).
        """
        killed = []
        for run in self.trial_runs(sweep):
            if run.info.status == "RUNNING":
                retry(self.client.set_tag, run.info.run_id, RECONCILED, reason)
                retry(self.client.set_terminated, run.info.run_id, "KILLED")
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
                retry(self.client.set_tag, run.info.run_id, ERROR, reason[:4000])
                retry(self.client.set_terminated, run.info.run_id, "FAILED")
                failed.append(run.info.run_id)
        self.forget()
        return failed


# -------------------------------------------------------------------- the trial side
RUN_NAME_SEP = "\u00b7"  # a middle dot: short, and in no dataset, encoder, pe or fusion name


def trial_run_name(config: "TrialConfig") -> str:
    """A trial run's name, short enough for the UI's run-name column: `long·concat·s0`. The
    dataset without its kind's prefix (`synthetic-long` -> `long`; a hub or package dataset
    keeps its name); the encoder and pe only when not their TrialConfig defaults (the
    identity columns show them); the seed. Unique within a sweep: the trial key (in a tag)
    identifies the run, not its name."""
    spec = DATASETS[config.dataset]
    dataset = config.dataset.removeprefix(f"{spec.kind}-")
    defaults = {f.name: f.default for f in dataclasses.fields(config)}
    variant = [str(getattr(config, k)) for k in ("encoder", "pe")
               if getattr(config, k) != defaults.get(k)]
    return RUN_NAME_SEP.join([dataset, *variant, config.fusion, f"s{config.seed}"])


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
        runs = mlflow_query.search_runs(client, [ctx.experiment_id], tags={
            ROLE: "trial", SWEEP: ctx.sweep, TRIAL_KEY: key}, limit=10)
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
            retry(client.update_run, run.info.run_id, status="RUNNING")
            extra[ATTEMPTS] = str(attempts)
            extra.pop(ERROR, None)
            # A driver killed between create_run and its log_batch left the run without
            # params: log the ones it lacks (MLflow cannot create a run with its params).
            lacking = {k: v for k, v in _params(config).items() if k not in run.data.params}
            retry(client.log_batch, run.info.run_id, tags=[RunTag(k, v) for k, v in extra.items()],
                  params=[Param(k, v) for k, v in lacking.items()])
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
        run = retry(client.create_run, ctx.experiment_id, run_name=trial_run_name(c),
                    tags=run_tags)
        retry(client.log_batch, run.info.run_id,
               params=[Param(k, v) for k, v in _params(config).items()])
        return cls(ctx, run.info.run_id, "RUNNING", client)

    # logging ---------------------------------------------------------------------
    def log_epoch(self, record: "EpochRecord") -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        values = {k: getattr(record, k) for k in EPOCH_METRICS}
        values.update(zip(EPOCH_EXTRA_METRICS, (record.seconds, record.tokens_per_second)))
        retry(self.client.log_batch, self.run_id, metrics=[
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
        retry(self.client.log_batch, self.run_id, tags=tags, metrics=[
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
                retry(self.client.log_artifact, self.run_id, str(f))
        retry(self.client.set_terminated, self.run_id, "FINISHED")
        self.status = "FINISHED"

    def fail(self, exc: BaseException, reason: str | None = None) -> None:
        """Record the error (`reason`: its one line, default `Type: message`) and its
        traceback, and end the run FAILED (Ray Tune may retry it: it re-attaches)."""
        msg = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        try:
            self.client.set_tag(self.run_id, ERROR, (reason or f"{type(exc).__name__}: {exc}")[:4000])
            with tempfile.TemporaryDirectory(prefix="fusion_sweep_") as tmp:
                p = Path(tmp) / "error.txt"
                p.write_text(msg)
                self.client.log_artifact(self.run_id, str(p))
        finally:
            self.client.set_terminated(self.run_id, "FAILED")
            self.status = "FAILED"

    def interrupt(self) -> None:
        """End the run KILLED: the sweep was interrupted (Ctrl-C, a stop signal, Ray shutting
        the worker down), which is no failure of the trial; the next launch trains it again."""
        retry(self.client.set_tag, self.run_id, RECONCILED, INTERRUPTED)
        retry(self.client.set_terminated, self.run_id, "KILLED")
        self.status = "KILLED"

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



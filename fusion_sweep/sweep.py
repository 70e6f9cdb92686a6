"""Ray Tune orchestration: one Tune trial per (dataset, encoder, pe, fusion, seed).

`launch()` is `fusion-sweep launch`:

1. load and validate the search space (nothing starts on bad input);
2. check the tracking store and the Ray address are reachable;
3. open (or re-attach to) the sweep's MLflow parent run and mark runs orphaned by a
   killed driver KILLED;
4. start a local Ray sized to the machine, or connect to `--address`;
5. run the grid points not yet FINISHED in MLflow through a fresh
   `ray.tune.Tuner(reuse_actors=True)` with `FailureConfig` retries: finished trials are
   never re-run, interrupted and errored ones run again (with `--until-decided`, further
   rounds of seed points, `fusion_sweep.adaptive`);
6. print a summary (done / failed / retried, where results are, what to run next).

Resume has one rule: a grid point whose MLflow run (found by its trial key) is FINISHED is
never trained again; every other point is. Each launch runs a fresh Tuner over the points
still to train, so Tune's saved state is never needed, and a SIGKILLed driver loses at most
the trials that were running (their runs are marked KILLED on the next launch and trained
again under the same run). A lock file keeps a second driver off a sweep that is running.

The optional hyperparameter search before a sweep (`fusion-sweep tune`, Optuna) lives in
`fusion_sweep.hpsearch`; in this package "tune" means Ray Tune.
"""
from __future__ import annotations

import csv
import json
import os
import socket
import sys
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, TextIO

from fusion_sweep import schema, signals, tracking
from fusion_sweep.adaptive import AdaptiveSettings, AdaptiveState, next_round
from fusion_sweep.diskwatch import DiskWatch
from fusion_sweep.grid import GridPoint, format_grid, grid_hash, plan
from fusion_sweep.progress import SweepProgress
from fusion_sweep.ray_setup import check_ray_address, configure_ray_env, init_ray, resolve_storage
from fusion_sweep.schema import (ADAPTIVE, COMPARISON_FAMILY, ERROR, FINISHED, IDENTITY_FIELDS, LOOPBACK_HOSTS,
                                 code_fingerprint)
from fusion_sweep.schema import PLATFORM_LABEL_COLUMN, platform_from_tags, platform_label
from fusion_sweep.placement import check_local_pin, trial_resources, warn_mixed_platforms
from fusion_sweep.space import SearchSpace, load_space
from fusion_sweep.trial.config import TrialConfig
from fusion_sweep.trial.data.registry import DATASETS
from fusion_sweep.trial.data.synthetic import SyntheticParams
from fusion_sweep.trial.data.tokenize import TokenizerSettings
from fusion_sweep.trial.heap import release_freed_memory
from fusion_sweep.trial.models.encoder import ENCODERS
from fusion_sweep.trial.trainer import train_trial

# ------------------------------------------------------------------------- preflight
class SweepLock:
    """One driver per sweep: an exclusive `flock` on a file in the sweep's local Tune directory.

    Atomic (two launches starting within the same millisecond: exactly one gets it) and never
    stale (the kernel releases it when the driver dies, even by SIGKILL). The file keeps the
    holder's pid and host for the refusal message; it is not deleted on exit (deleting it
    would let a waiter lock the unlinked inode while a newcomer locks a new file).
    """

    def __init__(self, exp_dir: str):
        self.path = Path(exp_dir) / ".driver.lock" if "://" not in exp_dir else None
        self._fd: int | None = None

    def __enter__(self) -> "SweepLock":
        if self.path is None:
            return self
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            try:
                info = json.loads(self.path.read_text() or "{}")
            except (OSError, json.JSONDecodeError):
                info = {}
            holder = f"driver pid {info.get('pid', '?')} on {info.get('host', '?')}"
            raise ValueError(f"sweep already running: {holder} holds {self.path}; wait for it, "
                             f"or stop it to resume here") from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode())
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)
            finally:
                os.close(self._fd)  # releases the flock
                self._fd = None


# -------------------------------------------------------------------------- the trial
def _node_tags() -> dict[str, str]:
    import ray

    tags = {schema.HOSTNAME: socket.gethostname()}
    if ray.is_initialized():
        tags[schema.NODE_ID] = ray.get_runtime_context().get_node_id()
        tags[schema.NODE_IP] = ray.util.get_node_ip_address()
    return tags


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MiB (Linux reports KiB). A Ray actor
    runs several trials in turn (reuse_actors), so this is the peak up to and including this
    trial: an upper bound of the trial's own."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _ident(config: Mapping[str, Any]) -> tuple:
    """The grid point of a Tune trial config: `{"trial": {identity field: value}}`."""
    t = config.get("trial", config)
    return tuple(int(t[f]) if f == "seed" else t[f] for f in IDENTITY_FIELDS)


def run_trial(config: dict, *, ctx, configs: dict) -> None:
    """The Ray Tune function trainable: one grid point, tracked in its own MLflow run.

    Holds no state between trials (Ray reuses the actor); the trainer seeds every stream
    from the trial's seed. `configs` maps the identity (schema.IDENTITY_FIELDS) → TrialConfig dict.
    """
    from ray import tune

    tc = TrialConfig.from_dict(configs[_ident(config)])
    if code_fingerprint() != ctx.code_fingerprint:  # a node runs other code than the driver
        raise RuntimeError(f"this node's fusion_sweep code fingerprint is {code_fingerprint()}, "
                           f"the driver's is {ctx.code_fingerprint}: install the same checkout "
                           f"on every node (cluster.yaml's file_mounts/setup_commands)")
    key = tc.trial_key(ctx.code_fingerprint)
    tags = {**_node_tags(), schema.NUM_THREADS: str(tc.num_threads),
            schema.RAY_TRIAL_ID: tune.get_context().get_trial_id() or ""}
    run = tracking.TrialRun.open(ctx, tc, key, tags=tags)
    if run.finished:  # finished after Tune's last state snapshot: report, don't re-train
        tune.report({**run.final_metrics(), "trained": 0, "mlflow_run_id": run.run_id})
        return

    def on_epoch(rec) -> None:
        run.log_epoch(rec)
        tune.report({"epoch": rec.epoch, "train_loss": rec.train_loss, "val_acc": rec.val_acc,
                     "val_loss": rec.val_loss})

    try:
        result = train_trial(tc, callback=on_epoch)
        run.log_result(result, {schema.PEAK_RSS: peak_rss_mb()})
    except BaseException as e:
        run.fail(e)
        raise
    finally:
        release_freed_memory()  # before the actor's next trial (a new thread, a new arena)
    tune.report({**result.metrics(), "epoch": result.epochs_run, "val_acc": result.curve[-1].val_acc,
                 "trained": 1, "mlflow_run_id": run.run_id})


# ---------------------------------------------------------------------------- launch
@dataclass
class LaunchSummary:
    name: str
    total: int
    finished: int = 0
    failed: int = 0
    killed: int = 0
    missing: int = 0
    trained_now: int = 0  # trials this launch started training (finished or not)
    kept: int = 0  # finished in an earlier launch, not touched now
    retried: int = 0
    orphans_reconciled: int = 0
    seconds: float = 0.0
    tracking_uri: str = ""
    experiment: str = ""
    parent_run_id: str = ""
    experiment_path: str = ""
    results_csv: str = ""
    platforms: dict[str, int] = field(default_factory=dict)  # platform label -> trials
    failed_trials: list[str] = field(default_factory=list)
    tune_errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.finished == self.total


def launch(space_ref: str, *, name: str | None = None, address: str | None = None,
           tracking_uri: str | None = None, storage: str | None = None,
           max_concurrent: int | None = None, dry_run: bool = False, experiment: str | None = None,
           allow_code_change: bool = False, verbose: bool = False,
           until_decided: AdaptiveSettings | None = None, out: TextIO | None = None) -> LaunchSummary | None:
    """`fusion-sweep launch`. Returns None for --dry-run, else the summary.

    The resume rule (docs/architecture.md): a trial whose MLflow run, found by its trial key,
    is FINISHED is never trained again; every other grid point is trained (a run left
    RUNNING by a dead driver is first marked KILLED, then re-attached by key). The trial key
    includes the code fingerprint, so code that can change a trial's numbers never reuses
    runs of other code silently: launch refuses unless `allow_code_change`.

    `until_decided`: an `adaptive.AdaptiveSettings`: after the space's seeds, add seeds in
    rounds to the families whose comparisons are still undecided (fusion_sweep/adaptive.py).
    """
    out = out if out is not None else sys.stdout  # late: a captured stdout may be replaced
    t0 = time.time()
    space = load_space(space_ref)
    name = name or space.name
    if not name or any(c in name for c in "/\\ ") or name in (".", ".."):
        raise ValueError(f"--name {name!r}: use a non-empty name without '/', '\\', spaces, "
                         f"or '.'/'..'")
    if max_concurrent is not None and max_concurrent < 1:
        raise ValueError(f"--max-concurrent must be >= 1, got {max_concurrent}")
    points = plan(space)
    state = None
    if until_decided is not None:
        state = AdaptiveState.for_space(space, until_decided)
    if dry_run:
        dry_run_report(space, points, name, tracking_uri, experiment, out)
        if state is not None:
            print(state.describe(), file=out)
        return None
    pf = _preflight(space, name, points, tracking_uri, address, storage, experiment,
                    allow_code_change, out)
    pf.adaptive = state
    auth = configure_ray_env(pf.address)
    with SweepLock(pf.exp_path), signals.interrupting():
        summary = _run_sweep(pf, auth, max_concurrent, verbose, out)
    summary.seconds = time.time() - t0
    print(format_summary(summary, space_ref), file=out)
    return summary


@dataclass
class Preflight:
    """What `launch` checked before anything starts: nothing below fails on bad input."""

    space: SearchSpace
    name: str
    points: list[GridPoint]
    uri: str
    address: str | None
    exp_path: str
    ghash: str
    experiment: str
    tracker: tracking.SweepTracker
    code: str
    history: str
    commit: str
    adaptive: AdaptiveState | None = None  # for --until-decided


def _preflight(space: SearchSpace, name: str, points: list[GridPoint], tracking_uri: str | None,
               address: str | None, storage: str | None, experiment: str | None,
               allow_code_change: bool, out: TextIO) -> Preflight:
    """Everything that can fail does so here, before Ray starts."""
    uri = tracking.resolve_tracking_uri(tracking_uri)
    tracking.check_tracking_uri(uri)
    address = check_ray_address(address)
    if address is None:  # a local instance: this machine is the whole cluster
        _check_local_resources(space, points)
    exp_path = f"{resolve_storage(storage).rstrip('/')}/{name}"
    ghash = grid_hash(points)
    experiment = experiment or space.experiment
    tracker = tracking.SweepTracker(uri, experiment)
    parent = tracker.find_parent(name)
    if parent is not None and parent.data.tags.get(tracking.GRID_HASH, ghash) != ghash:
        raise ValueError(f"sweep {name!r} already exists in MLflow experiment {experiment!r} with a "
                         f"different grid (the space changed); choose another --name to run this "
                         f"space")
    code = tracking.code_fingerprint()
    history = _check_code(parent, tracker, name, code, allow_code_change, out)
    return Preflight(space, name, points, uri, address, exp_path, ghash, experiment, tracker,
                     code, history, tracking.git_commit())


def _open_parent(pf: Preflight, out: TextIO):
    """The sweep's parent run (created or re-attached), orphans reconciled -> (ctx, orphans)."""
    space = pf.space
    parent_id = pf.tracker.start_parent(
        pf.name, grid_hash=pf.ghash, n_trials=len(pf.points), commit=pf.commit, code=pf.code,
        code_history=pf.history, description=space.description,
        params={"space": space.source, "datasets": list(space.datasets),
                "pes": list(space.pes), "fusions": list(space.fusions),
                "variants": [dict(v) for v in space.variant_list()],
                "seeds": list(space.seeds), schema.BASELINE_PARAM: space.baseline,
                schema.METRIC_PARAM: space.metric, schema.MARGIN_PARAM: space.equivalence_margin,
                schema.DIRECTIONS_PARAM: space.metric_directions(),
                "resources.cpu": space.cpu, "resources.gpu": space.gpu,
                "max_failures": space.max_failures})
    if pf.adaptive is not None:
        pf.tracker.client.set_tag(parent_id, ADAPTIVE, pf.adaptive.settings.to_json())
        pf.tracker.client.set_tag(parent_id, COMPARISON_FAMILY, json.dumps(pf.adaptive.family))
    orphans = pf.tracker.reconcile_orphans(pf.name)
    if orphans:
        print(f"marked {len(orphans)} MLflow run(s) left RUNNING by an earlier driver as KILLED",
              file=out)
    ctx = tracking.TrackingContext(
        tracking_uri=pf.uri, experiment_id=pf.tracker.experiment_id, parent_run_id=parent_id,
        sweep=pf.name, code_fingerprint=pf.code, git_commit=pf.commit,
        launch_id=uuid.uuid4().hex[:12])
    return ctx, orphans


def _run_sweep(pf: Preflight, auth: str, max_concurrent: int | None, verbose: bool,
               out: TextIO) -> LaunchSummary:
    """Train every grid point not FINISHED in MLflow, round by round (one round unless
    adaptive seeding adds more); always close the parent run."""
    ctx, orphans = _open_parent(pf, out)
    summary = LaunchSummary(name=pf.name, total=len(pf.points), orphans_reconciled=len(orphans),
                            tracking_uri=pf.uri, experiment=pf.experiment,
                            parent_run_id=ctx.parent_run_id, experiment_path=pf.exp_path)
    driver = _Driver(pf, auth, ctx, max_concurrent, verbose, out)
    status, t0 = "FAILED", time.time()
    batch, round_no = list(pf.points), 0
    try:
        while batch:
            summary.tune_errors += driver.train(batch, round_no)
            batch = _next_round(pf, out) if pf.adaptive is not None else []
            pf.points.extend(batch)
            round_no += 1
            summary.total = len(pf.points)
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        print("\ninterrupted: run the same command again to resume", file=out)
    finally:
        if driver.ray_up:
            import ray

            ray.shutdown()  # a no-op when Ray never started
        _close_parent(pf, summary, ctx, status, t0, out)
    return summary


class _Driver:
    """Runs one round's grid points on Ray Tune, starting Ray the first time it is needed."""

    def __init__(self, pf: Preflight, auth: str, ctx: tracking.TrackingContext,
                 max_concurrent: int | None, verbose: bool, out: TextIO) -> None:
        self.pf, self.auth, self.ctx, self.out = pf, auth, ctx, out
        self.max_concurrent, self.verbose = max_concurrent, verbose
        self.ray_up = False  # Ray started or connected (shut down at the end either way)

    def train(self, batch: list[GridPoint], round_no: int) -> list[str]:
        """Train the points of `batch` not FINISHED in MLflow; returns Tune's error lines."""
        pf, out = self.pf, self.out
        pending = [p for p in batch if pf.tracker.trial_status(pf.name, p.key)[0] != FINISHED]
        if not pending:
            print(f"all {len(batch)} trials of sweep {pf.name!r}"
                  f"{' in this round' if pf.adaptive else ''} already finished: nothing "
                  f"to run", file=out)
            return []
        if len(pending) < len(batch):
            print(f"resuming sweep {pf.name!r}: {len(batch) - len(pending)} of "
                  f"{len(batch)} trials already finished (found by trial key in "
                  f"MLflow); {len(pending)} to train", file=out)
        if not self.ray_up:
            init_ray(pf.address, out)
            self.ray_up = True
            signals.reclaim()
            _warn_resources(pf.space, pf.uri, out)
            warn_mixed_platforms(pf.space, out)  # one platform per pair
            print(f"MLflow: {pf.uri} (experiment {pf.experiment!r}); Ray auth: {self.auth}",
                  file=out)
        with _disk_watch(pf, out):
            results = _run_tuner(pf.space, pending, pf.exp_path, self.ctx, self.max_concurrent,
                                 self.verbose, out, round_no)
        errors = [error_reason(e) for e in results.errors]
        _fail_dead_trials(results, pf)
        return errors


def _close_parent(pf: Preflight, summary: LaunchSummary, ctx: tracking.TrackingContext,
                  status: str, t0: float, out: TextIO) -> None:
    """Fill the summary from MLflow, then end the parent run with the sweep's outcome."""
    _summarize(summary, pf.tracker, pf.points, ctx, out)
    if status == "FINISHED" and not summary.ok:
        status = "FAILED" if summary.failed or summary.tune_errors else "KILLED"
    artifacts = [Path(summary.results_csv)] if summary.results_csv else []
    counts = (summary.finished, summary.failed, summary.trained_now, summary.retried,
              time.time() - t0)
    pf.tracker.finish_parent(ctx.parent_run_id, status,
                             dict(zip(schema.PARENT_METRICS, counts)), artifacts)


def _next_round(pf: Preflight, out: TextIO) -> list[GridPoint]:
    """Adaptive seeding (`--until-decided`): decide every comparison on the trials so far
    and return the next round's grid points (none: every comparison is decided or out of
    seeds). MLflow is re-read: the round's trials have just finished."""
    pf.tracker.forget()
    values = pf.tracker.finished_values(pf.name, pf.adaptive.metric)
    return next_round(pf.adaptive, pf.space, values, pf.code, out)


def _disk_watch(pf: Preflight, out: TextIO) -> DiskWatch:
    """A DiskWatch over the launch's local write paths: Tune's storage, a sqlite MLflow store."""
    paths = [] if "://" in pf.exp_path else [("Ray Tune storage", Path(pf.exp_path))]
    db = tracking.sqlite_path(pf.uri)
    if db is not None:
        paths.append(("MLflow store", db.resolve().parent))
    return DiskWatch(paths, out)


# What a trial error's type means for the user, when the error itself does not say it.
_OOM_HINT = ("Ray's memory monitor killed the trial's worker: the node's memory use passed "
             "RAY_memory_usage_threshold. Declare more memory per trial (`resources: "
             "{memory_gb: ...}` in the space) so that Ray packs fewer trials per node, or lower "
             "--max-concurrent")
_ERROR_HINTS = {
    "OutOfMemoryError": _OOM_HINT,
    "TrialKilledForMemory": _OOM_HINT,  # ray_compat's name for the same kill
    "ActorDiedError": "the trial's worker process died (killed, or its node was lost)",
    "ActorUnavailableError": "the trial's worker process became unreachable",
    "NodeDiedError": "the node running the trial was lost",
}


def error_reason(exc: BaseException) -> str:
    """One line for a trial error that Tune hands back: the exception's type, its first
    meaningful line, and a hint for the errors that mean a worker was killed from outside."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    # Ray wraps a trainable's own exception: its last line is the original error
    wrapped = type(exc).__name__.startswith(("RayTaskError", "TuneError"))
    first = (lines[-1] if wrapped else lines[0]) if lines else ""
    names = [type(exc).__name__, *(type(c).__name__ for c in _causes(exc))]
    hint = next((_ERROR_HINTS[n] for n in names if n in _ERROR_HINTS), "")
    shown = "OutOfMemoryError" if hint == _OOM_HINT else type(exc).__name__
    text = f"{shown}: {first[:300]}"
    return f"{text} ({hint})" if hint else text


def _causes(exc: BaseException) -> Iterator[BaseException]:
    seen = {id(exc)}
    c = exc.__cause__ or exc.__context__
    while c is not None and id(c) not in seen:
        seen.add(id(c))
        yield c
        c = c.__cause__ or c.__context__


def _fail_dead_trials(results: Any, pf: "Preflight") -> None:
    """Close, as FAILED with the reason, the MLflow run of every trial whose worker died on
    Tune's last attempt (left RUNNING: no trial code survived to close it). Without this the
    summary could only say RUNNING, and the next launch would call it an orphan."""
    by_ident = {p.ident: p for p in pf.points}
    reasons = {by_ident[_ident(r.config)].key: error_reason(r.error) for r in results
               if r.error is not None and r.config and _ident(r.config) in by_ident}
    if reasons:
        pf.tracker.fail_dead_trials(pf.name, reasons)


def dry_run_report(space: SearchSpace, points: list[GridPoint], name: str,
                   tracking_uri: str | None, experiment: str | None, out: TextIO) -> None:
    """`launch --dry-run`: the grid, and for an existing sweep what a launch would do with
    each trial (train, skip: finished, or retry: its run is FAILED/KILLED/RUNNING)."""
    print(format_grid(space, points, name), file=out)
    actions = _planned_actions(space, points, name, tracking_uri, experiment)
    if actions is None:
        print(f"\n(dry run: nothing started; {len(points)} trials would run)", file=out)
        return
    print(f"\nsweep {name!r} exists; a launch now would:", file=out)
    counts: dict[str, int] = {}
    for p, (action, detail) in zip(points, actions):
        c = p.config
        counts[action] = counts.get(action, 0) + 1
        print(f"  {action:<6} {c.describe()}  {detail}", file=out)
    print("\n(dry run: nothing started; " + ", ".join(f"{n} {a}" for a, n in sorted(counts.items()))
          + ")", file=out)


def _planned_actions(space: SearchSpace, points: list[GridPoint], name: str,
                     tracking_uri: str | None, experiment: str | None
                     ) -> list[tuple[str, str]] | None:
    """Per grid point (action, detail), or None when the sweep has no MLflow record yet."""
    uri = tracking.resolve_tracking_uri(tracking_uri)
    db = tracking.sqlite_path(uri)
    if db is not None and not db.is_file():
        return None
    tracking.check_tracking_uri(uri)
    tracker = tracking.SweepTracker(uri, experiment or space.experiment)
    if tracker.client.get_experiment_by_name(tracker.experiment) is None \
            or tracker.find_parent(name) is None:
        return None
    out = []
    for p in points:
        status, run_id = tracker.trial_status(name, p.key)
        if status == FINISHED:
            out.append(("skip", f"finished, run {run_id}"))
        elif status:
            out.append(("retry", f"{status} run {run_id} (trained again into the same run)"))
        else:
            out.append(("train", "no run yet"))
    return out


def _check_code(parent, tracker, name: str, code: str, allow: bool, out: TextIO) -> str:
    """Refuse to mix code silently; returns the sweep's code history to record on the parent.

    A sweep whose finished trials were trained by other code (another code fingerprint) is
    resumed only with `--allow-code-change`: then every trial is trained again under this code
    (the trial key includes the fingerprint), the old runs stay in MLflow for the record, and
    `stats` keeps, per trial, the run of the sweep's latest code.
    """
    if parent is None:
        return code
    history = parent.data.tags.get(tracking.CODE_HISTORY) or ""
    olds = sorted({r.data.tags.get(tracking.CODE_FINGERPRINT, "unknown")
                   for r in tracker.trial_runs(name) if r.info.status == FINISHED} - {code})
    if olds and not allow:
        raise ValueError(
            f"sweep {name!r} has finished trials trained by code {', '.join(olds)}, but this "
            f"checkout's code fingerprint is {code}: their numbers may differ from what this code "
            f"computes, so they are not reused. Pass --allow-code-change to train every trial "
            f"again under {code} (recorded on the sweep's parent run; stats then uses the newest "
            f"code's runs), or launch under another --name")
    if olds:
        print(f"code changed ({', '.join(olds)} -> {code}); --allow-code-change: training every "
              f"trial again under {code}", file=out)
    seen = [h for h in history.split(",") if h]
    return ",".join(seen + [code] if code not in seen else seen)


def _local_gpus() -> int:
    """GPUs a local Ray instance would see (torch honours CUDA_VISIBLE_DEVICES, as Ray does)."""
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # noqa: BLE001 - no usable CUDA: no GPU
        return 0


def _check_local_resources(space: SearchSpace, points: list[GridPoint]) -> None:
    """Refuse, before Ray starts, a space whose trial needs more than this machine has: the
    local instance is sized to it (`ray_setup.init_ray`), so such a trial could never start."""
    ncpu = os.cpu_count() or 1
    ngpu = _local_gpus() if space.gpu > 0 else 0
    if space.cpu > ncpu or space.gpu > ngpu:
        raise ValueError(f"resources: one trial needs cpu={space.cpu:g}, gpu={space.gpu:g}, but "
                         f"the local Ray instance has this machine's CPU={ncpu}, GPU={ngpu}, so "
                         f"no trial could ever start; lower `resources` in {space.source}, or "
                         f"pass --address for a cluster with such nodes")
    check_local_pin(space, _local_gpus() if space.accelerator_type else 0)
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    need = max(trial_memory_bytes(space, p.config) for p in points)
    if need > RAY_MEMORY_SHARE * total:
        raise ValueError(f"resources: one trial needs about {need / 2**30:.1f} GiB of memory but "
                         f"the local Ray instance schedules at most {RAY_MEMORY_SHARE * total / 2**30:.1f} "
                         f"GiB of this machine's {total / 2**30:.1f} GiB, so no trial could ever "
                         f"start; set `resources: {{memory_gb: ...}}` in {space.source} if the "
                         f"estimate is too high, or lower batch_size / max_len")


# Ray's local node offers roughly this share of physical memory as its `memory` resource.
RAY_MEMORY_SHARE = 0.6
# What a trial actor holds before training: Python, torch, Ray worker, MLflow client (an idle
# ray::ImplicitFunc actor measured ~0.55 GB RSS here).
ACTOR_BASE_BYTES = 768 << 20


def trial_memory_bytes(space: SearchSpace, config: Any) -> int:
    """Ray `memory` resource of one trial: the space's `resources.memory_gb`, else an estimate
    from the config, so Ray never packs more trials onto a node than fit in its memory.

    Estimate (fp32, bytes): the actor's base + 4 copies of the parameters (weights, grads, two
    Adam moments) + on CPU one training step's activations at the longest padded batch: per
    attention map the encoder keeps (`ENCODERS[name].attention_maps`: one per layer for the
    standard encoder) ~16 (B, L, d)-sized tensors and a (B, H, L, L) attention tensor — 4 of
    them (scores, probabilities, dropout mask, gradient) when attention dropout forces the
    materialising path, else 1 — × 1.5 for the allocator's slack. A GPU trial keeps its activations in GPU
    memory, which Ray's `memory` resource does not count. Embedding rows are bounded by the
    50k-token vocabulary cap (synthetic regimes: their filler vocabulary). L is max_len, or the
    dataset's own cap on a document's length where it has one (`DatasetSpec.length_cap`).
    """
    if space.memory_gb is not None:
        return int(space.memory_gb * 2**30)
    c = config
    spec = DATASETS[c.dataset]
    vocab = SyntheticParams.from_mapping(spec.synthetic).filler_vocab + 64 if spec.generated \
        else TokenizerSettings.max_size  # the vocabulary cap
    params = vocab * c.d_model + c.layers * (4 * c.d_model ** 2 + 2 * c.d_model * c.dim_ff) \
        + 3 * c.d_model ** 2 + c.max_len * c.d_model
    if space.gpu > 0:
        return int(ACTOR_BASE_BYTES + 2 * 4 * params)  # a host copy of weights and checkpoint
    # A batch is padded to its longest document, which the dataset may bound below max_len.
    B, L, H = c.batch_size, min(c.max_len, spec.length_cap() or c.max_len), c.heads
    attn = 4 if c.attn_dropout > 0 else 1
    maps = ENCODERS[c.encoder].attention_maps(c)  # attention-sized tensors per step
    acts = maps * 16 * B * L * max(c.d_model, c.dim_ff // 2) + attn * maps * B * H * L * L
    return int(ACTOR_BASE_BYTES + 4 * 4 * params + 1.5 * 4 * acts)


def _warn_resources(space: SearchSpace, uri: str, out: TextIO) -> None:
    import ray

    res = ray.cluster_resources()
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    if res.get("CPU", 0) < space.cpu or res.get("GPU", 0) < space.gpu:
        print(f"warning: one trial needs cpu={space.cpu:g}, gpu={space.gpu:g} but the cluster has "
              f"CPU={res.get('CPU', 0):g}, GPU={res.get('GPU', 0):g} now; trials wait until an "
              f"autoscaler adds such a node", file=out)
    hosts = {n.get("NodeManagerAddress") for n in nodes}
    loopback = urllib.parse.urlparse(uri).hostname in LOOPBACK_HOSTS
    if len(hosts) > 1 and loopback:
        print(f"warning: the tracking URI {uri} is this machine's loopback address, but trials "
              f"also run on other machines ({len(hosts)} node IPs); give an address they can "
              f"reach, e.g. http://<head-ip>:5000", file=out)
    if len(nodes) > 1 and tracking.is_local_store(uri):
        print(f"warning: {len(nodes)} nodes but a local tracking store ({uri}); trials on other "
              f"machines cannot write to it unless it is on a shared filesystem. Pass "
              f"--tracking-uri http://<head>:5000 (cluster.yaml starts that server)", file=out)


def _run_tuner(space: SearchSpace, points: list[GridPoint], exp_path: str, ctx,
               max_concurrent: int | None, verbose: bool, out: TextIO, round_no: int = 0):
    """One fresh Tuner over the grid points still to train (the MLflow key lookup decided
    which), in its own directory under the sweep's: Tune's saved state is never restored."""
    from ray import tune

    from fusion_sweep.ray_compat import tolerate_memory_kills

    tolerate_memory_kills()  # a memory-monitor kill must not end the sweep (ray_compat.py)
    configs = {p.ident: p.config.to_dict() for p in points}
    # One resource request for the sweep: its largest trial's memory (Tune's with_resources
    # takes one dict for every trial of a Tuner).
    memory = max(trial_memory_bytes(space, p.config) for p in points)
    trainable = tune.with_resources(
        tune.with_parameters(run_trial, ctx=ctx, configs=configs),
        trial_resources(space, memory))  # with the space's platform pin, if any
    idents = [dict(zip(IDENTITY_FIELDS, p.ident)) for p in points]
    tuner = tune.Tuner(
        trainable,
        param_space={"trial": tune.grid_search(idents)},
        tune_config=tune.TuneConfig(num_samples=1, reuse_actors=True,
                                    max_concurrent_trials=max_concurrent),
        run_config=tune.RunConfig(
            name=f"launch-{ctx.launch_id}" + (f"-round{round_no}" if round_no else ""),
            storage_path=exp_path,
            failure_config=tune.FailureConfig(max_failures=space.max_failures),
            progress_reporter=_reporter(verbose, out), verbose=1),
    )
    return tuner.fit()


def _reporter(verbose: bool = False, out: TextIO | None = None):
    """What a launch prints while trials run (Ray's legacy output engine, verbose=1).

    Default: `progress.SweepProgress`, one updating status line on a terminal, else one line
    per finished or failed trial. `--verbose`: Ray Tune's full CLIReporter table (the grid
    point, its epoch and validation/test accuracy) every 15 s.
    """
    if not verbose:
        return SweepProgress(out if out is not sys.stdout else None)
    from ray.tune import CLIReporter

    return CLIReporter(parameter_columns=list(IDENTITY_FIELDS),
                       metric_columns={"epoch": "epoch", "val_acc": "val_acc",
                                       "test_acc": "test_acc"},
                       max_report_frequency=15, sort_by_metric=False)


def _summarize(s: LaunchSummary, tracker, points: list[GridPoint], ctx, out: TextIO) -> None:
    """Fill the summary from MLflow (the source of truth) and write results.csv."""
    try:
        tracker.forget()
        runs = tracker.runs_by_key(s.name)
    except Exception as e:  # noqa: BLE001 - never hide the sweep's own outcome
        print(f"warning: could not read MLflow for the summary: {e}", file=out)
        return
    rows = []
    for p in points:
        r = runs.get(p.key)
        c = p.config
        status = r.info.status if r is not None else "MISSING"
        row = {**dict(zip(IDENTITY_FIELDS, p.ident)), "trial_key": p.key, "status": status,
               "mlflow_run_id": r.info.run_id if r is not None else ""}
        if r is not None:
            row.update({k: r.data.metrics.get(k, "") for k in tracking.FINAL_METRICS})
            row.update({"fp_" + k: r.data.tags.get(tag, "")
                        for k, tag in tracking.FINGERPRINT_TAGS.items()})
            row[PLATFORM_LABEL_COLUMN] = platform_label(platform_from_tags(r.data.tags))
            if row[PLATFORM_LABEL_COLUMN]:
                label = row[PLATFORM_LABEL_COLUMN]
                s.platforms[label] = s.platforms.get(label, 0) + 1
            row["attempts"] = int(r.data.tags.get(tracking.ATTEMPTS) or 1)
            touched = r.data.tags.get(tracking.LAUNCH_ID) == ctx.launch_id
            s.trained_now += touched
            s.kept += status == FINISHED and not touched
            s.retried += row["attempts"] > 1
        rows.append(row)
        if status == FINISHED:
            s.finished += 1
        elif status == "MISSING":
            s.missing += 1
        elif status == "KILLED":
            s.killed += 1
        else:
            s.failed += 1
            s.failed_trials.append(f"{c.describe()}: "
                                   f"{r.data.tags.get(ERROR, status)}")
    if "://" not in s.experiment_path:
        path = Path(s.experiment_path) / "results.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        cols = list(rows[0]) if rows else []
        for r in rows:
            cols += [k for k in r if k not in cols]
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols)
            w.writeheader()
            w.writerows(rows)
        s.results_csv = str(path)


def format_summary(s: LaunchSummary, space_ref: str) -> str:
    """The launch's last words: outcome, failures, where the results are, what to run next.

    Follow-up commands carry `--tracking-uri`/`--experiment` only where they would not
    resolve to the same store and experiment by default from this directory and environment.
    """
    # Two lines, not one: the summary stays within the 120 columns of the stats report.
    lines = ["", f"== sweep {s.name!r}: {s.finished}/{s.total} trials finished "
                 f"({s.kept} kept from earlier launches); {s.trained_now} trained in this launch; "
                 f"{s.seconds:.0f} s ==",
             f"  {s.failed} failed; {s.killed + s.missing} not run; {s.retried} retried "
             f"(ran more than once)"]
    for f in s.failed_trials[:10]:
        lines.append(f"  failed: {f}")
    if len(s.failed_trials) > 10:
        lines.append(f"  ... and {len(s.failed_trials) - 10} more failed (see the results table)")
    if s.tune_errors and not s.failed_trials:
        lines.append(f"  Ray Tune errors ({len(s.tune_errors)}), first: {s.tune_errors[0]}")
    if len(s.platforms) > 1:  # pairs across platforms are dropped by stats (platform_mismatch)
        lines.append(f"  warning: the trials ran on {len(s.platforms)} platforms; `stats` pairs "
                     f"trials only on one: " + "; ".join(f"{k} ({v} trials)"
                                                         for k, v in s.platforms.items()))
    if s.orphans_reconciled:
        lines.append(f"  reconciled {s.orphans_reconciled} orphaned RUNNING run(s) to KILLED")
    if s.results_csv:
        lines.append(f"  results:    {s.results_csv}")
    else:
        lines.append(f"  Ray Tune:   {s.experiment_path}")
    lines.append(f"  MLflow:     {s.tracking_uri}  experiment {s.experiment!r}")
    lines.append(f"  parent run: {s.parent_run_id}")
    uri_arg = "" if s.tracking_uri == tracking.resolve_tracking_uri() else f" --tracking-uri {s.tracking_uri}"
    exp_arg = "" if s.experiment == tracking.DEFAULT_EXPERIMENT else f" --experiment {s.experiment}"
    lines.append(f"  statistics: fusion-sweep stats --sweep {s.name}{uri_arg}{exp_arg}")
    if tracking.is_local_store(s.tracking_uri):
        store_arg = "" if s.tracking_uri == tracking.default_ui_store() else \
            f" --backend-store-uri {s.tracking_uri}"
        lines.append(f"  browse:     fusion-sweep ui{store_arg}{exp_arg}   (MLflow UI on "
                     f"127.0.0.1, opened on the trial runs)")
    else:
        lines.append(f"  browse:     {s.tracking_uri} (through `ray attach cluster.yaml -p 5000` or an "
                     f"SSH tunnel when it runs on a cluster head)")
    if not s.ok:
        storage = s.experiment_path.rstrip("/").rsplit("/", 1)[0] if s.experiment_path else ""
        st_arg = "" if not storage or storage == resolve_storage(None) else f" --storage {storage}"
        lines.append(f"  resume:     fusion-sweep launch {space_ref} --name {s.name}{uri_arg}"
                     f"{exp_arg}{st_arg}  (finished trials are kept)")
    return "\n".join(lines)

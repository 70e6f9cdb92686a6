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
   rounds of seed points, `fusion_sweep.launch.adaptive`);
6. print a summary (done / failed / retried, where results are, what to run next).

Resume has one rule: a grid point whose MLflow run (found by its trial key) is FINISHED is
never trained again; every other point is. Each launch runs a fresh Tuner over the points
still to train, so Tune's saved state is never needed, and a SIGKILLed driver loses at most
the trials that were running (their runs are marked KILLED on the next launch and trained
again under the same run). A lock file keeps a second driver off a sweep that is running.

The optional hyperparameter search before a sweep (`fusion-sweep tune`, Optuna) lives in
`fusion_sweep.launch.hpsearch`; in this package "tune" means Ray Tune.
"""
from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path
from typing import TextIO

from fusion_sweep import schema
from fusion_sweep.launch import signals
from fusion_sweep.tracking import runs as tracking
from fusion_sweep.launch.adaptive import AdaptiveSettings, AdaptiveState, families, family_record, next_round
from fusion_sweep.launch.diskwatch import DiskWatch
from fusion_sweep.launch.dryrun import dry_run_report
from fusion_sweep.raytune.failures import error_reason, fail_dead_trials
from fusion_sweep.plan.grid import GridPoint, plan
from fusion_sweep.launch.lock import SweepLock
from fusion_sweep.launch.memory import trial_memory_bytes
from fusion_sweep.raytune.placement import trial_resources, warn_mixed_platforms
from fusion_sweep.launch.preflight import Preflight, preflight, warn_resources
from fusion_sweep.raytune.progress import SweepProgress
from fusion_sweep.raytune.setup import configure_ray_env, init_ray
from fusion_sweep.schema import ADAPTIVE, COMPARISON_FAMILY, FINISHED, IDENTITY_FIELDS, sqlite_path
from fusion_sweep.plan.space import SearchSpace, load_space
from fusion_sweep.launch.summary import LaunchSummary, format_summary, summarize
from fusion_sweep.raytune.trainable import run_trial
from fusion_sweep.errors import UserError


def launch(space_ref: str, *, name: str | None = None, address: str | None = None,
           tracking_uri: str | None = None, storage: str | None = None,
           max_concurrent: int | None = None, dry_run: bool = False, experiment: str | None = None,
           allow_code_change: bool = False, verbose: bool = False,
           until_decided: AdaptiveSettings | None = None, out: TextIO | None = None) -> LaunchSummary | None:
    """`fusion-sweep launch`. Returns None for --dry-run, else the summary.

    The resume rule (docs/architecture.md): a trial whose MLflow run, found by its trial key,
    is FINISHED is never trained again; every other grid point is trained (a run left
    RUNNING by a dead driver is first marked KILLED, then re-attached by key). The trial key
    includes the code fingerprint of the trial's components, so code that can change a
    trial's numbers never reuses runs of other code silently: launch says which trials an
    edit retrains and refuses unless `allow_code_change` (fusion_sweep/plan/relaunch.py).

    `until_decided`: an `adaptive.AdaptiveSettings`: after the space's seeds, add seeds in
    rounds to the families whose comparisons are still undecided (fusion_sweep/launch/adaptive.py).
    """
    out = out if out is not None else sys.stdout  # late: a captured stdout may be replaced
    t0 = time.time()
    space = load_space(space_ref)
    name = name or space.name
    if not name or any(c in name for c in "/\\ ") or name in (".", ".."):
        raise UserError(f"--name {name!r}: use a non-empty name without '/', '\\', spaces, "
                         f"or '.'/'..'")
    if max_concurrent is not None and max_concurrent < 1:
        raise UserError(f"--max-concurrent must be >= 1, got {max_concurrent}")
    points = plan(space)
    state = None
    if until_decided is not None:
        state = AdaptiveState.for_space(space, until_decided)
    if dry_run:
        dry_run_report(space, points, name, tracking_uri, experiment, out)
        if state is not None:
            print(state.describe(), file=out)
        return None
    pf = preflight(space, name, points, tracking_uri, address, storage, experiment,
                    allow_code_change, out)
    pf.adaptive = state
    auth = configure_ray_env(pf.address, verbose, tune_output=verbose)
    with SweepLock(pf.exp_path), signals.interrupting():
        summary = _run_sweep(pf, auth, max_concurrent, verbose, out)
    summary.seconds = time.time() - t0
    print(format_summary(summary, space_ref), file=out)
    return summary



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
    # Every sweep fixes its comparison family at launch (`stats` keeps m to it whatever it
    # shows); adaptive seeding builds the same record.
    pf.tracker.client.set_tag(parent_id, COMPARISON_FAMILY, json.dumps(comparison_family(pf)))
    pf.tracker.mark_superseded(pf.superseded)  # retrained under new code; never deleted
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
        status, summary.interrupted = "KILLED", True
        print("\ninterrupted: run the same command again to resume", file=out)
    finally:
        with signals.ignored(signals.STOP_SIGNALS):  # let the cleanup finish
            _stop(pf, driver, summary, ctx, status, t0, out)
    return summary


def _stop(pf: Preflight, driver: "_Driver", summary: LaunchSummary,
          ctx: tracking.TrackingContext, status: str, t0: float, out: TextIO) -> None:
    """Shut Ray down, end the runs an interruption left RUNNING as KILLED (interrupted, not
    failed: nothing of the sweep runs any more), then close the parent run."""
    if driver.ray_up:
        import ray

        ray.shutdown()
    if summary.interrupted:
        pf.tracker.reconcile_orphans(pf.name, tracking.INTERRUPTED)
    _close_parent(pf, summary, ctx, status, t0, out)


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
            warn_resources(pf.space, pf.uri, out)
            warn_mixed_platforms(pf.space, out)  # one platform per pair
            print(f"MLflow: {pf.uri} (experiment {pf.experiment!r}); Ray auth: {self.auth}",
                  file=out)
        with _disk_watch(pf, out):
            results = _run_tuner(pf.space, pending, pf.exp_path, self.ctx, self.max_concurrent,
                                 self.verbose, out, round_no)
        errors = [error_reason(e) for e in results.errors]
        fail_dead_trials(results, pf.points, pf.tracker, pf.name)
        return errors


def comparison_family(pf: Preflight) -> dict:
    """The sweep's comparison family (`adaptive.family_record`, its one home)."""
    if pf.adaptive is not None:
        return pf.adaptive.family
    return family_record(pf.space, families(pf.space))


def _close_parent(pf: Preflight, summary: LaunchSummary, ctx: tracking.TrackingContext,
                  status: str, t0: float, out: TextIO) -> None:
    """Fill the summary from MLflow, then end the parent run with the sweep's outcome."""
    summarize(summary, pf.tracker, pf.points, ctx, out, family=comparison_family(pf),
              adaptive=pf.adaptive.settings.to_json() if pf.adaptive is not None else "")
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
    return next_round(pf.adaptive, pf.space, values, out)


def _disk_watch(pf: Preflight, out: TextIO) -> DiskWatch:
    """A DiskWatch over the launch's local write paths: Tune's storage, a sqlite MLflow store."""
    paths = [] if "://" in pf.exp_path else [("Ray Tune storage", Path(pf.exp_path))]
    db = sqlite_path(pf.uri)
    if db is not None:
        paths.append(("MLflow store", db.resolve().parent))
    return DiskWatch(paths, out)



def _run_tuner(space: SearchSpace, points: list[GridPoint], exp_path: str, ctx,
               max_concurrent: int | None, verbose: bool, out: TextIO, round_no: int = 0):
    """One fresh Tuner over the grid points still to train (the MLflow key lookup decided
    which), in its own directory under the sweep's: Tune's saved state is never restored."""
    from ray import tune

    from fusion_sweep.raytune.compat import tolerate_memory_kills

    tolerate_memory_kills()  # a memory-monitor kill must not end the sweep (ray_compat.py)
    configs = {p.ident: p.config.to_dict() for p in points}
    # One resource request for the sweep: its largest trial's memory (Tune's with_resources
    # takes one dict for every trial of a Tuner).
    memory = max(trial_memory_bytes(space, p.config) for p in points)
    trainable = tune.with_resources(
        tune.with_parameters(run_trial, ctx=ctx, configs=configs,
                             codes={p.ident: dict(p.code.components) for p in points}),
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
            callbacks=_callbacks(verbose, out), verbose=2 if verbose else 0),
    )
    return tuner.fit()


def _callbacks(verbose: bool, out: TextIO) -> list:
    """What a launch prints while trials run. Default: `progress.SweepProgress` through a Tune
    callback (one updating status line on a terminal, else one line per finished or failed
    trial) with Tune's own output off (`verbose=0`, and its legacy engine: `ray_setup.
    configure_ray_env`). `--verbose`: Tune's own output engine at its verbose level instead,
    every trial's start, results and end."""
    if verbose:
        return []
    from fusion_sweep.raytune.callback import ProgressCallback

    return [ProgressCallback(SweepProgress(out if out is not sys.stdout else None))]

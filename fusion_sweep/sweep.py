"""Ray Tune orchestration: one Tune trial per (dataset, encoder, pe, fusion, seed).

`launch()` is `fusion-sweep launch`:

1. load and validate the search space (nothing starts on bad input);
2. check the tracking store and the Ray address are reachable;
3. open (or re-attach to) the sweep's MLflow parent run and mark runs orphaned by a
   killed driver KILLED;
4. start a local Ray sized to the machine, or connect to `--address`;
5. run the grid through `ray.tune.Tuner(reuse_actors=True)` with `FailureConfig` retries,
   or `Tuner.restore` it when the sweep already exists: finished trials are never re-run,
   interrupted and errored ones run again;
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

import functools
import hashlib
import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.parse
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, TextIO

from fusion_sweep.schema import ADAPTIVE, IDENTITY_FIELDS
from fusion_sweep.schema import PLATFORM_LABEL_COLUMN, platform_from_tags, platform_label
from fusion_sweep.placement import check_local_pin, trial_resources, warn_mixed_platforms
from fusion_sweep.space import SearchSpace, load_space

DEFAULT_STORAGE_DIRNAME = "ray_results"


# ----------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class GridPoint:
    config: Any  # TrialConfig
    key: str

    @property
    def ident(self) -> tuple:
        """The trial's identity, in `schema.IDENTITY_FIELDS` order."""
        return tuple(self.config.identity().values())


def plan(space: SearchSpace, code: str | None = None) -> list[GridPoint]:
    """The grid, each point keyed by `schema.trial_key` under this checkout's code."""
    from fusion_sweep.schema import code_fingerprint

    code = code_fingerprint() if code is None else code
    points = [GridPoint(c, c.trial_key(code)) for c in space.grid()]
    keys = [p.key for p in points]
    if len(set(keys)) != len(keys):  # cannot happen with a validated space; guard the invariant
        raise ValueError("two grid points share a trial key; the grid has duplicates")
    return points


def grid_hash(points: list[GridPoint]) -> str:
    """What the sweep trains, independent of the code that trains it (a code change is
    caught by the code fingerprint, with its own message and opt-in)."""
    from fusion_sweep.schema import trial_key

    keys = sorted(trial_key(p.config.to_dict(), "") for p in points)
    return hashlib.sha256("\n".join(keys).encode()).hexdigest()[:16]


def format_grid(space: SearchSpace, points: list[GridPoint], name: str) -> str:
    res = f"cpu={space.cpu:g}, gpu={space.gpu:g}"
    lines = [f"sweep {name!r} from {space.source}",
             f"{len(points)} trials = {len(space.datasets)} datasets × {_variant_count(space)} × "
             f"{len(space.seeds)} seeds; per trial: {res} "
             f"(torch threads {space.num_threads}); retries per trial: {space.max_failures}",
             f"baseline {space.baseline!r}, metric {space.metric!r}"
             + (f", equivalence margin {space.equivalence_margin}" if space.equivalence_margin else ""),
             ""]
    for d in space.datasets:
        hp = points_for(points, d)[0].config
        shown = {k: v for k, v in hp.hyperparameters().items()
                 if k in ("max_len", "d_model", "heads", "layers", "dim_ff", "dropout", "batch_size",
                          "epochs", "lr", "optimizer", "limit_train", "patience")}
        lines.append(f"  {d}: " + ", ".join(f"{k}={v}" for k, v in shown.items()))
    lines.append("")
    w = max(len("dataset"), *(len(p.config.dataset) for p in points))
    we = max(len("encoder"), *(len(p.ident[1]) for p in points))
    lines.append(f"  {'#':>3}  {'dataset':<{w}}  {'encoder':<{we}}  {'pe':<13}  {'fusion':<11}  "
                 f"{'seed':>4}  trial key")
    for i, p in enumerate(points, 1):
        c = p.config
        lines.append(f"  {i:>3}  {c.dataset:<{w}}  {p.ident[1]:<{we}}  {c.pe:<13}  {c.fusion:<11}  "
                     f"{c.seed:>4}  {p.key}")
    return "\n".join(lines)


def _variant_count(space: SearchSpace) -> str:
    if space.variants:
        return f"{len(space.variants)} variants"
    return f"{len(space.pes)} PEs × {len(space.fusions)} fusions"


def points_for(points: list[GridPoint], dataset: str) -> list[GridPoint]:
    return [p for p in points if p.config.dataset == dataset]


# ------------------------------------------------------------------------- preflight
def resolve_storage(storage: str | None) -> str:
    """Ray Tune needs an absolute path or a URI (a relative path is resolved against the
    worker's directory, which differs from the driver's)."""
    if not storage:
        return str(Path.cwd().resolve() / DEFAULT_STORAGE_DIRNAME)
    if "://" in storage:
        return storage
    return str(Path(storage).expanduser().resolve())


def check_ray_address(address: str | None, timeout: float = 3.0) -> str | None:
    """Resolve `--address` (or RAY_ADDRESS) and fail fast if nothing listens there."""
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address is None:
        return None
    if address == "auto":
        from ray._private.services import canonicalize_bootstrap_address

        try:
            resolved = canonicalize_bootstrap_address("auto")
        except (ConnectionError, ValueError) as e:
            raise ValueError(f"--address auto: no running Ray cluster found on this machine ({e}); "
                             f"start one with `ray start --head` (or `ray up cluster.yaml` and run "
                             f"this on the head node), or omit --address for a local instance") from None
        if not resolved:
            raise ValueError("--address auto: no running Ray cluster found on this machine; start "
                             "one with `ray start --head`, or omit --address for a local instance")
        host_port = resolved
    else:
        host_port = address.split("://", 1)[-1]
    host, _, port = host_port.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--address {address!r}: expected 'auto' or HOST:PORT (e.g. 10.0.0.5:6379)")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as e:
        raise ValueError(f"--address {address!r}: cannot reach a Ray cluster at {host}:{port} ({e}); "
                         f"check the address (`ray status` on the head node prints it), or omit "
                         f"--address for a local instance") from None
    return address


def configure_ray_env(address: str | None) -> str:
    """Environment every Ray process of the sweep must agree on; returns the auth mode.

    Ray 2.60 turns token auth on for a new local cluster, and for `ray start` when a token
    exists; a driver whose RAY_AUTH_MODE does not match fails after ~20 s (measured here).
    An explicit RAY_AUTH_MODE always wins. Otherwise: a local instance uses `token` (Ray's
    own default, made explicit so every worker inherits it); connecting to a cluster uses
    `token` when a token is available here, as `ray start` would have, else `disabled`.

    Why process-wide environment variables: Ray reads them in the driver and copies the
    driver's environment to every worker it starts, so setting them here is how the choice
    reaches the workers. Only `launch`/`tune` call this, right before Ray starts.
    """
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    # Ray's legacy table reporter: one compact table every 15 s instead of a box per trial.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    mode = os.environ.get("RAY_AUTH_MODE")
    if mode is None:
        if address is None:
            mode = "token"
        else:
            token_file = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
            mode = "token" if (os.environ.get("RAY_AUTH_TOKEN") or token_file.is_file()) else "disabled"
        os.environ["RAY_AUTH_MODE"] = mode
    return mode


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (`kill PID`, a scheduler's stop) unwinds like Ctrl-C: the `finally` blocks then
    stop the Ray instance this process started and mark the sweep's parent run, instead of
    the process vanishing and leaving Ray's head and workers behind."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _reclaim_sigterm() -> None:
    """ray.init installs Ray's native failure-signal handler, which aborts the driver on
    SIGTERM without running any `finally`; put ours back (main thread only)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_interrupt)


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

    tags = {"fusion_sweep.hostname": socket.gethostname()}
    if ray.is_initialized():
        tags["fusion_sweep.node_id"] = ray.get_runtime_context().get_node_id()
        tags["fusion_sweep.node_ip"] = ray.util.get_node_ip_address()
    return tags


def release_freed_memory() -> None:
    """Hand the memory a finished trial freed back to the OS (glibc `malloc_trim`; a no-op
    elsewhere).

    Why: Tune runs each trial of a reused actor in a new thread, and glibc gives each new
    thread its own malloc arena (up to 8 x cores), which keeps the pages its trial freed. A
    long-regime actor grew by ~200 MB per trial, to 2.2 GB over the default sweep, where the
    same trials in one process stay at ~0.75 GB (benchmarks/README.md, trial memory).
    `malloc_trim(0)` releases free pages of every arena, between trials, so it cannot slow a
    trial. Capping the arenas instead (MALLOC_ARENA_MAX=2) also removed the growth, but it
    changes allocation inside every trial (it looked 4-8% slower in one small A/B here)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.lru_cache(maxsize=1)
def _malloc_trim() -> Any:
    """glibc's malloc_trim, looked up once per process (None elsewhere)."""
    import ctypes

    try:
        return ctypes.CDLL(None).malloc_trim  # the process's own C library
    except (OSError, AttributeError):  # not glibc
        return None


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

    from fusion_sweep.trial.config import TrialConfig
    from fusion_sweep.tracking import TrialRun
    from fusion_sweep.trial.trainer import train_trial

    from fusion_sweep.schema import code_fingerprint

    tc = TrialConfig.from_dict(configs[_ident(config)])
    if code_fingerprint() != ctx.code_fingerprint:  # a node runs other code than the driver
        raise RuntimeError(f"this node's fusion_sweep code fingerprint is {code_fingerprint()}, "
                           f"the driver's is {ctx.code_fingerprint}: install the same checkout "
                           f"on every node (cluster.yaml's file_mounts/setup_commands)")
    key = tc.trial_key(ctx.code_fingerprint)
    tags = {**_node_tags(), "fusion_sweep.num_threads": str(tc.num_threads),
            "fusion_sweep.ray_trial_id": tune.get_context().get_trial_id() or ""}
    run = TrialRun.open(ctx, tc, key, tags=tags)
    if run.finished:  # finished after Tune's last state snapshot: report, don't re-train
        tune.report({**run.final_metrics(), "trained": 0, "mlflow_run_id": run.run_id})
        return

    def on_epoch(rec) -> None:
        run.log_epoch(rec)
        tune.report({"epoch": rec.epoch, "train_loss": rec.train_loss, "val_acc": rec.val_acc,
                     "val_loss": rec.val_loss})

    try:
        result = train_trial(tc, callback=on_epoch)
        run.log_result(result, {"peak_rss_mb": peak_rss_mb()})
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


def _init_ray(address: str | None, out: TextIO) -> bool:
    """Connect or start Ray; returns True when this process started a local instance."""
    import ray

    kw = dict(logging_level="WARNING", log_to_driver=True)
    if address is None:
        ncpu = os.cpu_count() or 1
        print(f"starting a local Ray instance with {ncpu} CPUs (this machine)", file=out)
        # "local": a new instance even if `ray start` left one running here. Trials share
        # little through the object store, so it need not claim 30% of RAM.
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        ray.init(address="local", num_cpus=ncpu, include_dashboard=False,
                 object_store_memory=int(min(2 << 30, 0.3 * mem)), **kw)
        return True
    print(f"connecting to Ray at {address}", file=out)
    ray.init(address=address, **kw)
    return False


def launch(space_ref: str, *, name: str | None = None, address: str | None = None,
           tracking_uri: str | None = None, storage: str | None = None,
           max_concurrent: int | None = None, dry_run: bool = False, experiment: str | None = None,
           allow_code_change: bool = False, verbose: bool = False,
           until_decided: Any = None, out: TextIO | None = None) -> LaunchSummary | None:
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
        from fusion_sweep.adaptive import AdaptiveState

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
    with SweepLock(pf.exp_path), terminate_as_interrupt():
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
    tracker: Any  # tracking.SweepTracker
    code: str
    history: str
    commit: str
    adaptive: Any = None  # adaptive.AdaptiveState for --until-decided, else None


def _preflight(space: SearchSpace, name: str, points: list[GridPoint], tracking_uri: str | None,
               address: str | None, storage: str | None, experiment: str | None,
               allow_code_change: bool, out: TextIO) -> Preflight:
    """Everything that can fail does so here, before Ray starts."""
    from fusion_sweep import tracking

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
    from fusion_sweep import tracking

    space = pf.space
    parent_id = pf.tracker.start_parent(
        pf.name, grid_hash=pf.ghash, n_trials=len(pf.points), commit=pf.commit, code=pf.code,
        code_history=pf.history, description=space.description,
        params={"space": space.source, "datasets": list(space.datasets),
                "pes": list(space.pes), "fusions": list(space.fusions),
                "variants": [dict(v) for v in space.variant_list()],
                "seeds": list(space.seeds), "baseline": space.baseline,
                "metric": space.metric, "equivalence_margin": space.equivalence_margin,
                "directions": space.metric_directions(),
                "resources.cpu": space.cpu, "resources.gpu": space.gpu,
                "max_failures": space.max_failures})
    if pf.adaptive is not None:
        pf.tracker.client.set_tag(parent_id, ADAPTIVE, pf.adaptive.settings.to_json())
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
    """Train every grid point not FINISHED in MLflow; always close the parent run."""
    ctx, orphans = _open_parent(pf, out)
    summary = LaunchSummary(name=pf.name, total=len(pf.points), orphans_reconciled=len(orphans),
                            tracking_uri=pf.uri, experiment=pf.experiment,
                            parent_run_id=ctx.parent_run_id, experiment_path=pf.exp_path)
    status, started_ray, t0 = "FAILED", False, time.time()
    batch, round_no = list(pf.points), 0
    try:
        while batch:
            pending = [p for p in batch
                       if trial_status(pf.tracker, pf.name, p.key)[0] != "FINISHED"]
            if not pending:
                print(f"all {len(batch)} trials of sweep {pf.name!r}"
                      f"{' in this round' if pf.adaptive else ''} already finished: nothing "
                      f"to run", file=out)
            else:
                if len(pending) < len(batch):
                    print(f"resuming sweep {pf.name!r}: {len(batch) - len(pending)} of "
                          f"{len(batch)} trials already finished (found by trial key in "
                          f"MLflow); {len(pending)} to train", file=out)
                if not started_ray:
                    started_ray = _init_ray(pf.address, out)
                    _reclaim_sigterm()
                    _warn_resources(pf.space, pf.uri, out)
                    warn_mixed_platforms(pf.space, out)  # one platform per pair
                    print(f"MLflow: {pf.uri} (experiment {pf.experiment!r}); Ray auth: {auth}",
                          file=out)
                with _disk_watch(pf, out):
                    results = _run_tuner(pf.space, pending, pf.exp_path, ctx, max_concurrent,
                                         verbose, out, round_no)
                summary.tune_errors += [error_reason(e) for e in results.errors]
                _fail_dead_trials(results, pf)
            batch = _next_round(pf, out) if pf.adaptive is not None else []
            pf.points.extend(batch)
            round_no += 1
            summary.total = len(pf.points)
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        print("\ninterrupted: run the same command again to resume", file=out)
    finally:
        if started_ray or pf.address is not None:
            import ray

            ray.shutdown()  # a no-op when Ray never started
        _summarize(summary, pf.tracker, pf.points, ctx, out)
        if status == "FINISHED" and not summary.ok:
            status = "FAILED" if summary.failed or summary.tune_errors else "KILLED"
        artifacts = [Path(summary.results_csv)] if summary.results_csv else []
        pf.tracker.finish_parent(ctx.parent_run_id, status, {
            "trials_finished": summary.finished, "trials_failed": summary.failed,
            "trials_trained_this_launch": summary.trained_now, "trials_retried": summary.retried,
            "launch_seconds": time.time() - t0}, artifacts)
    return summary


def _next_round(pf: "Preflight", out: TextIO) -> list[GridPoint]:
    """Adaptive seeding (`--until-decided`): decide every comparison on the trials so far
    and return the next round's grid points (none: every comparison is decided or out of
    seeds). MLflow is re-read: the round's trials have just finished."""
    from fusion_sweep import adaptive

    pf.tracker.__dict__.pop("_status_cache", None)
    return adaptive.next_round(pf, out)


def _disk_watch(pf: "Preflight", out: TextIO):
    """A DiskWatch over the launch's local write paths: Tune's storage, a sqlite MLflow store."""
    from fusion_sweep.diskwatch import DiskWatch
    from fusion_sweep.tracking import sqlite_path

    paths = [] if "://" in pf.exp_path else [("Ray Tune storage", Path(pf.exp_path))]
    db = sqlite_path(pf.uri)
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


def trial_status(tracker: Any, sweep: str, key: str) -> tuple[str, str]:
    """(status, run id) of the trial's MLflow run, ("", "") when it has none: the resume rule's
    one question. Cached per tracker and sweep for the length of one launch."""
    cache = tracker.__dict__.setdefault("_status_cache", {})
    if sweep not in cache:
        from fusion_sweep import tracking

        runs: dict[str, tuple[str, str]] = {}
        for r in tracker.trial_runs(sweep):  # oldest first: a FINISHED run wins
            k = r.data.tags.get(tracking.TRIAL_KEY)
            if runs.get(k, ("",))[0] != "FINISHED":
                runs[k] = (r.info.status, r.info.run_id)
        cache[sweep] = runs
    return cache[sweep].get(key, ("", ""))


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
    from fusion_sweep import tracking

    uri = tracking.resolve_tracking_uri(tracking_uri)
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///"):]).is_file():
        return None
    tracking.check_tracking_uri(uri)
    tracker = tracking.SweepTracker(uri, experiment or space.experiment)
    if tracker.client.get_experiment_by_name(tracker.experiment) is None \
            or tracker.find_parent(name) is None:
        return None
    out = []
    for p in points:
        status, run_id = trial_status(tracker, name, p.key)
        if status == "FINISHED":
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
    from fusion_sweep import tracking

    if parent is None:
        return code
    history = parent.data.tags.get(tracking.CODE_HISTORY) or ""
    olds = sorted({r.data.tags.get(tracking.CODE_FINGERPRINT, "unknown")
                   for r in tracker.trial_runs(name) if r.info.status == "FINISHED"} - {code})
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
    local instance is sized to it (`_init_ray`), so such a trial could never start."""
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
    50k-token vocabulary cap (synthetic regimes: their filler vocabulary).
    """
    if space.memory_gb is not None:
        return int(space.memory_gb * 2**30)
    from fusion_sweep.trial.data.registry import DATASETS

    c = config
    spec = DATASETS[c.dataset]
    vocab = int(spec.synthetic.get("filler_vocab", 500)) + 64 if spec.generated else 50_000
    params = vocab * c.d_model + c.layers * (4 * c.d_model ** 2 + 2 * c.d_model * c.dim_ff) \
        + 3 * c.d_model ** 2 + c.max_len * c.d_model
    if space.gpu > 0:
        return int(ACTOR_BASE_BYTES + 2 * 4 * params)  # a host copy of weights and checkpoint
    from fusion_sweep.trial.models.encoder import ENCODERS

    B, L, H = c.batch_size, c.max_len, c.heads
    attn = 4 if c.attn_dropout > 0 else 1
    maps = ENCODERS[c.encoder].attention_maps(c)  # attention-sized tensors per step
    acts = maps * 16 * B * L * max(c.d_model, c.dim_ff // 2) + attn * maps * B * H * L * L
    return int(ACTOR_BASE_BYTES + 4 * 4 * params + 1.5 * 4 * acts)


def _warn_resources(space: SearchSpace, uri: str, out: TextIO) -> None:
    import ray

    from fusion_sweep.tracking import is_local_store

    res = ray.cluster_resources()
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    if res.get("CPU", 0) < space.cpu or res.get("GPU", 0) < space.gpu:
        print(f"warning: one trial needs cpu={space.cpu:g}, gpu={space.gpu:g} but the cluster has "
              f"CPU={res.get('CPU', 0):g}, GPU={res.get('GPU', 0):g} now; trials wait until an "
              f"autoscaler adds such a node", file=out)
    hosts = {n.get("NodeManagerAddress") for n in nodes}
    loopback = urllib.parse.urlparse(uri).hostname in ("127.0.0.1", "localhost", "::1")
    if len(hosts) > 1 and loopback:
        print(f"warning: the tracking URI {uri} is this machine's loopback address, but trials "
              f"also run on other machines ({len(hosts)} node IPs); give an address they can "
              f"reach, e.g. http://<head-ip>:5000", file=out)
    if len(nodes) > 1 and is_local_store(uri):
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
        from fusion_sweep.progress import SweepProgress

        return SweepProgress(out if out is not sys.stdout else None)
    from ray.tune import CLIReporter

    return CLIReporter(parameter_columns=list(IDENTITY_FIELDS),
                       metric_columns={"epoch": "epoch", "val_acc": "val_acc",
                                       "test_acc": "test_acc"},
                       max_report_frequency=15, sort_by_metric=False)


def _summarize(s: LaunchSummary, tracker, points: list[GridPoint], ctx, out: TextIO) -> None:
    """Fill the summary from MLflow (the source of truth) and write results.csv."""
    import csv

    from fusion_sweep import tracking

    try:
        runs = {r.data.tags.get(tracking.TRIAL_KEY): r for r in tracker.trial_runs(s.name)}
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
            s.kept += status == "FINISHED" and not touched
            s.retried += row["attempts"] > 1
        rows.append(row)
        if status == "FINISHED":
            s.finished += 1
        elif status == "MISSING":
            s.missing += 1
        elif status == "KILLED":
            s.killed += 1
        else:
            s.failed += 1
            s.failed_trials.append(f"{c.describe()}: "
                                   f"{r.data.tags.get('fusion_sweep.error', status)}")
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
    from fusion_sweep.tracking import (DEFAULT_EXPERIMENT, default_ui_store, is_local_store,
                                       resolve_tracking_uri)

    lines = ["", f"== sweep {s.name!r}: {s.finished}/{s.total} trials finished "
                 f"({s.kept} kept from earlier launches); {s.trained_now} trained in this launch; "
                 f"{s.failed} failed; {s.killed + s.missing} not run; {s.retried} retried "
                 f"(ran more than once); {s.seconds:.0f} s =="]
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
    lines.append(f"  MLflow:     {s.tracking_uri}  experiment {s.experiment!r}, parent run "
                 f"{s.parent_run_id}")
    uri_arg = "" if s.tracking_uri == resolve_tracking_uri() else f" --tracking-uri {s.tracking_uri}"
    exp_arg = "" if s.experiment == DEFAULT_EXPERIMENT else f" --experiment {s.experiment}"
    lines.append(f"  statistics: fusion-sweep stats --sweep {s.name}{uri_arg}{exp_arg}")
    if is_local_store(s.tracking_uri):
        store_arg = "" if s.tracking_uri == default_ui_store() else \
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

"""`fusion-sweep launch | tune | ui`: sweeps on Ray Tune, tracked in MLflow.

Heavy imports (ray, mlflow, torch) happen inside the command functions, so `--help`
and argument errors stay instant.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
from typing import Any

from fusion_sweep.launch import signals
from fusion_sweep.analysis.sequential import DEFAULT_METHOD, SEQUENTIAL_METHODS
from fusion_sweep.schema import DEFAULT_EXPERIMENT, LOOPBACK_HOSTS, resolve_tracking_uri, sqlite_path
from fusion_sweep.plan.space_files import shipped_spaces
from fusion_sweep.tracking.sweep_list import list_sweeps
from fusion_sweep.ui.server import UIServer, port_free
from fusion_sweep.tracking.view import Landing, default_ui_store, prepare_ui_experiment, ui_url
from fusion_sweep.ui.proxy import UIProxy, free_loopback_port
from fusion_sweep.errors import UserError


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {v}")
    return v


def _port(text: str) -> int:
    v = _positive_int(text)
    if v > 65535:
        raise argparse.ArgumentTypeError(f"expected a port in 1..65535, got {v}")
    return v


def _ray_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--address", metavar="auto|HOST:PORT",
                   help="an existing Ray cluster ('auto' = the one on this machine, e.g. the head "
                        "node after `ray up cluster.yaml`); default: start a local Ray instance "
                        "sized to this machine (RAY_ADDRESS is honoured too)")
    p.add_argument("--storage", metavar="PATH_OR_URI",
                   help="where Ray Tune keeps the sweep's state (default ./ray_results; a URI "
                        "such as s3://bucket/path for clusters without a shared disk)")
    p.add_argument("--max-concurrent", type=_positive_int, metavar="N",
                   help="at most N trials at once (default: as many as the resources allow; a "
                        "resumed sweep keeps the value it was started with)")


def _adaptive_args(p: argparse.ArgumentParser) -> None:
    """`launch --until-decided` and its settings (`fusion_sweep.launch.adaptive`)."""
    p.add_argument("--until-decided", action="store_true",
                   help="adaptive seeds: after the space's seeds, add --seed-batch seeds at a time "
                        "to the (dataset, variant group) families whose comparisons an anytime-"
                        "valid confidence sequence has not yet decided (better, worse, or "
                        "equivalent within the space's equivalence_margin); stop when all are "
                        "decided or --max-seeds is reached (docs/sequential.md)")
    p.add_argument("--max-seeds", type=_positive_int, metavar="N",
                   help="with --until-decided: at most N seeds per family (default 20)")
    p.add_argument("--seed-batch", type=_positive_int, metavar="K",
                   help="with --until-decided: seeds added per round to each undecided family "
                        "(default 5)")
    p.add_argument("--sequential-method", choices=tuple(SEQUENTIAL_METHODS), default=None,
                   help=f"with --until-decided: the confidence sequence that decides (default "
                        f"{DEFAULT_METHOD}; " + "; ".join(
                            f"{k}: about the {v.estimand}" for k, v in SEQUENTIAL_METHODS.items())
                        + "; docs/sequential.md)")


def add_parsers(subparsers: Any) -> None:
    """The sweep commands: launch, tune, ui, sweeps."""
    shipped = ", ".join(shipped_spaces())
    _add_launch(subparsers, shipped)
    _add_tune(subparsers, shipped)
    _add_ui(subparsers)
    _add_sweeps(subparsers)


def _add_launch(subparsers: Any, shipped: str) -> None:
    p = subparsers.add_parser(
        "launch", help="run a search space's grid on Ray Tune, tracked in MLflow (resumes)",
        description="Run one Ray Tune trial per (dataset, encoder, pe, fusion, seed) of a search space, each "
                    "tracked as an MLflow run under the sweep's parent run. Launching an existing "
                    "sweep name resumes it: finished trials are never re-run, interrupted or "
                    "failed ones run again (also after the driver was killed).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  fusion-sweep launch                      # the default space, local Ray\n"
               "  fusion-sweep launch smoke --dry-run\n"
               "  fusion-sweep launch paper-table1 --address auto   # on a cluster head (cluster.yaml "
               "sets MLFLOW_TRACKING_URI)")
    p.add_argument("space", nargs="?", default="default",
                   help=f"a search-space YAML file or a shipped name ({shipped}); default: default")
    p.add_argument("--name", help="sweep name (default: the space's `name`); reuse it to resume")
    p.add_argument("--tracking-uri", metavar="URI",
                   help="MLflow tracking server or store (default: $MLFLOW_TRACKING_URI, else "
                        "sqlite:///<cwd>/mlflow.db)")
    p.add_argument("--experiment", help="MLflow experiment (default: the space's, else fusion-sweep)")
    _ray_args(p)
    p.add_argument("--dry-run", action="store_true",
                   help="print the grid (trial count, resources per trial) and exit; starts nothing")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="show Ray Tune's own output (every trial's start, results and end, full "
                        "tracebacks) instead of the compact progress (a status line on a "
                        "terminal, else one line per finished trial)")
    p.add_argument("--allow-code-change", action="store_true",
                   help="resume a sweep some of whose finished trials were trained by other code "
                        "(a component they run changed; --dry-run lists them): retrain those "
                        "trials under this code, keep every other; the old runs stay in MLflow, "
                        "marked superseded")
    _adaptive_args(p)
    p.set_defaults(func=run_launch)


def _add_tune(subparsers: Any, shipped: str) -> None:
    p = subparsers.add_parser(
        "tune", help="choose shared hyperparameters with Optuna, write a frozen search space",
        description="Optional stage before a controlled sweep: Optuna (ray.tune OptunaSearch) "
                    "searches the space's `tune.search` ranges on the validation accuracy of the "
                    "baseline fusion, on the `tune.seeds` (kept apart from the sweep's seeds); the "
                    "test split is never read. It writes a new space with the chosen values fixed "
                    "for every fusion; `fusion-sweep launch` runs that file unchanged.")
    p.add_argument("space", help=f"a search-space YAML file or a shipped name ({shipped})")
    p.add_argument("--budget", type=_positive_int, metavar="N",
                   help="Optuna trials per dataset (default: the space's tune.budget)")
    p.add_argument("--output", "-o", metavar="FILE",
                   help="where to write the frozen space (default ./<name>-tuned.yaml)")
    _ray_args(p)
    p.set_defaults(func=run_tune)


def _add_ui(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "ui", help="start the MLflow UI on the local store, bound to 127.0.0.1",
        description="Serve the MLflow UI for the local store (sqlite:///<cwd>/mlflow.db) on "
                    "127.0.0.1 and print one line, the URL of one sweep's trial runs (--sweep, "
                    "default the newest): the Runs table in MLflow's model-training layout, "
                    "grouped by dataset and fusion (a group row: the mean over its seeds), sorted "
                    "short -> long regime, then variant, then seed, one colour per fusion, the "
                    "test_acc chart first in the chart view, with dataset, pe, fusion, seed and "
                    "the final metrics as columns. The plain root URL and every run's page open "
                    "in the same layout. MLflow's own output goes to a log file, named only if "
                    "the server fails. Ctrl-C (or SIGTERM) stops the server and every process it "
                    "started. On a cluster, the head node's server is reached with `ray attach "
                    "cluster.yaml -p 5000` instead.")
    p.add_argument("--port", type=_port, default=5000, help="port (default 5000)")
    p.add_argument("--host", default="127.0.0.1",
                   help="interface to bind (default 127.0.0.1: only this machine; anything else "
                        "exposes every run to the network)")
    p.add_argument("--backend-store-uri", metavar="URI",
                   help="the store to serve (default: $MLFLOW_TRACKING_URI when it is a sqlite "
                        "store, else sqlite:///<cwd>/mlflow.db)")
    p.add_argument("--experiment", metavar="NAME",
                   help="the experiment whose trial runs the printed URL opens (default "
                        "fusion-sweep)")
    p.add_argument("--sweep", metavar="NAME",
                   help="open on this sweep's trials (default: the newest sweep; "
                        "`fusion-sweep sweeps` lists them)")
    p.set_defaults(func=run_ui)


def _add_sweeps(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "sweeps", help="list the sweeps in a store: trials, state, code, dates",
        description="List every sweep of an experiment in a store, newest first: its state, "
                    "its trial runs by status (of the planned total), the code fingerprint it "
                    "ran, and when it started and ended (UTC).")
    p.add_argument("--tracking-uri", metavar="URI",
                   help="the store (default: $MLFLOW_TRACKING_URI, else sqlite:///<cwd>/mlflow.db)")
    p.add_argument("--experiment", metavar="NAME", help="MLflow experiment (default fusion-sweep)")
    p.set_defaults(func=run_sweeps)


def run_launch(args: argparse.Namespace) -> int:
    from fusion_sweep.launch.sweep import launch

    summary = launch(args.space, name=args.name, address=args.address,
                     tracking_uri=args.tracking_uri, storage=args.storage,
                     max_concurrent=args.max_concurrent, dry_run=args.dry_run,
                     experiment=args.experiment,
                     allow_code_change=getattr(args, "allow_code_change", False),
                     verbose=getattr(args, "verbose", False),
                     until_decided=_adaptive_settings(args))
    if summary is not None and summary.interrupted:
        return 130  # as a shell reports a Ctrl-C'd command; the summary said how to resume
    return 0 if summary is None or summary.ok else 1


def _adaptive_settings(args: argparse.Namespace) -> Any:
    """--until-decided's settings, or None; --max-seeds/--seed-batch alone are an error."""
    from fusion_sweep.launch.adaptive import DEFAULT_MAX_SEEDS, DEFAULT_SEED_BATCH, AdaptiveSettings

    max_seeds, batch = getattr(args, "max_seeds", None), getattr(args, "seed_batch", None)
    method = getattr(args, "sequential_method", None)
    if not getattr(args, "until_decided", False):
        given = [f for f, v in (("--max-seeds", max_seeds), ("--seed-batch", batch),
                                ("--sequential-method", method)) if v is not None]
        if given:
            raise UserError(f"{' and '.join(given)}: only with --until-decided (adaptive seeds)")
        return None
    return AdaptiveSettings(max_seeds=max_seeds or DEFAULT_MAX_SEEDS,
                            seed_batch=batch or DEFAULT_SEED_BATCH,
                            **({"method": method} if method else {}))


def run_tune(args: argparse.Namespace) -> int:
    from fusion_sweep.launch.hpsearch import search_hyperparameters

    search_hyperparameters(args.space, budget=args.budget, output=args.output, address=args.address,
               storage=args.storage, max_concurrent=args.max_concurrent)
    return 0


def run_sweeps(args: argparse.Namespace) -> int:
    """Print the store's sweeps as a table (a note on stderr when there are none)."""
    store = resolve_tracking_uri(args.tracking_uri)
    experiment = args.experiment or DEFAULT_EXPERIMENT
    db = sqlite_path(store)
    if db is not None and not db.is_file():
        raise UserError(f"--tracking-uri {store}: no store at {db} (no sweep launched here; "
                         f"run `fusion-sweep launch` first, or point --tracking-uri at a store)")
    sweeps = list_sweeps(store, experiment)
    if not sweeps:
        print(f"no sweeps in experiment {experiment!r} of {store}", file=sys.stderr)
        return 0
    print(format_sweeps(sweeps))
    return 0


def format_sweeps(sweeps: list[dict]) -> str:
    """Fixed-width table: sweep, state, trials (finished/planned, others by status), code,
    started, ended."""
    rows = [["sweep", "state", "trials", "code", "started (UTC)", "ended (UTC)"]]
    for s in sweeps:
        counts = dict(s["trials"])
        done = counts.pop("FINISHED", 0)
        total = s["planned"] or str(done + sum(counts.values()))
        other = ", ".join(f"{n} {k.lower()}" for k, n in sorted(counts.items()))
        rows.append([s["sweep"], s["state"].lower(), f"{done}/{total} finished"
                     + (f" ({other})" if other else ""), (s["code_fingerprint"] or "—")[:12],
                     s["start"] or "—", s["end"] or "—"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows)


def run_ui(args: argparse.Namespace) -> int:
    """Serve the store's MLflow UI on 127.0.0.1 until Ctrl-C / SIGTERM / SIGHUP, then stop the
    server with every process it started (its process group), leaving the port free."""
    store = args.backend_store_uri or default_ui_store()
    db = sqlite_path(store)
    if db is None:  # mlflow server would die with a traceback
        raise UserError(f"--backend-store-uri {store}: not a sqlite:/// store; `fusion-sweep ui` "
                         f"serves a local sqlite:///PATH store (open an http(s):// tracking "
                         f"server's own UI directly)")
    if not db.parent.is_dir():
        raise UserError(f"--backend-store-uri {store}: directory {db.parent} does not exist")
    if not db.exists():
        print(f"note: {db} does not exist yet (no sweep launched here); the UI starts empty",
              file=sys.stderr)
    if not port_free(args.host, args.port):
        raise UserError(f"--port {args.port}: {args.host}:{args.port} is already in use "
                         f"(another MLflow UI?); choose another with --port")
    if args.host not in LOOPBACK_HOSTS:
        print(f"warning: --host {args.host} exposes the MLflow UI and its REST API on port "
              f"{args.port} to the network, without authentication: anyone who can reach this "
              f"machine can read, change and delete every run, metric and artifact in {store}",
              file=sys.stderr)
    experiment = args.experiment or DEFAULT_EXPERIMENT
    try:
        landing = prepare_ui_experiment(store, experiment, getattr(args, "sweep", None))
    except UserError:  # an unknown --sweep is the user's: one error line (cli.py), not the
        raise          # warning below, which is for a store the UI cannot prepare
    except Exception as e:  # noqa: BLE001 - the UI still serves; only the landing view is lost
        print(f"warning: could not prepare experiment {experiment!r} for the UI: {e}",
              file=sys.stderr)
        landing = Landing()
    if landing.experiment_id is None and db.exists():
        print(f"note: no experiment {experiment!r} in {store}; opening the experiment list",
              file=sys.stderr)
    return _serve(args, store, landing)


def _serve(args: argparse.Namespace, store: str, landing: Landing) -> int:
    """mlflow server on a private loopback port, behind a front on --host:--port that opens
    the model-training layout (fusion_sweep.ui.proxy explains why). Prints only the URL to
    open; the server's own output goes to a log file, named only when the server fails (and
    removed after a clean stop)."""
    # SIGINT too: a `&`-started process inherits it ignored
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    fd, log_path = tempfile.mkstemp(prefix="fusion-sweep-ui-", suffix=".log")
    log = os.fdopen(fd, "w", buffering=1)
    server = UIServer(store, "127.0.0.1", free_loopback_port(), log=log)
    front = UIServer(store, args.host, args.port)  # its base_url: what the user opens
    url = ui_url(front.base_url, landing.experiment_id)
    proxy, failed = None, True
    with signals.interrupting(stops):
        try:
            server.start()
            if not server.wait_ready():
                code = server.proc.poll()
                why = f"exited with code {code}" if code is not None else "did not answer in 120 s"
                print(f"error: mlflow server {why}; its log: {log_path}", file=sys.stderr)
                return code or 1
            proxy = UIProxy(args.host, args.port, server.port, landing=url[len(front.base_url) + 1:],
                            group_colors=landing.group_colors, log=log).start()
            print(url, flush=True)
            code = server.proc.wait()
            if code:
                print(f"error: mlflow server exited with code {code}; its log: {log_path}",
                      file=sys.stderr)
            failed = bool(code)
            return code
        except KeyboardInterrupt:
            failed = False
            return 0
        finally:
            signals.ignore(stops)  # a second Ctrl-C must not cut the cleanup short
            if proxy is not None:
                proxy.stop()
            server.stop()
            log.close()
            if not failed:
                os.unlink(log_path)

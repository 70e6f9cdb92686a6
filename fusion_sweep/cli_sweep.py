"""`fusion-sweep launch | tune | ui`: sweeps on Ray Tune, tracked in MLflow.

Heavy imports (ray, mlflow, torch) happen inside the command functions, so `--help`
and argument errors stay instant.
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any


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


def add_parsers(subparsers: Any) -> None:
    from fusion_sweep.space import shipped_spaces

    shipped = ", ".join(shipped_spaces())
    p = subparsers.add_parser(
        "launch", help="run a search space's grid on Ray Tune, tracked in MLflow (resumes)",
        description="Run one Ray Tune trial per (dataset, pe, fusion, seed) of a search space, each "
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
    p.set_defaults(func=run_launch)

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

    p = subparsers.add_parser(
        "ui", help="start the MLflow UI on the local store, bound to 127.0.0.1",
        description="Serve the MLflow UI for the local store (sqlite:///<cwd>/mlflow.db) on "
                    "127.0.0.1 and print its URL. On a cluster, the head node's server is reached "
                    "with `ray attach cluster.yaml -p 5000` instead.")
    p.add_argument("--port", type=_port, default=5000, help="port (default 5000)")
    p.add_argument("--host", default="127.0.0.1",
                   help="interface to bind (default 127.0.0.1: only this machine; anything else "
                        "exposes every run to the network)")
    p.add_argument("--backend-store-uri", metavar="URI",
                   help="the store to serve (default sqlite:///<cwd>/mlflow.db)")
    p.set_defaults(func=run_ui)


def run_launch(args: argparse.Namespace) -> int:
    from fusion_sweep.sweep import launch

    summary = launch(args.space, name=args.name, address=args.address,
                     tracking_uri=args.tracking_uri, storage=args.storage,
                     max_concurrent=args.max_concurrent, dry_run=args.dry_run,
                     experiment=args.experiment)
    return 0 if summary is None or summary.ok else 1


def run_tune(args: argparse.Namespace) -> int:
    from fusion_sweep.sweep import tune_space

    tune_space(args.space, budget=args.budget, output=args.output, address=args.address,
               storage=args.storage, max_concurrent=args.max_concurrent)
    return 0


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def ui_command(store: str, host: str, port: int, artifacts: Path) -> list[str]:
    return [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", store,
            "--host", host, "--port", str(port), "--workers", "1",
            "--serve-artifacts", "--artifacts-destination", artifacts.as_uri()]


def run_ui(args: argparse.Namespace) -> int:
    from fusion_sweep.tracking import default_tracking_uri

    store = args.backend_store_uri or default_tracking_uri()
    if store.startswith("sqlite:///"):
        db = Path(store[len("sqlite:///"):])
        if not db.parent.is_dir():
            raise ValueError(f"--backend-store-uri {store}: directory {db.parent} does not exist")
        if not db.exists():
            print(f"note: {db} does not exist yet (no sweep launched here); the UI starts empty",
                  file=sys.stderr)
        artifacts = db.parent / "mlartifacts"
    else:
        artifacts = Path.cwd() / "mlartifacts"
    if not _port_free(args.host, args.port):
        raise ValueError(f"--port {args.port}: {args.host}:{args.port} is already in use "
                         f"(another MLflow UI?); choose another with --port")
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: binding {args.host}: anyone who can reach this machine can read and "
              f"change these runs", file=sys.stderr)
    # A default `mlflow server` forks ~15 processes (2.4 GB); these flags make it 2 (DESIGN.md §8).
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    proc = subprocess.Popen(ui_command(store, args.host, args.port, artifacts), env=env)
    shown = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
    url = f"http://{shown}:{args.port}"
    try:
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2):
                    break
            except OSError:
                time.sleep(0.5)
        if proc.poll() is not None:
            print(f"fusion-sweep ui: mlflow server exited with code {proc.returncode}", file=sys.stderr)
            return proc.returncode or 1
        print(f"MLflow UI: {url}   (store {store}; Ctrl-C to stop)", flush=True)
        return proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()

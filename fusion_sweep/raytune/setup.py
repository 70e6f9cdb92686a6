"""Starting Ray for a launch or a tune: where Tune keeps its state, which cluster, the
environment every Ray process must agree on, and the local instance sized to this machine.

Ray itself is imported inside the functions that start it, so that a dry run, `--help` and
bad input never import it.
"""
from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import TextIO

from fusion_sweep.errors import UserError
from fusion_sweep.trial.platform import CUBLAS_WORKSPACE

DEFAULT_STORAGE_DIRNAME = "ray_results"


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
            raise UserError(f"--address auto: no running Ray cluster found on this machine ({e}); "
                             f"start one with `ray start --head` (or `ray up cluster.yaml` and run "
                             f"this on the head node), or omit --address for a local instance") from None
        if not resolved:
            raise UserError("--address auto: no running Ray cluster found on this machine; start "
                             "one with `ray start --head`, or omit --address for a local instance")
        host_port = resolved
    else:
        host_port = address.split("://", 1)[-1]
    host, _, port = host_port.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"--address {address!r}: expected 'auto' or HOST:PORT (e.g. 10.0.0.5:6379)")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as e:
        raise UserError(f"--address {address!r}: cannot reach a Ray cluster at {host}:{port} ({e}); "
                         f"check the address (`ray status` on the head node prints it), or omit "
                         f"--address for a local instance") from None
    return address


def configure_ray_env(address: str | None, verbose: bool = False,
                      tune_output: bool = True) -> str:
    """Environment every Ray process of the sweep must agree on; returns the auth mode.

    Ray 2.60 turns token auth on for a new local cluster, and for `ray start` when a token
    exists; a driver whose RAY_AUTH_MODE does not match fails after ~20 s (measured here).
    An explicit RAY_AUTH_MODE always wins. Otherwise: a local instance uses `token` (Ray's
    own default, made explicit so every worker inherits it); connecting to a cluster uses
    `token` when a token is available here, as `ray start` would have, else `disabled`.

    Ray Tune's own switches (documented Tune environment variables, read when a Tuner runs):
    `TUNE_DISABLE_SIGINT_HANDLER=1`, so Ctrl-C reaches this driver as a KeyboardInterrupt
    (it closes the sweep's runs and says how to resume; Tune's handler would instead stop
    gracefully and advise `Tuner.restore`, which this tool never uses); and, unless
    `verbose`, `TUNE_PRINT_ALL_TRIAL_ERRORS=0`: the progress display prints each failed
    attempt as one line with the path of its traceback, instead of Tune logging the trace.
    Without `tune_output` (a launch without --verbose, whose progress is our own callback),
    `RAY_AIR_NEW_OUTPUT=0`: Tune's legacy output engine, which at `verbose=0` prints nothing.
    The new engine (Ray 2.60's default) prints its "Configuration for experiment" box, the
    results path and a TensorBoard hint at every verbosity, 0 included (its reporter's
    `experiment_started`, ray/tune/experimental/output.py), and ignores
    `RunConfig(progress_reporter=...)`; no verbose level, logger level or callback turns the
    box off, and text is never filtered here.

    Why process-wide environment variables: Ray reads them in the driver and copies the
    driver's environment to every worker it starts, so setting them here is how the choice
    reaches the workers. Only `launch`/`tune` call this, right before Ray starts.
    """
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
    os.environ["TUNE_PRINT_ALL_TRIAL_ERRORS"] = "1" if verbose else "0"
    if not tune_output:
        os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    mode = os.environ.get("RAY_AUTH_MODE")
    if mode is None:
        if address is None:
            mode = "token"
        else:
            token_file = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
            mode = "token" if (os.environ.get("RAY_AUTH_TOKEN") or token_file.is_file()) else "disabled"
        os.environ["RAY_AUTH_MODE"] = mode
    return mode


def worker_env() -> dict[str, str]:
    """Variables every trial worker needs before it first touches CUDA, passed through Ray's
    `runtime_env` (set inside the trial would be too late: cuBLAS reads its workspace setting
    when CUDA's context starts): the cuBLAS workspace that makes cuBLAS reproducible under
    deterministic algorithms (`trial.platform.CUBLAS_WORKSPACE`, its one home)."""
    return {"CUBLAS_WORKSPACE_CONFIG": CUBLAS_WORKSPACE}


def init_ray(address: str | None, out: TextIO) -> bool:
    """Connect or start Ray; returns True when this process started a local instance."""
    import ray

    kw = dict(logging_level="WARNING", log_to_driver=True,
              runtime_env={"env_vars": worker_env()})
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

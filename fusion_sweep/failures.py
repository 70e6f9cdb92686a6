"""Why a trial failed, in one line: a trial error's reason, and a hint where its worker was killed
from outside (Ray's memory monitor, a signal, a lost node); closing the runs such trials left."""
from __future__ import annotations

from typing import Any, Iterator

from fusion_sweep import tracking
from fusion_sweep.grid import GridPoint
from fusion_sweep.trainable import ident


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


def fail_dead_trials(results: Any, points: list[GridPoint], tracker: "tracking.SweepTracker",
                     sweep: str) -> None:
    """Close, as FAILED with the reason, the MLflow run of every trial whose worker died on
    Tune's last attempt (left RUNNING: no trial code survived to close it). Without this the
    summary could only say RUNNING, and the next launch would call it an orphan."""
    by_ident = {p.ident: p for p in points}
    reasons = {by_ident[ident(r.config)].key: error_reason(r.error) for r in results
               if r.error is not None and r.config and ident(r.config) in by_ident}
    if reasons:
        tracker.fail_dead_trials(sweep, reasons)

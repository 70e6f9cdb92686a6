"""Why a trial failed, in one line: a trial error's reason, and a hint where its worker was killed
from outside (Ray's memory monitor, a signal, a lost node); closing the runs such trials left."""
from __future__ import annotations

from typing import Any, Iterator

from fusion_sweep.tracking import runs as tracking
from fusion_sweep.plan.grid import GridPoint
from fusion_sweep.plan.grid import ident_of


# What a trial error's type means for the user, when the error itself does not say it.
_HOST_OOM_HINT = ("Ray's memory monitor killed the trial's worker: the node's memory use passed "
                  "RAY_memory_usage_threshold. Declare more memory per trial (`resources: "
                  "{memory_gb: ...}` in the space) so that Ray packs fewer trials per node, or "
                  "lower --max-concurrent")
_GPU_OOM_HINT = ("the trial ran out of GPU memory (CUDA), not host memory: lower batch_size or "
                 "max_len, give each trial a larger GPU share (`resources: {gpu: ...}` in the "
                 "space: fewer trials per GPU), or train in bf16 (`precision: bf16`)")
_ERROR_HINTS = {
    "TrialKilledForMemory": _HOST_OOM_HINT,  # ray_compat's name for the memory monitor's kill
    "ActorDiedError": "the trial's worker process died (killed, or its node was lost)",
    "ActorUnavailableError": "the trial's worker process became unreachable",
    "NodeDiedError": "the node running the trial was lost",
}
# Two libraries name their out-of-memory error OutOfMemoryError: torch's (a CUDA allocation
# failed in the trial) and Ray's (the memory monitor killed the worker). The class's module
# tells them apart; Ray's wrapper of a trial's error subclasses the original class.
_OOM_BY_MODULE = {"torch": ("OutOfMemoryError (GPU)", _GPU_OOM_HINT),
                  "ray": ("OutOfMemoryError", _HOST_OOM_HINT)}


def out_of_memory(exc: BaseException) -> str | None:
    """'torch' (CUDA out of memory), 'ray' (the host's memory monitor), or None."""
    for e in (exc, *_causes(exc)):
        for cls in type(e).__mro__:
            if cls.__name__ == "OutOfMemoryError":
                root = cls.__module__.split(".")[0]
                if root in _OOM_BY_MODULE:
                    return root
        if type(e).__name__ == "TrialKilledForMemory":
            return "ray"
    return None


def error_reason(exc: BaseException) -> str:
    """One line for a trial error: the exception's type, its first meaningful line, and a hint
    where the error alone does not say what to do (out of memory: GPU or host; a worker
    killed from outside)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    # Ray wraps a trainable's own exception: its last line is the original error
    wrapped = type(exc).__name__.startswith(("RayTaskError", "TuneError"))
    first = (lines[-1] if wrapped else lines[0]) if lines else ""
    oom = out_of_memory(exc)
    if oom is not None:
        shown, hint = _OOM_BY_MODULE[oom]
    else:
        names = [type(exc).__name__, *(type(c).__name__ for c in _causes(exc))]
        shown = type(exc).__name__
        hint = next((_ERROR_HINTS[n] for n in names if n in _ERROR_HINTS), "")
    text = f"{shown}: {first[:300]}"
    return f"{text} ({hint})" if hint else text


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """The exceptions behind `exc`: its cause/context chain, and the original error a Ray
    wrapper carries (`RayTaskError.cause`)."""
    seen = {id(exc)}
    c = exc.__cause__ or exc.__context__ or getattr(exc, "cause", None)
    while isinstance(c, BaseException) and id(c) not in seen:
        seen.add(id(c))
        yield c
        c = c.__cause__ or c.__context__ or getattr(c, "cause", None)


def fail_dead_trials(results: Any, points: list[GridPoint], tracker: "tracking.SweepTracker",
                     sweep: str) -> None:
    """Close, as FAILED with the reason, the MLflow run of every trial whose worker died on
    Tune's last attempt (left RUNNING: no trial code survived to close it). Without this the
    summary could only say RUNNING, and the next launch would call it an orphan."""
    by_ident = {p.ident: p for p in points}
    reasons = {by_ident[ident_of(r.config)].key: error_reason(r.error) for r in results
               if r.error is not None and r.config and ident_of(r.config) in by_ident}
    if reasons:
        tracker.fail_dead_trials(sweep, reasons)

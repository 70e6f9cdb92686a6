"""Workarounds for Ray behaviour that would break a sweep: the one home for them.

Imported by the launching process only, once Ray is needed (it imports Ray at import time).

`tolerate_memory_kills()`: when Ray's memory monitor kills a trial's worker while a Tune
trial runs in it, the actor task's future raises `ray.exceptions.OutOfMemoryError`. Ray Tune's
actor manager (`ray.air.execution._internal.actor_manager.RayActorManager._actor_task_failed`,
Ray 2.60) handles only `RayActorError` and `RayTaskError` there and raises
`RuntimeError("Caught unexpected exception: ...")` for anything else, which ends
`Tuner.fit()`: one trial's memory kill took the whole sweep's driver down (measured here:
tests/test_oom.py fails with exactly that error without this shim). The worker IS dead, so
the shim hands Tune the actor failure it is, `TrialKilledForMemory` (a `RayActorError`
carrying the memory monitor's message): Tune cleans up the actor and retries the trial under
`max_failures`, then reports it failed, and the sweep goes on.
"""
from __future__ import annotations

from typing import Any

from ray.exceptions import OutOfMemoryError, RayActorError, RayTaskError


class TrialKilledForMemory(RayActorError):
    """A trial's worker killed by Ray's memory monitor (the original OutOfMemoryError's text)."""

    def __init__(self, error_msg: str = "killed by Ray's memory monitor") -> None:
        super().__init__(error_msg=error_msg)
        self.args = (error_msg,)

    def __reduce__(self) -> tuple:  # Tune pickles trial errors; keep the message
        return (TrialKilledForMemory, (self.error_msg,))


def tolerate_memory_kills() -> None:
    """Patch Tune's actor manager (idempotent) so that a memory kill is an actor failure."""
    from ray.air.execution._internal import actor_manager

    cls = actor_manager.RayActorManager
    original = cls._actor_task_failed
    if getattr(original, "_fusion_sweep_shim", False):
        return

    def _actor_task_failed(self: Any, tracked_actor_task: Any, exception: Exception) -> None:
        if isinstance(exception, OutOfMemoryError) and not isinstance(
                exception, (RayActorError, RayTaskError)):
            exception = TrialKilledForMemory(str(exception))
        return original(self, tracked_actor_task, exception)

    _actor_task_failed._fusion_sweep_shim = True  # type: ignore[attr-defined]
    cls._actor_task_failed = _actor_task_failed

"""A trial's Ray `memory` resource and the launch's GPU-share check: the space's `memory_gb`,
else the estimate from the trial's config (`trial/memory.py`, the one home of the model's size
and activations)."""
from __future__ import annotations

from typing import Any

from fusion_sweep.space import SearchSpace
from fusion_sweep.trial.memory import host_memory_bytes

# Ray's local node offers roughly this share of physical memory as its `memory` resource.
RAY_MEMORY_SHARE = 0.6


def trial_memory_bytes(space: SearchSpace, config: Any) -> int:
    """Ray `memory` resource of one trial: the space's `resources.memory_gb`, else the host
    estimate from the config (`trial.memory.host_memory_bytes`; a trial given a GPU keeps its
    activations in GPU memory, which Ray's `memory` resource does not count), so Ray never
    packs more trials onto a node than fit in its memory."""
    if space.memory_gb is not None:
        return int(space.memory_gb * 2**30)
    return host_memory_bytes(config, gpu=space.gpu > 0)

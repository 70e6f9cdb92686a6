"""A trial's Ray `memory` resource and the launch's GPU-share check: the space's `memory_gb`,
else the estimate from the trial's config (`trial/memory.py`, the one home of the model's size
and activations)."""
from __future__ import annotations

from typing import Any

import torch

from fusion_sweep.errors import UserError
from fusion_sweep.plan.grid import GridPoint
from fusion_sweep.plan.space import SearchSpace
from fusion_sweep.trial.memory import (A10G_USABLE_BYTES, gpu_memory_bytes, gpu_share_error,
                                       host_memory_bytes)

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


def gpu_device_memory() -> tuple[int, str]:
    """(bytes, in words) of the GPU a space's `gpu:` share is a fraction of: this machine's
    GPU when torch sees one, else an A10G's usable memory (cluster.yaml's workers)."""
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        total = int(props.total_memory)
        return total, f"this machine's {props.name} ({total / 2**30:.1f} GiB)"
    return A10G_USABLE_BYTES, (f"an A10G's {A10G_USABLE_BYTES / 2**30:.1f} usable GiB (no GPU on "
                               f"this machine: cluster.yaml's workers assumed)")


def check_gpu_memory(space: SearchSpace, points: list[GridPoint],
                     device: tuple[int, str] | None = None) -> list[int]:
    """Each point's GPU memory estimate (bytes; [] when the space requests no GPU), after
    refusing the first trial that does not fit its share of the device (`device`: (bytes,
    in words), default `gpu_device_memory()`): Ray packs floor(1 / gpu) trials on one GPU
    and counts no memory there, so a trial over its share runs out of memory on the worker."""
    if space.gpu <= 0:
        return []
    device_bytes, words = device or gpu_device_memory()
    share = min(space.gpu, 1.0)  # a trial uses one device whatever it is given
    for p in points:
        reason = gpu_share_error(p.config, share, device_bytes, words)
        if reason is not None:
            raise UserError(f"resources.gpu in {space.source}: {reason}")
    return [gpu_memory_bytes(p.config) for p in points]

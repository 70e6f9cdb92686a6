"""Checks of the GPU path that run without a GPU (issue 32): dispatch modes over a training
step that count what would go wrong on CUDA.

- `HostSyncCounter`: every aten op that makes the host wait for the device on CUDA — a value
  read back (`_local_scalar_dense`: `.item()`, `float()`, `bool()`; `is_nonzero`; `equal`),
  an output whose size depends on the values (`nonzero`, `masked_select`, `unique`,
  `repeat_interleave` without its output size: boolean indexing goes through `nonzero`), and
  a copy from a device tensor to the host (`_to_copy` / `copy_` onto the CPU). On a CPU the
  same ops run without waiting, so counting them here counts the syncs CUDA would have.
- `DeviceMixCounter`: ops whose tensor arguments sit on more than one device type (a CPU
  tensor mixed with a `meta` or CUDA one; 0-dim CPU scalars excepted, as torch allows them).

Both record the op names; `counts` maps op name -> calls.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

# aten overload packets whose CUDA kernels block the host until the device has caught up.
SYNC_OPS = frozenset({
    "_local_scalar_dense", "is_nonzero", "equal", "nonzero", "masked_select", "unique_dim",
    "_unique", "_unique2", "unique_consecutive", "argwhere", "bincount", "histc",
})
COPY_OPS = frozenset({"_to_copy", "copy_", "_copy_from", "_copy_from_and_resize"})


def _name(func: Any) -> str:
    return func.overloadpacket.__name__


def _tensors(args: Any, kwargs: Any) -> list[torch.Tensor]:
    flat, _ = tree_flatten((args, kwargs or {}))
    return [a for a in flat if isinstance(a, torch.Tensor)]


class _OpCounter(TorchDispatchMode):
    """A dispatch mode that counts op names (`counts`: name -> calls)."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()

    @property
    def total(self) -> int:
        return sum(self.counts.values())


class HostSyncCounter(_OpCounter):
    """Counts the ops of the enclosed code that would sync the host with a CUDA device."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = _name(func)
        out = func(*args, **(kwargs or {}))
        if name in SYNC_OPS:
            self.counts[name] += 1
        elif name == "repeat_interleave" and (kwargs or {}).get("output_size") is None \
                and any(t.dim() > 0 for t in _tensors(args, {})):
            self.counts[name] += 1
        elif name in COPY_OPS and self._to_host(func, args, kwargs, out):
            self.counts[f"{name} to cpu"] += 1
        return out

    @staticmethod
    def _to_host(func: Any, args: Any, kwargs: Any, out: Any) -> bool:
        """A copy whose source is on a device and whose result is on the host."""
        src = _tensors(args[1:2] if _name(func) == "copy_" else args[:1], {})
        dst = out if isinstance(out, torch.Tensor) else None
        return bool(src and dst is not None and src[0].device.type != "cpu"
                    and dst.device.type == "cpu")


class DeviceMixCounter(_OpCounter):
    """Counts the ops of the enclosed code whose tensor arguments are on several device
    types (0-dim CPU tensors excepted: torch lets them mix as scalars)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        devices = {t.device.type for t in _tensors(args, kwargs)
                   if not (t.device.type == "cpu" and t.dim() == 0)}
        if len(devices) > 1 and _name(func) not in COPY_OPS:
            self.counts[_name(func)] += 1
        return func(*args, **(kwargs or {}))

"""Which ops of a model would raise under deterministic CUDA, found on the CPU.

fusion-sweep runs CUDA trials with `torch.use_deterministic_algorithms(True)`
(trial/platform.py `deterministic`), under which an op without a deterministic CUDA
implementation raises RuntimeError. `CUDA_NONDETERMINISTIC_OPS` is torch 2.13's list of those
ops (the docstring of `torch.use_deterministic_algorithms`, "will throw a RuntimeError when
mode=True"), as ATen op names with the condition the docstring gives; "when attempting to
differentiate" entries are the ops' backward kernels. `cuda_nondeterministic_ops(model,
batch)` runs one training step's forward and backward on the CPU under a TorchDispatchMode
that records every ATen op with its arguments, and returns those that match.

What a CUDA worker runs is the model's torch path: the compiled CPU kernels are held off
(`kernels.torch_path`), and deterministic algorithms are on (warn-only, so that an op that
would raise on the CPU too is recorded rather than stopping the run), which is what selects
the sparse activations' cumsum-free thresholds (models/sparse.py). A branch a model takes only
on the CPU (`device.type == "cpu"` in its code) is not the CUDA branch: the caller owns that.
"""
from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from fusion_sweep.trial.models import kernels

Condition = Callable[[dict[str, Any]], bool]  # the op's arguments by name -> raises on CUDA?


def _always(args: dict[str, Any]) -> bool:
    return True


def _floating_input(args: dict[str, Any]) -> bool:
    x = args.get("self")
    return isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex())


def _reduced(args: dict[str, Any]) -> bool:
    return args.get("reduction", 1) != 0  # 'none' is 0: no atomic sum


def _weighted(args: dict[str, Any]) -> bool:
    return args.get("weights") is not None


def _with_indices(args: dict[str, Any]) -> bool:
    return "dim" in args  # median.dim returns indices; median() does not


def _prod(args: dict[str, Any]) -> bool:
    return args.get("reduce") == "prod"


def _max_mode(args: dict[str, Any]) -> bool:
    return args.get("mode") == 2  # EmbeddingBag mode='max'


def _quantized(args: dict[str, Any]) -> bool:
    x = args.get("self")
    return isinstance(x, torch.Tensor) and x.is_quantized


CUDA_NONDETERMINISTIC_OPS: dict[str, Condition] = {
    "aten::avg_pool3d_backward": _always,
    "aten::_adaptive_avg_pool2d_backward": _always,
    "aten::_adaptive_avg_pool3d_backward": _always,
    "aten::adaptive_max_pool2d_backward": _always,
    "aten::fractional_max_pool2d_backward": _always,
    "aten::fractional_max_pool3d_backward": _always,
    "aten::max_unpool2d": _always,  # MaxUnpool1d runs as max_unpool2d
    "aten::max_unpool3d": _always,
    "aten::upsample_linear1d_backward": _always,
    "aten::upsample_bilinear2d_backward": _always,
    "aten::upsample_bicubic2d_backward": _always,
    "aten::upsample_trilinear3d_backward": _always,
    "aten::reflection_pad1d_backward": _always,
    "aten::reflection_pad2d_backward": _always,
    "aten::reflection_pad3d_backward": _always,
    "aten::nll_loss2d_forward": _reduced,  # NLLLoss: the 2-d kernel's atomic sum
    "aten::_ctc_loss_backward": _always,
    "aten::_embedding_bag_backward": _max_mode,
    "aten::_embedding_bag_dense_backward": _max_mode,
    "aten::put_": _always,  # accumulate=False anywhere, accumulate=True on CUDA
    "aten::put": _always,
    "aten::histc": _always,
    "aten::bincount": _weighted,
    "aten::median": _with_indices,
    "aten::grid_sampler_2d_backward": _always,
    "aten::grid_sampler_3d_backward": _always,
    "aten::cumsum": _floating_input,
    "aten::cumsum_": _floating_input,
    "aten::scatter_reduce": _prod,
    "aten::scatter_reduce_": _prod,
    "aten::resize_": _quantized,
}


def _named(func: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    names = [a.name for a in func._schema.arguments]
    return {**dict(zip(names, args)), **kwargs}


class _Recorder(TorchDispatchMode):
    """Every ATen op dispatched inside, with its arguments checked against the list."""

    def __init__(self) -> None:
        super().__init__()
        self.raising: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name
        condition = CUDA_NONDETERMINISTIC_OPS.get(name)
        if condition is not None and condition(_named(func, args, kwargs)):
            self.raising.add(name)
        return func(*args, **kwargs)


@contextmanager
def _deterministic_warn_only() -> Iterator[None]:
    saved = (torch.are_deterministic_algorithms_enabled(),
             torch.is_deterministic_algorithms_warn_only_enabled())
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])


def _training_loss(model: nn.Module, out: torch.Tensor) -> torch.Tensor:
    """The trainer's loss: cross-entropy of logits (B, C) (target 0 for every row) plus the
    model's auxiliary loss; any other output: its sum."""
    loss = (F.cross_entropy(out, torch.zeros(out.shape[0], dtype=torch.long, device=out.device))
            if out.dim() == 2 else out.sum())
    aux = model.aux_loss() if hasattr(model, "aux_loss") else None
    return loss if aux is None else loss + aux


def cuda_nondeterministic_ops(model: nn.Module, batch: torch.Tensor | Sequence[torch.Tensor],
                              loss: Callable[[torch.Tensor], torch.Tensor] | None = None) -> set[str]:
    """The ATen ops (e.g. 'aten::cumsum') in one training step of `model` (forward on
    `batch`, a tensor or the positional inputs, then backward of `loss`, by default the
    trainer's) that torch 2.13 refuses under deterministic CUDA. Runs on a copy of the
    model, in training mode, on its torch path; the model itself is left as it was."""
    step = copy.deepcopy(model).train()
    inputs = (batch,) if isinstance(batch, torch.Tensor) else tuple(batch)
    recorder = _Recorder()
    with kernels.torch_path(), _deterministic_warn_only(), recorder:
        out = step(*inputs)
        (loss(out) if loss is not None else _training_loss(step, out)).backward()
    return recorder.raising

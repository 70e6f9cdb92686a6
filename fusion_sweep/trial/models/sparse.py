"""Attention activations over the last axis: softmax and two sparse alternatives (ReSSFormer's
ASAM, eq. 5).

- `softmax`: dense; every key gets weight > 0.
- `sparsemax` (Martins & Astudillo 2016): the Euclidean projection onto the simplex,
  p = max(z − τ, 0); exact zeros below the threshold τ.
- `entmax15` (1.5-entmax, Peters et al. 2019): p = max(z/2 − τ, 0)²; sparse like sparsemax
  but smoother (between softmax, α = 1, and sparsemax, α = 2).

Both sparse maps come from the maintained `entmax` package (1.3), the authors' own: exact,
sort-based thresholds and closed-form backward passes. tests/test_ressformer.py checks them
against a reference computed by sorting, with masked entries.

Masking: a masked entry must be −inf (not a large negative number), so that it is an exact
zero in the output and cannot shift the threshold τ: then the weights of the real keys do not
depend on how many masked keys a row has (padding invariance). Every row needs at least one
finite entry.

Each activation is `f(z, add=None)` = the map of z + add (add: an additive mask or bias
broadcastable to z; a learned bias gets its gradient). Softmax on (B, H, G, L, N) scores with
the compiled kernels adds it in the same pass (`kernels.masked_softmax`); elsewhere z + add
is formed first.
"""
from __future__ import annotations

from typing import Callable

import torch
from entmax import entmax15, sparsemax

from fusion_sweep.trial.models import kernels


def _plus(z: torch.Tensor, add: torch.Tensor | None) -> torch.Tensor:
    return z if add is None else z + add


def _softmax(z: torch.Tensor, add: torch.Tensor | None = None) -> torch.Tensor:
    if z.dim() == 5 and kernels.available(z):  # one pass: mask, max, exp, sum, scale
        return kernels.masked_softmax(z, add)
    return torch.softmax(_plus(z, add), dim=-1)


def _sparsemax(z: torch.Tensor, add: torch.Tensor | None = None) -> torch.Tensor:
    return sparsemax(_plus(z, add), dim=-1)


def _entmax15(z: torch.Tensor, add: torch.Tensor | None = None) -> torch.Tensor:
    z = _plus(z, add)
    if z.shape[-1] <= kernels.ENTMAX_MAX_WIDTH and kernels.available(z):  # top-k's few scores
        return kernels.entmax15(z.contiguous())
    return entmax15(z, dim=-1)


Activation = Callable[..., torch.Tensor]  # (z, add=None) -> weights, z's shape
ATTN_ACTIVATIONS: dict[str, Activation] = {
    "softmax": _softmax,
    "sparsemax": _sparsemax,
    "entmax15": _entmax15,
}

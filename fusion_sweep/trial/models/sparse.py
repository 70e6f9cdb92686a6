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

Deterministic CUDA: the package finds τ by a sort and a `cumsum`, and torch has no
deterministic CUDA cumsum for floats (`torch.use_deterministic_algorithms(True)` raises; torch
2.13's docstring of that function lists "torch.cumsum when called on a CUDA tensor when dtype
is floating point"). With deterministic algorithms on (how trial/platform.py runs
CUDA trials), both sparse maps take `sparsemax_bisect` / `entmax15_bisect` instead: τ by
bisection (only max, elementwise ops and sums, each deterministic on CUDA), then exactly, in
closed form over the support the bisection found; the backward is the package's closed
form. The same values as the package to rounding (tests/test_attention_math.py, to 1e-6 with
gradients). CPU trials never turn deterministic algorithms on (cumsum is deterministic on the
CPU), so they keep the package's arithmetic and their numbers.
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
    z = _plus(z, add)
    if _needs_bisection(z):
        return sparsemax_bisect(z)
    return sparsemax(z, dim=-1)


def _entmax15(z: torch.Tensor, add: torch.Tensor | None = None) -> torch.Tensor:
    z = _plus(z, add)
    if _needs_bisection(z):
        return entmax15_bisect(z)
    if z.shape[-1] <= kernels.ENTMAX_MAX_WIDTH and kernels.available(z):  # top-k's few scores
        return kernels.entmax15(z.contiguous())
    return entmax15(z, dim=-1)


def _needs_bisection(z: torch.Tensor) -> bool:
    """Under deterministic algorithms (trial/platform.py turns them on for CUDA trials only):
    the package's cumsum raises there on CUDA."""
    return torch.are_deterministic_algorithms_enabled()


# Bisection steps on τ ∈ [−1, 0]: the interval ends below one unit in the last place of τ's
# float type (2⁻³² < 2⁻²⁴, 2⁻⁶⁴ < 2⁻⁵³), so the support it leaves is the exact one.
BISECTION_STEPS = {torch.float16: 16, torch.bfloat16: 16, torch.float32: 32, torch.float64: 64}


def _bisect(x: torch.Tensor, mass) -> torch.Tensor:
    """x (..., N) with max 0 per row, mass(x − τ) decreasing in τ with mass(x + 1) >= 1 and
    mass(x) = 0 -> the τ_lo (..., 1) with mass(x − τ_lo) >= 1 at the end of the bisection."""
    lo = torch.full_like(x[..., :1], -1.0)
    hi = torch.zeros_like(lo)
    for _ in range(BISECTION_STEPS[x.dtype]):
        mid = (lo + hi) / 2
        above = mass((x - mid).clamp(min=0)).sum(-1, keepdim=True) >= 1
        lo, hi = torch.where(above, mid, lo), torch.where(above, hi, mid)
    return lo


def _support(x: torch.Tensor, tau: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The entries above τ (a bool (..., N); −inf never) and how many (..., 1), >= 1."""
    s = x > tau
    return s, s.sum(-1, keepdim=True).clamp(min=1).to(x.dtype)


class _SparsemaxBisect(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z):  # (..., N) -> (..., N)
        x = z - z.amax(-1, keepdim=True)  # max 0: τ ∈ [−1, 0)
        s, k = _support(x, _bisect(x, lambda d: d))
        tau = (torch.where(s, x, 0).sum(-1, keepdim=True) - 1) / k  # exact on the support
        y = (x - tau).clamp(min=0)
        ctx.save_for_backward(y, k)
        return y

    @staticmethod
    def backward(ctx, dy):  # the package's: dy on the support, minus its mean there
        y, k = ctx.saved_tensors
        on = y > 0
        g = torch.where(on, dy, 0)
        return torch.where(on, g - g.sum(-1, keepdim=True) / k, 0)


class _Entmax15Bisect(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z):  # (..., N) -> (..., N)
        x = (z - z.amax(-1, keepdim=True)) / 2  # as the package: max 0, τ ∈ [−1, 0)
        s, k = _support(x, _bisect(x, torch.square))
        xs = torch.where(s, x, 0)  # the package's running sums, over the support found
        mean, mean_sq = xs.sum(-1, keepdim=True) / k, xs.square().sum(-1, keepdim=True) / k
        delta = (1 - k * (mean_sq - mean ** 2)) / k
        tau = mean - delta.clamp(min=0).sqrt()
        y = (x - tau).clamp(min=0) ** 2
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):  # the package's Entmax15Function.backward
        y, = ctx.saved_tensors
        gppr = y.sqrt()
        dx = dy * gppr
        return dx - (dx.sum(-1, keepdim=True) / gppr.sum(-1, keepdim=True)) * gppr


def sparsemax_bisect(z: torch.Tensor) -> torch.Tensor:
    """sparsemax over the last axis without cumsum (deterministic on CUDA): τ by bisection,
    then in closed form on its support. Rows need a finite entry; −inf entries give 0."""
    return _SparsemaxBisect.apply(z)


def entmax15_bisect(z: torch.Tensor) -> torch.Tensor:
    """1.5-entmax over the last axis without cumsum (deterministic on CUDA), as
    sparsemax_bisect."""
    return _Entmax15Bisect.apply(z)


Activation = Callable[..., torch.Tensor]  # (z, add=None) -> weights, z's shape
ATTN_ACTIVATIONS: dict[str, Activation] = {
    "softmax": _softmax,
    "sparsemax": _sparsemax,
    "entmax15": _entmax15,
}
# The activations the compiled kernels compute together with dense attention's scores (with
# R2MU's memory: `kernels.dense_memory_softmax`); the others take the scores as a tensor.
FUSED_WITH_SCORES: frozenset[Activation] = frozenset({_softmax})

"""Deterministic CUDA for ReSSFormer (issue 32, item 2), checked on the CPU: the cumsum-free
sparsemax / entmax-1.5 thresholds (models/sparse.py) equal the `entmax` package's, with
gradients; and no ReSSFormer variant runs an op that torch 2.13 refuses under deterministic
CUDA (models/determinism.py), while the package's thresholds would (aten::cumsum)."""
from __future__ import annotations

import pytest
import torch
from entmax import entmax15, sparsemax

from fusion_sweep.trial.models import determinism, sparse
from tests.test_ressformer import RESS, ids_batch, make, valid_combinations

NEG_INF = float("-inf")
PAIRS = {"sparsemax": (sparse.sparsemax_bisect, lambda z: sparsemax(z, dim=-1)),
         "entmax15": (sparse.entmax15_bisect, lambda z: entmax15(z, dim=-1))}


def _rows(N: int, dtype: torch.dtype) -> torch.Tensor:
    """Random rows, every 4th masked past column 2, a row of ties, a row of one finite entry."""
    g = torch.Generator().manual_seed(N)
    z = torch.randn(257, N, generator=g, dtype=dtype) * 3
    if N > 2:
        z[::4, 2:] = NEG_INF
    z[1] = z[1].round()
    z[2, 1:] = NEG_INF
    return z


@pytest.mark.parametrize("name", sorted(PAIRS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("N", [1, 2, 13, 64, 300])
def test_bisection_equals_the_package(name: str, dtype: torch.dtype, N: int) -> None:
    """Values and gradients to 1e-6 (float32; 1e-12 float64); masked entries exact zeros."""
    ours, package = PAIRS[name]
    z = _rows(N, dtype)
    a, b = z.clone().requires_grad_(), z.clone().requires_grad_()
    ya, yb = ours(a), package(b)
    tol = dict(atol=1e-6, rtol=0) if dtype == torch.float32 else dict(atol=1e-12, rtol=0)
    torch.testing.assert_close(ya, yb, **tol)
    assert (ya[z == NEG_INF] == 0).all()
    dy = torch.randn(z.shape, generator=torch.Generator().manual_seed(1), dtype=dtype)
    ya.backward(dy)
    yb.backward(dy)
    torch.testing.assert_close(a.grad, b.grad, **tol)


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_deterministic_mode_selects_the_bisection(name: str, monkeypatch) -> None:
    """The activation registry's entry runs the bisection exactly when deterministic
    algorithms are on (CUDA trials), the package otherwise (CPU trials: unchanged numbers)."""
    z = _rows(13, torch.float64)
    calls = []
    monkeypatch.setattr(sparse, f"{name}_bisect", lambda t: calls.append(1) or PAIRS[name][1](t))
    sparse.ATTN_ACTIVATIONS[name](z)
    assert not calls
    saved = torch.are_deterministic_algorithms_enabled()
    try:
        torch.use_deterministic_algorithms(True, warn_only=True)
        sparse.ATTN_ACTIVATIONS[name](z)
    finally:
        torch.use_deterministic_algorithms(saved)
    assert calls == [1]


def _blockers() -> dict[str, set[str]]:
    ids = ids_batch([9, 5], 9, seed=1)
    out = {}
    for c in valid_combinations():
        found = determinism.cuda_nondeterministic_ops(make(c), ids)
        if found:
            out[f"{RESS.variant(c)}/{c.pe}/{c.attn_activation}/k{c.topk}"] = found
    return out


def test_no_variant_raises_under_deterministic_cuda() -> None:
    """Every ReSSFormer switch combination × pe × ASAM setting (tests/test_ressformer.py's
    48), forward and backward of a training step on its torch path: no op torch 2.13 refuses
    under deterministic CUDA."""
    assert _blockers() == {}


def test_the_checker_finds_the_package_cumsum(monkeypatch) -> None:
    """With the package's sort-and-cumsum thresholds (no bisection), every sparse-activation
    variant is found blocked by aten::cumsum, and only those."""
    monkeypatch.setattr(sparse, "_needs_bisection", lambda z: False)
    found = _blockers()
    assert found and all(ops == {"aten::cumsum"} for ops in found.values())
    assert all("/softmax/" not in k for k in found)
    assert len(found) == sum(c.attn_activation != "softmax" and c.asam for c in valid_combinations())


def test_the_checker_reads_conditions() -> None:
    """A float cumsum is refused, an integer one is not; a histc always; the model's own
    parameters and gradients are left untouched."""
    class Probe(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(3))

        def forward(self, x):
            torch.arange(4).cumsum(0)
            return (x * self.w).cumsum(-1)

    probe = Probe()
    assert determinism.cuda_nondeterministic_ops(probe, torch.ones(2, 3), loss=torch.sum) == {"aten::cumsum"}
    assert probe.w.grad is None
    hist = determinism.cuda_nondeterministic_ops(torch.nn.Identity(), torch.ones(3, requires_grad=True),
                                                 loss=lambda y: torch.histc(y).sum() + y.sum())
    assert hist == {"aten::histc"}

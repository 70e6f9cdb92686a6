"""The compiled CPU kernels of ReSSFormer's sparse attention (models/kernels.py): each against
a plain-torch computation of the same quantity, in float32 and float64, gradients by
torch.autograd.gradcheck; and the fallbacks (no compiler, switched off, unsupported tensors)."""
from __future__ import annotations

import pytest
import torch
from entmax import entmax15

from fusion_sweep.trial.models import kernels

NEG_INF = float("-inf")
DTYPES = (torch.float32, torch.float64)


@pytest.fixture(autouse=True)
def _compiled() -> None:
    if kernels._compiler() is None:
        pytest.skip("no C compiler on this machine: the kernels cannot be built")
    assert kernels.available(torch.zeros(1)), "a C compiler is here, but the kernels did not build"


def _kept_values(z: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """The selected scores, sorted: two selections agree if they keep equal values (which of
    two tied entries is kept is arbitrary, as in torch.topk)."""
    return z.gather(-1, idx).sort(-1).values


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("N,k", [(128, 8), (540, 8), (1024, 8), (13, 8), (8, 8), (100, 1), (64, 30)])
def test_selection_keeps_the_k_largest(N: int, k: int, dtype) -> None:
    """The selection on rows of given scores: zero queries and keys, so each score is the
    additive mask's entry (a (B, 1, N, N) mask: one row of N per query)."""
    g = torch.Generator().manual_seed(N * 31 + k)
    rows = 3 * N
    z = torch.randn(rows, N, generator=g, dtype=dtype)
    lengths = torch.randint(1, N + 1, (rows,), generator=g)
    z[torch.arange(N) >= lengths[:, None]] = NEG_INF  # right padding, fewer real keys than k too
    z[:5, N // 2] = NEG_INF  # −inf inside a row
    z[5:10] = z[5:10].round()  # many ties
    zero_q, zero_k = torch.zeros(3, 1, 1, N, 1, dtype=dtype), torch.zeros(3, 1, N, 1, dtype=dtype)
    idx = kernels.score_topk(zero_q, zero_k, z.view(3, 1, N, N), k).view(rows, k)
    assert idx.dtype == torch.int64
    assert ((idx >= 0) & (idx < N)).all()
    assert (idx.sort(-1).values.diff(dim=-1) > 0).all(), "an index kept twice"
    assert torch.equal(_kept_values(z, idx), _kept_values(z, z.topk(k, dim=-1).indices))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask", ["none", "padding", "bias"])
def test_score_topk_equals_scores_then_topk(mask: str, dtype) -> None:
    """Scoring in a row buffer and selecting = the (L, L) scores plus the mask, then topk;
    with 3 routed experts (G) per head."""
    g = torch.Generator().manual_seed(1)
    B, H, G, L, D = 3, 2, 3, 70, 16
    q = torch.randn(B, H, G, L, D, generator=g, dtype=dtype)
    k = torch.randn(B, H, L, D, generator=g, dtype=dtype)
    add = None
    if mask == "padding":
        add = torch.zeros(B, 1, 1, L, dtype=dtype)
        add[0, ..., 50:] = NEG_INF
        add[1, ..., 5:] = NEG_INF  # 5 real keys < k = 8
    elif mask == "bias":
        add = torch.randn(B, H, L, L, generator=g, dtype=dtype)
    z = q @ k.unsqueeze(2).transpose(-1, -2) + (0 if add is None else add.unsqueeze(2))
    idx = kernels.score_topk(q, k, add, 8)
    assert idx.shape == (B, H, G, L, 8)
    torch.testing.assert_close(_kept_values(z, idx), _kept_values(z, z.topk(8, dim=-1).indices))


def _sparse_inputs(dtype, R=40, M=25, D=6, K=5):
    g = torch.Generator().manual_seed(2)
    a = torch.randn(R, D, generator=g, dtype=dtype, requires_grad=True)
    table = torch.randn(M, D, generator=g, dtype=dtype, requires_grad=True)
    w = torch.randn(R, K, generator=g, dtype=dtype, requires_grad=True)
    idx = torch.randint(0, M, (R, K), generator=g)  # rows may repeat
    return a, table, w, idx


@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_dot_and_sum_equal_indexing(dtype) -> None:
    a, table, w, idx = _sparse_inputs(dtype)
    torch.testing.assert_close(kernels.gather_dot(a, table, idx), (a.unsqueeze(1) * table[idx]).sum(-1))
    torch.testing.assert_close(kernels.gather_sum(w, table, idx), (w.unsqueeze(-1) * table[idx]).sum(1))


def test_gather_gradients() -> None:
    a, table, w, idx = _sparse_inputs(torch.float64)
    assert torch.autograd.gradcheck(lambda a, t: kernels.gather_dot(a, t, idx), (a, table))
    assert torch.autograd.gradcheck(lambda w, t: kernels.gather_sum(w, t, idx), (w, table))


def _dense_graphs(n_graphs: int, width: int = 9, extra: int = 3):
    """Graphs as the body passes them: the token columns of wider weights (a split, so rows are
    evenly spaced but not contiguous), and one contiguous."""
    g = torch.Generator().manual_seed(3)
    ws = [torch.randn(2, 3, 5, width + extra, generator=g, dtype=torch.float64, requires_grad=True)
          for _ in range(n_graphs)]
    return ws, width


def test_pair_sqdist_over_the_first_columns() -> None:
    """A chain of two (one pair): the first n columns, strided or contiguous rows."""
    (a, b), n = _dense_graphs(2)
    want = ((a[..., :n] - b[..., :n]) ** 2).sum(-1)
    torch.testing.assert_close(kernels.chain_sqdist([a, b], n)[0], want)
    torch.testing.assert_close(kernels.chain_sqdist([a.split([n, 3], -1)[0], b[..., :n].contiguous()])[0], want)
    assert torch.autograd.gradcheck(lambda a, b: kernels.chain_sqdist([a, b], n), (a, b))


def test_chain_sqdist_equals_the_pairs() -> None:
    ws, n = _dense_graphs(4)
    got = kernels.chain_sqdist(ws, n)
    want = torch.stack([((b[..., :n] - a[..., :n]) ** 2).sum(-1) for a, b in zip(ws, ws[1:])])
    torch.testing.assert_close(got, want)
    assert torch.autograd.gradcheck(lambda *w: kernels.chain_sqdist(list(w), n), tuple(ws))
    parts = [w.split([n, 3], -1)[0] for w in ws[:3]]  # strided rows, all columns used
    assert torch.autograd.gradcheck(lambda *w: kernels.chain_sqdist(list(w)), tuple(parts))


def test_sparse_sqdist_equals_the_dense_distance() -> None:
    """Rows of weights at key indices, an index repeated (experts): the squared distance of
    the dense rows they scatter to."""
    g = torch.Generator().manual_seed(4)
    R, keys = 60, 7
    a = torch.randn(R, 6, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(R, 4, generator=g, dtype=torch.float64, requires_grad=True)
    ia, ib = torch.randint(0, keys, (R, 6), generator=g), torch.randint(0, keys, (R, 4), generator=g)

    def dense(w, i):
        return torch.zeros(R, keys, dtype=w.dtype).scatter_add(1, i, w)

    want = ((dense(a, ia) - dense(b, ib)) ** 2).sum(-1)
    torch.testing.assert_close(kernels.sparse_sqdist(a, ia, b, ib), want)
    assert torch.autograd.gradcheck(lambda a, b: kernels.sparse_sqdist(a, ia, b, ib), (a, b))


@pytest.mark.parametrize("N", [8, 16, 5])  # the unrolled widths, and any other
def test_sparse_sqdist_of_distinct_rows(N: int) -> None:
    """Top-k rows of one expert (no key twice in a row): the `distinct` shortcut gives the
    dense distance too."""
    g = torch.Generator().manual_seed(9)
    R, keys = 50, 20
    a = torch.randn(R, N, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(R, N, generator=g, dtype=torch.float64, requires_grad=True)
    ia = torch.stack([torch.randperm(keys, generator=g)[:N] for _ in range(R)])
    ib = torch.stack([torch.randperm(keys, generator=g)[:N] for _ in range(R)])

    def dense(w, i):
        return torch.zeros(R, keys, dtype=w.dtype).scatter_add(1, i, w)

    want = ((dense(a, ia) - dense(b, ib)) ** 2).sum(-1)
    torch.testing.assert_close(kernels.sparse_sqdist(a, ia, b, ib, distinct=True), want)
    assert torch.autograd.gradcheck(
        lambda a, b: kernels.sparse_sqdist(a, ia, b, ib, distinct=True), (a, b))


@pytest.mark.parametrize("dtype", DTYPES)
def test_entmax15_equals_the_package(dtype) -> None:
    """Values and gradients of the `entmax` package's entmax15, rows with −inf (masked keys)
    and a row with one finite entry; 500 rows: blocks of a vector's lanes (16 or 8 rows)
    and a remainder done one row at a time."""
    g = torch.Generator().manual_seed(5)
    z = torch.randn(500, 13, generator=g, dtype=dtype) * 3
    z[::3, 9:] = NEG_INF
    z[7, 1:] = NEG_INF
    dy = torch.randn(500, 13, generator=g, dtype=dtype)
    got_in, want_in = z.clone().requires_grad_(), z.clone().requires_grad_()
    got, want = kernels.entmax15(got_in), entmax15(want_in, dim=-1)
    tol = dict(atol=1e-5, rtol=0) if dtype == torch.float32 else dict(atol=1e-12, rtol=0)
    torch.testing.assert_close(got, want, **tol)
    assert (got[z == NEG_INF] == 0).all()
    got.backward(dy)
    want.backward(dy)
    torch.testing.assert_close(got_in.grad, want_in.grad, **tol)


def test_unsupported_tensors_are_not_available() -> None:
    assert not kernels.available(torch.zeros(2, dtype=torch.float16))
    assert not kernels.available(torch.zeros(2), torch.zeros(2, dtype=torch.bfloat16))
    assert kernels.available(torch.zeros(2), torch.zeros(2, dtype=torch.float64))


def test_switched_off_or_no_compiler_means_not_available(monkeypatch) -> None:
    """FUSION_SWEEP_KERNELS=0, or no working C compiler: the kernels are unavailable (the body
    then runs its torch path), and nothing raises."""
    try:
        kernels._build_in.cache_clear()
        monkeypatch.setenv(kernels.ENV_SWITCH, "0")
        assert not kernels.available(torch.zeros(1))
        kernels._build_in.cache_clear()
        monkeypatch.delenv(kernels.ENV_SWITCH)
        monkeypatch.setattr(kernels, "_compiler", lambda: None)
        with pytest.warns(RuntimeWarning, match=r"no C compiler .* on PATH\); the torch path runs"):
            assert not kernels.available(torch.zeros(1))
    finally:
        kernels._build_in.cache_clear()
        monkeypatch.undo()
    assert kernels.available(torch.zeros(1))


def test_a_failing_compiler_means_not_available(monkeypatch, tmp_path) -> None:
    """A compiler that exits non-zero leaves no library behind and falls back."""
    fake = tmp_path / "cc"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    try:
        kernels._build_in.cache_clear()
        monkeypatch.setenv("FUSION_SWEEP_CACHE", str(tmp_path / "cache"))
        monkeypatch.setattr(kernels, "_compiler", lambda: str(fake))
        with pytest.warns(RuntimeWarning, match="cc exited 1"):
            assert not kernels.available(torch.zeros(1))
        assert not list((tmp_path / "cache").rglob("*.so"))
    finally:
        kernels._build_in.cache_clear()
        monkeypatch.undo()
    assert kernels.available(torch.zeros(1))


def _unit_ref(x: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
    inv = x.norm(dim=-1, keepdim=True).clamp_min(1e-12).reciprocal()
    return x * (inv if scale is None else scale * inv)


@pytest.mark.parametrize("D", [16, 5])  # a dispatched constant width, and any other
def test_heads_equal_permute_and_normalise(D: int) -> None:
    """k/v out of one projection (k normalised, v not), cut into row runs, with a zero row
    (its norm clamped) and a per-head scale: values and gradients as the permute-and-normalise
    it replaces; an output left unused gets no gradient."""
    g = torch.Generator().manual_seed(6)
    B, N, H = 3, 7, 2
    raw = torch.randn(B, N, 2 * H * D, generator=g, dtype=torch.float64)
    raw[0, 1, :D] = 0.0  # a zero key row: clamped norm
    scale = torch.rand(H, generator=g, dtype=torch.float64) + 0.5
    r1, s1 = raw.clone().requires_grad_(), scale.clone().requires_grad_()
    r2, s2 = raw.clone().requires_grad_(), scale.clone().requires_grad_()
    got = kernels.heads(r1, 2, H, (True, False), s1, [3, 4])
    k, v = r2.view(B, N, 2, H, D).permute(2, 0, 3, 1, 4)
    s = s2.view(1, -1, 1, 1)
    want = list(_unit_ref(k, s).split([3, 4], dim=2)) + list((v * s).split([3, 4], dim=2))
    assert all(t.is_contiguous() for t in got)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    gs = [torch.randn(t.shape, generator=g, dtype=torch.float64) for t in got]
    sum((a * w).sum() for a, w in zip(got[:3], gs)).backward()  # got[3]: unused
    sum((b * w).sum() for b, w in zip(want[:3], gs)).backward()
    torch.testing.assert_close(r1.grad, r2.grad)
    torch.testing.assert_close(s1.grad, s2.grad)
    fresh = torch.randn(B, N, 2 * H * D, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda r, s: kernels.heads(r, 2, H, (True, False), s, [3, 4]), (fresh, s1.detach().requires_grad_()))


def _memory_inputs(D: int, G: int = 2):
    g = torch.Generator().manual_seed(7)
    B, H, L, K, S = 2, 2, 9, 3, 4

    def t(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64, requires_grad=True)

    q, qr = t(B, H, G, L, D), t(B, H, G, L, D)
    kr, kc, v, vc, ks, vs = t(B, H, L, D), t(B, H, L, D), t(B, H, L, D), t(B, H, L, D), t(B, H, S, D), t(B, H, S, D)
    idx = torch.stack([torch.randperm(L, generator=g)[:K] for _ in range(B * H * G * L)]).view(B, H, G, L, K)
    gidx = idx + (torch.arange(B * H) * L).view(B, H, 1, 1, 1)
    sa = torch.zeros(B, S, dtype=torch.float64)
    sa[0, 2] = NEG_INF  # an empty segment
    return dict(q=q, qr=qr, kr=kr, kc=kc, v=v, vc=vc, ks=ks, vs=vs, gidx=gidx, sa=sa,
                ak=t(B, H, G, L, K), dims=(B, H, G, L, K, S, D))


@pytest.mark.parametrize("D", [16, 5])
def test_memory_scores_and_mix_equal_their_torch_forms(D: int) -> None:
    """The fused sparse-attention-with-memory loops against gather, matmul and concatenation
    (2 routed experts per head, a masked slot); gradients by gradcheck, with qr the same
    tensor as q (no rotation: its two gradients add up)."""
    m = _memory_inputs(D)
    B, H, G, L, K, S, D = m["dims"]
    gidx, sa = m["gidx"], m["sa"]

    def scores(qr, q, kr, ks, kc, ak):
        s = (qr.unsqueeze(-2) * kr.reshape(-1, D)[gidx]).sum(-1) + ak
        slots = q @ ks.unsqueeze(2).transpose(-1, -2) + sa[:, None, None, None, :]
        return torch.cat([s, slots, (q * kc.unsqueeze(2)).sum(-1, keepdim=True)], -1)

    def mix(w, v, vs, vc):
        kept = (w[..., :K, None] * v.reshape(-1, D)[gidx]).sum(-2)
        return kept + w[..., K:K + S] @ vs.unsqueeze(2) + w[..., K + S:] * vc.unsqueeze(2)

    args = (m["qr"], m["q"], m["kr"], m["ks"], m["kc"], m["ak"])
    torch.testing.assert_close(kernels.memory_scores(*args[:5], gidx, args[5], sa), scores(*args))
    w = torch.softmax(scores(*args), -1).detach().requires_grad_()
    torch.testing.assert_close(kernels.memory_mix(w, m["v"], m["vs"], m["vc"], gidx),
                               mix(w, m["v"], m["vs"], m["vc"]))
    open_slots = torch.zeros_like(sa)
    assert torch.autograd.gradcheck(
        lambda qr, q, kr, ks, kc, ak: kernels.memory_scores(qr, q, kr, ks, kc, gidx, ak, open_slots), args)
    assert torch.autograd.gradcheck(
        lambda q, kr, ks, kc: kernels.memory_scores(q, q, kr, ks, kc, gidx, None, open_slots),
        (m["q"], m["kr"], m["ks"], m["kc"]))
    assert torch.autograd.gradcheck(lambda w, v, vs, vc: kernels.memory_mix(w, v, vs, vc, gidx),
                                    (w, m["v"], m["vs"], m["vc"]))


def test_the_portable_build_selects_the_same(monkeypatch, tmp_path) -> None:
    """The kernels built without AVX-512 (the portable selection and compaction loops; this
    CPU may otherwise use AVX-512 compress and rank compares) keep the k largest too."""
    try:
        kernels._build_in.cache_clear()
        monkeypatch.setenv("FUSION_SWEEP_CACHE", str(tmp_path / "cache"))
        monkeypatch.setattr(kernels, "CFLAGS", (*kernels.CFLAGS, "-mno-avx512f"))
        assert kernels.available(torch.zeros(1))
        g = torch.Generator().manual_seed(8)
        for N in (128, 540):
            z = torch.randn(3 * N, N, generator=g)
            z[5:10] = z[5:10].round()  # ties
            z[10:12, N // 2:] = NEG_INF  # padding
            idx = kernels.score_topk(torch.zeros(3, 1, 1, N, 1), torch.zeros(3, 1, N, 1),
                                     z.view(3, 1, N, N), 8).view(3 * N, 8)
            assert torch.equal(_kept_values(z, idx), _kept_values(z, z.topk(8, dim=-1).indices))
    finally:
        kernels._build_in.cache_clear()
        monkeypatch.undo()
    assert kernels.available(torch.zeros(1))


@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_softmax_equals_softmax_of_the_sum(dtype) -> None:
    """softmax(z + mask) in one pass: masks broadcast over batch rows (padding −inf, a
    −inf inside a row), over heads and queries (a learned bias: it gets z's gradient, summed
    where it broadcasts), or none; masked entries exact zeros; rows of 16 + 5 (a vector and
    a tail)."""
    g = torch.Generator().manual_seed(10)
    B, H, G, L, N = 2, 3, 2, 5, 21
    z = torch.randn(B, H, G, L, N, generator=g, dtype=dtype) * 4
    pad = torch.zeros(B, 1, 1, 1, N, dtype=dtype)
    pad[0, ..., 17:] = NEG_INF
    pad[1, ..., 3] = NEG_INF
    bias = torch.randn(1, H, 1, L, N, generator=g, dtype=dtype)
    tol = dict(atol=1e-6, rtol=1e-5) if dtype == torch.float32 else dict(atol=1e-14, rtol=0)
    for mask in (None, pad, bias):
        got = kernels.masked_softmax(z, mask)
        want = torch.softmax(z if mask is None else z + mask, -1)
        torch.testing.assert_close(got, want, **tol)
        assert torch.equal(got == 0, want == 0)
    if dtype == torch.float64:
        zz = z[:, :, :, :, :9].clone().requires_grad_()
        bb = bias[..., :9].clone().requires_grad_()
        assert torch.autograd.gradcheck(kernels.masked_softmax, (zz, bb))
        assert torch.autograd.gradcheck(lambda z: kernels.masked_softmax(z, pad[..., :9]), (zz,))


def _dense_reference(qr, q, kr, ks, kc, add, sa):
    """dense_memory_softmax in plain torch: the scores concatenated, then softmax."""
    L = kr.shape[2]
    tok = qr @ kr.unsqueeze(2).transpose(-1, -2)  # (B, H, G, L, L)
    if add is not None:
        tok = tok + add.unsqueeze(2)
    slots = q @ ks.unsqueeze(2).transpose(-1, -2) + sa[:, None, None, None, :]
    cache = (q * kc.unsqueeze(2)).sum(-1, keepdim=True)
    assert tok.shape[-1] == L
    return torch.softmax(torch.cat([tok, slots, cache], -1), -1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("D,G,L", [(16, 1, 70), (16, 2, 9), (5, 1, 9), (32, 3, 5)])
def test_dense_memory_softmax_equals_softmax_of_the_scores(dtype, D: int, G: int, L: int) -> None:
    """Every score and the softmax in one pass against matmuls, a concatenation and softmax:
    token masks none, padding (B, 1, 1, L) with a −inf inside a row, a learned bias (1, H,
    L, L) (it gets its gradient, summed over the experts and where it broadcasts) and a full
    (B, H, L, L) one; an empty slot (−inf); rows in blocks of four and a remainder (G·L = 9,
    5·3), D a whole vector or not (5); gradients by gradcheck in float64, with qr the same
    tensor as q too (no rotation: its two gradients add up)."""
    g = torch.Generator().manual_seed(11)
    B, H, S = 2, 2, 4

    def t(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g, dtype=dtype) * scale).requires_grad_()

    qr, q = t(B, H, G, L, D, scale=0.5), t(B, H, G, L, D, scale=0.5)
    kr, ks, kc = t(B, H, L, D), t(B, H, S, D), t(B, H, L, D)
    sa = torch.zeros(B, S, dtype=dtype)
    sa[1, 2] = NEG_INF
    pad = torch.zeros(B, 1, 1, L, dtype=dtype)
    pad[0, ..., L - 2:] = NEG_INF
    pad[1, ..., 1] = NEG_INF
    masks = (None, pad, t(1, H, L, L), t(B, H, L, L))
    tol = dict(atol=1e-6, rtol=1e-5) if dtype == torch.float32 else dict(atol=1e-14, rtol=0)
    for add in masks:
        got = kernels.dense_memory_softmax(qr, q, kr, ks, kc, add, sa)
        want = _dense_reference(qr, q, kr, ks, kc, add, sa)
        torch.testing.assert_close(got, want, **tol)
        assert torch.equal(got == 0, want == 0)
    if dtype == torch.float64 and L < 20:
        open_slots = torch.zeros_like(sa)
        for add in (masks[2], pad):
            assert torch.autograd.gradcheck(
                lambda qr, q, kr, ks, kc, add: kernels.dense_memory_softmax(qr, q, kr, ks, kc, add, open_slots),
                (qr, q, kr, ks, kc, add))
        assert torch.autograd.gradcheck(
            lambda q, kr, ks, kc: kernels.dense_memory_softmax(q, q, kr, ks, kc, None, sa), (q, kr, ks, kc))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("D,G,L", [(16, 1, 70), (16, 2, 9), (5, 1, 9), (32, 3, 5)])
def test_dense_memory_mix_equals_its_torch_form(dtype, D: int, G: int, L: int) -> None:
    """The dense weighted sum over every token value, the slots and the own cache entry
    against matmuls and a product; rows in blocks of four and a remainder, D a whole vector
    or not; gradients by gradcheck in float64."""
    g = torch.Generator().manual_seed(12)
    B, H, S = 2, 2, 4

    def t(*shape):
        return torch.randn(*shape, generator=g, dtype=dtype).requires_grad_()

    w, v, vs, vc = t(B, H, G, L, L + S + 1), t(B, H, L, D), t(B, H, S, D), t(B, H, L, D)

    def mix(w, v, vs, vc):
        return (w[..., :L] @ v.unsqueeze(2) + w[..., L:L + S] @ vs.unsqueeze(2)
                + w[..., L + S:] * vc.unsqueeze(2))

    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=1e-13, rtol=0)
    torch.testing.assert_close(kernels.dense_memory_mix(w, v, vs, vc), mix(w, v, vs, vc), **tol)
    if dtype == torch.float64 and L < 20:
        assert torch.autograd.gradcheck(kernels.dense_memory_mix, (w, v, vs, vc))


# ---------------------------------------------------------------------------- input checks
def _f(*shape, dtype=torch.float64):
    return torch.zeros(*shape, dtype=dtype)


def _i(*shape, high: int = 1):
    return torch.zeros(*shape, dtype=torch.int64) + (high - 1)


_MEM = dict(B=1, H=2, G=1, L=5, K=2, S=3, D=4)


def _mem(**bad):
    """memory_scores' arguments, one of them replaced."""
    B, H, G, L, K, S, D = _MEM.values()
    args = dict(qr=_f(B, H, G, L, D), q=_f(B, H, G, L, D), kr=_f(B, H, L, D), ks=_f(B, H, S, D),
                kc=_f(B, H, L, D), gidx=_i(B, H, G, L, K), ak=None, sa=_f(B, S))
    return kernels.memory_scores(**{**args, **bad})


def _mix(**bad):
    B, H, G, L, K, S, D = _MEM.values()
    args = dict(w=_f(B, H, G, L, K + S + 1), v=_f(B, H, L, D), vs=_f(B, H, S, D), vc=_f(B, H, L, D),
                gidx=_i(B, H, G, L, K))
    return kernels.memory_mix(**{**args, **bad})


# entry -> calls that must raise KernelInputError, each with the text the error must contain
BAD_INPUTS = {
    "score_topk": [
        (lambda: kernels.score_topk(_f(1, 1, 1, 6, 4).transpose(-1, -2), _f(1, 1, 4, 6), None, 2), "q must be a contiguous"),
        (lambda: kernels.score_topk(_f(1, 1, 1, 6, 4), _f(1, 1, 5, 4), None, 2), r"k must be .*\(1, 1, 6, 4\)"),
        (lambda: kernels.score_topk(_f(1, 1, 1, 6, 4), _f(1, 1, 6, 4, dtype=torch.float32), None, 2), "k must be .*float64"),
        (lambda: kernels.score_topk(_f(1, 1, 1, 6, 4), _f(1, 1, 6, 4), None, 7), r"kk must be in \[1, 6\]"),
        (lambda: kernels.score_topk(_f(1, 1, 1, 6, 4), _f(1, 1, 6, 4), _f(1, 1, 1, 5), 2), "add must have shape"),
    ],
    "heads": [
        (lambda: kernels.heads(_f(2, 3, 16), 2, 3, (True, False), None, [3]), r"parts·heads·dh"),
        (lambda: kernels.heads(_f(2, 3, 16), 2, 2, (True, False), None, [2]), r"sizes must .* sum to raw's rows \(3\)"),
        (lambda: kernels.heads(_f(2, 16, 3).transpose(1, 2), 2, 2, (True, False), None, [3]), "raw must be a contiguous"),
        (lambda: kernels.heads(_f(2, 3, 16), 2, 2, (True, False), _f(3), [3]), r"scale must be .*\(2,\)"),
    ],
    "memory_scores": [
        (lambda: _mem(kr=_f(1, 2, 4, 4)), r"kr must be .*\(1, 2, 5, 4\)"),
        (lambda: _mem(gidx=_i(1, 2, 1, 5, 2, high=11)), r"gidx must index rows in \[0, 10\)"),
        (lambda: _mem(gidx=_i(1, 2, 1, 5, 2).to(torch.int32)), "gidx must be .*int64"),
        (lambda: _mem(q=_f(1, 2, 1, 4, 5).transpose(-1, -2)), "q must be a contiguous"),
        (lambda: _mem(sa=_f(1, 2)), r"sa must be .*\(1, 3\)"),
    ],
    "memory_mix": [
        (lambda: _mix(w=_f(1, 2, 1, 5, 5)), r"w must be .*\(1, 2, 1, 5, 6\)"),
        (lambda: _mix(vc=_f(1, 2, 4, 5).transpose(-1, -2)), "vc must be a contiguous"),
        (lambda: _mix(gidx=_i(1, 2, 1, 5, 2) - 1), r"gidx must index rows in \[0, 10\)"),
    ],
    "dense_memory_softmax": [
        (lambda: kernels.dense_memory_softmax(_f(1, 2, 1, 5, 4), _f(1, 2, 1, 5, 4), _f(1, 2, 4, 4),
                                              _f(1, 2, 3, 4), _f(1, 2, 5, 4), None, _f(1, 3)), r"kr must be .*\(1, 2, 5, 4\)"),
        (lambda: kernels.dense_memory_softmax(_f(1, 2, 1, 5, 4), _f(1, 2, 1, 5, 4), _f(1, 2, 5, 4),
                                              _f(1, 2, 3, 4), _f(1, 2, 5, 4), None, _f(1, 2)), r"sa must be .*\(1, 3\)"),
        (lambda: kernels.dense_memory_softmax(_f(1, 2, 1, 5, 4), _f(1, 2, 1, 5, 4), _f(1, 2, 5, 4),
                                              _f(1, 2, 3, 4), _f(1, 2, 5, 4), _f(1, 2, 5, 6), _f(1, 3)), "add must have shape"),
        (lambda: kernels.dense_memory_softmax(_f(1, 2, 1, 5, 4, dtype=torch.float32), _f(1, 2, 1, 5, 4), _f(1, 2, 5, 4),
                                              _f(1, 2, 3, 4), _f(1, 2, 5, 4), None, _f(1, 3)), "qr must be .*float64"),
    ],
    "dense_memory_mix": [
        (lambda: kernels.dense_memory_mix(_f(1, 2, 1, 5, 8), _f(1, 2, 5, 4), _f(1, 2, 3, 4), _f(1, 2, 5, 4)),
         r"w must be .*\(1, 2, \*, 5, 9\)"),
        (lambda: kernels.dense_memory_mix(_f(1, 2, 1, 5, 9), _f(1, 2, 5, 4), _f(1, 2, 3, 4), _f(1, 2, 4, 4)),
         r"vc must be .*\(1, 2, 5, 4\)"),
        (lambda: kernels.dense_memory_mix(_f(1, 2, 1, 5, 9), _f(1, 2, 5, 4), _f(1, 2, 3, 4, dtype=torch.float32),
                                          _f(1, 2, 5, 4)), "vs must be .*float64"),
    ],
    "gather_dot": [
        (lambda: kernels.gather_dot(_f(3, 4), _f(5, 3), _i(3, 2)), r"a must be .*\(3, 3\)"),
        (lambda: kernels.gather_dot(_f(3, 4), _f(5, 4), _i(3, 2, high=6)), r"idx must index rows in \[0, 5\)"),
        (lambda: kernels.gather_dot(_f(4, 3).t(), _f(5, 4), _i(3, 2)), "a must be a contiguous"),
    ],
    "gather_sum": [
        (lambda: kernels.gather_sum(_f(3, 3), _f(5, 4), _i(3, 2)), r"w must be .*\(3, 2\)"),
        (lambda: kernels.gather_sum(_f(3, 2), _f(5, 4, dtype=torch.float32), _i(3, 2)), "table must be .*float64"),
    ],
    "entmax15": [
        (lambda: kernels.entmax15(_f(8, 5).t()), "z must be a contiguous"),
        (lambda: kernels.entmax15(_f(2, 65)), "rows must hold 1 to 64"),
        (lambda: kernels.entmax15(_f(2, 5, dtype=torch.float16)), "float32 or float64"),
    ],
    "masked_softmax": [
        (lambda: kernels.masked_softmax(_f(1, 2, 1, 3, 6), _f(1, 2, 1, 3, 5)), "mask must have shape"),
        (lambda: kernels.masked_softmax(_f(1, 2, 1, 6, 3).transpose(-1, -2), None), "z must be a contiguous"),
        (lambda: kernels.masked_softmax(_f(2, 3, 6), None), r"z must be .*\(\*, \*, \*, \*, \*\)"),
    ],
    "chain_sqdist": [
        (lambda: kernels.chain_sqdist([_f(2, 5), _f(2, 4)]), r"ws\[1\] must be .*\(2, 5\)"),
        (lambda: kernels.chain_sqdist([_f(2, 5), _f(2, 5)], 6), r"n must be in \[0, 5\]"),
        (lambda: kernels.chain_sqdist([_f(2, 5)]), "at least 2"),
    ],
    "sparse_sqdist": [
        (lambda: kernels.sparse_sqdist(_f(2, 3), _i(2, 4), _f(2, 3), _i(2, 3)), r"ia must be .*\(2, 3\)"),
        (lambda: kernels.sparse_sqdist(_f(2, 3), _i(2, 3), _f(3, 3), _i(3, 3)), "share their leading dims"),
    ],
}


def test_every_entry_has_bad_input_cases() -> None:
    """Each public kernel entry (a module-level function taking tensors) is listed above."""
    helpers = {"available", "execution_path", "use_cache_dir", "sources_digest", "torch_path"}
    public = {name for name, obj in vars(kernels).items()
              if callable(obj) and not name.startswith("_") and not isinstance(obj, type)
              and getattr(obj, "__module__", "") == kernels.__name__} - helpers
    assert public == set(BAD_INPUTS)


@pytest.mark.parametrize("entry,case", [(e, i) for e, cases in BAD_INPUTS.items() for i in range(len(cases))])
def test_every_entry_refuses_a_bad_tensor_before_c(entry: str, case: int) -> None:
    """A wrong shape, dtype, layout or index raises KernelInputError (a ValueError) naming the
    argument and the entry; nothing reaches C."""
    call, match = BAD_INPUTS[entry][case]
    with pytest.raises(kernels.KernelInputError, match=match) as err:
        call()
    assert f"kernels.{entry}:" in str(err.value)


def test_the_code_fingerprint_covers_the_c_sources() -> None:
    """SOURCES_SHA256 is the shipped sources' digest, and the sources are what ReSSFormer's
    trials hash (an edit of the C moves their keys only: tests/test_code_components.py)."""
    from fusion_sweep.trial.components import COMPILED_SOURCES

    assert set(COMPILED_SOURCES[kernels.__name__]) == {f"trial/models/csrc/{s}"
                                                       for s in kernels.SOURCES}
    assert kernels.sources_digest() == kernels.SOURCES_SHA256, "update kernels.SOURCES_SHA256"


def test_no_c_inside_python() -> None:
    from pathlib import Path
    root = Path(kernels.__file__).parents[2]
    assert not [p for p in root.rglob("*.py") if "#include" in p.read_text()]


def test_the_build_follows_the_cache_dir(monkeypatch, tmp_path) -> None:
    """use_cache_dir (ReSSFormer's encoder calls it with TrialConfig.cache_dir): the library
    is built under <cache_dir>/kernels, and execution_path says compiled, with the compiler."""
    try:
        kernels._build_in.cache_clear()
        kernels.use_cache_dir(str(tmp_path / "trial-cache"))
        assert kernels.available(torch.zeros(1))
        assert list((tmp_path / "trial-cache" / "kernels").rglob("ressformer_kernels.so"))
        path = kernels.execution_path()
        assert path["kernels"] == "compiled" and path["build"] == "" and path["compiler"]
    finally:
        kernels.use_cache_dir("")
        kernels._build_in.cache_clear()


def test_execution_path_off_and_failed(monkeypatch, tmp_path) -> None:
    """FUSION_SWEEP_KERNELS=0: 'off'; a compiler that fails: 'torch', the reason, one warning."""
    fake = tmp_path / "cc"
    fake.write_text("#!/bin/sh\necho 'k.c:1: error: broken on purpose' >&2\nexit 1\n")
    fake.chmod(0o755)
    try:
        kernels._build_in.cache_clear()
        monkeypatch.setenv(kernels.ENV_SWITCH, "0")
        assert kernels.execution_path() == {"kernels": "off", "compiler": "", "build": ""}
        kernels._build_in.cache_clear()
        monkeypatch.delenv(kernels.ENV_SWITCH)
        monkeypatch.setenv("FUSION_SWEEP_CACHE", str(tmp_path / "cache"))
        monkeypatch.setattr(kernels, "_compiler", lambda: str(fake))
        with pytest.warns(RuntimeWarning, match="broken on purpose") as record:
            path = kernels.execution_path()
            kernels.available(torch.zeros(1))
            kernels.execution_path()
        assert len(record) == 1
        assert path["kernels"] == "torch" and "cc exited 1: k.c:1: error: broken on purpose" in path["build"]
    finally:
        kernels._build_in.cache_clear()
        monkeypatch.undo()
    assert kernels.execution_path()["kernels"] == "compiled"


def test_ressformer_passes_its_cache_dir(tmp_path) -> None:
    from fusion_sweep.trial.models.ressformer import ReSSFormerEncoder
    from tests.test_ressformer import stand_in
    try:
        opts = ReSSFormerEncoder.options(stand_in(cache_dir=str(tmp_path)))
        assert opts["cache_dir"] == str(tmp_path)
        ReSSFormerEncoder(d_model=16, heads=2, layers=1, dim_ff=16, dropout=0.0, attn_dropout=0.0,
                          activation="gelu", norm_first=False, max_len=8, **opts)
        assert kernels._cache_dir == str(tmp_path)
    finally:
        kernels.use_cache_dir("")


def test_execution_path_is_cached_after_the_first_build(monkeypatch) -> None:
    """After the first call nothing runs again (no compiler, no file access): the platform
    fingerprint may ask on every trial."""
    first = kernels.execution_path()

    def refuse(*args, **kwargs):
        raise AssertionError("execution_path ran something after the first build")

    monkeypatch.setattr(kernels.subprocess, "run", refuse)
    monkeypatch.setattr(kernels, "_sources_text", refuse)
    assert kernels.execution_path() == first and kernels.available(torch.zeros(1))

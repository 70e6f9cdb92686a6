"""The optimised ReSSFormer body (models/ressformer.py) computes what today's implementation
(tests/ressformer_reference.py, kept verbatim) computes: the same logits to 1e-5, the same
auxiliary loss and the same gradients, for every switch combination and attention activation,
at the synthetic regimes' size (d 32, L 128) and a larger one, with padded rows.
The gradients are compared in float64 (see `max_diffs`).

Both of the body's paths are checked: with the compiled CPU kernels (models/kernels.py) and
the pure-torch path that runs where they cannot (`path` fixture)."""
from __future__ import annotations

import contextlib
import copy
import itertools
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from fusion_sweep.trial.models import kernels, ressformer
from fusion_sweep.trial.models.encoder import FusionClassifier, ModelSpec, initialize

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ressformer_reference as reference  # noqa: E402

ACTIVATIONS = ("entmax15", "sparsemax", "softmax")
VOCAB = 1000
# (soes, asam, r2mu, attn_activation, extra ASAM options, pe): every switch combination with
# every activation where ASAM is on; SOES off with an input-level, a rotary and a bias pe;
# dense attention with routed experts.
CASES = []
for soes, asam, r2mu in itertools.product([True, False], repeat=3):
    pes = ["none"] if soes else ["sinusoidal", "rotary", "t5-bias"]
    acts = ACTIVATIONS if asam else ("entmax15",)  # asam off: dense softmax, fields at defaults
    for pe, act in itertools.product(pes, acts):
        CASES.append((soes, asam, r2mu, act, {}, pe))
    if asam:  # expert routing, and dense (topk 0) sparse activations
        CASES.append((soes, asam, r2mu, "entmax15", dict(experts=3, experts_topk=2), pes[0]))
        CASES.append((soes, asam, r2mu, "sparsemax", dict(topk=0), pes[0]))
        # dense softmax with routed experts (with memory: the fused dense kernels, G = 2)
        CASES.append((soes, asam, r2mu, "softmax", dict(topk=0, experts=3, experts_topk=2), pes[-1]))


@pytest.fixture(params=["compiled", "torch"])
def path(request, monkeypatch) -> str:
    """Run the test with the compiled kernels, then with the pure-torch path."""
    if request.param == "compiled":
        if kernels._compiler() is None:
            pytest.skip("no C compiler on this machine: the kernels cannot be built")
        assert kernels.available(torch.zeros(1)), "a C compiler is here, but the kernels did not build"
    else:
        monkeypatch.setattr(kernels, "available", lambda *tensors: False)
    return request.param


def _case_id(case) -> str:
    soes, asam, r2mu, act, extra, pe = case
    off = "".join(f"-no-{n}" for n, on in (("soes", soes), ("asam", asam), ("r2mu", r2mu)) if not on)
    return f"ressformer{off}-{pe}-{act}" + "".join(f"-{k}{v}" for k, v in extra.items())


def build_pair(case, *, d: int, heads: int, layers: int, max_len: int, seed: int = 0):
    """(optimised model, the same model with the reference body and the same weights)."""
    soes, asam, r2mu, act, extra, pe = case
    options = dict(soes=soes, asam=asam, r2mu=r2mu, iterations=3, topk=8, attn_activation=act,
                   experts=1, experts_topk=1, memory_segments=4, graph_reg=0.01)
    options.update(extra)
    common = dict(d_model=d, heads=heads, layers=layers, dim_ff=2 * d, dropout=0.0,
                  attn_dropout=0.0, activation="relu", norm_first=False, max_len=max_len)
    model = FusionClassifier(ModelSpec(fusion="add", pe=pe, encoder="ressformer",
                                       encoder_options=options, **common),
                             vocab_size=VOCAB, num_classes=3)
    initialize(model, {"shared": seed, "encoder": seed + 1, "fusion": seed + 2, "pe": seed + 3})
    ref = copy.deepcopy(model)
    ref.encoder = reference.ReSSFormerEncoder(**common, **options)
    ref.encoder.load_state_dict(model.encoder.state_dict())
    return model, ref


def batch(B: int, L: int, seed: int = 0, distinct: bool = True) -> torch.Tensor:
    """Right-padded ids: one full row, one of 3 real tokens (fewer than top-k keeps: padded
    keys are selected and must weigh 0), the rest between 3 and L; no token twice in a row if
    `distinct`.

    Why distinct: a position-free body (SOES) gives two equal tokens equal keys, and so
    exactly tied scores; which of two tied keys top-k keeps is arbitrary (it depends on the
    rounding of every other score in the row), in today's implementation as in the optimised
    one. The logits cannot tell (the keys are equal), but the eq. 8 regulariser compares
    graphs key index by key index, so its value, and the gradient, can differ at the 1e-5
    relative level. `test_equal_logits_with_repeated_tokens` covers repeated tokens."""
    g = torch.Generator().manual_seed(seed)
    lengths = [L, 3] + torch.randint(3, L + 1, (B - 2,), generator=g).tolist()
    ids = torch.zeros(B, L, dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, :n] = (torch.randperm(VOCAB - 1, generator=g)[:n] + 1 if distinct
                      else torch.randint(1, 50, (n,), generator=g))
    return ids


def step(model: FusionClassifier, ids: torch.Tensor):
    model.zero_grad(set_to_none=True)
    logits = model.train()(ids)
    loss = F.cross_entropy(logits, torch.arange(len(ids)) % 3)
    aux = model.aux_loss()
    (loss if aux is None else loss + aux).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), aux, grads


def max_diffs(case, *, d, heads, layers, L, B) -> dict[str, float]:
    """Logits in float32 (what a trial computes; the issue's 1e-5); the auxiliary loss and
    every gradient in float64, where rounding cannot hide a wrong formula (in float32 some
    gradients differ by up to ~1e-3 relative from rounding alone, amplified through three
    recurrent iterations of a peaked softmax)."""
    model, ref = build_pair(case, d=d, heads=heads, layers=layers, max_len=L)
    ids = batch(B, L)
    got_logits, _, _ = step(model, ids)
    want_logits, _, _ = step(ref, ids)
    with torch.inference_mode():
        eval_diff = (model.eval()(ids) - ref.eval()(ids)).abs().max().item()
    _, got_aux, got_grads = step(model.double(), ids)
    _, want_aux, want_grads = step(ref.double(), ids)
    assert sorted(got_grads) == sorted(want_grads)
    assert (got_aux is None) == (want_aux is None)
    return {
        "logits": (got_logits - want_logits).abs().max().item(),
        "eval_logits": eval_diff,
        "aux": 0.0 if got_aux is None else (got_aux - want_aux).abs().item(),
        "grad": max((got_grads[n] - want_grads[n]).abs().max().item() for n in want_grads),
        # relative to each gradient's own scale (they span orders of magnitude)
        "grad_rel": max(((got_grads[n] - want_grads[n]).abs().max()
                         / want_grads[n].abs().max().clamp(min=1e-12)).item() for n in want_grads
                        if want_grads[n].abs().max() > 1e-9),
    }


def check(diffs: dict[str, float]) -> None:
    assert diffs["logits"] <= 1e-5 and diffs["eval_logits"] <= 1e-5, diffs
    assert diffs["aux"] <= 1e-12, diffs
    assert diffs["grad_rel"] <= 1e-9, diffs


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_equal_to_reference_synthetic_size(case, path) -> None:
    """d 32, 2 heads, 1 layer, L 128 (the synthetic regimes' model and medium length)."""
    check(max_diffs(case, d=32, heads=2, layers=1, L=128, B=4))


@pytest.mark.parametrize("case", [c for c in CASES if c[3] == "entmax15" and not c[4]
                                  and c[5] in ("none", "sinusoidal")], ids=_case_id)
def test_equal_to_reference_larger(case, path) -> None:
    """d 64, 4 heads, 2 layers, L 300."""
    check(max_diffs(case, d=64, heads=4, layers=2, L=300, B=2))


@pytest.mark.parametrize("case", [c for c in CASES if c[3] == "entmax15" and not c[4]
                                  and c[5] in ("none", "sinusoidal")], ids=_case_id)
def test_equal_logits_with_repeated_tokens(case, path) -> None:
    """Tokens repeated many times (tied keys under SOES): the logits still agree to 1e-5.
    Which of two exactly tied keys top-k keeps is arbitrary (`batch`): torch.topk's choice
    depends on the rounding of the other scores, the compiled selection's on its scan
    order. The regulariser compares graphs key by key, so it agrees to 1e-4 relative on the
    torch path and to 1e-2 on the compiled one (measured: 2e-3)."""
    model, ref = build_pair(case, d=32, heads=2, layers=1, max_len=128)
    ids = batch(6, 128, distinct=False)
    got_logits, got_aux, _ = step(model, ids)
    want_logits, want_aux, _ = step(ref, ids)
    assert (got_logits - want_logits).abs().max().item() <= 1e-5
    if want_aux is not None:
        tol = 1e-4 if path == "torch" else 1e-2
        assert abs(got_aux.item() - want_aux.item()) <= tol * abs(want_aux.item())


@pytest.mark.parametrize("case", [c for c in CASES if c[1] and not c[4] and c[3] != "sparsemax"
                                  and c[5] in ("none", "t5-bias")], ids=_case_id)
def test_equal_to_reference_rescoring(case, monkeypatch) -> None:
    """Without the compiled kernels, at d 32, L 128 top-k goes through the (L, L) scores
    (`_rescore`); forced to re-score the kept keys instead, the results are the same (the
    larger shape re-scores by itself). (The compiled path always re-scores.)"""
    monkeypatch.setattr(kernels, "available", lambda *tensors: False)
    monkeypatch.setattr(ressformer, "_rescore", lambda L, k, dh: True)
    check(max_diffs(case, d=32, heads=2, layers=1, L=128, B=4))


def test_rescoring_is_chosen_by_size() -> None:
    assert not ressformer._rescore(128, 8, 16)  # the synthetic regimes' medium length
    assert ressformer._rescore(540, 8, 16) and ressformer._rescore(300, 8, 16)  # long
    assert ressformer._rescore(1024, 8, 64)  # paper-like


def test_blocked_selection_equals_whole(monkeypatch) -> None:
    """Scoring the top-k selection a block of queries at a time (SCORE_BLOCK) picks the same
    keys and so gives the same logits as one block."""
    case = (True, True, True, "entmax15", {}, "none")
    model, _ = build_pair(case, d=32, heads=2, layers=1, max_len=128)
    ids = batch(4, 128)
    monkeypatch.setattr(kernels, "available", lambda *tensors: False)  # blocks: torch path only
    monkeypatch.setattr(ressformer, "_rescore", lambda L, k, dh: True)
    whole = step(model, ids)
    monkeypatch.setattr(ressformer, "SCORE_BLOCK", 4 * 2 * 128 * 5)  # 5 queries per block
    blocked = step(model, ids)
    torch.testing.assert_close(blocked[0], whole[0], atol=1e-6, rtol=0)
    for n in whole[2]:
        torch.testing.assert_close(blocked[2][n], whole[2][n], atol=1e-6, rtol=1e-4)


def _seeded_step(model: FusionClassifier, ids: torch.Tensor, reference: bool):
    """A training step with the RNG at a fixed state (attention dropout draws the same mask
    wherever the weights have the same shape), on the fused path or the reference one."""
    torch.manual_seed(11)
    with kernels.torch_path() if reference else contextlib.nullcontext():
        return step(model, ids)


@pytest.mark.parametrize("attn_dropout", [0.0, 0.2])
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_fused_path_equals_reference_path(case, attn_dropout: float) -> None:
    """ReSSAttention's two paths against each other, one model: the fused one (compiled
    kernels, dense-memory Functions) and the reference one (plain torch, under
    kernels.torch_path()): logits to 1e-5 in float32, the auxiliary loss and every gradient
    in float64 (1e-12; 1e-9 relative), with attention dropout too (the same mask on both)."""
    if not kernels.available(torch.zeros(1)):
        pytest.skip("the compiled kernels do not build here: only the reference path runs")
    model, _ = build_pair(case, d=32, heads=2, layers=1, max_len=64)
    for layer in model.encoder.layers:
        layer.attn.attn_dropout = attn_dropout
    ids = batch(4, 64)
    fused_logits, _, _ = _seeded_step(model, ids, reference=False)
    ref_logits, _, _ = _seeded_step(model, ids, reference=True)
    assert (fused_logits - ref_logits).abs().max().item() <= 1e-5
    model.double()
    _, fused_aux, fused_grads = _seeded_step(model, ids, reference=False)
    _, ref_aux, ref_grads = _seeded_step(model, ids, reference=True)
    assert sorted(fused_grads) == sorted(ref_grads) and (fused_aux is None) == (ref_aux is None)
    if ref_aux is not None:
        assert abs(fused_aux.item() - ref_aux.item()) <= 1e-12
    for n, g in ref_grads.items():
        assert (fused_grads[n] - g).abs().max() <= 1e-9 * max(g.abs().max().item(), 1e-3), n

"""ReSSFormer as an encoder body (models/ressformer.py): every switch combination trains,
every invalid combination has one clear error, padding never changes a logit, R2MU's
parameters do not grow with T, top-k/sparsemax/entmax do what they say, the position-free
configurations are exactly as blind to order as the module docstring claims, FLOPs are
counted right, and standard and ReSSFormer trials of one seed share embedding and classifier.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from fusion_sweep.trial.models import kernels
from fusion_sweep.trial.models.encoder import (ENCODERS, FusionClassifier, ModelSpec, count_parameters,
                                         encoder_init_hash, initialize, shared_init_hash)
from fusion_sweep.trial.models.positional import POSITIONAL
from fusion_sweep.trial.models.ressformer import Graph, _row_change
from fusion_sweep.trial.models.sparse import ATTN_ACTIVATIONS

D, H, VOCAB, C, MAX_LEN = 16, 2, 60, 3, 40
SWITCH_COMBOS = list(itertools.product([True, False], repeat=3))  # (soes, asam, r2mu)
RESS = ENCODERS["ressformer"]


@dataclass(frozen=True)
class StandIn:
    """The trial-config fields the encoders read, with the contract's defaults."""

    encoder: str = "ressformer"
    pe: str = "none"
    fusion: str = "add"
    d_model: int = D
    heads: int = H
    max_len: int = MAX_LEN
    soes: bool = True
    asam: bool = True
    r2mu: bool = True
    iterations: int = 3
    topk: int = 8
    attn_activation: str = "entmax15"
    experts: int = 1
    experts_topk: int = 1
    memory_segments: int = 4
    graph_reg: float = 0.01
    cache_dir: str = ""


def stand_in(**overrides) -> StandIn:
    return dataclasses.replace(StandIn(), **overrides)


def switched(soes: bool, asam: bool, r2mu: bool, **overrides) -> StandIn:
    """A valid config for the switches: fields of a switched-off module stay at defaults."""
    pe = "none" if soes else "rotary"
    extra = dict(experts=3, experts_topk=2, topk=4) if asam else {}
    return stand_in(soes=soes, asam=asam, r2mu=r2mu, pe=pe, **{**extra, **overrides})


def make(config: StandIn, *, layers: int = 2, seeds: dict | None = None, dropout: float = 0.0,
         norm_first: bool = False) -> FusionClassifier:
    cls = ENCODERS[config.encoder]
    m = FusionClassifier(ModelSpec(fusion=config.fusion, pe=config.pe,
                                   max_len=MAX_LEN, d_model=D, heads=H, layers=layers, dim_ff=32,
                                   dropout=dropout, attn_dropout=dropout, activation="gelu",
                                   norm_first=norm_first, encoder=config.encoder,
                                   encoder_options=cls.options(config)),
                         vocab_size=VOCAB, num_classes=C)
    initialize(m, seeds or {"shared": 0, "encoder": 1, "fusion": 2, "pe": 3})
    return m


def raise_errors(config) -> None:
    errs = ENCODERS[config.encoder].config_errors(config)
    if errs:
        raise ValueError("; ".join(errs))


def ids_batch(lengths: list[int], L: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ids = torch.zeros(len(lengths), L, dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.randint(1, VOCAB, (n,), generator=g)
    return ids


# ------------------------------------------------------------------ training path
@pytest.mark.parametrize("soes,asam,r2mu", SWITCH_COMBOS)
@pytest.mark.parametrize("norm_first", [False, True])
def test_forward_backward_every_switch_combination(soes, asam, r2mu, norm_first) -> None:
    cfg = switched(soes, asam, r2mu)
    raise_errors(cfg)
    m = make(cfg, dropout=0.1, norm_first=norm_first).train()
    ids = ids_batch([11, 7, 1, 0], 11)  # a padded row, a one-token row, an empty row
    logits = m(ids)
    assert logits.shape == (4, C) and torch.isfinite(logits).all()
    aux = m.aux_loss()
    assert (aux is not None) == soes  # eq. 8 is SOES's; layers=2 gives a pair either way
    (logits.square().sum() + (aux if aux is not None else 0.0)).backward()
    for name, p in m.named_parameters():
        if name.startswith("embed"):
            continue
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all(), name
    assert any(p.grad.abs().sum() > 0 for n, p in m.named_parameters() if ".router." in n) or not asam


def test_aux_loss_is_weighted_and_training_only() -> None:
    cfg = stand_in(graph_reg=0.5)
    ids = ids_batch([12, 9], 12)
    a, b = make(cfg), make(dataclasses.replace(cfg, graph_reg=1.0))
    a.train()(ids)
    b.train()(ids)
    assert a.aux_loss() > 0
    torch.testing.assert_close(2 * a.aux_loss(), b.aux_loss())
    evaluated = make(cfg).eval()
    evaluated(ids)
    assert evaluated.aux_loss() is None  # computed in training mode only
    unweighted = make(stand_in(graph_reg=0.0)).train()
    unweighted(ids)
    assert unweighted.aux_loss() is None
    standard = make(stand_in(encoder="standard", soes=True), layers=1)
    standard.train()(ids)
    assert standard.aux_loss() is None


def test_graph_change_sparse_equals_dense() -> None:
    """The eq. 8 penalty on sparse rows (repeated keys across experts) equals the dense one."""
    g = torch.Generator().manual_seed(0)
    B, Hh, L, N = 2, 2, 6, 5
    dense = []
    sparse = []
    for _ in range(2):
        w = torch.rand(B, Hh, L, N, generator=g, dtype=torch.float64)
        idx = torch.randint(0, L, (B, Hh, L, N), generator=g)  # repeats allowed
        sparse.append(Graph(w, idx, distinct=False))
        dense.append(Graph(torch.zeros(B, Hh, L, L, dtype=torch.float64).scatter_add(-1, idx, w), None))
    torch.testing.assert_close(_row_change(*sparse), _row_change(*dense))


# ------------------------------------------------------------------ configuration rules
INVALID = [
    (dict(pe="sinusoidal"), r"soes=true requires pe 'none', got pe 'sinusoidal': SOES is position-free"),
    (dict(pe="rotary"), r"soes=true requires pe 'none', got pe 'rotary'.*set pe=none, or soes=false"),
    (dict(iterations=0), r"iterations must be an integer >= 1, got 0"),
    (dict(iterations=2.5), r"iterations must be an integer >= 1, got 2.5"),
    (dict(topk=-1), r"topk must be an integer >= 0, got -1"),
    (dict(experts=0), r"experts must be an integer >= 1, got 0"),
    (dict(experts=2, experts_topk=3), r"experts_topk must be an integer in \[1, experts=2\], got 3"),
    (dict(experts_topk=0), r"experts_topk must be an integer in \[1, experts=1\], got 0"),
    (dict(memory_segments=0), r"memory_segments must be an integer >= 1, got 0"),
    (dict(graph_reg=-0.1), r"graph_reg must be a finite number >= 0, got -0.1"),
    (dict(graph_reg=math.inf), r"graph_reg must be a finite number >= 0, got inf"),
    (dict(attn_activation="relu"),
     r"unknown attn_activation 'relu'; choose from entmax15, softmax, sparsemax"),
    (dict(soes="yes"), r"soes must be true or false, got 'yes'"),
    # a switched-off module's fields would be silently ignored
    (dict(asam=False, topk=4), r"topk configures ASAM and has no effect with asam=false; got topk=4: "
                               r"leave it at its default \(8\) or set asam=true"),
    (dict(asam=False, attn_activation="softmax"), r"attn_activation configures ASAM"),
    (dict(asam=False, experts=2, experts_topk=2), r"experts configures ASAM"),
    (dict(r2mu=False, iterations=5), r"iterations configures R2MU and has no effect with r2mu=false"),
    (dict(r2mu=False, memory_segments=8), r"memory_segments configures R2MU"),
    (dict(soes=False, pe="sinusoidal", graph_reg=0.1), r"graph_reg configures SOES"),
]


@pytest.mark.parametrize("overrides,pattern", INVALID)
def test_invalid_ressformer_config_has_clear_error(overrides, pattern) -> None:
    with pytest.raises(ValueError, match=pattern):
        raise_errors(stand_in(**overrides))


@pytest.mark.parametrize("field,value", [
    ("soes", False), ("asam", False), ("r2mu", False), ("iterations", 2), ("topk", 0),
    ("attn_activation", "softmax"), ("experts", 2), ("memory_segments", 2), ("graph_reg", 0.0)])
def test_standard_rejects_ressformer_fields(field, value) -> None:
    with pytest.raises(ValueError, match=rf"{field} applies only to encoder 'ressformer'; got "
                                         rf"{field}={value!r} with encoder 'standard'.*set encoder=ressformer"):
        raise_errors(stand_in(encoder="standard", pe="sinusoidal", **{field: value}))


def test_reports_every_error_at_once() -> None:
    errs = RESS.config_errors(stand_in(pe="alibi", iterations=0, topk=-2))
    assert len(errs) == 3


@pytest.mark.parametrize("config", [
    stand_in(), stand_in(encoder="standard", pe="sinusoidal"), stand_in(topk=0),
    stand_in(soes=False, pe="t5-bias"), stand_in(soes=False, pe="learned", fusion="concat"),
    stand_in(experts=4, experts_topk=4), stand_in(attn_activation="sparsemax", iterations=1)])
def test_valid_configs_have_no_errors(config) -> None:
    assert ENCODERS[config.encoder].config_errors(config) == []


def test_trial_config_uses_the_rules() -> None:
    from fusion_sweep.trial.config import TrialConfig

    with pytest.raises(ValueError, match=r"soes=true requires pe 'none'"):
        TrialConfig.build("synthetic-short", encoder="ressformer", pe="sinusoidal")
    with pytest.raises(ValueError, match=r"soes applies only to encoder 'ressformer'"):
        TrialConfig.build("synthetic-short", soes=False)
    TrialConfig.build("synthetic-short", encoder="ressformer", pe="none")


def test_variant_labels() -> None:
    assert ENCODERS["standard"].variant(stand_in(encoder="standard")) == "standard"
    labels = {s: RESS.variant(switched(*s)) for s in SWITCH_COMBOS}
    assert labels[(True, True, True)] == "ressformer"
    assert labels[(False, True, True)] == "ressformer-no-soes"
    assert labels[(True, False, False)] == "ressformer-no-asam-no-r2mu"
    assert labels[(False, False, False)] == "ressformer-no-soes-no-asam-no-r2mu"
    assert len(set(labels.values())) == 8


def test_order_visibility_lines() -> None:
    assert RESS.order_visibility(stand_in(r2mu=False)).startswith("no:")
    assert RESS.order_visibility(stand_in()).startswith("segment membership only")
    assert RESS.order_visibility(stand_in(soes=False, pe="rotary")).startswith("yes: pe 'rotary'")
    assert ENCODERS["standard"].order_visibility(stand_in(encoder="standard", pe="none")).startswith("no:")


# ------------------------------------------------------------------ padding invariance
def valid_combinations() -> list[StandIn]:
    out = []
    for soes, asam, r2mu in SWITCH_COMBOS:
        pes = ["none"] if soes else ["none", "sinusoidal", "rotary", "alibi", "t5-bias"]
        for pe in pes:
            asams = [dict(topk=3, experts=3, experts_topk=2), dict(topk=0, attn_activation="sparsemax"),
                     dict(topk=20, attn_activation="softmax")] if asam else [{}]
            for a in asams:
                cfg = stand_in(soes=soes, asam=asam, r2mu=r2mu, pe=pe, **a)
                assert RESS.config_errors(cfg) == [], cfg
                out.append(cfg)
    return out


@pytest.mark.parametrize("config", valid_combinations(), ids=lambda c: f"{RESS.variant(c)}-{c.pe}-"
                         f"k{c.topk}-{c.attn_activation}-E{c.experts}")
def test_padding_invariance(config) -> None:
    """A document's eval logits do not depend on how much right-padding its batch has."""
    m = make(config).eval()
    doc = ids_batch([9], 9, seed=1)[0]
    other = ids_batch([MAX_LEN], MAX_LEN, seed=2)[0]
    with torch.inference_mode():
        alone = m(doc.unsqueeze(0))
        for extra in (1, 5, MAX_LEN - 9):
            batch = torch.zeros(2, 9 + extra, dtype=torch.long)
            batch[0, :9] = doc
            batch[1] = other[: 9 + extra]
            padded = m(batch)[0:1]
            assert (padded - alone).abs().max().item() <= 1e-5, (extra, (padded - alone).abs().max())


# ------------------------------------------------------------------ R2MU, ASAM
def test_r2mu_parameter_count_independent_of_iterations() -> None:
    counts = {t: count_parameters(make(stand_in(iterations=t)).encoder) for t in (1, 3, 8)}
    assert len(set(counts.values())) == 1, counts


def test_r2mu_iterations_change_the_computation() -> None:
    ids = ids_batch([10], 10)
    a, b = make(stand_in(iterations=1)).eval(), make(stand_in(iterations=3)).eval()
    assert not torch.allclose(a(ids), b(ids))


@pytest.mark.parametrize("soes", [True, False])
@pytest.mark.parametrize("activation", sorted(ATTN_ACTIVATIONS))
def test_topk_at_least_real_keys_equals_dense(soes, activation) -> None:
    """k >= the number of real keys keeps every real key (padding is never selected over one);
    k >= L takes the dense path: both equal topk = 0 (every key)."""
    pe = "none" if soes else "alibi"
    ids = ids_batch([7, 12], 12)  # row 0: 7 real keys among 12
    base = dict(soes=soes, pe=pe, attn_activation=activation, experts=2, experts_topk=2)
    dense = make(stand_in(topk=0, **base)).eval()(ids)
    for k in (7, 9, 12, 30):
        sparse = make(stand_in(topk=k, **base)).eval()(ids)
        rows = slice(0, 1) if k < 12 else slice(0, 2)
        torch.testing.assert_close(sparse[rows], dense[rows], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(make(stand_in(topk=2, **base)).eval()(ids), dense, atol=1e-5)


# -------------------------------------------------- sparsemax / entmax against sorting
def sparsemax_by_sorting(z: torch.Tensor) -> torch.Tensor:
    """Martins & Astudillo (2016), Alg. 1: the support is the largest k with
    1 + k z_(k) > Σ_{j<=k} z_(j); τ = (Σ_{j<=k} z_(j) − 1) / k."""
    zs, _ = z.sort(dim=-1, descending=True)
    k = torch.arange(1, z.shape[-1] + 1, dtype=z.dtype)
    cum = zs.cumsum(-1)
    finite = torch.isfinite(zs)
    support = (1 + k * zs > cum) & finite
    kmax = support.sum(-1, keepdim=True)
    tau = (cum.gather(-1, kmax - 1) - 1) / kmax.to(z.dtype)
    return (z - tau).clamp(min=0)


def entmax15_by_sorting(z: torch.Tensor) -> torch.Tensor:
    """1.5-entmax: p = [z/2 − τ]₊² with Σ p = 1. For the top-k entries s (sorted z/2), τ solves
    Σ_{j<=k} (s_j − τ)² = 1: τ_k = mean_k − sqrt((1 − k·var_k) / k); the support is the k with
    s_(k) > τ_k (and τ_k >= s_(k+1)), found by trying every k."""
    s, _ = (z / 2).sort(dim=-1, descending=True)
    out = torch.empty_like(z)
    for row in range(z.shape[0]):
        r = s[row][torch.isfinite(s[row])]
        for kk in range(len(r), 0, -1):
            top = r[:kk]
            mean, var = top.mean(), top.var(unbiased=False)
            disc = (1 - kk * var) / kk
            if disc < 0:
                continue
            tau = mean - disc.sqrt()
            if top[-1] > tau and (kk == len(r) or tau >= r[kk]):
                break
        out[row] = (z[row] / 2 - tau).clamp(min=0) ** 2
    return out


@pytest.mark.parametrize("name,reference", [("sparsemax", sparsemax_by_sorting),
                                            ("entmax15", entmax15_by_sorting)])
def test_sparse_activations_match_sorting_reference(name, reference) -> None:
    g = torch.Generator().manual_seed(0)
    z = torch.randn(64, 9, generator=g, dtype=torch.float64) * 2
    z[::3, 6:] = float("-inf")  # masked keys
    p = ATTN_ACTIVATIONS[name](z)
    ref = reference(z)
    torch.testing.assert_close(p, ref, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(p.sum(-1), torch.ones(64, dtype=torch.float64))
    assert torch.equal(p == 0, ref == 0)  # the same support
    assert (p[::3, 6:] == 0).all()  # masked keys are exact zeros
    assert (p == 0).any(-1).float().mean() > 0.5  # sparse: most rows drop some key


def test_sparse_activations_hand_examples() -> None:
    z = torch.tensor([[0.5, 0.3, -1.0, float("-inf")], [3.0, 1.0, 0.2, float("-inf")]])
    torch.testing.assert_close(ATTN_ACTIVATIONS["sparsemax"](z),
                               torch.tensor([[0.6, 0.4, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]))
    # entmax15 of [0, 0]: p = (0 − τ)² each, summing to 1: a uniform 1/2
    torch.testing.assert_close(ATTN_ACTIVATIONS["entmax15"](torch.zeros(1, 2)), torch.full((1, 2), 0.5))
    soft = ATTN_ACTIVATIONS["softmax"](z)
    assert (soft[:, :3] > 0).all() and (soft[:, 3] == 0).all()


@pytest.mark.parametrize("name", ["sparsemax", "entmax15"])
def test_sparse_activations_gradcheck(name) -> None:
    z = torch.randn(4, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(3)) * 3
    z.requires_grad_()
    assert torch.autograd.gradcheck(ATTN_ACTIVATIONS[name], (z,))


# ------------------------------------------------------------------ order visibility
@pytest.mark.parametrize("asam", [True, False])
def test_soes_without_r2mu_is_permutation_invariant(asam) -> None:
    """Content-only kernel, no positions, no segments: any permutation of a document's real
    tokens leaves the logits unchanged (so the synthetic order task is at chance)."""
    extra = dict(topk=3, experts=3, experts_topk=2) if asam else {}
    m = make(stand_in(r2mu=False, asam=asam, **extra)).eval()
    ids = ids_batch([13, 20], 20, seed=5)
    perm = torch.randperm(13, generator=torch.Generator().manual_seed(6))
    shuffled = ids.clone()
    shuffled[0, :13] = ids[0, perm]
    torch.testing.assert_close(m(shuffled), m(ids), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("n", [12, 16])
def test_soes_with_r2mu_is_reversal_invariant_when_segments_divide_length(n) -> None:
    """Segment memory sees which tokens share a segment but not the segments' order: a reversed
    document (real length a multiple of memory_segments) gets the same logits."""
    m = make(stand_in(memory_segments=4, topk=3)).eval()
    ids = ids_batch([n, 20], 20, seed=7)
    rev = ids.clone()
    rev[0, :n] = ids[0, :n].flip(0)
    torch.testing.assert_close(m(rev), m(ids), atol=1e-5, rtol=1e-5)
    # ... but segment membership is seen: moving tokens across segments changes the logits
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(8))
    moved = ids.clone()
    moved[0, :n] = ids[0, perm]
    assert not torch.allclose(m(moved)[0], m(ids)[0], atol=1e-5)


def test_soes_off_with_a_pe_sees_order() -> None:
    m = make(stand_in(soes=False, pe="sinusoidal", r2mu=False)).eval()
    ids = ids_batch([12], 12, seed=9)
    assert not torch.allclose(m(ids.flip(1)), m(ids), atol=1e-5)


# ------------------------------------------------------------------ FLOPs
def test_forward_flops_hand_count_tiny_standard() -> None:
    """d=4, 1 layer, dim_ff=8, 3 classes, L=3, pe none (no fusion work):
    q/k/v 2·3·4·12 = 288, scores 2·3·3·4 = 72, weighted sum 72, output 2·3·4·4 = 96,
    FFN 2·(2·3·4·8) = 384, classifier 2·4·3 = 24: 936."""
    m = FusionClassifier(ModelSpec(fusion="add", pe="none", max_len=8, d_model=4, heads=2,
                                   layers=1, dim_ff=8, dropout=0.0, attn_dropout=0.0,
                                   activation="relu"), vocab_size=10, num_classes=3)
    assert m.forward_flops(3) == 936
    concat = FusionClassifier(ModelSpec(fusion="concat", pe="sinusoidal", max_len=8, d_model=4,
                                        heads=2, layers=1, dim_ff=8, dropout=0.0,
                                        attn_dropout=0.0, activation="relu"),
                              vocab_size=10, num_classes=3)
    assert concat.forward_flops(3) == 936 + 2 * 3 * 8 * 4  # + Linear(2d, d) per token


def counted(m: FusionClassifier, L: int) -> int:
    with FlopCounterMode(display=False) as fc:
        m.eval()(ids_batch([L], L))
    return fc.get_total_flops()


@pytest.mark.parametrize("pe,fusion", [("sinusoidal", "concat"), ("learned", "gate-cnn"), ("alibi", "add")])
def test_standard_flops_match_flop_counter(pe, fusion) -> None:
    """The counter sees every matmul but CPU SDPA's fused kernel: add its 4·L²·d per layer."""
    m = make(stand_in(encoder="standard", pe=pe, fusion=fusion))
    L = 11
    assert m.forward_flops(L) == counted(m, L) + 2 * 4 * L * L * D


@pytest.mark.parametrize("soes,asam,r2mu", SWITCH_COMBOS)
@pytest.mark.parametrize("L", [3, 11])
def test_ressformer_flops_match_flop_counter(soes, asam, r2mu, L, monkeypatch) -> None:
    """On the reference path (the counter cannot see the compiled kernels' loops), every
    counted contraction is a matmul the counter sees, except those done as mul-and-sum
    (faster on CPU): the top-k weighted sum, the token-cache key and value, the expert mix."""
    monkeypatch.setattr(kernels, "available", lambda *tensors: False)
    cfg = switched(soes, asam, r2mu)
    m = make(cfg)
    G, apps = (cfg.experts_topk if cfg.experts > 1 else 1), 2 * (cfg.iterations if r2mu else 1)
    kept = min(cfg.topk, L) if asam and cfg.topk else L  # asam off: dense, one expert
    sparse = kept < L
    cache_products = 2 if r2mu else 0
    per_app = (2 * G * L * kept * D if sparse else 0) + cache_products * 2 * G * L * D \
        + (2 * G * L * D if cfg.experts > 1 else 0)
    assert m.forward_flops(L) == counted(m, L) + apps * per_app


@pytest.mark.parametrize("config", [stand_in(encoder="standard", pe="sinusoidal"),
                                    *(switched(*s) for s in SWITCH_COMBOS)])
def test_forward_flops_positive_and_growing(config) -> None:
    m = make(config)
    flops = [m.forward_flops(L) for L in (1, 8, 64, 512)]
    assert flops[0] > 0 and all(a < b for a, b in zip(flops, flops[1:]))


def test_flops_scale_with_iterations_and_topk() -> None:
    f = {t: make(stand_in(iterations=t)).forward_flops(100) for t in (1, 2, 3)}
    assert f[3] - f[2] == f[2] - f[1] > 0  # each extra iteration costs the same
    sparse, dense = (make(stand_in(topk=k)).forward_flops(100) for k in (8, 0))
    assert sparse < dense


# ------------------------------------------------------------------ paired initialisation
def test_same_shared_seed_same_embedding_and_classifier_across_encoders() -> None:
    seeds = {"shared": 11, "encoder": 12, "fusion": 13, "pe": 14}
    std = make(stand_in(encoder="standard", pe="sinusoidal"), seeds=seeds)
    ress = make(stand_in(), seeds=seeds)
    a, b = dict(std.parameter_groups()["shared"]), dict(ress.parameter_groups()["shared"])
    assert sorted(a) == ["classifier.bias", "classifier.weight", "embed.weight"] == sorted(b)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert shared_init_hash(std) == shared_init_hash(ress)
    assert encoder_init_hash(std) != encoder_init_hash(ress)
    other = make(stand_in(), seeds={**seeds, "shared": 99})
    assert shared_init_hash(other) != shared_init_hash(ress)
    assert encoder_init_hash(other) == encoder_init_hash(ress)  # the body has its own stream


def test_soes_temperature_starts_at_sqrt_head_dim() -> None:
    m = make(stand_in())
    temps = [p for n, p in m.named_parameters() if n.endswith("log_temp")]
    assert temps and all(torch.allclose(t.exp(), torch.full_like(t, math.sqrt(D // H))) for t in temps)


def test_pe_choices_cover_position_free_level() -> None:
    # the SOES rule names every position-free pe; today that is exactly 'none'
    assert [k for k, v in POSITIONAL.items() if v.level == "none"] == ["none"]


@pytest.mark.parametrize("soes,asam,r2mu", SWITCH_COMBOS)
def test_attention_dropout_trains_every_switch_combination(soes, asam, r2mu) -> None:
    """With attention dropout the weights are split into their parts (dense attention with
    memory included): a training step gives finite logits and a gradient for every parameter
    that has one without dropout. "Has one": above 1e-6 of the largest; R2MU's pooling score
    bias shifts every logit of a softmax alike, so its exact gradient is 0 and its computed
    one rounding (~1e-9 against ~6), exactly 0 or not depending on the dropout mask."""
    torch.manual_seed(0)  # the dropout masks, whatever ran before
    ids = ids_batch([MAX_LEN, 5, 9], MAX_LEN)
    cfg = switched(soes, asam, r2mu)
    grads = []
    for dropout in (0.0, 0.3):
        m = make(cfg, dropout=dropout).train()
        logits = m(ids)
        aux = m.aux_loss()
        (logits.sum() + (0 if aux is None else aux)).backward()
        assert torch.isfinite(logits).all()
        largest = max(p.grad.abs().max().item() for p in m.parameters() if p.grad is not None)
        grads.append({n for n, p in m.named_parameters()
                      if p.grad is not None and p.grad.abs().max() > 1e-6 * largest})
    assert grads[1] == grads[0]

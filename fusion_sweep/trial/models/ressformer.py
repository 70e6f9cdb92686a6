"""ReSSFormer (arXiv 2510.01585) as an encoder body: SOES, ASAM and R2MU, each a switch.

The paper has no public code and its markdown copy lost every equation's symbols, so each
choice below is ours; where the text offers options, the option is named, and the knobs are
the trial-config fields `soes asam r2mu iterations topk attn_activation experts experts_topk
memory_segments graph_reg` (config.py holds their defaults). The body plugs into
models/encoder.py's FusionClassifier (embedding, fusion, mean pooling and classifier are
shared with the standard encoder).

Sub-layer (both switches of R2MU): post-norm (pre-norm if `norm_first`) attention + FFN, as
the standard layer, with ReSSAttention below in place of SDPA.

SOES (`soes`, eq. 7-8). Attention scores come from a content-only kernel
    φ(h_i, h_j) = τ_h · ⟨q_i/‖q_i‖, k_j/‖k_j‖⟩,   q = W_q h, k = W_k h,  τ_h = exp(ρ_h) learned
per head (ρ_h starts at log √dh): a learned bilinear form on L2-normalised content, the
cheapest kernel that depends on content only (an MLP kernel costs dh× more per pair). Its
bounded scores with a learned temperature also set how sparse sparsemax/entmax are. SOES is
position-free attention, so `soes` on requires pe 'none' (config_errors). The eq. 8 graph
regulariser is the mean squared change of every real query's attention row over the token
keys (the latent token graph; memory keys excluded),
    R = graph_reg · mean_pairs mean_{h, real i} ‖A_i^{(t)} − A_i^{(t−1)}‖²,
between successive iterations of the same sub-layer (r2mu on) or successive layers (r2mu
off); with several routed experts A is their gate-weighted sum. Computed in training mode
only, returned by `aux_loss()`; None where no pair exists (r2mu off with layers = 1) or
graph_reg = 0. `soes` off: scaled dot product q·k/√dh, and the pe's hooks act as in the
standard SelfAttention (`rotate` on q/k, `attention_bias` through the attention mask).

ASAM (`asam`, eq. 5-6). The attention activation is `attn_activation` (softmax | sparsemax |
entmax15, models/sparse.py). Each query keeps its `topk` highest-scoring token keys (0 = all;
k ≥ the number of keys is dense attention); padded keys are −inf before the selection, so
they are never chosen over a real key and get weight 0. Selecting the top k needs every score,
so scoring stays O(L²d); the weighted sum and the activation's sort are O(Lkd) and O(Lk log
k). Expert routing (`experts` E > 1): every head has E lightweight attention experts, each its
own query projection sharing the head's keys and values; a per-head router (Linear d→E on the
token) sends each query to its `experts_topk` most probable experts, gated by their router
probabilities (softmax over all E, not renormalised, as Switch Transformer: a renormalised
top-1 gate is constantly 1 and its router would never learn); the head's output is the
gate-weighted sum of the routed experts' outputs. Only routed experts score keys (all E query
projections are computed: they are cheap). `asam` off: dense softmax over every key, one
expert.

R2MU (`r2mu`, eq. 1-3). One shared block (`layers` sub-layers) is applied T = `iterations`
times, x ← Block(x + s_t), with a learned step embedding s_t = W·[sin(tω); cos(tω)] + b
(a learned map of a fixed sinusoid of t: the parameter count does not depend on T, and T has
no cap). The memory has two levels, both read by every sub-layer as extra attention keys and
values (same key/value projections, no positional rotation or bias):
- token-level cache C: the previous iteration's token states; query i reads only its own
  cache entry c_i (1 extra key: the paper's "localized attention");
- segment-level memory M: `memory_segments` S slots per document. Token i of a document with
  n REAL tokens belongs to segment ⌊i·S/n⌋, so right-padding cannot move a boundary; slot s
  is the attention-weighted average of its segment's real tokens (eq. 2's default Pool,
  weights softmax(w·h) within the segment; the top-k selector and learned projection are not
  implemented); an empty segment (n < S) is a masked slot.
C⁰ = x (the fused embeddings), M⁰ = Pool(x). After each iteration but the last, a learned
gate partially overwrites the memory (eq. 3): C ← g⊙x + (1−g)⊙C, g = σ(W_c[x; C] + b_c), and
M ← g⊙Pool(x) + (1−g)⊙M, g = σ(W_m[Pool(x); M] + b_m). `r2mu` off: `layers` separate
sub-layers applied once, no memory, no step embedding.

Which configurations can see token order (the honest consequence of SOES). With `soes` on,
pe is 'none' and nothing in the body reads an absolute or relative position: the kernel,
top-k, sparse activation, routing, FFN, step embedding and token cache all act on content,
token by token or as a set. Without R2MU the body is permutation-equivariant, so with mean
pooling the logits are invariant to ANY permutation of a document's real tokens. With R2MU
the one place a position enters is segment membership ⌊i·S/n⌋: the model can tell which
tokens share a 1/S span of the document, but the slots are an unordered set of keys, so it
sees neither the order of the segments nor the order inside one. Reversing a document whose
real length n is a multiple of S maps every segment onto another whole segment, so the
logits are invariant to that reversal. When S does not divide n, reversal does not map
segments onto segments: their sizes follow an asymmetric ⌊·⌋ pattern (n = 10, S = 4: sizes
3, 2, 3, 2, so a marker in a 3-token segment is more often the earlier of two), a
length-dependent trace of direction that a model could in principle learn from how strongly
a marker weighs in its slot's average. The built-in synthetic task's label is the order of
the markers, and reversing a document flips it (two markers: a..b ↔ b..a) while the
generator makes a document and its reversal equally likely: SOES without R2MU is at chance
by construction; SOES with R2MU is at chance on documents whose length S divides and can
beat chance only through that trace on the others, which is what the sweep measures. With
`soes` off the body sees order exactly as far as its pe does (pe 'none': as with `soes` on).
`order_visibility(config)` says this per configuration.

FLOPs (`forward_flops`): 2 per multiply-add of every matmul actually run for one document of
L real tokens — projections, router, scores of the routed experts against every key, the
weighted sums over the kept keys, the memory's keys/scores/weighted sums, pooling and gates,
the expert mix, FFN — times layers × iterations; elementwise work, normalisation and the
activations' sorts are not counted.

Cost: how it is computed, so that time follows those FLOPs (issue 23). ReSSAttention has two
paths, chosen once per call (`forward`), both producing one `Weights` (the weights whole, the
kept keys, the token columns) and one weighted sum: the fused path where the compiled CPU
kernels run (models/kernels.py; a C compiler builds them once per machine), the reference path
(plain torch, no kernel anywhere) elsewhere: a GPU, no compiler, or FUSION_SWEEP_KERNELS=0.
tests/test_ressformer_equality.py checks each against the previous implementation, kept as
tests/ressformer_reference.py, and the two against each other.
- Fused (`_fused_weights`, `_fused_mix`):
  - projections: the q and k/v outputs cut into contiguous heads in one pass each way, SOES's
    normalisation and scale fused (`heads`): no permute copies, no norm backward;
  - top-k: each query's scores are made in a row buffer and its k best kept in the same
    loop (`score_topk`): no (B, H, L, L) tensor, with or without autograd;
  - with R2MU's memory: a row's kept-token, slot and own-cache scores in one loop
    (`memory_scores`), and their weighted sum in another (`memory_mix`), backward by the same
    loops: O(L·(k + S)·dh), nothing of size (…, k, dh) written; without memory, the kept
    scores and the weighted sum over the kept rows of the key and value tables
    (`gather_dot`, `gather_sum`);
  - entmax-1.5 on the k + S + 1 kept scores: the `entmax` package's arithmetic, 16 rows at a
    time; dense attention: the mask added inside the softmax pass (`masked_softmax`, through
    the activation registry's `add`);
  - dense attention with memory and softmax: every token, slot and own-cache score and the
    softmax in one pass per query row (`dense_memory_softmax`: the scores never stored as a
    tensor; backward from the weights, four rows at a time so each key row is read once for
    four queries), and the weighted sum from the weights whole (`dense_memory_mix`: no
    split, whose backward would copy them);
  - the graph regulariser: sparse rows compared entry by entry (`sparse_sqdist`, half the
    comparisons for one expert's distinct keys); dense graphs in one pass per graph each way
    (`chain_sqdist`: one gradient per graph, not one per pair).
- Reference (`_reference_weights`, `_reference_mix`), top-k: long inputs (`_rescore`:
  16·k·dh < 10·L) score without autograd, a block of queries at a time (SCORE_BLOCK
  elements), only to select, then gather the k kept keys and score them again with autograd
  (backward O(L·k·dh)); short inputs select from the (L, L) scores with autograd. The
  activation runs on the k + S + 1 kept scores, never on L. Dense: one score tensor
  [tokens | slots | own cache], split for the weighted sum.
- Both: attention dropout acts on the weights whole (one mask, the same on both paths: the
  weights have one shape, and under dropout the kept keys are in ascending order); every
  expert's queries in one matmul; the keys/values of the tokens, the cache and the slots in
  one matmul over their rows stacked, with one normalisation (SOES).
- Splits instead of slices elsewhere (a slice's backward zero-fills its whole input); R2MU's
  segment masks are made once per forward; pooling is one masked softmax; a gate is one lerp.
- Every component sits under a torch.profiler label (`_span`, a no-op unless a profiler is
  recording) for benchmarks/profile_trial.py --components.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import record_function

from fusion_sweep.errors import unknown_name
from fusion_sweep.trial.models import kernels
from fusion_sweep.trial.models.common import FeedForwardSublayer, changed_fields, order_from_pe
from fusion_sweep.trial.models.positional import POSITIONAL, PositionalEncoding
from fusion_sweep.trial.models.sparse import ATTN_ACTIVATIONS, FUSED_WITH_SCORES

SWITCHES = ("soes", "asam", "r2mu")
# The fields each switch configures: inert (and so required at their defaults) when it is off.
SWITCH_FIELDS = {"soes": ("graph_reg",),
                 "asam": ("topk", "attn_activation", "experts", "experts_topk"),
                 "r2mu": ("iterations", "memory_segments")}
NEG_INF = float("-inf")
# Elements of one block of scores in the top-k selection (64 MB in fp32): longer inputs are
# scored a block of queries at a time, so no (B, H, L, L) tensor is ever held whole.
SCORE_BLOCK = 1 << 24
_NO_SPAN = contextlib.nullcontext()


def _span(name: str):
    """A torch.profiler label around a component (benchmarks/profile_trial.py --components);
    a shared no-op context unless a profiler is recording."""
    return record_function(name) if torch.autograd.profiler._is_profiler_enabled else _NO_SPAN


@dataclass(frozen=True)
class Memory:
    """R2MU's memory for one iteration: token cache and segment slots."""

    cache: torch.Tensor  # (B, L, D)
    slots: torch.Tensor  # (B, S, D)
    slot_mask: torch.Tensor  # (B, S) True = the segment has real tokens

    def map(self, f) -> "Memory":
        return Memory(f(self.cache), f(self.slots), self.slot_mask)


@dataclass(frozen=True)
class Segments:
    """R2MU's segment masks for one batch (SegmentMemory.membership)."""

    outside: torch.Tensor  # (B, L, S) True = token not in the (non-empty) segment
    empty: torch.Tensor  # (B, 1, S) True = the segment has no real token
    valid: torch.Tensor  # (B, S) True = the segment has real tokens


@dataclass(frozen=True)
class Graph:
    """One attention application's token graph, for the eq. 8 regulariser: per head and query,
    weights over token keys, dense (idx None, (B, H, L, L)) or sparse ((B, H, L, N) weights at
    key indices idx; an index may repeat across experts)."""

    weights: torch.Tensor
    idx: torch.Tensor | None
    distinct: bool = True  # no index repeats within a row (one expert)
    width: int | None = None  # dense: only the first `width` columns are token keys (None: all)


class ReSSAttention(nn.Module):
    """Self-attention with a SOES kernel or dot product, ASAM's activation/top-k/experts, and
    R2MU's memory keys. See the module docstring; "Cost" there says how it is computed."""

    def __init__(self, d_model: int, heads: int, attn_dropout: float, *, soes: bool,
                 attn_activation: str, topk: int, experts: int, experts_topk: int) -> None:
        super().__init__()
        self.heads, self.dh, self.attn_dropout = heads, d_model // heads, attn_dropout
        self.soes, self.topk, self.experts = soes, topk, experts
        self.routed = experts_topk if experts > 1 else 1  # G: experts each query uses
        self.activation = ATTN_ACTIVATIONS[attn_activation]
        self.q_proj = nn.Linear(d_model, experts * d_model)  # every expert's per-head queries
        self.kv_proj = nn.Linear(d_model, 2 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.router = nn.Linear(d_model, heads * experts) if experts > 1 else None
        if soes:
            self.log_temp = nn.Parameter(torch.empty(heads))  # ρ_h: τ_h = exp(ρ_h)

    def init_own_parameters(self, g: torch.Generator) -> None:
        if self.soes:  # τ_h = √dh: a unit-norm dot product at the standard attention's scale
            nn.init.constant_(self.log_temp, 0.5 * math.log(self.dh))

    # ---------------------------------------------------------------- pieces
    def _queries(self, x: torch.Tensor, fused: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Every routed expert's queries of x, scaled (SOES: τ_h q/‖q‖; else q/√dh)
        -> (B, H, G, L, dh), gates (B, H, G, L) or None."""
        B, L, _ = x.shape
        if self.router is None and fused:  # heads out and scaled in one pass
            scale = self.log_temp.exp() if self.soes else x.new_full((self.heads,), self.dh ** -0.5)
            q, = kernels.heads(self.q_proj(x), 1, self.heads, (self.soes,), scale, [L])
            return q.unsqueeze(2), None  # (B, H, 1, L, dh)
        q = self.q_proj(x).view(B, L, self.experts, self.heads, self.dh)
        with _span("ressformer.expert_routing"):
            q, gates = self._route(q, x)
        return self._scale(q), gates

    def _project(self, x: torch.Tensor, memory: "Memory | None", fused: bool):
        """Keys (SOES: unit-norm) and values of x, the cache and the slots in one matmul and
        one normalisation over their rows stacked.
        -> (k, v) of x, of the slots, of the cache (None without memory), each (B, H, N, dh)."""
        B, L, D = x.shape
        rows = x if memory is None else torch.cat([x, memory.cache, memory.slots], dim=1)
        N = rows.shape[1]
        sizes = [L] if memory is None else [L, L, N - 2 * L]  # x, cache, slots
        if fused:  # heads out, keys normalised, one pass each way
            kv = kernels.heads(self.kv_proj(rows), 2, self.heads, (self.soes, False), None, sizes)
            ks, vs = kv[:len(sizes)], kv[len(sizes):]
        else:
            k, v = self.kv_proj(rows).view(B, N, 2, self.heads, self.dh).permute(2, 0, 3, 1, 4)
            if self.soes:
                k = _unit(k)
            # split, not slicing: one cat in the backward, no zero fill
            ks, vs = k.split(sizes, dim=2), v.split(sizes, dim=2)
        if memory is None:
            return (ks[0], vs[0]), None, None
        return (ks[0], vs[0]), (ks[2], vs[2]), (ks[1], vs[1])

    def _route(self, q: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """q (B, L, E, H, dh) -> routed queries (B, H, G, L, dh), gates (B, H, G, L) or None."""
        q = q.permute(0, 3, 2, 1, 4)  # (B, H, E, L, dh)
        if self.router is None:
            return q, None  # (B, H, 1, L, dh)
        B, L, _ = x.shape
        logits = self.router(x).view(B, L, self.heads, self.experts).permute(0, 2, 3, 1)  # (B, H, E, L)
        # Gates: the routed experts' router probabilities, not renormalised over the routed
        # ones (as Switch Transformer): with experts_topk = 1 a renormalised gate is always 1
        # and the router would get no gradient.
        probs, sel = torch.softmax(logits, dim=2).topk(self.routed, dim=2)  # (B, H, G, L)
        q = q.gather(2, sel.unsqueeze(-1).expand(-1, -1, -1, -1, self.dh))  # (B, H, G, L, dh)
        return q, probs

    def _scale(self, q: torch.Tensor) -> torch.Tensor:
        if self.soes:  # τ_h q/‖q‖
            return _unit(q, self.log_temp.exp().view(1, -1, 1, 1, 1))
        return q * self.dh ** -0.5

    # ---------------------------------------------------------------- forward
    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None, pe: PositionalEncoding,
                memory: Memory | None, want_graph: bool = False) -> tuple[torch.Tensor, Graph | None]:
        """x: (B, L, D); attn_mask: as FusionClassifier._attn_mask (None, bool (B, 1, 1, L),
        or float (B, H, L, L) = pe bias + padding −inf). -> ((B, L, D), the token graph if
        `want_graph` else None). The path is chosen once: fused (the compiled kernels and the
        dense-memory Functions) where the kernels run on x, else the reference (plain torch,
        with no kernel anywhere); both give the same Weights and the same output."""
        B, L, D = x.shape
        fused = kernels.available(x)
        with contextlib.nullcontext() if fused else kernels.torch_path():
            with _span("ressformer.projections"):
                q, gates = self._queries(x, fused)  # (B, H, G, L, dh), scaled
                (k, v), slots, cache = self._project(x, memory, fused)
            with _span("ressformer.kernel"):
                qr, kr = pe.rotate(q, k)  # identity unless rotary (then soes is off)
            keys = Keys(q, qr, kr, v, slots, cache,
                        _additive(attn_mask, q.dtype) if attn_mask is not None else None,
                        # (B, S) True = a real segment -> (B, 1, 1, S) 0/−inf
                        None if memory is None else _additive(memory.slot_mask, q.dtype)[:, None, None, :])
            sparse = 0 < self.topk < L
            weights = (_fused_weights if fused else _reference_weights)(self, keys, sparse)
            with _span("ressformer.graph_reg"):
                graph = self._graph(weights, gates) if want_graph else None
            w = weights.w
            if self._drops():
                w = F.dropout(w, self.attn_dropout)  # the weights whole: one mask, any path
            with _span("ressformer.weighted_sum"):
                out = (_fused_mix if fused else _reference_mix)(keys, weights, w)  # (B, H, G, L, dh)
            return self._merge(out, gates, B, L, D), graph

    def _drops(self) -> bool:
        """Attention dropout is on: then the kept keys are in ascending order on both paths
        (each selection's own order would give the same mask to different keys)."""
        return self.training and self.attn_dropout > 0.0

    def _merge(self, out: torch.Tensor, gates: torch.Tensor | None, B: int, L: int, D: int) -> torch.Tensor:
        """The routed experts' outputs (B, H, G, L, dh), gate-weighted, through out_proj."""
        with _span("ressformer.expert_routing"):
            y = out.squeeze(2) if gates is None else (out * gates.unsqueeze(-1)).sum(2)  # (B, H, L, dh)
        with _span("ressformer.projections"):
            return self.out_proj(y.transpose(1, 2).reshape(B, L, D))

    def _graph(self, weights: "Weights", gates: torch.Tensor | None) -> Graph:
        """The per-head token graph: routed experts' rows over the token keys, gate-weighted.
        Dense weights are kept whole (their first `width` columns are the tokens': a split
        would copy them in the backward); top-k weights are split off the memory columns."""
        w, idx = weights.w, weights.idx
        if idx is not None and w.shape[-1] > weights.width:
            w = w.split([weights.width, w.shape[-1] - weights.width], dim=-1)[0]
        if gates is not None:
            w = w * gates.unsqueeze(-1)  # (B, H, G, L, N)
        if idx is None:  # (B, H, L, L [+ S + 1 [+ P]])
            return Graph(w.squeeze(2) if w.shape[2] == 1 else w.sum(2), None, width=weights.width)
        B, H, G, L, K = w.shape
        if G == 1:
            return Graph(w.squeeze(2), idx.squeeze(2))
        return Graph(w.permute(0, 1, 3, 2, 4).reshape(B, H, L, G * K),
                     idx.permute(0, 1, 3, 2, 4).reshape(B, H, L, G * K), distinct=False)

    def forward_flops(self, L: int, S: int | None) -> int:
        """FLOPs of one application on L real tokens; S memory slots (None: no memory)."""
        d, H, E, G = self.heads * self.dh, self.heads, self.experts, self.routed
        kept = min(self.topk, L) if self.topk > 0 else L
        f = 2 * L * d * E * d + 2 * L * d * 2 * d + 2 * L * d * d  # queries, keys/values, output
        if self.router is not None:
            f += 2 * L * d * H * E + 2 * G * L * d  # router; gate-weighted expert mix
        f += 2 * G * L * L * d + 2 * G * L * kept * d  # scores vs every key; weighted sum of kept
        if S is not None:  # memory keys/values (slots, cache), their scores and weighted sums
            f += 2 * S * d * 2 * d + 2 * L * d * 2 * d + 2 * 2 * G * L * S * d + 2 * 2 * G * L * d
        return f


class ReSSLayer(FeedForwardSublayer):
    """A sub-layer: ReSSAttention + FFN, post-norm unless `norm_first` (as EncoderLayer)."""

    def __init__(self, d_model: int, heads: int, dim_ff: int, dropout: float, attn_dropout: float,
                 activation: str, norm_first: bool, **attention: Any) -> None:
        super().__init__()
        self.attn = ReSSAttention(d_model, heads, attn_dropout, **attention)
        self._add_feed_forward(d_model, dim_ff, dropout, activation, norm_first)

    def forward(self, x, attn_mask, pe, memory: Memory | None,
                want_graph: bool) -> tuple[torch.Tensor, Graph | None]:
        if self.norm_first:  # attention reads normalised states, memory included
            with _span("ressformer.ffn_norm"):
                mem = memory.map(self.norm1) if memory is not None else None
                h = self.norm1(x)
            a, graph = self.attn(h, attn_mask, pe, mem, want_graph)
            with _span("ressformer.ffn_norm"):
                x = x + self.dropout1(a)
                return x + self._ff(self.norm2(x)), graph
        a, graph = self.attn(x, attn_mask, pe, memory, want_graph)
        with _span("ressformer.ffn_norm"):
            x = self.norm1(x + self.dropout1(a))
            return self.norm2(x + self._ff(x)), graph

    def forward_flops(self, L: int, S: int | None) -> int:
        d, ff = self.linear1.in_features, self.linear1.out_features
        return self.attn.forward_flops(L, S) + 2 * 2 * L * d * ff


class StepEmbedding(nn.Module):
    """s_t = W·[sin(tω); cos(tω)] + b: learned, with a parameter count independent of T."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        half = (d_model + 1) // 2
        omega = torch.exp(torch.arange(half, dtype=torch.float32) * (-math.log(10000.0) / half))
        self.register_buffer("omega", omega, persistent=False)
        self.d_model = d_model
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, t: int, like: torch.Tensor) -> torch.Tensor:
        angle = t * self.omega.to(like.dtype)
        feats = torch.cat([angle.sin(), angle.cos()])[: self.d_model]
        return self.proj(feats.unsqueeze(0))  # (1, D): added to every token


class SegmentMemory(nn.Module):
    """R2MU's memory: segments over the real length, attention-weighted pooling, gates."""

    def __init__(self, d_model: int, segments: int) -> None:
        super().__init__()
        self.segments = segments
        self.score = nn.Linear(d_model, 1)  # Pool's attention weights (eq. 2)
        self.cache_gate = nn.Linear(2 * d_model, d_model)  # eq. 3, token cache
        self.slot_gate = nn.Linear(2 * d_model, d_model)  # eq. 3, segment slots

    def membership(self, mask: torch.Tensor) -> "Segments":
        """(B, L) real-token mask -> token i of n real ones is in segment ⌊i·S/n⌋: the masks
        pooling needs, made once per forward."""
        B, L = mask.shape
        n = mask.sum(1, keepdim=True).clamp(min=1)  # (B, 1)
        seg = torch.arange(L, device=mask.device).unsqueeze(0) * self.segments // n  # (B, L)
        member = (seg.unsqueeze(-1) == torch.arange(self.segments, device=mask.device)) \
            & mask.unsqueeze(-1)  # (B, L, S)
        valid = member.any(1)  # (B, S)
        # −inf outside a token's own segment; an empty segment's column is left finite (its
        # weights are zeroed after the softmax), so no NaN is ever formed
        return Segments(~member & valid.unsqueeze(1), ~valid.unsqueeze(1), valid)

    def pool(self, x: torch.Tensor, seg: "Segments") -> torch.Tensor:
        """Attention-weighted mean of each segment's real tokens -> slots (B, S, D)."""
        with _span("ressformer.r2mu_pool"):
            logits = self.score(x).masked_fill(seg.outside, NEG_INF)  # (B, L, S)
            a = torch.softmax(logits, dim=1).masked_fill(seg.empty, 0.0)
            return a.transpose(1, 2) @ x

    def init(self, x: torch.Tensor, seg: "Segments") -> Memory:
        return Memory(x, self.pool(x, seg), seg.valid)

    @staticmethod
    def _gated(gate: nn.Linear, new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
        g = torch.sigmoid(gate(torch.cat([new, old], dim=-1)))
        return torch.lerp(old, new, g)  # g⊙new + (1−g)⊙old in one op

    def update(self, memory: Memory, x: torch.Tensor, seg: "Segments") -> Memory:
        slots = self.pool(x, seg)
        with _span("ressformer.r2mu_gates"):
            return Memory(self._gated(self.cache_gate, x, memory.cache),
                          self._gated(self.slot_gate, slots, memory.slots), memory.slot_mask)

    def flops(self, L: int, d: int, update: bool) -> int:
        f = 2 * L * d + 2 * self.segments * L * d  # pooling scores, weighted averages
        if update:
            f += 2 * L * 2 * d * d + 2 * self.segments * 2 * d * d  # cache and slot gates
        return f


class ReSSFormerEncoder(nn.Module):
    """ReSSFormer body; switches `soes`, `asam`, `r2mu` (module docstring).

    Order: with soes on, none without r2mu (permutation-invariant) and only segment
    membership with it (reversal-invariant when memory_segments divides the real length);
    with soes off, as far as the pe sees it. `order_visibility(config)` says which.
    """

    OPTION_FIELDS = ("soes", "asam", "r2mu", "iterations", "topk", "attn_activation", "experts",
                     "experts_topk", "memory_segments", "graph_reg")

    # ---------------------------------------------------------------- registry entry
    @classmethod
    def options(cls, config: Any) -> dict[str, Any]:
        """The option fields, plus `cache_dir`: where the compiled kernels are built (it
        never changes the numbers, so it is no option field)."""
        return {**{f: getattr(config, f) for f in cls.OPTION_FIELDS}, "cache_dir": config.cache_dir}

    @classmethod
    def variant(cls, config: Any) -> str:
        return "ressformer" + "".join(f"-no-{s}" for s in SWITCHES if not getattr(config, s))

    @classmethod
    def config_errors(cls, config: Any) -> list[str]:
        errs = []
        for s in SWITCHES:
            if not isinstance(getattr(config, s), bool):
                errs.append(f"{s} must be true or false, got {getattr(config, s)!r}")
        for name, low in (("iterations", 1), ("topk", 0), ("experts", 1), ("memory_segments", 1)):
            v = getattr(config, name)
            if not _is_int(v) or v < low:
                errs.append(f"{name} must be an integer >= {low}, got {v!r}")
        e, et = config.experts, config.experts_topk
        if not _is_int(et) or et < 1 or (_is_int(e) and e >= 1 and et > e):
            bound = f"experts={e}" if _is_int(e) and e >= 1 else "experts"
            errs.append(f"experts_topk must be an integer in [1, {bound}], got {et!r}")
        if config.attn_activation not in ATTN_ACTIVATIONS:
            errs.append(unknown_name("attn_activation", config.attn_activation,
                                     sorted(ATTN_ACTIVATIONS)))
        g = config.graph_reg
        if isinstance(g, bool) or not isinstance(g, (int, float)) or not 0.0 <= g < math.inf:
            errs.append(f"graph_reg must be a finite number >= 0, got {g!r}")
        if config.soes is True and config.pe in POSITIONAL and POSITIONAL[config.pe].level != "none":
            free = sorted(k for k, v in POSITIONAL.items() if v.level == "none")
            errs.append(f"soes=true requires pe {' or '.join(map(repr, free))}, got pe {config.pe!r}: "
                        f"SOES is position-free attention (a content-only kernel replaces every "
                        f"positional encoding); set pe=none, or soes=false to use pe {config.pe!r}")
        errs += [f"{f} configures {s.upper()} and has no effect with {s}=false; got {f}={value!r}: "
                 f"leave it at its default ({default!r}) or set {s}=true"
                 for s in SWITCHES if getattr(config, s) is False
                 for f, value, default in changed_fields(config, SWITCH_FIELDS[s])]
        return errs

    @classmethod
    def attention_maps(cls, config: Any) -> int:
        """(B, H, L, L)-sized tensors a training step holds, for the sweep's memory estimate,
        per layer application (T of them with R2MU): top-k, one (a score block, or the
        zero-filled gradient of the scores); dense, two (the weights, and their change
        between applications for the graph regulariser)."""
        per = 1 if config.asam and 0 < config.topk < config.max_len else 2
        return int(config.layers) * (int(config.iterations) if config.r2mu else 1) * per

    @classmethod
    def order_visibility(cls, config: Any) -> str:
        seen = order_from_pe(config) if not config.soes else None
        if seen:
            return seen
        if config.r2mu:
            return ("segment membership only: which tokens share one of the memory_segments spans "
                    "(no direction; reversal-invariant when memory_segments divides the length)")
        return "no: content only (permutation-invariant after mean pooling)"

    # ---------------------------------------------------------------- model
    def __init__(self, *, d_model: int, heads: int, layers: int, dim_ff: int, dropout: float,
                 attn_dropout: float, activation: str, norm_first: bool, max_len: int,
                 soes: bool, asam: bool, r2mu: bool, iterations: int, topk: int,
                 attn_activation: str, experts: int, experts_topk: int, memory_segments: int,
                 graph_reg: float, cache_dir: str = "") -> None:
        super().__init__()
        kernels.use_cache_dir(cache_dir)  # the trial's cache folder, if the kernels build
        self.d_model = d_model
        attention = dict(soes=soes, attn_activation=attn_activation if asam else "softmax",
                         topk=topk if asam else 0, experts=experts if asam else 1,
                         experts_topk=experts_topk if asam else 1)
        self.layers = nn.ModuleList(
            ReSSLayer(d_model, heads, dim_ff, dropout, attn_dropout, activation, norm_first, **attention)
            for _ in range(layers))
        self.final_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.iterations = iterations if r2mu else 1
        self.step = StepEmbedding(d_model) if r2mu else None
        self.memory = SegmentMemory(d_model, memory_segments) if r2mu else None
        self.graph_reg = graph_reg if soes else 0.0
        self._aux: torch.Tensor | None = None

    def forward(self, x: torch.Tensor, mask: torch.Tensor, attn_mask: torch.Tensor | None,
                pe: PositionalEncoding) -> torch.Tensor:
        """x: (B, L, D); mask: (B, L) True = real token -> (B, L, D)."""
        # graphs only where a successive pair exists (not for one layer applied once)
        track = self.training and self.graph_reg > 0 and self.iterations * len(self.layers) > 1
        graphs: list[list[Graph | None]] = []  # [application][sub-layer]
        if self.memory is None:
            for layer in self.layers:
                x, g = layer(x, attn_mask, pe, None, track)
                graphs.append([g])  # successive layers are the successive graphs
        else:
            member = self.memory.membership(mask)
            memory = self.memory.init(x, member)
            for t in range(self.iterations):
                with _span("ressformer.r2mu_gates"):
                    x = x + self.step(t, x)
                row = []
                for layer in self.layers:
                    x, g = layer(x, attn_mask, pe, memory, track)
                    row.append(g)
                graphs.append(row)
                if t < self.iterations - 1:
                    memory = self.memory.update(memory, x, member)
        if track:
            with _span("ressformer.graph_reg"):
                self._aux = self._graph_penalty(graphs, mask)
        return self.final_norm(x)

    def _graph_penalty(self, graphs: list[list[Graph]], mask: torch.Tensor) -> torch.Tensor | None:
        """graph_reg × mean over successive pairs of the mean (heads, real queries) squared
        change of the attention rows (eq. 8)."""
        pairs = [(a, b) for prev, cur in zip(graphs, graphs[1:]) for a, b in zip(prev, cur)]
        if not pairs:
            return None
        real = mask.to(pairs[0][0].weights.dtype)  # (B, L)
        total = sum((change * real.unsqueeze(1)).sum() for chain in zip(*graphs)
                    for change in _chain_change(list(chain)))
        heads = pairs[0][0].weights.shape[1]
        return self.graph_reg * total / (len(pairs) * heads * real.sum().clamp(min=1.0))

    def aux_loss(self) -> torch.Tensor | None:
        return self._aux

    def forward_flops(self, L: int) -> int:
        S = self.memory.segments if self.memory is not None else None
        per_app = sum(layer.forward_flops(L, S) for layer in self.layers)
        f = self.iterations * per_app
        if self.memory is not None:
            d = self.d_model
            f += self.iterations * 2 * d * d  # step embeddings
            f += self.memory.flops(L, d, update=False)  # M⁰
            f += (self.iterations - 1) * self.memory.flops(L, d, update=True)
        return f


def _chain_change(chain: list[Graph]) -> list[torch.Tensor]:
    """‖A_{t+1,i} − A_{t,i}‖² per (B, H, L) query row for each successive pair of one chain
    (one sub-layer's graphs over the iterations, or the layers' in order)."""
    ws = [g.weights for g in chain]
    if len(chain) > 1 and chain[0].idx is None and kernels.available(*ws):
        return list(kernels.chain_sqdist(ws, chain[0].width).unbind(0))
    return [_row_change(a, b) for a, b in zip(chain, chain[1:])]


def _row_change(a: Graph, b: Graph) -> torch.Tensor:
    """‖a_i − b_i‖² per (B, H, L) query row."""
    if a.idx is None:
        wa, wb = (a.weights, b.weights) if a.width is None else (
            a.weights[..., :a.width], b.weights[..., :a.width])
        # one difference, one norm pass (and one pass each in the backward)
        return torch.linalg.vector_norm(wa - wb, dim=-1).square()
    if kernels.available(a.weights, b.weights):  # one loop per row, both directions
        return kernels.sparse_sqdist(a.weights, a.idx, b.weights, b.idx,
                                     distinct=a.distinct and b.distinct)
    return _inner(a, a) + _inner(b, b) - 2.0 * _inner(a, b)


class Keys(NamedTuple):
    """What one attention call reads, from the projections: queries q (B, H, G, L, dh) and
    their rotated form qr (the memory keys carry no position, so they take q), token keys kr
    (rotated) and values v (B, H, L, dh); the slots' and the cache's (keys, values) ((B, H, S,
    dh), (B, H, L, dh)) or None without memory; the additive masks of the token keys (None,
    (B, 1, 1, L) or (B, H, L, L)) and of the slots ((B, 1, 1, S) or None)."""

    q: torch.Tensor
    qr: torch.Tensor
    kr: torch.Tensor
    v: torch.Tensor
    slots: tuple[torch.Tensor, torch.Tensor] | None
    cache: tuple[torch.Tensor, torch.Tensor] | None
    add: torch.Tensor | None
    slot_add: torch.Tensor | None


class Weights(NamedTuple):
    """One call's attention weights, the same on both paths: w (B, H, G, L, N) over [the
    token keys (`width` columns: the k kept, or all L) | S slots | the own cache entry];
    idx (B, H, G, L, k) the kept
    keys (top-k) or None (dense). Same shape on both paths, so attention dropout draws the
    same mask on either."""

    w: torch.Tensor
    idx: torch.Tensor | None
    width: int


def _flat_rows(k: Keys, idx: torch.Tensor) -> torch.Tensor:
    """Kept keys idx (B, H, G, L, k) as rows of the flat (B·H·L, dh) key and value tables."""
    B, H, _, L, _ = k.q.shape
    return idx + (torch.arange(B * H, device=idx.device) * L).view(B, H, 1, 1, 1)


def _slot_scores(k: Keys) -> torch.Tensor:
    """The slots' scores (B, H, G, L, S), from the unrotated queries (no mask added)."""
    return k.q @ k.slots[0].unsqueeze(2).transpose(-1, -2)


def _cache_scores(k: Keys) -> torch.Tensor:
    """Each query's score of its own cache entry (B, H, G, L, 1), unrotated."""
    return (k.q * k.cache[0].unsqueeze(2)).sum(-1, keepdim=True)


def _reference_weights(att: "ReSSAttention", k: Keys, sparse: bool) -> Weights:
    """Plain torch. Top-k: the kept scores (`_reference_topk`), the memory's beside them, the
    activation on those k [+ S + 1] values. Dense: every key's score in one tensor."""
    if sparse:
        idx, s = _reference_topk(k, att.topk)
        if att._drops():
            idx, order = idx.sort(dim=-1)
            s = s.gather(-1, order)
        with _span("ressformer.kernel"):
            if k.cache is not None:  # kept tokens | slots (masked when empty) | own cache
                s = torch.cat([s, _slot_scores(k) + k.slot_add.unsqueeze(2), _cache_scores(k)], dim=-1)
        with _span("ressformer.activation"):
            return Weights(att.activation(s), idx, att.topk)
    L = k.q.shape[-2]
    with _span("ressformer.kernel"):
        z = k.qr @ k.kr.unsqueeze(2).transpose(-1, -2)  # (B, H, G, L, L)
        mask = None if k.add is None else k.add.unsqueeze(2)
        if k.cache is not None:  # tokens | slots | own cache: (…, L + S + 1)
            z = torch.cat([z, _slot_scores(k), _cache_scores(k)], dim=-1)
            mask = _widen(k.add, k.slot_add, L, z.shape[-1]).unsqueeze(2)
    with _span("ressformer.activation"):
        return Weights(att.activation(z, mask), None, L)


def _reference_topk(k: Keys, kk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each query's kk kept keys and their scores (plus the mask), two ways, by which moves
    less memory (`_rescore`): long inputs select without autograd, a block of queries at a
    time, then score the kept keys again with autograd (backward O(L·k·dh), never an (L, L)
    tensor); short inputs select from the (L, L) scores with autograd. -> idx, s (B, H, G, L,
    kk)."""
    B, H, G, L, dh = k.q.shape
    if _rescore(L, kk, dh):
        with _span("ressformer.topk"), torch.no_grad():
            idx = _select_topk(k.qr, k.kr, k.add, kk)  # (B, H, G, L, k)
        with _span("ressformer.gather"):
            # rows of flat (B·H·L, dh) tables (backward: an index-add into the table); a
            # gather on an expanded (…, L, L, dh) view would materialise that size
            k_sel = F.embedding(_flat_rows(k, idx), k.kr.reshape(B * H * L, dh))  # (…, k, dh)
        with _span("ressformer.kernel"):
            s = (k.qr.unsqueeze(-2) * k_sel).sum(-1)  # (B, H, G, L, k)
        return idx, s if k.add is None else s + _at(k.add, idx)
    with _span("ressformer.kernel"):
        z = k.qr @ k.kr.unsqueeze(2).transpose(-1, -2)  # (B, H, G, L, L)
        if k.add is not None:  # padding −inf (and a pe's bias), as in SDPA
            z = z.add_(k.add.unsqueeze(2))
    with _span("ressformer.topk"):
        s, idx = z.topk(kk, dim=-1, sorted=False)  # (B, H, G, L, k)
    return idx, s


def _reference_mix(k: Keys, weights: Weights, w: torch.Tensor) -> torch.Tensor:
    """Σ weights × values over the token keys (kept rows gathered, or all), the slots and the
    own cache entry -> (B, H, G, L, dh). Split, not sliced: a slice's backward fills a zero
    tensor of w's size, per slice."""
    sizes = [weights.width] + ([] if k.cache is None else [k.slots[1].shape[2], 1])
    parts = w.split(sizes, dim=-1) if len(sizes) > 1 else (w,)
    if weights.idx is None:
        out = parts[0] @ k.v.unsqueeze(2)  # (B, H, G, L, dh)
    else:
        B, H, _, L, dh = k.q.shape
        with _span("ressformer.gather"):
            v_sel = F.embedding(_flat_rows(k, weights.idx), k.v.reshape(B * H * L, dh))  # (…, k, dh)
        # mul-and-sum, vectorised (a batch of B·H·G·L (1×k)·(k×dh) matmuls runs a scalar loop
        # on CPU)
        out = (parts[0].unsqueeze(-1) * v_sel).sum(-2)
    if k.cache is not None:  # the slots, the own cache entry
        out = out + parts[1] @ k.slots[1].unsqueeze(2) + parts[2] * k.cache[1].unsqueeze(2)
    return out


def _fused_weights(att: "ReSSAttention", k: Keys, sparse: bool) -> Weights:
    """The compiled kernels. Top-k: selection in one loop over each query's scores
    (`kernels.score_topk`), then every kept score of a row (kept tokens, slots, own cache)
    in one loop (`kernels.memory_scores`), or the kept token scores alone (`gather_dot`).
    Dense with memory and softmax: every score and the softmax in one pass per row
    (`kernels.dense_memory_softmax`, rotated queries included); any other dense case takes
    the reference's weights."""
    B, H, G, L, dh = k.q.shape
    if sparse:
        qr, kr = k.qr.contiguous(), k.kr.contiguous()  # one copy each, for both loops
        with _span("ressformer.topk"):
            idx = kernels.score_topk(qr, kr, k.add, att.topk)  # (B, H, G, L, k)
            if att._drops():
                idx = idx.sort(dim=-1).values
        with _span("ressformer.kernel"):
            gidx = _flat_rows(k, idx)
            ak = None if k.add is None else _at(k.add, idx)
            if k.cache is not None:
                z = kernels.memory_scores(qr, k.q.contiguous(), kr, k.slots[0], k.cache[0], gidx, ak,
                                          k.slot_add.reshape(B, -1))
            else:
                z = kernels.gather_dot(qr.view(-1, dh), kr.view(B * H * L, dh),
                                       gidx.view(-1, att.topk)).view(idx.shape)
                z = z if ak is None else z + ak
        with _span("ressformer.activation"):
            return Weights(att.activation(z), idx, att.topk)
    if k.cache is None or att.activation not in FUSED_WITH_SCORES:
        return _reference_weights(att, k, sparse)
    with _span("ressformer.kernel"):  # every score and the softmax in one pass per row
        w = kernels.dense_memory_softmax(k.qr, k.q, k.kr, k.slots[0], k.cache[0], k.add,
                                         k.slot_add.reshape(B, -1))  # (B, H, G, L, L + S + 1)
    return Weights(w, None, L)


def _fused_mix(k: Keys, weights: Weights, w: torch.Tensor) -> torch.Tensor:
    """The weighted sum from the weights whole: one loop per row over the kept rows of the
    value table [and the slots and the own cache] (`kernels.memory_mix`, `gather_sum`), or,
    dense with memory, one loop per block of rows (`kernels.dense_memory_mix`)."""
    B, H, G, L, dh = k.q.shape
    if weights.idx is None:
        if k.cache is None:
            return w @ k.v.unsqueeze(2)
        return kernels.dense_memory_mix(w, k.v, k.slots[1], k.cache[1])
    gidx = _flat_rows(k, weights.idx)
    if k.cache is not None:
        return kernels.memory_mix(w.contiguous(), k.v, k.slots[1], k.cache[1], gidx)
    return kernels.gather_sum(w.reshape(-1, weights.width), k.v.reshape(-1, dh),
                              gidx.view(-1, weights.width)).view(*weights.idx.shape[:-1], dh)


def _inner(a: Graph, b: Graph) -> torch.Tensor:
    """⟨a_i, b_i⟩ of two sparse rows (B, H, L, N): Σ over entry pairs that name the same key.
    O(N²) per row, cheaper than scattering into (L, L) rows while N² < L."""
    if a is b and a.distinct:  # top-k of one expert: every key at most once
        return a.weights.square().sum(-1)
    same = a.idx.unsqueeze(-1) == b.idx.unsqueeze(-2)  # (B, H, L, N, N)
    b_at_a = (same * b.weights.unsqueeze(-2)).sum(-1)  # b's weight on each of a's keys
    return (a.weights * b_at_a).sum(-1)


def _additive(attn_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A bool keep-mask as 0/−inf (one add on the scores; no copy in the backward)."""
    if attn_mask.dtype != torch.bool:
        return attn_mask
    return torch.zeros(attn_mask.shape, dtype=dtype, device=attn_mask.device).masked_fill_(
        ~attn_mask, NEG_INF)


def _unit(x: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
    """x / max(‖x‖, 1e-12) over the last axis (F.normalize's), times `scale`: one norm and
    one multiply (F.normalize divides by an expanded copy of the norm)."""
    inv = x.norm(dim=-1, keepdim=True).clamp_min(1e-12).reciprocal()
    return x * (inv if scale is None else scale * inv)


def _widen(add: torch.Tensor | None, slot_add: torch.Tensor, L: int, width: int) -> torch.Tensor:
    """The additive mask of the token keys (None, (B, 1, 1, L) or (B, H, L, L)) and of the
    slot keys (B, 1, 1, S), side by side, then 0 up to `width` columns (the own cache
    entry): broadcastable to (B, H, L, width)."""
    if add is None:
        add = slot_add.new_zeros(slot_add.shape[0], 1, 1, L)
    lead = torch.broadcast_shapes(add.shape[:-1], slot_add.shape[:-1])
    m = torch.cat([add.expand(*lead, L), slot_add.expand(*lead, slot_add.shape[-1])], dim=-1)
    return F.pad(m, (0, width - m.shape[-1]))


def _rescore(L: int, k: int, dh: int) -> bool:
    """Top-k by re-scoring the kept keys (True) or through the (L, L) scores (False): which
    moves less memory in a training step. Re-scoring passes over a (…, L, k, dh) gather about
    16 times (gather, products, their backward, the index-add), the other way over (…, L, L)
    scores about 10 times (score, select, zero-filled gradient, two matmuls' reads)."""
    return 16 * k * dh < 10 * L


def _select_topk(q: torch.Tensor, k: torch.Tensor, add: torch.Tensor | None, kk: int) -> torch.Tensor:
    """Indices of each query's kk highest-scoring keys (unsorted). q (B, H, G, L, dh), k (B, H,
    L, dh), add None | (B, 1, 1, L) | (B, H, L, L). Scores a block of queries at a time
    (SCORE_BLOCK elements) and selects with torch.topk; call without autograd.
    -> (B, H, G, L, kk)."""
    B, H, G, L, _ = q.shape
    kt = k.unsqueeze(2).transpose(-1, -2)  # (B, H, 1, dh, L)
    rows = max(1, SCORE_BLOCK // max(B * H * G * k.shape[-2], 1))
    out = []
    for s in range(0, L, rows):
        z = q[..., s:s + rows, :] @ kt  # (B, H, G, r, L)
        if add is not None:  # padding −inf (and a pe's bias), as in SDPA
            z += (add[..., s:s + rows, :] if add.shape[-2] > 1 else add).unsqueeze(2)
        out.append(z.topk(kk, dim=-1, sorted=False).indices)
    return out[0] if len(out) == 1 else torch.cat(out, dim=-2)


def _at(add: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """The additive mask at the kept keys: add (B, 1, 1, L) | (B, H, L, L), idx (B, H, G, L, k)
    -> (B, H, G, L, k). A gather on a broadcast view: nothing of size (L, L) is made unless the
    mask itself has that size."""
    return add.unsqueeze(2).expand(*idx.shape[:-1], add.shape[-1]).gather(-1, idx)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)

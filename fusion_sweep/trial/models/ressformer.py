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
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from fusion_sweep.trial.models.common import ACTIVATIONS, changed_fields, order_from_pe
from fusion_sweep.trial.models.positional import POSITIONAL, PositionalEncoding
from fusion_sweep.trial.models.sparse import ATTN_ACTIVATIONS

SWITCHES = ("soes", "asam", "r2mu")
# The fields each switch configures: inert (and so required at their defaults) when it is off.
SWITCH_FIELDS = {"soes": ("graph_reg",),
                 "asam": ("topk", "attn_activation", "experts", "experts_topk"),
                 "r2mu": ("iterations", "memory_segments")}
NEG_INF = float("-inf")


@dataclass(frozen=True)
class Memory:
    """R2MU's memory for one iteration: token cache and segment slots."""

    cache: torch.Tensor  # (B, L, D)
    slots: torch.Tensor  # (B, S, D)
    slot_mask: torch.Tensor  # (B, S) True = the segment has real tokens

    def map(self, f) -> "Memory":
        return Memory(f(self.cache), f(self.slots), self.slot_mask)


@dataclass(frozen=True)
class Graph:
    """One attention application's token graph, for the eq. 8 regulariser: per head and query,
    weights over token keys, dense (idx None, (B, H, L, L)) or sparse ((B, H, L, N) weights at
    key indices idx; an index may repeat across experts)."""

    weights: torch.Tensor
    idx: torch.Tensor | None
    distinct: bool = True  # no index repeats within a row (one expert)


class ReSSAttention(nn.Module):
    """Self-attention with a SOES kernel or dot product, ASAM's activation/top-k/experts, and
    R2MU's memory keys. See the module docstring."""

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
    def _kv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        B, N, D = x.shape
        k, v = self.kv_proj(x).view(B, N, 2, self.heads, self.dh).permute(2, 0, 3, 1, 4)
        return (F.normalize(k, dim=-1) if self.soes else k), v  # (B, H, N, dh) each

    def _queries(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """-> routed queries (B, H, G, L, dh), gates (B, H, G, L) or None (one expert)."""
        B, L, D = x.shape
        q = self.q_proj(x).view(B, L, self.experts, self.heads, self.dh).permute(0, 3, 2, 1, 4)
        if self.router is None:
            return q, None  # (B, H, 1, L, dh)
        logits = self.router(x).view(B, L, self.heads, self.experts).permute(0, 2, 3, 1)  # (B, H, E, L)
        # Gates: the routed experts' router probabilities, not renormalised over the routed
        # ones (as Switch Transformer): with experts_topk = 1 a renormalised gate is always 1
        # and the router would get no gradient.
        probs, sel = torch.softmax(logits, dim=2).topk(self.routed, dim=2)  # (B, H, G, L)
        q = q.gather(2, sel.unsqueeze(-1).expand(-1, -1, -1, -1, self.dh))  # (B, H, G, L, dh)
        return q, probs

    def _scale(self, q: torch.Tensor) -> torch.Tensor:
        if self.soes:
            return F.normalize(q, dim=-1) * self.log_temp.exp().view(1, -1, 1, 1, 1)
        return q * self.dh ** -0.5

    # ---------------------------------------------------------------- forward
    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None, pe: PositionalEncoding,
                memory: Memory | None, want_graph: bool = False) -> tuple[torch.Tensor, Graph | None]:
        """x: (B, L, D); attn_mask: as FusionClassifier._attn_mask (None, bool (B, 1, 1, L),
        or float (B, H, L, L) = pe bias + padding −inf). -> ((B, L, D), the token graph if
        `want_graph` else None)."""
        B, L, D = x.shape
        k, v = self._kv(x)  # (B, H, L, dh)
        q, gates = self._queries(x)  # (B, H, G, L, dh)
        q = self._scale(q)
        qr, kr = pe.rotate(q, k)  # identity unless rotary (then soes is off)
        scores = qr @ kr.unsqueeze(2).transpose(-1, -2)  # (B, H, G, L, L)
        if attn_mask is not None:  # padding −inf (and the pe's logits bias), as in SDPA
            scores = scores.add_(_additive(attn_mask, scores.dtype).unsqueeze(2))
        idx = None
        if 0 < self.topk < L:
            # unsorted: the activation sorts the k kept scores itself
            scores, idx = scores.topk(self.topk, dim=-1, sorted=False)  # (B, H, G, L, k)
        parts = [scores]
        if memory is not None:  # content queries: memory keys carry no position
            ks, vs = self._kv(memory.slots)  # (B, H, S, dh)
            kc, vc = self._kv(memory.cache)  # (B, H, L, dh)
            slot = q @ ks.unsqueeze(2).transpose(-1, -2)  # (B, H, G, L, S)
            parts.append(slot.masked_fill(~memory.slot_mask[:, None, None, None, :], NEG_INF))
            parts.append((q * kc.unsqueeze(2)).sum(-1, keepdim=True))  # (B, H, G, L, 1)
        w = self.activation(torch.cat(parts, dim=-1))  # (B, H, G, L, K + S + 1)
        if self.training and self.attn_dropout > 0.0:
            dropped = F.dropout(w, self.attn_dropout)
        else:
            dropped = w
        # split, not slicing: a slice's backward fills a zero tensor of w's size, per slice
        sizes = [p.shape[-1] for p in parts]
        graph = self._graph(w.split(sizes, dim=-1)[0], idx, gates) if want_graph else None
        w_tok, *w_mem = dropped.split(sizes, dim=-1)
        out = self._weighted_tokens(w_tok, idx, v)  # (B, H, G, L, dh)
        if memory is not None:
            out = out + w_mem[0] @ vs.unsqueeze(2) + w_mem[1] * vc.unsqueeze(2)
        if gates is None:
            y = out.squeeze(2)  # (B, H, L, dh)
        else:  # gate-weighted mix of the routed experts
            y = (out * gates.unsqueeze(-1)).sum(2)
        return self.out_proj(y.transpose(1, 2).reshape(B, L, D)), graph

    @staticmethod
    def _weighted_tokens(w: torch.Tensor, idx: torch.Tensor | None, v: torch.Tensor) -> torch.Tensor:
        """Σ_j w_j v_j over the kept token keys. w: (B, H, G, L, K); v: (B, H, L, dh)."""
        if idx is None:
            return w @ v.unsqueeze(2)
        B, H, G, L, K = idx.shape
        # Rows of a flat (B·H·L, dh) table (a gather on an expanded (…, L, L, dh) view would
        # materialise that size in its backward), then mul-and-sum: on CPU a batch of B·H·G·L
        # tiny (1×K)·(K×dh) matmuls is slower, and so is a dense scatter once L > K·dh.
        base = (torch.arange(B * H, device=v.device) * v.shape[2]).view(B, H, 1, 1, 1)
        v_sel = F.embedding(idx + base, v.reshape(-1, v.shape[-1]))  # (B, H, G, L, K, dh)
        return (w.unsqueeze(-1) * v_sel).sum(-2)

    def _graph(self, w: torch.Tensor, idx: torch.Tensor | None, gates: torch.Tensor | None) -> Graph:
        """The per-head token graph: routed experts' rows, gate-weighted."""
        if gates is not None:
            w = w * gates.unsqueeze(-1)  # (B, H, G, L, K)
        if idx is None:
            return Graph(w.sum(2), None)  # (B, H, L, L)
        B, H, G, L, K = w.shape
        return Graph(w.permute(0, 1, 3, 2, 4).reshape(B, H, L, G * K),
                     idx.permute(0, 1, 3, 2, 4).reshape(B, H, L, G * K), distinct=G == 1)

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


class ReSSLayer(nn.Module):
    """A sub-layer: ReSSAttention + FFN, post-norm unless `norm_first` (as EncoderLayer)."""

    def __init__(self, d_model: int, heads: int, dim_ff: int, dropout: float, attn_dropout: float,
                 activation: str, norm_first: bool, **attention: Any) -> None:
        super().__init__()
        self.attn = ReSSAttention(d_model, heads, attn_dropout, **attention)
        self.linear1 = nn.Linear(d_model, dim_ff)
        self.linear2 = nn.Linear(dim_ff, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.act = ACTIVATIONS[activation]
        self.norm_first = norm_first

    def _ff(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout2(self.linear2(self.dropout(self.act(self.linear1(x)))))

    def forward(self, x, attn_mask, pe, memory: Memory | None,
                want_graph: bool) -> tuple[torch.Tensor, Graph | None]:
        if self.norm_first:  # attention reads normalised states, memory included
            mem = memory.map(self.norm1) if memory is not None else None
            a, graph = self.attn(self.norm1(x), attn_mask, pe, mem, want_graph)
            x = x + self.dropout1(a)
            return x + self._ff(self.norm2(x)), graph
        a, graph = self.attn(x, attn_mask, pe, memory, want_graph)
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

    def membership(self, mask: torch.Tensor) -> torch.Tensor:
        """(B, L) real-token mask -> (B, L, S): token i of n real ones is in segment ⌊i·S/n⌋."""
        B, L = mask.shape
        n = mask.sum(1, keepdim=True).clamp(min=1)  # (B, 1)
        seg = torch.arange(L, device=mask.device).unsqueeze(0) * self.segments // n  # (B, L)
        member = seg.unsqueeze(-1) == torch.arange(self.segments, device=mask.device)
        return member & mask.unsqueeze(-1)

    def pool(self, x: torch.Tensor, member: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Attention-weighted mean of each segment's real tokens -> slots (B, S, D), valid (B, S)."""
        logits = self.score(x).masked_fill(~member, NEG_INF)  # (B, L, S)
        valid = member.any(1)  # (B, S)
        top = logits.amax(1, keepdim=True).masked_fill(~valid.unsqueeze(1), 0.0)  # empty: no NaN
        e = (logits - top).exp()  # 0 outside the segment
        a = e / e.sum(1, keepdim=True).clamp(min=torch.finfo(e.dtype).tiny)
        return a.transpose(1, 2) @ x, valid

    def init(self, x: torch.Tensor, member: torch.Tensor) -> Memory:
        slots, valid = self.pool(x, member)
        return Memory(x, slots, valid)

    @staticmethod
    def _gated(gate: nn.Linear, new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
        g = torch.sigmoid(gate(torch.cat([new, old], dim=-1)))
        return g * new + (1.0 - g) * old

    def update(self, memory: Memory, x: torch.Tensor, member: torch.Tensor) -> Memory:
        slots, _ = self.pool(x, member)
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
        return {f: getattr(config, f) for f in cls.OPTION_FIELDS}

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
            errs.append(f"unknown attn_activation {config.attn_activation!r}; choose from "
                        f"{sorted(ATTN_ACTIVATIONS)}")
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
        """(B, H, L, L)-sized tensors a training step keeps, for the sweep's memory estimate:
        per layer application (T of them with R2MU) the scores, the sparse/soft weights and
        their top-k workspace: 3."""
        return int(config.layers) * (int(config.iterations) if config.r2mu else 1) * 3

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
                 graph_reg: float) -> None:
        super().__init__()
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
        track = self.training and self.graph_reg > 0
        graphs: list[list[Graph | None]] = []  # [application][sub-layer]
        if self.memory is None:
            for layer in self.layers:
                x, g = layer(x, attn_mask, pe, None, track)
                graphs.append([g])  # successive layers are the successive graphs
        else:
            member = self.memory.membership(mask)  # (B, L, S)
            memory = self.memory.init(x, member)
            for t in range(self.iterations):
                x = x + self.step(t, x)
                row = []
                for layer in self.layers:
                    x, g = layer(x, attn_mask, pe, memory, track)
                    row.append(g)
                graphs.append(row)
                if t < self.iterations - 1:
                    memory = self.memory.update(memory, x, member)
        if track:
            self._aux = self._graph_penalty(graphs, mask)
        return self.final_norm(x)

    def _graph_penalty(self, graphs: list[list[Graph]], mask: torch.Tensor) -> torch.Tensor | None:
        """graph_reg × mean over successive pairs of the mean (heads, real queries) squared
        change of the attention rows (eq. 8)."""
        pairs = [(a, b) for prev, cur in zip(graphs, graphs[1:]) for a, b in zip(prev, cur)]
        if not pairs:
            return None
        real = mask.to(pairs[0][0].weights.dtype)  # (B, L)
        total = sum((_row_change(a, b) * real.unsqueeze(1)).sum() for a, b in pairs)
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


def _row_change(a: Graph, b: Graph) -> torch.Tensor:
    """‖a_i − b_i‖² per (B, H, L) query row."""
    if a.idx is None:
        return (a.weights - b.weights).square().sum(-1)
    return _inner(a, a) + _inner(b, b) - 2.0 * _inner(a, b)


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


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)

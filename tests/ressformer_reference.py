"""Today's ReSSFormer body (fusion_sweep/trial/models/ressformer.py as of commit 52b9da7),
kept verbatim as the reference the optimised implementation is tested against
(tests/test_ressformer_equality.py): same parameters (names, shapes, order), so a state_dict
moves between the two. Not imported by the product.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any
import torch
import torch.nn as nn
import torch.nn.functional as F

from fusion_sweep.trial.models.positional import PositionalEncoding
from fusion_sweep.trial.models.sparse import ATTN_ACTIVATIONS

_ACTIVATIONS = {"gelu": F.gelu, "relu": F.relu}  # the FFN activations (models/encoder.py's)


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
        self.act = _ACTIVATIONS[activation]
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
    """ReSSFormer body, today's implementation (the registry classmethods left out)."""

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

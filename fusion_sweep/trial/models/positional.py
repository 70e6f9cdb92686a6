"""Positional-encoding families.

Two levels, and the name always says which:
- input-level families produce P (1, L, d) that a fusion operator combines with E;
- attention-level families act inside self-attention (rotating q/k, or adding a bias to the
  attention logits) and produce no P.

Fusion operators need a P, so attention-level families and `none` combine only with
fusion `add`, which then means H = E (adding a zero P). Every other pairing is rejected by
`check_compatible` — we never silently substitute some other P.
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn

from fusion_sweep.errors import choices, unknown_name
from fusion_sweep.trial.models.fusion import FUSIONS


class PositionalEncoding(nn.Module):
    """Base class. Subclasses override the hooks their level uses."""

    level = "input"  # "input" | "attention" | "none"
    # Whether `attention_bias` returns a bias: a padded batch then gets a (B, H, L, L) float
    # mask (bias + the padded keys' −inf), which trial/memory.py counts.
    has_bias = False
    # Whether `rotate` changes q and k (a rotated copy of each is saved for the backward).
    rotates = False

    @classmethod
    def config_errors(cls, config: Any) -> list[str]:
        """Problems of a trial config that only this family has (each naming the field)."""
        return []

    def __init__(self, d_model: int, max_len: int, heads: int) -> None:
        super().__init__()
        self.d_model, self.max_len, self.heads = d_model, max_len, heads

    def input_encoding(self, L: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor | None:
        """(1, L, d) or None."""
        return None

    def attention_bias(self, L: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor | None:
        """Additive logits bias (1, H, L, L) or None. Depends on i−j only, so padding-invariant."""
        return None

    def rotate(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q, k: (B, H, L, dh). Identity unless the family rotates them."""
        return q, k


# --------------------------------------------------------------------------- input level
class SinusoidalPE(PositionalEncoding):
    """P[t, 2i] = sin(t / 10000^{2i/d}),  P[t, 2i+1] = cos(t / 10000^{2i/d})  (Vaswani et al.)."""

    def __init__(self, d_model: int, max_len: int, heads: int) -> None:
        super().__init__(d_model, max_len, heads)
        pos = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)  # (L, 1)
        div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div[: d_model // 2])
        self.register_buffer("pe", pe.unsqueeze(0), persistent=False)  # (1, max_len, d)

    def input_encoding(self, L, device, dtype):
        return self.pe[:, :L].to(device=device, dtype=dtype)


class LearnedPE(PositionalEncoding):
    """A learned absolute table P[t] (nn.Embedding(max_len, d), N(0, 1) init as in the reference)."""

    def __init__(self, d_model: int, max_len: int, heads: int) -> None:
        super().__init__(d_model, max_len, heads)
        self.table = nn.Parameter(torch.empty(max_len, d_model))

    def input_encoding(self, L, device, dtype):
        return self.table[:L].unsqueeze(0).to(dtype)  # (1, L, d)


class RoPEFeaturesPE(PositionalEncoding):
    """The paper's Table-3 "RoPE" as its reference code computes it: an INPUT-level tensor
    P[t] = [sin(t·θ); cos(t·θ)], θ_i = 10000^{-2i/d} — rotary frequencies used as additive
    features, not a rotation of q/k. For true rotary attention use `rotary`.
    """

    def __init__(self, d_model: int, max_len: int, heads: int) -> None:
        super().__init__(d_model, max_len, heads)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, d_model, 2, dtype=torch.float32) / d_model))
        t = torch.arange(max_len, dtype=torch.float32)
        freqs = torch.outer(t, inv_freq)  # (L, d/2)
        self.register_buffer("pe", torch.cat([freqs.sin(), freqs.cos()], dim=-1).unsqueeze(0),
                             persistent=False)  # (1, max_len, d)

    def input_encoding(self, L, device, dtype):
        return self.pe[:, :L].to(device=device, dtype=dtype)


class RandnTablePE(LearnedPE):
    """The paper's Table-3 "Relative" as its reference code computes it: an INPUT-level learned
    absolute table initialised N(0, 1) (`nn.Parameter(torch.randn(max_len, d))`). Despite the
    paper's label it encodes absolute positions; it is the same family as `learned`, drawn from
    its own stream. For relative attention use `t5-bias` or `alibi`.
    """


# ----------------------------------------------------------------------- attention level
class RotaryPE(PositionalEncoding):
    """True rotary embedding (Su et al.): rotate q and k per head by position-dependent angles
    (rotate-half convention, base 10000). Relative by construction."""

    level = "attention"
    rotates = True

    @classmethod
    def config_errors(cls, config: Any) -> list[str]:
        d, h = config.d_model, config.heads
        if all(isinstance(v, int) and v > 0 for v in (d, h)) and d % h == 0 and (d // h) % 2:
            return [f"pe 'rotary' needs an even head dim; d_model/heads = {d // h}"]
        return []

    def __init__(self, d_model: int, max_len: int, heads: int) -> None:
        super().__init__(d_model, max_len, heads)
        dh = d_model // heads
        inv_freq = 1.0 / (10000 ** (torch.arange(0, dh, 2, dtype=torch.float32) / dh))
        freqs = torch.outer(torch.arange(max_len, dtype=torch.float32), inv_freq)  # (L, dh/2)
        emb = torch.cat([freqs, freqs], dim=-1)  # (L, dh)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    @staticmethod
    def _rotate_half(x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat([-x2, x1], dim=-1)

    def rotate(self, q, k):
        L = q.shape[-2]
        cos = self.cos[:L].to(q.dtype)  # (L, dh)
        sin = self.sin[:L].to(q.dtype)
        return q * cos + self._rotate_half(q) * sin, k * cos + self._rotate_half(k) * sin


class ALiBiPE(PositionalEncoding):
    """ALiBi (Press et al.), bidirectional: logits[h, i, j] −= m_h · |i − j|, with the paper's
    geometric head slopes m_h = 2^{−8(h+1)/H} (for H a power of two; interpolated otherwise)."""

    level = "attention"
    has_bias = True

    def __init__(self, d_model: int, max_len: int, heads: int) -> None:
        super().__init__(d_model, max_len, heads)
        self.register_buffer("slopes", self._slopes(heads), persistent=False)  # (H,)

    @staticmethod
    def _slopes(n: int) -> torch.Tensor:
        def pow2(k: int) -> list[float]:
            start = 2 ** (-8 / k)
            return [start ** (i + 1) for i in range(k)]

        if math.log2(n).is_integer():
            return torch.tensor(pow2(n))
        closest = 2 ** math.floor(math.log2(n))
        return torch.tensor(pow2(closest) + pow2(2 * closest)[0::2][: n - closest])

    def attention_bias(self, L, device, dtype):
        pos = torch.arange(L, device=device)
        dist = (pos[None, :] - pos[:, None]).abs().to(dtype)  # (L, L)
        return (-self.slopes.to(device=device, dtype=dtype)[:, None, None] * dist).unsqueeze(0)


class T5BiasPE(PositionalEncoding):
    """T5-style relative position bias (Raffel et al.): a learned scalar per (head, bucket of
    i − j), bidirectional, 32 buckets, log-spaced beyond 8 up to distance 128; shared by all
    layers as in T5."""

    level = "attention"
    has_bias = True
    num_buckets = 32
    max_distance = 128

    def __init__(self, d_model: int, max_len: int, heads: int) -> None:
        super().__init__(d_model, max_len, heads)
        self.bias = nn.Embedding(self.num_buckets, heads)

    def _bucket(self, rel: torch.Tensor) -> torch.Tensor:
        nb = self.num_buckets // 2
        out = (rel > 0).long() * nb
        n = rel.abs()
        max_exact = nb // 2
        large = max_exact + (
            torch.log(n.float().clamp(min=1) / max_exact) / math.log(self.max_distance / max_exact)
            * (nb - max_exact)
        ).long()
        large = large.clamp(max=nb - 1)
        return out + torch.where(n < max_exact, n, large)

    def attention_bias(self, L, device, dtype):
        pos = torch.arange(L, device=device)
        buckets = self._bucket(pos[None, :] - pos[:, None])  # (L, L), key − query
        return self.bias(buckets).permute(2, 0, 1).unsqueeze(0).to(dtype)  # (1, H, L, L)


class NoPE(PositionalEncoding):
    """No positional information at all (ReSSFormer's position-free setting)."""

    level = "none"


POSITIONAL: dict[str, type[PositionalEncoding]] = {
    "sinusoidal": SinusoidalPE,
    "learned": LearnedPE,
    "rope-features": RoPEFeaturesPE,
    "randn-table": RandnTablePE,
    "rotary": RotaryPE,
    "alibi": ALiBiPE,
    "t5-bias": T5BiasPE,
    "none": NoPE,
}

def check_compatible(pe: str, fusion: str) -> str | None:
    """None if `pe` and `fusion` can be combined, else an error message saying why."""
    level = POSITIONAL[pe].level
    if level == "input" or FUSIONS[fusion].accepts_absent_p:
        return None
    kind = "acts inside attention" if level == "attention" else "adds no positions"
    input_level = sorted(k for k, v in POSITIONAL.items() if v.level == "input")
    absent_ok = sorted(k for k, v in FUSIONS.items() if v.accepts_absent_p)
    return (
        f"fusion {fusion!r} needs an input-level positional encoding, but pe {pe!r} {kind}; "
        f"use fusion {' or '.join(map(repr, absent_ok))} with pe {pe!r} (H = E), or an "
        f"input-level pe ({choices(input_level)})"
    )


def build_positional(name: str, d_model: int, max_len: int, heads: int) -> PositionalEncoding:
    if name not in POSITIONAL:
        raise ValueError(unknown_name("pe", name, sorted(POSITIONAL)))
    return POSITIONAL[name](d_model=d_model, max_len=max_len, heads=heads)

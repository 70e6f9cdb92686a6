"""Encoder-only Transformer classifier (the paper's reference architecture; README "One trial").

    E = Embedding(ids) * sqrt(d);  P = pe(L);  H = fusion(E, P)
    -> encoder body (ENCODERS: "standard" = `layers` × encoder layer; "ressformer")
    -> masked mean pooling over real tokens -> Linear -> logits

Embedding, fusion, pooling and classifier are shared by every encoder; only the body differs.
The classifier is built from a `ModelSpec` (the config's model fields and the options its
encoder and fusion read: `ModelSpec.of(config)`). A body is an nn.Module built as
`ENCODERS[name](d_model=, heads=, layers=, dim_ff=, dropout=, attn_dropout=, activation=,
norm_first=, max_len=, **ENCODERS[name].options(config))` with

    forward(x (B, L, d), mask (B, L) bool True = real token, attn_mask, pe) -> (B, L, d)
    forward_flops(L) -> int      analytic forward FLOPs for one document of L real tokens
    aux_loss() -> Tensor | None  an auxiliary training loss of the last training forward

and the classmethods `options(config)` (the config fields it reads), `variant(config)` (the
identity's encoder label), `config_errors(config)` (its rules, one message each) and
`order_visibility(config)` (one line: can this configuration see token order, and through what).

The standard layer reproduces nn.TransformerEncoderLayer's math (post-norm by default) but
calls F.scaled_dot_product_attention directly, so training gets SDPA kernels and
attention-level positional families can hook into q/k and the logits.

Parameters are split into four groups with independent initialisation streams (the paired
protocol): `shared` (embedding, classifier: what every encoder has), `encoder` (the body),
`fusion`, and `pe`.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

import torch
import torch.nn as nn
import torch.nn.functional as F

from fusion_sweep.errors import unknown_name
from fusion_sweep.trial.models.common import FeedForwardSublayer, changed_fields, order_from_pe
from fusion_sweep.trial.models.fusion import FUSIONS, Fusion, build_fusion
from fusion_sweep.trial.models.positional import POSITIONAL, PositionalEncoding, build_positional
from fusion_sweep.trial.models.ressformer import ReSSFormerEncoder



class SelfAttention(nn.Module):
    def __init__(self, d_model: int, heads: int, attn_dropout: float) -> None:
        super().__init__()
        self.heads, self.attn_dropout = heads, attn_dropout
        self.in_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None, pe: PositionalEncoding) -> torch.Tensor:
        B, L, D = x.shape
        q, k, v = self.in_proj(x).view(B, L, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        q, k = pe.rotate(q, k)  # (B, H, L, dh) each
        p = self.attn_dropout if self.training else 0.0
        if p > 0.0 and q.device.type == "cpu":
            y = attention_with_dropout(q, k, v, attn_mask, p)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p)  # (B, H, L, dh)
        return self.out_proj(y.transpose(1, 2).reshape(B, L, D))


def attention_with_dropout(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           attn_mask: torch.Tensor | None, p: float) -> torch.Tensor:
    """dropout_p(softmax(q kᵀ / √dh + mask)) v for CPU training with attention dropout > 0.

    q, k, v: (B, H, L, dh); attn_mask: None, bool (B, 1, 1, L) (True = keep) or an additive
    float mask broadcastable to (B, H, L, L). Returns (B, H, L, dh).

    CPU SDPA always takes its math backend when dropout_p > 0; this is the same computation
    with the same dropout mask, drawn the same way (`empty_like(probs).bernoulli_(1 - p)`, as
    at::dropout does, so the dropout RNG stream is unchanged), minus that backend's extra full
    passes over the (B, H, L, L) tensor: the separate mask add (fused into baddbmm), the
    all-masked-row check of its safe softmax (never true here: key 0 is always kept) and the
    1/(1-p) rescale (applied to the (B, H, L, dh) output instead). Float reordering only;
    2-8× less attention time on CPU.
    """
    B, H, L, dh = q.shape
    qf = q.reshape(B * H, L, dh)
    kt = k.reshape(B * H, L, dh).transpose(1, 2)
    vf = v.reshape(B * H, L, dh)
    scale = 1.0 / math.sqrt(dh)
    if attn_mask is None:
        scores = torch.bmm(qf, kt).mul_(scale)
    else:
        if attn_mask.dtype == torch.bool:
            attn_mask = torch.zeros(attn_mask.shape, dtype=q.dtype, device=q.device).masked_fill_(
                ~attn_mask, float("-inf"))
        Lq = attn_mask.shape[-2]
        bias = attn_mask.expand(B, H, Lq, L).reshape(B * H, Lq, L)
        scores = torch.baddbmm(bias, qf, kt, alpha=scale)
    probs = torch.softmax(scores, dim=-1)
    del scores
    keep = torch.empty_like(probs).bernoulli_(1.0 - p)
    out = torch.bmm(probs * keep, vf).mul_(1.0 / (1.0 - p))
    return out.view(B, H, L, dh)


class EncoderLayer(FeedForwardSublayer):
    """nn.TransformerEncoderLayer semantics: post-norm unless `norm_first`."""

    def __init__(self, d_model: int, heads: int, dim_ff: int, dropout: float, attn_dropout: float,
                 activation: str, norm_first: bool) -> None:
        super().__init__()
        self.attn = SelfAttention(d_model, heads, attn_dropout)
        self._add_feed_forward(d_model, dim_ff, dropout, activation, norm_first)

    def forward(self, x, attn_mask, pe):
        if self.norm_first:
            x = x + self.dropout1(self.attn(self.norm1(x), attn_mask, pe))
            return x + self._ff(self.norm2(x))
        x = self.norm1(x + self.dropout1(self.attn(x, attn_mask, pe)))
        return self.norm2(x + self._ff(x))


# ------------------------------------------------------------------------ encoder bodies
class StandardEncoder(nn.Module):
    """`layers` × EncoderLayer (+ a final LayerNorm when pre-norm): today's encoder.

    Order: it sees token order exactly as far as its pe does; with pe 'none' it is
    permutation-equivariant, so with mean pooling the classifier is permutation-invariant.
    """

    OPTION_FIELDS: tuple[str, ...] = ()  # the trial-config fields it reads

    @classmethod
    def options(cls, config: Any) -> dict[str, Any]:
        return {f: getattr(config, f) for f in cls.OPTION_FIELDS}

    @classmethod
    def variant(cls, config: Any) -> str:
        return "standard"

    @classmethod
    def config_errors(cls, config: Any) -> list[str]:
        """Every other encoder's fields must stay at their defaults: a stray switch would
        otherwise be silently ignored (and two identical trials would differ in config)."""
        return [f"{field} applies only to encoder {name!r}; got {field}={value!r} with encoder "
                f"'standard': leave it at its default ({default!r}) or set encoder={name}"
                for name, other in ENCODERS.items() if other is not cls
                for field, value, default in changed_fields(config, other.OPTION_FIELDS)]

    @classmethod
    def order_visibility(cls, config: Any) -> str:
        return order_from_pe(config) or "no: pe 'none' (permutation-invariant after mean pooling)"

    @classmethod
    def attention_maps(cls, config: Any) -> int:
        """(B, H, L, L)-sized tensors one training step keeps per attention layer application
        and applications, for the sweep's memory estimate: one per layer."""
        return int(config.layers)

    @classmethod
    def activation_floats(cls, config: Any, B: int, L: int) -> int:
        """Elements one CUDA training step saves for the backward per (B, L) batch, for the GPU
        memory estimate (trial/memory.py): per layer and token the layer input, q/k/v, the
        attention output before and after the head merge, the norms' inputs (7 d), the
        feed-forward's hidden layer and its activation (2 ff), a log-sum-exp per head; with
        dropout its output and bool masks (ff + (2 d + ff) / 4); with a pe that rotates q and
        k, their rotated copies (2 d). Attention saves no (L, L) map on CUDA (the fused
        kernels keep the log-sum-exp instead)."""
        d, ff = config.d_model, config.dim_ff
        per_token = 7 * d + 2 * ff + config.heads
        if config.dropout > 0:
            per_token += ff + (2 * d + ff) / 4
        if POSITIONAL[config.pe].rotates:
            per_token += 2 * d
        return int(config.layers * B * L * per_token)

    def __init__(self, *, d_model: int, heads: int, layers: int, dim_ff: int, dropout: float,
                 attn_dropout: float, activation: str, norm_first: bool, max_len: int) -> None:
        super().__init__()
        self.d_model, self.dim_ff = d_model, dim_ff
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, heads, dim_ff, dropout, attn_dropout, activation, norm_first)
            for _ in range(layers)
        )
        self.final_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, x: torch.Tensor, mask: torch.Tensor, attn_mask: torch.Tensor | None,
                pe: PositionalEncoding) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, attn_mask, pe)
        return self.final_norm(x)

    def forward_flops(self, L: int) -> int:
        """Per layer: q/k/v and output projections, scores and weighted sum over L keys, FFN."""
        d, ff = self.d_model, self.dim_ff
        per_layer = 2 * L * d * 3 * d + 2 * L * L * d + 2 * L * L * d + 2 * L * d * d + 2 * 2 * L * d * ff
        return len(self.layers) * per_layer

    def aux_loss(self) -> torch.Tensor | None:
        return None


def linear_flops_per_token(module: nn.Module) -> int:
    """2 × the multiply-adds of every Linear/Conv1d in `module`, applied once per token (true of
    every fusion operator: each maps position i through each of its layers once)."""
    return 2 * sum(m.weight.numel() for m in module.modules() if isinstance(m, (nn.Linear, nn.Conv1d)))


@dataclass(frozen=True)
class ModelSpec:
    """What a FusionClassifier is built from besides the data's vocabulary and classes: the
    trial config's model fields, and the options its encoder body and fusion operator read
    (their registry entries' `options(config)`, passed on as keywords)."""

    fusion: str
    pe: str
    max_len: int
    d_model: int
    heads: int
    layers: int
    dim_ff: int
    dropout: float
    attn_dropout: float
    activation: str
    norm_first: bool = False
    encoder: str = "standard"
    encoder_options: Mapping[str, Any] = field(default_factory=dict)
    fusion_options: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, config: Any) -> "ModelSpec":
        """The spec of a trial config: its fields of these names and its entries' options."""
        named = {f.name: getattr(config, f.name) for f in fields(cls)
                 if f.name not in ("encoder_options", "fusion_options")}
        return cls(**named, encoder_options=ENCODERS[config.encoder].options(config),
                   fusion_options=FUSIONS[config.fusion].options(config))


class FusionClassifier(nn.Module):
    def __init__(self, spec: ModelSpec, *, vocab_size: int, num_classes: int,
                 pad_id: int = 0) -> None:
        super().__init__()
        if spec.encoder not in ENCODERS:
            raise ValueError(unknown_name("encoder", spec.encoder, sorted(ENCODERS)))
        d_model = spec.d_model
        self.d_model, self.pad_id = d_model, pad_id
        # --- shared group: what every encoder has ---
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        self.classifier = nn.Linear(d_model, num_classes)
        # --- encoder group ---
        self.encoder = ENCODERS[spec.encoder](
            d_model=d_model, heads=spec.heads, layers=spec.layers, dim_ff=spec.dim_ff,
            dropout=spec.dropout, attn_dropout=spec.attn_dropout, activation=spec.activation,
            norm_first=spec.norm_first, max_len=spec.max_len, **dict(spec.encoder_options))
        # --- variant-specific groups ---
        self.fusion: Fusion = build_fusion(spec.fusion, d_model, **dict(spec.fusion_options))
        self.pe: PositionalEncoding = build_positional(spec.pe, d_model, spec.max_len, spec.heads)

    def _attn_mask(self, mask: torch.Tensor, L: int, dtype: torch.dtype,
                   padded: bool) -> torch.Tensor | None:
        """SDPA mask: None (no padding: lets SDPA pick its fused kernel), bool (B,1,1,L), or
        an additive float bias when the PE family adds one: (1,H,L,L) without padding (SDPA
        broadcasts it over the batch), (B,H,L,L) with padding (bias + the keys' −inf).

        `padded` is whether any key but the first is padding, known on the host from the
        batch's lengths, so building the mask never waits for the device."""
        bias = self.pe.attention_bias(L, mask.device, dtype)  # (1, H, L, L) | None
        if not padded:
            return bias
        mask = mask.clone()
        mask[:, 0] = True  # an empty document would otherwise have no key at all (NaN softmax)
        if bias is None:
            return mask[:, None, None, :]
        pad = torch.zeros(mask.shape, device=mask.device, dtype=dtype).masked_fill(~mask, float("-inf"))
        return bias + pad[:, None, None, :]  # (B, H, L, L): counted by trial/memory.py

    def forward(self, ids: torch.Tensor, padded: bool | None = None) -> torch.Tensor:
        """ids: (B, L) right-padded with pad_id -> logits (B, C).

        `padded`: whether a key after the first is pad_id (`has_padding(ids)` on the host
        array). The trainer passes it; None reads it from `ids`, one host sync on a GPU."""
        B, L = ids.shape
        mask = ids != self.pad_id  # (B, L)
        if padded is None:
            padded = not bool(mask[:, 1:].all())
        E = self.embed(ids) * math.sqrt(self.d_model)  # (B, L, d)
        P = self.pe.input_encoding(L, ids.device, E.dtype)  # (1, L, d) | None
        x = self.fusion(E, P, mask) if P is not None else E  # attention-level / none: H = E
        x = self.encoder(x, mask, self._attn_mask(mask, L, x.dtype, padded), self.pe)  # (B, L, d)
        m = mask.unsqueeze(-1).to(x.dtype)  # (B, L, 1)
        pooled = (x * m).sum(1) / m.sum(1).clamp(min=1.0)  # (B, d)
        return self.classifier(pooled)

    def aux_loss(self) -> torch.Tensor | None:
        """The body's auxiliary loss (already weighted) of the latest training-mode forward, or
        None (the standard encoder; ReSSFormer without an active graph regulariser)."""
        return self.encoder.aux_loss()

    def forward_flops(self, L: int) -> int:
        """Analytic forward FLOPs (2 per multiply-add) for ONE document of L real tokens:
        fusion (only when the pe produces a P), encoder body, classifier. Elementwise ops,
        normalisation, pooling sums and the embedding lookup are not counted; positional
        encodings add elementwise work only."""
        fusion = L * linear_flops_per_token(self.fusion) if self.pe.level == "input" else 0
        return fusion + self.encoder.forward_flops(L) + linear_flops_per_token(self.classifier)

    # ------------------------------------------------------------ parameter groups
    def parameter_groups(self) -> dict[str, list[tuple[str, nn.Parameter]]]:
        groups: dict[str, list[tuple[str, nn.Parameter]]] = {
            "shared": [], "encoder": [], "fusion": [], "pe": []}
        for name, p in self.named_parameters():
            head = name.split(".")[0]
            groups[head if head in groups else "shared"].append((name, p))
        return groups


# ------------------------------------------------------------------------ initialisation
def _uniform(t: torch.Tensor, bound: float, g: torch.Generator) -> None:
    nn.init.uniform_(t, -bound, bound, generator=g)


def _init_module(m: nn.Module, g: torch.Generator) -> None:
    """PyTorch's default initialisers, but drawn from an explicit generator `g`."""
    if isinstance(m, SelfAttention):  # as nn.MultiheadAttention
        nn.init.xavier_uniform_(m.in_proj.weight, generator=g)
        nn.init.zeros_(m.in_proj.bias)
        _uniform(m.out_proj.weight, 1.0 / math.sqrt(m.out_proj.in_features), g)
        nn.init.zeros_(m.out_proj.bias)
    elif isinstance(m, nn.Linear):
        bound = 1.0 / math.sqrt(m.in_features)
        _uniform(m.weight, bound, g)
        if m.bias is not None:
            _uniform(m.bias, bound, g)
    elif isinstance(m, nn.Conv1d):
        bound = 1.0 / math.sqrt(m.weight[0].numel())
        _uniform(m.weight, bound, g)
        if m.bias is not None:
            _uniform(m.bias, bound, g)
    elif isinstance(m, nn.Embedding):
        nn.init.normal_(m.weight, generator=g)
        if m.padding_idx is not None:
            with torch.no_grad():
                m.weight[m.padding_idx].zero_()
    elif isinstance(m, nn.LayerNorm):
        nn.init.ones_(m.weight)
        nn.init.zeros_(m.bias)


def _init_group(modules: list[nn.Module], g: torch.Generator) -> None:
    seen: set[int] = set()
    for root in modules:
        for m in root.modules():
            if id(m) in seen:
                continue
            seen.add(id(m))
            if isinstance(m, SelfAttention):
                seen.update(id(c) for c in m.modules())
            _init_module(m, g)
            if hasattr(m, "init_own_parameters"):  # a module that knows its bare parameters
                m.init_own_parameters(g)
                continue
            # Bare parameters of our own modules (learned PE tables, gate biases).
            for name, p in m.named_parameters(recurse=False):
                if isinstance(m, (nn.Linear, nn.Conv1d, nn.Embedding, nn.LayerNorm, SelfAttention)):
                    continue
                if name == "bias":
                    nn.init.zeros_(p)
                else:
                    nn.init.normal_(p, generator=g)


@torch.no_grad()
def initialize(model: FusionClassifier, seeds: Mapping[str, int]) -> None:
    """Initialise each parameter group ("shared", "encoder", "fusion", "pe") from its own
    seeded generator.

    Because groups never share a stream, neither the extra parameters of `concat`/`gate-*`
    nor a different encoder body can shift the shared weights: for a given seed, every
    variant — standard or ReSSFormer — starts from identical embedding and classifier weights
    (the reference drew the fusion layer first and broke this).
    """
    groups = {
        "shared": [model.embed, model.classifier],
        "encoder": [model.encoder],
        "fusion": [model.fusion],
        "pe": [model.pe],
    }
    missing = sorted(set(groups) - set(seeds))
    if missing:
        raise KeyError(f"initialize needs a seed for every parameter group {sorted(groups)}; "
                       f"missing {missing}")
    for name, modules in groups.items():
        _init_group(modules, torch.Generator().manual_seed(seeds[name]))


def _hash_params(params: list[tuple[str, nn.Parameter]]) -> str:
    h = hashlib.sha256()
    for name, p in params:
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def shared_init_hash(model: FusionClassifier) -> str:
    """Embedding + classifier: what every encoder shares (must agree in every pair)."""
    return _hash_params(model.parameter_groups()["shared"])


def encoder_init_hash(model: FusionClassifier) -> str:
    """The encoder body (agrees between two trials only when their bodies are the same)."""
    return _hash_params(model.parameter_groups()["encoder"])


def has_padding(ids: "np.ndarray", pad_id: int) -> bool:
    """Whether a batch (B, L) host array has a padded key after the first column: the
    `padded` argument of `FusionClassifier.forward` (column 0 is always kept as a key)."""
    return bool((ids[:, 1:] == pad_id).any())


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


ENCODERS: dict[str, type[nn.Module]] = {
    "standard": StandardEncoder,
    "ressformer": ReSSFormerEncoder,
}


def construct_model(config: Any, vocab_size: int, num_classes: int, pad_id: int) -> FusionClassifier:
    """The trial's classifier as its constructors initialise it (`build_model` then draws
    every group from its own stream; trial/memory.py builds it on `meta` to size it)."""
    return FusionClassifier(ModelSpec.of(config), vocab_size=vocab_size,
                            num_classes=num_classes, pad_id=pad_id)

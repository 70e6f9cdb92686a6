"""How much memory one trial needs, from its config: on the host (the Ray `memory` resource)
and on a CUDA device (checked against the GPU share a space requests).

Both estimates are built on the model's own parts: the parameter count is the model's,
built on the `meta` device (no memory, exact for every encoder, fusion and pe), and the
activations come from the encoder entry (`ENCODERS[name].attention_maps(config)`,
`activation_floats(config, B, L)`). The longest padded batch is `longest_batch(config)`:
(batch_size, min(max_len, the dataset's cap on a document's length)).

`measured_gpu_bytes(config)` is the check on `gpu_memory_bytes`: one training step on the
`meta` device (shapes only, nothing computed) counting the bytes autograd saves for the
backward (saved-tensor hooks, one count per storage), with scaled-dot-product attention
taken through the memory-efficient kernel CUDA uses (it saves the output and the
log-sum-exp, never a (B, H, L, L) map). tests/test_memory.py and
benchmarks/gpu_readiness.py keep every shipped space's estimate within 1-2x of it. No GPU
has measured any of these figures.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, Iterator

import torch
import torch.nn.functional as F

from fusion_sweep.trial.data.registry import DATASETS
from fusion_sweep.trial.data.synthetic import SyntheticParams
from fusion_sweep.trial.data.tokenize import TokenizerSettings
from fusion_sweep.trial.models import encoder as encoder_module
from fusion_sweep.trial.models.encoder import (ENCODERS, FusionClassifier, construct_model,
                                               count_parameters)
from fusion_sweep.trial.models.fusion import FUSIONS
from fusion_sweep.trial.models.positional import POSITIONAL

# What a trial actor holds before training: Python, torch, Ray worker, MLflow client (an idle
# ray::ImplicitFunc actor measured ~0.55 GB RSS here).
ACTOR_BASE_BYTES = 768 << 20
# One A10G (cluster.yaml's GPU workers: 24 GB), the part trials can use: the device memory a
# space's `gpu:` share is a fraction of, where the launch cannot ask the device itself.
A10G_USABLE_BYTES = int(22.5 * 2**30)
# What a CUDA process holds on the device before its first tensor: the context with torch's
# kernels loaded (~300-500 MiB on an Ampere card per NVIDIA's and torch's notes), cuBLAS
# workspaces and the caching allocator's first blocks. A stated constant, not a measurement.
CUDA_CONTEXT_BYTES = 768 << 20
# The caching allocator rounds blocks up and keeps freed ones, and the backward holds a
# layer's gradients and the forward its temporaries next to the saved activations: the peak
# is above what autograd saves (issue 32 put ArXiv's fp32 peak at 6-7 GiB for 4.0 GiB saved).
GPU_ALLOCATOR_SLACK = 1.5
# Bytes per parameter a trial keeps on its device: fp32 weights, gradients and Adam's two
# moments (bf16 autocast keeps fp32 master weights; its bf16 weight copies are transient).
TRAINED_STATE_BYTES = 4 * 4
# Activation bytes per element by precision: bf16 autocast stores matmul outputs in bf16 but
# normalisation, softmax and the loss in fp32 (torch's autocast op lists).
# (B, L, d) tensors the shared part of the model saves: the body's output for the pooling
# product (the fusion operator's own: its entry's `activation_floats`).
SHARED_TOKEN_TENSORS = 1
ACTIVATION_BYTES = {"fp32": 4.0, "tf32": 4.0, "bf16": 3.0}


def vocab_rows(config: Any) -> int:
    """Embedding rows: the 50k-token vocabulary cap (synthetic regimes: their filler vocabulary)."""
    spec = DATASETS[config.dataset]
    if spec.generated:
        return SyntheticParams.from_mapping(spec.synthetic).filler_vocab + 64
    return TokenizerSettings.max_size


def longest_batch(config: Any) -> tuple[int, int]:
    """(B, L) of the longest padded training batch: a batch is padded to its longest
    document, which the dataset may bound below max_len (`DatasetSpec.length_cap`)."""
    cap = DATASETS[config.dataset].length_cap() or config.max_len
    return int(config.batch_size), int(min(config.max_len, cap))


def meta_model(config: Any, vocab: int | None = None, num_classes: int = 4) -> FusionClassifier:
    """The trial's model with every tensor on the `meta` device (shapes only, no memory)."""
    with torch.device("meta"):
        return construct_model(config, vocab if vocab is not None else vocab_rows(config),
                          num_classes, 0)


@lru_cache(maxsize=512)
def _parameter_count(config: Any) -> int:
    return count_parameters(meta_model(config))


def parameter_count(config: Any) -> int:
    """The trial model's exact parameter count (built on `meta`; cached per config)."""
    return _parameter_count(_shape_only(config))


def activation_elements(config: Any) -> float:
    """Elements one training step saves for the backward at the longest padded batch: the
    shared part (the pooling product's (B, L, d) input), the fusion's
    (`FUSIONS[name].activation_floats`: 3 (B, L, d) more for one that widens or gates), the
    body's (`ENCODERS[name].activation_floats`), and for a pe with an attention bias the
    additive (B, H, L, L) mask a padded batch needs."""
    B, L = longest_batch(config)
    shared = SHARED_TOKEN_TENSORS * B * L * config.d_model
    fusion = FUSIONS[config.fusion].activation_floats(config, B, L)
    body = body_activation_elements(config, B, L)
    bias = B * config.heads * L * L if POSITIONAL[config.pe].has_bias else 0
    return float(shared + fusion + body + bias)


def body_activation_elements(config: Any, B: int, L: int) -> float:
    """The encoder body's saved elements: its entry's `activation_floats(config, B, L)` where
    it has one (the standard encoder), else the body's own saved bytes traced on `meta`
    (`saved_activation_bytes` less the shared part, as fp32 elements): an entry without an
    analytic model is still estimated from its config, never guessed."""
    entry = ENCODERS[config.encoder]
    if hasattr(entry, "activation_floats"):
        return float(entry.activation_floats(config, B, L))
    return _traced_body_elements(_shape_only(config))


def _shape_only(config: Any) -> Any:
    """The config with the fields that cannot change a trial's shapes at a fixed default
    (seed, data seed), so the traced estimate is cached once per variant."""
    return config.replace(seed=0, data_seed=0)


@lru_cache(maxsize=256)
def _traced_body_elements(config: Any) -> float:
    B, L = longest_batch(config)
    shared = SHARED_TOKEN_TENSORS * B * L * config.d_model
    return max(saved_activation_bytes(config) / 4.0 - shared, 0.0)


def host_memory_bytes(config: Any, *, gpu: bool = False) -> int:
    """Host memory of one trial (the sweep's Ray `memory` request when the space sets no
    `memory_gb`), fp32 bytes: the actor's base + 4 copies of the parameters (weights, grads,
    two Adam moments) + on CPU one training step's activations at the longest padded batch:
    per attention map the encoder keeps (`ENCODERS[name].attention_maps`) ~16 (B, L, d)-sized
    tensors and a (B, H, L, L) attention tensor — 4 of them (scores, probabilities, dropout
    mask, gradient) when attention dropout forces the materialising path, else 1 — × 1.5 for
    the allocator's slack. With `gpu` (the trial was given a GPU) the activations live in
    GPU memory (`gpu_memory_bytes`); the host keeps a copy of the weights and the best
    epoch's checkpoint."""
    params = parameter_count(config)
    if gpu:
        return int(ACTOR_BASE_BYTES + 2 * 4 * params)
    c = config
    B, L = longest_batch(c)
    attn = 4 if c.attn_dropout > 0 else 1
    maps = ENCODERS[c.encoder].attention_maps(c)  # attention-sized tensors per step
    acts = maps * 16 * B * L * max(c.d_model, c.dim_ff // 2) + attn * maps * B * c.heads * L * L
    return int(ACTOR_BASE_BYTES + 4 * 4 * params + 1.5 * 4 * acts)


def gpu_memory_bytes(config: Any) -> int:
    """Device memory of one trial on CUDA: the CUDA context + fp32 weights, gradients and
    Adam moments + the activations one training step saves at the longest padded batch, at
    the trial's precision, × the caching allocator's slack."""
    state = TRAINED_STATE_BYTES * parameter_count(config)
    acts = activation_elements(config) * ACTIVATION_BYTES[config.precision]
    return int(CUDA_CONTEXT_BYTES + state + GPU_ALLOCATOR_SLACK * acts)


def gpu_share_error(config: Any, share: float, device_bytes: int,
                    device: str = "the device") -> str | None:
    """Why a trial does not fit its GPU share (`share` × `device_bytes` of `device`, named in
    words), else None: one line for the launch to refuse with, naming the variant, the
    estimate, the share and what to change."""
    need = gpu_memory_bytes(config)
    have = share * device_bytes
    if need <= have:
        return None
    B, L = longest_batch(config)
    bias = (f"; pe {config.pe!r} adds a (B, H, L, L) = ({B}, {config.heads}, {L}, {L}) float "
            f"bias to every padded batch" if POSITIONAL[config.pe].has_bias else "")
    bf16 = ", or set precision: bf16" if config.precision != "bf16" else ""
    return (f"{config.describe()} needs about {need / 2**30:.1f} GiB of GPU memory (batch "
            f"{B} x {L} tokens, precision {config.precision}{bias}) but its share gpu: "
            f"{share:g} of {device} gives {have / 2**30:.1f} GiB; raise `resources: {{gpu: ...}}` "
            f"(a larger share), lower batch_size / max_len{bf16}")


# ------------------------------------------------------------------ the measurement
def _cuda_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                    is_causal: bool = False, scale: float | None = None) -> torch.Tensor:
    """F.scaled_dot_product_attention as CUDA runs it in fp32 (the memory-efficient kernel):
    a bool mask becomes an additive one, broadcast without a copy."""
    B, H, L, _ = q.shape
    bias = None
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            attn_mask = torch.zeros(attn_mask.shape, dtype=q.dtype, device=q.device) \
                .masked_fill(~attn_mask, -math.inf)
        bias = attn_mask.expand(B, H, L, k.shape[-2])
    return torch.ops.aten._scaled_dot_product_efficient_attention(
        q, k, v, bias, True, dropout_p, is_causal, scale=scale)[0]


@contextmanager
def _cuda_like_attention() -> Iterator[None]:
    """F.scaled_dot_product_attention is `_cuda_attention` inside (torch.nn.functional's own
    attribute: the standard encoder looks it up there on every call); restored on exit."""
    original = encoder_module.F.scaled_dot_product_attention
    encoder_module.F.scaled_dot_product_attention = _cuda_attention
    try:
        yield
    finally:
        encoder_module.F.scaled_dot_product_attention = original


def saved_activation_bytes(config: Any) -> int:
    """Bytes autograd saves in one training step of the trial's model at its longest padded
    batch, on `meta` (every storage counted once; parameters not counted)."""
    model = meta_model(config)
    model.train()
    B, L = longest_batch(config)
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        saved[s._cdata] = s.nbytes()
        return t

    params = {p.untyped_storage()._cdata for p in model.parameters()}
    ids = torch.ones(B, L, dtype=torch.long, device="meta")
    y = torch.zeros(B, dtype=torch.long, device="meta")
    with _cuda_like_attention(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = F.cross_entropy(model(ids, True), y)  # a padded batch: the mask is built
        aux = model.aux_loss()
        (loss if aux is None else loss + aux).backward()
    return sum(n for k, n in saved.items() if k not in params)


def measured_gpu_bytes(config: Any) -> int:
    """The measurement `gpu_memory_bytes` is checked against: the CUDA context (the same
    constant) + fp32 weights, gradients and Adam moments + the bytes saved for the backward
    (`saved_activation_bytes`, fp32)."""
    return int(CUDA_CONTEXT_BYTES + TRAINED_STATE_BYTES * parameter_count(config)
               + saved_activation_bytes(config))

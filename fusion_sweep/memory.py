"""A trial's Ray `memory` resource: the space's `memory_gb`, else an estimate from its config."""
from __future__ import annotations

from typing import Any

from fusion_sweep.space import SearchSpace
from fusion_sweep.trial.data.registry import DATASETS
from fusion_sweep.trial.data.synthetic import SyntheticParams
from fusion_sweep.trial.data.tokenize import TokenizerSettings
from fusion_sweep.trial.models.encoder import ENCODERS

# Ray's local node offers roughly this share of physical memory as its `memory` resource.
RAY_MEMORY_SHARE = 0.6
# What a trial actor holds before training: Python, torch, Ray worker, MLflow client (an idle
# ray::ImplicitFunc actor measured ~0.55 GB RSS here).
ACTOR_BASE_BYTES = 768 << 20


def trial_memory_bytes(space: SearchSpace, config: Any) -> int:
    """Ray `memory` resource of one trial: the space's `resources.memory_gb`, else an estimate
    from the config, so Ray never packs more trials onto a node than fit in its memory.

    Estimate (fp32, bytes): the actor's base + 4 copies of the parameters (weights, grads, two
    Adam moments) + on CPU one training step's activations at the longest padded batch: per
    attention map the encoder keeps (`ENCODERS[name].attention_maps`: one per layer for the
    standard encoder) ~16 (B, L, d)-sized tensors and a (B, H, L, L) attention tensor — 4 of
    them (scores, probabilities, dropout mask, gradient) when attention dropout forces the
    materialising path, else 1 — × 1.5 for the allocator's slack. A GPU trial keeps its activations in GPU
    memory, which Ray's `memory` resource does not count. Embedding rows are bounded by the
    50k-token vocabulary cap (synthetic regimes: their filler vocabulary). L is max_len, or the
    dataset's own cap on a document's length where it has one (`DatasetSpec.length_cap`).
    """
    if space.memory_gb is not None:
        return int(space.memory_gb * 2**30)
    c = config
    spec = DATASETS[c.dataset]
    vocab = SyntheticParams.from_mapping(spec.synthetic).filler_vocab + 64 if spec.generated \
        else TokenizerSettings.max_size  # the vocabulary cap
    params = vocab * c.d_model + c.layers * (4 * c.d_model ** 2 + 2 * c.d_model * c.dim_ff) \
        + 3 * c.d_model ** 2 + c.max_len * c.d_model
    if space.gpu > 0:
        return int(ACTOR_BASE_BYTES + 2 * 4 * params)  # a host copy of weights and checkpoint
    # A batch is padded to its longest document, which the dataset may bound below max_len.
    B, L, H = c.batch_size, min(c.max_len, spec.length_cap() or c.max_len), c.heads
    attn = 4 if c.attn_dropout > 0 else 1
    maps = ENCODERS[c.encoder].attention_maps(c)  # attention-sized tensors per step
    acts = maps * 16 * B * L * max(c.d_model, c.dim_ff // 2) + attn * maps * B * H * L * L
    return int(ACTOR_BASE_BYTES + 4 * 4 * params + 1.5 * 4 * acts)

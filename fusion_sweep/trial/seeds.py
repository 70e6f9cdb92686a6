"""Every random stream of a trial, and the seeded build of its model (docs/protocol.md).

Each stream (data order, embedding/classifier init, encoder-body init, fusion init, PE init,
dropout) has its own seed derived from `(config.seed, stream_dataset(config))`: two trials
with the same seed differ only in their variant, and trials of different datasets never start
from correlated weights. The model is built under a forked global RNG, before the dropout
stream is seeded, so a variant's extra layers cannot shift the dropout masks of the layers it
shares. One home for the streams: the trainer (`trainer.py`) only calls these.
"""
from __future__ import annotations

import zlib
from contextlib import contextmanager
from typing import Iterator

import numpy as np
import torch
import torch.nn.functional as F

from fusion_sweep.trial.batching import epoch_batches, truncated_lengths
from fusion_sweep.trial.config import TrialConfig
from fusion_sweep.trial.data.registry import DATASETS
from fusion_sweep.trial.data.types import EncodedSplit
from fusion_sweep.trial.models.encoder import FusionClassifier, construct_model, initialize

# Appended, never reordered: a stream's seed depends on its index (`derive_seed`).
STREAMS = ("data_order", "shared_init", "fusion_init", "pe_init", "dropout", "encoder_init")


def derive_seed(seed: int, stream: str, dataset: str) -> int:
    """Independent 63-bit seed for one random stream of one (trial seed, dataset).

    crc32, not hash(): Python's str hash is salted per process.
    """
    entropy = [seed, STREAMS.index(stream), zlib.crc32(dataset.encode())]
    return int(np.random.SeedSequence(entropy).generate_state(2, np.uint64)[0] >> 1)


def stream_dataset(config: TrialConfig) -> str:
    """The dataset name a trial's random streams are derived from: its own, except for a
    structure-noise probe, which trains exactly as its clean regime (same init, batch order and
    dropout; `DatasetSpec.stream_name`) so the two differ only in the perturbed test set."""
    return DATASETS[config.dataset].stream_name


def build_model(config: TrialConfig, vocab_size: int, num_classes: int, pad_id: int = 0) -> FusionClassifier:
    """The classifier with every group initialised from its own stream.

    The constructors' default initialisation draws from the global RNG (overwritten by
    `initialize` right after); the fork keeps those draws away from the caller's RNG and the
    dropout stream, so variants with more layers leave both untouched.
    """
    with torch.random.fork_rng(devices=[]):
        model = construct_model(config, vocab_size, num_classes, pad_id)
    d = stream_dataset(config)
    initialize(model, {"shared": derive_seed(config.seed, "shared_init", d),
                       "encoder": derive_seed(config.seed, "encoder_init", d),
                       "fusion": derive_seed(config.seed, "fusion_init", d),
                       "pe": derive_seed(config.seed, "pe_init", d)})
    return model


def training_schedule(train: EncodedSplit, config: TrialConfig) -> list[list[np.ndarray]]:
    """Every epoch's batches, planned up front from (data, seed) only."""
    lengths = truncated_lengths(train, config.max_len)
    seed = derive_seed(config.seed, "data_order", stream_dataset(config))
    return [epoch_batches(lengths, config.batch_size, seed, e) for e in range(config.epochs)]


@contextmanager
def dropout_stream(seed: int, device: torch.device) -> Iterator[str]:
    """Dropout has no generator argument, so give it the global RNG — forked, seeded from its
    own stream, and restored afterwards, so nothing outside the trial sees or shifts it.

    Yields the dropout fingerprint: a hash of a dropout mask drawn from the stream as the
    first training step would draw it (then the stream is put back). Enter it after the
    model is built (see `build_model`).
    """
    devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices, device_type="cuda" if devices else "cpu"):
        torch.manual_seed(seed)
        yield dropout_fingerprint(device)


# Elements of the mask the dropout fingerprint draws (p = 0.5: one bit of the stream each).
DROPOUT_PROBE = 4096


def dropout_fingerprint(device: torch.device) -> str:
    """sha256 (16 hex) of a dropout mask (F.dropout, p 0.5, DROPOUT_PROBE elements) drawn on
    `device` from the RNG now, which is then restored: two trials agree only if their
    dropout draws do, whatever their generator's seed or state layout (a seed hash would
    agree across a CPU and a GPU whose dropout differs)."""
    import hashlib

    devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices, device_type="cuda" if devices else "cpu"):
        kept = F.dropout(torch.ones(DROPOUT_PROBE, device=device), 0.5, training=True) != 0
    return hashlib.sha256(kept.cpu().numpy().tobytes()).hexdigest()[:16]

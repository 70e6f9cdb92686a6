"""Seeded, length-bucketed batching with dynamic padding.

Batch composition is a function of (documents, seed, epoch, batch_size, max_len) only —
never of the fusion or PE — so every variant of a paired comparison sees the same batches.
"""
from __future__ import annotations

import hashlib
from typing import Iterable, Iterator

import numpy as np

from fusion_sweep.trial.data.types import EncodedSplit

# Documents are shuffled, then sorted by length inside pools of POOL_BATCHES batches: padding
# drops to a few percent while batches stay random at the scale of the pool.
POOL_BATCHES = 50


def truncated_lengths(split: EncodedSplit, max_len: int) -> np.ndarray:  # (N,) int64
    return np.minimum(split.lengths(), max_len)


def epoch_batches(lengths: np.ndarray, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    """Training batches (arrays of document indices) for one epoch."""
    rng = np.random.default_rng([seed, epoch])
    perm = rng.permutation(len(lengths))
    pool = batch_size * POOL_BATCHES
    batches: list[np.ndarray] = []
    for start in range(0, len(perm), pool):
        chunk = perm[start: start + pool]
        chunk = chunk[np.argsort(-lengths[chunk], kind="stable")]
        batches.extend(chunk[i: i + batch_size] for i in range(0, len(chunk), batch_size))
    order = rng.permutation(len(batches))
    return [batches[i] for i in order]


def eval_batches(lengths: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Deterministic evaluation batches, sorted by length (least padding)."""
    order = np.argsort(-lengths, kind="stable")
    return [order[i: i + batch_size] for i in range(0, len(order), batch_size)]


def schedule_hash(schedule: list[list[np.ndarray]]) -> str:
    """Fingerprint of the whole planned batch order (every epoch, every batch)."""
    h = hashlib.sha256()
    for epoch in schedule:
        for b in epoch:
            h.update(np.asarray(b, dtype=np.int64).tobytes())
            h.update(b"|")
        h.update(b"#")
    return h.hexdigest()[:16]


def pad_batch(split: EncodedSplit, index: np.ndarray, max_len: int, pad_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """-> ids (B, L_batch) int64 right-padded with pad_id, labels (B,) int64.

    L_batch is the longest truncated document in the batch (dynamic padding).
    """
    starts = split.offsets[index]
    lens = np.minimum(split.offsets[index + 1] - starts, max_len)
    L = max(int(lens.max()), 1)
    ids = np.full((len(index), L), pad_id, dtype=np.int64)
    for row, (s, n) in enumerate(zip(starts, lens)):
        ids[row, :n] = split.ids[s: s + n]
    return ids, split.labels[index]


def pad_batches(split: EncodedSplit, batches: Iterable[np.ndarray], max_len: int,
                pad_id: int = 0) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """`pad_batch(split, b, max_len, pad_id)` for each batch, lazily, the same arrays, but each
    batch is gathered in one vectorised numpy pass instead of a Python loop over its rows."""
    lengths = np.minimum(split.lengths(), max_len)
    for index in batches:
        index = np.asarray(index, dtype=np.int64)
        lens = lengths[index]
        L = max(int(lens.max()), 1) if len(index) else 1
        cols = np.arange(L)
        keep = cols < lens[:, None]  # (B, L)
        if split.ids.size:
            tokens = split.ids[np.where(keep, split.offsets[index][:, None] + cols, 0)]
            ids = np.where(keep, tokens, pad_id).astype(np.int64)
        else:
            ids = np.full((len(index), L), pad_id, dtype=np.int64)
        yield ids, split.labels[index]

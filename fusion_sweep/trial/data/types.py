"""Array containers shared by the data pipeline and the trainer (no torch here)."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from fusion_sweep.errors import UserError


@dataclass(frozen=True)
class EncodedSplit:
    """A ragged batch of token-id documents stored flat (CSR-style).

    ids:     (T,) int32   all documents' token ids concatenated (no padding, no truncation)
    offsets: (N+1,) int64 document i is ids[offsets[i]:offsets[i+1]]
    labels:  (N,) int64   class index in [0, num_classes)
    """

    ids: np.ndarray
    offsets: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def lengths(self) -> np.ndarray:  # (N,) int64
        return np.diff(self.offsets)

    def doc(self, i: int) -> np.ndarray:
        return self.ids[self.offsets[i]: self.offsets[i + 1]]

    def subset(self, index: np.ndarray) -> "EncodedSplit":
        """Documents `index` (in that order), re-packed."""
        index = np.asarray(index, dtype=np.int64)
        lens = self.lengths()[index]
        offsets = np.zeros(len(index) + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        ids = (np.concatenate([self.doc(int(i)) for i in index]) if len(index)
               else np.zeros(0, dtype=np.int32)).astype(np.int32, copy=False)
        return EncodedSplit(ids=ids, offsets=offsets, labels=self.labels[index].copy())

    def digest(self) -> str:
        h = hashlib.sha256()
        for a in (self.ids, self.offsets, self.labels):
            h.update(np.ascontiguousarray(a).tobytes())
        return h.hexdigest()


@dataclass(frozen=True)
class EncodedData:
    """A dataset ready for training: three encoded splits and their vocabulary size."""

    name: str
    train: EncodedSplit
    val: EncodedSplit
    test: EncodedSplit
    vocab_size: int
    num_classes: int
    pad_id: int = 0
    unk_id: int = 1

    def fingerprint(self, max_len: int, include_test: bool) -> str:
        """The `split` fingerprint: sha256 (16 hex) of the exact documents and labels of every
        split a trial reads, with the vocabulary size, class count and truncation length."""
        h = hashlib.sha256(f"{self.name}|{self.vocab_size}|{self.num_classes}|{max_len}".encode())
        for s in (self.train, self.val) + ((self.test,) if include_test else ()):
            h.update(s.digest().encode())
        return h.hexdigest()[:16]


def validate_encoded(data: EncodedData, *, include_test: bool = True) -> None:
    """Raise ValueError naming the split when it is empty or has labels outside [0, C)."""
    splits = [("train", data.train), ("val", data.val)] + ([("test", data.test)] if include_test else [])
    for name, split in splits:
        if len(split) == 0:
            raise UserError(f"dataset {data.name!r}: the {name} split is empty; "
                             f"check the data source or raise limit_train/limit_eval")
        bad = (split.labels < 0) | (split.labels >= data.num_classes)
        if bad.any():
            v = int(split.labels[np.argmax(bad)])
            raise UserError(f"dataset {data.name!r}: {name} split has label {v} outside "
                             f"[0, {data.num_classes}) (num_classes={data.num_classes})")

"""Built-in synthetic length-regime benchmark: labels that depend on token ORDER only.

Task. Every document is Zipf-distributed filler words ("w0", "w1", ... drawn i.i.d. with
P(rank r) ∝ (r+1)^-s) plus the same m marker words ("marker_a", "marker_b", ...), each exactly
once (as a run of `marker_run` identical tokens, e.g. "marker_a marker_a marker_a marker_a"),
where m is the smallest number with m! >= num_classes. The class c is the ORDER in which
the markers appear: the c-th permutation of the markers in lexicographic order (so class 0 reads
a..b..c, class 1 a..c..b, ...). Marker positions are m distinct positions drawn uniformly
(within a uniformly placed window if `marker_window` > 0); the document length is drawn from
the regime's length distribution (a clipped log-normal), independently of the class.

Why a position-free model is at chance. Length, filler words and the marker SET are drawn
independently of the class, and permuting which marker sits at which of the (uniform) marker
positions does not change the bag of tokens. So the multiset of tokens has exactly the same
distribution in every class; any function of the multiset - e.g. an encoder without positional
information followed by mean pooling (self-attention without positions is permutation-
equivariant) - has the same output distribution in every class: chance accuracy.
This holds only while the model sees the whole document: TRUNCATION would drop a
class-dependent marker (the last one in order), so each regime's `max_len` hyperparameter
covers its longest document (registry.py), and `max_len` here is a hard cap.

Why difficulty grows with length. The m marker runs are the only informative tokens; as the
document gets longer they get sparser (m * marker_run / L), lie further apart, and their
contribution to a mean-pooled representation shrinks as 1/L. The built-in regimes pose the
same task at different lengths (registry.py), and benchmarks/learning_curve.py measures how
many more steps a fixed model needs as L grows. With whole-document placement the absolute
positions of the markers already tell their order (a per-token position readout plus mean
pooling suffices); `marker_window` > 0 removes that shortcut and makes the order a relative,
translation-invariant pattern (much harder: with single-token markers, windows of 2 and 16
tokens stayed at chance for 300-400 steps of batch 32 at median length 128).

Structure noise (the `-shuffled` regimes, ReSSFormer's ShuffledWiki counterpart). With
`shuffle_segments` = k > 0, every TEST document is cut into k segments at uniformly drawn
boundaries that never split a marker run, and the segments are permuted uniformly, except that
the segments holding markers keep their relative order (they are reassigned, in order, to the
slots the permutation gave them). Inside a segment nothing moves. So the label (which marker
comes first) is unchanged, every marker keeps its run, but absolute positions and most
distances change: a model that reads order from absolute positions is perturbed, one that reads
the relative order of the markers is not. Training and validation documents are untouched and,
with `base` naming the clean regime, byte-identical to it (the clean regime's random streams):
the probe is a shift at test time only, like training on Wikipedia and testing on ShuffledWiki.

Generation is deterministic in (data_seed, dataset name, split): each split draws from its own
`numpy.random.SeedSequence([data_seed, crc32(name), split_index])` stream, so changing one
split's size leaves the others unchanged, and the trial seed is never involved.
The output is TEXT that goes through the same tokenizer as real data, so the pipeline
(vocabulary, <unk>, caching) is identical for real and synthetic datasets.
"""
from __future__ import annotations

import itertools
import math
import zlib
from dataclasses import MISSING, dataclass, fields
from typing import Any, Mapping

import numpy as np

from fusion_sweep.errors import UserError, choices

# Bump when generated text changes for the same parameters: it is part of the cache key.
GENERATOR_VERSION = "order-markers-v1"
SPLITS = ("train", "validation", "test")
MARKER_PREFIX = "marker_"


@dataclass(frozen=True)
class SyntheticParams:
    """Generator parameters of one regime (filled from registry.DatasetSpec.synthetic)."""

    n_train: int
    n_val: int
    n_test: int
    len_median: float  # median document length in tokens (markers included)
    len_sigma: float  # log-normal shape: larger = longer tail
    min_len: int
    max_len: int  # hard cap; the regime's max_len hyperparameter must be >= this
    filler_vocab: int = 500
    zipf_s: float = 1.1
    num_markers: int = 0  # 0 = the smallest m with m! >= num_classes
    # Markers fall inside one window of this many tokens at a uniform offset; 0 = the whole
    # document. A difficulty knob: small windows make the order a local pattern.
    marker_window: int = 0
    # Each marker is a run of this many consecutive copies ("marker_a marker_a ..."), so a
    # marker is a short phrase rather than one token. A difficulty knob: the informative share
    # of a document (and of its mean-pooled representation) is m * marker_run / length.
    # 1 = one token per marker (the original benchmark, byte-identical text).
    marker_run: int = 1
    # Structure noise at test time: cut each test document into this many segments and permute
    # them, markers' relative order kept (see the module docstring); 0 = no shuffling.
    shuffle_segments: int = 0
    # Draw documents from this regime's random streams instead of the dataset's own ("" = own):
    # a shuffled regime then has exactly its clean regime's train/validation/test documents.
    base: str = ""

    @classmethod
    def from_mapping(cls, d: Mapping[str, Any]) -> "SyntheticParams":
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(d) - known)
        if unknown:
            raise UserError(f"unknown synthetic parameter(s) {choices(unknown)}; choose from "
                            f"{choices(sorted(known))}")
        required = [f.name for f in fields(cls) if f.default is MISSING]
        missing = [k for k in required if k not in d]
        if missing:
            raise UserError(f"missing synthetic parameter(s) {choices(missing)}; required: "
                            f"{choices(required)}")
        return cls(**dict(d))

    def sizes(self) -> dict[str, int]:
        return {"train": self.n_train, "validation": self.n_val, "test": self.n_test}


def markers_needed(num_classes: int) -> int:
    """Smallest m with m! >= num_classes (each class needs its own marker order)."""
    m = 1
    while math.factorial(m) < num_classes:
        m += 1
    return m


def class_orders(num_classes: int, num_markers: int) -> np.ndarray:
    """(num_classes, m) int: row c = the c-th permutation of range(m) in lexicographic order."""
    perms = itertools.islice(itertools.permutations(range(num_markers)), num_classes)
    return np.array(list(perms), dtype=np.int64).reshape(num_classes, num_markers)


def marker_words(num_markers: int) -> list[str]:
    return [f"{MARKER_PREFIX}{chr(ord('a') + i)}" for i in range(num_markers)]


def validate_params(p: SyntheticParams, num_classes: int) -> list[str]:
    """All problems at once, each naming the field."""
    errs: list[str] = []
    for name in ("n_train", "n_val", "n_test", "min_len", "max_len", "filler_vocab", "marker_run"):
        v = getattr(p, name)
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            errs.append(f"synthetic {name} must be a positive integer, got {v!r}")
    for name in ("num_markers", "marker_window", "shuffle_segments"):
        v = getattr(p, name)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            errs.append(f"synthetic {name} must be a non-negative integer, got {v!r}")
    if errs:
        return errs
    m = p.num_markers or markers_needed(num_classes)
    if m > 26 or math.factorial(m) < num_classes:
        errs.append(f"synthetic num_markers={m} cannot encode {num_classes} classes "
                    f"(need m! >= num_classes and m <= 26)")
    if p.min_len < m * p.marker_run:
        errs.append(f"synthetic min_len ({p.min_len}) must be >= the number of marker tokens "
                    f"({m} markers x marker_run {p.marker_run} = {m * p.marker_run})")
    if p.max_len < p.min_len:
        errs.append(f"synthetic max_len ({p.max_len}) must be >= min_len ({p.min_len})")
    if 0 < p.marker_window < m * p.marker_run:
        errs.append(f"synthetic marker_window ({p.marker_window}) must be 0 (whole document) or "
                    f">= the number of marker tokens ({m} markers x marker_run {p.marker_run})")
    if not (p.len_median > 0 and p.len_sigma >= 0 and p.zipf_s > 0):
        errs.append(f"synthetic len_median ({p.len_median}) and zipf_s ({p.zipf_s}) must be > 0 "
                    f"and len_sigma ({p.len_sigma}) >= 0")
    return errs


def _rng(data_seed: int, name: str, split: str) -> np.random.Generator:
    # crc32, not hash(): Python's str hash is salted per process.
    return np.random.default_rng(
        np.random.SeedSequence([data_seed, zlib.crc32(name.encode()), SPLITS.index(split)]))


def zipf_cdf(filler_vocab: int, s: float) -> np.ndarray:
    """(V,) float64 cumulative probabilities of ranks 0..V-1 under P(r) ∝ (r+1)^-s."""
    w = np.arange(1, filler_vocab + 1, dtype=np.float64) ** -s
    cdf = np.cumsum(w / w.sum())
    cdf[-1] = 1.0  # guard against rounding so searchsorted never returns V
    return cdf


def draw_lengths(rng: np.random.Generator, n: int, p: SyntheticParams) -> np.ndarray:
    """(n,) int64 document lengths: clipped log-normal around the regime's median."""
    raw = np.exp(rng.normal(math.log(p.len_median), p.len_sigma, size=n))
    return np.clip(np.rint(raw), p.min_len, p.max_len).astype(np.int64)


def _marker_positions(rng: np.random.Generator, length: int, m: int, window: int) -> np.ndarray:
    """(m,) ascending distinct positions, uniform within a uniformly placed window."""
    span = length if window <= 0 else min(window, length)
    start = int(rng.integers(0, length - span + 1))
    return start + np.sort(rng.choice(span, size=m, replace=False))


def generate_split(name: str, split: str, n: int, num_classes: int, p: SyntheticParams,
                   data_seed: int) -> tuple[list[str], np.ndarray]:
    """Texts and (n,) int64 labels of one split; classes balanced to within one document."""
    texts, labels = _generate_clean(p.base or name, split, n, num_classes, p, data_seed)
    if split == "test" and p.shuffle_segments > 0:
        rng = _rng(data_seed, f"{name}/shuffle", split)  # its own stream: documents unchanged
        texts = [" ".join(shuffle_segments(t.split(" "), p.shuffle_segments, rng)) for t in texts]
    return texts, labels


def shuffle_segments(words: list[str], k: int, rng: np.random.Generator) -> list[str]:
    """Cut `words` into k segments (never inside a marker run) and permute them, the segments
    that hold markers keeping their relative order. Returns the same multiset of words."""
    is_marker = np.array([w.startswith(MARKER_PREFIX) for w in words])
    # Boundary i (between words i-1 and i) is allowed unless it splits a run of one marker.
    same_run = is_marker[1:] & is_marker[:-1] & (np.array(words[1:]) == np.array(words[:-1]))
    allowed = np.flatnonzero(~same_run) + 1  # candidate cut positions
    cuts = np.sort(rng.choice(allowed, size=min(k - 1, len(allowed)), replace=False))
    segments = np.split(np.arange(len(words)), cuts)
    order = rng.permutation(len(segments))  # order[slot] = segment placed in that slot
    holds = [bool(is_marker[seg].any()) for seg in segments]
    slots = [i for i, seg in enumerate(order) if holds[seg]]
    for slot, seg in zip(slots, [j for j in range(len(segments)) if holds[j]]):
        order[slot] = seg  # marker segments in their original order
    return [words[i] for seg in order for i in segments[seg]]


def _generate_clean(name: str, split: str, n: int, num_classes: int, p: SyntheticParams,
                    data_seed: int) -> tuple[list[str], np.ndarray]:
    rng = _rng(data_seed, name, split)
    m = p.num_markers or markers_needed(num_classes)
    orders = class_orders(num_classes, m)  # (K, m)
    markers = marker_words(m)
    fillers = np.array([f"w{r}" for r in range(p.filler_vocab)], dtype=object)

    labels = rng.permutation(np.arange(n, dtype=np.int64) % num_classes)  # (n,) balanced
    lengths = draw_lengths(rng, n, p)  # (n,) independent of labels
    cdf = zipf_cdf(p.filler_vocab, p.zipf_s)
    # Runs are placed as single tokens in a document shortened by m * (run - 1) tokens, then
    # expanded in place: the same uniform placement, and run == 1 draws exactly as before.
    extra = m * (p.marker_run - 1)
    window = p.marker_window - extra if p.marker_window > 0 else 0
    texts: list[str] = []
    for label, length in zip(labels, lengths):
        short = int(length) - extra
        words = fillers[np.searchsorted(cdf, rng.random(short), side="right")]
        pos = _marker_positions(rng, short, m, window)  # (m,) ascending
        for j, marker in enumerate(orders[label]):
            words[pos[j]] = markers[marker]
        if p.marker_run > 1:
            is_marker = np.zeros(short, dtype=bool)
            is_marker[pos] = True
            words = np.repeat(words, np.where(is_marker, p.marker_run, 1))  # (length,)
        texts.append(" ".join(words))
    return texts, labels


def generate(name: str, num_classes: int, params: Mapping[str, Any] | SyntheticParams,
             data_seed: int = 0) -> dict[str, tuple[list[str], np.ndarray]]:
    """{split: (texts, labels)} for "train", "validation" and "test"."""
    p = params if isinstance(params, SyntheticParams) else SyntheticParams.from_mapping(params)
    errs = validate_params(p, num_classes)
    if errs:
        raise UserError(f"invalid synthetic parameters for {name!r}:\n  " + "\n  ".join(errs))
    return {split: generate_split(name, split, n, num_classes, p, data_seed)
            for split, n in p.sizes().items()}


__all__ = ["GENERATOR_VERSION", "SyntheticParams", "generate", "generate_split", "shuffle_segments",
           "markers_needed", "class_orders", "marker_words", "zipf_cdf"]

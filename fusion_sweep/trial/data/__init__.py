"""Datasets for fusion-sweep: hub/local loaders, the synthetic benchmark, tokenization, cache.

The trainer calls one function:

    load_encoded(name, data_dir="", data_seed=0, cache_dir="", limit_train=0, limit_eval=0)
        -> EncodedData (train / val / test as flat int32 ids + int64 offsets + int64 labels)

Pipeline: raw (text, label) splits -> label and emptiness checks -> validation split ->
vocabulary on TRAIN only -> ids -> cache. Validation is the source's own split when it has
one (ArXiv on the hub), else a seeded 10% of train (AG News and IMDB, which have none; the
IMDB "unsupervised" split is unlabeled and never read). A local copy with a validation file
uses it, whatever the hub does.
Documents are neither truncated nor padded here (the trainer does both per batch).
Everything up to the cache is keyed by a content hash; `limit_*` subsampling happens after,
so every limit reuses one cache entry. No torch here: numpy only.
"""
from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from fusion_sweep.errors import UserError, choices
from fusion_sweep.trial.data import synthetic
from fusion_sweep.trial.data.cache import (cache_root, cached_digest, content_key, entry_path,
                                           get_or_build, read_entry)
from fusion_sweep.trial.data.hub import (DatasetUnavailableError, RawSplits, Source,
                                         local_files, open_source)
from fusion_sweep.trial.data.package import package_source
from fusion_sweep.trial.data.registry import DATASETS, DatasetSpec, get_spec
from fusion_sweep.trial.data.tokenize import PAD_ID, UNK_ID, TokenizerSettings, build_vocab, encode
from fusion_sweep.trial.data.types import EncodedData, EncodedSplit

# Bump when the split / validation / subsampling logic changes: part of every cache key.
PIPELINE_VERSION = "pipeline-v1"
VAL_FRACTION = 0.1
# Independent numpy streams derived from data_seed (never from the trial seed).
_STREAM_VAL = 0x7A1  # carving validation out of train
_STREAM_LIMIT = {"train": 0x11A1, "val": 0x11A2, "test": 0x11A3}
_SPLIT_LABEL = {"train": "train", "val": "validation", "test": "test"}


def load_encoded(name: str, *, data_dir: str = "", data_seed: int = 0, cache_dir: str = "",
                 limit_train: int = 0, limit_eval: int = 0,
                 synthetic_overrides: Mapping[str, Any] | None = None) -> EncodedData:
    """Tokenized train/val/test of dataset `name` (cached; see the module docstring).

    data_dir:            a local copy of a hub dataset ("" = the Hugging Face hub).
    data_seed:           seeds the validation carve-out, synthetic generation and `limit_*`.
    cache_dir:           "" = $FUSION_SWEEP_CACHE or ~/.cache/fusion-sweep.
    limit_train/_eval:   0 = all; else a deterministic subsample (limit_eval: val and test each).
    synthetic_overrides: replace some generator parameters of a synthetic dataset.
    """
    spec, source, path = _plan(name, data_dir, data_seed, cache_dir, limit_train, limit_eval,
                               synthetic_overrides)
    data, _ = get_or_build(path, lambda: _build(spec, source, data_seed, TokenizerSettings()))
    return apply_limits(data, limit_train, limit_eval, data_seed, pairs=spec.paired_documents)


def _plan(name: str, data_dir: str, data_seed: int, cache_dir: str, limit_train: int,
          limit_eval: int, synthetic_overrides: Mapping[str, Any] | None
          ) -> tuple[DatasetSpec, Source, Path]:
    """Validate the arguments, open the raw source and name its cache entry."""
    spec = get_spec(name)
    _check_args(spec, data_dir, data_seed, limit_train, limit_eval, synthetic_overrides)
    source = _open(spec, data_dir, data_seed, cache_dir, synthetic_overrides)
    key = content_key({"dataset": name, "num_classes": spec.num_classes, "source": source.identity,
                       "tokenizer": TokenizerSettings().key(), "data_seed": data_seed,
                       "validation": [spec.val_split, VAL_FRACTION], "pipeline": PIPELINE_VERSION})
    return spec, source, entry_path(cache_root(cache_dir), name, key)


# --------------------------------------------------------------------------- checks
def _check_args(spec: DatasetSpec, data_dir: str, data_seed: int, limit_train: int,
                limit_eval: int, synthetic_overrides: Mapping[str, Any] | None) -> None:
    for field, v in (("data_seed", data_seed), ("limit_train", limit_train), ("limit_eval", limit_eval)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 0:
            raise UserError(f"{field} must be a non-negative integer, got {v!r}")
    if spec.generated and data_dir:
        hub = sorted(n for n, s in DATASETS.items() if not s.generated)
        raise UserError(f"data_dir applies only to hub and package datasets ({choices(hub)}); "
                        f"dataset {spec.name!r} is generated from data_seed")
    if not spec.generated and synthetic_overrides:
        raise UserError(f"synthetic_overrides apply only to synthetic datasets, not {spec.name!r}")


def check_split(dataset: str, split: str, labels: np.ndarray, num_classes: int) -> None:
    """ValueError naming the split when it is empty or has labels outside [0, num_classes)."""
    if len(labels) == 0:
        raise UserError(f"dataset {dataset!r}: the {split!r} split is empty; every split needs "
                         f"at least one document")
    bad = (labels < 0) | (labels >= num_classes)
    if bad.any():
        v = int(labels[np.argmax(bad)])
        raise UserError(f"dataset {dataset!r}: the {split!r} split has label {v} outside the valid "
                         f"range [0, {num_classes}) (num_classes={num_classes}; {int(bad.sum())} of "
                         f"{len(labels)} labels out of range; labels must be 0-based class ids)")


# --------------------------------------------------------------------------- building
def _open(spec: DatasetSpec, data_dir: str, data_seed: int, cache_dir: str,
          synthetic_overrides: Mapping[str, Any] | None) -> Source:
    if spec.generated:
        return _synthetic_source(spec, data_seed, synthetic_overrides)
    if spec.kind == "package":
        return package_source(spec, data_dir, data_seed, cache_dir)
    return open_source(spec, data_dir)


def local_identity(name: str, data_dir: str, cache_dir: str = "") -> Any:
    """What the local copy at `data_dir` holds, by content: the sha256 of every file a trial
    reads from it (`hub.local_files`; computed once per file size and mtime, `cached_digest`),
    by name within the copy, never by the copy's path: moving it keeps the value, editing a
    file changes it. None where the copy cannot differ: a package dataset's artefact is checked
    against its registered sha256 (part of the registry entry), and a generated dataset has no
    copy. The trial key holds it (trial/components.py), not the path."""
    spec = get_spec(name)
    if spec.generated or spec.kind == "package" or not data_dir:
        return None
    root = Path(data_dir).expanduser()
    return [[rel, cached_digest(root / rel, cache_dir)] for rel in local_files(spec, root)]


def _synthetic_source(spec: DatasetSpec, data_seed: int,
                      overrides: Mapping[str, Any] | None) -> Source:
    params = synthetic.SyntheticParams.from_mapping({**spec.synthetic, **(overrides or {})})
    identity = {"kind": "synthetic", "generator": synthetic.GENERATOR_VERSION,
                "params": dataclasses.asdict(params)}

    def load() -> RawSplits:
        return synthetic.generate(spec.name, spec.num_classes, params, data_seed)

    return Source(f"synthetic generator ({spec.name})", identity, load)


def carve_validation(n: int, data_seed: int, fraction: float = VAL_FRACTION
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(train_idx, val_idx), both sorted: a seeded `fraction` of range(n) becomes validation."""
    rng = np.random.default_rng([data_seed, _STREAM_VAL])
    n_val = max(1, int(round(fraction * n)))
    perm = rng.permutation(n)
    return np.sort(perm[n_val:]), np.sort(perm[:n_val])


def _build(spec: DatasetSpec, source: Source, data_seed: int, settings: TokenizerSettings
           ) -> tuple[EncodedData, list[str], dict[str, Any]]:
    raw = source.load()
    for split, (_, labels) in raw.items():
        check_split(spec.name, split, labels, spec.num_classes)
    train_texts, train_labels = raw["train"]
    carved = "validation" not in raw
    if carved and spec.val_split == "split":
        warnings.warn(f"dataset {spec.name!r}: {source.description} has no validation split; "
                      f"using a seeded {VAL_FRACTION:.0%} of train instead", stacklevel=3)
    if carved:
        if len(train_labels) < 2:
            raise UserError(f"dataset {spec.name!r}: the 'train' split has {len(train_labels)} "
                             f"document(s); at least 2 are needed to carve a validation split")
        tr, va = carve_validation(len(train_labels), data_seed)
        raw["validation"] = ([train_texts[i] for i in va], train_labels[va])
        raw["train"] = ([train_texts[i] for i in tr], train_labels[tr])
    vocab = build_vocab(raw["train"][0], min_freq=settings.min_freq, max_size=settings.max_size)
    splits = {}
    for attr in ("train", "val", "test"):
        texts, labels = raw[_SPLIT_LABEL[attr]]
        ids, offsets = encode(texts, vocab)
        splits[attr] = EncodedSplit(ids=ids, offsets=offsets, labels=labels.astype(np.int64))
    data = EncodedData(name=spec.name, vocab_size=len(vocab), num_classes=spec.num_classes,
                       pad_id=PAD_ID, unk_id=UNK_ID, **splits)
    meta = {"source": source.description, "identity": source.identity, "data_seed": data_seed,
            "validation_carved_from_train": carved, "tokenizer": settings.key(),
            "sizes": {a: len(s) for a, s in splits.items()}}
    return data, vocab, meta


# --------------------------------------------------------------------------- subsampling
def subsample(split: EncodedSplit, limit: int, data_seed: int, which: str,
              pairs: bool = False) -> EncodedSplit:
    """`limit` documents drawn without replacement from a data_seed stream (order kept).

    pairs: the split holds adjacent (original, perturbed) pairs (an order probe); whole pairs
    are drawn, limit // 2 of them, so that a position-free model stays exactly at chance."""
    if limit <= 0 or limit >= len(split):
        return split
    rng = np.random.default_rng([data_seed, _STREAM_LIMIT[which]])
    if not pairs:
        return split.subset(np.sort(rng.choice(len(split), size=limit, replace=False)))
    first = 2 * np.sort(rng.choice(len(split) // 2, size=max(limit // 2, 1), replace=False))
    return split.subset(np.stack([first, first + 1], axis=1).reshape(-1))  # (2·pairs,)


def apply_limits(data: EncodedData, limit_train: int, limit_eval: int, data_seed: int,
                 pairs: bool = False) -> EncodedData:
    if limit_train <= 0 and limit_eval <= 0:
        return data
    return EncodedData(name=data.name, vocab_size=data.vocab_size, num_classes=data.num_classes,
                       pad_id=data.pad_id, unk_id=data.unk_id,
                       train=subsample(data.train, limit_train, data_seed, "train", pairs),
                       val=subsample(data.val, limit_eval, data_seed, "val", pairs),
                       test=subsample(data.test, limit_eval, data_seed, "test", pairs))


# --------------------------------------------------------------------------- statistics
def median_length(split: EncodedSplit) -> float:
    """Median document length in tokens (before truncation); nan for an empty split."""
    lengths = split.lengths()
    return float(np.median(lengths)) if len(lengths) else float("nan")


# --------------------------------------------------------------------------- listing
def describe(name: str, *, cache_dir: str = "", data_seed: int = 0) -> dict[str, Any]:
    """One dataset's facts for `fusion-sweep datasets`: name, kind, classes, source, licence,
    what its label depends on, and per split the document count, median and p90 length in
    tokens (after the entry's truncation) when its tokenized cache entry for `data_seed`
    exists (None until the first trial builds it; nothing is fetched or built here)."""
    spec = get_spec(name)
    out: dict[str, Any] = {
        "name": name, "kind": spec.kind, "num_classes": spec.num_classes,
        "classes": list(spec.labels), "source": spec.source, "licence": spec.licence_text,
        "label_depends": spec.label_depends, "max_len": spec.defaults().get("max_len"),
        "data_seed": data_seed, "lengths": None}
    if spec.artefact is not None:
        a = spec.artefact
        out["artefact"] = {"registry": a.registry, "requirement": a.requirement,
                           "file": a.filename, "sha256": a.sha256}
    try:
        _, _, path = _plan(name, "", data_seed, cache_dir, 0, 0, None)
    except (ValueError, OSError):
        return out
    data = read_entry(path)
    if data is not None:
        out["lengths"] = {attr: _length_stats(getattr(data, attr)) for attr in ("train", "val", "test")}
    return out


def _length_stats(split: EncodedSplit) -> dict[str, float | int]:
    lengths = split.lengths()
    if not len(lengths):
        return {"docs": 0, "median": float("nan"), "p90": float("nan")}
    return {"docs": int(len(lengths)), "median": float(np.median(lengths)),
            "p90": float(np.percentile(lengths, 90)),
            "class_counts": np.bincount(split.labels).tolist()}


def list_datasets(*, cache_dir: str = "", data_seed: int = 0) -> list[dict[str, Any]]:
    """`describe` for every registry entry, in registry order."""
    return [describe(n, cache_dir=cache_dir, data_seed=data_seed) for n in DATASETS]


def format_listing(rows: list[dict[str, Any]]) -> str:
    """The human table of `fusion-sweep datasets` / `train --dataset list`."""
    lines = []
    for r in rows:
        classes = "/".join(r["classes"]) if r["classes"] else str(r["num_classes"])
        lines.append(f"{r['name']:<26} {r['kind']:<9} {r['num_classes']:>2} classes ({classes}); "
                     f"label depends on {r['label_depends']}; max_len {r['max_len']}")
        lines.append(f"    source:  {r['source']}")
        lines.append(f"    licence: {r['licence']}")
        if r["lengths"]:
            lines.append("    tokens:  " + "; ".join(
                f"{s} {v['docs']} docs, median {v['median']:g}, p90 {v['p90']:g}"
                for s, v in r["lengths"].items()) + f" (data_seed {r['data_seed']})")
        else:
            lines.append("    tokens:  not cached yet (a trial builds it)")
    return "\n".join(lines)


__all__ = ["load_encoded", "describe", "list_datasets", "format_listing", "median_length", "carve_validation", "subsample", "apply_limits", "check_split",
           "DatasetUnavailableError", "DATASETS", "DatasetSpec", "EncodedData", "EncodedSplit",
           "PIPELINE_VERSION"]

"""Raw (text, label) sources for real datasets: the Hugging Face hub and local copies.

A `Source` knows its identity (what the cache key hashes) before it reads any text, so a
cache hit never parses the corpus:
  * hub:           `datasets.load_dataset(hf_path)`; identity = (hf_path, config), so a cache
                   hit needs no network (the hub releases used here are frozen);
  * save_to_disk:  a folder with `dataset_dict.json`; identity = each split's datasets
                   fingerprint (from its `state.json`) and Arrow file sizes;
  * files:         `train.*`, `test.*` and optionally `validation.*` (also `val`, `valid`,
                   `dev`; shards such as `train-00000-of-00002.parquet`; in PATH or PATH/data)
                   as CSV, JSONL/JSON or Parquet with columns `text,label`;
                   identity = SHA-256 of every file's bytes.

Offline: when HF_DATASETS_OFFLINE / HF_HUB_OFFLINE is set, datasets fails at once unless the
dataset is already in its local cache. The variables are re-applied at call time, because
`datasets` reads them only when first imported (a Ray worker or a test may set them later).
Any hub failure becomes a `DatasetUnavailableError` that says how to supply a local copy.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from fusion_sweep.errors import UserError, choices
from fusion_sweep.trial.data.cache import cached_digest
from fusion_sweep.trial.data.registry import DatasetSpec

# Bump when parsing of raw sources changes: part of every cache key.
LOADER_VERSION = "raw-v1"
FORMATS: dict[str, str] = {".csv": "csv", ".jsonl": "jsonl", ".json": "json", ".parquet": "parquet"}
SPLIT_ALIASES: dict[str, tuple[str, ...]] = {
    "train": ("train",),
    "validation": ("validation", "valid", "val", "dev"),
    "test": ("test",),
}
REQUIRED_SPLITS = ("train", "test")
OFFLINE_VARS = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")
_TRUE = {"1", "ON", "YES", "TRUE"}  # datasets' own ENV_VARS_TRUE_VALUES
_FILE_RE = re.compile(r"^(?P<split>[a-z]+)(?:[-_.].*)?$")

ACCEPTED_LAYOUTS = (
    "PATH is either (a) a directory with train and test files (validation optional; in PATH or "
    "PATH/data) in one of the formats " + ", ".join(FORMATS) + " with columns 'text' and "
    "'label' (integer class ids from 0), or (b) a folder written by "
    "datasets.DatasetDict.save_to_disk with 'train' and 'test' splits"
)

RawSplits = dict[str, tuple[list[str], np.ndarray]]  # split -> (texts, labels (n,) int64)


class DatasetUnavailableError(UserError, ConnectionError):
    """The hub could not provide the dataset (offline, unreachable, not found)."""


@dataclass
class Source:
    """A raw dataset: cheap identity now, texts on demand."""

    description: str
    identity: dict[str, Any]
    loader: Callable[[], RawSplits] = field(repr=False)

    def load(self) -> RawSplits:
        return self.loader()


# --------------------------------------------------------------------------- values
def _as_text(v: Any) -> str:
    if isinstance(v, str):
        return v
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""  # a missing text is an empty document (encoded as a single <unk>)
    return str(v)


def _first_non_integer(items: list[Any]) -> Any:
    for v in items:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not float(v).is_integer():
            return v
    return None


def as_labels(values: Sequence[Any] | np.ndarray, where: str, num_classes: int) -> np.ndarray:
    """(n,) int64 labels, or a ValueError naming `where` when they are not integers."""
    arr = np.asarray(values)
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64)
    items = arr.tolist()  # Python scalars: floats such as 2.0 are accepted, 2.5 / "World" not
    bad = _first_non_integer(items)
    if bad is None:
        return np.asarray([int(v) for v in items], dtype=np.int64)
    raise UserError(f"{where}: labels must be integer class ids in [0, {num_classes}); "
                     f"found {bad!r} (dtype {arr.dtype})")


# --------------------------------------------------------------------------- local files
def _read_json(path: Path) -> Any:
    import pandas as pd

    text = path.read_text(encoding="utf-8")
    head = text.lstrip()[:1]
    if head == "[":
        return pd.DataFrame.from_records(json.loads(text))
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:  # several objects: JSON lines written as .json
        return pd.read_json(path, lines=True, dtype=False)
    if isinstance(obj, dict) and all(isinstance(v, list) for v in obj.values()):
        return pd.DataFrame(obj)  # {"text": [...], "label": [...]}
    return pd.DataFrame.from_records([obj])


def read_table(path: Path) -> Any:
    """A pandas DataFrame from a CSV, JSONL/JSON or Parquet file."""
    import pandas as pd

    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise UserError(unsupported_format(path))
    try:
        if fmt == "csv":
            # keep_default_na=False: a review reading "NA" or "null" stays text.
            return pd.read_csv(path, keep_default_na=False)
        if fmt == "jsonl":
            return pd.read_json(path, lines=True, dtype=False)
        if fmt == "json":
            return _read_json(path)
        return pd.read_parquet(path)
    except (ValueError, OSError, UnicodeDecodeError) as e:  # pandas/pyarrow parse errors
        raise UserError(f"{path}: cannot be read as {fmt}: {type(e).__name__}: {e}") from e


def unsupported_format(path: Path) -> str:
    return (f"unsupported file format {path.suffix or '(none)'!r} for {path}; supported formats: "
            f"{', '.join(FORMATS)} (or a datasets.save_to_disk folder)")


def _split_of(path: Path) -> str | None:
    m = _FILE_RE.match(path.name.split(".")[0].lower())
    if not m:
        return None
    return next((s for s, aliases in SPLIT_ALIASES.items() if m["split"] in aliases), None)


def discover_files(root: Path) -> dict[str, list[Path]]:
    """{split: sorted files} for train/validation/test in root or root/data."""
    found: dict[str, list[Path]] = {}
    unsupported: dict[str, list[Path]] = {}
    for d in (root, root / "data"):
        if not d.is_dir():
            continue
        for f in sorted(d.iterdir()):
            split = _split_of(f) if f.is_file() and not f.name.startswith(".") else None
            if split is None:
                continue
            bucket = found if f.suffix.lower() in FORMATS else unsupported
            bucket.setdefault(split, []).append(f)
    for split, files in unsupported.items():
        if split not in found:  # only unusable files for this split: say which formats work
            raise UserError(unsupported_format(files[0]))
    for split in REQUIRED_SPLITS:
        if split not in found:
            names = sorted(p.name for p in root.iterdir())[:20]
            raise UserError(f"data_dir {str(root)!r} has no {split!r} split (files found: {choices(names)}); "
                             f"{ACCEPTED_LAYOUTS}")
    return found


def _check_columns(columns: Sequence[Any], where: str, spec: DatasetSpec) -> None:
    missing = [c for c in (spec.text_field, spec.label_field) if c not in columns]
    if missing:
        raise UserError(f"{where}: missing column(s) {choices(missing)}; found columns "
                         f"{choices(columns)}; a local copy needs columns "
                         f"{spec.text_field!r} and {spec.label_field!r}")


def _frame_to_split(df: Any, where: str, spec: DatasetSpec) -> tuple[list[str], np.ndarray]:
    _check_columns(list(df.columns), where, spec)
    texts = [_as_text(v) for v in df[spec.text_field].tolist()]
    return texts, as_labels(df[spec.label_field].to_numpy(), where, spec.num_classes)


def files_source(spec: DatasetSpec, root: Path) -> Source:
    found = discover_files(root)

    def load() -> RawSplits:
        out: RawSplits = {}
        for split, files in found.items():
            parts = [_frame_to_split(read_table(f), str(f), spec) for f in files]
            out[split] = ([t for texts, _ in parts for t in texts],
                          np.concatenate([labels for _, labels in parts]))
        return out

    identity = {"kind": "files", "loader": LOADER_VERSION,
                "files": {split: [[f.name, cached_digest(f)] for f in files]
                          for split, files in sorted(found.items())}}
    return Source(f"local files in {root}", identity, load)


# --------------------------------------------------------------------------- datasets objects
def _pick_splits(names: Sequence[str], where: str) -> dict[str, str]:
    """{canonical split: the DatasetDict's key} for train/validation/test."""
    picked = {}
    for split, aliases in SPLIT_ALIASES.items():
        key = next((a for a in aliases if a in names), None)
        if key is not None:
            picked[split] = key
    for split in REQUIRED_SPLITS:
        if split not in picked:
            raise UserError(f"{where} has no {split!r} split (splits found: {choices(sorted(names))}); "
                             f"{ACCEPTED_LAYOUTS}")
    return picked


def _dataset_to_split(ds: Any, where: str, spec: DatasetSpec) -> tuple[list[str], np.ndarray]:
    _check_columns(ds.column_names, where, spec)
    table = ds.with_format("arrow")[:]  # respects any indices mapping (select/shuffle)
    texts = [_as_text(v) for v in table.column(spec.text_field).to_pylist()]
    labels = table.column(spec.label_field).to_numpy(zero_copy_only=False)
    return texts, as_labels(labels, where, spec.num_classes)


def dataset_dict_source(spec: DatasetSpec, dd: Any, where: str, identity: dict[str, Any]) -> Source:
    """`dd`: a DatasetDict or a plain {split name: Dataset} dict."""
    picked = _pick_splits(list(dd.keys()), where)

    def load() -> RawSplits:
        return {split: _dataset_to_split(dd[key], f"{where} split {key!r}", spec)
                for split, key in picked.items()}

    identity = {**identity, "loader": LOADER_VERSION, "splits": picked,
                "fingerprints": {split: dd[key]._fingerprint for split, key in picked.items()}}
    return Source(where, identity, load)


def disk_source(spec: DatasetSpec, root: Path) -> Source:
    """A DatasetDict.save_to_disk folder; only the train/validation/test splits are opened."""
    import datasets

    where = f"save_to_disk folder {str(root)!r}"
    if not (root / "dataset_dict.json").exists():
        raise UserError(f"data_dir {str(root)!r} holds a single datasets.Dataset, not a DatasetDict "
                         f"with splits; {ACCEPTED_LAYOUTS}")
    names = json.loads((root / "dataset_dict.json").read_text())["splits"]
    splits = {}
    for split, key in _pick_splits(names, where).items():
        state = json.loads((root / key / "state.json").read_text())
        if not state.get("_data_files"):  # datasets itself cannot load a 0-shard split
            raise UserError(f"dataset {spec.name!r}: the {split!r} split is empty ({where}); "
                             f"every split needs at least one document")
        splits[key] = datasets.Dataset.load_from_disk(str(root / key))
    # datasets' fingerprints, plus the Arrow files' sizes against hand-replaced files;
    # no mtimes, so a copy of the folder on another node hits the same cache entry.
    sizes = sorted((str(f.relative_to(root)), f.stat().st_size) for f in root.glob("*/*.arrow"))
    return dataset_dict_source(spec, splits, where, {"kind": "disk", "arrow_sizes": sizes})


def local_files(spec: DatasetSpec, root: Path) -> list[str]:
    """The files of a local copy that a trial reads, relative to it, sorted: the split files
    (`discover_files`), or everything under a save_to_disk folder's dataset_dict.json and
    the folders of the splits it reads."""
    if not root.is_dir():
        what = "is a file, not a directory" if root.exists() else "does not exist"
        raise UserError(f"data_dir {str(root)!r} {what}; {ACCEPTED_LAYOUTS}")
    if (root / "dataset_dict.json").exists():
        names = json.loads((root / "dataset_dict.json").read_text())["splits"]
        keys = _pick_splits(names, f"save_to_disk folder {str(root)!r}").values()
        files = [root / "dataset_dict.json", *(f for k in keys for f in (root / k).rglob("*")
                                                if f.is_file())]
    else:
        files = [f for fs in discover_files(root).values() for f in fs]
    return sorted(f.relative_to(root).as_posix() for f in files)


def local_source(spec: DatasetSpec, data_dir: str) -> Source:
    root = Path(data_dir).expanduser()
    if not root.is_dir():
        what = "is a file, not a directory" if root.exists() else "does not exist"
        raise UserError(f"data_dir {data_dir!r} {what}; {ACCEPTED_LAYOUTS}")
    if (root / "dataset_dict.json").exists() or (root / "state.json").exists():
        return disk_source(spec, root)
    return files_source(spec, root)


# --------------------------------------------------------------------------- the hub
def offline_vars() -> list[str]:
    """The offline variables that are set to a true value."""
    return [v for v in OFFLINE_VARS if os.environ.get(v, "").strip().upper() in _TRUE]


@contextlib.contextmanager
def _honour_offline_env() -> Iterator[None]:
    """Apply offline variables set after `datasets` was imported (it reads them at import)."""
    import datasets

    saved = datasets.config.HF_HUB_OFFLINE
    if offline_vars():
        datasets.config.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE = saved


def unavailable_message(spec: DatasetSpec, cause: BaseException | None = None) -> str:
    where = spec.hf_path + (f" (config {spec.hf_config!r})" if spec.hf_config else "")
    lines = [f"cannot load dataset {spec.name!r} from the Hugging Face hub ({where})"
             + (f": {type(cause).__name__}: {cause}" if cause else ".")]
    off = offline_vars()
    if off:
        lines.append(f"Offline mode is on ({', '.join(off)}=1) and the dataset is not in the "
                     f"local Hugging Face cache.")
    else:
        lines.append("Without network access, set HF_DATASETS_OFFLINE=1 to fail at once instead "
                     "of after the hub client's retries.")
    lines += [
        "Supply a local copy with `--override data_dir=PATH` (Python: "
        "load_encoded(..., data_dir=PATH)), where " + ACCEPTED_LAYOUTS + ".",
        "To make one on a machine with internet access: python -c \"import datasets; "
        f"datasets.load_dataset('{spec.hf_path}'"
        + (f", '{spec.hf_config}'" if spec.hf_config else "")
        + f").save_to_disk('{spec.name}')\"",
    ]
    return "\n".join(lines)


def load_hub(spec: DatasetSpec) -> Any:
    """`datasets.load_dataset` for a registry entry; failures say how to supply a local copy."""
    import datasets

    try:
        with _honour_offline_env():
            return datasets.load_dataset(spec.hf_path, spec.hf_config or None)
    except Exception as e:  # ConnectionError, DatasetNotFoundError, HTTP errors, ...
        raise DatasetUnavailableError(unavailable_message(spec, e)) from e


def hub_source(spec: DatasetSpec) -> Source:
    """The hub copy, identified by (path, config) alone: a cache hit then needs neither the
    network nor a Hugging Face cache (Ray workers can run from a copied fusion-sweep cache).
    Hub datasets are frozen releases; delete the cache entry to pick up a re-upload."""
    where = f"hub dataset {spec.hf_path!r}"

    def load() -> RawSplits:
        return dataset_dict_source(spec, load_hub(spec), where, {}).load()

    identity = {"kind": "hub", "path": spec.hf_path, "config": spec.hf_config,
                "loader": LOADER_VERSION}
    return Source(where, identity, load)


def open_source(spec: DatasetSpec, data_dir: str = "") -> Source:
    """The local copy at `data_dir` if given, else the hub."""
    return local_source(spec, data_dir) if data_dir else hub_source(spec)


__all__ = ["Source", "RawSplits", "DatasetUnavailableError", "open_source", "local_source",
           "hub_source", "load_hub", "discover_files", "read_table", "as_labels", "unavailable_message",
           "offline_vars", "FORMATS", "ACCEPTED_LAYOUTS", "LOADER_VERSION"]

"""Content-hash cache of tokenized datasets (README "Data"): trials never re-tokenize.

An entry is a directory `<cache_root>/<dataset>-<key>/` holding, per split, `<split>_ids.npy`
(int32), `<split>_offsets.npy` and `<split>_labels.npy` (int64), plus `vocab.txt` (one token per
line; tokens never contain whitespace) and `meta.json`. The key is a SHA-256 over everything
that determines the arrays (dataset name, raw-data identity, tokenizer settings, data_seed,
generator parameters, code versions), so a stale entry is never read.

Integrity: `meta.json` records the SHA-256 of every other file of the entry (`files`). The first
read of an entry in a process verifies them; a truncated or corrupted file (a full disk, a
killed copy, bit rot) is never loaded: the entry is removed and rebuilt, with a warning. Later
reads in the same process trust the verified entry (keyed by its meta.json's inode and mtime).

Concurrency: Ray trials on one node may miss at the same moment. An entry is written into a
private temporary directory and renamed into place (atomic on POSIX); a loser of the race
discards its copy. An advisory file lock makes later arrivals wait for the first writer
instead of tokenizing the same corpus N times. Arrays are memory-mapped read-only, so parallel
trials share one copy through the page cache.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from fusion_sweep.trial.data.types import EncodedData, EncodedSplit

ENV_CACHE = "FUSION_SWEEP_CACHE"
CACHE_FORMAT = "npy-dir-v2"  # v2: meta.json holds a SHA-256 per file
SPLIT_NAMES = ("train", "val", "test")  # EncodedData attribute names

log = logging.getLogger(__name__)
_VERIFIED: set[tuple[str, int, int]] = set()  # (entry, meta inode, meta mtime_ns) checked here


def cache_root(cache_dir: str = "") -> Path:
    """`cache_dir`, else $FUSION_SWEEP_CACHE, else ~/.cache/fusion-sweep."""
    root = cache_dir or os.environ.get(ENV_CACHE, "") or str(Path.home() / ".cache" / "fusion-sweep")
    return Path(root).expanduser()


def content_key(parts: Mapping[str, Any]) -> str:
    """SHA-256 of a canonical JSON rendering of `parts` (must be JSON-serialisable)."""
    payload = json.dumps({"format": CACHE_FORMAT, **parts}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


def entry_path(root: Path, name: str, key: str) -> Path:
    return root / f"{name}-{key[:24]}"


def file_digest(path: Path, chunk: int = 1 << 20) -> str:
    """SHA-256 of a file's bytes (streamed)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


_DIGESTS: dict[tuple[str, int, int], str] = {}  # (file, size, mtime_ns) -> sha256, this process


def cached_digest(path: Path, cache_dir: str = "") -> str:
    """`file_digest`, computed once per (file, size, mtime): remembered in this process and
    in `<cache root>/digests/` (a launch, its dry run and every worker on the node read a
    large local copy once). An edit changes the size or the mtime, and so the digest is
    computed again."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key in _DIGESTS:
        return _DIGESTS[key]
    store = cache_root(cache_dir) / "digests" / f"{hashlib.sha256(key[0].encode()).hexdigest()[:32]}.json"
    try:
        saved = json.loads(store.read_text())
        digest = saved["sha256"] if [saved["size"], saved["mtime_ns"]] == list(key[1:]) else None
    except (OSError, ValueError, KeyError, TypeError):
        digest = None
    if digest is None:
        digest = file_digest(path)
        try:  # a read-only cache only costs the next process the same hashing
            store.parent.mkdir(parents=True, exist_ok=True)
            tmp = store.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"path": key[0], "size": key[1], "mtime_ns": key[2],
                                       "sha256": digest}))
            os.replace(tmp, store)
        except OSError:
            pass
    _DIGESTS[key] = digest
    return digest


# --------------------------------------------------------------------------- read / write
def write_entry(path: Path, data: EncodedData, vocab: list[str], meta: Mapping[str, Any]) -> None:
    """Write atomically: a temporary sibling directory renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        for attr in SPLIT_NAMES:
            split: EncodedSplit = getattr(data, attr)
            np.save(tmp / f"{attr}_ids.npy", np.ascontiguousarray(split.ids, dtype=np.int32))
            np.save(tmp / f"{attr}_offsets.npy", np.ascontiguousarray(split.offsets, dtype=np.int64))
            np.save(tmp / f"{attr}_labels.npy", np.ascontiguousarray(split.labels, dtype=np.int64))
        (tmp / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
        files = {f.name: file_digest(f) for f in sorted(tmp.iterdir())}
        full_meta = {**meta, "name": data.name, "vocab_size": data.vocab_size,
                     "num_classes": data.num_classes, "pad_id": data.pad_id, "unk_id": data.unk_id,
                     "files": files}
        # meta.json last: its presence marks a complete entry.
        (tmp / "meta.json").write_text(json.dumps(full_meta, sort_keys=True, default=str))
        try:
            os.replace(tmp, path)
        except OSError:
            # Another process renamed its (identical) entry first; keep theirs.
            if not (path / "meta.json").exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


class CorruptEntry(Exception):
    """A cache entry whose files do not match the digests in its meta.json."""


def verify_entry(path: Path, meta: Mapping[str, Any]) -> None:
    """Raise CorruptEntry unless every file listed in meta['files'] has its recorded SHA-256
    (an entry without digests is corrupt too: it cannot be checked). Once per process."""
    st = (path / "meta.json").stat()
    token = (str(path), st.st_ino, st.st_mtime_ns)
    if token in _VERIFIED:
        return
    files = meta.get("files")
    if not isinstance(files, dict) or not files:
        raise CorruptEntry("meta.json records no file digests")
    for name, digest in files.items():
        try:
            got = file_digest(path / name)
        except OSError as e:
            raise CorruptEntry(f"{name}: {e}") from None
        if got != digest:
            raise CorruptEntry(f"{name}: SHA-256 {got[:12]}… != recorded {str(digest)[:12]}…")
    _VERIFIED.add(token)


def read_entry(path: Path) -> EncodedData | None:
    """The cached dataset (arrays memory-mapped read-only), or None if absent, incomplete or
    corrupt (a file whose content hash differs from meta.json's: logged as a warning)."""
    meta_file = path / "meta.json"
    if not meta_file.exists():
        return None
    try:
        meta = json.loads(meta_file.read_text())
        verify_entry(path, meta)
        splits = {attr: EncodedSplit(ids=_mmap(path / f"{attr}_ids.npy"),
                                     offsets=_mmap(path / f"{attr}_offsets.npy"),
                                     labels=_mmap(path / f"{attr}_labels.npy"))
                  for attr in SPLIT_NAMES}
        return EncodedData(name=meta["name"], vocab_size=int(meta["vocab_size"]),
                           num_classes=int(meta["num_classes"]), pad_id=int(meta["pad_id"]),
                           unk_id=int(meta["unk_id"]), **splits)
    except CorruptEntry as e:
        log.warning("tokenized-data cache entry %s is corrupt (%s): rebuilding it", path, e)
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.warning("tokenized-data cache entry %s is unreadable (%s): rebuilding it", path, e)
        return None  # corrupt or partial: the caller rebuilds it


def _discard(path: Path) -> None:
    """Move a bad entry out of the way (atomic rename), then delete it; readers that mapped
    its files keep their pages (POSIX)."""
    if not path.exists():
        return
    trash = Path(tempfile.mkdtemp(prefix=f".{path.name}.bad.", dir=path.parent))
    os.replace(path, trash / "entry")
    shutil.rmtree(trash, ignore_errors=True)


def _mmap(file: Path) -> np.ndarray:
    # A plain read-only ndarray view (not np.memmap, whose subclass leaks into every result).
    return np.load(file, mmap_mode="r").view(np.ndarray)


@contextlib.contextmanager
def build_lock(path: Path) -> Iterator[None]:
    """Advisory inter-process lock for building one entry (no-op where fcntl is missing)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{path.name}.lock", "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def get_or_build(path: Path, build: Callable[[], tuple[EncodedData, list[str], dict[str, Any]]]
                 ) -> tuple[EncodedData, bool]:
    """(data, hit): read the entry, or build, write and re-read it under the lock."""
    data = read_entry(path)
    if data is not None:
        return data, True
    with build_lock(path):
        data = read_entry(path)  # a concurrent builder may have finished meanwhile
        if data is not None:
            return data, True
        _discard(path)  # a corrupt entry would block the rename of the rebuilt one
        built, vocab, meta = build()
        write_entry(path, built, vocab, meta)
    data = read_entry(path)
    if data is None:  # pragma: no cover - the filesystem lost our write
        raise RuntimeError(f"cache entry {path} could not be read back after writing it")
    return data, False

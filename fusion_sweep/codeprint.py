"""The code a trial runs, read statically: per-component code fingerprints.

A trial's code fingerprint (`schema.code_fingerprint`) hashes one fingerprint per component it
uses (its trainer, dataset pipeline, encoder, pe, fusion, ...; `trial/components.py` names
them). A component's fingerprint is the normalised source of the definitions it can run: the
closure of its root definitions over the names they reference, anywhere in the package. Only
the standard library is imported, and nothing of the package is imported: a copy of the
package on disk can be fingerprinted as it is (tests do, with edits applied).

* **Units.** Each module-level name is a unit: the module-level statements that bind or
  mutate it (a `def`, a `class`, an assignment, `REGISTRY["x"] = ...`). A name that resolves
  through imports (`from .fusion import FUSIONS`, `import ... as`) is followed to the module
  that defines it, so moving a definition between files changes nothing. Statements that bind
  no name (rare: a call at import time) belong to every unit of their module.
* **Closure.** From the roots, every package name a unit references (a `Name`, or an attribute
  of a package module) is followed, except `cuts`: the registries (`FUSIONS`, `DATASETS`, ...)
  whose entry the trial uses is a root of its own component, so adding or editing another
  entry changes no other trial; and other components' roots. Names used only in annotations
  or in a `raise` statement are not followed. A unit of a module with compiled sources
  (`sources`) brings those files' bytes.
* **Normalised source, the same on every Python version.** A canonical walk emits each node's
  type and its non-empty fields in sorted order, never `ast.dump` (whose fields and defaults
  change between versions: 3.12's `type_params`), and never positions, `ctx` or `kind`. What
  cannot change a number is dropped: docstrings and other bare strings, annotations, the
  arguments of `raise` (the exception's message), of `warnings.warn`, `print` and logging
  calls, `assert` messages, and the methods a registry entry runs only to validate or label
  a config (`skip_methods`).
"""
from __future__ import annotations

import ast
import hashlib
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

# Fields the canonical walk never emits: evaluation context, string-prefix kind, comments,
# and annotations (with `from __future__ import annotations` they are never evaluated).
SKIP_FIELDS = frozenset({"ctx", "kind", "type_comment", "type_ignores", "annotation",
                         "returns"})
# Receivers whose calls only tell a human something: their arguments are messages.
MESSAGE_RECEIVERS = frozenset({"warnings", "log", "logger", "logging"})
MESSAGE_FUNCTIONS = frozenset({"print", "warn"})

Ref = tuple[str, str]  # ("unit", "module:name") | ("module", module) | ("ext", dotted name)


# ------------------------------------------------------------------------- normalising
def canonical(node: Any) -> str:
    """A node as text: its type and non-empty fields, sorted; independent of the Python
    version (no positions, no fields that are empty or absent on some versions)."""
    if isinstance(node, ast.AST):
        parts = []
        for name in sorted(node._fields):
            value = getattr(node, name, None)
            if name in SKIP_FIELDS or value is None or (isinstance(value, list) and not value):
                continue
            parts.append(f"{name}={canonical(value)}")
        return f"{type(node).__name__}({','.join(parts)})"
    if isinstance(node, list):
        return "[" + ",".join(canonical(v) for v in node) + "]"
    return f"{type(node).__name__}:{node!r}"


def _is_bare_string(stmt: ast.AST) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) \
        and isinstance(stmt.value.value, str)


def _is_message_call(call: ast.Call) -> bool:
    f = call.func
    if isinstance(f, ast.Name):
        return f.id in MESSAGE_FUNCTIONS
    return isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) \
        and f.value.id in MESSAGE_RECEIVERS


class _Normalise(ast.NodeTransformer):
    """Drops what cannot change a number (see the module docstring), in place."""

    def __init__(self, skip_methods: frozenset[str]) -> None:
        self.skip_methods = skip_methods

    def generic_visit(self, node: ast.AST) -> ast.AST:
        node = super().generic_visit(node)
        for name in ("body", "orelse", "finalbody"):
            body = getattr(node, name, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                kept = [s for s in body if not _is_bare_string(s)]
                setattr(node, name, kept or ([ast.Pass()] if name == "body" else []))
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        node.body = [s for s in node.body if not (
            isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name in self.skip_methods)]
        return self.generic_visit(node)

    def visit_Raise(self, node: ast.Raise) -> ast.AST:
        # The exception's type stays (an `except` may route on it); its message goes.
        if isinstance(node.exc, ast.Call):
            node.exc = node.exc.func
        node.cause = None
        return node

    def visit_Assert(self, node: ast.Assert) -> ast.AST:
        node.msg = None
        return self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if _is_message_call(node):
            node.args, node.keywords = [], []
            return node
        return self.generic_visit(node)


@lru_cache(maxsize=256)
def _normalised_tree(source: str, skip_methods: frozenset[str]) -> ast.Module:
    """A module's normalised tree, kept per source text (read only from then on). It depends
    on nothing but the text, so a Package built again after one file of a copy was edited
    (`trialcode.forget`, in the tests that edit the package) parses only that file again:
    the parse is 60% of a key computation. The whole package's trees take about 40 MiB."""
    return _Normalise(skip_methods).visit(ast.parse(source))


# ------------------------------------------------------------------------- modules
@dataclass
class Module:
    """One parsed module: its units (name -> statements), import aliases and prelude."""

    name: str
    units: dict[str, list[ast.stmt]] = field(default_factory=dict)
    aliases: dict[str, Ref] = field(default_factory=dict)
    prelude: list[ast.stmt] = field(default_factory=list)


def _bound_names(stmt: ast.stmt) -> tuple[set[str], set[str]]:
    """(names a module-level statement binds, module names it mutates through a subscript
    or attribute assignment)."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}, set()
    bound, mutated = set(), set()
    for node in ast.walk(stmt):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor)):
            targets = [node.target]
        elif isinstance(node, ast.NamedExpr):
            targets = [node.target]
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    bound.add(sub.id)
            base = t
            while isinstance(base, (ast.Subscript, ast.Attribute)):
                base = base.value
            if base is not t and isinstance(base, ast.Name):
                mutated.add(base.id)
    return bound, mutated


def _only_imports(stmt: ast.stmt) -> bool:
    """An import, or an `if TYPE_CHECKING:` / `try:` block of imports only."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return True
    if isinstance(stmt, (ast.If, ast.Try)):
        inner = [*stmt.body, *getattr(stmt, "orelse", [])]
        return all(_only_imports(s) or isinstance(s, ast.Pass) for s in inner)
    return False


class Package:
    """The modules of one package folder, parsed on first use."""

    def __init__(self, root: Path, skip_methods: Iterable[str] = ()) -> None:
        self.root = Path(root)
        self.name = self.root.name
        self.skip_methods = frozenset(skip_methods)
        self._modules: dict[str, Module | None] = {}
        self._refs: dict[str, set[Ref]] = {}

    # ---- files and modules
    def path_of(self, module: str) -> Path | None:
        parts = module.split(".")
        if parts[0] != self.name:
            return None
        base = self.root.joinpath(*parts[1:])
        for p in (base.with_suffix(".py"), base / "__init__.py"):
            if p.is_file():
                return p
        return None

    def module_of_path(self, path: str | Path) -> str | None:
        """The module name of a file of this package (a code object's co_filename)."""
        try:
            rel = Path(path).resolve().relative_to(self.root.resolve())
        except ValueError:
            return None
        parts = [self.name, *rel.with_suffix("").parts]
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    def module(self, name: str) -> Module | None:
        if name not in self._modules:
            path = self.path_of(name)
            self._modules[name] = self._parse(name, path) if path is not None else None
        return self._modules[name]

    def _parse(self, name: str, path: Path) -> Module:
        tree = _normalised_tree(path.read_text(encoding="utf-8"), self.skip_methods)
        mod = Module(name)
        is_package = path.name == "__init__.py"
        for stmt in tree.body:
            for node in ast.walk(stmt) if _only_imports(stmt) else [stmt]:
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    mod.aliases.update(self._import_aliases(node, name, is_package))
            if _only_imports(stmt) or _is_bare_string(stmt):
                continue
            bound, mutated = _bound_names(stmt)
            for n in bound | mutated:
                mod.units.setdefault(n, []).append(stmt)
            if not bound and not mutated:
                mod.prelude.append(stmt)
        return mod

    def _import_aliases(self, node: ast.Import | ast.ImportFrom, module: str,
                        is_package: bool) -> dict[str, Ref]:
        out: dict[str, Ref] = {}
        if isinstance(node, ast.Import):
            for a in node.names:
                top = a.name.split(".")[0]
                if a.asname:
                    kind = "module" if top == self.name else "ext"
                    out[a.asname] = (kind, a.name)
                else:
                    out[top] = ("module", top) if top == self.name else ("ext", top)
            return out
        base = node.module or ""
        if node.level:
            here = module.split(".") if is_package else module.split(".")[:-1]
            here = here[:len(here) - (node.level - 1)]
            base = ".".join([*here, *([base] if base else [])])
        for a in node.names:
            local = a.asname or a.name
            if base.split(".")[0] != self.name:
                out[local] = ("ext", f"{base}.{a.name}")
            elif self.path_of(f"{base}.{a.name}") is not None:
                out[local] = ("module", f"{base}.{a.name}")
            else:
                out[local] = ("unit", f"{base}:{a.name}")
        return out

    # ---- names
    def resolve(self, module: str, name: str, seen: frozenset[str] = frozenset()) -> Ref | None:
        """Where `name`, read in `module`, is defined: a unit, a module or an external name
        (None: a builtin or a local)."""
        mod = self.module(module)
        key = f"{module}:{name}"
        if mod is None or key in seen:
            return None
        if name in mod.units:
            return ("unit", key)
        ref = mod.aliases.get(name)
        if ref is None or ref[0] != "unit":
            return ref
        target, _, attr = ref[1].partition(":")
        return self.resolve(target, attr, seen | {key}) or ("ext", f"{target}.{attr}")

    def refs_of(self, key: str) -> set[Ref]:
        """What the unit `module:name` references (followed or recorded by `closure`)."""
        if key not in self._refs:
            module, _, name = key.partition(":")
            mod = self.module(module)
            stmts = mod.units.get(name, []) if mod is not None else []
            self._refs[key] = set().union(*(self._stmt_refs(module, s) for s in stmts)) \
                if stmts else set()
        return self._refs[key]

    def _stmt_refs(self, module: str, stmt: ast.AST) -> set[Ref]:
        local: dict[str, Ref] = {}
        for node in _walk(stmt):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                local.update(self._import_aliases(node, module, False))
        out: set[Ref] = set()
        consumed: set[int] = set()  # the inner nodes of an attribute chain already resolved
        for node in _walk(stmt):  # parents before children
            if id(node) in consumed:
                continue
            if isinstance(node, ast.Name):
                ref = local.get(node.id) or self.resolve(module, node.id)
                if ref is not None and ref[0] == "unit" and node.id in local:
                    target, _, attr = ref[1].partition(":")
                    ref = self.resolve(target, attr) or ("ext", f"{target}.{attr}")
                if ref is not None:
                    out.add(ref)
            elif isinstance(node, ast.Attribute):
                ref = self._attribute_ref(module, node, local)
                if ref is not None:
                    out.add(ref)
                    consumed.update(id(n) for n in ast.walk(node.value)
                                    if isinstance(n, (ast.Attribute, ast.Name)))
        return out

    def _attribute_ref(self, module: str, node: ast.Attribute, local: dict[str, Ref]) -> Ref | None:
        """`kernels.score_topk`: an attribute of a package module is that module's unit."""
        chain = []
        base: ast.AST = node
        while isinstance(base, ast.Attribute):
            chain.append(base.attr)
            base = base.value
        if not isinstance(base, ast.Name):
            return None
        ref = local.get(base.id) or self.resolve(module, base.id)
        for attr in reversed(chain):
            if ref is None or ref[0] != "module":
                return None
            sub = f"{ref[1]}.{attr}"
            ref = ("module", sub) if self.path_of(sub) is not None else self.resolve(ref[1], attr)
        return ref

    # ---- closures and fingerprints
    def closure(self, roots: Iterable[str], cuts: Iterable[str] = ()) -> tuple[set[str], set[str]]:
        """(units reached from `roots`, external names they read); never through `cuts`."""
        cut = set(cuts)
        units: set[str] = set()
        external: set[str] = set()
        todo = [r for r in roots]
        while todo:
            key = todo.pop()
            if key in units:
                continue
            units.add(key)
            for kind, target in self.refs_of(key):
                if kind == "ext":
                    external.add(target)
                elif kind == "module":
                    mod = self.module(target)
                    todo.extend(f"{target}:{n}" for n in (mod.units if mod else ())
                                if f"{target}:{n}" not in cut)
                elif target not in cut:
                    todo.append(target)
        return units, external

    def fingerprint(self, roots: Sequence[str], cuts: Iterable[str] = (),
                    values: Any = None, sources: Mapping[str, Sequence[str]] | None = None) -> str:
        """sha256 (16 hex) of a component: the normalised statements of its closure (and the
        prelude of each module it touches), the external names they read, its registry
        values (JSON) and the bytes of the compiled sources of the modules it touches."""
        units, external = self.closure(roots, cuts)
        modules = {u.partition(":")[0] for u in units}
        texts = set()
        for u in units:
            module, _, name = u.partition(":")
            mod = self.module(module)
            if mod is None or name not in mod.units:
                raise KeyError(f"{u} is not a module-level definition of {self.name}")
            texts.update(canonical(s) for s in mod.units[name])
        for module in modules:
            texts.update(canonical(s) for s in self.module(module).prelude)
        files = sorted(rel for m in modules for rel in (sources or {}).get(m, ()))
        h = hashlib.sha256()
        for text in [*sorted(texts), "\0", *sorted(external), "\0",
                     json.dumps(values, sort_keys=True, default=str)]:
            h.update(text.encode() + b"\0")
        for rel in files:
            h.update(rel.encode() + b"\0" + (self.root / rel).read_bytes() + b"\0")
        return h.hexdigest()[:16]

    def covers(self, units: set[str], filename: str, qualname: str) -> bool:
        """Whether a code object (its file and `co_qualname`) that ran is within `units`:
        its top-level definition is, and it is not a method the normalisation dropped."""
        module = self.module_of_path(filename)
        if module is None:
            return True  # not this package's code
        parts = qualname.split(".")
        if parts[0] == "<module>":
            return True  # an import, not a trial's computation
        if len(parts) > 1 and parts[1] in self.skip_methods:
            return False
        return f"{module}:{parts[0]}" in units


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    """ast.walk without what `closure` never follows: annotations and raise statements."""
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        for name, value in ast.iter_fields(n):
            if name in SKIP_FIELDS or isinstance(n, ast.Raise):
                continue
            if isinstance(value, ast.AST):
                todo.append(value)
            elif isinstance(value, list):
                todo.extend(v for v in value if isinstance(v, ast.AST))

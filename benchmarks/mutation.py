"""Mutation testing of the core: do the tests catch small plausible bugs in what decides the answer?

A small AST mutator (no third-party tool: mutmut 3 rewrites the whole package into trampolines
and needs its own layout). For every function listed in CORE, each mutation operator below makes
one mutant: a copy of the repository with that one change, on which the module's covering tests
run (`-m "not slow"`, `-x`). A mutant is *killed* when a test fails (or the run times out or
crashes), *survived* when every test passes.

Operators (the kinds of bug issue 24 names): comparison (< <=, > >=, == !=, < >), boolean
(and/or), `not` removed, arithmetic (+ -, * /), numeric constant (n -> n+1, x -> 2x, 0 -> 1),
True/False, an `if` condition negated, a call statement deleted (e.g. restoring the best
weights), two adjacent `if` statements swapped (e.g. checking `equivalent` before `better`).

    python benchmarks/mutation.py --quick     # a fixed sample, <= 10 min on 2 cores
    python benchmarks/mutation.py             # every mutant (run it with nice -n 19)
    python benchmarks/mutation.py --list      # the mutants, nothing run
    python benchmarks/mutation.py --module stats --jobs 2

The last stdout line is JSON: {"modules": [...], "mutants": N, "killed": K, "survived": [...],
"equivalent": [...], "score": K / (N - equivalent)}; a mutant id is
`file:function:change#k` (k: the k-th such change in that function, in source order). A mutant
is equivalent (no test can kill
it: the behaviour is the same) only with a one-line reason in EQUIVALENT below.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Module:
    """One mutated source file: which functions (qualified names; a class name takes all its
    methods), and the tests that cover them (pytest arguments, most specific first; a `-k`
    leaves out what cannot reach the module, e.g. HTML rendering in Chromium)."""

    name: str
    path: str
    functions: tuple[str, ...]
    tests: tuple[str, ...]


NOT_RENDERING = "not chromium and not renders and not html"
CORE: tuple[Module, ...] = (
    Module("stats", "fusion_sweep/analysis/stats.py",
           ("paired_deltas", "has_spread", "paired_t", "tost_p", "holm", "beats_chance",
            "verdict", "ratio_verdict", "one_sample_t"),
           ("tests/test_core_rules.py", "tests/test_analysis_stats.py",
            "-k", "not best_validation and not fingerprint and not trial_file")),
    Module("chance", "fusion_sweep/analysis/chance.py",
           ("chance_tests", "_arm_test", "arm_state", "class_counts"),
           ("tests/test_core_rules.py", "tests/test_analysis.py", "-k",
            "learned or chance or class_count")),
    Module("pairing", "fusion_sweep/analysis/pairing.py",
           ("_cell", "fingerprint_mismatch", "pair_problem", "pair_one", "supersede"),
           ("tests/test_core_rules.py", "tests/test_analysis.py", "tests/test_claims.py", "-k",
            f"(pair or fingerprint or supersede or drop or seed or duplicate) and {NOT_RENDERING} "
            "and not trial_file")),
    Module("schema", "fusion_sweep/schema.py",
           ("code_fingerprint", "trial_key"),
           ("tests/test_core_rules.py", "tests/test_tracking.py", "tests/test_trainer.py",
            "-k", "fingerprint or trial_file or trial_key or code")),
    Module("sequential", "fusion_sweep/analysis/sequential.py",
           ("bonferroni_alpha", "sequential_decisions", "sequential_result", "stopping_rule",
            "_seeds_run", "from_comparisons"),
           ("tests/test_core_rules.py", "tests/test_sequential.py", "tests/test_adaptive.py",
            "-k", "sequential or stopping or decision or round or bonferroni or cs or margin "
                  "or family or seeds")),
    Module("claims", "fusion_sweep/analysis/claims.py",
           ("_holm", "_verdict", "_summary"),
           ("tests/test_core_rules.py", "tests/test_claims.py", "-k",
            f"(claim or c1 or c3 or c5 or c7 or holm or equivalent) and {NOT_RENDERING}")),
    Module("resume", "fusion_sweep/schema.py",
           ("run_of_key",),
           ("tests/test_core_rules.py", "-k", "resume")),
    Module("trainer", "fusion_sweep/trial/trainer.py",
           ("derive_seed", "stream_dataset", "_run", "_train_and_test", "_fit", "_test", "predict"),
           ("tests/test_core_rules.py", "tests/test_trainer.py", "-k",
            "best_validation or not (verdict or learned or fingerprint or trial_file or "
            "sequential or claim or resume or better or fusion)")),
    Module("fusion", "fusion_sweep/trial/models/fusion.py",
           ("AddFusion", "ConcatFusion", "GateScalarFusion", "GateVectorFusion", "GateMLPFusion",
            "MLPFusion", "GateCNNFusion", "MulFusion"),
           ("tests/test_core_rules.py", "tests/test_models.py", "-k",
            "fusion or gate or padding or parameter_counts")),
)

# Mutant id -> why no test can tell it from the original (one line each).
EQUIVALENT: dict[str, str] = {
    "fusion_sweep/trial/trainer.py:derive_seed:2->3#0":
        "SeedSequence.generate_state is one stream: word 0 is the same whether 2 or 3 are drawn",
    "fusion_sweep/trial/trainer.py:_fit:0->1#0":
        "best_epoch's initial value: always replaced at epoch 1 (best_state is None there)",
    "fusion_sweep/trial/trainer.py:_fit:0->1#1":
        "stale's initial value: always reset to 0 at epoch 1 (best_state is None there)",
    "fusion_sweep/analysis/stats.py:verdict:>->>=#1":
        "mean > 0 vs >= 0: the mean is the centre of its own t-interval, so a mean of exactly 0 "
        "never comes with an interval that excludes 0",
    "fusion_sweep/analysis/stats.py:ratio_verdict:>->>=#0":
        "exact ratio > 1 vs >= 1: a ratio of exactly 1 has already returned inconclusive",
}

# Lines left out of every module (regex on the line's text -> why): what tests must not assert.
OUT_OF_SCOPE: dict[str, str] = {
    r"seconds|perf_counter|latency|tokens_per_second|train_tokens":
        "wall-clock figures (time, throughput, latency): measured by benchmarks/, never asserted",
}

QUICK_PER_MODULE = 3
QUICK_SEED = 24


# ------------------------------------------------------------------------------ mutants
@dataclass(frozen=True)
class Mutant:
    module: str
    path: str
    id: str
    line: int
    text: str  # the whole mutated file


CMP_SWAPS = {ast.Lt: [ast.LtE, ast.Gt], ast.LtE: [ast.Lt], ast.Gt: [ast.GtE, ast.Lt],
             ast.GtE: [ast.Gt], ast.Eq: [ast.NotEq], ast.NotEq: [ast.Eq], ast.In: [ast.NotIn],
             ast.NotIn: [ast.In], ast.Is: [ast.IsNot], ast.IsNot: [ast.Is]}
BIN_SWAPS = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult,
             ast.FloorDiv: ast.Mult}
SYMBOL = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==",
          ast.NotEq: "!=", ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not",
          ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
          ast.And: "and", ast.Or: "or"}


def _targets(tree: ast.Module, names: tuple[str, ...]) -> list[ast.AST]:
    """The function (or class) nodes named by `names` (top-level or Class.method)."""
    out = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names:
            out.append(node)
        elif isinstance(node, ast.ClassDef):
            out += [n for n in node.body if isinstance(n, ast.FunctionDef)
                    and f"{node.name}.{n.name}" in names]
    return out


def defined_names(tree: ast.Module) -> set[str]:
    """What a Module's `functions` may name: top-level functions and classes, `Class.method`."""
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.add(node.name)
        if isinstance(node, ast.ClassDef):
            out.update(f"{node.name}.{n.name}" for n in node.body if isinstance(n, ast.FunctionDef))
    return out


def list_problems(modules: tuple[Module, ...] = CORE,
                  equivalent: dict[str, str] | None = None) -> list[str]:
    """Names in the hand-kept lists that no longer exist: a function of CORE its file does not
    define (it would never be mutated, silently), an EQUIVALENT id no mutant has (the reason no
    longer describes any code). [] when both lists match the code."""
    equivalent = EQUIVALENT if equivalent is None else equivalent
    problems = []
    for m in modules:
        path = ROOT / m.path
        if not path.is_file():
            problems.append(f"module {m.name}: no file {m.path}")
            continue
        known = defined_names(ast.parse(path.read_bytes()))
        problems += [f"module {m.name}: {m.path} defines no function {f!r}"
                     for f in m.functions if f not in known]
    ids = {mu.id for m in modules if (ROOT / m.path).is_file() for mu in mutants_of(m)}
    problems += [f"EQUIVALENT names {mid!r}, which is no mutant of the current code"
                 for mid in equivalent if mid not in ids]
    return problems


def _skipped(func: ast.AST) -> set[int]:
    """ids of nodes never mutated: docstrings, annotations, f-strings, decorators."""
    skip: set[int] = set()

    def all_of(n: ast.AST | None) -> None:
        if n is not None:
            skip.update(id(x) for x in ast.walk(n))
    for n in ast.walk(func):
        if isinstance(n, (ast.FunctionDef, ast.ClassDef)):
            for d in n.decorator_list:
                all_of(d)
            if isinstance(n, ast.FunctionDef):
                all_of(n.returns)
            body = n.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                all_of(body[0])
        elif isinstance(n, ast.arg):
            all_of(n.annotation)
        elif isinstance(n, ast.AnnAssign):
            all_of(n.annotation)
        elif isinstance(n, ast.JoinedStr):
            all_of(n)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in (
                "ValueError", "AnalysisError", "TypeError", "RuntimeError"):
            all_of(n)  # error messages: their text is checked elsewhere, not the rule
    return skip


def _offsets(src: bytes) -> list[int]:
    """Byte offset of each line start (ast col offsets are UTF-8 bytes)."""
    starts, pos = [0], 0
    for line in src.splitlines(keepends=True):
        pos += len(line)
        starts.append(pos)
    return starts


def _span(starts: list[int], node: ast.AST) -> tuple[int, int]:
    return (starts[node.lineno - 1] + node.col_offset,
            starts[node.end_lineno - 1] + node.end_col_offset)


def _replace_expr(src: bytes, starts: list[int], node: ast.AST, new: ast.AST) -> bytes:
    a, b = _span(starts, node)
    return src[:a] + b"(" + ast.unparse(new).encode() + b")" + src[b:]


def _stmt_lines(starts: list[int], node: ast.stmt) -> tuple[int, int]:
    return starts[node.lineno - 1], starts[node.end_lineno]


def mutants_of(m: Module) -> list[Mutant]:
    src = (ROOT / m.path).read_bytes()
    tree = ast.parse(src)
    starts = _offsets(src)
    out: list[Mutant] = []
    seen: set[str] = set()

    lines = src.decode().splitlines()
    out_of_scope = re.compile("|".join(f"(?:{r})" for r in OUT_OF_SCOPE))

    found: list[tuple[int, int, str, str, str]] = []  # (line, col, owner, change, text)

    def add(node: ast.AST, desc: str, mutated: bytes, owner: str) -> None:
        if out_of_scope.search(lines[node.lineno - 1]):
            return
        text = mutated.decode()
        try:
            ast.parse(text)
        except SyntaxError:
            return
        found.append((node.lineno, node.col_offset, owner, desc, text))

    for func in _targets(tree, m.functions):
        skip = _skipped(func)
        owner = func.name
        for node in ast.walk(func):
            if id(node) in skip:
                continue
            _expr_mutants(src, starts, node, owner, add)
            _stmt_mutants(src, starts, node, owner, add)
    # id: file:function:change#k, k counting the same change earlier in that function - stable
    # while the function itself is unchanged, whatever moves around it
    count: dict[tuple[str, str], int] = {}
    for line, col, owner, desc, text in sorted(found, key=lambda f: f[:2]):
        k = count.get((owner, desc), 0)
        count[(owner, desc)] = k + 1
        mid = f"{m.path}:{owner}:{desc}#{k}"
        if mid not in seen:
            seen.add(mid)
            out.append(Mutant(m.name, m.path, mid, line, text))
    return out


def _expr_mutants(src, starts, node, owner, add) -> None:
    import copy

    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            for new_op in CMP_SWAPS.get(type(op), []):
                new = copy.deepcopy(node)
                new.ops[i] = new_op()
                add(node, f"{SYMBOL[type(op)]}->{SYMBOL[new_op]}",
                    _replace_expr(src, starts, node, new), owner)
    elif isinstance(node, ast.BoolOp):
        new = copy.deepcopy(node)
        new.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        add(node, f"{SYMBOL[type(node.op)]}->{SYMBOL[type(new.op)]}",
            _replace_expr(src, starts, node, new), owner)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        add(node, "not-removed", _replace_expr(src, starts, node, node.operand), owner)
    elif isinstance(node, ast.BinOp) and type(node.op) in BIN_SWAPS:
        new = copy.deepcopy(node)
        new.op = BIN_SWAPS[type(node.op)]()
        add(node, f"{SYMBOL[type(node.op)]}->{SYMBOL[type(new.op)]}",
            _replace_expr(src, starts, node, new), owner)
    elif isinstance(node, ast.Constant) and not isinstance(node.value, str):
        v = node.value
        if isinstance(v, bool):
            new_v = not v
        elif isinstance(v, int):
            new_v = v + 1
        elif isinstance(v, float):
            new_v = v * 2 if v else 1.0
        else:
            return
        add(node, f"{v!r}->{new_v!r}", _replace_expr(src, starts, node, ast.Constant(new_v)),
            owner)


def _stmt_mutants(src, starts, node, owner, add) -> None:
    if isinstance(node, ast.If):
        a, b = _span(starts, node.test)
        add(node, "if-negated", src[:a] + b"not (" + src[a:b] + b")" + src[b:], owner)
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        a, b = _span(starts, node)
        add(node, "call-deleted", src[:a] + b"pass" + src[b:], owner)
    for body in (getattr(node, f, None) for f in ("body", "orelse")):
        if not isinstance(body, list):
            continue
        for s1, s2 in zip(body, body[1:]):
            if isinstance(s1, ast.If) and isinstance(s2, ast.If) and not s1.orelse \
                    and not s2.orelse and s1.col_offset == s2.col_offset:
                a1, b1 = _stmt_lines(starts, s1)
                a2, b2 = _stmt_lines(starts, s2)
                if b1 == a2:
                    add(s1, f"if-swapped-with-line-{s2.lineno}",
                        src[:a1] + src[a2:b2] + src[a1:b1] + src[b2:], owner)


# ------------------------------------------------------------------------------- running
def _copy_tree(dst: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for name in ("fusion_sweep", "tests", "scripts", "search_spaces"):
        if (ROOT / name).exists():
            shutil.copytree(ROOT / name, dst / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, dst / name)
    return dst


def _pytest(copy: Path, tests: tuple[str, ...], timeout: float) -> tuple[str, str]:
    """Run the tests in the copy: ("passed"|"failed"|"timeout"|"error", tail of output)."""
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONHASHSEED": "0"}
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-o",
           "addopts=", "-m", "not slow", "--no-header", *tests]
    proc = subprocess.Popen(cmd, cwd=copy, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    with _LOCK:
        _RUNNING.add(proc)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        return "timeout", ""
    finally:
        with _LOCK:
            _RUNNING.discard(proc)
    tail = out[-600:]
    if proc.returncode == 0:
        return "passed", tail
    if proc.returncode == 1:
        return "failed", tail
    return "error", tail


_RUNNING: set[subprocess.Popen] = set()
_LOCK = threading.Lock()


def _kill(proc: subprocess.Popen) -> None:
    """The test run and everything it started (its own session: Ray, servers, Chromium)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


_STOP = threading.Event()


def _kill_all(*_: object) -> None:
    _STOP.set()  # no further mutant starts
    with _LOCK:
        procs = list(_RUNNING)
    for proc in procs:
        _kill(proc)
    raise SystemExit(130)


def _check_copy(copy: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    r = subprocess.run([sys.executable, "-c", "import fusion_sweep; print(fusion_sweep.__file__)"],
                       cwd=copy, env=env, capture_output=True, text=True, check=True)
    if not Path(r.stdout.strip()).resolve().is_relative_to(copy.resolve()):
        sys.exit(f"error: the copy is not imported first ({r.stdout.strip()}); "
                 "run with the project's venv python")


def run(modules: list[Module], mutants: list[Mutant], jobs: int, timeout: float,
        verbose: bool, timeout_factor: float = 4.0) -> dict:
    by_name = {m.name: m for m in modules}
    lock = threading.Lock()
    copies: list[Path] = []
    free: list[Path] = []
    tmp = Path(tempfile.mkdtemp(prefix="mutation-"))
    try:
        for i in range(jobs):
            c = _copy_tree(tmp / f"w{i}")
            copies.append(c)
            free.append(c)
        _check_copy(copies[0])
        # Baseline: every module's tests pass unmutated (else a "kill" would mean nothing);
        # a mutant's run may take `timeout_factor` times the baseline's before it counts as
        # killed (an endless loop), at least `timeout` seconds.
        limits: dict[str, float] = {}

        def baseline(m: Module) -> None:
            with lock:
                copy = free.pop()
            t0 = time.monotonic()
            try:
                status, tail = _pytest(copy, m.tests, 1800)
            finally:
                with lock:
                    free.append(copy)
            if status != "passed":
                sys.exit(f"error: the tests of {m.name} fail on the unmutated code:\n{tail}")
            limits[m.name] = max(timeout, timeout_factor * (time.monotonic() - t0))
            print(f"baseline {m.name}: tests pass", flush=True)

        needed = [m for m in modules if any(mu.module == m.name for mu in mutants)]
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            list(pool.map(baseline, needed))
        results: dict[str, str] = {}

        def one(mu: Mutant) -> None:
            if _STOP.is_set():
                return
            with lock:
                copy = free.pop()
            target = copy / mu.path
            original = target.read_text()
            try:
                target.write_text(mu.text)
                status, tail = _pytest(copy, by_name[mu.module].tests, limits[mu.module])
            finally:
                target.write_text(original)
                with lock:
                    free.append(copy)
            killed = status != "passed"
            with lock:
                results[mu.id] = status
                mark = "killed" if killed else "SURVIVED"
                print(f"{mark:9} {status:8} {mu.id}  (line {mu.line})", flush=True)
                if verbose and status == "error":
                    print(tail, flush=True)

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            list(pool.map(one, mutants))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return score(modules, mutants, results)


def score(modules: list[Module], mutants: list[Mutant], results: dict[str, str]) -> dict:
    """The JSON line: mutants, killed, survivors, equivalent ones with their reasons, score."""
    equivalent = [mu.id for mu in mutants if mu.id in EQUIVALENT]
    survived = [mu.id for mu in mutants if results[mu.id] == "passed" and mu.id not in EQUIVALENT]
    killed = sum(results[mu.id] != "passed" for mu in mutants if mu.id not in EQUIVALENT)
    n = len(mutants)
    denom = n - len(equivalent)
    return {"modules": [m.name for m in modules], "mutants": n, "killed": killed,
            "survived": survived,
            "equivalent": [f"{i}: {EQUIVALENT[i]}" for i in equivalent],
            "score": round(killed / denom, 4) if denom else None}


def quick_sample(mutants: list[Mutant], per_module: int) -> list[Mutant]:
    """A fixed sample: per module, `per_module` mutants drawn with a fixed seed."""
    rng = random.Random(QUICK_SEED)
    out: list[Mutant] = []
    for name in dict.fromkeys(mu.module for mu in mutants):
        pool = [mu for mu in mutants if mu.module == name and mu.id not in EQUIVALENT]
        out += rng.sample(pool, min(per_module, len(pool)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help=f"{QUICK_PER_MODULE} mutants per module (fixed seed): <= 10 min on 2 cores")
    ap.add_argument("--module", action="append", choices=[m.name for m in CORE],
                    help="only this module (repeatable)")
    ap.add_argument("--jobs", type=int, default=2, help="mutants tested at once (default 2)")
    ap.add_argument("--timeout", type=float, default=120,
                    help="a mutant's test run past max(this, 4 x the module's unmutated run) "
                         "counts as killed (an endless loop)")
    ap.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    ap.add_argument("--verbose", action="store_true", help="print the tail of crashed runs")
    args = ap.parse_args(argv)
    problems = list_problems()
    if problems:  # a stale list would leave code unmutated without a word
        for p in problems:
            print(f"error: {p}", file=sys.stderr)
        return 2
    modules = [m for m in CORE if not args.module or m.name in args.module]
    mutants = [mu for m in modules for mu in mutants_of(m)]
    if args.quick:
        mutants = quick_sample(mutants, QUICK_PER_MODULE)
    if args.list:
        for mu in mutants:
            print(f"{mu.id}  (line {mu.line})" + ("  [equivalent]" if mu.id in EQUIVALENT else ""))
        print(f"{len(mutants)} mutants")
        return 0
    print(f"{len(mutants)} mutants over {len(modules)} modules, {args.jobs} at a time", flush=True)
    signal.signal(signal.SIGTERM, _kill_all)  # never leave test runs behind
    signal.signal(signal.SIGINT, _kill_all)
    result = run(modules, mutants, args.jobs, args.timeout, args.verbose)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

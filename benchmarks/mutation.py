"""Mutation testing with mutmut 3 (`pip install -e '.[mutation]'`): a thin wrapper that only
picks the mutants and prints the counts. Everything else - making the mutants, finding the
tests that cover each one, running them - is mutmut's, configured in pyproject.toml
(`[tool.mutmut]`). The equivalent mutants are argued one per line in
benchmarks/mutation_equivalent.txt (`NAME  # why no test can tell it from the original`).

    .venv/bin/python benchmarks/mutation.py --quick   # the small decision functions
    .venv/bin/python benchmarks/mutation.py 'fusion_sweep.analysis.guard.*'   # one module
    .venv/bin/python benchmarks/mutation.py           # every configured module (= mutmut run)

Last stdout line: JSON {"mutants", "killed", "survived", "equivalent", "score", "modules"},
where score = killed / (mutants - equivalent), survived lists the non-equivalent mutants not
killed (survivors, timeouts, no tests), and modules gives per module the mutants and their
count per mutmut status.
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EQUIVALENT_FILE = REPO / "benchmarks" / "mutation_equivalent.txt"
# The decision functions (mutmut names a mutant module.x_function__mutmut_N): the guard rule,
# a split's majority rate, Holm and the verdict rule, the trial key, the launch's GPU check.
# Each entry a glob; the whole modules run without --quick, or name them as GLOB arguments.
QUICK = ("fusion_sweep.analysis.guard.x_guard__*", "fusion_sweep.analysis.guard.x_speaks__*",
         "fusion_sweep.analysis.guard.x_neither_learned__*",
         "fusion_sweep.analysis.chance.x__check_majority_rate__*",
         "fusion_sweep.analysis.stats.x_holm__*", "fusion_sweep.analysis.stats.x_verdict__*",
         "fusion_sweep.schema.x_trial_key__*",
         "fusion_sweep.launch.memory.x_check_gpu_memory__*")


def equivalent() -> dict[str, str]:
    """Mutant name -> the one-line argument that it is equivalent."""
    out = {}
    for line in EQUIVALENT_FILE.read_text().splitlines():
        name, _, why = line.partition("#")
        if name.strip():
            out[name.strip()] = why.strip()
    return out


def statuses(patterns: tuple[str, ...]) -> dict[str, str]:
    """mutmut's result per mutant (`mutmut results --all true`: `NAME: STATUS` lines)."""
    out = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    pairs = (line.strip().rsplit(": ", 1) for line in out.splitlines() if ": " in line)
    return {n: s for n, s in pairs
            if not patterns or any(fnmatch.fnmatch(n, p) for p in patterns)}


def module_of(name: str) -> str:
    """`fusion_sweep.analysis.winrate.x_sign_test__mutmut_3` -> `fusion_sweep.analysis.winrate`
    (a method's mutant: `module.xǁClassǁmethod__mutmut_N`)."""
    return name.rsplit(".", 1)[0]


def by_module(found: dict[str, str]) -> dict[str, dict[str, int]]:
    """Per module: its mutants and how many of them have each mutmut status."""
    out: dict[str, dict[str, int]] = {}
    for name, status in sorted(found.items()):
        counts = out.setdefault(module_of(name), {"mutants": 0})
        counts["mutants"] += 1
        counts[status] = counts.get(status, 0) + 1
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("patterns", nargs="*", metavar="GLOB",
                    help="mutant-name globs, e.g. 'fusion_sweep.analysis.guard.*'")
    ap.add_argument("--quick", action="store_true", help="only the small decision functions")
    ap.add_argument("--max-children", type=int, default=1)
    args = ap.parse_args(argv)
    patterns = (*QUICK, *args.patterns) if args.quick else tuple(args.patterns)
    subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children",
                    str(args.max_children), *patterns], cwd=REPO, check=False)
    found = statuses(patterns)
    eq = equivalent()
    killed = [n for n, s in found.items() if s == "killed"]
    survived = [n for n, s in found.items() if s != "killed" and n not in eq]
    n_eq = sum(n in eq and s != "killed" for n, s in found.items())  # a killed one counts once
    score = len(killed) / max(1, len(found) - n_eq)
    print(json.dumps({"mutants": len(found), "killed": len(killed), "survived": survived,
                      "equivalent": n_eq, "score": round(score, 4),
                      "modules": by_module(found)}))
    return 0 if not survived else 1


if __name__ == "__main__":
    sys.exit(main())

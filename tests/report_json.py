"""A results table written to a CSV and analysed as `fusion-sweep stats --results FILE --format
json` prints it (the CLI's own `main`, in-process): the stable surface the rule tests read."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Mapping

import pandas as pd

from fusion_sweep.analysis.cli import main


def row(fusion: str, seed: int, acc: float, dataset: str = "d", **extra: object) -> dict:
    """One finished run on a balanced binary split of 1000 test examples."""
    return {"dataset": dataset, "encoder": "standard", "pe": "sinusoidal", "fusion": fusion,
            "seed": seed, "test_acc": acc, "status": "FINISHED", "num_classes": 2,
            "test_majority_rate": 0.5, "test_n": 1000, **extra}


def arms(accs: Mapping[str, Iterable[float]], **extra: object) -> list[dict]:
    """fusion -> per-seed test accuracy (seed i is the i-th value)."""
    return [row(f, s, a, **extra) for f, vals in accs.items() for s, a in enumerate(vals)]


def stats_json(rows: list[dict], tmp: Path, capsys, *args: str) -> dict:
    """The JSON report of `stats` on these rows (a small bootstrap: the rules read no BCa)."""
    path = tmp / "results.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    capsys.readouterr()
    rc = main(["stats", "--results", str(path), "--format", "json", "--bootstrap", "200",
               *args])
    out = capsys.readouterr().out
    assert rc == 0, out
    return json.loads(out)


def comparison(report: dict, fusion: str, metric: str = "test_acc") -> dict:
    return next(c for c in report["comparisons"]
                if c["fusion"] == fusion and c["metric"] == metric)

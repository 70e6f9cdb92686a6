"""Adversarial results files for issue 31 section 2: one small CSV per overclaim path.

Each builder returns a DataFrame in the results-file schema; `write_all(folder)` writes every
case as CASE.csv (the tests in tests/test_analysis_overclaim.py run them through
`fusion-sweep stats --results FILE --format json`). Values are fixed (no randomness) so the
cases read the same everywhere.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

SEEDS = (0, 1, 2, 3, 4)


def _rows(dataset: str, fusion: str, accs: list[float], **extra: object) -> list[dict]:
    return [{"dataset": dataset, "pe": "sinusoidal", "fusion": fusion, "seed": s,
             "status": "FINISHED", "test_acc": a, "num_classes": 2, **extra}
            for s, a in zip(SEEDS, accs)]


def imbalanced_chance() -> pd.DataFrame:
    """Two majority-class predictors on a 58/42 test split (majority rate 0.578): both sit at
    chance, whatever 1/K = 0.5 says."""
    rows = (_rows("brown", "add", [0.577, 0.578, 0.580, 0.579, 0.578],
                  test_majority_rate=0.578, test_n=1000)
            + _rows("brown", "concat", [0.578, 0.579, 0.578, 0.580, 0.577],
                    test_majority_rate=0.578, test_n=1000))
    return pd.DataFrame(rows)


def chance_other_metric() -> pd.DataFrame:
    """Two arms at chance on accuracy whose macro-F1 differs (a constant predictor's F1)."""
    df = pd.DataFrame(_rows("syn", "add", [0.50, 0.51, 0.49, 0.50, 0.50])
                      + _rows("syn", "concat", [0.50, 0.49, 0.51, 0.50, 0.50]))
    f1 = [0.333, 0.340, 0.330, 0.335, 0.338, 0.50, 0.49, 0.51, 0.50, 0.495]
    return df.assign(test_macro_f1=f1)


def asymmetric_guard() -> pd.DataFrame:
    """A reference that learned beside an arm at chance; the deltas are small enough that
    TOST within 0.1 calls them equivalent, and with no class count the other direction."""
    return pd.DataFrame(_rows("syn", "add", [0.53, 0.56, 0.55, 0.54, 0.54])
                        + _rows("syn", "concat", [0.49, 0.52, 0.50, 0.51, 0.49]))


def filter_family() -> pd.DataFrame:
    """Three regimes; a filter to one of them must not shrink the Holm family."""
    rows = []
    for ds, gain in (("short", 0.0), ("medium", 0.002), ("long", 0.0078)):
        ref = [0.80, 0.82, 0.81, 0.79, 0.80]
        arm = [r + gain + e for r, e in zip(ref, [0.004, -0.006, 0.008, -0.003, 0.001])]
        rows += _rows(ds, "add", ref) + _rows(ds, "concat", arm)
    df = pd.DataFrame(rows)
    df["median_tokens"] = df["dataset"].map({"short": 50, "medium": 200, "long": 500})
    return df


def mixed_code() -> pd.DataFrame:
    """The arm's seeds ran under one code version, the reference's under another."""
    df = pd.DataFrame(_rows("syn", "add", [0.70, 0.71, 0.72, 0.70, 0.71])
                      + _rows("syn", "concat", [0.80, 0.82, 0.81, 0.81, 0.83]))
    return df.assign(code_fingerprint=["aaa"] * 5 + ["bbb"] * 5)


def adaptive_file() -> pd.DataFrame:
    """An adaptive sweep's results file: its fixed-n tests are descriptive."""
    df = pd.DataFrame(_rows("syn", "add", [0.70, 0.71, 0.72, 0.70, 0.71])
                      + _rows("syn", "concat", [0.80, 0.82, 0.81, 0.81, 0.83]))
    return df.assign(adaptive='{"method": "betting", "alpha": 0.05, "max_seeds": 20}',
                     test_majority_rate=0.5)


def differs_not_learned() -> pd.DataFrame:
    """The effect 'differs' across regimes only because one regime learned nothing."""
    rows = (_rows("short", "add", [0.80, 0.82, 0.81, 0.79, 0.80])
            + _rows("short", "concat", [0.90, 0.93, 0.91, 0.90, 0.92])
            + _rows("long", "add", [0.50, 0.49, 0.51, 0.50, 0.50])
            + _rows("long", "concat", [0.49, 0.50, 0.50, 0.51, 0.50]))
    df = pd.DataFrame(rows)
    return df.assign(median_tokens=df["dataset"].map({"short": 50, "long": 500}))


def blank_status() -> pd.DataFrame:
    """Two rows whose status cell is blank (their runs never recorded finishing)."""
    df = pd.DataFrame(_rows("syn", "add", [0.70, 0.71, 0.72, 0.70, 0.71])
                      + _rows("syn", "concat", [0.80, 0.82, 0.81, 0.81, 0.83]))
    df.loc[[3, 8], "status"] = ""
    return df


def latency() -> pd.DataFrame:
    """concat is 19% faster (lower latency is better)."""
    df = pd.DataFrame(_rows("syn", "add", [0.80, 0.81, 0.82, 0.80, 0.81])
                      + _rows("syn", "concat", [0.81, 0.82, 0.83, 0.81, 0.82]))
    lat = [1.00, 1.02, 0.99, 1.01, 1.00, 0.81, 0.84, 0.80, 0.83, 0.81]
    return df.assign(latency_ms_per_sample=lat)


def collapse() -> pd.DataFrame:
    """The reference collapses to chance on 2 of 5 seeds (the default sweep's `add` on
    synthetic-long): the mean-Δ verdict rests on normality; the win rate is exact."""
    return pd.DataFrame(_rows("syn", "add", [0.522, 0.776, 0.666, 0.740, 0.502],
                              test_majority_rate=0.5, test_n=500)
                        + _rows("syn", "concat", [0.95, 0.96, 0.97, 0.95, 0.96],
                                test_majority_rate=0.5, test_n=500))


CASES = {f.__name__: f for f in (
    imbalanced_chance, chance_other_metric, asymmetric_guard, filter_family, mixed_code,
    adaptive_file, differs_not_learned, blank_status, latency, collapse)}


def write_all(folder: str | Path) -> dict[str, Path]:
    out = {}
    for name, build in CASES.items():
        path = Path(folder) / f"{name}.csv"
        build().to_csv(path, index=False)
        out[name] = path
    return out


if __name__ == "__main__":
    import sys
    for name, path in write_all(sys.argv[1]).items():
        print(path)

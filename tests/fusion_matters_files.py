"""Results files of Fusion Matters' shapes (issue 39): the paper's pattern (negligible on the
short and medium regimes, clear on the long one), its opposite, and the main job's own shape
(on synthetic-long `add` learns on 4 of 8 seeds, concat on 8 of 8).

Each builder returns a DataFrame in the results-file schema with a `regime` column (the
registry's length regime), the test split's majority rate and size; values are fixed (a
seeded generator per file) so every run reads the same numbers.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

SEEDS = tuple(range(8))
REGIMES = {"syn-short": ("short", 20), "syn-medium": ("medium", 128), "syn-long": ("long", 320)}


def _frame(acc: dict[tuple[str, str], list[float]], pe: str = "sinusoidal") -> pd.DataFrame:
    rows = []
    for (dataset, fusion), values in acc.items():
        regime, tokens = REGIMES[dataset]
        for seed, a in zip(SEEDS, values):
            rows.append({"dataset": dataset, "pe": pe, "fusion": fusion, "seed": seed,
                         "status": "FINISHED", "test_acc": round(float(a), 4),
                         "num_classes": 2, "test_majority_rate": 0.5, "test_n": 2000,
                         "median_tokens": tokens, "regime": regime})
    return pd.DataFrame(rows)


def _noise(seed: int, scale: float) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, scale, len(SEEDS))  # (seeds,)


def paper_pattern(fusions: tuple[str, ...] = ("add", "concat", "gate-scalar"),
                  pe: str = "sinusoidal") -> pd.DataFrame:
    """Short and medium: every fusion within ±0.003 of add on every seed (saturated); long:
    gate-scalar +0.06 and concat +0.04 over add on every seed."""
    gain = {"add": 0.0, "concat": 0.04, "gate-scalar": 0.06, "gate-cnn": 0.05}
    acc = {}
    for i, dataset in enumerate(REGIMES):
        base = 0.85 + _noise(10 + i, 0.01)
        for j, fusion in enumerate(fusions):
            jitter = _noise(100 + 10 * i + j, 0.0015) if fusion != "add" else 0.0
            lift = gain[fusion] if dataset == "syn-long" else 0.0
            acc[(dataset, fusion)] = list(base + lift + jitter)
    return _frame(acc, pe)


def opposite_pattern() -> pd.DataFrame:
    """The reverse: fusion matters on the short and medium regimes (+0.08 on every seed) and
    not on the long one (within ±0.003)."""
    acc = {}
    for i, dataset in enumerate(REGIMES):
        base = 0.8 + _noise(20 + i, 0.01)
        for j, fusion in enumerate(("add", "concat", "gate-scalar")):
            jitter = _noise(200 + 10 * i + j, 0.0015) if fusion != "add" else 0.0
            lift = 0.08 if dataset != "syn-long" and fusion != "add" else 0.0
            acc[(dataset, fusion)] = list(base + lift + jitter)
    return _frame(acc)


def main_job_like() -> pd.DataFrame:
    """The default sweep's shape at seeds 0-7: on the long regime add learns on 4 of 8 seeds
    (0.502-0.776), concat on 8 of 8 (concat wins all 8), gate-scalar on 7 of 8."""
    add_long = [0.502, 0.776, 0.51, 0.742, 0.505, 0.70, 0.508, 0.73]
    acc = {
        ("syn-short", "add"): list(0.80 + _noise(1, 0.01)),
        ("syn-short", "concat"): list(0.90 + _noise(2, 0.01)),
        ("syn-short", "gate-scalar"): list(0.88 + _noise(3, 0.01)),
        ("syn-medium", "add"): [0.5, 0.8, 0.82, 0.5, 0.79, 0.81, 0.8, 0.83],
        ("syn-medium", "concat"): list(0.95 + _noise(4, 0.01)),
        ("syn-medium", "gate-scalar"): [0.55, 0.9, 0.91, 0.6, 0.89, 0.9, 0.92, 0.88],
        ("syn-long", "add"): add_long,
        ("syn-long", "concat"): list(0.97 + _noise(5, 0.005)),
        ("syn-long", "gate-scalar"): [0.9, 0.95, 0.93, 0.7, 0.92, 0.94, 0.9, 0.95],
    }
    return _frame(acc)

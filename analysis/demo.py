"""A synthetic results table with known effects, for demos, tests and the HTML check.

Effects are planted per (fusion, dataset) on top of a per-(dataset, pe, seed) level that
all fusions share, which is what pairing by seed removes.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

DATASETS = {"synthetic-short": 48.0, "synthetic-medium": 231.0, "synthetic-long": 1890.0}
BASE_ACC = {"synthetic-short": 0.86, "synthetic-medium": 0.78, "synthetic-long": 0.61}
# Class counts as in fusion_sweep.data.registry (not imported: it pulls in torch).
NUM_CLASSES = {"synthetic-short": 4, "synthetic-medium": 2, "synthetic-long": 11}
# Planted mean delta vs add, per dataset (short, medium, long).
EFFECTS = {"add": (0.0, 0.0, 0.0), "concat": (0.0, 0.004, 0.01),
           "gate-vector": (0.002, 0.015, 0.045), "mul": (-0.03, -0.04, -0.06)}


def _fp(*parts: object) -> str:
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:16]


def synthetic_results(
    seeds: int = 5, pes: tuple[str, ...] = ("sinusoidal", "learned"), rng_seed: int = 0,
) -> pd.DataFrame:
    """Tidy-schema rows: dataset, pe, fusion, seed, metrics, fingerprints, median_tokens,
    num_classes."""
    rng = np.random.default_rng(rng_seed)
    rows = []
    for di, (ds, med) in enumerate(DATASETS.items()):
        for pe in pes:
            for seed in range(seeds):
                level = BASE_ACC[ds] + rng.normal(0, 0.01)  # shared by all fusions
                for fusion, eff in EFFECTS.items():
                    acc = level + eff[di] + rng.normal(0, 0.004)
                    rows.append({
                        "dataset": ds, "pe": pe, "fusion": fusion, "seed": seed,
                        "test_acc": round(acc, 6), "best_val_acc": round(acc + 0.01, 6),
                        "test_macro_f1": round(acc - 0.02, 6),
                        "latency_ms_per_sample": round(0.2 * (1 + di) * (1.3 if fusion != "add" else 1)
                                                       + rng.normal(0, 0.01), 5),
                        "params": 1_000_000 + (65_536 if fusion in ("concat", "gate-vector") else 0),
                        "status": "FINISHED", "median_tokens": med,
                        "num_classes": NUM_CLASSES[ds],
                        "fp_split": _fp("split", ds), "fp_batch_order": _fp("batches", ds, seed),
                        "fp_shared_init": _fp("init", ds, pe, seed),
                        "fp_dropout": _fp("dropout", ds, seed),
                    })
    return pd.DataFrame(rows)

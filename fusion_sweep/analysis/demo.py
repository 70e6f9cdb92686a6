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
# The dataset registry's class counts (fusion_sweep.trial.data.registry.DATASETS: every
# synthetic regime, and its shuffled probe, is binary). Stated here because that package
# imports torch and the statistics must not; tests/test_analysis.py compares the two.
NUM_CLASSES = {"synthetic-short": 2, "synthetic-medium": 2, "synthetic-long": 2}
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


# ------------------------------------------------------------------- encoder variants
# ReSSFormer's sweep (search_spaces/ressformer.yaml) in miniature: 7 variants on the three
# regimes and their shuffled probes. Planted per variant: the accuracy effect over
# standard/sinusoidal/add on a clean regime, and the drop a shuffled probe causes; None:
# at chance (a content-only model cannot see order). Costs per variant: a latency factor
# (measured: seed noise) and an analytic FLOPs factor (deterministic: no noise).
RESS_DATASETS = {**{d: m for d, m in DATASETS.items()},
                 **{f"{d}-shuffled": m for d, m in DATASETS.items()}}
# The regimes the registry marks long-context (max_len above schema.LONG_CONTEXT_ABOVE_TOKENS).
LONG_CONTEXT = frozenset({"synthetic-long"})
RESS_EFFECTS: dict[str, tuple[float, float] | None] = {
    "standard/sinusoidal/add": (0.0, -0.06),
    "standard/rotary/add": (0.01, -0.05),
    "standard/none/add": None,
    "ressformer/none/add": (0.03, -0.02),
    "ressformer-no-soes/sinusoidal/add": (-0.02, -0.06),
    "ressformer-no-asam/none/add": (0.0, -0.02),
    "ressformer-no-r2mu/none/add": (0.015, -0.02),
}
RESS_COSTS: dict[str, tuple[float, float, int]] = {  # latency factor, FLOPs factor, params
    "standard": (1.0, 1.0, 40_000), "ressformer": (1.1, 0.7, 30_000),
    "ressformer-no-soes": (1.1, 0.7, 30_000), "ressformer-no-asam": (1.4, 1.0, 30_000),
    "ressformer-no-r2mu": (0.5, 0.35, 30_000),
}


def synthetic_ressformer_results(
    seeds: int = 5, effects: dict[str, tuple[float, float] | None] | None = None,
    noise: float = 0.002, rng_seed: int = 0,
) -> pd.DataFrame:
    """Tidy-schema rows with an `encoder` column: every variant of `effects` (default
    RESS_EFFECTS) on every RESS_DATASETS regime, seeds 0..seeds-1. A seed's level is shared
    by every variant of a dataset (what pairing removes); fingerprints as the sweep logs
    them: split per dataset, batch order, shared init and dropout per (dataset, seed), the
    encoder body's init per (dataset, encoder, seed)."""
    rng = np.random.default_rng(rng_seed)
    effects = RESS_EFFECTS if effects is None else effects
    rows = []
    for ds, med in RESS_DATASETS.items():
        clean = ds.removesuffix("-shuffled")
        for seed in range(seeds):
            level = BASE_ACC[clean] + rng.normal(0, noise)
            for label, eff in effects.items():
                encoder, pe, fusion = label.split("/")
                acc = (0.5 if eff is None else level + eff[0] + (eff[1] if ds != clean else 0.0))
                lat, flops, params = RESS_COSTS[encoder]
                scale = med / 48.0
                rows.append({
                    "dataset": ds, "encoder": encoder, "pe": pe, "fusion": fusion, "seed": seed,
                    "test_acc": round(float(np.clip(acc + rng.normal(0, noise), 0, 1)), 6),
                    "latency_ms_per_sample": round(0.2 * scale ** 0.5 * lat
                                                   * (1 + rng.normal(0, 0.02)), 6),
                    "flops_per_token": 1e5 * scale ** 0.25 * flops, "params": params,
                    "status": "FINISHED", "median_tokens": med, "num_classes": NUM_CLASSES[clean],
                    "fp_split": _fp("split", ds), "fp_batch_order": _fp("batches", ds, seed),
                    "fp_shared_init": _fp("init", ds, seed),
                    "fp_dropout": _fp("dropout", ds, seed),
                    "fp_encoder_init": _fp("encoder", ds, encoder, seed),
                    # The registry's facts, as the trial logs them (TrialConfig.label_tags).
                    "regime_of": clean, "probe_of": clean if ds != clean else "",
                    "long_context": "true" if clean in LONG_CONTEXT else "false",
                })
    return pd.DataFrame(rows)

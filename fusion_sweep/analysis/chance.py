"""Chance level: does an arm (a variant on a dataset) learn anything at all?

A comparison of two models that both sit at chance says nothing about the variants: their
delta is noise around 0, and an "inconclusive" (or "equivalent") verdict would read as
evidence about them. So, for accuracy-like metrics ('acc' in the name) only:

- chance level = 1 / num_classes, with the class count from the ``num_classes`` column
  (the trial runs' MLflow metric, or a CSV column), overridden by ``--num-classes D=K``;
- per arm, a one-sided one-sample t-test (``scipy.stats.ttest_1samp(alternative=
  'greater')``) of its per-seed accuracy against the chance level;
- Holm across every arm tested in the report; an arm "learned" (``yes``) when its
  Holm-adjusted p < alpha, else ``no``. ``unknown`` when the class count is unknown (a
  warning says so) or the test is undefined (fewer than 2 seeds, or identical values);
  ``n/a`` for metrics that are not accuracy-like.

The report turns a comparison where *both* arms are ``no`` into the verdict
``not learned``. "No" means "not shown to beat chance": with very few seeds a weak model
can land there too, which is the same conclusion - this comparison cannot speak to the
variants.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from fusion_sweep.analysis.metrics import is_accuracy_like
from fusion_sweep.analysis.pairing import cells_for
from fusion_sweep.analysis.schema import AnalysisError
from fusion_sweep.analysis.stats import NAN, beats_chance, holm
from fusion_sweep.analysis.variants import Variant

METHOD = ("one-sided one-sample t-test of each arm's per-seed accuracy > 1/num_classes "
          "(scipy ttest_1samp, alternative='greater'); Holm across the arms")
ArmKey = tuple  # (dataset, Variant, metric)


def class_counts(df: pd.DataFrame, overrides: Mapping[str, int] | None = None
                 ) -> dict[str, int | None]:
    """Class count per dataset: --num-classes first, else the `num_classes` column.

    Raises AnalysisError when one dataset's runs disagree on their class count.
    """
    out: dict[str, int | None] = {}
    overrides = dict(overrides or {})
    for dataset, col in df.groupby("dataset", sort=True)["num_classes"]:
        if dataset in overrides:
            out[dataset] = int(overrides[dataset])
            continue
        values = sorted({float(v) for v in col if np.isfinite(v)})
        if len(values) > 1:
            raise AnalysisError(f"column 'num_classes' disagrees within dataset {dataset!r}: "
                                f"{', '.join(f'{v:g}' for v in values)}; fix the data or pass "
                                f"--num-classes {dataset}=K")
        if values and (values[0] < 2 or values[0] != round(values[0])):
            raise AnalysisError(f"column 'num_classes' for dataset {dataset!r} must be an "
                                f"integer >= 2, got {values[0]:g}")
        out[dataset] = int(values[0]) if values else None
    return out


def chance_tests(
    df: pd.DataFrame, metrics: list[str], counts: Mapping[str, int | None], alpha: float,
) -> tuple[list[dict], dict[ArmKey, dict], list[dict]]:
    """Test every arm of every accuracy-like metric against chance.

    Returns (tests with CHANCE_TEST_KEYS, arm key -> that test, warnings).
    """
    tests: list[dict] = []
    for metric in (m for m in metrics if is_accuracy_like(m)):
        values: dict[tuple, list[float]] = {}
        for (dataset, encoder, pe, fusion, _seed), cell in cells_for(df, metric).items():
            if cell.ok:
                values.setdefault((dataset, Variant(encoder, pe, fusion)), []).append(cell.value)
        for (dataset, v), vals in sorted(values.items()):
            tests.append(_arm_test(dataset, v, metric, np.array(vals), counts.get(dataset)))
    adjusted = holm(np.array([t["p"] for t in tests], dtype=float))
    for t, p in zip(tests, adjusted):
        t["p_holm"] = float(p)
        if np.isfinite(p):
            t["learned"] = "yes" if p < alpha else "no"
    by_arm = {(t["dataset"], Variant(t["encoder"], t["pe"], t["fusion"]), t["metric"]): t
              for t in tests}
    return tests, by_arm, _unknown_warning(tests)


def _arm_test(dataset: str, v: Variant, metric: str, vals: np.ndarray, k: int | None) -> dict:
    chance = 1.0 / k if k else NAN
    t, p = beats_chance(vals, chance) if k else (NAN, NAN)
    return {"dataset": dataset, "encoder": v.encoder, "pe": v.pe, "metric": metric,
            "fusion": v.fusion, "variant": v.label, "n": int(vals.size), "num_classes": k,
            "chance_level": chance, "mean": float(vals.mean()) if vals.size else NAN, "t": t,
            "p": p, "p_holm": NAN, "learned": "unknown"}


def _unknown_warning(tests: list[dict]) -> list[dict]:
    missing = sorted({t["dataset"] for t in tests if t["num_classes"] is None})
    if not missing:
        return []
    flags = " ".join(f"--num-classes {d}=K" for d in missing)
    return [{"code": "chance_unknown",
             "message": f"class count unknown for {', '.join(missing)}: 'learned?' (does an "
                        f"arm beat chance?) is unknown there; add a num_classes column or "
                        f"pass {flags}"}]


def arm_state(by_arm: Mapping[ArmKey, dict], dataset: str, v: Variant, metric: str) -> str:
    """LEARNED_STATES value of one arm: n/a for metrics without a chance level."""
    if not is_accuracy_like(metric):
        return "n/a"
    test = by_arm.get((dataset, v, metric))
    return test["learned"] if test else "unknown"


def chance_level(by_arm: Mapping[ArmKey, dict], dataset: str, v: Variant, metric: str) -> float:
    """1/K of an arm's dataset (nan when unknown or not accuracy-like)."""
    return by_arm.get((dataset, v, metric), {}).get("chance_level", NAN)

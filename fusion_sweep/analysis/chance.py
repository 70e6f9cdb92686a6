"""Chance level: does an arm (a variant on a dataset) learn anything at all?

A comparison of two models that both sit at chance says nothing about the variants: their
delta is noise around 0, and an "inconclusive" (or "equivalent") verdict would read as
evidence about them. So every arm's accuracy (the first accuracy-like metric shown, else
the table's ``test_acc``) is tested once, and its state guards the comparisons of EVERY
metric (a chance-level pair can differ on macro-F1 or latency; that says nothing either):

- chance = the test split's majority-class share (``test_majority_rate``, logged by every
  trial): what a constant predictor scores on an imbalanced split. 1/num_classes only as a
  labelled fallback when no rate is recorded (``chance_source``);
- with the test size (``test_n``): per seed, the exact one-sided binomial test of
  round(acc * test_n) correct answers against the majority rate
  (:func:`fusion_sweep.analysis.winrate.learn_rate`); the arm's learn rate is the count of
  seeds that beat chance, and it ``learned`` when it did on most of its seeds;
- without it: a one-sided one-sample t of the per-seed accuracies against chance, Holm
  across the arms. ``unknown`` when chance is unknown (a warning says so) or the test is
  undefined (fewer than 2 seeds, or identical values); ``n/a`` when the table holds no
  accuracy at all.

The report turns a comparison where *both* arms are ``no`` into the verdict
``not learned``. "No" means "not shown to beat chance": with very few seeds a weak model
can land there too, which is the same conclusion - this comparison cannot speak to the
variants.
"""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Mapping

import numpy as np
import pandas as pd

from fusion_sweep.analysis.guard import Learning
from fusion_sweep.analysis.load import metric_columns, to_metric
from fusion_sweep.analysis.metrics import is_accuracy_like
from fusion_sweep.analysis.pairing import cells_for
from fusion_sweep.analysis.records import ChanceTest
from fusion_sweep.analysis.schema import (
    FINISHED, SELECTED_PARTS, TEST_MAJORITY_RATE, TEST_SIZE, VALIDATION_PARTS, AnalysisError,
)
from fusion_sweep.analysis.stats import NAN, beats_chance, holm
from fusion_sweep.analysis.variants import Variant
from fusion_sweep.analysis.winrate import learn_rate

METHOD = ("each arm's accuracy against chance = its test split's majority-class share "
          "(1/num_classes when none is recorded): exact one-sided binomial test per seed "
          "when the test size is known (learned on most seeds), else a one-sided one-sample "
          "t of the per-seed accuracies, Holm across the arms; guards every metric")
ArmKey = tuple  # (dataset, Variant): one chance test per arm, on its accuracy


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


ACCURACY_METRIC = "test_acc"  # the accuracy a non-accuracy comparison is guarded by
MAJORITY_SOURCE, FALLBACK_SOURCE = "test majority rate", "1/K (no test_majority_rate recorded)"
EXACT_METHOD = ("exact one-sided binomial test per seed of round(acc * test_n) correct against "
                "the test split's majority rate; learned = on most seeds")
T_METHOD = "one-sided one-sample t of per-seed accuracy > chance, Holm across arms"
# Why a learned? state cannot exclude a majority-class predictor (guard.Learning.basis).
BASIS_FALLBACK = "chance = 1/K (no test_majority_rate recorded)"
BASIS_T = "the seed-level t-test (no test_n recorded)"


def is_test_accuracy(metric: str) -> bool:
    """An accuracy on the test split: accuracy-like by name, and no word of it (split at
    non-alphanumerics) names a validation split or a maximum over epochs (`best_val_acc`):
    chance is the TEST split's majority rate, and a maximum over epochs of a chance-level
    model sits above it by selection alone."""
    words = set(re.split(r"[^a-z0-9]+", metric.lower()))
    return is_accuracy_like(metric) and not words & set(VALIDATION_PARTS + SELECTED_PARTS)


def accuracy_metric(df: pd.DataFrame, metrics: list[str]) -> str | None:
    """The test accuracy every comparison's learned? state is read from, whatever it is
    called: the first test accuracy asked for, else ACCURACY_METRIC, else the table's first
    test-accuracy column (by the schema's column roles), else None (no accuracy: no guard).
    A validation accuracy or a maximum over epochs is never used (is_test_accuracy)."""
    for m in metrics:
        if is_test_accuracy(m):
            return m
    if ACCURACY_METRIC in df.columns:
        return ACCURACY_METRIC
    found = [c for c in metric_columns(df) if is_test_accuracy(c)]
    return found[0] if found else None


def validation_only(df: pd.DataFrame, metrics: list[str]) -> list[str]:
    """Accuracy-like columns the guard must not read (validation or maximum) when the table
    holds no test accuracy: then every arm's learned? is unknown, never read from them."""
    cols = list(dict.fromkeys([*metrics, *metric_columns(df)]))
    return [c for c in cols if is_accuracy_like(c) and not is_test_accuracy(c)]


def chance_tests(
    df: pd.DataFrame, metrics: list[str], counts: Mapping[str, int | None], alpha: float,
) -> tuple[list[ChanceTest], dict[ArmKey, ChanceTest], list[dict]]:
    """Test every arm's accuracy against chance (once per arm, whatever metrics are shown).

    Chance is the test split's majority-class share (`test_majority_rate`) when recorded,
    1/K otherwise (labelled). With a test size the per-seed exact binomial test decides each
    seed (the learn rate) and the arm learned when it did on most seeds; without one, the
    one-sided t of the per-seed accuracies, Holm across arms.
    Returns (tests with CHANCE_TEST_KEYS, (dataset, Variant) -> that test, warnings)."""
    metric = accuracy_metric(df, metrics)
    if metric is None:
        return _no_test_accuracy(df, metrics)
    df = df.assign(**{metric: to_metric(df, metric)})
    rows: dict[tuple, list[tuple[float, float, float]]] = {}
    extra = _per_seed(df)
    for key, cell in cells_for(df, metric).items():
        if cell.ok:
            dataset, encoder, pe, fusion, seed = key
            rows.setdefault((dataset, Variant(encoder, pe, fusion)), []).append(
                (cell.value, *extra.get(key, (NAN, NAN))))
    tests = [_arm_test(d, v, metric, np.array(vals, dtype=float), counts.get(d), alpha)
             for (d, v), vals in sorted(rows.items())]
    adjusted = holm(np.array([t.p for t in tests], dtype=float))
    tests = [replace(t, p_holm=float(p), learned="yes" if p < alpha else "no")
             if np.isfinite(p) and t.learn_n is None else replace(t, p_holm=float(p))
             for t, p in zip(tests, adjusted)]
    by_arm = {(t.dataset, Variant(t.encoder, t.pe, t.fusion)): t for t in tests}
    return tests, by_arm, _unknown_warning(tests)


NO_TEST_ACCURACY = "no test accuracy in the input"


def _no_test_accuracy(df: pd.DataFrame, metrics: list[str]
                      ) -> tuple[list[ChanceTest], dict[ArmKey, ChanceTest], list[dict]]:
    """No test accuracy: no guard (n/a) when the input holds no accuracy at all; when it holds
    only a validation accuracy or a maximum over epochs, every arm's learned? is `unknown`
    (never read from them) and a warning says so."""
    others = validation_only(df, metrics)
    if not others:
        return [], {}, []
    arms = sorted({(d, Variant(*map(str, v))) for d, *v in df[
        ["dataset", "encoder", "pe", "fusion"]].itertuples(index=False, name=None)})
    why = f"{NO_TEST_ACCURACY} (only {', '.join(others)})"
    tests = [ChanceTest(d, v.encoder, v.pe, others[0], v.fusion, v.label, 0, None, NAN, NAN,
                        NAN, NAN, NAN, "unknown", why, why, None, None) for d, v in arms]
    warning = {"code": "chance_no_test_accuracy",
               "message": f"the input holds no test accuracy, only {', '.join(others)}: a "
                          "validation accuracy or a maximum over epochs is never compared "
                          "with the test split's chance level, so every arm's learned? is "
                          "unknown (add the test accuracy column, e.g. test_acc)"}
    return tests, {(t.dataset, Variant(t.encoder, t.pe, t.fusion)): t for t in tests}, [warning]


def _per_seed(df: pd.DataFrame) -> dict[tuple, tuple[float, float]]:
    """(dataset, encoder, pe, fusion, seed) -> (majority rate, test size) of a finished run."""
    keys = df[["dataset", "encoder", "pe", "fusion", "seed"]].itertuples(index=False, name=None)
    done = (df["status"] == FINISHED).to_numpy()
    rate, size = (df[c].to_numpy(dtype=float) for c in (TEST_MAJORITY_RATE, TEST_SIZE))
    return {k: (r, n) for k, r, n, ok in zip(keys, rate, size, done) if ok}


def _arm_test(dataset: str, v: Variant, metric: str, vals: np.ndarray, k: int | None,
              alpha: float) -> ChanceTest:
    """vals (seeds, 3): accuracy, majority rate, test size per seed. The Holm p (and, for the
    t fallback, learned?) are the family's, set by chance_tests. The exact per-seed test runs
    on every seed with a recorded majority rate and test size: a blank test_n on some rows
    never hands the decision to the weaker seed-level t-test."""
    acc, rate, size = vals.T if vals.size else (np.zeros(0),) * 3  # (seeds,) each
    known = rate[np.isfinite(rate)]
    _check_majority_rate(dataset, known, k)
    chance = float(known.mean()) if known.size else (1.0 / k if k else NAN)
    source = MAJORITY_SOURCE if known.size else FALLBACK_SOURCE
    t, p = beats_chance(acc, chance) if np.isfinite(chance) else (NAN, NAN)
    out = ChanceTest(dataset, v.encoder, v.pe, metric, v.fusion, v.label, int(acc.size), k,
                     chance, float(acc.mean()) if acc.size else NAN, t, p, NAN, "unknown",
                     source, T_METHOD, None, None)
    sized = np.isfinite(rate) & np.isfinite(size) & (size >= 1)  # (seeds,)
    if sized.any():
        lr = learn_rate(np.round(acc[sized] * size[sized]), size[sized], rate[sized], alpha)
        part = ("" if lr.n == acc.size else
                f" (the {lr.n} of {acc.size} seeds with a recorded test size)")
        out = replace(out, learn_method=EXACT_METHOD + part, learn_count=lr.count,
                      learn_n=lr.n, learned="yes" if 2 * lr.count > lr.n else "no")
    return out


def _check_majority_rate(dataset: str, rates: np.ndarray, k: int | None) -> None:
    """A split's majority class holds at least 1/K of it and at most all of it: a rate
    outside [1/K, 1] is an error in the input, never a chance level."""
    low = 1.0 / k if k else 0.0
    bad = rates[(rates < low - 1e-9) | (rates > 1.0)]
    if bad.size:
        bound = f"1/num_classes = {low:.3g}" if k else "0"
        raise AnalysisError(f"column {TEST_MAJORITY_RATE!r} for dataset {dataset!r} holds "
                            f"{bad[0]:g}, outside [{bound}, 1]: a test split's majority class "
                            "holds at least 1/K of it; fix the file (or the class count, "
                            f"--num-classes {dataset}=K)")


def learning(by_arm: Mapping[ArmKey, ChanceTest], dataset: str, v: Variant) -> Learning:
    """The arm's learned? state as the guard reads it (fusion_sweep.analysis.guard)."""
    if not by_arm:
        return Learning(v.label, "n/a")
    t = by_arm.get((dataset, v))
    if t is None:
        return Learning(v.label, "unknown")
    basis = ("" if t.learn_n is not None and t.chance_source == MAJORITY_SOURCE else
             BASIS_FALLBACK if t.chance_source == FALLBACK_SOURCE else
             BASIS_T if t.chance_source == MAJORITY_SOURCE else t.learn_method)
    return Learning(v.label, t.learned, not basis, basis, t.learn_count, t.learn_n,
                    t.chance_level)


def _unknown_warning(tests: list[ChanceTest]) -> list[dict]:
    missing = sorted({t.dataset for t in tests if t.num_classes is None})
    if not missing:
        return []
    flags = " ".join(f"--num-classes {d}=K" for d in missing)
    return [{"code": "chance_unknown",
             "message": f"class count unknown for {', '.join(missing)}: 'learned?' (does an "
                        f"arm beat chance?) is unknown there; add a num_classes column or "
                        f"pass {flags}"}]


def arm_state(by_arm: Mapping[ArmKey, ChanceTest], dataset: str, v: Variant, metric: str) -> str:
    """LEARNED_STATES value of one arm, on any metric: its accuracy's chance test ("n/a"
    only when the table holds no accuracy at all)."""
    if not by_arm:
        return "n/a"
    test = by_arm.get((dataset, v))
    return test.learned if test else "unknown"


def chance_level(by_arm: Mapping[ArmKey, ChanceTest], dataset: str, v: Variant, metric: str) -> float:
    """The chance level of an arm's accuracy (nan when unknown or no accuracy recorded)."""
    test = by_arm.get((dataset, v))
    return test.chance_level if test else NAN


def chance_test(by_arm: Mapping[ArmKey, ChanceTest], dataset: str, v: Variant
                ) -> ChanceTest | None:
    """The arm's chance test (CHANCE_TEST_KEYS), None when it has none."""
    return by_arm.get((dataset, v))

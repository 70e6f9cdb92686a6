"""Length regimes and the regime x fusion interaction.

A dataset is one length regime, named and ordered by the median token length of its test
documents (`median_tokens`). The paper's central claim is that the fusion effect depends
on length; this module tests it on the per-seed deltas:

- a Welch one-way ANOVA (statsmodels ``anova_oneway(use_var='unequal')``) of the deltas
  across datasets, per (pe, metric, fusion, baseline): H0 "equal mean delta in every
  regime", robust to the unequal delta variances one expects across lengths;
- the difference in mean deltas, longest minus shortest regime, with a Welch t-interval
  (statsmodels ``CompareMeans.tconfint_diff(usevar='unequal')``). Datasets have separate
  test sets, so their deltas are treated as independent samples.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from statsmodels.stats.oneway import anova_oneway
from statsmodels.stats.weightstats import CompareMeans, DescrStatsW

from analysis.stats import NAN, holm


@dataclass(frozen=True)
class Regime:
    """A dataset's length regime. rank 0 is the shortest."""

    dataset: str
    median_tokens: float
    rank: int
    label: str


def regimes_for(df: pd.DataFrame) -> tuple[list[Regime], list[dict]]:
    """Order datasets by median token length (fallback: name), with any warning."""
    med = df.groupby("dataset", sort=True)["median_tokens"].median()
    missing = [d for d, v in med.items() if not np.isfinite(v)]
    warns = []
    if missing:
        warns.append({"code": "no_median_tokens",
                      "message": "median_tokens missing for "
                                 f"{', '.join(missing)}: regimes ordered by dataset name"})
        order = sorted(med.index)
    else:
        order = sorted(med.index, key=lambda d: (med[d], d))
    regimes = [Regime(d, float(med[d]), i, _label(d, float(med[d]))) for i, d in enumerate(order)]
    return regimes, warns


def _label(dataset: str, median_tokens: float) -> str:
    if np.isfinite(median_tokens):
        return f"{dataset} (median {median_tokens:.0f} tokens)"
    return f"{dataset} (median length unknown)"


def welch_anova(groups: list[np.ndarray]) -> tuple[float, float, float, float]:
    """Welch ANOVA over k groups (each shape (n_i,), n_i >= 2): F, df_num, df_denom, p.

    nan when any group has zero variance (Welch weights n_i / var_i are infinite).
    """
    if len(groups) < 2 or any(g.size < 2 or np.ptp(g) == 0 for g in groups):
        return NAN, NAN, NAN, NAN
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = anova_oneway([np.asarray(g, float) for g in groups], use_var="unequal")
    return float(res.statistic), float(res.df_num), float(res.df_denom), float(res.pvalue)


def diff_in_deltas(
    long: np.ndarray, short: np.ndarray, alpha: float
) -> tuple[float, float, float, float]:
    """mean(long) - mean(short) for deltas long (n1,), short (n2,): diff, Welch CI, p."""
    if long.size < 2 or short.size < 2:
        return NAN, NAN, NAN, NAN
    diff = float(long.mean() - short.mean())
    if np.ptp(long) == 0 and np.ptp(short) == 0:
        return diff, NAN, NAN, NAN  # zero standard error: no interval
    cm = CompareMeans(DescrStatsW(np.asarray(long, float)), DescrStatsW(np.asarray(short, float)))
    low, high = cm.tconfint_diff(alpha=alpha, usevar="unequal")
    _, p, _ = cm.ttest_ind(usevar="unequal")
    return diff, float(low), float(high), float(p)


def interaction_tests(
    comparisons: list[dict], regimes: list[Regime], alpha: float
) -> tuple[list[dict], list[dict]]:
    """One interaction test per (pe, metric, fusion, baseline) seen in >= 2 datasets.

    comparisons: dicts with dataset, pe, metric, fusion, baseline, deltas (list, (n,)).
    Returns (tests with INTERACTION_TEST_KEYS, warnings). Holm across these tests.
    """
    rank = {r.dataset: r.rank for r in regimes}
    groups: dict[tuple, list[dict]] = {}
    for c in comparisons:
        groups.setdefault((c["pe"], c["metric"], c["fusion"], c["baseline"]), []).append(c)
    tests, warns = [], []
    for key, comps in groups.items():
        usable = sorted((c for c in comps if len(c["deltas"]) >= 2), key=lambda c: rank[c["dataset"]])
        if len(usable) < 2:
            continue
        tests.append(_one_test(key, usable, alpha, warns))
    adjusted = holm(np.array([t["welch_p"] for t in tests], dtype=float))
    for t, p in zip(tests, adjusted):
        t["p_holm"] = float(p)
    return tests, warns


def _one_test(key: tuple, usable: list[dict], alpha: float, warns: list[dict]) -> dict:
    """Welch ANOVA + longest-vs-shortest difference for one (pe, metric, fusion, ref)."""
    pe, metric, fusion, ref = key
    arrays = [np.asarray(c["deltas"], float) for c in usable]
    f, df1, df2, p = welch_anova(arrays)
    diff, low, high, dp = diff_in_deltas(arrays[-1], arrays[0], alpha)
    notes = []
    if not np.isfinite(p):
        notes.append("Welch ANOVA undefined: a dataset's deltas have zero variance")
        warns.append({"code": "degenerate_interaction",
                      "message": f"interaction {fusion} vs {ref} ({pe}/{metric}): "
                                 "Welch ANOVA undefined (zero-variance deltas)"})
    return {
        "pe": pe, "metric": metric, "fusion": fusion, "baseline": ref,
        "datasets": [c["dataset"] for c in usable],
        "n_per_dataset": [len(c["deltas"]) for c in usable],
        "welch_f": f, "df_num": df1, "df_denom": df2, "welch_p": p, "p_holm": NAN,
        "long_dataset": usable[-1]["dataset"], "short_dataset": usable[0]["dataset"],
        "diff_in_deltas": diff, "diff_ci_low": low, "diff_ci_high": high, "diff_p": dp,
        "notes": notes,
    }

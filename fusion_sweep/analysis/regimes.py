"""Length regimes and the regime x variant interaction.

A dataset is one length regime, named and ordered by the median token length of its test
documents (`median_tokens`); without it, datasets are ordered by name and every label says
so (no "short"/"long" claims). The question tested on the per-seed deltas is whether **the
fusion effect differs across these datasets** - not whether it depends on length: with
one dataset per regime, length is confounded with domain, label set and base accuracy, so
a difference here is consistent with a length effect but does not isolate it.

- a Welch one-way ANOVA (statsmodels ``anova_oneway(use_var='unequal')``) of the deltas
  across datasets, per (pe, metric, fusion, baseline): H0 "equal mean delta in every
  regime", robust to the unequal delta variances one expects across lengths (one test per
  metric and variant pair: arm vs reference, whatever the comparison axis);
- the difference in mean deltas, last minus first dataset in the regime order (longest
  minus shortest when lengths are known), with a Welch t-interval (statsmodels
  ``CompareMeans.tconfint_diff(usevar='unequal')``). Datasets have separate test sets, so
  their deltas are treated as independent samples.

Warnings: a dataset with fewer than 2 pairs cannot enter the test and is named; any group
with n < :data:`WELCH_MIN_N` makes Welch's approximation poorly calibrated.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from statsmodels.stats.oneway import anova_oneway
from statsmodels.stats.weightstats import CompareMeans, DescrStatsW

from fusion_sweep.analysis.guard import speaks
from fusion_sweep.analysis.records import Comparison, InteractionTest
from fusion_sweep.analysis.schema import INCONCLUSIVE
from fusion_sweep.analysis.settings import DEFAULT_BASELINE
from fusion_sweep.analysis.stats import NAN, holm
from fusion_sweep.analysis.variants import Axis, Variant, parse_baseline

# Below this many pairs in a dataset, Welch's df approximation (and so its p) is poorly
# calibrated: the test still runs, with a warning.
WELCH_MIN_N = 5


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


def lengths_known(regimes: list[Regime]) -> bool:
    """True when every regime has a median token length (the order is by length)."""
    return bool(regimes) and all(np.isfinite(r.median_tokens) for r in regimes)


def interaction_tests(
    comparisons: list[Comparison], regimes: list[Regime], alpha: float,
    axis: Axis | None = None,
) -> tuple[list[InteractionTest], list[dict]]:
    """One interaction test per (metric, arm variant, reference variant) seen in >= 2
    datasets.

    comparisons: dicts with dataset, encoder, pe, fusion, metric, baseline, variant,
    baseline_variant, deltas (list, (n,)). axis: labels for messages (default: fusions).
    Returns (tests with INTERACTION_TEST_KEYS, warnings). Holm across these tests.
    """
    axis = axis or parse_baseline(DEFAULT_BASELINE)
    rank = {r.dataset: r.rank for r in regimes}
    ordered_by = "median_tokens" if lengths_known(regimes) else "name"
    groups: dict[tuple, list[Comparison]] = {}
    for c in comparisons:
        groups.setdefault((c.metric, c.variant, c.baseline_variant), []).append(c)
    tests, warns = [], []
    for comps in groups.values():
        comps = sorted(comps, key=lambda c: rank[c.dataset])
        name = _name(comps[0], axis)
        # A regime where no arm is shown to learn has no effect to differ: never claimed
        # over (the one guard rule, fusion_sweep.analysis.guard.speaks).
        idle = [c for c in comps if not speaks(c)]
        comps = [c for c in comps if c not in idle]
        usable = [c for c in comps if len(c.deltas) >= 2]
        if len(comps) >= 2 and len(usable) < len(comps):
            warns.append(_left_out_warning(name, comps, len(usable)))
        if idle and len(comps) + len(idle) >= 2:
            warns.append(_not_learned_left_out(name, idle))
        if len(usable) < 2:
            continue
        tests.append({**_one_test(name, usable, alpha, warns, ordered_by),
                      "excluded_not_learned": [c.dataset for c in idle]})
    adjusted = holm(np.array([t["welch_p"] for t in tests], dtype=float))
    return [InteractionTest.build({**t, "p_holm": float(p),
                                   "verdict": interaction_verdict(float(p), alpha)})
            for t, p in zip(tests, adjusted)], warns

DIFFERS = "differs"
# The interaction verdict: decided here, beside the test, and written in the JSON.
INTERACTION_VERDICT_RULE = (
    "verdict (estimand: the mean paired Δ per dataset; Welch's ANOVA assumes approximately "
    "normal deltas): 'differs' = the Welch ANOVA's Holm-adjusted p < α (the effect is not "
    "the same on every dataset; which dataset it is larger on: the contrast); else "
    "inconclusive (no claim that the effect is the same). Datasets where no arm is shown "
    "to beat chance are left out (excluded_not_learned)")


def interaction_verdict(p_holm: float, alpha: float) -> str:
    """'differs' when the Holm-adjusted Welch p is below alpha, else 'inconclusive'."""
    return DIFFERS if math.isfinite(p_holm) and p_holm < alpha else INCONCLUSIVE


def _not_learned_left_out(name: str, idle: list[Comparison]) -> dict:
    return {"code": "interaction_not_learned_left_out",
            "message": f"interaction {name}: left out {', '.join(c.dataset for c in idle)}, "
                       "where no arm is shown to beat chance (no effect there to differ)"}


def _name(c: Comparison, axis: Axis) -> str:
    """'concat vs add (sinusoidal/test_acc)': a comparison across datasets, for messages."""
    arm = Variant(c.encoder, c.pe, c.fusion)
    path = "/".join(p for p in (axis.path(axis.group(arm)), c.metric) if p)
    return f"{axis.short(arm)} vs {c.baseline} ({path})"


def _left_out_warning(name: str, comps: list[Comparison], n_usable: int) -> dict:
    """A dataset with < 2 pairs has no variance: it cannot enter the test. Say which."""
    out = ", ".join(f"{c.dataset} (n = {len(c.deltas)})" for c in comps
                    if len(c.deltas) < 2)
    tail = "" if n_usable >= 2 else "; the test was not run (fewer than 2 datasets left)"
    return {"code": "interaction_dataset_left_out",
            "message": f"interaction {name}: left out {out}, "
                       f"which have fewer than 2 pairs{tail}"}


def _one_test(name: str, usable: list[Comparison], alpha: float, warns: list[dict],
              ordered_by: str = "median_tokens") -> dict:
    """Welch ANOVA + last-vs-first (longest-vs-shortest) difference for one comparison."""
    first = usable[0]
    arrays = [np.asarray(c.deltas, float) for c in usable]
    f, df1, df2, p = welch_anova(arrays)
    diff, low, high, dp = diff_in_deltas(arrays[-1], arrays[0], alpha)
    notes = []
    if not np.isfinite(p):
        notes.append("Welch ANOVA undefined: a dataset's deltas have zero variance")
        warns.append({"code": "degenerate_interaction",
                      "message": f"interaction {name}: "
                                 "Welch ANOVA undefined (zero-variance deltas)"})
    small = [f"{c.dataset} (n = {len(c.deltas)})" for c in usable
             if len(c.deltas) < WELCH_MIN_N]
    if small:
        notes.append(f"fewer than {WELCH_MIN_N} pairs in {', '.join(small)}: Welch's p is "
                     "poorly calibrated")
        warns.append({"code": "interaction_small_n",
                      "message": f"interaction {name}: fewer than "
                                 f"{WELCH_MIN_N} pairs in {', '.join(small)}; the Welch ANOVA "
                                 "and Welch interval are poorly calibrated at this n, read "
                                 "them as descriptive"})
    return {
        "pe": first.pe, "metric": first.metric, "fusion": first.fusion,
        "baseline": first.baseline, "datasets": [c.dataset for c in usable],
        "n_per_dataset": [len(c.deltas) for c in usable],
        "welch_f": f, "df_num": df1, "df_denom": df2, "welch_p": p,
        "long_dataset": usable[-1].dataset, "short_dataset": usable[0].dataset,
        "diff_in_deltas": diff, "diff_ci_low": low, "diff_ci_high": high, "diff_p": dp,
        "notes": notes, "ordered_by": ordered_by, "encoder": first.encoder,
        "variant": first.variant, "baseline_variant": first.baseline_variant,
    }

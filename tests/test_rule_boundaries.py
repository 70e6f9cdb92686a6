"""Each documented rule at its boundary value and one step either side (issue 42, item 4):
"below α" (docs/statistics.md: verdict, TOST, Holm's first step, the learn test, a claim
contradicted only below α/m), "at least"
(a split's majority class holds at least 1/K; the sign test reaches α/m at n ≥ 8 for m = 6).
"most seeds" and "over one device" are in tests/test_mutant_classes.py; statistics.md's size
rules in tests/test_statistics_boundaries.py; sequential.md's in
tests/test_sequential_boundaries.py."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from fusion_sweep.analysis import chance, stats, winrate
from fusion_sweep.analysis.schema import AnalysisError

ALPHA = 0.05
BELOW, AT, ABOVE = math.nextafter(ALPHA, 0), ALPHA, math.nextafter(ALPHA, 1)
NAN = float("nan")


@pytest.mark.parametrize("p, decided", [(BELOW, True), (AT, False), (ABOVE, False)])
def test_better_needs_the_holm_p_below_alpha(p: float, decided: bool) -> None:
    """statistics.md: better/worse iff the Holm p < α and the t-interval excludes 0."""
    assert (stats.verdict(0.01, 0.03, p, NAN, ALPHA) == "better") is decided
    assert (stats.verdict(-0.03, -0.01, p, NAN, ALPHA) == "worse") is decided


@pytest.mark.parametrize("p, decided", [(BELOW, True), (AT, False), (ABOVE, False)])
def test_equivalent_needs_the_tost_p_below_alpha(p: float, decided: bool) -> None:
    """statistics.md (`holm_tost_family`): `equivalent` needs the adjusted TOST p below α."""
    assert (stats.verdict(-0.01, 0.01, 0.9, p, ALPHA) == "equivalent") is decided


@pytest.mark.parametrize("low, high", [(0.0, 0.03), (-0.03, 0.0), (-1e-12, 0.03)])
def test_an_interval_touching_zero_decides_nothing(low: float, high: float) -> None:
    assert stats.verdict(low, high, 0.001, NAN, ALPHA) == "inconclusive"


@pytest.mark.parametrize("m", [2, 4])  # powers of 2: α/m · m is α exactly
def test_holms_first_step_is_the_smallest_p_times_m(m: int) -> None:
    """statistics.md (`holm_family`): the smallest p must be below α/m: at α/m it is not."""
    for p0, decided in ((math.nextafter(ALPHA / m, 0), True), (ALPHA / m, False),
                        (math.nextafter(ALPHA / m, 1), False)):
        adj = stats.holm(np.r_[p0, np.full(m - 1, 0.9)])
        assert bool(adj[0] < ALPHA) is decided, (m, p0, adj[0])


@pytest.mark.parametrize("n, reaches", [(7, False), (8, True), (9, True)])
def test_the_sign_test_reaches_alpha_over_m_from_eight_seeds_at_m_six(n: int,
                                                                       reaches: bool) -> None:
    """statistics.md: the sign test cannot reach α/m until 2 · 0.5ⁿ < α/m (n ≥ 8 at m = 6)."""
    assert stats.min_p_signed(n) == pytest.approx(2 * 0.5 ** n)
    assert (stats.min_p_signed(n) < ALPHA / 6) is reaches
    all_wins = winrate.sign_test(np.full(n, 0.01))
    assert bool(all_wins.p_two_sided < ALPHA / 6) is reaches


def test_a_seed_learns_when_its_p_is_at_most_alpha() -> None:
    """winrate.learn_rate: learned_i = p_i <= α (boundary included), one step below not."""
    p = sps.binomtest(60, 100, p=0.5, alternative="greater").pvalue
    for alpha, learned in ((math.nextafter(p, 1), True), (p, True), (math.nextafter(p, 0), False)):
        lr = winrate.learn_rate(np.array([60]), np.array([100]), np.array([0.5]), alpha)
        assert bool(lr.learned[0]) is learned and lr.count == int(learned)


@pytest.mark.parametrize("rate, ok", [(0.5, True), (0.5 - 1e-6, False), (0.5 + 1e-6, True),
                                      (1.0, True), (1.0 + 1e-6, False)])
def test_a_majority_rate_is_at_least_one_over_k_and_at_most_one(rate: float, ok: bool) -> None:
    """statistics.md / chance.py: a split's majority class holds at least 1/K of it and at most
    all of it; outside [1/K, 1] is an error in the input, never a chance level."""
    if ok:
        chance._check_majority_rate("d", np.array([rate]), 2)
    else:
        with pytest.raises(AnalysisError, match=r"'test_majority_rate' for dataset 'd' holds"):
            chance._check_majority_rate("d", np.array([rate]), 2)


@pytest.mark.parametrize("step, worse", [(-1, True), (0, False), (1, False)])
def test_a_claim_is_contradicted_only_below_alpha_over_m(step: int, worse: bool) -> None:
    """statistics.md (claims): `worse` needs the opposite one-sided p < α/m; at α/m it is not
    (m = 4, a power of 2: α/m is exact)."""
    from fusion_sweep.analysis.claims import GREATER, Plan, _holm, _Result, _Stats

    def one_sided(p: float, p_opposite: float) -> _Stats:
        plan = Plan("C", "C · d", ("d",), "test_acc", "arm - ref", alternative=GREATER,
                    holds_if=("better",), contradicted_if=("worse",))
        return _Stats(_Result(plan), p=p, p_opposite=p_opposite)

    edge = ALPHA / 4
    p_opposite = {-1: math.nextafter(edge, 0), 0: edge, 1: math.nextafter(edge, 1)}[step]
    pre = [one_sided(0.6, p_opposite)] + [one_sided(0.5, 0.5) for _ in range(3)]
    tests, m, _ = _holm(pre, ALPHA, frozenset())
    assert m == 4 and (tests[0].verdict == "worse") is worse, tests[0].verdict


@pytest.mark.parametrize("value", ["higher", "lower"])
def test_a_sweeps_direction_is_taken_as_given(value: str) -> None:
    """metrics.py: the sweep's `directions` entry decides a metric of unknown direction, as the
    string it is (the comparison's higher_is_better reads it)."""
    from fusion_sweep.analysis.metrics import check_direction_value, resolve_direction

    got = resolve_direction("foo", directions={"foo": value})
    assert got == value and type(got) is str
    assert check_direction_value("foo", value) == value


@pytest.mark.parametrize("value", ["up", "Higher", "", 1])
def test_a_sweeps_direction_outside_higher_lower_is_refused_by_name(value: object) -> None:
    from fusion_sweep.analysis.metrics import check_direction_value, resolve_direction

    want = (f"^direction of metric 'foo' must be 'higher' or 'lower', got {value!r} "
            r"\(sweep param `directions`\)$")
    with pytest.raises(AnalysisError, match=want):
        resolve_direction("foo", directions={"foo": value})
    with pytest.raises(AnalysisError, match=want):
        check_direction_value("foo", value)


@pytest.mark.parametrize("name", sorted(__import__(
    "fusion_sweep.analysis.schema", fromlist=["x"]).LOWER_IS_BETTER))
def test_each_exact_lower_is_better_name_is_lower(name: str) -> None:
    """metrics.name_direction: the exact-name table before the substring rule (params,
    train_seconds ... match no substring); exactly 'lower', the value every reader compares."""
    from fusion_sweep.analysis.metrics import name_direction, resolve_direction

    assert name_direction(name) == "lower" and resolve_direction(name) == "lower"


@pytest.mark.parametrize("name", sorted(__import__(
    "fusion_sweep.analysis.schema", fromlist=["x"]).HIGHER_IS_BETTER))
def test_each_exact_higher_is_better_name_is_higher(name: str) -> None:
    from fusion_sweep.analysis.metrics import name_direction, resolve_direction

    assert name_direction(name) == "higher" and resolve_direction(name) == "higher"


@pytest.mark.parametrize("name, want", [
    ("val_loss", "lower"), ("Test_Error_Rate", "lower"), ("perplexity", "lower"),
    ("test_acc", "higher"), ("macro_F1", "higher"), ("roc_auc", "higher"),
    ("acc_loss", None), ("foo", None), ("", None)])
def test_a_name_says_its_direction_by_one_list_only(name: str, want: str | None) -> None:
    """metrics.name_direction's substring rule: a name matching the lower list only is
    'lower', the higher list only 'higher', both or neither: no direction (refused)."""
    from fusion_sweep.analysis.metrics import name_direction

    assert name_direction(name) == want


@pytest.mark.parametrize("flag", ["higher", "lower"])
def test_a_direction_flag_decides_only_a_metric_of_unknown_direction(flag: str) -> None:
    from fusion_sweep.analysis.metrics import resolve_direction

    assert resolve_direction("foo", flag) == flag  # nothing known: the flag decides
    assert resolve_direction("val_loss", "lower") == "lower"  # agrees with the name


def test_a_direction_flag_against_the_table_or_the_name_is_refused_saying_which(
        monkeypatch) -> None:
    """The metric table (schema.METRIC_DIRECTIONS) is read before the name: a table entry
    whose name says nothing still refuses a contradicting flag, and the error says which
    source knew the direction."""
    from fusion_sweep.analysis import metrics

    monkeypatch.setitem(metrics.METRIC_DIRECTIONS, "gizmo", "lower")
    with pytest.raises(AnalysisError, match=(
            r"^--direction higher contradicts the known direction of metric 'gizmo' \(lower "
            r"is better: the metric table says so\); drop --direction: it is only for metrics "
            r"whose direction is not known$")):
        metrics.resolve_direction("gizmo", "higher")
    assert metrics.resolve_direction("gizmo", "lower") == "lower"
    with pytest.raises(AnalysisError, match=(
            r"^--direction higher contradicts the known direction of metric 'val_loss' "
            r"\(lower is better: its name says so\); drop --direction")):
        metrics.resolve_direction("val_loss", "higher")


# 'negligible impact' (claims, C4): worse only when the whole interval lies BEYOND the margin
# on the worse side; better needs the interval above 0 (and the Holm p below alpha).
def _negligible(low: float, high: float, higher: bool = True, p_holm: float = 0.01,
                tost_p_holm: float = 0.5) -> str:
    from fusion_sweep.analysis.claims import Plan, _negligible_verdict, _Result, _Stats

    plan = Plan("C4", "C4 · d", ("d",), "test_acc", "arm - ref", negligible=True)
    st = _Stats(_Result(plan), ci_low=low, ci_high=high, equivalence_margin=0.02,
                higher=higher)
    return _negligible_verdict(st, p_holm, tost_p_holm, ALPHA, [])


@pytest.mark.parametrize("step, worse", [(-1, True), (0, False), (1, False)])
def test_negligible_impact_is_contradicted_only_beyond_the_margin(step: int, worse: bool) -> None:
    edge = -0.02
    high = {-1: math.nextafter(edge, -1), 0: edge, 1: math.nextafter(edge, 1)}[step]
    assert (_negligible(-0.05, high) == "worse") is worse
    # lower is better: the same interval, mirrored, is the same verdict
    assert (_negligible(-high, 0.05, higher=False) == "worse") is worse


@pytest.mark.parametrize("low, better", [(math.nextafter(0, -1), False), (0.0, False),
                                         (math.nextafter(0, 1), True)])
def test_negligible_impact_reads_better_only_above_zero(low: float, better: bool) -> None:
    assert (_negligible(low, 0.05) == "better") is better
    assert (_negligible(-0.05, -low, higher=False) == "better") is better
    assert _negligible(0.01, 0.05, p_holm=ALPHA) == "inconclusive"  # at alpha: not below
    assert _negligible(0.01, 0.05, tost_p_holm=0.01) == "equivalent"  # TOST first


def test_negligible_impact_is_equivalent_only_below_alpha() -> None:
    assert _negligible(0.01, 0.05, tost_p_holm=math.nextafter(ALPHA, 0)) == "equivalent"
    assert _negligible(0.01, 0.05, tost_p_holm=ALPHA) == "better"  # at alpha: the t rule


@pytest.mark.parametrize("states, unit", [
    (("SUP",), "SUP"), (("SUP", "UND"), "SUP"), (("CON", "UND"), "CON"), (("SUP", "CON"), "UND"),
    (("UND", "UND"), "UND")])
def test_a_training_supports_when_some_test_of_it_does_and_none_contradicts(
        states: tuple[str, ...], unit: str) -> None:
    """claims._per_training: a regime and its structure-noise probes re-test one training;
    it supports (contradicts) when some of its tests do and none goes the other way."""
    from types import MappingProxyType

    from fusion_sweep.analysis.claims import ClaimTest, _per_training
    from fusion_sweep.analysis.schema import CONTRADICTS, SUPPORTS, UNDECIDED

    word = {"SUP": SUPPORTS, "CON": CONTRADICTS, "UND": UNDECIDED}
    states, unit = tuple(word[s] for s in states), word[unit]
    base = dict.fromkeys(f.name for f in __import__("dataclasses").fields(ClaimTest))
    tests = [ClaimTest(**{**base, "test": f"C1 · {d}", "datasets": (d,), "support": s})
             for d, s in zip(("long", "long-shuffled"), states)]
    assert _per_training(tests, MappingProxyType({"long-shuffled": "long"})) == [unit]


@pytest.mark.parametrize("name, proportion", [("test_acc", True), ("Test_ACC", True),
                                              ("val_F1", True), ("roc_AUC", True),
                                              ("latency_ms_per_sample", False)])
def test_a_proportion_is_known_by_its_name_in_any_case(name: str, proportion: bool) -> None:
    from fusion_sweep.analysis.metrics import is_proportion

    assert is_proportion(name) is proportion


def test_a_metric_of_unknown_direction_is_refused_naming_both_flags() -> None:
    from fusion_sweep.analysis.metrics import resolve_direction

    with pytest.raises(AnalysisError, match=(r"^direction of metric 'foo' is unknown; pass "
                                             r"--direction higher or --direction lower$")):
        resolve_direction("foo")

"""docs/statistics.md's size rules at the boundary value and one step either side (issue 42,
item 4; the α rules are in tests/test_rule_boundaries.py): the exact sign-flip and the exact
conditional Wilcoxon "for n ≤ 16" (at most 16 non-zero Δ), Wilcoxon's exact table for
"n ≤ 50", BCa "undefined for n < 3" and "descriptive below n = 10", "fewer than 5 pairs"
flagged `rests on normality`, "seeds needed is at least 2" (and the smallest n reaching 80% power), "fewer than 100 resamples" an
error, and an interaction test over datasets "with at least two pairs each".
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from fusion_sweep.analysis import stats
from fusion_sweep.analysis.schema import AnalysisError
from fusion_sweep.analysis.settings import Settings

sys.path.insert(0, str(Path(__file__).parent))
from report_json import arms, comparison, row, stats_json  # noqa: E402

RNG = np.random.default_rng(0)


def _tied(n: int) -> np.ndarray:
    """n non-zero deltas with ties (so no exact table): 0.01, 0.01, 0.02, 0.02, ..."""
    return np.array([0.01 * (1 + i // 2) * (-1) ** (i % 3 == 2) for i in range(n)])


@pytest.mark.parametrize("n, exact", [(15, True), (16, True), (17, False)])
def test_the_conditional_wilcoxon_is_exact_for_at_most_sixteen_nonzero_deltas(
        n: int, exact: bool) -> None:
    p, method = stats.wilcoxon_signed_rank(_tied(n))
    assert method.startswith("exact-permutation (ties") is exact, method
    assert method.startswith("asymptotic (ties") is (not exact), method
    assert 0 < p <= 1
    # zeros do not count towards the 16: 16 non-zero and a zero stays exact
    _, with_zero = stats.wilcoxon_signed_rank(np.r_[_tied(min(n, 16)), 0.0])
    assert with_zero.startswith("exact-permutation (ties, zeros")


@pytest.mark.parametrize("n, exact", [(49, True), (50, True), (51, False)])
def test_the_wilcoxon_table_is_used_up_to_fifty_untied_deltas(n: int, exact: bool) -> None:
    d = np.arange(1, n + 1) * 0.001 * np.where(np.arange(n) % 4 == 3, -1, 1)  # no ties
    _, method = stats.wilcoxon_signed_rank(d)
    assert (method == "exact") is exact, method
    if not exact:
        assert method.startswith("asymptotic (n > 50")


@pytest.mark.parametrize("n, exact", [(15, True), (16, True), (17, False)])
def test_the_sign_flip_is_exact_up_to_sixteen_pairs(n: int, exact: bool) -> None:
    _, method = stats.signflip_test(_tied(n), np.random.default_rng(0), 200)
    assert (method == f"exact (2^{n} flips)") is exact, method
    assert method.startswith("monte-carlo (200 flips") is (not exact), method


@pytest.mark.parametrize("n, defined", [(2, False), (3, True), (4, True)])
def test_the_bca_interval_needs_three_pairs(n: int, defined: bool) -> None:
    low, high = stats.bca_interval(_tied(n) + 0.05, 0.05, 200, np.random.default_rng(0))
    assert math.isfinite(low) is defined and math.isfinite(high) is defined


@pytest.mark.parametrize("dz", [0.3, 1.0, 2.5, 50.0, -50.0])
def test_seeds_needed_is_the_smallest_n_reaching_the_power_and_at_least_two(dz: float) -> None:
    """At n - 1 the power is below 80%, at n it is reached; a huge effect still needs two
    pairs (a t-test has no spread below that)."""
    n = stats.seeds_for_power(dz, 0.05)
    assert n >= 2 and stats.achieved_power(dz, n, 0.05) >= 0.8
    if n > 2:
        assert stats.achieved_power(dz, n - 1, 0.05) < 0.8
    assert (n == 2) is (abs(dz) > 10)


@pytest.mark.parametrize("n_boot, ok", [(99, False), (100, True), (101, True)])
def test_at_least_one_hundred_resamples(n_boot: int, ok: bool) -> None:
    s = Settings(n_boot=n_boot)
    if ok:
        assert s.validate() is s
    else:
        with pytest.raises(AnalysisError, match=r"--bootstrap must be at least 100 resamples"):
            s.validate()


def _steady(n: int) -> dict:
    """gate ahead of add on every one of n seeds by a varying margin: better by mean Δ."""
    return {"add": [0.70 + 0.01 * (s % 3) for s in range(n)],
            "gate": [0.75 + 0.01 * (s % 3) + 0.002 * (s % 2) for s in range(n)]}


@pytest.mark.parametrize("n, small, descriptive", [(4, True, True), (5, False, True),
                                                   (6, False, True), (9, False, True),
                                                   (10, False, False), (11, False, False)])
def test_fewer_than_five_pairs_rest_on_normality_and_fewer_than_ten_bootstrap_is_descriptive(
        tmp_path, capsys, n: int, small: bool, descriptive: bool) -> None:
    rep = stats_json(arms(_steady(n)), tmp_path, capsys, "--baseline", "add",
                     "--bootstrap", "100")
    c = comparison(rep, "gate")
    assert c["verdict"] == "better" and c["n"] == n
    flags = " ".join(c["verdict_flags"])
    assert ("rests on normality (n" in flags) is small, flags
    assert c["boot_descriptive"] is descriptive


@pytest.mark.parametrize("k, enters", [(1, False), (2, True), (3, True)])
def test_a_dataset_enters_the_interaction_test_with_at_least_two_pairs(
        tmp_path, capsys, k: int, enters: bool) -> None:
    rows = arms(_steady(6), dataset="d1") + [
        row(f, s, a, dataset="d2") for f, vals in _steady(k).items() for s, a in enumerate(vals)]
    rep = stats_json(rows, tmp_path, capsys, "--baseline", "add", "--bootstrap", "100")
    tests = rep["interaction"]["tests"]
    assert bool(tests) is enters, tests
    codes = [w["code"] for w in rep["warnings"]]
    assert ("interaction_dataset_left_out" in codes) is (not enters), codes


# ------------------------------------------------- the small rules of stats.py, at the edge
def test_two_pairs_with_spread_are_enough_for_a_t_test() -> None:
    """has_spread: n >= 2 and SD > 0. At n = 2 the paired t and its interval exist; at n = 1,
    or with every Δ equal, they do not."""
    assert stats.has_spread(np.array([0.1, 0.2]))
    assert not stats.has_spread(np.array([0.1])) and not stats.has_spread(np.array([0.2, 0.2]))
    r = stats.paired_t(np.array([0.6, 0.8]), np.array([0.5, 0.6]), 0.05)
    assert math.isfinite(r.low) and math.isfinite(r.p) and r.df == 1.0
    assert stats.min_p_t(2) == 0.0 and math.isnan(stats.min_p_t(1))


def test_the_holm_consistent_interval_needs_a_positive_adjusted_p() -> None:
    """An adjusted p of 0 (a raw p that underflowed) gives no level to build the interval at:
    nan, never a division by zero. The level never drops below 1 - alpha (p <= p_holm)."""
    d = np.array([0.1, 0.2, 0.15, 0.12])
    assert all(math.isnan(v) for v in stats.holm_consistent_interval(d, 0.0, 0.0, 0.05))
    assert stats.holm_consistent_interval(d, 0.01, 0.04, 0.05)[2] == pytest.approx(0.9875)
    assert stats.holm_consistent_interval(d, 0.04, 0.04, 0.05)[2] == pytest.approx(0.95)
    assert stats.holm_consistent_interval(d, 0.08, 0.04, 0.05)[2] == pytest.approx(0.95)


@pytest.mark.parametrize("margin, decided", [(0.0, False), (-0.01, False), (1e-9, True)])
def test_tost_needs_a_positive_margin(margin: float, decided: bool) -> None:
    """tost_p: no test without a margin above 0 (a zero margin is an empty interval)."""
    x, y = np.array([0.50, 0.52, 0.51, 0.53]), np.array([0.50, 0.50, 0.52, 0.52])
    assert math.isfinite(stats.tost_p(x, y, margin)) is decided


def test_seeds_for_power_stops_where_the_power_reaches_the_target() -> None:
    """'the smallest n whose power reaches `power`': a target equal to the power at n = 6 is
    reached at 6, not 7."""
    at6 = stats.achieved_power(0.8, 6, 0.05)
    assert stats.seeds_for_power(0.8, 0.05, at6) == 6
    assert stats.seeds_for_power(0.8, 0.05, math.nextafter(at6, 1)) == 7


@pytest.mark.parametrize("method", ["exact", "exact-permutation (ties; zero_method=wilcox)"])
def test_the_exact_wilcoxon_floors_are_two_over_two_to_the_n(method: str) -> None:
    """min_p_wilcoxon: exact and exact-permutation reach 2 / 2**n; only 'asymptotic' uses
    the normal tail."""
    assert stats.min_p_wilcoxon(8, method) == 2 / 2**8
    assert stats.min_p_wilcoxon(8, "asymptotic (n > 50)") > 2 / 2**8


def _enumerated_wilcoxon_p(nonzero: np.ndarray) -> float:
    """The two-sided p of T+ by brute force over all 2**n sign flips, ranks fixed (average
    ranks for ties): P(|T+ - E T+| >= |t_obs - E T+|) under the flip null."""
    from scipy.stats import rankdata

    ranks = rankdata(np.abs(nonzero))
    n = ranks.size
    flips = (np.arange(2 ** n)[:, None] >> np.arange(n)) & 1  # (2^n, n): 1 = positive
    t_all = flips @ ranks
    t_obs = ranks[nonzero > 0].sum()
    centre = ranks.sum() / 2
    extreme = np.abs(t_all - centre) >= abs(t_obs - centre) - 1e-9
    return float(extreme.mean())


@pytest.mark.parametrize("n", [14, 16])  # 2^n above 9,999 (scipy's default resamples)
def test_the_conditional_wilcoxon_enumerates_every_flip_at_the_largest_exact_n(n: int) -> None:
    """At 14 to 16 non-zero deltas the p is the full enumeration's, not a Monte Carlo
    estimate: the same as brute force over all 2**n flips, on every call."""
    d = _tied(n)
    p, method = stats.wilcoxon_signed_rank(d)
    assert method.startswith("exact-permutation")
    assert p == pytest.approx(_enumerated_wilcoxon_p(d[d != 0]), abs=1e-12)
    assert stats.wilcoxon_signed_rank(d)[0] == p


def test_a_ratio_of_no_seeds_is_undefined_and_says_why() -> None:
    r = stats.ratio_test(np.array([]), np.array([]), 0.05)
    assert all(math.isnan(v) for v in (r.ratio, r.low, r.high, r.p))
    assert (r.exact, r.note) == (False, "no paired seeds: no ratio")


def _undefined(r) -> bool:
    return all(math.isnan(v) for v in (r.ratio, r.low, r.high, r.p)) and not r.exact


@pytest.mark.parametrize("x, y", [([0.0, 2.0], [1.0, 1.0]), ([1.0, 2.0], [1.0, 0.0]),
                                  ([-1.0, 2.0], [1.0, 1.0]), ([1.0, 2.0], [-1.0, 1.0])])
def test_a_ratio_with_a_value_at_or_below_zero_on_either_side_is_undefined(x, y) -> None:
    r = stats.ratio_test(np.array(x), np.array(y), 0.05)
    assert _undefined(r) and r.note == "ratio undefined: a value is <= 0"
    tiny = [v if v > 0 else 1e-3 for v in x], [v if v > 0 else 1e-3 for v in y]
    assert math.isfinite(stats.ratio_test(np.array(tiny[0]), np.array(tiny[1]), 0.05).ratio)


@pytest.mark.parametrize("n", [2, 3])
def test_the_same_ratio_on_every_seed_from_two_seeds_is_exact(n: int) -> None:
    r = stats.ratio_test(np.full(n, 3.0), np.full(n, 1.5), 0.05)
    assert r.exact and r.ratio == pytest.approx(2.0)
    assert all(math.isnan(v) for v in (r.low, r.high, r.p))
    assert r.note == ("the same ratio (2) on every seed: a deterministic cost, no seed noise "
                      "to test; verdict by the ratio itself")


def test_one_seed_has_a_ratio_but_no_interval() -> None:
    r = stats.ratio_test(np.array([3.0]), np.array([1.5]), 0.05)
    assert not r.exact and r.ratio == pytest.approx(2.0)
    assert all(math.isnan(v) for v in (r.low, r.high, r.p))
    assert r.note == "only 1 paired seed: ratio interval undefined"


def test_a_ratio_is_the_geometric_mean_with_the_t_interval_of_the_log_ratios() -> None:
    from scipy import stats as sps

    x, y = np.array([2.0, 3.0, 5.0, 4.0]), np.array([1.0, 2.0, 2.0, 1.0])
    lr = np.log(x / y)
    t = sps.ttest_1samp(lr, 0.0)
    low, high = t.confidence_interval(0.95)
    r = stats.ratio_test(x, y, 0.05)
    assert (r.ratio, r.low, r.high, r.p) == pytest.approx(
        (math.exp(lr.mean()), math.exp(low), math.exp(high), t.pvalue), rel=1e-6)
    assert not r.exact and r.note == ""


@pytest.mark.parametrize("dz, n", [(0.2, 5), (0.5, 10), (1.0, 3)])
def test_the_two_tailed_power_fallback_is_statsmodels_power_where_that_is_defined(
        dz: float, n: int) -> None:
    """The fallback for statsmodels' NaN (huge effects) is the same two-tailed power: both
    tails, each at alpha/2 (where the wrong-direction tail is not negligible, at small d_z)."""
    from statsmodels.stats.power import TTestPower

    want = TTestPower().power(effect_size=dz, nobs=n, alpha=0.05)
    assert stats._power_two_tails(dz, n, 0.05) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("d, sd, df", [
    ([], math.nan, math.nan), ([0.2], math.nan, 0.0), ([0.2, 0.2], 0.0, 1.0)])
def test_a_t_without_spread_keeps_its_mean_sd_and_df_and_has_no_interval(d, sd, df) -> None:
    t = stats.one_sample_t(np.array(d, dtype=float), 0.05)
    assert math.isnan(t.mean) if not d else t.mean == pytest.approx(0.2)
    assert (math.isnan(t.sd) and math.isnan(sd)) or t.sd == sd
    assert (math.isnan(t.df) and math.isnan(df)) or t.df == df
    assert all(math.isnan(v) for v in (t.low, t.high, t.p))


def test_a_t_with_spread_has_the_sample_sd_from_two_pairs() -> None:
    t = stats.one_sample_t(np.array([0.1, 0.3]), 0.05)
    assert t.sd == pytest.approx(np.std([0.1, 0.3], ddof=1)) and t.df == 1.0
    assert t.low < t.mean < t.high and 0 < t.p < 1


@pytest.mark.parametrize("dz, start, want", [
    (1.0, 9, 10), (1.0, 10, 10),  # one below the answer and at it (test_analysis_stats:
    (50.0, 2, 2), (50.0, 3, 2), (50.0, 4, 2), (50.0, 9, 2)])  # above); down to the floor of 2
def test_the_seed_search_reaches_the_floor_of_two_and_the_answer_from_just_below(
        dz: float, start: int, want: int) -> None:
    assert stats._smallest_n(dz, 0.05, 0.8, start=start) == want
    assert stats.achieved_power(dz, want, 0.05) >= 0.8
    assert want == 2 or stats.achieved_power(dz, want - 1, 0.05) < 0.8


@pytest.mark.parametrize("cap, want", [(16, None), (17, 10)])
def test_the_seed_search_gives_up_only_past_its_cap(cap: int, want: int | None) -> None:
    """From 2 the gallop tries 3, 5, 9, 17 for d_z = 1 (10 needed): a cap of 17 lets it reach
    17 and bisect back to 10; one below, it stops with no answer."""
    assert stats._smallest_n(1.0, 0.05, 0.8, start=2, cap=cap) == want

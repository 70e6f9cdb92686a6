"""Each function of `analysis.stats` against a reference written from its definition:
brute-force sign flips, scipy and statsmodels called directly, the smallest n found by
counting up. Unit-level (well under a second in all) so that a mutant of stats.py meets a
test that fails on it before the slow end-to-end ones (issue 42)."""
from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestPower
from statsmodels.stats.weightstats import ttost_paired

from fusion_sweep.analysis import stats as S
from fusion_sweep.analysis.schema import BETTER, EQUIVALENT, INCONCLUSIVE, NOT_LEARNED, WORSE

nan = float("nan")
X = np.array([0.71, 0.74, 0.69, 0.80, 0.77, 0.73])
Y = np.array([0.70, 0.70, 0.70, 0.74, 0.71, 0.75])


def same(a, b) -> bool:
    """Equal, nan equal to nan."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def flips(values: np.ndarray) -> np.ndarray:
    """Every sign flip of values (n,): (2**n, n)."""
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=values.size)))
    return signs * values


def two_sided(null: np.ndarray, observed: float) -> float:
    """scipy's two-sided permutation p: twice the smaller tail, at most 1."""
    eps = 1e-12 * max(1.0, abs(observed))
    return min(1.0, 2 * min(np.mean(null >= observed - eps), np.mean(null <= observed + eps)))


# --- deltas and spread ---------------------------------------------------------------

def test_paired_deltas_round_float_noise_away_and_are_float():
    d = S.paired_deltas([0.81, 0.71, 1 + 4e-13], [0.80, 0.70, 1.0])
    assert d.dtype == float and d[0] == d[1] == 0.01 and d[2] == 0.0
    assert S.paired_deltas(np.array([3, 1]), np.array([1, 1])).dtype == float
    assert S.paired_deltas([1.0 + 6e-12], [1.0])[0] == pytest.approx(6e-12, abs=1e-13)


@pytest.mark.parametrize("x, y", [([1.0, 2.0], [1.0]), ([[1.0, 2.0]], [[1.0, 2.0]]),
                                  ([1.0], [[1.0]])])
def test_paired_deltas_need_two_1d_arrays_of_one_length(x, y):
    shapes = f"{np.shape(x)} and {np.shape(y)}"
    with pytest.raises(ValueError, match=r"^x and y must be 1-D of equal length, got "
                                         + shapes.replace("(", r"\(").replace(")", r"\)") + "$"):
        S.paired_deltas(x, y)


@pytest.mark.parametrize("d, spread", [([], False), ([0.3], False), ([0.3, 0.3], False),
                                       ([0.3, 0.30001], True), ([0.0, 0.0, 0.0], False),
                                       ([-1.0, 1.0], True)])
def test_has_spread_needs_two_values_that_differ(d, spread):
    assert S.has_spread(np.array(d)) is spread


# --- paired t and its Holm-consistent interval ---------------------------------------

@pytest.mark.parametrize("alpha", [0.05, 0.2])
def test_paired_t_is_scipys_ttest_rel_with_its_interval(alpha):
    ref = sps.ttest_rel(X, Y)
    ci = ref.confidence_interval(confidence_level=1 - alpha)
    t = S.paired_t(X, Y, alpha)
    d = np.round(X - Y, 12)
    assert (t.mean, t.sd, t.df) == (pytest.approx(d.mean()), pytest.approx(d.std(ddof=1)), 5.0)
    assert (t.low, t.high, t.p) == (pytest.approx(ci.low), pytest.approx(ci.high),
                                    pytest.approx(ref.pvalue))


@pytest.mark.parametrize("x, y, mean, sd, df", [([], [], nan, nan, nan),
                                                ([0.7], [0.5], 0.2, nan, 0.0),
                                                ([0.7, 0.6], [0.5, 0.4], 0.2, 0.0, 1.0)])
def test_paired_t_without_spread_has_no_interval_or_p(x, y, mean, sd, df):
    warnings.simplefilter("error")  # nan by the guards, never by numpy's empty-slice warnings
    t = S.paired_t(np.array(x), np.array(y), 0.05)
    assert same(t.mean, mean) or t.mean == pytest.approx(mean)
    assert same(t.sd, sd) and same(t.df, df)
    assert all(math.isnan(v) for v in (t.low, t.high, t.p))


@pytest.mark.parametrize("p, p_adj, alpha", [(0.01, 0.03, 0.05), (0.002, 0.002, 0.1),
                                             (0.04, 0.02, 0.05)])
def test_holm_consistent_interval_is_the_t_interval_at_alpha_p_over_p_adjusted(p, p_adj, alpha):
    d = np.round(X - Y, 12)
    level = 1 - alpha * min(1.0, p / p_adj)
    half = sps.t.ppf(1 - (1 - level) / 2, d.size - 1) * sps.sem(d)
    low, high, got = S.holm_consistent_interval(d, p, p_adj, alpha)
    assert got == pytest.approx(level)
    assert (low, high) == (pytest.approx(d.mean() - half), pytest.approx(d.mean() + half))


@pytest.mark.parametrize("d, p, p_adj", [([0.1, 0.1, 0.1], 0.01, 0.02), ([0.1], 0.01, 0.02),
                                         (list(X - Y), nan, 0.02), (list(X - Y), 0.01, nan),
                                         (list(X - Y), 0.01, 0.0),
                                         (list(X - Y), 0.01, float("inf"))])
def test_holm_consistent_interval_is_nan_when_undefined(d, p, p_adj):
    assert all(math.isnan(v) for v in S.holm_consistent_interval(np.array(d), p, p_adj, 0.05))


def test_holm_consistent_interval_takes_lists_and_a_tiny_adjusted_p():
    low, high, level = S.holm_consistent_interval(list(X - Y), 1e-300, 1e-300, 0.05)
    assert level == pytest.approx(0.95) and low < high


# --- Wilcoxon -------------------------------------------------------------------------

def signed_rank_reference(nonzero: np.ndarray) -> float:
    ranks = sps.rankdata(np.abs(nonzero))
    observed = ranks[nonzero > 0].sum()
    null = np.where(flips(np.sign(nonzero) * ranks) > 0, flips(np.sign(nonzero) * ranks),
                    0).sum(axis=1)
    return two_sided(null, observed)


@pytest.mark.parametrize("d, why", [
    ([0.1, 0.1, 0.2, -0.3, 0.4], "ties"), ([0.0, 0.1, 0.2, -0.3, 0.4], "zeros"),
    ([0.0, 0.1, 0.1, 0.2, 0.3], "ties, zeros"), ([0.2, 0.2, -0.2, 0.2], "ties"),
    ([0.1] * 8 + [0.2] * 8, "ties"), ([0.0] * 10 + [0.1] * 3 + [-0.1] * 13, "ties, zeros")])
def test_wilcoxon_with_ties_or_zeros_is_the_exact_permutation_over_non_zero_deltas(d, why):
    d = np.array(d)
    p, method = S.wilcoxon_signed_rank(d)
    if np.count_nonzero(d) > 16:
        return  # (asymptotic: next test)
    assert method == f"exact-permutation ({why}; zero_method=wilcox)"
    assert p == pytest.approx(signed_rank_reference(d[d != 0]), rel=1e-9)


def test_wilcoxon_permutation_stops_at_16_non_zero_deltas():
    base = [0.1] * 8 + [0.2] * 8
    p16, m16 = S.wilcoxon_signed_rank(np.array(base + [0.0]))
    assert m16.startswith("exact-permutation (ties, zeros")
    d17 = np.array(base + [0.3])
    p17, m17 = S.wilcoxon_signed_rank(d17)
    assert m17 == "asymptotic (ties; zero_method=wilcox, tie-corrected)"
    ref = sps.wilcoxon(d17, zero_method="wilcox", method="asymptotic").pvalue
    assert p17 == pytest.approx(ref, rel=1e-12)
    assert p16 == pytest.approx(signed_rank_reference(np.array(base)))


def test_wilcoxon_without_ties_is_scipys_exact_table_up_to_n_50():
    rng = np.random.default_rng(3)
    for n in (2, 5, 50):
        d = rng.permutation(np.arange(1, n + 1) * 0.01) * rng.choice([-1, 1], n)
        p, method = S.wilcoxon_signed_rank(d)
        assert method == "exact"
        assert p == pytest.approx(sps.wilcoxon(d, method="exact").pvalue, rel=1e-12)
    d = (np.arange(1, 52) * 0.01) * np.where(np.arange(51) % 3 == 0, -1, 1)
    p, method = S.wilcoxon_signed_rank(d)
    assert method == "asymptotic (n > 50; zero_method=wilcox, tie-corrected)"
    assert p == pytest.approx(sps.wilcoxon(d, method="asymptotic").pvalue, rel=1e-12)


@pytest.mark.parametrize("d, method", [([], "undefined (n < 2)"), ([0.3], "undefined (n < 2)"),
                                       ([0.0, 0.0], "undefined (no non-zero deltas)")])
def test_wilcoxon_undefined(d, method):
    p, got = S.wilcoxon_signed_rank(np.array(d))
    assert math.isnan(p) and got == method


def test_wilcoxon_one_non_zero_delta_is_p_one():
    assert S.wilcoxon_signed_rank(np.array([0.0, 0.2])) == (
        1.0, "exact-permutation (zeros; zero_method=wilcox)")
    assert S._signed_rank_permutation(np.array([-0.5])) == 1.0


def test_positive_rank_sum_sums_the_positive_entries_along_the_last_axis():
    r = np.array([[1.0, -2.0, 3.0], [-1.0, -2.0, 0.5]])
    assert S._positive_rank_sum(r).tolist() == [4.0, 0.5]
    assert S._positive_rank_sum(r, axis=0).tolist() == [1.0, 0.0, 3.5]


# --- sign flips, bootstrap, effect size, TOST -----------------------------------------

@pytest.mark.parametrize("d", [[0.1, 0.2], [0.1, 0.2, -0.05], [0.1, 0.1, 0.1, 0.2],
                               [0.3, -0.1, 0.2, 0.0, 0.4, -0.2, 0.1],
                               list(np.linspace(-0.2, 0.5, 16))])
def test_signflip_exact_is_the_doubled_tail_over_all_flips(d):
    d = np.array(d)
    p, method = S.signflip_test(d, np.random.default_rng(0), 99)
    assert method == f"exact (2^{d.size} flips)"
    assert p == pytest.approx(two_sided(flips(d).mean(axis=1), d.mean()), rel=1e-9)


def test_signflip_beyond_16_is_monte_carlo_on_the_absolute_mean():
    d = np.linspace(-0.1, 0.3, 17)
    p, method = S.signflip_test(d, np.random.default_rng(5), 199)
    assert method == "monte-carlo (199 flips, |T*| >= |t|)"
    ref = sps.permutation_test((d,), lambda v, axis: np.abs(np.mean(v, axis=axis)),
                               permutation_type="samples", vectorized=True, n_resamples=199,
                               rng=np.random.default_rng(5), alternative="greater")
    assert p == pytest.approx(ref.pvalue, rel=1e-12)
    null = np.array([abs(np.mean(d * np.random.default_rng(i).choice([-1, 1], d.size)))
                     for i in range(50)])
    assert 1 / 200 <= p <= 1 and np.mean(null >= abs(d.mean())) < 0.2
    assert S.signflip_test(d, np.random.default_rng(5))[1] == \
        f"monte-carlo ({S.DEFAULT_N_BOOT} flips, |T*| >= |t|)"


# --- the one-sided Mann–Whitney test of two samples (claims' rank test) -------------------

def _u(a: np.ndarray, b: np.ndarray) -> float:
    return float((a[:, None] > b).sum() + 0.5 * (a[:, None] == b).sum())


def _u_of_every_split(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    pooled = np.concatenate([x, y])
    return np.array([_u(pooled[list(i)], np.delete(pooled, list(i)))
                     for i in itertools.combinations(range(pooled.size), x.size)])


@pytest.mark.parametrize("x, y", [([0.3, 0.2, 0.25, 0.4], [0.1, 0.0, 0.22]),
                                  ([0.3, 0.2, 0.2, 0.1], [0.2, 0.1, 0.0, 0.0]),  # ties
                                  ([0.1, 0.1], [0.1, 0.1, 0.1]),
                                  ([0.0, 0.5, -0.2, 0.1, 0.1], [0.3, 0.1, 0.1, -0.4, 0.2, 0.0])])
def test_rank_test_is_exact_over_every_split_up_to_n_resamples(x, y):
    x, y = np.array(x), np.array(y)
    null, u = _u_of_every_split(x, y), _u(x, y)
    splits = math.comb(x.size + y.size, x.size)
    for b in (splits, S.RANK_PERM_RESAMPLES):  # exactly as many resamples as splits: exact
        got = S.rank_test(x, y, np.random.default_rng(0), b)
        assert got.exact and got.method == f"exact ({splits:,} splits)" and got.u == u
        assert got.p_greater == pytest.approx(np.mean(null >= u), rel=1e-12)
        assert got.p_less == pytest.approx(np.mean(null <= u), rel=1e-12)


def test_rank_test_beyond_n_resamples_is_monte_carlo_with_the_callers_generator():
    x, y = np.array([0.3, 0.2, 0.25, 0.4, 0.1, 0.0]), np.array([0.1, 0.0, 0.22, 0.2, 0.3])
    got = S.rank_test(x, y, np.random.default_rng(3), 461)  # one fewer than the 462 splits
    assert not got.exact and got.method == "monte-carlo (461 of 462 splits)"
    for alternative, p in (("greater", got.p_greater), ("less", got.p_less)):
        ref = sps.mannwhitneyu(x, y, alternative=alternative, method=sps.PermutationMethod(
            n_resamples=461, rng=np.random.default_rng(3)))
        assert p == ref.pvalue  # both tails from the same resamples
    null, u = _u_of_every_split(x, y), _u(x, y)
    exact = S.rank_test(x, y, np.random.default_rng(3))
    assert exact.p_greater == pytest.approx(np.mean(null >= u), rel=1e-12)
    assert abs(got.p_greater - exact.p_greater) < 4 * math.sqrt(exact.p_greater / 461)
    assert S.rank_test(x, y, np.random.default_rng(4), 461).p_greater != got.p_greater


def test_rank_test_default_enumerates_9_and_10_seeds_and_samples_10_and_10():
    """C(19, 9) = 92,378 splits are enumerated; C(20, 10) = 184,756 are sampled (and C(40, 20)
    at the adaptive default's 20 seeds a sample: test_claim_rules)."""
    rng = np.random.default_rng(0)
    assert S.RANK_PERM_RESAMPLES == 99_999
    assert S.rank_test(rng.normal(size=9), rng.normal(size=10), rng).method == \
        "exact (92,378 splits)"
    x = np.linspace(0.0, 0.18, 10)
    ten = S.rank_test(x + 0.1, x, rng)  # ties across the samples
    assert ten.method == "monte-carlo (99,999 of 184,756 splits)"
    assert ten.u == _u(x + 0.1, x) and ten.p_greater < ten.p_less


@pytest.mark.parametrize("d, method", [([], "undefined (n < 2)"), ([0.4], "undefined (n < 2)"),
                                       ([0.0, 0.0, 0.0], "undefined (no non-zero deltas)")])
def test_signflip_undefined(d, method):
    p, got = S.signflip_test(np.array(d), np.random.default_rng(0))
    assert math.isnan(p) and got == method


def test_mean_statistics():
    v = np.array([[1.0, -3.0], [2.0, 2.0]])
    assert S._mean_stat(v).tolist() == [-1.0, 2.0]
    assert S._mean_stat(v, axis=0).tolist() == [1.5, -0.5]
    assert S._abs_mean_stat(v).tolist() == [1.0, 2.0]
    assert S._abs_mean_stat(v, axis=0).tolist() == [1.5, 0.5]


@pytest.mark.parametrize("alpha", [0.05, 0.3])
def test_bca_is_scipys_bootstrap_with_the_callers_generator(alpha):
    d = np.round(X - Y, 12)
    ref = sps.bootstrap((d,), np.mean, n_resamples=300, method="BCa",
                        confidence_level=1 - alpha, rng=np.random.default_rng(9))
    low, high = S.bca_interval(d, alpha, 300, np.random.default_rng(9))
    assert (low, high) == (pytest.approx(ref.confidence_interval.low, rel=1e-9),
                           pytest.approx(ref.confidence_interval.high, rel=1e-9))
    three = S.bca_interval(np.array([0.1, 0.2, 0.4]), alpha, 200, np.random.default_rng(1))
    assert all(np.isfinite(three))


@pytest.mark.parametrize("d", [[], [0.2], [0.2, 0.3], [0.2, 0.2, 0.2, 0.2]])
def test_bca_needs_three_seeds_with_spread(d):
    assert all(math.isnan(v) for v in S.bca_interval(np.array(d), 0.05, 100,
                                                     np.random.default_rng(0)))


def test_cohen_dz():
    d = np.array([0.1, 0.3, 0.2, 0.6])
    assert S.cohen_dz(d) == pytest.approx(d.mean() / d.std(ddof=1))
    assert math.isnan(S.cohen_dz(np.array([0.2, 0.2]))) and math.isnan(S.cohen_dz(np.array([1.0])))


@pytest.mark.parametrize("margin", [0.01, 0.05, 1e-9])
def test_tost_is_statsmodels_ttost_paired(margin):
    assert S.tost_p(X, Y, margin) == pytest.approx(ttost_paired(X, Y, -margin, margin)[0])
    assert S.tost_p(list(X), list(Y), margin) == pytest.approx(S.tost_p(X, Y, margin))


@pytest.mark.parametrize("x, y, margin", [(X, Y, None), (X, Y, 0.0), (X, Y, -0.02),
                                          (Y + 0.01, Y, 0.05), (X[:1], Y[:1], 0.05)])
def test_tost_undefined(x, y, margin):
    assert math.isnan(S.tost_p(x, y, margin))


# --- power and seeds for power --------------------------------------------------------

@pytest.mark.parametrize("dz, n, alpha", [(0.5, 10, 0.05), (-0.5, 10, 0.05), (1.2, 2, 0.1),
                                          (0.3, 40, 0.01)])
def test_achieved_power_is_statsmodels_ttest_power_of_abs_dz(dz, n, alpha):
    ref = TTestPower().power(effect_size=abs(dz), nobs=n, alpha=alpha)
    assert S.achieved_power(dz, n, alpha) == pytest.approx(ref, rel=1e-9)


@pytest.mark.parametrize("dz, n", [(nan, 10), (float("inf"), 10), (0.5, 1), (0.5, 0)])
def test_achieved_power_undefined(dz, n):
    assert math.isnan(S.achieved_power(dz, n, 0.05))


def test_large_effects_fall_back_to_the_two_tails():
    assert np.isnan(TTestPower().power(effect_size=7.85, nobs=5, alpha=0.05))
    got = S.achieved_power(-7.85, 5, 0.05)
    c = sps.t.isf(0.025, 4)
    assert got == pytest.approx(sps.nct.sf(c, 4, 7.85 * math.sqrt(5)), rel=1e-12)


@pytest.mark.parametrize("dz, n, alpha", [(0.4, 12, 0.05), (1.0, 3, 0.1), (0.1, 50, 0.01)])
def test_power_two_tails_adds_both_tails(dz, n, alpha):
    c = sps.t.isf(alpha / 2, n - 1)
    ref = sps.nct.sf(c, n - 1, dz * math.sqrt(n)) + sps.nct.cdf(-c, n - 1, dz * math.sqrt(n))
    assert S._power_two_tails(dz, n, alpha) == pytest.approx(ref, rel=1e-9)
    assert S._power_two_tails(dz, n, alpha) == pytest.approx(
        TTestPower().power(effect_size=dz, nobs=n, alpha=alpha), rel=1e-6)


def smallest_by_counting(dz: float, alpha: float, power: float) -> int:
    n = 2
    while not S.achieved_power(dz, n, alpha) >= power:
        n += 1
    return n


@pytest.mark.parametrize("dz, alpha, power", [(0.5, 0.05, 0.8), (-0.5, 0.05, 0.8),
                                              (1.0, 0.1, 0.9), (3.0, 0.05, 0.8),
                                              (0.8, 0.01, 0.8), (25.0, 0.05, 0.8),
                                              (0.35, 0.05, 0.5)])
def test_seeds_for_power_is_the_smallest_n_reaching_it(dz, alpha, power):
    got = S.seeds_for_power(dz, alpha, power)
    assert got == smallest_by_counting(dz, alpha, power) and type(got) is int


def test_seeds_for_power_defaults_to_80_percent_and_is_none_when_unbounded():
    assert S.seeds_for_power(0.5, 0.05) == smallest_by_counting(0.5, 0.05, 0.8)
    assert S.seeds_for_power(0.0, 0.05) is None and S.seeds_for_power(nan, 0.05) is None
    assert S.seeds_for_power(float("inf"), 0.05) is None
    tiny = S.seeds_for_power(0.005, 0.05)
    assert S.achieved_power(0.005, tiny, 0.05) >= 0.8 > S.achieved_power(0.005, tiny - 1, 0.05)


@pytest.mark.parametrize("start", [1, 2, 3, 5, 9, 17, 27, 28, 29, 33, 34, 64, 1000, 10**6])
def test_smallest_n_from_any_start(start):
    assert S._smallest_n(0.55, 0.05, 0.8, start=start) == smallest_by_counting(0.55, 0.05, 0.8)


def test_smallest_n_defaults_and_its_cap():
    want = smallest_by_counting(0.55, 0.05, 0.8)
    assert 17 < want <= 33  # galloping from 2 visits 2, 3, 5, 9, 17, 33
    assert S._smallest_n(0.55, 0.05, 0.8) == want
    assert S._smallest_n(0.55, 0.05, 0.8, cap=33) == want
    assert S._smallest_n(0.55, 0.05, 0.8, cap=32) is None
    assert S._smallest_n(0.55, 0.05, 0.8, start=33, cap=33) == want
    assert S._smallest_n(0.01, 0.05, 0.8, cap=1000) is None
    assert S._smallest_n(50.0, 0.05, 0.8) == 2 == S._smallest_n(50.0, 0.05, 0.8, start=40)


# --- the smallest reachable p ---------------------------------------------------------

@pytest.mark.parametrize("n, p", [(-1, nan), (0, nan), (1, 1.0), (2, 0.5), (3, 0.25),
                                  (10, 2 / 1024)])
def test_min_p_signed(n, p):
    assert same(S.min_p_signed(n), p)


def test_min_p_wilcoxon_by_method():
    assert math.isnan(S.min_p_wilcoxon(0, "exact"))
    assert S.min_p_wilcoxon(5, "exact") == S.min_p_wilcoxon(5, "exact-permutation (ties)") == 2 / 32
    n = 20
    z = (n * (n + 1) / 4) / math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
    assert S.min_p_wilcoxon(n, "asymptotic (ties)") == pytest.approx(2 * sps.norm.sf(z), rel=1e-12)
    # the extreme statistic T+ = 0 through scipy's own asymptotic test
    assert S.min_p_wilcoxon(n, "asymptotic") == pytest.approx(
        sps.wilcoxon(np.arange(1.0, n + 1), method="asymptotic", correction=False).pvalue,
        rel=1e-9)


def test_min_p_signflip_and_t():
    assert math.isnan(S.min_p_signflip(0, "exact (2^0 flips)", 99))
    assert S.min_p_signflip(1, "exact (2^1 flips)", 99) == 1.0 == S.min_p_wilcoxon(1, "exact")
    assert S.min_p_signflip(4, "exact (2^4 flips)", 99) == 1 / 8
    assert S.min_p_signflip(20, "monte-carlo (999 flips)", 999) == 1 / 1000
    assert S.min_p_t(2) == 0.0 and math.isnan(S.min_p_t(1)) and math.isnan(S.min_p_t(0))


# --- Holm, chance, one-sample t -------------------------------------------------------

@pytest.mark.parametrize("p", [[0.01, 0.04, 0.03, 0.2], [0.5, 0.5, 0.01], [0.3, 0.6, 0.9, 0.95],
                               [0.001], [0.04, 0.04, 0.04]])
def test_holm_is_statsmodels_holm(p):
    assert S.holm(np.array(p)).tolist() == pytest.approx(
        multipletests(p, method="holm")[1].tolist())


def test_holm_leaves_nan_out_of_m():
    got = S.holm(np.array([0.01, nan, 0.04, nan]))
    assert math.isnan(got[1]) and math.isnan(got[3])
    assert got[[0, 2]].tolist() == pytest.approx(multipletests([0.01, 0.04], method="holm")[1])
    assert all(math.isnan(v) for v in S.holm(np.array([nan, nan])))
    assert S.holm(np.array([])).shape == (0,) and S.holm([0.02]).tolist() == [0.02]


@pytest.mark.parametrize("values, chance", [([0.6, 0.7, 0.65], 0.5), ([0.4, 0.45, 0.5], 0.5),
                                            ([0.51, 0.52], 0.5)])
def test_beats_chance_is_the_one_sided_one_sample_t(values, chance):
    ref = sps.ttest_1samp(values, chance, alternative="greater")
    assert S.beats_chance(np.array(values), chance) == (pytest.approx(ref.statistic),
                                                        pytest.approx(ref.pvalue))
    assert S.beats_chance(values, chance) == S.beats_chance(np.array(values), chance)


@pytest.mark.parametrize("values, chance", [([0.6], 0.5), ([0.6, 0.6], 0.5), ([0.6, 0.7], nan),
                                            ([], 0.5)])
def test_beats_chance_undefined(values, chance):
    assert all(math.isnan(v) for v in S.beats_chance(np.array(values), chance))


@pytest.mark.parametrize("alternative", ["two-sided", "greater"])
@pytest.mark.parametrize("alpha", [0.05, 0.2])
def test_one_sample_t_is_scipys(alternative, alpha):
    d = np.round(X - Y, 12)
    ref = sps.ttest_1samp(d, 0.0, alternative=alternative)
    ci = ref.confidence_interval(confidence_level=1 - alpha)
    t = S.one_sample_t(list(X - Y), alpha, alternative)
    assert (t.mean, t.sd, t.df) == (pytest.approx(d.mean()), pytest.approx(d.std(ddof=1)), 5.0)
    assert (t.low, t.high, t.p) == (pytest.approx(ci.low), pytest.approx(ci.high),
                                    pytest.approx(ref.pvalue))
    assert S.one_sample_t(list(X - Y), alpha) == S.one_sample_t(list(X - Y), alpha, "two-sided")


def test_one_sample_t_rounds_and_is_undefined_without_spread():
    warnings.simplefilter("error")  # nan by the guards, never by numpy's empty-slice warnings
    t = S.one_sample_t([0.3 + 1e-13, 0.3], 0.05)
    assert (t.mean, t.sd, t.df) == (pytest.approx(0.3), 0.0, 1.0)
    assert all(math.isnan(v) for v in (t.low, t.high, t.p))
    one = S.one_sample_t([0.3], 0.05)
    assert one.mean == 0.3 and math.isnan(one.sd) and one.df == 0.0
    empty = S.one_sample_t([], 0.05)
    assert math.isnan(empty.mean) and math.isnan(empty.sd) and math.isnan(empty.df)


# --- cost ratios ----------------------------------------------------------------------

def test_ratio_test_is_the_t_test_of_log_ratios():
    x, y = np.array([2.0, 3.0, 2.5, 4.0]), np.array([1.0, 1.4, 1.3, 1.9])
    lr = np.log(x) - np.log(y)
    ref = sps.ttest_1samp(lr, 0.0)
    ci = ref.confidence_interval(confidence_level=0.9)
    r = S.ratio_test(list(x), list(y), 0.1)
    assert r.ratio == pytest.approx(math.exp(lr.mean()))
    assert (r.low, r.high) == (pytest.approx(math.exp(ci.low)), pytest.approx(math.exp(ci.high)))
    assert r.p == pytest.approx(ref.pvalue) and r.exact is False and r.note == ""


@pytest.mark.parametrize("x, y, note", [
    ([], [], "no paired seeds: no ratio"),
    ([1.0, 0.0], [1.0, 1.0], "ratio undefined: a value is <= 0"),
    ([1.0, 2.0], [1.0, -1.0], "ratio undefined: a value is <= 0"),
    ([2.0], [1.0], "only 1 paired seed: ratio interval undefined")])
def test_ratio_test_undefined(x, y, note):
    r = S.ratio_test(np.array(x), np.array(y), 0.05)
    assert r.note == note and r.exact is False
    assert all(math.isnan(v) for v in (r.low, r.high, r.p))
    assert (math.isnan(r.ratio) if len(x) != 1 else r.ratio == pytest.approx(2.0))


def test_a_deterministic_cost_is_an_exact_ratio():
    r = S.ratio_test(np.array([2.0, 4.0, 6.0]), np.array([1.0, 2.0, 3.0]), 0.05)
    assert r.exact is True and r.ratio == pytest.approx(2.0)
    assert all(math.isnan(v) for v in (r.low, r.high, r.p))
    assert r.note == ("the same ratio (2) on every seed: a deterministic cost, no seed noise to "
                      "test; verdict by the ratio itself")
    tiny = S.ratio_test(np.array([1e-300, 2e-300]), np.array([1e-300, 1e-300]), 0.05)
    assert np.isfinite(tiny.p)


@pytest.mark.parametrize("ratio, hib, want", [(2.0, True, BETTER), (2.0, False, WORSE),
                                               (0.5, True, WORSE), (0.5, False, BETTER),
                                               (1.0, True, INCONCLUSIVE), (nan, True, INCONCLUSIVE)])
def test_ratio_verdict_of_an_exact_ratio(ratio, hib, want):
    assert S.ratio_verdict(S.RatioResult(ratio, nan, nan, nan, exact=True), 0.001, 0.05, hib) == want


@pytest.mark.parametrize("low, high, p_holm, hib, want", [
    (1.1, 1.5, 0.01, True, BETTER), (1.1, 1.5, 0.01, False, WORSE),
    (0.5, 0.9, 0.01, True, WORSE), (0.9, 1.5, 0.01, True, INCONCLUSIVE),
    (1.1, 1.5, 0.05, True, INCONCLUSIVE), (nan, nan, 0.01, True, INCONCLUSIVE),
    (1.0, 1.5, 0.01, True, INCONCLUSIVE)])
def test_ratio_verdict_is_the_verdict_on_the_log_scale(low, high, p_holm, hib, want):
    r = S.RatioResult(1.2, low, high, 0.01)
    assert S.ratio_verdict(r, p_holm, 0.05, hib) == want
    assert S.ratio_verdict(S.RatioResult(nan, 1.1, 1.5, 0.01), 0.01, 0.05, True) == INCONCLUSIVE


# --- the verdict rule -----------------------------------------------------------------

@pytest.mark.parametrize("low, high, p, tost, hib, want", [
    (0.01, 0.03, 0.049, nan, True, BETTER), (0.01, 0.03, 0.049, nan, False, WORSE),
    (-0.03, -0.01, 0.049, nan, True, WORSE), (-0.03, -0.01, 0.049, nan, False, BETTER),
    (0.01, 0.03, 0.05, nan, True, INCONCLUSIVE), (0.0, 0.03, 0.01, nan, True, INCONCLUSIVE),
    (-0.03, 0.0, 0.01, nan, True, INCONCLUSIVE), (-0.01, 0.03, 0.01, nan, True, INCONCLUSIVE),
    (0.01, 0.03, nan, nan, True, INCONCLUSIVE), (-0.01, 0.01, 0.5, 0.049, True, EQUIVALENT),
    (-0.01, 0.01, 0.5, 0.05, True, INCONCLUSIVE), (0.01, 0.03, 0.01, 0.01, True, BETTER),
    (0.01, 0.03, 0.2, 0.01, False, EQUIVALENT)])
def test_verdict_at_each_edge(low, high, p, tost, hib, want):
    assert S.verdict(low, high, p, tost, 0.05, hib) == want
    assert S.verdict(low, high, p, tost, 0.05, hib, not_learned=True) == NOT_LEARNED


def test_verdict_defaults_to_higher_is_better_and_learned():
    assert S.verdict(0.01, 0.03, 0.01, nan, 0.05) == BETTER
    assert S.verdict(0.01, 0.03, 0.09, nan, 0.1) == BETTER


# --- compare_paired, field by field ---------------------------------------------------

CASES = {
    "six seeds": (X, Y),
    "ties and a zero": (np.array([0.7, 0.72, 0.72, 0.7, 0.75]), np.array([0.7, 0.7, 0.7, 0.71, 0.7])),
    "two seeds": (np.array([0.7, 0.8]), np.array([0.6, 0.65])),
    # beyond 16 seeds the sign flips are Monte Carlo: from the caller's generator
    "17 seeds": (np.linspace(0.70, 0.78, 17), np.linspace(0.70, 0.74, 17)[::-1]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_compare_paired_field_by_field(case):
    x, y = CASES[case]
    got = S.compare_paired(list(x), list(y), alpha=0.1, margin=0.02, n_resamples=150,
                           rng=np.random.default_rng(4))
    rng = np.random.default_rng(4)
    d = S.paired_deltas(x, y)
    t = S.paired_t(x, y, 0.1)
    w = S.wilcoxon_signed_rank(d)
    s = S.signflip_test(d, rng, 150)
    b = S.bca_interval(d, 0.1, 150, rng)
    dz = S.cohen_dz(d)
    nz = int(np.count_nonzero(d))
    want = dict(n=d.size, deltas=tuple(d.tolist()), n_positive=int((d > 0).sum()),
                n_negative=int((d < 0).sum()), n_zero=d.size - nz, mean_delta=t.mean,
                sd_delta=t.sd, dz=dz, t_df=t.df, t_ci_low=t.low, t_ci_high=t.high, t_p=t.p,
                min_p_t=S.min_p_t(d.size), power=S.achieved_power(dz, d.size, 0.1),
                seeds_for_80_power=S.seeds_for_power(dz, 0.1), tost_p=S.tost_p(x, y, 0.02),
                wilcoxon_p=w[0], wilcoxon_method=w[1], min_p_wilcoxon=S.min_p_wilcoxon(nz, w[1]),
                signflip_p=s[0], signflip_method=s[1],
                min_p_signflip=S.min_p_signflip(nz, s[1], 150), boot_ci_low=b[0],
                boot_ci_high=b[1], boot_method="BCa, 150 resamples",
                boot_descriptive=d.size < 10, notes=tuple(S._notes(d, t, dz)))
    for field, value in want.items():
        assert same(getattr(got, field), value), field
    assert isinstance(got.n, int) and isinstance(got.n_positive, int)


def test_compare_paired_counts_signs_and_is_descriptive_below_ten_seeds():
    x = np.array([0.7, 0.7, 0.8, 0.6] + [0.7] * 6)
    y = np.array([0.7, 0.6, 0.7, 0.7] + [0.65] * 6)
    got = S.compare_paired(x, y, alpha=0.05, margin=None, n_resamples=100,
                           rng=np.random.default_rng(0))
    assert (got.n, got.n_positive, got.n_negative, got.n_zero) == (10, 8, 1, 1)
    assert got.boot_descriptive is False and math.isnan(got.tost_p)
    nine = S.compare_paired(x[:9], y[:9], alpha=0.05, margin=None, n_resamples=100,
                            rng=np.random.default_rng(0))
    assert nine.boot_descriptive is True
    assert got.min_p_signflip == 2 / 2**9 and got.min_p_wilcoxon == pytest.approx(2 / 2**9)


@pytest.mark.parametrize("d, note", [
    ([], "no paired seeds: nothing to test"),
    ([0.1], "only 1 paired seed: t-test, CIs and d_z undefined"),
    ([0.0, 0.0, 0.0], "deltas are all zero (SD = 0): t-test, t-interval, bootstrap CI, d_z and "
                      "power undefined; verdict inconclusive"),
    ([0.05, 0.05], "deltas are constant (+0.05) (SD = 0): t-test, t-interval, bootstrap CI, d_z "
                   "and power undefined; verdict inconclusive"),
    ([-0.125, -0.125, -0.125], "deltas are constant (-0.125) (SD = 0): t-test, t-interval, "
                               "bootstrap CI, d_z and power undefined; verdict inconclusive"),
    ([0.1, 0.2], "only 2 paired seeds: bootstrap CI undefined (needs n >= 3)"),
    ([0.1, -0.1, 0.2, -0.2], "mean delta is exactly 0: seeds for 80% power unbounded"),
    ([0.1, -0.1, 0.3], None)])
def test_notes_say_why_a_statistic_is_nan(d, note):
    d = np.array(d)
    t = S.paired_t(d, np.zeros(d.size), 0.05)
    assert S._notes(d, t, S.cohen_dz(d)) == ([note] if note else [])
    x, y = d + 0.5, np.full(d.size, 0.5)
    got = S.compare_paired(x, y, alpha=0.05, margin=None, n_resamples=50,
                           rng=np.random.default_rng(0))
    assert got.notes == ((note,) if note else ())


class TooManyEvaluations(Exception):
    pass


@pytest.mark.parametrize("dz, start", [(0.55, 2), (0.55, 10**6), (0.55, 28), (0.005, 2),
                                       (50.0, 40), (0.01, 10**9)])
def test_the_seed_search_is_a_gallop_and_a_bisection_not_a_walk(monkeypatch, dz, start):
    """_smallest_n brackets by doubling steps and bisects: O(log n) evaluations of the power
    from any start (a mutant that walks or never closes the bracket is caught by the count,
    not by a clock)."""
    calls = []
    power = S.achieved_power

    def counted(*args):
        calls.append(args)
        if len(calls) > 200:
            raise TooManyEvaluations
        return power(*args)

    monkeypatch.setattr(S, "achieved_power", counted)
    got = S._smallest_n(dz, 0.05, 0.8, start=start)
    monkeypatch.setattr(S, "achieved_power", power)
    assert power(dz, got, 0.05) >= 0.8 and (got == 2 or power(dz, got - 1, 0.05) < 0.8)
    assert len(calls) <= 4 * max(1, math.ceil(math.log2(max(got, start)))) + 4


@pytest.mark.parametrize("dz", [0.1, 0.3, 0.5, 1.0, -0.5])
@pytest.mark.parametrize("alpha", [0.05, 0.01])
def test_seeds_for_power_starts_at_the_normal_approximation(monkeypatch, dz, alpha):
    """The search starts at n = ((z_alpha/2 + z_power) / d_z)^2, a few seeds below the
    t-test's n: at most 8 evaluations of the power (3-7 measured), where a start elsewhere
    needs a longer gallop."""
    calls = []
    power = S.achieved_power
    monkeypatch.setattr(S, "achieved_power", lambda *a: calls.append(a) or power(*a))
    got = S.seeds_for_power(dz, alpha)
    monkeypatch.setattr(S, "achieved_power", power)
    assert got == smallest_by_counting(abs(dz), alpha, 0.8) and len(calls) <= 8


@pytest.mark.parametrize("dz, alpha", [(1e-5, 0.05), (3.275323772005138e-05, 0.001)])
def test_seeds_for_power_of_a_tiny_effect_is_found_beyond_a_billion_pairs(dz, alpha):
    """The second: the normal approximation's n (over 10^10) falls just short of the power,
    so the search must gallop up past a billion."""
    got = S.seeds_for_power(dz, alpha)
    assert got > 10**9
    assert S.achieved_power(dz, got, alpha) >= 0.8 > S.achieved_power(dz, got - 1, alpha)

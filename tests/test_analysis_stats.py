"""fusion_sweep.analysis.stats against scipy/statsmodels computed directly, and hand-verifiable cases."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.oneway import anova_oneway
from statsmodels.stats.power import TTestPower
from statsmodels.stats.weightstats import CompareMeans, DescrStatsW, ttost_paired

from fusion_sweep.analysis import stats as S
from fusion_sweep.analysis.regimes import diff_in_deltas, welch_anova

TOL = 1e-9


def _pair(seed: int, n: int = 6, shift: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    """y (n,): baseline accuracies; x (n,): paired fusion accuracies."""
    rng = np.random.default_rng(seed)
    y = 0.8 + rng.normal(0, 0.01, n)
    return y + shift + rng.normal(0, 0.012, n), y


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_compare_paired_matches_scipy_statsmodels(seed: int) -> None:
    x, y = _pair(seed)
    d = x - y
    r = S.compare_paired(x, y, alpha=0.05, margin=0.02, n_resamples=2000,
                         rng=np.random.default_rng(seed))
    t = sps.ttest_rel(x, y)
    ci = t.confidence_interval(0.95)
    assert r.t_p == pytest.approx(t.pvalue, abs=TOL)
    assert (r.t_ci_low, r.t_ci_high) == pytest.approx((ci.low, ci.high), abs=TOL)
    assert r.mean_delta == pytest.approx(d.mean(), abs=TOL)
    assert r.sd_delta == pytest.approx(d.std(ddof=1), abs=TOL)
    assert r.wilcoxon_p == pytest.approx(sps.wilcoxon(d, method="exact").pvalue, abs=TOL)
    assert r.wilcoxon_method == "exact"
    perm = sps.permutation_test((d,), lambda v, axis: v.mean(axis=axis), vectorized=True,
                                permutation_type="samples", n_resamples=np.inf)
    assert r.signflip_p == pytest.approx(perm.pvalue, abs=TOL)
    dz = d.mean() / d.std(ddof=1)
    assert r.dz == pytest.approx(dz, abs=TOL)
    assert r.tost_p == pytest.approx(ttost_paired(x, y, -0.02, 0.02)[0], abs=TOL)
    assert r.power == pytest.approx(TTestPower().power(abs(dz), len(d), 0.05), abs=TOL)
    need = TTestPower().solve_power(effect_size=abs(dz), power=0.8, alpha=0.05)
    assert r.seeds_for_80_power == max(2, math.ceil(need))
    assert r.n_positive == int((d > 0).sum())


def test_bca_matches_scipy_bootstrap_with_same_generator() -> None:
    x, y = _pair(4, n=8)
    d = S.paired_deltas(x, y)
    low, high = S.bca_interval(d, 0.05, 3000, np.random.default_rng(11))
    ref = sps.bootstrap((d,), np.mean, method="BCa", n_resamples=3000,
                        rng=np.random.default_rng(11)).confidence_interval
    assert (low, high) == pytest.approx((ref.low, ref.high), abs=TOL)


def test_all_positive_n5_exact_wilcoxon_is_0_0625() -> None:
    d = np.array([0.01, 0.02, 0.03, 0.04, 0.05])
    p, method = S.wilcoxon_signed_rank(d)
    assert method == "exact" and p == pytest.approx(0.0625, abs=TOL)
    assert S.min_p_wilcoxon(5, method) == pytest.approx(0.0625)
    assert S.signflip_test(d, np.random.default_rng(0))[0] == pytest.approx(0.0625, abs=TOL)


def test_exact_signflip_by_hand() -> None:
    # d = [3, 1, 2, -0.5]: the 16 flips give sums 6.5 - 2*(flipped subset's |d| sum).
    # A sum >= the observed 5.5 needs a flipped subset summing <= 0.5: {} and {0.5},
    # so P(>=) = 2/16, P(<=) = 15/16 and the two-sided p = 2 * 2/16 = 0.25.
    p, method = S.signflip_test(np.array([3.0, 1.0, 2.0, -0.5]), np.random.default_rng(0))
    assert p == pytest.approx(0.25, abs=TOL)
    assert method.startswith("exact")
    assert S.min_p_signflip(4, method, 10_000) == pytest.approx(2 / 16)


@pytest.mark.parametrize("d", [
    [0.01, 0.01, 0.02, -0.03, 0.0], [0.02, 0.0, 0.02, -0.0, 0.01],
    [0.01, 0.01, -0.01, 0.02, 0.02, 0.01, 0.03, -0.02, 0.01, 0.0],
])
def test_wilcoxon_with_ties_states_its_method(d: list[float]) -> None:
    p, method = S.wilcoxon_signed_rank(np.array(d))
    assert method.startswith("exact-permutation") and "zero_method=wilcox" in method
    ref = sps.wilcoxon(np.array(d), method=sps.PermutationMethod(n_resamples=np.inf)).pvalue
    assert p == pytest.approx(ref, abs=TOL)


def test_holm_takes_a_list_with_missing_p_values() -> None:
    """A family as the report gathers it, a plain list where a missing p may be None: it is
    not counted in m and stays missing (nan), as a nan does (float conversion, not an object
    array that no arithmetic accepts)."""
    out = S.holm([0.01, None, 0.03])
    assert out[[0, 2]] == pytest.approx([0.02, 0.03], abs=TOL)
    assert np.isnan(out[1]) and out.dtype == np.float64


def test_holm_known_vector_and_nan() -> None:
    p = np.array([0.01, 0.04, 0.03, 0.005, np.nan])
    # Sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 -> 0.02, 0.03, 0.06, max(0.04, 0.06).
    expected = [0.03, 0.06, 0.06, 0.02]
    out = S.holm(p)
    assert out[:4] == pytest.approx(expected, abs=TOL)
    assert np.isnan(out[4])
    assert out[:4] == pytest.approx(multipletests(p[:4], method="holm")[1], abs=TOL)


ARRAYS = [np.array(a) for a in (
    [0.01, 0.02, 0.03, 0.04, 0.05], [-0.02, 0.01, 0.0, 0.03, -0.01, 0.02],
    [0.5, -0.1, 0.2, 0.05, 0.07, -0.3, 0.1], [0.001, 0.0015, 0.0007, 0.002, 0.0001],
)]


@pytest.mark.parametrize("seed", [0, 1, 7, 123])
@pytest.mark.parametrize("idx", range(len(ARRAYS)))
def test_ci_invariants(seed: int, idx: int) -> None:
    d = ARRAYS[idx]
    y = np.full(d.size, 0.7)
    r = S.compare_paired(y + d, y, alpha=0.05, margin=None, n_resamples=2000,
                         rng=np.random.default_rng(seed))
    m = r.mean_delta
    assert r.t_ci_low <= m <= r.t_ci_high
    assert r.boot_ci_low <= m <= r.boot_ci_high
    assert d.min() - 1e-12 <= r.boot_ci_low and r.boot_ci_high <= d.max() + 1e-12
    assert r.boot_descriptive is True


@pytest.mark.parametrize("d", [np.zeros(5), np.full(5, 0.01), np.array([0.02])])
def test_degenerate_deltas_give_nan_and_notes(d: np.ndarray) -> None:
    y = np.full(d.size, 0.8)
    r = S.compare_paired(y + d, y, alpha=0.05, margin=0.01, n_resamples=500,
                         rng=np.random.default_rng(0))
    assert math.isnan(r.t_p) and math.isnan(r.dz) and math.isnan(r.tost_p)
    assert math.isnan(r.t_ci_low) and math.isnan(r.boot_ci_low)
    assert r.seeds_for_80_power is None and r.notes
    assert S.verdict(r.t_ci_low, r.t_ci_high, S.NAN, r.tost_p, 0.05) \
        == "inconclusive"


def test_constant_positive_deltas_still_get_rank_tests() -> None:
    d = np.full(5, 0.01)
    p, method = S.wilcoxon_signed_rank(d)
    assert p == pytest.approx(0.0625) and "ties" in method


@pytest.mark.parametrize("lo,hi,ph,tost,hib,want", [
    (0.01, 0.03, 0.01, np.nan, True, "better"),
    (-0.03, -0.01, 0.01, np.nan, True, "worse"),
    (-0.03, -0.01, 0.01, np.nan, False, "better"),  # lower is better (latency)
    (0.01, 0.03, 0.2, np.nan, True, "inconclusive"),  # Holm p too large
    (-0.01, 0.05, 0.01, np.nan, True, "inconclusive"),  # CI covers 0
    (-0.01, 0.012, 0.8, 0.01, True, "equivalent"),
    (-0.01, 0.012, 0.8, 0.2, True, "inconclusive"),
])
def test_verdict_rule(lo, hi, ph, tost, hib, want) -> None:
    assert S.verdict(lo, hi, ph, tost, 0.05, hib) == want


def test_seeds_for_power_edge_cases() -> None:
    assert S.seeds_for_power(0.0, 0.05) is None
    assert S.seeds_for_power(float("nan"), 0.05) is None
    assert S.seeds_for_power(50.0, 0.05) == 2  # statsmodels' solve_power returns nan here
    # statsmodels' solve_power answers 2.0 (its bracket edge) although power(n=2) = 0.63 < 0.8.
    assert S.seeds_for_power(8.111, 0.05) == 3
    # statsmodels' power is nan here (its lower-tail nct.cdf underflows); the upper tail
    # alone, from scipy directly, is the reference.
    c = sps.t.isf(0.025, 4)
    assert S.achieved_power(7.85, 5, 0.05) == pytest.approx(
        sps.nct.sf(c, 4, 7.85 * math.sqrt(5)), abs=TOL)
    assert S.min_p_t(5) == 0.0 and math.isnan(S.min_p_t(1))


@pytest.mark.parametrize("dz", [0.003, 0.05, 0.3, 0.9, 1.9, 4.6, 7.85, 9.19, 11.1, -2.5])
def test_seeds_for_power_is_the_smallest_sufficient_n(dz: float) -> None:
    n = S.seeds_for_power(dz, 0.05)
    assert S.achieved_power(dz, n, 0.05) >= 0.8
    assert n == 2 or S.achieved_power(dz, n - 1, 0.05) < 0.8


def test_interaction_helpers_match_statsmodels() -> None:
    rng = np.random.default_rng(3)
    groups = [rng.normal(m, s, 5) for m, s in ((0.0, 0.01), (0.01, 0.02), (0.04, 0.005))]
    f, df1, df2, p = welch_anova(groups)
    ref = anova_oneway(groups, use_var="unequal")
    assert (f, df1, df2, p) == pytest.approx(
        (ref.statistic, ref.df_num, ref.df_denom, ref.pvalue), abs=TOL)
    diff, low, high, dp = diff_in_deltas(groups[2], groups[0], 0.05)
    cm = CompareMeans(DescrStatsW(groups[2]), DescrStatsW(groups[0]))
    assert (low, high) == pytest.approx(cm.tconfint_diff(alpha=0.05, usevar="unequal"), abs=TOL)
    assert dp == pytest.approx(cm.ttest_ind(usevar="unequal")[1], abs=TOL)
    assert low <= diff <= high
    assert all(math.isnan(v) for v in welch_anova([groups[0], np.full(5, 0.1)]))


# ----------------------------------------------------------- sign-flip Monte Carlo (n > 16)
def _abs_mean(v: np.ndarray, axis: int) -> np.ndarray:
    return np.abs(v.mean(axis=axis))


def test_signflip_monte_carlo_counts_abs_t_under_symmetric_null() -> None:
    d = np.random.default_rng(5).normal(0.002, 0.01, 20)
    p, method = S.signflip_test(d, np.random.default_rng(9), 4000)
    assert method == "monte-carlo (4000 flips, |T*| >= |t|)"
    # Same generator, same flips: (1 + #{|T*| >= |t|}) / (B + 1).
    ref = sps.permutation_test((d,), _abs_mean, permutation_type="samples", vectorized=True,
                               n_resamples=4000, rng=np.random.default_rng(9),
                               alternative="greater")
    assert p == pytest.approx(ref.pvalue, abs=TOL)
    null = ref.null_distribution
    assert p == pytest.approx((1 + np.sum(null >= abs(d.mean()) * (1 - 1e-12))) / 4001, abs=TOL)
    assert S.min_p_signflip(20, method, 4000) == pytest.approx(1 / 4001)


def test_signflip_monte_carlo_agrees_with_exact_enumeration() -> None:
    d = np.random.default_rng(6).normal(0.003, 0.01, 17)
    exact = sps.permutation_test((d,), lambda v, axis: v.mean(axis=axis), vectorized=True,
                                 permutation_type="samples", n_resamples=np.inf).pvalue
    p, _ = S.signflip_test(d, np.random.default_rng(0), 20_000)
    assert abs(p - exact) < 0.01
    # A mean of exactly 0: every flip is at least as extreme, p = 1 (no doubled tail > 1).
    sym = np.array([0.01, -0.01] * 9)
    assert S.signflip_test(sym, np.random.default_rng(0), 2000)[0] == pytest.approx(1.0)


def test_signflip_exact_below_17() -> None:
    d = np.random.default_rng(7).normal(0.003, 0.01, 16)
    assert S.signflip_test(d, np.random.default_rng(0))[1] == "exact (2^16 flips)"


# ------------------------------------------------------------------------------ chance
def test_beats_chance_is_one_sided_ttest_1samp() -> None:
    v = np.array([0.27, 0.31, 0.24, 0.29, 0.33])
    t, p = S.beats_chance(v, 0.25)
    ref = sps.ttest_1samp(v, 0.25, alternative="greater")
    assert (t, p) == pytest.approx((ref.statistic, ref.pvalue), abs=TOL)
    assert all(math.isnan(x) for x in S.beats_chance(np.full(4, 0.9), 0.5))  # SD 0
    assert all(math.isnan(x) for x in S.beats_chance(np.array([0.9]), 0.5))  # n < 2


def test_not_learned_overrides_every_verdict() -> None:
    assert S.verdict(0.01, 0.03, 0.01, np.nan, 0.05, True, not_learned=True) == "not learned"
    assert S.verdict(-0.01, 0.01, 0.9, 0.001, 0.05, True, not_learned=True) == "not learned"


def test_signflip_floor_counts_only_nonzero_deltas() -> None:
    """A zero delta flips to itself: 4 non-zero deltas reach at best 2/2**4, not 2/2**5."""
    y = np.full(5, 0.8)
    x = y + np.array([0.0, 0.01, 0.02, 0.03, 0.04])
    res = S.compare_paired(x, y, alpha=0.05, margin=None, n_resamples=1000,
                           rng=np.random.default_rng(0))
    assert res.min_p_signflip == pytest.approx(0.125)
    assert res.signflip_p >= res.min_p_signflip


def test_a_sweeps_margin_stays_with_its_metric() -> None:
    from fusion_sweep.analysis.settings import Settings

    s = Settings(metrics=("test_acc", "latency_ms_per_sample"), margin={"arxiv": 0.005},
                 margin_metric="test_acc").validate()
    assert s.margin_for("arxiv", "test_acc") == 0.005
    assert s.margin_for("arxiv", "latency_ms_per_sample") is None  # ms are not accuracy units
    assert s.margin_for("imdb", "test_acc") is None
    flag = Settings(metrics=("test_acc", "latency_ms_per_sample"), margin=0.01).validate()
    assert flag.margin_for("arxiv", "latency_ms_per_sample") == 0.01  # --equivalence-margin: all


def test_partially_missing_fingerprints_are_flagged() -> None:
    from fusion_sweep.analysis.demo import synthetic_results
    from fusion_sweep.analysis.load import rows_to_frame
    from fusion_sweep.analysis.pairing import pair_trials

    rows = synthetic_results(seeds=5, pes=("sinusoidal",)).to_dict("records")
    for r in rows[:3]:
        r["fp_dropout"] = None  # e.g. runs logged before fp.dropout existed
    res = pair_trials(rows_to_frame(rows, "test rows"), ["test_acc"], "add", "baseline")
    codes = [w["code"] for w in res.warnings]
    assert "partial_fingerprints" in codes
    msg = next(w["message"] for w in res.warnings if w["code"] == "partial_fingerprints")
    assert "dropout missing on 3 of" in msg


def test_wilcoxon_with_one_nonzero_delta_is_p_one() -> None:
    """Two seeds, one tied pair (tiny models often tie): the exact conditional p over the two
    sign flips of the one non-zero delta is 1 (scipy's permutation_test refuses n = 1)."""
    from fusion_sweep.analysis.stats import compare_paired, wilcoxon_signed_rank

    p, method = wilcoxon_signed_rank(np.array([0.0, 0.03]))
    assert p == 1.0 and method.startswith("exact-permutation (zeros")
    res = compare_paired(np.array([0.5, 0.53]), np.array([0.5, 0.5]), alpha=0.05, margin=None,
                         n_resamples=200, rng=np.random.default_rng(0))
    assert res.wilcoxon_p == 1.0


@pytest.mark.parametrize("start", [2, 3, 11, 12, 13, 50, 10_000])
def test_the_seed_search_finds_the_same_n_from_any_start(start: int) -> None:
    """seeds_for_power starts at the normal approximation; the search must reach the same
    smallest n from below it, at it and from far above it."""
    assert S._smallest_n(1.0, 0.05, 0.8, start=start) == S.seeds_for_power(1.0, 0.05) == 10

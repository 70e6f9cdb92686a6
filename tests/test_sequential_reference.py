"""The sequential methods against loop-by-loop references, and their records field by field
(issue 42). The betting confidence sequence is recomputed here seed by seed from Waudby-Smith
& Ramdas (JRSS-B 2024, Theorem 3: hedged capital, predictable plug-in bets) and the win-rate
one from the beta-binomial mixture written out term by term, so a changed constant, bet or
running maximum in the vectorised code shows."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy.special import betaln

from fusion_sweep.analysis import sequential as S
from fusion_sweep.analysis.schema import (
    BETTER, EQUIVALENT, INCONCLUSIVE, WORSE, AnalysisError,
)
from tests.test_sequential_validity import _direct_log_capital


def capital(deltas, mu0: float, alpha: float) -> tuple[list[float], list[float]]:
    """log θK⁺_t and log (1-θ)K⁻_t for t = 1..n at mean Δ = mu0: the seed-by-seed wealth of
    test_sequential_validity (the paper's Theorem 3 in plain Python)."""
    return _direct_log_capital(np.asarray(deltas, dtype=float), mu0, alpha)

DELTAS = np.array([0.3, 0.1, -0.2, 0.4, 0.25, 0.0, 0.35, 0.5])  # (n,) in [-1, 1]
STRONG = np.tile([0.6, 0.5, 0.7, 0.55], 4)  # decided within its 16 seeds


# ----------------------------------------------------------------------- betting, by hand
def bets(z: list[float], alpha: float) -> list[float]:
    """λ_i = sqrt(2 log(2/α) / (σ²_{i-1} i log(1+i))), μ̂ and σ̂² with the paper's priors."""
    out, var_prev, total, sq = [], 0.25, 0.0, 0.0
    for i, zi in enumerate(z, start=1):
        out.append(math.sqrt(2 * math.log(2 / alpha) / (var_prev * i * math.log(1 + i))))
        total += zi
        mu = (0.5 + total) / (i + 1)
        sq += (zi - mu) ** 2
        var_prev = (0.25 + sq) / (i + 1)
    return out


@pytest.mark.parametrize("alpha", [0.05, 0.01])
@pytest.mark.parametrize("mu0", [-0.3, 0.0, 0.2])
def test_the_betting_capital_is_the_papers_product_seed_by_seed(alpha, mu0) -> None:
    z = S.betting_unit_deltas(DELTAS)
    assert S.plugin_bets(z, alpha) == pytest.approx(bets(list(z), alpha), rel=1e-12)
    up, down = S.betting_log_capital(DELTAS, mu0, alpha)
    want_up, want_down = capital(DELTAS, mu0, alpha)
    assert up == pytest.approx(want_up, rel=1e-12, abs=1e-12)
    assert down == pytest.approx(want_down, rel=1e-12, abs=1e-12)
    # vectorised over a leading axis: each row its own comparison
    two = S.betting_log_capital(np.stack([DELTAS, -DELTAS]), mu0, alpha)[0]
    assert two[1] == pytest.approx(S.betting_log_capital(-DELTAS, mu0, alpha)[0], rel=1e-12)


def test_the_betting_rejections_and_p_values_run_the_capital_maximum() -> None:
    for mu0 in (-0.3, 0.0, 0.2):
        up, down = capital(DELTAS, mu0, 0.05)
        above, below = S.betting_rejections(DELTAS, mu0, 0.05)
        thr = math.log(1 / 0.05)
        assert above.tolist() == [max(up[:t + 1]) >= thr for t in range(len(up))]
        assert below.tolist() == [max(down[:t + 1]) >= thr for t in range(len(up))]
        p = S.betting_p_values(DELTAS, mu0)
        best = [max(max(up[:t + 1]), max(down[:t + 1])) for t in range(len(up))]
        assert p == pytest.approx([min(1.0, math.exp(-b)) for b in best], rel=1e-12)
    for mu0 in (0.0, 0.4, 0.8):
        up, down = capital(STRONG, mu0, 0.05)
        above, below = S.betting_rejections(STRONG, mu0, 0.05)
        assert above.tolist() == [max(up[:t + 1]) >= math.log(20) for t in range(16)]
        assert below.tolist() == [max(down[:t + 1]) >= math.log(20) for t in range(16)]
    assert S.betting_rejections(STRONG, 0.0, 0.05)[0].any()  # not vacuous
    assert not S.betting_rejections(STRONG, 0.0, 0.05)[0].all()
    assert S.betting_rejections(STRONG, 0.8, 0.05)[1].any()


def _rejected(deltas, t: int, mu0: float, alpha: float, side: int, slack: float = 0.0) -> bool:
    """Whether the first t seeds reject mean mu0 on `side` (0: the upward capital, 1: the
    downward); slack: at the bound itself the two sums may round apart by an ulp or so."""
    return capital(deltas[:t], mu0, alpha)[side][-1] >= math.log(1 / alpha) - slack


@pytest.mark.parametrize("alpha", [0.05, 0.2])
@pytest.mark.parametrize("deltas", [DELTAS, STRONG], ids=["weak", "strong"])
def test_each_betting_bound_is_the_last_rejected_mean_on_its_side(alpha, deltas) -> None:
    low, high = S.betting_bounds(deltas, alpha)
    assert low.shape == high.shape == deltas.shape
    for t in range(1, deltas.size + 1):
        lo, hi = float(low[t - 1]), float(high[t - 1])
        if lo > -1.0:  # rejected at the bound, not 1e-6 inside it
            assert _rejected(deltas, t, lo, alpha, 0, 1e-9)
            assert not _rejected(deltas, t, lo + 1e-6, alpha, 0)
        else:  # not even the end of the range is rejected
            assert not _rejected(deltas, t, -1.0 + 1e-9, alpha, 0)
        if hi < 1.0:
            assert _rejected(deltas, t, hi, alpha, 1, 1e-9)
            assert not _rejected(deltas, t, hi - 1e-6, alpha, 1)
        else:
            assert not _rejected(deltas, t, 1.0 - 1e-9, alpha, 1)
    assert low[0] == -1.0 and high[0] == 1.0


def test_the_strong_betting_bounds_leave_the_range() -> None:
    low, high = S.betting_bounds(STRONG, 0.05)
    assert (low > 0).any() and (high < 1).any()


def test_the_betting_sequence_intersects_its_bounds_and_decides_at_0_and_the_margin() -> None:
    cs = S.betting_confidence_sequence(DELTAS, 0.05)
    raw_low, raw_high = S.betting_bounds(DELTAS, 0.05)
    assert cs.raw_low.tolist() == raw_low.tolist() and cs.raw_high.tolist() == raw_high.tolist()
    assert cs.low.tolist() == np.maximum.accumulate(raw_low).tolist()
    assert cs.high.tolist() == np.minimum.accumulate(raw_high).tolist()
    assert cs.mean.tolist() == pytest.approx(np.cumsum(DELTAS) / np.arange(1, 9))
    assert cs.p_anytime.tolist() == S.betting_p_values(DELTAS).tolist()
    assert (cs.method, cs.alpha, cs.phi) == ("betting", 0.05, None)
    above, below = S.betting_rejections(STRONG, 0.0, 0.2)
    d = S.betting_decisions(STRONG, 0.2, None, True)
    assert d.tolist() == [BETTER if a else WORSE if b else INCONCLUSIVE
                          for a, b in zip(above, below)]
    assert BETTER in d.tolist()
    assert S.betting_decisions(STRONG, 0.2, None, False).tolist() == [
        {BETTER: WORSE, WORSE: BETTER}.get(x, x) for x in d.tolist()]
    small = np.array([0.01, -0.01] * 30)  # within ±0.5 of 0 beyond doubt after 60 seeds
    inside = (S.betting_rejections(small, -0.5, 0.2)[0]
              & S.betting_rejections(small, 0.5, 0.2)[1])
    eq = S.betting_decisions(small, 0.2, 0.5, True)
    assert eq.tolist() == [EQUIVALENT if i else INCONCLUSIVE for i in inside]
    assert inside.any() and not inside.all()
    assert EQUIVALENT not in S.betting_decisions(small, 0.2, None, True).tolist()
    # equivalence needs both sides of the margin rejected: one side alone decides nothing
    lean = np.array([0.3, 0.2] * 30)  # mean 0.25: -0.5 is rejected long before +0.5
    below_margin = S.betting_rejections(lean, -0.5, 0.2)[0]
    above_margin = S.betting_rejections(lean, 0.5, 0.2)[1]
    one_side = below_margin & ~above_margin
    assert one_side.any()
    got = S.betting_decisions(lean, 0.2, 0.5, True)
    assert all(x != EQUIVALENT for x in got[one_side])
    assert S.Betting.path(STRONG, 0.2).raw_low.tolist() == \
        S.betting_confidence_sequence(STRONG, 0.2).raw_low.tolist()
    assert S.Betting.decisions(STRONG, 0.2, None, True).tolist() == d.tolist()


def test_a_delta_outside_the_betting_range_names_the_range_and_the_other_method() -> None:
    with pytest.raises(AnalysisError, match=r"^the betting confidence sequence needs every "
                       r"delta within \[-1, 1\] \(a difference of two proportions such as "
                       r"accuracy\); got -0\.2 \.\. 1\.5: use the normal-mixture method for "
                       r"an unbounded metric$"):
        S.betting_unit_deltas([0.3, 1.5, -0.2])
    with pytest.raises(AnalysisError, match=r"got -1\.5 \.\. 0\.3"):
        S.betting_unit_deltas([0.3, -1.5])
    assert S.betting_unit_deltas([-1.0, 0.0, 1.0]).tolist() == [0.0, 0.5, 1.0]
    with pytest.raises(AnalysisError, match=r"^deltas must be 1-D \(one comparison\), got "
                                            r"shape \(2, 2\)$"):
        S.betting_bounds([[0.1, 0.2], [0.1, 0.2]], 0.05)


# ---------------------------------------------------------------------- the win rate, by hand
def log_evalue(wins: int, losses: int, p0: float = 0.5) -> float:
    """log of B(1 + W, 1 + L) / B(1, 1) / (p0^W (1 - p0)^L)."""
    return (betaln(1 + wins, 1 + losses) - betaln(1, 1) - wins * math.log(p0)
            - losses * math.log(1 - p0))


def test_the_win_rate_sequence_is_the_beta_binomial_mixture_term_by_term() -> None:
    d = np.array([0.1, 0.0, 0.2, -0.1, 0.3, 0.3, 0.0, 0.2, 0.1, 0.4, 0.2, 0.3, 0.1])
    wins, losses = S.sign_counts(d)
    assert wins.tolist() == [1, 1, 2, 2, 3, 4, 4, 5, 6, 7, 8, 9, 10]
    assert losses.tolist() == [0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
    assert S.winrate_estimates(d).tolist() == pytest.approx(
        [1, 1, 1, 2 / 3, 3 / 4, 4 / 5, 4 / 5, 5 / 6, 6 / 7, 7 / 8, 8 / 9, 9 / 10, 10 / 11])
    with warnings.catch_warnings():  # every seed tied so far: nan, quietly
        warnings.simplefilter("error")
        assert np.isnan(S.winrate_estimates([0.0, 0.0, 0.1])[:2]).all()
    assert S.winrate_estimates([-0.1, -0.2, 0.1]).tolist() == pytest.approx([0, 0, 1 / 3])
    le = [log_evalue(int(w), int(l)) for w, l in zip(wins, losses)]
    assert S.winrate_log_evalue(d).tolist() == pytest.approx(le, rel=1e-12)
    running = np.maximum.accumulate(le)
    assert S.winrate_p_values(d).tolist() == pytest.approx(
        [min(1.0, math.exp(-x)) for x in running], rel=1e-12)
    above, below = S.winrate_rejections(d, 0.2)
    assert above.tolist() == [x >= math.log(5) for x in running]
    assert not below.any() and above.any()
    for t, (lo, hi) in enumerate(zip(*S.winrate_bounds(d, 0.2))):
        w, l = int(wins[t]), int(losses[t])
        if w:  # the lower end is rejected, a hair inside it is not
            assert log_evalue(w, l, lo) >= math.log(5) - 1e-9
            assert log_evalue(w, l, lo + 1e-6) < math.log(5)
        else:
            assert lo == 0.0
        if l:
            assert log_evalue(w, l, hi) >= math.log(5) - 1e-9
            assert log_evalue(w, l, hi - 1e-6) < math.log(5)
        else:
            assert hi == 1.0
    cs = S.winrate_confidence_sequence(d, 0.2)
    assert cs.low.tolist() == np.maximum.accumulate(cs.raw_low).tolist()
    assert cs.high.tolist() == np.minimum.accumulate(cs.raw_high).tolist()
    assert (cs.method, cs.phi) == ("win-rate", None)
    assert S.WinRate.path(d, 0.2).raw_high.tolist() == cs.raw_high.tolist()


# ---------------------------------------------------------------------- records and the rule
def test_a_confidence_sequences_json_names_its_method_estimand_and_seed_counts() -> None:
    cs = S.winrate_confidence_sequence([0.1, 0.2, 0.0], 0.05)
    j = cs.to_dict()
    assert list(j) == ["method", "estimand", "alpha", "phi", "n", "mean", "low", "high",
                       "raw_low", "raw_high", "p_anytime"]
    assert (j["method"], j["estimand"], j["alpha"], j["phi"], j["n"]) == (
        "win-rate", "win rate", 0.05, None, [1, 2, 3])
    normal = S.confidence_sequence([0.1, 0.2], 0.05).to_dict()
    assert normal["phi"] == S.DEFAULT_PHI and normal["low"][0] is None  # unbounded: None


def test_the_stopping_rule_passes_every_setting_to_each_comparison() -> None:
    fams = {("d", "pe"): {("gate", "add"): [0.3] * 6, ("cnn", "add"): [0.1, -0.1] * 3}}
    plan = S.stopping_rule(fams, alpha=0.1, margin=0.05, higher_is_better=False, max_seeds=9,
                           seed_batch=2, phi=0.5, method="normal-mixture", m=3)
    assert (plan.alpha, plan.alpha_each, plan.m, plan.max_seeds, plan.seed_batch, plan.phi,
            plan.method) == (0.1, pytest.approx(0.1 / 3), 3, 9, 2, 0.5, "normal-mixture")
    r = plan.results
    assert [x.comparison for x in r] == [("gate", "add"), ("cnn", "add")]
    assert all((x.family, x.alpha, x.m, x.margin, x.higher_is_better, x.method)
               == (("d", "pe"), 0.1, 3, 0.05, False, "normal-mixture") for x in r)
    assert r[1].path.phi == 0.5
    assert r[1].to_dict()["comparison"] == ["cnn", "add"]
    assert plan.seeds_to_add == {("d", "pe"): 2} and plan.undecided == (("d", "pe"),)
    with pytest.raises(AnalysisError, match=r"^max_seeds must be an integer >= 2 \(a CS with "
                       r"unknown variance is unbounded below 2 seeds\), got 1$"):
        S.stopping_rule(fams, max_seeds=1)
    with pytest.raises(AnalysisError, match=r"^families must hold at least one family of "
                                            r"comparisons$"):
        S.stopping_rule({})
    with pytest.raises(AnalysisError, match=r"^m \(comparisons in the family\) must be an "
                                            r"integer >= 1, got 0$"):
        S.stopping_rule(fams, m=0)


def test_the_betting_functions_honour_other_bounds_and_run_along_the_last_axis() -> None:
    wide = (-2.0, 2.0)  # a metric difference in [-2, 2]: z = (Δ + 2) / 4
    z = (2 * DELTAS + 2) / 4  # 2Δ on [-2, 2] maps to the same z as Δ on [-1, 1]
    up, down = S.betting_log_capital(2 * DELTAS, 0.4, 0.05, bounds=wide)
    want_up, want_down = capital(DELTAS, 0.2, 0.05)  # Δ/2 in [-1, 1], mu0/2
    assert up == pytest.approx(want_up, rel=1e-12) and down == pytest.approx(want_down, rel=1e-12)
    assert z.tolist() == S.betting_unit_deltas(2 * DELTAS, wide).tolist()
    assert S.betting_rejections(2 * STRONG, 0.0, 0.05, wide)[0].tolist() == \
        S.betting_rejections(STRONG, 0.0, 0.05)[0].tolist()
    assert S.betting_p_values(2 * STRONG, 0.4, wide) == pytest.approx(
        S.betting_p_values(STRONG, 0.2), rel=1e-12)
    lo, hi = S.betting_bounds(2 * STRONG, 0.05, bounds=wide)
    lo1, hi1 = S.betting_bounds(STRONG, 0.05)
    assert lo == pytest.approx(2 * lo1, abs=1e-9) and hi == pytest.approx(2 * hi1, abs=1e-9)
    # (2, n): each row alone, never a running quantity across rows
    rows = np.stack([STRONG, -STRONG])
    up2, down2 = S.betting_log_capital(rows, 0.0, 0.05)
    for k, row in enumerate(rows):
        u, d = S.betting_log_capital(row, 0.0, 0.05)
        assert up2[k].tolist() == pytest.approx(u.tolist()) and down2[k].tolist() == \
            pytest.approx(d.tolist())
    above2, below2 = S.betting_rejections(rows, 0.0, 0.05)
    assert above2[1].tolist() == S.betting_rejections(-STRONG, 0.0, 0.05)[0].tolist()
    assert below2[0].tolist() == S.betting_rejections(STRONG, 0.0, 0.05)[1].tolist()
    assert not below2[0].any() and below2[1].any()
    flipped = S.betting_rejections(rows[::-1], 0.0, 0.05)[1]  # the rejecting row first
    assert flipped[0].any() and not flipped[1].any()
    uneven = np.stack([STRONG, STRONG / 4])
    p2 = S.betting_p_values(uneven)
    assert p2[1].tolist() == pytest.approx(S.betting_p_values(STRONG / 4).tolist())
    assert p2[0].tolist() == pytest.approx(S.betting_p_values(STRONG).tolist())
    assert p2[0][-1] < p2[1][-1]


def test_the_default_betting_p_value_tests_mean_zero() -> None:
    up, down = capital(STRONG, 0.0, S.DEFAULT_ALPHA)
    best = np.maximum.accumulate(np.maximum(up, down))
    assert S.betting_p_values(STRONG) == pytest.approx(np.minimum(1, np.exp(-best)), rel=1e-12)


def test_a_bet_at_the_ends_of_the_range_warns_of_nothing() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # c / m at m = 0 or 1 is infinite by design: no bet cap
        for mu0 in (-1.0, 1.0):
            S.betting_log_capital(DELTAS, mu0, 0.05)


def test_a_two_dimensional_input_to_one_comparisons_sequence_is_refused() -> None:
    for make in (S.betting_confidence_sequence, S.winrate_confidence_sequence,
                 S.confidence_sequence):
        with pytest.raises(AnalysisError, match=r"^deltas must be 1-D \(one comparison\), "
                                                r"got shape \(2, 3\)$"):
            make(np.zeros((2, 3)))


def test_the_win_rate_honours_another_beta_prior() -> None:
    d = np.array([0.1, 0.2, -0.1, 0.3, 0.1, 0.2, 0.4, 0.3])
    wins, losses = S.sign_counts(d)
    prior = (2.0, 3.0)
    want = [betaln(2 + w, 3 + l) - betaln(2, 3) + (w + l) * math.log(2)
            for w, l in zip(wins, losses)]
    assert S.winrate_log_evalue(d, 0.5, prior).tolist() == pytest.approx(want, rel=1e-12)
    assert S.winrate_p_values(d, prior).tolist() == pytest.approx(
        np.minimum(1, np.exp(-np.maximum.accumulate(want))).tolist(), rel=1e-12)
    alpha = float(np.exp(-max(want))) * 1.001  # rejected at the best seed under this prior
    above, _ = S.winrate_rejections(d, alpha, prior)
    assert above.tolist() == np.maximum.accumulate(np.array(want) >= -math.log(alpha)).tolist()
    assert above.any() and not S.winrate_rejections(d, alpha)[0].tolist() == above.tolist()


def test_the_win_rate_p_value_is_capped_at_one_and_runs_per_row() -> None:
    # one win, one loss: the mixture's e-value is 4/6 < 1, its p capped at 1
    assert S.winrate_p_values([0.1, -0.1]).tolist() == [1.0, 1.0]
    rows = np.array([[0.1] * 9, [0.1, -0.1] * 4 + [0.1]])
    p = S.winrate_p_values(rows)
    assert p[0].tolist() == pytest.approx(S.winrate_p_values(rows[0]).tolist())
    assert p[1].tolist() == pytest.approx(S.winrate_p_values(rows[1]).tolist())
    with pytest.raises(AnalysisError, match=r"^deltas must be 1-D \(one comparison\), got "
                                            r"shape \(2, 9\)$"):
        S.winrate_bounds(rows, 0.05)


def test_the_win_rate_bounds_follow_the_prior() -> None:
    d = np.array([0.1, 0.2, -0.1, 0.3, 0.1, 0.2, 0.4, 0.3, 0.2, 0.1])
    prior = (2.0, 3.0)
    low, high = S.winrate_bounds(d, 0.2, prior)
    wins, losses = S.sign_counts(d)
    for t in range(d.size):
        w, l = int(wins[t]), int(losses[t])

        def log_m(p: float) -> float:
            return betaln(2 + w, 3 + l) - betaln(2, 3) - w * math.log(p) - l * math.log(1 - p)
        assert log_m(float(low[t])) >= math.log(5) - 1e-9
        assert log_m(float(low[t]) + 1e-6) < math.log(5)
        if l:
            assert log_m(float(high[t])) >= math.log(5) - 1e-9
            assert log_m(float(high[t]) - 1e-6) < math.log(5)


@pytest.mark.parametrize("method", ["win-rate", "betting", "normal-mixture"])
def test_one_comparisons_result_is_its_paths_last_state_field_by_field(method) -> None:
    d = np.array([0.3, 0.0, 0.25, -0.1, 0.4, 0.3, 0.2 - 0.2000000000000001, 0.2])  # float noise: a tie
    r = S.sequential_result(d, alpha=0.2, m=4, margin=0.05, higher_is_better=False, phi=0.5,
                            family=("f", 1), comparison=("c", 2), method=method)
    how = S.get_method(method)
    path = how.path(d, 0.05, 0.5)
    assert (r.family, r.comparison, r.n, r.alpha, r.alpha_each, r.m, r.margin,
            r.higher_is_better, r.method) == (("f", 1), ("c", 2), 8, 0.2, 0.05, 4, 0.05, False,
                                              method)
    assert (r.wins, r.losses, r.ties) == (5, 1, 2)
    assert r.mean_delta == pytest.approx(d.mean())
    assert (r.estimate, r.cs_low, r.cs_high, r.p_anytime) == (
        path.mean[-1], path.low[-1], path.high[-1], path.p_anytime[-1])
    assert r.decision == how.decisions(d, 0.05, 0.05, False, 0.5)[-1]
    assert r.path.raw_low.tolist() == path.raw_low.tolist()
    assert r.p_bonferroni == min(1.0, 4 * r.p_anytime)
    assert (r.estimand, r.null_value, r.assumption) == (how.estimand, how.null_value,
                                                        how.assumption)
    j = r.to_dict()
    assert list(j) == ["family", "comparison", "n", "estimand", "estimate", "null_value",
                       "wins", "losses", "ties", "mean_delta", "cs_low", "cs_high", "decision",
                       "p_anytime", "p_bonferroni", "alpha", "alpha_each", "m", "margin",
                       "higher_is_better", "method", "assumption", "decision_label", "path"]
    assert (j["p_anytime"], j["cs_low"], j["cs_high"]) == tuple(
        x if math.isfinite(x) else None for x in (r.p_anytime, r.cs_low, r.cs_high))
    assert (j["family"], j["comparison"], j["n"], j["wins"], j["losses"], j["ties"]) == (
        ["f", 1], ["c", 2], 8, 5, 1, 2)
    assert (j["alpha"], j["alpha_each"], j["m"], j["margin"], j["higher_is_better"],
            j["method"]) == (0.2, 0.05, 4, 0.05, False, method)
    assert j["path"] == r.path.to_dict() and j["decision_label"] == r.decision_label
    assert j["p_bonferroni"] == r.p_bonferroni and j["estimand"] == how.estimand


def test_a_comparison_without_deltas_is_inconclusive_and_unbounded() -> None:
    r = S.sequential_result([], alpha=0.1, m=2, margin=0.05, family="f", comparison="c",
                            method="betting")
    assert (r.n, r.decision, r.cs_low, r.cs_high, r.p_anytime, r.path) == (
        0, INCONCLUSIVE, -math.inf, math.inf, 1.0, None)
    assert (r.alpha, r.alpha_each, r.m, r.margin, r.method, r.family, r.comparison) == (
        0.1, 0.05, 2, 0.05, "betting", "f", "c")
    assert math.isnan(r.mean_delta) and math.isnan(r.estimate)
    j = r.to_dict()
    assert (j["cs_low"], j["cs_high"], j["estimate"], j["path"]) == (None, None, None, None)
    assert S.sequential_result([]).method == S.DEFAULT_METHOD
    normal = S.sequential_result(STRONG, method="normal-mixture")
    assert normal.decision_label == f"{normal.decision} (assumes normal Δ)"


# ------------------------------------------------------------------ the normal mixture, by hand
def log_bf(d: list[float], phi: float, mu0: float = 0.0) -> float:
    """0.5 log r + (n/2) log((S + n x̄²) / (S + r n x̄²)) of x = Δ - mu0; 0 while S = 0."""
    n = len(d)
    x = [v - mu0 for v in d]
    mean = sum(x) / n
    ss = sum((v - mean) ** 2 for v in x)
    if ss == 0:
        return 0.0
    r = phi / (phi + n)
    return 0.5 * math.log(r) + 0.5 * n * math.log((ss + n * mean**2) / (ss + r * n * mean**2))


def half_width(d: list[float], alpha: float, phi: float) -> float:
    """(s / √n) sqrt(ν (1 - c) / (c - r)), c = (r α²)^{1/n}; inf where c <= r or n < 2."""
    n = len(d)
    mean = sum(d) / n
    ss = sum((v - mean) ** 2 for v in d)
    r = phi / (phi + n)
    c = (r * alpha**2) ** (1 / n)
    if n < 2 or c <= r or ss == 0:
        return math.inf
    return math.sqrt(ss / (n - 1)) / math.sqrt(n) * math.sqrt((n - 1) * (1 - c) / (c - r))


NORMAL = [0.05, 0.12, 0.02, 0.09, 0.07, 0.11, 0.04, 0.08]


@pytest.mark.parametrize("phi", [0.25, 1.0])
def test_the_normal_mixture_sequence_is_its_closed_form_seed_by_seed(phi) -> None:
    d = np.array(NORMAL)
    assert S.mixture_log_bf(d, 0.0, phi).tolist() == pytest.approx(
        [log_bf(NORMAL[:k], phi) for k in range(1, 9)], rel=1e-10, abs=1e-12)
    assert S.mixture_log_bf(d, 0.05, phi).tolist() == pytest.approx(
        [log_bf(NORMAL[:k], phi, 0.05) for k in range(1, 9)], rel=1e-10, abs=1e-12)
    running = np.maximum.accumulate([log_bf(NORMAL[:k], phi) for k in range(1, 9)])
    assert S.anytime_p_values(d, 0.0, phi).tolist() == pytest.approx(
        np.minimum(1.0, np.exp(-running)).tolist(), rel=1e-10)
    raw_low, raw_high = S.cs_bounds(d, 0.1, phi, intersect=False)
    for k in range(1, 9):
        h, m = half_width(NORMAL[:k], 0.1, phi), sum(NORMAL[:k]) / k
        assert (raw_low[k - 1], raw_high[k - 1]) == pytest.approx((m - h, m + h), rel=1e-10)
    low, high = S.cs_bounds(d, 0.1, phi)
    assert low.tolist() == np.maximum.accumulate(raw_low).tolist()
    assert high.tolist() == np.minimum.accumulate(raw_high).tolist()
    wide_low, wide_high = S.cs_bounds(d[:2], 0.5, 0.25, intersect=False)  # bounded at n = 2
    h, m = half_width(NORMAL[:2], 0.5, 0.25), sum(NORMAL[:2]) / 2
    assert np.isfinite(h) and (wide_low[1], wide_high[1]) == pytest.approx((m - h, m + h))
    cs = S.confidence_sequence(d, 0.1, phi)
    assert (cs.alpha, cs.phi, cs.method) == (0.1, phi, "normal-mixture")
    assert cs.raw_low.tolist() == raw_low.tolist() and cs.low.tolist() == low.tolist()
    jumpy = np.array(NORMAL + [0.6, -0.4, 0.5])  # raw bounds that widen again
    jl, jh = S.cs_bounds(jumpy, 0.1, phi, intersect=False)
    assert (np.diff(jl[np.isfinite(jl)]) < 0).any() and (np.diff(jh[np.isfinite(jh)]) > 0).any()
    jcs = S.confidence_sequence(jumpy, 0.1, phi)
    assert jcs.raw_low.tolist() == jl.tolist() and jcs.raw_high.tolist() == jh.tolist()
    assert cs.mean.tolist() == pytest.approx((np.cumsum(d) / np.arange(1, 9)).tolist())
    assert cs.p_anytime.tolist() == S.anytime_p_values(d, 0.0, phi).tolist()


def test_the_normal_mixture_is_quiet_at_one_seed_and_under_ties_and_caps_p_at_one() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lo, hi = S.cs_bounds([0.1, 0.1, 0.1], 0.05)
        assert (lo == -np.inf).all() and (hi == np.inf).all()
        assert S.mixture_log_bf([0.1, 0.1]).tolist() == [0.0, 0.0]
        assert S.mixture_log_bf([0.0, 0.0, 0.0]).tolist() == [0.0] * 3  # log 0 - log 0
        assert S.radius_multiplier(np.array([1, 2, 50]), 0.05)[0] == np.inf
    # a spread around 0: the Bayes factor below 1, the p value capped at 1
    assert (S.mixture_log_bf([0.1, -0.1, 0.05, -0.05]) < 0).any()
    assert S.anytime_p_values([0.1, -0.1, 0.05, -0.05]).tolist() == [1.0] * 4
    n, mean, ss = S._running_moments(np.array([-0.1, 0.1]))  # max + min = 0: not equal
    assert ss[-1] == pytest.approx(0.02) and mean[-1] == 0.0
    rows = np.array([NORMAL, [x / 4 for x in NORMAL[::-1]]])
    p = S.anytime_p_values(rows)
    assert p[0].tolist() == pytest.approx(S.anytime_p_values(NORMAL).tolist())
    assert p[1].tolist() == pytest.approx(S.anytime_p_values(rows[1]).tolist())


def test_bounds_of_another_shape_or_nan_are_refused_by_name() -> None:
    with pytest.raises(AnalysisError, match=r"^lower and upper must have the same shape, got "
                                            r"\(2,\) and \(3,\)$"):
        S.sequential_decisions([0.0, 1.0], [1.0, 2.0, 3.0], None, True)
    for lo, hi in (([np.nan], [1.0]), ([0.0], [np.nan]), ([None], [1.0]), ([0.0], [None])):
        with pytest.raises(AnalysisError, match=r"^confidence bounds must not be NaN "
                                                r"\(unbounded is ±inf\)$"):
            S.sequential_decisions(lo, hi, None, True)
    assert S.sequential_decisions([1, -3], [2, -1], None, True).tolist() == [BETTER, WORSE]


def test_a_reports_comparisons_are_decided_in_seed_order_with_their_own_settings() -> None:
    comp = {"dataset": "l", "variant": "gate", "baseline_variant": "add",
            "seeds": [15 - i for i in range(16)],  # newest first: taken back into seed order
            "deltas": [0.02 * (i % 3) - 0.01 for i in range(16)], "equivalence_margin": 0.05,
            "higher_is_better": False}
    (r,) = S.from_comparisons([comp], 0.2, 3, method="normal-mixture", phi=0.5)
    d = np.asarray(comp["deltas"])[::-1]
    want = S.sequential_result(d, alpha=0.2, m=3, margin=0.05, higher_is_better=False,
                               phi=0.5, method="normal-mixture")
    assert (r.family, r.comparison) == ("l", "gate vs add")
    assert (r.alpha, r.m, r.margin, r.higher_is_better, r.method) == (0.2, 3, 0.05, False,
                                                                     "normal-mixture")
    assert r.path.raw_low.tolist() == want.path.raw_low.tolist() and r.path.phi == 0.5
    assert r.mean_delta == pytest.approx(want.mean_delta)
    assert r.path.mean.tolist() == pytest.approx(want.path.mean.tolist())  # seed order
    tied = dict(comp, seeds=[1, 0, 1, 0], deltas=[0.1, 0.2, 0.3, 0.4])  # ties keep their order
    (t,) = S.from_comparisons([tied], 0.2, 1, method="normal-mixture")
    assert t.path.mean.tolist() == pytest.approx(np.cumsum([0.2, 0.4, 0.1, 0.3]) / [1, 2, 3, 4])


def test_a_sequential_section_names_every_problem_at_once() -> None:
    kw = dict(adaptive={}, metric="test_acc", alpha=0.05, family_source="launch",
              method="win-rate", assumption="", fixed_n_label="")
    assert S.SequentialSection(m=0, **kw).m == 0
    for m in (-1, 1.5, "2"):
        with pytest.raises(AnalysisError, match=r"^invalid SequentialSection: m must be a whole "
                                                rf"number >= 0, not {m!r}$"):
            S.SequentialSection(m=m, **kw)
    with pytest.raises(AnalysisError, match=r"^invalid SequentialSection: results\[0\] is a "
                                            r"dict, not a SequentialResult; m must be a whole "
                                            r"number >= 0, not -1$"):
        S.SequentialSection(m=-1, results=[{}], **kw)
    assert S.NormalMixture.decisions(np.array(NORMAL), 0.5, None, True, 4.0).tolist() == \
        S.sequential_decisions(*S.cs_bounds(np.array(NORMAL), 0.5, 4.0), None, True).tolist()


# ----------------------------------------------------------------------- mutmut's last survivors
def test_phi_must_be_a_number_not_a_bool() -> None:
    for bad in (True, False, "1", None):
        with pytest.raises(S.AnalysisError, match=r"^phi \(mixture precision\) must be a finite "
                                                  r"number > 0, got "):
            S.check_phi(bad)


def test_running_moments_of_two_deltas_one_apart() -> None:
    n, mean, ss = S._running_moments(np.array([0.0, 1.0, 1.0]))
    assert n.tolist() == [1.0, 2.0, 3.0] and mean.tolist() == pytest.approx([0.0, 0.5, 2 / 3])
    assert ss.tolist() == pytest.approx([0.0, 0.5, 2 / 3])


def test_m_is_named_in_its_error() -> None:
    with pytest.raises(S.AnalysisError, match=r"^m \(comparisons in the family\) must be an "
                                              r"integer >= 1, got 0$"):
        S.bonferroni_alpha(0.05, 0)


@pytest.mark.parametrize("method", sorted(S.SEQUENTIAL_METHODS))
def test_a_result_reads_any_numeric_array_like_as_flat_floats_at_m_1(method) -> None:
    want = S.sequential_result(STRONG, method=method)
    assert (want.m, want.alpha_each, want.higher_is_better) == (1, want.alpha, True)
    for same in (STRONG.reshape(4, 4), STRONG.reshape(4, 4).tolist()):
        got = S.sequential_result(same, method=method)
        assert (got.n, got.decision, got.cs_low, got.cs_high, got.mean_delta) == (
            want.n, want.decision, want.cs_low, want.cs_high, want.mean_delta)
    bools = S.sequential_result([True, False, True, True], method=method)
    floats = S.sequential_result([1.0, 0.0, 1.0, 1.0], method=method)
    assert (bools.decision, bools.cs_low, bools.mean_delta) == (
        floats.decision, floats.cs_low, floats.mean_delta)
    lower = S.sequential_result(STRONG, method=method, higher_is_better=False)
    assert lower.higher_is_better is False


@pytest.mark.parametrize("higher", [True, False])
def test_a_result_without_deltas_keeps_the_direction(higher) -> None:
    r = S.sequential_result([], higher_is_better=higher)
    assert r.higher_is_better is higher and r.decision == INCONCLUSIVE and r.n == 0


def test_the_decision_uses_the_same_phi_as_the_sequence() -> None:
    d = np.array([0.3, 0.35, 0.32, 0.31, 0.33, 0.34])
    wide = S.sequential_result(d, phi=4.0, method="normal-mixture")
    assert (wide.decision, wide.cs_low, wide.cs_high) == (INCONCLUSIVE, -math.inf, math.inf)
    assert S.sequential_result(d, method="normal-mixture").decision == BETTER


@pytest.mark.parametrize("check, bad, message", [
    (S.check_alpha, "0.5", r"^alpha must be in the open interval \(0, 1\), got '0.5'$"),
    (S.check_margin, "0.1", r"^equivalence margin must be None or a finite number > 0 in "
                            r"metric units, got '0.1'$"),
    (S.check_margin, True, r"^equivalence margin must be None or a finite number > 0 in "
                           r"metric units, got True$"),
    (S.check_deltas, [1.0, math.nan, math.inf],
     r"^deltas must be finite \(a NaN/inf metric is a dropped pair, not a delta\); got 2 "
     r"non-finite$"),
    (S.get_method, "nope", r"^unknown sequential method 'nope'; choose from win-rate, "
                           r"betting, normal-mixture$")])
def test_each_check_refuses_a_look_alike_with_its_own_words(check, bad, message) -> None:
    with pytest.raises(AnalysisError, match=message):
        check(bad)


def test_a_bool_is_not_an_integer_and_deltas_come_back_as_floats() -> None:
    with pytest.raises(AnalysisError, match=r"^m must be an integer >= 1, got True$"):
        S._check_int(True, "m", 1)
    got = S.check_deltas([1, 0, -1])
    assert got.dtype == float and got.tolist() == [1.0, 0.0, -1.0]

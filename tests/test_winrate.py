"""analysis/winrate.py: the exact sign test on the win rate and the per-seed learn rate."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats as sps

from fusion_sweep.analysis.winrate import LearnRate, SignTest, learn_rate, sign_test


def test_sign_test_hand_checked_all_win():
    # 5 of 5 wins: two-sided exact p = 2 * 0.5**5 = 0.0625; CP lower = 0.05**(1/5) at 95%.
    r = sign_test(np.array([0.1, 0.2, 0.05, 0.3, 0.01]))
    assert (r.wins, r.losses, r.ties, r.n) == (5, 0, 0, 5)
    assert r.p_two_sided == pytest.approx(0.0625)
    assert r.win_rate == 1.0
    assert r.ci_low == pytest.approx(0.025 ** (1 / 5))
    assert r.ci_high == 1.0


def test_sign_test_ties_excluded_and_counted():
    # 3 wins, 1 loss, 2 ties: the test is on 3 of 4; p = 2 * (1 + 4) / 16 = 0.625.
    r = sign_test(np.array([0.1, 0.0, 0.2, -0.3, 0.0, 0.4]))
    assert (r.wins, r.losses, r.ties, r.n) == (3, 1, 2, 6)
    assert r.p_two_sided == pytest.approx(0.625)
    assert r.win_rate == pytest.approx(0.75)


def test_sign_test_all_tied():
    r = sign_test(np.zeros(4))
    assert (r.wins, r.losses, r.ties, r.n) == (0, 0, 4, 4)
    assert r.p_two_sided == 1.0
    assert np.isnan(r.win_rate) and np.isnan(r.ci_low) and np.isnan(r.ci_high)


def test_sign_test_empty():
    r = sign_test(np.array([]))
    assert r.n == 0 and r.p_two_sided == 1.0 and np.isnan(r.win_rate)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_sign_test_matches_scipy(seed: int, confidence: float):
    rng = np.random.default_rng(seed)
    d = np.round(rng.normal(0.2, 1.0, size=rng.integers(3, 30)), 1)  # (n,) with some ties
    r = sign_test(d, confidence=confidence)
    k, m = int((d > 0).sum()), int((d != 0).sum())
    ref = sps.binomtest(k, m, 0.5)
    ci = ref.proportion_ci(confidence_level=confidence, method="exact")
    assert r.p_two_sided == pytest.approx(ref.pvalue)
    assert (r.ci_low, r.ci_high) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert r.ties == int((d == 0).sum())


def test_sign_test_is_frozen_and_rejects_bad_input():
    r = sign_test(np.array([1.0, -1.0]))
    assert isinstance(r, SignTest)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.wins = 3  # type: ignore[misc]
    with pytest.raises(ValueError, match="NaN"):
        sign_test(np.array([0.1, np.nan]))
    with pytest.raises(ValueError, match="confidence must lie in"):
        sign_test(np.array([0.1]), confidence=1.5)


def test_learn_rate_hand_checked():
    # 58/42 split of 100: a majority predictor (58 correct) has p = P(X >= 58) = 0.5 < alpha? no:
    # it must NOT be learned; 75 correct clearly is.
    r = learn_rate(np.array([58, 75, 59]), np.array([100, 100, 100]),
                   np.array([0.58, 0.58, 0.58]), alpha=0.05)
    assert isinstance(r, LearnRate)
    assert r.learned.tolist() == [False, True, False]
    assert (r.count, r.n) == (1, 3)
    for c, p in zip([58, 75, 59], r.p_values):
        assert p == pytest.approx(sps.binomtest(c, 100, 0.58, alternative="greater").pvalue)


def test_learn_rate_imbalance_is_chance_not_one_over_k():
    # The overclaim: 0.58 on a 58/42 split beats 1/2 but not the majority share.
    at_majority = learn_rate(np.array([580]), np.array([1000]), np.array([0.58]), alpha=0.05)
    at_half = learn_rate(np.array([580]), np.array([1000]), np.array([0.5]), alpha=0.05)
    assert not at_majority.learned[0] and at_half.learned[0]


def test_learn_rate_degenerate_rates():
    # A single-class split (majority 1.0): nothing beats the constant predictor.
    r = learn_rate(np.array([10]), np.array([10]), np.array([1.0]), alpha=0.05)
    assert not r.learned[0] and r.p_values[0] == 1.0


def test_learn_rate_frozen_arrays():
    r = learn_rate(np.array([9]), np.array([10]), np.array([0.5]), alpha=0.05)
    with pytest.raises(ValueError):
        r.learned[0] = False


@pytest.mark.parametrize("args, match", [
    (([1, 2], [10], [0.5]), "equal length"),
    (([1.5], [10], [0.5]), "correct must be whole counts"),
    (([11], [10], [0.5]), r"correct must lie in \[0, n_test\]"),
    (([1], [0], [0.5]), "n_test must be whole counts >= 1"),
    (([1], [10], [np.nan]), "majority_rate must lie in"),
])
def test_learn_rate_errors(args, match):
    with pytest.raises(ValueError, match=match):
        learn_rate(*(np.asarray(a, dtype=float) for a in args), alpha=0.05)


def test_learn_rate_reports_every_error_at_once():
    with pytest.raises(ValueError, match="whole counts.*majority_rate.*alpha"):
        learn_rate(np.array([1.5]), np.array([10]), np.array([2.0]), alpha=0.0)


# ---------------------------------------------------------------- sign_test at its edges
@pytest.mark.parametrize("confidence, ok", [(0.0, False), (1e-9, True), (0.95, True),
                                            (math.nextafter(1.0, 0), True), (1.0, False)])
def test_the_sign_tests_confidence_lies_strictly_between_0_and_1(confidence: float,
                                                                 ok: bool) -> None:
    if ok:
        assert sign_test(np.array([0.1, -0.2, 0.3]), confidence).confidence == confidence
    else:
        with pytest.raises(ValueError, match=rf"^confidence must lie in \(0, 1\), got "
                                             rf"{confidence}$"):
            sign_test(np.array([0.1, -0.2, 0.3]), confidence)


@pytest.mark.parametrize("deltas", [[0.0, 0.0, 0.0], [0.1, -0.2, 0.0, 0.3]])
def test_the_sign_test_keeps_its_confidence_and_lost_seeds(deltas: list[float]) -> None:
    """Every SignTest says the level its interval is at and the seeds it counted as lost,
    the all-tied one (nothing decided: p 1, no rate) too."""
    r = sign_test(np.array(deltas), 0.9, lost=2)
    assert (r.confidence, r.lost, r.n) == (0.9, 2, len(deltas))
    if not any(deltas):
        assert (r.wins, r.losses, r.ties, r.p_two_sided) == (0, 0, 3, 1.0)
        assert math.isnan(r.win_rate) and math.isnan(r.ci_low) and math.isnan(r.ci_high)


def test_a_missing_delta_is_an_error_never_a_tie() -> None:
    """A None (a missing value from JSON, say) is a NaN delta: refused, not a tie."""
    with pytest.raises(ValueError, match=r"^deltas contain 1 NaN value\(s\)$"):
        sign_test([0.1, None, 0.2])
    with pytest.raises(ValueError, match=r"^lost must be >= 0, got -1$"):
        sign_test(np.array([0.1, 0.2]), lost=-1)

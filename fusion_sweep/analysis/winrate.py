"""Exact, distribution-free estimands: the win rate of paired deltas and the per-seed learn rate.

Two small pure functions over documented numpy arrays (issue 31, item 1); every test is scipy's
exact binomial test, nothing here assumes normality, and the results are frozen dataclasses.

- ``sign_test(deltas)``: the **win rate** ``P(Δ > 0 | Δ ≠ 0)`` — of the seeds on which the two
  arms differ, the share on which the variant wins. Ties (Δ == 0) carry no information about
  which arm wins; they are excluded from the test and counted in ``ties``. The null is
  ``P(Δ > 0) = P(Δ < 0)`` (a median-type null: the variant wins as often as it loses), which is
  *not* the mean-Δ null — a variant that wins 9 seeds by 0.01 and loses one by 0.5 has win rate
  0.9 and mean Δ < 0. Valid at any n for any distribution of Δ, because given the number of
  non-tied seeds the wins are Binomial(wins + losses, 1/2) under the null. This is the
  fixed-n test; an adaptive sweep's seed count depends on the data, and its anytime-valid
  counterpart on the same estimand is the `win-rate` confidence sequence of
  :mod:`fusion_sweep.analysis.sequential` (the `--until-decided` default).
- ``learn_rate(correct, n_test, majority_rate, alpha)``: per seed, whether an arm's test
  accuracy beats the majority-class share of *that seed's* test split, by the exact one-sided
  binomial test of ``correct`` successes in ``n_test`` trials against ``p = majority_rate``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

NAN = float("nan")


@dataclass(frozen=True)
class SignTest:
    """Exact sign test of deltas (n,) on the win rate ``P(Δ > 0 | Δ ≠ 0)``.

    ``wins``/``losses``/``ties``: counts of Δ > 0, Δ < 0, Δ == 0; ``n = wins + losses + ties``.
    ``p_two_sided``: exact binomial p of ``wins`` in ``wins + losses`` at 0.5 (1.0 when every
    seed tied). ``win_rate``: ``wins / (wins + losses)`` (nan when every seed tied).
    ``ci_low``/``ci_high``: Clopper-Pearson interval for the win rate at ``confidence``
    (nan when every seed tied).
    """

    wins: int
    losses: int
    ties: int
    n: int
    p_two_sided: float
    win_rate: float
    ci_low: float
    ci_high: float
    confidence: float
    lost: int = 0


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")


def sign_test(deltas: np.ndarray, confidence: float = 0.95, lost: int = 0) -> SignTest:
    """Exact two-sided sign test of paired deltas (n,), ties excluded and counted.

    ``deltas`` should come from ``stats.paired_deltas`` (rounded, so float noise such as
    0.81-0.80 vs 0.71-0.70 is a tie and not a win). NaN deltas are an error: a missing seed
    must be dropped by the pairing, not silently counted as a tie.

    ``lost``: seeds whose metric is not finite on an arm (a diverged run). Each is a seed of
    unknown sign, never silently out of the test: p is the largest two-sided p over every
    way the lost seeds could have gone (so a decided win rate holds however they went);
    ``win_rate`` and its interval are those of the seeds with a sign.
    """
    _check_confidence(confidence)
    d = np.asarray(deltas, dtype=float).ravel()  # (n,)
    if np.isnan(d).any():
        raise ValueError(f"deltas contain {int(np.isnan(d).sum())} NaN value(s)")
    wins, losses = int((d > 0).sum()), int((d < 0).sum())
    ties = int(d.size - wins - losses)
    decided = wins + losses
    if lost < 0:
        raise ValueError(f"lost must be >= 0, got {lost}")
    if decided == 0:
        return SignTest(wins, losses, ties, int(d.size), 1.0, NAN, NAN, NAN, confidence, lost)
    res = sps.binomtest(wins, decided, p=0.5, alternative="two-sided")
    ci = res.proportion_ci(confidence_level=confidence, method="exact")
    p = max(sps.binomtest(wins + j, decided + lost, p=0.5).pvalue for j in range(lost + 1))
    return SignTest(wins, losses, ties, int(d.size), float(min(1.0, p)),
                    wins / decided, float(ci.low), float(ci.high), confidence, lost)


@dataclass(frozen=True)
class LearnRate:
    """Per-seed learn test of one arm: ``learned`` (n,) bool, ``count`` of True, ``n`` seeds,
    ``p_values`` (n,) of the exact one-sided binomial test against the majority-class share."""

    learned: np.ndarray
    count: int
    n: int
    p_values: np.ndarray

    def __post_init__(self) -> None:
        # Frozen means frozen: callers must not flip a seed's verdict in place.
        self.learned.setflags(write=False)
        self.p_values.setflags(write=False)


def _learn_inputs(correct: np.ndarray, n_test: np.ndarray,
                  majority_rate: np.ndarray, alpha: float) -> tuple[np.ndarray, ...]:
    """Validate and coerce; every error at once in one ValueError."""
    c = np.asarray(correct, dtype=float).ravel()  # (n,)
    t = np.asarray(n_test, dtype=float).ravel()  # (n,)
    m = np.asarray(majority_rate, dtype=float).ravel()  # (n,)
    errors = []
    if not (c.shape == t.shape == m.shape):
        errors.append(f"correct, n_test and majority_rate must have equal length, "
                      f"got {c.size}, {t.size}, {m.size}")
    else:
        if not np.all(np.isfinite(c) & (np.abs(c - np.round(c)) < 1e-6)):
            errors.append("correct must be whole counts")
        if not np.all(np.isfinite(t) & (np.abs(t - np.round(t)) < 1e-6) & (t >= 1)):
            errors.append("n_test must be whole counts >= 1")
        elif np.any((c < 0) | (c > t)):
            errors.append("correct must lie in [0, n_test]")
        if not np.all(np.isfinite(m) & (m >= 0) & (m <= 1)):
            errors.append("majority_rate must lie in [0, 1] (an unknown rate is the caller's "
                          "'unknown', not a test)")
    if not 0.0 < alpha < 1.0:
        errors.append(f"alpha must lie in (0, 1), got {alpha}")
    if errors:
        raise ValueError("; ".join(errors))
    return np.round(c).astype(int), np.round(t).astype(int), m


def learn_rate(correct: np.ndarray, n_test: np.ndarray, majority_rate: np.ndarray,
               alpha: float) -> LearnRate:
    """Per seed i: learned_i = (binomtest(correct_i, n_test_i, p=majority_rate_i,
    alternative='greater').pvalue <= alpha).

    ``correct`` (n,): correctly classified test examples per seed; ``n_test`` (n,): test-split
    size per seed; ``majority_rate`` (n,): that split's majority-class share, which is what a
    constant predictor scores — chance is the class balance, not 1/K. No multiplicity
    correction across seeds: each seed's verdict is about that seed.
    """
    c, t, m = _learn_inputs(correct, n_test, majority_rate, alpha)
    p = np.array([sps.binomtest(int(ci), int(ti), p=float(mi), alternative="greater").pvalue
                  for ci, ti, mi in zip(c, t, m)], dtype=float)  # (n,)
    learned = p <= alpha  # (n,)
    return LearnRate(learned, int(learned.sum()), int(c.size), p)


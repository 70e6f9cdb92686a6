"""Anytime-valid inference for adaptive seed counts: confidence sequences and the stopping rule.

Three methods (:data:`SEQUENTIAL_METHODS`) on two estimands; every decision names its
estimand (:attr:`SequentialMethod.estimand`), because `better` means a different thing for each:

- ``win-rate`` (:data:`DEFAULT_METHOD`), estimand the **win rate** P(Δ > 0 | Δ ≠ 0): of the
  seeds on which the arms differ, the share the variant wins (ties skipped). A beta-binomial
  mixture confidence sequence (Howard et al., Ann. Statist. 2021) on the sign of each delta:
  exact for ANY distribution of Δ (collapsing seeds, skew, ties) and it decides at seed counts
  users can afford (every seed won: n = 11 at alpha/6). better/worse mean "wins on more
  seeds than it loses"; it never decides `equivalent` (the win rate has no margin in metric
  units), which stays with the mean methods.
- ``betting`` (opt-in), estimand the **mean Δ**: the hedged-capital betting confidence
  sequence of Waudby-Smith & Ramdas, "Estimating means of bounded random variables by
  betting" (JRSS-B 2024, Theorem 3, predictable plug-in bets). Valid for ANY distribution of
  Δ in its known range [-1, 1] (the difference of two proportions such as accuracy). The
  price is width: the range, not the spread, caps every bet, so effects below |Δ| ~ 0.3 are
  rarely decided within 20 seeds (power 0 at d_z <= 2 with σ = 0.1; docs/sequential.md).
- ``normal-mixture`` (opt-in), estimand the **mean Δ**: the t-based normal-mixture sequence
  below. Narrow, but valid only when per-seed Δ are i.i.d. normal; every decision it makes
  says so (:attr:`SequentialMethod.assumption`).

`fusion-sweep launch --until-decided` adds seeds only where a comparison is still undecided.
A fixed-n t-interval (or Holm over fixed-n p values) is not valid when the seed count is
chosen by looking at the data; a *confidence sequence* (CS) is: a sequence of intervals
CS_1, CS_2, ... that contains the true mean Δ at every n simultaneously with probability
>= 1 - alpha, so it stays valid at any data-dependent stopping time.

Method (the one-sample, intercept-only case of the sequential t-test of Lindon, Ham, Tingley
& Bojinov, "Anytime-Valid Linear Models and Regression Adjusted Causal Inference in Randomized
Experiments", arXiv:2210.08589; the same construction as the "Gaussian mixture + right-Haar
mixture" test martingale of Wang & Ramdas, arXiv:2310.03722):

    Δ_1, Δ_2, ... iid N(μ, σ²), σ unknown. To test μ = μ0, mix the likelihood over
    μ | σ ~ N(μ0, σ²/φ) (a Gaussian prior on the standardized effect d_z = (μ-μ0)/σ with
    precision φ) and over σ with the right-Haar measure dσ/σ. With x_i = Δ_i - μ0,
    x̄ the mean, S = Σ(x_i - x̄)² and r = φ / (φ + n), the Bayes factor is

        BF_n(μ0) = r^{1/2} · [(S + n x̄²) / (S + r n x̄²)]^{n/2}
                 = r^{1/2} · [(ν + t²) / (ν + r t²)]^{(ν+1)/2},   ν = n - 1,

    t the one-sample t statistic for μ0: the paper's univariate sequential t-test Bayes
    factor (the form of savvi's and the avlm R package's `log_bf`), with ν the residual
    degrees of freedom, n - 1 when the mean is the only coefficient. (The paper's text was
    not at hand when this was written, so no equation numbers: the formula is derived above
    and tests/test_sequential.py checks it against numerical integration.) BF_1 = 1,
    and BF_n(μ0) is a non-negative martingale under μ = μ0 in the filtration of the
    scale-invariant statistics, so by Ville's inequality P(∃n: BF_n(μ) >= 1/α) <= α.
    Inverting {μ0 : BF_n(μ0) < 1/α} gives the closed form

        CS_n = x̄_n ± (s_n / √n) · sqrt(ν (1 - c) / (c - r)),   c = (r α²)^{1/n},

    unbounded while c <= r (too few seeds for this α). savvi's
    `LinearRegression.calculate_conf_int` has the same form; savvi is not used here: for an
    intercept-only design it uses ν = n - 2 (one degree of freedom conservative) and it
    pulls in cvxpy (see docs/sequential.md).

Because CS_n covers μ at every n at once, the running intersection max_k L_k, min_k U_k
is valid too; it is what every decision uses, so decisions never flip back.

The mixture precision φ (DEFAULT_PHI) is a prior on d_z, not on metric units: the CS is
scale-free, so it behaves the same for accuracy deltas of 0.01 or 0.4. See DEFAULT_PHI.

Multiplicity: Bonferroni over the m comparisons of the sweep (each CS at α/m). By the union
bound all m CSs cover their means at every n simultaneously with probability >= 1 - α,
whatever the stopping times; so every better/worse/equivalent claim made at any round is
jointly correct with that probability. See docs/sequential.md for why not Holm.

Deviations from the model: seed deltas of accuracy are discrete and bounded, not Gaussian; the
benchmark (benchmarks/sequential_validity.py) checks the error rate by simulation. A run of
identical deltas (SD 0, e.g. two arms that give the same accuracy on every seed) gives no
information here (the CS stays unbounded), like the fixed-n statistics' "SD = 0: inconclusive".

Conventions (as :mod:`fusion_sweep.analysis.stats`): deltas are ``x - y`` per seed, in the order the seeds
were run (ascending seed id: any order fixed before seeing the results), shape (n,) or
(..., n) for the vectorized functions; the last axis is the seed axis.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Hashable, Mapping, Protocol, Sequence

import numpy as np
from scipy.special import betaln, xlogy

from fusion_sweep.analysis.estimands import MEAN_DELTA, WIN_RATE
from fusion_sweep.analysis.schema import BETTER, EQUIVALENT, INCONCLUSIVE, WORSE, AnalysisError
from fusion_sweep.analysis.settings import DEFAULT_ALPHA
from fusion_sweep.analysis.stats import DELTA_DECIMALS
from fusion_sweep.errors import unknown_name

# Mixture precision φ of the Gaussian prior on the standardized effect d_z: prior SD of d_z
# = 1/sqrt(φ) = 2. Chosen for 5-50 seeds at α/m with m ~ 6: it keeps the CS finite from
# n = 5 (at α/m = 0.05/6; φ >= 1 is unbounded there) and is within ~7% of the narrowest
# width over φ at n = 10-50 (benchmarks/sequential_validity.py --phi compares). Effects
# here span d_z ~ 0.1-10 (accuracy deltas 0.01-0.4 over per-seed SDs 0.03-0.12).
DEFAULT_PHI = 0.25
DEFAULT_MAX_SEEDS = 20  # `launch --until-decided --max-seeds` default
DEFAULT_SEED_BATCH = 5
NAN = float("nan")


# ---------------------------------------------------------------------------------------
# Input checks: one message per field, naming the valid range.

def check_alpha(alpha: float, name: str = "alpha") -> float:
    """alpha as float; AnalysisError unless 0 < alpha < 1."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating)) \
            or not 0 < float(alpha) < 1:
        raise AnalysisError(f"{name} must be in the open interval (0, 1), got {alpha!r}")
    return float(alpha)


def check_phi(phi: float) -> float:
    """phi as float; AnalysisError unless finite and > 0."""
    if isinstance(phi, bool) or not isinstance(phi, (int, float, np.floating)) \
            or not (math.isfinite(phi) and phi > 0):
        raise AnalysisError(f"phi (mixture precision) must be a finite number > 0, got {phi!r}")
    return float(phi)


def check_margin(margin: float | None) -> float | None:
    """None (no equivalence decision) or a finite margin > 0 in metric units."""
    if margin is None:
        return None
    if isinstance(margin, bool) or not isinstance(margin, (int, float, np.floating)) \
            or not (math.isfinite(margin) and margin > 0):
        raise AnalysisError("equivalence margin must be None or a finite number > 0 in "
                            f"metric units, got {margin!r}")
    return float(margin)


def check_deltas(deltas: object) -> np.ndarray:
    """deltas as a float array (..., n) with n >= 1, all finite, rounded to DELTA_DECIMALS."""
    d = np.asarray(deltas, dtype=float)
    if d.ndim == 0 or d.shape[-1] == 0:
        raise AnalysisError(f"deltas must hold at least 1 paired delta on the last axis, "
                            f"got shape {d.shape}")
    if not np.all(np.isfinite(d)):
        raise AnalysisError("deltas must be finite (a NaN/inf metric is a dropped pair, "
                            f"not a delta); got {int((~np.isfinite(d)).sum())} non-finite")
    # As fusion_sweep.analysis.stats.paired_deltas: float noise must not fake a non-zero spread.
    return np.round(d, DELTA_DECIMALS)


def _check_int(value: object, name: str, low: int, why: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise AnalysisError(f"{name} must be an integer >= {low}{why}, got {value!r}")
    return int(value)


# ---------------------------------------------------------------------------------------
# The confidence sequence (vectorized over leading axes; the last axis is seeds).

def _running_moments(d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n (n,), running mean (..., n) and running sum of squared deviations S (..., n).

    Shifted by the first delta before the cumulative sums, so S stays accurate when the
    mean is large next to the spread (e.g. Δ ~ 0.3 with SD 1e-3).
    """
    n = np.arange(1, d.shape[-1] + 1, dtype=float)
    x = d - d[..., :1]
    cs1, cs2 = np.cumsum(x, axis=-1), np.cumsum(x * x, axis=-1)
    mean_x = cs1 / n
    ss = np.maximum(cs2 - n * mean_x**2, 0.0)
    # Exact zero when every delta so far is equal (the rounding above makes ties exact).
    equal = (np.maximum.accumulate(d, axis=-1) - np.minimum.accumulate(d, axis=-1)) == 0
    return n, mean_x + d[..., :1], np.where(equal, 0.0, ss)


def radius_multiplier(n: np.ndarray | int, alpha: float, phi: float = DEFAULT_PHI) -> np.ndarray:
    """sqrt(ν(1-c)/(c-r)): the CS half-width in units of the standard error s/√n.

    n: seeds (broadcast), ν = n - 1, r = φ/(φ+n), c = (r α²)^{1/n}. inf where c <= r (the
    sequence is unbounded at this n and α) and for n < 2 (no variance estimate). Compare
    with the fixed-n t quantile t_{1-α/2, n-1}: the price of looking at every n.
    """
    alpha, phi = check_alpha(alpha), check_phi(phi)
    n = np.asarray(n, dtype=float)
    r = phi / (phi + n)
    c = np.exp((np.log(r) + 2.0 * math.log(alpha)) / np.maximum(n, 1.0))
    den = c - r
    with np.errstate(divide="ignore", invalid="ignore"):
        mult = np.sqrt((n - 1.0) * (1.0 - c) / den)
    return np.where((den > 0) & (n >= 2), mult, np.inf)


def mixture_log_bf(deltas: object, mu0: float = 0.0, phi: float = DEFAULT_PHI) -> np.ndarray:
    """log BF_k(mu0), k = 1..n, shape (..., n): the e-process behind the CS (module doc).

    0 at k = 1, and 0 (no evidence) while every delta so far is equal (S = 0).
    """
    d, phi = check_deltas(deltas), check_phi(phi)
    n, mean, ss = _running_moments(d)
    r = phi / (phi + n)
    m2 = n * (mean - mu0) ** 2  # n x̄² of x = Δ - mu0
    with np.errstate(divide="ignore", invalid="ignore"):
        log_bf = 0.5 * np.log(r) + 0.5 * n * (np.log(ss + m2) - np.log(ss + r * m2))
    return np.where(ss > 0, log_bf, 0.0)


def anytime_p_values(deltas: object, mu0: float = 0.0, phi: float = DEFAULT_PHI) -> np.ndarray:
    """Anytime-valid p for mean Δ = mu0 after k seeds: min(1, min_{j<=k} 1/BF_j), (..., n).

    P(p_k <= a for some k) <= a under the null, so p at any stopping time is a valid p.
    0 is outside the running-intersection CS at level a exactly when p <= a.
    """
    return np.minimum(1.0, np.exp(-np.maximum.accumulate(mixture_log_bf(deltas, mu0, phi),
                                                         axis=-1)))


def cs_bounds(
    deltas: object, alpha: float = DEFAULT_ALPHA, phi: float = DEFAULT_PHI, intersect: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """(low, high), each (..., n): the (1 - alpha) CS for the mean after k = 1..n deltas.

    intersect=True (the default, what decisions use): the running intersection
    max_{j<=k} low_j, min_{j<=k} high_j. ±inf where the CS is unbounded (k = 1, SD 0 so
    far, or too few seeds for alpha). An empty intersection (low > high) happens only on
    the miscoverage event (probability <= alpha); it is returned as is and decided
    `inconclusive` by :func:`sequential_decision`.
    """
    d = check_deltas(deltas)
    n, mean, ss = _running_moments(d)
    sd = np.sqrt(ss / np.maximum(n - 1.0, 1.0))
    with np.errstate(invalid="ignore"):
        half = radius_multiplier(n, alpha, phi) * sd / np.sqrt(n)
    half = np.where(ss > 0, half, np.inf)  # inf * 0 is nan; SD 0 is no information
    low, high = mean - half, mean + half
    if intersect:
        low, high = np.maximum.accumulate(low, axis=-1), np.minimum.accumulate(high, axis=-1)
    return low, high


# ---------------------------------------------------------------------------------------
# The betting confidence sequence (Waudby-Smith & Ramdas 2024, Theorem 3; vectorized over
# leading axes, the last axis is seeds). Deltas in BETTING_BOUNDS are mapped to z in [0, 1];
# a candidate mean m (also mapped to [0, 1]) is rejected once the hedged capital
#     K_t(m) = max(θ K⁺_t(m), (1-θ) K⁻_t(m)),
#     K⁺_t(m) = Π_{i<=t} (1 + λ⁺_i(m) (z_i - m)),  K⁻_t(m) = Π_{i<=t} (1 - λ⁻_i(m) (z_i - m)),
# reaches 1/α. λ⁺_i(m) = min(λ_i, c/m), λ⁻_i(m) = min(λ_i, c/(1-m)) keep every factor > 0,
# and λ_i is the predictable plug-in bet
#     λ_i = sqrt(2 log(2/α) / (σ̂²_{i-1} i log(1+i))),
#     σ̂²_i = (1/4 + Σ_{j<=i} (z_j - μ̂_j)²) / (i+1),  μ̂_i = (1/2 + Σ_{j<=i} z_j) / (i+1),
# which uses only the seeds before i. Under mean m, θK⁺ + (1-θ)K⁻ is a non-negative
# martingale, so by Ville's inequality P(∃t: K_t(m) >= 1/α) <= α whatever the distribution
# on [0, 1]. Each factor of K⁺ decreases in m and each of K⁻ increases, so the set of
# rejected means is [0, L_t] ∪ [U_t, 1] and the CS is the interval (L_t, U_t).

BETTING_BOUNDS = (-1.0, 1.0)  # a difference of two proportions (accuracy, F1, ...)
BETTING_C = 0.75  # bet truncation c: the larger of the paper's two suggested values (1/2, 3/4);
# with a steady effect the plug-in bet hits this cap, so it sets how fast large effects decide
# (benchmarks/sequential_validity.py: Δ = 0.5 in 18 seeds at alpha/6, against 25 at c = 1/2)
BETTING_THETA = 0.5  # share of capital on the upward bet (hedged: symmetric)
_BISECT_ITERS = 60  # interval ends to 2^-60 of the range: far below any metric's resolution


def _unit(x: np.ndarray | float, bounds: tuple[float, float]) -> np.ndarray:
    lo, hi = bounds
    return (np.asarray(x, dtype=float) - lo) / (hi - lo)


def betting_unit_deltas(deltas: object, bounds: tuple[float, float] = BETTING_BOUNDS
                        ) -> np.ndarray:
    """Deltas (..., n) mapped to z in [0, 1]; AnalysisError for a delta outside `bounds`."""
    d = check_deltas(deltas)
    lo, hi = bounds
    if np.any(d < lo) or np.any(d > hi):
        raise AnalysisError(
            f"the betting confidence sequence needs every delta within [{lo:g}, {hi:g}] (a "
            "difference of two proportions such as accuracy); got "
            f"{float(d.min()):g} .. {float(d.max()):g}: use the normal-mixture method for an "
            "unbounded metric")
    return _unit(d, bounds)


def plugin_bets(z: np.ndarray, alpha: float) -> np.ndarray:
    """The predictable plug-in bets λ_i, i = 1..n, (..., n) for z (..., n) in [0, 1]."""
    n = z.shape[-1]
    i = np.arange(1, n + 1, dtype=float)
    mu = (0.5 + np.cumsum(z, axis=-1)) / (i + 1.0)
    var = (0.25 + np.cumsum((z - mu) ** 2, axis=-1)) / (i + 1.0)
    var_prev = np.concatenate([np.full(z.shape[:-1] + (1,), 0.25), var[..., :-1]], axis=-1)
    return np.sqrt(2.0 * math.log(2.0 / alpha) / (var_prev * i * np.log1p(i)))


def _log_factors(z: np.ndarray, lam: np.ndarray, m: np.ndarray, c: float
                 ) -> tuple[np.ndarray, np.ndarray]:
    """log of each factor of K⁺ and K⁻ at candidate means m (broadcast with z)."""
    with np.errstate(divide="ignore"):
        up = np.minimum(lam, c / m)
        down = np.minimum(lam, c / (1.0 - m))
    return np.log1p(up * (z - m)), np.log1p(-down * (z - m))


def betting_log_capital(deltas: object, mu0: float, alpha: float,
                        bounds: tuple[float, float] = BETTING_BOUNDS, c: float = BETTING_C,
                        theta: float = BETTING_THETA) -> tuple[np.ndarray, np.ndarray]:
    """(log θK⁺_t, log (1-θ)K⁻_t) at mean Δ = mu0 after t = 1..n seeds, each (..., n).

    The hedged capital is their maximum; mu0 is rejected at t when it reaches log(1/α).
    """
    z = betting_unit_deltas(deltas, bounds)
    lam = plugin_bets(z, check_alpha(alpha))
    up, down = _log_factors(z, lam, _unit(mu0, bounds), c)
    return (math.log(theta) + np.cumsum(up, axis=-1),
            math.log1p(-theta) + np.cumsum(down, axis=-1))


def betting_rejections(deltas: object, mu0: float, alpha: float,
                       bounds: tuple[float, float] = BETTING_BOUNDS
                       ) -> tuple[np.ndarray, np.ndarray]:
    """(mean <= mu0 rejected, mean >= mu0 rejected) by seed t, running (once rejected,
    always: the running intersection), each a bool array (..., n)."""
    log_up, log_down = betting_log_capital(deltas, mu0, alpha, bounds)
    threshold = -math.log(alpha)
    return (np.maximum.accumulate(log_up >= threshold, axis=-1),
            np.maximum.accumulate(log_down >= threshold, axis=-1))


def betting_p_values(deltas: object, mu0: float = 0.0,
                     bounds: tuple[float, float] = BETTING_BOUNDS) -> np.ndarray:
    """Anytime-valid p for mean Δ = mu0 after k seeds: min(1, 1 / max_{j<=k} K_j), (..., n).

    The bets depend on α through λ_i; they are placed at DEFAULT_ALPHA here (the p-value of
    a test martingale is valid for any fixed bets)."""
    log_up, log_down = betting_log_capital(deltas, mu0, DEFAULT_ALPHA, bounds)
    log_k = np.maximum.accumulate(np.maximum(log_up, log_down), axis=-1)
    return np.minimum(1.0, np.exp(-log_k))


def betting_bounds(deltas: object, alpha: float, bounds: tuple[float, float] = BETTING_BOUNDS,
                   c: float = BETTING_C, theta: float = BETTING_THETA
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(L_t, U_t), each (n,): the betting CS after t = 1..n seeds alone (no intersection),
    in delta units. Found by bisection on the monotone capitals; each end is reported at
    a rejected point, so the interval is never narrower than the exact one."""
    z = betting_unit_deltas(deltas, bounds)
    if z.ndim != 1:
        raise AnalysisError(f"deltas must be 1-D (one comparison), got shape {z.shape}")
    alpha = check_alpha(alpha)
    n = z.size
    lam = plugin_bets(z, alpha)
    mask = np.tri(n, dtype=bool)  # (t, i): factor i counts in the capital at t when i <= t
    thr = -math.log(alpha)

    def rejected(m: np.ndarray, side: int) -> np.ndarray:  # m (n,) one candidate per t
        up, down = _log_factors(z[None, :], lam[None, :], m[:, None], c)  # (t, i)
        log_k = (math.log(theta) + np.where(mask, up, 0.0).sum(-1) if side > 0 else
                 math.log1p(-theta) + np.where(mask, down, 0.0).sum(-1))
        return log_k >= thr

    out = []
    for side, inside_end in ((+1, 1.0), (-1, 0.0)):
        edge = np.full(n, 1.0 - inside_end)  # the range end on this side
        hit = rejected(edge, side)  # not even the range end rejected: the bound is the end
        good, bad = edge.copy(), np.full(n, inside_end)  # good: rejected; bad: not rejected
        for _ in range(_BISECT_ITERS):
            mid = 0.5 * (good + bad)
            r = rejected(mid, side)
            good, bad = np.where(r, mid, good), np.where(r, bad, mid)
        end = np.where(hit, good, edge)
        out.append(bounds[0] + (bounds[1] - bounds[0]) * end)
    return out[0], out[1]


@dataclass(frozen=True, eq=False)
class ConfidenceSequence:
    """One comparison's (1 - alpha) CS of its method's estimand along its seeds. Arrays are
    (n,); index k-1 is the state after k seeds. low/high are the running intersection (what
    decisions use); raw_low/raw_high the CS at each k alone; p_anytime the anytime-valid p of
    the estimand's null (mean Δ = 0, or win rate = 1/2). `mean` is the running estimate of
    the estimand (nan for the win rate while every seed so far tied)."""

    alpha: float
    phi: float | None  # the normal mixture's precision; None for the other methods
    mean: np.ndarray  # (n,) running estimate of the method's estimand (mean Δ or win rate)
    low: np.ndarray  # (n,)
    high: np.ndarray  # (n,)
    raw_low: np.ndarray  # (n,)
    raw_high: np.ndarray  # (n,)
    p_anytime: np.ndarray  # (n,)
    method: str  # a SEQUENTIAL_METHODS name

    @property
    def n(self) -> int:
        return int(self.mean.size)

    def to_dict(self) -> dict:
        """JSON-ready: lists, ±inf -> None (unbounded), keys n = 1..N."""
        return {"method": self.method, "estimand": get_method(self.method).estimand,
                "alpha": self.alpha, "phi": self.phi, "n": list(range(1, self.n + 1)),
                **{k: [_finite(v) for v in getattr(self, k)] for k in
                   ("mean", "low", "high", "raw_low", "raw_high", "p_anytime")}}


def confidence_sequence(
    deltas: object, alpha: float = DEFAULT_ALPHA, phi: float = DEFAULT_PHI,
) -> ConfidenceSequence:
    """The CS of mean Δ for one comparison's deltas (n,), n >= 1, in seed order."""
    d = check_deltas(deltas)
    if d.ndim != 1:
        raise AnalysisError(f"deltas must be 1-D (one comparison), got shape {d.shape}")
    alpha = check_alpha(alpha)
    raw_low, raw_high = cs_bounds(d, alpha, phi, intersect=False)
    return ConfidenceSequence(
        alpha=alpha, phi=check_phi(phi), mean=np.cumsum(d) / np.arange(1, d.size + 1),
        low=np.maximum.accumulate(raw_low), high=np.minimum.accumulate(raw_high),
        raw_low=raw_low, raw_high=raw_high, p_anytime=anytime_p_values(d, 0.0, phi),
        method=NormalMixture.name)


def betting_confidence_sequence(deltas: object, alpha: float = DEFAULT_ALPHA
                                ) -> ConfidenceSequence:
    """The betting CS of mean Δ for one comparison's deltas (n,) in [-1, 1], in seed order."""
    d = check_deltas(deltas)
    if d.ndim != 1:
        raise AnalysisError(f"deltas must be 1-D (one comparison), got shape {d.shape}")
    alpha = check_alpha(alpha)
    raw_low, raw_high = betting_bounds(d, alpha)
    return ConfidenceSequence(
        alpha=alpha, phi=None, mean=np.cumsum(d) / np.arange(1, d.size + 1),
        low=np.maximum.accumulate(raw_low), high=np.minimum.accumulate(raw_high),
        raw_low=raw_low, raw_high=raw_high, p_anytime=betting_p_values(d), method=Betting.name)


# ---------------------------------------------------------------------------------------
# The win-rate confidence sequence (beta-binomial mixture; Howard, Ramdas, McAuliffe & Sekhon,
# "Time-uniform, nonparametric, nonasymptotic confidence sequences", Ann. Statist. 2021, the
# conjugate-mixture boundary for Bernoulli observations; vectorized over leading axes, the last
# axis is seeds). The estimand is the win rate p = P(Δ > 0 | Δ ≠ 0): of the seeds on which the
# arms differ, the share the variant wins. A tie (Δ == 0 after rounding) carries no
# information about p and is skipped (its factor is 1). After W wins and L losses the
# mixture e-value for p = p0 is
#     M(p0) = B(a + W, b + L) / B(a, b) / (p0^W (1 - p0)^L),
# the Bayes factor of a Beta(a, b) mixture over p against the point p0. If, given the past,
# the next seed is a tie or else a win with probability p0, every factor has conditional mean
# 1, so M(p0) is a non-negative martingale in the seed filtration and by Ville's inequality
# P(∃t: M_t(p) >= 1/α) <= α: valid for ANY distribution of Δ (bimodal, skewed, tied), at any
# stopping time. The CS is {p0 : M_t(p0) < 1/α}, an interval around W / (W + L) (the
# mixture never exceeds the maximum likelihood, so the estimate is always inside).
# better/worse test p = 1/2 (the variant wins as often as it loses); the win rate says
# nothing about the size of Δ, so this method never decides `equivalent`.

WINRATE_PRIOR = (1.0, 1.0)  # Beta(a, b): uniform over the win rate, ville's default; at
# alpha/6 it decides at n = 11 when every seed wins (2^n/(n+1) >= 120) and at n = 19 when 17
# of 19 do (benchmarks/sequential_validity.py compares priors)
WINRATE_NULL = 0.5


def sign_counts(deltas: object) -> tuple[np.ndarray, np.ndarray]:
    """Running wins and losses (..., n): counts of Δ > 0 and Δ < 0 among seeds 1..t (ties,
    Δ == 0 after rounding to DELTA_DECIMALS, count in neither)."""
    d = check_deltas(deltas)
    return np.cumsum(d > 0, axis=-1).astype(float), np.cumsum(d < 0, axis=-1).astype(float)


def _log_mixture(wins: np.ndarray, losses: np.ndarray,
                 prior: tuple[float, float] = WINRATE_PRIOR) -> np.ndarray:
    """log B(a + W, b + L) / B(a, b): the log marginal likelihood of the signs (<= 0)."""
    a, b = prior
    return betaln(a + wins, b + losses) - betaln(a, b)


def winrate_log_evalue(deltas: object, p0: float = WINRATE_NULL,
                       prior: tuple[float, float] = WINRATE_PRIOR) -> np.ndarray:
    """log M_t(p0) after t = 1..n seeds, (..., n): the e-process of win rate = p0."""
    wins, losses = sign_counts(deltas)
    return _log_mixture(wins, losses, prior) - xlogy(wins, p0) - xlogy(losses, 1.0 - p0)


def winrate_rejections(deltas: object, alpha: float,
                       prior: tuple[float, float] = WINRATE_PRIOR
                       ) -> tuple[np.ndarray, np.ndarray]:
    """(win rate <= 1/2 rejected, win rate >= 1/2 rejected) by seed t, running, each a bool
    array (..., n). 1/2 is rejected when M_t(1/2) >= 1/α; the side is the estimate's (the CS
    at t lies wholly on the side of W_t / (W_t + L_t) when it excludes 1/2)."""
    wins, losses = sign_counts(deltas)
    log_m = _log_mixture(wins, losses, prior) + (wins + losses) * math.log(2.0)
    hit = log_m >= -math.log(check_alpha(alpha))
    return (np.maximum.accumulate(hit & (wins > losses), axis=-1),
            np.maximum.accumulate(hit & (wins < losses), axis=-1))


def winrate_p_values(deltas: object, prior: tuple[float, float] = WINRATE_PRIOR
                     ) -> np.ndarray:
    """Anytime-valid p of win rate = 1/2 after k seeds: min(1, 1 / max_{j<=k} M_j(1/2))."""
    log_m = np.maximum.accumulate(winrate_log_evalue(deltas, WINRATE_NULL, prior), axis=-1)
    return np.minimum(1.0, np.exp(-log_m))


def winrate_bounds(deltas: object, alpha: float, prior: tuple[float, float] = WINRATE_PRIOR
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(L_t, U_t), each (n,): the win-rate CS after t = 1..n seeds alone (no intersection).

    Bisection on the log likelihood W log p + L log(1-p), increasing below the estimate and
    decreasing above it; each end is reported at a rejected point, so the interval is never
    narrower than the exact one. [0, 1] while every seed so far tied."""
    wins, losses = sign_counts(deltas)
    if wins.ndim != 1:
        raise AnalysisError(f"deltas must be 1-D (one comparison), got shape {wins.shape}")
    level = -math.log(check_alpha(alpha)) - _log_mixture(wins, losses, prior)  # (n,)
    k = wins + losses
    est = np.where(k > 0, wins / np.maximum(k, 1.0), WINRATE_NULL)

    def rejected(p: np.ndarray) -> np.ndarray:  # -log likelihood at p reaches the level
        return -(xlogy(wins, p) + xlogy(losses, 1.0 - p)) >= level

    out = []
    for edge, has in ((0.0, wins > 0), (1.0, losses > 0)):  # no win: 0 is never rejected
        good, bad = np.full(wins.shape, edge), est.copy()  # good: rejected; bad: not
        for _ in range(_BISECT_ITERS):
            mid = 0.5 * (good + bad)
            r = rejected(mid)
            good, bad = np.where(r, mid, good), np.where(r, bad, mid)
        out.append(np.where(has, good, edge))
    return out[0], out[1]


def winrate_estimates(deltas: object) -> np.ndarray:
    """Running win rate W / (W + L), (..., n); nan while every seed so far tied."""
    wins, losses = sign_counts(deltas)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(wins + losses > 0, wins / (wins + losses), NAN)


def winrate_confidence_sequence(deltas: object, alpha: float = DEFAULT_ALPHA
                                ) -> ConfidenceSequence:
    """The win-rate CS of one comparison's deltas (n,), in seed order."""
    d = check_deltas(deltas)
    if d.ndim != 1:
        raise AnalysisError(f"deltas must be 1-D (one comparison), got shape {d.shape}")
    alpha = check_alpha(alpha)
    raw_low, raw_high = winrate_bounds(d, alpha)
    return ConfidenceSequence(
        alpha=alpha, phi=None, mean=winrate_estimates(d),
        low=np.maximum.accumulate(raw_low), high=np.minimum.accumulate(raw_high),
        raw_low=raw_low, raw_high=raw_high, p_anytime=winrate_p_values(d), method=WinRate.name)


def winrate_decisions(deltas: object, alpha: float, higher_is_better: bool) -> np.ndarray:
    """The decision after each seed (..., n), str array: better/worse once the running
    win-rate CS excludes 1/2 (tested exactly at 1/2), never equivalent; both sides rejected
    (an empty intersection, the miscoverage event) decides nothing."""
    above, below = winrate_rejections(deltas, check_alpha(alpha))
    ok = ~(above & below)
    up, down = (BETTER, WORSE) if higher_is_better else (WORSE, BETTER)
    return np.select([ok & above, ok & below], [up, down], default=INCONCLUSIVE).astype(object)


def bonferroni_alpha(alpha: float, m: int) -> float:
    """alpha / m: the level of each of m CSs so that all hold at once, at every n, w.p. 1-alpha.

    Valid under optional stopping by the union bound: P(some CS_i misses at some n) <=
    Σ_i alpha/m = alpha, whatever the dependence between comparisons and stopping times.
    """
    return check_alpha(alpha) / _check_int(m, "m (comparisons in the family)", 1)


# ---------------------------------------------------------------------------------------
# Decisions.

def sequential_decisions(
    lower: object, upper: object, margin: float | None, higher_is_better: bool,
) -> np.ndarray:
    """Vectorized :func:`sequential_decision` over arrays of bounds (same shape): str array."""
    lo, hi = np.asarray(lower, dtype=float), np.asarray(upper, dtype=float)
    if lo.shape != hi.shape:
        raise AnalysisError(
            f"lower and upper must have the same shape, got {lo.shape} and {hi.shape}")
    if np.isnan(lo).any() or np.isnan(hi).any():
        raise AnalysisError("confidence bounds must not be NaN (unbounded is ±inf)")
    margin = check_margin(margin)
    ok = lo <= hi  # an empty intersection (miscoverage event) decides nothing
    up, down = (BETTER, WORSE) if higher_is_better else (WORSE, BETTER)
    inside = (lo > -margin) & (hi < margin) if margin is not None else np.zeros(lo.shape, bool)
    return np.select([ok & (lo > 0), ok & (hi < 0), ok & inside],
                     [up, down, EQUIVALENT], default=INCONCLUSIVE).astype(object)


def sequential_decision(
    lower: float, upper: float, margin: float | None, higher_is_better: bool,
) -> str:
    """Verdict from a CS [lower, upper] of mean Δ (Δ = fusion - reference).

    better/worse when the CS excludes 0 (lower > 0: Δ > 0, better when higher is better);
    else equivalent when the whole CS lies inside (-margin, +margin) (never when margin is
    None); else inconclusive, i.e. still undecided. As fusion_sweep.analysis.stats.verdict, a CS that
    excludes 0 and lies inside the margin is better/worse (a real but small difference).
    """
    return str(sequential_decisions(lower, upper, margin, higher_is_better).item())


def betting_decisions(deltas: object, alpha: float, margin: float | None,
                      higher_is_better: bool) -> np.ndarray:
    """The decision after each seed (..., n), str array, of the betting CS's running
    intersection: the same rule as :func:`sequential_decisions`, tested exactly at the
    points that decide (mean 0 and ±margin) instead of at bisected interval ends."""
    alpha, margin = check_alpha(alpha), check_margin(margin)
    above0, below0 = betting_rejections(deltas, 0.0, alpha)  # mean <= 0 out / mean >= 0 out
    ok = ~(above0 & below0)  # both: an empty intersection, which decides nothing
    if margin is not None:
        inside = betting_rejections(deltas, -margin, alpha)[0] & \
            betting_rejections(deltas, margin, alpha)[1]
    else:
        inside = np.zeros(above0.shape, bool)
    up, down = (BETTER, WORSE) if higher_is_better else (WORSE, BETTER)
    return np.select([ok & above0, ok & below0, ok & inside], [up, down, EQUIVALENT],
                     default=INCONCLUSIVE).astype(object)


# ---------------------------------------------------------------------------------------
# Per-comparison result and the stopping rule.

@dataclass(frozen=True, eq=False)
class SequentialResult:
    """One comparison at the current round. `family` and `comparison` are the caller's
    opaque keys (e.g. (dataset, pe) and (fusion, baseline)); n is the seeds (pairs) used;
    mean_delta the mean Δ over them (descriptive under the win-rate method); estimate the
    method's estimand (mean Δ or win rate; `estimand` names it) and cs_low/cs_high its CS at
    n at level alpha_each = alpha/m (running intersection); p_anytime the anytime-valid p of
    the estimand's null (unadjusted; compare with alpha_each); wins/losses/ties the signs of
    the n deltas."""

    family: Hashable
    comparison: Hashable
    n: int
    mean_delta: float
    estimate: float
    cs_low: float
    cs_high: float
    decision: str
    p_anytime: float
    alpha: float  # family-wise, over all m comparisons
    alpha_each: float  # alpha / m, the level of this CS
    m: int
    margin: float | None
    higher_is_better: bool
    path: ConfidenceSequence | None = field(repr=False)  # None when n = 0
    method: str  # a SEQUENTIAL_METHODS name
    wins: int = 0
    losses: int = 0
    ties: int = 0

    @property
    def estimand(self) -> str:
        """What the decision is about: 'win rate' or 'mean Δ'."""
        return get_method(self.method).estimand

    @property
    def null_value(self) -> float:
        """The estimand's 'no difference' (0 for mean Δ, 1/2 for the win rate)."""
        return get_method(self.method).null_value

    @property
    def assumption(self) -> str:
        """What the decision rests on (said beside every decision)."""
        return get_method(self.method).assumption

    @property
    def decision_label(self) -> str:
        """The decision with its method's assumption beside it: 'better (assumes normal Δ)'."""
        tag = get_method(self.method).tag
        return f"{self.decision} ({tag})" if tag else self.decision

    @property
    def p_bonferroni(self) -> float:
        """min(1, m * p_anytime): the CS at alpha/m excludes 0 exactly when this is <= alpha."""
        return min(1.0, self.m * self.p_anytime)

    def to_dict(self) -> dict:
        """JSON-ready (±inf/NaN -> None); `path` as ConfidenceSequence.to_dict or None."""
        return {"family": _jsonable_key(self.family),
                "comparison": _jsonable_key(self.comparison), "n": self.n,
                "estimand": self.estimand, "estimate": _finite(self.estimate),
                "null_value": self.null_value, "wins": self.wins, "losses": self.losses,
                "ties": self.ties,
                "mean_delta": _finite(self.mean_delta), "cs_low": _finite(self.cs_low),
                "cs_high": _finite(self.cs_high), "decision": self.decision,
                "p_anytime": _finite(self.p_anytime),
                "p_bonferroni": _finite(self.p_bonferroni), "alpha": self.alpha,
                "alpha_each": self.alpha_each, "m": self.m, "margin": self.margin,
                "higher_is_better": self.higher_is_better, "method": self.method,
                "assumption": self.assumption, "decision_label": self.decision_label,
                "path": self.path.to_dict() if self.path is not None else None}


def sequential_result(
    deltas: object, *, alpha: float = DEFAULT_ALPHA, m: int = 1, margin: float | None = None,
    higher_is_better: bool = True, phi: float = DEFAULT_PHI,
    family: Hashable = None, comparison: Hashable = None, method: str | None = None,
) -> SequentialResult:
    """Decide one comparison from its deltas (n,) (n = 0 allowed: inconclusive), with its CS
    at alpha/m (Bonferroni over the m comparisons of the family), by `method` (a
    SEQUENTIAL_METHODS name; default DEFAULT_METHOD)."""
    how = get_method(method)
    alpha_each = bonferroni_alpha(alpha, m)
    margin = check_margin(margin)
    d = np.asarray(deltas, dtype=float).reshape(-1)
    if d.size == 0:
        return SequentialResult(family, comparison, 0, NAN, NAN, -math.inf, math.inf,
                                INCONCLUSIVE, 1.0, float(alpha), alpha_each, int(m), margin,
                                bool(higher_is_better), None, how.name)
    path = how.path(d, alpha_each, phi)
    decision = str(how.decisions(d, alpha_each, margin, higher_is_better, phi)[-1])
    signs = np.round(d, DELTA_DECIMALS)  # as check_deltas: float noise is a tie
    wins, losses = int((signs > 0).sum()), int((signs < 0).sum())
    return SequentialResult(
        family, comparison, path.n, float(d.mean()), float(path.mean[-1]),
        float(path.low[-1]), float(path.high[-1]), decision, float(path.p_anytime[-1]),
        float(alpha), alpha_each, int(m), margin, bool(higher_is_better), path, how.name,
        wins, losses, int(d.size) - wins - losses)


@dataclass(frozen=True, eq=False)
class SequentialPlan:
    """The stopping rule's answer after a round.

    results: every comparison, families in input order. undecided: families with an
    inconclusive comparison and seeds left (add seeds there: `seeds_to_add[family]`).
    exhausted: families still undecided with the seed budget spent. stop: no family
    needs more seeds (every comparison decided, or budgets spent).
    """

    results: tuple[SequentialResult, ...]
    undecided: tuple[Hashable, ...]
    exhausted: tuple[Hashable, ...]
    seeds_to_add: Mapping[Hashable, int]
    seeds_run: Mapping[Hashable, int]
    stop: bool
    alpha: float
    alpha_each: float
    m: int
    max_seeds: int
    seed_batch: int
    phi: float
    method: str  # a SEQUENTIAL_METHODS name

    def for_family(self, family: Hashable) -> tuple[SequentialResult, ...]:
        return tuple(r for r in self.results if r.family == family)


def stopping_rule(
    families: Mapping[Hashable, Mapping[Hashable, object]], *, alpha: float = DEFAULT_ALPHA,
    margin: float | None | Mapping[Hashable, float | None] = None,
    higher_is_better: bool = True, max_seeds: int = DEFAULT_MAX_SEEDS,
    seed_batch: int = DEFAULT_SEED_BATCH, seeds_run: Mapping[Hashable, int] | None = None,
    m: int | None = None, phi: float = DEFAULT_PHI, method: str | None = None,
) -> SequentialPlan:
    """Which families need more seeds, and does the adaptive sweep stop?

    families: family key (opaque, e.g. (dataset, pe)) -> comparison key -> deltas (n,) of
    that comparison so far, in seed order (a comparison's n may be below the family's seed
    count when pairs were dropped). margin: one equivalence margin, None, or one per family
    key (absent: None). seeds_run: seeds launched per family (default: the longest deltas of
    the family); the budget is spent when seeds_run >= max_seeds. m: the Bonferroni family
    size; default the number of comparisons passed in. Pass the number the sweep planned
    before its first round when some comparison may not have deltas yet: m must not change
    between rounds. method: a SEQUENTIAL_METHODS name (default DEFAULT_METHOD, the win-rate
    CS, exact for any distribution of Δ; it never decides equivalent).

    A family is decided when every comparison is better, worse or equivalent at its
    running-intersection CS at alpha/m; otherwise it gets min(seed_batch, max_seeds -
    seeds_run) more seeds. The sweep stops when no family gets seeds.
    """
    alpha = check_alpha(alpha)
    max_seeds = _check_int(max_seeds, "max_seeds", 2,
                           " (a CS with unknown variance is unbounded below 2 seeds)")
    seed_batch = _check_int(seed_batch, "seed_batch", 1)
    if not families:
        raise AnalysisError("families must hold at least one family of comparisons")
    empty = [f for f, comps in families.items() if not comps]
    if empty:
        raise AnalysisError(f"every family needs at least one comparison; empty: {empty!r}")
    m_total = sum(len(c) for c in families.values())
    m = m_total if m is None else _check_int(m, "m (comparisons in the family)", 1)
    if m < m_total:
        raise AnalysisError(f"m must count every comparison passed in ({m_total}), got {m}")
    phi, method = check_phi(phi), get_method(method).name
    results, undecided, exhausted, add, run = [], [], [], {}, {}
    for fam, comps in families.items():
        fam_margin = margin.get(fam) if isinstance(margin, Mapping) else margin
        res = [sequential_result(d, alpha=alpha, m=m, margin=fam_margin, phi=phi,
                                 higher_is_better=higher_is_better, family=fam, comparison=c,
                                 method=method)
               for c, d in comps.items()]
        results += res
        run[fam] = _seeds_run(fam, res, seeds_run)
        if all(r.decision != INCONCLUSIVE for r in res):
            continue
        if run[fam] >= max_seeds:
            exhausted.append(fam)
        else:
            undecided.append(fam)
            add[fam] = min(seed_batch, max_seeds - run[fam])
    return SequentialPlan(tuple(results), tuple(undecided), tuple(exhausted), add, run,
                          not undecided, alpha, bonferroni_alpha(alpha, m), m, max_seeds,
                          seed_batch, phi, method)


def _seeds_run(fam: Hashable, res: list[SequentialResult],
               seeds_run: Mapping[Hashable, int] | None) -> int:
    longest = max(r.n for r in res)
    if seeds_run is None or fam not in seeds_run:
        return longest
    k = _check_int(seeds_run[fam], f"seeds_run[{fam!r}]", 0)
    if k < longest:
        raise AnalysisError(f"seeds_run[{fam!r}] = {k} is below the {longest} deltas given")
    return k


def _finite(x: float) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def _jsonable_key(key: Hashable) -> object:
    return list(key) if isinstance(key, tuple) else key


def from_comparisons(comps: Sequence[Mapping], alpha: float, m: int,
                     method: str | None = None, phi: float = DEFAULT_PHI
                     ) -> list[SequentialResult]:
    """The sequential decision of each comparison of an adaptive sweep's report.

    comps: the report's comparison entries of ONE metric that belong to the launch's
    comparison family (each with `seeds`, `deltas` = arm − reference per seed,
    `equivalence_margin`, `higher_is_better`, `dataset`, `variant`, `baseline_variant`).
    m: the family size the LAUNCH fixed (Bonferroni over every comparison of the sweep),
    never the number shown: filtering what is shown must not loosen alpha/m. Deltas are taken
    in seed order, the order in which the sweep added them.
    """
    out = []
    for c in map(PairedDeltas.of, comps):
        order = np.argsort(np.asarray(c.seeds, dtype=int), kind="stable")
        deltas = np.asarray(c.deltas, dtype=float)[order]  # (n,)
        out.append(sequential_result(
            deltas, alpha=alpha, m=m, margin=c.equivalence_margin,
            higher_is_better=bool(c.higher_is_better), phi=phi, family=c.dataset,
            comparison=f"{c.variant} vs {c.baseline_variant}", method=method))
    return out


@dataclass(frozen=True)
class PairedDeltas:
    """What a sequential decision reads of one comparison (a records.Comparison, or its
    JSON entry): the per-seed deltas arm − reference, their seeds, margin and direction."""

    dataset: str
    variant: str
    baseline_variant: str
    seeds: Sequence[int]
    deltas: Sequence[float]
    equivalence_margin: float | None
    higher_is_better: bool

    @classmethod
    def of(cls, c: Mapping | object) -> "PairedDeltas":
        names = [f.name for f in fields(cls)]
        if isinstance(c, Mapping):
            return cls(**{k: c[k] for k in names})
        return cls(**{k: getattr(c, k) for k in names})


@dataclass(frozen=True)
class SequentialSection:
    """The report's `sequential` section (an adaptive sweep): the launch's settings, the
    family size m fixed at launch and where it came from, the method and its assumption, the
    label of the fixed-n output, and each comparison's decision (`results`, with its CS for
    the figure); `to_json` is the report's SEQUENTIAL_KEYS entry."""

    adaptive: Mapping
    metric: str
    alpha: float
    m: int
    family_source: str
    method: str
    assumption: str
    fixed_n_label: str
    results: tuple[SequentialResult, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "results", tuple(self.results))
        problems = [f"results[{i}] is a {type(r).__name__}, not a SequentialResult"
                    for i, r in enumerate(self.results) if not isinstance(r, SequentialResult)]
        if not isinstance(self.m, int) or self.m < 0:
            problems.append(f"m must be a whole number >= 0, not {self.m!r}")
        if problems:
            raise AnalysisError("invalid SequentialSection: " + "; ".join(problems))

    def to_json(self) -> dict:
        """SEQUENTIAL_KEYS, each result as SequentialResult.to_dict."""
        return {"adaptive": dict(self.adaptive), "metric": self.metric, "alpha": self.alpha,
                "m": self.m, "family_source": self.family_source, "method": self.method,
                "assumption": self.assumption, "fixed_n_label": self.fixed_n_label,
                "results": [r.to_dict() for r in self.results]}


# ---------------------------------------------------------------------------------------
# The methods: name -> class. Each gives a comparison's CS path and its decision after every
# seed (vectorized over leading axes: the benchmark simulates whole sweeps with it).

class SequentialMethod(Protocol):
    name: str
    estimand: str  # MEAN_DELTA or WIN_RATE: what better/worse(/equivalent) are about
    null_value: float  # the estimand's "no difference": 0 for mean Δ, 1/2 for the win rate
    decides_equivalence: bool  # False: `equivalent` is never reached (no margin on its scale)
    tag: str  # a few words beside each decision ('' when it rests on nothing beyond the range)
    assumption: str  # what its decisions rest on, said beside every decision

    def path(self, d: np.ndarray, alpha: float, phi: float) -> ConfidenceSequence: ...

    def decisions(self, d: np.ndarray, alpha: float, margin: float | None,
                  higher_is_better: bool, phi: float) -> np.ndarray: ...


class WinRate:
    """Beta-binomial mixture CS of the win rate P(Δ > 0 | Δ ≠ 0) (the default)."""

    name = "win-rate"
    estimand = WIN_RATE
    null_value = WINRATE_NULL
    decides_equivalence = False
    tag = ""  # exact for any distribution of Δ: nothing to add beside a decision
    assumption = ("distribution-free and exact: about the win rate P(Δ > 0 | Δ ≠ 0), i.e. "
                  "whether the variant wins on more seeds than it loses (ties skipped), not "
                  "about the size of the mean Δ; never decides equivalent (beta-binomial "
                  "mixture CS, Howard et al. 2021)")

    @staticmethod
    def path(d: np.ndarray, alpha: float, phi: float = DEFAULT_PHI) -> ConfidenceSequence:
        return winrate_confidence_sequence(d, alpha)

    @staticmethod
    def decisions(d: np.ndarray, alpha: float, margin: float | None, higher_is_better: bool,
                  phi: float = DEFAULT_PHI) -> np.ndarray:
        return winrate_decisions(d, alpha, higher_is_better)  # no margin on the win-rate scale


class Betting:
    """Hedged-capital betting CS of the mean Δ in [-1, 1]."""

    name = "betting"
    estimand = MEAN_DELTA
    null_value = 0.0
    decides_equivalence = True
    tag = ""  # nothing to add beside a decision: no distributional assumption
    assumption = ("distribution-free: valid for any per-seed Δ in [-1, 1] (betting CS, "
                  "Waudby-Smith & Ramdas)")

    @staticmethod
    def path(d: np.ndarray, alpha: float, phi: float = DEFAULT_PHI) -> ConfidenceSequence:
        return betting_confidence_sequence(d, alpha)

    @staticmethod
    def decisions(d: np.ndarray, alpha: float, margin: float | None, higher_is_better: bool,
                  phi: float = DEFAULT_PHI) -> np.ndarray:
        return betting_decisions(d, alpha, margin, higher_is_better)


class NormalMixture:
    """Normal-mixture t-based CS (opt-in): narrow, valid only for normal Δ."""

    name = "normal-mixture"
    estimand = MEAN_DELTA
    null_value = 0.0
    decides_equivalence = True
    tag = "assumes normal Δ"  # beside every decision it makes
    assumption = ("assumes per-seed Δ are i.i.d. normal (normal-mixture CS); not valid when "
                  "a variant fails on some seeds (bimodal or skewed Δ)")

    @staticmethod
    def path(d: np.ndarray, alpha: float, phi: float = DEFAULT_PHI) -> ConfidenceSequence:
        return confidence_sequence(d, alpha, phi)

    @staticmethod
    def decisions(d: np.ndarray, alpha: float, margin: float | None, higher_is_better: bool,
                  phi: float = DEFAULT_PHI) -> np.ndarray:
        low, high = cs_bounds(d, alpha, phi)
        return sequential_decisions(low, high, margin, higher_is_better)


def get_method(name: str | None) -> SequentialMethod:
    """The registry entry (None: DEFAULT_METHOD), or an AnalysisError naming the choices."""
    name = DEFAULT_METHOD if name is None else name
    if name not in SEQUENTIAL_METHODS:
        raise AnalysisError(unknown_name("sequential method", name, SEQUENTIAL_METHODS))
    return SEQUENTIAL_METHODS[name]


SEQUENTIAL_METHODS: dict[str, SequentialMethod] = {WinRate.name: WinRate, Betting.name: Betting,
                                                   NormalMixture.name: NormalMixture}
# The win rate: exact for any Δ and decides at seed counts users can afford (issue 31; the
# betting CS of the mean had power 0 at d_z <= 2 within 20 seeds; docs/sequential.md).
DEFAULT_METHOD = WinRate.name
# What an adaptive sweep launched before the method was recorded used.
LEGACY_METHOD = NormalMixture.name

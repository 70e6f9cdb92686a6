"""Anytime-valid inference for adaptive seed counts: confidence sequences and the stopping rule.

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
from dataclasses import dataclass, field
from typing import Hashable, Mapping, Sequence

import numpy as np

from fusion_sweep.analysis.schema import BETTER, EQUIVALENT, INCONCLUSIVE, WORSE, AnalysisError
from fusion_sweep.analysis.settings import DEFAULT_ALPHA
from fusion_sweep.analysis.stats import DELTA_DECIMALS

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


@dataclass(frozen=True, eq=False)
class ConfidenceSequence:
    """One comparison's (1 - alpha) CS along its seeds. Arrays are (n,); index k-1 is the
    state after k seeds. low/high are the running intersection (what decisions use);
    raw_low/raw_high the CS at each k alone; p_anytime the anytime-valid p for mean 0."""

    alpha: float
    phi: float
    mean: np.ndarray  # (n,) running mean Δ
    low: np.ndarray  # (n,)
    high: np.ndarray  # (n,)
    raw_low: np.ndarray  # (n,)
    raw_high: np.ndarray  # (n,)
    p_anytime: np.ndarray  # (n,)

    @property
    def n(self) -> int:
        return int(self.mean.size)

    def to_dict(self) -> dict:
        """JSON-ready: lists, ±inf -> None (unbounded), keys n = 1..N."""
        return {"alpha": self.alpha, "phi": self.phi, "n": list(range(1, self.n + 1)),
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
        raw_low=raw_low, raw_high=raw_high, p_anytime=anytime_p_values(d, 0.0, phi))


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


# ---------------------------------------------------------------------------------------
# Per-comparison result and the stopping rule.

@dataclass(frozen=True, eq=False)
class SequentialResult:
    """One comparison at the current round. `family` and `comparison` are the caller's
    opaque keys (e.g. (dataset, pe) and (fusion, baseline)); n is the seeds (pairs) used;
    cs_low/cs_high the CS at n at level alpha_each = alpha/m (running intersection); p_anytime
    the anytime-valid p for mean Δ = 0 (unadjusted; compare with alpha_each)."""

    family: Hashable
    comparison: Hashable
    n: int
    mean_delta: float
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

    @property
    def p_bonferroni(self) -> float:
        """min(1, m * p_anytime): the CS at alpha/m excludes 0 exactly when this is <= alpha."""
        return min(1.0, self.m * self.p_anytime)

    def to_dict(self) -> dict:
        """JSON-ready (±inf/NaN -> None); `path` as ConfidenceSequence.to_dict or None."""
        return {"family": _jsonable_key(self.family),
                "comparison": _jsonable_key(self.comparison), "n": self.n,
                "mean_delta": _finite(self.mean_delta), "cs_low": _finite(self.cs_low),
                "cs_high": _finite(self.cs_high), "decision": self.decision,
                "p_anytime": _finite(self.p_anytime),
                "p_bonferroni": _finite(self.p_bonferroni), "alpha": self.alpha,
                "alpha_each": self.alpha_each, "m": self.m, "margin": self.margin,
                "higher_is_better": self.higher_is_better,
                "path": self.path.to_dict() if self.path is not None else None}


def sequential_result(
    deltas: object, *, alpha: float = DEFAULT_ALPHA, m: int = 1, margin: float | None = None,
    higher_is_better: bool = True, phi: float = DEFAULT_PHI,
    family: Hashable = None, comparison: Hashable = None,
) -> SequentialResult:
    """Decide one comparison from its deltas (n,) (n = 0 allowed: inconclusive), with its CS
    at alpha/m (Bonferroni over the m comparisons of the family)."""
    alpha_each = bonferroni_alpha(alpha, m)
    margin = check_margin(margin)
    d = np.asarray(deltas, dtype=float).reshape(-1)
    if d.size == 0:
        return SequentialResult(family, comparison, 0, NAN, -math.inf, math.inf, INCONCLUSIVE,
                                1.0, float(alpha), alpha_each, int(m), margin,
                                bool(higher_is_better), None)
    path = confidence_sequence(d, alpha_each, phi)
    low, high = float(path.low[-1]), float(path.high[-1])
    return SequentialResult(
        family, comparison, path.n, float(path.mean[-1]), low, high,
        sequential_decision(low, high, margin, higher_is_better), float(path.p_anytime[-1]),
        float(alpha), alpha_each, int(m), margin, bool(higher_is_better), path)


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

    def for_family(self, family: Hashable) -> tuple[SequentialResult, ...]:
        return tuple(r for r in self.results if r.family == family)


def stopping_rule(
    families: Mapping[Hashable, Mapping[Hashable, object]], *, alpha: float = DEFAULT_ALPHA,
    margin: float | None | Mapping[Hashable, float | None] = None,
    higher_is_better: bool = True, max_seeds: int = DEFAULT_MAX_SEEDS,
    seed_batch: int = DEFAULT_SEED_BATCH, seeds_run: Mapping[Hashable, int] | None = None,
    m: int | None = None, phi: float = DEFAULT_PHI,
) -> SequentialPlan:
    """Which families need more seeds, and does the adaptive sweep stop?

    families: family key (opaque, e.g. (dataset, pe)) -> comparison key -> deltas (n,) of
    that comparison so far, in seed order (a comparison's n may be below the family's seed
    count when pairs were dropped). margin: one equivalence margin, None, or one per family
    key (absent: None). seeds_run: seeds launched per family (default: the longest deltas of
    the family); the budget is spent when seeds_run >= max_seeds. m: the Bonferroni family
    size; default the number of comparisons passed in. Pass the number the sweep planned
    before its first round when some comparison may not have deltas yet: m must not change
    between rounds.

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
    phi = check_phi(phi)
    results, undecided, exhausted, add, run = [], [], [], {}, {}
    for fam, comps in families.items():
        fam_margin = margin.get(fam) if isinstance(margin, Mapping) else margin
        res = [sequential_result(d, alpha=alpha, m=m, margin=fam_margin, phi=phi,
                                 higher_is_better=higher_is_better, family=fam, comparison=c)
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
                          seed_batch, phi)


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


def from_comparisons(comps: Sequence[Mapping], alpha: float, phi: float = DEFAULT_PHI
                     ) -> list[SequentialResult]:
    """The sequential decision of each comparison of an adaptive sweep's report.

    comps: the report's comparison entries of ONE metric (each with `seeds`, `deltas` =
    arm − reference per seed, `equivalence_margin`, `higher_is_better`, `dataset`, `variant`,
    `baseline_variant`). m = len(comps): the Bonferroni family `launch --until-decided` used
    (every comparison of the sweep against its baseline). Deltas are taken in seed order, the
    order in which the sweep added them.
    """
    out = []
    for c in comps:
        order = np.argsort(np.asarray(c["seeds"], dtype=int), kind="stable")
        deltas = np.asarray(c["deltas"], dtype=float)[order]  # (n,)
        out.append(sequential_result(
            deltas, alpha=alpha, m=max(len(comps), 1), margin=c["equivalence_margin"],
            higher_is_better=bool(c["higher_is_better"]), phi=phi, family=c["dataset"],
            comparison=f"{c['variant']} vs {c['baseline_variant']}"))
    return out

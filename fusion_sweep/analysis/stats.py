"""Per-comparison paired statistics: small pure functions over 1-D numpy arrays.

Conventions (rliable style):
- ``x``: shape (n,), the compared fusion's metric per seed; ``y``: shape (n,), the
  baseline's metric for the *same* seeds in the same order; ``d = x - y``, shape (n,).
- Every resampling takes an explicit ``np.random.Generator``; nothing touches global RNG.
- Undefined results (n < 2, zero variance) are ``nan``, never an exception; the caller
  receives a note saying why, and the verdict falls back to ``inconclusive``.

All tests come from scipy / statsmodels; this module only chooses methods, guards the
degenerate cases and names what it did. One exception, Holm's step-down (`holm`: three lines,
checked equal to statsmodels' in the tests; the docstring says why).
"""
from __future__ import annotations

import math
import warnings
import zlib
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps
from statsmodels.stats.power import TTestPower
from statsmodels.stats.weightstats import ttost_paired

from fusion_sweep.analysis.schema import BETTER, EQUIVALENT, INCONCLUSIVE, NOT_LEARNED, WORSE
from fusion_sweep.analysis.settings import DEFAULT_N_BOOT

NAN = float("nan")
# Deltas are rounded to this many decimals so float noise (0.81-0.80 vs 0.71-0.70) does
# not break ties or fake a non-zero variance; far below any metric's resolution.
DELTA_DECIMALS = 12
# Exact enumeration of all 2**n sign flips up to this n (2**16 = 65,536 means); beyond,
# a Monte-Carlo permutation test with the caller's generator, counting |T*| >= |t|.
SIGNFLIP_EXACT_MAX_N = 16
# Wilcoxon with ties/zeros: exact conditional permutation up to this many non-zero
# deltas, else the tie-corrected normal approximation.
WILCOXON_PERM_MAX_N = 16
WILCOXON_EXACT_MAX_N = 50
# The one-sided Mann–Whitney test of two independent samples enumerates every split of the
# pooled values up to this many splits (C(16, 8) = 12,870 at 8 seeds a sample, C(19, 9) =
# 92,378 at 9 and 10); beyond (C(40, 20) = 1.4e11 at 20 seeds a sample: no enumeration
# finishes), a Monte-Carlo permutation test with this many resamples of the caller's generator.
RANK_PERM_RESAMPLES = 99_999
BOOT_DESCRIPTIVE_BELOW = 10


def paired_deltas(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """d = x - y, shape (n,), rounded to DELTA_DECIMALS (see above)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"x and y must be 1-D of equal length, got {x.shape} and {y.shape}")
    return np.round(x - y, DELTA_DECIMALS)


def has_spread(d: np.ndarray) -> bool:
    """True when d (n,) has n >= 2 and a non-zero standard deviation."""
    return d.size >= 2 and bool(np.ptp(d) > 0)


@dataclass(frozen=True)
class TResult:
    """Paired t-test of d = x - y: mean, SD (ddof=1), (1-alpha) t-interval, p, df."""

    mean: float
    sd: float
    low: float
    high: float
    p: float
    df: float


def paired_t(x: np.ndarray, y: np.ndarray, alpha: float) -> TResult:
    """scipy.stats.ttest_rel(x, y) with its t-interval; nan when SD(d) = 0 or n < 2."""
    d = paired_deltas(x, y)
    mean = float(d.mean()) if d.size else NAN
    sd = float(d.std(ddof=1)) if d.size >= 2 else NAN
    if not has_spread(d):
        return TResult(mean, sd, NAN, NAN, NAN, float(d.size - 1) if d.size else NAN)
    res = sps.ttest_rel(x, y)
    ci = res.confidence_interval(confidence_level=1 - alpha)
    return TResult(mean, sd, float(ci.low), float(ci.high), float(res.pvalue), float(res.df))


def holm_consistent_interval(d: np.ndarray, p: float, p_adjusted: float,
                             alpha: float) -> tuple[float, float, float]:
    """The t-interval of mean(d) at the per-comparison level 1 - alpha * p / p_adjusted.

    A two-sided t-interval at level 1 - g excludes 0 exactly when p < g; with
    g = alpha * p / p_adjusted it therefore excludes 0 exactly when the Holm-adjusted p is
    below alpha: the interval agrees with the verdict, which unadjusted 95% intervals do
    not. Returns (low, high, level); nan when the t-test is undefined (n < 2 or SD 0).
    It is the interval consistent with Holm's decisions, not a simultaneous-coverage
    interval (those at alpha/m, Bonferroni, are wider and contain these).
    """
    d = np.asarray(d, dtype=float)
    if not (has_spread(d) and np.isfinite(p) and np.isfinite(p_adjusted) and p_adjusted > 0):
        return NAN, NAN, NAN
    level = 1.0 - alpha * min(1.0, p / p_adjusted)
    half = sps.t.ppf(0.5 + level / 2, d.size - 1) * d.std(ddof=1) / np.sqrt(d.size)
    return float(d.mean() - half), float(d.mean() + half), float(level)


def wilcoxon_signed_rank(d: np.ndarray) -> tuple[float, str]:
    """Two-sided Wilcoxon signed-rank p for d (n,) and the method used.

    Exact null distribution when there are no ties and no zeros (n <= 50). With ties or
    zeros that table is wrong (accuracy deltas are multiples of 1/N_test, so ties are
    common), so: the exact conditional permutation distribution of the rank statistic
    over all sign flips (n <= 16), else the tie-corrected normal approximation. Zeros are
    dropped (zero_method='wilcox') in both.
    """
    nonzero = d[d != 0]
    if d.size < 2:
        return NAN, "undefined (n < 2)"
    if nonzero.size == 0:
        return NAN, "undefined (no non-zero deltas)"
    ties = np.unique(np.abs(nonzero)).size < nonzero.size
    zeros = nonzero.size < d.size
    if not ties and not zeros and d.size <= WILCOXON_EXACT_MAX_N:
        return float(sps.wilcoxon(d, method="exact").pvalue), "exact"
    why = ", ".join(w for w, on in (("ties", ties), ("zeros", zeros)) if on) or "n > 50"
    if nonzero.size <= WILCOXON_PERM_MAX_N:
        return _signed_rank_permutation(nonzero), f"exact-permutation ({why}; zero_method=wilcox)"
    p = sps.wilcoxon(d, zero_method="wilcox", method="asymptotic").pvalue
    return float(p), f"asymptotic ({why}; zero_method=wilcox, tie-corrected)"


def _positive_rank_sum(signed_ranks: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.sum(np.where(signed_ranks > 0, signed_ranks, 0.0), axis=axis)


def _signed_rank_permutation(nonzero: np.ndarray) -> float:
    """Exact two-sided p of T+ over all 2**n sign flips, ranks (average for ties) fixed.

    Same null distribution as scipy.stats.wilcoxon(method=PermutationMethod()), which
    calls the statistic once per flip (0.8 s at n = 13); here one vectorized call.
    """
    if nonzero.size == 1:  # the two flips give T+ = 0 and T+ = r: both as extreme; scipy
        return 1.0         # refuses a one-observation sample
    ranks = sps.rankdata(np.abs(nonzero))
    res = sps.permutation_test((np.sign(nonzero) * ranks,), _positive_rank_sum,
                               permutation_type="samples", vectorized=True, n_resamples=np.inf)
    return float(res.pvalue)


def _mean_stat(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis)


def _abs_mean_stat(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.abs(np.mean(x, axis=axis))


def signflip_test(
    d: np.ndarray, rng: np.random.Generator, n_resamples: int = DEFAULT_N_BOOT
) -> tuple[float, str]:
    """Two-sided sign-flip permutation p of mean(d), d (n,), and the method used.

    Exact over all 2**n flips for n <= SIGNFLIP_EXACT_MAX_N (scipy enumerates them when
    n_resamples=inf; the flip distribution is symmetric, so its doubled tail is exact).
    Beyond, Monte Carlo with `rng`: p = (1 + #{|T*| >= |t|}) / (B + 1), the statistic |mean|
    under the symmetric null. Doubling the smaller Monte-Carlo tail (scipy's two-sided
    default) would double the tail's sampling noise and is not a valid p itself.
    """
    if d.size < 2:
        return NAN, "undefined (n < 2)"
    if not np.any(d != 0):
        return NAN, "undefined (no non-zero deltas)"
    if d.size <= SIGNFLIP_EXACT_MAX_N:
        res = sps.permutation_test((d,), _mean_stat, permutation_type="samples",
                                   vectorized=True, n_resamples=np.inf)
        return float(res.pvalue), f"exact (2^{d.size} flips)"
    res = sps.permutation_test((d,), _abs_mean_stat, permutation_type="samples",
                               vectorized=True, n_resamples=n_resamples, rng=rng,
                               alternative="greater")
    return float(res.pvalue), f"monte-carlo ({n_resamples} flips, |T*| >= |t|)"


def comparison_rng(seed: int, key: tuple[str, ...]) -> np.random.Generator:
    """A generator per comparison (or claim test), from (--rng-seed, its key).

    Keyed by a stable hash, not by position, so filtering datasets or adding fusions does
    not change any other comparison's bootstrap/Monte-Carlo numbers (report.rng_key).
    """
    h = zlib.crc32("|".join(key).encode())
    return np.random.default_rng(np.random.SeedSequence(entropy=seed, spawn_key=(h,)))


@dataclass(frozen=True)
class RankResult:
    """The one-sided Mann–Whitney test of x (n,) against y (m,): U of x (a tie counts one
    half), the p that x is stochastically larger, the p that it is smaller, whether every
    split was enumerated (else Monte Carlo), and the method in words."""

    u: float
    p_greater: float
    p_less: float
    exact: bool
    method: str


def rank_test(x: np.ndarray, y: np.ndarray, rng: np.random.Generator,
              n_resamples: int = RANK_PERM_RESAMPLES) -> RankResult:
    """Both one-sided Mann–Whitney p of x (n,) against y (m,), ties included: exact over the
    C(n + m, n) splits of the pooled values when there are at most `n_resamples` (scipy
    enumerates them), else Monte Carlo with `rng`, p = (1 + #{U* >= U}) / (B + 1).
    (scipy's default method turns asymptotic with ties, which accuracy deltas always have.)"""
    splits = math.comb(x.size + y.size, x.size)
    # One pass for both tails: U of (-x, -y) is n·m - U of (x, y), so its "greater" p is the
    # "less" p of (x, y), over the same splits or the same resamples.
    res = sps.mannwhitneyu(np.stack([x, -x]), np.stack([y, -y]), alternative="greater",
                           method=sps.PermutationMethod(n_resamples=n_resamples, rng=rng),
                           axis=-1)
    exact = splits <= n_resamples  # scipy's own rule for enumerating
    method = (f"exact ({splits:,} splits)" if exact
              else f"monte-carlo ({n_resamples:,} of {splits:,} splits)")
    return RankResult(float(res.statistic[0]), float(res.pvalue[0]), float(res.pvalue[1]),
                      exact, method)


def bca_interval(
    d: np.ndarray, alpha: float, n_resamples: int, rng: np.random.Generator
) -> tuple[float, float]:
    """BCa bootstrap (1-alpha) CI of mean(d), d (n,); nan when n < 3 or SD(d) = 0.

    BCa needs a jackknife acceleration, which is undefined for constant data, and with
    n < 3 there are too few distinct resamples to speak of an interval.
    """
    if d.size < 3 or not has_spread(d):
        return NAN, NAN
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate-data warnings surface as nan
        res = sps.bootstrap(
            (d,), _mean_stat, n_resamples=n_resamples, method="BCa",
            confidence_level=1 - alpha, vectorized=True, rng=rng,
        )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def cohen_dz(d: np.ndarray) -> float:
    """Cohen's d_z = mean(d) / SD(d, ddof=1); nan when SD is 0 or n < 2."""
    return float(d.mean() / d.std(ddof=1)) if has_spread(d) else NAN


def tost_p(x: np.ndarray, y: np.ndarray, margin: float | None) -> float:
    """TOST p for |mean(x - y)| < margin (statsmodels ttost_paired); nan without margin."""
    if margin is None or margin <= 0 or not has_spread(paired_deltas(x, y)):
        return NAN
    p, _, _ = ttost_paired(np.asarray(x, float), np.asarray(y, float), -margin, margin)
    return float(p)


def achieved_power(dz: float, n: int, alpha: float) -> float:
    """Power of the two-sided paired t-test (one-sample t on d) at effect d_z and n."""
    if not np.isfinite(dz) or n < 2:
        return NAN
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        power = float(TTestPower().power(effect_size=abs(dz), nobs=n, alpha=alpha))
        if np.isnan(power):
            power = _power_two_tails(abs(dz), n, alpha)
    return power


def _power_two_tails(dz: float, n: int, alpha: float) -> float:
    """P(T > c) + P(T < -c), T ~ noncentral t(n-1, dz*sqrt(n)), via scipy's nct.

    statsmodels returns nan for large effects because the wrong-direction tail
    nct.cdf(-c) underflows to nan (e.g. d_z = 7.85, n = 5); that tail is < 1e-15 there,
    so it counts as 0 while the right-direction tail is still computed exactly.
    """
    df, nc = n - 1, dz * math.sqrt(n)
    c = sps.t.isf(alpha / 2, df)
    upper = float(sps.nct.sf(c, df, nc))
    lower = float(sps.nct.cdf(-c, df, nc))
    return upper + (lower if np.isfinite(lower) else 0.0)


def seeds_for_power(dz: float, alpha: float, power: float = 0.8) -> int | None:
    """Seeds (pairs) for `power` at effect d_z, two-sided: the smallest n >= 2 whose power
    (`achieved_power`, statsmodels' TTestPower) reaches `power`; None when unreachable or
    undefined.

    d_z = 0 needs infinitely many seeds; d_z = nan (SD 0) is undefined. The t-test needs
    at least 2 pairs, hence the floor of 2. Power increases with n, so the search starts at
    the normal approximation n = ((z_alpha/2 + z_power) / d_z)^2 and gallops and bisects to
    the exact integer from there: 3-7 evaluations of the power where statsmodels'
    `solve_power` takes about 60 (and fails for large d_z).
    """
    if not np.isfinite(dz) or dz == 0:
        return None
    z = float(sps.norm.isf(alpha / 2) + sps.norm.ppf(power))
    start = math.ceil(min((z / abs(dz)) ** 2, 1e15))  # (the bound keeps it an int)
    return _smallest_n(dz, alpha, power, start=start, cap=max(10**9, 2 * start))


def _smallest_n(dz: float, alpha: float, power: float, start: int = 2,
                cap: int = 10**9) -> int | None:
    """Smallest n >= 2 with achieved_power >= power (power is increasing in n), searched
    from `start`: galloping up or down to a bracket, then bisection."""
    def ok(n: int) -> bool:
        p = achieved_power(dz, n, alpha)
        return np.isfinite(p) and p >= power
    hi = max(2, start)
    lo, step = hi - 1, 1  # invariant once bracketed: not ok(lo) or lo < 2; ok(hi)
    while not ok(hi):
        lo, hi, step = hi, hi + step, step * 2
        if hi > cap:
            return None
    while lo >= 2 and ok(lo):
        hi, lo, step = lo, lo - step, step * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def min_p_signed(n_nonzero: int) -> float:
    """Smallest two-sided p of an exact sign-based test over 2**n flips: 2 / 2**n."""
    return min(1.0, 2.0 / 2.0**n_nonzero) if n_nonzero > 0 else NAN


def min_p_wilcoxon(n_nonzero: int, method: str) -> float:
    """Smallest reachable two-sided Wilcoxon p at this n under `method`.

    Exact and permutation: all deltas of one sign, 2 / 2**n. Asymptotic: the normal tail
    at the extreme statistic T = 0.
    """
    if n_nonzero == 0:
        return NAN
    if method.startswith("asymptotic"):
        mn = n_nonzero * (n_nonzero + 1) / 4
        se = math.sqrt(n_nonzero * (n_nonzero + 1) * (2 * n_nonzero + 1) / 24)
        return float(2 * sps.norm.sf(mn / se))
    return min_p_signed(n_nonzero)


def min_p_signflip(n: int, method: str, n_resamples: int) -> float:
    """Smallest reachable two-sided sign-flip p: exact 2/2**n over the n NON-ZERO deltas
    (a zero delta flips to itself), Monte Carlo 1/(B+1)."""
    if n == 0:
        return NAN
    if method.startswith("monte-carlo"):
        return 1.0 / (n_resamples + 1)
    return min_p_signed(n)


def min_p_t(n: int) -> float:
    """The t-test's p has no floor for n >= 2 (t grows without bound): 0."""
    return 0.0 if n >= 2 else NAN


def holm(pvals: np.ndarray) -> np.ndarray:
    """Holm-adjusted p for pvals (m,); nan entries stay nan and are not counted in m.

    The step-down of statsmodels' `multipletests(method="holm")` (tests/test_properties.py
    checks the two equal on generated families), written out because that function runs a
    full garbage collection on every Holm call (statsmodels 0.15, stats/multitest.py:246):
    0.1-0.6 s each in a process that holds torch, about a third of a `stats` run.
    """
    p = np.asarray(pvals, dtype=float)
    out = np.full(p.shape, NAN)
    ok = np.isfinite(p)
    if ok.any():
        q = p[ok]  # (m,)
        order = np.argsort(q, kind="stable")
        # the i-th smallest p (from 0) times m - i, never below an earlier step, at most 1
        steps = np.minimum(np.maximum.accumulate(q[order] * np.arange(q.size, 0, -1)), 1.0)
        adjusted = np.empty(q.size)
        adjusted[order] = steps
        out[ok] = adjusted
    return out


def beats_chance(values: np.ndarray, chance: float) -> tuple[float, float]:
    """One-sided one-sample t of values (n,) > chance: (t, p); nan when n < 2 or SD = 0.

    scipy.stats.ttest_1samp(alternative='greater'). With SD 0 the t statistic is infinite
    or undefined, and a p of exactly 0 or 1 would overstate what n identical runs show.
    """
    v = np.asarray(values, dtype=float)
    if v.size < 2 or not np.isfinite(chance) or np.ptp(v) == 0:
        return NAN, NAN
    res = sps.ttest_1samp(v, chance, alternative="greater")
    return float(res.statistic), float(res.pvalue)


def one_sample_t(d: np.ndarray, alpha: float, alternative: str = "two-sided") -> TResult:
    """One-sample t of d (n,) against 0 with its (1-alpha) interval; nan when SD(d) = 0 or
    n < 2. alternative 'greater': one-sided p of mean > 0 and the interval [low, +inf)."""
    d = np.round(np.asarray(d, dtype=float), DELTA_DECIMALS)
    mean = float(d.mean()) if d.size else NAN
    sd = float(d.std(ddof=1)) if d.size >= 2 else NAN
    if not has_spread(d):
        return TResult(mean, sd, NAN, NAN, NAN, float(d.size - 1) if d.size else NAN)
    res = sps.ttest_1samp(d, 0.0, alternative=alternative)
    ci = res.confidence_interval(confidence_level=1 - alpha)
    return TResult(mean, sd, float(ci.low), float(ci.high), float(res.pvalue), float(res.df))


@dataclass(frozen=True)
class RatioResult:
    """The paired ratio x/y of a cost metric, analysed on the log scale.

    ratio: exp(mean log(x_i / y_i)), the geometric mean of the per-seed ratios; low, high:
    the (1-alpha) t-interval of the mean log ratio, exponentiated; p: its paired-t p.
    exact: every seed has the same ratio (a deterministic cost such as params), so there
    is no seed noise to test and the ratio itself is the answer.
    """

    ratio: float
    low: float
    high: float
    p: float
    exact: bool = False
    note: str = ""


def ratio_test(x: np.ndarray, y: np.ndarray, alpha: float) -> RatioResult:
    """Paired t-test of log(x) - log(y), x, y (n,) strictly positive; see RatioResult."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.size == 0:
        return RatioResult(NAN, NAN, NAN, NAN, note="no paired seeds: no ratio")
    if np.any(x <= 0) or np.any(y <= 0):
        return RatioResult(NAN, NAN, NAN, NAN, note="ratio undefined: a value is <= 0")
    lr = np.round(np.log(x) - np.log(y), DELTA_DECIMALS)  # (n,) log ratios
    t = one_sample_t(lr, alpha)
    ratio = math.exp(t.mean)
    if lr.size >= 2 and not has_spread(lr):
        return RatioResult(ratio, NAN, NAN, NAN, exact=True,
                           note=f"the same ratio ({ratio:.4g}) on every seed: a deterministic "
                                "cost, no seed noise to test; verdict by the ratio itself")
    if not np.isfinite(t.p):
        return RatioResult(ratio, NAN, NAN, NAN, note="only 1 paired seed: ratio interval "
                                                       "undefined")
    return RatioResult(ratio, math.exp(t.low), math.exp(t.high), t.p)


def ratio_verdict(r: RatioResult, p_holm: float, alpha: float, higher_is_better: bool) -> str:
    """The verdict rule applied on the log scale (ratio 1 = no effect); an exact ratio
    (no seed noise) is better/worse by itself, equal to 1 inconclusive."""
    if r.exact:
        if not np.isfinite(r.ratio) or r.ratio == 1.0:
            return INCONCLUSIVE
        return BETTER if (r.ratio > 1) == higher_is_better else WORSE
    if not np.isfinite(r.ratio) or not np.isfinite(r.low):
        return INCONCLUSIVE
    return verdict(math.log(r.low), math.log(r.high), p_holm, NAN, alpha, higher_is_better)


def verdict(
    t_low: float, t_high: float, p_holm: float, tost: float, alpha: float,
    higher_is_better: bool = True, not_learned: bool = False,
) -> str:
    """not learned when neither arm beats chance (nothing to compare); else better/worse
    iff Holm p < alpha and the t-interval excludes 0, on the side of 0 the interval lies
    (the interval decides, so it also gives the direction); equivalent iff (Holm-adjusted)
    TOST p < alpha; else inconclusive. "No effect" is never claimed without TOST."""
    if not_learned:
        return NOT_LEARNED
    above, below = t_low > 0, t_high < 0
    if np.isfinite(p_holm) and p_holm < alpha and (above or below):
        return BETTER if above == higher_is_better else WORSE
    if np.isfinite(tost) and tost < alpha:
        return EQUIVALENT
    return INCONCLUSIVE


@dataclass(frozen=True)
class PairedStats:
    """Every per-comparison statistic of the paired deltas except the Holm p and the verdict
    (they need the whole report): the comparison record's fields of the same names
    (fusion_sweep.analysis.records.Comparison documents each). deltas: d = x - y, (n,);
    notes: why a statistic is nan (see _notes)."""

    # the deltas and their signs
    n: int
    deltas: tuple[float, ...]
    n_positive: int
    n_negative: int
    n_zero: int
    # the mean Δ: paired t-test, effect size, post hoc power, TOST
    mean_delta: float
    sd_delta: float
    dz: float
    t_df: float
    t_ci_low: float
    t_ci_high: float
    t_p: float
    min_p_t: float
    power: float
    seeds_for_80_power: int | None
    tost_p: float
    # the non-parametric confirmations and the bootstrap interval
    wilcoxon_p: float
    wilcoxon_method: str
    min_p_wilcoxon: float
    signflip_p: float
    signflip_method: str
    min_p_signflip: float
    boot_ci_low: float
    boot_ci_high: float
    boot_method: str
    boot_descriptive: bool
    notes: tuple[str, ...]


def compare_paired(
    x: np.ndarray, y: np.ndarray, *, alpha: float, margin: float | None,
    n_resamples: int, rng: np.random.Generator,
) -> PairedStats:
    """Every per-comparison statistic except the Holm p and the verdict (they need the
    whole report). x, y: (n,) fusion and baseline metric per paired seed."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    d = paired_deltas(x, y)
    n, nonzero = int(d.size), int(np.count_nonzero(d))
    t = paired_t(x, y, alpha)
    w_p, w_method = wilcoxon_signed_rank(d)
    s_p, s_method = signflip_test(d, rng, n_resamples)
    b_low, b_high = bca_interval(d, alpha, n_resamples, rng)
    dz = cohen_dz(d)
    return PairedStats(
        n=n, mean_delta=t.mean, sd_delta=t.sd, t_ci_low=t.low, t_ci_high=t.high, t_p=t.p,
        t_df=t.df, wilcoxon_p=w_p, wilcoxon_method=w_method,
        signflip_p=s_p, signflip_method=s_method, boot_ci_low=b_low, boot_ci_high=b_high,
        boot_method=f"BCa, {n_resamples} resamples",
        boot_descriptive=n < BOOT_DESCRIPTIVE_BELOW,
        dz=dz, n_positive=int((d > 0).sum()), n_negative=int((d < 0).sum()),
        n_zero=n - nonzero, tost_p=tost_p(x, y, margin),
        power=achieved_power(dz, n, alpha), seeds_for_80_power=seeds_for_power(dz, alpha),
        min_p_t=min_p_t(n), min_p_wilcoxon=min_p_wilcoxon(nonzero, w_method),
        min_p_signflip=min_p_signflip(nonzero, s_method, n_resamples),
        deltas=tuple(d.tolist()), notes=tuple(_notes(d, t, dz)))


def _notes(d: np.ndarray, t: TResult, dz: float) -> list[str]:
    """Why some statistics are nan (the report turns these into warnings)."""
    if d.size == 0:
        return ["no paired seeds: nothing to test"]
    if d.size == 1:
        return ["only 1 paired seed: t-test, CIs and d_z undefined"]
    if not has_spread(d):
        kind = "all zero" if not np.any(d) else f"constant ({d[0]:+.6g})"
        return [f"deltas are {kind} (SD = 0): t-test, t-interval, bootstrap CI, d_z and "
                "power undefined; verdict inconclusive"]
    if d.size == 2:
        return ["only 2 paired seeds: bootstrap CI undefined (needs n >= 3)"]
    if np.isfinite(dz) and dz == 0:
        return ["mean delta is exactly 0: seeds for 80% power unbounded"]
    return []

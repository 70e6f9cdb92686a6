"""Is the adaptive-seed stopping rule valid under the seed noise this project produces, and what
does validity cost in seeds? (issue 13 §3, issue 20)

    python benchmarks/sequential_validity.py [--quick] [--sims N] [--seed S] [--alpha 0.05]
        [--sigma 0.10] [--margin 0.01] [--phi 0.25] [--start 5] [--batch 5] [--max-seeds 20]
        [--methods betting normal-mixture]

A simulation (CPU, seconds to minutes), not a timing benchmark. It simulates whole adaptive
sweeps with the rule of `fusion-sweep launch --until-decided`
(fusion_sweep.analysis.sequential): 3 regimes (the stopping families) x 2 comparisons (two
fusions vs one baseline: the default sweep's design), so m = 6 and every CS is at alpha/6
(Bonferroni). Each family starts with `--start` seeds; after each round a family whose
comparisons are not all decided (better / worse / equivalent within ±margin) gets `--batch`
more, up to `--max-seeds`. Decisions are each method's running-intersection decisions
(`SEQUENTIAL_METHODS[name].decisions`), exactly what `stopping_rule` uses: the first sweeps of
every scenario are replayed through `stopping_rule` and must agree.

Methods: every entry of SEQUENTIAL_METHODS (the default `betting`, distribution-free for Δ in
[-1, 1]; `normal-mixture`, which assumes normal Δ), plus `fixed-n t (peeking)`: the same rule
on fixed-n t-intervals at alpha/m at every look, the invalid practice a CS replaces.

Null scenarios (per-seed Δ of each comparison, i.i.d. over seeds, independent across
comparisons; the error is a sweep with ANY false claim):

- gaussian: N(0, σ²);
- t2: σ · t with 2 degrees of freedom (heavy tails), clipped to [-1, 1] (symmetric: mean 0);
- ties: N(0, σ²) rounded to the 1/100 grid (accuracy on 100 test documents);
- skewed: σ (1 - Exp(1)): occasional bad runs, mean 0;
- bimodal-10: the variant fails on 10% of seeds (Δ = -0.4), else +0.0444 (mean exactly 0),
  each mode with per-seed noise N(0, 0.01²);
- bimodal-5: fails on 5% (-0.4), else +0.02105, noise as above;
- reference-fails: this project's own default sweep, where the reference arm `add` on
  synthetic-long ranged 0.500-0.884 over seeds (some seeds stay at chance 0.5): the
  REFERENCE fails on 20% of seeds (Δ = +0.384), else Δ = -0.096 (mean 0), noise as above;
- collapse: mean -0.0296 (10% of seeds collapse to -0.3, else 0 or +0.001): the truth is
  `worse`; a false claim is `better` or `equivalent` within --margin (0.01).

False claims under a mean-0 null are better/worse (equivalent is true there).

Power: Gaussian Δ with mean d_z σ for d_z = 0.5, 1, 2: mean seeds per family and the rate of
correct `better`; and, per method, the fewest seeds that decide a steady effect (Δ = e with
per-seed SD 0.03) for e = 0.1, 0.2, 0.3, 0.5.

Every random draw comes from one np.random.Generator seeded by --seed. `--quick`: 500 sims.
Last stdout line: one JSON object with, per method, `null_error_rate_by_scenario`,
`null_error_upper95_by_scenario` (exact Clopper-Pearson one-sided 95% bound), `mean_seeds`,
`power` and `seeds_to_decide_steady_effect`.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable

import numpy as np
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fusion_sweep.analysis.schema import BETTER, EQUIVALENT, INCONCLUSIVE, WORSE  # noqa: E402
from fusion_sweep.analysis.sequential import (  # noqa: E402
    DEFAULT_MAX_SEEDS, DEFAULT_METHOD, DEFAULT_PHI, DEFAULT_SEED_BATCH, SEQUENTIAL_METHODS,
    bonferroni_alpha,
    sequential_decisions, stopping_rule,
)
from fusion_sweep.analysis.settings import DEFAULT_ALPHA  # noqa: E402

FAMILIES, PER_FAMILY = 3, 2  # 3 regimes x (concat, gate-scalar) vs add
EFFECTS = (0.5, 1.0, 2.0)
STEADY = (0.1, 0.2, 0.3, 0.5)
REPLAY = 10  # sweeps per scenario and method replayed through stopping_rule
PEEKING = "fixed-n t (peeking)"
JITTER = 0.01  # per-seed noise of each mode of a bimodal scenario
Shape = tuple[int, ...]


def _bimodal(low: float, p_low: float) -> Callable[[np.random.Generator, Shape, float], np.ndarray]:
    high = -low * p_low / (1 - p_low)  # mean exactly 0

    def draw(rng: np.random.Generator, shape: Shape, sigma: float) -> np.ndarray:
        fail = rng.random(shape) < p_low
        return np.where(fail, low, high) + JITTER * rng.standard_normal(shape)
    return draw


def _collapse(rng: np.random.Generator, shape: Shape, sigma: float) -> np.ndarray:
    return np.where(rng.random(shape) < 0.1, -0.3, 0.001 * rng.integers(0, 2, shape))


# name -> (draw(rng, shape, sigma) -> Δ, true mean, what a false claim is)
SCENARIOS: dict[str, tuple[Callable, float, tuple[str, ...]]] = {
    "gaussian": (lambda r, s, sg: sg * r.standard_normal(s), 0.0, (BETTER, WORSE)),
    "t2": (lambda r, s, sg: np.clip(sg * r.standard_t(2, s), -1, 1), 0.0, (BETTER, WORSE)),
    "ties": (lambda r, s, sg: np.round(sg * r.standard_normal(s) * 100) / 100, 0.0,
             (BETTER, WORSE)),
    "skewed": (lambda r, s, sg: np.clip(sg * (1 - r.exponential(1.0, s)), -1, 1), 0.0,
               (BETTER, WORSE)),
    "bimodal-10": (_bimodal(-0.4, 0.10), 0.0, (BETTER, WORSE)),
    "bimodal-5": (_bimodal(-0.4, 0.05), 0.0, (BETTER, WORSE)),
    "reference-fails": (_bimodal(0.384, 0.20), 0.0, (BETTER, WORSE)),
    "collapse": (_collapse, -0.0296, (BETTER, EQUIVALENT)),
}


def decisions_by_method(d: np.ndarray, method: str, alpha_each: float, margin: float | None,
                        phi: float) -> np.ndarray:
    """Running decisions (..., n) of one method on deltas (..., n)."""
    if method == PEEKING:
        low, high = naive_bounds(d, alpha_each)
        return sequential_decisions(np.maximum.accumulate(low, -1),
                                    np.minimum.accumulate(high, -1), margin, True)
    return SEQUENTIAL_METHODS[method].decisions(d, alpha_each, margin, True, phi)


def adaptive_sweeps(dec: np.ndarray, looks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Seeds per family (sims, F) and final decisions (sims, F, C) of the adaptive rule.

    dec: (sims, F, C, N) running decisions; looks: seed counts after each round. A family
    stops at its first look where no comparison is inconclusive (families never wait for
    each other: each is extended only while it is undecided).
    """
    at = dec[..., looks - 1]
    decided = np.all(at != INCONCLUSIVE, axis=2)  # (sims, F, L)
    stop = np.where(decided.any(axis=-1), decided.argmax(axis=-1), looks.size - 1)
    final = np.take_along_axis(at, stop[:, :, None, None].repeat(at.shape[2], 2), -1)[..., 0]
    return looks[stop], final


def naive_bounds(d: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Fixed-n t-intervals at every n (no intersection): what peeking with t-tests does."""
    n = np.arange(1, d.shape[-1] + 1, dtype=float)
    mean = np.cumsum(d, -1) / n
    var = (np.cumsum(d * d, -1) - n * mean**2) / np.maximum(n - 1, 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        half = sps.t.isf(alpha / 2, np.maximum(n - 1, 1)) * np.sqrt(np.maximum(var, 0) / n)
    half = np.where((n >= 2) & (var > 1e-24), half, np.inf)
    return mean - half, mean + half


def replay(d: np.ndarray, looks: np.ndarray, alpha: float, margin: float | None, phi: float,
           max_seeds: int, batch: int, method: str) -> tuple[np.ndarray, np.ndarray]:
    """One sweep d (F, C, N) round by round through fusion_sweep.analysis.sequential.stopping_rule."""
    run = {f: int(looks[0]) for f in range(d.shape[0])}
    while True:
        fams = {f: {c: d[f, c, :run[f]] for c in range(d.shape[1])} for f in run}
        plan = stopping_rule(fams, alpha=alpha, margin=margin, max_seeds=max_seeds,
                             seed_batch=batch, seeds_run=run, phi=phi, method=method)
        if plan.stop:
            break
        for f, k in plan.seeds_to_add.items():
            run[f] += k
    seeds = np.array([run[f] for f in range(d.shape[0])])
    return seeds, np.array([[r.decision for r in plan.for_family(f)] for f in range(d.shape[0])])


def binom_upper(k: int, n: int) -> float:
    """Exact (Clopper-Pearson) one-sided 95% upper bound of a binomial rate."""
    return float(sps.binomtest(k, n).proportion_ci(0.90, method="exact").high)


def steady_seeds(rng: np.random.Generator, method: str, alpha_each: float, phi: float,
                 effect: float, sims: int, n_max: int = 200) -> float | None:
    """Median seeds until `better` for a steady effect (Δ ~ N(effect, 0.03²)); None when not
    decided within n_max in most runs."""
    d = np.clip(effect + 0.03 * rng.standard_normal((sims, n_max)), -1, 1)
    dec = decisions_by_method(d, method, alpha_each, None, phi) == BETTER  # (sims, n)
    first = np.where(dec.any(-1), dec.argmax(-1) + 1, np.inf)
    med = float(np.median(first))
    return med if np.isfinite(med) else None


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="500 simulations")
    ap.add_argument("--sims", type=int, default=None, help="simulated sweeps per scenario (2000)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the one np.random.Generator")
    ap.add_argument("--alpha", type=float, default=DEFAULT_ALPHA)
    ap.add_argument("--sigma", type=float, default=0.10, help="SD of a paired per-seed delta")
    ap.add_argument("--margin", type=float, default=0.01, help="equivalence margin; <= 0: none")
    ap.add_argument("--phi", type=float, default=DEFAULT_PHI, help="mixture precision")
    ap.add_argument("--start", type=int, default=5)
    ap.add_argument("--batch", type=int, default=DEFAULT_SEED_BATCH)
    ap.add_argument("--max-seeds", type=int, default=DEFAULT_MAX_SEEDS,
                    help=f"seed budget per family (default {DEFAULT_MAX_SEEDS}, launch's)")
    ap.add_argument("--effects", type=float, nargs="+", default=list(EFFECTS),
                    help="d_z values for the power scenarios (0.5 1 2)")
    ap.add_argument("--replay", type=int, default=REPLAY,
                    help=f"sweeps per scenario and method replayed through stopping_rule "
                         f"({REPLAY})")
    ap.add_argument("--methods", nargs="+", default=[*SEQUENTIAL_METHODS, PEEKING],
                    help="methods to simulate (default: every sequential method and peeking)")
    args = ap.parse_args(argv)
    sims = args.sims or (500 if args.quick else 2000)
    margin = args.margin if args.margin > 0 else None
    rng = np.random.default_rng(args.seed)
    m = FAMILIES * PER_FAMILY
    alpha_each = bonferroni_alpha(args.alpha, m)
    looks = np.unique(np.r_[np.arange(args.start, args.max_seeds, args.batch), args.max_seeds])
    shape = (sims, FAMILIES, PER_FAMILY, args.max_seeds)
    print(f"{sims} adaptive sweeps per scenario: {FAMILIES} families x {PER_FAMILY} comparisons "
          f"(m = {m}), alpha {args.alpha} -> each CS at {alpha_each:.5f}; sigma {args.sigma}; "
          f"margin {margin}; seeds {args.start} + {args.batch}/round up to {args.max_seeds}; "
          f"default method: {DEFAULT_METHOD}\n")

    out: dict[str, dict] = {k: {"null_error_rate_by_scenario": {},
                                "null_error_upper95_by_scenario": {},
                                "null_mean_seeds_by_scenario": {}, "mean_seeds": {},
                                "power": {}} for k in args.methods}
    print("| scenario (false claim) | " + " | ".join(args.methods) + " |")
    print("|---|" + "---|" * len(args.methods))
    for name, (draw, _mean, false) in SCENARIOS.items():
        d = draw(rng, shape, args.sigma)
        cells = []
        for method in args.methods:
            dec = decisions_by_method(d, method, alpha_each, margin, args.phi)
            seeds, final = adaptive_sweeps(dec, looks)
            if method != PEEKING:
                for i in range(min(args.replay, sims)):  # the vectorized rule IS the library's rule
                    s_ref, f_ref = replay(d[i], looks, args.alpha, margin, args.phi,
                                          args.max_seeds, args.batch, method)
                    assert np.array_equal(s_ref, seeds[i]), (name, method, i)
                    assert np.array_equal(f_ref, final[i]), (name, method, i)
            k = int(np.any(np.isin(final, false), axis=(1, 2)).sum())
            o = out[method]
            o["null_error_rate_by_scenario"][name] = k / sims
            o["null_error_upper95_by_scenario"][name] = binom_upper(k, sims)
            o["null_mean_seeds_by_scenario"][name] = float(seeds.mean())
            cells.append(f"{k / sims:.4f} (≤ {binom_upper(k, sims):.4f}; "
                         f"{seeds.mean():.1f} seeds)")
        print(f"| {name} ({'/'.join(false)}) | " + " | ".join(cells) + " |")

    print("\n| power: Gaussian Δ, d_z (mean Δ) | " + " | ".join(args.methods) + " |")
    print("|---|" + "---|" * len(args.methods))
    for effect in args.effects:
        d = SCENARIOS["gaussian"][0](rng, shape, args.sigma) + effect * args.sigma
        cells = []
        for method in args.methods:
            seeds, final = adaptive_sweeps(
                decisions_by_method(d, method, alpha_each, margin, args.phi), looks)
            power = float((final == BETTER).mean())
            out[method]["power"][f"{effect:g}"] = power
            out[method]["mean_seeds"][f"{effect:g}"] = float(seeds.mean())
            cells.append(f"{power:.3f} ({seeds.mean():.1f} seeds)")
        print(f"| d_z = {effect:g} (Δ = {effect * args.sigma:.3g}) | " + " | ".join(cells) + " |")

    print("\n| steady effect Δ (SD 0.03): median seeds to `better` | "
          + " | ".join(args.methods) + " |")
    print("|---|" + "---|" * len(args.methods))
    for method in args.methods:
        out[method]["seeds_to_decide_steady_effect"] = {
            f"{e:g}": steady_seeds(rng, method, alpha_each, args.phi, e, min(sims, 200))
            for e in STEADY}
    for e in STEADY:
        cells = [str(out[mm]["seeds_to_decide_steady_effect"][f"{e:g}"] or "> 200")
                 for mm in args.methods]
        print(f"| {e:g} | " + " | ".join(cells) + " |")

    default = out[DEFAULT_METHOD]["null_error_rate_by_scenario"]
    upper_ok = {s: binom_upper(round(r * sims), sims) for s, r in default.items()}
    mc = {s: r <= args.alpha + 2 * np.sqrt(args.alpha * (1 - args.alpha) / sims)
          for s, r in default.items()}
    print(f"\ndefault method {DEFAULT_METHOD}: null error <= alpha {args.alpha} within Monte "
          f"Carlo error (2 SE) in every scenario: {all(mc.values())}")
    print(f"replayed {min(args.replay, sims)} sweeps per scenario and method through "
          "fusion_sweep.analysis.sequential.stopping_rule: identical seeds and decisions")
    result = {
        "n_sims": sims, "alpha": args.alpha, "alpha_each": alpha_each, "m": m,
        "phi": args.phi, "sigma": args.sigma, "margin": margin, "seed": args.seed,
        "start": args.start, "batch": args.batch, "max_seeds": args.max_seeds,
        "default_method": DEFAULT_METHOD, "default_valid_in_every_scenario": all(mc.values()),
        "default_upper95_by_scenario": upper_ok, "methods": out,
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()

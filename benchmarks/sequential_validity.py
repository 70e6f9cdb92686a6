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

Methods: every entry of SEQUENTIAL_METHODS (the default `win-rate`, exact for the win rate
P(Δ > 0 | Δ ≠ 0) under any distribution of Δ; `betting`, distribution-free for the mean Δ in
[-1, 1]; `normal-mixture`, which assumes normal Δ), plus `fixed-n t (peeking)`: the same rule
on fixed-n t-intervals at alpha/m at every look, the invalid practice a CS replaces.

Scenarios (per-seed Δ of each comparison, i.i.d. over seeds, independent across comparisons).
A false claim is judged against the truth of the ESTIMAND OF THE METHOD that made it (the
mean Δ for betting, normal-mixture and peeking; the win rate P(Δ > 0 | Δ ≠ 0) for win-rate),
because the two can disagree: in bimodal-10 the mean is 0 while the variant wins on 90% of the
seeds. Each scenario's truth for each estimand, computed from its definition:

| scenario | per-seed Δ | mean Δ | win rate | false (mean Δ) | false (win rate) |
|---|---|---|---|---|---|
| gaussian | N(0, σ²) | 0 | 1/2 | better, worse | better, worse |
| t2 | σ·t₂ clipped to [-1, 1] (heavy tails) | 0 | 1/2 | better, worse | better, worse |
| ties | N(0, σ²) on the 1/100 grid | 0 | 1/2 | better, worse | better, worse |
| ties-500 | each arm's accuracy on the 1/500 grid (a 500-document test set), the two arms' noise 0.75 grid steps: ~1/3 of seeds tie | 0 | 1/2 | better, worse | better, worse |
| skewed | σ(1 − Exp(1)) | 0 | 1 − e⁻¹ = 0.632 | better, worse | worse |
| bimodal-10 | the variant collapses on 10% of seeds (−0.4), else +0.0444 | 0 | 0.9 | better, worse | worse |
| bimodal-5 | collapses on 5% (−0.4), else +0.02105 | 0 | 0.95 | better, worse | worse |
| reference-fails | the reference fails on 20% (+0.384), else −0.096 | 0 | 0.2 | better, worse | better |
| exchangeable-bimodal | each arm fails independently on 20% of seeds (accuracy 0.5, else 0.85) | 0 | 1/2 | better, worse | better, worse |
| big-wins-small-losses | +0.3 on half the seeds, −0.05 on the other half | +0.125 | 1/2 | worse, equivalent | better, worse |
| collapse | −0.3 on 10% of seeds, else 0 or +0.001 | −0.0296 | 0.818 | better, equivalent | worse |

Bimodal modes carry per-seed noise N(0, 0.01²), so their signs are those of the modes. The
win-rate method never says `equivalent`, so only better/worse can be false for it. Under a
null of its estimand (1/2 or mean 0) every method's false-claim rate must be <= alpha; where
the estimand's truth is not the null, the false claim is the wrong direction (or, for the
mean, `equivalent` when the truth lies outside ±margin).

Power: Gaussian Δ with mean d_z σ for d_z = 0.5, 1, 2 (both estimands' truth is `better`:
the win rate is Φ(d_z)): mean seeds per family and the rate of correct `better`; and, per method, the fewest seeds that decide a steady effect (Δ = e with
per-seed SD 0.03) for e = 0.1, 0.2, 0.3, 0.5.

Every random draw comes from one np.random.Generator seeded by --seed. `--quick`: 500 sims.
Last stdout line: one JSON object with, for the default method at the top level and per
method under `methods`, `null_error_rate_by_scenario` (the false-claim rate for the method's
estimand), `null_error_upper95_by_scenario` (exact Clopper-Pearson one-sided 95% bound),
`mean_seeds`, `power` (by d_z) and `seeds_to_decide_steady_effect`; `estimand_by_method` and
`truth_by_scenario` say what was judged against what.
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


def _ties_500(rng: np.random.Generator, shape: Shape, sigma: float) -> np.ndarray:
    """Two arms' accuracy on a 500-document test set (the 1/500 grid), same true accuracy."""
    acc = lambda: np.round((0.8 + 0.0015 * rng.standard_normal(shape)) * 500) / 500  # noqa: E731
    return acc() - acc()


def _exchangeable(rng: np.random.Generator, shape: Shape, sigma: float) -> np.ndarray:
    """Each arm fails to learn (0.5) on 20% of seeds independently, else 0.85."""
    arm = lambda: (np.where(rng.random(shape) < 0.2, 0.5, 0.85)  # noqa: E731
                   + JITTER * rng.standard_normal(shape))
    return arm() - arm()


def _big_wins(rng: np.random.Generator, shape: Shape, sigma: float) -> np.ndarray:
    """Wins half the seeds by 0.3, loses the other half by 0.05: mean +0.125, win rate 1/2."""
    return np.where(rng.random(shape) < 0.5, 0.3, -0.05) + JITTER * rng.standard_normal(shape)


MEAN, WIN = "mean Δ", "win rate"  # the estimands (SequentialMethod.estimand)
BOTH = (BETTER, WORSE)


def _scenario(draw: Callable, mean: float, win: float, false_mean: tuple, false_win: tuple
              ) -> tuple[Callable, dict[str, float], dict[str, tuple[str, ...]]]:
    return draw, {MEAN: mean, WIN: win}, {MEAN: false_mean, WIN: false_win}


# name -> (draw(rng, shape, sigma) -> Δ, true value per estimand, false claims per estimand)
SCENARIOS: dict[str, tuple[Callable, dict[str, float], dict[str, tuple[str, ...]]]] = {
    "gaussian": _scenario(lambda r, s, sg: sg * r.standard_normal(s), 0.0, 0.5, BOTH, BOTH),
    "t2": _scenario(lambda r, s, sg: np.clip(sg * r.standard_t(2, s), -1, 1), 0.0, 0.5,
                    BOTH, BOTH),
    "ties": _scenario(lambda r, s, sg: np.round(sg * r.standard_normal(s) * 100) / 100,
                      0.0, 0.5, BOTH, BOTH),
    "ties-500": _scenario(_ties_500, 0.0, 0.5, BOTH, BOTH),
    "skewed": _scenario(lambda r, s, sg: np.clip(sg * (1 - r.exponential(1.0, s)), -1, 1),
                        0.0, 1 - np.exp(-1.0), BOTH, (WORSE,)),
    "bimodal-10": _scenario(_bimodal(-0.4, 0.10), 0.0, 0.9, BOTH, (WORSE,)),
    "bimodal-5": _scenario(_bimodal(-0.4, 0.05), 0.0, 0.95, BOTH, (WORSE,)),
    "reference-fails": _scenario(_bimodal(0.384, 0.20), 0.0, 0.2, BOTH, (BETTER,)),
    "exchangeable-bimodal": _scenario(_exchangeable, 0.0, 0.5, BOTH, BOTH),
    "big-wins-small-losses": _scenario(_big_wins, 0.125, 0.5, (WORSE, EQUIVALENT), BOTH),
    "collapse": _scenario(_collapse, -0.0296, 0.45 / 0.55, (BETTER, EQUIVALENT), (WORSE,)),
}


def estimand_of(method: str) -> str:
    """The estimand a method's decisions are about (peeking t-intervals: the mean)."""
    return MEAN if method == PEEKING else SEQUENTIAL_METHODS[method].estimand


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
    # The default method is always simulated: the JSON's top level reports it.
    args.methods = list(dict.fromkeys([DEFAULT_METHOD, *args.methods]))
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

    out: dict[str, dict] = {k: {"estimand": estimand_of(k), "null_error_rate_by_scenario": {},
                                "null_error_upper95_by_scenario": {},
                                "null_mean_seeds_by_scenario": {}, "mean_seeds": {},
                                "power": {}} for k in args.methods}
    print("| scenario | " + " | ".join(f"{k} ({estimand_of(k)})" for k in args.methods) + " |")
    print("|---|" + "---|" * len(args.methods))
    for name, (draw, _truth, false_by) in SCENARIOS.items():
        d = draw(rng, shape, args.sigma)
        cells = []
        for method in args.methods:
            false = false_by[estimand_of(method)]
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
        print(f"| {name} | " + " | ".join(cells) + " |")

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
        "default_upper95_by_scenario": upper_ok,
        "default_estimand": estimand_of(DEFAULT_METHOD),
        "null_error_rate_by_scenario": default, "power": out[DEFAULT_METHOD]["power"],
        "estimand_by_method": {k: estimand_of(k) for k in args.methods},
        "truth_by_scenario": {k: {"truth": t, "false_claims": {e: list(f) for e, f in fb.items()}}
                              for k, (_, t, fb) in SCENARIOS.items()},
        "methods": out,
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()

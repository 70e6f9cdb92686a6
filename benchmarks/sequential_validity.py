"""Is the adaptive-seed stopping rule valid, and how many seeds does it save? (issue 13 §3)

    python benchmarks/sequential_validity.py [--quick] [--sims N] [--seed S] [--alpha 0.05]
        [--sigma 0.10] [--margin 0.01] [--phi 0.25] [--start 5] [--batch 5] [--max-seeds 20]

Simulates whole adaptive sweeps with the rule of `fusion-sweep launch --until-decided`
(fusion_sweep.analysis.sequential): 3 regimes (the stopping families) x 2 comparisons (two fusions vs one
baseline: the default sweep's design), so m = 6 and every CS is at alpha/6 (Bonferroni).
Each family starts with `--start` seeds; after each round a family whose comparisons are not
all decided (better / worse / equivalent within ±margin) gets `--batch` more, up to
`--max-seeds`. Decisions use the running-intersection confidence sequence, exactly as
`fusion_sweep.analysis.sequential.stopping_rule` (the first sweeps of every scenario are replayed through
that function and must agree).

Per seed, the two fusions and the baseline get independent N(0, σ²/2) noise, so each paired
Δ has SD σ and the two Δ of a family correlate 0.5 (shared baseline). σ = 0.10: the default
sweep's per-seed SDs of single arms are 0.003-0.125 (README table), so paired deltas of
about 0.1 are typical; the CS and the t-test are scale-free, so σ matters only next to the
equivalence margin (0.01, the default sweep's: 0.1 σ, not reachable within the seed budget).

Scenarios: the null (every Δ has mean 0): the rate of sweeps with any false better/worse,
with its exact binomial 95% upper bound, and the same rule with fixed-n t-intervals at each
look (what peeking does without a CS); effects d_z = 0.5, 1, 2 on every comparison (mean Δ =
d_z σ): mean seeds per family, decision rates, and the fixed-n design with the same power:
the smallest n where a paired t-test at alpha/6 (Bonferroni, statsmodels TTestPower) and
Holm over the 6 comparisons (simulated) reach the sequential design's power.

Every random draw comes from one np.random.Generator seeded by --seed. `--quick`: 500 sims.
Last stdout line: one JSON object (n_sims, alpha, null_error_rate, mean_seeds, ...).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from scipy import stats as sps
from statsmodels.stats.power import TTestPower

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fusion_sweep.analysis.schema import BETTER, EQUIVALENT, INCONCLUSIVE, WORSE  # noqa: E402
from fusion_sweep.analysis.sequential import (  # noqa: E402
    DEFAULT_MAX_SEEDS, DEFAULT_PHI, DEFAULT_SEED_BATCH, bonferroni_alpha, cs_bounds,
    sequential_decisions, stopping_rule,
)
from fusion_sweep.analysis.settings import DEFAULT_ALPHA  # noqa: E402

FAMILIES, PER_FAMILY = 3, 2  # 3 regimes x (concat, gate-scalar) vs add
EFFECTS = (0.5, 1.0, 2.0)
REPLAY = 25  # sweeps per scenario replayed through fusion_sweep.analysis.sequential.stopping_rule


def simulate_deltas(rng: np.random.Generator, sims: int, n: int, sigma: float,
                    effect: float) -> np.ndarray:
    """Paired deltas (sims, FAMILIES, PER_FAMILY, n): fusion - shared baseline, SD sigma."""
    arms = rng.standard_normal((sims, FAMILIES, PER_FAMILY + 1, n)) * sigma / np.sqrt(2)
    return arms[:, :, 1:, :] - arms[:, :, :1, :] + effect * sigma


def adaptive_sweeps(low: np.ndarray, high: np.ndarray, looks: np.ndarray, margin: float | None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Seeds per family (sims, F) and final decisions (sims, F, C) of the adaptive rule.

    low/high: (sims, F, C, N) running-intersection bounds; looks: seed counts after each
    round. A family stops at its first look where no comparison is inconclusive (families
    never wait for each other: each is extended only while it is undecided).
    """
    dec = sequential_decisions(low[..., looks - 1], high[..., looks - 1], margin, True)
    decided = np.all(dec != INCONCLUSIVE, axis=2)  # (sims, F, L)
    stop = np.where(decided.any(axis=-1), decided.argmax(axis=-1), looks.size - 1)
    final = np.take_along_axis(dec, stop[:, :, None, None].repeat(dec.shape[2], 2), -1)[..., 0]
    return looks[stop], final


def naive_bounds(d: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Fixed-n t-intervals at every n (no intersection): what peeking with t-tests does."""
    n = np.arange(1, d.shape[-1] + 1, dtype=float)
    mean = np.cumsum(d, -1) / n
    var = (np.cumsum(d * d, -1) - n * mean**2) / np.maximum(n - 1, 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        half = sps.t.isf(alpha / 2, np.maximum(n - 1, 1)) * np.sqrt(np.maximum(var, 0) / n)
    half = np.where(n >= 2, half, np.inf)
    return mean - half, mean + half


def replay(d: np.ndarray, looks: np.ndarray, alpha: float, margin: float | None, phi: float,
           max_seeds: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """One sweep d (F, C, N) round by round through fusion_sweep.analysis.sequential.stopping_rule."""
    run = {f: int(looks[0]) for f in range(d.shape[0])}
    while True:
        fams = {f: {c: d[f, c, :run[f]] for c in range(d.shape[1])} for f in run}
        plan = stopping_rule(fams, alpha=alpha, margin=margin, max_seeds=max_seeds,
                             seed_batch=batch, seeds_run=run, phi=phi)
        if plan.stop:
            break
        for f, k in plan.seeds_to_add.items():
            run[f] += k
    seeds = np.array([run[f] for f in range(d.shape[0])])
    return seeds, np.array([[r.decision for r in plan.for_family(f)] for f in range(d.shape[0])])


def fixed_n_holm_power(rng: np.random.Generator, sims: int, effect: float, alpha: float,
                       n_max: int) -> np.ndarray:
    """Per-comparison power (correct-sign Holm rejection) of the fixed-n design, n = 1..n_max."""
    d = simulate_deltas(rng, sims, n_max, 1.0, effect).reshape(sims, FAMILIES * PER_FAMILY, n_max)
    n = np.arange(1, n_max + 1, dtype=float)
    mean = np.cumsum(d, -1) / n
    var = (np.cumsum(d * d, -1) - n * mean**2) / np.maximum(n - 1, 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        t = mean / np.sqrt(var / n)
    p = np.where(n >= 2, 2 * sps.t.sf(np.abs(t), np.maximum(n - 1, 1)), 1.0)
    m = p.shape[1]
    order = np.argsort(p, axis=1)
    p_sorted = np.take_along_axis(p, order, 1)
    adj = np.maximum.accumulate(np.minimum(1, p_sorted * (m - np.arange(m))[None, :, None]), 1)
    p_holm = np.empty_like(adj)
    np.put_along_axis(p_holm, order, adj, 1)
    return ((p_holm < alpha) & (t > 0)).mean(axis=(0, 1))


def smallest_n(power_by_n: np.ndarray, target: float) -> int | None:
    """Smallest n (1-based) whose power reaches target; None when none does."""
    ok = np.nonzero(power_by_n >= target)[0]
    return int(ok[0] + 1) if ok.size else None


def bonferroni_n(effect: float, alpha_each: float, target: float) -> float | None:
    """Paired t-test n for `target` power at alpha_each (statsmodels TTestPower), ceiled."""
    if not 0 < target < 1:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            n = float(TTestPower().solve_power(effect_size=effect, power=target, alpha=alpha_each))
        except Exception:
            return None
    return int(np.ceil(n - 1e-9)) if np.isfinite(n) else None


def binom_upper(k: int, n: int) -> float:
    """Exact (Clopper-Pearson) one-sided 95% upper bound of a binomial rate."""
    return float(sps.binomtest(k, n).proportion_ci(0.90, method="exact").high)


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
                    help="d_z values to simulate besides the null (0.5 1 2)")
    args = ap.parse_args(argv)
    sims = args.sims or (500 if args.quick else 2000)
    margin = args.margin if args.margin > 0 else None
    rng = np.random.default_rng(args.seed)
    m = FAMILIES * PER_FAMILY
    alpha_each = bonferroni_alpha(args.alpha, m)
    looks = np.unique(np.r_[np.arange(args.start, args.max_seeds, args.batch), args.max_seeds])
    t0 = time.perf_counter()
    print(f"{sims} adaptive sweeps per scenario: {FAMILIES} families x {PER_FAMILY} comparisons "
          f"(m = {m}), alpha {args.alpha} -> each CS at {alpha_each:.5f}; phi {args.phi}; "
          f"sigma {args.sigma}; margin {margin}; seeds {args.start} + {args.batch}/round "
          f"up to {args.max_seeds}\n")

    rows, mean_seeds, out = [], {}, {}
    for effect in (0.0, *args.effects):
        d = simulate_deltas(rng, sims, args.max_seeds, args.sigma, effect)
        low, high = cs_bounds(d, alpha_each, args.phi)
        seeds, final = adaptive_sweeps(low, high, looks, margin)
        for i in range(min(REPLAY, sims)):  # the vectorized rule IS the library's rule
            s_ref, f_ref = replay(d[i], looks, args.alpha, margin, args.phi, args.max_seeds,
                                  args.batch)
            assert np.array_equal(s_ref, seeds[i]) and np.array_equal(f_ref, final[i]), i
        rate = {v: float((final == v).mean()) for v in (BETTER, WORSE, EQUIVALENT, INCONCLUSIVE)}
        key = "null" if effect == 0 else f"{effect:g}"
        entry = {"mean_seeds": float(seeds.mean()), "mean_sweep_seeds": float(seeds.max(1).mean()),
                 "rates": rate}
        if effect == 0:
            k = int(np.any((final == BETTER) | (final == WORSE), axis=(1, 2)).sum())
            entry.update(false_decisions=k, null_error_rate=k / sims,
                         null_error_upper95=binom_upper(k, sims))
            nl, nh = naive_bounds(d, alpha_each)
            _, naive_final = adaptive_sweeps(np.maximum.accumulate(nl, -1),
                                             np.minimum.accumulate(nh, -1), looks, margin)
            kn = int(np.any(naive_final != INCONCLUSIVE, axis=(1, 2)).sum())
            entry["naive_t_null_error_rate"] = kn / sims
        else:
            power = rate[BETTER]
            target = min(power, 1 - 0.5 / (sims * m))  # power 1.0 in the sims: the MC limit
            holm = fixed_n_holm_power(rng, max(sims, 2000), effect, args.alpha, 200)
            entry.update(power=power, fixed_n_bonferroni=bonferroni_n(effect, alpha_each, target),
                         fixed_n_holm=smallest_n(holm, target))
            mean_seeds[key] = entry["mean_seeds"]
        out[key] = entry
        rows.append((key, entry))

    print("| scenario | mean seeds / family | mean seeds / sweep (max family) | better | worse "
          "| equivalent | inconclusive | fixed n, same power (Bonferroni t / Holm t) |")
    print("|---|---|---|---|---|---|---|---|")
    for key, e in rows:
        r = e["rates"]
        fixed = (f"{e['fixed_n_bonferroni']} / {e['fixed_n_holm']}" if key != "null" else "—")
        label = ("null (Δ = 0)" if key == "null"
                 else f"d_z = {key} (Δ = {float(key) * args.sigma:.3g})")
        print(f"| {label} | {e['mean_seeds']:.1f} | {e['mean_sweep_seeds']:.1f} | "
              f"{r[BETTER]:.3f} | {r[WORSE]:.3f} | {r[EQUIVALENT]:.3f} | "
              f"{r[INCONCLUSIVE]:.3f} | {fixed} |")
    null = out["null"]
    print(f"\nnull: {null['false_decisions']} of {sims} sweeps with any false better/worse: "
          f"rate {null['null_error_rate']:.4f}, exact 95% upper bound "
          f"{null['null_error_upper95']:.4f} (alpha {args.alpha}); the same rule on fixed-n "
          f"t-intervals at alpha/m: {null['naive_t_null_error_rate']:.4f}")
    print(f"replayed {min(REPLAY, sims)} sweeps per scenario through "
          "fusion_sweep.analysis.sequential.stopping_rule: identical seeds and decisions")
    print(f"{time.perf_counter() - t0:.1f} s")
    result = {
        "n_sims": sims, "alpha": args.alpha, "alpha_each": alpha_each, "m": m,
        "phi": args.phi, "sigma": args.sigma, "margin": margin, "seed": args.seed,
        "start": args.start, "batch": args.batch, "max_seeds": args.max_seeds,
        "null_error_rate": null["null_error_rate"],
        "null_error_upper95": null["null_error_upper95"],
        "naive_t_null_error_rate": null["naive_t_null_error_rate"],
        "mean_seeds": mean_seeds,
        "power": {k: out[k]["power"] for k in mean_seeds},
        "fixed_n_bonferroni": {k: out[k]["fixed_n_bonferroni"] for k in mean_seeds},
        "fixed_n_holm": {k: out[k]["fixed_n_holm"] for k in mean_seeds},
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()

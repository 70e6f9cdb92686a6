"""What one pass for both tails buys F3's rank test, and where enumeration stops.

`stats.rank_test` (Fusion Matters' F3 in `claims._exact`) gives both one-sided Mann–Whitney p
values from one `scipy.stats.mannwhitneyu` call over the stacked samples (x, −x) and (y, −y),
exact up to `stats.RANK_PERM_RESAMPLES` splits, Monte Carlo beyond. The reference is what it
replaced: two exact calls, one per tail, enumerating every split. Both run on the same
tied Δ (accuracy deltas are multiples of 1/N_test), one after the other in one process, and the
script checks that their p values are equal; CPU seconds, the best of `--repeats`.

    python benchmarks/rank_test.py              # 8 and 9 seeds a regime, then 10 and 20

Run it on an otherwise idle machine and write the load average down with the figures. The last
stdout line is one JSON object.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np
from scipy import stats as sps

from fusion_sweep.analysis import stats


def _two_exact_calls(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    exact = sps.PermutationMethod(n_resamples=np.inf)
    return (float(sps.mannwhitneyu(x, y, alternative="greater", method=exact).pvalue),
            float(sps.mannwhitneyu(x, y, alternative="less", method=exact).pvalue))


def _cpu(fn, repeats: int):
    """(best CPU seconds of `repeats` calls, the last result)."""
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.process_time()
        out = fn()
        best = min(best, time.process_time() - start)
    return best, out


def _deltas(rng: np.random.Generator, n: int) -> np.ndarray:
    return (rng.normal(size=n) * 20).round() / 100  # (n,) tied, as accuracy deltas are


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    out: dict = {}
    for n in (8, 9):
        x, y = _deltas(rng, n), _deltas(rng, n)
        t_ref, p_ref = _cpu(lambda: _two_exact_calls(x, y), args.repeats)
        t_new, r = _cpu(lambda: stats.rank_test(x, y, np.random.default_rng(0)), args.repeats)
        same = p_ref == (r.p_greater, r.p_less)
        print(f"{n} seeds a regime: two exact calls {t_ref:.3f} s, one pass {t_new:.3f} s "
              f"({t_ref / t_new:.2f}x), {r.method}, same p: {same}")
        out[str(n)] = dict(reference_s=t_ref, rank_test_s=t_new, ratio=t_ref / t_new,
                           method=r.method, same_p=same)
    x, y = _deltas(rng, 10), _deltas(rng, 10)
    t_ref, _ = _cpu(lambda: _two_exact_calls(x, y), 1)
    t_new, r = _cpu(lambda: stats.rank_test(x, y, np.random.default_rng(0)), args.repeats)
    print(f"10 seeds: two exact calls {t_ref:.2f} s, rank_test {t_new:.2f} s ({r.method})")
    out["10"] = dict(reference_s=t_ref, rank_test_s=t_new, method=r.method)
    x, y = _deltas(rng, 20), _deltas(rng, 20)  # the reference would enumerate 1.4e11 splits
    t_new, r = _cpu(lambda: stats.rank_test(x, y, np.random.default_rng(0)), args.repeats)
    print(f"20 seeds: rank_test {t_new:.2f} s ({r.method}); two exact calls: not run")
    out["20"] = dict(rank_test_s=t_new, method=r.method)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

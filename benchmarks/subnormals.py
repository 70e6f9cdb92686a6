"""What flushing subnormal floats to zero buys a CPU trial, and what it changes.

Every trial runs with the CPU's subnormals flushed to zero (`platform.flush_subnormals`,
inside `precision_mode`). This trains the same default trials with the flush and, as the
reference, with gradual underflow (the flush swapped for a no-op), one after the other in one
process, and prints each trial's CPU seconds, their ratio and whether the results are the
same (per-epoch training losses to 6 decimals, test accuracy).

    python benchmarks/subnormals.py                 # synthetic-long, add and concat, seed 3
    python benchmarks/subnormals.py --quick         # synthetic-medium, add, seed 0

Run it on an otherwise idle machine (the figures are CPU times of one thread) and write the
load average down with them. The last stdout line is one JSON object.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import time
from unittest import mock

from fusion_sweep.trial import platform
from fusion_sweep.trial.config import TrialConfig
from fusion_sweep.trial.trainer import train_trial


def _run(config: TrialConfig, flush: bool) -> tuple[float, list[float], float]:
    """-> (CPU seconds, per-epoch training losses, test accuracy) of one trial."""
    # the reference: the flush a no-op, so torch's default (gradual underflow) stays on
    with contextlib.nullcontext() if flush else \
            mock.patch.object(platform, "flush_subnormals", contextlib.nullcontext):
        t0 = time.process_time()
        result = train_trial(config)
        took = time.process_time() - t0
    return took, [round(e.train_loss, 6) for e in result.curve], result.test_acc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one synthetic-medium trial")
    ap.add_argument("--dataset", default=None)
    ap.add_argument("--fusions", default=None, help="comma-separated (default add,concat)")
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    dataset = args.dataset or ("synthetic-medium" if args.quick else "synthetic-long")
    fusions = (args.fusions or ("add" if args.quick else "add,concat")).split(",")
    seed = args.seed if args.seed is not None else (0 if args.quick else 3)
    cache = tempfile.mkdtemp(prefix="subnormals-")
    rows = []
    for fusion in fusions:
        config = TrialConfig.build(dataset, pe="sinusoidal", fusion=fusion, seed=seed,
                                   num_threads=1, cache_dir=cache)
        flushed, ref = _run(config, True), _run(config, False)
        rows.append({"dataset": dataset, "fusion": fusion, "seed": seed,
                     "cpu_s_flushed": round(flushed[0], 1), "cpu_s_gradual": round(ref[0], 1),
                     "speedup": round(ref[0] / flushed[0], 2),
                     "same_losses": flushed[1] == ref[1], "same_test_acc": flushed[2] == ref[2],
                     "test_acc": flushed[2]})
        r = rows[-1]
        print(f"{dataset} {fusion} seed {seed}: {r['cpu_s_gradual']} s gradual underflow, "
              f"{r['cpu_s_flushed']} s flushed: {r['speedup']}x; losses "
              f"{'the same' if r['same_losses'] else 'DIFFER'}, test_acc "
              f"{'the same' if r['same_test_acc'] else 'DIFFERS'} ({r['test_acc']:.3f})",
              flush=True)
    print(json.dumps({"trials": rows}))


if __name__ == "__main__":
    main()

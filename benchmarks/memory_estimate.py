"""The per-trial host memory estimate (`trial/memory.host_memory_bytes`, the sweep's Ray
`memory` request) against a measured peak.

For every (dataset, encoder variant) of the given spaces (default: the two real-text spaces),
one trial runs in a fresh process that first imports what a Ray trial actor holds (torch, Ray,
MLflow), with its space's hyperparameters and `epochs=1` (the peak is reached in the first
epoch: every later one repeats its batches' shapes). Printed per row: the estimate, the
measured peak RSS (ru_maxrss, MB) and their ratio; the estimate should be within 2x of the
peak. Peak RSS is a memory figure, not a timing.

    python benchmarks/memory_estimate.py [SPACE ...]
"""
from __future__ import annotations

import json
import subprocess
import sys

CHILD = r"""
import json, resource, sys
import torch, ray, mlflow  # what a trial actor holds before training
from fusion_sweep.trial.config import TrialConfig
from fusion_sweep.trial.trainer import train_trial
c = TrialConfig.from_dict(json.loads(sys.argv[1]))
train_trial(c)
print(json.dumps({"peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}))
"""


def rows(space_names: list[str]):
    from fusion_sweep.plan.space import load_space
    from fusion_sweep.trial.memory import host_memory_bytes

    for name in space_names:
        space = load_space(name)
        seen = set()
        for config in space.grid():
            key = (config.dataset, config.encoder_variant(), config.pe)
            if key in seen:
                continue
            seen.add(key)
            yield name, config, host_memory_bytes(config, gpu=False)  # a CPU trial here


def main(argv: list[str]) -> int:
    import dataclasses

    names = argv or ["real", "real-ressformer"]
    print(f"{'space':<16} {'dataset':<20} {'encoder/pe':<30} {'estimate MB':>11} {'peak MB':>8} "
          f"{'ratio':>6}")
    worst = 0.0
    for space, config, est in rows(names):
        c = dataclasses.replace(config, epochs=1, num_threads=1)
        out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(c.to_dict())],
                             capture_output=True, text=True, check=True)
        peak = json.loads(out.stdout.strip().splitlines()[-1])["peak_mb"]
        ratio = est / 2**20 / peak
        worst = max(worst, ratio, 1 / ratio)
        print(f"{space:<16} {c.dataset:<20} {c.encoder_variant() + '/' + c.pe:<30} "
              f"{est / 2**20:>11.0f} {peak:>8.0f} {ratio:>6.2f}", flush=True)
    print(f"worst factor between estimate and peak: {worst:.2f} (target <= 2)")
    return 0 if worst <= 2 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""What each encoder variant costs: parameters, analytic FLOPs per token, and measured
forward+backward time per batch as a ratio against the standard encoder, in the same process.

    python benchmarks/encoder_cost.py [--length 128] [--batch 64] [--rounds 5] [--threads 1]

The model is the synthetic regimes' (synthetic-medium's config: d 32, 2 heads, 1 layer); every
variant of search_spaces/ressformer.yaml is timed on the same random batch of `--length`
real tokens. Rounds alternate the variants (A/B/C/...), and the reported ratio is the median
over rounds of (variant time / standard time in the same round), so slow drift of the machine
cancels. Quiet machine only: record the load average printed with the result.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fusion_sweep.trial.models.encoder import count_parameters  # noqa: E402
from fusion_sweep.space import load_space  # noqa: E402
from fusion_sweep.trial.trainer import build_model  # noqa: E402


def step_seconds(model: torch.nn.Module, ids: torch.Tensor, y: torch.Tensor, reps: int) -> float:
    """Median seconds of one forward+backward (+ the auxiliary loss) over `reps` repeats."""
    times = []
    for _ in range(reps):
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(ids), y)
        aux = model.aux_loss()
        (loss if aux is None else loss + aux).backward()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3, help="timed steps per variant per round")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    space = load_space("ressformer")
    configs = [space.trial_config("synthetic-medium", v, 0) for v in space.variant_list()]
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(2, 500, (args.batch, args.length), generator=g)  # (B, L) no padding
    y = torch.randint(0, 2, (args.batch,), generator=g)
    models = {c.variant_label(): build_model(c, 564, 2).train() for c in configs}
    for m in models.values():  # warm-up: allocator, kernels
        step_seconds(m, ids, y, 1)
    ratios: dict[str, list[float]] = {k: [] for k in models}
    seconds: dict[str, list[float]] = {k: [] for k in models}
    base = configs[0].variant_label()
    for _ in range(args.rounds):
        round_s = {k: step_seconds(m, ids, y, args.reps) for k, m in models.items()}
        for k, v in round_s.items():
            seconds[k].append(v)
            ratios[k].append(v / round_s[base])
    print(f"load average before: {os.getloadavg()[0]:.2f}; batch {args.batch} x {args.length} "
          f"tokens, {args.threads} thread(s), {args.rounds} rounds x {args.reps} steps")
    print(f"| variant | params | FLOPs/token (L={args.length}) | fwd+bwd ms | vs {base} |")
    print("|---|---|---|---|---|")
    out = {}
    for k, m in models.items():
        flops = m.forward_flops(args.length) / args.length
        ms = 1000 * statistics.median(seconds[k])
        r = statistics.median(ratios[k])
        out[k] = {"params": count_parameters(m), "flops_per_token": flops, "ms": ms, "ratio": r}
        print(f"| {k} | {count_parameters(m):,} | {flops:,.0f} | {ms:.1f} | {r:.2f}× |")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

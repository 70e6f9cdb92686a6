"""What each encoder variant costs: parameters, analytic FLOPs per token, and measured
forward+backward time per batch, as ratios against the standard encoder measured side by side
in the same process, at two sizes.

    python benchmarks/encoder_cost.py [--rounds 5] [--reps 3] [--threads 1]
                                      [--big-batch 4] [--sizes small,paper] [--quick]
                                      [--no-heap-reuse]

Sizes (every variant of search_spaces/ressformer.yaml, built by the trainer's build_model):
- `small`: the synthetic regimes' model (synthetic-medium's config: d 32, 2 heads, 1 layer,
  dim_ff 64), batch `--batch` (64) × `--length` (128) tokens;
- `paper`: a paper-like model, d 256, 4 heads, 4 layers, dim_ff 1024, batch `--big-batch` (4)
  × `--big-length` (1024) tokens (ReSSFormer's own options at their defaults: T 3, top-8,
  entmax-1.5, 4 memory segments).
Every row is a random batch of real tokens (no padding). Rounds alternate the variants, and a
variant's time ratio is the median over rounds of (its time / the standard encoder's time in
the same round), so slow drift of the machine cancels. `time_over_flops` = time ratio ÷ FLOPs
ratio (FLOPs: the analytic `forward_flops`, so 1.0 means a variant costs exactly what its
arithmetic says, relative to standard/sinusoidal/add). Quiet machine only: record the load
average printed with the result. `--quick` is a smoke check (1 round, 1 step, the paper-like
size at 256 tokens): its numbers mean nothing. The process allocates as a trial does
(`SpeedOptions.heap_reuse`: freed memory kept, fusion_sweep/trial/heap.py);
`--no-heap-reuse` measures with the C library's default instead.

The last stdout line is JSON: {"sizes": {size: {variant: {params, flops_per_token,
flops_ratio, ms, ratio, time_over_flops}}}, "time_over_flops": {size: {variant: x}},
"asam_faster_than_no_asam": {size: bool or null}, "loadavg_before", "loadavg_after",
"heap_reuse", "execution_path": ReSSFormer's path (`kernels.execution_path()`: compiled kernels
or torch, the compiler)}.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fusion_sweep.plan.space import load_space  # noqa: E402
from fusion_sweep.trial.heap import keep_freed_memory  # noqa: E402
from fusion_sweep.trial.models.encoder import count_parameters  # noqa: E402
from fusion_sweep.trial.seeds import build_model  # noqa: E402

VOCAB, CLASSES = 564, 2
PAPER_MODEL = dict(d_model=256, heads=4, layers=4, dim_ff=1024)


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


def measure(configs: list[Any], batch: int, length: int, rounds: int, reps: int) -> dict[str, dict]:
    """Every variant on one random batch; ratios against the first config, paired per round."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(2, VOCAB, (batch, length), generator=g)  # (B, L) no padding
    y = torch.randint(0, CLASSES, (batch,), generator=g)
    models = {c.variant_label(): build_model(c, VOCAB, CLASSES).train() for c in configs}
    for m in models.values():  # warm-up: allocator, kernels
        step_seconds(m, ids, y, 1)
    base = configs[0].variant_label()
    seconds: dict[str, list[float]] = {k: [] for k in models}
    ratios: dict[str, list[float]] = {k: [] for k in models}
    names = list(models)
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        round_s = {k: step_seconds(models[k], ids, y, reps) for k in order}
        for k, v in round_s.items():
            seconds[k].append(v)
            ratios[k].append(v / round_s[base])
    base_flops = models[base].forward_flops(length) / length
    out = {}
    for k, m in models.items():
        flops = m.forward_flops(length) / length
        ratio = statistics.median(ratios[k])
        out[k] = {"params": count_parameters(m), "flops_per_token": flops,
                  "flops_ratio": flops / base_flops, "ms": 1000 * statistics.median(seconds[k]),
                  "ratio": ratio, "time_over_flops": ratio / (flops / base_flops)}
    return out


def print_table(title: str, rows: dict[str, dict]) -> None:
    base = next(iter(rows))
    print(f"\n{title}")
    print(f"| variant | params | FLOPs/token | FLOPs ratio | fwd+bwd ms | time ratio vs {base} "
          f"| time ÷ FLOPs ratio |")
    print("|---|---|---|---|---|---|---|")
    for k, r in rows.items():
        print(f"| {k} | {r['params']:,} | {r['flops_per_token']:,.0f} | {r['flops_ratio']:.2f} | "
              f"{r['ms']:.1f} | {r['ratio']:.2f}× | {r['time_over_flops']:.2f} |")


def asam_faster(rows: dict[str, dict]) -> bool | None:
    """ASAM's time below no-ASAM's where its FLOPs are below (None where they are not)."""
    full = next((r for k, r in rows.items() if k.startswith("ressformer/")), None)
    no_asam = next((r for k, r in rows.items() if k.startswith("ressformer-no-asam/")), None)
    if full is None or no_asam is None or full["flops_per_token"] >= no_asam["flops_per_token"]:
        return None
    return full["ms"] < no_asam["ms"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="small,paper", help="comma-separated: small, paper")
    ap.add_argument("--length", type=int, default=128, help="small size: tokens per row")
    ap.add_argument("--batch", type=int, default=64, help="small size: rows")
    ap.add_argument("--big-length", type=int, default=1024, help="paper-like size: tokens per row")
    ap.add_argument("--big-batch", type=int, default=4, help="paper-like size: rows")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3, help="timed steps per variant per round")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true",
                    help="smoke check: 1 round, 1 step, paper-like size at 256 tokens")
    ap.add_argument("--no-heap-reuse", action="store_true",
                    help="the C library's default allocator, not a trial's (heap.py)")
    args = ap.parse_args(argv)
    sizes = [s for s in args.sizes.split(",") if s]
    bad = sorted(set(sizes) - {"small", "paper"})
    if bad:
        print(f"error: --sizes: unknown size(s) {bad}; choose from ['paper', 'small']")
        return 2
    if args.quick:
        args.rounds, args.reps, args.big_length = 1, 1, min(args.big_length, 256)
    torch.set_num_threads(args.threads)
    heap = False if args.no_heap_reuse else keep_freed_memory()
    space = load_space("ressformer")
    small = [space.trial_config("synthetic-medium", v, 0) for v in space.variant_list()]
    plans = {
        "small": (f"d32-L{args.length}", small, args.batch, args.length),
        "paper": (f"d256-L{args.big_length}",
                  [c.replace(**PAPER_MODEL, max_len=args.big_length) for c in small],
                  args.big_batch, args.big_length),
    }
    from fusion_sweep.trial.models.kernels import execution_path
    path = execution_path()  # builds the kernels (if they build) before anything is timed
    print(f"ReSSFormer path: {path['kernels']}" + (f" ({path['compiler']})" if path["compiler"] else "")
          + (f"; build failed: {path['build']}" if path["build"] else ""))
    before = os.getloadavg()[0]
    print(f"load average before: {before:.2f}; {args.threads} thread(s), {args.rounds} rounds x "
          f"{args.reps} steps; freed memory kept (as in a trial): {heap}"
          + (" (--quick: a smoke check, not a measurement)" if args.quick else ""))
    results: dict[str, dict] = {}
    for size in sizes:
        name, configs, batch, length = plans[size]
        results[name] = measure(configs, batch, length, args.rounds, args.reps)
        c = configs[0]
        print_table(f"{name}: d {c.d_model}, {c.heads} heads, {c.layers} layer(s), dim_ff "
                    f"{c.dim_ff}; batch {batch} x {length} tokens", results[name])
    after = os.getloadavg()[0]
    print(f"\nload average after: {after:.2f}")
    print(json.dumps({
        "sizes": results,
        "time_over_flops": {s: {k: r["time_over_flops"] for k, r in rows.items()}
                            for s, rows in results.items()},
        "asam_faster_than_no_asam": {s: asam_faster(rows) for s, rows in results.items()},
        "loadavg_before": before, "loadavg_after": after, "threads": args.threads,
        "quick": args.quick, "heap_reuse": heap, "execution_path": path}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Learning curves of the synthetic length regimes for ONE fixed model (issue 9 §1).

    python benchmarks/learning_curve.py [--quick] [--seeds N] [--epochs-factor F]
        [--fusion concat] [--workers 2] [--png docs/learning-curve.png]
        [--table docs/learning-curve.md] [--cache-dir DIR]

Question: does a fixed model need more training steps (and data, and compute) to learn the
longer regimes? The regimes pose the same task (data/registry.py: which of two marker phrases
comes first) and differ in document length, so the answer says whether length is what makes a
regime hard.

Each (regime, seed) is one `fusion_sweep.trial.trainer.train_trial` - the product's code path - with
sinusoidal PE, `--fusion` (default concat), the regime's registry defaults, patience 0 and
`epochs` = factor x the regime's default epochs (factor 2: the curve runs on past the default
sweep's budget). The model and optimiser fields are taken from the first regime and imposed on
all of them (a note is printed if the registry differs), so the model is fixed by construction.
A per-epoch callback records validation accuracy; x = optimizer steps (epochs x batches per
epoch), with documents and real (non-pad) training tokens seen alongside.

Runs `--workers` trials at once (default 2), each on 1 CPU thread; the data of every regime is
generated and cached before any trial starts (not timed). `--quick`: 2 seeds, factor 1 (the
default budget only), about 1-2 minutes on the 2-core reference machine; the default (3 seeds,
factor 2) takes about 4-6 minutes.

Outputs: a PNG with two panels - normalized validation accuracy (acc - chance) / (1 - chance)
against training steps, and against training tokens - mean over seeds with a min-max band;
a markdown table (stdout and `--table`); as the last stdout line, one JSON object.
Threshold = the default sweep's learnability target: chance + 0.5 (1 - chance).
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

REGIMES = ("synthetic-short", "synthetic-medium", "synthetic-long")
# Everything that defines the model and how it is optimised: identical for every regime.
MODEL_FIELDS = ("d_model", "heads", "layers", "dim_ff", "dropout", "attn_dropout", "activation",
                "norm_first", "optimizer", "lr", "weight_decay", "grad_clip", "batch_size")
ROOT = Path(__file__).resolve().parent.parent


def fixed_model() -> tuple[dict[str, Any], list[str]]:
    """The first regime's model/optimiser fields, and notes for regimes whose defaults differ."""
    from fusion_sweep.trial.data.registry import get_spec

    ref = {k: get_spec(REGIMES[0]).defaults()[k] for k in MODEL_FIELDS}
    notes = []
    for name in REGIMES[1:]:
        d = get_spec(name).defaults()
        diff = {k: d[k] for k in MODEL_FIELDS if d[k] != ref[k]}
        if diff:
            notes.append(f"{name}: registry defaults {diff} replaced by {REGIMES[0]}'s for a "
                         f"fixed model")
    return ref, notes


def run_one(job: dict[str, Any]) -> dict[str, Any]:
    """One trial in a worker process; returns its per-epoch validation curve."""
    import torch

    torch.set_num_threads(1)
    from fusion_sweep.trial.config import TrialConfig
    from fusion_sweep.trial.data import load_encoded
    from fusion_sweep.trial.trainer import train_trial

    cfg = TrialConfig.build(job["dataset"], fusion=job["fusion"], pe="sinusoidal",
                            seed=job["seed"], num_threads=1, patience=0, epochs=job["epochs"],
                            cache_dir=job["cache_dir"], latency_repeats=1, **job["model"])
    data = load_encoded(job["dataset"], cache_dir=job["cache_dir"])
    val: list[float] = []
    w0, c0 = time.perf_counter(), time.process_time()
    r = train_trial(cfg, callback=lambda rec: val.append(float(rec.val_acc)), data=data)
    return {**{k: job[k] for k in ("dataset", "seed", "fusion")}, "val_acc": val,
            "test_acc": float(r.test_acc), "wall_s": time.perf_counter() - w0,
            "cpu_s": time.process_time() - c0}


def regime_facts(name: str, cache_dir: str, batch_size: int) -> dict[str, Any]:
    """Generate/cache the regime's data; sizes, lengths and the default budget."""
    from fusion_sweep.trial.data import load_encoded
    from fusion_sweep.trial.data.registry import get_spec

    spec = get_spec(name)
    data = load_encoded(name, cache_dir=cache_dir)
    lengths = data.train.lengths()
    return {"classes": spec.num_classes, "chance": 1.0 / spec.num_classes,
            "n_train": len(data.train), "median_len": float(np.median(lengths)),
            "steps_per_epoch": math.ceil(len(data.train) / batch_size),
            "tokens_per_epoch": int(lengths.sum()),
            "default_epochs": int(spec.defaults()["epochs"])}


def first_reach(curve: np.ndarray, threshold: float) -> int | None:
    """1-based epoch at which the curve first reaches threshold, or None."""
    hit = np.flatnonzero(curve >= threshold)
    return int(hit[0]) + 1 if len(hit) else None


def summarize(results: list[dict[str, Any]], facts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in REGIMES:
        rs = sorted((r for r in results if r["dataset"] == name), key=lambda r: r["seed"])
        f = facts[name]
        curves = np.array([r["val_acc"] for r in rs])  # (seeds, epochs)
        threshold = f["chance"] + 0.5 * (1 - f["chance"])
        reach = [first_reach(c, threshold) for c in curves]
        steps = [None if e is None else e * f["steps_per_epoch"] for e in reach]
        at_budget = curves[:, f["default_epochs"] - 1]
        out[name] = {**f, "threshold": threshold, "seeds": [r["seed"] for r in rs],
                     "val_curves": curves.round(4).tolist(),
                     "steps_to_threshold": steps,
                     "val_at_default_budget": at_budget.round(4).tolist(),
                     "test_acc_end": [round(r["test_acc"], 4) for r in rs],
                     "cpu_s": [round(r["cpu_s"], 1) for r in rs],
                     "wall_s": [round(r["wall_s"], 1) for r in rs]}
    return out


def fmt_steps(steps: list[int | None], total: int) -> str:
    vals = [f">{total}" if s is None else str(s) for s in steps]
    known = sorted(s if s is not None else math.inf for s in steps)
    med = known[len(known) // 2] if len(known) % 2 else (known[len(known) // 2 - 1] + known[len(known) // 2]) / 2
    return f"{'never' if med == math.inf else f'{med:g}'} ({', '.join(vals)})"


def markdown(summary: dict[str, Any], fusion: str, model: dict[str, Any], factor: float) -> str:
    lines = [f"Learning curves, fusion `{fusion}`, sinusoidal PE, fixed model "
             + ", ".join(f"{k}={model[k]}" for k in ("d_model", "heads", "layers", "dim_ff",
                                                       "batch_size", "lr", "dropout")),
             "",
             "| regime | classes | median tokens | train docs | steps/epoch | default budget (steps) "
             "| steps to val >= threshold: median (per seed) | val acc at default budget, mean ± SD "
             "| val acc at end, mean ± SD | training tokens to threshold (median) | CPU s / trial |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, s in summary.items():
        curves = np.array(s["val_curves"])
        total = curves.shape[1] * s["steps_per_epoch"]
        budget = s["default_epochs"] * s["steps_per_epoch"]
        at = np.array(s["val_at_default_budget"])
        end = curves[:, -1]
        known = [x for x in s["steps_to_threshold"] if x is not None]
        tok = (f"{np.median(known) / s['steps_per_epoch'] * s['tokens_per_epoch'] / 1e6:.2f} M"
               if len(known) * 2 > len(s["steps_to_threshold"]) else "n/a")
        lines.append(
            f"| {name} | {s['classes']} | {s['median_len']:g} | {s['n_train']} | "
            f"{s['steps_per_epoch']} | {budget} | "
            f"{fmt_steps(s['steps_to_threshold'], total)} | "
            f"{at.mean():.3f} ± {at.std(ddof=1) if len(at) > 1 else 0:.3f} | "
            f"{end.mean():.3f} ± {end.std(ddof=1) if len(end) > 1 else 0:.3f} | {tok} | "
            f"{np.mean(s['cpu_s']):.1f} |")
    lines += ["", f"Threshold = chance + 0.5·(1 − chance). Curves run to {factor:g}× each regime's "
              f"default epochs; validation is read once per epoch, so steps to threshold are "
              f"multiples of steps/epoch.", "",
              "Mean validation accuracy after each epoch (steps in brackets):", ""]
    for name, s in summary.items():
        curves = np.array(s["val_curves"])
        pts = ", ".join(f"{(e + 1) * s['steps_per_epoch']}: {m:.3f}"
                        for e, m in enumerate(curves.mean(0)))
        lines.append(f"- {name}: {pts}")
    return "\n".join(lines)


def plot(summary: dict[str, Any], path: Path, fusion: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    colors = {"synthetic-short": "tab:green", "synthetic-medium": "tab:orange",
              "synthetic-long": "tab:red"}
    for name, s in summary.items():
        curves = np.array(s["val_curves"])
        norm = (curves - s["chance"]) / (1 - s["chance"])  # (seeds, epochs)
        epochs = np.arange(1, curves.shape[1] + 1)
        label = f"{name} (median {s['median_len']:g} tokens)"
        for ax, x in ((axes[0], epochs * s["steps_per_epoch"]),
                      (axes[1], epochs * s["tokens_per_epoch"] / 1e6)):
            ax.plot(x, norm.mean(0), "o-", color=colors.get(name), label=label)
            ax.fill_between(x, norm.min(0), norm.max(0), color=colors.get(name), alpha=0.15)
            ax.axvline(x[s["default_epochs"] - 1], color=colors.get(name), ls=":", lw=1)
    for ax, xl in ((axes[0], "training steps (batch 64)"), (axes[1], "training tokens (millions)")):
        ax.axhline(0.5, color="k", ls="--", lw=1)
        ax.axhline(0.0, color="grey", lw=0.8)
        ax.set_xlabel(xl)
        ax.set_ylim(-0.15, 1.02)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("normalized val accuracy (acc − chance)/(1 − chance)")
    axes[0].legend(fontsize=8, loc="lower right")
    fig.suptitle(f"Learning curves per length regime: fusion {fusion}, sinusoidal PE, one fixed "
                 f"model\nmean over seeds, band = min–max; dotted = the default sweep's budget; "
                 f"dashed = learnability threshold", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 seeds, default budget only")
    ap.add_argument("--seeds", type=int, default=None, help="seeds 0..N-1 (default 3; quick 2)")
    ap.add_argument("--epochs-factor", type=float, default=None,
                    help="epochs = factor x the regime's default (default 2; quick 1)")
    ap.add_argument("--fusion", default="concat")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--png", default=str(ROOT / "docs" / "learning-curve.png"))
    ap.add_argument("--table", default=str(ROOT / "docs" / "learning-curve.md"),
                    help="markdown output ('' = stdout only)")
    ap.add_argument("--cache-dir", default="", help="data cache ('' = the default cache)")
    a = ap.parse_args(argv)
    seeds = a.seeds if a.seeds is not None else (2 if a.quick else 3)
    factor = a.epochs_factor if a.epochs_factor is not None else (1.0 if a.quick else 2.0)
    if seeds < 1 or factor < 1 or a.workers < 1:
        ap.error("--seeds and --workers must be >= 1 and --epochs-factor >= 1")

    t0 = time.perf_counter()
    model, notes = fixed_model()
    for n in notes:
        print("note:", n)
    facts = {name: regime_facts(name, a.cache_dir, model["batch_size"]) for name in REGIMES}
    jobs = [{"dataset": name, "seed": s, "fusion": a.fusion, "cache_dir": a.cache_dir,
             "model": model, "epochs": max(1, round(facts[name]["default_epochs"] * factor))}
            for name in reversed(REGIMES) for s in range(seeds)]  # longest first
    results: list[dict[str, Any]] = []
    with ProcessPoolExecutor(a.workers, mp_context=mp.get_context("spawn")) as ex:
        for r in ex.map(run_one, jobs):
            print(f"  {r['dataset']:17s} seed {r['seed']}: val {' '.join(f'{v:.2f}' for v in r['val_acc'])}"
                  f"  test {r['test_acc']:.3f}  ({r['cpu_s']:.0f} CPU s, {r['wall_s']:.0f} s)",
                  flush=True)
            results.append(r)
    summary = summarize(results, facts)
    table = markdown(summary, a.fusion, model, factor)
    print()
    print(table)
    plot(summary, Path(a.png), a.fusion)
    print(f"\nfigure: {a.png}")
    if a.table:
        Path(a.table).parent.mkdir(parents=True, exist_ok=True)
        Path(a.table).write_text(f"# Learning curves of the synthetic regimes\n\n"
                                 f"`python benchmarks/learning_curve.py"
                                 f"{' --quick' if a.quick else ''}` ({seeds} seeds, "
                                 f"{len(jobs)} trials, {time.perf_counter() - t0:.0f} s wall). "
                                 f"Figure: [learning-curve.png](learning-curve.png).\n\n"
                                 f"{table}\n")
        print(f"table: {a.table}")
    print(json.dumps({"fusion": a.fusion, "seeds": seeds, "epochs_factor": factor,
                      "model": model, "wall_s": round(time.perf_counter() - t0, 1),
                      "regimes": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

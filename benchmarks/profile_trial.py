"""Where one trial's time goes: a phase breakdown of `train_trial` per synthetic regime.

    python benchmarks/profile_trial.py [--regimes synthetic-short,...] [--path fast|reference|both]
                                       [--threads 1] [--fusion add] [--seed 0] [--ops N]

For each regime this runs ONE full trial (the regime's own hyperparameters, read fresh from
fusion_sweep/trial/data/registry.py) with wall-clock timers wrapped around the trainer's building
blocks, and prints a tree of inclusive/exclusive seconds:

  trial
    setup               build_model, fingerprints, schedule, optimizer
    train_epoch         per epoch (the training loop)
      batching          padding a batch (pad_batch or pad_batches) + torch.from_numpy
      forward           model(ids)
      loss              cross_entropy
      backward          loss.backward()
      optimizer         optimizer.step() (fused Adam) + zero_grad
      (exclusive)       the loop's own Python: bookkeeping, host syncs (.item(), int()), ...
    eval                predict() on val every epoch and on test once (incl. its batching)
    best_state          copying the best epoch's weights
    latency             measure_latency (warm-up + latency_repeats timed passes)
    (exclusive)         everything else in the trial (callbacks, metrics)

CPU ops are synchronous, so wall time around a call is that call's cost. The wrappers cost
~1 µs per call (a few ms per trial). `--ops N` adds a torch.profiler table of the N most
expensive ATen ops over one training epoch (self CPU time), for a finer split of forward vs
backward kernels vs dispatch. `--path both` profiles the reference path and the fast path
(`fusion_sweep.trial.trainer.SpeedOptions`) of the same trial, one after the other.

py-spy (pip install py-spy) gives the same picture as a flame graph:
    py-spy record --native -o trial.svg -- python benchmarks/profile_trial.py --regimes synthetic-long

`--components STEPS` replaces the phase tree by a per-component breakdown of the ReSSFormer
body over STEPS training steps of each variant of search_spaces/ressformer.yaml (the standard
encoders too, as a reference line): the body puts a torch.profiler label around each part
(models/ressformer.py `_span`; a no-op unless a profiler records); the forward time is the
label's, the backward time that of every autograd node an op under the label created (matched
by sequence number); op and node counts come with them. The profiler's own overhead inflates
small ops: read shares, not absolute times.

    python benchmarks/profile_trial.py --components 10 --regimes synthetic-medium,synthetic-long

The last stdout line is JSON: {regime: {path: {phase: seconds, ...}, ...}, "loadavg": ...}
(with --components: {regime: {variant: {component: {fwd_us, bwd_us, fwd_ops, bwd_nodes}}}}).
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import sys
import time
from collections import defaultdict
from typing import Any, Callable

import torch
import torch.nn.functional as F

import fusion_sweep.trial.trainer as T
from fusion_sweep.trial.config import TrialConfig
from fusion_sweep.trial.models.encoder import FusionClassifier

SYNTHETIC = ("synthetic-short", "synthetic-medium", "synthetic-long")


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


class PhaseTimer:
    """Nested wall-clock timers: inclusive and exclusive seconds per path ("a/b/c")."""

    def __init__(self) -> None:
        self.stack: list[list[Any]] = []  # [name, t0, child seconds]
        self.incl: dict[str, float] = defaultdict(float)
        self.excl: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    @contextlib.contextmanager
    def phase(self, name: str):
        path = "/".join([e[0] for e in self.stack] + [name])
        entry = [name, time.perf_counter(), 0.0]
        self.stack.append(entry)
        try:
            yield
        finally:
            self.stack.pop()
            dt = time.perf_counter() - entry[1]
            self.incl[path] += dt
            self.excl[path] += dt - entry[2]
            self.calls[path] += 1
            if self.stack:
                self.stack[-1][2] += dt

    def wrap(self, name: str, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*a, **kw):
            with self.phase(name):
                return fn(*a, **kw)
        return wrapper


@contextlib.contextmanager
def patched(timer: PhaseTimer):
    """Wrap the trainer's building blocks (module attributes, restored afterwards)."""
    saved: list[tuple[Any, str, Any]] = []

    def patch(obj: Any, attr: str, name: str) -> None:
        if not hasattr(obj, attr):  # the trainer moved on: a silently skipped phase lies
            raise SystemExit(f"error: profile_trial.py cannot time phase {name!r}: "
                             f"{getattr(obj, '__name__', obj)!s}.{attr} does not exist; update "
                             f"patched() in benchmarks/profile_trial.py to the trainer's functions")
        orig = getattr(obj, attr)
        saved.append((obj, attr, orig))
        setattr(obj, attr, timer.wrap(name, orig))

    for attr, name in [("build_model", "build_model"), ("training_schedule", "schedule"),
                       ("shared_init_hash", "fingerprints"), ("encoder_init_hash", "fingerprints"),
                       ("schedule_hash", "fingerprints"), ("train_epoch", "train_epoch"),
                       ("pad_batch", "batching"), ("_to", "batching"),
                       ("predict", "eval"), ("measure_latency", "latency"),
                       ("macro_f1", "metrics"),
                       ("EvalCache", "batching")]:  # fast path (SpeedOptions)
        patch(T, attr, name)
    patch(T, "batch_stream", "batching")  # checks it exists; replaced just below
    orig_stream = saved.pop()[2]
    T.batch_stream = orig_stream

    def batch_stream(*a, **kw):  # a generator: time each next() (gather + tensor)
        it = orig_stream(*a, **kw)
        while True:
            with timer.phase("batching"):
                item = next(it, None)
            if item is None:
                return
            yield item

    saved.append((T, "batch_stream", orig_stream))
    T.batch_stream = batch_stream
    patch(T.copy, "deepcopy", "best_state")
    patch(F, "cross_entropy", "loss")
    patch(torch.autograd, "backward", "backward")
    patch(T.nn.utils, "clip_grad_norm_", "grad_clip")
    patch(FusionClassifier, "__call__", "forward")
    orig_build_opt = T.build_optimizer

    def build_optimizer(config, model):
        with timer.phase("build_optimizer"):
            opt = orig_build_opt(config, model)
        opt.step = timer.wrap("optimizer", opt.step)
        opt.zero_grad = timer.wrap("optimizer", opt.zero_grad)
        return opt

    saved.append((T, "build_optimizer", orig_build_opt))
    T.build_optimizer = build_optimizer
    try:
        yield
    finally:
        for obj, attr, orig in reversed(saved):
            setattr(obj, attr, orig)


def report(timer: PhaseTimer, total: float) -> None:
    """The phase tree, children by decreasing inclusive time."""
    print(f"  {'phase':<40}{'incl s':>9}{'excl s':>9}{'% trial':>9}{'calls':>8}")

    def walk(prefix: str, depth: int) -> None:
        kids = [p for p in timer.incl if p.startswith(prefix) and "/" not in p[len(prefix):]]
        for path in sorted(kids, key=lambda p: -timer.incl[p]):
            print(f"  {'  ' * depth + path[len(prefix):]:<40}{timer.incl[path]:9.2f}"
                  f"{timer.excl[path]:9.2f}{100 * timer.incl[path] / total:8.1f}%"
                  f"{timer.calls[path]:8d}")
            walk(path + "/", depth + 1)

    walk("", 0)


def summary(timer: PhaseTimer) -> dict[str, float]:
    """Exclusive seconds folded into the README's categories."""
    out: dict[str, float] = defaultdict(float)
    for path, s in timer.excl.items():
        parts = path.split("/")
        leaf = parts[-1]
        if "latency" in parts:
            key = "latency"
        elif "eval" in parts:
            key = "eval"
        elif leaf in ("forward", "loss", "backward", "optimizer", "batching", "grad_clip"):
            key = leaf if leaf != "loss" else "forward"
        elif leaf == "train_epoch":
            key = "train loop python"
        elif leaf in ("best_state",):
            key = "best_state"
        elif leaf == "trial":
            key = "other"
        else:
            key = "setup"
        out[key] += s
    return dict(out)


def run_one(config: TrialConfig, data, speed: Any) -> tuple[PhaseTimer, float, Any]:
    timer = PhaseTimer()
    with patched(timer):
        t0 = time.perf_counter()
        with timer.phase("trial"):
            result = T.train_trial(config, data=data, speed=speed)
        total = time.perf_counter() - t0
    return timer, total, result


def op_table(config: TrialConfig, data, speed: Any, n: int) -> None:
    """torch.profiler over the first training epoch (plus one validation pass)."""
    from torch.profiler import ProfilerActivity, profile

    one = config.replace(epochs=1, latency_repeats=1)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        T.train_trial(one, data=data, speed=speed)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=n))


# Component labels the ReSSFormer body puts around its parts (models/ressformer.py `_span`:
# torch.profiler record_function, a no-op unless a profiler records), in the words.
COMPONENT = "ressformer."
COMPONENTS = {
    "kernel": "SOES kernel / dot product: query scaling, scores of the kept keys, memory scores",
    "topk": "top-k selection (every score, no autograd, in query blocks)",
    "gather": "gather of the kept keys/values",
    "activation": "attention activation (entmax/sparsemax sort, softmax)",
    "weighted_sum": "weighted sums of the kept values, slots, cache",
    "expert_routing": "expert routing (router, query gather, gate-weighted mix)",
    "projections": "q/k/v (token, cache, slot rows) and output projections",
    "r2mu_pool": "R2MU segment pooling",
    "r2mu_gates": "R2MU memory gates and step embedding",
    "graph_reg": "graph regulariser (eq. 8): token graphs and their change",
    "ffn_norm": "FFN, residuals and LayerNorms",
}


def _component_of(ev: Any) -> str | None:
    while ev is not None:
        if ev.name.startswith(COMPONENT):
            return ev.name[len(COMPONENT):]
        ev = ev.cpu_parent
    return None


def attribute_components(events: Any, steps: int) -> dict[str, dict[str, float]]:
    """Per component: forward µs (its label's inclusive time), backward µs (every autograd
    node created by an op under the label, matched by sequence number), forward ops and
    backward nodes, per step; plus the step's total and the unlabelled rest."""
    out: dict[str, dict[str, float]] = {c: dict(fwd_us=0.0, bwd_us=0.0, fwd_ops=0, bwd_nodes=0)
                                        for c in COMPONENTS}
    seq: dict[int, str] = {}
    total = 0.0
    for ev in events:
        if ev.cpu_parent is None:
            total += ev.cpu_time_total
        if ev.name.startswith("autograd::engine::evaluate_function"):
            continue
        comp = _component_of(ev)
        if comp is None:
            continue
        if comp not in out:
            raise SystemExit(f"error: unknown component label {COMPONENT}{comp}; add it to "
                             f"COMPONENTS in benchmarks/profile_trial.py")
        if ev.name.startswith(COMPONENT) and _component_of(ev.cpu_parent) is None:
            out[comp]["fwd_us"] += ev.cpu_time_total
        elif ev.name.startswith("aten::") and ev.cpu_parent is not None \
                and not ev.cpu_parent.name.startswith("aten::"):
            out[comp]["fwd_ops"] += 1
        if ev.sequence_nr >= 0:
            seq.setdefault(ev.sequence_nr, comp)
    for ev in events:
        if ev.name.startswith("autograd::engine::evaluate_function") and ev.sequence_nr in seq:
            row = out[seq[ev.sequence_nr]]
            row["bwd_us"] += ev.cpu_time_total
            row["bwd_nodes"] += 1
    labelled = sum(r["fwd_us"] + r["bwd_us"] for r in out.values())
    out = {k: {f: v / steps for f, v in r.items()} for k, r in out.items()}
    out["(rest: embedding, pooling, loss, optimizer, glue)"] = dict(
        fwd_us=(total - labelled) / steps, bwd_us=0.0, fwd_ops=0, bwd_nodes=0)
    out["(step total)"] = dict(fwd_us=total / steps, bwd_us=0.0, fwd_ops=0, bwd_nodes=0)
    return out


def component_breakdown(config: TrialConfig, data, steps: int) -> dict[str, dict[str, float]]:
    """torch.profiler over `steps` training steps (after one untimed step) of `config`'s
    model, attributed to the body's component labels."""
    from torch.profiler import ProfilerActivity, profile

    device = torch.device("cpu")
    model = T.build_model(config, data.vocab_size, data.num_classes, data.pad_id)
    opt = T.build_optimizer(config, model)
    batches = T.training_schedule(data.train, config)[0]
    if len(batches) < steps + 1:
        raise SystemExit(f"error: --components {steps}: {config.dataset} has only "
                         f"{len(batches)} training batches per epoch; ask for at most {len(batches) - 1}")
    with T.cpu_threads(config.num_threads):
        T.train_epoch(model, opt, data.train, batches[:1], config, device, data.pad_id)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            T.train_epoch(model, opt, data.train, batches[1:1 + steps], config, device, data.pad_id)
    return attribute_components(prof.events(), steps)


def print_components(label: str, comps: dict[str, dict[str, float]]) -> None:
    total = comps["(step total)"]["fwd_us"]
    print(f"\n{label}: {total / 1000:.2f} ms per training step (loadavg {loadavg()})")
    print(f"  {'component':<52}{'fwd ms':>8}{'bwd ms':>8}{'% step':>8}{'fwd ops':>8}{'bwd nodes':>10}")
    for name, r in comps.items():
        if name == "(step total)":
            continue
        both = r["fwd_us"] + r["bwd_us"]
        print(f"  {name:<52}{r['fwd_us'] / 1000:8.2f}{r['bwd_us'] / 1000:8.2f}"
              f"{100 * both / total:7.1f}%{r['fwd_ops']:8.0f}{r['bwd_nodes']:10.0f}")


def optimizer_ab(config: TrialConfig, data, reps: int) -> dict[str, float]:
    """Median µs per call, interleaved: the optimizer step as fused / foreach / per-tensor
    Adam(W), zero_grad with and without set_to_none, gradient clipping."""
    import copy

    import numpy as np

    model = T.build_model(config, data.vocab_size, data.num_classes, data.pad_id)
    ids, y = T._to(*T.pad_batch(data.train, np.arange(config.batch_size), config.max_len), "cpu")
    F.cross_entropy(model(ids), y).backward()
    cls = type(T.build_optimizer(config, model))
    kw = dict(lr=config.lr, weight_decay=config.weight_decay)
    variants = {}
    for name, extra in (("step fused", dict(fused=True)), ("step foreach", dict(foreach=True)),
                        ("step per-tensor", dict(foreach=False))):
        m = copy.deepcopy(model)
        for p, q in zip(m.parameters(), model.parameters()):
            p.grad = q.grad.clone()
        opt = cls(m.parameters(), **kw, **extra)
        opt.step()  # state init
        variants[name] = opt.step
    grads = [p.grad for p in model.parameters()]

    def zero(set_to_none: bool):
        def f():
            model.zero_grad(set_to_none=set_to_none)
            for p, g in zip(model.parameters(), grads):
                p.grad = g
        return f

    variants["zero_grad(set_to_none=True) + restore"] = zero(True)
    variants["zero_grad(set_to_none=False) + restore"] = zero(False)
    variants["clip_grad_norm_(1.0)"] = lambda: T.nn.utils.clip_grad_norm_(model.parameters(), 1e9)
    times: dict[str, list[float]] = {k: [] for k in variants}
    names = list(variants)
    for r in range(reps):
        for k in (names if r % 2 == 0 else names[::-1]):
            t0 = time.perf_counter()
            variants[k]()
            times[k].append(time.perf_counter() - t0)
    out = {k: float(np.median(v)) * 1e6 for k, v in times.items()}
    for k, v in out.items():
        print(f"  {k:<42}{v:9.1f} µs")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--regimes", default=",".join(SYNTHETIC))
    ap.add_argument("--path", choices=("fast", "reference", "both"), default="reference")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the sweep: 1)")
    ap.add_argument("--fusion", default="add")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ops", type=int, default=0, help="also print the N top ATen ops")
    ap.add_argument("--epochs", type=int, default=0, help="override the regime's epochs (quick runs)")
    ap.add_argument("--optimizer", type=int, default=0, metavar="REPS",
                    help="also time optimizer variants, zero_grad and clipping (REPS calls each)")
    ap.add_argument("--components", type=int, default=0, metavar="STEPS",
                    help="instead of the phase tree: per-component time of the ReSSFormer body "
                         "(SOES kernel, top-k, gather, activation sort, expert routing, R2MU "
                         "pooling and gates, graph regulariser, ...) over STEPS training steps "
                         "of every variant of search_spaces/ressformer.yaml, per regime")
    ap.add_argument("--variants", default="",
                    help="with --components: only variants whose label contains this text")
    args = ap.parse_args(argv)
    if args.components:
        return components_main(args)

    out: dict[str, Any] = {"loadavg_start": loadavg(), "threads": args.threads}
    # One-time per process (a Ray actor pays it once): the first torch.optim optimizer imports
    # torch._dynamo. Done untimed on a tiny trial so it does not land in the first regime.
    t0 = time.perf_counter()
    warm = TrialConfig.build("synthetic-short", num_threads=args.threads, device="cpu", epochs=1,
                             limit_train=64, limit_eval=32, latency_repeats=1)
    T.train_trial(warm)
    out["process_warmup_s"] = round(time.perf_counter() - t0, 2)
    print(f"process warm-up (imports on first use, tiny trial): {out['process_warmup_s']:.2f} s; "
          f"loadavg {loadavg()}")
    paths = ("reference", "fast") if args.path == "both" else (args.path,)
    for regime in args.regimes.split(","):
        config = TrialConfig.build(regime, fusion=args.fusion, seed=args.seed,
                                   num_threads=args.threads, device="cpu",
                                   **({"epochs": args.epochs} if args.epochs else {}))
        data = T.load_data(config)
        out[regime] = {}
        for p in paths:
            speed = T.SpeedOptions.reference() if p == "reference" else T.SpeedOptions()
            la = loadavg()
            timer, total, result = run_one(config, data, speed)
            print(f"\n{regime} [{p}]: {total:.2f} s, {result.epochs_run} epochs, "
                  f"{len(data.train)} train docs, batch {config.batch_size}, max_len "
                  f"{config.max_len}, d={config.d_model}, layers={config.layers}; "
                  f"test_acc {result.test_acc:.4f}; loadavg {la}")
            report(timer, total)
            cats = summary(timer)
            print("  summary: " + ", ".join(f"{k} {v:.2f}s ({100 * v / total:.0f}%)"
                                            for k, v in sorted(cats.items(), key=lambda kv: -kv[1])))
            out[regime][p] = {"total_s": round(total, 3), "loadavg": la,
                              **{k: round(v, 3) for k, v in cats.items()}}
            if args.ops:
                op_table(config, data, speed, args.ops)
        if args.optimizer:
            print(f"  optimizer micro-benchmark ({regime}, {args.optimizer} interleaved calls, "
                  f"loadavg {loadavg()}):")
            out[regime]["optimizer_us"] = optimizer_ab(config, data, args.optimizer)
    out["loadavg_end"] = loadavg()
    print(json.dumps(out))
    return 0


def components_main(args: argparse.Namespace) -> int:
    from fusion_sweep.plan.space import load_space

    space = load_space("ressformer")
    out: dict[str, Any] = {"loadavg_start": loadavg(), "threads": args.threads,
                           "steps": args.components}
    for regime in args.regimes.split(","):
        out[regime] = {}
        for variant in space.variant_list():
            config = space.trial_config(regime, variant, args.seed).replace(
                num_threads=args.threads, device="cpu")
            label = config.variant_label()
            if args.variants not in label:
                continue
            comps = component_breakdown(config, T.load_data(config), args.components)
            print_components(f"{regime} {label}", comps)
            out[regime][label] = {k: {f: round(v, 1) for f, v in r.items()} for k, r in comps.items()}
    out["loadavg_end"] = loadavg()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())

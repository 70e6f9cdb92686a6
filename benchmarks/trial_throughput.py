"""Trial throughput: fusion-sweep's trainer against the paper's reference loop, side by side.

    python benchmarks/trial_throughput.py [--quick] [--threads 2]

For each config (AG News, IMDB, ArXiv hyperparameters; synthetic token streams with realistic
length distributions) this measures, in ONE process, alternating the sides in every round:

  reference   benchmarks/reference_loop.py: tokenize in __getitem__, pad every batch to max_len,
              nn.TransformerEncoder (attention dropout = dropout = 0.1, CPU SDPA math backend)
  identical   fusion-sweep's `train_epoch` with the config as the sweep runs it: pre-tokenized
              arrays, seeded length-bucketed batches, dynamic padding, attention with a
              key-padding mask (with dropout > 0 on CPU: SDPA's math-backend computation written
              out without its extra passes, `encoder.attention_with_dropout`), fused Adam(W) —
              same model math (post-norm, same dims, dropout 0.1, attention dropout 0.1, same
              optimizer and gradient clipping)
  attn0       the same with `attn_dropout=0` (the explicit fast option: CPU SDPA can use its
              fused flash kernel instead of materialising the (B, H, L, L) probabilities)

and prints real (non-pad) tokens/s (median [min–max] over rounds), the ratio to the reference
(per round, paired), useful MFU and the peak step memory of each side. Useful MFU counts only the
work on real tokens: (6 · non-embedding params · real tokens/s + 12 · layers · d · Σ len²/s)
divided by the fp32 matmul peak measured in this run with the same thread count.

Then it trains every fusion operator on the AG News config (and IMDB in the full run) and
prints its throughput relative to `add`.

The last stdout line is a JSON object: {"agnews": {"ratio", "ratio_attn_dropout_0", "mfu", ...},
"imdb": {...}, "arxiv": {...}, "fusion_vs_add": {...}, ...}.

Notes
- ArXiv runs at batch 2 on every side: with attention dropout > 0, CPU attention uses the math
  backend, which materialises (B, 8, 4096, 4096) fp32 probabilities — 34 GB at batch 64, so the
  reference (and the identical-math setting) cannot run at the reference batch size here.
- `--quick` runs AG News and IMDB at batch 16 (ArXiv at batch 1) and fewer rounds, so it
  finishes in a few minutes; per-token cost of the reference does not depend on batch size,
  but the product's MFU is a little lower at small batches. The full run uses batch 64.
- Timings on a shared machine are noisy: every figure is a median over rounds, each round
  runs every side once, and the side order rotates between rounds. Before each round a quiet
  gate waits (up to --max-wait s) until a small matmul runs at >= 80% of the best speed seen;
  each sample records its "cpu share" (process CPU time / (wall × threads)). A round is
  "clean" when the gate passed and no side's cpu share fell below 85% of its best; the
  output gives medians over all rounds (the headline) and over clean rounds.
- Step memory is the peak RSS increase during a side's steps over the RSS before them
  (VmHWM reset through /proc/self/clear_refs, freed heap trimmed first): activations kept
  for backward, gradients and temporaries, on top of weights and optimizer state.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import reference_loop as ref  # noqa: E402  (benchmarks/ only; never imported by the product)

from fusion_sweep.trial.config import TrialConfig  # noqa: E402
from fusion_sweep.trial.data.types import EncodedSplit  # noqa: E402
from fusion_sweep.trial.heap import release_freed_memory  # noqa: E402
from fusion_sweep.trial.models.fusion import FUSIONS  # noqa: E402
from fusion_sweep.trial.seeds import build_model, training_schedule  # noqa: E402
from fusion_sweep.trial.trainer import build_optimizer, cpu_threads, train_epoch  # noqa: E402

VOCAB = 50_000  # the reference's vocabulary cap (min_freq 2, at most 50k)
PAD_ID, UNK_ID = 0, 1


# ------------------------------------------------------------------------ synthetic corpora
@dataclass(frozen=True)
class Regime:
    dataset: str  # fusion-sweep dataset whose hyperparameters are used
    num_classes: int
    n_docs: int
    describe: str

    def lengths(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.dataset == "agnews":  # title + description: ~40 words, sd ~10
            x = rng.gamma(16.0, 2.5, n)
            return np.clip(x, 5, 400).astype(np.int64)
        if self.dataset == "imdb":  # median ~174, mean ~230, long tail to ~2500
            x = rng.lognormal(math.log(174.0), 0.75, n)
            return np.clip(x, 10, 2500).astype(np.int64)
        # arxiv: papers, median ~9000 words; ~95% reach the 4096 cap
        x = rng.lognormal(math.log(9000.0), 0.55, n)
        return np.clip(x, 300, 30000).astype(np.int64)


REGIMES = {
    "agnews": Regime("agnews", 4, 3200, "AG News-like: ~40 words (gamma, sd ~10)"),
    "imdb": Regime("imdb", 2, 3200, "IMDB-like: log-normal, median 174, mean ~230, tail to 2500"),
    "arxiv": Regime("arxiv", 11, 200, "ArXiv-like: log-normal, median 9000; ~95% >= 4096 cap"),
}


@dataclass
class Corpus:
    split: EncodedSplit  # for fusion-sweep (pre-tokenized, flat)
    texts: list[str]  # for the reference (tokenized in __getitem__)
    labels: list[int]
    vocab: dict[str, int]


def make_corpus(regime: Regime, seed: int = 0) -> Corpus:
    """Zipf-distributed word ids; the same documents as flat ids and as whitespace text."""
    rng = np.random.default_rng([seed, len(regime.dataset)])
    lens = regime.lengths(rng, regime.n_docs)
    ranks = np.arange(1, VOCAB - 1, dtype=np.float64)
    cdf = np.cumsum(1.0 / ranks ** 1.05)
    cdf /= cdf[-1]
    ids = (np.searchsorted(cdf, rng.random(int(lens.sum()))) + 2).astype(np.int32)  # ids >= 2
    offsets = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    labels = rng.integers(0, regime.num_classes, len(lens))
    words = np.array([f"w{i}" for i in range(VOCAB)], dtype=object)
    texts = [" ".join(words[ids[offsets[i]: offsets[i + 1]]]) for i in range(len(lens))]
    vocab = {ref.PAD: PAD_ID, ref.UNK: UNK_ID, **{f"w{i}": i for i in range(2, VOCAB)}}
    split = EncodedSplit(ids=ids, offsets=offsets, labels=labels.astype(np.int64))
    for i in (0, len(lens) - 1):  # both sides see exactly the same documents
        enc = ref.encode_padded(texts[i], vocab, 512)
        assert enc[: min(512, lens[i])] == split.doc(i)[:512].tolist()
    return Corpus(split, texts, labels.tolist(), vocab)


# ------------------------------------------------------------------------ measurement utils
def _proc_status_kib(field_name: str) -> int:
    with open("/proc/self/status") as f:
        m = re.search(rf"^{field_name}:\s+(\d+) kB", f.read(), re.M)
    return int(m.group(1)) if m else 0


class CPUShare:
    """Process CPU seconds / (wall seconds × threads) over a block: ~0.9-1.0 when the machine
    gives the threads their cores, lower when other processes take them (shared machine)."""

    def __init__(self, threads: int) -> None:
        self.threads = threads

    def __enter__(self) -> "CPUShare":
        t = os.times()
        self.cpu0, self.wall0 = t.user + t.system, time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        t = os.times()
        wall = time.perf_counter() - self.wall0
        self.share = (t.user + t.system - self.cpu0) / max(wall * self.threads, 1e-9)


class PeakRSS:
    """Peak resident memory of a code block, as the increase over the RSS before it (MiB):
    for a training step, its working memory (activations kept for backward, gradients,
    temporaries) on top of the weights and optimizer state, which persist.

    Linux: resets the VmHWM high-water mark through /proc/self/clear_refs ("5"), so every block
    gets its own peak in the same process. Elsewhere falls back to ru_maxrss (process-wide).
    """

    def __enter__(self) -> "PeakRSS":
        release_freed_memory()  # hand freed heap pages back, so the block's own allocations show
        self.before = _proc_status_kib("VmRSS")
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.exact = True
        except OSError:
            self.exact = False
        return self

    def __exit__(self, *exc: object) -> None:
        if self.exact:
            peak = _proc_status_kib("VmHWM")
        else:
            import resource

            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        self.mib = max(peak - self.before, 0) / 1024.0


def matmul_peak_gflops(threads: int, n: int = 2048, repeats: int = 6) -> float:
    """Best fp32 GFLOP/s of an n×n @ n×n matmul with `threads` threads."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    best = float("inf")
    with cpu_threads(threads):
        torch.mm(a, b)
        for _ in range(repeats):
            t0 = time.perf_counter()
            torch.mm(a, b)
            best = min(best, time.perf_counter() - t0)
    return 2.0 * n ** 3 / best / 1e9


def load_avg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def med(xs: list[float]) -> float:
    return float(np.median(xs)) if xs else float("nan")


def fmt_range(xs: list[float], fmt: str = "{:,.0f}") -> str:
    if not xs:
        return "n/a"
    return f"{fmt.format(med(xs))} [{fmt.format(min(xs))}–{fmt.format(max(xs))}]"


# ------------------------------------------------------------------------------- the sides
@dataclass
class Sample:
    tokens: int
    sq: int  # Σ real_len² (attention work)
    seconds: float
    mem_mib: float
    cpu_share: float = float("nan")  # process CPU time / (wall × threads): < ~0.9 = contended

    @property
    def tps(self) -> float:
        return self.tokens / self.seconds


@dataclass
class Side:
    name: str
    layers: int
    d_model: int
    nonembed_params: int
    samples: list[Sample] = field(default_factory=list)

    def useful_flops(self, s: Sample) -> float:
        return 6.0 * self.nonembed_params * s.tokens + 12.0 * self.layers * self.d_model * s.sq

    def mfu(self, s: Sample, peak_gflops: float) -> float:
        return self.useful_flops(s) / s.seconds / (peak_gflops * 1e9)


class ReferenceSide(Side):
    def __init__(self, corpus: Corpus, cfg: TrialConfig, steps: int, num_workers: int) -> None:
        if cfg.attn_dropout != cfg.dropout:
            raise ValueError("the reference ties attention dropout to dropout")
        self.run = ref.build_reference(
            corpus.texts, corpus.labels, corpus.vocab, num_classes=int(max(corpus.labels)) + 1,
            max_len=cfg.max_len, d_model=cfg.d_model, heads=cfg.heads, layers=cfg.layers,
            dim_ff=cfg.dim_ff, dropout=cfg.dropout, activation=cfg.activation,
            optimizer=cfg.optimizer, lr=cfg.lr, weight_decay=cfg.weight_decay,
            grad_clip=cfg.grad_clip, batch_size=cfg.batch_size, seed=cfg.seed,
            num_workers=num_workers)
        n = sum(p.numel() for name, p in self.run.model.named_parameters() if not name.startswith("emb."))
        super().__init__("reference", cfg.layers, cfg.d_model, n)
        self.steps, self.threads = steps, cfg.num_threads

    def warm_up(self) -> None:
        with cpu_threads(self.threads):
            ref.train_steps(self.run, 1)

    def measure(self, round_index: int) -> Sample:
        with cpu_threads(self.threads), PeakRSS() as mem, CPUShare(self.threads) as cpu:
            tokens, sq, seconds = ref.train_steps(self.run, self.steps)
        s = Sample(tokens, sq, seconds, mem.mib, cpu.share)
        self.samples.append(s)
        return s


class ProductSide(Side):
    """fusion-sweep's own trainer (`train_epoch`) on stratified samples of its epoch-0 batches."""

    def __init__(self, name: str, corpus: Corpus, cfg: TrialConfig, k: int, rounds: int,
                 light_warmup: bool = False) -> None:
        self.cfg, self.split = cfg, corpus.split
        self.device = torch.device("cpu")
        self.model = build_model(cfg, VOCAB, int(max(corpus.labels)) + 1, PAD_ID)
        self.optimizer = build_optimizer(cfg, self.model)
        skip = ("embed.", "pe.")
        n = sum(p.numel() for nm, p in self.model.named_parameters() if not nm.startswith(skip))
        super().__init__(name, cfg.layers, cfg.d_model, n)
        batches = training_schedule(corpus.split, cfg)[0]  # a function of (data, seed) only
        lens = np.minimum(corpus.split.lengths(), cfg.max_len)
        # Stratify by padded batch length: round r takes quantiles (i·R + r + ½)/(k·R), i < k, so
        # every round is a cross-section of the epoch and rounds never repeat a batch.
        order = sorted(range(len(batches)), key=lambda b: (int(lens[batches[b]].max()), b))
        total = k * rounds
        if total > len(order):
            raise ValueError(f"{name}: {total} sampled batches > {len(order)} in the epoch")
        self.rounds = [[batches[order[int((i * rounds + r + 0.5) / total * len(order))]]
                        for i in range(k)] for r in range(rounds)]
        mid = batches[order[len(order) // 2]]
        self.warm = [mid] if light_warmup else [batches[order[-1]], mid]  # longest first
        self.lens = lens

    def _steps(self, batches: list[np.ndarray]) -> tuple[int, int, float]:
        with cpu_threads(self.cfg.num_threads):
            t0 = time.perf_counter()
            _, _, tokens = train_epoch(self.model, self.optimizer, self.split, batches, self.cfg,
                                       self.device, PAD_ID)
            seconds = time.perf_counter() - t0
        sq = int(sum(int((self.lens[b] ** 2).sum()) for b in batches))
        return tokens, sq, seconds

    def warm_up(self) -> None:
        self._steps(self.warm)

    def measure(self, round_index: int) -> Sample:
        with PeakRSS() as mem, CPUShare(self.cfg.num_threads) as cpu:
            tokens, sq, seconds = self._steps(self.rounds[round_index])
        s = Sample(tokens, sq, seconds, mem.mib, cpu.share)
        self.samples.append(s)
        return s


MIN_SHARE = 0.65  # below this cpu share, the process did not have its threads' cores


class QuietGate:
    """Before each round, wait (up to `max_wait` s) until a 1024³ matmul runs at ≥ 80% of the
    best speed seen in this run: on a shared machine, rounds then start while the cores are
    ours. Rounds that still start contended are recorded (and flagged in the output)."""

    def __init__(self, threads: int, max_wait: float) -> None:
        self.threads, self.max_wait = threads, max_wait
        self.best = 0.0
        self.waited = 0.0
        for _ in range(3):
            self.probe()

    def probe(self) -> float:
        g = matmul_peak_gflops(self.threads, n=1024, repeats=3)
        self.best = max(self.best, g)
        return g

    def wait(self) -> bool:
        t0 = time.perf_counter()
        while True:
            if self.probe() >= 0.8 * self.best:
                self.waited += time.perf_counter() - t0
                return True
            if time.perf_counter() - t0 > self.max_wait:
                self.waited += time.perf_counter() - t0
                return False
            time.sleep(2.0)


def run_rounds(sides: list, rounds: int, label: str, gate: QuietGate) -> list[bool]:
    """Warm every side up, then `rounds` rounds of every side once (order rotating).
    -> per round: whether it was clean (gate passed and no side lost its cores meanwhile)."""
    for side in sides:
        side.warm_up()
    gate_ok = []
    for r in range(rounds):
        gate_ok.append(gate.wait())
        shift = r % len(sides)
        for side in sides[shift:] + sides[:shift]:  # rotate the order between rounds
            s = side.measure(r)
            print(f"  [{label}] round {r + 1}/{rounds} {side.name:<12} {s.tokens:>7} tok "
                  f"{s.seconds:7.2f} s  {s.tps:>8,.0f} tok/s  cpu share {s.cpu_share:.2f}",
                  file=sys.stderr, flush=True)
    # Clean: the gate passed and every side kept >= 85% of the best CPU share it ever had —
    # and that best was >= 0.65 (a run that never had its cores has no clean round).
    best = {side.name: max(s.cpu_share for s in side.samples) for side in sides}
    return [ok and all(best[side.name] >= MIN_SHARE
                       and side.samples[r].cpu_share >= 0.85 * best[side.name] for side in sides)
            for r, ok in enumerate(gate_ok)]


# ------------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class Plan:
    rounds: int
    batch: dict[str, int]
    k: dict[str, int]  # product batches per round (stratified by length)
    ref_steps: int  # reference steps per round
    fusion_configs: tuple[str, ...]
    fusion_k: dict[str, int]
    fusion_rounds: dict[str, int]
    max_wait: float  # seconds the quiet gate may wait per round


QUICK = Plan(rounds=3, batch={"agnews": 16, "imdb": 16, "arxiv": 1},
             k={"agnews": 2, "imdb": 2, "arxiv": 1}, ref_steps=1,
             fusion_configs=("agnews",), fusion_k={"agnews": 3}, fusion_rounds={"agnews": 3},
             max_wait=15)
FULL = Plan(rounds=5, batch={"agnews": 64, "imdb": 64, "arxiv": 2},
            k={"agnews": 4, "imdb": 4, "arxiv": 1}, ref_steps=1,
            fusion_configs=("agnews", "imdb"), fusion_k={"agnews": 4, "imdb": 2},
            fusion_rounds={"agnews": 3, "imdb": 2}, max_wait=60)


def _summary(values: list[float], clean: list[bool]) -> dict:
    kept = [v for v, c in zip(values, clean) if c]
    return {"median": med(values), "min": min(values), "max": max(values),
            "median_clean": med(kept) if kept else None}


def bench_config(name: str, plan: Plan, threads: int, num_workers: int, gate: QuietGate) -> dict:
    """Reference vs identical math vs attn0 on one config. MFU is filled in by `main`, against
    the best matmul peak of the whole run."""
    regime = REGIMES[name]
    corpus = make_corpus(regime)
    cfg = TrialConfig.build(regime.dataset, batch_size=plan.batch[name], num_threads=threads,
                            device="cpu", seed=0)
    ident = ProductSide("identical", corpus, cfg, plan.k[name], plan.rounds)
    fast = ProductSide("attn0", corpus, cfg.replace(attn_dropout=0.0), plan.k[name], plan.rounds)
    refside = ReferenceSide(corpus, cfg, plan.ref_steps, num_workers)
    sides = [refside, ident, fast]
    lens = corpus.split.lengths()
    capped = float(np.mean(lens >= cfg.max_len))
    print(f"\n== {name}: {regime.describe}; {len(lens)} docs, mean {lens.mean():.0f} / median "
          f"{np.median(lens):.0f} words, {capped:.0%} at the {cfg.max_len} cap; max_len "
          f"{cfg.max_len}, d{cfg.d_model}, {cfg.layers} layers, batch {cfg.batch_size}, "
          f"{cfg.optimizer}, {threads} threads", flush=True)
    clean = run_rounds(sides, plan.rounds, name, gate)

    ref_tps = [s.tps for s in refside.samples]
    out: dict = {"batch_size": cfg.batch_size, "max_len": cfg.max_len, "rounds": plan.rounds,
                 "clean_rounds": sum(clean)}
    for side in sides:
        tps = [s.tps for s in side.samples]
        out[side.name] = {
            "tokens_per_s": _summary(tps, clean),
            "ratio": _summary([a / b for a, b in zip(tps, ref_tps)], clean),
            "useful_gflops": _summary([side.useful_flops(x) / x.seconds / 1e9 for x in side.samples], clean),
            "step_mem_mib": max(s.mem_mib for s in side.samples),
            "cpu_share": med([s.cpu_share for s in side.samples]),
            "nonembedding_params": side.nonembed_params,
        }
    fastest = max(("identical", "attn0"), key=lambda k: out[k]["tokens_per_s"]["median"])
    out.update(ratio=out["identical"]["ratio"]["median"],
               ratio_attn_dropout_0=out["attn0"]["ratio"]["median"],
               ratio_clean=out["identical"]["ratio"]["median_clean"],
               ratio_attn_dropout_0_clean=out["attn0"]["ratio"]["median_clean"],
               mfu_setting=fastest)
    if name == "arxiv":
        out["note"] = (f"batch {cfg.batch_size} on every side: with attention dropout > 0 the "
                       "reference's CPU attention materialises (B, 8, 4096, 4096) fp32 "
                       "probabilities (34 GB at the reference batch 64), so batch 64 cannot run "
                       "on this machine")
    return out


def print_config(name: str, r: dict, peak: float) -> None:
    def rng(d: dict, fmt: str, scale: float = 1.0) -> str:
        txt = (f"{fmt.format(d['median'] * scale)} [{fmt.format(d['min'] * scale)}–"
               f"{fmt.format(d['max'] * scale)}]")
        return txt

    rows = []
    for side in ("reference", "identical", "attn0"):
        d = r[side]
        clean = d["ratio"]["median_clean"]
        rows.append((side, rng(d["tokens_per_s"], "{:,.0f}"), rng(d["ratio"], "{:.1f}×"),
                     "—" if clean is None else f"{clean:.1f}×",
                     rng(d["useful_gflops"], "{:.0%}", 1.0 / peak), f"{d['step_mem_mib']:,.0f}",
                     f"{d['cpu_share']:.2f}"))
    head = ("side", "real tokens/s", "ratio to reference", "clean rounds",
            "useful MFU", "step mem MiB", "cpu share")
    widths = [max(len(h), *(len(x[i]) for x in rows)) for i, h in enumerate(head)]
    print(f"\n-- {name} (batch {r['batch_size']}; median [min–max] over {r['rounds']} rounds, "
          f"{r['clean_rounds']} clean)")
    for x in (head, *rows):
        print("  " + "  ".join(c.ljust(w) for c, w in zip(x, widths)))


def bench_fusions(name: str, plan: Plan, threads: int, gate: QuietGate, attn_dropout: float) -> dict:
    regime = REGIMES[name]
    corpus = make_corpus(regime)
    cfg = TrialConfig.build(regime.dataset, batch_size=plan.batch[name], num_threads=threads,
                            device="cpu", seed=0, attn_dropout=attn_dropout)
    k = plan.fusion_k[name]
    rounds = plan.fusion_rounds[name]
    sides = [ProductSide(f, corpus, cfg.replace(fusion=f), k, rounds, light_warmup=True)
             for f in FUSIONS]
    print(f"\n== fusion operators on the {name} config (batch {cfg.batch_size}, attn_dropout "
          f"{cfg.attn_dropout}): real tokens/s relative to add, paired per round", flush=True)
    clean = run_rounds(sides, rounds, f"{name}/fusion", gate)
    base = [s.tps for s in sides[0].samples]
    out = {}
    for side in sides:
        tps = [s.tps for s in side.samples]
        rel = [a / b for a, b in zip(tps, base)]
        params = side.nonembed_params - sides[0].nonembed_params
        print(f"  {side.name:<12} {fmt_range(tps):>26} tok/s  {fmt_range(rel, '{:.2f}×'):>22} "
              f"of add  (+{params:,} params)")
        out[side.name] = round(med(rel), 3)
    out["clean_rounds"] = f"{sum(clean)}/{len(clean)}"
    return out


def _round(x):
    if isinstance(x, float):
        return round(x, 4)
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    return x


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small batches, 3 rounds (a few minutes)")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads for both sides (default 2)")
    ap.add_argument("--configs", default="agnews,imdb,arxiv", help="comma-separated subset")
    ap.add_argument("--rounds", type=int, default=0, help="override the plan's rounds")
    ap.add_argument("--no-fusions", action="store_true", help="skip the per-fusion rows")
    ap.add_argument("--max-wait", type=float, default=None,
                    help="seconds to wait per round for a quiet machine (0 = never wait)")
    ap.add_argument("--num-workers", type=int, default=0,
                    help="reference DataLoader workers (the AG News/IMDB notebook used 2)")
    args = ap.parse_args(argv)
    plan = QUICK if args.quick else FULL
    if args.rounds:
        plan = Plan(**{**plan.__dict__, "rounds": args.rounds,
                       "fusion_rounds": {k: args.rounds for k in plan.fusion_rounds}})
    torch.set_num_threads(args.threads)
    t_start = time.perf_counter()
    mode = "quick" if args.quick else "full"
    print(f"trial_throughput ({mode}): torch {torch.__version__}, {args.threads} threads, "
          f"{os.cpu_count()} CPUs, load average {load_avg()}", flush=True)
    gate = QuietGate(args.threads, plan.max_wait if args.max_wait is None else args.max_wait)
    peaks = [matmul_peak_gflops(args.threads)]
    print(f"fp32 matmul (2048³, {args.threads} threads): {peaks[0]:.0f} GFLOP/s", flush=True)

    result: dict = {"mode": mode, "threads": args.threads}
    configs = [c for c in args.configs.split(",") if c]
    for name in configs:
        result[name] = bench_config(name, plan, args.threads, args.num_workers, gate)
        peaks.append(matmul_peak_gflops(args.threads))
        print_config(name, result[name], max(peaks))
    fusion_out = {}
    if not args.no_fusions:
        for name in plan.fusion_configs:  # AG News as the sweep runs it; IMDB at its fast setting
            ad = 0.1 if name == "agnews" else 0.0
            fusion_out[name] = bench_fusions(name, plan, args.threads, gate, ad)
    peaks.append(matmul_peak_gflops(args.threads))
    peak = max(peaks)
    for name in configs:  # useful MFU against the best fp32 matmul peak of the whole run
        r = result[name]
        for side in ("reference", "identical", "attn0"):
            g = r[side]["useful_gflops"]
            r[side]["mfu"] = {k: (None if v is None else v / peak) for k, v in g.items()}
        r["mfu"] = r[r["mfu_setting"]]["mfu"]["median"]
        r["mfu_identical"] = r["identical"]["mfu"]["median"]
        r["mfu_attn_dropout_0"] = r["attn0"]["mfu"]["median"]
    if fusion_out:
        result["fusion_vs_add"] = fusion_out
    result.update(matmul_peak_gflops=round(peak, 1), matmul_samples=[round(p, 1) for p in peaks],
                  quiet_gate_waited_s=round(gate.waited, 1), load_average_end=load_avg(),
                  seconds=round(time.perf_counter() - t_start, 1))

    print("\n== summary: real (non-pad) tokens/s, medians over rounds; ratios are paired per round "
          "against the reference")
    print("| config | batch | reference | identical math | ratio | attn_dropout=0 | ratio | "
          "useful MFU (fastest) | clean rounds |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in configs:
        r = result[name]
        t = {k: r[k]["tokens_per_s"]["median"] for k in ("reference", "identical", "attn0")}
        print(f"| {name} | {r['batch_size']} | {t['reference']:,.0f} | {t['identical']:,.0f} | "
              f"{r['ratio']:.1f}× | {t['attn0']:,.0f} | {r['ratio_attn_dropout_0']:.1f}× | "
              f"{r['mfu']:.0%} ({r['mfu_setting']}) | {r['clean_rounds']}/{r['rounds']} |")
    if "arxiv" in configs:
        print(f"arxiv: {result['arxiv']['note']}.")
    shared = [n for n in configs if min(result[n][k]["cpu_share"] for k in ("identical", "attn0"))
              < MIN_SHARE]
    if shared:
        print(f"WARNING: the machine was shared during {', '.join(shared)}: fusion-sweep's "
              f"threads got less than {MIN_SHARE:.0%} of their cores (see 'cpu share'); "
              f"timings there are not representative — rerun on an idle machine.")
    result["contended_configs"] = shared
    print(f"fp32 matmul peak {peak:.0f} GFLOP/s; quiet gate waited {gate.waited:.0f} s; load "
          f"average at end {result['load_average_end']}; {result['seconds']:.0f} s in all")
    print(json.dumps(_round(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

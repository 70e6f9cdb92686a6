"""Trials per hour of the default sweep: through `fusion-sweep launch` and through a plain loop.

    python benchmarks/sweep_throughput.py [--trials 6] [--dataset synthetic-short] [--repeats 2]
    python benchmarks/sweep_throughput.py --trainer-ab [--rounds 2] [--regimes ...]
    python benchmarks/sweep_throughput.py --placement-ab [--trials 4] [--epochs 3]

Default mode (launch vs plain). A search space is generated in a temporary directory: one
regime of the default space (`--dataset`, default synthetic-short; `--dataset default`: the
whole default space, every regime, fusion and seed) × the default space's
fusions × enough seeds for `--trials` grid points, the default space's PE and resources (1 CPU
= 1 torch thread per trial) and the dataset's own hyperparameters. The same trials then run

  launch  `fusion-sweep launch SPACE` as a subprocess: Ray Tune (reuse_actors), one MLflow run
          per trial in a throwaway sqlite store, a local Ray instance started and stopped by
          the command;
  plain   `train_trial` over the same TrialConfigs in a subprocess with a
          multiprocessing Pool(P) (spawn), P = CPUs // resources.cpu, as many at once as Ray.

Both are timed as whole commands (interpreter start, imports, Ray start/stop included),
alternating ABBA over `--repeats` pairs; the data cache and the MLflow schema are prepared
untimed. Reported: wall seconds, trials per hour, the ratio launch / plain (target <= 1.10;
1.16 in the README before issue 9), and each side's start-up / trial phase / wind-down split.

`--trainer-ab`: one trial per synthetic regime (its registry hyperparameters, read at run
time) under `SpeedOptions.reference()` (the original loop) and the default fast path, in ONE
process, 1 torch thread, interleaved epoch by epoch (see `Lockstep`; the arm that goes first
alternates between rounds). Prints each regime's per-round speedup (reference seconds / fast
seconds) in wall time and in thread CPU time (less sensitive to other processes),
trials per hour of each path, and whether the two results are identical (test_acc,
best epoch, fingerprints) and how far the losses differ.

`--placement-ab`: the plain Pool(P) loop with and without pinning each worker process to
its own core (os.sched_setaffinity), alternating, to see whether CPU placement of the
concurrent trials matters on this machine.

Every figure is printed with /proc/loadavg at the time: on a shared machine only ratios
measured in the same run mean anything. The last stdout line is one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SYNTHETIC = ("synthetic-short", "synthetic-medium", "synthetic-long")


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def per_hour(seconds: float, trials: int) -> float:
    return 3600.0 * trials / max(seconds, 1e-9)


# ---------------------------------------------------------------------- the search space
def write_space(path: Path, trials: int, dataset: str, epochs: int | None) -> tuple[list[str], int]:
    """`trials` grid points of the default space restricted to one regime: its fusions × seeds."""
    import yaml

    from fusion_sweep.plan.space import load_space

    default = load_space("default")
    if dataset == "default":  # the default space itself: every regime, fusion and seed
        from fusion_sweep.plan.space import SPACE_DIR

        raw = yaml.safe_load((SPACE_DIR / "default.yaml").read_text())
        raw.update(name="throughput", max_failures=0)
        path.write_text(f"# fusion-sweep launch {path}\n" + yaml.safe_dump(raw, sort_keys=False))
        return list(default.fusions), len(default.seeds)
    fusions = list(default.fusions)
    seeds = max(1, -(-trials // len(fusions)))
    fusions = fusions[: -(-trials // seeds)]
    hp = {"epochs": epochs} if epochs else {}
    space = {"name": "throughput", "description": "benchmarks/sweep_throughput.py",
             "datasets": [dataset], "pes": list(default.pes)[:1], "fusions": fusions,
             "seeds": list(range(seeds)), "hyperparameters": {"all": hp} if hp else {},
             "resources": {"cpu": int(default.cpu), "gpu": 0}, "max_failures": 0,
             "baseline": fusions[0], "metric": "test_acc"}
    path.write_text(f"# fusion-sweep launch {path}\n" + yaml.safe_dump(space, sort_keys=False))
    return fusions, seeds


# --------------------------------------------------------------------- the plain side
def _pin(counter, ncpu: int) -> None:
    with counter.get_lock():
        core = counter.value % ncpu
        counter.value += 1
    os.sched_setaffinity(0, {core})


def _train(config: dict) -> tuple[float, float]:
    from fusion_sweep.trial.config import TrialConfig
    from fusion_sweep.trial.trainer import train_trial

    t0 = time.time()
    train_trial(TrialConfig.from_dict(config))
    return t0, time.time()


def plain_main(space_path: str, parallel: int, pin: bool) -> int:
    """The plain loop as its own process (its imports are timed, as launch's are)."""
    from fusion_sweep.plan.space import load_space

    configs = [c.to_dict() for c in load_space(space_path).grid()]
    if parallel <= 1 and not pin:
        spans = [_train(c) for c in configs]
    else:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        init, args = (None, ())
        if pin:
            init, args = _pin, (ctx.Value("i", 0), os.cpu_count() or 1)
        with ctx.Pool(parallel, initializer=init, initargs=args) as pool:
            spans = pool.map(_train, configs, chunksize=1)
    print("SPANS " + json.dumps(spans))
    return 0


# ---------------------------------------------------------------------------- helpers
def timed(cmd: list[str], cwd: Path, env: dict, log: Path) -> tuple[float, float, float]:
    """-> (wall seconds, start, end as epoch seconds)."""
    start, t0 = time.time(), time.perf_counter()
    with open(log, "w") as f:
        rc = subprocess.run(cmd, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    seconds = time.perf_counter() - t0
    if rc != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-30:])
        raise SystemExit(f"command failed (rc={rc}): {' '.join(cmd)}\n{tail}")
    return seconds, start, start + seconds


def phases(spans: list, start: float, end: float) -> dict:
    if not spans:
        return {}
    first, last = min(a for a, _ in spans), max(b for _, b in spans)
    return {"startup_s": first - start, "trials_s": last - first, "winddown_s": end - last,
            "mean_trial_s": float(np.mean([b - a for a, b in spans]))}


def plain_spans(log: Path) -> list:
    lines = [x for x in log.read_text().splitlines() if x.startswith("SPANS ")]
    return [tuple(x) for x in json.loads(lines[-1][len("SPANS "):])] if lines else []


def launch_spans(uri: str, sweep: str) -> list:
    """Each trial's MLflow run, opened -> closed; [] if the tracking API has moved."""
    try:
        from fusion_sweep.tracking.runs import SweepTracker

        runs = SweepTracker(uri).trial_runs(sweep)
        return [(r.info.start_time / 1000.0, r.info.end_time / 1000.0) for r in runs
                if r.info.end_time]
    except Exception as e:  # phases are a diagnostic; the wall times are the result
        print(f"  (no per-trial spans from MLflow: {type(e).__name__}: {e})")
        return []


def prepare(work: Path, space: Path, env: dict, uri: str | None) -> list:
    """Untimed: the tokenized data cache (and the MLflow store's schema)."""
    from fusion_sweep.trial.data import load_encoded
    from fusion_sweep.plan.space import load_space

    os.environ["FUSION_SWEEP_CACHE"] = env["FUSION_SWEEP_CACHE"]
    grid = load_space(str(space)).grid()
    c = grid[0]
    load_encoded(c.dataset, data_dir=c.data_dir, data_seed=c.data_seed, cache_dir=c.cache_dir,
                 limit_train=c.limit_train, limit_eval=c.limit_eval)
    if uri:
        import mlflow

        mlflow.set_tracking_uri(uri)
        mlflow.MlflowClient().search_experiments()
    return grid


def fmt_phase(ph: dict) -> str:
    if not ph:
        return ""
    return (f" = start-up {ph['startup_s']:5.1f} + trials {ph['trials_s']:6.1f} + wind-down "
            f"{ph['winddown_s']:4.1f} (mean trial {ph['mean_trial_s']:.1f} s)")


# ------------------------------------------------------------------ launch vs plain
def launch_vs_plain(args, work: Path, env: dict) -> dict:
    uri = f"sqlite:///{work / 'mlflow.db'}"
    space = work / "throughput.yaml"
    fusions, seeds = write_space(space, args.trials, args.dataset, args.epochs)
    grid = prepare(work, space, env, uri)
    n, cpu = len(grid), max(1, int(grid[0].num_threads or 1))
    parallel = args.parallel or max(1, (os.cpu_count() or 1) // cpu)
    print(f"sweep_throughput: {n} trials = {args.dataset} × {fusions} × seeds 0-{seeds - 1} "
          f"({grid[0].epochs} epochs, {cpu} thread(s) each), {parallel} at once on both sides, "
          f"{args.repeats} A/B pair(s); {os.cpu_count()} CPUs; loadavg {loadavg()}; work dir {work}",
          flush=True)
    res: dict[str, list] = {"launch": [], "plain": []}
    split: dict[str, list] = {"launch": [], "plain": []}
    loads: dict[str, list] = {"launch": [], "plain": []}
    for r in range(args.repeats):
        for side in (("plain", "launch") if r % 2 == 0 else ("launch", "plain")):
            la = loadavg()
            if side == "plain":
                log = work / f"plain-{r}.log"
                cmd = [sys.executable, str(Path(__file__).resolve()), "--plain-worker", str(space),
                       str(parallel), "0"]
                s, t0, t1 = timed(cmd, work, env, log)
                spans = plain_spans(log)
            else:
                log = work / f"launch-{r}.log"
                cmd = [sys.executable, "-m", "fusion_sweep.cli", "launch", str(space),
                       "--name", f"throughput-{r}", "--tracking-uri", uri,
                       "--storage", str(work / "ray_results"), "--max-concurrent", str(parallel)]
                s, t0, t1 = timed(cmd, work, env, log)
                spans = launch_spans(uri, f"throughput-{r}")
                if spans and len(spans) != n:
                    raise SystemExit(f"launch finished {len(spans)} of {n} trials; see {log} (--keep)")
            ph = phases(spans, t0, t1)
            res[side].append(s)
            split[side].append(ph)
            loads[side].append(la)
            print(f"  pair {r + 1}/{args.repeats}: {side:<6} {s:7.1f} s, "
                  f"{per_hour(s, n):6.1f} trials/h{fmt_phase(ph)}; loadavg {la} -> {loadavg()}",
                  flush=True)
    ratios = [a / b for a, b in zip(res["launch"], res["plain"])]
    ratio = float(np.median(ratios))
    lm, pm = float(np.median(res["launch"])), float(np.median(res["plain"]))
    print(f"\nfusion-sweep launch: {lm:.1f} s = {per_hour(lm, n):.1f} trials/h")
    print(f"plain Pool({parallel}) loop: {pm:.1f} s = {per_hour(pm, n):.1f} trials/h")
    print(f"ratio launch / plain wall time: {ratio:.3f} (per pair "
          f"{', '.join(f'{x:.3f}' for x in ratios)}); target <= 1.10; loadavg now {loadavg()}")
    medph = {k: ({f: float(np.median([p[f] for p in v])) for f in v[0]} if all(v) else {})
             for k, v in split.items()}
    proj = None
    if medph["launch"] and medph["plain"]:
        # fixed cost (start-up + wind-down) plus the trial phase per wave of `parallel` trials
        la, pl = medph["launch"], medph["plain"]
        fixed = {k: v["startup_s"] + v["winddown_s"] for k, v in medph.items()}
        wave = {k: v["trials_s"] / (n / parallel) for k, v in medph.items()}
        w45 = 45 / parallel  # the default space's size
        proj = (fixed["launch"] + w45 * wave["launch"]) / (fixed["plain"] + w45 * wave["plain"])
        for side in ("launch", "plain"):
            m = medph[side]
            print(f"  {side:<6} medians: start-up {m['startup_s']:.1f} s, trials {m['trials_s']:.1f} s, "
                  f"wind-down {m['winddown_s']:.1f} s, mean trial {m['mean_trial_s']:.1f} s")
        print(f"  fixed cost launch {fixed['launch']:.1f} s vs plain {fixed['plain']:.1f} s; trial "
              f"phase per wave of {parallel}: launch {wave['launch']:.1f} s vs plain "
              f"{wave['plain']:.1f} s; projected ratio for 45 trials of this size: {proj:.3f}")
    return {"mode": "launch-vs-plain", "ratio": round(ratio, 4),
            "ratios": [round(x, 4) for x in ratios], "launch_s": [round(x, 2) for x in res["launch"]],
            "plain_s": [round(x, 2) for x in res["plain"]],
            "launch_trials_per_hour": round(per_hour(lm, n), 1),
            "plain_trials_per_hour": round(per_hour(pm, n), 1), "trials": n, "parallel": parallel,
            "dataset": args.dataset, "epochs": grid[0].epochs, "loadavg": loads,
            "phases": {k: {a: round(b, 2) for a, b in v.items()} for k, v in medph.items()},
            "projected_ratio_45_trials": round(proj, 4) if proj else None}


# ------------------------------------------------------------------------ placement
def placement_ab(args, work: Path, env: dict) -> dict:
    space = work / "placement.yaml"
    write_space(space, args.trials, args.dataset, args.epochs)
    grid = prepare(work, space, env, None)
    n = len(grid)
    parallel = args.parallel or max(1, (os.cpu_count() or 1) // max(1, grid[0].num_threads or 1))
    print(f"placement A/B: {n} trials of {args.dataset} ({grid[0].epochs} epochs), Pool({parallel}), "
          f"unpinned vs one core per worker; loadavg {loadavg()}", flush=True)
    res: dict[str, list] = {"unpinned": [], "pinned": []}
    for r in range(args.repeats):
        for side in (("unpinned", "pinned") if r % 2 == 0 else ("pinned", "unpinned")):
            la = loadavg()
            cmd = [sys.executable, str(Path(__file__).resolve()), "--plain-worker", str(space),
                   str(parallel), "1" if side == "pinned" else "0"]
            s, _, _ = timed(cmd, work, env, work / f"{side}-{r}.log")
            res[side].append(s)
            print(f"  round {r + 1}: {side:<8} {s:7.1f} s; loadavg {la} -> {loadavg()}", flush=True)
    ratios = [a / b for a, b in zip(res["pinned"], res["unpinned"])]
    print(f"pinned / unpinned wall time: {np.median(ratios):.3f} (per round "
          f"{', '.join(f'{x:.3f}' for x in ratios)})")
    return {"mode": "placement-ab", "pinned_over_unpinned": round(float(np.median(ratios)), 4),
            "pinned_s": res["pinned"], "unpinned_s": res["unpinned"], "trials": n}


# -------------------------------------------------------------------------- trainer A/B
class Lockstep:
    """Runs trials in threads, ONE at a time, handing over at every epoch boundary (the
    trainer's per-epoch callback): a reference trial and a fast trial alternate epoch by
    epoch, so slow drifts of a shared machine's load hit both alike. Each trial's active
    wall and thread-CPU seconds are summed. The global torch RNG (the dropout stream) is
    saved at every hand-over and restored on resume, so each trial draws exactly what it
    would draw alone (checked: both arms' results must be identical)."""

    def __init__(self, names: list[str]) -> None:
        import threading

        self.names, self.turn, self.done = names, names[0], set()
        self.cv = threading.Condition()
        self.wall = {n: 0.0 for n in names}
        self.cpu = {n: 0.0 for n in names}
        self.mark: dict[str, tuple[float, float]] = {}
        self.rng: dict = {}

    def acquire(self, me: str) -> None:
        import torch

        with self.cv:
            self.cv.wait_for(lambda: self.turn == me)
        if me in self.rng:
            torch.set_rng_state(self.rng[me])
        self.mark[me] = (time.perf_counter(), time.thread_time())

    def release(self, me: str, finished: bool = False) -> None:
        import torch

        t0, c0 = self.mark[me]
        self.wall[me] += time.perf_counter() - t0
        self.cpu[me] += time.thread_time() - c0
        self.rng[me] = torch.get_rng_state()
        with self.cv:
            if finished:
                self.done.add(me)
            i = self.names.index(me)
            nxt = [n for n in self.names[i + 1:] + self.names[:i + 1] if n not in self.done]
            self.turn = nxt[0] if nxt else me
            self.cv.notify_all()


def lockstep_pair(config, data, arms: dict, order: list[str]) -> tuple[dict, dict, dict]:
    """-> (results, wall seconds, thread-CPU seconds) per arm, run epoch-interleaved."""
    import threading

    from fusion_sweep.trial.trainer import train_trial

    ls = Lockstep(order)
    results: dict = {}
    errors: list[BaseException] = []

    def body(arm: str) -> None:
        ls.acquire(arm)
        try:
            results[arm] = train_trial(config, data=data, speed=arms[arm],
                                       callback=lambda rec: (ls.release(arm), ls.acquire(arm)))
        except BaseException as e:  # pragma: no cover - surfaced below
            errors.append(e)
        finally:
            ls.release(arm, finished=True)

    threads = [threading.Thread(target=body, args=(a,)) for a in order]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results, ls.wall, ls.cpu


def trainer_ab(args) -> dict:
    import torch

    from fusion_sweep.trial.config import TrialConfig
    from fusion_sweep.trial.trainer import SpeedOptions, load_data, train_trial

    torch.set_num_threads(args.threads)
    arms = {"reference": SpeedOptions.parse(args.baseline), "fast": SpeedOptions.parse(args.speed)}
    print(f"trainer A/B: reference = {arms['reference']}\n             fast      = {arms['fast']}\n"
          f"{args.rounds} round(s) per regime, each running both trials epoch-interleaved "
          f"(the first arm alternates), {args.threads} torch thread(s), fusion {args.fusion}, "
          f"seed {args.seed}; loadavg {loadavg()}", flush=True)
    out: dict = {"mode": "trainer-ab", "threads": args.threads, "regimes": {}}
    warm = TrialConfig.build("synthetic-short", num_threads=args.threads, device="cpu", epochs=1,
                             limit_train=64, limit_eval=32, latency_repeats=1)
    train_trial(warm, speed=arms["fast"])  # untimed: lazy imports (torch._dynamo via optim)
    for regime in args.regimes.split(","):
        config = TrialConfig.build(regime, fusion=args.fusion, seed=args.seed,
                                   num_threads=args.threads, device="cpu")
        data = load_data(config)
        secs: dict[str, list[float]] = {"reference": [], "fast": []}
        cpu: dict[str, list[float]] = {"reference": [], "fast": []}
        loads: list[str] = []
        for r in range(args.rounds):
            order = ["reference", "fast"] if r % 2 == 0 else ["fast", "reference"]
            loads.append(loadavg())
            results, wall, tcpu = lockstep_pair(config, data, arms, order)
            for arm in arms:
                secs[arm].append(wall[arm])
                cpu[arm].append(tcpu[arm])
            print(f"  {regime} round {r + 1}: wall reference {wall['reference']:6.1f} s, fast "
                  f"{wall['fast']:6.1f} s, ratio {wall['reference'] / wall['fast']:.3f}; CPU "
                  f"{tcpu['reference']:6.1f} s vs {tcpu['fast']:6.1f} s, ratio "
                  f"{tcpu['reference'] / tcpu['fast']:.3f}; loadavg {loads[-1]} -> {loadavg()}",
                  flush=True)
            a, b = results["reference"], results["fast"]
            loss_rel = max(abs(x.train_loss - y.train_loss) / max(abs(x.train_loss), 1e-12)
                           for x, y in zip(a.curve, b.curve))
            same = (a.test_acc == b.test_acc and a.best_epoch == b.best_epoch
                    and a.fingerprints == b.fingerprints and len(a.curve) == len(b.curve))
        ratios = [x / y for x, y in zip(secs["reference"], secs["fast"])]
        cpu_ratios = [x / y for x, y in zip(cpu["reference"], cpu["fast"])]
        ref_s, fast_s = float(np.median(secs["reference"])), float(np.median(secs["fast"]))
        print(f"{regime}: speedup {np.median(ratios):.3f}× wall (per round "
              f"{', '.join(f'{x:.3f}' for x in ratios)}), {np.median(cpu_ratios):.3f}× CPU time (per "
              f"round {', '.join(f'{x:.3f}' for x in cpu_ratios)}); trials/h {per_hour(ref_s, 1):.0f} -> "
              f"{per_hour(fast_s, 1):.0f} per process; identical result: {same} (max train-loss "
              f"rel. diff {loss_rel:.1e}, latency {a.latency_ms_per_sample:.3f} vs "
              f"{b.latency_ms_per_sample:.3f} ms/doc)", flush=True)
        out["regimes"][regime] = {"speedup": round(float(np.median(ratios)), 4),
                                  "ratios": [round(x, 4) for x in ratios],
                                  "cpu_speedup": round(float(np.median(cpu_ratios)), 4),
                                  "cpu_ratios": [round(x, 4) for x in cpu_ratios],
                                  "reference_s": [round(x, 2) for x in secs["reference"]],
                                  "fast_s": [round(x, 2) for x in secs["fast"]],
                                  "reference_cpu_s": [round(x, 2) for x in cpu["reference"]],
                                  "fast_cpu_s": [round(x, 2) for x in cpu["fast"]],
                                  "identical": bool(same), "max_loss_rel_diff": loss_rel,
                                  "loadavg": loads}
    out["loadavg_end"] = loadavg()
    return out


# -------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trainer-ab", action="store_true", help="reference vs fast trainer path")
    ap.add_argument("--placement-ab", action="store_true", help="Pool workers pinned vs not")
    ap.add_argument("--trials", type=int, default=6, help="grid points (default 6)")
    ap.add_argument("--dataset", default="synthetic-short",
                    help="regime for the sweep modes; 'default' = the whole default space "
                         "(--trials is then ignored)")
    ap.add_argument("--epochs", type=int, default=None, help="override the regime's epochs")
    ap.add_argument("--parallel", type=int, default=None, help="default CPUs // resources.cpu")
    ap.add_argument("--repeats", type=int, default=2, help="A/B pairs, alternating (default 2)")
    ap.add_argument("--rounds", type=int, default=2, help="--trainer-ab rounds per regime")
    ap.add_argument("--regimes", default=",".join(SYNTHETIC), help="--trainer-ab regimes")
    ap.add_argument("--fusion", default="add", help="--trainer-ab fusion")
    ap.add_argument("--seed", type=int, default=0, help="--trainer-ab trial seed")
    ap.add_argument("--threads", type=int, default=1, help="--trainer-ab torch threads")
    ap.add_argument("--baseline", default="reference", help="--trainer-ab A arm (SpeedOptions.parse)")
    ap.add_argument("--speed", default="fast", help="--trainer-ab B arm (SpeedOptions.parse)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--plain-worker", nargs=3, metavar=("SPACE", "P", "PIN"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.plain_worker:
        return plain_main(args.plain_worker[0], int(args.plain_worker[1]), args.plain_worker[2] == "1")
    if args.trainer_ab:
        print(json.dumps(trainer_ab(args)))
        return 0

    work = Path(tempfile.mkdtemp(prefix="fusion-sweep-throughput-"))
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env.update(FUSION_SWEEP_CACHE=str(work / "cache"), PYTHONUNBUFFERED="1")
    try:
        result = placement_ab(args, work, env) if args.placement_ab else launch_vs_plain(args, work, env)
        result["loadavg_end"] = loadavg()
        print(json.dumps(result))
        return 0
    finally:
        if args.keep:
            print(f"(kept {work})", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

"""Sweep overhead: the same N trials through `fusion-sweep launch` and through a plain loop.

    python benchmarks/sweep_overhead.py [--quick] [--trials N] [--parallel P] [--repeats R]

Side A, `fusion-sweep launch SPACE`: Ray Tune (`reuse_actors=True`, `FailureConfig` retries),
one MLflow run per trial under a sweep parent run (per-epoch curves, params, artifacts), a
local Ray instance started and shut down by the command.
Side B, a plain loop: the same `TrialConfig`s (from the same search space) through
`fusion_sweep.trial.trainer.train_trial`, nothing else — in one process when P = 1, else in a pool
of P worker processes. Same parallelism as Ray's: each trial gets `resources.cpu` CPUs
(= its torch threads) and P = CPUs // resources.cpu trials run at once on both sides.

Both sides are timed as whole commands (interpreter start, imports, Ray start-up and
shutdown included), alternating A/B (ABBA...) so drifting machine load hits both alike. The
tokenized dataset is cached before timing, so neither side pays for it. Everything lives in a
temporary directory (search space, MLflow sqlite store, Ray Tune storage, data cache): nothing
is written to the repository.

Each run is also split into start-up (command start -> first trial starts), the trial phase
and wind-down (last trial ends -> exit), from the trials' MLflow runs (launch) or the workers'
own clocks (plain): the fixed cost is what Ray/CLI start-up adds once per launch, the trial
phase shows the per-trial cost (Tune reporting, MLflow logging, artifacts). From these it
projects the ratio for a larger sweep of the same trials (45 = the default sweep's size).

The last stdout line is JSON: {"ratio": median launch/plain wall time, "launch_s": [...],
"plain_s": [...], "trials": N, "parallel": P, "phases": ..., "projected_ratio_45_trials": ...}.
Target (issue 5): ratio <= 1.15.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# one timer for both sweep benchmarks (this script's directory is on sys.path when run)
from sweep_throughput import timed  # noqa: E402

FUSIONS = ["add", "concat", "gate-scalar", "gate-vector", "gate-mlp", "mlp", "gate-cnn", "mul"]


def write_space(path: Path, trials: int, dataset: str, epochs: int, cpu: int) -> None:
    """A search space with `trials` grid points: fusions × seeds on one dataset."""
    seeds = max(1, -(-trials // len(FUSIONS)))
    fusions = FUSIONS[: -(-trials // seeds)]
    assert len(fusions) * seeds >= trials
    import yaml

    space = {"name": "overhead", "description": "benchmarks/sweep_overhead.py",
             "datasets": [dataset], "pes": ["sinusoidal"], "fusions": fusions,
             "seeds": list(range(seeds)),
             "hyperparameters": {"all": {"epochs": epochs, "latency_repeats": 3}},
             "resources": {"cpu": cpu, "gpu": 0}, "max_failures": 0, "baseline": "add",
             "metric": "test_acc"}
    path.write_text("# fusion-sweep launch " + str(path) + "\n" + yaml.safe_dump(space, sort_keys=False))


# ------------------------------------------------------------------------ side B (plain)
def _train(config: dict) -> tuple[float, float]:
    from fusion_sweep.trial.config import TrialConfig
    from fusion_sweep.trial.trainer import train_trial

    t0 = time.time()
    train_trial(TrialConfig.from_dict(config))
    return t0, time.time()


def plain_main(space_path: str, parallel: int) -> int:
    """The plain loop, run as its own process (so its imports are timed, as launch's are)."""
    from fusion_sweep.space import load_space

    configs = [c.to_dict() for c in load_space(space_path).grid()]
    if parallel <= 1:
        spans = [_train(c) for c in configs]
    else:
        import multiprocessing as mp

        with mp.get_context("spawn").Pool(parallel) as pool:
            spans = pool.map(_train, configs, chunksize=1)
    print("SPANS " + json.dumps(spans))
    return 0


# -------------------------------------------------------------------------------- driver


def phases(spans: list[tuple[float, float]], start: float, end: float) -> dict:
    """Start-up (command start -> first trial starts), trial phase, wind-down (last trial
    ends -> command exits), and the mean trial duration."""
    first, last = min(a for a, _ in spans), max(b for _, b in spans)
    return {"startup_s": first - start, "trials_s": last - first, "winddown_s": end - last,
            "mean_trial_s": float(np.mean([b - a for a, b in spans]))}


def launch_spans(uri: str, sweep: str) -> list[tuple[float, float]]:
    """Each trial's MLflow run: opened -> closed (training, evaluation and logging)."""
    from fusion_sweep.tracking import SweepTracker

    runs = SweepTracker(uri).trial_runs(sweep)
    return [(r.info.start_time / 1000.0, r.info.end_time / 1000.0) for r in runs
            if r.info.end_time]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="4 trials of 3 epochs, one A/B pair "
                    "(start-up dominates: read the projection, not the ratio)")
    ap.add_argument("--trials", type=int, default=None, help="N (default 16; quick 4)")
    ap.add_argument("--epochs", type=int, default=None,
                    help="epochs per trial (default: the dataset's own, 8; quick 3)")
    ap.add_argument("--dataset", default="synthetic-short")
    ap.add_argument("--cpu", type=int, default=1, help="resources.cpu per trial = its threads")
    ap.add_argument("--parallel", type=int, default=None,
                    help="trials at once on both sides (default: CPUs // --cpu, as Ray does)")
    ap.add_argument("--repeats", type=int, default=None, help="A/B pairs (default 2; quick 1)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--plain-worker", nargs=2, metavar=("SPACE", "P"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.plain_worker:
        return plain_main(args.plain_worker[0], int(args.plain_worker[1]))

    trials = args.trials or (4 if args.quick else 16)
    repeats = args.repeats or (1 if args.quick else 2)
    ncpu = os.cpu_count() or 1
    parallel = args.parallel or max(1, ncpu // args.cpu)
    work = Path(tempfile.mkdtemp(prefix="fusion-sweep-overhead-"))
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env.update(FUSION_SWEEP_CACHE=str(work / "cache"), PYTHONUNBUFFERED="1")
    uri = f"sqlite:///{work / 'mlflow.db'}"
    try:
        from fusion_sweep.trial.config import TrialConfig
        from fusion_sweep.trial.data import load_encoded

        epochs = args.epochs or (3 if args.quick else TrialConfig.build(args.dataset).epochs)
        space = work / "overhead.yaml"
        write_space(space, trials, args.dataset, epochs, args.cpu)
        from fusion_sweep.space import load_space

        grid = load_space(str(space)).grid()
        n = len(grid)
        print(f"sweep_overhead: {n} trials ({args.dataset}, {epochs} epochs, {args.cpu} CPU / "
              f"thread(s) each), {parallel} at once on both sides, {repeats} A/B pair(s); "
              f"{ncpu} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
              f"work dir {work}", flush=True)
        # Untimed preparation: the tokenized data cache and the MLflow store's schema.
        os.environ["FUSION_SWEEP_CACHE"] = env["FUSION_SWEEP_CACHE"]
        c = grid[0]
        load_encoded(c.dataset, data_dir=c.data_dir, data_seed=c.data_seed, cache_dir=c.cache_dir,
                     limit_train=c.limit_train, limit_eval=c.limit_eval)
        import mlflow

        mlflow.set_tracking_uri(uri)
        mlflow.MlflowClient().search_experiments()

        launch_s: list[float] = []
        plain_s: list[float] = []
        split: dict[str, list[dict]] = {"launch": [], "plain": []}
        plain_cmd = [sys.executable, str(Path(__file__).resolve()), "--plain-worker", str(space),
                     str(parallel)]
        for r in range(repeats):
            order = ("plain", "launch") if r % 2 == 0 else ("launch", "plain")
            for side in order:
                if side == "plain":
                    log = work / f"plain-{r}.log"
                    s, t0, t1 = timed(plain_cmd, work, env, log)
                    line = [x for x in log.read_text().splitlines() if x.startswith("SPANS ")][-1]
                    spans = [tuple(x) for x in json.loads(line[len("SPANS "):])]
                    plain_s.append(s)
                else:
                    cmd = [sys.executable, "-m", "fusion_sweep.cli", "launch", str(space),
                           "--name", f"overhead-{r}", "--tracking-uri", uri,
                           "--storage", str(work / "ray_results"),
                           "--max-concurrent", str(parallel)]
                    s, t0, t1 = timed(cmd, work, env, work / f"launch-{r}.log")
                    spans = launch_spans(uri, f"overhead-{r}")
                    if len(spans) != n:
                        raise SystemExit(f"launch finished {len(spans)} of {n} trials; see "
                                         f"{work / f'launch-{r}.log'} (rerun with --keep)")
                    launch_s.append(s)
                ph = phases(spans, t0, t1)
                split[side].append(ph)
                print(f"  pair {r + 1}/{repeats}: {side:<6} {s:7.1f} s = start-up "
                      f"{ph['startup_s']:5.1f} + trials {ph['trials_s']:6.1f} + wind-down "
                      f"{ph['winddown_s']:4.1f}  (mean trial {ph['mean_trial_s']:.1f} s)", flush=True)
        ratios = [a / b for a, b in zip(launch_s, plain_s)]
        ratio = float(np.median(ratios))
        per_trial = (np.median(launch_s) - np.median(plain_s)) / n
        print(f"\nfusion-sweep launch (Ray Tune, reuse_actors=True, MLflow): "
              f"{np.median(launch_s):.1f} s  [{min(launch_s):.1f}–{max(launch_s):.1f}]")
        print(f"plain train_trial loop ({parallel} process(es)):                 "
              f"{np.median(plain_s):.1f} s  [{min(plain_s):.1f}–{max(plain_s):.1f}]")
        print(f"ratio launch / plain: {ratio:.3f}  (per pair: "
              f"{', '.join(f'{x:.3f}' for x in ratios)}); overhead {per_trial:+.1f} s per trial "
              f"all included; target <= 1.15")
        medph = {side: {k: float(np.median([p[k] for p in v])) for k in v[0]}
                 for side, v in split.items()}
        for side in ("launch", "plain"):
            m = medph[side]
            print(f"  {side:<6} medians: start-up {m['startup_s']:.1f} s, trials "
                  f"{m['trials_s']:.1f} s, wind-down {m['winddown_s']:.1f} s, mean trial "
                  f"{m['mean_trial_s']:.1f} s")
        # Fixed cost (start-up + wind-down) vs per-trial cost; project to a larger sweep.
        la, pl = medph["launch"], medph["plain"]
        fixed_l, fixed_p = la["startup_s"] + la["winddown_s"], pl["startup_s"] + pl["winddown_s"]
        waves = n / parallel
        per_wave_l, per_wave_p = la["trials_s"] / waves, pl["trials_s"] / waves
        proj = {}
        for big in (45, 225):
            w = big / parallel
            proj[big] = (fixed_l + w * per_wave_l) / (fixed_p + w * per_wave_p)
        print(f"  fixed cost: launch {fixed_l:.1f} s vs plain {fixed_p:.1f} s (Ray start-up, CLI "
              f"and trial-actor imports, MLflow parent run); trial phase per wave of {parallel}: "
              f"launch {per_wave_l:.1f} s vs plain {per_wave_p:.1f} s "
              f"({per_wave_l / per_wave_p - 1:+.1%})")
        print(f"  projected ratio for 45 trials of this size (the default sweep's count): "
              f"{proj[45]:.3f}; for 225: {proj[225]:.3f}")
        print(json.dumps({"ratio": round(ratio, 4), "ratios": [round(x, 4) for x in ratios],
                          "launch_s": [round(x, 2) for x in launch_s],
                          "plain_s": [round(x, 2) for x in plain_s], "trials": n,
                          "parallel": parallel, "cpu_per_trial": args.cpu, "epochs": epochs,
                          "dataset": args.dataset, "overhead_s_per_trial": round(float(per_trial), 2),
                          "phases": {k: {a: round(b, 2) for a, b in v.items()}
                                     for k, v in medph.items()},
                          "projected_ratio_45_trials": round(proj[45], 4),
                          "trial_phase_ratio": round(per_wave_l / per_wave_p, 4)}))
        return 0
    finally:
        if args.keep:
            print(f"(kept {work})", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

"""Adaptive seeds (`fusion-sweep launch --until-decided`, issue 13).

* families, seed rounds and budgets as pure functions of a space (fast);
* an adaptive sweep on the session's 2-node Ray cluster tracked by the session's real
  `mlflow server` (tests/conftest.py), SIGKILLed in its second round and launched again: it resumes where it stopped, the new seed trials are
  ordinary trials (their keys are the space's keys at those seeds), and no trial has two runs.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml

from fusion_sweep.launch import adaptive
from fusion_sweep.launch.adaptive import AdaptiveSettings, AdaptiveState, families
from fusion_sweep.plan.grid import key_of
from fusion_sweep.schema import ADAPTIVE
from fusion_sweep.plan.space import SPACE_DIR, load_space, parse_space
from tests.test_sweep_e2e import children_of, cli_env, kill_pids, trained_in_log, trial_runs


def _space(**kw) -> dict:
    d = yaml.safe_load((SPACE_DIR / "smoke.yaml").read_text())
    d.pop("tune")
    d.update(kw)
    return d


# ----------------------------------------------------------------------------- families
def test_fusion_baseline_families_are_dataset_encoder_pe():
    space = load_space("default")
    fams = families(space)
    assert [f.key for f in fams] == [(d, "standard", "sinusoidal") for d in space.datasets]
    assert all([a["fusion"] for a in f.arms] == ["concat", "gate-scalar"] for f in fams)
    assert AdaptiveState.for_space(space, AdaptiveSettings()).n_comparisons == 6


def test_variant_baseline_family_is_the_whole_dataset():
    space = load_space("ressformer")
    fams = families(space)
    assert [f.key for f in fams] == [(d,) for d in space.datasets]
    assert all(len(f.arms) == 6 and f.reference["pe"] == "sinusoidal" for f in fams)


def test_next_seeds_skip_tuning_seeds_and_stop_at_the_budget():
    space = parse_space({**_space(), "tune": {"seeds": [3], "budget": 1,
                                              "search": {"lr": {"loguniform": [1e-4, 1e-3]}}}})
    state = AdaptiveState.for_space(space, AdaptiveSettings(max_seeds=6, seed_batch=3))
    fam = state.families[0]
    assert fam.seeds == [0, 1] and state.next_seeds(fam) == [2, 4, 5]
    fam.seeds += [2, 4, 5]
    assert state.next_seeds(fam) == [6]
    fam.seeds += [6]
    assert state.next_seeds(fam) == []


def test_new_seed_points_are_the_spaces_own_trials():
    space = parse_space(_space())
    fam = families(space)[0]
    extended = parse_space(_space(seeds=[0, 1, 2, 3]))
    want = {key_of(c) for c in extended.grid() if c.seed in (2, 3)}
    assert {p.key for p in adaptive.family_points(space, fam, [2, 3])} == want


@pytest.mark.parametrize("kw, pattern", [
    (dict(max_seeds=1), r"--max-seeds must be an integer >= the space's 2 seeds, got 1"),
    (dict(seed_batch=0), r"--seed-batch must be a positive integer, got 0"),
    (dict(alpha=1.5), r"alpha must be in \(0, 1\), got 1.5"),
])
def test_bad_settings_are_named(kw, pattern):
    with pytest.raises(ValueError, match=pattern):
        AdaptiveState.for_space(parse_space(_space()), AdaptiveSettings(**kw))


def test_cli_flags_need_until_decided(capsys):
    from fusion_sweep.cli import main

    assert main(["launch", "smoke", "--max-seeds", "9", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "error: --max-seeds: only with --until-decided" in err and "Traceback" not in err
    assert main(["launch", "smoke", "--until-decided", "--max-seeds", "9", "--dry-run"]) == 0
    assert "adaptive seeds (--until-decided): 1 families, 1 comparisons; +5 seeds per round" \
        in capsys.readouterr().out


# ------------------------------------------------------------------- end to end, killed
@pytest.mark.slow
def test_killed_adaptive_sweep_resumes_without_duplicates(ray_cluster, mlflow_server, tmp_path):
    d = _space(name="adapt", seeds=[0, 1, 2], equivalence_margin=None)
    d["hyperparameters"]["all"].update(epochs=3, limit_train=512)
    path = tmp_path / "adapt.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    cmd = [sys.executable, "-m", "fusion_sweep.cli", "launch", str(path), "--tracking-uri",
           mlflow_server, "--storage", str(tmp_path / "ray_results"), "--max-concurrent", "2",
           "--address", ray_cluster.address,
           "--until-decided", "--max-seeds", "5", "--seed-batch", "2"]
    env = cli_env()  # with the cluster's RAY_AUTH_MODE, set by the ray_cluster fixture
    log1 = open(tmp_path / "launch1.log", "w")
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log1, stderr=subprocess.STDOUT)
    seen: set[int] = set()
    try:  # kill -9 once the second round (seeds 3-4) has started finishing trials
        # A guard against a hang, not a time check: generous, as the other xdist worker
        # shares the 2 cores with this sweep (tests/conftest.py).
        deadline = time.time() + 600
        while True:
            seen |= children_of(proc.pid)
            if trained_in_log(tmp_path / "launch1.log") >= 7:
                break
            assert proc.poll() is None, (tmp_path / "launch1.log").read_text()
            assert time.time() < deadline, "the adaptive sweep did not reach its second round"
            time.sleep(0.3)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_pids(seen, wait=15)
    out1 = (tmp_path / "launch1.log").read_text()
    assert "adaptive round 1: adding seeds to undecided families" in out1, out1[-3000:]
    before = {r.data.tags["fusion_sweep.trial_key"] for r in trial_runs(mlflow_server, "adapt")
              if r.info.status == "FINISHED"}

    r2 = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=800)
    out2 = r2.stdout + r2.stderr
    assert r2.returncode == 0, out2[-3000:]
    runs = trial_runs(mlflow_server, "adapt")
    keys = [r.data.tags["fusion_sweep.trial_key"] for r in runs]
    assert len(keys) == len(set(keys)), "a trial has two MLflow runs"
    assert all(r.info.status == "FINISHED" for r in runs)
    assert before <= set(keys)
    seeds = sorted({int(r.data.params["seed"]) for r in runs})
    last = re.findall(r"adaptive round (\d+): (.*)", out2)[-1]
    assert last[1].startswith("every comparison decided or out of seeds"), out2[-3000:]
    # the seeds run are the space's, then rounds of 2, never past the budget
    assert seeds == list(range(len(seeds))) and 3 <= len(seeds) <= 5 and (len(seeds) - 3) % 2 == 0
    want = {key_of(c) for c in load_space(path).grid()} | {
        p.key for s in seeds[3:] for fam in families(load_space(path))
        for p in adaptive.family_points(load_space(path), fam, [s])}
    assert set(keys) == want
    from fusion_sweep.tracking import runs as tracking

    tr = tracking.SweepTracker(mlflow_server, "fusion-sweep")
    parent = tr.find_parent("adapt")
    assert parent.info.status == "FINISHED" and "max_seeds" in parent.data.tags[ADAPTIVE]
    # `stats` reads the adaptive tag: sequential decisions first, fixed-n tables descriptive
    st = subprocess.run([sys.executable, "-m", "fusion_sweep.cli", "stats", "--sweep", "adapt",
                         "--tracking-uri", mlflow_server, "--bootstrap", "200"], cwd=tmp_path,
                        env=env, capture_output=True, text=True, timeout=300)
    assert st.returncode == 0, st.stderr[-2000:]
    assert "Sequential decisions (adaptive seeds, test_acc)" in st.stdout
    assert "descriptive: the seed count was chosen adaptively" in st.stdout
    print(f"\n[adaptive] killed after {len(before)} finished trials; resumed to {len(keys)} "
          f"trials, seeds {seeds}, no duplicates")


# -------------------------------------------------------------------- stats on an adaptive sweep
def test_stats_of_an_adaptive_sweep_reports_sequential_decisions(tmp_path, no_pdf_figures):
    """`stats` on a sweep launched with --until-decided: each comparison's anytime-valid
    decision and seeds used, and the fixed-n tables labelled descriptive (text, JSON, HTML)."""
    import json

    from fusion_sweep.analysis.demo import synthetic_results
    from fusion_sweep.analysis.render import write_report
    from fusion_sweep.analysis.report import Settings, analyze
    from fusion_sweep.analysis.schema import SEQUENTIAL_KEYS, TOP_LEVEL_KEYS
    from fusion_sweep.analysis.sequential_report import DESCRIPTIVE_LABEL
    from fusion_sweep.analysis.text import format_text
    from fusion_sweep.analysis.load import tidy

    df = tidy(synthetic_results())
    source = {"kind": "mlflow", "space": {"metric": "test_acc"},
              "adaptive": {"max_seeds": 20, "seed_batch": 5, "alpha": 0.05}}
    report = analyze(df, Settings(baseline="add", n_boot=200), source)
    seq = report.to_dict()["sequential"]
    assert "sequential" in TOP_LEVEL_KEYS and tuple(seq) == SEQUENTIAL_KEYS
    comps = [c for c in report.comparisons if c.metric == "test_acc"]
    assert seq["m"] == len(comps) == len(seq["results"]) and seq["alpha"] == 0.05
    from fusion_sweep.analysis.sequential import LEGACY_METHOD, sequential_result

    m = len(comps)
    for r, c in zip(seq["results"], comps):
        assert r["n"] == c.n and abs(r["mean_delta"] - c.mean_delta) < 1e-12
        # the decision is the CS at alpha/m over the sweep's m comparisons, on this
        # comparison's deltas in seed order (the order the sweep added them)
        d = np.asarray(c.deltas)[np.argsort(c.seeds, kind="stable")]
        # a record without "method" is a sweep launched before the betting default
        want = sequential_result(d, alpha=0.05, m=m, margin=c.equivalence_margin,
                                 higher_is_better=c.higher_is_better, method=LEGACY_METHOD)
        assert (r["m"], r["alpha_each"]) == (m, pytest.approx(0.05 / m))
        assert r["decision"] == want.decision
        assert (r["cs_low"], r["cs_high"]) == pytest.approx((want.cs_low, want.cs_high))
    # the demo's effects (+-0.01 to 0.02 on 5 seeds) are not decided at alpha/18; at alpha
    # alone (m = 1) some would be
    assert [r["decision"] for r in seq["results"]] == ["inconclusive"] * m
    text = format_text(report)
    assert "Sequential decisions (adaptive seeds, test_acc)" in text
    assert text.count(DESCRIPTIVE_LABEL) >= len({(c.dataset, c.pe) for c in comps})
    paths = write_report(report, tmp_path)
    html = paths["html"].read_text()
    assert "Adaptive seeds: sequential decisions" in html and 'id="sequential_cs"' in html
    assert (tmp_path / "sequential_cs.png").stat().st_size > 1000
    fixed = analyze(df, Settings(baseline="add", n_boot=200), {"kind": "table"})
    assert fixed.to_dict()["sequential"] is None and DESCRIPTIVE_LABEL not in format_text(fixed)
    json.dumps(report.to_dict(), allow_nan=False)


# ------------------------------------------------------- one round of the launch's loop
def _round(space, values_by_fusion, max_seeds=10, method="normal-mixture"):
    """One `next_round` over fake finished trials: value(fusion, seed) from the mapping."""
    import io

    values = {key_of(c): values_by_fusion[c.fusion](c.seed) for c in space.grid()}
    # the normal mixture by default: the round mechanics at effects it decides in a few seeds
    state = AdaptiveState.for_space(space, AdaptiveSettings(max_seeds=max_seeds, seed_batch=3,
                                                            method=method))
    out = io.StringIO()
    return adaptive.next_round(state, space, values, out), state, out.getvalue()


def test_a_round_stops_on_a_clear_effect_and_adds_seeds_to_an_undecided_one():
    space = parse_space(_space(seeds=list(range(6))))
    noise = [0.01, -0.02, 0.015, -0.005, 0.02, -0.01]
    clear = {"add": lambda s: 0.5 + noise[s], "concat": lambda s: 0.9 + noise[s] / 2}
    points, state, text = _round(space, clear)
    assert points == [] and state.last[0]["decision"] == "better"
    assert "every comparison decided or out of seeds: done" in text
    unclear = {"add": lambda s: 0.5 + noise[s], "concat": lambda s: 0.5 - noise[s]}
    points, state, text = _round(space, unclear)
    assert state.last[0]["decision"] == "inconclusive" and "adding seeds" in text
    assert sorted({p.config.seed for p in points}) == [6, 7, 8]
    assert sorted({p.config.fusion for p in points}) == ["add", "concat"]  # the whole family
    points, state, _ = _round(space, unclear, max_seeds=6)
    assert points == []  # out of seeds: stops undecided


def test_a_round_of_the_default_names_the_win_rate_and_decides_when_every_seed_wins():
    """The default method (win rate) with m = 1: 2^n / (n + 1) >= 1/0.05 first at n = 8, so
    8 seeds that all win decide `better`; 6 do not. Every line names the estimand."""
    wins = {"add": lambda s: 0.5 + 0.01 * (s % 3), "concat": lambda s: 0.52 + 0.01 * (s % 3)}
    points, state, text = _round(parse_space(_space(seeds=list(range(8)))), wins, 20,
                                 AdaptiveSettings().method)
    assert points == [] and state.last[0]["decision"] == "better"
    assert state.last[0]["estimand"] == "win rate" and state.last[0]["estimate"] == 1.0
    assert (state.last[0]["wins"], state.last[0]["losses"], state.last[0]["ties"]) == (8, 0, 0)
    assert "win-rate CS of the win rate" in text and "better (win rate)" in text
    assert "W/L/T 8/0/0" in text
    points, state, text = _round(parse_space(_space(seeds=list(range(6)))), wins, 20,
                                 AdaptiveSettings().method)
    assert state.last[0]["decision"] == "inconclusive" and len(points) > 0
    _, state, text = _round(parse_space(_space(seeds=list(range(6)))), wins, 20, "betting")
    assert "betting CS of the mean Δ" in text and "(mean Δ)" in text

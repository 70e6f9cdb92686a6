"""The rules that decide the answer, each pinned by a case that a plausible bug would flip.

One test per behaviour of issue 24's table: each was seen to fail on the named bug.

1. the verdict: better/worse is checked before equivalent;
2. `learned?` comes from the Holm-adjusted p, not the raw p;
3. every file of the trial package (trainer.py and batching.py among them) is in the code
   fingerprint;
4. the sequential report decides at alpha/m with the sweep's m, not m = 1;
5. the best-validation weights are restored before the test evaluation;
6. a one-sided claim is called `worse` only at alpha/m.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

import fusion_sweep
from fusion_sweep.analysis import stats as S

ALPHA = 0.05


# --------------------------------------------------------------------- 1. verdict order
@pytest.mark.parametrize("lo,hi,higher,want", [
    (0.002, 0.006, True, "better"),
    (-0.006, -0.002, True, "worse"),
    (-0.006, -0.002, False, "better"),
])
def test_a_small_real_difference_inside_the_margin_is_better_or_worse_not_equivalent(
        lo, hi, higher, want) -> None:
    """Holm p < alpha, t-interval excludes 0 AND TOST-equivalent: the difference is real
    (if small), so the verdict is better/worse; equivalent only when no difference is shown."""
    assert S.verdict(lo, hi, 0.001, 0.001, ALPHA, higher) == want
    # the same TOST p without a significant difference is equivalent
    assert S.verdict(lo, hi, 0.2, 0.001, ALPHA, higher) == "equivalent"


def test_report_calls_a_tight_small_effect_inside_the_margin_better() -> None:
    """Through compare_paired on real deltas: +0.004 +- 0.0005 on 8 seeds, margin 0.02."""
    rng = np.random.default_rng(0)
    y = rng.uniform(0.6, 0.7, 8)
    x = y + 0.004 + np.array([0.0005, -0.0005, 0.0003, -0.0003, 0.0001, -0.0001, 0.0, 0.0002])
    r = S.compare_paired(x, y, alpha=ALPHA, margin=0.02, n_resamples=200, rng=rng)
    assert r.t_p < 1e-6 and r.tost_p < 1e-6 and r.t_ci_low > 0  # both rules hold
    assert S.verdict(r.t_ci_low, r.t_ci_high, r.t_p, r.tost_p, ALPHA) == "better"


@pytest.mark.parametrize("higher,want", [(False, "better"), (True, "worse")])
def test_ratio_verdict_applies_the_rule_on_the_log_scale(higher: bool, want: str) -> None:
    """A cost 0.8x the baseline's on every seed with noise: the log-ratio t-interval excludes
    0, so better when lower is better; an undefined interval is inconclusive, never a call."""
    y = np.array([1.0, 1.2, 0.9, 1.1, 1.05])
    x = y * np.array([0.8, 0.82, 0.79, 0.81, 0.8])
    r = S.ratio_test(x, y, ALPHA)
    assert not r.exact and r.high < 1 and r.p < ALPHA  # the case's premise
    assert S.ratio_verdict(r, r.p, ALPHA, higher) == want
    assert S.ratio_verdict(r, 0.5, ALPHA, higher) == "inconclusive"  # Holm p too large
    one = S.ratio_test(x[:1], y[:1], ALPHA)  # 1 seed: ratio known, interval undefined
    assert np.isfinite(one.ratio) and S.ratio_verdict(one, 0.001, ALPHA, higher) == "inconclusive"
    # a deterministic cost (the same ratio on every seed) is decided by the ratio itself
    exact = S.ratio_test(0.8 * y, y, ALPHA)
    assert exact.exact and S.ratio_verdict(exact, float("nan"), ALPHA, higher) == want
    same = S.ratio_test(y, y, ALPHA)
    assert same.exact and S.ratio_verdict(same, float("nan"), ALPHA, higher) == "inconclusive"


def test_pairing_compares_encoder_fingerprints_by_default() -> None:
    """Two runs of one seed whose encoder-body initial weights differ are not a pair unless the
    caller says the encoders differ (then that fingerprint is expected to differ)."""
    from fusion_sweep.analysis.pairing import Cell, pair_problem

    fps = lambda enc: (("fp_split", "s"), ("fp_batch_order", "b"), ("fp_shared_init", "i"),  # noqa: E731
                       ("fp_dropout", "d"), ("fp_encoder_init", enc))
    a, b = Cell(0.8, fps("e1"), "c"), Cell(0.7, fps("e2"), "c")
    reason, detail = pair_problem(a, b, "x", "y")
    assert reason == "fingerprint_mismatch" and "encoder_init (e1 vs e2)" in detail
    assert pair_problem(a, b, "x", "y", same_encoder=False) == (None, "")
    assert pair_problem(a, Cell(0.7, fps("e1"), "c"), "x", "y") == (None, "")


@pytest.mark.parametrize("blank", ["", float("nan")])
def test_pairing_reads_a_blank_platform_as_none(blank: object) -> None:
    """A results file whose platform cell is blank (or NaN) gives the cell no platform, so it
    is never a platform of its own: a pair is judged on one platform only when both say it.
    A platform's label is kept where the file has one."""
    from fusion_sweep.analysis.pairing import cells_for
    from fusion_sweep.schema import PLATFORM_COLUMN, PLATFORM_LABEL_COLUMN

    row = dict(dataset="d", encoder="standard", pe="sinusoidal", fusion="add", seed=0,
               status="FINISHED", value=0.8, fp_split="s", fp_batch_order="b",
               fp_shared_init="i", fp_dropout="x", fp_encoder_init="e")
    df = pd.DataFrame([{**row, PLATFORM_COLUMN: blank, PLATFORM_LABEL_COLUMN: ""},
                       {**row, "seed": 1, PLATFORM_COLUMN: "p1", PLATFORM_LABEL_COLUMN: "cpu x"}])
    cells = cells_for(df, "value")
    assert cells[("d", "standard", "sinusoidal", "add", 0)].platform is None
    one = cells[("d", "standard", "sinusoidal", "add", 1)]
    assert one.platform == "p1" and one.platform_label == "cpu x"


def test_trial_key_is_16_hex_digits_of_the_semantic_config_and_code() -> None:
    """The trial key's form is part of every stored run's identity: 16 hex digits."""
    import hashlib
    import json

    from fusion_sweep.schema import trial_key

    config = {"dataset": "d", "fusion": "add", "seed": 0}
    key = trial_key(config, "c0de")
    payload = json.dumps({"config": config, "code": "c0de"}, sort_keys=True, default=str)
    assert key == hashlib.sha256(payload.encode()).hexdigest()[:16] and len(key) == 16


# ---------------------------------------------------------------- 2. learned? from Holm p
def _chance_arms(offsets: dict[str, list[float]]) -> pd.DataFrame:
    """One dataset (2 classes, chance 0.5), one arm per fusion with acc = 0.5 + offsets."""
    from fusion_sweep.analysis.demo import synthetic_results

    df = synthetic_results(pes=("sinusoidal",))
    df = df[(df["dataset"] == "synthetic-long") & df["fusion"].isin(offsets)].copy()
    df["num_classes"] = 2
    for fusion, off in offsets.items():
        m = df["fusion"] == fusion
        df.loc[m, "test_acc"] = 0.5 + np.array(off)[df.loc[m, "seed"].to_numpy()]
    return df.reset_index(drop=True)


def test_learned_is_decided_by_the_holm_p_not_the_raw_p() -> None:
    """Three arms whose raw one-sided p are each < alpha, but Holm-adjusted >= alpha for
    two of them: those are `no` (not shown to beat chance), the third `yes`."""
    from fusion_sweep.analysis.chance import arm_state, chance_tests
    from fusion_sweep.analysis.load import tidy
    from fusion_sweep.analysis.variants import Variant

    offsets = {"add": [0.030, 0.0, 0.025, 0.005, 0.015],        # raw p ~ 0.029
               "concat": [0.030, -0.002, 0.025, 0.005, 0.015],  # raw p ~ 0.035
               "gate-vector": [0.2, 0.21, 0.19, 0.2, 0.205]}    # raw p ~ 1e-7
    df = tidy(_chance_arms(offsets))
    tests, by_arm, _ = chance_tests(df, ["test_acc"], {"synthetic-long": 2}, ALPHA)
    raw = {t.fusion: sps.ttest_1samp(0.5 + np.array(offsets[t.fusion]), 0.5,
                                        alternative="greater").pvalue for t in tests}
    holm = dict(zip(raw, multipletests(list(raw.values()), method="holm")[1]))
    assert all(p < ALPHA for p in raw.values())  # the raw p would say yes everywhere
    assert holm["add"] >= ALPHA and holm["concat"] >= ALPHA and holm["gate-vector"] < ALPHA
    got = {t.fusion: t.learned for t in tests}
    assert got == {"add": "no", "concat": "no", "gate-vector": "yes"}
    assert {t.fusion: t.p_holm for t in tests} == pytest.approx(holm, abs=1e-12)
    v = next(iter(by_arm))[1]
    assert arm_state(by_arm, "synthetic-long", Variant(v.encoder, v.pe, "add"), "test_acc") == "no"


# ------------------------------------------------------------ 3. the code fingerprint's scope
PKG = Path(fusion_sweep.__file__).resolve().parent
TRIAL_FILES = sorted(p.relative_to(PKG).as_posix() for p in (PKG / "trial").rglob("*.py"))


def _registry_grid() -> list:
    """One trial per registry entry (every fusion, pe, encoder, optimizer, activation and
    dataset kind): together they run every definition a trial can run."""
    from fusion_sweep.trial.config import TrialConfig
    from fusion_sweep.trial.data.registry import DATASETS
    from fusion_sweep.trial.models.common import ACTIVATIONS
    from fusion_sweep.trial.models.encoder import ENCODERS
    from fusion_sweep.trial.models.fusion import FUSIONS
    from fusion_sweep.trial.models.positional import POSITIONAL
    from fusion_sweep.trial.optim import OPTIMIZERS

    kinds = {s.kind: n for n, s in DATASETS.items()}
    return ([TrialConfig.build("synthetic-short", fusion=f) for f in FUSIONS]
            + [TrialConfig.build("synthetic-short", pe=p, fusion="add") for p in POSITIONAL]
            + [TrialConfig.build("synthetic-short", encoder=e, pe="none") for e in ENCODERS]
            + [TrialConfig.build("synthetic-short", optimizer=o, activation=a)
               for o in OPTIMIZERS for a in ACTIVATIONS]
            + [TrialConfig.build(n) for n in kinds.values()])


def _keys_of(package_dir: Path | None) -> list[str]:
    from fusion_sweep.plan import trialcode

    trialcode.forget()
    return [c.trial_key(trialcode.trial_code(c, package_dir).fingerprint) for c in _registry_grid()]


def _reached_number(rel: str) -> tuple | None:
    """(line, start col, end col, text) of the first int/float (else str) literal in a
    definition of the file that some trial of the registry grid runs (in its components'
    closure); () where such a definition has no literal; None where no trial runs the file."""
    import ast

    from fusion_sweep import codeprint
    from fusion_sweep.plan import trialcode

    pkg = trialcode.package()
    units = _grid_units()
    module = pkg.module_of_path(PKG / rel)
    found = []
    reached = False
    for name, stmts in (pkg.module(module).units if pkg.module(module) else {}).items():
        if f"{module}:{name}" not in units:
            continue
        reached = True
        for node in (n for st in stmts for n in codeprint._walk(st)):
            if isinstance(node, ast.Constant) and type(node.value) in (int, float, str) \
                    and node.lineno == node.end_lineno:
                found.append((type(node.value) is str, node.lineno, node.col_offset,
                              node.end_col_offset, node))
    if not reached:
        return None
    if not found:
        return ()  # reached, with no literal
    *first, node = min(found, key=lambda f: f[:4])  # a number where there is one
    return (*first[1:], ast.get_source_segment((PKG / rel).read_text(), node))


@functools.cache
def _grid_units() -> frozenset[str]:
    """The definitions some trial of the registry grid runs (its components' closure): the
    same for every file, so found once, not once per file (about 14 s of a suite run's CPU)."""
    from fusion_sweep.plan import trialcode
    from fusion_sweep.trial.components import CUTS, components

    pkg = trialcode.package()
    return frozenset().union(*(pkg.closure(c.roots, CUTS)[0] for cfg in _registry_grid()
                               for c in components(cfg)))


@pytest.fixture(scope="module")
def package_copy(tmp_path_factory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("pkg")
    shutil.copytree(PKG, root / "fusion_sweep", ignore=shutil.ignore_patterns("__pycache__"))
    return root / "fusion_sweep", _keys_of(root / "fusion_sweep")


def test_trainer_and_batching_are_in_the_trial_package() -> None:
    assert {"trial/trainer.py", "trial/batching.py"} <= set(TRIAL_FILES)


# The trial files no trial runs a definition of (config validation, the launch's memory
# estimate, the device checker of the tests, the component table itself, torch's optimizers):
# editing them moves no key (issue 41).
NEVER_IN_A_TRIAL = ["trial/__init__.py", "trial/components.py", "trial/config.py",
                    "trial/devicecheck.py", "trial/memory.py", "trial/models/__init__.py",
                    "trial/models/determinism.py", "trial/optim.py"]


@pytest.mark.parametrize("rel", TRIAL_FILES)
def test_editing_what_a_trial_runs_moves_its_key_and_nothing_else_does(package_copy: Path,
                                                                      rel: str) -> None:
    """For every file under fusion_sweep/trial/: a new definition no trial reads moves no
    key; a changed constant in a definition some trial runs (the trainer's loop, the
    batching, the models, the data) moves that trial's key, so a sweep never resumes
    silently under code that trains differently; a file no trial runs moves none."""
    copy, before = package_copy
    f = copy / rel
    src = f.read_text()
    number = _reached_number(rel)
    assert (number is None) == (rel in NEVER_IN_A_TRIAL), rel
    try:
        f.write_text(src + "\n_FINGERPRINT_PROBE = 1\n")
        assert _keys_of(copy) == before, f"an unread definition in {rel} moved a key"
        if number:  # (common.py's feed-forward: tests/test_code_components.py edits it)
            line, a, b, text = number
            lines = src.splitlines(keepends=True)
            plus = " + ''" if text[-1] in "'\"" else " + 1"
            lines[line - 1] = lines[line - 1][:a] + f"({text}{plus})" + lines[line - 1][b:]
            f.write_text("".join(lines))
            assert _keys_of(copy) != before, f"editing {rel} line {line} left every key"
    finally:
        f.write_text(src)


# ---------------------------------------------------------- 4. the sequential report's m
def _comp(i: int, deltas: list[float]) -> dict:
    return {"seeds": list(range(len(deltas))), "deltas": deltas, "equivalence_margin": None,
            "higher_is_better": True, "dataset": "d", "variant": f"v{i}",
            "baseline_variant": "base"}


def test_sequential_report_decides_at_alpha_over_the_sweeps_m() -> None:
    """One comparison clearly decided at alpha = 0.05 alone, not at alpha/6: the report
    decides at the family's m (fixed at launch), so it stays inconclusive with 6. The
    normal mixture is used because its premise case decides at n = 6 (the betting method
    decides nothing this small at any m; the win-rate default needs 6 wins even at m = 1)."""
    from fusion_sweep.analysis.sequential import (LEGACY_METHOD, from_comparisons,
                                                  sequential_result)

    nm = LEGACY_METHOD  # "normal-mixture"
    strong = [0.0235, 0.0282, 0.0233, 0.007, 0.0291, 0.0245]
    alone = sequential_result(strong, alpha=ALPHA, m=1, method=nm)
    six = sequential_result(strong, alpha=ALPHA, m=6, method=nm)
    assert (alone.decision, six.decision) == ("better", "inconclusive")  # the case's premise
    null = [0.01, -0.01, 0.005, -0.004, 0.0, 0.002]
    comps = [_comp(0, strong)] + [_comp(i, null) for i in range(1, 6)]
    res = from_comparisons(comps, ALPHA, m=len(comps), method=nm)
    assert [r.m for r in res] == [6] * 6 and res[0].alpha_each == pytest.approx(ALPHA / 6)
    assert [r.decision for r in res] == ["inconclusive"] * 6
    assert (res[0].cs_low, res[0].cs_high) == pytest.approx((six.cs_low, six.cs_high))
    # with a family of one the same deltas decide
    (one,) = from_comparisons([_comp(0, strong)], ALPHA, m=1, method=nm)
    assert one.decision == "better" and one.m == 1


def test_a_family_with_no_seeds_run_yet_gets_its_first_batch() -> None:
    """seeds_run = 0 (a family planned but not started) is valid: undecided, seed_batch more."""
    from fusion_sweep.analysis.sequential import stopping_rule

    plan = stopping_rule({"f": {"c": []}}, seeds_run={"f": 0}, max_seeds=10, seed_batch=4)
    assert plan.undecided == ("f",) and plan.seeds_to_add == {"f": 4} and not plan.stop
    assert plan.seeds_run == {"f": 0}


# ------------------------------------------------------------------ 5. best-epoch restore
def test_test_metrics_come_from_the_best_validation_epoch() -> None:
    """A run whose best validation epoch is not its last: test predictions equal those of
    the best epoch's weights (the saved checkpoint), not the last epoch's."""
    import torch

    from fusion_sweep.trial.config import TrialConfig
    from fusion_sweep.trial.seeds import build_model
    from fusion_sweep.trial.trainer import SpeedOptions, predict, train_trial
    from tests.test_trainer import random_split

    from fusion_sweep.trial.data.types import EncodedData

    rng = np.random.default_rng(0)
    data = EncodedData("synthetic-short", random_split(rng, 64), random_split(rng, 24),
                       random_split(rng, 24), vocab_size=60, num_classes=4)
    cfg = TrialConfig.build("synthetic-short", d_model=16, heads=2, layers=1, dim_ff=32,
                            epochs=6, batch_size=8, max_len=80, num_threads=1,
                            latency_repeats=1, lr=0.02, patience=0, save_checkpoint=True)
    speed = SpeedOptions.reference()
    res = train_trial(cfg, data=data, speed=speed)
    vals = [r.val_acc for r in res.curve]
    assert res.best_epoch < res.epochs_run, vals  # the case's premise: not the last epoch
    assert res.best_val_acc == max(vals) == vals[res.best_epoch - 1]
    assert res.best_epoch == vals.index(max(vals)) + 1  # a later tie does not replace it
    model = build_model(cfg, data.vocab_size, data.num_classes, data.pad_id)
    model.load_state_dict(res.checkpoint)
    with torch.no_grad():
        _, pred, probs = predict(model, data.test, cfg, torch.device("cpu"), data.pad_id)
        _, vpred, _ = predict(model, data.val, cfg, torch.device("cpu"), data.pad_id)
    assert float(np.mean(vpred == data.val.labels)) == res.best_val_acc
    assert res.predictions["pred"] == pred.tolist()
    assert np.allclose(res.predictions["probs"], np.round(probs, 6), atol=2e-6)
    assert res.test_acc == float(np.mean(pred == data.test.labels))
    # evaluation-split statistics: median length and analytic FLOPs per token there
    from fusion_sweep.trial.batching import truncated_lengths

    median = float(np.median(truncated_lengths(data.test, cfg.max_len)))
    n = max(int(round(median)), 1)
    assert res.median_tokens == median
    assert res.flops_per_token == pytest.approx(model.forward_flops(n) / n)


def test_seed_streams_are_pinned() -> None:
    """The derivation of every random stream's seed is part of what a published trial seed
    means: these values must never change silently (a change re-randomises every trial)."""
    from fusion_sweep.trial.seeds import STREAMS, derive_seed

    assert STREAMS == ("data_order", "shared_init", "fusion_init", "pe_init", "dropout",
                       "encoder_init")
    assert [derive_seed(0, s, "synthetic-short") for s in STREAMS] == [
        1790069401447207592, 5949921529825528188, 528118176088482170, 6510825008474673201,
        7976294113664144950, 935228173039918870]
    assert derive_seed(3, "dropout", "imdb") == 2790574095005791431


# ------------------------------------------------------------- 6. one-sided claim at alpha/m
def _one_sided(p: float, p_opposite: float):
    """A one-sided claim test's statistics before Holm (claims._Stats)."""
    from fusion_sweep.analysis.claims import GREATER, Plan, _Result, _Stats

    plan = Plan("C", "C · d", ("d",), "test_acc", "arm - ref", alternative=GREATER,
                holds_if=("better",), contradicted_if=("worse",))
    return _Stats(_Result(plan), p=p, p_opposite=p_opposite)


@pytest.mark.parametrize("p_opposite,want", [(0.03, "inconclusive"), (0.004, "worse")])
def test_one_sided_claim_is_worse_only_at_alpha_over_m(p_opposite: float, want: str) -> None:
    """A family of 4 one-sided claim tests: the claimed direction is Holm-adjusted; the
    opposite direction needs p < alpha/4 = 0.0125 to call the claim contradicted."""
    from fusion_sweep.analysis.claims import _holm

    pre = [_one_sided(0.6, p_opposite)] + [_one_sided(0.5, 0.5) for _ in range(3)]
    tests, m, _ = _holm(pre, ALPHA, frozenset())
    assert m == 4
    assert tests[0].verdict == want
    assert tests[0].support == ("CONTRADICTS" if want == "worse" else "does not decide")
    assert [t.verdict for t in tests[1:]] == ["inconclusive"] * 3


def test_one_sided_claim_alone_is_worse_at_alpha() -> None:
    """A family of one: the opposite direction needs p < alpha/1, not alpha/2."""
    from fusion_sweep.analysis.claims import _holm

    tests, m, _ = _holm([_one_sided(0.6, 0.03)], ALPHA, frozenset())
    assert m == 1 and tests[0].verdict == "worse"


def test_one_sided_claim_on_a_cost_ratio_reads_the_ratio() -> None:
    """A cost claim (a ratio, lower is better) that is one-sided: an arm 1.5x slower with a
    small Holm p is `worse` by the ratio rule, never `better` by the one-sided p alone."""
    from dataclasses import replace

    from fusion_sweep.analysis.claims import _holm
    from fusion_sweep.analysis.stats import RatioResult

    slower = RatioResult(ratio=1.5, low=1.3, high=1.7, p=0.001, exact=False)
    pre = [replace(_one_sided(0.001, 0.999), ratio=slower, higher=False)]
    tests, _, _ = _holm(pre, ALPHA, frozenset())
    assert tests[0].verdict == "worse"


# ---------------------------------------------------------------------- 7. the resume rule
def _tracker(runs: list[tuple[str, str, str]]):
    """A SweepTracker over fixed trial runs, oldest first, each (trial key, status, run id)."""
    from types import SimpleNamespace

    from fusion_sweep.tracking.runs import SweepTracker

    class Tracker(SweepTracker):
        def __init__(self) -> None:  # no MLflow: only the resume rule is under test
            self._by_key, self.calls = {}, 0
            self._runs = [SimpleNamespace(info=SimpleNamespace(status=s, run_id=r),
                                          data=SimpleNamespace(tags={"fusion_sweep.trial_key": k}))
                          for k, s, r in runs]

        def trial_runs(self, sweep: str) -> list:
            self.calls += 1
            return self._runs if sweep == "s" else []
    return Tracker()


def test_resume_rule_a_finished_run_wins_whatever_came_after() -> None:
    """A trial is skipped iff one of its runs FINISHED (the oldest finished run is the one
    named); otherwise the latest run's status says why it is retried; no run: train."""
    tr = _tracker([("k1", "FAILED", "r1"), ("k1", "FINISHED", "r2"), ("k1", "RUNNING", "r3"),
                   ("k1", "FINISHED", "r4"), ("k2", "FAILED", "r5"), ("k2", "KILLED", "r6"),
                   ("k3", "RUNNING", "r7")])
    assert tr.trial_status("s", "k1") == ("FINISHED", "r2")
    assert tr.trial_status("s", "k2") == ("KILLED", "r6")
    assert tr.trial_status("s", "k3") == ("RUNNING", "r7")
    assert tr.trial_status("s", "k4") == ("", "")
    assert tr.trial_status("other", "k1") == ("", "")
    assert tr.calls == 2  # one MLflow query per sweep and launch, then cached


# ---------------------------------------------------------------- 8. the fusion operators
def _cat(E, P):
    return np.concatenate([E, np.broadcast_to(P, E.shape)], axis=-1)  # (B, L, 2d)


def _lin(x, layer):
    return x @ layer.weight.detach().numpy().T + layer.bias.detach().numpy()


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def _mix(g, E, P):
    return g * E + (1.0 - g) * P


def _gate_cnn(f, E, P, mask):
    """Depth-wise conv of width 2K+1 over P (zeroed at pads, zero-padded at the ends), mean
    over features plus the scalar bias, sigmoid: one gate per position."""
    w = f.conv.weight.detach().numpy()[:, 0, :]  # (d, 2K+1)
    K = w.shape[1] // 2
    Pm = np.broadcast_to(P, E.shape) * mask[..., None]  # (B, L, d)
    padded = np.pad(Pm, ((0, 0), (K, K), (0, 0)))
    L = E.shape[1]
    c = sum(padded[:, k:k + L, :] * w[:, k] for k in range(2 * K + 1))  # (B, L, d)
    g = _sig(c.mean(-1, keepdims=True) + f.bias.detach().numpy())
    return _mix(g, E, P)


REFERENCE = {
    "add": lambda f, E, P, m: E + P,
    "mul": lambda f, E, P, m: E * P,
    "concat": lambda f, E, P, m: _lin(_cat(E, P), f.proj),
    "gate-scalar": lambda f, E, P, m: _mix(_sig(_lin(_cat(E, P), f.gate)), E, P),
    "gate-vector": lambda f, E, P, m: _mix(_sig(_lin(_cat(E, P), f.gate)), E, P),
    "gate-mlp": lambda f, E, P, m: _mix(
        _sig(_lin(np.maximum(_lin(_cat(E, P), f.fc1), 0), f.fc2)), E, P),
    "mlp": lambda f, E, P, m: _lin(np.maximum(_lin(_cat(E, P), f.fc1), 0), f.fc2),
    "gate-cnn": _gate_cnn,
}


def test_every_fusion_operator_has_a_reference_formula() -> None:
    from fusion_sweep.trial.models.fusion import FUSIONS

    assert set(REFERENCE) == set(FUSIONS)


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_fusion_operator_computes_its_formula(name: str) -> None:
    """H from the operator equals its formula (paper eq. 1-6) computed by hand in numpy from
    the operator's own parameters, all randomised (a zero bias would hide a dropped term)."""
    import torch

    from fusion_sweep.trial.models.fusion import build_fusion

    gen = torch.Generator().manual_seed(0)
    d, B, L = 6, 2, 7
    f = build_fusion(name, d, gate_cnn_kernel=3)
    with torch.no_grad():
        for p in f.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    rng = np.random.default_rng(1)
    E = rng.normal(size=(B, L, d)).astype(np.float32)
    P = rng.normal(size=(1, L, d)).astype(np.float32)
    mask = np.ones((B, L), bool)
    mask[1, 5:] = False  # the second document is padded
    with torch.no_grad():
        H = f(torch.from_numpy(E), torch.from_numpy(P), torch.from_numpy(mask)).numpy()
    want = REFERENCE[name](f, E.astype(np.float64), P.astype(np.float64), mask)
    assert H.shape == (B, L, d)
    np.testing.assert_allclose(H, want, rtol=1e-4, atol=1e-5)


def test_gate_cnn_of_width_one_is_a_pointwise_gate() -> None:
    """gate_cnn_kernel = 1 (K = 0) is a valid, if degenerate, Gate-CNN: each position's gate
    from its own P only."""
    import torch

    from fusion_sweep.trial.models.fusion import build_fusion

    f = build_fusion("gate-cnn", 4, gate_cnn_kernel=1)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in f.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    rng = np.random.default_rng(2)
    E, P = rng.normal(size=(1, 5, 4)).astype(np.float32), rng.normal(size=(1, 5, 4)).astype(np.float32)
    mask = np.ones((1, 5), bool)
    with torch.no_grad():
        H = f(torch.from_numpy(E), torch.from_numpy(P), torch.from_numpy(mask)).numpy()
    np.testing.assert_allclose(H, _gate_cnn(f, E.astype(float), P.astype(float), mask),
                               rtol=1e-4, atol=1e-5)



# ----------------------------------------------------- 9. the statistics at their edges
def test_two_seeds_are_enough_for_the_t_tests_and_undefined_below() -> None:
    """n = 2 with spread: t-test, one-sample t and chance test are defined (df 1); n = 1 or
    no spread: nan with the df still reported; margin 0 is no equivalence test."""
    x, y = np.array([0.8, 0.9]), np.array([0.7, 0.75])
    assert S.has_spread(S.paired_deltas(x, y)) and not S.has_spread(np.array([0.1, 0.1]))
    t = S.paired_t(x, y, ALPHA)
    ref = sps.ttest_rel(x, y)
    assert (t.p, t.df) == pytest.approx((ref.pvalue, 1.0)) and t.sd == pytest.approx(
        np.std(x - y, ddof=1))
    one = S.paired_t(x[:1], y[:1], ALPHA)
    assert np.isnan(one.p) and np.isnan(one.sd) and one.df == 0.0
    flat = S.paired_t(x, x - 0.1, ALPHA)
    assert np.isnan(flat.p) and flat.df == 1.0 and flat.sd == pytest.approx(0.0)
    d = np.array([0.02, 0.05, 0.01, 0.04])
    o = S.one_sample_t(d, ALPHA)
    ref1 = sps.ttest_1samp(d, 0.0)
    assert (o.mean, o.p, o.df) == pytest.approx((d.mean(), ref1.pvalue, 3.0))
    g = S.one_sample_t(d, ALPHA, "greater")
    assert g.p == pytest.approx(sps.ttest_1samp(d, 0.0, alternative="greater").pvalue)
    two = S.one_sample_t(d[:2], ALPHA)
    assert np.isfinite(two.p) and two.df == 1.0
    assert np.isnan(S.one_sample_t(d[:1], ALPHA).p) and S.one_sample_t(d[:1], ALPHA).df == 0.0
    c_t, c_p = S.beats_chance(np.array([0.6, 0.7]), 0.5)
    assert c_p == pytest.approx(sps.ttest_1samp([0.6, 0.7], 0.5, alternative="greater").pvalue)
    assert np.isnan(S.tost_p(x, y, 0.0)) and np.isfinite(S.tost_p(x, y, 0.5))
    with pytest.raises(ValueError, match="1-D of equal length"):
        S.paired_deltas(x, y[:1])
    with pytest.raises(ValueError, match="1-D of equal length"):
        S.paired_deltas(x.reshape(1, 2), y.reshape(1, 2))


# ------------------------------------------- 10. exact boundaries of the verdict and chance
# Each case below sits exactly on a threshold, where `<` and `<=` (or `>` and `>=`) disagree:
# the survivors of the partial full mutation run (benchmarks/README.md).
NAN_ = float("nan")


@pytest.mark.parametrize("lo,hi,p_holm,tost,want", [
    (0.0, 0.2, 0.001, NAN_, "inconclusive"),   # bound exactly 0: not excluded
    (-0.2, 0.0, 0.001, NAN_, "inconclusive"),
    (0.01, 0.2, ALPHA, NAN_, "inconclusive"),                  # Holm p exactly alpha: not < alpha
    (-0.1, 0.2, 0.5, ALPHA, "inconclusive"),                   # TOST p exactly alpha
    (0.01, 0.2, 0.0499, NAN_, "better"),                       # just inside: the rule does fire
    (-0.1, 0.2, 0.5, 0.0499, "equivalent"),
])
def test_verdict_thresholds_are_strict(lo, hi, p_holm, tost, want) -> None:
    assert S.verdict(lo, hi, p_holm, tost, ALPHA) == want
    if want == "inconclusive" and hi == 0.0:  # the mirror case, lower is better
        assert S.verdict(-0.2, 0.0, 0.001, NAN_, ALPHA, higher_is_better=False) == want


def test_ratio_verdict_of_exact_costs_and_of_an_undefined_bound() -> None:
    """An exact ratio (no seed noise) is the answer by itself, on either side of 1; a noisy
    ratio whose lower bound is undefined is inconclusive even if its upper bound is below 1."""
    exact = {r: S.RatioResult(r, r, r, NAN_, True) for r in (1.5, 0.5, 1.0)}
    assert S.ratio_verdict(exact[1.5], NAN_, ALPHA, True) == "better"
    assert S.ratio_verdict(exact[0.5], NAN_, ALPHA, True) == "worse"
    assert S.ratio_verdict(exact[1.5], NAN_, ALPHA, False) == "worse"
    assert S.ratio_verdict(exact[1.0], NAN_, ALPHA, True) == "inconclusive"
    half_known = S.RatioResult(0.5, NAN_, 0.8, 0.001, False)
    assert S.ratio_verdict(half_known, 0.001, ALPHA, False) == "inconclusive"


def _counts_frame(values: dict[str, list[float]]) -> pd.DataFrame:
    return pd.DataFrame([{"dataset": d, "num_classes": k} for d, ks in values.items() for k in ks])


def test_class_counts_accepts_integers_from_two_and_names_each_problem() -> None:
    from fusion_sweep.analysis.chance import class_counts
    from fusion_sweep.analysis.schema import AnalysisError

    got = class_counts(_counts_frame({"z-topic": [3, 3], "a-binary": [2], "m-none": [NAN_]}))
    assert got == {"a-binary": 2, "m-none": None, "z-topic": 3}
    assert list(got) == ["a-binary", "m-none", "z-topic"]  # report order: by dataset name
    with pytest.raises(AnalysisError, match="'num_classes' disagrees within dataset 'd': 2, 3"):
        class_counts(_counts_frame({"d": [2, 3]}))
    with pytest.raises(AnalysisError, match="'num_classes' disagrees within dataset 'd': 1, 2"):
        class_counts(_counts_frame({"d": [1, 2]}))  # disagreement is named before range
    for bad in (1, 2.5, 0):
        with pytest.raises(AnalysisError, match=f"must be an integer >= 2, got {bad:g}"):
            class_counts(_counts_frame({"d": [bad]}))
    assert class_counts(_counts_frame({"d": [1]}), {"d": 4}) == {"d": 4}  # --num-classes wins


def test_an_arm_whose_holm_p_equals_alpha_is_not_learned() -> None:
    """`learned?` is yes only when the Holm p is below alpha; at exactly alpha it is no."""
    from fusion_sweep.analysis.chance import chance_tests
    from fusion_sweep.analysis.load import tidy

    df = tidy(_chance_arms({"add": [0.030, 0.0, 0.025, 0.005, 0.015]}))
    (first,), _, _ = chance_tests(df, ["test_acc"], {"synthetic-long": 2}, ALPHA)
    p = first.p_holm
    (at,), _, _ = chance_tests(df, ["test_acc"], {"synthetic-long": 2}, p)
    assert at.learned == "no"
    (above,), _, _ = chance_tests(df, ["test_acc"], {"synthetic-long": 2}, np.nextafter(p, 1))
    assert above.learned == "yes"

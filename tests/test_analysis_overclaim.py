"""Issue 31 section 2: every overclaim path, through `fusion-sweep stats --results FILE
--format json` on the small adversarial files of tests/overclaim_files.py. Each test's
docstring says what stats printed before (main at 3673c62)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from fusion_sweep import cli

sys.path.insert(0, str(Path(__file__).parent))
import overclaim_files as files  # noqa: E402

FAST = ["--bootstrap", "200"]


def _stats(tmp_path: Path, df: pd.DataFrame, capsys, *argv: str) -> dict:
    p = tmp_path / "results.csv"
    df.to_csv(p, index=False)
    args = cli.build_parser().parse_args(["stats", "--results", str(p), "--format", "json",
                                          *FAST, *argv])
    assert args.func(args) == 0
    return json.loads(capsys.readouterr()[0])


def _one(rep: dict, metric: str = "test_acc") -> dict:
    (c,) = [c for c in rep["comparisons"] if c["metric"] == metric]
    return c


def test_chance_is_the_majority_rate(tmp_path, capsys) -> None:
    """Before: two majority-class predictors on a 58/42 split, both 'learned' (vs 1/K = 0.5)
    and `equivalent` (TOST p_holm 5e-5). After: `not learned`, chance 0.578 from the data."""
    rep = _stats(tmp_path, files.imbalanced_chance(), capsys, "--equivalence-margin", "0.01")
    c = _one(rep)
    assert (c["learned"], c["baseline_learned"], c["verdict"]) == ("no", "no", "not learned")
    assert c["chance_level"] == pytest.approx(0.578)
    assert {t["chance_source"] for t in rep["chance"]["tests"]} == {"test majority rate"}
    assert {(t["learn_count"], t["learn_n"]) for t in rep["chance"]["tests"]} == {(0, 5)}


def test_without_a_majority_rate_chance_is_a_labelled_1_over_k(tmp_path, capsys) -> None:
    rep = _stats(tmp_path, files.imbalanced_chance().drop(columns=["test_majority_rate"]),
                 capsys)
    assert {t["chance_source"] for t in rep["chance"]["tests"]} == {
        "1/K (no test_majority_rate recorded)"}
    assert {t["chance_level"] for t in rep["chance"]["tests"]} == {0.5}


def test_the_chance_guard_covers_every_metric(tmp_path, capsys) -> None:
    """Before: `not learned` on test_acc beside `better` (p_holm 1e-5) on test_macro_f1 of
    the same two chance-level arms. After: `not learned` on both."""
    rep = _stats(tmp_path, files.chance_other_metric(), capsys, "--metric", "test_acc",
                 "--metric", "test_macro_f1")
    assert {c["metric"]: c["verdict"] for c in rep["comparisons"]} == {
        "test_acc": "not learned", "test_macro_f1": "not learned"}
    assert _one(rep, "test_macro_f1")["win_verdict"] == "not learned"
    alone = _stats(tmp_path, files.chance_other_metric(), capsys, "--metric", "test_macro_f1")
    assert _one(alone, "test_macro_f1")["verdict"] == "not learned"  # test_acc not asked for


@pytest.mark.parametrize("drop_k", [False, True])
def test_the_guards_are_symmetric(tmp_path, capsys, drop_k: bool) -> None:
    """Issue 31: an arm at chance vs a learned reference printed `worse` with --baseline add
    while --baseline concat withheld `better`. Issue 39 (one guard rule): with exactly one
    arm learned the difference stands, in both directions alike (`worse` for concat vs add,
    `better` for add vs concat); with no class count no arm is shown to learn, and both
    directions are withheld, flagged with the reason."""
    df = files.asymmetric_guard()
    df = df.drop(columns=["num_classes"]) if drop_k else df
    expected = {"add": "worse", "concat": "better"}
    for baseline in ("add", "concat"):
        c = _one(_stats(tmp_path, df, capsys, "--equivalence-margin", "0.1",
                        "--baseline", baseline))
        if drop_k:
            assert c["verdict"] == "inconclusive" and c["win_verdict"] == "inconclusive"
            assert c["verdict_flags"][0].startswith(("no 'worse'", "no 'better'"))
            assert "class count unknown" in c["verdict_flags"][0]
        else:
            assert {c["learned"], c["baseline_learned"]} == {"yes", "no"}
            assert c["verdict"] == expected[baseline]
            assert not any(f.startswith("no '") for f in c["verdict_flags"])


def test_a_blank_status_is_dropped_not_finished(tmp_path, capsys) -> None:
    """Before: the two blank-status rows were read as FINISHED (n = 5). After: dropped with
    the reason blank_status (n = 4)."""
    rep = _stats(tmp_path, files.blank_status(), capsys)
    assert [(d["seed"], d["reason"]) for d in rep["dropped"]] == [(3, "blank_status")]
    assert _one(rep)["n"] == 4


def test_direction_is_refused_for_a_metric_of_known_direction(tmp_path, capsys) -> None:
    """Before: `--direction higher` silently made a 19% faster arm `worse` on latency.
    After: one error line."""
    p = tmp_path / "r.csv"
    files.latency().to_csv(p, index=False)
    args = cli.build_parser().parse_args(["stats", "--results", str(p), "--metric",
                                          "latency_ms_per_sample", "--direction", "higher"])
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1
    assert "--direction higher contradicts the known direction of metric " \
           "'latency_ms_per_sample' (lower is better: the metric table says so)" in err


def test_collapsed_seeds_say_the_mean_verdict_rests_on_normality(tmp_path, capsys) -> None:
    """Before: `better` with no word on the two seeds where `add` sat at chance. After: the
    verdict names its estimand, the flag says it rests on normality, the win rate is exact."""
    c = _one(_stats(tmp_path, files.collapse(), capsys))
    assert (c["verdict"], c["estimand"]) == ("better", "mean Δ")
    assert "rests on normality (standard/sinusoidal/add at chance on 2 of 5 seeds)" \
        in c["verdict_flags"]
    assert (c["wins"], c["losses"], c["ties"], c["win_verdict"]) == (5, 0, 0, "inconclusive")
    assert c["sign_p"] == pytest.approx(0.0625)


@pytest.mark.parametrize("metric, direction, expected", [
    ("test_acc", [], "better"), ("score", ["--direction", "lower"], "worse")])
def test_a_decided_win_rate_reads_the_metric_direction(tmp_path, capsys, metric, direction,
                                                       expected) -> None:
    """concat is above add on all 8 seeds (sign p = 2 / 2^8): the win-rate verdict is `better`
    when higher is better and `worse` when lower is, beside the mean-Δ verdict."""
    accs = [0.80, 0.82, 0.79, 0.81, 0.83, 0.78, 0.80, 0.82]
    rows = [{"dataset": "syn", "pe": "sinusoidal", "fusion": f, "seed": s, "status": "FINISHED",
             metric: a + (0.01 + 0.002 * s if f == "concat" else 0.0), "num_classes": 2}
            for f in ("add", "concat") for s, a in enumerate(accs)]
    c = _one(_stats(tmp_path, pd.DataFrame(rows), capsys, "--metric", metric, *direction),
             metric)
    assert (c["wins"], c["win_verdict"], c["verdict"]) == (8, expected, expected)

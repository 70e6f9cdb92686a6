"""Issue 39: one guard rule for every verdict, and the overclaim paths it closes.

The rule (fusion_sweep.analysis.guard): neither arm learned -> `not learned` on every metric
and estimand (sequential decisions included); exactly one arm learned -> better/worse stand;
no arm shown to learn -> none given; `equivalent` only between arms both shown to beat the
majority rate by the exact per-seed test. Each test's docstring says what stats printed
before (main at 200d0b8)."""
from __future__ import annotations

import itertools
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from fusion_sweep import cli
from fusion_sweep.analysis.caveats import full
from fusion_sweep.analysis.guard import Learning, guard
from fusion_sweep.analysis.schema import BETTER, EQUIVALENT, INCONCLUSIVE, NOT_LEARNED, WORSE
from fusion_sweep.analysis.variants import Variant

sys.path.insert(0, str(Path(__file__).parent))
import fusion_matters_files as fm  # noqa: E402
import overclaim_files as files  # noqa: E402

FAST = ["--bootstrap", "200"]
CONCAT, ADD = (Variant("standard", "sinusoidal", f) for f in ("concat", "add"))
STATES = ("yes", "no", "unknown", "n/a")


def _stats(tmp_path: Path, df: pd.DataFrame, capsys, *argv: str) -> dict:
    p = tmp_path / "results.csv"
    df.to_csv(p, index=False)
    args = cli.build_parser().parse_args(["stats", "--results", str(p), "--format", "json",
                                          *FAST, *argv])
    assert args.func(args) == 0
    return json.loads(capsys.readouterr()[0])


def _refused(tmp_path: Path, df: pd.DataFrame, capsys, *argv: str) -> str:
    p = tmp_path / "results.csv"
    df.to_csv(p, index=False)
    args = cli.build_parser().parse_args(["stats", "--results", str(p), *FAST, *argv])
    assert args.func(args) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("error:") == 1 and "Traceback" not in err
    return err


def _comp(rep: dict, dataset: str, fusion: str, metric: str = "test_acc") -> dict:
    (c,) = [c for c in rep["comparisons"]
            if (c["dataset"], c["fusion"], c["metric"]) == (dataset, fusion, metric)]
    return c


# ----------------------------------------------------------------------------- the rule
def _expected(verdict: str, arm: str, ref: str, exact: bool) -> str:
    """The rule in words, written independently of guard.py."""
    if arm == ref == "no":
        return NOT_LEARNED
    if "n/a" in (arm, ref):
        return verdict
    if verdict == EQUIVALENT:
        return verdict if arm == ref == "yes" and exact else INCONCLUSIVE
    if verdict in (BETTER, WORSE):
        return verdict if "yes" in (arm, ref) else INCONCLUSIVE
    return verdict


@pytest.mark.parametrize("arm, ref", list(itertools.product(STATES[:3] + ("",), repeat=2))
                         + [("n/a", "n/a")])  # n/a: no test accuracy in the input at all
@pytest.mark.parametrize("arm_basis, ref_basis", [("", ""), ("chance = 1/K", ""),
                                                  ("", "seed-level t")])
def test_sides_reads_each_arm_from_its_own_fields(arm: str, ref: str, arm_basis: str,
                                                  ref_basis: str) -> None:
    """guard.sides (the sequential decisions' and the interaction test's input): each arm's
    state (empty: unknown), basis, label and the chance level from its own fields; `speaks`
    is the guard's better standing."""
    from types import SimpleNamespace

    from fusion_sweep.analysis.guard import sides, speaks

    c = SimpleNamespace(variant="concat", learned=arm, arm_learn_basis=arm_basis,
                        baseline_variant="add", baseline_learned=ref,
                        baseline_learn_basis=ref_basis, chance_level=0.25)
    a, r = sides(c)
    assert (a.label, a.state, a.exact, a.basis) == ("concat", arm or "unknown", not arm_basis,
                                                    arm_basis)
    assert (r.label, r.state, r.exact, r.basis) == ("add", ref or "unknown", not ref_basis,
                                                    ref_basis)
    assert a.chance_level == r.chance_level == 0.25
    assert speaks(c) is (_expected(BETTER, arm or "unknown", ref or "unknown", True) == BETTER)


@pytest.mark.parametrize("verdict", [BETTER, WORSE, EQUIVALENT, INCONCLUSIVE])
@pytest.mark.parametrize("arm, ref", list(itertools.product(STATES[:3], repeat=2))
                         + [("n/a", "n/a")])
@pytest.mark.parametrize("exact", [True, False])
def test_the_guard_rule_on_every_state(verdict: str, arm: str, ref: str, exact: bool) -> None:
    basis = "" if exact else "chance = 1/K"
    g = guard(verdict, Learning("a", arm, exact, basis, chance_level=0.5),
              Learning("r", ref, exact, basis, chance_level=0.5))
    assert g.verdict == _expected(verdict, arm, ref, exact)
    assert bool(g.withheld) == (g.verdict == INCONCLUSIVE and verdict != INCONCLUSIVE)
    if g.withheld:
        assert g.caveat.withheld == verdict and full(g.caveat).startswith(f"no '{verdict}': ")


def test_the_guard_is_symmetric_in_its_arms() -> None:
    for verdict, (a, b) in itertools.product([BETTER, WORSE, EQUIVALENT, INCONCLUSIVE],
                                             itertools.product(STATES, repeat=2)):
        one = guard(verdict, Learning("a", a, True), Learning("r", b, True)).verdict
        two = guard(verdict, Learning("a", b, True), Learning("r", a, True)).verdict
        assert one == two


# ------------------------------------------------------- the regime the paper is about
def test_one_arm_learning_decides_the_long_regime(tmp_path, capsys) -> None:
    """Before: `synthetic-long: add did not beat chance ..., so neither comparison with add is
    decided` (add learned on 4 of 8 seeds, concat on 8 of 8, concat wins 8 of 8). After:
    concat beats add by the win rate (exact) and the mean Δ (flagged: normality), and the
    sentence names both learn rates."""
    rep = _stats(tmp_path, fm.main_job_like(), capsys, "--equivalence-margin", "0.01")
    c = _comp(rep, "syn-long", "concat")
    assert (c["learned"], c["baseline_learned"]) == ("yes", "no")
    assert (c["win_verdict"], c["verdict"]) == ("better", "better")
    assert (c["wins"], c["losses"]) == (8, 0)
    assert any(f.startswith("rests on normality") for f in c["verdict_flags"])
    assert (c["baseline_learn_count"], c["baseline_learn_n"]) == (4, 8)
    assert (c["arm_learn_count"], c["arm_learn_n"]) == (8, 8)
    said = [a["sentence"] for a in rep["answer"] if a["kind"] == "better"
            and a["dataset"] == "syn-long" and a["arms"] == [c["variant"]]]
    assert said and "add learned on 4 of 8 seeds, concat on 8 of 8" in said[0]


@pytest.mark.parametrize("learned_seeds", [3, 4, 5])
def test_no_knife_edge_at_most_seeds(tmp_path, capsys, learned_seeds: int) -> None:
    """Before: 4 of 8 learned seeds withheld everything, 5 of 8 decided (a knife edge).
    After: concat, learning on all 8, beats add however many seeds add learned on."""
    df = fm.main_job_like()
    rows = (df["dataset"] == "syn-long") & (df["fusion"] == "add")
    df.loc[rows, "test_acc"] = [0.75] * learned_seeds + [0.5] * (8 - learned_seeds)
    c = _comp(_stats(tmp_path, df, capsys), "syn-long", "concat")
    assert c["win_verdict"] == "better" and c["baseline_learn_count"] == learned_seeds


def test_both_arms_at_chance_stay_not_learned_everywhere(tmp_path, capsys) -> None:
    """Both arms at the majority rate: `not learned` by mean Δ, win rate and ratio."""
    df = files.imbalanced_chance().assign(latency_ms_per_sample=[1.0] * 5 + [2.0] * 5)
    rep = _stats(tmp_path, df, capsys, "--metric", "test_acc", "--metric",
                 "latency_ms_per_sample", "--equivalence-margin", "0.01")
    for c in rep["comparisons"]:
        assert (c["verdict"], c["win_verdict"]) == ("not learned", "not learned")
    lat = _comp(rep, "brown", "concat", "latency_ms_per_sample")
    assert lat["ratio_verdict"] == "not learned"


def test_the_interaction_leaves_out_regimes_where_no_arm_learned(tmp_path, capsys) -> None:
    """The main job's shape keeps its long regime (one arm learned); a regime where both sit
    at chance is left out and named."""
    rep = _stats(tmp_path, fm.main_job_like(), capsys)
    (t,) = [t for t in rep["interaction"]["tests"] if t["fusion"] == "concat"]
    assert "syn-long" in t["datasets"] and t["excluded_not_learned"] == []
    # a regime where no arm is shown to learn (its class count unknown: both `unknown`)
    df = files.differs_not_learned()
    df["num_classes"] = df["num_classes"].where(df["dataset"] != "long")
    mid = df[df["dataset"] == "short"].assign(dataset="mid", median_tokens=200)
    df = pd.concat([df, mid], ignore_index=True)
    rep = _stats(tmp_path, df, capsys)
    (t,) = rep["interaction"]["tests"]
    assert t["excluded_not_learned"] == ["long"] and t["datasets"] == ["short", "mid"]


# --------------------------------------------------------------- the answer's question
def test_the_answer_says_where_the_effect_grows(tmp_path, capsys) -> None:
    """Before: the interaction (`differs`, Holm p 0.0005) was in a table, never in words.
    After: one sentence per arm says it differs across regimes, where it is largest, and
    names the estimand; it comes after the per-regime sentences and before the summary."""
    rep = _stats(tmp_path, fm.main_job_like(), capsys)
    kinds = [a["kind"] for a in rep["answer"]]
    across = [a for a in rep["answer"] if a["kind"] == "across regimes"]
    assert len(across) == 2 and kinds[-1] == "summary"
    assert kinds.index("across regimes") > max(i for i, k in enumerate(kinds)
                                                if k in ("better", "worse", "inconclusive"))
    concat = next(a["sentence"] for a in across if "concat" in a["sentence"])
    assert "the effect of concat vs add differs" in concat
    assert "estimand mean Δ per regime" in concat and "largest on syn-long" in concat
    assert "it grows with length" in concat
    tests = {t["fusion"]: t for t in rep["interaction"]["tests"]}
    assert tests["concat"]["verdict"] == "differs"


def test_an_undecided_interaction_is_never_called_the_same(tmp_path, capsys) -> None:
    df = fm.opposite_pattern().query("dataset != 'syn-short'")
    df = df.assign(test_acc=df["test_acc"].where(df["dataset"] != "syn-medium",
                                                 df["test_acc"] - 0.079 * (df["fusion"] != "add")))
    rep = _stats(tmp_path, df, capsys)
    across = [a["sentence"] for a in rep["answer"] if a["kind"] == "across regimes"]
    assert across
    for sentence in across:
        assert "is not shown to differ" in sentence
        assert "does not make it the same" in sentence


def test_after_an_adaptive_sweep_the_answer_leads_with_its_sequential_decisions(
        tmp_path, capsys) -> None:
    """Before: the answer opened with fixed-n verdicts labelled descriptive. After: the
    sequential decisions come first, each naming its estimand and level."""
    df = fm.main_job_like().assign(
        adaptive='{"method": "win-rate", "alpha": 0.05, "max_seeds": 20}')
    rep = _stats(tmp_path, df, capsys)
    lead = rep["answer"][:len(rep["sequential"]["results"])]
    assert {a["kind"] for a in lead} == {"sequential"}
    long = next(a["sentence"] for a in lead if a["dataset"] == "syn-long"
                and "concat" in a["sentence"])
    assert "sequential win rate, anytime-valid" in long


def test_sequential_decisions_follow_the_guard(tmp_path, capsys) -> None:
    """Before: `--until-decided` decided with no guard at all, even where both arms sat at
    chance. After: `not learned` there, like every fixed-n verdict."""
    df = pd.DataFrame(files._rows("syn", "add", [0.5] * 5, test_majority_rate=0.5,
                                  test_n=1000)
                      + files._rows("syn", "concat", [0.51, 0.52, 0.51, 0.51, 0.52],
                                    test_majority_rate=0.5, test_n=1000))
    df = pd.concat([df.assign(seed=df["seed"] + 5 * k) for k in range(4)], ignore_index=True)
    df = df.assign(adaptive='{"method": "win-rate", "alpha": 0.05, "max_seeds": 20}')
    rep = _stats(tmp_path, df, capsys)
    (r,) = rep["sequential"]["results"]
    assert r["decision"] == "not learned"
    assert rep["answer"][0]["kind"] == "sequential" and "beat chance" in rep["answer"][0][
        "sentence"]


# ------------------------------------------------------------------ overclaim paths (§4)
def _near_majority(rate_col: bool = True, size: float | None = 1000) -> pd.DataFrame:
    """Two arms a hair above a 58/42 split's majority rate on every seed: majority-class
    predictors to the exact test (0.585 of 1000 is no evidence), 'learned' to a seed-level
    t-test; their deltas sit well within ±0.01."""
    extra = {}
    if rate_col:
        extra["test_majority_rate"] = 0.578
    if size is not None:
        extra["test_n"] = size
    return pd.DataFrame(
        files._rows("brown", "add", [0.585, 0.586, 0.584, 0.585, 0.586], **extra)
        + files._rows("brown", "concat", [0.586, 0.585, 0.585, 0.584, 0.586], **extra))


def test_1_over_k_chance_never_allows_equivalent(tmp_path, capsys) -> None:
    """Before: with no majority rate, chance 1/K = 0.5 made two possible majority predictors
    `learned` and `equivalent`. After: inconclusive, flagged."""
    rep = _stats(tmp_path, _near_majority(rate_col=False, size=None), capsys,
                 "--equivalence-margin", "0.01")
    c = _comp(rep, "brown", "concat")
    assert c["verdict"] == "inconclusive" and c["tost_p_holm"] < 0.05
    assert c["verdict_flags"][0].startswith("no 'equivalent': ")
    assert "1/K" in c["verdict_flags"][0] and "majority-class predictor" in c["verdict_flags"][0]


@pytest.mark.parametrize("blank", [[0], [0, 1, 2, 3, 4]])
def test_a_blank_test_n_never_turns_not_learned_into_equivalent(tmp_path, capsys,
                                                                blank: list[int]) -> None:
    """Before: one blank test_n sent the arm to the seed-level t-test (`learned`, p ~1e-5)
    and the pair became `equivalent`. After: the exact test runs on the seeds that have a
    size (`not learned`); with no size at all, no equivalence."""
    df = _near_majority()
    df["test_n"] = df["test_n"].astype(object)
    for fusion in ("add", "concat"):
        rows = df.index[df["fusion"] == fusion][blank]
        df.loc[rows, "test_n"] = ""
    c = _comp(_stats(tmp_path, df, capsys, "--equivalence-margin", "0.01"), "brown", "concat")
    assert c["verdict"] != "equivalent"
    if len(blank) == 1:
        assert c["verdict"] == "not learned"
        assert (c["arm_learn_count"], c["arm_learn_n"]) == (0, 4)
    else:
        assert "t-test" in c["verdict_flags"][0]


@pytest.mark.parametrize("name", ["accuracy", "test_accuracy", "acc_test"])
def test_the_chance_guard_finds_the_test_accuracy_whatever_its_name(
        tmp_path, capsys, name: str) -> None:
    """Before: only `test_acc` (or an accuracy asked for) guarded; a file calling it
    `accuracy` left macro-F1 of two chance-level arms unguarded (`better`). After: the guard
    reads it."""
    df = files.chance_other_metric().rename(columns={"test_acc": name})
    rep = _stats(tmp_path, df, capsys, "--metric", "test_macro_f1")
    assert {t["metric"] for t in rep["chance"]["tests"]} == {name}
    assert _comp(rep, "syn", "concat", "test_macro_f1")["verdict"] == "not learned"


def test_the_chance_guard_never_reads_a_validation_maximum(tmp_path, capsys) -> None:
    """Before: `--metric best_val_acc` guarded every comparison by the validation maximum
    (above chance by selection). After: by the test accuracy beside it."""
    df = files.imbalanced_chance()
    df["best_val_acc"] = df["test_acc"] + 0.1
    rep = _stats(tmp_path, df, capsys, "--metric", "best_val_acc", "--equivalence-margin",
                 "0.01")
    assert {t["metric"] for t in rep["chance"]["tests"]} == {"test_acc"}
    assert _comp(rep, "brown", "concat", "best_val_acc")["verdict"] == "not learned"


def test_a_seed_with_a_nan_metric_is_lost_not_dropped_from_the_win_rate(tmp_path,
                                                                         capsys) -> None:
    """Before: concat's NaN on seed 7 left 7 of 7 wins (sign p 0.016). After: the seed is
    lost and counted against the majority (p of 7 of 8: 0.070); the sentence says so."""
    df = fm.paper_pattern()
    df.loc[(df["dataset"] == "syn-long") & (df["fusion"] == "concat") & (df["seed"] == 7),
           "test_acc"] = np.nan
    rep = _stats(tmp_path, df, capsys)
    c = _comp(rep, "syn-long", "concat")
    assert (c["wins"], c["losses"], c["lost_seeds"]) == (7, 0, [7])
    assert c["sign_p"] == pytest.approx(sps.binomtest(7, 8).pvalue)
    said = next(a["sentence"] for a in rep["answer"]
                if a["dataset"] == "syn-long" and a["arms"] == [c["variant"]])
    assert "1 seed lost to a non-finite test_acc" in said
    assert any(d["reason"] == "non_finite_metric" and d["seed"] == 7 for d in rep["dropped"])


def test_part_of_a_recorded_family_pads_every_family(tmp_path, capsys) -> None:
    """Before: a file holding 2 of a recorded family of 6 padded the paired-t and sign
    families but not TOST (Holm over 2). After: TOST is Holm over 6 too."""
    df = fm.paper_pattern().query("dataset == 'syn-short'")
    df = df.assign(comparison_family=json.dumps({"m": 6, "members": []}))
    rep = _stats(tmp_path, df, capsys, "--equivalence-margin", "0.01")
    raw = [c["tost_p"] for c in rep["comparisons"]]
    from statsmodels.stats.multitest import multipletests
    want = multipletests(raw + [1.0] * 4, method="holm")[1][:2]
    assert [c["tost_p_holm"] for c in rep["comparisons"]] == pytest.approx(list(want))
    assert rep["family"]["m"] == 6


def test_a_blank_code_fingerprint_is_flagged(tmp_path, capsys) -> None:
    df = files.mixed_code().assign(code_fingerprint="aaa")
    df.loc[2, "code_fingerprint"] = ""
    rep = _stats(tmp_path, df, capsys)
    (w,) = [w for w in rep["warnings"] if w["code"] == "blank_code_fingerprint"]
    assert "syn/standard/sinusoidal/add/seed 2" in w["message"]
    clean = _stats(tmp_path, files.mixed_code().assign(code_fingerprint="aaa"), capsys)
    assert not [w for w in clean["warnings"] if w["code"] == "blank_code_fingerprint"]


def test_an_impossible_majority_rate_is_refused(tmp_path, capsys) -> None:
    df = files.imbalanced_chance()
    df.loc[0, "test_majority_rate"] = 0.3  # below 1/K = 0.5: no split has that
    err = _refused(tmp_path, df, capsys)
    assert "column 'test_majority_rate' for dataset 'brown' holds 0.3, outside [1/num_classes " \
           "= 0.5, 1]" in err


@pytest.mark.parametrize("metric, flag", [("val_loss", "higher"), ("error_rate", "higher"),
                                          ("latency_ms_per_sample", "higher"),
                                          ("test_acc", "lower")])
def test_direction_is_refused_wherever_it_is_known(tmp_path, capsys, metric: str,
                                                   flag: str) -> None:
    """Before: only the table's metrics refused a contradicting --direction; a loss by name
    turned `worse` into `better`. After: refused by name too."""
    df = files.latency().assign(**{metric: np.linspace(0.1, 0.2, 10)})
    err = _refused(tmp_path, df, capsys, "--metric", metric, "--direction", flag)
    assert f"--direction {flag} contradicts the known direction of metric {metric!r}" in err


def test_a_regime_column_holds_short_medium_or_long(tmp_path, capsys) -> None:
    df = fm.paper_pattern()
    df.loc[df["dataset"] == "syn-long", "regime"] = "huge"
    err = _refused(tmp_path, df, capsys)
    assert "column 'regime'" in err and "'huge'" in err and "short, medium, long" in err


@pytest.mark.parametrize("wins, losses, lost", [(7, 0, 1), (0, 7, 1), (5, 2, 2), (2, 5, 3),
                                                (3, 3, 2)])
def test_a_lost_seed_goes_the_way_that_decides_least(wins: int, losses: int, lost: int) -> None:
    """sign_test(lost=k): the largest two-sided p over every way the k lost seeds could have
    gone, whichever side the observed majority is on."""
    from fusion_sweep.analysis.winrate import sign_test
    st = sign_test(np.r_[np.ones(wins), -np.ones(losses)], lost=lost)
    worst = max(sps.binomtest(wins + j, wins + losses + lost).pvalue for j in range(lost + 1))
    assert st.p_two_sided == pytest.approx(worst)
    assert st.p_two_sided >= sign_test(np.r_[np.ones(wins), -np.ones(losses)]).p_two_sided
    assert (st.wins, st.losses, st.lost) == (wins, losses, lost)


# ------------------------------------------------- no test accuracy: unknown, never validation
def _arms_table() -> pd.DataFrame:
    """Two datasets x two fusions x two seeds, every accuracy column a learned model's."""
    rows = [dict(dataset=d, encoder="standard", pe="sinusoidal", fusion=f, seed=s,
                 status="FINISHED", test_acc=0.9, best_val_acc=0.95, val_acc=0.93,
                 latency_ms_per_sample=1.0 + s, test_majority_rate=0.5, test_size=200)
            for d in ("d2", "d1") for f in ("concat", "add") for s in (0, 1)]
    return pd.DataFrame(rows)


def test_without_a_test_accuracy_every_arm_is_unknown_and_one_warning_says_why() -> None:
    """chance.chance_tests on a table with only a validation accuracy and a maximum over
    epochs: one record per arm, sorted, each `unknown` with the reason, the first
    validation column named as its metric and nothing estimated; one warning."""
    from fusion_sweep.analysis import chance

    df = _arms_table().drop(columns="test_acc")
    assert chance.validation_only(df, ["latency_ms_per_sample", "val_acc"]) == [
        "val_acc", "best_val_acc"]  # the asked-for first, then the table's order, once each
    tests, by_arm, warnings = chance.chance_tests(df, ["latency_ms_per_sample"], {}, 0.05)
    why = "no test accuracy in the input (only best_val_acc, val_acc)"
    arms = [("d1", "add"), ("d1", "concat"), ("d2", "add"), ("d2", "concat")]
    assert [(t.dataset, t.fusion) for t in tests] == arms
    for t in tests:
        assert (t.encoder, t.pe, t.metric, t.variant) == (
            "standard", "sinusoidal", "best_val_acc", Variant("standard", "sinusoidal",
                                                              t.fusion).label)
        assert (t.n, t.num_classes, t.learned, t.chance_source, t.learn_method,
                t.learn_count, t.learn_n) == (0, None, "unknown", why, why, None, None)
        assert all(math.isnan(x) for x in (t.chance_level, t.mean, t.t, t.p, t.p_holm))
    assert by_arm == {(t.dataset, Variant(t.encoder, t.pe, t.fusion)): t for t in tests}
    assert warnings == [{"code": "chance_no_test_accuracy", "message": (
        "the input holds no test accuracy, only best_val_acc, val_acc: a validation accuracy "
        "or a maximum over epochs is never compared with the test split's chance level, so "
        "every arm's learned? is unknown (add the test accuracy column, e.g. test_acc)")}]
    # no accuracy of any kind: no guard at all
    bare = df.drop(columns=["best_val_acc", "val_acc"])
    assert chance.validation_only(bare, ["latency_ms_per_sample"]) == []
    assert chance.chance_tests(bare, ["latency_ms_per_sample"], {}, 0.05) == ([], {}, [])


def test_a_dataset_without_a_class_count_gets_one_warning_naming_its_flag() -> None:
    """chance.chance_tests: every dataset whose class count is unknown (no --num-classes, no
    num_classes column) is named, sorted, in one warning with the flag that fixes it; none
    when every count is known."""
    from fusion_sweep.analysis import chance
    from fusion_sweep.analysis.load import tidy

    df = tidy(_arms_table())
    _, _, warnings = chance.chance_tests(df, ["test_acc"], {"d1": 2, "d2": 2}, 0.05)
    assert warnings == []
    for counts, missing in (({}, ["d1", "d2"]), ({"d1": 2}, ["d2"]), ({"d2": 2}, ["d1"])):
        _, _, warnings = chance.chance_tests(df, ["test_acc"], counts, 0.05)
        flags = " ".join(f"--num-classes {d}=K" for d in missing)
        assert warnings == [{"code": "chance_unknown", "message": (
            f"class count unknown for {', '.join(missing)}: 'learned?' (does an arm beat "
            f"chance?) is unknown there; add a num_classes column or pass {flags}")}]


def test_an_arms_chance_record_holds_its_own_counts_and_says_which_seeds_were_sized() -> None:
    """chance.chance_tests, field by field: an arm with no majority rate falls back to 1/K
    and the seed-level t (its n, K, mean, t and p, the t method named); an arm whose test size
    is recorded on some seeds runs the exact per-seed test on those (a size of 1 counts, 0
    does not) and says how many of its seeds that is, unless it is all of them."""
    from fusion_sweep.analysis import chance
    from fusion_sweep.analysis.load import tidy

    acc = [0.6, 0.7, 0.8]
    rows = [dict(dataset="d", encoder="standard", pe="sinusoidal", fusion=f, seed=s,
                 status="FINISHED", test_acc=a, test_majority_rate=rate, test_n=size)
            for f, rates, sizes in (("add", [np.nan] * 3, [np.nan] * 3),
                                    ("concat", [0.5] * 3, [0, 1, 200]),
                                    ("gate", [0.5] * 3, [200] * 3))
            for s, (a, rate, size) in enumerate(zip(acc, rates, sizes))]
    tests, _, _ = chance.chance_tests(tidy(pd.DataFrame(rows)), ["test_acc"], {"d": 4}, 0.05)
    t_arm, exact, every = tests
    t, p = sps.ttest_1samp(acc, 0.25, alternative="greater")
    assert (t_arm.fusion, t_arm.n, t_arm.num_classes, t_arm.chance_level) == ("add", 3, 4, 0.25)
    assert (t_arm.mean, t_arm.t, t_arm.p) == pytest.approx((0.7, t, p))
    assert (t_arm.learn_method, t_arm.learn_count, t_arm.learn_n) == (chance.T_METHOD, None,
                                                                        None)
    assert (exact.fusion, exact.n, exact.num_classes, exact.chance_level) == ("concat", 3, 4, 0.5)
    assert exact.learn_n == 2  # the seeds of test size 1 and 200
    assert exact.learn_method == (chance.EXACT_METHOD
                                  + " (the 2 of 3 seeds with a recorded test size)")
    assert (every.learn_n, every.learn_method) == (3, chance.EXACT_METHOD)  # all: no count
    # every arm's p_holm is its t p's Holm adjustment across the arms, exact test or not
    from statsmodels.stats.multitest import multipletests

    holm_p = multipletests([t_arm.p, exact.p, every.p], method="holm")[1]
    assert [x.p_holm for x in tests] == pytest.approx(list(holm_p))


@pytest.mark.parametrize("source, learn_n, basis", [
    ("test majority rate", 8, ""),  # the exact per-seed test
    ("test majority rate", None, "the seed-level t-test (no test_n recorded)"),
    ("1/K (no test_majority_rate recorded)", 8, "chance = 1/K (no test_majority_rate recorded)"),
    ("no test accuracy in the input (only val_acc)", None,
     "no test accuracy in the input (only val_acc)")])
def test_an_arms_learning_names_the_basis_of_its_state(source: str, learn_n: int | None,
                                                       basis: str) -> None:
    """chance.learning: the arm's own test (state, counts, chance level), `exact` only for the
    exact per-seed test against the recorded majority rate; `n/a` without any chance test,
    `unknown` for an arm that has none."""
    from fusion_sweep.analysis import chance
    from fusion_sweep.analysis.records import ChanceTest

    v, other = Variant("standard", "sinusoidal", "concat"), Variant("standard", "rope", "add")
    t = ChanceTest("d", "standard", "sinusoidal", "test_acc", "concat", v.label, 8, 2, 0.55,
                   0.9, 9.0, 0.001, 0.002, "yes", source, source, 7 if learn_n else None,
                   learn_n)
    got = chance.learning({("d", v): t}, "d", v)
    assert got == Learning(v.label, "yes", basis == "", basis, t.learn_count, learn_n, 0.55)
    assert chance.learning({}, "d", v) == Learning(v.label, "n/a")
    assert chance.learning({("d", v): t}, "d", other) == Learning(other.label, "unknown")
    assert chance.learning({("d", v): t}, "e", v) == Learning(v.label, "unknown")
    # arm_state, the learned? column on any metric, says the same three states
    assert chance.arm_state({}, "d", v, "loss") == "n/a"
    assert chance.arm_state({("d", v): t}, "d", v, "loss") == "yes"
    assert chance.arm_state({("d", v): t}, "d", other, "loss") == "unknown"


def test_a_class_count_override_leaves_the_other_datasets_to_their_column() -> None:
    """--num-classes for one dataset: that dataset takes it, every other dataset (before or
    after it in order) still reads its own `num_classes` column, and one with none is None."""
    from fusion_sweep.analysis.chance import class_counts

    df = pd.DataFrame({"dataset": ["a", "a", "b", "c"], "num_classes": [2, 2, 3, np.nan]})
    assert class_counts(df) == {"a": 2, "b": 3, "c": None}
    assert class_counts(df, {"a": 5}) == {"a": 5, "b": 3, "c": None}
    assert class_counts(df, {"b": 4}) == {"a": 2, "b": 4, "c": None}


@pytest.mark.parametrize("arm_count, ref_count, said", [
    (8, 8, ""), (0, 8, ""), (8, 0, ""), (7, 8, "concat at chance on 1 of 8 seeds"),
    (1, 8, "concat at chance on 7 of 8 seeds"),
    (7, 4, "concat at chance on 1 of 8 seeds; add at chance on 4 of 8 seeds")])
def test_a_collapse_is_an_arm_that_learned_on_some_seeds_but_not_all(
        arm_count: int, ref_count: int, said: str) -> None:
    """report._collapse (the COLLAPSE caveat's reason): 0 < learned seeds < seeds tested; an
    arm at chance on every seed is not learning at all (the guard's case), not collapsing."""
    from fusion_sweep.analysis.pairing import Paired
    from fusion_sweep.analysis.records import ChanceTest
    from fusion_sweep.analysis.report import _collapse

    arm, ref = CONCAT, ADD

    def test(v: Variant, count: int) -> ChanceTest:
        return ChanceTest("d", v.encoder, v.pe, "test_acc", v.fusion, v.label, 8, 2, 0.5,
                          0.8, 5.0, 0.001, 0.002, "yes", "test majority rate", "exact", count,
                          8)

    by_arm = {("d", arm): test(arm, arm_count), ("d", ref): test(ref, ref_count)}
    p = Paired("d", "test_acc", arm, ref, "add", (), np.arange(8), np.ones(8), np.ones(8))
    assert _collapse(by_arm, p) == said.replace("concat", arm.label).replace("add", ref.label)


@pytest.mark.parametrize("verdict, flagged", [("better", True), ("worse", True),
                                              ("equivalent", True), ("inconclusive", False)])
def test_a_collapse_qualifies_every_decided_verdict(verdict: str, flagged: bool) -> None:
    """report._qualify: collapsed seeds mix chance-level and learned seeds, so a decided
    mean-Δ verdict (better, worse, equivalent) rests on normality; an undecided one needs no
    caveat."""
    from dataclasses import replace as dc_replace

    from fusion_sweep.analysis.caveats import COLLAPSE
    from fusion_sweep.analysis.guard import Guarded
    from fusion_sweep.analysis.pairing import Paired
    from fusion_sweep.analysis.report import Adjusted, _measure, _qualify
    from fusion_sweep.analysis.settings import Settings

    arm, ref = CONCAT, ADD
    x = np.array([0.80, 0.82, 0.81, 0.83, 0.80, 0.82, 0.81, 0.84])
    p = Paired("d", "test_acc", arm, ref, "add", (), np.arange(8), x, x - 0.001)
    s = Settings(n_boot=200)
    m = dc_replace(_measure(p, s, None, {}), collapse="concat at chance on 1 of 8 seeds")
    a = Adjusted(0.01, 0.01, float("nan"), 0.01, 0.05)
    _, flags, notes = _qualify(m, a, Guarded(verdict), s, False)
    assert any(f.kind == COLLAPSE for f in flags) is flagged
    assert any(n.startswith("concat at chance on 1 of 8 seeds: the deltas mix") for n in notes) \
        is flagged


@pytest.mark.parametrize("family, other", [(1, "better"), (5, None)])
def test_the_put_back_verdict_takes_the_comparisons_own_holm_step(family: int,
                                                                  other: str | None) -> None:
    """report._sensitivity: the pairs dropped by a fingerprint check, put back, are judged at
    the comparison's own Holm step (p_holm / p): all 8 pairs give p 0.014, which decides alone
    (step 1) but not at step 5 (0.07), where the verdict stays what the checked pairs said."""
    from fusion_sweep.analysis.caveats import ALL_PAIRS
    from fusion_sweep.analysis.pairing import Paired
    from fusion_sweep.analysis.report import Adjusted, _measure, _sensitivity
    from fusion_sweep.analysis.settings import Settings

    arm, ref = CONCAT, ADD
    checked, put_back = [0.01, 0.03, -0.005, 0.02], [0.015, 0.002, 0.01, 0.025]
    p = Paired("d", "test_acc", arm, ref, "add", (), np.arange(4), 0.8 + np.array(checked),
               np.full(4, 0.8), tuple((4 + i, 0.8 + d, 0.8) for i, d in enumerate(put_back)))
    s = Settings(n_boot=200)
    m = _measure(p, s, None, {})
    t_p = m.stats.t_p  # 0.163: the checked pairs alone decide nothing
    a = Adjusted(min(1.0, family * t_p), float("nan"), float("nan"), 1.0, 0.05 / family)
    got = _sensitivity(m, a, "inconclusive", s, False)
    if other is None:
        assert got is None
    else:
        assert (got[0].kind, got[0].n, got[0].other) == (ALL_PAIRS, 8, other)

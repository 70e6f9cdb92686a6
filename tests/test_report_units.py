"""The report driver's helpers (`fusion_sweep.analysis.report`) one at a time, on hand-built
records: every warning word for word at its thresholds, the Holm families and their padding,
the verdict's notes and caveats, the sensitivity check, the sweep's columns and families,
the per-comparison generator and the JSON cleaning. Unit-level (well under a second) so
that a mutant of report.py meets a failing test before the end-to-end reports (issue 42)."""
from __future__ import annotations

import dataclasses
import json
import warnings
import zlib
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from fusion_sweep.analysis import report as R
from fusion_sweep.analysis import stats
from fusion_sweep.analysis.caveats import ALL_PAIRS, COLLAPSE, SMALL_N, WITHHELD, Caveat
from fusion_sweep.analysis.fixed import WIN
from fusion_sweep.analysis.guard import NO, UNKNOWN, YES, Guarded, Learning
from fusion_sweep.analysis.load import tidy
from fusion_sweep.analysis.pairing import Paired
from fusion_sweep.analysis.schema import (BETTER, EQUIVALENT, INCONCLUSIVE, NOT_LEARNED, WORSE,
                                          AnalysisError)
from fusion_sweep.analysis.sections import DroppedPair, Source
from fusion_sweep.analysis.settings import Settings
from fusion_sweep.analysis.variants import Variant, parse_baseline

nan = float("nan")
ADD = Variant("standard", "sinusoidal", "add")
CONCAT = Variant("standard", "sinusoidal", "concat")
FUSION = parse_baseline("add")
VARIANT = parse_baseline("standard/sinusoidal/add")


def comp(**kw) -> SimpleNamespace:
    """A comparison record with the fields the warnings read."""
    base = dict(dataset="synthetic-long", encoder="standard", pe="sinusoidal", fusion="concat",
                baseline="add", metric="test_acc", n=5, min_p_wilcoxon=0.0625,
                min_p_signflip=0.0625, ratio_p=None, tost_p=nan, verdict=BETTER,
                chance_level=0.5, equivalence_margin=None, notes=(),
                variant="standard/sinusoidal/concat", baseline_variant="standard/sinusoidal/add")
    return SimpleNamespace(**{**base, **kw})


def dropped(reason="code_mismatch", seed=0, detail="d", fusion="concat") -> DroppedPair:
    return DroppedPair("synthetic-long", "standard", "sinusoidal", "test_acc", fusion, "add",
                       f"standard/sinusoidal/{fusion}", "standard/sinusoidal/add", seed, reason,
                       detail)


# --- small helpers --------------------------------------------------------------------

def test_count_and_nan():
    assert [R._count(k, "pair") for k in (0, 1, 2)] == ["0 pairs", "1 pair", "2 pairs"]
    assert np.isnan(R._nan(None)) and R._nan(np.float32(0.5)) == 0.5 and R._nan(0) == 0.0
    assert isinstance(R._nan(1), float)


def test_json_clean():
    got = R._json_clean({1: (np.int64(3), np.bool_(True), [nan, float("inf"), np.float32(0.25)]),
                         "s": {"x": None, "y": "t", "z": False, "w": np.float64(-1.5)}})
    assert got == {"1": [3, True, [None, None, 0.25]],
                   "s": {"x": None, "y": "t", "z": False, "w": -1.5}}
    assert type(got["1"][0]) is int and type(got["1"][1]) is bool
    assert type(got["s"]["w"]) is float and R._json_clean(-float("inf")) is None


def test_comparison_rng_is_the_seed_spawned_by_the_keys_crc():
    key = ("synthetic-long", "sinusoidal", "test_acc", "concat", "add")
    h = zlib.crc32("|".join(key).encode())
    want = np.random.default_rng(np.random.SeedSequence(entropy=7, spawn_key=(h,))).random(4)
    assert stats.comparison_rng(7, key).random(4).tolist() == want.tolist()
    assert stats.comparison_rng(8, key).random() != stats.comparison_rng(7, key).random()


def paired(arm=CONCAT, ref=ADD, seeds=(0, 1, 2), x=(0.8, 0.9, 0.85), y=(0.7, 0.75, 0.8),
           unchecked=(), lost=()) -> Paired:
    return Paired("d", "test_acc", arm, ref, "add", (), np.array(seeds), np.array(x, float),
                  np.array(y, float), tuple(unchecked), tuple(lost))


@pytest.mark.parametrize("arm, ref, extra", [
    (CONCAT, ADD, False), (Variant("ressformer", "sinusoidal", "concat"), ADD, True),
    (CONCAT, Variant("ressformer", "sinusoidal", "add"), True),
    (Variant("standard", "rope", "concat"), ADD, True),
    (Variant("ressformer", "rope", "concat"), Variant("ressformer", "rope", "add"), True)])
def test_rng_key_keeps_the_legacy_key_for_standard_same_pe_pairs(arm, ref, extra):
    p = paired(arm, ref)
    base = ("d", arm.pe, "test_acc", "concat", "add")
    assert R.rng_key(p) == (base + (arm.label, ref.label) if extra else base)


def test_validated_returns_the_settings_and_checks_the_claim_set():
    s = Settings()
    assert R.validated(s) is s
    with pytest.raises(AnalysisError, match="no-such-claims"):
        R.validated(Settings(claims="no-such-claims"))
    with pytest.raises(AnalysisError, match="alpha"):
        R.validated(Settings(alpha=1.5))


# --- Holm families ---------------------------------------------------------------------

@pytest.mark.parametrize("p, m", [([0.01, 0.04], 2), ([0.01, 0.04], 5), ([0.01, 0.04, 0.03], 2),
                                  ([], 3), ([0.02, nan], 4)])
def test_holm_in_family_pads_absent_members_with_p_one(p, m):
    padded = np.r_[np.array(p, float), np.ones(max(0, m - len(p)))]
    got = R.holm_in_family(p, m)
    assert got.shape == (len(p),)
    np.testing.assert_allclose(got, stats.holm(padded)[:len(p)])


def test_fixed_family_is_the_input_or_the_recorded_family_when_larger():
    comps = [comp(metric="test_acc"), comp(metric="test_acc"), comp(metric="latency")]
    s = Settings(metrics=("test_acc", "latency"))
    assert R.fixed_family(comps, s, Source("table")) == R.Family(3, "every comparison in the input")
    assert R.fixed_family(comps, s, Source("file", path="r.csv")).source == \
        "every comparison in r.csv"
    assert R.fixed_family(comps, s, Source("mlflow")).source == "every comparison in the sweep"
    rec = Source("file", path="r.csv", comparison_family={"m": 6})
    assert R.fixed_family(comps, s, rec) == R.Family(7, R.FAMILY_FIXED)  # 3 + (6 - 2 own)
    small = Source("table", comparison_family={"m": 1})
    assert R.fixed_family(comps, s, small) == R.Family(3, R.FAMILY_FIXED)
    latency = Source("table", comparison_family={"m": 6}, space={"metric": "latency"})
    assert R.fixed_family(comps, s, latency).m == 3 + 5
    assert R.fixed_family(comps, s, Source("table", comparison_family={"m": "6"})).m == 3
    assert R.FAMILY_FIXED == "fixed by the sweep"


def measured(t_p, tost_p=nan, sign_p=nan, ratio=None, added=()):
    return SimpleNamespace(stats=SimpleNamespace(t_p=t_p, tost_p=tost_p),
                           win=SimpleNamespace(sign_p=sign_p), ratio_test=ratio,
                           added=added)


def test_adjusted_holm_families_pad_the_recorded_family(monkeypatch):
    monkeypatch.setattr(R, "added", lambda: [])
    ms = [measured(0.01, 0.02, 0.03, SimpleNamespace(p=0.04)),
          measured(0.04, nan, 0.5, None), measured(nan, 0.01, nan, SimpleNamespace(p=0.2))]
    got = R._adjusted(ms, Settings(alpha=0.1), family_m=5)
    pad = lambda p, k: np.r_[p, np.ones(k)]  # noqa: E731
    np.testing.assert_allclose([a.p_holm for a in got], stats.holm(pad([0.01, 0.04, nan], 2))[:3])
    np.testing.assert_allclose([a.tost_p_holm for a in got],
                               stats.holm(pad([0.02, nan, 0.01], 2))[:3])
    np.testing.assert_allclose([a.sign_p_holm for a in got],
                               stats.holm(pad([0.03, 0.5, nan], 2))[:3])
    np.testing.assert_allclose([a.ratio_p_holm for a in got], stats.holm([0.04, nan, 0.2]))
    # m at Holm's first step: the 2 finite paired-t p plus the 2 absent members
    assert [a.alpha_m for a in got] == [pytest.approx(0.1 / 4)] * 3
    assert all(a.added_p_holm == () for a in got)
    one = R._adjusted([measured(nan)], Settings(alpha=0.1), family_m=1)
    assert one[0].alpha_m == pytest.approx(0.1)  # never alpha / 0


def test_adjusted_gives_each_added_estimand_its_own_family(monkeypatch):
    e1 = SimpleNamespace(p=lambda v: v)
    e2 = SimpleNamespace(p=lambda v: v / 2)
    monkeypatch.setattr(R, "added", lambda: [e1, e2])
    ms = [measured(0.01, added=((e1, 0.02), (e2, 0.2))),
          measured(0.02, added=((e1, 0.04), (e2, 0.02)))]
    got = R._adjusted(ms, Settings(), family_m=3)
    np.testing.assert_allclose([a.added_p_holm[0] for a in got], stats.holm([0.02, 0.04, 1])[:2])
    np.testing.assert_allclose([a.added_p_holm[1] for a in got], stats.holm([0.1, 0.01, 1])[:2])


# --- the sweep's columns and families ---------------------------------------------------

def test_sweep_columns_read_the_one_json_value_of_each_column():
    df = pd.DataFrame({"adaptive": ['{"alpha": 0.05}', "", None],
                       "comparison_family": ['{"m": 3}'] * 3})
    got = R.sweep_columns(df, Source("file", path="r.csv"))
    assert got.adaptive == {"alpha": 0.05} and got.comparison_family == {"m": 3}
    own = Source("mlflow", adaptive={"alpha": 0.1})
    assert R.sweep_columns(df, own).adaptive == {"alpha": 0.1}
    assert R.sweep_columns(df, own).comparison_family == {"m": 3}  # read after a skip
    assert R.sweep_columns(pd.DataFrame({"x": [1]}), own) == own
    blank = R.sweep_columns(pd.DataFrame({"adaptive": ["  ", None]}), Source("table"))
    assert blank.adaptive is None


@pytest.mark.parametrize("values, message", [
    (['{"a": 1}', '{"a": 2}'], "column 'adaptive' must hold one value on every row (the "
                               "sweep's), found 2 different values"),
    (["{not json"], "column 'adaptive' must hold JSON: Expecting property name enclosed in "
                    "double quotes"),
    (["[1, 2]"], "column 'adaptive' must hold a JSON object")])
def test_sweep_columns_name_a_bad_column(values, message):
    with pytest.raises(AnalysisError, match="^" + message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[") + "$"):
        R.sweep_columns(pd.DataFrame({"adaptive": values}), Source("table"))


def test_launch_family_is_the_recorded_one_or_rebuilt_from_every_trial():
    rec = {"m": 2, "members": [{"dataset": "d"}]}
    assert R.launch_family(Source("table", comparison_family=rec), Settings(), None) == (
        rec, R.FAMILY_RECORDED)
    with pytest.raises(AnalysisError, match="^an adaptive sweep without a recorded comparison "
                                            "family needs the whole input table to rebuild it$"):
        R.launch_family(Source("table", comparison_family={"m": 2}), Settings(), None)
    df = pd.DataFrame({"dataset": ["b", "b", "a", "a", "a", "a"],
                       "encoder": "standard",
                       "pe": ["sinusoidal", "sinusoidal", "sinusoidal", "sinusoidal", "rope",
                              "rope"],
                       "fusion": ["add", "concat", "add", "gate", "concat", "gate"]})
    fam, where = R.launch_family(Source("table", comparison_family={"m": "2", "members": []}),
                                 Settings(baseline="add"), df)
    assert where == R.FAMILY_RECONSTRUCTED and fam == {"m": 2, "members": [
        {"dataset": "a", "family": ["a", "standard", "sinusoidal"],
         "variant": "standard/sinusoidal/gate", "baseline_variant": "standard/sinusoidal/add"},
        {"dataset": "b", "family": ["b", "standard", "sinusoidal"],
         "variant": "standard/sinusoidal/concat", "baseline_variant": "standard/sinusoidal/add"}]}
    assert R.FAMILY_RECONSTRUCTED == ("reconstructed from every trial of the input (the launch "
                                      "recorded none): every arm vs its reference, all datasets")


def test_launch_family_pairs_only_groups_holding_their_reference():
    df = pd.DataFrame({"dataset": ["a", "a", "a", "a"], "encoder": "standard",
                       "pe": ["sinusoidal", "sinusoidal", "rope", "rope"],
                       "fusion": ["add", "gate", "concat", "gate"]})
    fam, _ = R.launch_family(Source("table"), Settings(baseline="add"), df)
    assert fam == {"m": 1, "members": [
        {"dataset": "a", "family": ["a", "standard", "sinusoidal"],
         "variant": "standard/sinusoidal/gate", "baseline_variant": "standard/sinusoidal/add"}]}
    whole, _ = R.launch_family(Source("table"), Settings(baseline="standard/sinusoidal/add"), df)
    assert whole["m"] == 3 and whole["members"][0]["family"] == ["a"]


def test_the_interaction_section_names_its_contrast_and_noun():
    known = [SimpleNamespace(median_tokens=10.0), SimpleNamespace(median_tokens=50.0)]
    unknown = [SimpleNamespace(median_tokens=nan)]
    a = R.interaction_section([], known, FUSION)
    assert a.method == (
        "Welch one-way ANOVA of per-seed deltas across datasets (statsmodels anova_oneway, "
        "use_var='unequal'), H0: the fusion effect is the same on every dataset; difference in "
        "mean deltas, longest minus shortest regime (by median_tokens), with a Welch "
        "t-interval; Holm across tests. One dataset per regime confounds length with domain "
        "and base accuracy: a difference is not evidence that length causes it")
    b = R.interaction_section([], unknown, VARIANT).method
    assert "the variant effect" in b and ("mean deltas, last minus first dataset by name "
                                          "(lengths unknown), with a Welch") in b
    assert a.tests == ()


# --- the selection -----------------------------------------------------------------------

@pytest.mark.parametrize("sel, shown", [
    ({}, [True, True, True, True, True]),
    ({"datasets": ("a",)}, [True, False, True, False, True]),
    ({"encoders": ("standard",)}, [True, True, False, True, False]),
    ({"pes": ("rope",)}, [False, False, False, True, False]),
    ({"pes": ("sinusoidal",), "datasets": ("b",)}, [False, True, False, False, False])])
def test_shown_reads_datasets_and_both_variants(sel, shown):
    recs = [SimpleNamespace(dataset="a", variant="standard/sinusoidal/concat",
                            baseline_variant="standard/sinusoidal/add"),
            SimpleNamespace(dataset="b", variant="standard/sinusoidal/concat",
                            baseline_variant=None),
            SimpleNamespace(datasets=["a"], variant="ressformer/sinusoidal/concat",
                            baseline_variant="standard/sinusoidal/add"),
            SimpleNamespace(datasets=["a", "b"], variant="standard/rope/concat",
                            baseline_variant="standard/rope/add"),
            SimpleNamespace(dataset="a", variant="standard/rope/concat",
                            baseline_variant="ressformer/sinusoidal/add")]
    ok = R._shown(Settings(**sel))
    assert [ok(r) for r in recs] == shown


# --- words of a comparison --------------------------------------------------------------

def test_describe_and_where():
    c = comp()
    assert R.describe(c, FUSION) == "concat vs add, pe=sinusoidal"
    assert R.where(c, FUSION) == "synthetic-long/sinusoidal/test_acc concat vs add"
    v = comp(encoder="ressformer", pe="none", baseline="standard/sinusoidal/add")
    assert R.describe(v, VARIANT) == "ressformer/none/concat vs standard/sinusoidal/add"
    assert R.where(v, VARIANT) == ("synthetic-long/test_acc ressformer/none/concat vs "
                                   "standard/sinusoidal/add")
    r = comp(encoder="ressformer")
    assert R.describe(r, FUSION) == "concat vs add, encoder=ressformer, pe=sinusoidal"


def test_not_learned_warnings_group_by_dataset_metric_and_chance():
    cs = [comp(verdict=NOT_LEARNED), comp(verdict=NOT_LEARNED, fusion="gate"),
          comp(verdict=BETTER, fusion="x"), comp(verdict=NOT_LEARNED, dataset="other",
                                                   chance_level=0.25)]
    assert R._not_learned_warnings(cs, FUSION) == [
        {"code": "not_learned", "message": "neither arm beats chance on synthetic-long: these 2 "
         "comparisons say nothing about fusion (concat vs add, pe=sinusoidal; gate vs add, "
         "pe=sinusoidal; test_acc, chance = 0.5)"},
        {"code": "not_learned", "message": "neither arm beats chance on other: this comparison "
         "says nothing about fusion (concat vs add, pe=sinusoidal; test_acc, chance = 0.25)"}]


def test_code_mismatch_warning_lists_ten_then_counts():
    assert R._code_mismatch_warning([dropped("failed_trial")], FUSION) == []
    one = R._code_mismatch_warning([dropped(detail="concat ran code a, add ran b")], FUSION)
    assert one == [{"code": "code_mismatch", "message": "1 pair compare runs of different code "
                    "and were dropped (re-run the stale arm under the current code): "
                    "synthetic-long/sinusoidal/test_acc concat vs add seed 0 (concat ran code "
                    "a, add ran b)"}]
    for n, more in ((10, ""), (12, "; and 2 more")):
        msg = R._code_mismatch_warning([dropped(seed=i) for i in range(n)], FUSION)[0]["message"]
        assert msg.startswith(f"{n} pairs compare runs")
        assert msg.count("seed ") == 10 and msg.endswith("seed 9 (d)" + more)


def test_margin_warnings_only_for_per_dataset_margins():
    cs = [comp(equivalence_margin=None, dataset="b"), comp(equivalence_margin=0.01, dataset="a"),
          comp(equivalence_margin=None, dataset="a2"), comp(equivalence_margin=None, dataset="b")]
    assert R._margin_warnings(cs, Settings(margin=0.01)) == []
    s = Settings(margin={"a": 0.01})
    assert R._margin_warnings(cs, s) == [
        {"code": "no_equivalence_margin", "message": f"equivalence margins are given per dataset "
         f"({s.margin_label()}); none for a2, b: no equivalence test there"}]
    assert R._margin_warnings(cs[1:2], s) == []


def test_degenerate_warnings_group_arms_by_note_and_skip_informative_notes():
    cs = [comp(notes=("only 2 paired seeds: x", "also equivalent within 1")),
          comp(fusion="gate", notes=("only 2 paired seeds: x",)),
          comp(fusion="sum", notes=("equivalent within x", "neither arm beats chance (0.5)",
                                    "ratio: the same ratio (2)")),
          comp(metric="latency", notes=("only 2 paired seeds: x",))]
    assert R._degenerate_warnings(cs, FUSION) == [
        {"code": "degenerate_comparison", "message": "synthetic-long/sinusoidal/test_acc concat "
         "vs add and gate vs add: only 2 paired seeds: x"},
        {"code": "degenerate_comparison", "message": "synthetic-long/sinusoidal/latency concat "
         "vs add: only 2 paired seeds: x"}]


def test_dropped_warning_counts_pairs_and_superseded_runs():
    assert R._dropped_warning([]) == []
    ds = [dropped("failed_trial"), dropped("failed_trial", 1), dropped("code_mismatch", 2)]
    assert R._dropped_warning(ds) == [{"code": "dropped_pairs", "message": "3 pairs dropped "
                                       "(failed_trial: 2, code_mismatch: 1); see the dropped list"}]
    sup = [dropped("superseded_code"), dropped("missing_trial")]
    assert R._dropped_warning(sup)[0]["message"] == (
        "1 pair and 1 superseded run dropped (superseded_code: 1, missing_trial: 1); see the "
        "dropped list")
    two = [dropped("superseded_code"), dropped("superseded_code", 1)]
    assert R._dropped_warning(two)[0]["message"].startswith("0 pairs and 2 superseded runs ")


# --- design warnings ----------------------------------------------------------------------

def test_floors_at_or_above_alpha_are_named_per_n():
    cs = [comp(n=4, min_p_wilcoxon=0.125, min_p_signflip=0.125),
          comp(n=4, min_p_wilcoxon=0.25, min_p_signflip=0.125),
          comp(n=6, min_p_wilcoxon=0.05, min_p_signflip=0.03125),
          comp(n=0, min_p_wilcoxon=nan, min_p_signflip=nan)]
    got = R._design_warnings(cs, Settings(alpha=0.05), 1)
    assert got[0] == {"code": "cannot_reach_alpha", "message": "at n = 4 (2 comparisons) the "
                      "exact two-sided Wilcoxon test cannot go below p = 0.125 (up to 0.25 "
                      "where deltas of 0 are dropped) and the sign-flip permutation test cannot "
                      "go below p = 0.125, which is not below alpha = 0.05: only the t-test can "
                      "reject; add seeds for a non-parametric confirmation"}
    assert got[1]["message"].startswith("at n = 6 (1 comparison) the exact two-sided Wilcoxon "
                                        "test cannot go below p = 0.05, which")
    assert got[2]["code"] == "bootstrap_descriptive" and len(got) == 3


def test_a_floor_below_alpha_blocks_nothing():
    cs = [comp(n=6, min_p_wilcoxon=0.0499, min_p_signflip=nan)]
    assert [w["code"] for w in R._design_warnings(cs, Settings(alpha=0.05), 1)] == [
        "bootstrap_descriptive"]


def test_bootstrap_is_descriptive_below_ten_pairs():
    cs = [comp(n=n, min_p_wilcoxon=0.001, min_p_signflip=0.001) for n in (9, 3, 10, 0, 3)]
    got = [w for w in R._design_warnings(cs, Settings(alpha=0.5), 1)
           if w["code"] == "bootstrap_descriptive"]
    assert got == [{"code": "bootstrap_descriptive", "message": "3 comparisons with fewer than "
                    "10 pairs (n = [3, 9]): BCa bootstrap CIs undercover at this n and are "
                    "descriptive only; the t-interval is the primary interval"}]
    ten = comp(n=10, min_p_wilcoxon=0.002, min_p_signflip=0.002)
    assert R._design_warnings([ten], Settings(), 1) == []


def test_holm_family_warnings_need_more_than_one_member():
    low = dict(n=12, min_p_wilcoxon=0.001, min_p_signflip=0.001)
    cs = [comp(**low, ratio_p=0.1, tost_p=0.2), comp(**low, ratio_p=0.3, tost_p=nan),
          comp(**low, ratio_p=None, tost_p=0.01)]
    got = {w["code"]: w["message"] for w in R._design_warnings(cs, Settings(alpha=0.05), 4)}
    assert got == {
        "holm_ratio_family": "Holm adjustment over r = 2 paired cost-ratio tests (log scale): "
                             "a ratio verdict needs its Holm-adjusted p below alpha",
        "holm_family": "Holm adjustment over m = 4 comparisons (the whole family, whatever a "
                       "selection shows): the smallest paired-t p must be below alpha/m = "
                       "0.0125 to count; 'seeds for 80% power' is given at both alpha and "
                       "alpha/m, post hoc (at the observed effect)",
        "holm_tost_family": "Holm adjustment over k = 2 equivalence (TOST) tests: 'equivalent' "
                            "needs the Holm-adjusted TOST p below alpha"}
    assert list(got) == ["holm_ratio_family", "holm_family", "holm_tost_family"]
    single = [comp(**low, ratio_p=0.1, tost_p=0.2)]
    assert R._design_warnings(single, Settings(), 1) == []


# --- a verdict's notes and caveats ---------------------------------------------------------

def judged_inputs(t_low=0.01, t_high=0.03, margin=0.05, chance=0.5, tost_holm=nan, p_holm=0.01):
    c = SimpleNamespace(stats=SimpleNamespace(t_ci_low=t_low, t_ci_high=t_high),
                        margin=margin, chance_level=chance)
    return c, SimpleNamespace(tost_p_holm=tost_holm, p_holm=p_holm)


def test_verdict_notes_say_what_the_verdict_alone_hides():
    c, a = judged_inputs(chance=0.25)
    assert R._verdict_notes(c, a, NOT_LEARNED, 0.05) == [
        "neither arm beats chance (0.25): verdict 'not learned'; these statistics compare two "
        "chance-level models"]
    c, a = judged_inputs(tost_holm=0.01)
    for v in (BETTER, WORSE):
        assert R._verdict_notes(c, a, v, 0.05) == [
            "also equivalent within ±0.05 (Holm-adjusted TOST p = 0.01): the difference is real "
            "but small"]
    c, a = judged_inputs(tost_holm=0.05)
    assert R._verdict_notes(c, a, BETTER, 0.05) == []
    c, a = judged_inputs(t_low=-0.03, t_high=-0.01, tost_holm=0.02, p_holm=0.2)
    assert R._verdict_notes(c, a, EQUIVALENT, 0.05) == [
        "equivalent within ±0.05 (Holm-adjusted TOST p = 0.02), but the t-interval [-0.03, "
        "-0.01] excludes 0: a difference smaller than the margin, not significant after Holm "
        "(p_holm = 0.2)"]
    for low, high in ((-0.01, 0.01), (0.0, 0.02), (-0.02, 0.0), (nan, nan)):
        c, a = judged_inputs(t_low=low, t_high=high, tost_holm=0.02)
        assert R._verdict_notes(c, a, EQUIVALENT, 0.05) == []
    c, a = judged_inputs(t_low=0.01, t_high=0.02, tost_holm=0.02)
    assert R._verdict_notes(c, a, EQUIVALENT, 0.05)[0].startswith("equivalent within ±0.05")
    assert R._verdict_notes(c, a, INCONCLUSIVE, 0.05) == []


YES_ARM = Learning("concat", YES, exact=True, chance_level=0.5)
YES_REF = Learning("add", YES, exact=True, chance_level=0.5)


def qualify_inputs(n=6, collapse="", unchecked=(), t_p=0.01):
    pair = paired(seeds=tuple(range(n)), x=tuple(0.8 + 0.01 * i for i in range(n)),
                  y=(0.7,) * n, unchecked=unchecked)
    return SimpleNamespace(pair=pair, stats=SimpleNamespace(n=n, t_p=t_p, tost_p=nan),
                           collapse=collapse, margin=None, higher_is_better=True,
                           arm_learning=YES_ARM, ref_learning=YES_REF)


@pytest.mark.parametrize("verdict, n, flagged", [(BETTER, 4, True), (WORSE, 4, True),
                                                 (EQUIVALENT, 4, True), (BETTER, 5, False),
                                                 (INCONCLUSIVE, 2, False), (NOT_LEARNED, 2, False)])
def test_fewer_than_five_pairs_qualify_a_decided_verdict(verdict, n, flagged):
    c = qualify_inputs(n=n)
    v, flags, notes = R._qualify(c, SimpleNamespace(p_holm=0.01, tost_p_holm=nan),
                                 Guarded(verdict), Settings(), False)
    assert v == verdict
    assert flags == ((Caveat(SMALL_N, n=n, below=5),) if flagged else ())
    assert notes == ([f"only {n} pairs: the verdict rests on the paired t-test's normality "
                      "assumption; no exact test can reach alpha at this n"] if flagged else [])


@pytest.mark.parametrize("verdict, flagged", [(BETTER, True), (EQUIVALENT, True),
                                              (WORSE, True), (INCONCLUSIVE, False)])
def test_a_collapse_qualifies_a_decided_verdict(verdict, flagged):
    c = qualify_inputs(collapse="concat at chance on 2 of 6 seeds")
    _, flags, notes = R._qualify(c, SimpleNamespace(p_holm=0.01, tost_p_holm=nan),
                                 Guarded(verdict), Settings(), False)
    assert flags == ((Caveat(COLLAPSE, why="concat at chance on 2 of 6 seeds"),) if flagged
                     else ())
    assert notes == (["concat at chance on 2 of 6 seeds: the deltas mix collapsed and learned "
                      "seeds, so the mean-Δ verdict rests on the t-test's normality; read the "
                      "win rate (exact) beside it"] if flagged else [])


@pytest.mark.parametrize("withheld, tail", [
    (EQUIVALENT, "an equivalence needs both arms shown to beat the majority class by the exact "
                 "per-seed test"),
    (BETTER, "with no arm shown to learn, a difference says nothing about the variants")])
def test_a_withheld_verdict_is_flagged_and_explained(withheld, tail):
    g = Guarded(INCONCLUSIVE, withheld, "add does not beat chance (0.5)")
    v, flags, notes = R._qualify(qualify_inputs(), SimpleNamespace(p_holm=0.01, tost_p_holm=nan),
                                 g, Settings(), False)
    assert v == INCONCLUSIVE and flags == (Caveat(WITHHELD, withheld=withheld,
                                                  why="add does not beat chance (0.5)"),)
    assert notes == [f"verdict withheld ('{withheld}' -> 'inconclusive'): add does not beat "
                     f"chance (0.5); {tail}"]


def test_the_sensitivity_check_puts_dropped_pairs_back_at_the_same_holm_step():
    x, y = (0.80, 0.82, 0.81, 0.83, 0.80, 0.84), (0.70,) * 6
    pair = paired(seeds=tuple(range(6)), x=x, y=y,
                  unchecked=((6, 0.60, 0.90), (7, 0.55, 0.95), (8, 0.5, 0.99)))
    t = stats.paired_t(np.array(x), np.array(y), 0.05)
    c = SimpleNamespace(pair=pair, stats=SimpleNamespace(n=6, t_p=t.p, tost_p=nan), margin=None,
                        higher_is_better=True, arm_learning=YES_ARM, ref_learning=YES_REF,
                        collapse="")
    a = SimpleNamespace(p_holm=min(1.0, t.p * 3), tost_p_holm=nan)
    flag, note = R._sensitivity(c, a, BETTER, Settings(), False)
    allx, ally = np.r_[x, [0.60, 0.55, 0.5]], np.r_[y, [0.90, 0.95, 0.99]]
    p_all = stats.paired_t(allx, ally, 0.05).p
    assert flag == Caveat(ALL_PAIRS, n=9, other=INCONCLUSIVE)
    assert note == (f"sensitivity: with the 3 pair(s) dropped by the fingerprint/code checks put "
                    f"back (9 pairs), the verdict would be 'inconclusive' (paired-t p "
                    f"{p_all:.3g}, Holm step as above); the verdict uses the 6 checked pairs only")
    assert R._sensitivity(c, a, INCONCLUSIVE, Settings(), False) is None
    assert R._sensitivity(c, a, INCONCLUSIVE, Settings(), True) == (
        Caveat(ALL_PAIRS, n=9, other=NOT_LEARNED), note.replace("'inconclusive'", "'not learned'"))
    _, flags, notes = R._qualify(c, a, Guarded(BETTER), Settings(), False)
    assert flags == (flag,) and notes == [note]


def test_the_sensitivity_check_scales_by_the_comparisons_own_holm_step():
    x, y = (0.80, 0.82, 0.81, 0.83, 0.80, 0.84), (0.70, 0.71, 0.70, 0.72, 0.70, 0.71)
    pair = paired(seeds=tuple(range(6)), x=x, y=y, unchecked=((6, 0.81, 0.71),))
    t = stats.paired_t(np.array(x), np.array(y), 0.05)
    c = SimpleNamespace(pair=pair, stats=SimpleNamespace(n=6, t_p=t.p, tost_p=nan), margin=None,
                        higher_is_better=True, arm_learning=YES_ARM, ref_learning=YES_REF)
    allp = stats.paired_t(np.r_[x, 0.81], np.r_[y, 0.71], 0.05).p
    # a Holm step that takes the put-back p just over alpha: not better any more
    a = SimpleNamespace(p_holm=t.p * (0.051 / allp), tost_p_holm=nan)
    assert R._sensitivity(c, a, BETTER, Settings(), False)[0].other == INCONCLUSIVE
    a = SimpleNamespace(p_holm=t.p * (0.049 / allp), tost_p_holm=nan)
    assert R._sensitivity(c, a, BETTER, Settings(), False) is None
    lower = SimpleNamespace(**{**vars(c), "higher_is_better": False})
    assert R._sensitivity(lower, a, WORSE, Settings(), False) is None
    assert R._sensitivity(lower, a, BETTER, Settings(), False)[0].other == WORSE


def test_the_sensitivity_check_scales_the_tost_p_by_its_own_step():
    x = (0.800, 0.802, 0.799, 0.801, 0.800, 0.803)
    y = (0.800, 0.801, 0.800, 0.800, 0.801, 0.802)
    pair = paired(seeds=tuple(range(6)), x=x, y=y, unchecked=((6, 0.801, 0.800),))
    xs, ys = np.array(x), np.array(y)
    t = stats.paired_t(xs, ys, 0.05)
    tost = stats.tost_p(xs, ys, 0.01)
    all_tost = stats.tost_p(np.r_[xs, 0.801], np.r_[ys, 0.800], 0.01)
    c = SimpleNamespace(pair=pair, stats=SimpleNamespace(n=6, t_p=t.p, tost_p=tost), margin=0.01,
                        higher_is_better=True, arm_learning=YES_ARM, ref_learning=YES_REF)
    near = SimpleNamespace(p_holm=1.0, tost_p_holm=tost * (0.051 / all_tost))
    assert R._sensitivity(c, near, EQUIVALENT, Settings(), False)[0].other == INCONCLUSIVE
    under = SimpleNamespace(p_holm=1.0, tost_p_holm=tost * (0.049 / all_tost))
    assert R._sensitivity(c, under, EQUIVALENT, Settings(), False) is None


def test_collapse_names_each_arm_at_chance_on_some_seeds(monkeypatch):
    tests = {"standard/sinusoidal/concat": SimpleNamespace(learn_n=6, learn_count=4),
             "standard/sinusoidal/add": SimpleNamespace(learn_n=6, learn_count=0)}
    monkeypatch.setattr(R, "chance_test", lambda by_arm, dataset, v: tests.get(v.label))
    assert R._collapse({}, paired()) == "standard/sinusoidal/concat at chance on 2 of 6 seeds"
    tests["standard/sinusoidal/add"] = SimpleNamespace(learn_n=6, learn_count=5)
    assert R._collapse({}, paired()) == ("standard/sinusoidal/concat at chance on 2 of 6 seeds; "
                                         "standard/sinusoidal/add at chance on 1 of 6 seeds")
    tests.clear()
    tests["standard/sinusoidal/add"] = SimpleNamespace(learn_n=6, learn_count=6)
    tests["standard/sinusoidal/concat"] = SimpleNamespace(learn_n=0, learn_count=0)
    assert R._collapse({}, paired()) == ""


def test_learning_fields_copy_each_arms_counts():
    arm = Learning("concat", YES, basis="", count=5, n=6)
    ref = Learning("add", UNKNOWN, basis="1/K", count=None, n=None)
    assert R._learning_fields(arm, ref) == R.LearnRates(5, 6, "", None, None, "1/K")


def test_guarded_decision_withholds_like_the_fixed_n_verdicts():
    r = SimpleNamespace(decision=BETTER)
    learned = comp(learned=YES, baseline_learned=NO, arm_learn_basis="", baseline_learn_basis="")
    assert R._guarded_decision(r, learned) is r
    at_chance = comp(learned=NO, baseline_learned=NO, arm_learn_basis="",
                     baseline_learn_basis="")
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Res:
        decision: str

    assert R._guarded_decision(Res(BETTER), at_chance) == Res(NOT_LEARNED)
    unknown = comp(learned=UNKNOWN, baseline_learned=NO, arm_learn_basis="",
                   baseline_learn_basis="", chance_level=nan)
    assert R._guarded_decision(Res(BETTER), unknown) == Res(INCONCLUSIVE)


# --- the whole report's JSON --------------------------------------------------------------

def small_report(**settings) -> R.Report:
    rows = [dict(dataset="synthetic-short", encoder="standard", pe="sinusoidal", fusion=f,
                 seed=s, status="FINISHED", test_acc=b + 0.01 * s + (0.003 * s * s if f ==
                                                                    "concat" else 0))
            for f, b in (("add", 0.7), ("concat", 0.75)) for s in range(5)]
    return R.analyze(tidy(pd.DataFrame(rows)), Settings(n_boot=200, **settings))


def test_the_settings_json_lists_every_tuple_and_the_confidence_level():
    got = small_report(alpha=0.1, datasets=("synthetic-short",), pes=("sinusoidal",),
                       encoders=("standard",)).to_dict()["settings"]
    assert (got["metrics"], got["datasets"], got["pes"], got["encoders"]) == (
        ["test_acc"], ["synthetic-short"], ["sinusoidal"], ["standard"])
    assert got["confidence_level"] == pytest.approx(0.9) and got["alpha"] == 0.1
    assert got["claims"] is None and got["n_boot"] == 200
    assert list(got) == [*(f.name for f in dataclasses.fields(Settings)), "confidence_level"]


def test_a_claim_set_is_written_into_the_json():
    rep = small_report(claims="ressformer")
    assert rep.to_dict()["claims"] == R._json_clean(rep.claims.to_json())
    assert rep.to_dict()["claims"] is not None


def test_the_json_text_is_indented_by_two():
    rep = small_report()
    text = rep.to_json()
    assert text.startswith('{\n  "source": {\n    "kind": "table"')
    assert json.loads(text) == rep.to_dict()


def sensitivity_inputs(x, y, unchecked, t_p, tost_p=nan, margin=None):
    pair = paired(seeds=tuple(range(len(x))), x=x, y=y, unchecked=unchecked)
    return SimpleNamespace(pair=pair, stats=SimpleNamespace(n=len(x), t_p=t_p, tost_p=tost_p),
                           margin=margin, higher_is_better=True, arm_learning=YES_ARM,
                           ref_learning=YES_REF)


def put_back_p(x, y, unchecked):
    return stats.paired_t(np.r_[x, [u[1] for u in unchecked]],
                          np.r_[y, [u[2] for u in unchecked]], 0.05).p


# constant checked deltas (t_p nan), and put-back pairs whose p lands in (alpha/2, alpha)
CONST_X, CONST_Y = (0.8, 0.8, 0.8), (0.7, 0.7, 0.7)
SPREAD = ((3, 0.75, 0.7), (4, 0.9, 0.7), (5, 0.66, 0.69))


def test_without_a_p_of_its_own_the_put_back_p_takes_no_holm_step():
    p = put_back_p(CONST_X, CONST_Y, SPREAD)
    assert 0.025 < p < 0.05  # a step of 2 (or of nan) would lose it
    c = sensitivity_inputs(CONST_X, CONST_Y, SPREAD, t_p=nan)
    a = SimpleNamespace(p_holm=nan, tost_p_holm=nan)
    flag, _ = R._sensitivity(c, a, INCONCLUSIVE, Settings(), False)
    assert flag.other == BETTER
    zero = sensitivity_inputs(CONST_X, CONST_Y, SPREAD, t_p=0.0)
    assert R._sensitivity(zero, SimpleNamespace(p_holm=0.0, tost_p_holm=nan), INCONCLUSIVE,
                          Settings(), False)[0].other == BETTER


def test_without_a_tost_p_of_its_own_the_put_back_tost_takes_no_holm_step():
    x, y = (0.8, 0.8, 0.8), (0.8, 0.8, 0.8)
    back = ((3, 0.801, 0.8), (4, 0.799, 0.8), (5, 0.8, 0.8005), (6, 0.8, 0.7995))
    allx, ally = np.r_[x, [u[1] for u in back]], np.r_[y, [u[2] for u in back]]
    margin = next(m for m in np.linspace(0.0005, 0.01, 400)
                  if 0.025 < stats.tost_p(allx, ally, m) < 0.05)
    for tost_p in (nan, 0.0):
        c = sensitivity_inputs(x, y, back, t_p=nan, tost_p=tost_p, margin=margin)
        a = SimpleNamespace(p_holm=nan, tost_p_holm=0.0 if tost_p == 0.0 else nan)
        assert R._sensitivity(c, a, INCONCLUSIVE, Settings(), False)[0].other == EQUIVALENT


# --- a whole report, field by field ---------------------------------------------------------

def rich_table() -> pd.DataFrame:
    """Two regimes (long listed first), three full arms, an arm with 2 seeds and one with 1,
    a cost metric, a fingerprint mismatch, a code mismatch and a platform mismatch."""
    rows = []
    for dataset, med in (("synthetic-long", 200.0), ("synthetic-short", 20.0)):
        for f, base, seeds in (("gate", 0.80, 5), ("add", 0.70, 5), ("concat", 0.78, 5),
                               ("sum", 0.75, 2), ("mul", 0.76, 1)):
            for s in range(seeds):
                rows.append(dict(
                    dataset=dataset, encoder="standard", pe="sinusoidal", fusion=f, seed=s,
                    status="FINISHED", median_tokens=med, num_classes=2,
                    test_acc=base + 0.01 * s + (0.004 * s * s if f != "add" else 0),
                    latency_ms_per_sample=(2.0 if f == "concat" else 1.0) * (1 + 0.1 * s)
                    if f != "gate" else 0.5 * (1 + 0.1 * s) + 0.01 * (s % 2),
                    fp_split="split", fp_batch_order=f"b{s}", fp_shared_init=f"i{s}",
                    fp_dropout="X" if (dataset, f, s) == ("synthetic-short", "concat", 4)
                    else f"d{s}",
                    code_fingerprint="c2" if (dataset, f, s) == ("synthetic-long", "gate", 3)
                    else "c1",
                    fp_platform="p2" if (dataset, f, s) == ("synthetic-long", "gate", 2)
                    else "p1",
                    platform="CPU b" if (dataset, f, s) == ("synthetic-long", "gate", 2)
                    else "CPU a"))
    return pd.DataFrame(rows)


METRICS = ("test_acc", "latency_ms_per_sample")


def rich_report(**kw) -> R.Report:
    return R.analyze(tidy(rich_table()), Settings(n_boot=200, metrics=METRICS, **kw))


def test_arm_summaries_field_by_field_short_regime_first_and_baseline_first():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one seed's sd is nan by the rule, not by numpy
        rep = rich_report()
    order = [(a.metric, a.dataset, a.fusion) for a in rep.arms]
    assert order == [(m, d, f) for m in METRICS for d in ("synthetic-short", "synthetic-long")
                     for f in ("add", "concat", "gate", "mul", "sum")]
    df = rich_table()
    for a in rep.arms:
        rows = df[(df.dataset == a.dataset) & (df.fusion == a.fusion)]
        v = rows[a.metric].to_numpy(float)
        assert (a.dataset, a.encoder, a.pe, a.variant, a.n) == (
            rows.dataset.iloc[0], "standard", "sinusoidal", f"standard/sinusoidal/{a.fusion}",
            v.size)
        assert (a.mean, a.min, a.max) == (pytest.approx(v.mean()), v.min(), v.max())
        if v.size > 1:
            assert a.sd == pytest.approx(v.std(ddof=1))
        else:
            assert np.isnan(a.sd)
        assert (a.chance_level, a.learned) == (0.5, "yes" if v.size > 1 else "unknown")


def test_a_comparison_record_carries_its_regime_ratio_estimand_and_holm_interval():
    rep = rich_report()
    by = {(c.metric, c.dataset, c.fusion): c for c in rep.comparisons}
    c = by[("test_acc", "synthetic-long", "concat")]
    assert (c.regime, c.median_tokens) == ("synthetic-long (median 200 tokens)", 200.0)
    assert (c.estimand, c.assumes) == (
        "mean Δ", "approximately normal paired Δ (paired t-test; TOST for equivalent)")
    low, high, level = stats.holm_consistent_interval(np.array(c.deltas), c.t_p, c.p_holm, 0.05)
    assert (c.holm_ci_low, c.holm_ci_high, c.holm_ci_level) == (
        pytest.approx(low), pytest.approx(high), pytest.approx(level))
    assert np.isfinite(low) and c.ratio is None and c.ratio_p_holm is None
    lat = by[("latency_ms_per_sample", "synthetic-long", "concat")]
    x = np.array([2.0 * (1 + 0.1 * s) for s in range(5)])
    y = x / 2.0
    r = stats.ratio_test(x, y, 0.05)
    assert (lat.ratio, lat.ratio_ci_low, lat.ratio_ci_high, lat.ratio_p) == (
        pytest.approx(r.ratio), r.low, r.high, r.p)
    assert lat.ratio_verdict == WORSE  # twice the latency, on every seed: an exact ratio
    assert lat.notes == ("ratio: the same ratio (2) on every seed: a deterministic cost, no "
                         "seed noise to test; verdict by the ratio itself",)
    g = by[("latency_ms_per_sample", "synthetic-short", "gate")]
    assert g.ratio < 1 and g.ratio_verdict == BETTER and np.isfinite(g.ratio_p_holm)
    assert not any(n.startswith("ratio:") for n in g.notes)
    same = by[("latency_ms_per_sample", "synthetic-short", "sum")]
    assert same.notes[0].startswith("deltas are all zero (SD = 0)")
    assert same.notes[-1].startswith("ratio: the same ratio (1) on every seed")
    for c in rep.comparisons:
        assert c.power_at_holm_alpha == pytest.approx(
            stats.achieved_power(c.dz, c.n, c.holm_first_step_alpha), nan_ok=True)
        assert c.seeds_for_80_power_at_holm_alpha == stats.seeds_for_power(
            c.dz, c.holm_first_step_alpha)
    assert any(np.isfinite(c.power_at_holm_alpha) for c in rep.comparisons)


def test_a_two_seed_comparison_keeps_its_statistics_note_beside_the_verdicts():
    rep = rich_report()
    (c,) = [c for c in rep.comparisons
            if (c.metric, c.dataset, c.fusion) == ("test_acc", "synthetic-short", "sum")]
    assert c.notes[0] == "only 2 paired seeds: bootstrap CI undefined (needs n >= 3)"


def test_a_better_verdict_also_inside_the_margin_says_so():
    rep = rich_report(margin=0.5, margin_metric="test_acc")
    (c,) = [c for c in rep.comparisons
            if (c.metric, c.dataset, c.fusion) == ("test_acc", "synthetic-long", "concat")]
    assert c.verdict == BETTER
    assert any(n.startswith("also equivalent within ±0.5") for n in c.notes)


def test_the_reports_warnings_name_code_platform_margin_and_dropped_pairs():
    rep = rich_report(margin={"synthetic-short": 0.5}, margin_metric="test_acc")
    got = {w.code: w.message for w in rep.warnings}
    assert "synthetic-long/sinusoidal/test_acc gate vs add seed 3 (gate ran code c2, add ran " \
           "c1)" in got["code_mismatch"]
    assert got["platform_mismatch"].startswith(
        "2 pairs compare runs on different platforms and were dropped (re-run one arm where "
        "the other ran): synthetic-long/sinusoidal/test_acc gate vs add seed 2 (")
    assert "mixed_platforms" in got
    assert got["no_equivalence_margin"].endswith("none for synthetic-long, synthetic-short: no "
                                                 "equivalence test there")
    assert got["dropped_pairs"].startswith(f"{len(rep.dropped)} pairs dropped (")


def test_a_pair_dropped_by_its_fingerprint_gets_the_sensitivity_check():
    rep = rich_report()
    (c,) = [c for c in rep.comparisons
            if (c.metric, c.dataset, c.fusion) == ("test_acc", "synthetic-short", "concat")]
    assert c.n == 4 and 4 not in c.seeds
    (d,) = [d for d in rep.dropped if (d.dataset, d.fusion, d.seed, d.metric) ==
            ("synthetic-short", "concat", 4, "test_acc")]
    assert d.reason == "fingerprint_mismatch"


def test_an_adaptive_sweeps_fixed_n_verdicts_are_descriptive():
    from fusion_sweep.analysis.caveats import DESCRIPTIVE
    rep = R.analyze(tidy(rich_table()), Settings(n_boot=200, metrics=METRICS),
                    Source("table", adaptive={"alpha": 0.05}))
    assert all(Caveat(DESCRIPTIVE) in c.verdict_flags for c in rep.comparisons)
    plain = rich_report()
    assert not any(Caveat(DESCRIPTIVE) in c.verdict_flags for c in plain.comparisons)


def test_the_sequential_section_reads_the_launchs_metric_alpha_method_and_family():
    df = tidy(rich_table())
    flipped = Settings(metrics=METRICS[::-1])  # the first --metric is not the launch's
    rep = R.analyze(df, Settings(n_boot=200, metrics=METRICS[::-1]))
    src = Source("table", adaptive={"alpha": 0.1, "method": "betting"},
                 space={"metric": "test_acc"})
    sec = R.sequential_section(rep.comparisons, flipped, src, df)
    family, where = R.launch_family(src, flipped, df)
    assert (sec.metric, sec.alpha, sec.m, sec.family_source, sec.method) == (
        "test_acc", 0.1, family["m"], where, "betting")
    assert sec.assumption == R.get_method("betting").assumption
    assert sec.fixed_n_label == R.DESCRIPTIVE_LABEL
    assert sec.results and all(r.method == "betting"
                               and r.alpha_each == pytest.approx(0.1 / family["m"])
                               for r in sec.results)
    members = {(m["dataset"], m["variant"]) for m in family["members"]}
    assert len(sec.results) == sum((c.metric == "test_acc" and (c.dataset, c.variant) in members)
                                   for c in rep.comparisons)
    one = {"m": 1, "members": [{"dataset": "synthetic-short", "variant":
                                "standard/sinusoidal/concat",
                                "baseline_variant": "standard/sinusoidal/add"}]}
    single = R.sequential_section(rep.comparisons, flipped,
                                  Source("table", adaptive={"alpha": 0.1, "method": "betting"},
                                         space={"metric": "test_acc"}, comparison_family=one),
                                  df)
    assert (single.m, single.family_source, len(single.results)) == (1, R.FAMILY_RECORDED, 1)
    assert single.results[0].alpha_each == pytest.approx(0.1)  # alpha / 1, never / 2
    legacy = R.sequential_section(rep.comparisons, flipped,
                                  Source("table", adaptive={"max_seeds": 10}), df)
    assert (legacy.metric, legacy.alpha, legacy.method) == (
        "latency_ms_per_sample", 0.05, R.get_method(R.LEGACY_METHOD).name)
    assert R.sequential_section(rep.comparisons, flipped, Source("table"), df) is None


def test_the_selection_shows_its_datasets_pes_and_encoders_without_superseded_runs():
    rows = [dict(dataset=d, encoder=e, pe=pe, fusion=f, seed=0, status="FINISHED",
                 test_acc=0.7, code_fingerprint="new")
            for d in ("a", "b") for e in ("standard", "ressformer") for pe in ("rope", "none")
            for f in ("add", "concat")]
    rows.append({**rows[0], "code_fingerprint": "old", "test_acc": 0.1})
    df = tidy(pd.DataFrame(rows))
    regimes = [SimpleNamespace(dataset="a"), SimpleNamespace(dataset="b")]
    src = Source("table", code_fingerprint="new")
    for sel, want in (({"datasets": ("a",)}, ("a", None, None)),
                      ({"pes": ("rope",)}, (None, "rope", None)),
                      ({"encoders": ("ressformer",)}, (None, None, "ressformer"))):
        table, shown = R._selection(df, Settings(**sel), src, regimes)
        for col, value in zip(("dataset", "pe", "encoder"), want):
            if value is not None:
                assert set(table[col]) == {value}
        assert [r.dataset for r in shown] == sorted(set(table["dataset"]))
    table, shown = R._selection(df, Settings(), src, regimes)
    assert len(table) == len(rows) - 1 and 0.1 not in set(table["test_acc"])
    assert [r.dataset for r in shown] == ["a", "b"]


# --- analyze's own wiring -----------------------------------------------------------------

def test_comparisons_come_by_metric_as_given_then_regime_short_to_long():
    rep = rich_report()
    keys = [(c.metric, c.dataset) for c in rep.comparisons]
    assert keys == sorted(keys, key=lambda k: (METRICS.index(k[0]),
                                               k[1] != "synthetic-short"))
    assert keys[0] == ("test_acc", "synthetic-short")  # pairing's own order is by name


def test_the_win_rate_fields_of_a_record():
    from fusion_sweep.analysis.winrate import sign_test

    rep = rich_report()
    for c in rep.comparisons:
        st = sign_test(np.array(c.deltas), confidence=0.95, lost=len(c.lost_seeds))
        assert (c.win_estimand, c.win_assumes) == ("win rate", WIN.assumes)
        assert (c.wins, c.losses, c.ties) == (st.wins, st.losses, st.ties)
        assert (c.win_ci_low, c.win_ci_high) == (pytest.approx(st.ci_low, nan_ok=True),
                                                 pytest.approx(st.ci_high, nan_ok=True))
    assert any(c.ties > 0 for c in rep.comparisons)


def test_each_comparison_has_its_own_reproducible_resampling():
    a, b = rich_report(), rich_report()
    assert [c.boot_ci_low for c in a.comparisons] == pytest.approx(
        [c.boot_ci_low for c in b.comparisons], nan_ok=True)
    c = a.comparisons[0]
    assert np.isfinite(c.boot_ci_low) and c.boot_method == "BCa, 200 resamples"


def test_per_dataset_margins_reach_each_comparison():
    rep = rich_report(margin={"synthetic-short": 0.5}, margin_metric="test_acc")
    got = {(c.metric, c.dataset): c.equivalence_margin for c in rep.comparisons}
    assert got[("test_acc", "synthetic-short")] == 0.5
    assert got[("test_acc", "synthetic-long")] is None


def test_a_put_back_pair_that_changes_nothing_adds_no_flag():
    rep = rich_report()
    (c,) = [c for c in rep.comparisons
            if (c.metric, c.dataset, c.fusion) == ("test_acc", "synthetic-short", "concat")]
    assert [f.kind for f in c.verdict_flags] == ["small n"]  # no 'all pairs' flag


def test_the_report_names_its_chance_method_and_its_interaction_contrast():
    from fusion_sweep.analysis.chance import METHOD

    rep = rich_report()
    assert rep.chance.method == METHOD
    assert "longest minus shortest regime (by median_tokens)" in rep.interaction.method


def test_a_variant_baseline_names_the_interaction_tests_by_full_labels():
    rep = R.analyze(tidy(rich_table()), Settings(n_boot=200, metrics=METRICS,
                                                 baseline="standard/sinusoidal/add"))
    got = [w.message for w in rep.warnings if w.code.startswith("degenerate_inter")]
    assert got == ["interaction standard/sinusoidal/sum vs standard/sinusoidal/add "
                   "(latency_ms_per_sample): Welch ANOVA undefined (zero-variance deltas)"]


def test_superseded_runs_never_enter_a_comparison():
    df = rich_table().assign(code_fingerprint="new")
    old = df[(df.dataset == "synthetic-short") & (df.fusion == "concat")].assign(
        code_fingerprint="old", test_acc=0.1)
    rep = R.analyze(tidy(pd.concat([df, old], ignore_index=True)),
                    Settings(n_boot=200, metrics=METRICS), Source("table", code_fingerprint="new"))
    (c,) = [c for c in rep.comparisons
            if (c.metric, c.dataset, c.fusion) == ("test_acc", "synthetic-short", "concat")]
    assert c.n == 4 and min(c.deltas) > 0  # the old runs' 0.1 never paired
    assert sum(d.reason == "superseded_code" for d in rep.dropped) == 5


def test_a_class_count_given_on_the_command_line_sets_the_chance_level():
    df = tidy(rich_table().drop(columns=["num_classes"]))
    rep = R.analyze(df, Settings(n_boot=200, metrics=METRICS,
                                 num_classes={"synthetic-short": 4, "synthetic-long": 4}))
    assert {a.chance_level for a in rep.arms} == {0.25}


def test_claims_are_descriptive_only_after_an_adaptive_sweep():
    df = tidy(rich_table())
    plain = R.analyze(df, Settings(n_boot=200, metrics=METRICS, claims="ressformer"))
    assert not plain.claims.method.startswith(R.DESCRIPTIVE_LABEL)
    adaptive = R.analyze(df, Settings(n_boot=200, metrics=METRICS, claims="ressformer"),
                         Source("table", adaptive={"alpha": 0.05}))
    assert adaptive.claims.method == f"{R.DESCRIPTIVE_LABEL}: {plain.claims.method}"
    assert len(adaptive.claims.tests) == len(plain.claims.tests)


def test_floors_bootstrap_and_family_warnings_at_one_pair_and_two_comparisons():
    one = comp(n=1, min_p_wilcoxon=1.0, min_p_signflip=1.0)
    got = {w["code"]: w["message"] for w in R._design_warnings([one], Settings(), 2)}
    assert got["cannot_reach_alpha"].startswith("at n = 1 (1 comparison) the exact two-sided "
                                                "Wilcoxon test cannot go below p = 1 and")
    assert "(n = [1])" in got["bootstrap_descriptive"]
    assert got["holm_family"].startswith("Holm adjustment over m = 2 comparisons")


def test_code_mismatches_are_listed_with_semicolons_and_eleven_say_one_more():
    two = R._code_mismatch_warning([dropped(seed=0), dropped(seed=1)], FUSION)[0]["message"]
    assert "seed 0 (d); synthetic-long/sinusoidal/test_acc concat vs add seed 1 (d)" in two
    eleven = R._code_mismatch_warning([dropped(seed=i) for i in range(11)], FUSION)
    assert eleven[0]["message"].endswith("seed 9 (d); and 1 more")


def test_a_degenerate_warning_keeps_a_dataset_name_with_spaces_whole():
    c = comp(dataset="my  data", notes=("only 2 paired seeds: x",))
    assert R._degenerate_warnings([c], FUSION)[0]["message"] == (
        "my  data/sinusoidal/test_acc concat vs add: only 2 paired seeds: x")

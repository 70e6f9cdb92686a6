"""The encoder axis in `stats`: variants, baselines, encoder fingerprints, cost ratios, and
the claims report (`--claims ressformer`), on synthetic tidy tables (no torch, no training)."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from fusion_sweep.analysis import caveats
from fusion_sweep.analysis import cli
from fusion_sweep.analysis import stats as S
from fusion_sweep.analysis.claims import CLAIMS, ClaimSet, get_claim_set
from fusion_sweep.analysis.demo import RESS_EFFECTS, synthetic_results, synthetic_ressformer_results
from fusion_sweep.analysis.load import tidy
from fusion_sweep.analysis.report import analyze, validated
from fusion_sweep.analysis.stats import comparison_rng
from fusion_sweep.analysis.settings import Settings
from fusion_sweep.analysis.schema import (
    CLAIM_KEYS, CLAIM_SET_KEYS, CLAIM_TEST_KEYS, CONTRADICTS, MIXED, NOT_TESTABLE,
    SUPPORTS, UNDECIDED, AnalysisError,
)
from fusion_sweep.analysis.records import Comparison
from fusion_sweep.analysis.variants import Variant, parse_baseline

COMPARISON_KEYS = Comparison.json_keys()  # the JSON keys of a comparison: its record's fields

FULL = "standard/sinusoidal/add"
RESS, STD_SIN, STD_ROT = "ressformer/none/add", "standard/sinusoidal/add", "standard/rotary/add"
NO_SOES, NO_ASAM, NO_R2MU = ("ressformer-no-soes/sinusoidal/add", "ressformer-no-asam/none/add",
                             "ressformer-no-r2mu/none/add")


def ress(**kw) -> pd.DataFrame:
    return tidy(synthetic_ressformer_results(**kw))


def _claims(df: pd.DataFrame, margin: float | None = 0.02, **kw):
    s = Settings(baseline=FULL, n_boot=200, margin=margin, margin_metric="test_acc",
                 claims="ressformer", **kw)
    return analyze(df, s)


def _tests(rep, claim: str) -> list[dict]:
    return [t for t in rep.claims.to_json()["tests"] if t["claim"] == claim]


def _claim(rep, claim: str) -> dict:
    return next(c for c in rep.claims.to_json()["claims"] if c["claim"] == claim)


def _cell(df: pd.DataFrame, label: str, dataset: str, seed: int | None = None) -> pd.Series:
    v = Variant.parse(label)
    m = ((df.dataset == dataset) & (df.encoder == v.encoder) & (df.pe == v.pe)
         & (df.fusion == v.fusion))
    return m & (df.seed == seed) if seed is not None else m


def _values(df: pd.DataFrame, label: str, dataset: str, metric: str = "test_acc") -> np.ndarray:
    return df[_cell(df, label, dataset)].sort_values("seed")[metric].to_numpy(dtype=float)


# ------------------------------------------------------------------------- the axis
@pytest.mark.parametrize("spec,fixed,free", [
    ("add", ("fusion",), ("encoder", "pe")),
    ("standard/sinusoidal/add", ("encoder", "pe", "fusion"), ()),
])
def test_baseline_spec_fixes_fields_and_groups_by_the_rest(spec, fixed, free) -> None:
    axis = parse_baseline(spec)
    assert (axis.fixed, axis.free) == (fixed, free)
    v = Variant("ressformer", "none", "add")
    assert axis.matches(v) == (spec == "add")
    assert axis.reference(axis.group(v)) == (v if spec == "add" else Variant.parse(spec))


@pytest.mark.parametrize("spec", ["a/b", "a//c", "/", "a/b/c/d", " "])
def test_bad_baseline_names_both_forms(spec: str) -> None:
    with pytest.raises(AnalysisError, match=r"--baseline must be a fusion name \(e\.g\. add\) "
                                            r"or a full variant label encoder/pe/fusion"):
        Settings(baseline=spec).validate()


def test_legacy_table_gives_the_same_numbers_with_an_encoder_column() -> None:
    """An old file (no `encoder`) and the same rows labelled `standard` are one analysis;
    the fusion baseline keeps the old resampling key, so the bootstrap numbers are the old."""
    old = synthetic_results(pes=("sinusoidal", "learned"))
    s = Settings(n_boot=300, margin=0.01)
    a = analyze(tidy(old), s).to_dict()
    b = analyze(tidy(old.assign(encoder="standard")), s).to_dict()
    assert a == b
    c = next(c for c in a["comparisons"] if c["dataset"] == "synthetic-long"
             and c["fusion"] == "concat" and c["pe"] == "learned")
    d = np.array(c["deltas"])
    rng = comparison_rng(0, ("synthetic-long", "learned", "test_acc", "concat", "add"))
    S.signflip_test(d, rng, 300)  # compare_paired draws the sign flips first, then BCa
    assert (c["boot_ci_low"], c["boot_ci_high"]) == pytest.approx(S.bca_interval(d, 0.05, 300, rng))


def test_full_variant_baseline_compares_every_variant_across_encoders_and_pes() -> None:
    df = ress()
    rep = analyze(df, Settings(baseline=FULL, n_boot=200))
    assert len(rep.comparisons) == 6 * 6  # 6 datasets x 6 variants besides the baseline
    for c in rep.comparisons:
        assert set(COMPARISON_KEYS) <= set(c.to_json())
        assert c.baseline == c.baseline_variant == FULL
        assert c.variant == f"{c.encoder}/{c.pe}/{c.fusion}" != FULL
        x, y = _values(df, c.variant, c.dataset), _values(df, FULL, c.dataset)
        assert c.mean_delta == pytest.approx((x - y).mean(), abs=1e-12)
        ref = sps.ttest_rel(x, y)
        assert c.t_p == pytest.approx(ref.pvalue, abs=1e-12)
    got = {(c.dataset, c.variant) for c in rep.comparisons}
    assert ("synthetic-short", RESS) in got and ("synthetic-long", NO_SOES) in got
    sr = next(c for c in rep.comparisons if c.variant == "standard/none/add")
    # Issue 39 (one guard rule): with exactly one arm learned, `worse` stands; no flag
    # withholds it.
    assert (sr.learned, sr.baseline_learned, sr.verdict) == ("no", "yes", "worse")
    assert not caveats.has(sr.verdict_flags, caveats.WITHHELD)
    # interaction: one test per variant pair across the six datasets
    tested = {t.variant for t in rep.interaction.tests}
    assert tested == {c.variant for c in rep.comparisons}


def test_fusion_baseline_stays_within_one_encoder_and_pe() -> None:
    rows = synthetic_results(pes=("sinusoidal",))
    rows = rows[rows.fusion.isin(["add", "concat"])]
    both = pd.concat([rows, rows.assign(encoder="ressformer", pe="none")])
    rep = analyze(tidy(both), Settings(n_boot=200))
    pairs = {(c.encoder, c.pe, c.fusion, c.baseline) for c in rep.comparisons}
    assert pairs == {("standard", "sinusoidal", "concat", "add"),
                     ("ressformer", "none", "concat", "add")}
    assert {c.baseline_variant for c in rep.comparisons} == {"standard/sinusoidal/add",
                                                                 "ressformer/none/add"}
    # --pairs all stays within each group too
    rep = analyze(tidy(both), Settings(n_boot=200, pairs="all"))
    assert {(c.variant, c.baseline_variant) for c in rep.comparisons} == {
        ("standard/sinusoidal/concat", "standard/sinusoidal/add"),
        ("ressformer/none/concat", "ressformer/none/add")}


def test_pairs_all_with_a_full_label_compares_every_pair_of_a_dataset() -> None:
    df = ress()
    df = df[df.dataset == "synthetic-short"]
    rep = analyze(df, Settings(baseline=FULL, n_boot=200, pairs="all"))
    assert len(rep.comparisons) == 7 * 6 // 2
    assert all(c.baseline == c.baseline_variant for c in rep.comparisons)
    assert sum(c.baseline_variant == FULL for c in rep.comparisons) == 6


def test_encoder_fingerprint_is_checked_only_within_one_encoder() -> None:
    df = ress()
    # across encoders the encoder bodies differ by construction: never a drop
    rep = analyze(df, Settings(baseline=FULL, n_boot=200))
    assert rep.dropped == []
    # two variants of ONE encoder label (pe none vs pe sinusoidal) must share the body's init
    extra = df[_cell(df, RESS, "synthetic-short")].assign(pe="sinusoidal")
    extra.loc[extra.seed == 2, "fp_encoder_init"] = "0badbody"
    both = pd.concat([df, extra], ignore_index=True)
    rep = analyze(both, Settings(baseline="ressformer/none/add", n_boot=200,
                                 datasets=("synthetic-short",)))
    (d,) = rep.dropped
    assert (d.variant, d.baseline_variant, d.seed, d.reason) == (
        "ressformer/sinusoidal/add", RESS, 2, "fingerprint_mismatch")
    assert d.detail.startswith("encoder_init (0badbody vs ")


def test_shared_fingerprint_mismatch_across_encoders_is_dropped() -> None:
    df = ress()
    df.loc[_cell(df, RESS, "synthetic-medium", 3), "fp_shared_init"] = "feedface"
    rep = analyze(df, Settings(baseline=FULL, n_boot=200))
    (d,) = rep.dropped
    assert (d.dataset, d.encoder, d.pe, d.seed, d.reason) == (
        "synthetic-medium", "ressformer", "none", 3, "fingerprint_mismatch")
    assert d.baseline == FULL and d.detail.startswith("shared_init (feedface vs ")
    c = next(c for c in rep.comparisons if c.dataset == "synthetic-medium"
             and c.variant == RESS)
    assert c.n == 4 and 3 not in c.seeds


def test_text_and_tables_name_variants_unambiguously(capsys, tmp_path: Path) -> None:
    p = tmp_path / "r.csv"
    synthetic_ressformer_results().to_csv(p, index=False)
    args = cli.build_parser().parse_args(["stats", "--results", str(p), "--baseline", FULL,
                                          "--bootstrap", "200"])
    assert args.func(args) == 0
    out = capsys.readouterr().out  # the 120-column default: one reference, named in titles
    assert ("synthetic-short (median 48 tokens) · vs standard/sinusoidal/add · test_acc "
            "(higher is better)") in out
    assert re.search(r"\n  ressformer-no-soes/", out)
    args = cli.build_parser().parse_args(["stats", "--results", str(p), "--baseline", FULL,
                                          "--bootstrap", "200", "--wide"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "synthetic-short (median 48 tokens) · test_acc (higher is better)" in out
    assert re.search(r"\n  ressformer-no-soes/sinusoidal/add +standard/sinusoidal/add +5 ", out)
    assert "Does the variant effect differ across these datasets?" in out
    assert "  dataset  encoder  pe  metric  fusion  vs" in out  # dropped pairs: arm's fields


# ------------------------------------------------------------------------ cost ratios
def test_ratio_ci_matches_a_hand_computation() -> None:
    rng = np.random.default_rng(3)
    y = 0.4 * np.exp(rng.normal(0, 0.05, 6))
    x = y * 0.8 * np.exp(rng.normal(0, 0.03, 6))
    r = S.ratio_test(x, y, 0.05)
    lr = np.log(x / y)
    t = sps.ttest_1samp(lr, 0.0)
    ci = t.confidence_interval(0.95)
    assert r.ratio == pytest.approx(math.exp(lr.mean()), rel=1e-10)
    assert r.ratio == pytest.approx(np.prod(x / y) ** (1 / 6), rel=1e-10)  # geometric mean
    assert (r.low, r.high) == pytest.approx((math.exp(ci.low), math.exp(ci.high)), rel=1e-10)
    assert r.p == pytest.approx(t.pvalue, rel=1e-10)
    assert S.ratio_verdict(r, r.p, 0.05, higher_is_better=False) == "better"
    assert S.ratio_verdict(r, 0.5, 0.05, higher_is_better=False) == "inconclusive"


def test_exact_ratio_of_a_deterministic_cost_and_undefined_ratios() -> None:
    y = np.array([100.0, 100.0, 100.0])
    r = S.ratio_test(0.7 * y, y, 0.05)
    assert r.exact and r.ratio == pytest.approx(0.7) and math.isnan(r.p)
    assert S.ratio_verdict(r, math.nan, 0.05, higher_is_better=False) == "better"
    assert S.ratio_verdict(S.ratio_test(1.3 * y, y, 0.05), math.nan, 0.05, False) == "worse"
    assert "<= 0" in S.ratio_test(np.array([1.0, 0.0]), np.array([1.0, 1.0]), 0.05).note
    one = S.ratio_test(np.array([2.0]), np.array([1.0]), 0.05)
    assert not one.exact and S.ratio_verdict(one, math.nan, 0.05, False) == "inconclusive"


def test_cost_metrics_in_the_report_get_ratios_and_their_own_holm_family() -> None:
    df = ress()
    rep = analyze(df, Settings(baseline=FULL, n_boot=200,
                               metrics=("latency_ms_per_sample", "flops_per_token", "test_acc")))
    lat = [c for c in rep.comparisons if c.metric == "latency_ms_per_sample"]
    raw = [c.ratio_p for c in rep.comparisons if c.ratio_p is not None
           and np.isfinite(c.ratio_p)]
    assert len(raw) == len(lat)  # FLOPs ratios are exact: no p
    adj = multipletests(raw, method="holm")[1]
    assert [c.ratio_p_holm for c in lat] == pytest.approx(list(adj), abs=1e-12)
    c = next(c for c in lat if c.variant == NO_ASAM and c.dataset == "synthetic-long")
    x, y = (_values(df, NO_ASAM, "synthetic-long", "latency_ms_per_sample"),
            _values(df, FULL, "synthetic-long", "latency_ms_per_sample"))
    assert c.ratio == pytest.approx(np.exp(np.log(x / y).mean()))
    assert c.ratio_verdict == "worse"  # planted 1.4x
    flops = [c for c in rep.comparisons if c.metric == "flops_per_token"
             and c.variant == RESS]
    assert all(c.ratio == pytest.approx(0.7) and c.ratio_verdict == "better" for c in flops)
    assert all(c.ratio is None for c in rep.comparisons if c.metric == "test_acc")
    assert any(w.code == "holm_ratio_family" for w in rep.warnings)


# ------------------------------------------------------------------------------ claims
def test_registry_and_unknown_claim_set(capsys, tmp_path: Path) -> None:
    assert set(CLAIMS) == {"ressformer", "fusion-matters"}
    assert all(isinstance(c, ClaimSet) for c in CLAIMS.values())
    assert [c.id for c in CLAIMS["ressformer"].claims] == [f"C{i}" for i in range(1, 8)]
    with pytest.raises(AnalysisError,
                       match=r"unknown --claims 'paper2'; claim sets: fusion-matters, ressformer"):
        get_claim_set("paper2")
    with pytest.raises(AnalysisError, match=r"unknown --claims 'x'"):
        validated(Settings(claims="x"))
    p = tmp_path / "r.csv"
    synthetic_ressformer_results(seeds=3).to_csv(p, index=False)
    for argv, match in ((["--claims", "nope"],
                         "unknown --claims 'nope'; claim sets: fusion-matters, ressformer"),
                        (["--baseline", "a/b"], "--baseline must be a fusion name"),
                        (["--baseline", "x/y/z"], "baseline variant 'x/y/z' is absent from the "
                                                  "data; variants present: ressformer-no-asam")):
        args = cli.build_parser().parse_args(["stats", "--results", str(p), *argv])
        assert args.func(args) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.startswith("fusion-sweep stats: error: ") and match in err


def test_every_claim_supported_on_planted_effects() -> None:
    rep = _claims(ress())
    assert [c["support"] for c in rep.claims.to_json()["claims"]] == ["SUPPORTS"] * 7
    counts = {c["claim"]: c["n_tests"] for c in rep.claims.to_json()["claims"]}
    tests = {c["claim"]: c["n_claim_tests"] for c in rep.claims.to_json()["claims"]}
    # tallied per TRAINING (3 regimes; a regime's -shuffled probe re-tests the same models):
    # C5 two cost metrics x 3, C6 the 1 long regime, C7 two steps x 3
    assert counts == {"C1": 3, "C2": 3, "C3": 3, "C4": 3, "C5": 6, "C6": 1, "C7": 6}
    # the claim tests themselves: per test set (6 datasets), C6 the long regime only
    assert tests == {"C1": 6, "C2": 6, "C3": 3, "C4": 6, "C5": 12, "C6": 1, "C7": 12}
    assert {t["verdict"] for t in rep.claims.to_json()["tests"]} - {"equivalent"} == {"better"}
    c6 = _tests(rep, "C6")
    assert [t["datasets"] for t in c6] == [["synthetic-long"]]  # not synthetic-long-shuffled


def test_claim_json_schema(tmp_path: Path, capsys) -> None:
    p = tmp_path / "r.csv"
    synthetic_ressformer_results(seeds=4).to_csv(p, index=False)
    args = cli.build_parser().parse_args(["stats", "--results", str(p), "--baseline", FULL,
                                          "--claims", "ressformer", "--format", "json",
                                          "--bootstrap", "200"])
    assert args.func(args) == 0
    rep = json.loads(capsys.readouterr().out)
    claims = rep["claims"]
    assert tuple(claims) == CLAIM_SET_KEYS
    assert all(tuple(c) == CLAIM_KEYS for c in claims["claims"])
    assert all(tuple(t) == CLAIM_TEST_KEYS for t in claims["tests"])
    t = next(t for t in claims["tests"] if t["alternative"] == "greater")
    assert t["ci_high"] is None  # one-sided interval [low, +inf)


def test_holm_over_the_family_of_claim_tests() -> None:
    rep = _claims(ress(noise=0.006))
    tests = rep.claims.to_json()["tests"]
    ok = [t for t in tests if np.isfinite(t["p"])]
    assert rep.claims.to_json()["family_size"] == len(ok) > 30
    ref = multipletests([t["p"] for t in ok], method="holm")[1]
    assert [t["p_holm"] for t in ok] == pytest.approx(list(ref), abs=1e-12)
    tost = [t for t in tests if np.isfinite(t["tost_p"])]
    assert rep.claims.to_json()["tost_family_size"] == len(tost) == 6 + 6 + 6 + 1  # C1, C2, C4, C6
    assert [t["tost_p_holm"] for t in tost] == pytest.approx(
        list(multipletests([t["tost_p"] for t in tost], method="holm")[1]), abs=1e-12)
    # The C5 FLOPs ratios are exact (deterministic cost): no p, not in the family.
    flops = [t for t in _tests(rep, "C5") if t["metric"] == "flops_per_token"]
    assert all(math.isnan(t["p"]) and t["verdict"] == "better" for t in flops)


def test_c1_numbers_are_the_reports_comparison() -> None:
    df = ress()
    rep = _claims(df)
    for t in _tests(rep, "C1"):
        c = next(c for c in rep.comparisons if c.dataset == t["datasets"][0]
                 and c.variant == RESS)
        assert (t["estimate"], t["ci_low"], t["ci_high"], t["p"], t["tost_p"]) == pytest.approx(
            (c.mean_delta, c.t_ci_low, c.t_ci_high, c.t_p, c.tost_p), abs=1e-12)
        assert t["arm"] == RESS and t["reference"] == STD_SIN and t["n"] == c.n


def test_c3_is_a_one_sided_difference_of_paired_deltas_by_seed() -> None:
    df = ress(noise=0.006)
    rep = _claims(df)
    t = next(t for t in _tests(rep, "C3") if t["datasets"][0] == "synthetic-medium-shuffled")
    noisy, clean = "synthetic-medium-shuffled", "synthetic-medium"
    d = ((_values(df, RESS, noisy) - _values(df, STD_SIN, noisy))
         - (_values(df, RESS, clean) - _values(df, STD_SIN, clean)))
    ref = sps.ttest_1samp(d, 0.0, alternative="greater")
    assert t["deltas"] == pytest.approx(list(d), abs=1e-9)
    assert t["p"] == pytest.approx(ref.pvalue, abs=1e-10)
    assert t["ci_low"] == pytest.approx(ref.confidence_interval(0.95).low, abs=1e-10)
    assert t["alternative"] == "greater" and t["estimate_kind"] == "difference of mean differences"


def test_c7_contrast_is_the_difference_of_drops() -> None:
    df = ress()
    rep = _claims(df)
    t = next(t for t in _tests(rep, "C7") if t["test"] == "C7 · synthetic-long · D_soes > D_asam")
    full = _values(df, RESS, "synthetic-long")
    d_soes = full - _values(df, NO_SOES, "synthetic-long")
    d_asam = full - _values(df, NO_ASAM, "synthetic-long")
    assert t["deltas"] == pytest.approx(list(d_soes - d_asam), abs=1e-9)


def _contradicting() -> dict:
    """Every accuracy claim the other way round: SOES worse than the PEs (more so when
    shuffled), ASAM and R2MU harmful, the ablation drops ordered D_soes < D_asam < D_r2mu
    (-0.06 < -0.04 < -0.02: removing a module helps)."""
    return {STD_SIN: (0.0, -0.02), STD_ROT: (0.01, -0.02), RESS: (-0.03, -0.06),
            NO_SOES: (0.03, -0.06), NO_ASAM: (0.01, -0.06), NO_R2MU: (-0.01, -0.06)}


def test_claims_contradicted() -> None:
    rep = _claims(ress(effects=_contradicting()))
    support = {c["claim"]: c["support"] for c in rep.claims.to_json()["claims"]}
    assert support == {"C1": "CONTRADICTS", "C2": "CONTRADICTS", "C3": "CONTRADICTS",
                       "C4": "CONTRADICTS", "C5": "SUPPORTS", "C6": "CONTRADICTS",
                       "C7": "CONTRADICTS"}
    assert {t["verdict"] for t in _tests(rep, "C3")} == {"worse"}  # opposite one-sided p < a/m
    assert {t["verdict"] for t in _tests(rep, "C7")} == {"worse"}
    # C5: the latency factors are unchanged (ASAM cheaper): supported while accuracy is not
    assert {t["support"] for t in _tests(rep, "C5")} == {"SUPPORTS"}


def test_c5_contradicted_when_asam_costs_more(monkeypatch) -> None:
    from fusion_sweep.analysis import demo
    costs = dict(demo.RESS_COSTS, **{"ressformer-no-asam": (0.8, 0.5, 30_000)})
    monkeypatch.setattr(demo, "RESS_COSTS", costs)
    rep = _claims(ress())
    assert _claim(rep, "C5")["support"] == "CONTRADICTS"
    assert {t["verdict"] for t in _tests(rep, "C5")} == {"worse"}


def _exact(raw: pd.DataFrame) -> pd.DataFrame:
    """The demo table with what every trial logs besides (the test split's majority rate and
    size): `equivalent` needs both arms shown to beat the majority class (issue 39)."""
    return tidy(raw.assign(test_majority_rate=1 / raw["num_classes"], test_n=2000))


def test_equivalent_supports_c4_and_contradicts_c1() -> None:
    eff = dict(RESS_EFFECTS, **{NO_ASAM: RESS_EFFECTS[RESS], STD_SIN: RESS_EFFECTS[RESS]})
    rep = _claims(_exact(synthetic_ressformer_results(effects=eff, noise=0.002)), margin=0.02)
    assert {t["verdict"] for t in _tests(rep, "C4")} == {"equivalent"}
    assert _claim(rep, "C4")["support"] == "SUPPORTS"
    c1 = _tests(rep, "C1")
    assert {t["verdict"] for t in c1} == {"equivalent"}
    assert _claim(rep, "C1")["support"] == "CONTRADICTS"
    # without a margin there is no equivalence test: C4 undecided
    rep = _claims(ress(effects=eff, noise=0.002), margin=None)
    assert _claim(rep, "C4")["support"] == "does not decide"
    assert all(math.isnan(t["tost_p"]) for t in _tests(rep, "C4"))


def test_claim_whose_arms_sit_at_chance_is_not_learned() -> None:
    eff = dict(RESS_EFFECTS, **{RESS: None, STD_SIN: None})
    rep = _claims(ress(effects=eff, noise=0.004))
    assert {t["verdict"] for t in _tests(rep, "C1")} == {"not learned"}
    assert _claim(rep, "C1")["support"] == "does not decide"
    t = _tests(rep, "C1")[0]
    assert set(t["learned"].values()) == {"no"}
    # only one arm at chance is a real result: SOES at chance vs a learned rotary PE
    assert {t["verdict"] for t in _tests(rep, "C2")} == {"worse"}
    # C3 compares two chance-level pairs' deltas: not learned as well
    assert {t["verdict"] for t in _tests(rep, "C3")} == {"not learned"}


def test_claims_not_run_name_what_is_missing() -> None:
    df = ress()
    df = df[(df.encoder != "ressformer-no-r2mu") & ~df.dataset.str.endswith("-shuffled")]
    rep = _claims(df)
    c6 = _claim(rep, "C6")
    assert c6["support"] == "not run" and c6["n_tests"] == 0
    assert c6["missing"] == ["variant ressformer-no-r2mu/none/add not in the sweep"]
    (t,) = _tests(rep, "C6")
    assert (t["verdict"], t["support"], t["n"]) == ("not run", "not run", 0)
    assert _claim(rep, "C3")["missing"] == [
        "no structure-noise probe beside its clean regime (trial tag fusion_sweep.probe_of; a "
        "results file: column probe_of)"]
    assert _claim(rep, "C7")["support"] == "not run"
    assert _claim(rep, "C1")["support"] == "SUPPORTS"  # the rest still runs
    # a variant missing on one regime only: that regime's test is not run, the others run
    df2 = ress()
    df2 = df2[~((df2.dataset == "synthetic-medium") & (df2.encoder == "ressformer-no-asam"))]
    rep = _claims(df2)
    c4 = {t["datasets"][0]: t for t in _tests(rep, "C4")}
    assert c4["synthetic-medium"]["missing"] == [f"{NO_ASAM} not run on synthetic-medium"]
    assert c4["synthetic-short"]["support"] == "SUPPORTS"
    assert _claim(rep, "C4")["n_claim_tests"] == 5 and _claim(rep, "C4")["n_tests"] == 3


def test_claim_pairs_drop_seeds_like_the_report() -> None:
    df = ress()
    df.loc[_cell(df, RESS, "synthetic-short", 1), "fp_batch_order"] = "0ddba11"
    rep = _claims(df)
    t = next(t for t in _tests(rep, "C1") if t["datasets"] == ["synthetic-short"])
    assert t["n"] == 4 and 1 not in t["seeds"]
    (d,) = t["dropped"]
    assert (d["seed"], d["reason"]) == (1, "fingerprint_mismatch")
    assert "batch_order" in d["detail"]
    # C3 pairs the shuffled and clean datasets by seed: the same seed goes there too
    c3 = next(t for t in _tests(rep, "C3") if "synthetic-short" in t["datasets"])
    assert c3["n"] == 4 and c3["dropped"][0]["seed"] == 1


def test_claims_report_renders(tmp_path: Path, capsys, no_pdf_figures) -> None:
    p = tmp_path / "r.csv"
    df = synthetic_ressformer_results(seeds=4)
    df[df.encoder != "ressformer-no-r2mu"].to_csv(p, index=False)
    out_dir = tmp_path / "rep"
    args = cli.build_parser().parse_args([
        "stats", "--results", str(p), "--baseline", FULL, "--claims", "ressformer",
        "--equivalence-margin", "0.02", "--bootstrap", "200", "--report", str(out_dir)])
    assert args.func(args) == 0
    text, err = capsys.readouterr()
    assert "CLAIMS · ReSSFormer's claims under the paired protocol" in text
    assert re.search(r"C1 SOES beats absolute PE: SUPPORTS \(3 support, 0 contradict, 0 "
                     r"undecided of 3 trainings; 6 claim tests\)", text)
    assert "C6 R2MU: better long-context retention: not run (not run: variant " in text
    assert "claims.html" in err
    md, html = (out_dir / "claims.md").read_text(), (out_dir / "claims.html").read_text()
    assert "| claim | paper says | where | tested as |" in md and "Holm over the family" in md
    assert '<td class="s-supports">SUPPORTS</td>' in html
    assert '<td class="s-not-run">not run</td>' in html and ".s-contradicts{" in html
    assert '<td class="v-better">better</td>' in html
    srcs = re.findall(r'<img src="([^"]+)"', html)  # the figures live in the page
    assert srcs and all(src.startswith("data:image/svg+xml;base64,") for src in srcs)
    for png in re.findall(r"!\[[^]]*\]\(([^)]+)\)", md):  # the Markdown links the PNGs
        assert (out_dir / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out_dir / "stats.json").read_text())["claims"]["name"] == "ressformer"
    assert "claims.html" in (out_dir / "report.html").read_text()


def test_claims_html_in_headless_chromium(tmp_path: Path, capsys, svg_figures) -> None:
    import importlib.util
    script = Path(__file__).resolve().parents[1] / "scripts" / "check_report_html.py"
    spec = importlib.util.spec_from_file_location("check_report_html", script)
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    chromium = check.find_chromium()
    if chromium is None:
        pytest.skip("no chromium (apt-get install chromium)")
    rdir = check.demo_claims_report(tmp_path / "rep", n_boot=200)
    assert [p.name for p in check.pages(rdir)] == ["report.html", "claims.html"]
    assert check.check_page(chromium, rdir / "claims.html", tmp_path / "shot.png")
    assert "2/2 images loaded" in capsys.readouterr().out  # differences + ratios


@pytest.mark.parametrize("dataset", sorted(__import__(
    "fusion_sweep.trial.data.registry", fromlist=["DATASETS"]).DATASETS))
def test_each_trial_logs_its_regime_facts_from_the_registry(dataset: str) -> None:
    """Issue 30 item 5: the regime, what a probe re-tests and long context are tags the
    trial writes from the registry (TrialConfig.label_tags), which claims read back."""
    from fusion_sweep.schema import LONG_CONTEXT_TAG, PROBE_OF_TAG, REGIME_TAG
    from fusion_sweep.trial.config import TrialConfig
    from fusion_sweep.trial.data.registry import DATASETS
    tags = TrialConfig.build(dataset, seed=0).label_tags()
    spec = DATASETS[dataset]
    assert tags[REGIME_TAG] == spec.stream_name and tags[REGIME_TAG] in DATASETS
    assert tags[PROBE_OF_TAG] == ("" if spec.stream_name == dataset else spec.stream_name)
    assert tags[LONG_CONTEXT_TAG] == ("true" if DATASETS[spec.stream_name].defaults()["max_len"]
                                      > 512 else "false")


def _claim_test(dataset: str, support: str):
    """A claim test record of C1 on `dataset` with the given support (statistics elided)."""
    from fusion_sweep.analysis.claims import ClaimTest

    nan = float("nan")
    return ClaimTest(
        claim="C1", test=f"C1 · {dataset}", datasets=(dataset,), metric="test_acc", arm="a",
        reference="r", contrast="a - r", estimate_kind="mean difference",
        alternative="two-sided", n=3, seeds=(0, 1, 2), deltas=(0.1, 0.2, 0.3), estimate=0.2,
        ci_low=nan, ci_high=nan, p=nan, p_holm=nan, equivalence_margin=None, tost_p=nan,
        tost_p_holm=nan, learned={}, verdict="better", support=support, missing=(),
        dropped=(), notes=())


@pytest.mark.parametrize("supports,want,n_tests", [
    ((SUPPORTS, SUPPORTS), SUPPORTS, 2),
    ((SUPPORTS, UNDECIDED), UNDECIDED, 2),  # 'consistently': every training must support
    ((SUPPORTS, CONTRADICTS), MIXED, 2),
    ((CONTRADICTS, UNDECIDED), CONTRADICTS, 2),
    ((NOT_TESTABLE, NOT_TESTABLE), NOT_TESTABLE, 0),
    ((SUPPORTS, NOT_TESTABLE), SUPPORTS, 1),
])
def test_claim_summary_tallies_trainings(supports: tuple, want: str, n_tests: int) -> None:
    """The claim's support from its test records, counted per training, and its JSON."""
    from fusion_sweep.analysis.claims import RESSFORMER, _summary

    tests = [_claim_test(d, s) for d, s in zip(("x", "y"), supports)]
    out = _summary(RESSFORMER.claims[0], tests, {}).to_json()
    assert tuple(out) == CLAIM_KEYS
    assert (out["support"], out["n_tests"]) == (want, n_tests)
    assert out["n_supports"] + out["n_contradicts"] + out["n_undecided"] == n_tests


def test_a_probe_retests_its_regimes_training() -> None:
    """x-shuffled re-tests the models of x (probe_of): one training, supported when one of
    its tests supports and none contradicts."""
    from fusion_sweep.analysis.claims import RESSFORMER, _summary

    tests = [_claim_test("x", SUPPORTS), _claim_test("x-shuffled", UNDECIDED)]
    out = _summary(RESSFORMER.claims[0], tests, {"x-shuffled": "x"}).to_json()
    assert (out["support"], out["n_tests"], out["n_claim_tests"]) == (SUPPORTS, 1, 2)


def test_the_reports_claims_are_the_records_its_json_writes() -> None:
    """report.claims holds the claim records the renderers read (nothing rebuilds them from
    the JSON): every field of every record, written by its to_json, is the report's JSON."""
    from fusion_sweep.analysis.claims import ClaimSetResult
    from fusion_sweep.analysis.report import _json_clean
    rep = _claims(ress(seeds=4))
    rec = rep.claims
    assert isinstance(rec, ClaimSetResult)
    js = rep.to_dict()["claims"]
    assert _json_clean(rec.to_json()) == js
    assert [c.support for c in rec.claims] == [c["support"] for c in js["claims"]]
    assert [(t.test, t.estimate_kind, _json_clean(t.ci_low)) for t in rec.tests] == [
        (t["test"], t["estimate_kind"], t["ci_low"]) for t in js["tests"]]

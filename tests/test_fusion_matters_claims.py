"""Issue 39: `stats --claims fusion-matters`: Fusion Matters' claims F1–F5 against a sweep.

Regimes come from the registry's length-regime tag (a results file's `regime` column), never
from dataset names; each claim names the estimand and test it uses; a claim the sweep cannot
test says what it would need."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from fusion_sweep import cli
from fusion_sweep.analysis.claims import CLAIMS, FUSION_MATTERS
from fusion_sweep.analysis.schema import CONTRADICTS, NOT_RUN, SUPPORTS
from fusion_sweep.schema import LENGTH_REGIMES
from fusion_sweep.trial.data.registry import DATASETS

sys.path.insert(0, str(Path(__file__).parent))
import fusion_matters_files as fm  # noqa: E402

IDS = ("F1", "F2", "F3", "F4", "F5")


def _claims(tmp_path: Path, df: pd.DataFrame, capsys, *argv: str) -> dict:
    p = tmp_path / "results.csv"
    df.to_csv(p, index=False)
    args = cli.build_parser().parse_args(["stats", "--results", str(p), "--format", "json",
                                          "--bootstrap", "200", "--claims", "fusion-matters",
                                          "--equivalence-margin", "0.01", *argv])
    assert args.func(args) == 0
    return json.loads(capsys.readouterr()[0])["claims"]


def _support(claims: dict) -> dict[str, str]:
    return {c["claim"]: c["support"] for c in claims["claims"]}


def test_the_claim_set_is_registered_with_its_ids_and_sections() -> None:
    assert CLAIMS["fusion-matters"] is FUSION_MATTERS
    assert tuple(c.id for c in FUSION_MATTERS.claims) == IDS
    assert all(c.where.startswith("§") and c.quote for c in FUSION_MATTERS.claims)


def test_the_papers_pattern_supports_f1_to_f3(tmp_path, capsys) -> None:
    """Negligible on short and medium, clear on long: F1, F2, F3 supported; F4 (one PE) and
    F5 (no gate-cnn) say what they would need."""
    claims = _claims(tmp_path, fm.paper_pattern(), capsys)
    got = _support(claims)
    assert (got["F1"], got["F2"], got["F3"]) == (SUPPORTS, SUPPORTS, SUPPORTS)
    assert (got["F4"], got["F5"]) == (NOT_RUN, NOT_RUN)
    need = {c["claim"]: " ".join(c["missing"]) for c in claims["claims"]}
    assert "at least two positional encodings" in need["F4"]
    assert "gate-cnn" in need["F5"]


def test_the_opposite_pattern_contradicts_them(tmp_path, capsys) -> None:
    """Fusion matters on the short regime and not on the long one: F1 and F3 contradicted,
    F2 not supported."""
    got = _support(_claims(tmp_path, fm.opposite_pattern(), capsys))
    assert got["F1"] == CONTRADICTS and got["F3"] == CONTRADICTS
    assert got["F2"] != SUPPORTS


def test_the_main_jobs_shape(tmp_path, capsys) -> None:
    """The default sweep's shape: fusion matters on every regime (F1 contradicted), most on
    the long one (F3 supported); every one of F1-F3 gets a support."""
    got = _support(_claims(tmp_path, fm.main_job_like(), capsys))
    assert got["F1"] == CONTRADICTS and got["F3"] == SUPPORTS
    assert all(got[c] != NOT_RUN for c in ("F1", "F2", "F3"))


def test_each_test_names_its_estimand_and_test(tmp_path, capsys) -> None:
    claims = _claims(tmp_path, fm.paper_pattern(), capsys)
    kinds = {t["claim"]: t["estimate_kind"] for t in claims["tests"] if t["verdict"] != "not run"}
    assert kinds == {"F1": "mean difference", "F2": "win rate",
                     "F3": "P(Δ on the longer regime > Δ on the shorter)"}
    by = {t["claim"]: t["contrast"] for t in claims["tests"]}
    assert "exact one-sided sign test" in by["F2"]
    assert "one-sided Mann–Whitney, exact to 99,999 splits" in by["F3"]
    assert "TOST" in by["F1"]


def test_regimes_come_from_the_tag_never_from_names(tmp_path, capsys) -> None:
    """Datasets renamed to words that say nothing of length: the same claims, the same
    verdicts; without the regime column the claims say what they need."""
    df = fm.paper_pattern()
    named = _claims(tmp_path, df, capsys)
    renamed = df.assign(dataset=df["dataset"].map(
        {"syn-short": "alpha", "syn-medium": "beta", "syn-long": "gamma"}))
    other = _claims(tmp_path, renamed, capsys)
    assert _support(named) == _support(other)
    blind = _claims(tmp_path, df.drop(columns="regime"), capsys)
    assert set(_support(blind).values()) == {NOT_RUN}
    assert all("regime" in " ".join(c["missing"]) for c in blind["claims"])


def test_f4_runs_under_every_pe(tmp_path, capsys) -> None:
    df = pd.concat([fm.paper_pattern(), fm.paper_pattern(pe="rotary")], ignore_index=True)
    claims = _claims(tmp_path, df, capsys)
    f4 = [t for t in claims["tests"] if t["claim"] == "F4"]
    assert sorted(t["test"] for t in f4) == ["F4 · syn-long · rotary", "F4 · syn-long · sinusoidal"]
    assert _support(claims)["F4"] == SUPPORTS


def test_f5_tests_gate_cnn_and_its_consistency(tmp_path, capsys) -> None:
    """gate-cnn beats add on every long seed (F5's first part); its win rate equals
    gate-scalar's, so the 'less consistent' part does not decide and F5 is not supported."""
    df = fm.paper_pattern(fusions=("add", "concat", "gate-scalar", "gate-cnn"))
    claims = _claims(tmp_path, df, capsys)
    f5 = {t["test"]: t for t in claims["tests"] if t["claim"] == "F5"}
    assert f5["F5 · syn-long"]["support"] == SUPPORTS
    assert f5["F5 · syn-long · consistency"]["estimate_kind"] == "win-rate difference"
    assert "McNemar" in f5["F5 · syn-long · consistency"]["contrast"]
    assert _support(claims)["F5"] != SUPPORTS


def test_a_probe_is_never_a_regime() -> None:
    """The registry: every clean regime of the study has a length regime, every probe
    none."""
    for name, spec in DATASETS.items():
        probe = bool(spec.synthetic.get("base")) or spec.label_depends == "order" and \
            spec.kind == "package"
        assert (spec.length_regime == "") == probe, name
        assert spec.length_regime in ("", *LENGTH_REGIMES)


def test_the_terminal_prints_each_claims_verdict_after_the_answer(tmp_path, capsys) -> None:
    p = tmp_path / "r.csv"
    fm.paper_pattern().to_csv(p, index=False)
    args = cli.build_parser().parse_args(["stats", "--results", str(p), "--bootstrap", "200",
                                          "--claims", "fusion-matters",
                                          "--equivalence-margin", "0.01"])
    assert args.func(args) == 0
    text = capsys.readouterr()[0]
    answer, claims, grid = (text.index("The answer"), text.index("The paper's claims"),
                            text.index("Verdict grid"))
    assert answer < claims < grid
    block = text[claims:grid]
    for cid in IDS:
        assert f"  {cid} " in block
    assert "F2 Gate-Scalar beats addition on long documents: SUPPORTS" in block


def test_f1_counts_a_real_but_negligible_difference_as_negligible(tmp_path, capsys) -> None:
    """concat +0.004 on every short seed: the paired t decides (`better` by the report's
    rule), but TOST puts it within the ±0.01 margin: 'within statistical variation' holds,
    so F1's test there is `equivalent` and supports."""
    df = fm.paper_pattern()
    rows = (df["dataset"] == "syn-short") & (df["fusion"] == "concat")
    df.loc[rows, "test_acc"] += 0.004
    claims = _claims(tmp_path, df, capsys)
    (t,) = [t for t in claims["tests"] if t["test"] == "F1 · syn-short · standard/sinusoidal/concat"]
    assert t["p_holm"] < 0.05 and t["ci_low"] > 0
    assert (t["verdict"], t["support"]) == ("equivalent", SUPPORTS)


def test_f5_consistency_is_mcnemar_on_the_discordant_seeds(tmp_path, capsys) -> None:
    """gate-scalar beats add on 8 of 8 long seeds, gate-cnn on 5 of 8: 3 discordant seeds, all
    for gate-scalar (win-rate difference +3/8; exact one-sided McNemar p = 1/8)."""
    df = fm.paper_pattern(fusions=("add", "concat", "gate-scalar", "gate-cnn"))
    rows = ((df["dataset"] == "syn-long") & (df["fusion"] == "gate-cnn")
            & df["seed"].isin([0, 1, 2]))
    df.loc[rows, "test_acc"] -= 0.2
    claims = _claims(tmp_path, df, capsys)
    (t,) = [t for t in claims["tests"] if t["test"] == "F5 · syn-long · consistency"]
    assert t["estimate"] == pytest.approx(3 / 8) and t["p"] == pytest.approx(1 / 8)


def test_f1_without_a_margin_can_be_contradicted_not_supported(tmp_path, capsys) -> None:
    """No margin: no equivalence test, so F1 cannot be supported, but a difference the paired
    t decides still contradicts it."""
    p = tmp_path / "r.csv"
    fm.opposite_pattern().to_csv(p, index=False)
    args = cli.build_parser().parse_args(["stats", "--results", str(p), "--format", "json",
                                          "--bootstrap", "200", "--claims", "fusion-matters"])
    assert args.func(args) == 0
    claims = json.loads(capsys.readouterr()[0])["claims"]
    assert _support(claims)["F1"] == CONTRADICTS
    assert _support(_claims(tmp_path, fm.paper_pattern(), capsys))["F1"] == SUPPORTS

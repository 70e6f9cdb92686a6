"""`fusion-sweep stats` end to end on results files: pairing, JSON schema, errors, reports."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import cli
from analysis.demo import synthetic_results
from analysis.load import tidy
from analysis.report import Settings, analyze
from analysis.schema import AnalysisError

# The issue's list, written out independently of analysis.schema.
ISSUE_KEYS = [
    "dataset", "pe", "metric", "fusion", "baseline", "n", "mean_delta", "sd_delta",
    "t_ci_low", "t_ci_high", "t_p", "wilcoxon_p", "wilcoxon_method", "signflip_p",
    "boot_ci_low", "boot_ci_high", "dz", "n_positive", "p_holm", "tost_p", "power",
    "seeds_for_80_power", "min_p_t", "min_p_wilcoxon", "verdict",
]
EXTRA_KEYS = [
    "regime", "median_tokens", "higher_is_better", "seeds", "deltas", "n_negative", "n_zero",
    "t_df", "signflip_method", "min_p_signflip", "boot_descriptive", "boot_method",
    "equivalence_margin", "notes",
]
FAST = ["--bootstrap", "500"]


def run_cli(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    args = cli.build_parser().parse_args(["stats", *argv])
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


def small_table() -> pd.DataFrame:
    """2 datasets x 1 pe x {add, concat, gate-vector} x 5 seeds, with fingerprints."""
    df = synthetic_results(pes=("sinusoidal",))
    return df[df["dataset"].isin(["synthetic-short", "synthetic-long"])
              & df["fusion"].isin(["add", "concat", "gate-vector"])].reset_index(drop=True)


@pytest.fixture
def csv(tmp_path: Path) -> Path:
    p = tmp_path / "results.csv"
    small_table().to_csv(p, index=False)
    return p


def test_analysis_imports_neither_torch_nor_ray() -> None:
    code = ("import analysis, analysis.cli, analysis.report, analysis.render, analysis.text, "
            "analysis.mlflow_io, sys; bad = [m for m in ('torch', 'ray', 'mlflow') "
            "if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_mismatched_batch_order_pair_is_dropped_and_reported(tmp_path: Path, capsys) -> None:
    df = small_table()
    bad = (df.dataset == "synthetic-long") & (df.fusion == "concat") & (df.seed == 3)
    df.loc[bad, "fp_batch_order"] = "0000aaaa"
    path = tmp_path / "r.csv"
    df.to_csv(path, index=False)
    code, out, _ = run_cli(["--results", str(path), "--format", "json", *FAST], capsys)
    assert code == 0
    rep = json.loads(out)
    assert rep["dropped"] == [{
        "dataset": "synthetic-long", "pe": "sinusoidal", "metric": "test_acc",
        "fusion": "concat", "baseline": "add", "seed": 3, "reason": "fingerprint_mismatch",
        "detail": rep["dropped"][0]["detail"]}]
    assert rep["dropped"][0]["detail"].startswith("batch_order (0000aaaa vs ")
    comp = next(c for c in rep["comparisons"]
                if c["dataset"] == "synthetic-long" and c["fusion"] == "concat")
    assert comp["n"] == 4 and 3 not in comp["seeds"]
    assert any(w["code"] == "dropped_pairs" for w in rep["warnings"])
    text_code, text, _ = run_cli(["--results", str(path), *FAST], capsys)
    assert "fingerprint_mismatch" in text and "Dropped pairs (1)" in text


@pytest.mark.parametrize("mutate,reason", [
    (lambda df, m: df.drop(df.index[m]), "missing_trial"),
    (lambda df, m: df.assign(status=np.where(m, "FAILED", df["status"])), "failed_trial"),
    (lambda df, m: df.assign(test_acc=np.where(m, np.nan, df["test_acc"])), "non_finite_metric"),
    (lambda df, m: pd.concat([df, df[m]]), "duplicate_seed"),
    (lambda df, m: df.assign(fp_shared_init=np.where(m, "ffff", df["fp_shared_init"])),
     "fingerprint_mismatch"),
])
def test_every_drop_reason(mutate, reason: str) -> None:
    df = small_table()
    m = ((df.dataset == "synthetic-short") & (df.fusion == "gate-vector") & (df.seed == 1)).to_numpy()
    rep = analyze(tidy(mutate(df, m)), Settings(n_boot=500))
    assert [(d["fusion"], d["seed"], d["reason"]) for d in rep.dropped] == [("gate-vector", 1, reason)]
    if reason != "fingerprint_mismatch":
        assert any(w["code"] == "unequal_seed_sets" for w in rep.warnings)


def test_failed_retry_beside_finished_run_is_not_a_drop() -> None:
    df = small_table()
    m = (df.dataset == "synthetic-short") & (df.fusion == "concat") & (df.seed == 0)
    rep = analyze(tidy(pd.concat([df, df[m].assign(status="FAILED")])), Settings(n_boot=500))
    assert rep.dropped == []


def test_json_schema_exact(csv: Path, capsys) -> None:
    code, out, err = run_cli(["--results", str(csv), "--format", "json",
                              "--equivalence-margin", "0.01", *FAST], capsys)
    assert code == 0
    rep = json.loads(out)
    assert list(rep) == ["source", "settings", "regimes", "warnings", "comparisons", "dropped",
                         "interaction"]
    assert rep["comparisons"]
    for c in rep["comparisons"]:
        assert list(c) == ISSUE_KEYS + EXTRA_KEYS
        for k in ISSUE_KEYS:
            assert k in c, k
        assert c["verdict"] in ("better", "worse", "equivalent", "inconclusive")
        assert isinstance(c["tost_p"], float)
    assert isinstance(rep["dropped"], list) and isinstance(rep["warnings"], list)
    assert all(set(w) == {"code", "message"} for w in rep["warnings"])
    assert set(rep["interaction"]) == {"method", "tests"}
    assert set(rep["interaction"]["tests"][0]) == {
        "pe", "metric", "fusion", "baseline", "datasets", "n_per_dataset", "welch_f", "df_num",
        "df_denom", "welch_p", "p_holm", "long_dataset", "short_dataset", "diff_in_deltas",
        "diff_ci_low", "diff_ci_high", "diff_p", "notes"}
    # warnings also go to stderr so stdout stays pure JSON
    assert "cannot_reach_alpha" in err


def test_json_design_warnings_and_min_p(csv: Path, capsys) -> None:
    _, out, _ = run_cli(["--results", str(csv), "--format", "json", *FAST], capsys)
    rep = json.loads(out)
    codes = [w["code"] for w in rep["warnings"]]
    assert codes[:2] == ["cannot_reach_alpha", "bootstrap_descriptive"]
    assert "0.0625" in rep["warnings"][0]["message"]
    c = rep["comparisons"][0]
    assert c["n"] == 5 and c["min_p_wilcoxon"] == 0.0625 and c["min_p_t"] == 0.0
    assert c["boot_descriptive"] is True
    assert c["tost_p"] is None  # no margin given: null, verdict never "equivalent"
    assert all(x["verdict"] != "equivalent" for x in rep["comparisons"])


def test_holm_over_all_comparisons(csv: Path, capsys) -> None:
    from statsmodels.stats.multitest import multipletests
    _, out, _ = run_cli(["--results", str(csv), "--format", "json", *FAST], capsys)
    comps = json.loads(out)["comparisons"]
    ref = multipletests([c["t_p"] for c in comps], method="holm")[1]
    assert [c["p_holm"] for c in comps] == pytest.approx(list(ref), abs=1e-12)


def test_regimes_ordered_by_median_tokens_and_planted_effect(csv: Path, capsys) -> None:
    _, out, _ = run_cli(["--results", str(csv), "--format", "json", *FAST], capsys)
    rep = json.loads(out)
    assert [r["dataset"] for r in rep["regimes"]] == ["synthetic-short", "synthetic-long"]
    assert rep["regimes"][0]["label"] == "synthetic-short (median 48 tokens)"
    gv = {c["dataset"]: c for c in rep["comparisons"] if c["fusion"] == "gate-vector"}
    assert gv["synthetic-long"]["verdict"] == "better"  # planted +0.045
    test = next(t for t in rep["interaction"]["tests"] if t["fusion"] == "gate-vector")
    assert test["long_dataset"] == "synthetic-long" and test["short_dataset"] == "synthetic-short"
    assert test["welch_p"] < 0.05 and test["diff_ci_low"] > 0


def test_regime_fallback_to_name_order_without_median_tokens(tmp_path: Path, capsys) -> None:
    p = tmp_path / "r.csv"
    small_table().drop(columns=["median_tokens"]).to_csv(p, index=False)
    _, out, _ = run_cli(["--results", str(p), "--format", "json", *FAST], capsys)
    rep = json.loads(out)
    assert [r["dataset"] for r in rep["regimes"]] == ["synthetic-long", "synthetic-short"]
    assert any(w["code"] == "no_median_tokens" for w in rep["warnings"])


def test_bootstrap_deterministic_under_rng_seed(csv: Path, capsys) -> None:
    def boots(*extra: str) -> list:
        _, out, _ = run_cli(["--results", str(csv), "--format", "json", *FAST, *extra], capsys)
        return [(c["boot_ci_low"], c["boot_ci_high"]) for c in json.loads(out)["comparisons"]]
    a, b = boots("--rng-seed", "3"), boots("--rng-seed", "3")
    assert a == b
    assert boots("--rng-seed", "4") != a
    # Per-comparison generators: filtering datasets leaves the other numbers unchanged.
    only_long = boots("--rng-seed", "3", "--dataset", "synthetic-long")
    assert only_long == a[2:]


def test_text_output_tables_per_regime(csv: Path, capsys) -> None:
    code, out, _ = run_cli(["--results", str(csv), *FAST], capsys)
    assert code == 0
    assert out.index("Warnings:") < out.index("synthetic-short (median 48 tokens) · pe=sinusoidal")
    assert out.index("synthetic-short (median 48") < out.index("synthetic-long (median 1890")
    assert "p_wilcoxon" in out and "seeds@80%" in out and "Welch F" in out


def test_pairs_all_and_lower_is_better_metric(csv: Path, capsys) -> None:
    _, out, _ = run_cli(["--results", str(csv), "--format", "json", "--pairs", "all",
                         "--metric", "latency_ms_per_sample", *FAST], capsys)
    comps = json.loads(out)["comparisons"]
    pairs = {(c["fusion"], c["baseline"]) for c in comps}
    assert pairs == {("concat", "add"), ("gate-vector", "add"), ("gate-vector", "concat")}
    lat = [c for c in comps if c["baseline"] == "add"]
    assert all(not c["higher_is_better"] for c in lat)
    assert all(c["verdict"] == "worse" for c in lat)  # +30% latency is worse


def test_parquet_input_and_filters(tmp_path: Path, capsys) -> None:
    p = tmp_path / "r.parquet"
    small_table().to_parquet(p)
    _, out, _ = run_cli(["--results", str(p), "--format", "json", "--dataset", "synthetic-long",
                         "--pe", "sinusoidal", *FAST], capsys)
    comps = json.loads(out)["comparisons"]
    assert {c["dataset"] for c in comps} == {"synthetic-long"} and len(comps) == 2


def test_degenerate_data_does_not_crash(tmp_path: Path, capsys) -> None:
    df = small_table()
    base = df[df.fusion == "add"].set_index(["dataset", "seed"])["test_acc"]
    same = df.fusion == "concat"
    df.loc[same, "test_acc"] = [base[(d, s)] for d, s in zip(df.loc[same, "dataset"], df.loc[same, "seed"])]
    p = tmp_path / "r.csv"
    df.to_csv(p, index=False)
    code, out, _ = run_cli(["--results", str(p), "--format", "json", *FAST], capsys)
    assert code == 0
    rep = json.loads(out)
    concat = [c for c in rep["comparisons"] if c["fusion"] == "concat"]
    assert all(c["t_p"] is None and c["verdict"] == "inconclusive" for c in concat)
    assert any(w["code"] == "degenerate_comparison" for w in rep["warnings"])


# ----------------------------------------------------------------------------- errors
def _write(tmp_path: Path, df: pd.DataFrame) -> str:
    p = tmp_path / "r.csv"
    df.to_csv(p, index=False)
    return str(p)


@pytest.mark.parametrize("argv,match", [
    (["--alpha", "0"], r"--alpha must be in the open interval \(0, 1\), got 0"),
    (["--alpha", "1"], r"--alpha must be in the open interval \(0, 1\)"),
    (["--alpha", "1.5"], r"--alpha must be in the open interval \(0, 1\)"),
    (["--equivalence-margin", "-0.01"], r"--equivalence-margin must be a positive number.*-0.01"),
    (["--metric", "nope"], r"unknown metric 'nope'; available metrics: test_acc, best_val_acc"),
    (["--metric", "pe"], r"unknown metric 'pe'"),
    (["--baseline", "gate-cnn"],
     r"baseline fusion 'gate-cnn' is absent from the data; fusions present: add, concat, gate-vector"),
    (["--dataset", "imdb"], r"unknown --dataset 'imdb'; dataset values present: synthetic-long, "
                            r"synthetic-short"),
    (["--pe", "rope"], r"unknown --pe 'rope'; pe values present: sinusoidal"),
])
def test_flag_errors(csv: Path, capsys, argv: list[str], match: str) -> None:
    code, out, err = run_cli(["--results", str(csv), *FAST, *argv], capsys)
    assert code == 2 and out == ""
    assert re.search(match, err), err
    assert "Traceback" not in err and err.startswith("fusion-sweep stats: error: ")


@pytest.mark.parametrize("make,match", [
    (lambda df: df.iloc[:0], r"no rows in .*r\.csv"),
    (lambda df: df.drop(columns=["seed"]), r"lacks required column\(s\) seed; available columns: "),
    (lambda df: df.assign(test_acc=df["test_acc"].astype(object).where(df.index != 2, "0.8x")),
     r"metric 'test_acc' is not numeric: value '0.8x'"),
    (lambda df: df.assign(seed=df["seed"].astype(object).where(df.index != 0, "zero")),
     r"column 'seed' .* must hold integers; got 'zero'"),
])
def test_file_errors(tmp_path: Path, capsys, make, match: str) -> None:
    path = _write(tmp_path, make(small_table()))
    with pytest.raises(AnalysisError, match=match):
        from analysis.load import read_results_file, select
        select(read_results_file(path), ["test_acc"], "add")
    code, _, err = run_cli(["--results", path, *FAST], capsys)
    assert code == 2 and re.search(match, err)


def test_settings_errors_raise_value_error() -> None:
    with pytest.raises(ValueError, match=r"--alpha must be in the open interval"):
        Settings(alpha=-0.1).validate()
    with pytest.raises(ValueError, match=r"--equivalence-margin must be a positive number"):
        Settings(margin=-1.0).validate()
    with pytest.raises(ValueError, match=r"--bootstrap must be at least 100"):
        Settings(n_boot=10).validate()
    with pytest.raises(ValueError, match=r"results file must end in .csv or .parquet"):
        from analysis.load import read_results_file
        read_results_file(__file__)


def test_python_m_analysis_subprocess(csv: Path) -> None:
    ok = subprocess.run([sys.executable, "-m", "analysis", "stats", "--results", str(csv),
                         "--format", "json", *FAST], capture_output=True, text=True)
    assert ok.returncode == 0 and json.loads(ok.stdout)["comparisons"]
    bad = subprocess.run([sys.executable, "-m", "analysis", "stats", "--results", str(csv),
                          "--alpha", "2"], capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "--alpha" in bad.stderr


# ----------------------------------------------------------------------------- report
def test_report_dir_files_and_relative_images(csv: Path, tmp_path: Path, capsys) -> None:
    out_dir = tmp_path / "rep"
    code, _, _ = run_cli(["--results", str(csv), "--report", str(out_dir),
                          "--equivalence-margin", "0.01", *FAST], capsys)
    assert code == 0
    html = (out_dir / "report.html").read_text()
    md = (out_dir / "report.md").read_text()
    srcs = re.findall(r'<img src="([^"]+)"', html)
    assert len(srcs) == 3  # 2 delta plots (one per dataset) + 1 forest plot
    for s in srcs:
        assert "/" not in s and (out_dir / s).stat().st_size > 1000
        assert f"]({s})" in md
        assert (out_dir / s).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for heading in ("Seeds needed", "Paper tables", "Across length regimes", "Dropped pairs",
                    "Design warnings"):
        assert heading in md and heading in html
    assert "mean ± sd over seeds" in md and "PE × fusion" in md
    assert json.loads((out_dir / "stats.json").read_text())["comparisons"]

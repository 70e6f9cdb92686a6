"""`fusion-sweep stats` end to end on results files: pairing, JSON schema, errors, reports."""
from __future__ import annotations

import ast
import dataclasses
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fusion_sweep.analysis import cli
from fusion_sweep.analysis.demo import synthetic_results
from fusion_sweep.analysis.schema import ARM_KEYS
from fusion_sweep.analysis.load import tidy
from fusion_sweep.analysis.report import analyze
from fusion_sweep.analysis.settings import Settings
from fusion_sweep.analysis.schema import AnalysisError

# The issue's list, written out independently of fusion_sweep.analysis.schema.
ISSUE_KEYS = [
    "dataset", "pe", "metric", "fusion", "baseline", "n", "mean_delta", "sd_delta",
    "t_ci_low", "t_ci_high", "t_p", "wilcoxon_p", "wilcoxon_method", "signflip_p",
    "boot_ci_low", "boot_ci_high", "dz", "n_positive", "p_holm", "tost_p", "power",
    "seeds_for_80_power", "min_p_t", "min_p_wilcoxon", "verdict",
]
EXTRA_KEYS = [
    "regime", "median_tokens", "higher_is_better", "seeds", "deltas", "n_negative", "n_zero",
    "t_df", "signflip_method", "min_p_signflip", "boot_descriptive", "boot_method",
    "equivalence_margin", "notes", "tost_p_holm", "holm_first_step_alpha",
    "power_at_holm_alpha", "seeds_for_80_power_at_holm_alpha", "chance_level", "learned",
    "baseline_learned", "encoder", "variant", "baseline_variant", "ratio", "ratio_ci_low",
    "ratio_ci_high", "ratio_p", "ratio_p_holm", "ratio_verdict", "verdict_flags",
    "holm_ci_low", "holm_ci_high", "holm_ci_level", "estimand", "assumes",
    "win_estimand", "win_assumes", "wins", "losses", "ties", "win_rate", "win_ci_low",
    "win_ci_high", "sign_p", "sign_p_holm", "win_verdict", "arm_learn_count", "arm_learn_n",
    "arm_learn_basis", "baseline_learn_count", "baseline_learn_n", "baseline_learn_basis",
    "lost_seeds",
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
    code = ("import fusion_sweep.analysis, fusion_sweep.analysis.cli, fusion_sweep.analysis.report, fusion_sweep.analysis.render, fusion_sweep.analysis.text, "
            "fusion_sweep.analysis.mlflow_io, sys; bad = [m for m in ('torch', 'ray', 'mlflow') "
            "if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_terminal_report_does_not_load_matplotlib() -> None:
    """`fusion-sweep stats` without --report draws nothing: its modules leave matplotlib
    (about a second of start-up) to the figures, render and plots."""
    code = ("import fusion_sweep.analysis.cli, fusion_sweep.analysis.text, sys; "
            "assert 'matplotlib' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def _own_imports(path: Path) -> set[str]:
    """fusion_sweep.analysis modules `path` imports, at module level, in a function or under
    TYPE_CHECKING alike (each ties the two files)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fusion_sweep.analysis"):
            parts = node.module.split(".")
            out.update([parts[2]] if len(parts) > 2 else [a.name for a in node.names])
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[2] for a in node.names
                       if a.name.startswith("fusion_sweep.analysis."))
    return out


def test_analysis_modules_import_each_other_without_a_cycle() -> None:
    """Issue 18: claims <-> report -> sequential_report -> tables -> report was a cycle,
    hidden by lazy imports. Layers point down (fusion_sweep/analysis/__init__.py)."""
    import fusion_sweep.analysis as pkg

    root = Path(pkg.__file__).parent
    graph = {f.stem: _own_imports(f) - {f.stem} for f in root.glob("*.py")}
    done: set[str] = set()

    def visit(mod: str, path: tuple[str, ...]) -> None:
        assert mod not in path, f"import cycle: {' -> '.join(path[path.index(mod):] + (mod,))}"
        if mod in done:
            return
        for dep in sorted(graph[mod]):
            visit(dep, path + (mod,))
        done.add(mod)

    for mod in sorted(graph):
        visit(mod, ())


def test_stats_flags_default_to_the_settings_defaults() -> None:
    """One home for each analysis default (fusion_sweep.analysis.settings): the flags' defaults
    are the Settings dataclass's (the margin's metric aside: a sweep's margin belongs to its
    metric)."""
    args = cli.build_parser().parse_args(["stats", "--results", "r.csv"])
    assert dataclasses.replace(cli.settings_from(args), margin_metric=None) == Settings()


def test_demo_class_counts_match_the_dataset_registry() -> None:
    """The demo tables state the registry's class counts (issue 18: demo said 4/2/11 against
    the registry's 2/2/2, so its chance levels were wrong); demo cannot import the registry
    (its package imports torch), so this test is the link."""
    from fusion_sweep.analysis import demo
    from fusion_sweep.trial.data.registry import DATASETS

    assert demo.NUM_CLASSES == {d: DATASETS[d].num_classes for d in demo.DATASETS}
    for table in (demo.synthetic_results(seeds=2), demo.synthetic_ressformer_results(seeds=2)):
        per_dataset = table.groupby("dataset")["num_classes"].unique()
        assert {d: list(k) for d, k in per_dataset.items()} == {
            d: [DATASETS[d].num_classes] for d in per_dataset.index}


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
        "dataset": "synthetic-long", "encoder": "standard", "pe": "sinusoidal",
        "metric": "test_acc", "fusion": "concat", "baseline": "add",
        "variant": "standard/sinusoidal/concat", "baseline_variant": "standard/sinusoidal/add",
        "seed": 3, "reason": "fingerprint_mismatch", "detail": rep["dropped"][0]["detail"]}]
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
    assert [(d.fusion, d.seed, d.reason) for d in rep.dropped] == [("gate-vector", 1, reason)]
    if reason != "fingerprint_mismatch":
        assert any(w.code == "unequal_seed_sets" for w in rep.warnings)


def test_failed_retry_beside_finished_run_is_not_a_drop() -> None:
    df = small_table()
    m = (df.dataset == "synthetic-short") & (df.fusion == "concat") & (df.seed == 0)
    rep = analyze(tidy(pd.concat([df, df[m].assign(status="FAILED")])), Settings(n_boot=500))
    assert rep.dropped == []


def test_arm_summary_is_mean_sd_range_of_every_seed() -> None:
    """The arms table holds each arm's own seeds: mean, sample SD (ddof 1), min, max."""
    df = small_table()
    rep = analyze(tidy(df), Settings(n_boot=200))
    assert len(rep.arms) == len(df.groupby(["dataset", "pe", "fusion"]))
    for a in rep.arms:
        v = df[(df.dataset == a.dataset) & (df.pe == a.pe) & (df.fusion == a.fusion)
               ][a.metric].to_numpy(dtype=float)
        assert a.n == v.size
        assert a.mean == pytest.approx(v.mean()) and a.sd == pytest.approx(v.std(ddof=1))
        assert (a.min, a.max) == (pytest.approx(v.min()), pytest.approx(v.max()))
    # baseline first within each regime, regimes short -> long
    first = [a.fusion for a in rep.arms if a.dataset == rep.arms[0].dataset][0]
    assert first == rep.settings.baseline


def test_json_schema_exact(csv: Path, capsys) -> None:
    code, out, err = run_cli(["--results", str(csv), "--format", "json",
                              "--equivalence-margin", "0.01", *FAST], capsys)
    assert code == 0
    rep = json.loads(out)
    assert list(rep) == ["source", "settings", "regimes", "warnings", "arms", "comparisons",
                         "dropped", "interaction", "chance", "claims", "sequential",
                         "verdict_grid", "family", "answer"]
    assert rep["claims"] is None  # no --claims
    assert rep["answer"] and all(list(a) == ["kind", "dataset", "metric", "group", "arms",
                                             "reference", "sentence"] for a in rep["answer"])
    assert rep["arms"] and all(list(a) == list(ARM_KEYS) for a in rep["arms"])
    assert rep["comparisons"]
    for c in rep["comparisons"]:
        assert list(c) == ISSUE_KEYS + EXTRA_KEYS
        for k in ISSUE_KEYS:
            assert k in c, k
        assert c["verdict"] in ("better", "worse", "equivalent", "inconclusive", "not learned")
        assert c["learned"] == c["baseline_learned"] == "yes"  # demo: far above 1/K
        assert isinstance(c["tost_p"], float)
        # an old file without `encoder`: the standard encoder; accuracy has no ratio
        assert c["encoder"] == "standard"
        assert c["variant"] == f"standard/{c['pe']}/{c['fusion']}"
        assert c["baseline_variant"] == f"standard/{c['pe']}/{c['baseline']}"
        assert c["ratio"] is None and c["ratio_verdict"] is None
    assert isinstance(rep["dropped"], list) and isinstance(rep["warnings"], list)
    assert all(set(w) == {"code", "message"} for w in rep["warnings"])
    assert set(rep["interaction"]) == {"method", "tests"}
    assert set(rep["interaction"]["tests"][0]) == {
        "pe", "metric", "fusion", "baseline", "datasets", "n_per_dataset", "welch_f", "df_num",
        "df_denom", "welch_p", "p_holm", "long_dataset", "short_dataset", "diff_in_deltas",
        "diff_ci_low", "diff_ci_high", "diff_p", "notes", "ordered_by", "encoder", "variant",
        "baseline_variant", "excluded_not_learned", "verdict"}
    assert set(rep["chance"]) == {"method", "tests"}
    assert set(rep["chance"]["tests"][0]) == {
        "dataset", "encoder", "pe", "metric", "fusion", "variant", "n", "num_classes",
        "chance_level", "mean", "t", "p", "p_holm", "learned", "chance_source", "learn_method",
        "learn_count", "learn_n"}
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
    assert "p_wilcoxon" not in out and "Welch F" not in out  # the short tables (issue 22)
    code, out, _ = run_cli(["--results", str(csv), "--wide", *FAST], capsys)
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
    # a cost metric also gets the paired ratio: about 1.3x, worse on the log scale too
    assert all(1.2 < c["ratio"] < 1.4 and c["ratio_ci_low"] < c["ratio"] < c["ratio_ci_high"]
               and c["ratio_verdict"] == "worse" for c in lat)


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
    (["--metric", "test_ac"], r"unknown metric 'test_ac' \(did you mean 'test_acc'\?\); available "
                              r"metrics: test_acc, best_val_acc"),
    (["--metric", "pe"], r"unknown metric 'pe'"),
    (["--baseline", "gate-cnn"],
     r"baseline fusion 'gate-cnn' is absent from the data \(did you mean 'gate-vector'\?\); "
     r"fusions present: add, concat, gate-vector"),
    (["--baseline", "concta"], r"baseline fusion 'concta' is absent from the data \(did you mean "
                               r"'concat'\?\); fusions present: add, concat, gate-vector"),
    (["--dataset", "imdb"], r"unknown --dataset 'imdb'; choose from synthetic-long, "
                            r"synthetic-short"),
    (["--dataset", "synthetic-lng"], r"unknown --dataset 'synthetic-lng' \(did you mean "
                                     r"'synthetic-long'\?\); choose from synthetic-long, synthetic-short"),
    (["--pe", "rope"], r"unknown --pe 'rope'; choose from sinusoidal"),
    (["--pe", "sinusodial"], r"unknown --pe 'sinusodial' \(did you mean 'sinusoidal'\?\); choose "
                             r"from sinusoidal"),
    (["--encoder", "standrd"], r"unknown --encoder 'standrd' \(did you mean 'standard'\?\); choose "
                               r"from standard"),
    (["--claims", "ressformr"], r"unknown --claims 'ressformr' \(did you mean 'ressformer'\?\); "
                                r"claim sets: fusion-matters, ressformer"),
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
        from fusion_sweep.analysis.load import read_results_file, select
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
        from fusion_sweep.analysis.load import read_results_file
        read_results_file(__file__)


def test_python_m_analysis_subprocess(csv: Path) -> None:
    ok = subprocess.run([sys.executable, "-m", "fusion_sweep.analysis", "stats", "--results", str(csv),
                         "--format", "json", *FAST], capture_output=True, text=True)
    assert ok.returncode == 0 and json.loads(ok.stdout)["comparisons"]
    bad = subprocess.run([sys.executable, "-m", "fusion_sweep.analysis", "stats", "--results", str(csv),
                          "--alpha", "2"], capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "--alpha" in bad.stderr


# ----------------------------------------------------------------------------- report
def test_report_dir_files_and_embedded_images(csv: Path, tmp_path: Path, capsys,
                                              no_pdf_figures) -> None:
    """The HTML carries its figures (data URIs); the Markdown links the PNGs beside it."""
    out_dir = tmp_path / "rep"
    code, _, _ = run_cli(["--results", str(csv), "--report", str(out_dir),
                          "--equivalence-margin", "0.01", *FAST], capsys)
    assert code == 0
    html = (out_dir / "report.html").read_text()
    md = (out_dir / "report.md").read_text()
    srcs = re.findall(r'<img src="([^"]+)"', html)
    assert len(srcs) == 4  # the arms figure + 2 delta plots (one per dataset) + 1 forest plot
    assert all(s.startswith("data:image/svg+xml;base64,") for s in srcs)
    links = re.findall(r"!\[[^]]*\]\(([^)]+)\)", md)
    assert len(links) == 4
    for s in links:
        assert "/" not in s and (out_dir / s).stat().st_size > 1000
        assert (out_dir / s).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for heading in ("Seeds needed", "Paper tables", "Across length regimes", "Dropped pairs",
                    "Design warnings"):
        assert heading in md and heading in html
    assert "mean ± sd over seeds" in md and "PE × fusion" in md
    assert json.loads((out_dir / "stats.json").read_text())["comparisons"]


# ------------------------------------------------------------------ issue 8: analysis items
def _analyze(df: pd.DataFrame, source: dict | None = None, **kw):
    return analyze(tidy(df), Settings(n_boot=200, **kw), source)


def test_import_analysis_pulls_in_only_fusion_sweep_schema() -> None:
    """Of the rest of fusion_sweep, the statistics import only the stdlib-only schema, errors
    (UserError) and mlflow_query (the run search shared with the writer)."""
    code = ("import fusion_sweep.analysis, fusion_sweep.analysis.cli, fusion_sweep.analysis.report, fusion_sweep.analysis.render, fusion_sweep.analysis.chance, "
            "fusion_sweep.analysis.metrics, fusion_sweep.analysis.mlflow_io, fusion_sweep.analysis.claims, fusion_sweep.analysis.variants, sys; "
            "bad = [m for m in sys.modules if m in ('torch', 'ray', 'mlflow') "
            "or (m.startswith('fusion_sweep.') and m not in ('fusion_sweep.schema', "
            "'fusion_sweep.errors', 'fusion_sweep.mlflow_query') "
            "and not m.startswith('fusion_sweep.analysis'))]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_schema_constants_come_from_fusion_sweep_schema() -> None:
    from fusion_sweep import schema as fs
    from fusion_sweep.analysis import mlflow_io
    from fusion_sweep.analysis import schema as S
    assert S.KEY_COLUMNS == fs.IDENTITY_FIELDS and S.FP_COLUMNS == fs.FINGERPRINT_COLUMNS
    assert "fp_dropout" in S.FP_COLUMNS and "num_classes" in S.NON_METRIC_COLUMNS
    assert mlflow_io.ROLE == fs.ROLE and mlflow_io.DEFAULT_EXPERIMENT == fs.DEFAULT_EXPERIMENT
    assert {"superseded_code", "code_mismatch"} <= set(S.DROP_REASONS)
    assert "not learned" in S.VERDICTS


# 1. fingerprints: the dropout stream too
def test_dropout_fingerprint_mismatch_is_dropped() -> None:
    df = small_table()
    m = (df.dataset == "synthetic-long") & (df.fusion == "concat") & (df.seed == 2)
    df.loc[m, "fp_dropout"] = "d0d0d0d0d0d0"
    rep = _analyze(df)
    (d,) = rep.dropped
    assert (d.fusion, d.seed, d.reason) == ("concat", 2, "fingerprint_mismatch")
    assert d.detail.startswith("dropout (d0d0d0d0d0 vs ")


# 2. code fingerprints
def _with_code(df: pd.DataFrame, code: str = "new0000000000000") -> pd.DataFrame:
    return df.assign(code_fingerprint=code, run_id=[f"r{i}" for i in range(len(df))])


def test_current_code_run_supersedes_an_old_one() -> None:
    df = _with_code(small_table())
    m = (df.dataset == "synthetic-short") & (df.fusion == "concat") & (df.seed == 1)
    old = df[m].assign(code_fingerprint="old0000000000000", run_id="r-old", test_acc=0.1)
    rep = _analyze(pd.concat([df, old]), {"kind": "mlflow", "code_fingerprint": "new0000000000000"})
    (d,) = rep.dropped
    assert (d.fusion, d.seed, d.reason, d.metric, d.baseline) == \
        ("concat", 1, "superseded_code", None, None)
    assert "run r-old ran code old0000000" in d.detail
    comp = next(c for c in rep.comparisons if c.dataset == "synthetic-short"
                and c.fusion == "concat")
    assert comp.n == 5 and 0.1 - 0.8 not in comp.deltas
    # Without the sweep's current code nothing can be preferred: a duplicate, as before.
    rep = _analyze(pd.concat([df, old]))
    assert [d.reason for d in rep.dropped] == ["duplicate_seed"]


def test_pair_across_code_versions_is_dropped_with_a_warning() -> None:
    df = _with_code(small_table())
    m = (df.dataset == "synthetic-long") & (df.fusion == "add") & (df.seed == 4)
    df.loc[m, "code_fingerprint"] = "old0000000000000"
    rep = _analyze(df, {"kind": "mlflow", "code_fingerprint": "new0000000000000"})
    assert {(d.fusion, d.seed, d.reason) for d in rep.dropped} == {
        ("concat", 4, "code_mismatch"), ("gate-vector", 4, "code_mismatch")}
    (w,) = [w for w in rep.warnings if w.code == "code_mismatch"]
    assert w.message.startswith("2 pairs compare runs of different code and were dropped")
    assert "synthetic-long/sinusoidal/test_acc concat vs add seed 4" in w.message


def _with_components(df: pd.DataFrame) -> pd.DataFrame:
    """Issue 41: each run logs its code by component; arms differ in their fusion's code."""
    maps = [json.dumps({"trainer": "t1", f"data:{d}": "d1", f"fusion:{f}": f"f-{f}"})
            for d, f in zip(df.dataset, df.fusion)]
    return df.assign(code_fingerprint=[f"c{hash(m) % 10**12:012d}" for m in maps],
                     code_components=maps, run_id=[f"r{i}" for i in range(len(df))])


def test_pairs_compare_only_the_code_both_arms_run() -> None:
    """Two arms of a pair run different fusions, so their code fingerprints differ: they are
    paired all the same; a pair whose shared trainer ran other code is dropped, naming it."""
    df = _with_components(small_table())
    rep = _analyze(df)
    assert rep.dropped == [] and all(c.n == 5 for c in rep.comparisons)
    m = (df.dataset == "synthetic-long") & (df.fusion == "add") & (df.seed == 4)
    df.loc[m, "code_components"] = json.dumps(
        {"trainer": "t2", "data:synthetic-long": "d1", "fusion:add": "f-add"})
    rep = _analyze(df)
    assert {(d.fusion, d.seed, d.reason) for d in rep.dropped} == {
        ("concat", 4, "code_mismatch"), ("gate-vector", 4, "code_mismatch")}
    assert all("ran different code of the trainer" in d.detail for d in rep.dropped)


def test_a_run_a_relaunch_superseded_is_set_aside() -> None:
    """The old run of a retrained trial carries `superseded_by`: the new run is kept."""
    df = _with_components(small_table())
    m = (df.dataset == "synthetic-short") & (df.fusion == "concat") & (df.seed == 1)
    old = df[m].assign(run_id="r-old", test_acc=0.1, superseded_by="newkey",
                       code_components=json.dumps({"trainer": "t1", "fusion:concat": "f-old"}))
    rep = _analyze(pd.concat([df, old]), {"kind": "mlflow", "code_fingerprint": "sweep"})
    (d,) = rep.dropped
    assert (d.fusion, d.seed, d.reason) == ("concat", 1, "superseded_code")
    assert d.detail.startswith("run r-old ran code ")


# 3. direction of improvement
def test_rising_error_is_worse_not_better(tmp_path: Path, capsys) -> None:
    df = small_table()
    df["test_error"] = 0.2 + np.where(df.fusion == "gate-vector", 0.02, 0.0) \
        + np.random.default_rng(0).normal(0, 1e-4, len(df))
    path = _write(tmp_path, df)
    _, out, _ = run_cli(["--results", path, "--format", "json", "--metric", "test_error", *FAST],
                        capsys)
    gv = [c for c in json.loads(out)["comparisons"] if c["fusion"] == "gate-vector"]
    assert gv and all(c["verdict"] == "worse" and not c["higher_is_better"] for c in gv)
    assert all(c["p_holm"] < 1e-6 for c in gv)
    # Issue 39: a direction its name makes known is never overridden (it would turn the
    # rising error into `better`): one error line.
    code, out, err = run_cli(["--results", path, "--format", "json", "--metric", "test_error",
                              "--direction", "higher", *FAST], capsys)
    assert code == 2 and out == "" and err.count("error:") == 1
    assert ("--direction higher contradicts the known direction of metric 'test_error' "
            "(lower is better: its name says so)") in err


def test_unknown_direction_is_an_error(tmp_path: Path, capsys) -> None:
    path = _write(tmp_path, small_table().assign(foo=1.0))
    code, out, err = run_cli(["--results", path, "--metric", "foo", *FAST], capsys)
    assert code == 2 and out == ""
    assert err.strip() == ("fusion-sweep stats: error: direction of metric 'foo' is unknown; "
                           "pass --direction higher or --direction lower")
    with pytest.raises(AnalysisError, match=r"direction of metric 'foo' is unknown"):
        _analyze(small_table().assign(foo=1.0), metrics=("foo",))
    # The sweep's `directions` mapping knows it; a bad value there is an error too.
    rep = _analyze(small_table().assign(foo=1.0), metrics=("foo",), directions={"foo": "lower"})
    assert all(not c.higher_is_better for c in rep.comparisons)
    with pytest.raises(AnalysisError, match=r"direction of metric 'foo' must be 'higher' or 'lower'"):
        Settings(directions={"foo": "up"}).validate()


@pytest.mark.parametrize("name,want", [
    ("test_acc", "higher"), ("best_val_acc", "higher"), ("accuracy", "higher"),
    ("test_macro_f1", "higher"), ("roc_auc", "higher"), ("tokens_per_second", "higher"),
    ("test_error", "lower"), ("err_rate", "lower"), ("val_loss", "lower"),
    ("perplexity", "lower"), ("latency_ms_per_sample", "lower"), ("params", "lower"),
    ("train_seconds", "lower"), ("foo", None), ("acc_loss", None),
])
def test_direction_name_rule(name: str, want: str | None) -> None:
    from fusion_sweep.analysis.metrics import name_direction
    assert name_direction(name) == want


# 4. TOST: Holm across the equivalence tests, and a note when the t-interval excludes 0
def _tost_table() -> pd.DataFrame:
    """imdb, 10 seeds: concat +0.002 (t-CI excludes 0, p ~ 0.036) and 4 noise fusions."""
    rng = np.random.default_rng(1)
    base = 0.8 + rng.normal(0, 0.01, 10)
    deltas = {"concat": 0.002 + 0.0012 * np.array([2, -2, 1, -1, 3, -3, 2.5, -2.5, 0.5, -0.5]),
              **{f"f{i}": rng.normal(0, 0.004, 10) for i in range(1, 5)}}
    rows = [dict(dataset="imdb", pe="sin", fusion="add", seed=s, test_acc=base[s]) for s in range(10)]
    rows += [dict(dataset="imdb", pe="sin", fusion=f, seed=s, test_acc=base[s] + d[s])
             for f, d in deltas.items() for s in range(10)]
    # the class count, the test split's majority rate and size: without them no arm is shown
    # to beat the majority class by the exact test, and no 'equivalent' is given (issue 39)
    return pd.DataFrame(rows).assign(num_classes=2, test_majority_rate=0.5, test_n=2000)


def test_tost_is_holm_adjusted_and_verdict_uses_it() -> None:
    from statsmodels.stats.multitest import multipletests
    rep = _analyze(_tost_table(), margin=0.004)
    comps = {c.fusion: c for c in rep.comparisons}
    raw = [c.tost_p for c in rep.comparisons]
    assert [c.tost_p_holm for c in rep.comparisons] == pytest.approx(
        list(multipletests(raw, method="holm")[1]), abs=1e-12)
    # Unadjusted TOST p < 0.05 but Holm-adjusted >= 0.05: no longer "equivalent".
    for f in ("concat", "f2", "f3"):
        assert comps[f].tost_p < 0.05 <= comps[f].tost_p_holm
        assert comps[f].verdict == "inconclusive"
    assert comps["f1"].verdict == "equivalent"
    assert any(w.code == "holm_tost_family" for w in rep.warnings)


def test_equivalent_with_interval_excluding_zero_says_so() -> None:
    rep = _analyze(_tost_table(), margin=0.005)
    c = next(c for c in rep.comparisons if c.fusion == "concat")
    assert c.verdict == "equivalent" and c.t_ci_low > 0 and c.p_holm > 0.05
    (note,) = c.notes
    assert re.search(r"^equivalent within ±0.005 \(Holm-adjusted TOST p = .*\), but the "
                     r"t-interval \[\+.*\] excludes 0", note)
    for c in rep.comparisons:  # never "equivalent" with an interval excluding 0 and no note
        if c.verdict == "equivalent" and (c.t_ci_low > 0 or c.t_ci_high < 0):
            assert any("excludes 0" in n for n in c.notes)
    assert not any(w.code == "degenerate_comparison" for w in rep.warnings)


# 5. power at the alpha the verdict uses
def test_seeds_needed_at_holm_first_step_and_unadjusted(csv: Path, capsys) -> None:
    from statsmodels.stats.power import TTestPower
    _, out, _ = run_cli(["--results", str(csv), "--format", "json", *FAST], capsys)
    comps = json.loads(out)["comparisons"]
    m = len(comps)
    c = next(c for c in comps if c["dataset"] == "synthetic-short" and c["fusion"] == "concat")
    assert c["holm_first_step_alpha"] == pytest.approx(0.05 / m)
    need = TTestPower().solve_power(effect_size=abs(c["dz"]), power=0.8, alpha=0.05 / m)
    assert c["seeds_for_80_power_at_holm_alpha"] == math.ceil(need)
    assert c["seeds_for_80_power_at_holm_alpha"] > c["seeds_for_80_power"]
    assert c["power_at_holm_alpha"] == pytest.approx(
        TTestPower().power(abs(c["dz"]), c["n"], 0.05 / m), abs=1e-9)
    _, text, _ = run_cli(["--results", str(csv), "--wide", *FAST], capsys)
    assert "seeds@80% (α/m)" in text and "post hoc" in text


# 6. across datasets
def test_without_lengths_labels_use_dataset_names(tmp_path: Path, capsys) -> None:
    path = _write(tmp_path, small_table().drop(columns=["median_tokens"]))
    _, text, _ = run_cli(["--results", path, *FAST], capsys)
    assert "short→long" not in text and "Δlong" not in text and "depend" not in text
    assert "datasets (by name; lengths unknown)" in text
    assert "Δ synthetic-short − Δ synthetic-long" in text
    assert "Does the fusion effect differ across these datasets?" in text
    _, out, _ = run_cli(["--results", path, "--format", "json", *FAST], capsys)
    rep = json.loads(out)
    assert {t["ordered_by"] for t in rep["interaction"]["tests"]} == {"name"}
    assert "confounds length with domain" in rep["interaction"]["method"]


def test_interaction_warns_about_left_out_and_small_datasets() -> None:
    df = small_table()
    df = df[~((df.dataset == "synthetic-long") & (df.fusion == "concat") & (df.seed > 0))]
    df = df[~((df.dataset == "synthetic-short") & (df.seed == 4))]
    rep = _analyze(df)
    msgs = {w.code: w.message for w in rep.warnings}
    assert msgs["interaction_dataset_left_out"] == (
        "interaction concat vs add (sinusoidal/test_acc): left out synthetic-long (n = 1), "
        "which have fewer than 2 pairs; the test was not run (fewer than 2 datasets left)")
    assert "fewer than 5 pairs in synthetic-short (n = 4)" in msgs["interaction_small_n"]
    (t,) = rep.interaction.tests
    assert t.fusion == "gate-vector" and any("poorly calibrated" in n for n in t.notes)


# 7. chance level
def _chance_table() -> pd.DataFrame:
    """synthetic-long: every arm at 0.5 +- noise with 2 classes; short learns (0.86)."""
    df = small_table().assign(num_classes=2)
    m = df.dataset == "synthetic-long"
    df.loc[m, "test_acc"] = 0.5 + np.random.default_rng(2).normal(0, 0.01, int(m.sum()))
    return df


def test_neither_arm_beats_chance_is_not_learned(tmp_path: Path, capsys, svg_figures) -> None:
    from statsmodels.stats.multitest import multipletests
    rep = _analyze(_chance_table())
    long = [c for c in rep.comparisons if c.dataset == "synthetic-long"]
    short = [c for c in rep.comparisons if c.dataset == "synthetic-short"]
    assert {c.verdict for c in long} == {"not learned"}
    assert all((c.learned, c.baseline_learned, c.chance_level) == ("no", "no", 0.5)
               for c in long)
    assert all(c.verdict != "not learned" and c.learned == "yes" for c in short)
    msgs = [w.message for w in rep.warnings if w.code == "not_learned"]
    assert len(msgs) == 1 and msgs[0].startswith(  # one warning per dataset, naming both
        "neither arm beats chance on synthetic-long: these 2 comparisons say nothing about fusion")
    assert msgs[0].count(" vs add") == 2
    tests = rep.chance.tests
    assert len(tests) == 6  # 2 datasets x 3 fusions
    assert [t.p_holm for t in tests] == pytest.approx(
        list(multipletests([t.p for t in tests], method="holm")[1]), abs=1e-12)
    # Rendered: a "learned?" column and the verdict styled in the HTML.
    from fusion_sweep.analysis.render import write_report
    write_report(rep, tmp_path / "rep")
    md, html = (tmp_path / "rep" / "report.md").read_text(), (tmp_path / "rep" / "report.html").read_text()
    assert "| learned? |" in md and "no/no" in md and "Chance level" in md
    assert '<td class="v-not-learned">not learned</td>' in html and ".v-not-learned{" in html


def test_class_count_from_flag_else_unknown(tmp_path: Path, capsys) -> None:
    path = _write(tmp_path, _chance_table().drop(columns=["num_classes"]))
    _, out, _ = run_cli(["--results", path, "--format", "json", *FAST], capsys)
    rep = json.loads(out)
    assert {c["learned"] for c in rep["comparisons"]} == {"unknown"}
    assert {c["verdict"] for c in rep["comparisons"]} != {"not learned"}
    (w,) = [w for w in rep["warnings"] if w["code"] == "chance_unknown"]
    assert "--num-classes synthetic-long=K" in w["message"]
    _, out, _ = run_cli(["--results", path, "--format", "json", "--num-classes",
                         "synthetic-long=2", *FAST], capsys)
    rep = json.loads(out)
    long = [c for c in rep["comparisons"] if c["dataset"] == "synthetic-long"]
    assert {c["verdict"] for c in long} == {"not learned"}
    assert {c["learned"] for c in rep["comparisons"] if c["dataset"] == "synthetic-short"} \
        == {"unknown"}
    with pytest.raises(SystemExit) as exc:  # argparse: usage + error, exit 2
        run_cli(["--results", path, "--num-classes", "synthetic-long", *FAST], capsys)
    assert exc.value.code == 2
    assert "expected DATASET=K with an integer K >= 2" in capsys.readouterr().err


def test_chance_guards_every_metric_by_the_arms_accuracy() -> None:
    """Issue 31: a latency comparison of two chance-level arms is `not learned` too; the
    arms' accuracy (test_acc, not asked for) decides, once per arm."""
    rep = _analyze(_chance_table(), metrics=("latency_ms_per_sample",))
    states = {c.dataset: (c.learned, c.baseline_learned) for c in rep.comparisons}
    assert set(states.values()) == {("no", "no"), ("yes", "yes")}
    assert {t.metric for t in rep.chance.tests} == {"test_acc"}
    for c in rep.comparisons:
        assert (c.verdict == "not learned") == (c.learned == "no")


def test_no_accuracy_column_means_no_guard() -> None:
    df = _chance_table().drop(columns=["test_acc", "best_val_acc"])
    rep = _analyze(df, metrics=("latency_ms_per_sample",))
    assert {(c.learned, c.baseline_learned) for c in rep.comparisons} == {("n/a", "n/a")}
    assert rep.chance.tests == ()


def test_a_validation_maximum_never_stands_in_for_the_test_accuracy() -> None:
    """Issue 39: with no test accuracy the guard never reads best_val_acc (a maximum over
    epochs sits above chance by selection): every arm's learned? is unknown, and a warning
    says why."""
    rep = _analyze(_chance_table().drop(columns="test_acc"), metrics=("latency_ms_per_sample",))
    assert {(c.learned, c.baseline_learned) for c in rep.comparisons} == {("unknown", "unknown")}
    assert any(w.code == "chance_no_test_accuracy" and "best_val_acc" in w.message
               for w in rep.warnings)


# 8. inputs
@pytest.mark.parametrize("content,match", [
    (b"", r"results file .*r\.csv is empty"),
    (b"   \n\n", r"results file .*r\.csv is empty"),
    (bytes(range(256)) * 4, r"results file .*r\.csv is binary, not a CSV text file"),
    ("dataset,pe,fusion,seed,test_acc\ncaf\xe9,sin,add,0,0.5\n".encode("latin-1"),
     r"results file .*r\.csv is not UTF-8 text \(byte 0xe9 at offset 35\); re-save it as UTF-8"),
    (b'dataset,pe\n"unclosed,x\n', r"results file .*r\.csv is not a readable CSV"),
])
def test_unreadable_files_are_one_named_error(tmp_path: Path, capsys, content: bytes,
                                              match: str) -> None:
    path = tmp_path / "r.csv"
    path.write_bytes(content)
    code, _, err = run_cli(["--results", str(path), *FAST], capsys)
    assert code == 2 and re.search(match, err), err
    assert "Traceback" not in err
    proc = subprocess.run([sys.executable, "-m", "fusion_sweep.analysis", "stats", "--results", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert re.search("error: " + match, proc.stderr), proc.stderr


def test_unreadable_parquet_is_a_named_error(tmp_path: Path) -> None:
    from fusion_sweep.analysis.load import read_results_file
    path = tmp_path / "r.parquet"
    path.write_bytes(b"not parquet at all")
    with pytest.raises(AnalysisError, match=r"results file .*r\.parquet is not a readable Parquet"):
        read_results_file(path)


def test_percentages_are_refused(tmp_path: Path, capsys) -> None:
    path = _write(tmp_path, small_table().assign(test_acc=lambda d: d["test_acc"] * 100))
    code, _, err = run_cli(["--results", path, *FAST], capsys)
    assert code == 2
    assert re.search(r"metric 'test_acc' is a proportion \(accuracy/F1/AUC\) but has 30 "
                     r"value\(s\) outside \[0, 1\], e\.g\. 86\.07.* at row 0; percentages\? "
                     r"divide the column by 100", err), err


def test_duplicate_seed_with_a_nan_copy_is_flagged() -> None:
    df = small_table()
    m = (df.dataset == "synthetic-short") & (df.fusion == "concat") & (df.seed == 1)
    rep = _analyze(pd.concat([df, df[m].assign(test_acc=np.nan)]))
    (d,) = rep.dropped
    assert (d.fusion, d.seed, d.reason) == ("concat", 1, "duplicate_seed")
    assert d.detail == "concat: 2 finished runs for the same seed, 1 with a non-finite test_acc"


# 10. per-dataset equivalence margins
def test_per_dataset_margins() -> None:
    rep = _analyze(small_table(), margin={"synthetic-short": 0.01})
    for c in rep.comparisons:
        if c.dataset == "synthetic-short":
            assert c.equivalence_margin == 0.01 and c.tost_p is not None
            assert np.isfinite(c.tost_p)
        else:
            assert c.equivalence_margin is None and np.isnan(c.tost_p)
            assert c.verdict != "equivalent"
    (w,) = [w for w in rep.warnings if w.code == "no_equivalence_margin"]
    assert "none for synthetic-long: no equivalence test there" in w.message
    assert rep.to_dict()["settings"]["margin"] == {"synthetic-short": 0.01}
    with pytest.raises(AnalysisError, match=r"positive number .* for dataset 'x', got -1"):
        Settings(margin={"x": -1}).validate()


@pytest.mark.parametrize("params,want", [
    ({"equivalence_margin": '{"arxiv": 0.005}'}, {"margin": {"arxiv": 0.005}}),
    ({"equivalence_margin": "{'arxiv': 0.005}"}, {"margin": {"arxiv": 0.005}}),  # str(dict)
    ({"equivalence_margin": "0.02"}, {"margin": 0.02}),
    ({"equivalence_margin": "null"}, {}), ({"equivalence_margin": "None"}, {}),
    ({"baseline": '"concat"', "metric": "test_acc"}, {"baseline": "concat", "metric": "test_acc"}),
    ({"directions": '{"test_error": "lower"}'}, {"directions": {"test_error": "lower"}}),
])
def test_space_choices_decodes_json_and_old_params(params: dict, want: dict) -> None:
    from fusion_sweep.analysis.mlflow_io import space_choices
    assert space_choices(params) == want


def test_bad_sweep_margin_is_overridden_by_the_flag() -> None:
    from fusion_sweep.analysis.mlflow_io import space_choices
    space = space_choices({"equivalence_margin": "{'arxiv': 'wide'}"})
    args = cli.build_parser().parse_args(["stats"])
    with pytest.raises(AnalysisError, match=r"sweep param 'equivalence_margin' must be a number"):
        cli.settings_from(args, space)
    args = cli.build_parser().parse_args(["stats", "--equivalence-margin", "0.01"])
    assert args.equivalence_margin == 0.01
    assert cli.settings_from(args, space).margin == 0.01
    # a valid sweep margin is used without the flag, and the flag still wins over it
    good = space_choices({"equivalence_margin": "0.02"})
    assert cli.settings_from(cli.build_parser().parse_args(["stats"]), good).margin == 0.02
    assert cli.settings_from(args, good).margin == 0.01

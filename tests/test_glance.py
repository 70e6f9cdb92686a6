"""The answer at a glance (issue 22): the verdict grid, figures that agree with the
verdicts and clip no text, one meaning per word, a terminal that fits 120 columns."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fusion_sweep.analysis import cli, plots
from fusion_sweep.analysis.demo import synthetic_results
from fusion_sweep.analysis.load import tidy
from fusion_sweep.analysis.render import write_report
from fusion_sweep.analysis.report import Settings, analyze
from fusion_sweep.analysis.schema import BETTER, VERDICT_GRID_KEYS, WORSE
from fusion_sweep.analysis.stats import holm, holm_consistent_interval, paired_t
from fusion_sweep.analysis.tables import (
    blocks_by_regime, chance_table, comparison_table, interaction_table, seeds_needed_table,
    short_comparison_table,
)
from fusion_sweep.analysis.text import WIDTH, format_text

# The issue's cell keys, written out independently of the schema.
ISSUE_GRID_KEYS = ["dataset", "arm", "reference", "delta", "ci_low", "ci_high", "ci_level", "n",
                   "verdict"]


def default_like() -> pd.DataFrame:
    """The default sweep's shape: 3 regimes x add/concat/gate-vector x sinusoidal x 5 seeds."""
    df = synthetic_results(pes=("sinusoidal",))
    return df[df["fusion"].isin(["add", "concat", "gate-vector"])].reset_index(drop=True)


@pytest.fixture(scope="module")
def report():
    return analyze(tidy(synthetic_results()), Settings(margin=0.01, n_boot=200),
                   {"kind": "file", "path": "demo"})


def test_verdict_grid_one_cell_per_comparison(report) -> None:
    grid = report.to_dict()["verdict_grid"]
    assert len(grid) == len(report.comparisons) > 0
    assert all(list(cell)[:9] == ISSUE_GRID_KEYS and tuple(cell) == VERDICT_GRID_KEYS
               for cell in grid)
    cells = {(g["dataset"], g["arm"], g["reference"], g["metric"]) for g in grid}
    assert len(cells) == len(grid)  # one cell per comparison and regime
    rank = {r.dataset: r.rank for r in report.regimes}
    assert [rank[g["dataset"]] for g in grid] == sorted(rank[g["dataset"]] for g in grid)


def test_grid_interval_is_the_one_fixed_level_beside_p_holm(report) -> None:
    """Issue 33: the grid's interval is the 95% paired-t interval in every cell (the level
    used to differ per cell), with the p_holm that decides the verdict beside it: better/worse
    iff p_holm < alpha. The Holm-consistent interval stays in the JSON as holm_ci_*, and it
    excludes 0 exactly when the verdict is better/worse (what the figures draw)."""
    grid = report.to_dict()["verdict_grid"]
    by_key = {(c.dataset, c.variant, c.baseline_variant, c.metric): c for c in report.comparisons}
    for g in grid:
        c = by_key[(g["dataset"], g["arm"], g["reference"], g["metric"])]
        assert (g["ci_low"], g["ci_high"], g["ci_level"]) == (c.t_ci_low, c.t_ci_high, 0.95)
        assert g["p_holm"] == c.p_holm
        if g["verdict"] in (BETTER, WORSE):
            assert g["p_holm"] < 0.05 and (g["ci_low"] > 0 or g["ci_high"] < 0), g
    for c in report.comparisons:
        excludes = c.holm_ci_low > 0 or c.holm_ci_high < 0
        assert excludes == (c.verdict in (BETTER, WORSE)), c
        assert 1 - 0.05 <= c.holm_ci_level < 1
    assert any((c.t_ci_low > 0 or c.t_ci_high < 0) and c.verdict not in (BETTER, WORSE)
               for c in report.comparisons)  # the case the text must say in words


@pytest.mark.parametrize("seed", range(6))
def test_holm_consistent_interval_excludes_zero_iff_holm_rejects(seed: int) -> None:
    rng = np.random.default_rng(seed)
    ds = [rng.normal(rng.normal(0, 0.01), 0.01, size=5) for _ in range(8)]
    ps = np.array([paired_t(d, np.zeros_like(d), 0.05).p for d in ds])
    for d, p, ph in zip(ds, ps, holm(ps)):
        low, high, level = holm_consistent_interval(d, p, ph, 0.05)
        assert (low > 0 or high < 0) == (ph < 0.05)
        assert level >= 0.95


def _capture_figures(monkeypatch) -> list:
    figs = []
    save = plots._save

    def capture(fig, path, layout=True):
        out = save(fig, path, layout)
        figs.append(fig)
        return out
    monkeypatch.setattr(plots, "_save", capture)
    return figs


def test_no_figure_clips_text(report, tmp_path: Path, monkeypatch, no_pdf_figures) -> None:
    """Every text of every report figure (titles, ticks, legends) lies inside the PNG."""
    figs = _capture_figures(monkeypatch)
    write_report(report, tmp_path)
    assert len(figs) == 10
    for fig in figs:
        assert plots.text_outside(fig) == [], fig.axes[0].get_title()


def test_a_long_title_is_wrapped_not_clipped(report, tmp_path: Path, monkeypatch,
                                             no_pdf_figures) -> None:
    figs = _capture_figures(monkeypatch)
    comps = report.comparisons[:3]
    title = "Per-seed Δ vs reference · " + " · ".join(["synthetic-short (median 36 tokens)"] * 4)
    plots.paired_delta_plot(comps, title, 0.01, tmp_path / "d.png", report.settings.axis)
    assert plots.text_outside(figs[0]) == []
    assert "\n" in figs[0].axes[0].get_title()
    # The check is not vacuous: the same title on one line sticks out of the figure.
    figs[0].axes[0].set_title(title.replace("\n", " "))
    assert plots.text_outside(figs[0])


def test_forest_plot_draws_the_one_interval_with_a_legend(report, tmp_path, monkeypatch,
                                                           svg_figures):
    figs = _capture_figures(monkeypatch)
    comps = [c for c in report.comparisons if c.pe == "sinusoidal"]
    plots.forest_plot(comps, "forest", 0.01, tmp_path / "f.png", report.settings.axis)
    fig = figs[0]
    thick = [ln for ln in fig.axes[0].lines if ln.get_linewidth() == 2.5]
    drawn = sorted(tuple(ln.get_xdata()) for ln in thick)
    want = sorted((c.t_ci_low, c.t_ci_high) for c in comps)  # the report's one interval
    assert np.allclose(drawn, want)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any("95% paired-t interval" in t for t in labels)
    assert not any("verdict uses" in t or "Holm-consistent" in t for t in labels)
    verdicts = [t.get_text() for t in fig.axes[0].texts]
    assert all(f"Holm p {c.p_holm:.2g}" in " ".join(verdicts) for c in comps)
    assert any("±0.01 equivalence margin" in t for t in labels)


def _cli(argv: list[str], capsys) -> str:
    args = cli.build_parser().parse_args(["stats", *argv])
    assert args.func(args) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("table", [default_like, synthetic_results])
def test_terminal_fits_120_columns_unless_wide(table, tmp_path: Path, capsys) -> None:
    path = tmp_path / "r.csv"
    table().to_csv(path, index=False)
    out = _cli(["--results", str(path), "--equivalence-margin", "0.01", "--bootstrap", "200"],
               capsys)
    assert max(map(len, out.splitlines())) <= WIDTH
    assert out.index("Verdict grid") < out.index("Warnings:")
    wide = _cli(["--results", str(path), "--equivalence-margin", "0.01", "--bootstrap", "200",
                 "--wide"], capsys)
    assert max(map(len, wide.splitlines())) > WIDTH and "p_wilcoxon" in wide


def test_warnings_read_as_sentences_without_codes(report) -> None:
    """Issue 33: the terminal's warnings are sentences; their codes stay in the JSON."""
    text = format_text(report)
    line = next(ln for ln in text.splitlines() if "! " in ln)
    assert line.strip().startswith("! At n = ")
    codes = {w.code for w in report.warnings}
    assert "cannot_reach_alpha" in codes
    assert not [c for c in codes if f"[{c}]" in text] and "! [" not in text


def test_one_meaning_of_power(report) -> None:
    """Issue 33: power_at_holm_alpha is 'power at α/m' and power (at alpha) 'power at α' in
    every table; no header says a bare 'power'."""
    c = report.comparisons[0]
    for t in (seeds_needed_table(report), comparison_table(report, *blocks_by_regime(report)[0])):
        assert "power" not in t.headers
        assert t.rows[0][t.headers.index("power at α/m")] == f"{c.power_at_holm_alpha:.2f}"
        assert t.rows[0][t.headers.index("power at α")] == f"{c.power:.2f}"
    short = short_comparison_table(report, *blocks_by_regime(report)[0])
    assert "power" not in short.headers
    assert short.rows[0][short.headers.index("power at\nα/m")] == f"{c.power_at_holm_alpha:.2f}"


def test_chance_table_short_to_long_and_interaction_verdicts(report) -> None:
    rank = {r.dataset: r.rank for r in report.regimes}
    rows = chance_table(report).rows
    assert [rank[r[0]] for r in rows] == sorted(rank[r[0]] for r in rows)
    for short in (False, True):
        t = interaction_table(report, short=short)
        verdicts = [r[t.headers.index("verdict")] for r in t.rows]
        assert set(verdicts) <= {"differs", "inconclusive"} and "differs" in verdicts


def test_html_and_markdown_open_with_the_grid(report, tmp_path: Path, svg_figures) -> None:
    files = write_report(report, tmp_path)
    html = files["html"].read_text()
    assert html.index('id="verdict-grid"') < html.index("<table", html.index("verdict-grid") + 20)
    assert html.index("<table") == html.index('<table class="grid" id="verdict-grid"')
    assert html.index("verdict-grid") < html.index("Verdicts name their estimand")  # rule: after
    assert "figures loaded" not in html  # no debug line for a reader
    assert html.index("arms_") < html.index("Design warnings")  # the paper figure below it
    md = files["markdown"].read_text()
    assert md.index("Verdict grid") < md.index("Design warnings")
    stats = json.loads(files["json"].read_text())
    assert len(stats["verdict_grid"]) == len(report.comparisons)


def test_a_verdict_caveat_is_words_in_the_cell_and_a_sentence_in_the_answer(
        tmp_path: Path, capsys) -> None:
    """Issue 33: a caveat was a '[1]' in the cell, spelled out below the table (and before
    that a sentence that made the column 160 wide). Now: a few words in the grid cell and the
    short table ('withheld: chance unknown'), the full reason in the answer's sentence, no
    numbered marks anywhere."""
    rows = []
    for fusion, vals in (("add", [0.504, 0.497, 0.502, 0.499, 0.503]), ("concat", [0.5] * 5)):
        rows += [{"dataset": "d", "pe": "sin", "fusion": fusion, "seed": s, "test_acc": v,
                  "num_classes": 2} for s, v in enumerate(vals)]
    path = tmp_path / "r.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    out = _cli(["--results", str(path), "--equivalence-margin", "0.05", "--bootstrap", "200"],
               capsys)
    grid = out.split("Verdict grid", 1)[1].split("\n\n", 1)[0]
    assert "withheld: chance unknown" in grid and "[1]" not in out
    table = out.split("\nd (median", 1)[1] if "\nd (median" in out else out.split("\nd ", 1)[1]
    assert "inconclusive (withheld: chance unknown" in " ".join(table.split())
    answer = " ".join(out.split("\n\n")[1].split())
    assert ("whether concat beats chance is unknown (the same accuracy on every seed, or fewer "
            "than 2 seeds), so concat vs add is not decided") in answer
    assert max(map(len, out.splitlines())) <= WIDTH

"""The report's figures and HTML (issue 33): every figure inside report.html, each figure as
SVG, PDF and a 300-dpi PNG, one colour per fusion in every figure (the UI's colours), every
comparison's pairing drawn, every caveat of a verdict on the forest plot, warnings in words.

The checks read the files a reader gets (the SVGs' ids and colours, the HTML's img tags), not
the drawing code's internals."""
from __future__ import annotations

import html
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fusion_sweep.analysis import caveats
from fusion_sweep.analysis import plots
from fusion_sweep.analysis.demo import synthetic_results
from fusion_sweep.analysis.load import tidy
from fusion_sweep.analysis.render import write_report
from fusion_sweep.analysis.report import analyze
from fusion_sweep.analysis.settings import Settings
from fusion_sweep.analysis.variants import Variant
from fusion_sweep.trial.models.fusion import FUSIONS


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory):
    """A report over every pair of the demo's fusions (pairs=all), the sweep's registry order
    given as the parent run's known_fusions tag gives it, with add on synthetic-long at chance
    and an equivalence margin (so some verdicts carry a caveat: an equivalence withheld
    because no majority rate is recorded, issue 39's one guard rule)."""
    df = tidy(synthetic_results())
    at_chance = (df.dataset == "synthetic-long") & (df.fusion == "add")
    rng = np.random.default_rng(0)
    df.loc[at_chance, "test_acc"] = 0.5 + rng.normal(0, 0.004, at_chance.sum())
    source = {"kind": "mlflow", "known_fusions": list(FUSIONS)}
    report = analyze(df, Settings(n_boot=200, pairs="all", margin=0.02), source)
    out = tmp_path_factory.mktemp("report")
    write_report(report, out)
    return report, out


def _svg_ids(svg: str) -> list[str]:
    return re.findall(r'<g id="([^"]+)"', svg)


def test_report_html_embeds_every_figure(written) -> None:
    _, out = written
    page = (out / "report.html").read_text()
    srcs = re.findall(r'<img src="([^"]*)"', page)
    figures = sorted(out.glob("*.svg"))
    assert len(srcs) == len(figures) == 10  # 2 arm figures, 6 delta plots, 2 forest plots
    assert all(s.startswith("data:image/svg+xml;base64,") for s in srcs), \
        [s[:60] for s in srcs if not s.startswith("data:")]


def test_each_figure_is_svg_pdf_and_a_300_dpi_png(written) -> None:
    _, out = written
    pngs = sorted(out.glob("*.png"))
    assert len(pngs) == 10
    for png in pngs:
        assert png.with_suffix(".svg").read_text().lstrip().startswith("<?xml")
        assert png.with_suffix(".pdf").read_bytes()[:5] == b"%PDF-"
        dpi = Image.open(png).info["dpi"]  # the PNG's pHYs chunk
        assert [round(d) for d in dpi] == [plots.PNG_DPI] * 2 == [300, 300]


def test_each_format_draws_a_laid_out_figure_once(tmp_path, monkeypatch) -> None:
    """After tight_layout a figure keeps a placeholder layout engine, which makes savefig
    draw it twice per format (a dry run for the engine, then the file): write_formats drops
    the engine, so each format is one draw, and writes the same bytes."""
    from matplotlib import rc_context
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    def laid_out() -> Figure:
        fig = Figure(dpi=plots.PNG_DPI)
        FigureCanvasAgg(fig)
        fig.add_subplot().plot([0, 1], [1, 0])
        fig.suptitle("once")
        fig.tight_layout()
        return fig

    draws = []
    real = Figure.draw
    monkeypatch.setattr(Figure, "draw", lambda self, r: draws.append(1) or real(self, r))
    paths = plots.write_formats(laid_out(), tmp_path / "once.png")
    assert len(draws) == len(plots.FIGURE_FORMATS) == len(paths) == 3
    draws.clear()
    fig = laid_out()
    with rc_context(plots._SAVE_RC):  # as write_formats saves, the engine left in place
        for fmt in plots.FIGURE_FORMATS:
            fig.savefig(tmp_path / f"kept.{fmt}", format=fmt, dpi="figure",
                        metadata=plots._NO_DATE[fmt])
    assert len(draws) == 2 * len(plots.FIGURE_FORMATS)
    for fmt in plots.FIGURE_FORMATS:
        assert (tmp_path / f"once.{fmt}").read_bytes() == (tmp_path / f"kept.{fmt}").read_bytes()


def _colours(out: Path) -> dict[str, set[str]]:
    """Every fusion-coloured artist's colours over every SVG: arm -> colours."""
    seen: dict[str, set[str]] = {}
    for svg in out.glob("*.svg"):
        text = svg.read_text()
        for part in text.split('<g id="fusion__')[1:]:
            arm, body = part.split("__", 1)[0], part.split("</g>", 1)[0]
            found = set(re.findall(r"(?:fill|stroke): (#[0-9a-f]{6})", body)) - {"#ffffff"}
            seen.setdefault(arm, set()).update(found)
    return seen


def test_a_fusion_has_one_colour_in_every_figure_the_uis(written) -> None:
    """Arm figures, delta plots and forest plots colour each fusion the same, with the UI's
    colour for it (fusion_sweep.tracking.view.fusion_colors: the registry's order)."""
    from fusion_sweep.tracking.view import fusion_colors
    _, out = written
    seen = _colours(out)
    assert set(seen) == {"add", "concat", "gate-vector", "mul"}
    assert all(len(c) == 1 for c in seen.values()), seen
    ui = fusion_colors()
    assert {arm: c.pop() for arm, c in seen.items()} == {a: ui[a] for a in seen}


def test_arm_colours_follow_the_registry_not_the_sweep() -> None:
    """A sweep of gate-vector alone colours it as a sweep of every fusion does."""
    order = list(FUSIONS)
    assert plots.arm_colors(["gate-vector"], order) == {
        "gate-vector": plots.arm_colors(order, order)["gate-vector"]}
    # without the registry's order (a results file): by name, still one colour per arm
    assert len(set(plots.arm_colors(["b", "a", "c"]).values())) == 3


def test_every_comparisons_pairing_is_drawn(written) -> None:
    """Each comparison's seed pairs are joined (gate-vector–add as well as concat–add and
    gate-vector–concat), one line per (comparison, seed), in its group's arm figure."""
    report, out = written
    axis = report.settings.axis
    ids = {pe: set(_svg_ids((out / f"arms_{pe}_test_acc.svg").read_text()))
           for pe in ("sinusoidal", "learned")}
    want = [(c.pe, plots.pair_id(c.dataset, axis.short(Variant(c.encoder, c.pe, c.fusion)),
                                 c.baseline, s)) for c in report.comparisons for s in c.seeds]
    assert len(report.comparisons) == 36 and want
    assert [w for pe, w in want if w not in ids[pe]] == []


def test_the_forest_plot_shows_every_caveat_of_a_verdict(written) -> None:
    report, out = written
    flagged = [c for c in report.comparisons if c.verdict_flags]
    assert flagged  # equivalences withheld: no majority rate in the demo table
    for pe in ("sinusoidal", "learned"):
        text = html.unescape((out / f"forest_{pe}_test_acc.svg").read_text())
        for c in (c for c in report.comparisons if c.pe == pe):
            assert plots.verdict_words(c) in text
            assert all(caveats.figure(flag) in text for flag in c.verdict_flags)


def test_figure_words_name_the_metric_not_its_column(written) -> None:
    _, out = written
    for svg in out.glob("*.svg"):
        text = " ".join(html.unescape(t) for t in re.findall(r"<text[^>]*>(.*?)</text>",
                                                             svg.read_text(), re.S))
        assert "test accuracy" in text and "test_acc" not in text, svg.name
        assert "pe=" not in text and " · " not in text, svg.name


def test_html_warnings_in_words_and_each_heading_once(written) -> None:
    report, out = written
    page = (out / "report.html").read_text()
    assert report.warnings
    codes = [w.code for w in report.warnings]
    assert not [c for c in codes if f"[{c}]" in page]
    assert page.count("Each arm over its seeds") == 1
    assert (out / "report.md").read_text().count("Each arm over its seeds") == 1



def test_the_html_report_says_the_answer_first_in_words(written):
    """report.html and report.md open on the same sentences as the terminal (answer.findings),
    before the verdict grid."""
    import html
    from fusion_sweep.analysis.answer import findings
    report, out = written
    page = (out / "report.html").read_text(encoding="utf-8")
    md = (out / "report.md").read_text(encoding="utf-8")
    sentences = [f.sentence for f in findings(report)]
    assert len(sentences) > 1
    for text, esc in ((page, html.escape), (md, lambda x: x)):
        grid = text.index("The answer at a glance")
        for sentence in sentences:
            assert 0 <= text.find(esc(sentence)) < grid, sentence


@pytest.mark.parametrize("fixture, formats", [("svg_figures", {"svg"}),
                                              ("no_pdf_figures", {"svg", "png"})])
def test_a_report_test_that_leaves_out_formats_writes_only_the_others(fixture, formats, tmp_path,
                                                                      request) -> None:
    """tests/conftest.py's `svg_figures` and `no_pdf_figures` (for report tests that read no
    PDF, or neither PDF nor PNG): the files written and the files write_report returns hold
    exactly the formats kept. The next test, run after these in this module, sees the
    default back."""
    request.getfixturevalue(fixture)
    report = analyze(tidy(synthetic_results()), Settings(n_boot=200))
    files = write_report(report, tmp_path)
    written = {p.suffix[1:] for p in tmp_path.iterdir() if p.suffix in (".svg", ".pdf", ".png")}
    assert written == formats
    assert {Path(n).suffix[1:] for n in files if "." in n} == formats
    assert set(plots.FIGURE_FORMATS) == formats


def test_every_format_is_back_after_a_test_that_left_some_out() -> None:
    assert plots.FIGURE_FORMATS == ("svg", "pdf", "png")

"""The HTML report renders in headless Chromium with every figure loaded (embedded in the
page) and every table within the page at 1600 px."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "check_report_html.py"
_spec = importlib.util.spec_from_file_location("check_report_html", _SCRIPT)
check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check)

CHROMIUM = check.find_chromium()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium (apt-get install chromium)")


def status(dom: str) -> str:
    """The text of the page's figure-status banner."""
    return re.search(r'<div id="img-status"[^>]*>([^<]*)</div>', dom).group(1)


def test_report_renders_with_images_loaded(tmp_path: Path, svg_figures) -> None:
    rdir = check.demo_report(tmp_path / "rep", n_boot=1000)
    html = rdir / "report.html"
    dom = check.dump_dom(CHROMIUM, html, tmp_path / "shot.png")  # one load: DOM and picture
    loaded, total = check.images_loaded(dom)
    assert total == 10 and loaded == total  # 2 arm figures + 6 delta plots + 2 forest plots
    assert check.grid_first(dom)  # the verdict grid comes before any other table
    assert status(dom) == ""  # no debug line for a reader when every figure loaded
    png = tmp_path / "shot.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from PIL import Image  # noqa: PLC0415 - matplotlib's dependency
    assert Image.open(png).size == (1600, 2400)
    assert check.tables_overflowing(dom) == 0  # learned? and verdict in view
    # The figures live in the page: without the files beside it every one still loads.
    for f in rdir.glob("*.png"):
        f.unlink()
    assert check.images_loaded(check.dump_dom(CHROMIUM, html)) == (10, 10)
    # The check is not vacuous: a figure linked to a missing file is reported as not loaded.
    broken = rdir / "broken.html"
    broken.write_text(re.sub(r'<img src="data:[^"]*"', '<img src="missing.png"',
                             html.read_text(), count=1))
    dom = check.dump_dom(CHROMIUM, broken)
    assert check.images_loaded(dom) == (9, 10)
    assert status(dom) == "1 of 10 figures failed to load"


def test_adaptive_sweep_report_shows_confidence_sequences(tmp_path: Path, svg_figures) -> None:
    """An adaptive sweep's report (issue 13): the confidence-sequence figure loads in Chromium
    beside the comparison figures."""
    from fusion_sweep.analysis.demo import synthetic_results
    from fusion_sweep.analysis.load import tidy
    from fusion_sweep.analysis.render import write_report
    from fusion_sweep.analysis.report import analyze
    from fusion_sweep.analysis.settings import Settings

    source = {"kind": "mlflow", "space": {"metric": "test_acc"},
              "adaptive": {"max_seeds": 20, "seed_batch": 5, "alpha": 0.05}}
    report = analyze(tidy(synthetic_results()), Settings(baseline="add", n_boot=200), source)
    html = write_report(report, tmp_path / "rep")["html"]
    from fusion_sweep.analysis.render import embedded
    assert embedded(html.parent, "sequential_cs.png") in html.read_text()
    loaded, total = check.images_loaded(check.dump_dom(CHROMIUM, html))
    assert total == 11 and loaded == total  # the 10 figures of a fixed sweep + the CS figure

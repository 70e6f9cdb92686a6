#!/usr/bin/env python
"""Render a `fusion-sweep stats --report` HTML in headless Chromium; check its figures load
and its tables fit the page.

    python scripts/check_report_html.py [REPORT_DIR] [--screenshot PNG]

Without REPORT_DIR, builds a report from the built-in synthetic results table
(fusion_sweep.analysis.demo) in a temporary directory, and a claims report (`--claims ressformer` on
the demo's ReSSFormer table) beside it. Every page checked (report.html, and claims.html
when the directory has one) is loaded once in Chromium, for both of:
1. `--dump-dom`: the page's own load handler writes data-images-loaded="k/n" on <body>
   after testing every <img> (each figure is embedded in the page as a data URI) for
   `complete && naturalWidth > 0`; k must equal n > 0. It also writes
   data-tables-overflowing="k", the tables wider than the page at 1600 px; k must be 0.
   The same DOM must open with the verdict grid: the first <table> is id="verdict-grid".
2. `--screenshot` at 1600x2400 (the width a reader's laptop shows), saved to --screenshot (default
   /tmp/fusion_report_screenshot.png; the claims page gets a `_claims` suffix), for a
   human look.
Exit 0 when every image of every page loaded and every table fits, 1 otherwise, 3 when no chromium is installed
(Debian: `apt-get install -y chromium`).
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")
# --no-sandbox: containers usually run as root, where Chromium's sandbox refuses to start.
BASE_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
              "--virtual-time-budget=10000")


def find_chromium() -> str | None:
    return next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)


WINDOW = "--window-size=1600,2400"


def dump_dom(chromium: str, html: Path, png: Path | None = None, timeout: float = 60) -> str:
    """The page's DOM after its load handler ran, at the screenshot's width; with `png`, the
    same Chromium run also saves the screenshot there (one page load for both)."""
    shot = []
    if png is not None:
        png.parent.mkdir(parents=True, exist_ok=True)
        png.unlink(missing_ok=True)
        shot = [f"--screenshot={png}"]
    dom = subprocess.run([chromium, *BASE_FLAGS, WINDOW, "--dump-dom", *shot,
                          html.resolve().as_uri()],
                         capture_output=True, text=True, timeout=timeout, check=True).stdout
    if png is not None and (not png.exists() or png.stat().st_size == 0):
        raise RuntimeError(f"chromium wrote no screenshot to {png}")
    return dom


def grid_first(dom: str) -> bool:
    """Whether the first table of the page is the verdict grid."""
    m = re.search(r"<table[^>]*>", dom)
    return bool(m) and 'id="verdict-grid"' in m.group(0)


def images_loaded(dom: str) -> tuple[int, int]:
    """(loaded, total) images as the page reported them in its DOM after the load event."""
    m = re.search(r'data-images-loaded="(\d+)/(\d+)"', dom)
    if not m:
        raise RuntimeError("the page never reported its images (load event did not fire?)")
    return int(m.group(1)), int(m.group(2))


def tables_overflowing(dom: str) -> int:
    """How many tables are wider than the page at the screenshot's width (a scrollbar would
    hide some of their columns), as the page reported it in its DOM after the load event."""
    m = re.search(r'data-tables-overflowing="(\d+)"', dom)
    if not m:
        raise RuntimeError("the page never reported its tables (load event did not fire?)")
    return int(m.group(1))


def demo_report(out_dir: Path, n_boot: int = 10_000) -> Path:
    """Write a report from the synthetic demo table (with one dropped pair) into out_dir."""
    from fusion_sweep.analysis.demo import synthetic_results
    from fusion_sweep.analysis.load import tidy
    from fusion_sweep.analysis.render import write_report
    from fusion_sweep.analysis.report import Settings, analyze
    df = tidy(synthetic_results())
    bad = (df.dataset == "synthetic-long") & (df.fusion == "concat") & (df.seed == 2)
    df.loc[bad, "fp_batch_order"] = "deadbeef00"  # shows a fingerprint-mismatch drop
    write_report(analyze(df, Settings(margin=0.01, n_boot=n_boot), {"kind": "file", "path": "demo"}),
                 out_dir)
    return out_dir


def demo_claims_report(out_dir: Path, n_boot: int = 1000) -> Path:
    """Write a report with `--claims ressformer` from the demo's ReSSFormer table (one
    dropped pair, one claim whose variant is absent) into out_dir: report.* and claims.*."""
    from fusion_sweep.analysis.demo import synthetic_ressformer_results
    from fusion_sweep.analysis.load import tidy
    from fusion_sweep.analysis.render import write_report
    from fusion_sweep.analysis.report import Settings, analyze
    df = tidy(synthetic_ressformer_results())
    df = df[df.encoder != "ressformer-no-r2mu"]  # C6 and part of C7: 'not run'
    bad = (df.dataset == "synthetic-long") & (df.encoder == "ressformer") & (df.seed == 1)
    df.loc[bad, "fp_split"] = "deadbeef00"  # a fingerprint-mismatch drop
    settings = Settings(baseline="standard/sinusoidal/add", margin=0.02, margin_metric="test_acc",
                        n_boot=n_boot, claims="ressformer")
    write_report(analyze(df, settings, {"kind": "file", "path": "demo-ressformer"}), out_dir)
    return out_dir


def pages(report_dir: Path) -> list[Path]:
    """The HTML pages of a report directory: report.html, and claims.html if present."""
    return [p for p in (report_dir / "report.html", report_dir / "claims.html") if p.exists()]


def check_page(chromium: str, html: Path, png: Path) -> bool:
    dom = dump_dom(chromium, html, png)
    loaded, total = images_loaded(dom)
    first = html.name != "report.html" or grid_first(dom)
    wide = tables_overflowing(dom)
    print(f"{html}: {loaded}/{total} images loaded; verdict grid first: {first}; "
          f"tables wider than the page: {wide}; screenshot {png}")
    return total > 0 and loaded == total and first and wide == 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("report_dir", nargs="?", type=Path)
    ap.add_argument("--screenshot", type=Path, default=Path("/tmp/fusion_report_screenshot.png"))
    args = ap.parse_args(argv)
    chromium = find_chromium()
    if chromium is None:
        print("no chromium found; install it with `apt-get install -y chromium`", file=sys.stderr)
        return 3
    with tempfile.TemporaryDirectory() as tmp:
        found = (pages(args.report_dir) if args.report_dir else
                 pages(demo_report(Path(tmp) / "fusion")) +
                 pages(demo_claims_report(Path(tmp) / "claims"))[1:])
        ok = True
        for html in found:
            suffix = "" if html.name == "report.html" else "_" + html.stem
            png = args.screenshot.with_name(args.screenshot.stem + suffix + args.screenshot.suffix)
            ok = check_page(chromium, html, png) and ok
    return 0 if found and ok else 1


if __name__ == "__main__":
    sys.exit(main())

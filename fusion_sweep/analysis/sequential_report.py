"""Reporting of adaptive-seed (sequential) decisions: tables and the confidence-sequence figure.

Pure functions over :class:`fusion_sweep.analysis.sequential.SequentialResult` objects; no MLflow. The
table is an :class:`fusion_sweep.analysis.tables.Table` (format-neutral: terminal, Markdown and HTML lay it
out); :func:`sequential_blocks` returns blocks in :mod:`fusion_sweep.analysis.render`'s block format, so
the report can append them as they are. The figure is drawn like :mod:`fusion_sweep.analysis.plots`:
matplotlib's object API on an Agg canvas, no pyplot, verdict colours from the schema.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from fusion_sweep.analysis.schema import DESCRIPTIVE_LABEL, VERDICT_COLORS
from fusion_sweep.analysis.sequential import SequentialResult
from fusion_sweep.analysis.tables import Table, fci, fnum, fp

SEQUENTIAL_HEADERS = ["family", "comparison", "seeds", "mean Δ", "CS (running)",
                      "p anytime (×m)", "decision"]


def key_label(key: object) -> str:
    """An opaque family/comparison key as text: tuples joined with ' · '."""
    if isinstance(key, tuple):
        return " · ".join(str(k) for k in key)
    return str(key)


def sequential_rows(results: Sequence[SequentialResult], digits: int = 4) -> list[list[str]]:
    """One row of strings per comparison, in SEQUENTIAL_HEADERS order. An unbounded CS end
    is shown as -inf/+inf (too few seeds for alpha/m so far)."""
    return [[key_label(r.family), key_label(r.comparison), str(r.n),
             fnum(r.mean_delta, digits, signed=True), _fci_inf(r.cs_low, r.cs_high, digits),
             fp(r.p_bonferroni), r.decision] for r in results]


def sequential_table(results: Sequence[SequentialResult], title: str | None = None) -> Table:
    """The decisions table with footnotes stating the level, the method and the rule."""
    footnotes = []
    if results:
        r = results[0]
        margin = f"±{r.margin:g}" if r.margin is not None else "none (never equivalent)"
        footnotes = [
            f"Anytime-valid confidence sequences (normal mixture, unknown variance; "
            f"phi = {_phi(results)}), each at 1 - alpha/m = {1 - r.alpha_each:.4g} "
            f"(Bonferroni over m = {r.m} comparisons, family-wise alpha = {r.alpha:g}), "
            "running intersection over seeds; valid at any stopping time.",
            f"better/worse: the CS excludes 0; equivalent: the whole CS lies inside the margin "
            f"({margin}); inconclusive: undecided when the seed budget ran out.",
            f"Fixed-n statistics of these comparisons are {DESCRIPTIVE_LABEL}.",
        ]
    return Table(title or "Sequential decisions (adaptive seeds)", list(SEQUENTIAL_HEADERS),
                 sequential_rows(results), footnotes)


def markdown_rows(results: Sequence[SequentialResult]) -> list[str]:
    """The decisions as Markdown table lines: header, separator, one line per comparison."""
    esc = lambda s: s.replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(SEQUENTIAL_HEADERS) + " |",
             "|" + "|".join("---" for _ in SEQUENTIAL_HEADERS) + "|"]
    return lines + ["| " + " | ".join(esc(v) for v in row) + " |"
                    for row in sequential_rows(results)]


def cs_plot(results: Sequence[SequentialResult], path: str | Path, title: str = "") -> Path:
    """One panel per comparison: its confidence sequence against seeds.

    Shaded: the running-intersection CS (what decides); thin lines: the CS at each n
    alone; black: the running mean Δ; dashed: 0; blue band: ±margin. The panel title is
    coloured by the decision. Unbounded CS ends are drawn to the panel's edge.
    """
    cols = min(3, max(1, len(results)))
    rows = max(1, math.ceil(len(results) / cols))
    fig = Figure(figsize=(3.6 * cols, 3.0 * rows + (0.35 if title else 0)), dpi=110)
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, r in zip(axes, results):
        _cs_panel(ax, r)
    for ax in axes[len(results):]:
        ax.set_axis_off()
    if not results:
        axes[0].text(0.5, 0.5, "no comparisons", ha="center", va="center")
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, format="png")
    return path


def _cs_panel(ax, r: SequentialResult) -> None:
    color = VERDICT_COLORS.get(r.decision, "black")
    ax.axhline(0.0, color="#444", lw=0.8, ls="--")
    if r.margin is not None:
        ax.axhspan(-r.margin, r.margin, color="#0969da", alpha=0.08, lw=0)
        for y in (-r.margin, r.margin):
            ax.axhline(y, color="#0969da", lw=0.6, ls=":")
    if r.path is not None:
        p = r.path
        n = np.arange(1, p.n + 1)
        lo, hi = _ylim(r)
        ax.fill_between(n, np.clip(p.low, lo, hi), np.clip(p.high, lo, hi), color=color,
                        alpha=0.25, lw=0)
        for raw in (p.raw_low, p.raw_high):
            ax.plot(n, np.clip(raw, lo, hi), color=color, lw=0.7, alpha=0.6)
        ax.plot(n, p.mean, color="black", lw=1.2)
        ax.set_ylim(lo, hi)
        ax.set_xlim(1, max(2, p.n))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    # "arm vs reference" on its own lines: variant labels are too long for one panel width
    comparison = key_label(r.comparison).replace(" vs ", "\nvs ")
    ax.set_title(f"{key_label(r.family)}: {r.decision} (n = {r.n})\n{comparison}",
                 fontsize=7, color=color)
    ax.set_xlabel("seeds", fontsize=7)
    ax.set_ylabel("Δ (mean, CS)", fontsize=7)
    ax.tick_params(labelsize=7)


def _ylim(r: SequentialResult) -> tuple[float, float]:
    """A y-range around what decided: the mean path, the final CS, 0 and the margin. The
    early, wide CS ends are clipped to it (they carry no decision)."""
    p = r.path
    core = [0.0, *p.mean, *(v for v in (p.low[-1], p.high[-1]) if np.isfinite(v))]
    if r.margin is not None:
        core += [-r.margin, r.margin]
    lo, hi = min(core), max(core)
    pad = 0.6 * (hi - lo) or 0.05
    return lo - pad, hi + pad


def sequential_blocks(results: Sequence[SequentialResult], out_dir: str | Path,
                      name: str = "sequential_cs.png") -> list[tuple]:
    """Blocks for fusion_sweep.analysis.render (("h2", ...), ("p", ...), ("table", Table), ("img", ...)),
    with the CS figure written to out_dir/name."""
    cs_plot(results, Path(out_dir) / name, "Confidence sequences against seeds "
            "(shaded: running intersection; band: ±margin)")
    return [("h2", "Adaptive seeds: sequential decisions"),
            ("p", "Seeds were added only where a comparison was still undecided; these "
                  "decisions come from anytime-valid confidence sequences, valid at the "
                  f"data-dependent stopping time. Fixed-n tests below are {DESCRIPTIVE_LABEL}."),
            ("table", sequential_table(results)),
            ("img", name, "confidence sequence of each comparison's mean delta against seeds")]


def _fci_inf(low: float, high: float, digits: int) -> str:
    if math.isfinite(low) and math.isfinite(high):
        return fci(low, high, digits)
    return f"[{_end(low, digits)}, {_end(high, digits)}]"


def _end(v: float, digits: int) -> str:
    return f"{v:+.{digits}f}" if math.isfinite(v) else ("-inf" if v < 0 else "+inf")


def _phi(results: Sequence[SequentialResult]) -> str:
    phis = {r.path.phi for r in results if r.path is not None}
    return ", ".join(f"{p:g}" for p in sorted(phis)) or "—"

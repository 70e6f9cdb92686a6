"""Report figures, drawn with matplotlib's object API on an Agg canvas.

No pyplot and no `matplotlib.use`: importing this module changes no global backend of the
caller's process, and no display is needed (e.g. on a cluster head).

Each function takes comparison dicts (see :mod:`fusion_sweep.analysis.report`) and writes one PNG.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from fusion_sweep.analysis.schema import SUPPORT_COLORS, VERDICT_COLORS
from fusion_sweep.analysis.variants import Axis, Variant

_VERDICT_COLOR = VERDICT_COLORS


def _arm(c: dict, axis: Axis | None) -> str:
    """A comparison's arm in the axis's short label (the fusion by default)."""
    return axis.short(Variant(c["encoder"], c["pe"], c["fusion"])) if axis else c["fusion"]


def slug(*parts: str) -> str:
    """A filename-safe, URL-safe name (the HTML references PNGs by relative path)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", "_".join(parts)).strip("-")


def paired_delta_plot(comps: list[dict], title: str, margin: float | None, path: Path,
                      axis: Axis | None = None) -> Path:
    """Per-seed deltas (arm - reference) for one (dataset, group, metric).

    One column per comparison; each seed keeps its colour across columns and is joined
    by a faint line, so a seed that helps every fusion is visible as a high track. The
    black bar is the mean delta with its t-interval.
    """
    seeds = sorted({s for c in comps for s in c["seeds"]})
    cmap = colormaps["tab10"]
    color = {s: cmap(i % 10) for i, s in enumerate(seeds)}
    fig, ax = _subplots(figsize=(1.6 + 1.5 * max(1, len(comps)), 3.6))
    _zero_and_margin(ax, margin, horizontal=True)
    for s in seeds:
        xs = [i for i, c in enumerate(comps) if s in c["seeds"]]
        ys = [c["deltas"][c["seeds"].index(s)] for c in comps if s in c["seeds"]]
        ax.plot(np.array(xs) - 0.12, ys, "-", color=color[s], alpha=0.25, lw=1)
        ax.scatter(np.array(xs) - 0.12, ys, color=color[s], s=28, zorder=3, label=f"seed {s}")
    for i, c in enumerate(comps):
        if c["t_ci_low"] is not None and np.isfinite(c["t_ci_low"]):
            ax.errorbar(i + 0.12, c["mean_delta"], yerr=[[c["mean_delta"] - c["t_ci_low"]],
                        [c["t_ci_high"] - c["mean_delta"]]], fmt="s", color="black",
                        ms=5, capsize=3, zorder=4)
        elif c["n"]:
            ax.plot(i + 0.12, c["mean_delta"], "s", color="black", ms=5)
    ax.set_xticks(range(len(comps)))
    ax.set_xticklabels([f"{_arm(c, axis)}\nvs {c['baseline']}\n{c['verdict']}" for c in comps],
                       fontsize=8 if axis is None or axis.is_fusion else 6)
    for tick, c in zip(ax.get_xticklabels(), comps):
        tick.set_color(_VERDICT_COLOR.get(c["verdict"], "black"))
    ax.set_xlim(-0.6, len(comps) - 0.4)
    ax.set_ylabel(f"Δ {comps[0]['metric'] if comps else ''} (per seed)")
    ax.set_title(title, fontsize=9)
    if seeds:
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    return _save(fig, path)


def forest_plot(comps: list[dict], title: str, margin: float | None, path: Path,
                axis: Axis | None = None) -> Path:
    """Mean Δ with t-interval (thick) and BCa interval (thin) per (comparison, regime).

    Rows are grouped by fusion, datasets in regime order within a group (short -> long
    when lengths are known, else by name), so an effect that differs across datasets
    reads as a drift down each group.
    """
    rows = list(reversed(comps))  # first comparison at the top
    fig, ax = _subplots(figsize=(8.5, 0.9 + 0.32 * max(1, len(rows))))
    _zero_and_margin(ax, margin, horizontal=False)
    for y, c in enumerate(rows):
        col = _VERDICT_COLOR.get(c["verdict"], "black")
        if c["boot_ci_low"] is not None and np.isfinite(c["boot_ci_low"]):
            ax.plot([c["boot_ci_low"], c["boot_ci_high"]], [y - 0.18] * 2, color=col, lw=1,
                    alpha=0.6)
        if c["t_ci_low"] is not None and np.isfinite(c["t_ci_low"]):
            ax.plot([c["t_ci_low"], c["t_ci_high"]], [y, y], color=col, lw=2.5)
        if c["mean_delta"] is not None and np.isfinite(c["mean_delta"]):
            ax.plot(c["mean_delta"], y, "o", color=col, ms=5)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{_arm(c, axis)} vs {c['baseline']} · {c['regime']}" for c in rows],
                       fontsize=7)
    ax.set_xlabel(f"Δ {comps[0]['metric'] if comps else ''}   (thick: t-interval, "
                  "thin: BCa bootstrap; colour = verdict)", fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    return _save(fig, path)


def claims_plot(tests: list[dict], kind: str, path: Path) -> bool:
    """Claim tests' estimates with their intervals, colour = what they say about the paper.

    kind "difference": every test in metric units (mean Δ, Δ of Δ; one-sided intervals run
    to the edge); "ratio": the cost ratios on a log axis, 1 = no effect. Returns False
    (nothing drawn) when no test of that kind has an estimate.
    """
    ratio = kind == "ratio"
    rows = [t for t in tests if (t["estimate_kind"] == "geometric-mean ratio") == ratio
            and t["estimate"] is not None and np.isfinite(t["estimate"])]
    if not rows:
        return False
    rows = list(reversed(rows))
    fig, ax = _subplots(figsize=(8.5, 0.9 + 0.3 * len(rows)))
    ax.axvline(1.0 if ratio else 0.0, color="#444", lw=0.8, ls="--")
    finite = [v for t in rows for v in (t["ci_low"], t["ci_high"], t["estimate"])
              if v is not None and np.isfinite(v)]
    edge = max(finite) + 0.1 * (max(finite) - min(finite) + 1e-9)
    for y, t in enumerate(rows):
        col = SUPPORT_COLORS.get(t["support"], "black")
        low, high = t["ci_low"], t["ci_high"]
        if low is not None and np.isfinite(low):
            hi = high if high is not None and np.isfinite(high) else edge  # one-sided: to edge
            ax.plot([low, hi], [y, y], color=col, lw=2.5)
        ax.plot(t["estimate"], y, "o", color=col, ms=5)
    if ratio:
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([t["test"] for t in rows], fontsize=7)
    ax.set_xlabel("ratio arm / reference (log scale; < 1 is cheaper)" if ratio else
                  "Δ (metric units; one-sided intervals run to the edge)", fontsize=8)
    ax.set_title("Claim tests · green supports the paper, red contradicts, grey does not "
                 "decide", fontsize=8)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    _save(fig, path)
    return True


def _subplots(figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    fig = Figure(figsize=figsize, dpi=110)
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def _zero_and_margin(ax: Axes, margin: float | None, horizontal: bool) -> None:
    """The no-effect line, and the ±margin equivalence band when a margin is given."""
    line, band = (ax.axhline, ax.axhspan) if horizontal else (ax.axvline, ax.axvspan)
    line(0.0, color="#444", lw=0.8, ls="--")
    if margin:
        band(-margin, margin, color="#0969da", alpha=0.08, lw=0)


def _save(fig: Figure, path: Path) -> Path:
    path = Path(path)
    fig.tight_layout()
    fig.savefig(path, format="png")
    return path

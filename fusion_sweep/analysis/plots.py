"""Report figures, drawn with matplotlib's object API on an Agg canvas.

No pyplot and no `matplotlib.use`: importing this module changes no global backend of the
caller's process, and no display is needed (e.g. on a cluster head).

Each function takes comparison records (see :mod:`fusion_sweep.analysis.records`) and writes
one figure as SVG, PDF and a 300-dpi PNG (`write_formats`). A fusion has one colour in every
figure (`arm_colors`, the UI's colours by the registry order the sweep logged); a seed is a
marker shape or a grey line, never a colour; reference lines (0, chance) are grey and dashed.
"""
from __future__ import annotations

import math
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

import numpy as np
from matplotlib import rc_context
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.text import Text
from matplotlib.ticker import FuncFormatter, MaxNLocator

from fusion_sweep.schema import fusion_color, metric_label

from fusion_sweep.analysis import caveats
from fusion_sweep.analysis.claims import RATIO, SUPERIORITY, WIN_RATE_KIND
from fusion_sweep.analysis.records import Comparison
from fusion_sweep.analysis.schema import DATASET, SEED, SUPPORT_COLORS, VALUE, VERDICT_COLORS
from fusion_sweep.analysis.estimands import WIN_RATE
from fusion_sweep.analysis.sequential_report import key_label
from fusion_sweep.analysis.variants import Axis, Variant

if TYPE_CHECKING:
    import pandas as pd

    from fusion_sweep.analysis.claims import ClaimTest
    from fusion_sweep.analysis.sequential import SequentialResult

_VERDICT_COLOR = VERDICT_COLORS


def _arm(c: Comparison, axis: Axis | None) -> str:
    """A comparison's arm in the axis's short label (the fusion by default)."""
    return axis.short(Variant(c.encoder, c.pe, c.fusion)) if axis else c.fusion


def slug(*parts: str) -> str:
    """A filename-safe, URL-safe name (the HTML references PNGs by relative path)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", "_".join(parts)).strip("-")


def paired_delta_plot(comps: list[Comparison], title: str, margin: float | None, path: Path,
                      axis: Axis | None = None, colors: Mapping[str, str] | None = None) -> Path:
    """Per-seed deltas (arm - reference) for one (dataset, group, metric).

    One column per comparison, its dots in the arm's colour (`colors`: arm -> colour, the
    same in every figure); each seed keeps its marker shape across columns and is joined
    by a faint grey line, so a seed that helps every fusion is visible as a high track. The
    black bar is the mean delta with its 95% paired-t interval (the report's one interval).
    """
    seeds = sorted({s for c in comps for s in c.seeds})
    colors = colors or arm_colors([_arm(c, axis) for c in comps])
    flagged = any(c.verdict_flags for c in comps)  # wrapped under the ticks: wider columns
    fig, ax = _subplots(figsize=(1.6 + (2.1 if flagged else 1.5) * max(1, len(comps)), 3.6))
    _zero_and_margin(ax, margin, horizontal=True)
    for s in seeds:
        xs = [i for i, c in enumerate(comps) if s in c.seeds]
        ys = [c.deltas[c.seeds.index(s)] for c in comps if s in c.seeds]
        ax.plot(np.array(xs) - 0.12, ys, "-", color=PAIR_COLOR, alpha=0.5, lw=0.8, zorder=1)
        for x, y in zip(xs, ys):
            arm = _arm(comps[x], axis)
            ax.scatter([x - 0.12], [y], s=30, zorder=3, marker=seed_marker(s, seeds),
                       color=colors.get(arm, NEUTRAL), edgecolor="white", linewidth=0.4,
                       gid=fusion_gid(arm, "seed", str(s), str(x)))
    for i, c in enumerate(comps):
        _mean_with_interval(ax, i + 0.12, c)
    ax.set_xticks(range(len(comps)))
    ax.set_xticklabels([f"{_arm(c, axis)}\nvs {c.baseline}\n"
                        + _wrap_label(verdict_words(c), 22) for c in comps],
                       fontsize=8 if axis is None or axis.is_fusion else 6)
    for tick, c in zip(ax.get_xticklabels(), comps):
        tick.set_color(_VERDICT_COLOR.get(c.verdict, "black"))
    ax.set_xlim(-0.6, len(comps) - 0.4)
    ax.set_ylabel(f"Δ {metric_label(comps[0].metric) if comps else ''}\n"
                  "(arm − reference, per seed)", fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.legend(handles=_delta_legend(seeds, margin), fontsize=7, loc="center left",
              bbox_to_anchor=(1.0, 0.5), frameon=False, title="one mark per seed",
              title_fontsize=7)
    return _save(fig, path)


def _mean_with_interval(ax: Axes, x: float, c: Comparison) -> None:
    """The mean Δ (black square) with its paired-t interval (the report's one interval
    convention: 1 − α, beside the Holm p that decides), when it has one."""
    if _finite(c.t_ci_low):
        ax.errorbar(x, c.mean_delta, yerr=[[c.mean_delta - c.t_ci_low],
                    [c.t_ci_high - c.mean_delta]], fmt="s", color="black",
                    ms=5, capsize=3, zorder=4)
    elif c.n:
        ax.plot(x, c.mean_delta, "s", color="black", ms=5)


def _delta_legend(seeds: list[int], margin: float | None) -> list:
    """Seed marks (grey: a seed is a shape, never a colour), the mean, 0 and the margin."""
    handles = [Line2D([], [], color=NEUTRAL, marker=seed_marker(s, seeds), ls="", ms=5,
                      label=f"seed {s}") for s in seeds]
    handles += [Line2D([], [], color="black", marker="s", ms=5, lw=1.5,
                       label="mean Δ, 95%\nt-interval"),
                Line2D([], [], color=NEUTRAL, ls="--", lw=0.8, label="Δ = 0 (no effect)")]
    if margin:
        handles.append(Patch(color=MARGIN_COLOR, alpha=MARGIN_ALPHA,
                             label=f"±{margin:g} equivalence\nmargin"))
    return handles


# A seed's mark: its marker shape (by its place among the figure's seeds); past the last
# shape every seed is a plain dot (the grey pair lines still join a seed's marks).
SEED_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
# Neutral ink: reference lines (Δ = 0, chance), seed marks in legends; never a fusion colour.
NEUTRAL, PAIR_COLOR = "#6e7781", "#afb8c1"


def seed_marker(seed: int, seeds: Sequence[int]) -> str:
    """The marker shape of a seed among the figure's sorted seeds."""
    return SEED_MARKERS[seeds.index(seed)] if len(seeds) <= len(SEED_MARKERS) else "o"


def fusion_gid(arm: str, *where: str) -> str:
    """The gid (an id in the SVG) of an artist drawn in an arm's colour:
    'fusion__<arm>__<where>', so a check can read each arm's colour from every figure."""
    return "__".join(["fusion", slug(arm), slug(*where)])


def arm_colors(arms: Sequence[str], order: Sequence[str] = ()) -> dict[str, str]:
    """One colour per arm: an arm named in `order` (the FUSIONS registry's order, the sweep's
    `known_fusions` tag) gets the registry's colour (`schema.fusion_color`, as in the UI);
    the others follow, by name."""
    known = list(dict.fromkeys(order))
    extra = sorted(set(arms) - set(known))
    place = {a: i for i, a in enumerate(known + extra)}
    return {a: fusion_color(place[a]) for a in dict.fromkeys(arms)}


def forest_plot(comps: list[Comparison], title: str, margin: float | None, path: Path,
                axis: Axis | None = None, alpha: float = 0.05,
                colors: Mapping[str, str] | None = None) -> Path:
    """Mean Δ with its (1 - alpha) paired-t interval (in the arm's colour) per (comparison,
    regime): the report's one interval convention. The verdict is decided by the Holm p,
    written beside it: right of each row, the verdict in words with its Holm p and every
    caveat the verdict carries (`verdict_flags`).

    Rows are grouped by fusion, datasets in regime order within a group (short -> long
    when lengths are known, else by name), so an effect that differs across datasets
    reads as a drift down each group.
    """
    rows = list(reversed(comps))  # first comparison at the top
    colors = colors or arm_colors([_arm(c, axis) for c in comps])
    words = max((len(verdict_words(c)) for c in rows), default=0)  # the right-hand column
    fig, ax = _subplots(figsize=(max(8.0, 6.0 + 0.055 * words), 1.6 + 0.32 * max(1, len(rows))))
    _zero_and_margin(ax, margin, horizontal=False)
    for y, c in enumerate(rows):
        arm = _arm(c, axis)
        col = colors.get(arm, "black")
        if _finite(c.t_ci_low):
            ax.plot([c.t_ci_low, c.t_ci_high], [y, y], color=col, lw=2.5,
                    gid=fusion_gid(arm, "interval", str(y)))
        if _finite(c.mean_delta):
            ax.plot(c.mean_delta, y, "o", color=col, ms=5, gid=fusion_gid(arm, "mean", str(y)))
        ax.annotate(verdict_words(c), (1.01, y), xycoords=ax.get_yaxis_transform(),
                    va="center", fontsize=7, color=_VERDICT_COLOR.get(c.verdict, "black"),
                    gid=f"verdict-{len(rows) - 1 - y}")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{_arm(c, axis)} vs {c.baseline}, {c.regime}" for c in rows],
                       fontsize=7)
    ax.set_xlabel(f"Δ {metric_label(comps[0].metric) if comps else ''} (arm − reference)",
                  fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    handles = _forest_legend(margin, alpha)
    fig.legend(handles=handles, fontsize=7, loc="lower center", ncol=2, frameon=False)
    bottom = 0.04 + 0.035 * ((len(handles) + 1) // 2)  # room for the legend below
    return _save(fig, path, layout=lambda: fig.tight_layout(rect=(0, bottom, 1, 1)))


def verdict_words(c: Comparison) -> str:
    """A row's verdict with the Holm p that decides it and its caveats:
    'better (Holm p 0.0013)', 'inconclusive (Holm p 0.0157; no 'better': ...)'."""
    notes = ([f"Holm p {c.p_holm:.2g}"] if _finite(c.p_holm) else []) + \
        [caveats.figure(f) for f in c.verdict_flags]
    return c.verdict + (f" ({'; '.join(notes)})" if notes else "")


def _forest_legend(margin: float | None, alpha: float) -> list:
    level = f"{100 * (1 - alpha):.0f}%"
    handles = [Line2D([], [], color=NEUTRAL, marker="o", ms=5, lw=2.5,
                      label=f"mean Δ and its {level} paired-t interval (colour: the arm); "
                            "the verdict: Holm p < α"),
               Line2D([], [], color=NEUTRAL, ls="--", lw=0.8, label="Δ = 0 (no effect)")]
    if margin:
        handles.append(Patch(color=MARGIN_COLOR, alpha=MARGIN_ALPHA,
                             label=f"±{margin:g} equivalence margin (TOST)"))
    return handles


# The arm columns of arms_by_regime_plot's `values` (beside DATASET, SEED, VALUE): the arm's
# short label, and the group of arms it is plotted with (the caller's Axis.group).
ARM, GROUP = "arm", "group"


@dataclass(frozen=True)
class ArmsFigure:
    """What arms_by_regime_plot draws besides the values. regimes: (dataset, label) short ->
    long; chance: dataset -> chance level (absent: none drawn); arms: plotting order (the
    reference first); pairs: dataset -> the (arm, reference) pairs its comparisons test;
    colors: arm -> colour."""

    regimes: list[tuple[str, str]]
    chance: Mapping[str, float]
    arms: list[str]
    pairs: Mapping[str, list[tuple[str, str]]]
    colors: Mapping[str, str]
    reference: str | None = None


def arms_by_regime_plot(values: "pd.DataFrame", spec: ArmsFigure, metric: str, title: str,
                        path: Path) -> Path:
    """The paper-style figure: each arm's metric per regime (x, short -> long), every seed a
    dot in the arm's colour, each comparison's pairs joined (a grey line from the reference's
    seed to the arm's same seed, one per comparison, so every pairing is drawn), the arm's
    mean a bar, and chance (the majority rate, 1/K when none) a grey dashed line.

    values: one row per usable cell with columns dataset, arm, seed, value.
    """
    k = max(1, len(spec.arms))
    offset = {a: (i - (k - 1) / 2) * 0.7 / k for i, a in enumerate(spec.arms)}
    fig, ax = _subplots(figsize=(2.0 + 2.2 * max(1, len(spec.regimes)), 4.4))
    for xi, (dataset, _) in enumerate(spec.regimes):
        sub = values[values[DATASET] == dataset]
        x = {a: xi + offset[a] for a in spec.arms}
        _draw_pairs(ax, sub, x, spec.pairs.get(dataset, []), dataset)
        for a in spec.arms:
            v = sub[sub[ARM] == a]
            if not v.empty:
                col, half = spec.colors.get(a, NEUTRAL), 0.25 * 0.7 / k
                ax.scatter(np.full(len(v), x[a]), v[VALUE], color=col, s=16, zorder=3,
                           edgecolor="white", linewidth=0.4, gid=fusion_gid(a, "seeds", dataset))
                ax.plot([x[a] - half, x[a] + half], [v[VALUE].mean()] * 2, color=col,
                        lw=2.2, zorder=2, gid=fusion_gid(a, "mean", dataset))
        level = spec.chance.get(dataset)
        if level is not None and _finite(level):
            ax.plot([xi - 0.4, xi + 0.4], [level] * 2, color=NEUTRAL, ls="--", lw=1.1,
                    zorder=0)
            ax.annotate("chance", (xi + 0.4, level), xytext=(2, 0), textcoords="offset points",
                        va="center", fontsize=6.5, color=NEUTRAL)
    ax.set_xticks(range(len(spec.regimes)))
    ax.set_xticklabels([_wrap_label(label, 22) for _, label in spec.regimes], fontsize=8)
    ax.set_xlim(-0.6, len(spec.regimes) - 0.4)
    ax.set_ylabel(metric_label(metric), fontsize=9)
    ax.set_xlabel("length regime", fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.legend(handles=_arms_legend(spec), fontsize=7, loc="center left",
              bbox_to_anchor=(1.0, 0.5), frameon=False, title="dot = one seed",
              title_fontsize=7)
    return _save(fig, path)


def _draw_pairs(ax: Axes, sub: "pd.DataFrame", x: Mapping[str, float],
                pairs: list[tuple[str, str]], dataset: str) -> None:
    """One grey line per (comparison, seed): the reference's value to the arm's. Each line's
    gid names its pair (`pair-<dataset>-<arm>-<reference>-<seed>`, an id in the SVG)."""
    by = sub.set_index([ARM, SEED])[VALUE]
    for arm, ref in pairs:
        for seed in sorted(set(sub[SEED])):
            if (arm, seed) in by.index and (ref, seed) in by.index:
                ax.plot([x[ref], x[arm]], [by[(ref, seed)], by[(arm, seed)]], "-",
                        color=PAIR_COLOR, lw=0.7, alpha=0.8, zorder=1,
                        gid=pair_id(dataset, arm, ref, seed))


def pair_id(dataset: str, arm: str, reference: str, seed: int) -> str:
    """The gid (SVG id) of one drawn pairing."""
    return slug("pair", dataset, arm, reference, str(seed))


def _arms_legend(spec: ArmsFigure) -> list:
    handles = [Line2D([], [], color=spec.colors.get(a, NEUTRAL), marker="o", lw=2.2, ms=5,
                      label=f"{a}{' (reference)' if a == spec.reference else ''}")
               for a in spec.arms]
    handles += [Line2D([], [], color=PAIR_COLOR, lw=0.7,
                       label="one seed, arm and its\nreference (a pair)"),
                Line2D([], [], color="#444", lw=2.2, label="bar: mean over seeds")]
    if spec.chance:
        handles.append(Line2D([], [], color=NEUTRAL, ls="--", lw=1.1,
                              label="chance (test-set\nmajority rate)"))
    return handles


# A claim test's estimand -> the figure it is drawn in (claims_plot's kind): each figure has
# one scale and one no-effect line.
CLAIM_PLOT_KIND = {RATIO: "ratio", WIN_RATE_KIND: "probability", SUPERIORITY: "probability"}


def claims_plot(tests: Sequence[ClaimTest], kind: str, path: Path) -> bool:
    """Claim tests' estimates with their intervals, colour = what they say about the paper.

    kind "difference": every test in metric units (mean Δ, Δ of Δ, a win-rate difference;
    one-sided intervals run to the edge); "ratio": the cost ratios on a log axis, 1 = no
    effect; "probability": win rates and P(Δ longer > Δ shorter), 1/2 = no effect. Returns
    False (nothing drawn) when no test of that kind has an estimate.
    """
    ratio = kind == "ratio"
    rows = [t for t in tests if CLAIM_PLOT_KIND.get(t.estimate_kind, "difference") == kind
            and t.estimate is not None and np.isfinite(t.estimate)]
    if not rows:
        return False
    rows = list(reversed(rows))
    fig, ax = _subplots(figsize=(8.5, 0.9 + 0.3 * len(rows)))
    ax.axvline(1.0 if ratio else 0.5 if kind == "probability" else 0.0, color="#444", lw=0.8,
               ls="--")
    finite = [v for t in rows for v in (t.ci_low, t.ci_high, t.estimate)
              if v is not None and np.isfinite(v)]
    edge = max(finite) + 0.1 * (max(finite) - min(finite) + 1e-9)
    for y, t in enumerate(rows):
        col = SUPPORT_COLORS.get(t.support, "black")
        low, high = t.ci_low, t.ci_high
        if low is not None and np.isfinite(low):
            hi = high if high is not None and np.isfinite(high) else edge  # one-sided: to edge
            ax.plot([low, hi], [y, y], color=col, lw=2.5)
        ax.plot(t.estimate, y, "o", color=col, ms=5)
    if ratio:
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([t.test for t in rows], fontsize=7)
    ax.set_xlabel({"ratio": "ratio arm / reference (log scale; < 1 is cheaper)",
                   "probability": "win rate, or P(Δ longer > Δ shorter) (1/2: no effect)"}.get(
                       kind, "Δ (metric units; one-sided intervals run to the edge)"), fontsize=8)
    ax.set_title("Claim tests · green supports the paper, red contradicts, grey does not "
                 "decide", fontsize=8)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    _save(fig, path)
    return True


def _finite(v: object) -> bool:
    return v is not None and bool(np.isfinite(v))


def _wrap_label(text: str, width: int) -> str:
    return "\n".join(textwrap.wrap(text, width, break_on_hyphens=False)) or text


def _subplots(figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    fig = Figure(figsize=figsize, dpi=PNG_DPI)  # laid out at the PNG's resolution
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def _zero_and_margin(ax: Axes, margin: float | None, horizontal: bool) -> None:
    """The no-effect line, and the ±margin equivalence band when a margin is given."""
    line, band = (ax.axhline, ax.axhspan) if horizontal else (ax.axvline, ax.axvspan)
    line(0.0, color=NEUTRAL, lw=0.8, ls="--")
    if margin:
        band(-margin, margin, color=MARGIN_COLOR, alpha=MARGIN_ALPHA, lw=0)


MARGIN_COLOR, MARGIN_ALPHA = "#0969da", 0.08


def fit_titles(fig: Figure) -> bool:
    """Wrap every axes title that sticks out of the figure onto more lines, until it fits
    inside the figure's width; True when any title changed."""
    renderer = fig.canvas.get_renderer()
    box, changed = fig.bbox, False
    for ax in fig.axes:
        title = ax.title
        text = " ".join(title.get_text().split())
        width = len(text)

        def out() -> bool:
            e = title.get_window_extent(renderer)
            return e.x0 < box.x0 + 2 or e.x1 > box.x1 - 2

        while text and width > 20 and out():
            width = int(width * 0.85)
            title.set_text("\n".join(textwrap.wrap(text, width, break_on_hyphens=False)))
            changed = True
    return changed


def text_outside(fig: Figure, tolerance: float = 1.0) -> list[str]:
    """The visible texts (titles, labels, ticks, legends) that do not lie wholly inside the
    figure, i.e. that the saved PNG would clip; [] when everything fits."""
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    hidden = {id(t) for ax in fig.axes for t in _undrawn_tick_labels(ax)}
    out = []
    for t in fig.findobj(Text):
        if not t.get_visible() or not t.get_text().strip() or id(t) in hidden:
            continue
        e = t.get_window_extent(renderer)
        if (e.x0 < box.x0 - tolerance or e.y0 < box.y0 - tolerance
                or e.x1 > box.x1 + tolerance or e.y1 > box.y1 + tolerance):
            out.append(t.get_text())
    return out


def _undrawn_tick_labels(ax: Axes) -> list[Text]:
    """Tick labels whose tick lies outside the view limits (matplotlib keeps but never
    draws them)."""
    out = []
    for axis in (ax.xaxis, ax.yaxis):
        low, high = sorted(axis.get_view_interval())
        for major in (True, False):
            locs = axis.get_majorticklocs() if major else axis.get_minorticklocs()
            labels = axis.get_majorticklabels() if major else axis.get_minorticklabels()
            out += [t for x, t in zip(locs, labels) if not low - 1e-9 <= x <= high + 1e-9]
    return out


def _save(fig: Figure, path: Path, layout: bool | Callable[[], None] = True) -> Path:
    """Lay out (tight_layout, the caller's layout function, or none: False), wrap titles that
    stick out and lay out again, widen the figure for anything still outside (a legend
    beside the axes), then write every FIGURE_FORMATS file beside `path` (its suffix
    replaced): nothing clipped. Returns `path`."""
    path = Path(path)
    relayout = layout if callable(layout) else fig.tight_layout if layout else (lambda: None)
    relayout()
    for _ in range(3):
        if not fit_titles(fig):
            break
        relayout()
    _widen_to_fit(fig)
    write_formats(fig, path)
    return path


# Every figure is written as SVG and PDF (vector: a paper's figure) and a PNG at PNG_DPI.
FIGURE_FORMATS, PNG_DPI = ("svg", "pdf", "png"), 300
# Text stays text (svg.fonttype none: selectable, searchable and editable in SVG; pdf
# fonttype 42: TrueType fonts a journal accepts, not Type 3); svg.hashsalt and no date make
# the files reproducible.
_SAVE_RC = {"svg.fonttype": "none", "pdf.fonttype": 42, "svg.hashsalt": "fusion-sweep",
            # so that write_formats' set_layout_engine(None) leaves no engine at all
            "figure.autolayout": False, "figure.constrained_layout.use": False}
_NO_DATE = {"svg": {"Date": None}, "pdf": {"CreationDate": None}, "png": {}}


def write_formats(fig: Figure, path: Path) -> list[Path]:
    """Save `fig` as path.svg, path.pdf and a 300-dpi path.png; return the paths. The PNG is
    drawn last, at the figure's own dpi (PNG_DPI), so the figure's artists keep the
    positions of that resolution (what text_outside and the layout helpers measure)."""
    out = []
    with rc_context(_SAVE_RC):  # restored on exit: the caller's rcParams are untouched
        # The layout is final here. tight_layout leaves a placeholder layout engine on the
        # figure, and savefig draws a figure that has any engine once more before drawing it
        # for real (for the engine to lay it out), so dropping it makes each format one draw
        # instead of two, with the same files.
        fig.set_layout_engine(None)
        for fmt in FIGURE_FORMATS:  # png last
            target = Path(path).with_suffix("." + fmt)
            fig.savefig(target, format=fmt, dpi="figure", metadata=_NO_DATE[fmt])
            out.append(target)
    return out


def _widen_to_fit(fig: Figure) -> None:
    """Grow the figure's width until every artist lies inside it, keeping each axes' size
    and place in inches (a legend beside the axes that the layout left hanging out)."""
    for _ in range(3):
        tight = fig.get_tightbbox(fig.canvas.get_renderer())  # inches
        w, h = fig.get_size_inches()
        left, right = max(0.0, -tight.x0), max(0.0, tight.x1 - w)
        if left + right <= 0.01:
            return
        new_w, shift = w + left + right + 0.1, left + 0.05
        boxes = [(ax, ax.get_position()) for ax in fig.axes]
        fig.set_size_inches(new_w, h)
        for ax, pos in boxes:
            ax.set_position([(pos.x0 * w + shift) / new_w, pos.y0, pos.width * w / new_w,
                             pos.height])


# ------------------------------------------------------ adaptive seeds: confidence sequences
def cs_plot(results: Sequence[SequentialResult], path: str | Path, title: str = "") -> Path:
    """One panel per comparison: its confidence sequence against seeds.

    Shaded: the running-intersection CS (what decides); thin lines: the CS at each n
    alone; black: the running mean Δ; dashed: 0; blue band: ±margin. The panel title is
    coloured by the decision. Unbounded CS ends are drawn to the panel's edge.
    """
    cols = min(3, max(1, len(results)))
    rows = max(1, math.ceil(len(results) / cols))
    fig = Figure(figsize=(3.6 * cols, 3.0 * rows + (0.35 if title else 0)), dpi=PNG_DPI)
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
    write_formats(fig, path)
    return path


def _cs_panel(ax, r: SequentialResult) -> None:
    color = VERDICT_COLORS.get(r.decision, "black")
    ax.axhline(r.null_value, color="#444", lw=0.8, ls="--")  # 0 (mean Δ) or 1/2 (win rate)
    if r.margin is not None and r.estimand != WIN_RATE:  # the margin is in metric units
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
    ax.set_title(f"{key_label(r.family)}: {r.decision_label} (n = {r.n})\n{comparison}",
                 fontsize=7, color=color)
    ax.set_xlabel("seeds", fontsize=7)
    ax.set_ylabel(f"{r.estimand} (estimate, CS)", fontsize=7)
    ax.tick_params(labelsize=7)


def _ylim(r: SequentialResult) -> tuple[float, float]:
    """A y-range around what decided: the mean path, the final CS, 0 and the margin. The
    early, wide CS ends are clipped to it (they carry no decision)."""
    if r.estimand == WIN_RATE:  # a share: its whole range, so 1/2 sits mid-panel
        return -0.03, 1.03
    p = r.path
    core = [r.null_value, *p.mean[np.isfinite(p.mean)],
            *(v for v in (p.low[-1], p.high[-1]) if np.isfinite(v))]
    if r.margin is not None and r.estimand != WIN_RATE:
        core += [-r.margin, r.margin]
    lo, hi = min(core), max(core)
    pad = 0.6 * (hi - lo) or 0.05
    return lo - pad, hi + pad

"""The verdict grid: the answer at a glance, the first thing every report format shows.

Rows are the comparisons (arm vs reference within a group, per metric), columns the
regimes short -> long (by median length; by name when lengths are unknown), each cell one
comparison: Δ, its paired-t interval at the one fixed level 1 - alpha, the Holm p that
decides the verdict (better/worse iff p_holm < alpha), n and the verdict, then each added
estimand's verdict (fusion_sweep.analysis.fixed). `verdict_grid` is the JSON form (schema.VERDICT_GRID_KEYS); `grid_rows` the
layout the terminal, Markdown and HTML renderers share.

Pure functions over the report's comparison dicts; imports neither the report nor any
renderer.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from fusion_sweep.analysis.records import Comparison
from fusion_sweep.analysis.schema import VERDICT_GRID_KEYS
from fusion_sweep.analysis.variants import Axis, Variant


def verdict_grid(comps: list[Comparison], alpha: float) -> list[dict]:
    """One VERDICT_GRID_KEYS cell per comparison, in report order (metric, regime short ->
    long, group); the interval is the comparison's t_ci_* (level 1 - alpha, every cell)."""
    out = [{"dataset": c.dataset, "arm": c.variant, "reference": c.baseline_variant,
            "delta": c.mean_delta, "ci_low": c.t_ci_low,
            "ci_high": c.t_ci_high, "ci_level": 1 - alpha, "n": c.n,
            "verdict": c.verdict, "metric": c.metric, "regime": c.regime,
            "arm_learned": c.learned, "reference_learned": c.baseline_learned,
            "estimand": c.estimand, "win_verdict": c.win_verdict, "p_holm": c.p_holm,
            **{f"{e.key}_verdict": e.verdict for e in c.estimates}}
           for c in comps]
    assert all(tuple(cell)[:len(VERDICT_GRID_KEYS)] == VERDICT_GRID_KEYS for cell in out)
    return out


@dataclass
class GridRow:
    """One row of the grid: a comparison across regimes; cells[dataset] is a comparison."""

    metric: str
    label: str  # "concat vs add, pe=sinusoidal"
    cells: dict[str, Comparison] = field(default_factory=dict)


def grid_rows(comps: list[Comparison], axis: Axis) -> list[GridRow]:
    """Rows in the order each comparison first appears (metric, group, arm as reported)."""
    rows: dict[tuple, GridRow] = {}
    for c in comps:
        arm = Variant(c.encoder, c.pe, c.fusion)
        key = (c.metric, c.group, c.variant, c.baseline_variant)
        if key not in rows:
            group = axis.title(axis.group(arm)).replace(" · ", ", ")
            label = f"{axis.short(arm)} vs {c.baseline}" + (f", {group}" if group else "")
            rows[key] = GridRow(c.metric, label)
        rows[key].cells[c.dataset] = c
    return list(rows.values())


def not_learned_mark(c: Comparison) -> str:
    """'' when both arms beat chance (or chance does not apply), else which did not."""
    arm, ref = c.learned == "no", c.baseline_learned == "no"
    if arm and ref:
        return "neither arm learned"
    return "arm not learned" if arm else "reference not learned" if ref else ""


def unlearned(c: Comparison) -> tuple[str, str] | None:
    """(which side, its learned? state) of the arm that withholds a comparison's verdict, in
    the order the verdict rule checks them (the arm first, then the reference: 'arm' or
    'reference', 'no' or 'unknown'); None when both beat chance or chance does not apply."""
    for side, state in (("arm", c.learned), ("reference", c.baseline_learned)):
        if state in ("no", "unknown"):
            return side, state
    return None

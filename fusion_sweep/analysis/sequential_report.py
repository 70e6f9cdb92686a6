"""Reporting of adaptive-seed (sequential) decisions as tables.

Pure functions over :class:`fusion_sweep.analysis.sequential.SequentialResult` objects; no MLflow,
no matplotlib (the terminal report imports this module; the confidence-sequence figure is
:func:`fusion_sweep.analysis.plots.cs_plot`, and the HTML/Markdown blocks are built in
:mod:`fusion_sweep.analysis.render`). The table is an :class:`fusion_sweep.analysis.tables.Table`
(format-neutral: terminal, Markdown and HTML lay it out).
"""
from __future__ import annotations

import math
from typing import Sequence

from fusion_sweep.analysis.schema import DESCRIPTIVE_LABEL
from fusion_sweep.analysis.sequential import NormalMixture, SequentialResult
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
             fp(r.p_bonferroni), r.decision_label] for r in results]


def sequential_table(results: Sequence[SequentialResult], title: str | None = None) -> Table:
    """The decisions table with footnotes stating the level, the method and the rule."""
    footnotes = []
    if results:
        r = results[0]
        margin = f"±{r.margin:g}" if r.margin is not None else "none (never equivalent)"
        how = (f"normal mixture, unknown variance; phi = {_phi(results)}"
               if r.method == NormalMixture.name else
               "betting, hedged capital with predictable plug-in bets, Δ in [-1, 1]")
        footnotes = [
            f"Anytime-valid confidence sequences ({how}), each at 1 - alpha/m = "
            f"{1 - r.alpha_each:.4g} (Bonferroni over m = {r.m} comparisons fixed at launch, "
            f"family-wise alpha = {r.alpha:g}), running intersection over seeds; valid at any "
            f"stopping time. Every decision here: {r.assumption}.",
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


def _fci_inf(low: float, high: float, digits: int) -> str:
    if math.isfinite(low) and math.isfinite(high):
        return fci(low, high, digits)
    return f"[{_end(low, digits)}, {_end(high, digits)}]"


def _end(v: float, digits: int) -> str:
    return f"{v:+.{digits}f}" if math.isfinite(v) else ("-inf" if v < 0 else "+inf")


def _phi(results: Sequence[SequentialResult]) -> str:
    phis = {r.path.phi for r in results if r.path is not None and r.path.phi is not None}
    return ", ".join(f"{p:g}" for p in sorted(phis)) or "—"

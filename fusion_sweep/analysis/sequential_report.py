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
from fusion_sweep.analysis.sequential import (
    WIN_RATE, Betting, NormalMixture, SequentialResult, WinRate, get_method,
)
from fusion_sweep.analysis.tables import Table, fci, fnum, fp

# "estimand" names what each decision is about (win rate or mean Δ); "estimate" is that
# estimand's value, with its CS beside it; "mean Δ" is always the mean paired difference.
SEQUENTIAL_HEADERS = ["family", "comparison", "seeds", "estimand", "estimate", "mean Δ",
                      "W/L/T", "CS (running)", "p anytime (×m)", "decision"]

# How each method's CS is built, for the footnote (one line per registry entry).
METHOD_NOTES = {
    WinRate.name: "beta-binomial mixture on the sign of each Δ (ties skipped), Beta(1, 1) "
                  "prior, exact for any distribution of Δ",
    Betting.name: "betting, hedged capital with predictable plug-in bets, Δ in [-1, 1]",
    NormalMixture.name: "normal mixture, unknown variance",
}


def key_label(key: object) -> str:
    """An opaque family/comparison key as text: tuples joined with ' · '."""
    if isinstance(key, tuple):
        return " · ".join(str(k) for k in key)
    return str(key)


def sequential_rows(results: Sequence[SequentialResult], digits: int = 4) -> list[list[str]]:
    """One row of strings per comparison, in SEQUENTIAL_HEADERS order. An unbounded CS end
    is shown as -inf/+inf (too few seeds for alpha/m so far)."""
    return [[key_label(r.family), key_label(r.comparison), str(r.n), r.estimand,
             _estimate(r, digits), fnum(r.mean_delta, digits, signed=True),
             f"{r.wins}/{r.losses}/{r.ties}", _cs_text(r, digits),
             fp(r.p_bonferroni), r.decision_label] for r in results]


def _estimate(r: SequentialResult, digits: int) -> str:
    if r.estimand == WIN_RATE:
        return fnum(r.estimate, digits)
    return fnum(r.estimate, digits, signed=True)


def estimand_rule(method: str, margin: float | None) -> str:
    """What better/worse/equivalent mean under `method` (a SEQUENTIAL_METHODS name)."""
    how = get_method(method)
    if how.estimand == WIN_RATE:
        return ("Estimand: the win rate P(Δ > 0 | Δ ≠ 0), the share of the non-tied seeds "
                "on which the arm beats its reference. better/worse: its CS excludes 1/2 (the "
                "arm wins on more / fewer seeds than it loses; says nothing about how much). "
                "equivalent is never decided by the win rate (it has no margin in metric "
                "units): for equivalence launch with --sequential-method betting and an "
                "equivalence margin; inconclusive: undecided when the seed budget ran out.")
    shown = f"±{margin:g}" if margin is not None else "none (never equivalent)"
    return (f"Estimand: the mean paired Δ. better/worse: its CS excludes 0; equivalent: the "
            f"whole CS lies inside the margin ({shown}); inconclusive: undecided when the "
            "seed budget ran out.")


def sequential_table(results: Sequence[SequentialResult], title: str | None = None) -> Table:
    """The decisions table with footnotes stating the estimand, level, method and rule."""
    footnotes = []
    if results:
        r = results[0]
        how = METHOD_NOTES.get(r.method, r.method)
        if r.method == NormalMixture.name:
            how += f"; phi = {_phi(results)}"
        footnotes = [
            f"Anytime-valid confidence sequences of the {r.estimand} ({how}), each at "
            f"1 - alpha/m = {1 - r.alpha_each:.4g} (Bonferroni over m = {r.m} comparisons "
            f"fixed at launch, family-wise alpha = {r.alpha:g}), running intersection over "
            f"seeds; valid at any stopping time. Every decision here: {r.assumption}.",
            estimand_rule(r.method, r.margin),
            "W/L/T: seeds the arm won / lost / tied against its reference.",
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


def _cs_text(r: SequentialResult, digits: int) -> str:
    """The running CS: a win rate is a share in [0, 1] (no sign), a mean Δ is signed."""
    if r.estimand == WIN_RATE:
        return f"[{r.cs_low:.{digits}f}, {r.cs_high:.{digits}f}]"
    return _fci_inf(r.cs_low, r.cs_high, digits)


def _fci_inf(low: float, high: float, digits: int) -> str:
    if math.isfinite(low) and math.isfinite(high):
        return fci(low, high, digits)
    return f"[{_end(low, digits)}, {_end(high, digits)}]"


def _end(v: float, digits: int) -> str:
    return f"{v:+.{digits}f}" if math.isfinite(v) else ("-inf" if v < 0 else "+inf")


def _phi(results: Sequence[SequentialResult]) -> str:
    phis = {r.path.phi for r in results if r.path is not None and r.path.phi is not None}
    return ", ".join(f"{p:g}" for p in sorted(phis)) or "—"

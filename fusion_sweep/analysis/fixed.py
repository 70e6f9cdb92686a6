"""The fixed-n estimands: name -> entry, as the sequential methods are (sequential.py).

Each entry names its estimand (the words live in :mod:`fusion_sweep.analysis.estimands`) and
provides what the report does with it: `measure` (its test and interval on one comparison's
paired deltas, a frozen dataclass whose fields are its JSON fields), `p` (the p that Holm
adjusts over the report's family, of the same m as the mean Δ's), `decide` (its verdict rule
on the Holm-adjusted p, before the one guard rule, fusion_sweep.analysis.guard) and `cell`
(its words in a grid cell).

The first three entries are the report's own, whose JSON fields keep their historical places
in :class:`fusion_sweep.analysis.records.Comparison` (`verdict`, `win_verdict`, the learn
rates) and whose verdicts carry more rules (TOST, the flags: report._judge): the report
measures and decides them through these entries. Every further entry is ADDED: the report
measures, adjusts and decides it with no other code, its fields follow the record's own in the
JSON (`records.Estimate`: its measured fields, then `<key>_p_holm` and `<key>_verdict`), its
verdict follows the win rate's in the grid's JSON cell (`<key>_verdict`) and in every grid
cell's words. Adding an estimand is one entry here plus its test (docs/contributing.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from fusion_sweep.analysis import stats
from fusion_sweep.analysis.estimands import ASSUMES, LEARN_RATE, MEAN_DELTA, WIN_RATE, labelled
from fusion_sweep.analysis.schema import BETTER, INCONCLUSIVE, WORSE
from fusion_sweep.analysis.winrate import SignTest, sign_test


@dataclass(frozen=True)
class Sample:
    """What an entry measures: one comparison's paired values x (arm), y (reference), (n,)
    each, alpha, the TOST margin, the bootstrap count, the comparison's own generator
    (stats.comparison_rng; an ADDED entry draws after the mean Δ's) and the seeds lost to a
    non-finite metric."""

    x: np.ndarray
    y: np.ndarray
    alpha: float
    margin: float | None
    n_resamples: int
    rng: np.random.Generator
    lost: int = 0

    @property
    def deltas(self) -> np.ndarray:
        return stats.paired_deltas(self.x, self.y)


Decide = Callable[[Any, float, float, bool], str]  # (measured, p_holm, alpha, higher) -> word


@dataclass(frozen=True)
class FixedEstimand:
    """One fixed-n estimand. key: the prefix of its JSON fields (ADDED entries). measure, p,
    decide and cell are None where another module decides it (the learn rate, per arm:
    fusion_sweep.analysis.chance; the mean Δ's verdict adds TOST and flags: report._judge)."""

    name: str
    key: str
    measure: Callable[[Sample], Any] | None
    p: Callable[[Any], float] | None
    decide: Decide | None
    cell: Callable[[Any, str], str] | None
    added: bool = True

    @property
    def assumes(self) -> str:
        return ASSUMES[self.name]


def decide_by_side(estimate: Callable[[Any], float], null: float) -> Decide:
    """The rule of a location estimand: better/worse when its Holm p < alpha, by the side of
    `null` its estimate (a function of the measured value) is on; else inconclusive."""
    def decide(m: Any, p_holm: float, alpha: float, higher: bool) -> str:
        if not (np.isfinite(p_holm) and p_holm < alpha):
            return INCONCLUSIVE
        return BETTER if (estimate(m) > null) == higher else WORSE
    return decide


def _paired(x: Sample) -> stats.PairedStats:
    return stats.compare_paired(x.x, x.y, alpha=x.alpha, margin=x.margin,
                                n_resamples=x.n_resamples, rng=x.rng)


def _sign_test(x: Sample) -> SignTest:
    return sign_test(x.deltas, confidence=1 - x.alpha, lost=x.lost)


MEAN = FixedEstimand(MEAN_DELTA, "mean", measure=_paired, p=lambda m: m.t_p, decide=None,
                     cell=lambda m, v: labelled(v, MEAN_DELTA), added=False)
WIN = FixedEstimand(WIN_RATE, "win", measure=_sign_test, p=lambda m: m.p_two_sided,
                    decide=decide_by_side(lambda m: m.win_rate, 0.5),
                    cell=lambda m, v: labelled(v, WIN_RATE), added=False)
LEARN = FixedEstimand(LEARN_RATE, "learn", None, None, None, None, added=False)

FIXED_ESTIMANDS: dict[str, FixedEstimand] = {e.name: e for e in (MEAN, WIN, LEARN)}


def added() -> list[FixedEstimand]:
    """The entries the report measures, adjusts, decides and writes with no code of its own."""
    return [e for e in FIXED_ESTIMANDS.values() if e.added]

"""The registry of fixed-n estimands (issue 40 item 4, fusion_sweep.analysis.fixed): the report's
own estimands are entries, and an added entry alone puts its test, Holm p, verdict (through
the guard), JSON fields and grid cell into every report. The added entry here is the walk of
docs/contributing.md: a bootstrap of the median Δ, on a case where median and mean disagree."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from fusion_sweep.analysis import fixed
from fusion_sweep.analysis.estimands import ASSUMES, MEAN_DELTA, WIN_RATE, labelled
from fusion_sweep.analysis.load import tidy
from fusion_sweep.analysis.records import Comparison
from fusion_sweep.analysis.report import Settings, analyze
from fusion_sweep.analysis.tables import grid_cell

MEDIAN = "median Δ"


@dataclass(frozen=True)
class MedianDelta:
    median_delta: float
    median_ci_low: float
    median_ci_high: float
    median_p: float


def _median(x: fixed.Sample) -> MedianDelta:
    d = x.deltas
    ci = sps.bootstrap((d,), np.median, n_resamples=x.n_resamples, method="percentile",
                       confidence_level=1 - x.alpha, rng=x.rng).confidence_interval
    nonzero = d[d != 0]
    p = sps.binomtest(int((nonzero > 0).sum()), nonzero.size).pvalue  # the median's sign test
    return MedianDelta(float(np.median(d)), float(ci.low), float(ci.high), float(p))


ENTRY = fixed.FixedEstimand(
    MEDIAN, "median", measure=_median, p=lambda m: m.median_p,
    decide=fixed.decide_by_side(lambda m: m.median_delta, 0.0),
    cell=lambda m, v: f"median Δ {m.median_delta:+.3f}: {labelled(v, MEDIAN)}")


def _table() -> pd.DataFrame:
    """mul vs add on 8 seeds: 7 small gains (+0.01) and one collapse (-0.5). The median Δ
    is +0.01 (better by the sign test, 7 of 8), the mean Δ is negative (about -0.054)."""
    deltas = [0.01] * 7 + [-0.5]
    rows = []
    for seed, d in enumerate(deltas):
        base = 0.8 + 0.001 * seed
        rows += [{"dataset": "synthetic-short", "pe": "sinusoidal", "fusion": "add",
                  "seed": seed, "test_acc": base, "num_classes": 2},
                 {"dataset": "synthetic-short", "pe": "sinusoidal", "fusion": "mul",
                  "seed": seed, "test_acc": base + d, "num_classes": 2}]
    return tidy(pd.DataFrame(rows), "test table")


@pytest.fixture
def with_median(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(fixed.FIXED_ESTIMANDS, MEDIAN, ENTRY)
    monkeypatch.setitem(fixed.ASSUMES, MEDIAN, "nothing beyond independent seeds")


def test_the_reports_estimands_are_entries_named_once() -> None:
    assert list(fixed.FIXED_ESTIMANDS) == [MEAN_DELTA, WIN_RATE, "learn rate"]
    assert fixed.added() == []  # the report's own: their fields keep their places
    assert fixed.WIN.assumes == ASSUMES[WIN_RATE]


def test_an_added_entry_alone_reaches_the_verdict_the_json_and_the_grid(with_median) -> None:
    report = analyze(_table(), Settings(rng_seed=0, n_boot=500))
    (c,) = report.comparisons
    assert c.mean_delta < 0 < c.estimates[0].measured.median_delta  # the case's premise
    assert (c.estimates[0].estimand, c.estimates[0].key) == (MEDIAN, "median")
    entry = c.to_json()
    # its fields follow the record's own, in its order, then its Holm p and verdict
    assert list(entry)[:len(Comparison.json_keys())] == list(Comparison.json_keys())
    assert list(entry)[len(Comparison.json_keys()):] == [
        "median_delta", "median_ci_low", "median_ci_high", "median_p", "median_p_holm",
        "median_verdict"]
    assert entry["median_delta"] == pytest.approx(0.01)
    assert entry["median_p"] == pytest.approx(sps.binomtest(7, 8).pvalue)
    assert entry["median_ci_low"] <= 0.01 <= entry["median_ci_high"]
    # m = 1: Holm leaves p alone; 7 of 8 is p = 0.07, so inconclusive at 0.05, better at 0.1
    assert entry["median_p_holm"] == pytest.approx(entry["median_p"])
    assert entry["median_verdict"] == "inconclusive"
    loose = analyze(_table(), Settings(rng_seed=0, n_boot=500, alpha=0.1)).comparisons[0]
    assert loose.verdict != "better" and loose.estimates[0].verdict == "better"
    cell = report.to_dict()["verdict_grid"][0]
    assert list(cell)[-1] == "median_verdict" and cell["median_verdict"] == "inconclusive"
    assert grid_cell(loose)[1].endswith("median Δ +0.010: better (median Δ)")


def test_without_an_added_entry_the_record_has_no_estimates() -> None:
    (c,) = analyze(_table(), Settings(rng_seed=0, n_boot=500)).comparisons
    assert c.estimates == () and "median_delta" not in c.to_json()
    assert math.isfinite(c.mean_delta)

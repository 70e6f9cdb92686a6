"""Pair trials by seed within (dataset, pe), and account for every pair that is dropped.

A *cell* is one (dataset, pe, fusion, seed) slot for one metric. It is usable when it has
exactly one FINISHED run with a finite metric. A pair (fusion vs reference, seed) is used
when both cells are usable and every fingerprint present on both sides agrees; otherwise
it is dropped with one of :data:`analysis.schema.DROP_REASONS` and a human detail.
Mismatched fingerprints are never paired silently.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.schema import FINISHED, FP_COLUMNS


@dataclass(frozen=True)
class Cell:
    """One (dataset, pe, fusion, seed) slot: its value when usable, else why not."""

    value: float = float("nan")
    fps: tuple[tuple[str, str | None], ...] = ()
    reason: str | None = None  # a DROP_REASONS code when unusable
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.reason is None


@dataclass(frozen=True)
class Paired:
    """The paired data of one comparison. seeds, x, y: shape (n,), aligned by seed."""

    dataset: str
    pe: str
    metric: str
    fusion: str
    baseline: str
    seeds: np.ndarray
    x: np.ndarray  # fusion's metric per seed
    y: np.ndarray  # baseline's (reference's) metric per seed


@dataclass
class PairingResult:
    """All comparisons, dropped pairs (dicts with DROPPED_KEYS) and warnings."""

    pairs: list[Paired] = field(default_factory=list)
    dropped: list[dict] = field(default_factory=list)
    warnings: list[dict] = field(default_factory=list)


def make_cell(rows: pd.DataFrame, metric: str) -> Cell:
    """Classify the runs of one slot (rows: 0..k trials of the same key)."""
    if len(rows) == 0:
        return Cell(reason="missing_trial", detail="no trial")
    finished = rows[rows["status"] == FINISHED]
    finite = finished[np.isfinite(finished[metric].to_numpy(dtype=float))]
    if len(finite) > 1:
        return Cell(reason="duplicate_seed",
                    detail=f"{len(finite)} finished runs for the same seed")
    if len(finite) == 1:
        row = finite.iloc[0]
        fps = tuple((c, row[c]) for c in FP_COLUMNS)
        return Cell(value=float(row[metric]), fps=fps)
    if len(finished) < len(rows):
        statuses = sorted(set(rows.loc[rows["status"] != FINISHED, "status"]))
        return Cell(reason="failed_trial", detail=f"status {'/'.join(statuses)}")
    bad = finished[metric].iloc[0]
    return Cell(reason="non_finite_metric", detail=f"{metric} = {bad}")


def cells_for(df: pd.DataFrame, metric: str) -> dict[tuple, Cell]:
    """Map (dataset, pe, fusion, seed) -> Cell for every slot that has at least one row."""
    return {key: make_cell(rows, metric)
            for key, rows in df.groupby(["dataset", "pe", "fusion", "seed"], sort=True)}


def fingerprint_mismatch(a: Cell, b: Cell) -> str:
    """'' when all fingerprints present on both sides agree, else which ones differ."""
    diffs = []
    for (name, va), (_, vb) in zip(a.fps, b.fps):
        if va is not None and vb is not None and va != vb:
            diffs.append(f"{name.removeprefix('fp_')} ({va[:10]} vs {vb[:10]})")
    return "; ".join(diffs)


def comparison_order(fusions: list[str], baseline: str, mode: str) -> list[tuple[str, str]]:
    """(fusion, reference) pairs: vs the baseline, or all pairs (reference listed first).

    fusions: those present; the baseline is listed first, the rest alphabetically.
    """
    order = [baseline] + sorted(f for f in fusions if f != baseline)
    if mode == "baseline":
        return [(f, baseline) for f in order[1:]]
    return [(order[j], order[i]) for i in range(len(order)) for j in range(i + 1, len(order))]


def pair_one(
    cells: dict[tuple, Cell], dataset: str, pe: str, metric: str, fusion: str, ref: str,
    seeds: list[int],
) -> tuple[Paired, list[dict]]:
    """Pair fusion vs ref over `seeds`; return the Paired data and the dropped records."""
    kept, dropped = [], []
    for seed in seeds:
        a = cells.get((dataset, pe, fusion, seed), Cell(reason="missing_trial", detail="no trial"))
        b = cells.get((dataset, pe, ref, seed), Cell(reason="missing_trial", detail="no trial"))
        reason, detail = _pair_problem(a, b, fusion, ref)
        if reason is None:
            kept.append((seed, a.value, b.value))
            continue
        dropped.append({"dataset": dataset, "pe": pe, "metric": metric, "fusion": fusion,
                        "baseline": ref, "seed": int(seed), "reason": reason,
                        "detail": detail})
    arr = np.array(kept, dtype=float).reshape(-1, 3)
    paired = Paired(dataset, pe, metric, fusion, ref, arr[:, 0].astype(int), arr[:, 1], arr[:, 2])
    return paired, dropped


def _pair_problem(a: Cell, b: Cell, fusion: str, ref: str) -> tuple[str | None, str]:
    """The first reason the pair (a: fusion, b: reference) cannot be used, if any."""
    for side, cell in ((fusion, a), (ref, b)):
        if not cell.ok:
            return cell.reason, f"{side}: {cell.detail}"
    mismatch = fingerprint_mismatch(a, b)
    if mismatch:
        return "fingerprint_mismatch", mismatch
    return None, ""


def pair_trials(df: pd.DataFrame, metrics: list[str], baseline: str, mode: str) -> PairingResult:
    """Pair every comparison in the (already filtered) tidy table, per metric."""
    out = PairingResult()
    _fingerprint_warning(df, out)
    for metric in metrics:
        cells = cells_for(df, metric)
        for (dataset, pe), group in df.groupby(["dataset", "pe"], sort=True):
            fusions = sorted(group["fusion"].unique())
            _seed_set_warning(cells, dataset, pe, metric, fusions, out)
            for fusion, ref in comparison_order(fusions, baseline, mode):
                seeds = sorted(group.loc[group["fusion"].isin([fusion, ref]), "seed"].unique())
                paired, dropped = pair_one(cells, dataset, pe, metric, fusion, ref,
                                           [int(s) for s in seeds])
                out.pairs.append(paired)
                out.dropped.extend(dropped)
    return out


def _seed_set_warning(cells: dict, dataset: str, pe: str, metric: str,
                      fusions: list[str], out: PairingResult) -> None:
    """Warn when fusions in one (dataset, pe) have different sets of usable seeds."""
    sets = {f: sorted(int(k[3]) for k, c in cells.items()
                      if k[:3] == (dataset, pe, f) and c.ok) for f in fusions}
    if len({tuple(s) for s in sets.values()}) > 1:
        listing = "; ".join(f"{f}: {s}" for f, s in sets.items())
        out.warnings.append({
            "code": "unequal_seed_sets",
            "message": f"unequal seed sets across fusions for {dataset}/{pe}/{metric} "
                       f"(usable seeds - {listing})",
        })


def _fingerprint_warning(df: pd.DataFrame, out: PairingResult) -> None:
    """Pairing without any fingerprints cannot be verified; say so once."""
    present = [c for c in FP_COLUMNS if df[c].notna().any()]
    if not present:
        out.warnings.append({
            "code": "no_fingerprints",
            "message": "no fingerprint columns (fp_split, fp_batch_order, fp_shared_init): "
                       "pairing by seed is unverified",
        })

"""Pair trials by seed within (dataset, pe), and account for every pair that is dropped.

A *cell* is one (dataset, pe, fusion, seed) slot for one metric. It is usable when it has
exactly one FINISHED run, and its metric is finite (two FINISHED runs are a
`duplicate_seed` even when one of them has a NaN metric: which one is right is not ours to
guess). A pair (fusion vs reference, seed) is used when both cells are usable, both ran
the same code, and every fingerprint present on both sides agrees (split, batch order,
shared init, dropout: `fusion_sweep.schema.FINGERPRINTS`); otherwise it is dropped with one
of :data:`analysis.schema.DROP_REASONS` and a human detail. Mismatched fingerprints are
never paired silently.

Code fingerprints (tag ``fusion_sweep.code_fingerprint``, column ``code_fingerprint``):

- **superseded runs** (:func:`supersede`): when one identity (dataset, pe, fusion, seed) has
  several FINISHED runs and some ran the sweep's current code (the parent run's tag), those
  are kept and the others are set aside as ``superseded_code`` (one dropped record per run,
  with metric and baseline ``None``: it is a run, not a pair).
- **mixed-code pairs**: a pair whose two runs ran different code is *dropped* as
  ``code_mismatch`` (and the report lists them in a design warning) rather than used with a
  warning. A code change can move every number of a run, so a delta across code versions
  mixes the fusion effect with the code change; re-run the stale arm instead.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.schema import FINISHED, FP_COLUMNS, KEY_COLUMNS


@dataclass(frozen=True)
class Cell:
    """One (dataset, pe, fusion, seed) slot: its value when usable, else why not."""

    value: float = float("nan")
    fps: tuple[tuple[str, str | None], ...] = ()
    code: str | None = None  # code fingerprint of the run, when known
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
    if len(finished) > 1:
        # Counted before the finiteness filter: a NaN copy must not make the other win.
        n_bad = int((~np.isfinite(finished[metric].to_numpy(dtype=float))).sum())
        extra = f", {n_bad} with a non-finite {metric}" if n_bad else ""
        return Cell(reason="duplicate_seed",
                    detail=f"{len(finished)} finished runs for the same seed{extra}")
    if len(finished) == 0:
        statuses = sorted(set(rows["status"]))
        return Cell(reason="failed_trial", detail=f"status {'/'.join(statuses)}")
    row = finished.iloc[0]
    if not np.isfinite(float(row[metric])):
        return Cell(reason="non_finite_metric", detail=f"{metric} = {row[metric]}")
    fps = tuple((c, row[c]) for c in FP_COLUMNS)
    code = row["code_fingerprint"] if "code_fingerprint" in row.index else None
    return Cell(value=float(row[metric]), fps=fps, code=code if isinstance(code, str) else None)


def cells_for(df: pd.DataFrame, metric: str) -> dict[tuple, Cell]:
    """Map (dataset, pe, fusion, seed) -> Cell for every slot that has at least one row."""
    return {key: make_cell(rows, metric)
            for key, rows in df.groupby(list(KEY_COLUMNS), sort=True)}


def supersede(df: pd.DataFrame, current_code: str | None) -> tuple[pd.DataFrame, list[dict]]:
    """Set aside FINISHED runs that a current-code run of the same identity replaces.

    current_code: the sweep's current code fingerprint (None: nothing is superseded, and
    duplicates stay `duplicate_seed`). Returns (the table without them, dropped records).
    """
    if not current_code or "code_fingerprint" not in df.columns:
        return df, []
    finished = df[df["status"] == FINISHED]
    drop, records = [], []
    for key, rows in finished.groupby(list(KEY_COLUMNS), sort=True):
        current = rows["code_fingerprint"] == current_code
        if len(rows) < 2 or not current.any() or current.all():
            continue
        kept = ", ".join(_run_name(i, r) for i, r in rows[current].iterrows())
        for idx, r in rows[~current].iterrows():
            drop.append(idx)
            records.append({
                "dataset": key[0], "pe": key[1], "metric": None, "fusion": key[2],
                "baseline": None, "seed": int(key[3]), "reason": "superseded_code",
                "detail": f"{_run_name(idx, r)} ran code {_short(r['code_fingerprint'])}; "
                          f"kept {kept} with the sweep's current code {_short(current_code)}"})
    return df.drop(index=drop), records


def _run_name(idx: object, row: pd.Series) -> str:
    rid = row.get("run_id")
    return f"run {rid}" if isinstance(rid, str) and rid else f"row {idx}"


def _short(code: object) -> str:
    return str(code)[:10] if isinstance(code, str) else "unknown"


def fingerprint_mismatch(a: Cell, b: Cell) -> str:
    """'' when all fingerprints present on both sides agree, else which ones differ."""
    diffs = []
    for (name, va), (_, vb) in zip(a.fps, b.fps):
        # a missing fingerprint is None, NaN or <NA> depending on the input: strings only
        if isinstance(va, str) and isinstance(vb, str) and va and vb and va != vb:
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
    if a.code is not None and b.code is not None and a.code != b.code:
        return "code_mismatch", f"{fusion} ran code {_short(a.code)}, {ref} ran {_short(b.code)}"
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
            "message": f"no fingerprint columns ({', '.join(FP_COLUMNS)}): "
                       "pairing by seed is unverified",
        })
        return
    # A fingerprint some runs have and others lack (e.g. runs logged by an older version
    # without fp_dropout) is checked only where both sides have it: say which are partial.
    partial = [c for c in present if df[c].isna().any()]
    if partial:
        counts = ", ".join(f"{c.removeprefix('fp_')} missing on {int(df[c].isna().sum())} of "
                           f"{len(df)} runs" for c in partial)
        out.warnings.append({
            "code": "partial_fingerprints",
            "message": f"some runs lack fingerprints ({counts}): those are checked only "
                       "where both trials of a pair have them",
        })

"""Pair trials by seed within a group, and account for every pair that is dropped.

What is compared with what is the comparison axis (:mod:`fusion_sweep.analysis.variants`): within a
group (the dataset plus the variant fields the baseline leaves open) each arm is paired
with the group's reference. With a fusion-name baseline a group is (dataset, encoder, pe)
and arms differ by fusion (the fusion study); with a full variant label a group is the
dataset and arms are any variants.

A *cell* is one (dataset, encoder, pe, fusion, seed) slot for one metric. It is usable when
it has exactly one FINISHED run, and its metric is finite (two FINISHED runs are a
`duplicate_seed` even when one of them has a NaN metric: which one is right is not ours to
guess). A pair (arm vs reference, seed) is used when both cells are usable, both ran
the same code, and every fingerprint present on both sides agrees (split, batch order,
shared init, dropout: `fusion_sweep.schema.FINGERPRINTS`; and the encoder body's initial
weights, `ENCODER_FINGERPRINTS`, only when both arms have the same encoder label: two
different encoders' bodies differ by construction); otherwise it is dropped with one
of :data:`fusion_sweep.analysis.schema.DROP_REASONS` and a human detail. Mismatched fingerprints are
never paired silently.

Code fingerprints (tag ``fusion_sweep.code_fingerprint``, column ``code_fingerprint``):

- **superseded runs** (:func:`supersede`): when one identity (dataset, encoder, pe, fusion,
  seed) has several FINISHED runs and some ran the sweep's current code (those a relaunch
  did not mark ``superseded_by``; before that mark, the parent run's code tag), those are kept and the others are set aside as ``superseded_code`` (one dropped
  record per run, with metric and baseline ``None``: it is a run, not a pair).
- **mixed-code pairs**: a pair whose two runs ran different code (where they log their code
  by component, column ``code_components``: different code of a component both arms run) is
  *dropped* as ``code_mismatch`` (and the report lists them in a design warning) rather than used with a
  warning. A code change can move every number of a run, so a delta across code versions
  mixes the variant effect with the code change; re-run the stale arm instead.

Platform fingerprints (column ``fp_platform``, readable ``platform``; tag ``fp.platform``):
a pair whose two runs ran on different platforms (CPU instruction set, GPU, torch/CUDA
build, thread count: :data:`fusion_sweep.schema.PLATFORM_FIELDS`) is dropped as
``platform_mismatch``, listed like code mismatches: the same trial gives other floats on
another platform, so the delta would mix the variant effect with the platform's.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from fusion_sweep.schema import (changed_components, code_fingerprint, component_label,
                                 parse_components)
from fusion_sweep.analysis.schema import (
    BLANK_STATUS, CODE_COMPONENTS_COLUMN, CODE_FINGERPRINT_COLUMN, SUPERSEDED_COLUMN, ENCODER, ENCODER_FP_COLUMNS, FINISHED, FP_COLUMNS,
    FUSION, KEY_COLUMNS, PE, PLATFORM_COLUMN, PLATFORM_LABEL_COLUMN, SEED_FP_COLUMNS, STATUS,
    VALUE,
)
from fusion_sweep.analysis.sections import DroppedPair
from fusion_sweep.analysis.variants import Axis, Variant, parse_baseline

CellKey = tuple  # (dataset, encoder, pe, fusion, seed): KEY_COLUMNS order
NON_FINITE = "non_finite_metric"  # a finished run whose metric is NaN/inf: a seed lost


@dataclass(frozen=True)
class Cell:
    """One (dataset, encoder, pe, fusion, seed) slot: its value when usable, else why not."""

    value: float = float("nan")
    fps: tuple[tuple[str, str | None], ...] = ()  # FP_COLUMNS, then ENCODER_FP_COLUMNS
    code: str | None = None  # code fingerprint of the run, when known
    reason: str | None = None  # a DROP_REASONS code when unusable
    detail: str = ""
    platform: str | None = None  # platform fingerprint of the run, when known
    platform_label: str = ""  # the same, readable

    @property
    def ok(self) -> bool:
        return self.reason is None


MISSING = Cell(reason="missing_trial", detail="no trial")


def cell_key(dataset: str, v: Variant, seed: int) -> CellKey:
    return (dataset, v.encoder, v.pe, v.fusion, seed)


@dataclass(frozen=True)
class Paired:
    """The paired data of one comparison. seeds, x, y: shape (n,), aligned by seed.

    baseline: the reference as the user's --baseline names it (fusion name or full label).
    """

    dataset: str
    metric: str
    arm: Variant
    ref: Variant
    baseline: str
    group: tuple[str, ...]
    seeds: np.ndarray
    x: np.ndarray  # the arm's metric per seed
    y: np.ndarray  # the reference's metric per seed
    # Pairs dropped although both runs finished with a finite metric (a fingerprint or code
    # check failed; copies excluded): (seed, x, y) each. Never used for the verdict; the
    # report says when putting them back would change it.
    unchecked: tuple[tuple[int, float, float], ...] = ()
    # Seeds lost to a non-finite metric on either arm (a diverged run): dropped from the
    # paired statistics, but counted by the win rate (winrate.sign_test's `lost`).
    lost: tuple[int, ...] = ()

    @property
    def pe(self) -> str:
        return self.arm.pe

    @property
    def fusion(self) -> str:
        return self.arm.fusion


@dataclass
class PairingResult:
    """All comparisons, dropped pairs and warnings ({"code", "message"} dicts)."""

    pairs: list[Paired] = field(default_factory=list)
    dropped: list[DroppedPair] = field(default_factory=list)
    warnings: list[dict] = field(default_factory=list)


def make_cell(rows: pd.DataFrame, metric: str) -> Cell:
    """Classify the runs of one slot (rows: 0..k trials of the same key)."""
    return _cell(_Columns(rows, metric), np.arange(len(rows)), metric)


@dataclass(frozen=True)
class _Columns:
    """The columns a cell needs, as arrays (per-group pandas indexing is slow)."""

    status: np.ndarray
    value: np.ndarray
    fps: tuple[tuple[str, np.ndarray | None], ...]
    code: np.ndarray | None
    platform: np.ndarray | None
    platform_label: np.ndarray | None

    def __init__(self, df: pd.DataFrame, metric: str) -> None:
        col = lambda c: df[c].to_numpy(dtype=object) if c in df.columns else None  # noqa: E731
        object.__setattr__(self, "status", df[STATUS].to_numpy(dtype=object))
        object.__setattr__(self, "value", df[metric].to_numpy(dtype=object))
        fps = tuple((c, col(c)) for c in (*FP_COLUMNS, *ENCODER_FP_COLUMNS))
        object.__setattr__(self, "fps", fps)
        object.__setattr__(self, "code", _code_column(col(CODE_FINGERPRINT_COLUMN),
                                                      col(CODE_COMPONENTS_COLUMN)))
        object.__setattr__(self, "platform", col(PLATFORM_COLUMN))
        object.__setattr__(self, "platform_label", col(PLATFORM_LABEL_COLUMN))


def _code_column(plain: np.ndarray | None, components: np.ndarray | None) -> np.ndarray | None:
    """Per row the code a pair compares: the component map (JSON) where the run logged one,
    else its code fingerprint (results from before per-component fingerprints)."""
    if components is None:
        return plain
    base = plain if plain is not None else np.full(len(components), None, dtype=object)
    return np.array([c if parse_components(c) is not None else p
                     for p, c in zip(base, components)], dtype=object)


def code_difference(a: str | None, b: str | None, a_name: str, b_name: str) -> str:
    """'' when two runs' code agrees where it must, else the detail of a `code_mismatch`: two
    component maps must agree on every component both arms run (their fusions, say, differ
    by design; their trainer and data may not); anything else (plain fingerprints, or one of
    each) must be equal."""
    if a is None or b is None:
        return ""
    ma, mb = parse_components(a), parse_components(b)
    if ma is not None and mb is not None:
        shared = changed_components(ma, mb, shared_only=True)
        return (f"{a_name} and {b_name} ran different code of "
                f"{', '.join(component_label(n) for n in shared)}") if shared else ""
    if a == b:
        return ""
    short = [_short(code_fingerprint(m) if m is not None else c) for m, c in ((ma, a), (mb, b))]
    return f"{a_name} ran code {short[0]}, {b_name} ran {short[1]}"


def _cell(cols: _Columns, idx: np.ndarray, metric: str) -> Cell:
    """One slot's cell from the rows at positions idx."""
    if len(idx) == 0:
        return MISSING
    finished = idx[cols.status[idx] == FINISHED]
    if len(finished) > 1:
        # Counted before the finiteness filter: a NaN copy must not make the other win.
        n_bad = int((~np.isfinite(cols.value[finished].astype(float))).sum())
        extra = f", {n_bad} with a non-finite {metric}" if n_bad else ""
        return Cell(reason="duplicate_seed",
                    detail=f"{len(finished)} finished runs for the same seed{extra}")
    if len(finished) == 0:
        statuses = sorted(set(cols.status[idx]))
        if statuses == [BLANK_STATUS]:  # never read as FINISHED: the run may have crashed
            return Cell(reason="blank_status", detail="status column blank: not known to "
                        "have finished")
        return Cell(reason="failed_trial", detail=f"status {'/'.join(statuses)}")
    i = finished[0]
    value = cols.value[i]
    if not np.isfinite(float(value)):
        return Cell(reason=NON_FINITE, detail=f"{metric} = {value}")
    fps = tuple((c, a[i] if a is not None else None) for c, a in cols.fps)
    code = cols.code[i] if cols.code is not None else None
    plat = cols.platform[i] if cols.platform is not None else None
    label = cols.platform_label[i] if cols.platform_label is not None else None
    return Cell(value=float(value), fps=fps, code=code if isinstance(code, str) else None,
                platform=plat if isinstance(plat, str) and plat else None,
                platform_label=label if isinstance(label, str) else "")


def cells_for(df: pd.DataFrame, metric: str) -> dict[CellKey, Cell]:
    """Map (dataset, encoder, pe, fusion, seed) -> Cell for every slot with a row; copied
    seeds (:func:`copied_seeds`) are unusable cells (`duplicate_fingerprint`)."""
    cols = _Columns(df, metric)
    groups = df.groupby(list(KEY_COLUMNS), sort=True).indices
    cells = {key: _cell(cols, np.asarray(idx), metric) for key, idx in sorted(groups.items())}
    return copied_seeds(cells)


def copied_seeds(cells: dict[CellKey, Cell]) -> dict[CellKey, Cell]:
    """Mark every usable cell whose arm has another seed with the same value of a
    seed-dependent fingerprint (SEED_FP_COLUMNS) as `duplicate_fingerprint`.

    Two trials of different seeds cannot share their batch order or initial weights unless
    one is a copy of the other; which one is the original cannot be told, so every copy is
    dropped (its value is kept for the sensitivity check of the report)."""
    seen: dict[tuple, list[CellKey]] = {}
    for key, cell in cells.items():
        if not cell.ok:
            continue
        for name, value in cell.fps:
            if name in SEED_FP_COLUMNS and isinstance(value, str) and value:
                seen.setdefault((key[:4], name, value), []).append(key)
    out = dict(cells)
    for (_, name, value), keys in seen.items():
        seeds = sorted({int(k[4]) for k in keys})
        if len(seeds) < 2:
            continue
        for k in keys:
            c = out[k]
            if c.ok:
                out[k] = replace(c, reason="duplicate_fingerprint",
                                 detail=f"seeds {', '.join(map(str, seeds))} share the "
                                        f"{name.removeprefix('fp_')} fingerprint {value[:10]} "
                                        "(copied runs)")
    return out


def usable_values(df: pd.DataFrame, metric: str) -> pd.DataFrame:
    """One row per usable cell: dataset, encoder, pe, fusion, seed, value (arm summaries,
    paper tables)."""
    rows = [(*k, c.value) for k, c in cells_for(df, metric).items() if c.ok]
    return pd.DataFrame(rows, columns=[*KEY_COLUMNS, VALUE])


def supersede(df: pd.DataFrame, current_code: str | None
              ) -> tuple[pd.DataFrame, list[DroppedPair]]:
    """Set aside FINISHED runs that a current-code run of the same identity replaces.

    current_code: the sweep's current code fingerprint (None: nothing is superseded, and
    duplicates stay `duplicate_seed`). Returns (the table without them, dropped records).
    """
    marked = SUPERSEDED_COLUMN in df.columns and bool(df[SUPERSEDED_COLUMN].map(_is_set).any())
    if not marked and (not current_code or CODE_FINGERPRINT_COLUMN not in df.columns):
        return df, []
    finished = df[df[STATUS] == FINISHED]
    drop, records = [], []
    for key, rows in finished.groupby(list(KEY_COLUMNS), sort=True):
        # A run a relaunch retrained under new code is marked (schema.SUPERSEDED); before
        # that mark existed, the runs of the sweep's current code are the current ones.
        current = ~rows[SUPERSEDED_COLUMN].map(_is_set) if marked \
            else rows[CODE_FINGERPRINT_COLUMN] == current_code
        if len(rows) < 2 or not current.any() or current.all():
            continue
        dataset, encoder, pe, fusion, seed = key
        kept = ", ".join(_run_name(i, r) for i, r in rows[current].iterrows())
        for idx, r in rows[~current].iterrows():
            drop.append(idx)
            records.append(DroppedPair(
                dataset, encoder, pe, None, fusion, None, Variant(encoder, pe, fusion).label,
                None, int(seed), "superseded_code",
                f"{_run_name(idx, r)} ran code {_short(r[CODE_FINGERPRINT_COLUMN])}; "
                f"kept {kept} with the sweep's current code"
                + (f" {_short(current_code)}" if not marked else "")))
    return df.drop(index=drop), records


def _is_set(v: object) -> bool:
    return isinstance(v, str) and bool(v)


def _run_name(idx: object, row: pd.Series) -> str:
    rid = row.get("run_id")
    return f"run {rid}" if isinstance(rid, str) and rid else f"row {idx}"


def _short(code: object) -> str:
    return str(code)[:10] if isinstance(code, str) else "unknown"


def fingerprint_mismatch(a: Cell, b: Cell, same_encoder: bool = True) -> str:
    """'' when all fingerprints present on both sides agree, else which ones differ.

    The encoder fingerprints (ENCODER_FP_COLUMNS) are compared only when same_encoder.
    """
    diffs = []
    for (name, va), (_, vb) in zip(a.fps, b.fps):
        if name in ENCODER_FP_COLUMNS and not same_encoder:
            continue
        # a missing fingerprint is None, NaN or <NA> depending on the input: strings only
        if isinstance(va, str) and isinstance(vb, str) and va and vb and va != vb:
            diffs.append(f"{name.removeprefix('fp_')} ({va[:10]} vs {vb[:10]})")
    return "; ".join(diffs)


def pair_problem(a: Cell, b: Cell, a_name: str, b_name: str,
                 same_encoder: bool = True) -> tuple[str | None, str]:
    """The first reason two cells of one seed cannot be paired, if any: a's side, b's
    side, code, fingerprints. a_name/b_name name the sides in the detail."""
    for side, cell in ((a_name, a), (b_name, b)):
        if not cell.ok:
            return cell.reason, f"{side}: {cell.detail}"
    code = code_difference(a.code, b.code, a_name, b_name)
    if code:
        return "code_mismatch", code
    if a.platform is not None and b.platform is not None and a.platform != b.platform:
        return "platform_mismatch", platform_difference(a, b, a_name, b_name)
    mismatch = fingerprint_mismatch(a, b, same_encoder)
    if mismatch:
        return "fingerprint_mismatch", mismatch
    return None, ""


_PARTS = re.compile(r", (?![^()]*\))")  # a ', ' not inside parentheses


def platform_difference(a: Cell, b: Cell, a_name: str, b_name: str) -> str:
    """Which parts of two platforms differ (their readable labels), else their hashes."""
    # The label's parts are ', '-separated, but 'GPU X (CUDA a, cuDNN b)' holds one inside.
    pa, pb = (_PARTS.split(x.platform_label) for x in (a, b))
    only_a = [p for p in pa if p not in pb]
    only_b = [p for p in pb if p not in pa]
    if a.platform_label and b.platform_label and (only_a or only_b):
        return (f"{a_name} ran on {', '.join(only_a)}, {b_name} on {', '.join(only_b)} "
                f"(platforms {_short(a.platform)} vs {_short(b.platform)})")
    return f"{a_name} ran on platform {_short(a.platform)}, {b_name} on {_short(b.platform)}"


def dropped_record(dataset: str, metric: str | None, arm: Variant, ref: Variant | None,
                   baseline: str | None, seed: int, reason: str, detail: str) -> DroppedPair:
    """One dropped pair (fusion_sweep.analysis.sections.DroppedPair)."""
    return DroppedPair(dataset, arm.encoder, arm.pe, metric, arm.fusion, baseline, arm.label,
                       ref.label if ref is not None else None, int(seed), reason, detail)


def pair_one(
    cells: dict[CellKey, Cell], dataset: str, metric: str, arm: Variant, ref: Variant,
    seeds: list[int], axis: Axis, group: tuple[str, ...] = (),
) -> tuple[Paired, list[DroppedPair]]:
    """Pair arm vs ref over `seeds`; return the Paired data and the dropped records."""
    kept, dropped, unchecked, lost = [], [], [], []
    a_name, b_name = axis.short(arm), axis.short(ref)
    for seed in seeds:
        a = cells.get(cell_key(dataset, arm, seed), MISSING)
        b = cells.get(cell_key(dataset, ref, seed), MISSING)
        reason, detail = pair_problem(a, b, a_name, b_name, arm.encoder == ref.encoder)
        if reason is None:
            kept.append((seed, a.value, b.value))
            continue
        if NON_FINITE in (a.reason, b.reason) and a.reason in (None, NON_FINITE) \
                and b.reason in (None, NON_FINITE):
            lost.append(int(seed))
        # a copy is not data: only pairs failing a fingerprint or code check are re-added
        if reason != "duplicate_fingerprint" and np.isfinite(a.value) and np.isfinite(b.value):
            unchecked.append((int(seed), a.value, b.value))
        dropped.append(dropped_record(dataset, metric, arm, ref, b_name, seed, reason, detail))
    arr = np.array(kept, dtype=float).reshape(-1, 3)
    paired = Paired(dataset, metric, arm, ref, b_name, group, arr[:, 0].astype(int),
                    arr[:, 1], arr[:, 2], tuple(unchecked), tuple(lost))
    return paired, dropped


def pair_trials(df: pd.DataFrame, metrics: list[str], baseline: str | Axis,
                mode: str) -> PairingResult:
    """Pair every comparison in the (already filtered) tidy table, per metric."""
    axis = baseline if isinstance(baseline, Axis) else parse_baseline(baseline)
    out = PairingResult()
    _fingerprint_warning(df, out)
    _blank_code_warning(df, out)
    variant = variant_series(df)
    for metric in metrics:
        cells = cells_for(df, metric)
        for key, rows in df.groupby(["dataset", *axis.free], sort=True):
            dataset, *group = key if isinstance(key, tuple) else (key,)
            group = tuple(group)
            arms = variant[rows.index]
            variants = set(arms)
            _seed_set_warning(cells, dataset, metric, sorted(variants), axis, group, out)
            for arm, ref in axis.pairs(variants, group, mode):
                mine = np.array([v in (arm, ref) for v in arms], dtype=bool)
                seeds = sorted(rows.loc[mine, "seed"].unique())
                paired, dropped = pair_one(cells, dataset, metric, arm, ref,
                                           [int(s) for s in seeds], axis, group)
                out.pairs.append(paired)
                out.dropped.extend(dropped)
    return out


def variant_series(df: pd.DataFrame) -> pd.Series:
    """The Variant of every row of the tidy table (same index)."""
    return pd.Series([Variant(*map(str, t)) for t in zip(df[ENCODER], df[PE], df[FUSION])],
                     index=df.index, dtype=object)


def _seed_set_warning(cells: dict, dataset: str, metric: str, variants: list[Variant],
                      axis: Axis, group: tuple[str, ...], out: PairingResult) -> None:
    """Warn when the arms of one group have different sets of usable seeds."""
    sets = {axis.short(v): sorted(int(k[4]) for k, c in cells.items()
                                  if k[:4] == cell_key(dataset, v, 0)[:4] and c.ok)
            for v in variants}
    if len({tuple(s) for s in sets.values()}) > 1:
        listing = "; ".join(f"{f}: {s}" for f, s in sets.items())
        where = "/".join(p for p in (dataset, axis.path(group), metric) if p)
        out.warnings.append({
            "code": "unequal_seed_sets",
            "message": f"unequal seed sets across {axis.noun}s for {where} "
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
    # (fp_encoder_init absent from every run is not partial: old runs never had it.)
    present += [c for c in ENCODER_FP_COLUMNS if c in df.columns and df[c].notna().any()]
    partial = [c for c in present if df[c].isna().any()]
    if partial:
        counts = ", ".join(f"{c.removeprefix('fp_')} missing on {int(df[c].isna().sum())} of "
                           f"{len(df)} runs" for c in partial)
        out.warnings.append({
            "code": "partial_fingerprints",
            "message": f"some runs lack fingerprints ({counts}): those are checked only "
                       "where both trials of a pair have them",
        })


def _blank_code_warning(df: pd.DataFrame, out: PairingResult) -> None:
    """A finished run with a blank code fingerprint where others have one: its pairs cannot
    be checked for code agreement (a stale run could pass as current). Flag each such run;
    a table with no code fingerprint at all says nothing about code, and gets no warning."""
    code = df[CODE_FINGERPRINT_COLUMN]
    done = df[STATUS] == FINISHED
    if not code[done].notna().any():
        return
    blank = df[done & code.isna()]
    if blank.empty:
        return
    names = [f"{r.dataset}/{Variant(r.encoder, r.pe, r.fusion).label}/seed {r.seed}"
             for r in blank.head(5).itertuples()]
    more = f" and {len(blank) - 5} more" if len(blank) > 5 else ""
    out.warnings.append({
        "code": "blank_code_fingerprint",
        "message": f"{len(blank)} finished run(s) have a blank code fingerprint "
                   f"({'; '.join(names)}{more}): their pairs are not checked for code "
                   "agreement; re-run them, or fill the code_fingerprint column"})

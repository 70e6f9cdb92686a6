"""Turn a results file (or the rows read from MLflow) into the tidy table, and validate it.

Everything downstream takes the tidy table described in :mod:`fusion_sweep.analysis.schema`, so the
two inputs (file, MLflow) differ only here and in :mod:`fusion_sweep.analysis.mlflow_io`.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from fusion_sweep.errors import unknown_name
from fusion_sweep.schema import CODE_FINGERPRINT, FINGERPRINT_TAGS
from fusion_sweep.schema import PLATFORM_COLUMN, PLATFORM_LABEL_COLUMN

from fusion_sweep.analysis.metrics import is_proportion
from fusion_sweep.analysis.schema import (
    ADAPTIVE_COLUMN, BLANK_STATUS, CODE_COMPONENTS_COLUMN, CODE_FINGERPRINT_COLUMN, COLUMN_DEFAULTS,
    SUPERSEDED_COLUMN,
    COMPARISON_FAMILY_COLUMN, DATASET, ENCODER, ENCODER_FP_COLUMNS, FINISHED, FP_COLUMNS, FUSION, KEY_COLUMNS,
    LABEL_COLUMNS, LENGTH_REGIME_COLUMN, LENGTH_REGIMES, NON_METRIC_COLUMNS, PE, REGIME_COLUMNS,
    SEED, STATUS, TEST_MAJORITY_RATE, TEST_SIZE, AnalysisError,
)
from fusion_sweep.analysis.variants import Axis, Variant, check_present, parse_baseline

# MLflow tags use dots (fp.split); files may use either spelling.
_ALIASES = {**{tag: f"fp_{name}" for name, tag in FINGERPRINT_TAGS.items()},
            CODE_FINGERPRINT: "code_fingerprint"}


def read_results_file(path: str | Path) -> pd.DataFrame:
    """Read a CSV or Parquet results file into the tidy table.

    Every way the file can be unreadable (missing, empty, binary, not UTF-8, malformed)
    becomes one AnalysisError naming the file: pandas' own errors do not say which file.
    """
    p = Path(path)
    if not p.exists():
        raise AnalysisError(f"results file not found: {p}")
    suffix = p.suffix.lower()
    if suffix == ".csv":
        raw = _read_csv(p)
    elif suffix in (".parquet", ".pq"):
        raw = _read_parquet(p)
    else:
        raise AnalysisError(
            f"results file must end in .csv or .parquet, got {p.name!r}"
        )
    return tidy(raw, source=str(p))


def _read_bytes(p: Path) -> bytes:
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise AnalysisError(f"cannot read results file {p}: {exc.strerror or exc}") from None
    if not data.strip():
        raise AnalysisError(f"results file {p} is empty")
    return data


def _read_csv(p: Path) -> pd.DataFrame:
    """Decode as UTF-8 (BOM allowed) ourselves, so the error can say which byte is wrong."""
    data = _read_bytes(p)
    if b"\0" in data[:8192]:  # NUL bytes: not a text file (pandas would half-parse it)
        raise AnalysisError(f"results file {p} is binary, not a CSV text file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise AnalysisError(
            f"results file {p} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
            f"{exc.start}); re-save it as UTF-8") from None
    try:
        return pd.read_csv(io.StringIO(text))
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as exc:
        raise AnalysisError(f"results file {p} is not a readable CSV: {exc}".strip()) from None


def _read_parquet(p: Path) -> pd.DataFrame:
    _read_bytes(p)
    try:
        return pd.read_parquet(p)
    except ImportError as exc:  # no pyarrow/fastparquet: an environment problem, say so
        raise AnalysisError(f"cannot read Parquet file {p}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - pyarrow raises its own types (ArrowInvalid, ...)
        raise AnalysisError(f"results file {p} is not a readable Parquet file: {exc}") from None


def tidy(raw: pd.DataFrame, source: str = "results") -> pd.DataFrame:
    """Normalise a raw table (one row per trial) to the tidy schema.

    A table without an `encoder` column (written before the encoder axis), or a row with
    an empty one, holds the standard encoder's trials; a table without a `pe` column gets
    the neutral pe label (COLUMN_DEFAULTS). Raises AnalysisError when there are no rows or
    another key column is missing.
    """
    df = raw.rename(columns=_ALIASES).copy()
    if len(df) == 0:
        raise AnalysisError(f"no rows in {source}")
    df[ENCODER] = _encoder(df)
    if PE not in df.columns:
        df[PE] = COLUMN_DEFAULTS[PE]
    missing = [c for c in KEY_COLUMNS if c not in df.columns]
    if missing:
        raise AnalysisError(
            f"{source} lacks required column(s) {', '.join(missing)}; "
            f"available columns: {', '.join(map(str, df.columns))}"
        )
    for col in (DATASET, ENCODER, PE, FUSION):
        empty = df[col].isna() | (df[col].astype(str).str.strip() == "")
        if empty.any():
            raise AnalysisError(
                f"column {col!r} in {source} is empty in {int(empty.sum())} row(s), "
                f"first at row {int(np.flatnonzero(empty.to_numpy())[0])}"
            )
        df[col] = df[col].astype(str).str.strip()
    df[SEED] = _integer_seeds(df[SEED], source)
    df[STATUS] = _status(df)
    for col in (*FP_COLUMNS, *ENCODER_FP_COLUMNS, CODE_FINGERPRINT_COLUMN,
                CODE_COMPONENTS_COLUMN, SUPERSEDED_COLUMN, PLATFORM_COLUMN,
                PLATFORM_LABEL_COLUMN, *LABEL_COLUMNS, *REGIME_COLUMNS, LENGTH_REGIME_COLUMN,
                COMPARISON_FAMILY_COLUMN, ADAPTIVE_COLUMN):
        df[col] = _optional_str(df[col]) if col in df.columns else None
    _check_length_regimes(df, source)
    for col in ("median_tokens", "num_classes", TEST_MAJORITY_RATE, TEST_SIZE):
        df[col] = pd.to_numeric(df[col], errors="coerce") if col in df.columns else np.nan
    return df.reset_index(drop=True)


def _check_length_regimes(df: pd.DataFrame, source: str) -> None:
    """The `regime` column (LENGTH_REGIME_COLUMN): one of LENGTH_REGIMES or blank (a probe),
    and one value per dataset; every problem at once."""
    col = df[LENGTH_REGIME_COLUMN]
    errors = sorted({f"{v!r}" for v in col.dropna() if v not in LENGTH_REGIMES})
    out = []
    if errors:
        out.append(f"column {LENGTH_REGIME_COLUMN!r} in {source} holds {', '.join(errors)}; "
                   f"valid: {', '.join(LENGTH_REGIMES)} (blank for a probe)")
    per = df.dropna(subset=[LENGTH_REGIME_COLUMN]).groupby(DATASET)[LENGTH_REGIME_COLUMN].nunique()
    mixed = sorted(per[per > 1].index)
    if mixed:
        out.append(f"column {LENGTH_REGIME_COLUMN!r} in {source} must hold one regime per "
                   f"dataset; {', '.join(mixed)} have several")
    if out:
        raise AnalysisError("; ".join(out))


def _encoder(df: pd.DataFrame) -> pd.Series:
    """The encoder label per row; the default (the standard encoder) where the input has none."""
    if ENCODER not in df.columns:
        return pd.Series([COLUMN_DEFAULTS[ENCODER]] * len(df), index=df.index, dtype=object)
    col = df[ENCODER].astype(object)
    empty = col.isna() | (col.astype(str).str.strip() == "")
    return col.where(~empty, COLUMN_DEFAULTS[ENCODER])


def _integer_seeds(col: pd.Series, source: str) -> pd.Series:
    """Seeds arrive as ints (CSV) or strings (MLflow params); both become int64."""
    num = pd.to_numeric(col, errors="coerce")
    bad = col[num.isna() | (num != np.round(num))]
    if len(bad):
        raise AnalysisError(
            f"column 'seed' in {source} must hold integers; got {bad.iloc[0]!r}"
        )
    return num.astype("int64")


def _status(df: pd.DataFrame) -> pd.Series:
    """Run status, upper-cased; a file without a status column holds finished trials.

    A blank cell in a status column is not read as FINISHED (a run whose status was never
    written may have crashed): it becomes BLANK_STATUS, and the pairing drops it with the
    reason `blank_status`."""
    if STATUS not in df.columns:
        return pd.Series([FINISHED] * len(df), index=df.index, dtype=object)
    s = df[STATUS].astype(object).where(df[STATUS].notna(), "")
    return s.map(lambda v: str(v).strip().upper() or BLANK_STATUS).astype(object)


def _optional_str(col: pd.Series) -> pd.Series:
    """Fingerprint column: strings, None where absent or empty."""
    def norm(v: object) -> object:
        if v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA:
            return None
        s = str(v).strip()
        return s or None
    return col.map(norm).astype(object)


def metric_columns(df: pd.DataFrame) -> list[str]:
    """The metrics, in table order: every column that is neither identity nor metadata by
    the schema's roles (NON_METRIC_COLUMNS) and holds a number (a text column, such as a
    tag a file carries, is no metric)."""
    return [c for c in df.columns if c not in NON_METRIC_COLUMNS and _has_number(df[c])]


def _has_number(col: pd.Series) -> bool:
    return bool(pd.to_numeric(col, errors="coerce").notna().any())


def select(
    df: pd.DataFrame,
    metrics: Sequence[str],
    baseline: str | Axis,
    datasets: Iterable[str] | None = None,
    pes: Iterable[str] | None = None,
    encoders: Iterable[str] | None = None,
) -> pd.DataFrame:
    """Validate the requested metrics/baseline and filter to the requested datasets, PEs
    and encoders. baseline: a fusion name, a full variant label, or its Axis.

    Returns a copy whose metric columns are float64 (non-finite kept, as NaN/inf).
    """
    if len(df) == 0:
        raise AnalysisError("no rows in the results table")
    axis = baseline if isinstance(baseline, Axis) else parse_baseline(baseline)
    df = _filter(df, "dataset", datasets)
    df = _filter(df, "encoder", encoders)
    df = _filter(df, "pe", pes)
    available = metric_columns(df)
    for m in metrics:
        if m not in df.columns or m in NON_METRIC_COLUMNS:
            raise AnalysisError(unknown_name("metric", m, available, "available metrics:"))
        df[m] = to_metric(df, m)
    check_present(axis, variants_of(df))
    return df


def to_metric(df: pd.DataFrame, metric: str) -> pd.Series:
    """A metric column as float64, checked (numeric; proportions within [0, 1])."""
    col = _numeric_metric(df[metric], metric)
    _check_proportion(df.assign(**{metric: col}), metric)
    return col


def variants_of(df: pd.DataFrame) -> list[Variant]:
    """Every distinct variant in the table, sorted."""
    rows = df[["encoder", "pe", "fusion"]].drop_duplicates()
    return sorted(Variant(*map(str, r)) for r in rows.itertuples(index=False))


def _filter(df: pd.DataFrame, column: str, wanted: Iterable[str] | None) -> pd.DataFrame:
    """Keep rows whose `column` is in `wanted` (None/empty = all); unknown values error."""
    wanted = list(wanted or [])
    if not wanted:
        return df.copy()
    present = sorted(df[column].unique())
    unknown = [w for w in wanted if w not in present]
    if unknown:  # the first unknown name, with the closest present value as a hint
        raise AnalysisError(unknown_name(f"--{column}", unknown[0], present))
    return df[df[column].isin(wanted)].copy()


def _numeric_metric(col: pd.Series, name: str) -> pd.Series:
    """float64 view of a metric; a value that is present but not a number is an error."""
    if pd.api.types.is_bool_dtype(col):
        raise AnalysisError(f"metric {name!r} is boolean, not numeric")
    num = pd.to_numeric(col, errors="coerce")
    bad = col[num.isna() & col.notna()]
    # "nan"/"inf" strings are numbers (non-finite), handled later as dropped trials.
    bad = bad[~bad.astype(str).str.strip().str.lower().isin(["nan", "inf", "-inf", ""])]
    if len(bad):
        raise AnalysisError(
            f"metric {name!r} is not numeric: value {bad.iloc[0]!r} "
            f"(row {bad.index[0]}, {col.dtype} column)"
        )
    return num.astype("float64")


def _check_proportion(df: pd.DataFrame, metric: str) -> None:
    """An accuracy/F1/AUC column must lie in [0, 1]: percentages would silently change every
    effect size, margin and chance level by a factor of 100."""
    if not is_proportion(metric):
        return
    v = df[metric]
    out = v[np.isfinite(v) & ((v < 0) | (v > 1))]
    if len(out):
        raise AnalysisError(
            f"metric {metric!r} is a proportion (accuracy/F1/AUC) but has {len(out)} value(s) "
            f"outside [0, 1], e.g. {float(out.iloc[0]):g} at row {out.index[0]}; percentages? "
            "divide the column by 100")


def rows_to_frame(rows: Sequence[Mapping[str, object]], source: str) -> pd.DataFrame:
    """Build the tidy table from dict rows (used by the MLflow reader)."""
    if not rows:
        raise AnalysisError(f"no rows in {source}")
    return tidy(pd.DataFrame(list(rows)), source=source)

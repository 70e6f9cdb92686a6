"""Turn a results file (or the rows read from MLflow) into the tidy table, and validate it.

Everything downstream takes the tidy table described in :mod:`analysis.schema`, so the
two inputs (file, MLflow) differ only here and in :mod:`analysis.mlflow_io`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from analysis.schema import (
    FINISHED, FP_COLUMNS, KEY_COLUMNS, NON_METRIC_COLUMNS, AnalysisError,
)

# MLflow tags use dots (fp.split); files may use either spelling.
_ALIASES = {"fp.split": "fp_split", "fp.batch_order": "fp_batch_order",
            "fp.shared_init": "fp_shared_init"}


def read_results_file(path: str | Path) -> pd.DataFrame:
    """Read a CSV or Parquet results file into the tidy table."""
    p = Path(path)
    if not p.exists():
        raise AnalysisError(f"results file not found: {p}")
    suffix = p.suffix.lower()
    if suffix == ".csv":
        raw = pd.read_csv(p)
    elif suffix in (".parquet", ".pq"):
        raw = pd.read_parquet(p)
    else:
        raise AnalysisError(
            f"results file must end in .csv or .parquet, got {p.name!r}"
        )
    return tidy(raw, source=str(p))


def tidy(raw: pd.DataFrame, source: str = "results") -> pd.DataFrame:
    """Normalise a raw table (one row per trial) to the tidy schema.

    Raises AnalysisError when there are no rows or a key column is missing.
    """
    df = raw.rename(columns=_ALIASES).copy()
    if len(df) == 0:
        raise AnalysisError(f"no rows in {source}")
    missing = [c for c in KEY_COLUMNS if c not in df.columns]
    if missing:
        raise AnalysisError(
            f"{source} lacks required column(s) {', '.join(missing)}; "
            f"available columns: {', '.join(map(str, df.columns))}"
        )
    for col in ("dataset", "pe", "fusion"):
        empty = df[col].isna() | (df[col].astype(str).str.strip() == "")
        if empty.any():
            raise AnalysisError(
                f"column {col!r} in {source} is empty in {int(empty.sum())} row(s), "
                f"first at row {int(np.flatnonzero(empty.to_numpy())[0])}"
            )
        df[col] = df[col].astype(str).str.strip()
    df["seed"] = _integer_seeds(df["seed"], source)
    df["status"] = _status(df)
    for col in FP_COLUMNS:
        df[col] = _optional_str(df[col]) if col in df.columns else None
    if "median_tokens" in df.columns:
        df["median_tokens"] = pd.to_numeric(df["median_tokens"], errors="coerce")
    else:
        df["median_tokens"] = np.nan
    return df.reset_index(drop=True)


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
    """Run status, upper-cased; a file without a status column holds finished trials."""
    if "status" not in df.columns:
        return pd.Series([FINISHED] * len(df), index=df.index, dtype=object)
    s = df["status"].astype(object).where(df["status"].notna(), FINISHED)
    return s.map(lambda v: str(v).strip().upper() or FINISHED).astype(object)


def _optional_str(col: pd.Series) -> pd.Series:
    """Fingerprint column: strings, None where absent or empty."""
    def norm(v: object) -> object:
        if v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA:
            return None
        s = str(v).strip()
        return s or None
    return col.map(norm).astype(object)


def metric_columns(df: pd.DataFrame) -> list[str]:
    """Every column that is not a key or metadata column, in table order."""
    return [c for c in df.columns if c not in NON_METRIC_COLUMNS]


def select(
    df: pd.DataFrame,
    metrics: Sequence[str],
    baseline: str,
    datasets: Iterable[str] | None = None,
    pes: Iterable[str] | None = None,
) -> pd.DataFrame:
    """Validate the requested metrics/baseline and filter to the requested datasets/PEs.

    Returns a copy whose metric columns are float64 (non-finite kept, as NaN/inf).
    """
    if len(df) == 0:
        raise AnalysisError("no rows in the results table")
    df = _filter(df, "dataset", datasets)
    df = _filter(df, "pe", pes)
    available = metric_columns(df)
    for m in metrics:
        if m not in df.columns or m in NON_METRIC_COLUMNS:
            raise AnalysisError(
                f"unknown metric {m!r}; available metrics: {', '.join(available) or '(none)'}"
            )
        df[m] = _numeric_metric(df[m], m)
    fusions = sorted(df["fusion"].unique())
    if baseline not in fusions:
        raise AnalysisError(
            f"baseline fusion {baseline!r} is absent from the data; "
            f"fusions present: {', '.join(fusions)}"
        )
    return df


def _filter(df: pd.DataFrame, column: str, wanted: Iterable[str] | None) -> pd.DataFrame:
    """Keep rows whose `column` is in `wanted` (None/empty = all); unknown values error."""
    wanted = list(wanted or [])
    if not wanted:
        return df.copy()
    present = sorted(df[column].unique())
    unknown = [w for w in wanted if w not in present]
    if unknown:
        raise AnalysisError(
            f"unknown --{column} {', '.join(map(repr, unknown))}; "
            f"{column} values present: {', '.join(present)}"
        )
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


def rows_to_frame(rows: Sequence[Mapping[str, object]], source: str) -> pd.DataFrame:
    """Build the tidy table from dict rows (used by the MLflow reader)."""
    if not rows:
        raise AnalysisError(f"no rows in {source}")
    return tidy(pd.DataFrame(list(rows)), source=source)

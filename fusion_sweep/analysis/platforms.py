"""Which platforms a results table ran on, and the report's warnings about mixing them.

The same trial gives other floats on another CPU instruction set, GPU, torch / CUDA build or
thread count (docs/protocol.md, "Where results hold"), so pairing keeps pairs on one platform
(:func:`fusion_sweep.analysis.pairing.pair_problem`, reason ``platform_mismatch``). Here: the
platforms of the tidy table (named in the report's source line) and two warnings, one when
a sweep ran on several platforms and one listing the pairs dropped for it.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping, Sequence

import pandas as pd

from fusion_sweep.analysis.schema import PLATFORM_COLUMN, PLATFORM_LABEL_COLUMN
from fusion_sweep.analysis.sections import DroppedPair

_LISTED = 10  # dropped pairs listed by name in the warning; the rest are counted


@dataclass(frozen=True)
class Platform:
    """One platform of the table: its hash, readable label ("" when unrecorded) and trial
    count. The report's source carries it as a JSON dict of these three fields."""

    fingerprint: str
    label: str
    trials: int

    @property
    def name(self) -> str:
        return self.label or f"platform {self.fingerprint[:10]}"


def _records(platforms: Sequence[Mapping[str, Any]]) -> list[Platform]:
    return [Platform(**p) for p in platforms]


def platforms_of(df: pd.DataFrame) -> list[dict]:
    """One Platform per platform in the table, as its JSON dict, most trials first;
    [] when no row records one (results logged before the platform fingerprint)."""
    if PLATFORM_COLUMN not in df.columns or not df[PLATFORM_COLUMN].notna().any():
        return []
    labels = (df[PLATFORM_LABEL_COLUMN] if PLATFORM_LABEL_COLUMN in df.columns
              else pd.Series([None] * len(df), index=df.index))
    known = df[PLATFORM_COLUMN].notna()
    out = []
    for fp, rows in df[known].groupby(PLATFORM_COLUMN, sort=True):
        label = next((x for x in labels[rows.index] if isinstance(x, str) and x), "")
        out.append(Platform(str(fp), label, int(len(rows))))
    return [asdict(p) for p in sorted(out, key=lambda p: (-p.trials, p.fingerprint))]


def platform_line(platforms: Sequence[Mapping[str, Any]]) -> str:
    """'on platform P' / 'on 2 platforms: P (12 trials); Q (3 trials)' / '' (unknown)."""
    records = _records(platforms)
    if not records:
        return ""
    if len(records) == 1:
        return f"on {records[0].name}"
    return f"on {len(records)} platforms: " + "; ".join(
        f"{p.name} ({p.trials} trials)" for p in records)


def platform_warnings(platforms: Sequence[Mapping[str, Any]], dropped: Sequence[DroppedPair],
                      where: Callable[[DroppedPair], str]) -> list[dict]:
    """`mixed_platforms` when the table spans platforms, and `platform_mismatch` listing the
    pairs dropped because their two runs ran on different platforms (where(d): its name)."""
    out = []
    if len(platforms) > 1:
        labelled = all(p.label for p in _records(platforms))
        untracked = "" if labelled else " (unlabelled ones by hash)"
        out.append({"code": "mixed_platforms",
                    "message": f"this sweep's trials ran {platform_line(platforms)}{untracked}; "
                               "results are identical only on one platform, so pairs are "
                               "kept on one platform and the others are dropped "
                               "(platform_mismatch): re-run the stray trials on the "
                               "platform of their pairs (pin the sweep with `resources`)"})
    bad = [d for d in dropped if d.reason == "platform_mismatch"]
    if bad:
        listing = "; ".join(f"{where(d)} seed {d.seed} ({d.detail})" for d in bad[:_LISTED])
        more = f"; and {len(bad) - _LISTED} more" if len(bad) > _LISTED else ""
        n = len(bad)
        out.append({"code": "platform_mismatch",
                    "message": f"{n} pair{'' if n == 1 else 's'} compare runs on different "
                               f"platforms and were dropped (re-run one arm where the other "
                               f"ran): {listing}{more}"})
    return out

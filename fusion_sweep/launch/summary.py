"""The launch's outcome: `LaunchSummary` filled from MLflow (the source of truth), `results.csv`,
and the last words printed (outcome, failures, where the results are, what to run next)."""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from fusion_sweep.plan.grid import GridPoint
from fusion_sweep.raytune.setup import resolve_storage
from fusion_sweep.schema import (ADAPTIVE_COLUMN, ATTEMPTS, CODE_COMPONENTS, CODE_COMPONENTS_COLUMN,
                                 CODE_FINGERPRINT, CODE_FINGERPRINT_COLUMN,
                                 COMPARISON_FAMILY_COLUMN, DEFAULT_EXPERIMENT, ERROR, FACT_COLUMNS,
                                 FINAL_METRICS, FINGERPRINT_TAGS,
                                 FINISHED, IDENTITY_FIELDS, LAUNCH_ID, PLATFORM_LABEL_COLUMN,
                                 platform_from_tags, platform_label, resolve_tracking_uri)
from fusion_sweep.tracking.store import is_local_store
from fusion_sweep.tracking.view import default_ui_store


@dataclass
class LaunchSummary:
    name: str
    total: int
    finished: int = 0
    failed: int = 0
    killed: int = 0
    missing: int = 0
    trained_now: int = 0  # trials this launch started training (finished or not)
    kept: int = 0  # finished in an earlier launch, not touched now
    retried: int = 0
    interrupted: bool = False  # stopped by Ctrl-C or a stop signal
    orphans_reconciled: int = 0
    seconds: float = 0.0
    tracking_uri: str = ""
    experiment: str = ""
    parent_run_id: str = ""
    experiment_path: str = ""
    results_csv: str = ""
    platforms: dict[str, int] = field(default_factory=dict)  # platform label -> trials
    failed_trials: list[str] = field(default_factory=list)
    tune_errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.finished == self.total



# results.csv columns beyond the identity, the final metrics (test_majority_rate and test_n
# among them) and the fingerprints: what `stats --results` needs to judge the file as it judges
# MLflow: each row's code, the comparison family fixed at launch and the adaptive design (JSON,
# the same on every row; the adaptive column is empty for a fixed-n sweep). Names: schema.py.


def summarize(s: LaunchSummary, tracker, points: list[GridPoint], ctx, out: TextIO, *,
              family: dict | None = None, adaptive: str = "") -> None:
    """Fill the summary from MLflow (the source of truth) and write results.csv.
    `family`: the sweep's comparison family (`schema.COMPARISON_FAMILY`); `adaptive`: the
    parent's `schema.ADAPTIVE` tag (JSON), "" for a fixed-n sweep."""
    try:
        tracker.forget()
        runs = tracker.runs_by_key(s.name)
    except Exception as e:  # noqa: BLE001 - never hide the sweep's own outcome
        print(f"warning: could not read MLflow for the summary: {e}", file=out)
        return
    sweep_columns = {COMPARISON_FAMILY_COLUMN: json.dumps(family or {}, sort_keys=True),
                     ADAPTIVE_COLUMN: adaptive}
    rows = []
    for p in points:
        r = runs.get(p.key)
        rows.append({**_row(s, p, r, ctx), **sweep_columns})
        _count(s, p, r)
    if "://" not in s.experiment_path:
        s.results_csv = str(write_results_csv(Path(s.experiment_path) / "results.csv", rows))


def _row(s: LaunchSummary, p: GridPoint, r, ctx) -> dict:
    """One results.csv row: the grid point, its run's status, metrics, fingerprints, code and
    platform; tallies the platforms and the trials this launch touched."""
    status = r.info.status if r is not None else "MISSING"
    row = {**dict(zip(IDENTITY_FIELDS, p.ident)), "trial_key": p.key, "status": status,
           "mlflow_run_id": r.info.run_id if r is not None else ""}
    if r is None:
        return row
    row.update({k: r.data.metrics.get(k, "") for k in FINAL_METRICS})
    row.update({"fp_" + k: r.data.tags.get(tag, "") for k, tag in FINGERPRINT_TAGS.items()})
    row[CODE_FINGERPRINT_COLUMN] = r.data.tags.get(CODE_FINGERPRINT, "")
    row[CODE_COMPONENTS_COLUMN] = r.data.tags.get(CODE_COMPONENTS, "")
    # the registry's facts (what the claims read: the length regime, probes, label)
    row.update({col: r.data.tags.get(tag, "") for tag, col in FACT_COLUMNS.items()})
    row[PLATFORM_LABEL_COLUMN] = platform_label(platform_from_tags(r.data.tags))
    if row[PLATFORM_LABEL_COLUMN]:
        label = row[PLATFORM_LABEL_COLUMN]
        s.platforms[label] = s.platforms.get(label, 0) + 1
    row["attempts"] = int(r.data.tags.get(ATTEMPTS) or 1)
    touched = r.data.tags.get(LAUNCH_ID) == ctx.launch_id
    s.trained_now += touched
    s.kept += status == FINISHED and not touched
    s.retried += row["attempts"] > 1
    return row


def _count(s: LaunchSummary, p: GridPoint, r) -> None:
    status = r.info.status if r is not None else "MISSING"
    if status == FINISHED:
        s.finished += 1
    elif status == "MISSING":
        s.missing += 1
    elif status == "KILLED":
        s.killed += 1
    else:
        s.failed += 1
        s.failed_trials.append(f"{p.config.describe()}: {r.data.tags.get(ERROR, status)}")


def write_results_csv(path: Path, rows: list[dict]) -> Path:
    """The rows as CSV, every column any row has (in first-seen order)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    cols = list(rows[0]) if rows else []
    for r in rows:
        cols += [k for k in r if k not in cols]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)
    return path


def format_summary(s: LaunchSummary, space_ref: str) -> str:
    """The launch's last words: outcome, failures, where the results are, what to run next.

    Follow-up commands carry `--tracking-uri`/`--experiment` only where they would not
    resolve to the same store and experiment by default from this directory and environment.
    """
    # Two lines, not one: the summary stays within the 120 columns of the stats report.
    lines = ["", f"== sweep {s.name!r}: {s.finished}/{s.total} trials finished "
                 f"({s.kept} kept from earlier launches); {s.trained_now} trained in this launch; "
                 f"{s.seconds:.0f} s ==",
             f"  {s.failed} failed; " + (f"{s.killed} interrupted; " if s.killed else "")
             + f"{s.missing} not run; {s.retried} retried (ran more than once)"]
    for f in s.failed_trials[:10]:
        lines.append(f"  failed: {f}")
    if len(s.failed_trials) > 10:
        lines.append(f"  ... and {len(s.failed_trials) - 10} more failed (see the results table)")
    if s.tune_errors and not s.failed_trials:
        lines.append(f"  Ray Tune errors ({len(s.tune_errors)}), first: {s.tune_errors[0]}")
    if len(s.platforms) > 1:  # pairs across platforms are dropped by stats (platform_mismatch)
        lines.append(f"  warning: the trials ran on {len(s.platforms)} platforms; `stats` pairs "
                     f"trials only on one: " + "; ".join(f"{k} ({v} trials)"
                                                         for k, v in s.platforms.items()))
    if s.orphans_reconciled:
        lines.append(f"  reconciled {s.orphans_reconciled} orphaned RUNNING run(s) to KILLED")
    if s.results_csv:
        lines.append(f"  results:    {s.results_csv}")
    else:
        lines.append(f"  Ray Tune:   {s.experiment_path}")
    lines.append(f"  MLflow:     {s.tracking_uri}  experiment {s.experiment!r}")
    lines.append(f"  parent run: {s.parent_run_id}")
    uri_arg = "" if s.tracking_uri == resolve_tracking_uri() else f" --tracking-uri {s.tracking_uri}"
    exp_arg = "" if s.experiment == DEFAULT_EXPERIMENT else f" --experiment {s.experiment}"
    lines.append(f"  statistics: fusion-sweep stats --sweep {s.name}{uri_arg}{exp_arg}")
    if is_local_store(s.tracking_uri):
        store_arg = "" if s.tracking_uri == default_ui_store() else \
            f" --backend-store-uri {s.tracking_uri}"
        lines.append(f"  browse:     fusion-sweep ui{store_arg}{exp_arg}   (MLflow UI on "
                     f"127.0.0.1, opened on the trial runs)")
    else:
        lines.append(f"  browse:     {s.tracking_uri} (through `ray attach cluster.yaml -p 5000` or an "
                     f"SSH tunnel when it runs on a cluster head)")
    if not s.ok:
        storage = s.experiment_path.rstrip("/").rsplit("/", 1)[0] if s.experiment_path else ""
        st_arg = "" if not storage or storage == resolve_storage(None) else f" --storage {storage}"
        lines.append(f"  resume:     fusion-sweep launch {space_ref} --name {s.name}{uri_arg}"
                     f"{exp_arg}{st_arg}  (finished trials are kept)")
    return "\n".join(lines)

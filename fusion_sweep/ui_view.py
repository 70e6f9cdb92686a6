"""The MLflow UI's saved view of a sweep's trials: layout, filter, order, column widths (pixels),
and the URL `fusion-sweep ui` prints."""
from __future__ import annotations

import json
import math
import os
import time
from statistics import median as _median
from typing import Any, Iterable, Mapping

from fusion_sweep import mlflow_query
from fusion_sweep.mlflow_query import retry
from fusion_sweep.schema import (DEFAULT_EXPERIMENT, IDENTITY_FIELDS, ROLE, SWEEP, UI_ORDER,
                                 default_tracking_uri, sqlite_path)
from fusion_sweep.store import client as mlflow_client
from fusion_sweep.sweep_list import sweep_runs
from fusion_sweep.errors import UserError, choices, did_you_mean

# ------------------------------------------------------------------ the MLflow UI
# What `fusion-sweep ui` serves and where it lands. Measured on MLflow 3.17 (its JS bundle,
# mlflow/server/js/build): the experiment page picks its GenAI ("Overview": traces, latency,
# tokens) or model-training ("Runs") layout from the *workflow type* — the `workflowType` URL
# query parameter (`genai` | `machine_learning`), else the browser's localStorage, default
# `genai` — not from the experiment tag `mlflow.experimentKind` (the tag is read only when
# that switch is off, which 3.17 hard-codes on). So the printed URL carries
# `workflowType=machine_learning`; the tag is still set for MLflow versions that read it.
# A URL without the parameter (the plain root, a run's own page) would open the GenAI layout;
# `fusion-sweep ui` therefore serves mlflow behind fusion_sweep.ui_proxy, which stores the
# training layout in the browser's localStorage and sends a bare root to the trials view.
# Columns, filter, sort and grouping are UI state, not URL parameters: MLflow keeps shareable
# views as experiment tags `mlflow.sharedViewState.<id>` and opens one with
# `?viewStateShareKey=<id>`; `mark_training_experiment` writes such a view of the trials.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
TRAINING_KIND = "custom_model_development"  # the other value: genai_development
SHARED_VIEW_PREFIX = "mlflow.sharedViewState."
TRIALS_VIEW_ID = "fusion-sweep-trials"
TRIALS_VIEW_NAME = "fusion-sweep: trials by sweep"
UI_COLUMNS_METRICS = ("test_acc", "best_val_acc", "test_macro_f1", "train_seconds")


def default_ui_store() -> str:
    """What `fusion-sweep ui` serves without --backend-store-uri: $MLFLOW_TRACKING_URI when it
    names a sqlite store (a tracking *server* is browsed directly), else ./mlflow.db."""
    env = os.environ.get("MLFLOW_TRACKING_URI", "")
    return env if env.startswith("sqlite:") else default_tracking_uri()


def view_columns() -> list[str]:
    """The runs table's columns after the run name: identity params, then final metrics."""
    return ([f"params.`{k}`" for k in IDENTITY_FIELDS]
            + [f"metrics.`{m}`" for m in UI_COLUMNS_METRICS])


RUN_NAME_COLUMN = "tags.`mlflow.runName`"
# Pixels per character of the runs table's font, and room for the header's sort/menu icons.
_CHAR_PX, _PAD_PX, _MIN_PX, _MAX_PX = 8, 44, 70, 440


def column_widths(values: Mapping[str, Iterable[str]] | None = None) -> dict[str, int]:
    """A width for every view column: wide enough for its header and for every value given
    (column -> the strings it shows), so no identity value is cut ('con…')."""
    out = {}
    for col in [RUN_NAME_COLUMN, *view_columns()]:
        name = "Run Name" if col == RUN_NAME_COLUMN else col.split("`")[1]
        longest = max([len(name), *(len(str(v)) for v in (values or {}).get(col, ()))])
        out[col] = min(_MAX_PX, max(_MIN_PX, _CHAR_PX * longest + _PAD_PX))
    return out


def trials_view_state(sweep: str | None = None,
                      widths: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The runs-table view `fusion-sweep ui` opens: one sweep's trial runs (every trial
    without `sweep`), sorted short -> long regime, then variant, then seed (the UI_ORDER
    tag), identity params and the final metrics as columns, one width per column. No
    grouping: a group row's aggregates (mean test_acc over every trial, mean seed) mean
    nothing. Keys are MLflow 3.17's runs-page UI state and search facets."""
    cols = view_columns()
    where = mlflow_query.filter_string(tags={ROLE: "trial", **({SWEEP: sweep} if sweep else {})})
    return {
        "searchFilter": where,
        "orderByKey": f"tags.`{UI_ORDER}`", "orderByAsc": True,
        "startTime": "ALL", "lifecycleFilter": "Active", "modelVersionFilter": "All Runs",
        "datasetsFilter": [],
        "selectedColumns": cols,
        # The grid puts metric columns before params unless told; Created/Duration go last.
        "columnOrder": [RUN_NAME_COLUMN, *cols, "attributes.start_time", "duration"],
        "columnWidths": dict(widths or column_widths()),
    }


def order_trials(client, experiment_id: str, sweep: str) -> dict[str, list[str]]:
    """Tag each trial run of `sweep` with UI_ORDER (regime short -> long by the median
    token length it logged, else by dataset name; then encoder/pe/fusion; then seed), and
    return the identity values shown (view column -> strings), for the column widths."""
    runs = mlflow_query.search_runs(client, [experiment_id], tags={ROLE: "trial", SWEEP: sweep})
    tokens: dict[str, list[float]] = {}
    for r in runs:
        t = r.data.metrics.get("median_tokens")
        if t is not None and math.isfinite(t):
            tokens.setdefault(r.data.params.get("dataset", ""), []).append(t)
    datasets = {r.data.params.get("dataset", "") for r in runs}
    ranked = sorted(datasets, key=lambda d: (_median(tokens.get(d) or [math.inf]), d))
    rank = {d: i for i, d in enumerate(ranked)}
    shown: dict[str, list[str]] = {}
    for r in runs:
        p = r.data.params
        variant = "/".join(p.get(k, "") for k in IDENTITY_FIELDS if k not in ("dataset", "seed"))
        seed = p.get("seed", "")
        order = f"{rank[p.get('dataset', '')]:02d}/{variant}/{seed.zfill(6)}"
        if r.data.tags.get(UI_ORDER) != order:
            retry(client.set_tag, r.info.run_id, UI_ORDER, order)
        for k in IDENTITY_FIELDS:
            shown.setdefault(f"params.`{k}`", []).append(p.get(k, ""))
        shown.setdefault(RUN_NAME_COLUMN, []).append(r.info.run_name or "")
    return shown



def mark_training_experiment(client, experiment_id: str, sweep: str | None = None,
                             widths: Mapping[str, int] | None = None) -> bool:
    """Mark an experiment as model training for the MLflow UI and (re)write the trials view.

    Sets `mlflow.experimentKind=custom_model_development` and the experiment tag
    `mlflow.sharedViewState.fusion-sweep-trials` (a saved view, listed under "Views" on the
    Runs page). Idempotent: writes only what differs. Returns True when something was written.
    Call where the experiment is created (SweepTracker.ensure_experiment) and before serving.
    """
    exp = client.get_experiment(experiment_id)
    tags = dict(exp.tags or {})
    wrote = False
    if tags.get(EXPERIMENT_KIND_TAG) != TRAINING_KIND:
        client.set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, TRAINING_KIND)
        wrote = True
    state = json.dumps(trials_view_state(sweep, widths), sort_keys=True)
    key = SHARED_VIEW_PREFIX + TRIALS_VIEW_ID
    try:
        old = json.loads(tags.get(key) or "{}")
    except json.JSONDecodeError:
        old = {}
    if not isinstance(old, dict) or old.get("state") != state or old.get("name") != TRIALS_VIEW_NAME:
        now = int(time.time() * 1000)
        created = old.get("createdAt") if isinstance(old, dict) else None
        client.set_experiment_tag(experiment_id, key, json.dumps({
            "name": TRIALS_VIEW_NAME, "createdAt": created if isinstance(created, int) else now,
            "updatedAt": now, "state": state}))
        wrote = True
    return wrote


def ui_url(base: str, experiment_id: str | None = None) -> str:
    """The page `fusion-sweep ui` prints: the experiment's Runs tab in the model-training
    layout with the trials view, e.g.
    http://127.0.0.1:5000/#/experiments/1/runs?workflowType=machine_learning&viewStateShareKey=fusion-sweep-trials;
    without an experiment, the experiment list in that layout."""
    base = base.rstrip("/")
    if experiment_id is None:
        return f"{base}/#/experiments?workflowType=machine_learning"
    return (f"{base}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"
            f"&viewStateShareKey={TRIALS_VIEW_ID}")


def prepare_ui_experiment(store: str, experiment: str = DEFAULT_EXPERIMENT,
                          sweep: str | None = None) -> tuple[str | None, str | None]:
    """(experiment id, sweep) the UI opens on: `experiment` in `store` marked for the UI
    (`mark_training_experiment`), its trials tagged in order (`order_trials`), the view
    filtered to `sweep` (default: the newest sweep). (None, None) when the store or the
    experiment does not exist yet (never creates either); ValueError for an unknown sweep."""
    db = sqlite_path(store)
    if db is not None and not db.is_file():
        if sweep:
            raise UserError(f"--sweep {sweep}: no store at {db} (no sweep launched here)")
        return None, None
    client = mlflow_client(store)
    exp = client.get_experiment_by_name(experiment)
    if exp is None or exp.lifecycle_stage == "deleted":
        if sweep:
            raise UserError(f"--sweep {sweep}: no experiment {experiment!r} in {store}")
        return None, None
    names = [r.data.tags.get(SWEEP, r.info.run_name) for r in sweep_runs(client, exp.experiment_id)]
    if sweep is not None and sweep not in names:
        raise UserError(f"--sweep {sweep}: no such sweep{did_you_mean(sweep, names)} in "
                        f"experiment {experiment!r} of {store}; sweeps: {choices(names)} "
                        f"(`fusion-sweep sweeps` lists them)")
    sweep = sweep or (names[0] if names else None)
    shown = retry(order_trials, client, exp.experiment_id, sweep) if sweep else {}
    retry(mark_training_experiment, client, exp.experiment_id, sweep, column_widths(shown))
    return exp.experiment_id, sweep


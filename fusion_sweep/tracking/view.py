"""The MLflow UI's saved view of a sweep's trials: layout, filter, order, column widths (pixels),
and the URL `fusion-sweep ui` prints."""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from statistics import median as _median
from typing import Any, Iterable, Mapping

from fusion_sweep import mlflow_query
from fusion_sweep.mlflow_query import retry
from fusion_sweep.schema import (DEFAULT_ENCODER, DEFAULT_EXPERIMENT, IDENTITY_FIELDS, ROLE, SWEEP,
                                 UI_ORDER, VARIANT_FIELDS,
                                 default_tracking_uri, fusion_color, sqlite_path)
from fusion_sweep.tracking.store import client as mlflow_client
from fusion_sweep.tracking.sweep_list import sweep_runs
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
# `fusion-sweep ui` therefore serves mlflow behind fusion_sweep.ui.proxy, which stores the
# training layout in the browser's localStorage and sends a bare root to the trials view.
# Columns, filter, sort and grouping are UI state, not URL parameters: MLflow keeps shareable
# views as experiment tags `mlflow.sharedViewState.<id>` and opens one with
# `?viewStateShareKey=<id>`; `mark_training_experiment` writes such a view of the trials.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
TRAINING_KIND = "custom_model_development"  # the other value: genai_development
SHARED_VIEW_PREFIX = "mlflow.sharedViewState."
TRIALS_VIEW_ID = "fusion-sweep-trials"
TRIALS_VIEW_NAME = "fusion-sweep: trials by dataset and variant"
UI_COLUMNS_METRICS = ("test_acc", "best_val_acc", "test_macro_f1", "train_seconds")
# MLflow 3.17 (mlflow/server/js/src/experiment-tracking): a run's colour is its tag
# `mlflow.runColor` (MLFLOW_RUN_COLOR_TAG); a group row has no tags, its colour is read from
# the browser's localStorage `experimentRunColors` (group id -> colour), which ui_proxy writes.
RUN_COLOR_TAG = "mlflow.runColor"
GROUP_COLORS_KEY = "experimentRunColors"
# The runs grid's column ids (canonical sort keys): the run name is an attribute column, the
# "Created" column is the field runDateAndNestInfo. Widths apply only to columns listed in
# columnOrder (the grid's applyColumnState), so both are listed there.
RUN_NAME_COLUMN = "attributes.`Run Name`"
CREATED_COLUMN = "runDateAndNestInfo"
CREATED_PX = 130
# The pinned charts' section (first: sections other than MLflow's own two sort before them).
RESULT_SECTION = "fusion-sweep-result"
# Pixels per character of the runs table's font, and room for the header's sort/menu icons.
_CHAR_PX, _PAD_PX, _MIN_PX, _MAX_PX = 8, 44, 70, 440


def default_ui_store() -> str:
    """What `fusion-sweep ui` serves without --backend-store-uri: $MLFLOW_TRACKING_URI when it
    names a sqlite store (a tracking *server* is browsed directly), else ./mlflow.db."""
    env = os.environ.get("MLFLOW_TRACKING_URI", "")
    return env if env.startswith("sqlite:") else default_tracking_uri()


def fusion_colors() -> dict[str, str]:
    """One colour per registered fusion (schema.fusion_color by registry order), the same in
    every sweep and in `stats`' figures."""
    from fusion_sweep.trial.models.fusion import FUSIONS  # torch: only where the UI is prepared

    return {name: fusion_color(i) for i, name in enumerate(FUSIONS)}


@dataclass(frozen=True)
class TrialsLayout:
    """What the trials view shows of one sweep: the identity params as columns (the encoder
    only when a trial ran a non-default one), the params rows are grouped by (dataset, the
    variant fields that vary, fusion), and each column's width in pixels."""

    identity: tuple[str, ...] = ("dataset", "pe", "fusion", "seed")
    group_by: tuple[str, ...] = ("dataset", "fusion")
    widths: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        errs = [f"{f!r} is not an identity field" for f in (*self.identity, *self.group_by)
                if f not in IDENTITY_FIELDS]
        errs += [f"grouped by {f!r}, which is not a column" for f in self.group_by
                 if f not in self.identity]
        if errs:
            raise ValueError("TrialsLayout: " + "; ".join(errs))

    def columns(self) -> list[str]:
        """The runs table's columns after the run name: identity params, then final metrics."""
        return ([f"params.`{k}`" for k in self.identity]
                + [f"metrics.`{m}`" for m in UI_COLUMNS_METRICS])


def view_columns() -> list[str]:
    """The default layout's columns (dataset, pe, fusion, seed, the final metrics)."""
    return TrialsLayout().columns()


def column_widths(values: Mapping[str, Iterable[str]] | None = None,
                  layout: TrialsLayout | None = None) -> dict[str, int]:
    """A width for every view column: wide enough for its header and for every value given
    (column -> the strings it shows, group names included for the run name), so no identity
    value is cut ('con…')."""
    out = {}
    for col in [RUN_NAME_COLUMN, *(layout or TrialsLayout()).columns()]:
        name = "Run Name" if col == RUN_NAME_COLUMN else col.split("`")[1]
        longest = max([len(name), *(len(str(v)) for v in (values or {}).get(col, ()))])
        out[col] = min(_MAX_PX, max(_MIN_PX, _CHAR_PX * longest + _PAD_PX))
    return out


def group_id(values: Mapping[str, str]) -> str:
    """MLflow's id of the group row of these param values (createGroupId in
    experimentPage.group-row-utils: `param.<name>.<value>` joined by commas), the key of its
    colour in GROUP_COLORS_KEY."""
    return ",".join(f"param.{k}.{v or 'null'}" for k, v in values.items())


def group_name(values: Mapping[str, str]) -> str:
    """The group row's name as MLflow shows it in the Run Name column."""
    if len(values) == 1:
        return next(iter(values.values())) or "(none)"
    return ", ".join(f"{k}: {v or '(none)'}" for k, v in values.items())


def _charts() -> dict[str, Any]:
    """The chart view: test_acc first (a bar per group, the mean over its seeds), then the
    validation accuracy per epoch, in a section of their own before MLflow's generated ones
    (every other metric, added by the app as it finds them)."""
    common = {"deleted": False, "isGenerated": False, "metricSectionId": RESULT_SECTION,
              "runsCountToCompare": 100}
    bar = {**common, "uuid": "fusion-sweep-test-acc", "type": "BAR", "metricKey": "test_acc",
           "displayName": "test_acc (mean over seeds)"}
    line = {**common, "uuid": "fusion-sweep-val-acc", "type": "LINE", "metricKey": "val_acc",
            "selectedMetricKeys": ["val_acc"], "lineSmoothness": 0, "xAxisKey": "step",
            "xAxisScaleType": "linear", "scaleType": "linear", "selectedXAxisMetricKey": "",
            "useGlobalXaxisKey": True, "useGlobalLineSmoothing": True, "yAxisKey": "metric",
            "yAxisExpressions": [], "ignoreOutliers": False,
            "displayName": "val_acc by epoch"}
    section = {"uuid": RESULT_SECTION, "name": "Result", "display": True, "isReordered": True,
               "deleted": False, "isGenerated": False}
    generated = [{"uuid": f"fusion-sweep-{n.split()[0].lower()}", "name": n, "display": True,
                  "isReordered": False, "deleted": False, "isGenerated": True}
                 for n in ("Model metrics", "System metrics")]
    return {"compareRunCharts": [bar, line], "compareRunSections": [section, *generated],
            "isAccordionReordered": False, "hideEmptyCharts": True}


def trials_view_state(sweep: str | None = None, widths: Mapping[str, int] | None = None,
                      layout: TrialsLayout | None = None) -> dict[str, Any]:
    """The runs-page view `fusion-sweep ui` opens: one sweep's trial runs (every trial
    without `sweep`), sorted short -> long regime, then variant, then seed (the UI_ORDER
    tag), grouped by dataset and variant (a group row: the mean over its seeds), every group
    shown in the charts, the test_acc chart first; identity params and the final metrics as
    columns, one width per column. Keys are MLflow 3.17's runs-page UI state and search
    facets (ExperimentPageUIState, EXPERIMENT_PAGE_QUERY_PARAM_KEYS)."""
    layout = layout or TrialsLayout()
    cols = layout.columns()
    where = mlflow_query.filter_string(tags={ROLE: "trial", **({SWEEP: sweep} if sweep else {})})
    sized = {CREATED_COLUMN: CREATED_PX, **column_widths(layout=layout),
             **(widths or layout.widths)}
    return {
        "searchFilter": where,
        "orderByKey": f"tags.`{UI_ORDER}`", "orderByAsc": True,
        "startTime": "ALL", "lifecycleFilter": "Active", "modelVersionFilter": "All Runs",
        "datasetsFilter": [],
        "selectedColumns": cols,
        # The grid puts metric columns before params unless told.
        "columnOrder": [RUN_NAME_COLUMN, CREATED_COLUMN, *cols],
        "columnWidths": sized,
        "groupBy": {"aggregateFunction": "average",
                    "groupByKeys": [{"mode": "param", "groupByData": k} for k in layout.group_by]},
        "groupsExpanded": {}, "useGroupedValuesInCharts": True,
        "runsHiddenMode": "SHOW_ALL",  # MLflow's default charts only the first 10 rows
        **_charts(),
    }


def _layout_of(params: list[Mapping[str, str]]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(identity columns, group-by fields) for trials with these params."""
    varies = {k for k in IDENTITY_FIELDS if len({p.get(k, "") for p in params}) > 1}
    encoder = any(p.get("encoder", DEFAULT_ENCODER) != DEFAULT_ENCODER for p in params)
    identity = tuple(k for k in IDENTITY_FIELDS if k != "encoder" or encoder or "encoder" in varies)
    group = tuple(k for k in IDENTITY_FIELDS
                  if k in ("dataset", "fusion") or (k in VARIANT_FIELDS and k in varies))
    return identity, group


def order_trials(client, experiment_id: str, sweep: str) -> tuple[TrialsLayout, dict[str, str]]:
    """Tag each trial run of `sweep` with UI_ORDER (regime short -> long by the median
    token length it logged, else by dataset name; then encoder/pe/fusion; then seed) and its
    fusion's colour (RUN_COLOR_TAG); return the view's layout (columns sized to the values
    shown) and each group row's colour (group id -> colour)."""
    from mlflow.entities import RunTag

    runs = mlflow_query.search_runs(client, [experiment_id], tags={ROLE: "trial", SWEEP: sweep})
    tokens: dict[str, list[float]] = {}
    for r in runs:
        t = r.data.metrics.get("median_tokens")
        if t is not None and math.isfinite(t):
            tokens.setdefault(r.data.params.get("dataset", ""), []).append(t)
    datasets = {r.data.params.get("dataset", "") for r in runs}
    ranked = sorted(datasets, key=lambda d: (_median(tokens.get(d) or [math.inf]), d))
    rank = {d: i for i, d in enumerate(ranked)}
    identity, group_by = _layout_of([r.data.params for r in runs])
    colors = fusion_colors() if runs else {}
    shown: dict[str, list[str]] = {}
    groups: dict[str, str] = {}
    for r in runs:
        p = r.data.params
        variant = "/".join(p.get(k, "") for k in IDENTITY_FIELDS if k not in ("dataset", "seed"))
        want = {UI_ORDER: f"{rank[p.get('dataset', '')]:02d}/{variant}/{p.get('seed', '').zfill(6)}"}
        if p.get("fusion") in colors:
            want[RUN_COLOR_TAG] = colors[p["fusion"]]
        tags = [RunTag(k, v) for k, v in want.items() if r.data.tags.get(k) != v]
        if tags:
            retry(client.log_batch, r.info.run_id, tags=tags)
        for k in identity:
            shown.setdefault(f"params.`{k}`", []).append(p.get(k, ""))
        values = {k: p.get(k, "") for k in group_by}
        shown.setdefault(RUN_NAME_COLUMN, []).extend([r.info.run_name or "", group_name(values)])
        if RUN_COLOR_TAG in want:
            groups[group_id(values)] = want[RUN_COLOR_TAG]
    layout = TrialsLayout(identity, group_by)
    return TrialsLayout(identity, group_by, column_widths(shown, layout)), groups


def mark_training_experiment(client, experiment_id: str, sweep: str | None = None,
                             layout: TrialsLayout | None = None) -> bool:
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
    state = json.dumps(trials_view_state(sweep, layout=layout), sort_keys=True)
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


@dataclass(frozen=True)
class Landing:
    """Where `fusion-sweep ui` opens: the experiment (None: the experiment list), the sweep
    whose trials the view shows (None: every trial), and the group rows' colours (group id ->
    colour) the browser is given."""

    experiment_id: str | None = None
    sweep: str | None = None
    group_colors: Mapping[str, str] = field(default_factory=dict)


def prepare_ui_experiment(store: str, experiment: str = DEFAULT_EXPERIMENT,
                          sweep: str | None = None) -> Landing:
    """Where the UI opens: `experiment` in `store` marked for the UI
    (`mark_training_experiment`), its trials tagged in order and colour (`order_trials`), the
    view filtered to `sweep` (default: the newest sweep). An empty Landing when the store or
    the experiment does not exist yet (never creates either); UserError for an unknown sweep."""
    db = sqlite_path(store)
    if db is not None and not db.is_file():
        if sweep:
            raise UserError(f"--sweep {sweep}: no store at {db} (no sweep launched here)")
        return Landing()
    client = mlflow_client(store)
    exp = client.get_experiment_by_name(experiment)
    if exp is None or exp.lifecycle_stage == "deleted":
        if sweep:
            raise UserError(f"--sweep {sweep}: no experiment {experiment!r} in {store}")
        return Landing()
    names = [r.data.tags.get(SWEEP, r.info.run_name) for r in sweep_runs(client, exp.experiment_id)]
    if sweep is not None and sweep not in names:
        raise UserError(f"--sweep {sweep}: no such sweep{did_you_mean(sweep, names)} in "
                        f"experiment {experiment!r} of {store}; sweeps: {choices(names)} "
                        f"(`fusion-sweep sweeps` lists them)")
    sweep = sweep or (names[0] if names else None)
    layout, colors = (retry(order_trials, client, exp.experiment_id, sweep) if sweep
                      else (TrialsLayout(), {}))
    retry(mark_training_experiment, client, exp.experiment_id, sweep, layout)
    return Landing(exp.experiment_id, sweep, colors)

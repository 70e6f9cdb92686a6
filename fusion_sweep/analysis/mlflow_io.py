"""MLflow input (a sweep's trial runs -> tidy table) and output (`stats --log`: the report on
the sweep's parent run).

mlflow is imported inside these functions only, so `import fusion_sweep.analysis` stays light
and the statistics run where mlflow is not installed. Runs are searched and experiments looked
up through :mod:`fusion_sweep.mlflow_query` (filter literals, paging, retries), like the writer.

Tag schema written by the sweep layer; every name comes from :mod:`fusion_sweep.schema`:
- parent run per sweep: ``fusion_sweep.role=sweep``, ``fusion_sweep.sweep=<name>``,
  ``fusion_sweep.code_fingerprint`` (the latest launch's code); params ``baseline``,
  ``metric``, ``equivalence_margin`` (number, per-dataset dict or null) and ``directions``
  (metric -> higher|lower), JSON-encoded (``schema.encode_param``; older launches logged
  plain strings or ``str(dict)``, both still read);
- child run per trial: ``fusion_sweep.role=trial``, ``fusion_sweep.sweep=<name>``,
  ``mlflow.parentRunId``, ``fusion_sweep.trial_key``, ``fusion_sweep.code_fingerprint``,
  ``fusion_sweep.identity`` (JSON of dataset, encoder, pe, fusion, seed; `encoder` is the
  encoder VARIANT label such as ``ressformer-no-asam``), ``fp.split``, ``fp.batch_order``,
  ``fp.shared_init``, ``fp.dropout``, ``fp.encoder_init``; params ``dataset, pe, fusion,
  seed, encoder`` (+ hyperparameters; the ``encoder`` param is the registry name); final
  metrics ``test_acc, best_val_acc, ..., flops_per_token, median_tokens, num_classes``.

The identity comes from the tag when a run has it, else from the params; runs logged before
the encoder axis have neither the tag nor an ``encoder`` param and read as ``standard``.
"""
from __future__ import annotations

import ast
import json
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping

import pandas as pd
from fusion_sweep.errors import choices, did_you_mean
from fusion_sweep.schema import (
    ADAPTIVE, BASELINE_PARAM, CODE_FINGERPRINT, COMPARISON_FAMILY, DIRECTIONS_PARAM, MARGIN_PARAM,
    METRIC_PARAM, DEFAULT_EXPERIMENT, FINGERPRINT_TAGS, IDENTITY_FIELDS, IDENTITY_TAG,
    FACT_COLUMNS, MLFLOW_NOTE,
    PARENT, REPORT_ARTIFACT_DIR, REPORT_TAG, ROLE, SWEEP, TRIAL_KEY, decode_param, is_server,
    resolve_tracking_uri,
    run_of_key, server_unreachable, sqlite_path,
)
from fusion_sweep.mlflow_query import retry, search_runs
from fusion_sweep.schema import (CODE_COMPONENTS, CODE_COMPONENTS_COLUMN, SUPERSEDED,
                                 SUPERSEDED_COLUMN)
from fusion_sweep.schema import (KNOWN_DATASETS, KNOWN_FUSIONS, PLATFORM_LABEL_COLUMN,
                                 platform_from_tags,
                                 platform_label)

from fusion_sweep.analysis.load import rows_to_frame
from fusion_sweep.analysis.sections import Source
from fusion_sweep.analysis.metrics import check_direction_value
from fusion_sweep.analysis.schema import DEFAULT_ENCODER, SUPPORT_STATES, VERDICTS, AnalysisError

# Identity fields every trial run must carry (the encoder defaults to the standard one).
REQUIRED_IDENTITY = tuple(k for k in IDENTITY_FIELDS if k != "encoder")


def _client(tracking_uri: str | None) -> tuple[Any, str]:
    uri = resolve_tracking_uri(tracking_uri)
    db = sqlite_path(uri)
    if db is None and not is_server(uri):  # mlflow: a traceback
        raise AnalysisError(f"tracking URI {uri!r}: unsupported; use an http(s):// MLflow "
                            f"server or a sqlite:/// store, or give a results file with --results")
    if db is not None:
        if not db.exists():  # mlflow would silently create an empty store
            raise AnalysisError(
                f"no MLflow store at {db}; pass --tracking-uri, set MLFLOW_TRACKING_URI, "
                "or give a results file with --results")
    else:
        reason = server_unreachable(uri)
        if reason is not None:
            raise AnalysisError(
                f"MLflow tracking server {uri} is not reachable ({reason}); "
                "start it, fix --tracking-uri / MLFLOW_TRACKING_URI, or give a results file "
                "with --results")
    from mlflow.tracking import MlflowClient  # lazy: see module docstring
    return MlflowClient(tracking_uri=uri), uri


def _search_all(client: Any, exp_id: str, **match: Any) -> list:
    """Every active run with the tag/param values in `match` (`tags=`, `params=`), newest
    first, across pages, each page retried (`mlflow_query.search_runs` writes the filter)."""
    return search_runs(client, [exp_id], order_by=["attributes.start_time DESC"], **match)


def find_sweep(client: Any, experiment: str, sweep: str | None) -> tuple[Any, Any]:
    """(experiment, parent run) for --sweep NAME, or the latest sweep when None."""
    exp = retry(client.get_experiment_by_name, experiment)
    if exp is None:
        names = sorted(e.name for e in client.search_experiments())
        raise AnalysisError(f"unknown MLflow experiment {experiment!r}"
                            f"{did_you_mean(experiment, names)}; experiments present: "
                            f"{choices(names)}")
    # Filter by role in MLflow, by sweep name in Python (names may contain quotes).
    parents = _search_all(client, exp.experiment_id, tags={ROLE: "sweep"})
    if sweep is not None:
        matching = [r for r in parents if r.data.tags.get(SWEEP) == sweep]
        if not matching:
            names = sorted({r.data.tags.get(SWEEP, "?") for r in parents})
            raise AnalysisError(f"unknown --sweep {sweep!r} in experiment {experiment!r}"
                                f"{did_you_mean(sweep, names)}; sweeps present: {choices(names)}")
        parents = matching
    if not parents:
        raise AnalysisError(f"no sweep parent run (tag {ROLE}=sweep) in MLflow experiment "
                            f"{experiment!r}; run `fusion-sweep launch` first or pass --results")
    return exp, parents[0]  # newest first


def sweeps_with_dataset(tracking_uri: str | None, experiment: str | None,
                        dataset: str) -> list[str]:
    """Names of the sweeps in the experiment that have a trial run on `dataset`, sorted."""
    client, _ = _client(tracking_uri)
    exp = retry(client.get_experiment_by_name, experiment or DEFAULT_EXPERIMENT)
    if exp is None:
        return []
    runs = _search_all(client, exp.experiment_id, tags={ROLE: "trial"},
                       params={"dataset": dataset})
    return sorted({r.data.tags[SWEEP] for r in runs if r.data.tags.get(SWEEP)})


def identity(params: dict, tags: dict) -> dict:
    """The trial's identity: the JSON tag when present (and readable), else the params;
    no encoder anywhere -> the standard encoder (runs logged before the encoder axis)."""
    try:
        tagged = json.loads(tags[IDENTITY_TAG]) if IDENTITY_TAG in tags else None
    except (json.JSONDecodeError, TypeError):
        tagged = None
    source = tagged if isinstance(tagged, dict) else params
    out = {k: source.get(k) for k in IDENTITY_FIELDS}
    if out.get("encoder") in (None, ""):
        out.update(encoder=DEFAULT_ENCODER)
    return {k: (str(v) if v is not None and k != "seed" else v) for k, v in out.items()}


def trial_row(run: Any) -> dict:
    """One tidy row from a trial run: identity, all final metrics, fingerprints."""
    p, tags = run.data.params, run.data.tags
    row: dict = identity(p, tags)
    row.update(run.data.metrics)  # includes num_classes and median_tokens
    row.update({"status": run.info.status, "run_id": run.info.run_id,
                "trial_key": tags.get(TRIAL_KEY),
                "code_fingerprint": tags.get(CODE_FINGERPRINT),
                CODE_COMPONENTS_COLUMN: tags.get(CODE_COMPONENTS),
                SUPERSEDED_COLUMN: tags.get(SUPERSEDED)})
    row.update({f"fp_{name}": tags.get(tag) for name, tag in FINGERPRINT_TAGS.items()})
    row.update({col: tags.get(tag) for tag, col in FACT_COLUMNS.items()})
    row[PLATFORM_LABEL_COLUMN] = platform_label(platform_from_tags(tags)) or None
    return row


def runs_of_keys(runs: list[Any]) -> list[Any]:
    """One run per trial key, chosen by the resume rule's `schema.run_of_key` (the oldest
    FINISHED run, else the newest), so `stats` reads the runs `launch` resumed from and
    counted; runs without a key are kept as they are."""
    by_key: dict[str, list[Any]] = {}
    for r in sorted(runs, key=lambda r: r.info.start_time or 0):  # oldest first
        by_key.setdefault(r.data.tags.get(TRIAL_KEY) or r.info.run_id, []).append(r)
    return [run_of_key(rs, lambda r: r.info.status) for rs in by_key.values()]


# The parent run's optional tags: source field -> tag.
_OPTIONAL_TAGS = {"known_datasets": KNOWN_DATASETS, "known_fusions": KNOWN_FUSIONS,
                  "adaptive": ADAPTIVE,
                  "comparison_family": COMPARISON_FAMILY}


def load_sweep(
    tracking_uri: str | None, experiment: str | None, sweep: str | None,
) -> tuple[pd.DataFrame, Source, list[dict]]:
    """Read a sweep's trial runs -> (tidy table, source description, loader warnings)."""
    client, uri = _client(tracking_uri)
    experiment = experiment or DEFAULT_EXPERIMENT
    exp, parent = find_sweep(client, experiment, sweep)
    children = _search_all(client, exp.experiment_id, tags={PARENT: parent.info.run_id})
    trials = runs_of_keys([r for r in children if r.data.tags.get(ROLE) == "trial"])
    rows = [trial_row(r) for r in trials]
    complete = [r for r in rows if all(r[k] is not None for k in REQUIRED_IDENTITY)]
    warnings = []
    if len(complete) < len(rows):
        warnings.append({"code": "runs_without_keys",
                         "message": f"{len(rows) - len(complete)} trial runs lack a "
                                    f"{'/'.join(REQUIRED_IDENTITY)} param and were skipped"})
    name = parent.data.tags.get(SWEEP, "")
    # Optional parent tags: the registry's datasets; --until-decided (seeds chosen
    # adaptively); the multiplicity family fixed at launch.
    tags = parent.data.tags
    source = Source(
        kind="mlflow", tracking_uri=uri, experiment=experiment, sweep=name,
        parent_run_id=parent.info.run_id, experiment_id=exp.experiment_id, n_runs=len(trials),
        space=space_choices(parent.data.params), code_fingerprint=tags.get(CODE_FINGERPRINT),
        **{key: decode_param(tags.get(tag)) for key, tag in _OPTIONAL_TAGS.items()
           if tags.get(tag)})
    df = rows_to_frame(complete, f"MLflow sweep {name!r} (experiment {experiment!r}, parent run "
                                 f"{parent.info.run_id})")
    return df, source, warnings


@dataclass(frozen=True)
class SpaceChoices:
    """A sweep's search-space choices (`space_choices`'s dict, `Source.space`) read by
    attribute: each None where the launch logged none; *_error: a malformed logged value,
    an error only where no flag overrides it (cli.settings_from)."""

    baseline: str | None = None
    metric: str | None = None
    margin: float | dict[str, float] | None = None
    directions: dict[str, str] | None = None
    margin_error: str | None = None
    directions_error: str | None = None

    @classmethod
    def of(cls, space: Mapping[str, Any] | None) -> "SpaceChoices":
        return cls(**(space or {}))


def space_choices(params: dict) -> dict:
    """The sweep's baseline / metric / equivalence margin / directions, as `launch` logged
    them: {"baseline", "metric", "margin" (float or {dataset: float}), "directions"}."""
    out: dict = {}
    for k, p in (("baseline", BASELINE_PARAM), ("metric", METRIC_PARAM)):
        v = _decode(params.get(p))
        if v not in (None, ""):
            out[k] = str(v)
    # A malformed value is an error only where no flag overrides it (cli.settings_from).
    try:
        margin = _margin(_decode(params.get(MARGIN_PARAM)))
        if margin is not None:
            out.update(margin=margin)
    except AnalysisError as exc:
        out.update(margin_error=str(exc))
    try:
        raw = params.get(DIRECTIONS_PARAM)
        directions = _directions(_decode(raw), raw)
        if directions:
            out.update(directions=directions)
    except AnalysisError as exc:
        out.update(directions_error=str(exc))
    return out


def _directions(value: Any, raw: str | None) -> dict[str, str] | None:
    if value in (None, "", {}):
        return None
    if not isinstance(value, dict):
        raise AnalysisError(f"sweep param 'directions' must map metric -> higher|lower, got "
                            f"{raw!r}; override it with --direction")
    return {str(m): check_direction_value(str(m), d) for m, d in value.items()}


def _decode(text: str | None) -> Any:
    """JSON (schema.decode_param), else the str(dict)/str(None) of older launches."""
    value = decode_param(text)
    if not isinstance(value, str):
        return value
    if value.strip()[:1] in ("{", "[") or value.strip() == "None":
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return value
    return value


def _margin(value: Any) -> float | dict[str, float] | None:
    """equivalence_margin: a number, a per-dataset dict, or nothing."""
    if value in (None, "", "null"):
        return None
    try:
        if isinstance(value, dict):
            return {str(d): float(m) for d, m in value.items() if m is not None}
        return float(value)
    except (TypeError, ValueError):
        raise AnalysisError(f"sweep param 'equivalence_margin' must be a number or a "
                            f"{{dataset: number}} mapping, got {value!r}; override it with "
                            "--equivalence-margin") from None


def verdict_counts(report: Any) -> dict[str, int]:
    """The verdict metrics `stats --log` sets on the parent run. A fixed-seed sweep: n_<verdict> over the fixed-n
    verdicts on the mean Δ, and win_rate_n_<verdict> over the exact sign test's verdicts. An
    adaptive sweep: n_<decision> over the sequential decisions (its verdicts, on the method's
    estimand), and the fixed-n counts only as descriptive_n_<verdict> /
    descriptive_win_rate_n_<verdict>. :func:`estimand_tags` says which estimand each is on."""
    fixed = pd.Series([c.verdict for c in report.comparisons], dtype=object)
    wins = pd.Series([c.win_verdict for c in report.comparisons], dtype=object)
    name = lambda v: v.replace(" ", "_")  # noqa: E731
    counts = lambda s, prefix: {f"{prefix}n_{name(v)}": int((s == v).sum())  # noqa: E731
                                for v in VERDICTS}
    if report.sequential is None:
        return {**counts(fixed, ""), **counts(wins, "win_rate_")}
    seq = pd.Series([r.decision for r in report.sequential.results], dtype=object)
    return {**counts(seq, ""), **counts(fixed, "descriptive_"),
            **counts(wins, "descriptive_win_rate_")}


def estimand_tags(report: Any) -> dict[str, str]:
    """Tags (on the parent run, with the report) naming the estimand of each family of verdict metrics, so a
    count in MLflow is never read as the other estimand's."""
    mean, win = "mean Δ (paired t / TOST; assumes approximately normal paired Δ)", \
        "win rate P(Δ>0 | Δ≠0) (exact sign test; distribution-free)"
    if report.sequential is None:
        return {"fusion_sweep.estimand.n_": mean, "fusion_sweep.estimand.win_rate_n_": win}
    results = report.sequential.results
    method = results[0].estimand if results else ""
    return {"fusion_sweep.estimand.n_": f"{method} (anytime-valid sequential decision)",
            "fusion_sweep.estimand.descriptive_n_": mean,
            "fusion_sweep.estimand.descriptive_win_rate_n_": win}


def report_metrics(report: Any) -> dict[str, int]:
    """The numbers `stats --log` sets on the parent run: n_comparisons, n_dropped_pairs, the
    verdict counts (`verdict_counts`) and, with --claims, per support state how many claim
    tests say it (n_claims_<state>; descriptive_ after adaptive seeding)."""
    out = {"n_comparisons": len(report.comparisons), "n_dropped_pairs": len(report.dropped),
           **verdict_counts(report)}
    if report.claims is not None:
        support = pd.Series([t.support for t in report.claims.tests], dtype=object)
        prefix = "descriptive_" if report.sequential is not None else ""  # fixed-n tests
        for v in SUPPORT_STATES:  # MLflow metric names allow no parentheses
            out[f"{prefix}n_claims_" + re.sub(r"[^0-9a-z]+", "_", v.lower()).strip("_")] = \
                int((support == v).sum())
    return out


def report_tags(report: Any) -> dict[str, str]:
    """The tags `stats --log` sets on the parent run: where the report is (REPORT_TAG), the
    settings it was computed with (JSON), the estimand of each verdict count, and a line in
    the run's description naming the report (kept beside a launch description)."""
    settings = {k: list(v) if isinstance(v, tuple) else v
                for k, v in asdict(report.settings).items()}
    return {REPORT_TAG: REPORT_PAGE, REPORT_SETTINGS_TAG: json.dumps(settings, default=str),
            **estimand_tags(report)}


# The report's page among the parent run's artifacts, and the description line naming it.
REPORT_PAGE = f"{REPORT_ARTIFACT_DIR}/report.html"
REPORT_SETTINGS_TAG = "fusion_sweep.report_settings"
REPORT_NOTE = (f"Report: Artifacts → {REPORT_PAGE} (the verdicts with every figure; "
               "written by `fusion-sweep stats --log`).")


def note_with_report(note: str | None) -> str:
    """The parent run's description with the report line once, at the end."""
    kept = [line for line in (note or "").splitlines() if not line.startswith("Report: ")]
    return "\n\n".join(p for p in ("\n".join(kept).strip(), REPORT_NOTE) if p)


def experiment_note(note: str | None, source: Source) -> str:
    """The experiment's description (shown above the runs table `fusion-sweep ui` opens)
    with one line per logged sweep linking its report; this sweep's line replaced, every
    other line kept."""
    head = f"Report of sweep `{source.sweep}`"
    link = (f"#/experiments/{source.experiment_id}/runs/{source.parent_run_id}/artifacts/"
            f"{REPORT_PAGE}")
    kept = [line for line in (note or "").splitlines() if not line.startswith(head + ":")]
    line = f"{head}: [{REPORT_PAGE}]({link}) (the verdicts and every figure)"
    return "\n\n".join(p for p in ("\n".join(kept).strip(), line) if p)


def log_report(source: Source, report_dir: str | Path, report: Any) -> str:
    """Attach report_dir to the sweep's parent run under REPORT_ARTIFACT_DIR, replacing the
    report a previous `--log` put there, set the report's tags and metrics on the run and a
    link to it in the experiment's description; returns the parent run's id. No run is
    created."""
    from mlflow.entities import Metric, RunTag
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository
    client, uri = _client(source.tracking_uri)
    rid = source.parent_run_id
    run = retry(client.get_run, rid)
    if retry(client.list_artifacts, rid, REPORT_ARTIFACT_DIR):  # the previous report
        get_artifact_repository(run.info.artifact_uri, tracking_uri=uri).delete_artifacts(
            REPORT_ARTIFACT_DIR)
    client.log_artifacts(rid, str(report_dir), artifact_path=REPORT_ARTIFACT_DIR)
    now = int(time.time() * 1000)
    tags = {**report_tags(report), MLFLOW_NOTE: note_with_report(run.data.tags.get(MLFLOW_NOTE))}
    retry(client.log_batch, rid,
          metrics=[Metric(k, float(v), now, 0) for k, v in report_metrics(report).items()],
          tags=[RunTag(k, v) for k, v in tags.items()])
    exp = retry(client.get_experiment, source.experiment_id)
    retry(client.set_experiment_tag, source.experiment_id, MLFLOW_NOTE,
          experiment_note((exp.tags or {}).get(MLFLOW_NOTE), source))
    return rid

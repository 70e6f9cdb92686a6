"""`fusion-sweep sweeps`: the sweeps of an experiment in a store, with their trial counts."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from fusion_sweep import mlflow_query
from fusion_sweep.schema import CODE_FINGERPRINT, DEFAULT_EXPERIMENT, N_TRIALS, ROLE, SWEEP, sqlite_path
from fusion_sweep.tracking.store import client as mlflow_client

if TYPE_CHECKING:  # pragma: no cover
    from mlflow.entities import Run


def sweep_runs(client, experiment_id: str) -> list["Run"]:
    """The experiment's sweep parent runs, newest first."""
    return mlflow_query.search_runs(client, [experiment_id], tags={ROLE: "sweep"},
                                    order_by=["attributes.start_time DESC"])


def list_sweeps(store: str, experiment: str = DEFAULT_EXPERIMENT) -> list[dict[str, Any]]:
    """Every sweep of `experiment` in `store`, newest first: name, state, trial counts by
    status (and the planned total), code fingerprint, start and end (UTC, ISO); [] when
    the store or the experiment does not exist."""
    db = sqlite_path(store)
    if db is not None and not db.is_file():
        return []
    client = mlflow_client(store)
    exp = client.get_experiment_by_name(experiment)
    if exp is None or exp.lifecycle_stage == "deleted":
        return []
    out = []
    for parent in sweep_runs(client, exp.experiment_id):
        name = parent.data.tags.get(SWEEP, parent.info.run_name)
        trials = mlflow_query.search_runs(client, [exp.experiment_id],
                                          tags={ROLE: "trial", SWEEP: name})
        counts: dict[str, int] = {}
        for t in trials:
            counts[t.info.status] = counts.get(t.info.status, 0) + 1
        out.append({"sweep": name, "state": parent.info.status,
                    "planned": parent.data.tags.get(N_TRIALS),
                    "trials": counts, "code_fingerprint": parent.data.tags.get(CODE_FINGERPRINT),
                    "start": _iso(parent.info.start_time), "end": _iso(parent.info.end_time)})
    return out


def _iso(ms: int | None) -> str | None:
    if not ms:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")


"""The one way this package asks MLflow for runs: filter strings, paging, retries.

Used by the writer (`tracking`, `sweep_list`, `ui_view`) and by the reader
(`analysis/mlflow_io.py`). Standard library only, like `schema.py`: it never imports MLflow
(callers hand it an `MlflowClient`), so the analysis layer may import it without pulling MLflow,
torch or Ray in (tests/test_structure.py allows `analysis -> mlflow_query`).

- `quote(value)`: a value as an MLflow filter literal (or None where no literal can say it);
  `filter_string(tags=, params=)`: the clauses, always written the same way;
- `search_runs(client, experiment_ids, tags=, params=)`: every run with those tag and param
  values, page by page (`page_token`), each page under `retry`; callers never write filter
  strings themselves;
- `retry(fn, ...)`: rides out a locked SQLite store or a tracking server that is down or
  restarting, with exponential back-off inside a time budget.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable, Iterable, Mapping

log = logging.getLogger(__name__)

# How long a call keeps retrying an unreachable tracking server (a restart, a network blip)
# before it fails (a trial then fails and Tune retries it).
RETRY_SECONDS_ENV = "FUSION_SWEEP_MLFLOW_RETRY_SECONDS"
DEFAULT_RETRY_SECONDS = 90.0
# Substrings of errors worth retrying: SQLite's lock, and a server that is down, restarting or
# overloaded (requests/urllib3 connection errors as MLflow wraps them, 5xx gateway answers).
TRANSIENT_MARKERS = ("database is locked", "locked", "connection refused", "connectionerror",
                     "max retries exceeded", "failed to establish a new connection",
                     "connection reset", "connection aborted", "remotedisconnected",
                     "read timed out", "timed out", "bad gateway", "service unavailable",
                     "gateway timeout", "response code 502", "response code 503",
                     "response code 504", "temporarily unavailable")
# Runs per page: MLflow servers cap max_results (a sqlite store accepts up to 50,000).
PAGE_SIZE = 1000
# MLflow's ViewType values (ACTIVE_ONLY, ALL), by value: no MLflow import here.
ACTIVE_ONLY, ALL = 1, 3


# ------------------------------------------------------------------- filter strings
def quote(value: Any) -> str | None:
    """`value` as an MLflow filter literal, or None when the filter grammar cannot say it.

    MLflow (3.17) strips a literal's outer quotes and unescapes nothing: `'it\\'s'` looks for
    `it\\'s` and silently matches no run. So a value is single-quoted, or double-quoted when it
    holds a `'`; one holding both quote characters has no literal (None: filter in Python).
    """
    text = str(value)
    if "'" not in text:
        return f"'{text}'"
    if '"' not in text:
        return f'"{text}"'
    return None


def _clauses(kind: str, pairs: Mapping[str, Any]) -> tuple[list[str], dict[str, str]]:
    """(filter clauses, the pairs no literal can express) for `tags` or `params`."""
    clauses, rest = [], {}
    for name, value in pairs.items():
        literal = quote(value)
        if literal is None:
            rest[name] = str(value)
        else:
            clauses.append(f"{kind}.`{name}` = {literal}")
    return clauses, rest


def filter_string(tags: Mapping[str, Any] | None = None,
                  params: Mapping[str, Any] | None = None) -> str:
    """`tags.`k` = 'v' and params.`p` = 'w'` for every expressible pair (`quote`)."""
    t, _ = _clauses("tags", tags or {})
    p, _ = _clauses("params", params or {})
    return " and ".join(t + p)


# ------------------------------------------------------------------------- retries
def transient(exc: BaseException) -> bool:
    """True for errors a retry can cure: a locked SQLite store or an unreachable server."""
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    text = f"{type(exc).__name__}: {exc}".lower()
    return any(m in text for m in TRANSIENT_MARKERS)


def brief(exc: BaseException, width: int = 110) -> str:
    """An error in one line: its start and its end (where requests puts the cause)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 2 * width else f"{text[:width]} … {text[-width:]}"


def retry_budget() -> float:
    """Seconds of back-off a call may spend: $FUSION_SWEEP_MLFLOW_RETRY_SECONDS, default 90."""
    try:
        return max(0.0, float(os.environ.get(RETRY_SECONDS_ENV, DEFAULT_RETRY_SECONDS)))
    except ValueError:
        return DEFAULT_RETRY_SECONDS


def retry(fn: Callable, *args: Any, tries: int | None = None, budget: float | None = None,
          sleep: Callable[[float], None] = time.sleep, **kwargs: Any) -> Any:
    """Call fn; on a transient error (SQLite 'database is locked', the tracking server down or
    restarting) back off exponentially (0.2 s doubling, at most 8 s a wait) and try again,
    until `budget` seconds of waiting are spent (`retry_budget()`; MLflow's own HTTP retries
    run inside each call too) or `tries` calls were made. Other errors, and the last
    transient one, are raised.

    Calls that are not idempotent (create_run) are retried too: a server killed after
    committing but before answering could leave a second run; `schema.run_of_key` then
    prefers the FINISHED one.
    """
    budget = retry_budget() if budget is None else budget
    waited, i = 0.0, 0
    while True:
        i += 1
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - mlflow wraps sqlalchemy/requests errors variously
            delay = min(8.0, 0.2 * 2 ** (i - 1))
            if not transient(e) or (tries is not None and i >= tries) or waited + delay > budget:
                raise
            log.warning("MLflow call %s failed (%s); retrying in %.1f s (%.0f of %.0f s spent)",
                        getattr(fn, "__name__", fn), brief(e), delay, waited, budget)
            sleep(delay)
            waited += delay


# ------------------------------------------------------------------------ searches
def search_runs(client: Any, experiment_ids: Iterable[str], *,
                tags: Mapping[str, Any] | None = None, params: Mapping[str, Any] | None = None,
                order_by: Iterable[str] = ("attributes.start_time ASC",),
                active_only: bool = True, limit: int | None = None,
                page_size: int = PAGE_SIZE) -> list:
    """Every run of `experiment_ids` whose tags and params equal `tags` and `params`, in
    `order_by` order, across pages (`page_token`), each page under `retry`. Values a filter
    literal cannot express (`quote`) are matched here, on the runs MLflow returns.
    `limit`: at most that many runs (a lookup that needs only the first few)."""
    tag_clauses, tag_rest = _clauses("tags", tags or {})
    param_clauses, param_rest = _clauses("params", params or {})
    text = " and ".join(tag_clauses + param_clauses)
    exact = tag_rest or param_rest
    size = page_size if limit is None or exact else max(1, min(page_size, limit))
    runs: list = []
    token = None
    while True:
        page = retry(client.search_runs, list(experiment_ids), filter_string=text,
                     run_view_type=ACTIVE_ONLY if active_only else ALL, max_results=size,
                     order_by=list(order_by), page_token=token)
        runs.extend(r for r in page if _matches(r, tag_rest, param_rest))
        token = getattr(page, "token", None)
        if not token or (limit is not None and len(runs) >= limit):
            return runs if limit is None else runs[:limit]


def _matches(run: Any, tags: Mapping[str, str], params: Mapping[str, str]) -> bool:
    return (all(run.data.tags.get(k) == v for k, v in tags.items())
            and all(run.data.params.get(k) == v for k, v in params.items()))

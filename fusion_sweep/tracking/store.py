"""Where runs go: the tracking store's checks and the MLflow client this package opens.

`check_tracking_uri` fails fast, before any trial, when the store cannot be reached or written;
`client(uri)` is the one `MlflowClient` constructor of the launcher (MLflow imported lazily,
its per-call chatter quieted once per process). The URI names themselves (default store,
sqlite path, server or local) are `schema.py`'s.
"""
from __future__ import annotations

import logging
import os

from fusion_sweep.schema import default_tracking_uri, is_server, server_unreachable, sqlite_path
from fusion_sweep.errors import UserError

# A local store keeps its runs' artifacts in this folder next to its database file (the
# sweep's experiment and the `fusion-sweep ui` server agree on it).
LOCAL_ARTIFACTS = "mlartifacts"


def is_local_store(uri: str) -> bool:
    return uri.startswith("sqlite:") or uri.startswith("file:") or "://" not in uri


def check_tracking_uri(uri: str, timeout: float = 5.0) -> None:
    """Fail fast (ValueError) when the tracking store cannot be reached — before any trial."""
    db = sqlite_path(uri)
    if is_server(uri):
        reason = server_unreachable(uri, timeout)
        if reason is not None:
            raise UserError(
                f"MLflow tracking server {uri} is not reachable ({reason}). Start it (e.g. "
                f"`mlflow server --host 127.0.0.1 --port 5000 --backend-store-uri "
                f"sqlite:///mlflow.db`), fix --tracking-uri / MLFLOW_TRACKING_URI, or leave both "
                f"unset to use the local store {default_tracking_uri()}"
            ) from None
    elif db is not None:
        if not db.parent.is_dir() or not os.access(db.parent, os.W_OK):
            raise UserError(f"tracking store {uri}: directory {db.parent} does not exist or is "
                             f"not writable")
    elif uri.startswith("file:") or "://" not in uri:
        raise UserError(f"tracking URI {uri!r}: MLflow 3 refuses file stores; use "
                         f"{default_tracking_uri()} or an http(s):// server")
    else:  # ftp://, mysql://, ...: not a store this tool checks and writes to
        raise UserError(f"tracking URI {uri!r}: unsupported scheme {uri.split('://', 1)[0]!r}; "
                         f"use an http(s):// MLflow server or a sqlite:/// store (default "
                         f"{default_tracking_uri()})")



_QUIETED = False


def _quiet_mlflow() -> None:
    """Once per process: no run link printed on every set_terminated (it would flood the
    progress display) and no alembic/sqlalchemy INFO lines on every store open. Process-wide
    on purpose: MLflow reads the variable, and these loggers are module-global."""
    global _QUIETED
    if _QUIETED:
        return
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    for name in ("alembic", "mlflow.store.db.utils", "mlflow.store.tracking.sqlalchemy_store"):
        logging.getLogger(name).setLevel(logging.WARNING)
    _QUIETED = True


def client(uri: str):
    from mlflow.tracking import MlflowClient

    _quiet_mlflow()
    return MlflowClient(tracking_uri=uri)


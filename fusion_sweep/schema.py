"""What makes a trial a trial, and how MLflow carries it: the one home of the schema.

Imported by the sweep/tracking layer (the writer) and by `analysis` (the reader), so the two
can never disagree. Imports neither torch nor Ray: only the standard library.

* **Identity.** `IDENTITY_FIELDS` is what is compared; two trials with the same identity are
  the same trial. `PAIRING_FIELDS` is the identity minus the seed: trials of one variant.
* **Trial key.** `trial_key(semantic_config, code)` hashes every field that can change a
  trial's numbers plus the code fingerprint, so a resumed sweep finds finished trials by key
  and a code change can never be mistaken for the same trial.
* **Fingerprints.** `FINGERPRINTS` are hashes of what two trials of one seed must share
  (split, batch order, shared initial weights, dropout stream); `stats` pairs two trials only
  when all agree. `code_fingerprint()` hashes the source that computes a trial's numbers.
  The platform fingerprint (`PLATFORM_FIELDS`, hashed by `platform_fingerprint`) names where a
  trial ran; pairs are kept on one platform, but it is not part of the trial key.
* **MLflow.** Tag, param and metric names of the parent (sweep) run and the child (trial)
  runs, and the default experiment / tracking URI.
"""
from __future__ import annotations

import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

# ---------------------------------------------------------------------------- identity
IDENTITY_FIELDS: tuple[str, ...] = ("dataset", "encoder", "pe", "fusion", "seed")
# A trial's identity `encoder` is the encoder VARIANT label (`ENCODERS[name].variant(config)`:
# "standard", "ressformer", "ressformer-no-asam", ...), not the bare registry name: the
# ReSSFormer ablations share the name and differ in their switches. Trial runs carry the
# identity as one JSON tag (IDENTITY_TAG) so readers never recompute it from params.
IDENTITY_TAG = "fusion_sweep.identity"
# The encoder of every trial that names none (the reference architecture); inputs written
# before the encoder axis hold its trials, and labels in messages leave it out.
DEFAULT_ENCODER = "standard"
# Variant fields: what a comparison compares within one dataset.
VARIANT_FIELDS: tuple[str, ...] = ("encoder", "pe", "fusion")
PAIRING_FIELDS: tuple[str, ...] = tuple(f for f in IDENTITY_FIELDS if f != "seed")
# Fields that never change a trial's numbers (where it runs, how many threads): left out of
# the trial key so a resumed sweep on other hardware re-attaches to its runs.
NON_SEMANTIC_FIELDS: tuple[str, ...] = ("device", "num_threads", "cache_dir", "latency_repeats",
                                        "save_checkpoint")

# ------------------------------------------------------------------------- fingerprints
# Shared by every pair of trials of one seed and dataset, whatever the variants: the split,
# the batch order, the embedding + classifier initial weights, the dropout stream.
FINGERPRINTS: tuple[str, ...] = ("split", "batch_order", "shared_init", "dropout")
# Shared only by trials of the same encoder variant: the encoder body's initial weights.
ENCODER_FINGERPRINTS: tuple[str, ...] = ("encoder_init",)
# Where a trial ran, not what it is: a hash of PLATFORM_FIELDS (the sixth fingerprint, tag
# fp.platform, column fp_platform), with each field also logged as a readable tag
# (platform.<field>). Float results differ across CPU instruction sets, GPUs and library
# versions, so `stats` pairs two trials only on one platform (else `platform_mismatch`).
# It is NOT part of the trial key: a sweep resumed on other hardware keeps its finished runs,
# and a pair that then spans two platforms is dropped and listed, never silently paired.
PLATFORM_FINGERPRINT = "platform"
PLATFORM_FIELDS: tuple[str, ...] = ("torch", "cpu_capability", "cpu_model", "cuda", "cudnn",
                                    "gpu", "deterministic", "threads")
PLATFORM_FIELD_TAGS: dict[str, str] = {k: f"platform.{k}" for k in PLATFORM_FIELDS}
PLATFORM_COLUMN = "fp_platform"  # the hash
PLATFORM_LABEL_COLUMN = "platform"  # platform_label(): the readable one-liner
FINGERPRINT_TAGS: dict[str, str] = {k: f"fp.{k}" for k in
                                    FINGERPRINTS + ENCODER_FINGERPRINTS + (PLATFORM_FINGERPRINT,)}
FINGERPRINT_COLUMNS: tuple[str, ...] = tuple(f"fp_{k}" for k in FINGERPRINTS)
ENCODER_FINGERPRINT_COLUMNS: tuple[str, ...] = tuple(f"fp_{k}" for k in ENCODER_FINGERPRINTS)

# Source that computes a trial's numbers (relative to the package). Orchestration, tracking
# and the CLI are left out: changing them cannot change a trial's result.
_NUMERIC_SOURCES: tuple[str, ...] = ("trial",)


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """sha256 (16 hex) over the package's numeric source files, by relative path and content.

    Unlike a git commit it needs no checkout (a wheel install has one too) and ignores edits
    to docs, tests and orchestration; unlike the package version it changes with every edit
    that can change a trial's numbers.
    """
    root = Path(__file__).resolve().parent
    files: list[Path] = []
    for rel in _NUMERIC_SOURCES:
        p = root / rel
        files.extend(sorted(p.rglob("*.py")) if p.is_dir() else [p])
    h = hashlib.sha256()
    for f in files:
        h.update(f.relative_to(root).as_posix().encode() + b"\0")
        h.update(f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def platform_fingerprint(fields: Mapping[str, str]) -> str:
    """sha256 (16 hex) of a platform description (PLATFORM_FIELDS -> str)."""
    payload = json.dumps({k: str(fields.get(k, "")) for k in PLATFORM_FIELDS}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def platform_label(fields: Mapping[str, Any]) -> str:
    """One readable line naming a platform, e.g. 'torch 2.13.0+cpu, CPU AVX2 (AMD EPYC 7B13),
    2 threads, no GPU, deterministic on'. '' when no field is known (runs logged before it)."""
    f = {k: str(fields.get(k) or "") for k in PLATFORM_FIELDS}
    if not any(f.values()):
        return ""
    gpu = (f"GPU {f['gpu']} (CUDA {f['cuda'] or '?'}, cuDNN {f['cudnn'] or '?'})"
           if f["gpu"] not in ("", "none") else "no GPU")
    return (f"torch {f['torch'] or '?'}, CPU {f['cpu_capability'] or '?'} "
            f"({f['cpu_model'] or '?'}), {f['threads'] or '?'} threads, {gpu}, "
            f"deterministic {f['deterministic'] or '?'}")


def platform_from_tags(tags: Mapping[str, str]) -> dict[str, str]:
    """The platform fields of a trial run, from its readable tags ('' where absent)."""
    return {k: tags.get(tag) or "" for k, tag in PLATFORM_FIELD_TAGS.items()}


def trial_key(config: Mapping[str, Any], code: str) -> str:
    """sha256 (16 hex) of every semantic config field and the code fingerprint."""
    semantic = {k: v for k, v in config.items() if k not in NON_SEMANTIC_FIELDS}
    payload = json.dumps({"config": semantic, "code": code}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


# ------------------------------------------------------------------------------ MLflow
DEFAULT_EXPERIMENT = "fusion-sweep"
ROLE = "fusion_sweep.role"  # "sweep" | "trial" | "stats"
SWEEP = "fusion_sweep.sweep"
PARENT = "mlflow.parentRunId"
TRIAL_KEY = "fusion_sweep.trial_key"
CODE_FINGERPRINT = "fusion_sweep.code_fingerprint"
# Parent-run tag: every code fingerprint the sweep was launched under, oldest first, comma-
# separated; more than one only where a launch passed --allow-code-change.
CODE_HISTORY = "fusion_sweep.code_history"
GIT_COMMIT = "fusion_sweep.git_commit"
VERSION = "fusion_sweep.version"
GRID_HASH = "fusion_sweep.grid_hash"
ATTEMPTS = "fusion_sweep.attempts"
LAUNCH_ID = "fusion_sweep.launch_id"
ERROR = "fusion_sweep.error"
# Parent-run tag: every dataset name the launching version knows (JSON list), so `stats`
# can tell "a dataset this sweep lacks" from "no such dataset" without the dataset registry.
KNOWN_DATASETS = "fusion_sweep.known_datasets"
# Parent-run tag of an adaptive sweep (`launch --until-decided`): JSON {max_seeds, seed_batch,
# alpha}. `stats` then reports the sequential decisions and labels fixed-n tests descriptive.
ADAPTIVE = "fusion_sweep.adaptive"
# Trial-run tag `fusion-sweep ui` writes so the runs table sorts short -> long, then by
# variant and seed: "<regime rank, 2 digits>/<encoder/pe/fusion>/<seed, 6 digits>".
UI_ORDER = "fusion_sweep.ui_order"

EPOCH_METRICS: tuple[str, ...] = ("train_loss", "train_acc", "val_loss", "val_acc")
FINAL_METRICS: tuple[str, ...] = ("test_acc", "best_val_acc", "test_macro_f1",
                                  "latency_ms_per_sample", "params", "train_seconds",
                                  "tokens_per_second", "median_tokens", "num_classes",
                                  "flops_per_token")
# Which way is better, for every metric a trial logs. A search space may add or override
# entries (`directions:`); launch logs the merged map on the parent run, and `stats` refuses
# to guess the direction of a metric it finds nowhere.
METRIC_DIRECTIONS: dict[str, str] = {
    "test_acc": "higher", "test_macro_f1": "higher", "best_val_acc": "higher",
    "latency_ms_per_sample": "lower", "train_seconds": "lower", "params": "lower",
    "tokens_per_second": "higher", "flops_per_token": "lower",
}
DIRECTIONS: tuple[str, ...] = ("higher", "lower")
# Parent-run params that `stats` reads back; structured values are JSON (json.dumps).
SPACE_PARAMS: tuple[str, ...] = ("baseline", "metric", "equivalence_margin", "directions")


def encode_param(value: Any) -> str:
    """A parent-run param value: JSON, so dicts and None survive the round trip."""
    return json.dumps(value, sort_keys=True)


def decode_param(text: str | None) -> Any:
    """Inverse of `encode_param`; plain strings logged by older launches pass through."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return text


def default_tracking_uri(cwd: str | Path | None = None) -> str:
    """The local store: `sqlite:///<cwd>/mlflow.db` (MLflow 3 refuses file stores)."""
    return f"sqlite:///{Path(cwd or os.getcwd()).resolve() / 'mlflow.db'}"


def resolve_tracking_uri(uri: str | None = None) -> str:
    """`--tracking-uri`, else `MLFLOW_TRACKING_URI`, else the local store under the cwd."""
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri()

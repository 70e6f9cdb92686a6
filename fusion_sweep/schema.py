"""What makes a trial a trial, and how MLflow carries it: the one home of the schema.

Imported by the sweep/tracking layer (the writer) and by `analysis` (the reader), so the two
can never disagree. Imports neither torch nor Ray: only the standard library.

* **Identity.** `IDENTITY_FIELDS` is what is compared; two trials with the same identity are
  the same trial.
* **Trial key.** `trial_key(semantic_config, code)` hashes every field that can change a
  trial's numbers plus the code fingerprint, so a resumed sweep finds finished trials by key
  and a code change can never be mistaken for the same trial.
* **Fingerprints.** `FINGERPRINTS` are hashes of what two trials of one seed must share
  (split, batch order, shared initial weights, dropout stream); `stats` pairs two trials only
  when all agree. `code_fingerprint(components)` hashes a trial's per-component code
  fingerprints (fusion_sweep/codeprint.py, trial/components.py).
  The platform fingerprint (`PLATFORM_FIELDS`, hashed by `platform_fingerprint`) names where a
  trial ran; pairs are kept on one platform, but it is not part of the trial key.
* **MLflow.** Tag, param and metric names of the parent (sweep) run and the child (trial)
  runs, and the default experiment / tracking URI.
"""
from __future__ import annotations

import hashlib
import json
import os
import urllib.request
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, TypeVar

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
# What a sweep is judged on when it names neither (`stats` and a space's `metric`/`baseline`
# share them; analysis/settings.py holds the other analysis defaults): the test accuracy,
# and every fusion compared with `add` within its dataset/encoder/pe.
DEFAULT_METRIC = "test_acc"
DEFAULT_BASELINE = "add"
# Variant fields: what a comparison compares within one dataset.
VARIANT_FIELDS: tuple[str, ...] = ("encoder", "pe", "fusion")
# Fields left out of the trial key: where and how a trial runs, not what it computes, so a
# resumed sweep on other hardware re-attaches to its runs. Device and thread count can still
# move a trial's last digits: the platform fingerprint records them, and `stats` pairs trials
# only within one platform.
NON_SEMANTIC_FIELDS: tuple[str, ...] = ("device", "num_threads", "cache_dir", "latency_repeats",
                                        "save_checkpoint")
# Fields the key holds by content, not by value: a local copy (`data_dir`) enters the key as
# the hash of what it holds (the component "data_dir:<dataset>"), so moving it keeps the key
# and editing it changes it. Still logged as params (`TrialConfig.hyperparameters`).
CONTENT_KEYED_FIELDS: tuple[str, ...] = ("data_dir",)



def variant_label(identity: Mapping[str, Any]) -> str:
    """What a comparison compares within a dataset: "encoder/pe/fusion" of an identity."""
    return "/".join(str(identity[k]) for k in VARIANT_FIELDS)


def shown(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Identity fields as messages and labels show them: the encoder is left out when it is
    DEFAULT_ENCODER (every trial before the encoder axis ran it; naming it is noise)."""
    return {k: v for k, v in fields.items() if not (k == "encoder" and v == DEFAULT_ENCODER)}


def trial_label(identity: Mapping[str, Any]) -> str:
    """One trial in messages: "dataset/[encoder/]pe/fusion/seed N" (`shown`: the default
    encoder, or none at all in inputs from before the encoder axis, is left out)."""
    named = shown({k: identity[k] for k in IDENTITY_FIELDS if k in identity or k != "encoder"})
    return "/".join(str(v) if k != "seed" else f"seed {v}" for k, v in named.items())


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
# Besides the hardware and libraries it records the execution path (issue 32): on a GPU the
# driver, compute capability and enabled SDPA backends; the precision; ReSSFormer's kernels
# (compiled / torch / off) and the compiler with its version; the trainer's speed mode.
PLATFORM_FINGERPRINT = "platform"
PLATFORM_FIELDS: tuple[str, ...] = ("torch", "cpu_capability", "cpu_model", "cuda", "cudnn",
                                    "gpu", "driver", "capability", "sdpa", "deterministic",
                                    "threads", "precision", "kernels", "compiler", "speed")
PLATFORM_FIELD_TAGS: dict[str, str] = {k: f"platform.{k}" for k in PLATFORM_FIELDS}
PLATFORM_COLUMN = "fp_platform"  # the hash
PLATFORM_LABEL_COLUMN = "platform"  # platform_label(): the readable one-liner
FINGERPRINT_TAGS: dict[str, str] = {k: f"fp.{k}" for k in
                                    FINGERPRINTS + ENCODER_FINGERPRINTS + (PLATFORM_FINGERPRINT,)}
FINGERPRINT_COLUMNS: tuple[str, ...] = tuple(f"fp_{k}" for k in FINGERPRINTS)
ENCODER_FINGERPRINT_COLUMNS: tuple[str, ...] = tuple(f"fp_{k}" for k in ENCODER_FINGERPRINTS)

# A trial's code, by component (trial/components.py names them: "trainer", "data:<dataset>",
# "encoder:<name>", "pe:<name>", "fusion:<name>", ...): component -> the fingerprint of the
# code that component runs (fusion_sweep/codeprint.py). Logged as one JSON tag per trial run
# (CODE_COMPONENTS, column CODE_COMPONENTS_COLUMN), so a relaunch says which component's code
# changed and `stats` compares only the code two arms share.
CODE_COMPONENTS = "fusion_sweep.code_components"
CODE_COMPONENTS_COLUMN = "code_components"


def code_fingerprint(components: Mapping[str, str]) -> str:
    """A trial's code fingerprint (part of its key): sha256 (16 hex) of its component map."""
    payload = json.dumps(dict(components), sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def sweep_code(codes: Sequence[str]) -> str:
    """The code of a whole sweep (its parent run's tag): sha256 (16 hex) of the distinct code
    fingerprints of its trials."""
    return hashlib.sha256("\n".join(sorted(set(codes))).encode()).hexdigest()[:16]


def parse_components(text: Any) -> dict[str, str] | None:
    """The component map of a CODE_COMPONENTS tag or column; None for anything else (runs
    logged before per-component fingerprints, a blank cell)."""
    if not isinstance(text, str) or not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else None


def changed_components(old: Mapping[str, str], new: Mapping[str, str],
                       shared_only: bool = False) -> list[str]:
    """The components whose code differs between two maps, sorted: every component either has
    (a component one lacks counts too), or with `shared_only` those both have (what two arms
    of a pair must agree on: their fusions may differ, their trainer may not)."""
    names = set(old) & set(new) if shared_only else set(old) | set(new)
    return sorted(n for n in names if old.get(n) != new.get(n))


def component_label(name: str) -> str:
    """A component in words: 'fusion:gate-cnn' -> 'fusion gate-cnn', 'data_dir:imdb' ->
    'the local copy of imdb', 'trainer' -> 'the trainer'."""
    kind, _, which = name.partition(":")
    if kind == "data_dir":
        return f"the local copy (data_dir) of {which}"
    return f"{kind} {which}" if which else f"the {kind}"


def platform_fingerprint(fields: Mapping[str, str]) -> str:
    """sha256 (16 hex) of a platform description (PLATFORM_FIELDS -> str)."""
    payload = json.dumps({k: str(fields.get(k, "")) for k in PLATFORM_FIELDS}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def platform_label(fields: Mapping[str, Any]) -> str:
    """One readable line naming a platform, e.g. 'torch 2.13.0+cpu, CPU AVX2 (AMD EPYC 7B13),
    2 threads, no GPU, deterministic on, fp32, kernels compiled (gcc 12.2.0), speed fast'.
    '' when no field is known (runs logged before it); the execution-path fields are left
    out for runs logged before they were recorded."""
    f = {k: str(fields.get(k) or "") for k in PLATFORM_FIELDS}
    if not any(f.values()):
        return ""
    gpu = (f"GPU {f['gpu']} (CUDA {f['cuda'] or '?'}, cuDNN {f['cudnn'] or '?'}, driver "
           f"{f['driver'] or '?'}, sm {f['capability'] or '?'}, SDPA {f['sdpa'] or '?'})"
           if f["gpu"] not in ("", "none") else "no GPU")
    threads = f"{f['threads'] or '?'} thread{'' if f['threads'] == '1' else 's'}"
    path = [f["precision"]] if f["precision"] else []
    if f["kernels"]:
        path.append(f"kernels {f['kernels']}" + (f" ({f['compiler']})" if f["compiler"] else ""))
    if f["speed"]:
        path.append(f"speed {f['speed']}")
    return ", ".join([f"torch {f['torch'] or '?'}", f"CPU {f['cpu_capability'] or '?'} "
                      f"({f['cpu_model'] or '?'})", threads, gpu,
                      f"deterministic {f['deterministic'] or '?'}", *path])


def platform_from_tags(tags: Mapping[str, str]) -> dict[str, str]:
    """The platform fields of a trial run, from its readable tags ('' where absent)."""
    return {k: tags.get(tag) or "" for k, tag in PLATFORM_FIELD_TAGS.items()}


def trial_key(config: Mapping[str, Any], code: str) -> str:
    """sha256 (16 hex) of every semantic config field (by value; CONTENT_KEYED_FIELDS enter
    through `code`) and the trial's code fingerprint (`code_fingerprint`)."""
    semantic = {k: v for k, v in config.items()
                if k not in NON_SEMANTIC_FIELDS and k not in CONTENT_KEYED_FIELDS}
    payload = json.dumps({"config": semantic, "code": code}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


# ------------------------------------------------------------------ the run of a trial key
FINISHED = "FINISHED"  # the MLflow run status of a trial that completed (RunStatus.FINISHED)
_Run = TypeVar("_Run")


def run_of_key(runs: Sequence[_Run], status: Callable[[_Run], str]) -> _Run | None:
    """The run that stands for one trial key, among that key's runs oldest first: the oldest
    FINISHED run (the resume rule: a finished trial is never trained again), else the newest
    run (the one a retry re-attaches to). None without runs. Two runs of one key should not
    exist (a trial re-attaches to its run); this settles it the same way everywhere."""
    finished = [r for r in runs if status(r) == FINISHED]
    return finished[0] if finished else (runs[-1] if runs else None)


# ------------------------------------------------------------------------------ MLflow
DEFAULT_EXPERIMENT = "fusion-sweep"
ROLE = "fusion_sweep.role"  # "sweep" | "trial" ("stats": child runs of old versions)
SWEEP = "fusion_sweep.sweep"
PARENT = "mlflow.parentRunId"
TRIAL_KEY = "fusion_sweep.trial_key"
CODE_FINGERPRINT = "fusion_sweep.code_fingerprint"
# Parent-run tag: every code fingerprint the sweep was launched under (`sweep_code`), oldest
# first, comma-separated; more than one only where a launch passed --allow-code-change.
CODE_HISTORY = "fusion_sweep.code_history"
# Trial-run tag set on a FINISHED run that a relaunch retrains because its code changed: the
# key of the trial that replaces it. The run is kept (never deleted); `stats` sets it aside
# (superseded_code) once its replacement exists. Read back as SUPERSEDED_COLUMN.
SUPERSEDED = "fusion_sweep.superseded_by"
SUPERSEDED_COLUMN = "superseded_by"
GIT_COMMIT = "fusion_sweep.git_commit"
VERSION = "fusion_sweep.version"
GRID_HASH = "fusion_sweep.grid_hash"
ATTEMPTS = "fusion_sweep.attempts"
LAUNCH_ID = "fusion_sweep.launch_id"
ERROR = "fusion_sweep.error"
# Trial-run tags the claims report reads (TrialConfig.label_tags): what the dataset's label
# depends on ("order" / "content" / "both") and how much token order the model sees ("none" /
# "segments" / "tokens"). A claim whose arm cannot see order, on an order-only dataset, is not
# testable there. Read back as the columns LABEL_COLUMNS of the tidy table.
LABEL_DEPENDS_TAG = "fusion_sweep.label_depends"
ORDER_ACCESS_TAG = "fusion_sweep.order_access"
LABEL_COLUMNS: tuple[str, ...] = ("label_depends", "order_access")
# Issue 31/30 (records): what verdicts need, as trial tags / metrics and results-file columns.
# REGIME_TAG: the training regime a dataset belongs to (a probe's clean regime, else its own
# name); PROBE_OF_TAG: the regime a probe re-tests ("" for a clean regime); LONG_CONTEXT_TAG:
# "true" when the registry marks the regime long-context. Read back as REGIME_COLUMNS.
REGIME_TAG = "fusion_sweep.regime"
PROBE_OF_TAG = "fusion_sweep.probe_of"
LONG_CONTEXT_TAG = "fusion_sweep.long_context"
REGIME_COLUMNS: tuple[str, ...] = ("regime_of", "probe_of", "long_context")
# The sequence-length regime a dataset stands for in the fusion study (registry
# DatasetSpec.length_regime; "" for a probe), as a trial tag and as the `regime` column of
# results.csv and of any results file: what the Fusion Matters claims select regimes by.
LENGTH_REGIMES: tuple[str, ...] = ("short", "medium", "long")
LENGTH_REGIME_TAG = "fusion_sweep.length_regime"
LENGTH_REGIME_COLUMN = "regime"
# Every registry fact a trial run carries as a tag -> its column in the tidy table and in
# results.csv (the reader, analysis/mlflow_io.py, and the writer, summary.py, share it).
FACT_COLUMNS: dict[str, str] = {
    LABEL_DEPENDS_TAG: LABEL_COLUMNS[0], ORDER_ACCESS_TAG: LABEL_COLUMNS[1],
    REGIME_TAG: REGIME_COLUMNS[0], PROBE_OF_TAG: REGIME_COLUMNS[1],
    LONG_CONTEXT_TAG: REGIME_COLUMNS[2], LENGTH_REGIME_TAG: LENGTH_REGIME_COLUMN,
}
# A regime is long-context when its documents are truncated beyond this many tokens (the
# reference Transformer's context, agnews-imdb's max_len): synthetic-long (540), arxiv (4096).
LONG_CONTEXT_ABOVE_TOKENS = 512
# Trial metrics: the majority-class share of the test split (chance for accuracy) and the
# test split's size (the exact per-seed learn test needs it).
TEST_MAJORITY_RATE = "test_majority_rate"
TEST_SIZE = "test_n"
# Results-file columns of the sweep (same value on every row): the code fingerprint, the
# comparison family (JSON of COMPARISON_FAMILY) and the adaptive settings (JSON of ADAPTIVE).
CODE_FINGERPRINT_COLUMN = "code_fingerprint"
COMPARISON_FAMILY_COLUMN = "comparison_family"
ADAPTIVE_COLUMN = "adaptive"
# Parent-run tag: every dataset name the launching version knows (JSON list), so `stats`
# can tell "a dataset this sweep lacks" from "no such dataset" without the dataset registry.
KNOWN_DATASETS = "fusion_sweep.known_datasets"
# Parent-run tag: every fusion name in the FUSIONS registry's order (JSON list), so a report
# colours each fusion as the UI does (FUSION_PALETTE by registry place) without the registry.
KNOWN_FUSIONS = "fusion_sweep.known_fusions"
# Matplotlib's tab10: a fusion's colour is FUSION_PALETTE[its place in the FUSIONS registry],
# the same in every sweep, UI row and report figure (`fusion_color`).
FUSION_PALETTE: tuple[str, ...] = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                   "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


def fusion_color(place: int) -> str:
    """The colour of the fusion at this place in the registry order."""
    return FUSION_PALETTE[place % len(FUSION_PALETTE)]


# `stats --log`: where the report lives among the parent run's artifacts, and the parent-run
# tag naming it (shown in the UI's Description column of the sweep's run).
REPORT_ARTIFACT_DIR = "report"
REPORT_TAG = "fusion_sweep.report"
# Parent-run tag of an adaptive sweep (`launch --until-decided`): JSON {max_seeds, seed_batch,
# alpha}. `stats` then reports the sequential decisions and labels fixed-n tests descriptive.
ADAPTIVE = "fusion_sweep.adaptive"
# Parent-run tag of an adaptive sweep: the multiplicity family fixed at launch, JSON {"m": int,
# "members": [{"dataset", "family", "variant", "baseline_variant"}]}. `stats` takes m from it
# (never from what a --dataset/--pairs selection shows). ADAPTIVE also carries "method", the
# sequential method (absent: "normal-mixture", the only one before it was recorded).
COMPARISON_FAMILY = "fusion_sweep.comparison_family"
# Trial-run tag `fusion-sweep ui` writes so the runs table sorts short -> long, then by
# variant and seed: "<regime rank, 2 digits>/<encoder/pe/fusion>/<seed, 6 digits>".
UI_ORDER = "fusion_sweep.ui_order"

EPOCH_METRICS: tuple[str, ...] = ("train_loss", "train_acc", "val_loss", "val_acc")
FINAL_METRICS: tuple[str, ...] = ("test_acc", "best_val_acc", "test_macro_f1",
                                  "latency_ms_per_sample", "params", "train_seconds",
                                  "tokens_per_second", "median_tokens", "num_classes",
                                  "flops_per_token", "test_majority_rate", "test_n")
# Final metrics that describe the trial's task, not its quality: no direction, so `stats`
# refuses to compare arms by them (it needs a direction) and they never enter a verdict.
# test_majority_rate: the share of the test split's most frequent class, the accuracy of
# always answering it (issue 31): the chance line an accuracy is read against.
# test_n: the test split's size, the n of the exact per-seed learn test.
TASK_METRICS: tuple[str, ...] = ("median_tokens", "num_classes", "test_majority_rate", "test_n")
# Which way is better, for every metric a trial logs. A search space may add or override
# entries (`directions:`); launch logs the merged map on the parent run, and `stats` refuses
# to guess the direction of a metric it finds nowhere.
METRIC_DIRECTIONS: dict[str, str] = {
    "test_acc": "higher", "test_macro_f1": "higher", "best_val_acc": "higher",
    "latency_ms_per_sample": "lower", "train_seconds": "lower", "params": "lower",
    "tokens_per_second": "higher", "flops_per_token": "lower",
}
DIRECTIONS: tuple[str, ...] = ("higher", "lower")
# A metric in words, for figure axes and titles; a name not listed is shown as it is.
METRIC_LABELS: dict[str, str] = {
    "test_acc": "test accuracy", "best_val_acc": "best validation accuracy",
    "test_macro_f1": "test macro-F1", "latency_ms_per_sample": "latency (ms per sample)",
    "train_seconds": "training time (s)", "params": "parameters",
    "tokens_per_second": "tokens per second", "flops_per_token": "FLOPs per token",
}


def metric_label(metric: str) -> str:
    """`test_acc` -> 'test accuracy' (METRIC_LABELS), else the name itself."""
    return METRIC_LABELS.get(metric, metric)


# Parent-run params that `stats` reads back (launch logs the space's choices; every
# parent-run param value is JSON: `encode_param`).
BASELINE_PARAM = "baseline"
METRIC_PARAM = "metric"
MARGIN_PARAM = "equivalence_margin"
DIRECTIONS_PARAM = "directions"
# Parent-run tags and metrics beyond the schema above.
N_TRIALS = "fusion_sweep.n_trials"
PARENT_METRICS: tuple[str, ...] = ("trials_finished", "trials_failed",
                                   "trials_trained_this_launch", "trials_retried",
                                   "launch_seconds")
# Trial-run tags of where and how a trial ran (never part of its identity or key).
HOSTNAME = "fusion_sweep.hostname"
NODE_ID = "fusion_sweep.node_id"
NODE_IP = "fusion_sweep.node_ip"
NUM_THREADS = "fusion_sweep.num_threads"
RAY_TRIAL_ID = "fusion_sweep.ray_trial_id"
DEVICE = "fusion_sweep.device"
RECONCILED = "fusion_sweep.reconciled"  # set on a run a later launch found RUNNING
# Per-epoch metrics beyond EPOCH_METRICS, and what the sweep layer measures around a trial.
EPOCH_EXTRA_METRICS: tuple[str, ...] = ("epoch_seconds", "epoch_tokens_per_second")
PEAK_RSS = "peak_rss_mb"
# MLflow's own tags that fusion-sweep sets.
MLFLOW_GIT_COMMIT = "mlflow.source.git.commit"
MLFLOW_NOTE = "mlflow.note.content"


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


# ------------------------------------------------------------------------- the store
# Host names that reach only this machine: a tracking URI on one of them is unreachable from
# other nodes; a UI bound to one is not exposed to the network.
LOOPBACK_HOSTS: tuple[str, ...] = ("127.0.0.1", "localhost", "::1")
SQLITE_PREFIX = "sqlite:///"


def sqlite_path(uri: str) -> Path | None:
    """The database file of a `sqlite:///PATH` URI (absolute: `sqlite:////abs/path.db`), else
    None. Relative paths are taken from the current directory, as SQLAlchemy does."""
    if not uri.startswith(SQLITE_PREFIX):
        return None
    return Path(uri[len(SQLITE_PREFIX):].split("?", 1)[0])


def is_server(uri: str) -> bool:
    """An MLflow tracking server (http/https), as opposed to a local store."""
    return uri.startswith(("http://", "https://"))


def server_unreachable(uri: str, timeout: float = 5.0) -> str | None:
    """Why the tracking server at `uri` does not answer its /health check, or None when it
    does: asked before MLflow, which would retry a dead server for minutes."""
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout) as r:
            return None if r.status == 200 else f"HTTP {r.status}"
    except OSError as e:  # urllib.error.URLError is an OSError
        return str(getattr(e, "reason", e))


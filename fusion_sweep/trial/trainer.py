"""One trial in plain PyTorch: `train_trial(config) -> TrialResult`. No Ray, no MLflow.

Paired-seed protocol (docs/protocol.md): every random stream has its own seed, drawn and
used in `fusion_sweep.trial.seeds`, so two trials with the same seed differ only in the
variant (encoder, pe, fusion). The result carries five fingerprints (split,
batch order, embedding/classifier init, encoder-body init, dropout stream) that the analysis
checks before pairing (the encoder body's only between trials of one encoder variant), and a
sixth, the platform it ran on (`fusion_sweep.trial.platform`): pairs are kept on one platform.
On CUDA the trial runs with deterministic algorithms (`platform.deterministic`).
"""
from __future__ import annotations

import copy
import math
import os
import time
from contextlib import contextmanager
import dataclasses
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from fusion_sweep.trial.batching import (eval_batches, pad_batch, pad_batches, schedule_hash,
                                         truncated_lengths)
from fusion_sweep.schema import PLATFORM_FINGERPRINT, platform_fingerprint
from fusion_sweep.trial.config import TrialConfig
from fusion_sweep.trial.data import load_encoded
from fusion_sweep.trial.data.types import EncodedData, EncodedSplit, validate_encoded
from fusion_sweep.trial.heap import keep_freed_memory
from fusion_sweep.trial.models.encoder import (FusionClassifier, count_parameters,
                                               encoder_init_hash, has_padding, shared_init_hash)
from fusion_sweep.trial.optim import OPTIMIZERS
from fusion_sweep.trial.platform import autocast, describe_platform, deterministic, precision_mode
from fusion_sweep.trial.seeds import (build_model, derive_seed, dropout_stream, stream_dataset,
                                     training_schedule)


@dataclass(frozen=True)
class SpeedOptions:
    """How a trial is executed, never what it computes: every switch keeps the batches, the
    seeds, the fingerprints and the math, so results match the reference path up to float
    reordering (tests/test_trainer_speed_paths.py). Not part of TrialConfig or the trial key.

    The default is the fast path; `SpeedOptions.reference()` is the original loop (for A/B
    benchmarks, benchmarks/sweep_throughput.py --trainer-ab). `train_trial(speed=None)` reads
    the environment variable FUSION_SWEEP_SPEED: unset or "fast" = the default, "reference",
    or comma-separated overrides such as "eval_batch_mult=1,latency_warmup=1".
    """

    # Pad each training batch with one vectorised numpy gather (batching.pad_batches)
    # instead of a Python loop over its rows. Batches are still padded one at a time, just
    # before their step: padding a whole epoch up front bought nothing measurable on CPU
    # (padding is < 1% of a step) and would hold ~1 GB per epoch for ArXiv-sized data.
    vector_pad: bool = True
    # Keep each step's loss and (detached) logits; one host sync per epoch for the epoch's
    # loss and accuracy instead of float()/int() and three accuracy ops every step.
    epoch_sync: bool = True
    # Pad the val/test evaluation batches once per trial and reuse them every epoch (they
    # never change); one softmax/loss/host copy per split instead of one per batch.
    eval_cache: bool = True
    # Evaluation batch = eval_batch_mult × batch_size (with eval_cache). Default 1: on CPU
    # 2-8× larger evaluation batches made every synthetic regime's evaluation slower (up to
    # 3×): a bigger length-sorted batch pads more documents to a longer maximum, and the
    # extra attention work (∝ L²) outweighs the saved per-batch dispatch (benchmarks/README.md).
    eval_batch_mult: int = 1
    # measure_latency's separate untimed warm-up pass. The fast path skips it when
    # latency_repeats >= 3: the model has just run the same split in evaluation, and the
    # reported figure is a median over the timed passes, which one cold pass cannot move.
    latency_warmup: bool = False
    # Keep freed memory in the process for the next step (heap.keep_freed_memory, glibc):
    # large tensors then reuse warm pages instead of page-faulting fresh ones. Process-wide
    # and sticky once set; halves a long-regime step of ReSSFormer without ASAM.
    heap_reuse: bool = True

    @classmethod
    def reference(cls) -> "SpeedOptions":
        return cls(vector_pad=False, epoch_sync=False, eval_cache=False, eval_batch_mult=1,
                   latency_warmup=True, heap_reuse=False)

    @classmethod
    def parse(cls, text: str) -> "SpeedOptions":
        """"fast" | "reference" | "reference,eval_batch_mult=4" | "vector_pad=0,..."."""
        out = cls()
        for part in filter(None, (p.strip() for p in text.split(","))):
            if part in ("fast", "default"):
                out = cls()
            elif part == "reference":
                out = cls.reference()
            else:
                key, sep, value = part.partition("=")
                names = [f for f in cls.__dataclass_fields__]
                if not sep or key not in names:
                    raise ValueError(f"FUSION_SWEEP_SPEED: bad item {part!r}; use 'fast', "
                                     f"'reference' or key=value with key in {', '.join(names)}")
                v: Any = int(value) if key == "eval_batch_mult" else value.lower() in ("1", "true", "yes", "on")
                out = dataclasses.replace(out, **{key: v})
        return out

    def __post_init__(self) -> None:
        if not isinstance(self.eval_batch_mult, int) or self.eval_batch_mult < 1:
            raise ValueError(f"eval_batch_mult must be a positive integer, got {self.eval_batch_mult!r}")

    def label(self) -> str:
        """The speed mode as the platform records it: "fast" (the default), "reference", or
        the switches that differ from the default ("heap_reuse=0,eval_batch_mult=2")."""
        if self == type(self)():
            return "fast"
        if self == type(self).reference():
            return "reference"
        default = type(self)()
        return ",".join(f"{k}={int(v) if isinstance(v, bool) else v}"
                        for k, v in asdict(self).items() if getattr(default, k) != v)

    def for_device(self, device: torch.device) -> "SpeedOptions":
        """The switches that apply on `device`: heap reuse is a glibc tweak for CPU
        attention tensors; a CUDA trial's tensors live on the GPU, so it would only keep
        up to 2 GB of host memory per worker for nothing (off on CUDA)."""
        return dataclasses.replace(self, heap_reuse=False) if device.type == "cuda" else self

    @classmethod
    def from_env(cls) -> "SpeedOptions":
        return cls.parse(os.environ.get("FUSION_SWEEP_SPEED", "fast"))


@dataclass
class EpochRecord:
    epoch: int  # 1-based
    train_loss: float
    train_acc: float
    val_loss: float
    val_acc: float
    seconds: float
    tokens_per_second: float  # real (non-pad) training tokens per second


@dataclass
class TrialResult:
    config: dict[str, Any]
    test_acc: float
    test_macro_f1: float
    best_val_acc: float
    best_epoch: int
    epochs_run: int
    params: int
    fusion_params: int
    train_seconds: float
    tokens_per_second: float
    latency_ms_per_sample: float
    median_tokens: float
    # Analytic forward FLOPs per real token for a document of the evaluated split's median
    # length (`FusionClassifier.forward_flops`): the cost axis that does not depend on hardware.
    flops_per_token: float
    curve: list[EpochRecord]
    fingerprints: dict[str, str]
    predictions: dict[str, list] = field(default_factory=dict)
    device: str = "cpu"
    checkpoint: dict[str, torch.Tensor] | None = None
    # Where it ran (schema.PLATFORM_FIELDS -> str); its hash is fingerprints["platform"].
    platform: dict[str, str] = field(default_factory=dict)

    num_classes: int = 0
    # The test split's majority-class share (`majority_rate`); NaN when the test split is not
    # read (evaluate_test=False). A task figure, not a quality metric (schema.TASK_METRICS).
    test_majority_rate: float = float("nan")
    # The test split's size (documents): the n of the exact per-seed learn test; NaN when the
    # test split is not read.
    test_n: float = float("nan")
    # A CUDA trial's peak of allocated GPU memory (torch.cuda.max_memory_allocated), GiB;
    # NaN on a CPU, and then not among the metrics.
    gpu_peak_gib: float = float("nan")

    def metrics(self) -> dict[str, float]:
        keys = ("test_acc", "test_macro_f1", "best_val_acc", "best_epoch", "epochs_run", "params",
                "fusion_params", "train_seconds", "tokens_per_second", "latency_ms_per_sample",
                "median_tokens", "num_classes", "flops_per_token", "test_majority_rate",
                "test_n")
        peak = {} if math.isnan(self.gpu_peak_gib) else {"gpu_peak_gib": self.gpu_peak_gib}
        return {**{k: float(getattr(self, k)) for k in keys}, **peak}

    def to_json_dict(self, predictions: bool = False) -> dict[str, Any]:
        out = {**self.metrics(), "best_epoch": self.best_epoch, "epochs_run": self.epochs_run,
               "params": self.params, "fusion_params": self.fusion_params,
               "fingerprints": dict(self.fingerprints), "device": self.device,
               "platform": dict(self.platform),
               "config": dict(self.config), "curve": [asdict(r) for r in self.curve]}
        if predictions:
            out["predictions"] = self.predictions
        return out


# ------------------------------------------------------------------------ building blocks
def build_optimizer(config: TrialConfig, model: nn.Module) -> torch.optim.Optimizer:
    """Adam/AdamW with the fused kernel where PyTorch has one (CPU and CUDA floating tensors).

    `fused` is the same Adam update in one vectorised pass over all parameters instead of a
    Python loop of ~10 elementwise ops per tensor: identical up to float reordering (about
    1 ulp), ~5× less optimizer time on CPU, where the dense 50k×d embedding dominates it.
    """
    cls = OPTIMIZERS[config.optimizer]
    params = list(model.parameters())
    fused = bool(params) and all(p.device.type in ("cpu", "cuda") and p.is_floating_point()
                                 for p in params)
    return cls(params, lr=config.lr, weight_decay=config.weight_decay, fused=fused or None)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' requested but no CUDA device is available; choose from ['auto', 'cpu']")
    return torch.device(name)


@contextmanager
def cpu_threads(n: int) -> Iterator[None]:
    old = torch.get_num_threads()
    if n > 0:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _to(ids: np.ndarray, labels: np.ndarray, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Host arrays -> tensors on `device`. To a GPU through pinned memory with non-blocking
    copies: the host never waits for the copy (the caching host allocator keeps the pinned
    block until the copy has run), so a training step has no host sync."""
    if device.type != "cuda":
        return torch.from_numpy(ids).to(device), torch.from_numpy(labels).to(device)
    return tuple(torch.from_numpy(a).pin_memory().to(device, non_blocking=True)  # type: ignore[return-value]
                 for a in (ids, labels))


def objective(model: nn.Module, loss: torch.Tensor) -> torch.Tensor:
    """What a step minimises: the classification loss plus the encoder's auxiliary term of
    the same forward (SOES's attention-graph regulariser), if any. Logged losses stay the
    classification loss, comparable across encoders."""
    aux = model.aux_loss() if isinstance(model, FusionClassifier) else None
    return loss if aux is None else loss + aux


def train_epoch(model: nn.Module, optimizer: torch.optim.Optimizer, split: EncodedSplit,
                batches: list[np.ndarray], config: TrialConfig, device: torch.device,
                pad_id: int = 0, speed: SpeedOptions | None = None) -> tuple[float, float, int]:
    """-> (mean loss, accuracy, real tokens seen). `speed`: None = `SpeedOptions()`."""
    speed = speed if speed is not None else SpeedOptions()
    if not (speed.vector_pad or speed.epoch_sync):
        return _train_epoch_reference(model, optimizer, split, batches, config, device, pad_id)
    model.train()
    losses: list[torch.Tensor] = []
    outputs: list[tuple[torch.Tensor, torch.Tensor]] = []
    sizes: list[int] = []
    loss_sum, correct, n, tokens = 0.0, 0, 0, 0
    for ids, y, real, padded in batch_stream(split, batches, config.max_len, pad_id, device,
                                             speed.vector_pad):
        with autocast(config.precision, device):
            logits = model(ids, padded)  # (B, C)
            loss = F.cross_entropy(logits, y)
        optimizer.zero_grad(set_to_none=True)
        objective(model, loss).backward()
        if config.grad_clip > 0:
            nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        if speed.epoch_sync:
            losses.append(loss.detach())
            outputs.append((logits.detach(), y))
            sizes.append(len(y))
        else:
            loss_sum += float(loss.detach()) * len(y)
            correct += int((logits.argmax(-1) == y).sum())
            n += len(y)
        tokens += real
    if speed.epoch_sync and sizes:
        # One sync. Same values and summation order as the per-step float()/int() path.
        for v, b in zip(torch.stack(losses).tolist(), sizes):
            loss_sum += v * b
        logits_all = torch.cat([o for o, _ in outputs])
        y_all = torch.cat([t for _, t in outputs])
        correct = int((logits_all.argmax(-1) == y_all).sum())
        n = sum(sizes)
    return loss_sum / max(n, 1), correct / max(n, 1), tokens


def _train_epoch_reference(model: nn.Module, optimizer: torch.optim.Optimizer, split: EncodedSplit,
                           batches: list[np.ndarray], config: TrialConfig, device: torch.device,
                           pad_id: int = 0) -> tuple[float, float, int]:
    """The original loop (SpeedOptions.reference()): pad each batch, sync every step."""
    model.train()
    loss_sum, correct, n, tokens = 0.0, 0, 0, 0
    for index in batches:
        ids_np, y_np = pad_batch(split, index, config.max_len, pad_id)
        ids, y = _to(ids_np, y_np, device)
        with autocast(config.precision, device):
            logits = model(ids, has_padding(ids_np, pad_id))  # (B, C)
            loss = F.cross_entropy(logits, y)
        optimizer.zero_grad(set_to_none=True)
        objective(model, loss).backward()
        if config.grad_clip > 0:
            nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        loss_sum += float(loss.detach()) * len(index)
        correct += int((logits.argmax(-1) == y).sum())
        n += len(index)
        tokens += int((ids_np != pad_id).sum())
    return loss_sum / max(n, 1), correct / max(n, 1), tokens


def batch_stream(split: EncodedSplit, batches: list[np.ndarray], max_len: int, pad_id: int,
                 device: torch.device, vectorised: bool = True
                 ) -> Iterator[tuple[torch.Tensor, torch.Tensor, int, bool]]:
    """(ids, labels, real tokens, padded) per batch, padded just before use (`vectorised`: one
    numpy gather per batch, else `pad_batch`'s per-row loop; the same arrays either way).
    The token count and `padded` (`has_padding`) come from the host arrays: no device sync."""
    arrays = (pad_batches(split, batches, max_len, pad_id) if vectorised
              else (pad_batch(split, index, max_len, pad_id) for index in batches))
    for ids, y in arrays:
        yield (*_to(ids, y, device), int(np.count_nonzero(ids != pad_id)), has_padding(ids, pad_id))


class EvalCache:
    """A split's evaluation batches (length-sorted, `batch_size` each), padded and moved to the
    device once per trial: they never change between epochs."""

    def __init__(self, split: EncodedSplit, config: TrialConfig, device: torch.device,
                 pad_id: int, batch_size: int) -> None:
        batches = eval_batches(truncated_lengths(split, config.max_len), batch_size)
        self.size = len(split)
        self.order = np.concatenate(batches) if batches else np.zeros(0, dtype=np.int64)
        self.batches = [(*_to(ids, y, device), has_padding(ids, pad_id))
                        for ids, y in pad_batches(split, batches, config.max_len, pad_id)]


@torch.inference_mode()
def predict(model: nn.Module, split: EncodedSplit, config: TrialConfig, device: torch.device,
            pad_id: int = 0, cache: EvalCache | None = None) -> tuple[float, np.ndarray, np.ndarray]:
    """-> (mean loss, predictions (N,), probabilities (N, C)) in the split's document order.

    With `cache` (the fast path) the cached batches are used: one softmax, one loss and one
    host copy per split; the loss is summed over documents in float64 (the reference sums
    per-batch float32 sums), so it matches up to float reordering.
    """
    if cache is None:
        return _predict_reference(model, split, config, device, pad_id)
    model.eval()
    if not cache.batches:
        return 0.0, np.zeros(0, dtype=np.int64), np.zeros((0, 0))
    with autocast(config.precision, device):
        logits = torch.cat([model(ids, padded).float() for ids, _, padded in cache.batches])
    y = torch.cat([t for _, t, _ in cache.batches])
    loss_sum = float(F.cross_entropy(logits, y, reduction="none").double().sum())
    p = logits.softmax(-1).cpu().numpy()
    probs = np.zeros((cache.size, p.shape[1]), dtype=np.float32)
    preds = np.zeros(cache.size, dtype=np.int64)
    probs[cache.order] = p
    preds[cache.order] = p.argmax(-1)
    return loss_sum / max(cache.size, 1), preds, probs


@torch.inference_mode()
def _predict_reference(model: nn.Module, split: EncodedSplit, config: TrialConfig,
                       device: torch.device, pad_id: int = 0) -> tuple[float, np.ndarray, np.ndarray]:
    model.eval()
    lengths = truncated_lengths(split, config.max_len)
    preds = np.zeros(len(split), dtype=np.int64)
    probs: np.ndarray | None = None
    loss_sum = 0.0
    for index in eval_batches(lengths, config.batch_size):
        ids_np, y_np = pad_batch(split, index, config.max_len, pad_id)
        ids, y = _to(ids_np, y_np, device)
        with autocast(config.precision, device):
            logits = model(ids, has_padding(ids_np, pad_id)).float()
        loss_sum += float(F.cross_entropy(logits, y, reduction="sum"))
        p = logits.softmax(-1).cpu().numpy()
        if probs is None:
            probs = np.zeros((len(split), p.shape[1]), dtype=np.float32)
        probs[index] = p
        preds[index] = p.argmax(-1)
    return loss_sum / max(len(split), 1), preds, probs if probs is not None else np.zeros((0, 0))


def majority_rate(labels: np.ndarray) -> float:
    """Share of the most frequent class in `labels` (N,): the accuracy of always predicting
    it. NaN for no labels."""
    if len(labels) == 0:
        return math.nan
    return float(np.bincount(np.asarray(labels, dtype=np.int64)).max() / len(labels))


def macro_f1(labels: np.ndarray, preds: np.ndarray) -> float:
    """Mean F1 over classes present in labels ∪ preds (scikit-learn's 'macro' convention)."""
    scores = []
    for c in np.union1d(labels, preds):
        tp = np.sum((preds == c) & (labels == c))
        denom = np.sum(preds == c) + np.sum(labels == c)
        scores.append(2.0 * tp / denom if denom else 0.0)
    return float(np.mean(scores)) if scores else float("nan")


@torch.inference_mode()
def measure_latency(model: nn.Module, split: EncodedSplit, config: TrialConfig, device: torch.device,
                    pad_id: int = 0, max_batches: int = 4, warmup: bool = True) -> float:
    """Median ms per document over `latency_repeats` timed passes (after one untimed warm-up
    pass when `warmup`) over the split's first `max_batches` evaluation batches at the
    training batch size."""
    model.eval()
    lengths = truncated_lengths(split, config.max_len)
    padded = [pad_batch(split, b, config.max_len, pad_id)
              for b in eval_batches(lengths, config.batch_size)[:max_batches]]
    batches = [(_to(ids, y, device)[0], has_padding(ids, pad_id)) for ids, y in padded]
    n_docs = sum(b.shape[0] for b, _ in batches)

    def one_pass() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        with autocast(config.precision, device):
            for ids, pad in batches:
                model(ids, pad)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - t0

    if warmup:
        one_pass()  # warm-up: allocator, kernel selection
    times = [one_pass() for _ in range(config.latency_repeats)]
    return float(np.median(times)) * 1000.0 / max(n_docs, 1)


# ------------------------------------------------------------------------------ the trial
def load_data(config: TrialConfig) -> EncodedData:
    return load_encoded(config.dataset, data_dir=config.data_dir, data_seed=config.data_seed,
                        cache_dir=config.cache_dir, limit_train=config.limit_train,
                        limit_eval=config.limit_eval)


def train_trial(config: TrialConfig, callback: Callable[[EpochRecord], None] | None = None,
                data: EncodedData | None = None, speed: SpeedOptions | None = None) -> TrialResult:
    """Train, select the best-validation epoch, restore it, evaluate on test.

    `callback(record)` is called after every epoch (the sweep layer forwards it to Ray/MLflow).
    `data` overrides loading (tests, benchmarks). With `config.evaluate_test=False` the test
    split is never read (hyperparameter tuning). `speed`: execution switches that never change
    the result beyond float reordering (None = `SpeedOptions.from_env()`, the fast path).
    """
    data = data if data is not None else load_data(config)
    validate_encoded(data, include_test=config.evaluate_test)
    device = resolve_device(config.device)
    speed = (speed if speed is not None else SpeedOptions.from_env()).for_device(device)
    if speed.heap_reuse:
        keep_freed_memory()
    with cpu_threads(config.num_threads), deterministic(device), \
            precision_mode(config.precision, device):
        return _run(config, data, device, callback, speed)


def _run(config: TrialConfig, data: EncodedData, device: torch.device,
         callback: Callable[[EpochRecord], None] | None, speed: SpeedOptions) -> TrialResult:
    model = build_model(config, data.vocab_size, data.num_classes, data.pad_id)
    fingerprints = {
        "split": data.fingerprint(config.max_len, config.evaluate_test),
        "batch_order": "",
        "shared_init": shared_init_hash(model),
        "encoder_init": encoder_init_hash(model),
    }
    # inside the thread, determinism and precision settings
    platform = describe_platform(device, config.precision, speed.label())
    fingerprints[PLATFORM_FINGERPRINT] = platform_fingerprint(platform)
    schedule = training_schedule(data.train, config)
    fingerprints["batch_order"] = schedule_hash(schedule)
    model.to(device)
    optimizer = build_optimizer(config, model)
    with dropout_stream(derive_seed(config.seed, "dropout", stream_dataset(config)), device) as fp, \
            gpu_peak(device) as peak:
        fingerprints["dropout"] = fp
        result = _train_and_test(config, data, device, callback, model, optimizer, schedule,
                                 fingerprints, speed)
    result.platform = platform
    result.gpu_peak_gib = peak.get("gib", math.nan)
    return result


@contextmanager
def gpu_peak(device: torch.device) -> Iterator[dict[str, float]]:
    """Yields a dict that holds, after the block, the block's peak of allocated CUDA memory
    in GiB ("gib"; the peak counter is reset on entry); nothing on a CPU."""
    out: dict[str, float] = {}
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    yield out
    if device.type == "cuda":
        out["gib"] = torch.cuda.max_memory_allocated(device) / 2**30


@dataclass
class _Fit:
    """What the training loop hands to the test: the curve and the best epoch's weights."""

    curve: list[EpochRecord]
    best_val: float
    best_epoch: int
    best_state: dict[str, torch.Tensor]
    train_seconds: float
    train_tokens: int


def _train_and_test(config: TrialConfig, data: EncodedData, device: torch.device,
                    callback: Callable[[EpochRecord], None] | None, model: FusionClassifier,
                    optimizer: torch.optim.Optimizer, schedule: list[list[np.ndarray]],
                    fingerprints: dict[str, str], speed: SpeedOptions) -> TrialResult:
    eval_bs = config.batch_size * speed.eval_batch_mult
    fit = _fit(config, data, device, callback, model, optimizer, schedule, speed, eval_bs)
    curve, best_val, best_epoch, best_state = fit.curve, fit.best_val, fit.best_epoch, fit.best_state
    train_seconds, train_tokens = fit.train_seconds, fit.train_tokens
    model.load_state_dict(best_state)
    eval_split = data.test if config.evaluate_test else data.val
    test_acc, test_f1, predictions = _test(config, data, device, model, speed, eval_bs)
    median = float(np.median(truncated_lengths(eval_split, config.max_len)))
    median_len = max(int(round(median)), 1)
    return TrialResult(
        config=asdict(config),  # its values (in the key), none of TrialConfig's code
        test_acc=test_acc,
        test_macro_f1=test_f1,
        best_val_acc=best_val,
        best_epoch=best_epoch,
        epochs_run=len(curve),
        params=count_parameters(model),
        fusion_params=count_parameters(model.fusion),
        train_seconds=train_seconds,
        tokens_per_second=train_tokens / max(train_seconds, 1e-9),
        latency_ms_per_sample=measure_latency(
            model, eval_split, config, device, data.pad_id,
            warmup=speed.latency_warmup or config.latency_repeats < 3),
        median_tokens=median,
        flops_per_token=model.forward_flops(median_len) / median_len,
        curve=curve,
        fingerprints=fingerprints,
        predictions=predictions,
        device=str(device),
        checkpoint=best_state if config.save_checkpoint else None,
        num_classes=data.num_classes,
        test_majority_rate=majority_rate(data.test.labels) if config.evaluate_test else math.nan,
        test_n=len(data.test) if config.evaluate_test else math.nan,
    )


def _fit(config: TrialConfig, data: EncodedData, device: torch.device,
         callback: Callable[[EpochRecord], None] | None, model: FusionClassifier,
         optimizer: torch.optim.Optimizer, schedule: list[list[np.ndarray]],
         speed: SpeedOptions, eval_bs: int) -> _Fit:
    """Train epoch by epoch, validating after each; keep the best epoch's weights (on the
    CPU) and stop early after `patience` epochs without a `min_delta` gain."""
    val_cache = EvalCache(data.val, config, device, data.pad_id, eval_bs) if speed.eval_cache else None
    curve: list[EpochRecord] = []
    best_val, best_epoch, best_state, stale = -math.inf, 0, None, 0
    train_seconds, train_tokens = 0.0, 0
    for epoch, batches in enumerate(schedule, start=1):
        t0 = time.perf_counter()
        loss, acc, tokens = train_epoch(model, optimizer, data.train, batches, config, device,
                                        data.pad_id, speed)
        seconds = time.perf_counter() - t0
        train_seconds += seconds
        train_tokens += tokens
        val_loss, val_pred, _ = predict(model, data.val, config, device, data.pad_id, val_cache)
        val_acc = float(np.mean(val_pred == data.val.labels))
        record = EpochRecord(epoch, loss, acc, val_loss, val_acc, seconds, tokens / max(seconds, 1e-9))
        curve.append(record)
        if callback is not None:
            callback(record)
        if val_acc > best_val + config.min_delta or best_state is None:
            best_val, best_epoch, stale = val_acc, epoch, 0
            best_state = copy.deepcopy({k: v.detach().cpu() for k, v in model.state_dict().items()})
        else:
            stale += 1
            if config.patience and stale >= config.patience:
                break
    return _Fit(curve, best_val, best_epoch, best_state, train_seconds, train_tokens)


def _test(config: TrialConfig, data: EncodedData, device: torch.device, model: FusionClassifier,
          speed: SpeedOptions, eval_bs: int) -> tuple[float, float, dict[str, list]]:
    """(test accuracy, test macro-F1, per-example predictions) of the model as it is; NaN and
    no predictions when the trial must not read the test split (`evaluate_test=False`)."""
    if not config.evaluate_test:
        return float("nan"), float("nan"), {}
    test_cache = (EvalCache(data.test, config, device, data.pad_id, eval_bs)
                  if speed.eval_cache else None)
    _, test_pred, test_probs = predict(model, data.test, config, device, data.pad_id, test_cache)
    predictions = {"index": list(range(len(data.test))), "label": data.test.labels.tolist(),
                   "pred": test_pred.tolist(), "probs": np.round(test_probs, 6).tolist()}
    return (float(np.mean(test_pred == data.test.labels)), macro_f1(data.test.labels, test_pred),
            predictions)

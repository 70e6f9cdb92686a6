"""The paired-seed protocol, determinism, config validation and the trainer's result."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fusion_sweep.trial.config import TrialConfig
from fusion_sweep.trial.data.types import EncodedData, EncodedSplit
from fusion_sweep.trial.models.fusion import FUSIONS
from fusion_sweep.schema import (ENCODER_FINGERPRINTS, FINGERPRINTS, PLATFORM_FINGERPRINT,
                                 platform_fingerprint)
from fusion_sweep.trial.seeds import derive_seed
from fusion_sweep.trial.trainer import EpochRecord, macro_f1, train_trial

TINY = dict(d_model=16, heads=2, layers=1, dim_ff=32, epochs=2, batch_size=8, max_len=80,
            num_threads=1, latency_repeats=1)


def random_split(rng: np.random.Generator, n: int, classes: int = 3, vocab: int = 60,
                 lengths: tuple[int, int] = (3, 30), first: tuple[int, ...] = ()) -> EncodedSplit:
    """n random documents, lengths in [lengths[0], lengths[1]); `first` overrides the first
    lengths (edge cases such as empty or over-long documents)."""
    lens = rng.integers(*lengths, n)
    lens[:len(first)] = first
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    return EncodedSplit(rng.integers(2, vocab, offsets[-1]).astype(np.int32), offsets,
                        rng.integers(0, classes, n).astype(np.int64))


@pytest.fixture(scope="module")
def data() -> EncodedData:
    rng = np.random.default_rng(0)
    return EncodedData("synthetic-short", random_split(rng, 64), random_split(rng, 24),
                       random_split(rng, 24), vocab_size=60, num_classes=4)


def cfg(**kw) -> TrialConfig:
    return TrialConfig.build("synthetic-short", **{**TINY, **kw})


def test_same_seed_different_fusion_share_fingerprints(data: EncodedData) -> None:
    prints = {f: train_trial(cfg(fusion=f), data=data).fingerprints for f in sorted(FUSIONS)}
    first = prints["add"]
    assert all(p == first for p in prints.values()), prints
    # a different PE family is a different variant too, with the same shared stream
    assert train_trial(cfg(pe="learned", fusion="concat"), data=data).fingerprints == first


def test_different_seeds_give_different_fingerprints(data: EncodedData) -> None:
    a = train_trial(cfg(seed=0), data=data).fingerprints
    b = train_trial(cfg(seed=1), data=data).fingerprints
    assert a["split"] == b["split"]  # the split depends on data_seed, not the trial seed
    assert a["batch_order"] != b["batch_order"]
    assert a["shared_init"] != b["shared_init"]


def test_bit_for_bit_deterministic(data: EncodedData) -> None:
    a = train_trial(cfg(fusion="gate-scalar"), data=data)
    b = train_trial(cfg(fusion="gate-scalar"), data=data)
    assert a.test_acc == b.test_acc
    assert [r.train_loss for r in a.curve] == [r.train_loss for r in b.curve]
    assert a.predictions["probs"] == b.predictions["probs"]


def test_trial_does_not_touch_global_rng(data: EncodedData) -> None:
    import torch

    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    train_trial(cfg(), data=data)
    assert torch.equal(torch.rand(3), expected)


def test_result_fields_and_callback(data: EncodedData) -> None:
    seen: list[EpochRecord] = []
    r = train_trial(cfg(epochs=3), callback=seen.append, data=data)
    assert [s.epoch for s in seen] == [1, 2, 3] and r.curve == seen
    assert 0.0 <= r.test_acc <= 1.0 and 0.0 <= r.test_macro_f1 <= 1.0
    assert r.best_val_acc == max(s.val_acc for s in seen)
    assert 1 <= r.best_epoch <= 3 and r.epochs_run == 3
    assert r.params > 0 and r.fusion_params == 0
    assert r.latency_ms_per_sample > 0 and r.tokens_per_second > 0
    assert len(r.predictions["pred"]) == len(data.test)
    assert set(r.fingerprints) == set(FINGERPRINTS + ENCODER_FINGERPRINTS + (PLATFORM_FINGERPRINT,))
    assert r.fingerprints[PLATFORM_FINGERPRINT] == platform_fingerprint(r.platform)
    assert r.num_classes == data.num_classes == r.metrics()["num_classes"]
    assert set(r.metrics()) >= {"test_acc", "best_val_acc", "test_macro_f1", "latency_ms_per_sample"}


def test_early_stopping_stops(data: EncodedData) -> None:
    # min_delta > 1 means no epoch can ever improve on the first: stop after `patience` more
    r = train_trial(cfg(epochs=10, patience=2, min_delta=2.0), data=data)
    assert r.epochs_run == 3 and r.best_epoch == 1


def test_evaluate_test_false_never_reads_test(data: EncodedData) -> None:
    class Poison(EncodedSplit):
        def __getattribute__(self, name):  # any access to the test split fails loudly
            raise AssertionError(f"test split read: {name}")

    poisoned = EncodedData(data.name, data.train, data.val,
                           Poison(data.test.ids, data.test.offsets, data.test.labels),
                           data.vocab_size, data.num_classes)
    r = train_trial(cfg(evaluate_test=False), data=poisoned)
    assert math.isnan(r.test_acc) and r.best_val_acc >= 0


def test_derive_seed_streams_are_distinct() -> None:
    streams = ("data_order", "shared_init", "fusion_init", "pe_init", "dropout")
    seeds = {derive_seed(0, s, "synthetic-short") for s in streams}
    assert len(seeds) == 5
    assert derive_seed(0, "dropout", "imdb") != derive_seed(1, "dropout", "imdb")
    # every stream depends on the dataset too: same seed, other dataset -> uncorrelated start
    for s in streams:
        assert derive_seed(0, s, "synthetic-short") != derive_seed(0, s, "synthetic-long")


def first_step_dropout_masks(fusion: str, data: EncodedData, seed: int = 0) -> list:
    """The boolean keep-masks of every nn.Dropout of encoder layer 0 on the first training
    batch, captured by forward hooks (a zeroed output where the input was nonzero)."""
    import torch

    from fusion_sweep.trial.models.encoder import FusionClassifier

    masks: list = []
    original = FusionClassifier.forward

    def hook(module, inputs, output):
        if module.training and len(masks) < 3:
            masks.append(((output == 0) & (inputs[0] != 0)).clone())

    def forward(self, ids, padded=None):
        if not getattr(self, "_hooked", False):
            self._hooked = True
            layer = self.encoder.layers[0]
            for m in (layer.dropout1, layer.dropout, layer.dropout2):
                m.register_forward_hook(hook)
        return original(self, ids, padded)

    FusionClassifier.forward = forward
    try:
        # gelu, not the synthetic regimes' relu: a mask is read where the dropout's input is
        # nonzero, and relu's exact zeros (which differ between fusions) would hide mask bits
        r = train_trial(cfg(fusion=fusion, seed=seed, epochs=1, dropout=0.3, activation="gelu"),
                        data=data)
    finally:
        FusionClassifier.forward = original
    assert len(masks) == 3 and all(bool(m.any()) for m in masks)
    return [m for m in masks] + [r.fingerprints["dropout"]]


@pytest.mark.parametrize("fusion", sorted(FUSIONS))
def test_dropout_masks_identical_across_fusions(fusion: str, data: EncodedData) -> None:
    """Same seed: every variant draws the same dropout masks for the layers it shares, even
    though concat/gate-* construct more parameters than add (the constructors' default init
    used to consume the dropout stream)."""
    import torch

    base, other = first_step_dropout_masks("add", data), first_step_dropout_masks(fusion, data)
    assert base[-1] == other[-1]  # the dropout fingerprint
    for a, b in zip(base[:-1], other[:-1]):
        assert torch.equal(a, b)


def test_dropout_fingerprint_differs_across_seeds(data: EncodedData) -> None:
    a = train_trial(cfg(seed=0, epochs=1), data=data).fingerprints["dropout"]
    b = train_trial(cfg(seed=1, epochs=1), data=data).fingerprints["dropout"]
    assert a != b


def test_macro_f1_matches_hand_computation() -> None:
    y, p = np.array([0, 0, 1, 1, 2]), np.array([0, 1, 1, 1, 0])
    # class 0: tp1 fp1 fn1 -> 0.5; class 1: tp2 fp1 fn0 -> 0.8; class 2: 0
    assert macro_f1(y, p) == pytest.approx((0.5 + 0.8 + 0.0) / 3)


@pytest.mark.parametrize("field,value,pattern", [
    ("fusion", "sum", r"unknown fusion 'sum'; choose from add, concat, "),
    ("pe", "abs", r"unknown pe 'abs'; choose from alibi, "),
    ("d_model", 0, r"d_model must be a positive integer, got 0"),
    ("max_len", -4, r"max_len must be a positive integer, got -4"),
    ("batch_size", 0, r"batch_size must be a positive integer"),
    ("dropout", 1.5, r"dropout must be in \[0, 1\)"),
    ("optimizer", "sgd", r"unknown optimizer 'sgd'; choose from adam, adamw"),
    ("heads", 3, r"d_model \(\d+\) must be divisible by heads \(3\)"),
])
def test_config_errors_name_field_and_choices(field: str, value: object, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        TrialConfig.build("synthetic-short", **{field: value})


def test_config_reports_all_errors_at_once() -> None:
    with pytest.raises(ValueError) as e:
        TrialConfig.build("synthetic-short", fusion="x", pe="y", epochs=0)
    msg = str(e.value)
    assert "unknown fusion 'x'" in msg and "unknown pe 'y'" in msg and "epochs must be" in msg


def test_unknown_dataset_and_field() -> None:
    with pytest.raises(ValueError, match=r"unknown dataset 'mnist'; choose from agnews, arxiv, "):
        TrialConfig.build("mnist")
    with pytest.raises(ValueError, match=r"unknown trial config field\(s\) 'epoch' \(did you mean 'epochs'\?\)"):
        TrialConfig.build("synthetic-short", epoch=3)


def test_overrides_are_coerced_from_strings() -> None:
    c = TrialConfig.build("arxiv", epochs="3", lr="1e-3", norm_first="true")
    assert (c.epochs, c.lr, c.norm_first) == (3, 1e-3, True)
    assert (c.max_len, c.d_model, c.layers, c.optimizer, c.patience) == (4096, 128, 2, "adam", 4)


def test_bad_labels_and_empty_split(data: EncodedData) -> None:
    bad = EncodedData(data.name, data.train, data.val,
                      EncodedSplit(data.test.ids, data.test.offsets, data.test.labels + 9),
                      data.vocab_size, data.num_classes)
    with pytest.raises(ValueError, match=r"test split has label \d+ outside \[0, 4\)"):
        train_trial(cfg(), data=bad)
    empty = EncodedData(data.name, data.train, data.val.subset(np.array([], np.int64)), data.test,
                        data.vocab_size, data.num_classes)
    with pytest.raises(ValueError, match=r"the val split is empty"):
        train_trial(cfg(), data=empty)


def test_trial_key_ignores_execution_fields() -> None:
    a, b = cfg(num_threads=1), cfg(num_threads=2, device="cpu")
    assert a.trial_key("v1") == b.trial_key("v1")
    assert a.trial_key("v1") != cfg(lr=1e-3).trial_key("v1")
    assert a.trial_key("v1") != a.trial_key("v2")


def test_majority_rate_is_a_final_metric_without_a_direction(data: EncodedData) -> None:
    from fusion_sweep.schema import FINAL_METRICS, METRIC_DIRECTIONS, TASK_METRICS
    from fusion_sweep.trial.trainer import majority_rate

    r = train_trial(cfg(epochs=1), data=data)
    labels = data.test.labels
    expected = np.bincount(labels).max() / len(labels)
    assert r.test_majority_rate == pytest.approx(expected)
    assert r.metrics()["test_majority_rate"] == pytest.approx(expected)
    assert set(r.metrics()) >= set(FINAL_METRICS)
    assert "test_majority_rate" in TASK_METRICS and "test_majority_rate" not in METRIC_DIRECTIONS
    assert majority_rate(np.array([2, 2, 0, 1])) == 0.5 and math.isnan(majority_rate(np.array([])))
    tuning = train_trial(cfg(epochs=1, evaluate_test=False), data=data)
    assert math.isnan(tuning.test_majority_rate)
    assert r.metrics()["test_n"] == len(labels) and "test_n" in TASK_METRICS
    assert math.isnan(tuning.test_n)


@pytest.mark.parametrize("cached", [False, True])
def test_predict_evaluates_in_eval_mode(data: EncodedData, cached: bool) -> None:
    """A model handed to `predict` in training mode (dropout on) is evaluated without dropout,
    on both the reference and the cached path: two calls agree exactly, and with eval mode."""
    import torch

    from fusion_sweep.trial.models.encoder import construct_model
    from fusion_sweep.trial.trainer import EvalCache, predict

    config = cfg(dropout=0.5, attn_dropout=0.5)
    model = construct_model(config, data.vocab_size, data.num_classes, 0)
    device = torch.device("cpu")
    cache = EvalCache(data.test, config, device, 0, config.batch_size) if cached else None
    runs = []
    for _ in range(2):
        model.train()
        runs.append(predict(model, data.test, config, device, cache=cache))
    model.eval()
    reference = predict(model, data.test, config, device, cache=cache)
    for loss, preds, probs in runs:
        assert loss == reference[0]
        np.testing.assert_array_equal(probs, reference[2])
        np.testing.assert_array_equal(preds, reference[1])


@pytest.mark.parametrize("cached", [False, True])
def test_predict_loss_is_the_mean_over_documents_even_for_one(data: EncodedData,
                                                              cached: bool) -> None:
    """The loss `predict` returns is the mean cross-entropy per document, a one-document split
    included: the split's loss is that document's loss, the same on both paths."""
    import torch
    import torch.nn.functional as F

    from fusion_sweep.trial.models.encoder import construct_model
    from fusion_sweep.trial.trainer import EvalCache, predict

    config = cfg()
    model = construct_model(config, data.vocab_size, data.num_classes, 0).eval()
    device = torch.device("cpu")
    one = data.test.subset(np.array([0]))
    cache = EvalCache(one, config, device, 0, config.batch_size) if cached else None
    loss, _, _ = predict(model, one, config, device, cache=cache)
    ids = torch.as_tensor(one.ids[one.offsets[0]:one.offsets[1]], dtype=torch.long)[None]
    with torch.inference_mode():
        want = F.cross_entropy(model(ids).float(), torch.as_tensor(one.labels))
    assert loss == pytest.approx(float(want), rel=1e-5)

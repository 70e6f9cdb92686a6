"""The trainer's fast path (`SpeedOptions()`) computes what the reference path computes."""
from __future__ import annotations

import platform
import resource

import numpy as np
import pytest
import torch

from fusion_sweep.trial.batching import eval_batches, pad_batch, pad_batches, truncated_lengths
from fusion_sweep.trial.config import TrialConfig
from fusion_sweep.trial.data.types import EncodedData, EncodedSplit
from fusion_sweep.trial import heap, trainer
from fusion_sweep.trial.trainer import SpeedOptions, train_trial
from tests.test_trainer import random_split as trainer_split

TINY = dict(d_model=16, heads=2, layers=1, dim_ff=32, epochs=3, batch_size=8, max_len=80,
            num_threads=1, latency_repeats=1, dropout=0.1)


def random_split(rng: np.random.Generator, n: int) -> EncodedSplit:
    # includes empty documents and some above max_len
    return trainer_split(rng, n, classes=4, lengths=(0, 40), first=(0, 1, 85))


@pytest.fixture(scope="module")
def data() -> EncodedData:
    rng = np.random.default_rng(1)
    return EncodedData("synthetic-short", random_split(rng, 70), random_split(rng, 27),
                       random_split(rng, 29), vocab_size=60, num_classes=4)


def test_pad_batches_equals_pad_batch(data: EncodedData) -> None:
    for split in (data.train, data.val):
        batches = eval_batches(truncated_lengths(split, 20), 8)
        padded = list(pad_batches(split, batches, 20, 0))
        assert len(padded) == len(batches)
        for (ids, y), index in zip(padded, batches):
            ref_ids, ref_y = pad_batch(split, index, 20, 0)
            assert ids.dtype == ref_ids.dtype and np.array_equal(ids, ref_ids)
            assert np.array_equal(y, ref_y)
    empty = EncodedSplit(np.zeros(0, np.int32), np.zeros(3, np.int64), np.zeros(2, np.int64))
    assert np.array_equal(next(pad_batches(empty, [np.array([1, 0])], 8, 0))[0],
                          pad_batch(empty, np.array([1, 0]), 8, 0)[0])


@pytest.mark.parametrize("fusion,clip,fast", [
    ("add", 1.0, SpeedOptions()),
    ("gate-scalar", 0.0, SpeedOptions(eval_batch_mult=4)),
    ("concat", 1.0, SpeedOptions(vector_pad=False, eval_cache=False)),  # epoch_sync alone
    ("add", 0.0, SpeedOptions(epoch_sync=False, latency_warmup=True)),
])
def test_fast_path_matches_reference(data: EncodedData, fusion: str, clip: float,
                                     fast: SpeedOptions) -> None:
    config = TrialConfig.build("synthetic-short", **{**TINY, "fusion": fusion, "grad_clip": clip})
    ref = train_trial(config, data=data, speed=SpeedOptions.reference())
    new = train_trial(config, data=data, speed=fast)
    # the same trial on the same data: every fingerprint agrees but the platform's, which
    # records the speed mode (and nothing else differs in it)
    assert {**new.fingerprints, "platform": ""} == {**ref.fingerprints, "platform": ""}
    assert {k for k in new.platform if new.platform[k] != ref.platform[k]} == {"speed"}
    assert (new.platform["speed"], ref.platform["speed"]) == (fast.label(), "reference")
    assert new.test_acc == ref.test_acc and new.best_epoch == ref.best_epoch
    assert new.test_macro_f1 == ref.test_macro_f1
    assert new.predictions["pred"] == ref.predictions["pred"]
    np.testing.assert_allclose(new.predictions["probs"], ref.predictions["probs"], rtol=0, atol=1e-5)
    assert len(new.curve) == len(ref.curve)
    for a, b in zip(new.curve, ref.curve):
        assert a.train_acc == b.train_acc and a.val_acc == b.val_acc
        np.testing.assert_allclose([a.train_loss, a.val_loss], [b.train_loss, b.val_loss], rtol=1e-5)
    assert new.curve[-1].tokens_per_second > 0
    assert sum(r.tokens_per_second * r.seconds for r in new.curve) == pytest.approx(
        sum(r.tokens_per_second * r.seconds for r in ref.curve), rel=1e-9)  # same real tokens


def test_speed_options_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    assert SpeedOptions.parse("fast") == SpeedOptions()
    assert SpeedOptions.parse("reference") == SpeedOptions.reference()
    assert SpeedOptions.parse("reference,eval_cache=1,eval_batch_mult=2") == SpeedOptions(
        vector_pad=False, epoch_sync=False, eval_cache=True, eval_batch_mult=2, latency_warmup=True,
        heap_reuse=False)
    with pytest.raises(ValueError, match="vector_pad"):
        SpeedOptions.parse("nope=1")
    monkeypatch.setenv("FUSION_SWEEP_SPEED", "reference")
    assert SpeedOptions.from_env() == SpeedOptions.reference()
    monkeypatch.delenv("FUSION_SWEEP_SPEED")
    assert SpeedOptions.from_env() == SpeedOptions()


def test_heap_reuse_is_switched_on_by_the_fast_path_only(data: EncodedData,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(trainer, "keep_freed_memory", lambda: calls.append(1) or True)
    config = TrialConfig.build("synthetic-short", **{**TINY, "epochs": 1})
    train_trial(config, data=data, speed=SpeedOptions.reference())
    assert calls == []
    train_trial(config, data=data, speed=SpeedOptions())
    assert calls == [1]


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_keep_freed_memory_reuses_the_pages_of_a_large_tensor() -> None:
    """64 MB is above glibc's largest mmap threshold (32 MB): by default every such tensor is
    fresh pages, each page-faulted (15,000 of them); kept, a slightly smaller second tensor
    (so that it fits the freed block with its alignment) reuses the first's pages."""
    assert heap.keep_freed_memory() and heap.keep_freed_memory()  # idempotent
    n = 16_000_000  # floats: 64 MB
    first = torch.ones(n)
    del first
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    second = torch.ones(n - 262_144)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    assert second.sum().item() == n - 262_144
    assert faults < 1_000, f"{faults} page faults: the freed 64 MB was not reused"

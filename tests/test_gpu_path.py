"""The CUDA training path, checked on this CPU (issue 32): no host sync in a training step,
batches copied through pinned memory without blocking, no op mixing devices."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fusion_sweep.trial import seeds, trainer
from fusion_sweep.trial.config import TrialConfig
from fusion_sweep.trial.devicecheck import DeviceMixCounter, HostSyncCounter
from fusion_sweep.trial.models.encoder import has_padding
from fusion_sweep.trial.models.positional import POSITIONAL
from tests.test_trainer import random_split

TINY = dict(d_model=16, heads=2, layers=1, dim_ff=32, epochs=1, batch_size=8, max_len=80,
            num_threads=1, grad_clip=1.0)
STANDARD = [dict(pe=pe, fusion="add") for pe in sorted(POSITIONAL)]
RESSFORMER = [dict(encoder="ressformer", pe="none"), dict(encoder="ressformer", pe="none", asam=False),
              dict(encoder="ressformer", pe="none", r2mu=False),
              dict(encoder="ressformer", pe="sinusoidal", soes=False)]


@pytest.fixture(scope="module")
def split():
    return random_split(np.random.default_rng(0), 24, lengths=(3, 30))


def syncs(config: TrialConfig, split, steps: int) -> HostSyncCounter:
    model = seeds.build_model(config, 60, 4)
    optimizer = trainer.build_optimizer(config, model)
    batches = [np.arange(i * 8, (i + 1) * 8) for i in range(steps)]
    with HostSyncCounter() as counter:
        trainer.train_epoch(model, optimizer, split, batches, config, torch.device("cpu"), 0,
                            trainer.SpeedOptions())
    return counter


@pytest.mark.parametrize("variant", STANDARD + RESSFORMER, ids=lambda v: "-".join(map(str, v.values())))
def test_no_host_sync_in_a_training_step(variant, split):
    """Syncs of an epoch of 3 steps minus those of 1 step: 0 per step; the epoch's one sync
    (its loss and accuracy) stays. ReSSFormer on its torch path, as on a GPU."""
    from fusion_sweep.trial.models import kernels

    config = TrialConfig.build("synthetic-short", **{**TINY, **variant})
    with kernels.torch_path():
        one, three = syncs(config, split, 1), syncs(config, split, 3)
    assert three.total - one.total == 0, (one.counts, three.counts)
    assert one.total <= 1


def test_the_counter_sees_a_forward_without_host_padding(split):
    """A forward not told whether the batch is padded reads it from the device: one sync."""
    config = TrialConfig.build("synthetic-short", **TINY)
    model = seeds.build_model(config, 60, 4)
    ids = torch.from_numpy(next(trainer.pad_batches(split, [np.arange(8)], 80))[0])
    with HostSyncCounter() as counter:
        model(ids, has_padding(ids.numpy(), 0))
    assert counter.total == 0
    with HostSyncCounter() as counter:
        model(ids)
    assert counter.counts["_local_scalar_dense"] == 1
    with HostSyncCounter() as counter:
        float(ids.sum())  # a value read back
    assert counter.total == 1


def test_batches_go_to_cuda_pinned_and_non_blocking(monkeypatch):
    calls: list[tuple] = []

    def pin(self):
        calls.append(("pin", self.shape))
        return self

    def to(self, device, non_blocking=False):
        calls.append(("to", str(device), non_blocking))
        return self

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin)
    monkeypatch.setattr(torch.Tensor, "to", to)
    trainer._to(np.zeros((2, 3), np.int64), np.zeros(2, np.int64), torch.device("cuda"))
    assert calls == [("pin", (2, 3)), ("to", "cuda", True), ("pin", (2,)), ("to", "cuda", True)]


@pytest.mark.parametrize("variant", STANDARD + RESSFORMER, ids=lambda v: "-".join(map(str, v.values())))
def test_no_op_mixes_devices_with_parameters_on_meta(variant):
    from fusion_sweep.trial import memory

    config = TrialConfig.build("synthetic-short", **{**TINY, **variant})
    model = memory.meta_model(config)
    model.train()
    ids = torch.ones(8, 80, dtype=torch.long, device="meta")
    with DeviceMixCounter() as mixed:
        loss = torch.nn.functional.cross_entropy(model(ids, True), torch.zeros(8, dtype=torch.long,
                                                                               device="meta"))
        aux = model.aux_loss()
        (loss if aux is None else loss + aux).backward()
    assert mixed.total == 0, mixed.counts


def test_the_mix_counter_sees_a_cpu_tensor_meeting_a_meta_one():
    with DeviceMixCounter() as mixed:
        try:
            torch.ones(3, device="meta") + torch.ones(3)
        except RuntimeError:
            pass
    assert mixed.total == 1


def test_gpu_peak_is_read_on_cuda_only(monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda d=None: calls.append("reset"))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d=None: 3 * 2**30)
    with trainer.gpu_peak(torch.device("cuda")) as peak:
        assert calls == ["reset"]
    assert peak == {"gib": 3.0}
    with trainer.gpu_peak(torch.device("cpu")) as peak:
        pass
    assert peak == {} and calls == ["reset"]


def test_gpu_peak_is_a_metric_only_when_measured(split):
    import dataclasses
    import math

    from fusion_sweep.trial.data.types import EncodedData

    data = EncodedData("synthetic-short", split, split, split, vocab_size=60, num_classes=4)
    r = trainer.train_trial(TrialConfig.build("synthetic-short", **TINY), data=data)
    assert math.isnan(r.gpu_peak_gib) and "gpu_peak_gib" not in r.metrics()
    assert dataclasses.replace(r, gpu_peak_gib=2.5).metrics()["gpu_peak_gib"] == 2.5

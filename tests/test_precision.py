"""TrialConfig.precision: validated, in the trial key, applied by the trainer (bf16 autocast
runs on this CPU), recorded in the platform."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fusion_sweep.schema import NON_SEMANTIC_FIELDS, trial_key
from fusion_sweep.trial import platform
from fusion_sweep.trial.config import PRECISIONS, ConfigError, TrialConfig
from fusion_sweep.trial.trainer import train_trial
from tests.test_trainer import TINY, random_split
from fusion_sweep.trial.data.types import EncodedData


@pytest.fixture(scope="module")
def data() -> EncodedData:
    rng = np.random.default_rng(1)
    return EncodedData("synthetic-short", random_split(rng, 32), random_split(rng, 16),
                       random_split(rng, 16), vocab_size=60, num_classes=4)


def cfg(**kw) -> TrialConfig:
    return TrialConfig.build("synthetic-short", **{**TINY, "epochs": 1, **kw})


def test_bad_precision_names_the_field_and_the_choices():
    with pytest.raises(ConfigError, match=r"unknown precision 'fp16' \(did you mean 'bf16'\?\); choose from bf16, "
                                          r"fp32, tf32"):
        cfg(precision="fp16")


def test_precision_is_part_of_the_trial_key():
    assert "precision" not in NON_SEMANTIC_FIELDS
    keys = {trial_key(cfg(precision=p).to_dict(), "code") for p in PRECISIONS}
    assert len(keys) == len(PRECISIONS)
    assert "precision" in cfg().hyperparameters()  # logged as a param


def test_bf16_autocast_runs_forward_in_bfloat16_on_cpu(data, monkeypatch):
    """The training loss reads bf16 logits (the forward ran under autocast); the
    evaluation's loss reads them cast back to fp32."""
    seen: list[tuple[bool, torch.dtype]] = []
    original = torch.nn.functional.cross_entropy

    def spy(logits, y, *args, **kwargs):
        seen.append((torch.is_grad_enabled(), logits.dtype))
        return original(logits, y, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "cross_entropy", spy)
    result = train_trial(cfg(precision="bf16"), data=data)
    assert {dtype for training, dtype in seen if training} == {torch.bfloat16}
    assert np.isfinite(result.test_acc)
    assert result.platform["precision"] == "bf16"
    seen.clear()
    fp32 = train_trial(cfg(), data=data)
    assert {dtype for _, dtype in seen} == {torch.float32}
    assert fp32.platform["precision"] == "fp32"
    assert fp32.fingerprints["platform"] != result.fingerprints["platform"]


def test_master_weights_stay_fp32_under_bf16(data):
    result = train_trial(cfg(precision="bf16", save_checkpoint=True), data=data)
    assert {t.dtype for t in result.checkpoint.values() if t.is_floating_point()} == {torch.float32}


@pytest.mark.parametrize("precision", PRECISIONS)
def test_precision_mode_sets_tf32_only_for_tf32_on_cuda(precision):
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        _check_precision_mode(precision)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _check_precision_mode(precision: str) -> None:
    with platform.precision_mode(precision, torch.device("cuda")):
        assert torch.backends.cuda.matmul.allow_tf32 is (precision == "tf32")
        assert torch.backends.cudnn.allow_tf32 is (precision == "tf32")
    assert torch.backends.cuda.matmul.allow_tf32 is True
    with platform.precision_mode(precision, torch.device("cpu")):
        assert torch.backends.cuda.matmul.allow_tf32 is True


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_trial_flushes_cpu_subnormals_and_gives_the_mode_back(precision, device):
    """Inside a trial's precision mode the CPU reads and writes subnormals as zero
    (platform.flush_subnormals: a synthetic-long CPU trial 1.5 to 3.9 times faster);
    outside, torch's default (gradual underflow) again. The mode restores TF32 itself."""
    tiny = torch.tensor([1e-40], dtype=torch.float32)  # subnormal in fp32
    assert (tiny * 1.0).item() != 0.0
    with platform.precision_mode(precision, torch.device(device)):
        assert (tiny * 1.0).item() == 0.0
        assert (torch.tensor([1e-30]) * 1e-9).item() == 0.0  # a result below the range
    assert (tiny * 1.0).item() != 0.0

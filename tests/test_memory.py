"""trial/memory.py: the host and GPU memory estimates, checked against a meta-device count."""
from __future__ import annotations

import pytest
import torch

from fusion_sweep.space import load_space
from fusion_sweep.space_files import shipped_spaces
from fusion_sweep.trial import memory
from fusion_sweep.trial.config import TrialConfig
from fusion_sweep.trial.models.positional import POSITIONAL

A10G_BYTES = int(22.5 * 2**30)


def _variants(space_name: str) -> list[TrialConfig]:
    seen, out = set(), []
    for c in load_space(space_name).grid():
        key = (c.dataset, c.encoder_variant(), c.pe, c.fusion)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


@pytest.mark.parametrize("space", shipped_spaces())
def test_gpu_estimate_within_1_to_2x_of_the_meta_measurement(space):
    for c in _variants(space):
        est, measured = memory.gpu_memory_bytes(c), memory.measured_gpu_bytes(c)
        assert measured <= est <= 2 * measured, (c.describe(), est, measured)
        # the part above the fixed CUDA context, too
        ctx = memory.CUDA_CONTEXT_BYTES
        assert measured - ctx <= est - ctx <= 2 * (measured - ctx), (c.describe(), est, measured)


def test_arxiv_saves_about_4_gib_and_does_not_fit_a_quarter_of_an_a10g():
    c = TrialConfig.build("arxiv")
    saved = memory.saved_activation_bytes(c) / 2**30
    assert 3.5 < saved < 4.5  # issue 32's figure, fp32, d 128, L 4096, B 64
    assert memory.gpu_share_error(c, 1.0, A10G_BYTES) is None
    reason = memory.gpu_share_error(c, 0.25, A10G_BYTES)
    assert reason is not None and "arxiv" in reason and "gpu: 0.25" in reason


@pytest.mark.parametrize("pe", sorted(k for k, v in POSITIONAL.items() if v.has_bias))
def test_attention_bias_without_padding_has_no_batch_dimension(pe):
    c = TrialConfig.build("synthetic-short", pe=pe, fusion="add", max_len=80, d_model=16,
                          heads=2, dim_ff=32, batch_size=4)
    model = memory.meta_model(c)
    mask = torch.ones(4, 80, dtype=torch.bool, device="meta")
    unpadded = model._attn_mask(mask, 80, torch.float32, padded=False)
    assert unpadded.shape == (1, 2, 80, 80)
    assert model._attn_mask(mask, 80, torch.float32, padded=True).shape == (4, 2, 80, 80)


@pytest.mark.parametrize("pe", sorted(k for k, v in POSITIONAL.items() if v.has_bias))
def test_a_long_padded_attention_bias_is_counted_and_refused(pe):
    c = TrialConfig.build("arxiv", pe=pe, fusion="add")
    bias_gib = c.batch_size * c.heads * c.max_len ** 2 * 4 / 2**30  # 32 GiB
    assert memory.gpu_memory_bytes(c) / 2**30 > bias_gib
    reason = memory.gpu_share_error(c, 1.0, A10G_BYTES)
    assert reason is not None and "(B, H, L, L)" in reason and pe in reason


def test_precision_bf16_needs_less_activation_memory_than_fp32():
    c = TrialConfig.build("arxiv")
    assert memory.gpu_memory_bytes(c.replace(precision="bf16")) < memory.gpu_memory_bytes(c)


def test_host_estimate_on_a_gpu_trial_leaves_the_activations_out():
    c = TrialConfig.build("arxiv")
    assert memory.host_memory_bytes(c, gpu=True) < memory.host_memory_bytes(c)
    assert memory.host_memory_bytes(c, gpu=True) == memory.ACTOR_BASE_BYTES \
        + 8 * memory.parameter_count(c)


PAPER = [s for s in shipped_spaces() if s.startswith("paper-")]


@pytest.mark.parametrize("space", PAPER)
def test_paper_spaces_request_the_share_their_largest_trial_needs(space):
    """docs/cluster.md: as many trials per A10G as the largest trial's estimate allows, and
    the space's `gpu:` is that share (no more trials than fit, no fewer)."""
    s = load_space(space)
    need = max(memory.gpu_memory_bytes(c) for c in _variants(space))
    fit = int(A10G_BYTES // need)
    assert fit >= 1 and s.gpu * A10G_BYTES >= need
    assert int(1 / s.gpu) == fit  # Ray packs floor(1 / share) trials on one GPU


def test_the_cluster_doc_table_is_the_estimate():
    """docs/cluster.md's packing table: each space's largest-trial estimate and count, the
    trials per A10G and the space's `gpu:` as the code gives them now."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "cluster.md").read_text()
    rows = re.findall(r"^\| `([\w-]+)` \| .*? \| ([\d.]+) \| ([\d.]+) \| (\d+) \| ([\d.]+)", doc, re.M)
    assert {r[0] for r in rows} == set(shipped_spaces())
    for space, est, count, fit, share in rows:
        need = max(memory.gpu_memory_bytes(c) for c in _variants(space))
        largest = max(_variants(space), key=memory.gpu_memory_bytes)
        assert float(est) == pytest.approx(need / 2**30, abs=0.006), space
        assert float(count) == pytest.approx(memory.measured_gpu_bytes(largest) / 2**30,
                                             abs=0.006), space
        assert int(fit) == A10G_BYTES // need and float(share) == load_space(space).gpu, space

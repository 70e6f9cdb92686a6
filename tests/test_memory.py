"""trial/memory.py: the host and GPU memory estimates, checked against a meta-device count."""
from __future__ import annotations

import pytest
import torch

from fusion_sweep.plan.space import load_space
from fusion_sweep.plan.space_files import shipped_spaces
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


# ------------------------------------------------------------- the launch's GPU-share check
ARXIV_SPACE = ("name: {name}\ndatasets: [arxiv]\npes: [sinusoidal]\nfusions: [add]\nseeds: [0]\n"
               "resources: {{cpu: 1, gpu: {gpu}}}\n")


def _space(tmp_path, gpu: float, name: str = "aq"):
    p = tmp_path / f"{name}.yaml"
    p.write_text(ARXIV_SPACE.format(name=name, gpu=gpu))
    return load_space(p)


def test_the_launch_refuses_a_trial_over_its_gpu_share(tmp_path):
    from fusion_sweep.errors import UserError
    from fusion_sweep.plan.grid import plan
    from fusion_sweep.launch.memory import check_gpu_memory

    a10g = (A10G_BYTES, "an A10G")
    quarter = _space(tmp_path, 0.25)
    with pytest.raises(UserError, match=r"resources\.gpu in .*aq\.yaml: arxiv/sinusoidal/add/seed 0 "
                                        r"needs about 6\.\d GiB of GPU memory \(batch 64 x 4096 tokens, "
                                        r"precision fp32\) but its share gpu: 0\.25 of an A10G gives "
                                        r"5\.6 GiB; raise `resources: \{gpu: \.\.\.\}` \(a larger "
                                        r"share\), lower batch_size / max_len, or set precision: bf16"):
        check_gpu_memory(quarter, plan(quarter), a10g)
    whole = _space(tmp_path, 1)
    need = check_gpu_memory(whole, plan(whole), a10g)
    assert need == [memory.gpu_memory_bytes(p.config) for p in plan(whole)]
    # more than one GPU per trial: a trial still uses one device, its share is the whole of it
    assert check_gpu_memory(_space(tmp_path, 2), plan(whole), a10g) == need
    assert check_gpu_memory(load_space("smoke"), plan(load_space("smoke")), a10g) == []  # gpu: 0


def test_the_share_is_of_the_local_gpu_when_torch_sees_one_else_an_a10g(monkeypatch):
    from types import SimpleNamespace

    from fusion_sweep.launch.memory import gpu_device_memory

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_device_memory() == (A10G_BYTES, "an A10G's 22.5 usable GiB (no GPU on this "
                                               "machine: cluster.yaml's workers assumed)")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    devices = {0: SimpleNamespace(name="NVIDIA H100", total_memory=80 * 2**30),
               1: SimpleNamespace(name="NVIDIA A10G", total_memory=24 * 2**30)}
    # device 0: the first one visible, which a trial's CUDA context starts on
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: devices[i])
    assert gpu_device_memory() == (80 * 2**30, "this machine's NVIDIA H100 (80.0 GiB)")


def test_preflight_checks_the_gpu_share(tmp_path, monkeypatch):
    """`launch` (not only --dry-run) refuses before Ray starts, on a machine that has a GPU."""
    from fusion_sweep.launch import preflight
    from fusion_sweep.errors import UserError
    from fusion_sweep.plan.grid import plan

    monkeypatch.setattr(preflight, "_local_gpus", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    s = _space(tmp_path, 0.25)
    with pytest.raises(UserError, match=r"resources\.gpu in .*needs about .* GiB of GPU memory"):
        preflight.preflight(s, "aq", plan(s), f"sqlite:///{tmp_path}/mlflow.db", None,
                            str(tmp_path / "ray"), None, False, None)
    assert not (tmp_path / "mlflow.db").exists()


def test_dry_run_shows_the_gpu_estimate_and_imports_no_ray(tmp_path):
    import subprocess
    import sys

    _space(tmp_path, 1, "aone")
    code = ("import sys; from fusion_sweep.cli import main; rc = main(['launch', 'aone.yaml', "
            "'--dry-run']); assert 'ray' not in sys.modules and 'mlflow' not in sys.modules; "
            "sys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    c = TrialConfig.build("arxiv")
    assert "seed  GPU GiB  trial key" in r.stdout
    assert f"  {memory.gpu_memory_bytes(c) / 2**30:.1f}  " in r.stdout
    assert "fits its share gpu: 1 of " in r.stdout
    (tmp_path / "aq.yaml").write_text(ARXIV_SPACE.format(name="aq", gpu=0.25))
    r = subprocess.run([sys.executable, "-m", "fusion_sweep.cli", "launch", "aq.yaml", "--dry-run"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("error:") == 1 and "share gpu: 0.25" in r.stderr


def test_a_trials_ray_memory_is_declared_or_the_host_estimate(tmp_path):
    """memory.trial_memory_bytes: the space's memory_gb, else trial/memory's host estimate,
    without the activations when the trial is given a GPU (they live on the device)."""
    from fusion_sweep.plan.grid import plan
    from fusion_sweep.launch.memory import trial_memory_bytes

    gpu = _space(tmp_path, 1, "g")
    c = plan(gpu)[0].config
    assert trial_memory_bytes(gpu, c) == memory.host_memory_bytes(c, gpu=True)
    cpu = _space(tmp_path, 0, "c")
    assert trial_memory_bytes(cpu, c) == memory.host_memory_bytes(c) > trial_memory_bytes(gpu, c)
    (tmp_path / "m.yaml").write_text(ARXIV_SPACE.format(name="m", gpu="1, memory_gb: 3"))
    assert trial_memory_bytes(load_space(tmp_path / "m.yaml"), c) == 3 * 2**30

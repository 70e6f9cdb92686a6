"""Is the trial path ready for CUDA workers? Checked on a CPU, without a GPU (issue 32).

Not a timing benchmark: every figure is a count or a memory size. Ends in one JSON line:

- `variants_checked`: every registry combination a space can ask for: each encoder's
  boolean switches × pe × fusion that validates (`TrialConfig`), one per variant label.
- `device_mismatches`: ops mixing a CPU tensor with a device tensor
  (`trial/devicecheck.DeviceMixCounter`) over a forward and backward of each variant with
  its parameters and batch on the `meta` device (target 0).
- `deterministic_cuda_blockers`: {variant: [ops]} of the ops in one training step of each
  shipped variant that raise under deterministic CUDA
  (`trial/models/determinism.cuda_nondeterministic_ops`; target {}).
- `host_syncs_per_step`: the most ops that would sync the host with CUDA in one training
  step of any shipped variant (`trial/devicecheck.HostSyncCounter`: an epoch of 3 steps
  minus an epoch of 1, so the epoch's own sync is not counted; ReSSFormer on its torch path,
  as on a GPU; target 0).
- `gpu0_trial_device`: the device a trial of a `gpu: 0` space resolves to on a worker
  whose torch reports CUDA available (the launcher's `worker_device`, then the trainer's
  `resolve_device`; target "cpu").
- `gpu_memory`: per shipped space, its largest trial's `{estimate_gib, measured_gib}`
  (`trial/memory.gpu_memory_bytes` against `measured_gpu_bytes`, a count on `meta`; target:
  the estimate within 1-2x of the measurement).

    python benchmarks/gpu_readiness.py [--quick]

--quick checks every 4th registry variant and the first dataset of each shipped space
(what tests/test_gpu_readiness.py runs).
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
from typing import Any, Iterator
from unittest import mock

import numpy as np
import torch

from fusion_sweep.plan.space import load_space
from fusion_sweep.plan.space_files import shipped_spaces
from fusion_sweep.trial import memory, seeds, trainer
from fusion_sweep.trial.config import ConfigError, TrialConfig
from fusion_sweep.trial.data.types import EncodedSplit
from fusion_sweep.trial.devicecheck import DeviceMixCounter, HostSyncCounter
from fusion_sweep.trial.models import kernels
from fusion_sweep.trial.models.determinism import cuda_nondeterministic_ops
from fusion_sweep.trial.models.encoder import ENCODERS
from fusion_sweep.trial.models.fusion import FUSIONS
from fusion_sweep.trial.models.positional import POSITIONAL

# Small shapes: what is checked (devices, ops, syncs) does not depend on the sizes.
TINY = dict(d_model=16, heads=2, layers=1, dim_ff=32, max_len=80, batch_size=8, epochs=1,
            num_threads=1, grad_clip=1.0, dropout=0.1, attn_dropout=0.1)
A10G_USABLE_GIB = 22.5


def registry_variants() -> list[TrialConfig]:
    """One tiny config per variant label: each encoder's boolean switches × pe × fusion."""
    base = TrialConfig.build("synthetic-short", **TINY)
    out: dict[str, TrialConfig] = {}
    for name, entry in ENCODERS.items():
        switches = [f for f in entry.OPTION_FIELDS if isinstance(getattr(base, f), bool)]
        for values in itertools.product((True, False), repeat=len(switches)):
            for pe, fusion in itertools.product(sorted(POSITIONAL), sorted(FUSIONS)):
                try:
                    c = base.replace(encoder=name, pe=pe, fusion=fusion,
                                     **dict(zip(switches, values)))
                except ConfigError:
                    continue
                out.setdefault(c.variant_label(), c)
    return list(out.values())


def shipped_variants(first_dataset_only: bool = False) -> list[TrialConfig]:
    """Every variant of every shipped space (its own switches and options), at tiny shapes."""
    out: dict[str, TrialConfig] = {}
    for name in shipped_spaces():
        space = load_space(name)
        datasets = space.datasets[:1] if first_dataset_only else space.datasets
        for c in space.grid():
            if c.dataset not in datasets:
                continue
            own = {f: getattr(c, f) for f in ENCODERS[c.encoder].OPTION_FIELDS}
            tiny = TrialConfig.build("synthetic-short", **TINY, encoder=c.encoder, pe=c.pe,
                                     fusion=c.fusion, **own)
            out.setdefault(tiny.variant_label(), tiny)
    return list(out.values())


def _meta_step(config: TrialConfig) -> None:
    model = memory.meta_model(config)
    model.train()
    ids = torch.ones(config.batch_size, config.max_len, dtype=torch.long, device="meta")
    y = torch.zeros(config.batch_size, dtype=torch.long, device="meta")
    loss = torch.nn.functional.cross_entropy(model(ids, True), y)
    aux = model.aux_loss()
    (loss if aux is None else loss + aux).backward()


def device_mismatches(configs: list[TrialConfig]) -> tuple[int, dict[str, dict[str, int]]]:
    """(total, {variant: {op: count}}) over a meta forward and backward of each config."""
    found: dict[str, dict[str, int]] = {}
    for c in configs:
        with DeviceMixCounter() as mixed:
            _meta_step(c)
        if mixed.total:
            found[c.variant_label()] = dict(mixed.counts)
    return sum(sum(v.values()) for v in found.values()), found


def _split(n: int = 24) -> EncodedSplit:
    rng = np.random.default_rng(0)
    lens = rng.integers(3, 60, n)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    return EncodedSplit(rng.integers(2, 60, offsets[-1]).astype(np.int32), offsets,
                        rng.integers(0, 4, n).astype(np.int64))


def _epoch_syncs(config: TrialConfig, split: EncodedSplit, steps: int) -> HostSyncCounter:
    model = seeds.build_model(config, 60, 4)
    optimizer = trainer.build_optimizer(config, model)
    batches = [np.arange(i * config.batch_size, (i + 1) * config.batch_size) for i in range(steps)]
    # ReSSFormer's compiled kernels run only on a CPU: a CUDA worker takes the torch path.
    with kernels.torch_path(), HostSyncCounter() as counter:
        trainer.train_epoch(model, optimizer, split, batches, config, torch.device("cpu"), 0,
                            trainer.SpeedOptions())
    return counter


def host_syncs_per_step(configs: list[TrialConfig]) -> tuple[int, dict[str, dict[str, int]]]:
    """(the most per step over the configs, {variant: {op: per-step count}} where any)."""
    split, worst, found = _split(), 0, {}
    for c in configs:
        one, three = _epoch_syncs(c, split, 1), _epoch_syncs(c, split, 3)
        per_step = {k: (three.counts[k] - one.counts.get(k, 0)) / 2 for k in three.counts}
        per_step = {k: v for k, v in per_step.items() if v}
        worst = max(worst, int(np.ceil(sum(per_step.values()))))
        if per_step:
            found[c.variant_label()] = per_step
    return worst, found


def deterministic_blockers(configs: list[TrialConfig]) -> dict[str, list[str]]:
    """{variant: sorted ops} of the ops that raise under deterministic CUDA, where any."""
    found: dict[str, list[str]] = {}
    for c in configs:
        model = seeds.build_model(c, 60, 4)
        ids = torch.ones(c.batch_size, c.max_len, dtype=torch.long)
        ids[:, c.max_len // 2:] = 0  # a padded batch: the mask path runs too
        ops = cuda_nondeterministic_ops(model, (ids, True))
        if ops:
            found[c.variant_label()] = sorted(ops)
    return found


def gpu0_trial_device() -> tuple[str, str]:
    """(device, how it was resolved) of a `gpu: 0` trial (device auto, no GPU from Ray:
    `ray.get_gpu_ids()` is empty) on a worker whose torch reports CUDA available: the
    launcher's `trainable.worker_device`, then the trainer's `resolve_device`, both under
    the faked `torch.cuda.is_available`."""
    from fusion_sweep.raytune import trainable  # looked up at call time: tests break it to see this fail

    with mock.patch.object(torch.cuda, "is_available", lambda: True):
        requested = trainable.worker_device("auto", [])
        return str(trainer.resolve_device(requested)), \
            "trainable.worker_device + trainer.resolve_device"


def gpu_memory(quick: bool) -> dict[str, dict[str, Any]]:
    """Per shipped space, its largest trial (by the measurement): estimate and measurement
    in GiB, their ratio, and how many such trials fit an A10G's usable memory."""
    out: dict[str, dict[str, Any]] = {}
    for name in shipped_spaces():
        space = load_space(name)
        best: tuple[int, int] | None = None
        for c in _distinct(space.grid(), space.datasets[:1] if quick else space.datasets):
            pair = (memory.measured_gpu_bytes(c), memory.gpu_memory_bytes(c))
            best = pair if best is None or pair[0] > best[0] else best
        measured, estimate = best
        out[name] = {"estimate_gib": round(estimate / 2**30, 3),
                     "measured_gib": round(measured / 2**30, 3),
                     "ratio": round(estimate / measured, 3),
                     "per_a10g": int(A10G_USABLE_GIB * 2**30 // estimate),
                     "gpu": space.gpu}
    return out


def _distinct(configs: Iterator[TrialConfig], datasets: list[str]) -> Iterator[TrialConfig]:
    seen = set()
    for c in configs:
        key = (c.dataset, c.variant_label())
        if c.dataset in datasets and key not in seen:
            seen.add(key)
            yield c


def run(quick: bool = False) -> dict[str, Any]:
    variants = registry_variants()
    checked = variants[::4] if quick else variants
    mismatches, mismatch_ops = device_mismatches(checked)
    shipped = shipped_variants(first_dataset_only=quick)
    syncs, sync_ops = host_syncs_per_step(shipped)
    blockers = deterministic_blockers(shipped)
    device, how = gpu0_trial_device()
    return {"variants_checked": len(checked), "variants_in_registry": len(variants),
            "device_mismatches": mismatches, "device_mismatch_ops": mismatch_ops,
            "shipped_variants": len(shipped),
            "deterministic_cuda_blockers": blockers, "host_syncs_per_step": syncs,
            "host_sync_ops": sync_ops, "gpu0_trial_device": device, "gpu0_resolved_by": how,
            "gpu_memory": gpu_memory(quick), "quick": quick}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="every 4th registry variant; each shipped space's first dataset")
    args = p.parse_args(argv)
    result = run(args.quick)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])

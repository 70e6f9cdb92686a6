"""Where a trial runs: the platform it is described by, and the determinism switches for CUDA.

The same trial (config, seed, code) gives different floats on a CPU with another instruction
set (ATen dispatches AVX-512, AVX2 or plain kernels: `ATEN_CPU_CAPABILITY`), another GPU, or
another torch / CUDA / cuDNN build, and on another thread count (reductions split
differently). `describe_platform` records all of these (schema.PLATFORM_FIELDS); the trainer
logs them and their hash, and `stats` pairs two trials only on one platform.

`deterministic(device)`: on CUDA, deterministic algorithms (torch.use_deterministic_algorithms),
the cuBLAS workspace that makes cuBLAS reproducible (CUBLAS_WORKSPACE_CONFIG=:4096:8) and no
cuDNN autotuning (cudnn.benchmark off, cudnn.deterministic on); all restored on exit. A
kernel with no deterministic version then raises `NondeterministicKernelError`.
"""
from __future__ import annotations

import os
import platform as _py_platform
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import torch

from fusion_sweep.schema import PLATFORM_FIELDS

# cuBLAS is reproducible only with a fixed workspace (CUDA >= 10.2; NVIDIA cuBLAS docs,
# "Results reproducibility"); ":4096:8" is the setting the torch docs name.
CUBLAS_WORKSPACE = ":4096:8"
# torch's message when an op has no deterministic version under use_deterministic_algorithms.
_NO_DETERMINISTIC = "does not have a deterministic implementation"


class NondeterministicKernelError(ValueError):
    """A CUDA op this trial uses has no deterministic version (a ValueError: the CLI prints
    it as one `error:` line)."""


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux), else what the platform module says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "Hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return _py_platform.processor() or _py_platform.machine() or "unknown"


def describe_platform(device: torch.device) -> dict[str, str]:
    """PLATFORM_FIELDS -> str for a trial running now on `device` (call it inside the
    trial's thread and determinism settings: both are recorded as they are in force).

    CUDA, cuDNN and GPU describe the device that runs the trial: "none" for a CPU trial,
    whose numbers no GPU library touches (the torch build, e.g. +cu128, is in `torch`)."""
    cuda = device.type == "cuda"
    fields = {
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_model": cpu_model(),
        "cuda": (torch.version.cuda or "none") if cuda else "none",
        "cudnn": str(torch.backends.cudnn.version() or "none") if cuda else "none",
        "gpu": torch.cuda.get_device_name(device) if cuda else "none",
        "deterministic": "on" if torch.are_deterministic_algorithms_enabled() else "off",
        "threads": str(torch.get_num_threads()),
    }
    return {k: fields[k] for k in PLATFORM_FIELDS}  # schema.PLATFORM_FIELDS is the list


def node_platform() -> dict[str, str]:
    """What a node contributes to every trial's platform, whatever the trial: torch build,
    CPU capability and model (the launch compares nodes by these; GPUs by Ray resources)."""
    cpu = describe_platform(torch.device("cpu"))
    return {k: cpu[k] for k in ("torch", "cpu_capability", "cpu_model")}


@contextmanager
def deterministic(device: torch.device) -> Iterator[None]:
    """Deterministic CUDA kernels for the trial when `device` is CUDA; nothing on CPU (its
    kernels are deterministic for a fixed capability and thread count). Restores every
    setting on exit, and turns torch's "no deterministic implementation" RuntimeError into
    a NondeterministicKernelError naming the op."""
    if device.type != "cuda":
        yield
        return
    saved = (torch.are_deterministic_algorithms_enabled(),
             torch.is_deterministic_algorithms_warn_only_enabled(),
             torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic,
             os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
    # Read by cuBLAS when its handle is created: set before the trial's first matmul.
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    try:
        yield
    except RuntimeError as e:
        if _NO_DETERMINISTIC in str(e):
            raise NondeterministicKernelError(
                f"a CUDA kernel this trial uses has no deterministic implementation, and "
                f"fusion-sweep runs CUDA trials with torch.use_deterministic_algorithms(True) "
                f"so that a pair differs only by its variant: {str(e).splitlines()[0]} "
                f"(run this variant with device=cpu, or choose another fusion/pe)") from e
        raise
    finally:
        enabled, warn_only, benchmark, cudnn_det, workspace = saved
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
        torch.backends.cudnn.benchmark = benchmark
        torch.backends.cudnn.deterministic = cudnn_det
        if workspace is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = workspace

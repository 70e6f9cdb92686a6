"""Where a trial runs: the platform it is described by, and the determinism switches for CUDA.

The same trial (config, seed, code) gives different floats on a CPU with another instruction
set (ATen dispatches AVX-512, AVX2 or plain kernels: `ATEN_CPU_CAPABILITY`), another GPU, or
another torch / CUDA / cuDNN build, and on another thread count (reductions split
differently). `describe_platform` records all of these (schema.PLATFORM_FIELDS); the trainer
logs them and their hash, and `stats` pairs two trials only on one platform.

`deterministic(device)`: on CUDA, deterministic algorithms (torch.use_deterministic_algorithms),
the cuBLAS workspace that makes cuBLAS reproducible (CUBLAS_WORKSPACE_CONFIG=:4096:8; a
worker has it from Ray's runtime_env before CUDA starts, and keeps it) and no
cuDNN autotuning (cudnn.benchmark off, cudnn.deterministic on); all restored on exit. A
kernel with no deterministic version then raises `NondeterministicKernelError`.

`precision_mode(precision, device)` and `autocast(precision, device)`: a trial's arithmetic
precision (TrialConfig.precision). fp32 turns TF32 off on CUDA (cuDNN allows it by
default), tf32 turns it on for matmuls and cuDNN (CUDA only: a CPU has no TF32), bf16
runs forward and loss under torch.autocast(device_type, bfloat16) with fp32 master weights.
On every device the CPU flushes subnormal floats to zero while the trial runs
(`flush_subnormals`: a synthetic-long trial 1.5 to 3.9 times faster on CPU, the same results).
"""
from __future__ import annotations

import os
import platform as _py_platform
import warnings
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import ContextManager, Iterator

import torch

from fusion_sweep.errors import UserError
from fusion_sweep.schema import PLATFORM_FIELDS
from fusion_sweep.trial.models import kernels

# cuBLAS is reproducible only with a fixed workspace (CUDA >= 10.2; NVIDIA cuBLAS docs,
# "Results reproducibility"); ":4096:8" is the setting the torch docs name.
CUBLAS_WORKSPACE = ":4096:8"
# The values under which cuBLAS is reproducible (torch's own error lists these two).
DETERMINISTIC_WORKSPACES = (CUBLAS_WORKSPACE, ":16:8")
# torch's message when an op has no deterministic version under use_deterministic_algorithms.
_NO_DETERMINISTIC = "does not have a deterministic implementation"


class NondeterministicKernelError(UserError):
    """A CUDA op this trial uses has no deterministic version (a UserError: the CLI prints
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


def describe_platform(device: torch.device, precision: str = "fp32",
                      speed: str = "fast") -> dict[str, str]:
    """PLATFORM_FIELDS -> str for a trial running now on `device` (call it inside the
    trial's thread, determinism and precision settings: all are recorded as in force).

    CUDA, cuDNN, GPU, driver, compute capability and SDPA backends describe the device that
    runs the trial: "none" for a CPU trial, whose numbers no GPU library touches (the torch
    build, e.g. +cu128, is in `torch`). `precision` is the trial's, `speed` its trainer's
    speed mode (`SpeedOptions.label()`); `kernels`/`compiler` where ReSSFormer's attention
    runs (`execution_path`)."""
    cuda = device.type == "cuda"
    fields = {
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_model": cpu_model(),
        "deterministic": "on" if torch.are_deterministic_algorithms_enabled() else "off",
        "threads": str(torch.get_num_threads()),
        "precision": precision,
        "speed": speed,
        **(gpu_fields(device) if cuda else dict.fromkeys(GPU_FIELDS, "none")),
        **execution_path(device),
    }
    return {k: fields[k] for k in PLATFORM_FIELDS}  # schema.PLATFORM_FIELDS is the list


GPU_FIELDS = ("cuda", "cudnn", "gpu", "driver", "capability", "sdpa")
# torch.backends.cuda's switches for the scaled-dot-product-attention backends.
SDPA_BACKENDS = {"flash": "flash_sdp_enabled", "mem_efficient": "mem_efficient_sdp_enabled",
                 "cudnn": "cudnn_sdp_enabled", "math": "math_sdp_enabled"}


def gpu_fields(device: torch.device) -> dict[str, str]:
    """What a CUDA trial's numbers depend on besides torch: CUDA and cuDNN versions, the
    GPU, its driver and compute capability, and which SDPA backends may run."""
    major, minor = torch.cuda.get_device_capability(device)
    driver = getattr(torch._C, "_cuda_getDriverVersion", lambda: 0)()
    sdpa = [name for name, switch in SDPA_BACKENDS.items()
            if getattr(torch.backends.cuda, switch, lambda: False)()]
    return {"cuda": torch.version.cuda or "none",
            "cudnn": str(torch.backends.cudnn.version() or "none"),
            "gpu": torch.cuda.get_device_name(device),
            "driver": f"{driver // 1000}.{driver % 1000 // 10}" if driver else "unknown",
            "capability": f"{major}.{minor}", "sdpa": ",".join(sdpa) or "none"}


def execution_path(device: torch.device) -> dict[str, str]:
    """{"kernels": "compiled" | "torch" | "off", "compiler": "gcc 12.2.0" | ""} for a trial on
    `device` (`kernels.execution_path()`): ReSSFormer's compiled kernels run only on a CPU,
    so a CUDA trial is on the torch path whatever the machine has."""
    if device.type == "cuda":
        return {"kernels": "torch", "compiler": ""}
    path = kernels.execution_path()
    return {"kernels": path["kernels"], "compiler": path["compiler"]}


def node_platform() -> dict[str, str]:
    """What a node contributes to every trial's platform, whatever the trial: torch build,
    CPU capability and model (the launch compares nodes by these; GPUs by Ray resources)."""
    return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "cpu_model": cpu_model()}


def _cublas_workspace() -> None:
    """A deterministic cuBLAS workspace for this process. Trial workers start with it (Ray's
    `runtime_env`, `ray_setup.worker_env`), so theirs is kept: torch sizes cuBLAS's workspace
    once per process, at its first cuBLAS call, and a value changed after that would only
    satisfy torch's check. A process started without one (`fusion-sweep train` on a GPU)
    gets it here, which is in time only before the process's first CUDA work: warned."""
    if os.environ.get("CUBLAS_WORKSPACE_CONFIG") in DETERMINISTIC_WORKSPACES:
        return
    if torch.cuda.is_initialized():
        warnings.warn(f"CUBLAS_WORKSPACE_CONFIG is set to {CUBLAS_WORKSPACE} after this process "
                      f"started CUDA: cuBLAS may already use another workspace; export it "
                      f"before starting (Ray workers get it from the launch's runtime_env)",
                      RuntimeWarning, stacklevel=3)
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE


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
    _cublas_workspace()
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


@contextmanager
def precision_mode(precision: str, device: torch.device) -> Iterator[None]:
    """TF32 on (tf32) or off (fp32, bf16) for CUDA matmuls and cuDNN while the trial runs;
    restored on exit. On every device, the CPU flushes subnormal floats to zero
    (`flush_subnormals`)."""
    with flush_subnormals():
        if device.type != "cuda":
            yield
            return
        saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = precision == "tf32"
        try:
            yield
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@contextmanager
def flush_subnormals() -> Iterator[None]:
    """Subnormal floats (below 1.2e-38 in fp32) read and written as zero by the CPU thread
    that runs the trial (x86 FTZ/DAZ, through torch.set_flush_denormal); off again on exit,
    torch's default (torch has no getter to restore another state with).

    Why: training makes subnormals (values decaying towards zero), and a CPU computes with
    them far more slowly. Default synthetic-long trials (seed 3, sinusoidal) took 97.6 and
    47.1 s of CPU with them (add, concat) and 25.1 and 31.6 s without, with the same
    per-epoch losses to 6 decimals and the same test accuracy (benchmarks/subnormals.py;
    one thread, 2-vCPU Intel Xeon, load 1.47 before and 1.01 after). The mode is per
    thread: a trial on more than one intra-op thread flushes on this one only, still one
    fixed result for a thread count (the platform records it).
    A GPU's arithmetic is not changed."""
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


def autocast(precision: str, device: torch.device) -> ContextManager:
    """What forward and loss run under: bf16 autocast for precision bf16, else nothing."""
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return nullcontext()

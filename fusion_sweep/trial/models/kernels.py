"""Compiled CPU kernels for ReSSFormer (issue 23): top-k selection, the projections' heads,
the sparse attention with R2MU's memory, dot products and weighted sums over gathered rows of
a table, entmax-1.5 on few scores, a masked softmax, and the graph regulariser's row
distances, each with its backward pass.

Why: on CPU, `torch.topk` selects row by row through a generic partial sort (about 1 µs per
row of 128 scores: six times the matmul that made the scores), a gather of the kept keys
(`F.embedding`) writes an (R, k, dh) copy whose backward is a slow index-add, and small ops
(entmax's sort of 13 values, the regulariser's differences, permutes of (…, dh = 16) rows)
cost their dispatch and memory passes many times over. Each C loop does the arithmetic the
FLOPs count (`forward_flops`), plus one pass over the scores to select, and writes nothing of
size (R, k, dh).

    score_topk(q, k, add, kk)  each query's kk best keys by q·kᵀ + add, the scores never
                               stored (unsorted; ties and −inf: any kk of them, as torch.topk)
    heads(raw, parts, heads, unit, scale, sizes)
                               a Linear's output cut into (B, H, n, dh) heads, SOES's unit
                               norm and a per-head scale fused       autograd: raw, scale
    memory_scores(qr, q, kr, ks, kc, gidx, ak, sa)
                               a row's kept-token, slot and own-cache scores   autograd
    memory_mix(w, v, vs, vc, gidx)  their weighted sum                         autograd
    dense_memory_softmax(qr, q, kr, ks, kc, add, sa)
                               dense attention's weights with the memory: every token, slot
                               and own-cache score and their softmax in one pass per row,
                               the scores never stored               autograd (but sa)
    dense_memory_mix(w, v, vs, vc)  its weighted sum                           autograd
    gather_dot(a, table, idx)  s[r, j] = ⟨a[r], table[idx[r, j]]⟩        autograd: a, table
    gather_sum(w, table, idx)  o[r] = Σ_j w[r, j] · table[idx[r, j]]     autograd: w, table
    entmax15(z)                the `entmax` package's 1.5-entmax on short rows, 16 rows at
                               a time (one per vector lane)                    autograd
    masked_softmax(z, mask)    softmax(z + mask) in one pass per row     autograd (z, mask)
    chain_sqdist(ws, n)        ‖A_{t+1} − A_t‖² per row over the first n columns, for each
                               successive pair of a chain                     autograd
    sparse_sqdist(a, ia, b, ib, distinct)  the same for rows of weights at key indices
                                                                         autograd: a, b

Every entry checks its tensors (CPU, float32 or float64 alike, int64 indices, shapes, the
layout the loop reads, index ranges) before a pointer reaches C, and raises KernelInputError
(a ValueError) naming the argument: a caller's bug raises instead of corrupting memory.

The sources are real C files, `csrc/ressformer_kernels.c` and the type-generic
`csrc/ressformer_kernels_typed.h` (shipped in the wheel). They are compiled once per machine
with the system C compiler (`$CC`, else `cc`, `gcc`, `clang`) into the cache folder
(`<cache root>/kernels/<hash of sources, compiler, flags and CPU>`, the cache root following
`TrialConfig.cache_dir` through `use_cache_dir`), then loaded with ctypes, which releases the
GIL around each call. Why not `torch.utils.cpp_extension`: docs/models.md ("The compiled
kernels"). `available()` is False where the build fails (it warns once, with the reason), the
tensors are not CPU float32/float64, or FUSION_SWEEP_KERNELS=0; ReSSFormer then runs its
pure-torch path, which computes the same values (tests/test_ressformer_equality.py checks
both against the previous implementation; tests/test_kernels.py each kernel against plain
torch). `execution_path()` says which path runs and with which compiler, for the trial's
platform fingerprint. The loops run in one thread, like a trial (1 torch thread per trial).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import re
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from fusion_sweep.trial.data.cache import cache_root

ENV_SWITCH = "FUSION_SWEEP_KERNELS"  # "0" turns the compiled kernels off
# No -ffast-math: −inf scores (padding) must compare as IEEE says. `omp simd` lets the dot
# products vectorise without allowing any other reassociation.
CFLAGS = ("-O3", "-march=native", "-fopenmp-simd", "-fno-math-errno", "-shared", "-fPIC", "-std=c99")

# score_topk reads the keys in panels of 4 vectors of 64 bytes (its 4 vector registers);
# the build passes it to the C source as -DPANEL_BYTES.
PANEL_BYTES = 256
SOURCE_DIR = Path(__file__).with_name("csrc")
MAIN_SOURCE = "ressformer_kernels.c"
SOURCES = (MAIN_SOURCE, "ressformer_kernels_typed.h")  # everything the build reads
# sha256 (16 hex) of the SOURCES' bytes in order, naming the build; tests/test_kernels.py fails
# until it is updated (kernels.sources_digest() gives the value). The code fingerprint of a
# trial that runs these kernels hashes the sources themselves (trial/components.py).
SOURCES_SHA256 = "a53a888c7105fa54"
BUILD_TIMEOUT_S = 120
_SUFFIX = {torch.float32: "f32", torch.float64: "f64"}
_I64 = ctypes.c_int64


class KernelInputError(ValueError):
    """A tensor handed to a kernel entry has the wrong device, dtype, shape or layout."""


# ---------------------------------------------------------------------------- the build
@dataclass(frozen=True)
class Build:
    """One build attempt's outcome: the library (None: the torch path), the path taken
    ('compiled' | 'torch' | 'off'), the compiler ('gcc 12.2.0'; '' unknown or off) and why
    the build failed ('' where it did not)."""

    library: ctypes.CDLL | None
    kernels: str
    compiler: str
    reason: str


_cache_dir = ""  # TrialConfig.cache_dir of the trial in this process ('' = the default root)


def use_cache_dir(cache_dir: str) -> None:
    """Build into (and load from) `<cache_root(cache_dir)>/kernels`: ReSSFormer's encoder
    calls this with its trial's `cache_dir`."""
    global _cache_dir
    _cache_dir = cache_dir


def _cpu_key() -> str:
    """What -march=native compiles for: the CPU's model and flags (a library built on one
    CPU may not run on another that shares the cache folder)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    keep = [ln for ln in lines if ln.startswith(("model name", "flags"))][:2]
    return "\n".join([platform.machine(), platform.processor(), *keep])


def _compiler() -> str | None:
    return next((c for c in (os.environ.get("CC", ""), "cc", "gcc", "clang") if c and shutil.which(c)), None)


def _compiler_version(cc: str) -> str:
    """'gcc 12.2.0' / 'clang 16.0.6' from `cc -v` (its last line names the real compiler
    behind `cc`); the first line of `--version` otherwise; '' if neither answers."""
    for args, pattern in ((["-v"], r"^(\S+) version (\S+)"), (["--version"], r"^(.+)$")):
        try:
            done = subprocess.run([cc, *args], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return ""
        for line in reversed((done.stderr + done.stdout).splitlines()):
            m = re.match(pattern, line.strip())
            if m:
                return " ".join(m.groups())[:80]
    return ""


def _sources_text() -> str:
    return "\n".join((SOURCE_DIR / name).read_text() for name in SOURCES)


def sources_digest() -> str:
    """sha256 (16 hex) of the C sources as shipped: what SOURCES_SHA256 must say."""
    return hashlib.sha256(b"".join((SOURCE_DIR / name).read_bytes() for name in SOURCES)).hexdigest()[:16]


def _compile(cc: str, version: str, folder: Path) -> Path:
    """The library for these sources, compiler, flags and CPU: the cached one, else built
    (apart, then renamed atomically: concurrent trials). Raises RuntimeError with a short
    reason."""
    flags = [*CFLAGS, f"-DPANEL_BYTES={PANEL_BYTES}"]
    try:
        key_text = "\n".join([_sources_text(), cc, version, *flags, _cpu_key()])
    except OSError as e:
        raise RuntimeError(f"kernel sources unreadable: {e}") from None
    lib = folder / hashlib.sha256(key_text.encode()).hexdigest()[:24] / "ressformer_kernels.so"
    if lib.exists():
        return lib
    try:
        lib.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=lib.parent) as tmp:
            out = Path(tmp) / "k.so"
            done = subprocess.run([cc, *flags, "-o", str(out), str(SOURCE_DIR / MAIN_SOURCE), "-lm"],
                                  capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
            if done.returncode != 0:
                raise RuntimeError(f"{Path(cc).name} exited {done.returncode}: {_first_error(done.stderr)}")
            os.replace(out, lib)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{Path(cc).name} took over {BUILD_TIMEOUT_S} s") from None
    except OSError as e:
        raise RuntimeError(f"cannot build in {lib.parent}: {e}") from None
    return lib


def _first_error(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower()]
    return ((errors or lines or ["no message"])[0])[:160]


@lru_cache(maxsize=None)
def _build_in(cache_dir: str) -> Build:
    """Build (or find) and load the library under cache_root(cache_dir); a failure warns
    once (one line, the reason) and selects the torch path."""
    if os.environ.get(ENV_SWITCH, "1") == "0":
        return Build(None, "off", "", "")
    cc = _compiler()
    if cc is None:
        return _failed("", "no C compiler ($CC, cc, gcc, clang) on PATH")
    version = _compiler_version(cc)
    try:
        return Build(ctypes.CDLL(str(_compile(cc, version, cache_root(cache_dir) / "kernels"))),
                     "compiled", version, "")
    except RuntimeError as e:
        return _failed(version, str(e))
    except OSError as e:  # a library that does not load
        return _failed(version, f"cannot load the built library: {e}")


def _failed(compiler: str, reason: str) -> Build:
    warnings.warn(f"ReSSFormer's compiled kernels are off ({reason}); the torch path runs instead",
                  RuntimeWarning, stacklevel=2)
    return Build(None, "torch", compiler, reason)


def _build() -> Build:
    return _build_in(_cache_dir)


def _library() -> ctypes.CDLL | None:
    """The compiled kernels, building them on first use; None where that is impossible."""
    return _build().library


def execution_path() -> dict[str, str]:
    """Which path ReSSFormer's attention takes in this process, for the platform fingerprint:
    {"kernels": "compiled" | "torch" | "off" (FUSION_SWEEP_KERNELS=0), "compiler": "gcc
    12.2.0" or "", "build": why the build failed, or ""}. Builds on the first call (as the
    first forward would), then only reads the cached outcome."""
    b = _build()
    return {"kernels": b.kernels, "compiler": b.compiler, "build": b.reason}


_held_off = 0  # > 0 inside torch_path()


def available(*tensors: torch.Tensor) -> bool:
    """Whether the compiled kernels can run on these tensors (CPU, float32 or float64)."""
    return (not _held_off and all(t.device.type == "cpu" and t.dtype in _SUFFIX for t in tensors)
            and _library() is not None)


@contextmanager
def torch_path() -> Iterator[None]:
    """Inside: available() is False, so ReSSFormer runs its pure-torch path, as on a GPU
    (models/determinism.py records that path's ops on the CPU)."""
    global _held_off
    _held_off += 1
    try:
        yield
    finally:
        _held_off -= 1


# ---------------------------------------------------------------------------- input checks
def _describe(t: torch.Tensor) -> str:
    layout = "" if t.is_contiguous() else "non-contiguous "
    return f"{layout}{t.device.type} {str(t.dtype).removeprefix('torch.')} {tuple(t.shape)}"


def _problem(t: object, shape: tuple[int | None, ...] | None, dtype: torch.dtype,
             contiguous: bool) -> str | None:
    """Why t is not a CPU `dtype` tensor of `shape` (None: any size there; shape None: any
    rank), contiguous if asked; None if it is."""
    if not isinstance(t, torch.Tensor):
        return f"a tensor, got {type(t).__name__}"
    ok = (t.device.type == "cpu" and t.dtype == dtype
          and (shape is None or (t.dim() == len(shape)
                                 and all(s is None or s == n for s, n in zip(shape, t.shape))))
          and (t.is_contiguous() or not contiguous))
    if ok:
        return None
    want = "" if shape is None else " of shape (" + ", ".join(
        "*" if s is None else str(s) for s in shape) + ")"
    return (f"a {'contiguous ' if contiguous else ''}cpu {str(dtype).removeprefix('torch.')} "
            f"tensor{want}, got {_describe(t)}")


def _float_dtype(entry: str, name: str, t: object) -> torch.dtype:
    """The kernel's element type, from the first float argument."""
    if not isinstance(t, torch.Tensor) or t.dtype not in _SUFFIX or t.device.type != "cpu":
        got = _describe(t) if isinstance(t, torch.Tensor) else type(t).__name__
        raise KernelInputError(f"kernels.{entry}: {name} must be a cpu float32 or float64 tensor, got {got}")
    return t.dtype


def _check(entry: str, *specs: tuple) -> None:
    """specs: (name, tensor, shape, dtype[, contiguous=True]); every problem in one error."""
    problems = []
    for name, t, shape, dtype, *rest in specs:
        why = _problem(t, shape, dtype, rest[0] if rest else True)
        if why:
            problems.append(f"{name} must be {why}")
    if problems:
        raise KernelInputError(f"kernels.{entry}: " + "; ".join(problems))


def _check_index(entry: str, name: str, idx: torch.Tensor, rows: int) -> None:
    """Every index within [0, rows): the C loops read table rows at them."""
    if idx.numel():
        lo, hi = torch.aminmax(idx)
        if int(lo) < 0 or int(hi) >= rows:
            raise KernelInputError(f"kernels.{entry}: {name} must index rows in [0, {rows}), "
                                   f"got values in [{int(lo)}, {int(hi)}]")


def _check_value(entry: str, ok: bool, message: str) -> None:
    if not ok:
        raise KernelInputError(f"kernels.{entry}: {message}")


def _call(name: str, dtype: torch.dtype, *args) -> None:
    """The C function `name`_f32 / _f64: tensors as pointers (the entries checked them; a last
    guard here keeps anything but CPU tensors of the kernel's dtype or int64 out of C)."""
    lib = _library()
    if lib is None:
        raise RuntimeError(f"kernels.{name}: the compiled kernels are not available "
                           f"({execution_path()}); check kernels.available() first")
    for a in args:
        if isinstance(a, torch.Tensor) and (a.device.type != "cpu" or a.dtype not in (dtype, torch.int64)):
            raise KernelInputError(f"kernels.{name}: got a {_describe(a)} tensor for {dtype}")
    fn = getattr(lib, f"{name}_{_SUFFIX[dtype]}")
    fn(*[ctypes.c_void_p(a.data_ptr()) if isinstance(a, torch.Tensor)
         else ctypes.c_void_p(None) if a is None else _I64(a) for a in args])


def _row_mask(mask: torch.Tensor | None, dtype: torch.dtype,
              dims: tuple[int, int, int]) -> tuple[torch.Tensor | None, tuple[int, int, int]]:
    """An additive mask as the kernels read it: rows of unit stride, and its strides along
    the (batch, head, query) dims `dims` (0 where it broadcasts); None: (None, zeros)."""
    if mask is None:
        return None, (0, 0, 0)
    m = mask.detach().to(dtype)
    if m.stride(-1) != 1:
        m = m.contiguous()
    return m, tuple(0 if m.shape[i] == 1 else m.stride(i) for i in dims)


def _row_grad(name: str, y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """The backward of a row-wise map from its output y (..., N): kernel `name`(y, dy)."""
    dz = torch.empty_like(y)
    _call(name, y.dtype, y, dy.contiguous(), y.numel() // y.shape[-1], y.shape[-1], dz)
    return dz


def _check_mask(entry: str, name: str, mask: torch.Tensor | None, dtype: torch.dtype,
                full: tuple[int, ...], free: tuple[int, ...]) -> None:
    """An additive mask of len(full) dims: the last exactly full[-1], each dim in `free` 1 or
    full[i], every other dim 1 (any strides: _row_mask makes its rows unit-stride)."""
    if mask is None:
        return
    _check(entry, (name, mask, (None,) * len(full), dtype, False))
    ok = mask.shape[-1] == full[-1] and all(
        n == 1 or (i in free and n == full[i]) for i, n in enumerate(mask.shape[:-1]))
    want = ", ".join(f"{full[i]} or 1" if i in free else "1" for i in range(len(full) - 1))
    _check_value(entry, ok, f"{name} must have shape ({want}, {full[-1]}), got {tuple(mask.shape)}")


def score_topk(q: torch.Tensor, k: torch.Tensor, add: torch.Tensor | None, kk: int) -> torch.Tensor:
    """Each query's kk highest-scoring keys, scores never stored: q (B, H, G, L, dh), k (B, H,
    L, dh), add None | (B, 1, 1, L) | (B, H, L, L) added to the scores (padding −inf, a pe's
    bias). No autograd (it selects). -> (B, H, G, L, kk) int64, unsorted."""
    dt = _float_dtype("score_topk", "q", q)
    _check("score_topk", ("q", q, (None,) * 5, dt))
    B, H, G, L, D = q.shape
    _check("score_topk", ("k", k, (B, H, L, D), dt, False))
    _check_value("score_topk", isinstance(kk, int) and 1 <= kk <= L, f"kk must be in [1, {L}], got {kk!r}")
    _check_mask("score_topk", "add", add, dt, (B, H, L, L), (0, 1, 2))
    qc = q.detach()
    bw = PANEL_BYTES // q.element_size()  # keys per panel: the kernel's 4 vector registers
    pad = (-L) % bw
    kp = F.pad(k.detach(), (0, 0, 0, pad)) if pad else k.detach()  # (B, H, P·bw, dh)
    kt = kp.view(B, H, -1, bw, D).transpose(-1, -2).contiguous()  # (B, H, P, dh, bw) panels
    out = torch.empty(B, H, G, L, kk, dtype=torch.int64)
    mask, strides = _row_mask(add, q.dtype, (0, 1, 2))
    _call("score_topk", q.dtype, qc, kt, mask, *strides, B * H, H, G * L, L, D, kk, out)
    return out


def _gather_dot(a: torch.Tensor, table: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    R, D = a.shape
    out = torch.empty(R, idx.shape[1], dtype=a.dtype)
    _call("gather_dot", a.dtype, a, table, idx, R, idx.shape[1], D, out)
    return out


def _gather_sum(w: torch.Tensor, table: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    R, K = w.shape
    out = torch.empty(R, table.shape[1], dtype=w.dtype)
    _call("gather_sum", w.dtype, w, table, idx, R, K, table.shape[1], out)
    return out


def _scatter_outer(w: torch.Tensor, a: torch.Tensor, idx: torch.Tensor, rows: int) -> torch.Tensor:
    """out[idx[r, j]] += w[r, j] · a[r]: the table's gradient, (rows, D)."""
    R, K = w.shape
    out = torch.zeros(rows, a.shape[1], dtype=a.dtype)
    _call("scatter_outer", a.dtype, w, a, idx, R, K, a.shape[1], out)
    return out


class _GatherDot(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, table, idx):  # a (R, D), table (M, D), idx (R, K) -> (R, K)
        a, table, idx = a.contiguous(), table.contiguous(), idx.contiguous()
        ctx.save_for_backward(a, table, idx)
        return _gather_dot(a, table, idx)

    @staticmethod
    @once_differentiable
    def backward(ctx, ds):
        a, table, idx = ctx.saved_tensors
        ds = ds.contiguous()
        da = _gather_sum(ds, table, idx) if ctx.needs_input_grad[0] else None
        dt = _scatter_outer(ds, a, idx, table.shape[0]) if ctx.needs_input_grad[1] else None
        return da, dt, None


class _GatherSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, w, table, idx):  # w (R, K), table (M, D), idx (R, K) -> (R, D)
        w, table, idx = w.contiguous(), table.contiguous(), idx.contiguous()
        ctx.save_for_backward(w, table, idx)
        return _gather_sum(w, table, idx)

    @staticmethod
    @once_differentiable
    def backward(ctx, do):
        w, table, idx = ctx.saved_tensors
        do = do.contiguous()
        dw = _gather_dot(do, table, idx) if ctx.needs_input_grad[0] else None
        dt = _scatter_outer(w, do, idx, table.shape[0]) if ctx.needs_input_grad[1] else None
        return dw, dt, None


def _rows(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """x (..., N) as rows: itself and its row stride where its rows are evenly spaced with
    unit columns (a split or a slice of a contiguous tensor), else a contiguous copy."""
    shape, stride = x.shape, x.stride()
    even = x.dim() >= 2 and stride[-1] == 1 and all(
        stride[i] == stride[i + 1] * shape[i + 1] for i in range(x.dim() - 2))
    return (x, stride[-2]) if even else (x.contiguous(), shape[-1])


class _ChainSqDist(torch.autograd.Function):
    @staticmethod
    def forward(ctx, n, *ws):  # P + 1 tensors (..., N) of one shape -> (P, ...)
        rows = [_rows(w) for w in ws]
        ctx.save_for_backward(*[r[0] for r in rows])
        ctx.strides, ctx.n = [r[1] for r in rows], n
        out = torch.empty(len(ws) - 1, *ws[0].shape[:-1], dtype=ws[0].dtype)
        for t, ((a, ra), (b, rb)) in enumerate(zip(rows, rows[1:])):
            _call("row_sqdist", a.dtype, a, ra, b, rb, out[t].numel(), n, out[t])
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, go):
        ws, st, go = ctx.saved_tensors, ctx.strides, go.contiguous()
        grads = []
        for t, w in enumerate(ws):
            prev = (ws[t - 1], st[t - 1], go[t - 1]) if t > 0 else (None, 0, None)
            nxt = (ws[t + 1], st[t + 1], go[t]) if t + 1 < len(ws) else (None, 0, None)
            g = torch.empty(w.shape, dtype=w.dtype)
            _call("chain_grad", w.dtype, prev[0], prev[1], w, st[t], nxt[0], nxt[1], prev[2],
                  nxt[2], go[0].numel(), ctx.n, w.shape[-1], g)
            grads.append(g)
        return (None, *grads)


def chain_sqdist(ws: list[torch.Tensor], n: int | None = None) -> torch.Tensor:
    """‖A_{t+1} − A_t‖² per row over the first n columns (None: all) for a chain A_0..A_P of
    one shape (..., N) -> (P, ...). Its backward writes one gradient per A_t (not one per
    pair, summed afterwards): the least memory traffic for dense (L, L) graphs."""
    _check_value("chain_sqdist", len(ws) >= 2, f"ws must hold at least 2 tensors, got {len(ws)}")
    dt = _float_dtype("chain_sqdist", "ws[0]", ws[0])
    shape = tuple(ws[0].shape)
    _check("chain_sqdist", *[(f"ws[{t}]", w, shape, dt, False) for t, w in enumerate(ws)])
    N = shape[-1] if shape else 0
    n = N if n is None else n
    _check_value("chain_sqdist", len(shape) >= 1 and isinstance(n, int) and 0 <= n <= N,
                 f"n must be in [0, {N}] (the rows' width), got {n!r}")
    return _ChainSqDist.apply(n, *ws)


class _Heads(torch.autograd.Function):
    @staticmethod
    def forward(ctx, raw, scale, parts, heads, unit, sizes):
        # raw (B, N, parts·heads·D) -> parts × len(sizes) tensors (B, heads, n, D)
        B, N, F = raw.shape
        D = F // (parts * heads)
        raw = raw.contiguous()
        sc = None if scale is None else scale.detach().to(raw.dtype).contiguous()
        outs = []
        for p in range(parts):
            n0 = 0
            for m in sizes:
                o = torch.empty(B, heads, m, D, dtype=raw.dtype)
                _call("heads_fwd", raw.dtype, raw, B, N, parts, heads, D, p, n0, n0 + m,
                      int(unit[p]), sc, o)
                outs.append(o)
                n0 += m
        ctx.save_for_backward(raw, sc)
        ctx.shape, ctx.unit, ctx.sizes = (B, N, parts, heads, D), unit, sizes
        ctx.set_materialize_grads(False)  # an unused output's gradient: None, not zeros
        return tuple(outs)

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        raw, sc = ctx.saved_tensors
        B, N, parts, heads, D = ctx.shape
        graw = torch.empty_like(raw)
        gscale = torch.zeros(heads, dtype=raw.dtype) if ctx.needs_input_grad[1] else None
        it = iter(grads)
        for p in range(parts):
            n0 = 0
            for m in ctx.sizes:
                g = next(it)
                _call("heads_bwd", raw.dtype, None if g is None else g.contiguous(), raw, B, N,
                      parts, heads, D, p, n0, n0 + m, int(ctx.unit[p]), sc, graw, gscale)
                n0 += m
        return graw, gscale, None, None, None, None


def heads(raw: torch.Tensor, parts: int, heads: int, unit: tuple[bool, ...],
          scale: torch.Tensor | None, sizes: list[int]) -> tuple[torch.Tensor, ...]:
    """A Linear's output raw (B, N, parts·heads·dh), `parts` projections side by side (q; or k
    and v), cut into heads: for each part and each run of rows of `sizes` (summing to N), a
    contiguous (B, heads, n, dh) tensor, rows times scale[h] ((heads,) or None) and, where
    unit[part], divided by max(‖row‖, 1e-12) first (SOES: `ressformer._unit`). One pass each
    way; the backward writes raw's gradient in place of the permute-and-copy of torch's."""
    dt = _float_dtype("heads", "raw", raw)
    _check("heads", ("raw", raw, (None, None, None), dt))
    B, N, F = raw.shape
    _check_value("heads", parts >= 1 and heads >= 1 and F % (parts * heads) == 0 and F > 0,
                 f"raw's last dim ({F}) must be parts·heads·dh = {parts}·{heads}·dh")
    _check_value("heads", len(unit) == parts, f"unit must have {parts} entries, got {len(unit)}")
    _check_value("heads", all(m >= 0 for m in sizes) and sum(sizes) == N,
                 f"sizes must be >= 0 and sum to raw's rows ({N}), got {list(sizes)}")
    if scale is not None:
        _check_value("heads", isinstance(scale, torch.Tensor) and scale.device.type == "cpu"
                     and scale.is_floating_point() and tuple(scale.shape) == (heads,),
                     f"scale must be a cpu float tensor of shape ({heads},), got "
                     f"{_describe(scale) if isinstance(scale, torch.Tensor) else type(scale).__name__}")
    return _Heads.apply(raw, scale, parts, heads, tuple(unit), tuple(sizes))


class _MemoryScores(torch.autograd.Function):
    @staticmethod
    def forward(ctx, qr, q, kr, ks, kc, gidx, ak, sa):
        # qr, q (B, H, G, L, D); kr, kc (B, H, L, D); ks (B, H, S, D); gidx (B, H, G, L, K);
        # ak (B, H, G, L, K) or None; sa (B, S) -> z (B, H, G, L, K + S + 1)
        B, H, G, L, D = q.shape
        K, S = gidx.shape[-1], ks.shape[2]
        qr, q, kr, ks, kc, gidx, sa = (t.contiguous() for t in (qr, q, kr, ks, kc, gidx, sa))
        ak = None if ak is None else ak.contiguous()
        z = torch.empty(B, H, G, L, K + S + 1, dtype=q.dtype)
        _call("mem_scores", q.dtype, qr, q, kr, gidx, ak, ks, sa, kc, B * H * G * L, K, S, D,
              G * L, H, L, z)
        ctx.save_for_backward(qr, q, kr, ks, kc, gidx)
        ctx.dims = (K, S, D, G * L, L)
        return z

    @staticmethod
    @once_differentiable
    def backward(ctx, dz):
        qr, q, kr, ks, kc, gidx = ctx.saved_tensors
        K, S, D, GL, L = ctx.dims
        dqr, dq = torch.empty_like(qr), torch.empty_like(q)
        dkr, dks, dkc = torch.zeros_like(kr), torch.zeros_like(ks), torch.zeros_like(kc)
        _call("mem_scores_grad", q.dtype, dz.contiguous(), qr, q, kr, gidx, ks, kc,
              q.numel() // D, K, S, D, GL, L, dqr, dq, dkr, dks, dkc)
        dak = dz[..., :K] if ctx.needs_input_grad[6] else None
        return dqr, dq, dkr, dks, dkc, None, dak, None


class _MemoryMix(torch.autograd.Function):
    @staticmethod
    def forward(ctx, w, v, vs, vc, gidx):
        # w (B, H, G, L, K + S + 1); v, vc (B, H, L, D); vs (B, H, S, D) -> (B, H, G, L, D)
        B, H, G, L, N = w.shape
        K, S, D = gidx.shape[-1], vs.shape[2], v.shape[-1]
        w, v, vs, vc, gidx = (t.contiguous() for t in (w, v, vs, vc, gidx))
        out = torch.empty(B, H, G, L, D, dtype=w.dtype)
        _call("mem_mix", w.dtype, w, v, gidx, vs, vc, B * H * G * L, K, S, D, G * L, L, out)
        ctx.save_for_backward(w, v, vs, vc, gidx)
        ctx.dims = (K, S, D, G * L, L)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, go):
        w, v, vs, vc, gidx = ctx.saved_tensors
        K, S, D, GL, L = ctx.dims
        dw = torch.empty_like(w)
        dv, dvs, dvc = torch.zeros_like(v), torch.zeros_like(vs), torch.zeros_like(vc)
        _call("mem_mix_grad", w.dtype, go.contiguous(), w, v, gidx, vs, vc,
              w.numel() // w.shape[-1], K, S, D, GL, L, dw, dv, dvs, dvc)
        return dw, dv, dvs, dvc, None


def memory_scores(qr: torch.Tensor, q: torch.Tensor, kr: torch.Tensor, ks: torch.Tensor,
                  kc: torch.Tensor, gidx: torch.Tensor, ak: torch.Tensor | None,
                  sa: torch.Tensor) -> torch.Tensor:
    """Sparse attention's scores with R2MU's memory, one loop per query row: qr, q (B, H, G,
    L, dh) (rotated, and not: the memory keys carry no position); the kept token keys' rows
    gidx (B, H, G, L, k) of kr (B, H, L, dh), plus ak (the mask there) or None; the slots ks
    (B, H, S, dh), plus sa (B, S) 0 / −inf; the row's own cache key kc (B, H, L, dh)
    -> z (B, H, G, L, k + S + 1). All contiguous."""
    dt = _float_dtype("memory_scores", "q", q)
    _check("memory_scores", ("q", q, (None,) * 5, dt), ("ks", ks, (None,) * 4, dt),
           ("gidx", gidx, (None,) * 5, torch.int64))
    B, H, G, L, D = q.shape
    S, K = ks.shape[2], gidx.shape[-1]
    _check("memory_scores", ("qr", qr, (B, H, G, L, D), dt), ("kr", kr, (B, H, L, D), dt),
           ("ks", ks, (B, H, S, D), dt), ("kc", kc, (B, H, L, D), dt),
           ("gidx", gidx, (B, H, G, L, K), torch.int64), ("sa", sa, (B, S), dt),
           *([] if ak is None else [("ak", ak, (B, H, G, L, K), dt)]))
    _check_index("memory_scores", "gidx", gidx, B * H * L)
    return _MemoryScores.apply(qr, q, kr, ks, kc, gidx, ak, sa)


def memory_mix(w: torch.Tensor, v: torch.Tensor, vs: torch.Tensor, vc: torch.Tensor,
               gidx: torch.Tensor) -> torch.Tensor:
    """The weighted sum that goes with memory_scores: w (B, H, G, L, k + S + 1) over the kept
    token values (rows gidx of v (B, H, L, dh)), the slot values vs (B, H, S, dh) and the
    row's own cache value vc (B, H, L, dh) -> (B, H, G, L, dh). All contiguous."""
    dt = _float_dtype("memory_mix", "w", w)
    _check("memory_mix", ("v", v, (None,) * 4, dt), ("vs", vs, (None,) * 4, dt),
           ("gidx", gidx, (None,) * 5, torch.int64))
    B, H, L, D = v.shape
    S, K = vs.shape[2], gidx.shape[-1]
    G = gidx.shape[2]
    _check("memory_mix", ("w", w, (B, H, G, L, K + S + 1), dt), ("vs", vs, (B, H, S, D), dt),
           ("vc", vc, (B, H, L, D), dt), ("gidx", gidx, (B, H, G, L, K), torch.int64))
    _check_index("memory_mix", "gidx", gidx, B * H * L)
    return _MemoryMix.apply(w, v, vs, vc, gidx)


def _lanes_padded(n: int, dtype: torch.dtype) -> int:
    """n rounded up to a whole 64-byte vector of `dtype` (the C loops' LANES)."""
    lanes = 64 // dtype.itemsize
    return -(-n // lanes) * lanes


class _DenseMemorySoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, qr, q, kr, ks, kc, add, sa):
        # qr, q (B, H, G, L, D); kr, kc (B, H, L, D); ks (B, H, S, D); add None or (B | 1,
        # H | 1, L | 1, L); sa (B, S) -> y (B, H, G, L, L + S + 1)
        B, H, G, L, D = q.shape
        S = ks.shape[2]
        qr, q, kr, ks, kc, sa = (t.contiguous() for t in (qr, q, kr, ks, kc, sa))
        m, strides = _row_mask(add, q.dtype, (0, 1, 2))
        Lp, Sp = _lanes_padded(L, q.dtype), _lanes_padded(S, q.dtype)
        scratch = torch.zeros(D * (Lp + Sp) + 4 * (Lp + 2 * Sp + 16), dtype=q.dtype)
        y = torch.empty(B, H, G, L, L + S + 1, dtype=q.dtype)
        _call("dense_memory_softmax", q.dtype, qr, q, kr, ks, kc, m, *strides, sa, B, H, G, L,
              S, D, scratch, y)
        ctx.save_for_backward(y, qr, q, kr, ks, kc)
        ctx.add_shape = None if add is None else add.shape
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, gy):
        y, qr, q, kr, ks, kc = ctx.saved_tensors
        B, H, G, L, D = q.shape
        S = ks.shape[2]
        gqr, gq = torch.empty_like(qr), torch.empty_like(q)
        gkr, gks, gkc = torch.zeros_like(kr), torch.zeros_like(ks), torch.zeros_like(kc)
        # a learned bias in the mask (a pe's): its gradient is the token scores', summed over
        # the experts and where it broadcasts
        dz = torch.empty_like(y) if ctx.needs_input_grad[5] else None
        _call("dense_memory_softmax_grad", q.dtype, y, gy.contiguous(), qr, q, kr, ks, kc,
              B * H, G, L, S, D, torch.empty(4 * (L + S + 1), dtype=q.dtype), gqr, gq, gkr, gks, gkc, dz)
        dadd = None if dz is None else dz[..., :L].sum(2).sum_to_size(ctx.add_shape)
        return gqr, gq, gkr, gks, gkc, dadd, None


def dense_memory_softmax(qr: torch.Tensor, q: torch.Tensor, kr: torch.Tensor, ks: torch.Tensor,
                         kc: torch.Tensor, add: torch.Tensor | None, sa: torch.Tensor) -> torch.Tensor:
    """Dense attention's weights with R2MU's memory: softmax over [qr · kr + add | q · ks + sa
    | q · kc of the row's own cache entry] in one pass per query row, the scores never
    stored. qr, q (B, H, G, L, dh) (rotated, and not: the memory keys carry no position);
    kr, kc (B, H, L, dh); ks (B, H, S, dh); add None or (B | 1, H | 1, L | 1, L) additive (a
    pe's bias gets its gradient); sa (B, S) 0 / −inf -> (B, H, G, L, L + S + 1). Any layout
    (copied contiguous where it is not)."""
    dt = _float_dtype("dense_memory_softmax", "q", q)
    _check("dense_memory_softmax", ("q", q, (None,) * 5, dt, False),
           ("ks", ks, (None,) * 4, dt, False))
    B, H, G, L, D = q.shape
    S = ks.shape[2]
    _check("dense_memory_softmax", ("qr", qr, (B, H, G, L, D), dt, False),
           ("kr", kr, (B, H, L, D), dt, False), ("ks", ks, (B, H, S, D), dt, False),
           ("kc", kc, (B, H, L, D), dt, False), ("sa", sa, (B, S), dt, False))
    _check_value("dense_memory_softmax", L >= 1 and D >= 1, "q must have at least one query and one feature")
    _check_mask("dense_memory_softmax", "add", add, dt, (B, H, L, L), (0, 1, 2))
    return _DenseMemorySoftmax.apply(qr, q, kr, ks, kc, add, sa)


class _DenseMemoryMix(torch.autograd.Function):
    @staticmethod
    def forward(ctx, w, v, vs, vc):
        # w (B, H, G, L, L + S + 1); v, vc (B, H, L, D); vs (B, H, S, D) -> (B, H, G, L, D)
        B, H, G, L, N = w.shape
        S, D = vs.shape[2], v.shape[-1]
        w, v, vs, vc = (t.contiguous() for t in (w, v, vs, vc))
        out = torch.empty(B, H, G, L, D, dtype=w.dtype)
        _call("dense_memory_mix", w.dtype, w, v, vs, vc, B * H, G, L, S, D, out)
        ctx.save_for_backward(w, v, vs, vc)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, go):
        w, v, vs, vc = ctx.saved_tensors
        B, H, G, L, N = w.shape
        S, D = vs.shape[2], v.shape[-1]
        Lp, Sp = _lanes_padded(L, w.dtype), _lanes_padded(S, w.dtype)
        gw = torch.empty_like(w)
        gv, gvs, gvc = torch.zeros_like(v), torch.zeros_like(vs), torch.zeros_like(vc)
        _call("dense_memory_mix_grad", w.dtype, go.contiguous(), w, v, vs, vc, B * H, G, L, S, D,
              torch.zeros(D * (Lp + Sp) + 4 * (Lp + Sp), dtype=w.dtype), gw, gv, gvs, gvc)
        return gw, gv, gvs, gvc


def dense_memory_mix(w: torch.Tensor, v: torch.Tensor, vs: torch.Tensor, vc: torch.Tensor) -> torch.Tensor:
    """The weighted sum that goes with dense_memory_softmax: w (B, H, G, L, L + S + 1) over
    every token value v (B, H, L, dh), the slot values vs (B, H, S, dh) and the row's own
    cache value vc (B, H, L, dh) -> (B, H, G, L, dh). Any layout (copied contiguous where
    it is not)."""
    dt = _float_dtype("dense_memory_mix", "w", w)
    _check("dense_memory_mix", ("v", v, (None,) * 4, dt, False), ("vs", vs, (None,) * 4, dt, False))
    B, H, L, D = v.shape
    S = vs.shape[2]
    _check("dense_memory_mix", ("w", w, (B, H, None, L, L + S + 1), dt, False),
           ("vs", vs, (B, H, S, D), dt, False), ("vc", vc, (B, H, L, D), dt, False))
    return _DenseMemoryMix.apply(w, v, vs, vc)


class _MaskedSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z, mask):
        # z (B, H, G, L, N); mask None or (B | 1, H | 1, 1, L | 1, N) -> (B, H, G, L, N)
        z = z.contiguous()
        B, H, G, L, N = z.shape
        y = torch.empty_like(z)
        m, strides = _row_mask(mask, z.dtype, (0, 1, 3))
        _call("masked_softmax", z.dtype, z, m, *strides, H, G, L, z.numel() // N, N, y)
        ctx.save_for_backward(y)
        ctx.mask_shape = None if mask is None else mask.shape
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        y, = ctx.saved_tensors
        dz = _row_grad("softmax_grad", y, dy)
        # a learned bias in the mask (a pe's): its gradient is z's, summed where it broadcasts
        dmask = dz.sum_to_size(ctx.mask_shape) if ctx.needs_input_grad[1] else None
        return dz, dmask


def masked_softmax(z: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """softmax(z + mask) over the last axis in one pass per row: z (B, H, G, L, N), mask
    None or (B | 1, H | 1, 1, L | 1, N) additive (0 / −inf; a pe's bias, which gets its
    gradient; shared by the G experts). −inf entries are exact zeros; a row of only −inf
    gives NaN, as torch's. z contiguous; the mask any layout."""
    dt = _float_dtype("masked_softmax", "z", z)
    _check("masked_softmax", ("z", z, (None,) * 5, dt))
    B, H, G, L, N = z.shape
    _check_value("masked_softmax", N >= 1, "z's rows must not be empty")
    _check_mask("masked_softmax", "mask", mask, dt, (B, H, G, L, N), (0, 1, 3))
    return _MaskedSoftmax.apply(z, mask)


# Rows longer than this go to the entmax package (the kernel's sorts are O(N²) per row).
ENTMAX_MAX_WIDTH = 64


class _Entmax15(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z):  # (..., N) -> (..., N)
        z = z.contiguous()
        y = torch.empty_like(z)
        _call("entmax15", z.dtype, z, z.numel() // z.shape[-1], z.shape[-1], y)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        y, = ctx.saved_tensors
        return _row_grad("entmax15_grad", y, dy)


def entmax15(z: torch.Tensor) -> torch.Tensor:
    """1.5-entmax over the last axis of rows no wider than ENTMAX_MAX_WIDTH (the kept
    scores of top-k attention): the `entmax` package's computation, one loop per row. z
    contiguous."""
    dt = _float_dtype("entmax15", "z", z)
    _check("entmax15", ("z", z, None, dt))
    _check_value("entmax15", z.dim() >= 1 and 1 <= z.shape[-1] <= ENTMAX_MAX_WIDTH,
                 f"z's rows must hold 1 to {ENTMAX_MAX_WIDTH} entries, got shape {tuple(z.shape)}")
    return _Entmax15.apply(z)


class _SparseSqDist(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, ia, b, ib, distinct):  # (..., Na) weights and indices, (..., Nb) -> (...)
        a, ia, b, ib = a.contiguous(), ia.contiguous(), b.contiguous(), ib.contiguous()
        ctx.save_for_backward(a, ia, b, ib)
        ctx.distinct = int(distinct)
        out = torch.empty(a.shape[:-1], dtype=a.dtype)
        _call("sparse_sqdist", a.dtype, a, ia, a.shape[-1], b, ib, b.shape[-1], out.numel(),
              ctx.distinct, None, out, None, None)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, go):
        a, ia, b, ib = ctx.saved_tensors
        ga, gb = torch.empty_like(a), torch.empty_like(b)
        _call("sparse_sqdist", a.dtype, a, ia, a.shape[-1], b, ib, b.shape[-1], go.numel(),
              ctx.distinct, go.contiguous(), None, ga, gb)
        return ga, None, gb, None, None


def sparse_sqdist(a: torch.Tensor, ia: torch.Tensor, b: torch.Tensor, ib: torch.Tensor,
                  distinct: bool = False) -> torch.Tensor:
    """‖a_r − b_r‖² of sparse rows: weights a (..., Na) at key indices ia (int64; a key may
    repeat, the entries then add up), b (..., Nb) at ib -> (...). (Σ_i a_i d_i + Σ_j b_j d_j,
    with d the difference at each entry's key, is the squared norm.) `distinct`: no key
    repeats within a row of a or of b (then half the comparisons). Any layout (copied
    contiguous)."""
    dt = _float_dtype("sparse_sqdist", "a", a)
    _check("sparse_sqdist", ("a", a, None, dt, False), ("b", b, None, dt, False))
    _check_value("sparse_sqdist", a.dim() >= 1 and a.shape[:-1] == b.shape[:-1],
                 f"a and b must share their leading dims, got {tuple(a.shape)} and {tuple(b.shape)}")
    _check("sparse_sqdist", ("ia", ia, tuple(a.shape), torch.int64, False),
           ("ib", ib, tuple(b.shape), torch.int64, False))
    return _SparseSqDist.apply(a, ia, b, ib, distinct)


def gather_dot(a: torch.Tensor, table: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """a (R, D), table (M, D), idx (R, K) int64 rows of table -> (R, K) dot products."""
    _check_gather("gather_dot", ("a", a), table, idx)
    return _GatherDot.apply(a, table, idx)


def gather_sum(w: torch.Tensor, table: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """w (R, K), table (M, D), idx (R, K) int64 rows of table -> (R, D) weighted sums."""
    _check_gather("gather_sum", ("w", w), table, idx)
    return _GatherSum.apply(w, table, idx)


def _check_gather(entry: str, first: tuple[str, torch.Tensor], table: torch.Tensor,
                  idx: torch.Tensor) -> None:
    """gather_dot's a (R, D) or gather_sum's w (R, K); table (M, D); idx (R, K) in [0, M)."""
    name, x = first
    dt = _float_dtype(entry, name, x)
    _check(entry, (name, x, (None, None), dt), ("table", table, (None, None), dt),
           ("idx", idx, (None, None), torch.int64))
    R, M, D = x.shape[0], table.shape[0], table.shape[1]
    K = idx.shape[1]
    _check(entry, (name, x, (R, D) if name == "a" else (R, K), dt), ("idx", idx, (R, K), torch.int64))
    _check_index(entry, "idx", idx, M)

"""Lab 4's CUDA/HIP attention forward (cuda/attention.cu), launched on a GPU or run on the CPU target.

    from a07_softmax import attention_cuda
    o = attention_cuda.forward(q, k, v, causal=True)          # CuPy arrays or CUDA torch tensors
    o = attention_cuda.forward_on_cpu(q, k, v, causal=True)   # NumPy arrays, no GPU needed

The kernel is the readable one: one warp per query row, K and V tiles staged in shared memory,
(m, l) merged with online_softmax.h's combine(), o rescaled with l. fp32 in and out, on the CUDA
cores; the Triton kernel (a07_softmax.attention) is the fast path. Inputs: (batch, heads, seq,
head_dim) float32, head_dim <= 128; kv_len: int32 (batch,) valid keys per batch entry, in [0, seq].
"""
from __future__ import annotations

import math

import numpy as np

from . import constants, native
from .paths import ROOT

SOURCE = {"CUDA": "cuda/attention.cu", "HIP": "hip/attention.cpp"}
KERNEL = "attention_fwd"
MAX_HEAD_DIM = 128                   # cuda/attention.cu sizes its shared tiles for this
BLOCK = constants.BLOCK              # threads per block: one warp per query row
# argument kinds of attention_fwd for the CPU target, in parameter order
KINDS = [("in", "float32"), ("in", "float32"), ("in", "float32"), ("out", None), ("in", "int32"), ("i32", None),
         ("i32", None), ("i32", None), ("i32", None), ("i32", None), ("f32", None), ("i32", None)]


def check(q, k, v, kv_len=None, scale=None):
    """Validate before any launch; return (batch, heads, seq, head_dim, scale). Works on NumPy,
    CuPy and torch arrays alike (shape, dtype name, contiguity)."""
    arrays = {"q": q, "k": k, "v": v}
    for name, t in arrays.items():
        shape = tuple(t.shape)
        if len(shape) != 4:
            raise ValueError(f"{name} must be (batch, heads, seq, head_dim), got shape {shape}")
        if "float32" not in str(t.dtype):
            raise TypeError(f"{name} has dtype {t.dtype}; the CUDA attention kernel takes float32 "
                            "(a07_softmax.attention.flash_attention takes fp16/bf16)")
    if not tuple(q.shape) == tuple(k.shape) == tuple(v.shape):
        raise ValueError(f"q, k and v must share one shape, got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    b, h, s, d = map(int, q.shape)
    if min(b, h, s, d) < 1:
        raise ValueError(f"batch, heads, seq and head_dim must be >= 1, got shape {(b, h, s, d)}")
    if d > MAX_HEAD_DIM:
        raise ValueError(f"head_dim {d} > {MAX_HEAD_DIM}: the kernel's shared-memory tiles hold at most {MAX_HEAD_DIM}")
    if b * h * -(-s // max(1, BLOCK // 64)) >= 2**31:
        raise ValueError(f"batch x heads x query blocks must stay below 2^31 for one launch, got shape {(b, h, s, d)}")
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")
    if kv_len is not None:
        if tuple(kv_len.shape) != (b,) or "int32" not in str(kv_len.dtype):
            raise ValueError(f"kv_len must be int32 of shape ({b},), got {kv_len.dtype} {tuple(kv_len.shape)}")
        if not native.meta(kv_len).contiguous:   # the kernel reads batch entry i's length at kv_len + i
            raise ValueError("kv_len is not contiguous (a strided view such as lens[:, 0]?); pass a contiguous "
                             "copy (.contiguous() for torch, .copy() for NumPy and CuPy)")
        lens = np.asarray(kv_len.get() if hasattr(kv_len, "get") else
                          kv_len.cpu().numpy() if hasattr(kv_len, "cpu") else kv_len)
        if lens.size and (lens.min() < 0 or lens.max() > s):
            raise ValueError(f"kv_len must lie in [0, seq = {s}], got values from {lens.min()} to {lens.max()}")
    return b, h, s, d, scale


def grid(batch_heads: int, seq: int, warp_size: int) -> tuple[int, int]:
    """(blocks, threads): one block per ROWS query rows of one (batch, head), ROWS = warps a block."""
    rows = BLOCK // warp_size
    return batch_heads * -(-seq // rows), BLOCK


def _args(b, h, s, d, scale, causal, has_kv_len):
    return [int(has_kv_len), b * h, h, s, d, scale, int(bool(causal))]


_BUILDS: dict = {}


def forward_on_cpu(q, k, v, *, causal: bool = False, kv_len=None, scale=None, warp_size: int = 32) -> np.ndarray:
    """The same kernel source on the CPU target: the system C++ compiler builds it, a block's threads
    run as fibers. Correctness at small sizes, without a GPU. NumPy in, float32 NumPy out."""
    import tempfile
    from pathlib import Path

    from . import cpu_target

    b, h, s, d, scale = check(q, k, v, kv_len, scale)
    if warp_size not in _BUILDS:
        work = cpu_target.scratch()
        _BUILDS[warp_size] = (cpu_target.build(ROOT / SOURCE["CUDA"], KERNEL, KINDS, work, warp=warp_size), work)
    exe, work = _BUILDS[warp_size]
    blocks, threads = grid(b * h, s, warp_size)
    lens = np.zeros(1, np.int32) if kv_len is None else np.asarray(kv_len, np.int32)
    values = [np.asarray(q, np.float32), np.asarray(k, np.float32), np.asarray(v, np.float32), (b, h, s, d), lens,
              *_args(b, h, s, d, scale, causal, kv_len is not None)]
    with tempfile.TemporaryDirectory(dir=work) as run_dir:
        return cpu_target.run(exe, blocks, threads, KINDS, values, Path(run_dir), timeout=300)[3]


def _overlap(a, b) -> bool:
    ma, mb = native.meta(a), native.meta(b)
    return bool(ma.ptr and mb.ptr and ma.ptr < mb.ptr + mb.nbytes and mb.ptr < ma.ptr + ma.nbytes)


_MODULES: dict = {}


def _function():
    import cupy

    key = cupy.cuda.Device().id
    if key not in _MODULES:
        vendor = "HIP" if cupy.cuda.runtime.is_hip else "CUDA"
        mod = cupy.RawModule(code=(ROOT / SOURCE[vendor]).read_text(), options=tuple(native.compile_options()),
                             backend="hiprtc" if vendor == "HIP" else "nvrtc")
        _MODULES[key] = mod.get_function(KERNEL)
    return _MODULES[key]


def forward(q, k, v, *, causal: bool = False, kv_len=None, scale=None, out=None):
    """softmax(scale q k^T + mask) v on the GPU, on q's device and stream (native.launch_context).
    q, k, v: contiguous float32 CuPy arrays or CUDA torch tensors of one device; rows that see no
    key come back as zeros."""
    b, h, s, d, scale = check(q, k, v, kv_len, scale)
    for name, t in (("q", q), ("k", k), ("v", v)):
        native.check_out(t, q, name=name)   # same shape, dtype, device; contiguous
    if out is not None:
        native.check_out(out, q)     # q itself is allowed: a block reads its own rows of q first
        if any(_overlap(out, t) for t in (k, v)):
            raise ValueError("out overlaps k or v, which every block reads until the end: pass a separate buffer")
    if kv_len is not None and getattr(kv_len, "device", None) != getattr(q, "device", None):
        raise ValueError(f"kv_len must be on q's device ({q.device}), got {kv_len.device}")
    with native.launch_context(q):
        import cupy

        warp = 64 if cupy.cuda.runtime.is_hip else 32
        out = native._empty_like(q) if out is None else out
        blocks, threads = grid(b * h, s, warp)
        lens = kv_len if kv_len is not None else q
        _function()((blocks,), (threads,), (
            np.uint64(native.pointer(q)), np.uint64(native.pointer(k)), np.uint64(native.pointer(v)),
            np.uint64(native.pointer(out)), np.uint64(native.pointer(lens)), np.int32(kv_len is not None),
            np.int32(b * h), np.int32(h), np.int32(s), np.int32(d), np.float32(scale), np.int32(bool(causal))))
    return out

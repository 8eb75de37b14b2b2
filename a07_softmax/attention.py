"""Lab 4 (in progress): attention = softmax(scale * Q K^T + mask) V without writing the S x S scores.

    from a07_softmax import attention
    o = attention.flash_attention(q, k, v, causal=True)       # q, k, v: (batch, heads, seq, head_dim)

Each program owns BLOCK_M query rows and walks the keys and values BLOCK_N at a time, carrying the
online state of notebook 03 per query row: the running max m, the running sum l of exp(s - m), and
the running numerator o = sum exp(s - m) V. When a tile raises the max, l and o are both multiplied
by exp(m_old - m_new) (forgetting o is the classic error). With `causal`, tiles entirely above the
diagonal are never loaded (about half the work) and the diagonal tile is masked element by element.
A query row that sees no key at all (a key-padding length of 0) returns zeros.

The Triton kernel runs compiled on a GPU and in the Triton interpreter on CPU tensors (small sizes;
tests/test_attention.py). `reference()` is the float64 answer it is held to.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from . import reference as R

HEAD_DIMS = (16, 32, 64, 128)
# the most programs a CUDA grid holds in its second dimension (batch x heads here); larger batches
# are launched a slice of whole batch entries at a time
MAX_GRID_HEADS = 65535


def reference(q, k, v, *, causal: bool = False, kv_len=None, scale: float | None = None) -> np.ndarray:
    """float64 attention of (B, H, S, D) arrays with the course's masking contract: masked scores are
    -inf (causal: key > query; key padding: key >= kv_len[b]), and a query row with no visible key
    gives zeros."""
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    b, h, s, d = q.shape
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    scores = np.einsum("bhqd,bhkd->bhqk", q, k) * scale
    keep = np.ones((b, 1, s, k.shape[2]), dtype=bool)
    if causal:
        keep &= np.tril(np.ones((s, k.shape[2]), dtype=bool))[None, None]
    if kv_len is not None:
        keep &= (np.arange(k.shape[2])[None, :] < np.asarray(kv_len)[:, None])[:, None, None, :]
    scores = np.where(keep, scores, -np.inf)
    p = np.zeros_like(scores)
    live = keep.any(axis=-1)
    live = np.broadcast_to(live, scores.shape[:-1])
    p[live] = R.softmax(scores[live], axis=-1)
    return np.einsum("bhqk,bhkd->bhqd", p, v)


def traffic_bytes(batch_heads: int, seq: int, head_dim: int, elem_bytes: int = 2, *, fused: bool = True,
                  score_bytes: int = 4) -> int:
    """The traffic model in bytes. Fused: read Q, K and V and write O once (K and V counted once, as if
    they stayed in cache across a sequence's query tiles). Naive: also write the S x S scores
    (score_bytes each: 4 for fp32), read them for the softmax, write the probabilities and read them
    again for P V."""
    qkvo = 4 * batch_heads * seq * head_dim * elem_bytes
    return qkvo if fused else qkvo + 4 * batch_heads * seq * seq * score_bytes


class Tiles(NamedTuple):
    block_m: int      # query rows per program
    block_n: int      # keys per tile of the inner loop
    num_warps: int
    num_stages: int   # tiles of K and V in flight
    kv_descriptors: bool = False  # K and V tiles through tensor descriptors (TMA), where _use_tma allows
    masked_first: bool = False    # walk the masked tiles (diagonal, tail) before the unmasked run


# (largest head dim, tiles): the first row whose limit covers d, per mode, for 16-bit data on GPUs
# with TMA. Measured on the H200 in bf16 (bench/sweeps/attention_configs.py ->
# results/nvidia-h200/sweeps_attention.txt; docs/performance.md reads it). Head dim 128 runs fastest
# on square 128 x 128 tiles (one masked tile on a causal diagonal instead of two). Key and value
# tiles go through descriptors, except in causal launches at head dim 64, which ran faster through
# pointers. Causal launches at head dim 128 walk the diagonal tile before the unmasked run (an H100
# sweep at commit 6d62f22 had it 3-8 % faster there, and 1-3 % slower at head dim 64).
TMA_TILES = {
    "full": ((64, Tiles(128, 64, 8, 3, kv_descriptors=True)), (128, Tiles(128, 128, 8, 3, kv_descriptors=True))),
    "causal": ((64, Tiles(128, 64, 8, 3)), (128, Tiles(128, 128, 8, 3, kv_descriptors=True, masked_first=True))),
}
TMA_MIN_HEAD_DIM = 64
# float32, and GPUs without TMA: 128 x 64 ran as fast as 128 x 128 there
POINTER_TILES = ((32, Tiles(128, 64, 4, 3)), (128, Tiles(128, 64, 8, 3)))


def pick_tiles(head_dim: int, tma: bool, causal: bool = False) -> Tiles:
    """The launch for a head dim and mode: TMA_TILES where the data may go through descriptors (tma),
    else POINTER_TILES."""
    table = TMA_TILES["causal" if causal else "full"] if tma else POINTER_TILES
    return next(t for limit, t in table if head_dim <= limit)


# Causal launches run a group of heads' query tiles longest first (attention_fwd_kernel, HEAVY_FIRST).
# The group's keys and values are what its tiles read while they run; with this many bytes of them
# they stay in L2 (60 MB on an H200) beside the query tiles and outputs passing through. Each head
# alone leaves the grid ending on one head's tiles; the whole grid at once reads every head's keys
# from DRAM. Measured: bench/sweeps/attention_configs.py, the `group` column (docs/performance.md).
HEAD_GROUP_L2_BYTES = 8 << 20


def head_group(batch_heads: int, seq: int, head_dim: int, elem_bytes: int) -> int:
    """How many heads a causal launch orders longest-tile-first together: as many as keep their keys
    and values (2 * seq * head_dim elements each) within HEAD_GROUP_L2_BYTES, at least 1."""
    return max(1, min(batch_heads, HEAD_GROUP_L2_BYTES // (2 * seq * head_dim * elem_bytes)))


# The positive scale is not folded into the exp (attention_kernels._attend, FOLD): the fold measures
# each score against m = round(max(s) * c) in one multiply-add, which puts a row's largest score at
# 2^(the rounding error of m) instead of 2^0. Harmless for scores of everyday size, but past
# |m| ~ 2^30 (a 16-bit dtype's whole range reaches 1e10) that exp flushes to 0 or overflows on a
# GPU: zeros or NaN (tests/test_attention.py, test_float16_over_its_whole_finite_range). A guard that
# walked such a tile again unfolded cost more than the fold saves (sweeps_attention.txt, fold rows).
FOLD_SCALE = False

# The kernel forms scale * log2(e) in float32 (every exp is an exp2): scales beyond this would make
# it inf, and every score's exponent inf - inf = NaN.
MAX_ABS_SCALE = float(np.finfo(np.float32).max) / math.log2(math.e)


def _use_tma(q, k, v, interp: bool) -> bool:
    """Tensor descriptors for the K and V tiles: 16-bit data (float32 tiles of 128 x 128 would not fit
    in shared memory) whose base addresses meet TMA's 16-byte alignment, on an NVIDIA GPU of compute
    capability 9 or more at the head dims measured with it (TMA_TILES), or in the interpreter at any
    head dim (it reads descriptors too: the CPU tests cover both paths, fp32 the pointer one). Below
    head dim 64 the GPU keeps pointers: with Triton 3.6 ptxas crashed compiling the descriptor
    kernel at head dim 16 (fp16, H200)."""
    import torch

    if q.element_size() != 2 or any(t.data_ptr() % 16 for t in (k, v)):
        return False
    if interp:
        return True
    return (q.shape[-1] >= TMA_MIN_HEAD_DIM and torch.version.hip is None
            and torch.cuda.get_device_capability(q.device)[0] >= 9)


_KERNEL = []


def _launch(q, k, v, out, kv_len, scale, causal, block_m, block_n, tiles, interp, heads_per_group):
    """One launch of the kernel over (B, H, S, D) slices, B * H within the grid's second dimension."""
    import torch
    import triton

    b, h, s, d = q.shape
    grid = (triton.cdiv(s, block_m), b * h)

    def descriptor(t, rows):
        """(B*H, S, D) view of t, blocks of `rows` rows of one head: a block never crosses into the
        next head, and rows past S read as zeros."""
        from triton.tools.tensor_descriptor import TensorDescriptor

        return TensorDescriptor(t.view(b * h, s, d), [b * h, s, d], [s * d, d, 1], [1, rows, d])

    kd, vd = (descriptor(t, block_n) for t in (k, v)) if tiles.kv_descriptors else (k, v)
    group = int(heads_per_group or head_group(b * h, s, d, q.element_size()))
    _KERNEL[0][grid](q, k, v, out, kd, vd, kv_len if kv_len is not None else q, s, scale, h, min(group, b * h),
                     q.stride(0), q.stride(1), q.stride(2), HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=block_n,
                     CAUSAL=causal, HAS_KV_LEN=kv_len is not None, IEEE=q.dtype == torch.float32,
                     UPCAST=interp and q.dtype == torch.bfloat16, HEAVY_FIRST=causal,
                     FOLD=FOLD_SCALE and scale > 0, TMA=tiles.kv_descriptors, MASKED_FIRST=tiles.masked_first,
                     **({} if interp else {"num_warps": tiles.num_warps, "num_stages": tiles.num_stages}))


def _overlaps(a, b) -> bool:
    pa, pb = a.data_ptr(), b.data_ptr()
    return pa < pb + b.numel() * b.element_size() and pb < pa + a.numel() * a.element_size()


def flash_attention(q, k, v, *, causal: bool = False, kv_len=None, scale: float | None = None,
                    block_m: int | None = None, block_n: int | None = None, out=None, tma: bool | None = None,
                    heads_per_group: int | None = None, masked_first: bool | None = None):
    """softmax(scale * q k^T + mask) v for (B, H, S, D) torch tensors of one dtype (float32, float16,
    bfloat16) on one device, D in HEAD_DIMS; fp32 statistics. kv_len: int32 (B,) valid keys per batch
    entry (key padding), each in [0, S]. Rows with no visible key are zeros. |scale| at most
    MAX_ABS_SCALE. block_m, block_n, tma, heads_per_group, masked_first: override the launch choice
    (tests; tma=None: tensor descriptors for the key and value tiles where _use_tma allows and the
    launch table takes them, True: always, False: never; heads_per_group=None: head_group();
    masked_first=None: the launch table's order of the two runs of key tiles)."""
    import torch
    import triton

    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be (batch, heads, seq, head_dim), got shape {tuple(t.shape)}")
        if t.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise TypeError(f"{name} has dtype {t.dtype}; supported: float32, float16, bfloat16")
    if not (q.shape == k.shape == v.shape and q.dtype == k.dtype == v.dtype and q.device == k.device == v.device):
        raise ValueError(f"q, k and v must share shape, dtype and device, got {tuple(q.shape)} {q.dtype} {q.device}, "
                         f"{tuple(k.shape)} {k.dtype} {k.device}, {tuple(v.shape)} {v.dtype} {v.device}")
    b, h, s, d = q.shape
    if d not in HEAD_DIMS:
        raise ValueError(f"head_dim {d} not supported; the kernel takes {HEAD_DIMS}")
    if min(b, h, s) < 1:
        raise ValueError(f"batch, heads and seq must be >= 1, got shape {tuple(q.shape)}")
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    if not math.isfinite(scale) or abs(scale) > MAX_ABS_SCALE:
        raise ValueError(f"scale must be finite with |scale| <= {MAX_ABS_SCALE:.4g} (scale * log2(e) is formed "
                         f"in float32), got {scale}")
    if heads_per_group is not None and (int(heads_per_group) != heads_per_group or heads_per_group < 1):
        raise ValueError(f"heads_per_group must be an integer >= 1, got {heads_per_group}")
    if kv_len is not None:
        if not isinstance(kv_len, torch.Tensor) or kv_len.dtype != torch.int32 or tuple(kv_len.shape) != (b,) \
                or kv_len.device != q.device:
            raise ValueError(f"kv_len must be an int32 tensor of shape ({b},) on {q.device}")
        lo, hi = int(kv_len.min()), int(kv_len.max())
        if lo < 0 or hi > s:
            raise ValueError(f"kv_len must lie in [0, seq = {s}], got values from {lo} to {hi}")
        kv_len = kv_len.contiguous()   # the kernel reads batch entry i's length at kv_len + i
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    if out is None:
        out = torch.empty_like(q)
    elif out.shape != q.shape or out.dtype != q.dtype or out.device != q.device or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous {q.dtype} tensor of shape {tuple(q.shape)} on {q.device}")
    elif any(_overlaps(out, t) for t in (k, v)) or (out.data_ptr() != q.data_ptr() and _overlaps(out, q)):
        # every program reads all of its head's k and v, and its own block of q before it writes that
        # block of out: out may be q itself, but a write into k, v or another block of q would be read
        raise ValueError("out overlaps k or v (or part of q): pass out=q to write over q, or a separate tensor")
    interp = not q.is_cuda
    allowed = _use_tma(q, k, v, interp) if tma is None else bool(tma)
    if interp:   # small tiles, descriptors wherever the data allows them (the CPU tests cover both paths)
        tiles = Tiles(16, 16, 4, 1, kv_descriptors=allowed)
    else:
        tiles = pick_tiles(d, allowed, bool(causal))
    if tma:      # forced (the tests' way to reach each path)
        tiles = tiles._replace(kv_descriptors=True)
    if masked_first is not None:
        tiles = tiles._replace(masked_first=bool(masked_first))
    for name, given in (("block_m", block_m), ("block_n", block_n)):
        # tl.arange needs a power of two, tl.dot 16 rows at least; 0 is an error, not the default
        if given is not None and (int(given) != given or given < 16 or given & (given - 1)):
            raise ValueError(f"{name} must be a power of two >= 16 (a tl.dot operand), got {given}")
    block_m = tiles.block_m if block_m is None else int(block_m)
    block_n = tiles.block_n if block_n is None else int(block_n)
    if block_m % block_n:
        raise ValueError(f"block_m ({block_m}) must be a multiple of block_n ({block_n}): a causal diagonal "
                         "must start a key tile")
    if not _KERNEL:
        from .attention_kernels import attention_fwd_kernel

        _KERNEL.append(attention_fwd_kernel)
    if h > MAX_GRID_HEADS:
        raise ValueError(f"heads = {h} > {MAX_GRID_HEADS}: the kernel's grid holds a batch entry's heads in its "
                         f"second dimension, which CUDA limits to {MAX_GRID_HEADS}")
    import contextlib

    ctx = torch.cuda.device(q.device) if q.is_cuda else contextlib.nullcontext()
    # batch x heads past the grid's second dimension: whole batch entries a launch (batch is the
    # outermost dimension, so each slice is contiguous and indexes its own kv_len from 0)
    per = MAX_GRID_HEADS // h
    with ctx, np.errstate(all="ignore"):
        for b0 in range(0, b, per):
            b1 = min(b, b0 + per)
            _launch(q[b0:b1], k[b0:b1], v[b0:b1], out[b0:b1], None if kv_len is None else kv_len[b0:b1], scale,
                    bool(causal), block_m, block_n, tiles, interp, heads_per_group)
    return out

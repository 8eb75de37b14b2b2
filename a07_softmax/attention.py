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

import numpy as np

from . import reference as R

HEAD_DIMS = (16, 32, 64, 128)


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


_KERNEL = []


def flash_attention(q, k, v, *, causal: bool = False, kv_len=None, scale: float | None = None,
                    block_m: int | None = None, block_n: int | None = None, out=None):
    """softmax(scale * q k^T + mask) v for (B, H, S, D) torch tensors of one dtype (float32, float16,
    bfloat16) on one device, D in HEAD_DIMS; fp32 statistics. kv_len: int32 (B,) valid keys per batch
    entry (key padding), each in [0, S]. Rows with no visible key are zeros."""
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
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")
    if kv_len is not None:
        if not isinstance(kv_len, torch.Tensor) or kv_len.dtype != torch.int32 or tuple(kv_len.shape) != (b,) \
                or kv_len.device != q.device:
            raise ValueError(f"kv_len must be an int32 tensor of shape ({b},) on {q.device}")
        lo, hi = int(kv_len.min()), int(kv_len.max())
        if lo < 0 or hi > s:
            raise ValueError(f"kv_len must lie in [0, seq = {s}], got values from {lo} to {hi}")
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    if out is None:
        out = torch.empty_like(q)
    elif out.shape != q.shape or out.dtype != q.dtype or out.device != q.device or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous {q.dtype} tensor of shape {tuple(q.shape)} on {q.device}")
    interp = not q.is_cuda
    # 128 x 64 tiles, 8 warps: the fastest of the configurations tried on the H200 at head dims 64 and
    # 128 (docs/performance.md, Lab 4); 64-row tiles left d 128 at 60 % of the 128-row speed.
    block_m = block_m or (16 if interp else 128)
    block_n = block_n or (16 if interp else 64)
    if block_m % block_n:
        raise ValueError(f"block_m ({block_m}) must be a multiple of block_n ({block_n}): a causal diagonal "
                         "must start a key tile")
    if not _KERNEL:
        from .attention_kernels import attention_fwd_kernel

        _KERNEL.append(attention_fwd_kernel)
    grid = (triton.cdiv(s, block_m), b * h)
    import contextlib

    ctx = torch.cuda.device(q.device) if q.is_cuda else contextlib.nullcontext()
    with ctx, np.errstate(all="ignore"):
        _KERNEL[0][grid](q, k, v, out, kv_len if kv_len is not None else q, s, scale, h,
                         q.stride(0), q.stride(1), q.stride(2), HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=block_n,
                         CAUSAL=bool(causal), HAS_KV_LEN=kv_len is not None, IEEE=q.dtype == torch.float32,
                         UPCAST=interp and q.dtype == torch.bfloat16, HEAVY_FIRST=bool(causal),
                         FOLD=scale > 0,
                         **({} if interp else {"num_warps": 4 if d <= 32 else 8, "num_stages": 3}))
    return out

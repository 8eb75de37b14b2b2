"""The backward passes of softmax and log_softmax in Triton: read the forward output and the upstream
gradient once, write the input gradient once.

  softmax:      y = softmax(x)      dx = y * (dy - <dy, y>)            (the row's dot product)
  log_softmax:  z = log_softmax(x)  dx = dy - exp(z) * sum(dy)

Neither needs x: the forward output carries everything (notebook 08 derives both, and
a07_softmax.reference holds the float64 versions they are tested against). A fully masked row has
y = 0 (softmax) and gets dx = 0; for log_softmax, z = -inf there, exp(z) = 0, and dx = dy, which is
what autograd computes for the same forward output. Same dtypes, row limit and launch layout as
a07_softmax.triton_softmax (one tile of whole rows per program, statistics in float32), except
that rows longer than WHOLE_ROW_MAX_COLS are walked in chunks (see below).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import triton_softmax as T


# A row of up to WHOLE_ROW_MAX_COLS is held on chip whole: y and dy are read once and dx written
# once. Longer rows would hold two row-long tensors in registers and spill (at 65536 columns the
# whole-row kernel ran at a seventh of the copy's bandwidth on the H200: bench/backward.py at
# commit 37f83fb), so they are walked CHUNK_COLS at a time, twice: a first pass for the
# row's sum, a second for dx. The second pass reads y and dy again, mostly from L2.
WHOLE_ROW_MAX_COLS = 16384
CHUNK_COLS = 8192


@triton.jit
def _dx(y, dy, row_sum, LOG: tl.constexpr):
    if LOG:
        return dy - tl.exp(y) * row_sum[:, None]
    return y * (dy - row_sum[:, None])


@triton.jit
def softmax_backward_kernel(dx_ptr, y_ptr, dy_ptr, n_rows, n_cols, y_stride, dy_stride, dx_stride,
                            BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, LOG: tl.constexpr,
                            CHUNK_C: tl.constexpr):
    # lanes past the row: y = 0 (softmax) or -inf (log_softmax) and dy = 0 add nothing to a sum
    fill = -float("inf") if LOG else 0.0
    for r0 in tl.range(tl.program_id(0) * BLOCK_R, n_rows, tl.num_programs(0) * BLOCK_R):
        rows = r0 + tl.arange(0, BLOCK_R)
        rows64 = rows.to(tl.int64)[:, None]
        if CHUNK_C >= BLOCK_C:  # the whole row on chip
            cols = tl.arange(0, BLOCK_C)
            inside = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
            y = tl.load(y_ptr + rows64 * y_stride + cols[None, :], mask=inside, other=fill).to(tl.float32)
            dy = tl.load(dy_ptr + rows64 * dy_stride + cols[None, :], mask=inside, other=0.0).to(tl.float32)
            # softmax needs <dy, y>, log_softmax sum(dy)
            row_sum = tl.sum(dy if LOG else dy * y, axis=1)
            tl.store(dx_ptr + rows64 * dx_stride + cols[None, :], _dx(y, dy, row_sum, LOG).to(dx_ptr.dtype.element_ty),
                     mask=inside)
        else:  # two passes over chunks: the sum, then dx
            row_sum = tl.zeros([BLOCK_R], tl.float32)
            for c0 in tl.range(0, n_cols, CHUNK_C):
                cols = c0 + tl.arange(0, CHUNK_C)
                inside = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
                dy = tl.load(dy_ptr + rows64 * dy_stride + cols[None, :], mask=inside, other=0.0).to(tl.float32)
                if LOG:
                    row_sum += tl.sum(dy, axis=1)
                else:
                    y = tl.load(y_ptr + rows64 * y_stride + cols[None, :], mask=inside, other=fill).to(tl.float32)
                    row_sum += tl.sum(dy * y, axis=1)
            for c0 in tl.range(0, n_cols, CHUNK_C):
                cols = c0 + tl.arange(0, CHUNK_C)
                inside = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
                y = tl.load(y_ptr + rows64 * y_stride + cols[None, :], mask=inside, other=fill).to(tl.float32)
                dy = tl.load(dy_ptr + rows64 * dy_stride + cols[None, :], mask=inside, other=0.0).to(tl.float32)
                tl.store(dx_ptr + rows64 * dx_stride + cols[None, :],
                         _dx(y, dy, row_sum, LOG).to(dx_ptr.dtype.element_ty), mask=inside)


def _backward(y: torch.Tensor, dy: torch.Tensor, out: torch.Tensor | None, log: bool) -> torch.Tensor:
    T._check(y, "y")
    T._check(dy, "dy")
    if dy.shape != y.shape or dy.dtype != y.dtype or dy.device != y.device:
        raise ValueError(f"dy must match y (shape {tuple(y.shape)}, {y.dtype}, {y.device}); got "
                         f"{tuple(dy.shape)}, {dy.dtype}, {dy.device}")
    out = T._output(y, out)
    a, b, n = dy.data_ptr(), out.data_ptr(), dy.numel() * dy.element_size()
    if a != b and a < b + n and b < a + n:
        raise ValueError("out overlaps dy without being it: pass out=dy to work in place, or a separate tensor")
    chunk = CHUNK_COLS if y.shape[1] > WHOLE_ROW_MAX_COLS else triton.next_power_of_2(y.shape[1])
    grid, meta = T._rows_launch(y, LOG=log, CHUNK_C=chunk)
    with T._quiet(), T._on_device_of(y):
        softmax_backward_kernel[grid](out, y, dy, y.shape[0], y.shape[1], y.stride(0), dy.stride(0), out.stride(0),
                                      **meta)
    return out


def softmax_backward(y: torch.Tensor, dy: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """dx for y = softmax(x): y * (dy - <dy, y>) per row. out may be y or dy (in place)."""
    return _backward(y, dy, out, log=False)


def log_softmax_backward(z: torch.Tensor, dy: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """dx for z = log_softmax(x): dy - exp(z) * sum(dy) per row. out may be z or dy (in place)."""
    return _backward(z, dy, out, log=True)

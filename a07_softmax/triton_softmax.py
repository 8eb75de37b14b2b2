"""Lab 3: the course's softmaxes in Triton.

  softmax              fused row softmax, the row held on chip: 1 read + 1 write
  scale_mask_softmax   softmax(x * scale + mask), causal mask from indices and/or an additive
                       mask tensor, fully-masked rows -> zeros
  softmax_online       rows too long for the chip: a tile loop carrying (m, s), then a
                       normalising pass (2 reads + 1 write), any cols
  log_softmax          (x - m) - log(s), fully-masked rows -> -inf

All take float32, float16 and bfloat16 (statistics in float32, output in the input dtype).
On a GPU they run as compiled kernels; on a machine without one, set
TRITON_INTERPRET=1 before importing triton (a07_softmax.use_interpreter() does it) and pass CPU tensors.

`python -m a07_softmax.triton_softmax` (= make triton) checks every kernel and, on a GPU, prints GB/s
beside torch.softmax measured in the same run.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

MAX_ROW_COLS = 65536  # the row kernels keep a whole row on chip; longer rows: softmax_online
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@triton.jit
def _normalise(x, LOG: tl.constexpr):
    """Softmax (or log-softmax) along axis 1 of a float32 tile whose masked entries are -inf.
    A row that is entirely -inf gives zeros (softmax) or -inf (log-softmax), never NaN; a row with
    a NaN or +inf gives NaN (as torch.softmax)."""
    m = tl.max(x, axis=1)
    m_safe = tl.where(m == -float("inf"), 0.0, m)  # the -inf guard: never form -inf - -inf
    z = x - m_safe[:, None]
    e = tl.exp(z)
    s = tl.sum(e, axis=1)
    # An empty row has s = 0: subtract 0 instead of log(0) so its entries stay -inf, and scale by
    # 0 instead of 1/0. The tests are `s == 0`, not `s > 0`: a NaN s (a NaN or +inf in the row) must
    # reach every output, never be swapped for a harmless 0.
    if LOG:
        return z - tl.where(s == 0, 0.0, tl.log(s))[:, None]
    inv = tl.where(s == 0, 0.0, 1.0 / s)
    return e * inv[:, None]


@triton.jit
def softmax_kernel(out_ptr, in_ptr, n_rows, n_cols, in_stride, out_stride,
                   BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, LOG: tl.constexpr):
    # Each program takes tiles of BLOCK_R whole rows; the loop lets a smaller (persistent) grid
    # cover any number of rows, and lets the interpreter exercise it with a few programs.
    cols = tl.arange(0, BLOCK_C)
    for r0 in tl.range(tl.program_id(0) * BLOCK_R, n_rows, tl.num_programs(0) * BLOCK_R):
        rows = r0 + tl.arange(0, BLOCK_R)
        mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
        rows64 = rows.to(tl.int64)[:, None]
        x = tl.load(in_ptr + rows64 * in_stride + cols[None, :], mask=mask, other=-float("inf"))
        y = _normalise(x.to(tl.float32), LOG)  # the one read is above, the one write below
        tl.store(out_ptr + rows64 * out_stride + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def scale_mask_softmax_kernel(out_ptr, in_ptr, mask_ptr, n_rows, n_cols, in_stride, out_stride,
                              mask_row_stride, mask_col_stride, scale, q_len,
                              CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr,
                              BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    cols = tl.arange(0, BLOCK_C)
    for r0 in tl.range(tl.program_id(0) * BLOCK_R, n_rows, tl.num_programs(0) * BLOCK_R):
        rows = r0 + tl.arange(0, BLOCK_R)
        inside = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
        rows64 = rows.to(tl.int64)[:, None]
        x = tl.load(in_ptr + rows64 * in_stride + cols[None, :], mask=inside, other=0.0)
        x = x.to(tl.float32) * scale
        if HAS_MASK:  # additive: 0 keeps a score, -inf removes it
            x += tl.load(mask_ptr + rows64 * mask_row_stride + cols[None, :] * mask_col_stride,
                         mask=inside, other=0.0).to(tl.float32)
        keep = inside
        if CAUSAL:  # generated from indices: query q = row % q_len sees keys 0..q
            keep = keep & (cols[None, :] <= (rows % q_len)[:, None])
        x = tl.where(keep, x, -float("inf"))
        y = _normalise(x, False)
        tl.store(out_ptr + rows64 * out_stride + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=inside)


@triton.jit
def softmax_online_kernel(out_ptr, in_ptr, n_cols, in_stride, out_stride, TILE: tl.constexpr):
    # One program per row. Pass 1 reads the row tile by tile and keeps a running (m, s) per lane;
    # a larger max rescales the old sum by exp(m_old - m_new) <= 1. Pass 2 reads again and writes.
    row = tl.program_id(0).to(tl.int64)
    src = in_ptr + row * in_stride
    dst = out_ptr + row * out_stride
    offs = tl.arange(0, TILE)
    m = tl.full([TILE], -float("inf"), tl.float32)
    s = tl.zeros([TILE], tl.float32)
    for start in tl.range(0, n_cols, TILE):
        x = tl.load(src + start + offs, mask=start + offs < n_cols, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        m_safe = tl.where(m_new == -float("inf"), 0.0, m_new)
        s = s * tl.exp(m - m_safe) + tl.exp(x - m_safe)
        m = m_new
    # combine() across the lanes: the row's max, then every lane's sum moved onto it
    m_row = tl.max(m, axis=0)
    m_row_safe = tl.where(m_row == -float("inf"), 0.0, m_row)
    s_row = tl.sum(s * tl.exp(m - m_row_safe), axis=0)
    inv = tl.where(s_row == 0, 0.0, 1.0 / s_row)  # a NaN sum stays NaN (see _normalise)
    for start in tl.range(0, n_cols, TILE):
        mask = start + offs < n_cols
        x = tl.load(src + start + offs, mask=mask, other=-float("inf")).to(tl.float32)
        tl.store(dst + start + offs, (tl.exp(x - m_row_safe) * inv).to(out_ptr.dtype.element_ty), mask=mask)


# ------------------------------------------------------------------------------------------------
# Launchers: argument checks first, then a grid sized from the device.
# ------------------------------------------------------------------------------------------------
def interpreting() -> bool:
    """Kernels run in the CPU interpreter (backend.use_interpreter() decides, before import)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def _quiet():
    """The interpreter evaluates both sides of tl.where in NumPy: silence its harmless 1/0 and
    log(0) warnings (an empty row's branch that is then discarded). A no-op on a GPU."""
    import contextlib

    import numpy as np

    return np.errstate(divide="ignore", invalid="ignore", over="ignore") if interpreting() else contextlib.nullcontext()


def _check(x: torch.Tensor, name: str = "x", max_cols: int | None = MAX_ROW_COLS):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in DTYPES:
        raise TypeError(f"{name} has dtype {x.dtype}; supported: float32, float16, bfloat16")
    if x.dim() != 2:
        raise ValueError(f"{name} must be 2-D (rows, cols), got shape {tuple(x.shape)}")
    if x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(f"{name} must have at least one row and one column, got shape {tuple(x.shape)}")
    if not x.is_contiguous():
        raise ValueError(f"{name} is not contiguous; pass {name}.contiguous()")
    if interpreting():
        if x.is_cuda:
            raise ValueError("TRITON_INTERPRET=1 runs kernels on the CPU: pass a CPU tensor")
    elif not x.is_cuda:
        raise ValueError(f"{name} is on the CPU but no interpreter is active; move it to the GPU, or call "
                         "a07_softmax.use_interpreter() before importing triton")
    if max_cols is not None and x.shape[1] > max_cols:
        raise ValueError(f"cols = {x.shape[1]} > {max_cols}: this kernel holds a whole row on chip; "
                         "use softmax_online for longer rows")
    return x.shape


def _output(x: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """`out`, checked against x before any launch (a tensor like x: same shape, dtype and device,
    contiguous, and either x itself, in place, or not overlapping it), or a new tensor like x."""
    if out is None:
        return torch.empty_like(x)
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
    want = f"a contiguous {str(x.dtype).replace('torch.', '')} tensor of shape {tuple(x.shape)} on {x.device}"
    if out.shape != x.shape or out.dtype != x.dtype or out.device != x.device or not out.is_contiguous():
        raise ValueError(f"out must be {want}; got {str(out.dtype).replace('torch.', '')} {tuple(out.shape)} on "
                         f"{out.device}{'' if out.is_contiguous() else ' (non-contiguous)'}")
    a, b = x.data_ptr(), out.data_ptr()
    n = x.numel() * x.element_size()
    if a != b and a < b + n and b < a + n:
        raise ValueError("out overlaps x without being it: pass out=x to work in place, or a separate tensor")
    return out


def _on_device_of(x: torch.Tensor):
    """x's device as the current one: Triton launches on the current device's current stream."""
    import contextlib

    return torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()


def _row_config(cols: int, elem_bytes: int):
    """(BLOCK_R, BLOCK_C, num_warps), tuned on the H200 (2026-11-29): short rows are packed
    several to a program so that each program moves about 4 KB (fp32) or 8 KB (16-bit)."""
    block_c = triton.next_power_of_2(cols)
    block_r = max(1, (1024 if elem_bytes == 4 else 4096) // block_c)
    num_warps = 4 if block_c <= 2048 else 8 if block_c <= 8192 else 16
    return block_r, block_c, num_warps


def _grid(n_tiles: int) -> int:
    """One program per row tile. A persistent grid (a few programs per SM, each looping over
    tiles; the kernels support it) was slower than letting the hardware schedule every tile
    (docs/performance.md, "The Triton row kernel"), so the launcher sizes the grid from the work. The interpreter gets a
    few programs only, so that each one walks several tiles and the loop is exercised on a CPU."""
    return max(1, min(n_tiles, 3)) if interpreting() else n_tiles


def _rows_launch(x, **extra):
    rows, cols = x.shape
    block_r, block_c, num_warps = _row_config(cols, x.element_size())
    grid = (_grid(triton.cdiv(rows, block_r)),)
    return grid, dict(BLOCK_R=block_r, BLOCK_C=block_c, num_warps=num_warps, **extra)


def _row_op(x: torch.Tensor, out: torch.Tensor | None, log: bool) -> torch.Tensor:
    _check(x)
    out = _output(x, out)
    grid, meta = _rows_launch(x, LOG=log)
    with _quiet(), _on_device_of(x):
        softmax_kernel[grid](out, x, x.shape[0], x.shape[1], x.stride(0), out.stride(0), **meta)
    return out


def softmax(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Row softmax, the row held on chip (cols <= 65536)."""
    return _row_op(x, out, log=False)


def log_softmax(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """(x - m) - log(s), fused: one read, one write. Fully -inf rows give -inf."""
    return _row_op(x, out, log=True)


def scale_mask_softmax(x: torch.Tensor, scale: float = 1.0, mask: torch.Tensor | None = None,
                       causal: bool = False, q_len: int | None = None,
                       out: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(x * scale + mask [+ causal]) in one pass. `mask` is additive (0 / -inf) and
    broadcastable to x; causal masking is generated from indices with query = row % q_len.
    A row with nothing left unmasked comes back as zeros."""
    import math

    rows, cols = _check(x)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise ValueError(f"scale must be a finite number, got {scale!r}")
    if q_len is None:
        q_len = rows
    if isinstance(q_len, bool) or not isinstance(q_len, int) or q_len < 1 or rows % q_len:
        raise ValueError(f"q_len must be a positive integer dividing rows ({rows}), got {q_len!r}")
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.device != x.device:
            raise ValueError("mask must be a torch.Tensor on the same device as x")
        if mask.dtype not in DTYPES:
            raise TypeError(f"mask has dtype {mask.dtype}: it is additive (0 keeps a score, -inf removes it), "
                            "so float32, float16 or bfloat16; turn a boolean mask into one with "
                            "torch.zeros(...).masked_fill(~keep, float('-inf'))")
        try:
            mask = mask.expand(rows, cols)
        except RuntimeError as e:
            raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to {(rows, cols)}") from e
        mstrides = mask.stride()
    else:
        mask, mstrides = x, (0, 0)  # never read: HAS_MASK is False
    out = _output(x, out)
    grid, meta = _rows_launch(x, CAUSAL=bool(causal), HAS_MASK=mask is not x)
    with _quiet(), _on_device_of(x):
        scale_mask_softmax_kernel[grid](out, x, mask, rows, cols, x.stride(0), out.stride(0), mstrides[0],
                                        mstrides[1], float(scale), q_len, **meta)
    return out


def softmax_online(x: torch.Tensor, out: torch.Tensor | None = None, tile: int | None = None) -> torch.Tensor:
    """Row softmax for rows of any length: two reads and one write."""
    rows, cols = _check(x, max_cols=None)
    out = _output(x, out)
    if tile is None:  # 8192-element tiles and 16 warps: the best of the sweep in docs/performance.md
        tile = min(8192, triton.next_power_of_2(cols))
    if isinstance(tile, bool) or not isinstance(tile, int) or tile < 1 or tile & (tile - 1):
        raise ValueError(f"tile must be a power of two, got {tile!r}")
    with _quiet(), _on_device_of(x):
        softmax_online_kernel[(rows,)](out, x, cols, x.stride(0), out.stride(0), TILE=tile,
                                       num_warps=4 if tile <= 1024 else 16)
    return out


# ------------------------------------------------------------------------------------------------
# python -m a07_softmax.triton_softmax
# ------------------------------------------------------------------------------------------------
def self_check(device: str, sizes) -> bool:
    """Check each kernel on fresh random rows against float64; print a table. True if all pass."""
    from . import accuracy, reference

    g = torch.Generator().manual_seed(0)
    ok_all = True
    print(f"{'kernel':<20} {'dtype':<9} {'rows':>7} {'cols':>8} {'max rel err':>12}  verdict")
    for dtype in DTYPES:
        for rows, cols in sizes:
            x = (torch.randn(rows, cols, generator=g) * 8).to(dtype)
            xd = x.to(device)
            x64 = x.double().numpy()
            cases = [("softmax", lambda: softmax(xd), reference.softmax(x64)),
                     ("log_softmax", lambda: log_softmax(xd), reference.log_softmax(x64)),
                     ("softmax_online", lambda: softmax_online(xd, tile=min(1024, triton.next_power_of_2(cols))),
                      reference.softmax(x64)),
                     ("scale_mask_softmax", lambda: scale_mask_softmax(xd, 0.5, causal=True),
                      reference.scale_mask_softmax(x64, 0.5, reference.causal_mask(rows, cols)))]
            for name, fn, ref in cases:
                if name != "softmax_online" and cols > MAX_ROW_COLS:
                    continue
                got = fn()
                e = accuracy.max_rel_err(got.cpu(), ref, log=name == "log_softmax")
                ok = e <= accuracy.tolerance(dtype)
                ok_all &= ok
                print(f"{name:<20} {str(dtype).replace('torch.', ''):<9} {rows:>7} {cols:>8} {e:>12.3g}  "
                      f"{'PASSED' if ok else 'FAILED'}")
    return ok_all


def gpu_sweep():
    """GB/s of each Triton kernel beside torch.softmax, same run (fp32, rows x cols = 2^26)."""
    from triton.testing import do_bench

    src = torch.randn(2**28, device="cuda")
    dst = torch.empty_like(src)
    copy = 2 * src.numel() * 4 / (do_bench(lambda: dst.copy_(src), warmup=50, rep=200, return_mode="median") * 1e-3) / 1e9
    del src, dst
    print(f"\ndevice-to-device copy: {copy:.0f} GB/s (bytes read + written)")
    print(f"{'cols':>8} {'torch.softmax':>14} {'triton softmax':>15} {'softmax_online':>15}   GB/s, one read + one write")
    for cols in (128, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 262144):
        rows = 2**26 // cols
        x = torch.randn(rows, cols, device="cuda")
        nbytes = 2 * x.numel() * 4
        res = []
        for fn in (lambda: torch.softmax(x, -1), (lambda: softmax(x)) if cols <= MAX_ROW_COLS else None,
                   lambda: softmax_online(x)):
            res.append(float("nan") if fn is None else nbytes / (do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e-3) / 1e9)
        print(f"{cols:>8} {res[0]:>14.0f} {res[1]:>15.0f} {res[2]:>15.0f}")
        del x


def main() -> int:
    from .backend import detect

    gpu = detect().triton_gpu
    if not gpu and not interpreting():
        print("No GPU: re-running in the Triton interpreter (TRITON_INTERPRET=1) on small CPU tensors.")
        import subprocess
        import sys

        env = dict(os.environ, TRITON_INTERPRET="1")
        return subprocess.call([sys.executable, "-m", "a07_softmax.triton_softmax"], env=env)
    if gpu:
        print(f"Triton {triton.__version__} on {torch.cuda.get_device_name()}")
        sizes = [(1, 1), (3, 3), (65537, 31), (257, 1023), (64, 1025), (16, 8192), (4, 100003)]
        ok = self_check("cuda", sizes)
        gpu_sweep()
    else:
        print(f"Triton {triton.__version__} interpreter on the CPU: correctness only. No timings are taken "
              "here: the interpreter runs the kernel as NumPy code, so its speed says nothing about a GPU.")
        sizes = [(1, 1), (5, 3), (7, 31), (3, 33), (2, 1023), (2, 1025), (1, 5000)]
        ok = self_check("cpu", sizes)
    print("\nall kernels PASSED" if ok else "\nsome kernels FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

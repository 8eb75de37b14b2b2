"""Exercise 05: fused scale -> causal mask -> softmax in Triton.

One program per row. Load the row (masked loads past n_cols), multiply by `scale`, then set the lanes
past n_cols and, when CAUSAL, the causal positions (col > row % q_len) to -inf: after the scale, which
may be 0 or negative (-inf * scale is then NaN or +inf). Then a max-subtracted softmax with float32
statistics, and store in the output's dtype. A row whose every score is masked must come out
as zeros, not NaN; a row that reads a NaN or a +inf (one its mask does not hide) comes out NaN
everywhere (inf - inf has no value).
`make check EX=05` runs it on a GPU or, without one, in the Triton interpreter.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def scale_mask_softmax_kernel(out_ptr, in_ptr, n_cols, stride, scale, q_len,
                              CAUSAL: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    ### BEGIN SOLUTION
    x = tl.load(in_ptr + row * stride + cols, mask=inside, other=0.0).to(tl.float32) * scale
    keep = inside
    if CAUSAL:
        keep = keep & (cols <= row % q_len)
    x = tl.where(keep, x, -float("inf"))
    m = tl.max(x, axis=0)                # on a GPU it drops NaN: a row seeing only NaN gets -inf
    e = tl.exp(x - tl.where(m == -float("inf"), 0.0, m))
    s = tl.sum(e, axis=0)
    y = tl.where(s == 0.0, 0.0, e / s)   # fully masked: every exp is 0; a NaN sum is not 0 and stays
    tl.store(out_ptr + row * stride + cols, y.to(out_ptr.dtype.element_ty), mask=inside)
    ### END SOLUTION


def scale_mask_softmax(x: torch.Tensor, scale: float, causal: bool = True, q_len: int | None = None):
    rows, cols = x.shape
    out = torch.empty_like(x)
    scale_mask_softmax_kernel[(rows,)](out, x, cols, x.stride(0), scale, q_len or rows,
                                       CAUSAL=causal, BLOCK=triton.next_power_of_2(cols))
    return out

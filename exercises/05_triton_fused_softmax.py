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
    raise NotImplementedError("exercise 05: your code here")


def scale_mask_softmax(x: torch.Tensor, scale: float, causal: bool = True, q_len: int | None = None):
    rows, cols = x.shape
    out = torch.empty_like(x)
    scale_mask_softmax_kernel[(rows,)](out, x, cols, x.stride(0), scale, q_len or rows,
                                       CAUSAL=causal, BLOCK=triton.next_power_of_2(cols))
    return out

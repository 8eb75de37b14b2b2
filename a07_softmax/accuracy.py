"""How close an output is to its float64 reference: the one error measure and the one tolerance
table of the course, used by the labs, the benchmark, the exercise checker, the tests and the
notebooks (and mirrored by lab::compare in common/lab_host.h for the standalone programs).

    err_i = |got_i - ref_i| / max(|ref_i|, floor)

  * probabilities (softmax outputs): floor = the larger of 1e-6 x the largest |ref| of the
    tensor and the smallest normal number of the output's dtype, so a probability far below the
    largest one, or below what the dtype holds with full precision (fp16 subnormals start at
    6.1e-5), is judged by its absolute error at that scale;
  * log-probabilities (log=True): floor = 1, because a log-probability near 0 (p near 1) has no
    meaningful relative size; away from 0 the measure is relative as for probabilities.

Infinities of the same sign match exactly (a fully-masked row's -inf in log_softmax), and so does
NaN where the reference has NaN (a NaN input propagates); a NaN or an infinity in `got` where the
reference is finite, or a finite value where the reference is not, is an infinite error. The
result is max_i err_i, which is what every `max_rel_err` in the course (bench.json included) holds.
Tolerances are per output dtype and live in common/course_constants.h.
"""
from __future__ import annotations

import math

import numpy as np

from .constants import RELATIVE_FLOOR, TOLERANCE

ABSOLUTE_FLOOR = 1e-30  # never divide by zero (an all-zero reference)


def dtype_name(dtype) -> str:
    """'float32', 'bfloat16', ... for a NumPy or torch dtype, or a string."""
    name = str(dtype).replace("torch.", "")
    return name if name in TOLERANCE else str(np.dtype(dtype))


def tolerance(dtype) -> float:
    """The largest max_rel_err an output of this dtype may have against float64."""
    name = dtype_name(dtype)
    if name not in TOLERANCE:
        raise KeyError(f"no tolerance for dtype {name}; the course checks {', '.join(TOLERANCE)}")
    return TOLERANCE[name]


def _is_torch(a) -> bool:
    return type(a).__module__.split(".")[0] == "torch"


def smallest_normal(dtype) -> float:
    """The smallest positive normal number of a floating dtype (NumPy or torch); 0 for others."""
    name = dtype_name(dtype)
    if name == "bfloat16":
        return 2.0 ** -126
    try:
        return float(np.finfo(np.dtype(name)).tiny)
    except (TypeError, ValueError):
        return 0.0


def rel_errors(got, ref, *, log: bool = False, dtype=None):
    """Elementwise errors (same shape as ref), as NumPy float64 or, for torch inputs, a float64
    tensor on the inputs' device (the benchmark measures 1 GiB outputs without copying them).
    `dtype`: the dtype the output was computed in, where `got` has been converted since
    (default: got's own dtype)."""
    out_dtype = dtype if dtype is not None else getattr(got, "dtype", np.float64)
    if _is_torch(got) or _is_torch(ref):
        import torch as xp

        g = got.double() if _is_torch(got) else xp.as_tensor(np.asarray(got, np.float64), device=ref.device)
        r = ref.double() if _is_torch(ref) else xp.as_tensor(np.asarray(ref, np.float64), device=g.device)
        absolute, where, isinf, isfinite = xp.abs, xp.where, xp.isinf, xp.isfinite
        amax = (lambda a: float(a.max()) if a.numel() else 0.0)
        full = (lambda like, v: xp.full_like(like, v))
    else:
        g = np.asarray(got, dtype=np.float64)
        r = np.asarray(ref, dtype=np.float64)
        absolute, where, isinf, isfinite = np.abs, np.where, np.isinf, np.isfinite
        amax = (lambda a: float(a.max()) if a.size else 0.0)
        full = (lambda like, v: np.full_like(like, v))
    if tuple(g.shape) != tuple(r.shape):
        raise ValueError(f"shape mismatch: got {tuple(g.shape)}, reference {tuple(r.shape)}")
    isnan = (lambda a: a != a)
    same_inf = (isinf(g) & isinf(r) & ((g > 0) == (r > 0))) | (isnan(g) & isnan(r))
    finite_r = isfinite(r)
    floor = 1.0 if log else RELATIVE_FLOOR * amax(where(finite_r, absolute(r), full(r, 0.0)))
    floor = max(floor, ABSOLUTE_FLOOR, 0.0 if log else smallest_normal(out_dtype))
    with np.errstate(invalid="ignore", over="ignore"):
        r0 = where(finite_r, r, full(r, 0.0))
        d = absolute(g - r0)
        scale = where(absolute(r0) > floor, absolute(r0), full(r0, floor))
        err = d / scale
    bad = ~same_inf & (~isfinite(g) | ~finite_r)
    err = where(bad, full(err, math.inf), err)
    return where(same_inf, full(err, 0.0), err)


def max_rel_err(got, ref, *, log: bool = False, dtype=None) -> float:
    """max_i err_i (module docstring); 0.0 for empty arrays."""
    e = rel_errors(got, ref, log=log, dtype=dtype)
    n = e.numel() if _is_torch(e) else e.size
    return float(e.max()) if n else 0.0


def first_mismatch(got, ref, tol: float, *, log: bool = False, dtype=None):
    """(row, col, got, expected, err) of the first element whose error exceeds tol, or None.
    1-D inputs are treated as one row."""
    dtype = dtype if dtype is not None else getattr(got, "dtype", np.float64)
    g = np.atleast_2d(np.asarray(got, dtype=np.float64))
    r = np.atleast_2d(np.asarray(ref, dtype=np.float64))
    if g.shape != r.shape:
        raise ValueError(f"shape mismatch: got {g.shape}, reference {r.shape}")
    e = rel_errors(g, r, log=log, dtype=dtype)
    idx = np.argwhere(~(e <= tol))
    if idx.size == 0:
        return None
    i, j = (int(v) for v in idx[0])
    return (i, j, float(g[i, j]), float(r[i, j]), float(e[i, j]))


def passes(got, ref, dtype=None, *, log: bool = False) -> bool:
    """max_rel_err within the tolerance of `dtype` (default: got's dtype)."""
    dtype = dtype if dtype is not None else got.dtype
    return max_rel_err(got, ref, log=log, dtype=dtype) <= tolerance(dtype)

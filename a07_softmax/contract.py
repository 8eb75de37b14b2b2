"""What every softmax entry point of the course returns, for every kind of row a model can feed it
(docs/contract.md is the table; tests/test_contract.py holds each entry point to it, on the CPU
where it runs and on a GPU with `pytest -m gpu`).

`rows(dtype, cols, rng)` builds one input matrix whose rows are the families below, each rounded to
`dtype`; `expected(x, log)` is what a correct kernel returns, computed in float64 from those very
values and rounded to the output dtype; `violations()` compares an output with it and names the
family, the element and what went wrong, so a failure reads as a broken promise, not as a number.
"""
from __future__ import annotations

import numpy as np

from . import accuracy

DTYPES = ("float32", "float16", "bfloat16")
# The families, in row order. (name, what the contract says about it)
FAMILIES = (
    ("ordinary", "softmax of the values"),
    ("fully masked (all -inf)", "zeros (log_softmax: -inf), never NaN"),
    ("single valid element", "1 there, 0 elsewhere (log_softmax: 0 and -inf)"),
    ("-inf mask", "masked elements 0 (log: -inf); the rest a softmax of the unmasked values"),
    ("lowest-finite mask", "masked elements underflow to 0 like any very small score"),
    ("padding row of the lowest finite value", "uniform: 1/cols everywhere (no overflow, no NaN)"),
    ("largest finite magnitudes", "finite: the largest values share the mass, -max gives 0"),
    ("all the largest finite value", "uniform: 1/cols"),
    ("whole finite range", "finite, correct at the dtype's tolerance"),
    ("subnormal results", "correct; results below the dtype's smallest normal may flush to 0"),
    ("+inf", "NaN row, as torch.softmax: inf - inf is undefined"),
    ("NaN", "NaN row: a NaN is never hidden"),
    ("NaN among -inf", "NaN row, not the zeros of a masked row"),
)


def finfo(dtype: str):
    """(largest finite, smallest normal, smallest subnormal) of dtype."""
    if dtype == "bfloat16":
        return 3.3895313892515355e38, 1.1754943508222875e-38, 9.183549615799121e-41
    f = np.finfo(np.dtype(dtype))
    return float(f.max), float(f.smallest_normal), float(f.smallest_subnormal)


def round_to(x, dtype: str) -> np.ndarray:
    """x (float64 values) rounded to dtype, returned as float64: the values a kernel of dtype sees.
    bfloat16, which NumPy lacks, goes through the CPU target's conversion (round to nearest even)."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore"):
        if dtype != "bfloat16":
            return x.astype(dtype).astype(np.float64)
        from .cpu_target import as_stored, from_stored

        return from_stored(as_stored(x.astype(np.float32), "bfloat16"), "bfloat16").astype(np.float64)


def rows(dtype: str, cols: int, rng) -> np.ndarray:
    """One row per family (FAMILIES' order), float64 values representable in dtype."""
    big, normal, tiny = finfo(dtype)
    ninf, n = -np.inf, len(FAMILIES)
    x = rng.normal(0, 8, size=(n, cols))
    half = rng.random(cols) < 0.5
    half[rng.integers(cols)] = False                    # at least one element stays unmasked
    x[1] = ninf
    x[2] = ninf
    x[2, rng.integers(cols)] = rng.normal(0, 8)
    x[3, half] = ninf
    x[4, half] = -big
    x[5] = -big
    x[6] = rng.choice([big, -big, 0.0, 1.0], size=cols)
    x[7] = big
    # log-uniform magnitudes from the smallest subnormal to the largest finite, random signs
    lo, hi = np.log10(tiny), np.log10(big)
    x[8] = rng.choice([-1.0, 1.0], size=cols) * 10.0 ** rng.uniform(lo, hi, size=cols)
    # exponents that make exp(x - max) land among the subnormals: fp32/bf16 below 1.2e-38 is
    # x - max < -87.3, fp16's below 6.1e-5 is x - max < -9.7
    deep = (9.0, 18.0) if dtype == "float16" else (85.0, 105.0)
    x[9] = -rng.uniform(*deep, size=cols)
    x[9, rng.integers(cols)] = 0.0
    x[10, rng.integers(cols)] = np.inf
    x[11, rng.integers(cols)] = np.nan
    x[12] = ninf
    x[12, rng.integers(cols)] = np.nan
    return round_to(x, dtype)


def expected(x, log: bool = False, dtype: str = "float32") -> np.ndarray:
    """The contract's answer for rows x (float64), rounded to the output dtype."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    for i, r in enumerate(x):
        if np.isnan(r).any() or np.isposinf(r).any():
            out[i] = np.nan
        elif np.isneginf(r).all():
            out[i] = -np.inf if log else 0.0
        else:
            z = r - r.max()
            s = np.exp(z).sum()
            out[i] = z - np.log(s) if log else np.exp(z) / s
    return round_to(out, dtype)


def violations(got, x, *, log: bool = False, dtype: str = "float32", names=None) -> list:
    """Where `got` (an output for rows(dtype, ...)) breaks the contract: one line per broken row,
    naming the family, the first offending column, the value returned and the value promised.
    Empty when every row keeps its promise."""
    if type(got).__module__.startswith("torch"):
        got = got.detach().float().cpu().numpy()
    got = np.asarray(got, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    ref = expected(x, log, dtype)
    tol = accuracy.tolerance(dtype)
    names = names or [name for name, _ in FAMILIES]
    promise = dict(FAMILIES)
    out = []
    if got.shape != ref.shape:
        return [f"output shape {got.shape}, expected {ref.shape}"]
    for i in range(ref.shape[0]):
        bad = accuracy.first_mismatch(got[i:i + 1], ref[i:i + 1], tol, log=log, dtype=dtype)
        if bad is not None:
            col = int(np.flatnonzero(np.ravel(~_close(got[i], ref[i], tol, log, dtype)))[0])
            name = names[i % len(names)]
            out.append(f"row {i} ({name}: {promise.get(name, '')}): column {col} is {float(got[i, col])!r}, "
                       f"expected {float(ref[i, col])!r}")
    return out


def _close(g, r, tol, log, dtype):
    e = accuracy.rel_errors(g[None, :], r[None, :], log=log, dtype=dtype)[0]
    return e <= tol

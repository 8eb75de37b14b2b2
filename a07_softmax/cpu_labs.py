"""Lab 1 and Lab 2 on the CPU target (common/cpu_target.h): the very kernels of cuda/softmax.cu and
cuda/fused_softmax.cu, compiled by the system C++ compiler and run against float64 at small sizes.
Correctness only: what a machine without a GPU can say about the lab kernels (a07 run prints it;
tests/test_native.py holds every kernel to it in CI)."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from . import accuracy, cpu_target, reference
from .native import BLOCK, LAB1_KERNELS, ROOT

ROW_KINDS = [("in", "float32"), ("out", None), ("i32", None), ("i32", None)]
MASK_KINDS = [("in", "float32"), ("out", None), ("i32", None), ("i32", None), ("f32", None), ("i32", None),
              ("i32", None), ("i32", None), ("in", "int32"), ("i32", None)]


_BUILDS: dict = {}


def _built(source: str, kernel: str, kinds, warp: int, defines=()):
    """The CPU-target executable of `kernel`, built once per process (kept in a temporary folder)."""
    key = (source, kernel, warp, tuple(defines))
    if key not in _BUILDS:
        work = cpu_target.scratch()
        _BUILDS[key] = (cpu_target.build(ROOT / source, kernel, kinds, work, warp=warp, defines=defines), work)
    return _BUILDS[key]


def softmax_on_cpu(x, kernel: str = "softmax_online_1pass", warp: int = 32):
    """One Lab 1 kernel on the CPU target: y for float32 rows x (ITEMS raised to hold the row)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    rows, cols = x.shape
    defines = [f"ITEMS={max(4, -(-cols // BLOCK))}"] if kernel == "softmax_online_1pass" else []
    exe, work = _built("cuda/softmax.cu", kernel, ROW_KINDS, warp, defines)
    with tempfile.TemporaryDirectory(dir=work) as run_dir:
        return cpu_target.run(exe, min(rows, 3), BLOCK, ROW_KINDS, [x, (rows, cols), rows, cols], Path(run_dir))[1]


def scale_mask_softmax_on_cpu(x, scale: float = 1.0, *, causal: bool = False, window: int = 0, valid_len=None,
                              q_len: int | None = None, fused: bool = True, warp: int = 32):
    """Lab 2 on the CPU target: the fused kernel, or the three launches of the unfused path."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    rows, cols = x.shape
    q_len = rows if q_len is None else q_len
    lens = np.full(rows, cols, np.int32) if valid_len is None else np.asarray(valid_len, np.int32)
    mask = [q_len, int(causal), window, lens, int(valid_len is not None)]
    src = "cuda/fused_softmax.cu"
    if fused:
        exe, work = _built(src, "scale_mask_softmax_fused", MASK_KINDS, warp, [f"ITEMS={max(4, -(-cols // BLOCK))}"])
        with tempfile.TemporaryDirectory(dir=work) as d:
            return cpu_target.run(exe, min(rows, 3), BLOCK, MASK_KINDS, [x, (rows, cols), rows, cols, scale, *mask],
                                  Path(d))[1]
    scale_kinds = [("in", "float32"), ("out", None), ("i32", None), ("f32", None)]
    mask_kinds = [("in", "float32"), ("out", None), ("i32", None), ("i32", None), ("i32", None), ("i32", None),
                  ("i32", None), ("in", "int32"), ("i32", None)]
    exe1, work = _built(src, "scale_kernel", scale_kinds, warp)
    exe2, _ = _built(src, "add_mask_kernel", mask_kinds, warp)
    with tempfile.TemporaryDirectory(dir=work) as d:
        t1 = cpu_target.run(exe1, 4, BLOCK, scale_kinds, [x, (rows, cols), rows * cols, scale], Path(d))[1]
        t2 = cpu_target.run(exe2, 4, BLOCK, mask_kinds, [t1, (rows, cols), rows, cols, *mask], Path(d))[1]
    return softmax_on_cpu(t2, "softmax_online_2pass", warp)


def lab1_on_cpu(rows: int = 7, cols: int = 1000, warp: int = 32, seed: int = 0):
    """[(kernel, max rel err, passed, y)] for the Lab 1 kernels on a row set whose row 0 holds
    100.0, row 1 is fully -inf, and the rest are uniform in [-4, 4)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-4, 4, size=(rows, cols)).astype(np.float32)
    x[0, cols // 2] = 100.0
    x[1] = -np.inf
    ref = reference.softmax(x)
    out = []
    for k in LAB1_KERNELS:
        y = softmax_on_cpu(x, k, warp)
        err = accuracy.max_rel_err(y, ref)
        out.append((k, err, err <= accuracy.tolerance("float32"), y))
    return out


def lab2_on_cpu(heads: int = 2, seq: int = 67, warp: int = 32, seed: int = 0):
    """[(path, max rel err, passed, y)] for Lab 2's fused kernel and the three launches of the
    unfused path (scale, mask, Lab 1's 2-pass softmax) on causal + padded scores with a
    fully-masked row."""
    rng = np.random.default_rng(seed)
    rows, cols, scale = heads * seq, seq, 0.125
    x = rng.normal(0, 8, size=(rows, cols)).astype(np.float32)
    lens = rng.integers(1, cols + 1, size=rows).astype(np.int32)
    lens[1] = 0
    mask = reference.causal_mask(seq, cols)[np.arange(rows) % seq] + reference.padding_mask(lens, cols)
    ref = reference.scale_mask_softmax(x, scale, mask)
    results = []
    for fused in (True, False):
        y = scale_mask_softmax_on_cpu(x, scale, causal=True, valid_len=lens, q_len=seq, fused=fused, warp=warp)
        err = accuracy.max_rel_err(y, ref)
        results.append((f"scale_mask_softmax_{'fused' if fused else 'unfused'}", err,
                        err <= accuracy.tolerance("float32") and not y[1].any(), y))
    return results


def run(file=None) -> bool:
    """Print both labs' correctness on the CPU target; True when every kernel did what it should
    (the naive kernel is expected to fail on row 0's 100.0)."""
    import sys

    file = file or sys.stdout
    if cpu_target.compiler() is None:
        print("no C++ compiler (g++ or clang++): the CPU target cannot build the lab kernels", file=file)
        return False
    ok = True
    print("Lab 1 on the CPU target (7 x 1000 fp32, row 0 holds 100.0, row 1 all -inf; correctness only)", file=file)
    for k, err, passed, _ in lab1_on_cpu():
        expected = k != "softmax_naive_unsafe"
        ok &= passed == expected
        print(f"  {k:<28} max rel err {err:10.3g}  {'PASSED' if passed else 'FAILED'}"
              f"{'' if passed == expected else '  (unexpected)'}", file=file)
    print("Lab 2 on the CPU target (2 x 67 x 67 scores, causal + padding, row 1 fully masked)", file=file)
    for name, err, passed, _ in lab2_on_cpu():
        ok &= passed
        print(f"  {name:<28} max rel err {err:10.3g}  {'PASSED' if passed else 'FAILED'}", file=file)
    return ok

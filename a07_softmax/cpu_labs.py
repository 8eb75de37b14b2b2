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


def lab1_on_cpu(rows: int = 7, cols: int = 1000, warp: int = 32, seed: int = 0, work=None):
    """[(kernel, max rel err, passed)] for the Lab 1 kernels on a row set whose row 0 holds 100.0,
    row 1 is fully -inf, and the rest are uniform in [-4, 4)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-4, 4, size=(rows, cols)).astype(np.float32)
    x[0, cols // 2] = 100.0
    x[1] = -np.inf
    ref = reference.softmax(x)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(work or tmp)
        for k in LAB1_KERNELS:
            defines = [f"ITEMS={max(4, -(-cols // BLOCK))}"]
            exe = cpu_target.build(ROOT / "cuda" / "softmax.cu", k, ROW_KINDS, work, warp=warp, defines=defines)
            y = cpu_target.run(exe, min(rows, 3), BLOCK, ROW_KINDS, [x, (rows, cols), rows, cols], work)[1]
            err = accuracy.max_rel_err(y, ref)
            out.append((k, err, err <= accuracy.tolerance("float32"), y))
    return out


def lab2_on_cpu(heads: int = 2, seq: int = 67, warp: int = 32, seed: int = 0, work=None):
    """[(path, max rel err, passed)] for Lab 2's fused kernel and the three launches of the unfused
    path (scale, mask, Lab 1's 2-pass softmax) on causal + padded scores with a fully-masked row."""
    rng = np.random.default_rng(seed)
    rows, cols, scale = heads * seq, seq, 0.125
    x = rng.normal(0, 8, size=(rows, cols)).astype(np.float32)
    lens = rng.integers(1, cols + 1, size=rows).astype(np.int32)
    lens[1] = 0
    mask = reference.causal_mask(seq, cols)[np.arange(rows) % seq] + reference.padding_mask(lens, cols)
    ref = reference.scale_mask_softmax(x, scale, mask)
    src = ROOT / "cuda" / "fused_softmax.cu"
    items = [f"ITEMS={max(4, -(-cols // BLOCK))}"]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(work or tmp)
        fused = cpu_target.build(src, "scale_mask_softmax_fused", MASK_KINDS, work, warp=warp, defines=items)
        args = [x, (rows, cols), rows, cols, scale, seq, 1, 0, lens, 1]
        y = cpu_target.run(fused, min(rows, 3), BLOCK, MASK_KINDS, args, work)[1]
        err = accuracy.max_rel_err(y, ref)
        results.append(("scale_mask_softmax_fused", err, err <= accuracy.tolerance("float32") and not y[1].any(), y))
        n = rows * cols
        scale_k = cpu_target.build(src, "scale_kernel", [("in", "float32"), ("out", None), ("i32", None), ("f32", None)],
                                   work, warp=warp)
        t1 = cpu_target.run(scale_k, 4, BLOCK, [("in", "float32"), ("out", None), ("i32", None), ("f32", None)],
                            [x, (rows, cols), n, scale], work)[1]
        mask_kinds = [("in", "float32"), ("out", None), ("i32", None), ("i32", None), ("i32", None), ("i32", None),
                      ("i32", None), ("in", "int32"), ("i32", None)]
        mask_k = cpu_target.build(src, "add_mask_kernel", mask_kinds, work, warp=warp)
        t2 = cpu_target.run(mask_k, 4, BLOCK, mask_kinds, [t1, (rows, cols), rows, cols, seq, 1, 0, lens, 1], work)[1]
        two = cpu_target.build(ROOT / "cuda" / "softmax.cu", "softmax_online_2pass", ROW_KINDS, work, warp=warp)
        y2 = cpu_target.run(two, min(rows, 3), BLOCK, ROW_KINDS, [t2, (rows, cols), rows, cols], work)[1]
        err = accuracy.max_rel_err(y2, ref)
        results.append(("scale_mask_softmax_unfused", err, err <= accuracy.tolerance("float32") and not y2[1].any(), y2))
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

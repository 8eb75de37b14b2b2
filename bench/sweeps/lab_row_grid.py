"""Repeat the measurement behind A07_ROW_GRID_WAVES (common/course_constants.h): how many
device-fulls of blocks a row-loop grid should hold, for Lab 1's kernels at the lab's default shape
(262144 x 1024 fp32, 1 GiB), against one block per row. Timed like the benchmark (interleaved
rounds, medians of CUDA events), each output checked against float64 first.

  python bench/sweeps/lab_row_grid.py [--kernel softmax_online_1pass] [--out FILE]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", default="softmax_online_1pass")
    ap.add_argument("--rows", type=int, default=262144)
    ap.add_argument("--cols", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    from a07_softmax import backend, provenance

    if not backend.detect().native:
        print("lab_row_grid: needs a GPU with CuPy")
        return 1
    import cupy
    import numpy as np
    import torch

    from a07_softmax import accuracy, bench, constants, native

    b = bench.Bench(quick=False)
    x = torch.randn(args.rows, args.cols, device="cuda") * 4
    out = torch.empty_like(x)
    ref = torch.softmax(x.double(), -1)
    items = native.items_for(args.cols) if args.kernel in native.ROW_IN_REGISTERS else native.DEFAULT_ITEMS
    fn = native.load("softmax", items).get_function(args.kernel)
    sms = cupy.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
    full = sms * constants.THREADS_PER_SM // native.BLOCK
    grids = {f"{w} device-full{'s' if w > 1 else ''} ({w * full} blocks)": min(args.rows, w * full) for w in (1, 2, 4, 8, 16)}
    grids[f"one block per row ({args.rows} blocks)"] = args.rows
    xc, oc = cupy.asarray(x), cupy.asarray(out)
    launches = {name: (lambda g=g: fn((g,), (native.BLOCK,), (xc, oc, np.int32(args.rows), np.int32(args.cols))))
                for name, g in grids.items()}
    lines = [f"{args.kernel}, {args.rows} x {args.cols} fp32, ITEMS {items}; the committed choice: "
             f"{constants.ROW_GRID_WAVES} device-fulls"]
    errs = {name: b.check(fn_, out, ref) for name, fn_ in launches.items()}
    times = bench.interleaved(launches, args.rounds, b.time)
    nbytes = 2 * x.numel() * 4
    for name, t in times.items():
        ms = float(np.median(t))
        ok = errs[name] <= accuracy.tolerance("float32")
        lines.append(f"  {name:<34} {ms:8.4f} ms  {nbytes / (ms * 1e-3) / 1e9:7.0f} GB/s  "
                     f"err {errs[name]:.2g}{'' if ok else ' FAILED'}")
    print("\n".join(lines))
    if args.out:
        Path(args.out).write_text(provenance.report(f"bench/sweeps/lab_row_grid.py {' '.join(sys.argv[1:])}", lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

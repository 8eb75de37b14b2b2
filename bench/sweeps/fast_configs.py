"""Repeat the measurements behind the fast softmax's strategy table (docs/performance.md).

Each configuration is a set of fast.plan() overrides and/or -D defines of the sources; every one
is checked once against float64 (the course's accuracy measure), then all of them and a
device-to-device copy of the same bytes are timed in interleaved, rotated rounds (the
benchmark's method: 2^28 elements, warm-up, medians of CUDA events). A07 must be importable
(make venv, or PYTHONPATH=<checkout>).

  python bench/sweeps/fast_configs.py --claim l2-hint           one of the named claims
  python bench/sweeps/fast_configs.py --all --out sweeps.txt    every claim, with provenance
  python bench/sweeps/fast_configs.py --dtype float32 --cols 8192 \\
      --config "strategy=block vecs=2 threads=1024" --config "strategy=block vecs=4 threads=512"
  python bench/sweeps/fast_configs.py --op scale_mask_causal --dtype bfloat16 --cols 2048 \\
      --config "strategy=block vecs=4" --config="-DA07_L2_HINT=0"
(a config that starts with -D is passed as --config=..., or argparse reads it as an option)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

# name -> (what it settles, [(dtype, [cols...], [config, ...])]); "" is the committed table's choice
CLAIMS = {
    "l2-hint": ("the evict_last hint on the loads, against the same predicated load without it",
                [("float32", [256, 4096, 16384, 65536, 262144], ["", "-DA07_L2_HINT=0"]),
                 ("bfloat16", [1024, 16384, 65536], ["", "-DA07_L2_HINT=0"])]),
    "warp-or-block": ("short rows: a group of lanes per row (no barrier) or a block per row",
                      [("float32", [128, 256], ["", "strategy=block"]),
                       ("bfloat16", [512, 1024], ["", "strategy=block"])]),
    "fp32-block-tiers": ("fp32 rows of 4097-32768: vectors a thread against threads a block",
                         [("float32", [8192], ["", "strategy=block vecs=4 threads=512"]),
                          ("float32", [16384], ["", "strategy=block vecs=4 threads=1024"]),
                          ("float32", [32768], ["", "strategy=cluster cluster=2 vecs=8 threads=512"])]),
    "fp32-cluster-tiers": ("fp32 rows past 32768: blocks per cluster and threads per block",
                           [("float32", [65536], ["", "strategy=cluster cluster=4 vecs=8 threads=512"]),
                            ("float32", [131072], ["", "strategy=cluster cluster=16 vecs=8 threads=256"]),
                            ("float32", [262144], ["", "clusters=8", "strategy=2pass"])]),
    "bf16-cluster-tiers": ("16-bit rows past 16384: small blocks, several per SM",
                           [("bfloat16", [32768], ["", "strategy=cluster cluster=2 vecs=8 threads=256 min_blocks=3"]),
                            ("bfloat16", [131072], ["", "strategy=cluster cluster=16 vecs=8 threads=128 min_blocks=7"]),
                            ("bfloat16", [262144], ["", "strategy=cluster cluster=8 vecs=16 threads=256 min_blocks=2"])]),
    "exp-form": ("exp(x - m) with the subtraction first (no overflow at the dtype's largest values) against the "
                 "one-FFMA form 2^(x log2 e - m log2 e) it replaced",
                 [("float32", [1024, 16384, 262144], ["", "-DA07_EXP_FFMA=1"]),
                  ("bfloat16", [1024, 4096, 16384], ["", "-DA07_EXP_FFMA=1"])]),
    "block-occupancy": ("16-bit scale-mask rows in blocks of two vectors a thread: the compiler's registers "
                        "against 2048 threads an SM (32 registers, with a small spill)",
                        [("bfloat16", [2048, 4096, 8192], ["", "-DA07_BLOCK_MIN_THREADS=2048"], "scale_mask"),
                         ("bfloat16", [4096], ["", "-DA07_BLOCK_MIN_THREADS=2048"])]),
    "misaligned-cluster-fit": ("rows off a 16-byte boundary (odd lengths) in clusters, the softmax and the cross-entropy "
                               "loss + gradient: the table's fit (5 vectors a thread, blocks of warps that divide the "
                               "40 an SM holds at 48 registers, at least 4 warps, the best-filled cluster) against the "
                               "tiers it replaced (8 vectors a thread, a power-of-two block, one block an SM promised); "
                               "at 32767 bf16 columns also the fit without the 4-warp floor (16 blocks of 2 warps)",
                               [("bfloat16", [32767], ["", "strategy=cluster cluster=8 vecs=8 threads=128 min_blocks=1",
                                                       "strategy=cluster cluster=16 vecs=5 threads=64 min_blocks=20"]),
                                ("bfloat16", [50257], ["", "strategy=cluster cluster=8 vecs=8 threads=128 min_blocks=1"]),
                                ("float32", [50257], ["", "strategy=cluster cluster=8 vecs=8 threads=256 min_blocks=1"]),
                                ("bfloat16", [50257], ["", "strategy=cluster cluster=8 vecs=8 threads=128 min_blocks=1"],
                                 "cross_entropy"),
                                ("float32", [50257], ["", "strategy=cluster cluster=8 vecs=8 threads=256 min_blocks=1"],
                                 "cross_entropy")]),
    "causal-block-tiers": ("causal scale-mask rows in blocks (square scores, each row read up to its diagonal): the "
                           "table's fewer threads with more vectors each, against the softmax's block tiers",
                           [("float32", [512, 1024, 4096, 8192], ["", "strategy=block vecs=2"], "scale_mask_causal"),
                            ("bfloat16", [2048, 4096], ["", "strategy=block vecs=2 raw=0", "strategy=block vecs=4 raw=0"],
                             "scale_mask_causal")]),
    "causal-raw-rows": ("causal 16-bit rows (the span kernels): 4 vectors a lane for short rows against the softmax's "
                        "2; raw bits (8 vectors in 32 registers, 1024 threads an SM) against floats, by row length",
                        [("bfloat16", [512], ["", "strategy=warp vecs=2 group=32"], "scale_mask_causal"),
                         ("bfloat16", [2048, 4096], ["", "raw=1"], "scale_mask_causal"),
                         ("bfloat16", [8192], ["", "raw=0"], "scale_mask_causal"),
                         ("bfloat16", [16384], ["", "raw=0", "raw=0 strategy=block vecs=4 threads=512"], "scale_mask_causal")]),
    "skip-hidden": ("causal rows: the vectors a mask hides skip their exps (16-bit aligned rows), against computing "
                    "them (exp(-inf) = 0) as before",
                    [("bfloat16", [1024, 2048, 4096], ["", "-DA07_SKIP_HIDDEN=0"], "scale_mask_causal")]),
    "loss-tiers": ("the cross-entropy loss alone (no gradient: nothing written but a float a row) over vocabulary-sized "
                   "rows: streamed once through the two-pass kernel's first pass against the cluster kernels that hold "
                   "the row; % of copy counts one traversal (the rate of the read against the copy's)",
                   [("float32", [32768], ["", "strategy=cluster cluster=2 vecs=8 threads=512",
                                          "strategy=2pass vecs=4 threads=512"], "cross_entropy_loss"),
                    ("float32", [50257], ["", "strategy=cluster cluster=8 vecs=8 threads=256", "strategy=2pass vecs=4 threads=512"],
                     "cross_entropy_loss"),
                    ("float32", [131072], ["", "strategy=cluster cluster=8 vecs=8 threads=512 min_blocks=2",
                                           "strategy=2pass vecs=8 threads=256"], "cross_entropy_loss"),
                    ("float32", [262144], ["", "strategy=cluster cluster=16 vecs=8 threads=512",
                                           "strategy=2pass vecs=8 threads=256"], "cross_entropy_loss"),
                    ("bfloat16", [32768], ["", "strategy=cluster cluster=4 vecs=8 threads=128 min_blocks=6",
                                           "strategy=2pass vecs=4 threads=256"], "cross_entropy_loss"),
                    ("bfloat16", [50257], ["", "strategy=cluster cluster=8 vecs=8 threads=128",
                                           "strategy=2pass vecs=2 threads=128"], "cross_entropy_loss"),
                    ("bfloat16", [131072], ["", "strategy=cluster cluster=8 vecs=16 threads=128 min_blocks=4",
                                            "strategy=2pass vecs=4 threads=256"], "cross_entropy_loss"),
                    ("bfloat16", [262144], ["", "strategy=cluster cluster=16 vecs=16 threads=128 min_blocks=4",
                                            "strategy=2pass vecs=4 threads=256"], "cross_entropy_loss")]),
}
SCALE = 0.08838834764831843  # 1 / sqrt(128), the scale of bench/scale_mask.py
# a sweep's op -> the fast.plan() op it launches: an unmasked scale_mask_softmax with a positive
# scale runs the scaled kernel (fast.scale_mask_softmax); a causal one, with no mask tensor, the
# span kernel
PLAN_OP = {"softmax": "softmax", "scale_mask": "scaled_softmax", "scale_mask_causal": "scale_span_softmax",
           "cross_entropy_loss": "cross_entropy_loss", "cross_entropy": "cross_entropy"}


def parse_config(text: str):
    """'strategy=block vecs=4 -DA07_L2_HINT=0' -> ({'strategy': 'block', 'vecs': 4}, ('A07_L2_HINT=0',))"""
    overrides, defines = {}, []
    for token in text.split():
        if token.startswith("-D"):
            defines.append(token[2:])
        else:
            key, value = token.split("=", 1)
            overrides[key] = int(value) if value.lstrip("-").isdigit() else value
    return overrides, tuple(defines)


def measure(dtype: str, cols: int, configs, rounds: int, op: str = "softmax"):
    """[(config, plan description, median ms, % of copy, rounds ms, max rel err)] and the copy's GB/s.
    op: "softmax", "scale_mask" (fast.scale_mask_softmax(x, SCALE), no mask) or "scale_mask_causal"
    (the same, causal, with q_len = cols: square score matrices) or "cross_entropy_loss" (the per-row
    losses of a07_softmax.cross_entropy's kernel, targets drawn at random, every 17th ignored: one
    read, so its % of copy is half the copy's time over its own)."""
    import torch

    from a07_softmax import accuracy, bench, fast

    b = bench.Bench(quick=False)
    rows = bench.TOTAL // cols
    x = (torch.randn(rows, cols, device="cuda") * 4).to(getattr(torch, dtype))
    out = torch.empty_like(x)
    if op in ("cross_entropy_loss", "cross_entropy"):
        return _measure_loss(x, cols, dtype, configs, rounds, b, grad=op == "cross_entropy")
    scores = x.double() * (1.0 if op == "softmax" else SCALE)
    if op == "scale_mask_causal":  # query i = row % cols sees keys 0..i
        q = torch.arange(rows, device="cuda") % cols
        scores.masked_fill_(torch.arange(cols, device="cuda")[None, :] > q[:, None], float("-inf"))
    ref = torch.softmax(scores, -1)
    del scores
    dst = torch.empty_like(x)
    fns, described, errs = {"copy": lambda: dst.copy_(x)}, {}, {}
    for cfg in configs:
        overrides, defines = parse_config(cfg)
        plan_args = {k: v for k, v in overrides.items() if k != "resident"}
        described[cfg] = fast.plan(cols, dtype, rows, op=PLAN_OP[op], **plan_args).describe()
        if op == "softmax":
            fn = (lambda o=overrides, d=defines: fast.softmax(x, out=out, defines=d, **o))
        elif op == "scale_mask":
            fn = (lambda o=overrides, d=defines: fast.scale_mask_softmax(x, SCALE, out=out, defines=d, **o))
        else:
            fn = (lambda o=overrides, d=defines: fast.scale_mask_softmax(x, SCALE, causal=True, q_len=cols, out=out,
                                                                         defines=d, **o))
        errs[cfg] = b.check(fn, out, ref)
        fns[cfg or "table"] = fn
    del ref
    return _timed(fns, configs, described, errs, accuracy.tolerance(dtype), x, rounds, b)


def _timed(fns, configs, described, errs, tolerance: float, x, rounds: int, b, traversals: int = 2):
    """measure()'s rows: each configuration timed in interleaved rounds against the copy ("copy" in
    fns), its % of copy counting `traversals` passes over x (the copy makes two: a read and a write),
    and the copy's GB/s."""
    import numpy as np
    import torch

    from a07_softmax import bench

    times = bench.interleaved(fns, rounds, b.time)
    copy_ms = float(np.median(times.pop("copy")))
    rows_out = []
    for cfg in configs:
        t = times[cfg or "table"]
        ms = float(np.median(t))
        rows_out.append((cfg or "(the table's choice)", described[cfg], ms, 100 * copy_ms * traversals / (2 * ms), t,
                         errs[cfg], errs[cfg] <= tolerance))
    gbps = 2 * x.numel() * x.element_size() / (copy_ms * 1e-3) / 1e9
    fns.clear()  # the closures hold the tensors
    torch.cuda.empty_cache()
    return rows_out, gbps


def _measure_loss(x, cols: int, dtype: str, configs, rounds: int, b, grad: bool = False):
    """measure() for the loss alone, or (grad) the loss and its gradient: each configuration's
    per-row losses against float64 (relative to the largest |loss|; fp32 arithmetic whatever the
    logits' dtype), and the gradient of its first 64 rows (relative to the largest |gradient|), then
    timed against the copy (the gradient's write counted as a second traversal)."""
    import torch

    from a07_softmax import accuracy, fast
    from a07_softmax import cross_entropy as CE

    rows = x.shape[0]
    g = torch.Generator(device="cuda").manual_seed(cols)
    t = torch.randint(0, cols, (rows,), device="cuda", generator=g)
    t[::17] = -100
    x64 = x.double()
    ref = torch.logsumexp(x64, -1) - x64.gather(1, t.clamp(min=0)[:, None])[:, 0]
    ref[t == -100] = 0.0
    ref_grad = torch.softmax(x64[:64], -1)
    ref_grad[torch.arange(64, device="cuda"), t[:64].clamp(min=0)] -= 1.0
    ref_grad[t[:64] == -100] = 0.0
    del x64
    dst = torch.empty_like(x)
    g = dst if grad else None  # the gradient is written over the copy's destination (timed apart)
    op = "cross_entropy" if grad else "cross_entropy_loss"
    fns, described, errs = {"copy": lambda: dst.copy_(x)}, {}, {}
    for cfg in configs:
        overrides, defines = parse_config(cfg)
        if defines:
            raise ValueError("the loss sweep takes plan overrides only")
        described[cfg] = fast.plan(cols, dtype, rows, op=op, **overrides).describe()
        fn = (lambda o=overrides: CE._launch_cuda(x, t, -100, "none", 0.0, 0.0, g, override=o))
        if grad:
            dst.fill_(float("nan"))  # poisoned: a row the kernel skips shows
        loss = fn()
        err = ((loss.double() - ref).abs().max() / ref.abs().max()).nan_to_num(float("inf"))
        if grad:
            gerr = ((dst[:64].double() - ref_grad).abs().max() / ref_grad.abs().max()).nan_to_num(float("inf"))
            err = max(err, gerr)
        errs[cfg] = float(err)
        fns[cfg or "table"] = fn
    tol = accuracy.tolerance(dtype if grad else "float32")
    return _timed(fns, configs, described, errs, tol, x, rounds, b, traversals=2 if grad else 1)


def run(sweeps, rounds: int, print_=print):
    for dtype, cols_list, configs, *op in sweeps:
        for cols in cols_list:
            result, copy = measure(dtype, cols, configs, rounds, *op)
            print_(f"\n{dtype} {cols} columns{' (' + op[0] + ')' if op else ''} (copy {copy:.0f} GB/s)")
            for cfg, desc, ms, pct, t, err, ok in result:
                spread = 100 * (max(t) - min(t)) / ms
                print_(f"  {pct:6.1f} % of copy  {ms:8.4f} ms (rounds spread {spread:4.2f} %)  "
                       f"err {err:.2g}{'' if ok else ' FAILED'}  {cfg}\n      {desc}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--claim", choices=sorted(CLAIMS), action="append", default=[])
    ap.add_argument("--all", action="store_true", help="every named claim")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--cols", type=int, nargs="*", default=[])
    ap.add_argument("--config", action="append", default=[], help='overrides and -D defines, e.g. "vecs=4 -DA07_L2_HINT=0"')
    ap.add_argument("--op", default="softmax", choices=sorted(PLAN_OP), help="what --cols launches")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", help="also write the output, headed with GPU, date, versions, commit and source hashes")
    args = ap.parse_args(argv)
    from a07_softmax import backend, provenance

    if not backend.detect().native:
        print("fast_configs: needs an NVIDIA GPU with CuPy (the fast softmax launches through RawModule)")
        return 1
    sweeps = []
    for name in (sorted(CLAIMS) if args.all else args.claim):
        sweeps += CLAIMS[name][1]
    if args.cols:
        sweeps.append((args.dtype, args.cols, [""] + args.config, args.op))
    if not sweeps:
        ap.error("name a --claim, --all, or --cols with --config")
    lines = []

    def out(line):
        print(line, flush=True)
        lines.append(line)

    run(sweeps, args.rounds, out)
    if args.out:
        Path(args.out).write_text(provenance.report(f"bench/sweeps/fast_configs.py {' '.join(sys.argv[1:])}", lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

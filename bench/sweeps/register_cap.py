"""What a register cap would cost the causal 16-bit scale-mask rows of 2048 and 4096 keys (issue 26's
open question in docs/performance.md), from NVRTC's report for sm_90: no GPU needed.

Those rows run `scale_span_softmax_fast_block<bf16_t, 8, THREADS, true>` (8 unpacked vectors a
thread, 32 or 64 threads a row), which ptxas leaves at 96 registers: 10 blocks of 64 threads an SM.
A launch bound that promises more threads an SM caps the registers. The shipped source has no
switch for these instances, so this script compiles a copy of cuda/softmax_fast.cu whose
A07_BLOCK_MIN_BLOCKS also covers 8-vector 16-bit blocks, under -DA07_WIDE_MIN_THREADS=N, and prints
registers and spill bytes per N (0: the shipped build).

With --time (on an NVIDIA GPU) it also answers whether the spills cost less than the occupancy gains:
the causal bf16 rows are timed through fast.scale_mask_softmax with the capped copy as the fast
family's source, each cap against the copy's default (N = 0, the shipped behaviour) and a copy of the
tensor in the same interleaved rounds (bench/sweeps/fast_configs.measure: 2^28 scores, outputs
checked against float64).

  python bench/sweeps/register_cap.py [--threads N ...] [--time [--cols 2048 4096] [--rounds 5]]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))   # fast_configs, beside it

THREADS = (0, 768, 1024, 1280)   # threads an SM the launch bound promises; 0: none (the shipped build)
INSTANCES = ("scale_span_softmax_fast_block<bf16_t, 8, 32, true>", "scale_span_softmax_fast_block<bf16_t, 8, 64, true>")
SHIPPED = "#define A07_BLOCK_MIN_BLOCKS(T, VECS, MAX_THREADS) (sizeof(T) == 2 && (VECS) <= 2 ? " \
          "A07_BLOCK_MIN_THREADS / (MAX_THREADS) : 0)"
CAPPED = "#ifndef A07_WIDE_MIN_THREADS\n#define A07_WIDE_MIN_THREADS 0\n#endif\n" \
         "#define A07_BLOCK_MIN_BLOCKS(T, VECS, MAX_THREADS) (sizeof(T) == 2 && (VECS) <= 2 ? " \
         "A07_BLOCK_MIN_THREADS / (MAX_THREADS) : (sizeof(T) == 2 && (VECS) == 8 ? " \
         "A07_WIDE_MIN_THREADS / (MAX_THREADS) : 0))"


def capped_source(directory: Path) -> Path:
    """cuda/softmax_fast.cu with the cap's switch, written into `directory`; its default (0) builds
    what the shipped source builds."""
    from a07_softmax import fast, native

    src = (native.ROOT / fast.SOURCE["CUDA"]).read_text()
    if SHIPPED not in src:
        raise RuntimeError("cuda/softmax_fast.cu no longer defines A07_BLOCK_MIN_BLOCKS as this script expects")
    path = directory / "softmax_fast.cu"
    path.write_text(src.replace(SHIPPED, CAPPED))
    return path


def timed(threads=THREADS, cols=(2048, 4096), rounds: int = 5, print_=print, measure=None) -> list:
    """The causal bf16 rows under each cap, timed on the GPU against the uncapped build and a copy:
    [(cols, config, % of copy, time / copy's time, max rel err, passed)]. fast.SOURCE points at the
    capped copy while they run, and is restored after. `measure`: fast_configs.measure (the default)."""
    from a07_softmax import fast

    if measure is None:
        from fast_configs import measure
    configs = [""] + [f"-DA07_WIDE_MIN_THREADS={n}" for n in threads if n]
    shipped, out = dict(fast.SOURCE), []
    with tempfile.TemporaryDirectory() as tmp:
        fast.SOURCE["CUDA"] = str(capped_source(Path(tmp)))   # absolute: native.ROOT / it is itself
        try:
            for c in cols:
                rows, copy_gbps = measure("bfloat16", c, configs, rounds, "scale_mask_causal")
                print_(f"bfloat16 {c} columns, causal (copy {copy_gbps:.0f} GB/s)")
                for cfg, desc, ms, pct, _, err, ok in rows:
                    out.append((c, cfg, pct, 100 / pct, err, ok))
                    print_(f"  {pct:6.1f} % of copy  {100 / pct:5.3f} x the copy's time  err {err:.2g}"
                           f"{'' if ok else ' FAILED'}  {cfg}\n      {desc}")
        finally:
            fast.SOURCE.clear()
            fast.SOURCE.update(shipped)
    return out


def report(threads=THREADS) -> dict:
    """{(instance, threads an SM promised): (registers, spill store bytes, spill load bytes)}."""
    from a07_softmax import native

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = capped_source(Path(tmp))
        for n in threads:
            for name in INSTANCES:
                res = native.nvrtc_compile(path, "sm_90", defines=(f"A07_WIDE_MIN_THREADS={n}",),
                                           name_expressions=[name])
                if not res.ok:
                    raise RuntimeError(res.log)
                k = next(k for k in res.kernels if "scale_span" in k.name)
                out[(name, n)] = (k.registers, k.spill_stores, k.spill_loads)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, nargs="*", default=list(THREADS))
    ap.add_argument("--time", action="store_true", help="also time the capped rows on this GPU")
    ap.add_argument("--cols", type=int, nargs="*", default=[2048, 4096])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    try:
        caps = report(args.threads)
    except RuntimeError as e:
        # the GPU machine's NVRTC (cuda-bindings) has refused a generic lambda of the source that CuPy's
        # compile and newer NVRTCs accept: the registers are then read on the CPU machine, the timing here
        if not args.time:
            raise
        print(f"NVRTC's register report failed here ({str(e).strip().splitlines()[0][:160]}); timing without it")
        caps = {}
    for (name, n), (regs, stores, loads) in caps.items():
        print(f"{name:<55} {n or 'shipped':>7} threads an SM: {regs:3d} registers, spill stores {stores:5d} B, "
              f"loads {loads:5d} B")
    if args.time:
        rows = timed(args.threads, args.cols, args.rounds)
        return 0 if all(ok for *_, ok in rows) else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

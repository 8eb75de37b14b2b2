"""What a register cap would cost the causal 16-bit scale-mask rows of 2048 and 4096 keys (issue 26's
open question in docs/performance.md), from NVRTC's report for sm_90: no GPU needed.

Those rows run `scale_span_softmax_fast_block<bf16_t, 8, THREADS, true>` (8 unpacked vectors a
thread, 32 or 64 threads a row), which ptxas leaves at 96 registers: 10 blocks of 64 threads an SM.
A launch bound that promises more threads an SM caps the registers. The shipped source has no
switch for these instances, so this script compiles a copy of cuda/softmax_fast.cu whose
A07_BLOCK_MIN_BLOCKS also covers 8-vector 16-bit blocks, under -DA07_WIDE_MIN_THREADS=N, and prints
registers and spill bytes per N (0: the shipped build).

  python bench/sweeps/register_cap.py [--threads N ...]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

THREADS = (0, 768, 1024, 1280)   # threads an SM the launch bound promises; 0: none (the shipped build)
INSTANCES = ("scale_span_softmax_fast_block<bf16_t, 8, 32, true>", "scale_span_softmax_fast_block<bf16_t, 8, 64, true>")
SHIPPED = "#define A07_BLOCK_MIN_BLOCKS(T, VECS, MAX_THREADS) (sizeof(T) == 2 && (VECS) <= 2 ? " \
          "A07_BLOCK_MIN_THREADS / (MAX_THREADS) : 0)"
CAPPED = "#ifndef A07_WIDE_MIN_THREADS\n#define A07_WIDE_MIN_THREADS 0\n#endif\n" \
         "#define A07_BLOCK_MIN_BLOCKS(T, VECS, MAX_THREADS) (sizeof(T) == 2 && (VECS) <= 2 ? " \
         "A07_BLOCK_MIN_THREADS / (MAX_THREADS) : (sizeof(T) == 2 && (VECS) == 8 ? " \
         "A07_WIDE_MIN_THREADS / (MAX_THREADS) : 0))"


def report(threads=THREADS) -> dict:
    """{(instance, threads an SM promised): (registers, spill store bytes, spill load bytes)}."""
    from a07_softmax import fast, native

    src = (native.ROOT / fast.SOURCE["CUDA"]).read_text()
    if SHIPPED not in src:
        raise RuntimeError("cuda/softmax_fast.cu no longer defines A07_BLOCK_MIN_BLOCKS as this script expects")
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "softmax_fast.cu"
        path.write_text(src.replace(SHIPPED, CAPPED))
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
    args = ap.parse_args(argv)
    for (name, n), (regs, stores, loads) in report(args.threads).items():
        print(f"{name:<55} {n or 'shipped':>7} threads an SM: {regs:3d} registers, spill stores {stores:5d} B, "
              f"loads {loads:5d} B")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

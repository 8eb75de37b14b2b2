"""Why causal bf16 scale-mask rows of 4096 keys take more of the copy's time than their neighbours
(docs/performance.md, "Open questions"): Nsight Compute's counters for one launch of
fast.scale_mask_softmax(causal=True) per row length, bf16, scores of 2^28 elements as in
bench/scale_mask.py.

What it compares, per launch: the plan (strategy, threads, vectors), DRAM bytes and throughput,
achieved occupancy, registers, the issue slots used, and where the warps wait (barrier, memory,
a full load/store queue). The launches are profiled one by one, each after a warm-up call of its own
shape outside ncu's filter (the warm-up is a different kernel name: the unmasked scaled softmax).

  python bench/scale_mask_ncu.py            # on an NVIDIA GPU, with ncu on PATH; prints a table
  python bench/scale_mask_ncu.py --launch   # the launches alone (what ncu profiles)
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import ncu_metrics  # noqa: E402  (bench/, beside this script)

ELEMENTS = 2**28
SEQS = (2048, 4096, 8192)
SCALE = 1 / math.sqrt(128)
KERNEL = "regex:scale_span_softmax_fast"   # the causal call's kernels (no mask tensor)
METRICS = (
    ("gpu__time_duration.sum", "duration, us", 1e-3),        # (metric, label, factor; None: of the tensor)
    ("dram__bytes_read.sum", "DRAM read, fraction of the tensor", None),
    ("dram__bytes_write.sum", "DRAM written, fraction of the tensor", None),
    ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "DRAM throughput, % of peak", 1),
    ("launch__registers_per_thread", "registers a thread", 1),
    ("sm__warps_active.avg.pct_of_peak_sustained_active", "achieved occupancy, %", 1),
    ("smsp__issue_active.avg.pct_of_peak_sustained_active", "issue slots busy, %", 1),
    ("smsp__warp_issue_stalled_barrier_per_warp_active.pct", "warps stalled: barrier, %", 1),
    ("smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct", "warps stalled: memory (L1TEX), %", 1),
    ("smsp__warp_issue_stalled_lg_throttle_per_warp_active.pct", "warps stalled: load/store queue full, %", 1),
    ("smsp__warp_issue_stalled_membar_per_warp_active.pct", "warps stalled: memory barrier, %", 1),
)


def shape(seq: int) -> tuple:
    return (ELEMENTS // (seq * seq), seq, seq)


def launch() -> None:
    import torch

    from a07_softmax import fast

    for seq in SEQS:
        g = torch.Generator(device="cuda").manual_seed(seq)
        x = torch.randn(*shape(seq), device="cuda", generator=g).to(torch.bfloat16)
        fast.scale_mask_softmax(x, SCALE)                     # warm-up: another kernel, compiled and cached
        fast.scale_mask_softmax(x, SCALE, causal=True, out=x)  # the profiled launch
        torch.cuda.synchronize()
        del x


def plans() -> list:
    from a07_softmax import fast

    return [fast.plan(seq, "bfloat16", shape(seq)[0] * seq, op="scale_span_softmax") for seq in SEQS]


def measure(ncu: str = "ncu") -> dict:
    """{(launch index, metric): value} from one ncu run over launch()."""
    return ncu_metrics.profile(__file__, KERNEL, [m for m, _, _ in METRICS], ncu, extra=("--clock-control", "none"))


def main(argv=None) -> int:
    values = ncu_metrics.run(argv, __doc__, launch, measure, len(SEQS))
    if values is None:
        return 0
    launches = sorted({i for i, _ in values})
    print("fast.scale_mask_softmax(causal=True), bf16, 2^28 scores a launch, one launch per row length")
    for seq, p in zip(SEQS, plans()):
        print(f"S = {seq:>5}: {p.describe()}")
    print(f"{'':44}" + "".join(f"S = {s:<10}" for s in SEQS))
    for metric, label, scale in METRICS:
        row = []
        for i, seq in zip(launches, SEQS):
            v = values[(i, metric)]
            v = v / (ELEMENTS * 2) if scale is None else v * scale
            row.append(f"{v:<14.4g}")
        print(f"{label:44}" + "".join(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

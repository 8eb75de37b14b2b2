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

import argparse
import csv
import io
import math
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ELEMENTS = 2**28
SEQS = (2048, 4096, 8192)
SCALE = 1 / math.sqrt(128)
KERNEL = "regex:scale_span_softmax_fast"   # the causal call's kernels (no mask tensor)
METRICS = (
    ("gpu__time_duration.sum", "duration, us", 1e-3),
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
    cmd = [ncu, "--clock-control", "none", "--kernel-name", KERNEL, "--csv", "--metrics",
           ",".join(m for m, _, _ in METRICS), sys.executable, __file__, "--launch"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"ncu failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    lines = p.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    out = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        unit = row.get("Metric Unit", "")
        value = float(row["Metric Value"].replace(",", ""))
        value *= {"Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "usecond": 1e3, "msecond": 1e6}.get(unit, 1)
        out[(int(row["ID"]), row["Metric Name"])] = value
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--launch", action="store_true")
    ap.add_argument("--ncu", default="ncu")
    a = ap.parse_args(argv)
    if a.launch:
        launch()
        return 0
    values = measure(a.ncu)
    launches = sorted({i for i, _ in values})
    if len(launches) != len(SEQS):
        raise RuntimeError(f"expected {len(SEQS)} profiled launches, got {launches}")
    print("fast.scale_mask_softmax(causal=True), bf16, 2^28 scores a launch, one launch per row length")
    for seq, p in zip(SEQS, plans()):
        print(f"S = {seq:>5}: {p.describe()}")
    print(f"{'':44}" + "".join(f"S = {s:<10}" for s in SEQS))
    for metric, label, scale in METRICS:
        row = []
        for i, seq in zip(launches, SEQS):
            v = values[(i, metric)]
            v = v / (ELEMENTS * 2) if scale is None else v * scale if metric.startswith("gpu__time") else v
            row.append(f"{v:<14.4g}")
        print(f"{label:44}" + "".join(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Why Lab 4's readable CUDA kernel (cuda/attention.cu) runs at about 3 TFLOP/s: Nsight Compute's
shared-memory and stall counters for one launch of it, per head dim.

The hypothesis under test (docs/performance.md, "Attention"): the score loop reads
`k_tile[lane][c]`, lanes a whole row of MAX_HEAD_DIM = 128 floats apart, so the 32 lanes of a warp
hit one shared-memory bank and each load is served in 32 wavefronts instead of 1. If so, the bank
conflicts are about 31 of every 32 wavefronts of the shared loads and the warps wait on the
shared-memory pipe.

  python bench/attention_cuda_ncu.py            # on an NVIDIA GPU, with ncu on PATH
  python bench/attention_cuda_ncu.py --launch   # the launches alone (what ncu profiles)
"""
from __future__ import annotations

import argparse
import csv
import io
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HEAD_DIMS = (64, 128)
SHAPE = (1, 16, 1024)   # batch, heads, seq: 16 x 1024 query rows, one warp each
METRICS = (
    ("smsp__inst_executed_op_shared_ld.sum", "shared-memory load instructions"),
    ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", "wavefronts serving them"),
    ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", "wavefronts added by bank conflicts"),
    ("smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct", "warps stalled: shared-memory queue full, %"),
    ("smsp__warp_issue_stalled_short_scoreboard_per_warp_active.pct", "warps stalled: awaiting shared data, %"),
    ("sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active", "FMA pipe busy, % of peak"),
)


def launch() -> None:
    import torch

    from a07_softmax import attention_cuda

    for d in HEAD_DIMS:
        g = torch.Generator(device="cuda").manual_seed(d)
        q, k, v = (torch.randn(*SHAPE, d, device="cuda", generator=g) for _ in range(3))
        attention_cuda.forward(q, k, v)
    torch.cuda.synchronize()


def measure(ncu: str = "ncu") -> dict:
    """{(launch index, metric): value} from one ncu run over launch()."""
    cmd = [ncu, "--kernel-name", "regex:attention_fwd", "--csv", "--metrics", ",".join(m for m, _ in METRICS),
           sys.executable, __file__, "--launch"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"ncu failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    lines = p.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    out = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        out[(int(row["ID"]), row["Metric Name"])] = float(row["Metric Value"].replace(",", ""))
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
    if len(launches) != len(HEAD_DIMS):
        raise RuntimeError(f"expected {len(HEAD_DIMS)} profiled launches, got {launches}")
    print(f"cuda/attention.cu, fp32, batch x heads x seq = {SHAPE}; one launch per head dim")
    print(f"{'':48}" + "".join(f"d = {d:<8}" for d in HEAD_DIMS))
    for metric, label in METRICS:
        print(f"{label:48}" + "".join(f"{values[(i, metric)]:<12.4g}" for i in launches))
    for i, d in zip(launches, HEAD_DIMS):
        waves = values[(i, METRICS[1][0])]
        print(f"d = {d}: {values[(i, METRICS[2][0])] / waves:.1%} of the shared-load wavefronts are bank conflicts, "
              f"{waves / values[(i, METRICS[0][0])]:.1f} wavefronts a load instruction")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

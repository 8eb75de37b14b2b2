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

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import ncu_metrics  # noqa: E402  (bench/, beside this script)

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
    return ncu_metrics.profile(__file__, "regex:attention_fwd", [m for m, _ in METRICS], ncu)


def main(argv=None) -> int:
    values = ncu_metrics.run(argv, __doc__, launch, measure, len(HEAD_DIMS))
    if values is None:
        return 0
    launches = sorted({i for i, _ in values})
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

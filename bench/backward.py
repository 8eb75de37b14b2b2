"""The backward passes of softmax and log_softmax against their peers, one run.

dx = y * (dy - <dy, y>) (softmax) and dx = dy - exp(z) * sum(dy) (log_softmax), per row, from the
forward output and the upstream gradient: the ideal kernel reads y and dy once and writes dx once,
three traversals of the tensor. Tensors of 2^28 elements (1 GiB each in fp32, 512 MiB in bf16, many
times the 60 MB L2), rows of 1024 to 65536. Implementations:
- triton: a07_softmax.triton_backward (one tile of whole rows per program, float32 statistics);
- eager: PyTorch's own backward kernels (torch._softmax_backward_data, _log_softmax_backward_data:
  what autograd runs after F.softmax / F.log_softmax);
- torch.compile: the closed form above, compiled per shape.
Each is compared with a copy of the same tensor in the same run. `GBps` counts the three traversals
(3 x the tensor's bytes / time); `vs_copy` is that over the copy's bandwidth (2 x bytes / copy time),
so 1.0 is the backward moving its bytes as fast as the copy moves its own. The first rows of every
output are checked against float64 (reference.softmax_backward / log_softmax_backward). Medians of
CUDA events (triton.testing.do_bench), ROUNDS rotated rounds (bench.interleaved).

  python bench/backward.py --out results/nvidia-h200/backward.json      # on an NVIDIA GPU
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ELEMENTS = 2**28
COLS = (1024, 4096, 16384, 65536)
ROUNDS = 3
CHECK_ROWS = 64


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--cols", type=int, nargs="*", default=COLS)
    a = ap.parse_args(argv)

    import numpy as np
    import torch
    from triton.testing import do_bench

    from a07_softmax import bench, provenance
    from a07_softmax import reference as R
    from a07_softmax import triton_backward as B

    def time(fn):
        return float(do_bench(fn, warmup=10, rep=50, return_mode="median"))

    def softmax_closed(y, dy):
        return y * (dy - (dy.float() * y.float()).sum(-1, keepdim=True).to(y.dtype))

    def log_softmax_closed(z, dy):
        return dy - z.float().exp().to(z.dtype) * dy.float().sum(-1, keepdim=True).to(z.dtype)

    runs = []
    for dtype in (torch.float32, torch.bfloat16):
        esize = torch.finfo(dtype).bits // 8
        for cols in a.cols:
            rows = ELEMENTS // cols
            g = torch.Generator(device="cuda").manual_seed(cols)
            x = torch.randn(rows, cols, device="cuda", generator=g) * 4
            dy = (torch.randn(rows, cols, device="cuda", generator=g) * 3).to(dtype)
            nbytes = 3 * rows * cols * esize
            torch._dynamo.reset()   # a fresh compile per shape (dynamo's cache limit would fall back to eager)
            for op, log in (("softmax_backward", False), ("log_softmax_backward", True)):
                y = (torch.log_softmax(x, -1) if log else torch.softmax(x, -1)).to(dtype)
                out = torch.empty_like(y)
                closed = torch.compile(log_softmax_closed if log else softmax_closed, dynamic=False)
                eager = torch._log_softmax_backward_data if log else torch._softmax_backward_data
                kernel = B.log_softmax_backward if log else B.softmax_backward
                peers = {"copy": lambda y=y, out=out: out.copy_(y),
                         "triton": lambda y=y, dy=dy, out=out, kernel=kernel: kernel(y, dy, out=out),
                         "eager": lambda y=y, dy=dy, eager=eager, dtype=dtype: eager(dy, y, -1, dtype),
                         "torch.compile": lambda y=y, dy=dy, closed=closed: closed(y, dy)}
                y64, dy64 = (t[:CHECK_ROWS].double().cpu().numpy() for t in (y, dy))
                ref = (R.log_softmax_backward if log else R.softmax_backward)(y64, dy64)
                errs = {}
                for name, fn in peers.items():
                    out.fill_(float("nan"))
                    got = fn()
                    torch.cuda.synchronize()
                    if name != "copy":
                        d = got[:CHECK_ROWS].double().cpu().numpy()
                        errs[name] = float(np.abs(d - ref).max() / np.abs(ref).max())  # normwise, as the tests
                rounds = bench.interleaved(peers, ROUNDS, time)
                copy_ms = float(np.median(rounds["copy"]))
                copy_gbps = 2 * rows * cols * esize / copy_ms / 1e6
                for name in peers:
                    if name == "copy":
                        continue
                    ms = float(np.median(rounds[name]))
                    run = dict(impl=name, op=op, dtype=str(dtype).replace("torch.", ""), cols=cols, rows=rows,
                               ms=ms, ms_rounds=rounds[name], copy_ms=copy_ms, GBps=nbytes / ms / 1e6,
                               vs_copy=nbytes / ms / 1e6 / copy_gbps, max_rel_err=errs[name])
                    runs.append(run)
                    print(f"{run['dtype']:>8} {op:<21} cols {cols:>6} {name:<14} {ms:8.3f} ms {run['GBps']:6.0f} GB/s "
                          f"{run['vs_copy']:5.2f} x copy bandwidth  err {errs[name]:.1e}", flush=True)
            torch.cuda.empty_cache()
    result = dict(gpu=provenance.gpu_name(), date=provenance.today(), versions=provenance.versions(),
                  sources_sha256=provenance.sources_sha256(provenance.BACKWARD_SOURCES), elements=ELEMENTS,
                  model={"bytes": "3 x rows x cols x element size (read y, read dy, write dx)"}, runs=runs)
    if a.out:
        a.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

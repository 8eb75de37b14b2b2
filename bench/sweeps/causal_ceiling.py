"""How fast can causal scores move at all? The bytes of a causal softmax without its arithmetic,
timed against a copy and fast.scale_mask_softmax(causal=True) in the same interleaved rounds
(issue 26's target: a causal row in at most 0.8 of the copy's time).

A causal row i of S keys reads its first i + 1 columns and writes all S. The probe kernel here moves
exactly those bytes in 16-byte vectors: it loads the vectors that hold a visible column, writes them
back unchanged, and writes zeros over the rest (no max, no exp, no reduction, no barrier). A block
per row, threads x vectors a thread covering the row, loads issued before stores: the fast kernel's
mapping, minus its work. Its time over the copy's is the floor the traffic sets on the H200's
memory system for that mix of reads and writes; the fast kernel's ratio above it is what the
softmax costs on top. Each shape also runs with the masked part's zeros stored before the loads go
out (they depend on nothing; the fast kernel stores them last): whether the order moves the floor.

  python bench/sweeps/causal_ceiling.py [--dtype bfloat16 float32] [--seqs 2048 4096 8192 16384] [--out F]

`a07 results causal-ceiling` writes results/<gpu>/causal_ceiling.txt with it.
"""
from __future__ import annotations

import argparse
import itertools
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

ELEMENTS = 2**28           # scores per tensor, as bench/scale_mask.py
SCALE = 1 / math.sqrt(128)
MOST_VECTORS = 16          # the probe's registers: 16 vectors (256 bytes) a thread at most
THREADS = (64, 128, 256, 512)

PROBE = r"""
extern "C" __global__ void __launch_bounds__(512)
causal_bytes(const uint4* __restrict__ x, uint4* __restrict__ y, int seq, int row_vectors, int per_vector,
             int vectors_a_thread, int zeros_first) {
  const long long row = blockIdx.x;
  const int visible = int(row % seq) / per_vector + 1;   // vectors holding a column <= the query's index
  const uint4* xr = x + row * row_vectors;
  uint4* yr = y + row * row_vectors;
  uint4 held[16];
  if (zeros_first) {                                     // the masked part's zeros, before any load
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int v = j * blockDim.x + threadIdx.x;
      if (j < vectors_a_thread && v >= visible && v < row_vectors) yr[v] = make_uint4(0u, 0u, 0u, 0u);
    }
  }
#pragma unroll
  for (int j = 0; j < 16; ++j) {                         // every load first, as the fast kernels do
    const int v = j * blockDim.x + threadIdx.x;
    held[j] = make_uint4(0u, 0u, 0u, 0u);
    if (j < vectors_a_thread && v < visible) held[j] = xr[v];
  }
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const int v = j * blockDim.x + threadIdx.x;
    if (j < vectors_a_thread && v < row_vectors && (!zeros_first || v < visible)) yr[v] = held[j];
  }
}
"""


def shapes(seq: int, elem_bytes: int):
    """[(threads, vectors a thread)] that cover a row of `seq` elements with at most MOST_VECTORS a thread."""
    row_vectors = seq * elem_bytes // 16
    return [(t, -(-row_vectors // t)) for t in THREADS if -(-row_vectors // t) <= MOST_VECTORS and t <= row_vectors]


def expected(x, per_vector: int):
    """What the probe writes: each row's vectors that hold a visible column, zeros elsewhere."""
    import torch

    rows, seq = x.shape
    q = torch.arange(rows, device=x.device) % seq
    keep = torch.arange(seq, device=x.device)[None, :] < (q[:, None] // per_vector + 1) * per_vector
    return torch.where(keep, x, torch.zeros_like(x))


def measure(dtype: str, seq: int, rounds: int):
    """{name: time / copy's time}, for the copy, the probe at each shape and the fast kernel."""
    import cupy
    import numpy as np
    import torch

    from a07_softmax import bench, fast

    b = bench.Bench(quick=False)
    rows = ELEMENTS // seq
    x = (torch.randn(rows, seq, device="cuda") * 4).to(getattr(torch, dtype))
    y = torch.empty_like(x)
    per_vector = 16 // x.element_size()
    probe = cupy.RawModule(code=PROBE, options=("-std=c++17",)).get_function("causal_bytes")
    fns = {"copy": lambda: y.copy_(x),
           "fast.scale_mask_softmax(causal)": lambda: fast.scale_mask_softmax(x, SCALE, causal=True, q_len=seq, out=y)}
    for (threads, vecs), zeros_first in itertools.product(shapes(seq, x.element_size()), (0, 1)):
        def launch(threads=threads, vecs=vecs, zeros_first=zeros_first):
            with fast._launch_context(x):
                probe((rows,), (threads,), (np.uint64(x.data_ptr()), np.uint64(y.data_ptr()), np.int32(seq),
                                            np.int32(seq // per_vector), np.int32(per_vector), np.int32(vecs),
                                            np.int32(zeros_first)))
        name = f"causal bytes, {threads} threads x {vecs} vectors" + (", zeros stored first" if zeros_first else "")
        y.fill_(float("nan"))           # poisoned: every element must be written
        launch()
        torch.cuda.synchronize()
        if not torch.equal(y, expected(x, per_vector)):
            raise RuntimeError(f"the probe ({name}) did not move the causal bytes it should")
        fns[name] = launch
    times = bench.interleaved(fns, rounds, b.time)
    copy = float(np.median(times["copy"]))
    out = {name: float(np.median(t)) / copy for name, t in times.items()}
    fns.clear()  # the closures hold the tensors
    torch.cuda.empty_cache()
    return out, 2 * ELEMENTS * torch.finfo(getattr(torch, dtype)).bits // 8 / (copy * 1e-3) / 1e9


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", nargs="*", default=["bfloat16", "float32"])
    ap.add_argument("--seqs", type=int, nargs="*", default=[2048, 4096, 8192, 16384])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, help="also write the report here (a07 results causal-ceiling)")
    a = ap.parse_args(argv)
    from a07_softmax import provenance

    title = (f"bench/sweeps/causal_ceiling.py {' '.join(argv if argv is not None else sys.argv[1:])} "
             "(causal bytes without the softmax, against a copy)")
    print(provenance.header(title), flush=True)
    lines = []

    def say(line):
        lines.append(line)
        print(line, flush=True)
    for dtype in a.dtype:
        for seq in a.seqs:
            ratios, copy_gbps = measure(dtype, seq, a.rounds)
            say(f"{dtype} S = {seq} (copy {copy_gbps:.0f} GB/s), time / copy's time:")
            for name, r in ratios.items():
                if name != "copy":
                    say(f"  {r:6.3f}  {name}")
    if a.out:
        a.out.write_text(provenance.report(title, lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

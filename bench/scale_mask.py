"""Fused scale + mask + softmax against its peers, one run, over attention-score shapes.

Scores of 2^28 elements (B*H x S x S: 1 GiB of fp32, 512 MiB of bf16, many times the 60 MB L2),
S from 128 to 16384, scale 1/sqrt(128), without a mask and causal. Implementations:
- fast: a07_softmax.fast.scale_mask_softmax (the fast family; causal rows read only up to their
  diagonal);
- lab2.fused / lab2.unfused: Lab 2's teaching kernel and its three-kernel path (fp32; the fused
  kernel holds S <= 256 x ITEMS_MAX);
- triton: the course's Triton scale_mask_softmax;
- torch.compile and eager: (x * scale).masked_fill(causal, -inf).softmax(-1), compiled per shape.
Each is compared with a copy of the same tensor in the same run (its time is the ceiling for one
read and one write): `GBps` is copy-equivalent (2 x the tensor's bytes / time) and `vs_copy` the
time over the copy's. Up to 64 rows of the first head (its ends and rows spread over it) of every output
are checked against float64. Medians of
CUDA events (triton.testing.do_bench), ROUNDS rotated rounds (bench.interleaved).

  python bench/scale_mask.py --out results/nvidia-h200/scale_mask.json      # on an NVIDIA GPU
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ELEMENTS = 2**28
SEQS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
SCALE = 1 / math.sqrt(128)
ROUNDS = 3
CHECK_ROWS = 58   # rows of the first head checked against float64, beside its first and last ones


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--seqs", type=int, nargs="*", default=SEQS)
    a = ap.parse_args(argv)

    import numpy as np
    import torch
    from triton.testing import do_bench

    from a07_softmax import bench, fast, native, provenance
    from a07_softmax import reference as R
    from a07_softmax import triton_softmax as T

    def time(fn):
        return float(do_bench(fn, warmup=10, rep=50, return_mode="median"))  # 100+ launches of >= 0.3 ms each

    def eager(x, causal_mask):
        s = x * SCALE
        return (s.masked_fill(causal_mask, float("-inf")) if causal_mask is not None else s).softmax(-1)

    runs = []
    for dtype in (torch.float32, torch.bfloat16):
        esize = torch.finfo(dtype).bits // 8
        for seq in a.seqs:
            rows = ELEMENTS // seq
            g = torch.Generator(device="cuda").manual_seed(seq)
            x = (torch.randn(rows, seq, device="cuda", generator=g) * 4).to(dtype)
            out = torch.empty_like(x)
            above = torch.ones(seq, seq, dtype=torch.bool, device="cuda").triu(1)
            torch._dynamo.reset()   # a fresh compile per shape (dynamo's cache limit would fall back to eager)
            compiled = torch.compile(eager, dynamic=False)
            x3 = x.view(-1, seq, seq)
            items = native.items_for(seq)
            nbytes = 2 * rows * seq * esize
            for causal in (False, True):
                mask = above if causal else None
                peers = {"copy": lambda: out.copy_(x),
                         "fast": lambda c=causal: fast.scale_mask_softmax(x, SCALE, causal=c, q_len=seq, out=out),
                         "triton": lambda c=causal: T.scale_mask_softmax(x, SCALE, causal=c, q_len=seq, out=out),
                         "torch.compile": lambda m=mask: compiled(x3, m),
                         "eager": lambda m=mask: eager(x3, m)}
                if dtype == torch.float32:
                    peers["lab2.unfused"] = lambda c=causal: native.scale_mask_softmax(
                        x, SCALE, causal=c, q_len=seq, fused=False, out=out)
                    if items is not None:
                        peers["lab2.fused"] = lambda c=causal: native.scale_mask_softmax(
                            x, SCALE, causal=c, q_len=seq, fused=True, out=out, items=items)
                # float64 on CHECK_ROWS rows of the first head, spread over it (its first and last
                # rows, and rows drawn across the rest): a causal row's visible span grows with its
                # index, so the last rows are the long ones. All seq rows cost minutes at S = 16384.
                pick = np.unique(np.concatenate([[0, 1, 2, seq // 2, seq - 2, seq - 1],
                                                 np.random.default_rng(seq).integers(0, seq, CHECK_ROWS)]))
                idx = torch.as_tensor(pick, device="cuda")
                head = x[idx].double().cpu().numpy()
                keep = np.where(np.arange(seq)[None, :] <= pick[:, None], 0.0, -np.inf) if causal else 0.0
                ref = R.scale_mask_softmax(head, SCALE, keep)
                errs = {}
                for name, fn in peers.items():
                    y = fn()
                    torch.cuda.synchronize()
                    if name != "copy":
                        got = (y if y is not None else out).reshape(rows, seq)[idx].double().cpu().numpy()
                        errs[name] = R.max_rel_err(got, ref)
                rounds = bench.interleaved(peers, ROUNDS, time)
                copy_ms = float(np.median(rounds["copy"]))
                for name in peers:
                    if name == "copy":
                        continue
                    ms = float(np.median(rounds[name]))
                    run = dict(impl=name, dtype=str(dtype).replace("torch.", ""), seq=seq, rows=rows, causal=causal,
                               ms=ms, ms_rounds=rounds[name], copy_ms=copy_ms, GBps=nbytes / ms / 1e6,
                               vs_copy=ms / copy_ms, max_rel_err=errs[name])
                    runs.append(run)
                    print(f"{run['dtype']:>8} S {seq:>5} {'causal' if causal else 'full':<6} {name:<14} {ms:8.3f} ms "
                          f"{run['GBps']:6.0f} GB/s  {run['vs_copy']:5.2f} x copy  err {errs[name]:.1e}", flush=True)
            del x, out, x3
            torch.cuda.empty_cache()
    result = dict(gpu=provenance.gpu_name(), date=provenance.today(), versions=provenance.versions(),
                  sources_sha256=provenance.sources_sha256(), elements=ELEMENTS, scale=SCALE, runs=runs)
    if a.out:
        a.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

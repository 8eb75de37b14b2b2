"""Lab 4's benchmark: the course's fused attention against naive attention and PyTorch's SDPA, one run.

bf16, head dims 64 and 128, causal and not, S = 1024 ... 16384 at 16384 tokens per batch and
2048 / head_dim heads (FlashAttention's benchmark shape). Implementations:
- triton.flash_attention: a07_softmax.attention (the course's Triton forward);
- naive: Q K^T (bf16 scores written), the course's fused scale+mask+softmax (read, write), P V (read):
  the S x S matrix crosses DRAM four times;
- sdpa.flash / sdpa.cudnn: torch.nn.functional.scaled_dot_product_attention pinned to one backend;
- cuda.attention (fp32): the readable CUDA kernel (a07_softmax.attention_cuda) on fp32 copies of the
  same inputs, up to S = CUDA_MAX_SEQ (it runs on the CUDA cores: its speed is explained, not targeted).
TFLOP/s count 4 S^2 d per head (two matmuls), halved for causal. Each output is checked against
float64 attention of the first head; the times are medians of CUDA events after warm-up, every
implementation timed in ROUNDS rounds in rotated order (bench.interleaved).

  python bench/attention.py --out results/<gpu>/attention.json      # on an NVIDIA GPU (a07 results attention)
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SEQS = (1024, 2048, 4096, 8192, 16384)
HEAD_DIMS = (64, 128)
TOKENS = 16384
ROUNDS = 3
CUDA_MAX_SEQ = 2048


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--seqs", type=int, nargs="*", default=SEQS)
    a = ap.parse_args(argv)

    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    from a07_softmax import attention as A
    from a07_softmax import attention_cuda as C
    from a07_softmax import bench, provenance
    from a07_softmax import triton_softmax as T

    def time(fn):
        return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))

    # the copy rate of this run, on this GPU: the traffic model's bytes become lower-bound times at it
    copy = bench.Bench(quick=True).copy_ceiling()
    print(f"device-to-device copy {copy:.0f} GB/s", flush=True)
    runs = []
    for d in HEAD_DIMS:
        heads = 2048 // d
        for s in a.seqs:
            batch = max(1, TOKENS // s)
            for causal in (False, True):
                g = torch.Generator(device="cuda").manual_seed(s + d)
                q, k, v = (torch.randn(batch, heads, s, d, device="cuda", generator=g, dtype=torch.bfloat16)
                           for _ in range(3))
                scale = 1 / math.sqrt(d)
                out = torch.empty_like(q)
                scores = torch.empty(batch, heads, s, s, device="cuda", dtype=torch.bfloat16)

                def naive():
                    torch.matmul(q, k.transpose(-1, -2), out=scores)
                    p = T.scale_mask_softmax(scores.view(-1, s), scale, causal=causal, q_len=s,
                                             out=scores.view(-1, s))
                    return torch.matmul(p.view(batch, heads, s, s), v, out=out)

                def sdpa(backend):
                    def fn():
                        with sdpa_kernel(backend):
                            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    return fn

                impls = {"triton.flash_attention": lambda: A.flash_attention(q, k, v, causal=causal, out=out),
                         "naive (matmul, course softmax, matmul)": naive,
                         "sdpa.flash": sdpa(SDPBackend.FLASH_ATTENTION), "sdpa.cudnn": sdpa(SDPBackend.CUDNN_ATTENTION)}
                out32 = None
                if s <= CUDA_MAX_SEQ:
                    q32, k32, v32 = q.float(), k.float(), v.float()
                    out32 = torch.empty_like(q32)
                    impls["cuda.attention (fp32)"] = lambda: C.forward(q32, k32, v32, causal=causal, out=out32)
                # float64 attention of the first head: the yardstick every output is held to
                q64, k64, v64 = (t[:1, :1].double() for t in (q, k, v))
                s64 = q64 @ k64.transpose(-1, -2) * scale
                if causal:
                    s64.masked_fill_(torch.ones(s, s, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
                ref = torch.softmax(s64, -1) @ v64
                del s64
                errs, usable = {}, {}
                for name, fn in impls.items():
                    try:
                        out.fill_(float("nan"))
                        if out32 is not None:
                            out32.fill_(float("nan"))
                        y = fn()
                        torch.cuda.synchronize()
                    except RuntimeError as e:  # a backend that does not take this shape
                        print(f"{name} d {d} S {s}: not run ({str(e).splitlines()[0][:100]})")
                        continue
                    errs[name] = float((y[:1, :1].double() - ref).abs().max() / ref.abs().max())
                    usable[name] = fn
                rounds = bench.interleaved(usable, ROUNDS, time)
                flops = 4 * batch * heads * s * s * d * (0.5 if causal else 1.0)
                for name in usable:
                    ms = float(np.median(rounds[name]))
                    runs.append(dict(impl=name, dtype="bfloat16", batch=batch, heads=heads, seq=s, head_dim=d,
                                     causal=causal, ms=ms, ms_rounds=rounds[name], TFLOPs=flops / ms / 1e9,
                                     max_rel_err=errs[name]))
                    print(f"d {d:>3} S {s:>5} causal {causal!s:>5} {name:<40} {ms:8.3f} ms {flops / ms / 1e9:7.1f} "
                          f"TFLOP/s  err {errs[name]:.1e}", flush=True)
                del q, k, v, out, scores, out32
                torch.cuda.empty_cache()
    result = dict(gpu=provenance.gpu_name(), date=provenance.today(), versions=provenance.versions(),
                  sources_sha256=provenance.sources_sha256(provenance.ATTENTION_SOURCES), tokens=TOKENS,
                  copy_GBps=copy, runs=runs,
                  model={"fused_bytes": "attention.traffic_bytes(bh, S, d, 2)",
                         "naive_bytes": "attention.traffic_bytes(bh, S, d, 2, fused=False, score_bytes=2)"})
    if a.out:
        a.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

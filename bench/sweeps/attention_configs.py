"""Repeat the measurement behind Lab 4's launch choices (a07_softmax.attention.flash_attention): key
and value tiles through tensor descriptors (TMA) or pointers, tile shape and warps, the heavy-first
order of causal tiles and the group of heads it spans, the order of the masked and unmasked runs of
key tiles, and the positive scale folded into the exp.
bf16, the benchmark's shapes (16384 tokens, 2048 / head_dim heads), every configuration timed in
interleaved rounds (medians of CUDA events) after its output is checked against float64 attention of
the first head. Causal speedup = the committed full-attention launch's time / the causal row's time
(the issue's ratio: what a causal call gains over a full one).

  python bench/sweeps/attention_configs.py [--seqs 4096 8192] [--out FILE]
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# (TMA, BLOCK_M, BLOCK_N, num_warps, num_stages); the committed choice for a head dim and mode is
# attention.pick_tiles(d, tma=True, causal=...), and the pointer rows are the float32 path's (and a
# GPU's without TMA). Launches of 4 warps (128 x 64 and 64 x 64 tiles) ran 1-32 % slower than the
# fastest 8-warp launch at every point of the H200 sweep run at commit 9068469
# (results/nvidia-h200/sweeps_attention.txt in git history) and are no longer tried.
CONFIGS = ((True, 128, 64, 8, 3), (True, 128, 128, 8, 3), (False, 128, 64, 8, 3), (False, 128, 128, 8, 3))
# (HEAVY_FIRST for causal, FOLD, the masked run walked in the other order than the committed one),
# tried on the committed configuration: the committed choice first (heavy-first on, the fold off:
# attention.FOLD_SCALE says why), then each switch flipped; the fold row measures what correctness
# over the whole finite range costs. The order only matters where there are masked tiles: causal
# launches (the benchmark's S is a multiple of every tile, so full launches have none).
VARIANTS = ((True, False, False), (False, False, False), (True, True, False), (True, False, True))
# Heads a causal launch orders longest-tile-first together: "auto" is attention.head_group(), the
# committed choice (used by every causal row but the group rows); the others are tried on the
# committed configuration. 1: each head alone.
GROUPS = ("auto", 1, 4, "half", "double", "all")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqs", type=int, nargs="*", default=(2048, 4096, 8192))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    import numpy as np
    import torch
    import triton
    from triton.testing import do_bench
    from triton.tools.tensor_descriptor import TensorDescriptor

    from a07_softmax import accuracy, bench, provenance
    from a07_softmax.attention import head_group, pick_tiles
    from a07_softmax.attention_kernels import attention_fwd_kernel

    def time(fn):
        return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))

    lines = []
    for d in (64, 128):
        heads = 2048 // d
        for s in args.seqs:
            batch = max(1, 16384 // s)
            g = torch.Generator(device="cuda").manual_seed(s + d)
            q, k, v = (torch.randn(batch, heads, s, d, device="cuda", generator=g, dtype=torch.bfloat16)
                       for _ in range(3))
            out = torch.empty_like(q)
            committed = {causal: (lambda t: (t.kv_descriptors, *t[:4]))(pick_tiles(d, True, causal))
                         for causal in (False, True)}
            order = {causal: pick_tiles(d, True, causal).masked_first for causal in (False, True)}
            auto = head_group(batch * heads, s, d, 2)
            sizes = {"auto": auto, "half": max(1, auto // 2), "double": auto * 2, "all": batch * heads}
            groups = list(dict.fromkeys(min(sizes.get(g, g), batch * heads) for g in GROUPS))
            launches, refs = {}, {}
            for causal in (False, True):
                q64, k64, v64 = (t[:1, :1].double() for t in (q, k, v))
                s64 = q64 @ k64.transpose(-1, -2) / math.sqrt(d)
                if causal:
                    s64.masked_fill_(torch.ones(s, s, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
                refs[causal] = torch.softmax(s64, -1) @ v64
                for cfg in dict.fromkeys((committed[causal], *CONFIGS)):
                    mine = cfg == committed[causal]
                    tried = [(h, auto, f, order[causal] != flip) for h, f, flip in (VARIANTS if mine else VARIANTS[:1])]
                    if causal and mine:
                        tried[1:1] = [(True, g, True, order[causal]) for g in groups[1:]]
                    for heavy, group, fold, masked_first in tried:
                        if not causal and (heavy != VARIANTS[0][0] or masked_first != order[causal]):
                            continue  # the tile order only matters when tiles differ in work or masks
                        tma, bm, bn, warps, stages = cfg
                        kd, vd = k, v
                        if tma:
                            kd, vd = (TensorDescriptor(t.view(batch * heads, s, d), [batch * heads, s, d],
                                                       [s * d, d, 1], [1, bn, d]) for t in (k, v))

                        def fn(causal=causal, tma=tma, bm=bm, bn=bn, warps=warps, stages=stages, heavy=heavy,
                               fold=fold, kd=kd, vd=vd, group=group, masked_first=masked_first):
                            attention_fwd_kernel[(triton.cdiv(s, bm), batch * heads)](
                                q, k, v, out, kd, vd, q, s, 1 / math.sqrt(d), heads, group, q.stride(0), q.stride(1),
                                q.stride(2), HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, HAS_KV_LEN=False,
                                IEEE=False, UPCAST=False, HEAVY_FIRST=causal and heavy, FOLD=fold, TMA=tma,
                                MASKED_FIRST=masked_first, num_warps=warps, num_stages=stages)
                        launches[(causal, cfg, heavy, group if causal and heavy else 0, fold, masked_first)] = fn
            errs = {}
            for key, fn in launches.items():
                out.fill_(float("nan"))
                fn()
                ref = refs[key[0]]
                errs[key] = float((out[:1, :1].double() - ref).abs().max() / ref.abs().max())
            rounds = bench.interleaved(launches, args.rounds, time)
            ms = {key: float(np.median(t)) for key, t in rounds.items()}
            lines.append(f"head_dim {d}, S {s}, batch {batch} x {heads} heads, bf16")
            for key in launches:
                causal, cfg, heavy, group, fold, masked_first = key
                flops = 4 * batch * heads * s * s * d * (0.5 if causal else 1.0)
                full = ms[(False, committed[False], True, 0, False, order[False])]
                speedup = f"  causal speedup {full / ms[key]:.3f}" if causal else ""
                ok = errs[key] <= accuracy.tolerance("bfloat16")
                lines.append(f"  {'causal' if causal else 'full':<6} tma {int(cfg[0])} BLOCK_M {cfg[1]:>3} BLOCK_N "
                             f"{cfg[2]:>3} warps {cfg[3]} stages {cfg[4]} heavy_first {int(causal and heavy)} "
                             f"group {group:>3} fold {int(fold)} masked_first {int(masked_first)}  "
                             f"{ms[key]:7.3f} ms {flops / ms[key] / 1e9:6.1f} TFLOP/s{speedup}  "
                             f"err {errs[key]:.1e}{'' if ok else ' FAILED'}")
            print("\n".join(lines[-len(launches) - 1:]), flush=True)
            torch.cuda.empty_cache()
    if args.out:
        Path(args.out).write_text(provenance.report(f"bench/sweeps/attention_configs.py {' '.join(sys.argv[1:])}",
                                                    lines, provenance.ATTENTION_SOURCES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

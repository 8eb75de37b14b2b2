"""The fused cross-entropy against its peers, one run: loss alone, and loss + gradient (forward and
backward), for language-model vocabularies.

V in {32768, 50257, 128256, 131072, 262144}, bf16 and fp32 logits, rows = 1 GiB of logits / row
bytes (many times the 60 MB L2). Implementations:
- a07.fast.cross_entropy: a07_softmax.cross_entropy with backend="cuda", the fast family's kernel
  (the row on chip: one read of the logits, one write of the gradient; the loss alone: one read);
- a07.fast.cross_entropy[unchecked]: the same with check_targets=False: the host does not wait for
  the test of the targets (F.cross_entropy and Liger do not wait either);
- a07.cross_entropy: the same function with backend="triton", the Triton twin (gradient in the
  forward kernel, the backward a scaling that returns at once for an upstream gradient of 1);
- F.cross_entropy (eager PyTorch), torch.compile(F.cross_entropy), and Liger's
  LigerCrossEntropyLoss where liger_kernel imports.
Bandwidth is always one read + one write of the logits for loss + gradient ("copy-equivalent"),
one read for the loss alone, whatever an implementation actually moves. Every loss and gradient is
checked against float64 on the first 64 rows; the peak of allocated memory above the inputs is
recorded. Medians of CUDA events, ROUNDS rotated rounds (bench.interleaved).

host_us (the course's calls): the host's time per call at HOST_ROWS rows of the same vocabulary,
where the GPU's share is a few microseconds: what Python spends on a call at any size. A call
that waits for the GPU (the target test) cannot run ahead of it, so when host_us approaches the
kernel's time the GPU idles between calls.

  python bench/cross_entropy.py --out results/nvidia-h200/cross_entropy.json      # on an NVIDIA GPU
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

VOCABS = (32768, 50257, 128256, 131072, 262144)
DATA_BYTES = 2**30
ROUNDS = 3
HOST_ROWS, HOST_CALLS = 8, 200


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--vocabs", type=int, nargs="*", default=VOCABS)
    a = ap.parse_args(argv)

    import numpy as np
    import torch
    import torch.nn.functional as F
    from triton.testing import do_bench

    from a07_softmax import bench, provenance
    from a07_softmax import cross_entropy as CE

    try:
        from liger_kernel.transformers.cross_entropy import LigerCrossEntropyLoss
        liger = LigerCrossEntropyLoss()
    except Exception as e:  # not installed: said in the output, not hidden
        print(f"liger_kernel not available ({e}); Liger is left out of this run")
        liger = None

    def time(fn):
        return float(do_bench(fn, warmup=25, rep=100, return_mode="median", grad_to_none=None))

    # torch.compile(F.cross_entropy) itself would not compile: dynamo skips frames that live in torch's
    # own modules and runs them eagerly. A function of ours that calls it is traced and compiled.
    def loss_sum(x, t):
        return F.cross_entropy(x, t, reduction="sum")

    def host_us(f, x, t, grad):
        """Python's time per call of f (loss, and backward with grad) on x's first HOST_ROWS rows."""
        import time as clock

        sx, st = x[:HOST_ROWS].detach().clone().requires_grad_(grad), t[:HOST_ROWS].clone()

        def call():
            sx.grad = None
            loss = f(sx, st)
            if grad:
                loss.backward()
        for _ in range(20):
            call()
        torch.cuda.synchronize()
        start = clock.perf_counter()
        for _ in range(HOST_CALLS):
            call()
        torch.cuda.synchronize()
        return (clock.perf_counter() - start) / HOST_CALLS * 1e6

    copy = bench.Bench(quick=True).copy_ceiling()
    print(f"device-to-device copy {copy:.0f} GB/s", flush=True)
    runs = []
    for dtype in (torch.bfloat16, torch.float32):
        esize = torch.finfo(dtype).bits // 8
        for vocab in a.vocabs:
            rows = DATA_BYTES // (vocab * esize)
            g = torch.Generator(device="cuda").manual_seed(vocab)
            x = (torch.randn(rows, vocab, device="cuda", generator=g) * 4).to(dtype)
            t = torch.randint(0, vocab, (rows,), device="cuda", generator=g)
            t[::17] = -100
            # dynamo compiles once per shape and, after its cache limit (8), silently runs eagerly: a
            # fresh compile for every shape keeps "torch.compile" what it says
            torch._dynamo.reset()
            compiled = torch.compile(loss_sum, dynamic=False)
            ref_loss, ref_grad = CE.reference(x[:64].double().cpu().numpy(), t[:64].cpu().numpy(), reduction="sum")
            peers = {"a07.fast.cross_entropy": lambda x, t: CE.cross_entropy(x, t, reduction="sum", backend="cuda"),
                     # no host wait for the target test (its default costs one per call): as the peers run
                     "a07.fast.cross_entropy[unchecked]": lambda x, t: CE.cross_entropy(
                         x, t, reduction="sum", backend="cuda", check_targets=False),
                     "a07.cross_entropy": lambda x, t: CE.cross_entropy(x, t, reduction="sum", backend="triton"),
                     "F.cross_entropy": lambda x, t: F.cross_entropy(x, t, reduction="sum"),
                     "torch.compile(F.cross_entropy)": compiled}
            if liger is not None:
                liger.reduction = "sum"
                peers["liger.LigerCrossEntropyLoss"] = lambda x, t: liger(x, t)
            for mode in ("loss", "loss+grad"):
                leaf = x.detach().requires_grad_(mode == "loss+grad")
                fns, errs, peaks = {}, {}, {}
                for name, f in peers.items():
                    def fn(f=f):
                        leaf.grad = None
                        loss = f(leaf, t)
                        if leaf.requires_grad:
                            loss.backward()
                        return loss
                    try:
                        small = x[:64].detach().clone().requires_grad_(mode == "loss+grad")
                        loss = f(small, t[:64])
                        err = abs(float(loss) - float(ref_loss)) / abs(float(ref_loss))
                        if mode == "loss+grad":
                            loss.backward()
                            gerr = float((small.grad.double().cpu() - torch.from_numpy(ref_grad)).abs().max()
                                         / np.abs(ref_grad).max())
                            err = max(err, gerr)
                        fn()  # warm-up / compile at the real shape
                        torch.cuda.synchronize()
                        base = torch.cuda.memory_allocated()
                        torch.cuda.reset_peak_memory_stats()
                        fn()
                        torch.cuda.synchronize()
                        peaks[name] = torch.cuda.max_memory_allocated() - base
                    except Exception as e:  # a peer that cannot run this case is reported, not timed
                        print(f"{name} {dtype} V {vocab} {mode}: not run ({str(e).splitlines()[0][:120]})")
                        continue
                    fns[name], errs[name] = fn, err
                rounds = bench.interleaved(fns, ROUNDS, time)
                nbytes = rows * vocab * esize * (2 if mode == "loss+grad" else 1)
                for name in fns:
                    ms = float(np.median(rounds[name]))
                    run = dict(impl=name, mode=mode, dtype=str(dtype).replace("torch.", ""), rows=rows, vocab=vocab,
                               ms=ms, ms_rounds=rounds[name], GBps=nbytes / ms / 1e6, max_rel_err=errs[name],
                               peak_extra_bytes=peaks[name],
                               host_us=host_us(peers[name], x, t, mode == "loss+grad") if name.startswith("a07.")
                               else None)
                    runs.append(run)
                    print(f"{run['dtype']:>8} V {vocab:>6} {mode:<9} {name:<32} {ms:8.3f} ms {run['GBps']:6.0f} GB/s "
                          f"({run['GBps'] / copy:5.1%} of copy) err {errs[name]:.1e} "
                          f"peak +{peaks[name] / 2**20:.0f} MiB" + (f" host {run['host_us']:.0f} us/call" if run["host_us"] else ""),
                          flush=True)
            del x, t
            torch.cuda.empty_cache()
    result = dict(gpu=provenance.gpu_name(), date=provenance.today(), versions=provenance.versions(),
                  sources_sha256=provenance.sources_sha256(provenance.CROSS_ENTROPY_SOURCES), copy_GBps=copy, runs=runs)
    if a.out:
        a.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

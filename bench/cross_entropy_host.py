"""Where the host time of a cross-entropy call goes (docs/performance.md, "Open questions"): the
course's loss + gradient through autograd spends a few tenths of a millisecond of Python per call,
and on 1 GiB of logits its kernel takes about half a millisecond, so whether the GPU waits for the
host depends on both. This script measures, on the GPU at hand, bf16 logits of 1 GiB:

- host time per call of each piece (the target test's launch, the mean's divisor, an event, the
  forward, forward + backward with and without the target test, a trivial autograd.Function,
  eager F.cross_entropy), each queued behind a sleeping kernel so that Python's time is all there
  is;
- the latency of a whole call on an idle GPU, with the target test's wait (the host waits for the
  test, never for the kernel);
- the time per call as the benchmark takes it (triton's do_bench, medians of CUDA events) and in a
  loop of calls, checked against unchecked;
- the same after torch.compile(F.cross_entropy) and Liger have run in the process (as in
  bench/cross_entropy.py), and with Python's garbage collector off, then frozen;
- the CUDA backend's test of the targets (cuda/cross_entropy_targets.cu through CuPy, the verdict
  into a reused pinned int) beside the Triton twin's test it replaced on that backend (a Triton
  launch, a pinned allocation and a torch event a call), and the mean's count from the same kernel;
  and that kernel's GPU time for 4096, 65536 and 2^20 targets (the torch profiler).

  python bench/cross_entropy_host.py [--vocab 131072]
"""
from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, default=131072)
    a = ap.parse_args(argv)

    import numpy as np
    import torch
    import torch.nn.functional as F
    from triton.testing import do_bench

    from a07_softmax import cross_entropy as CE
    from a07_softmax import provenance

    print(provenance.header("bench/cross_entropy_host.py (host time of a cross-entropy call)",
                            provenance.CROSS_ENTROPY_SOURCES))
    vocab = a.vocab
    rows = 2**30 // (vocab * 2)
    g = torch.Generator(device="cuda").manual_seed(0)
    x = (torch.randn(rows, vocab, device="cuda", generator=g) * 4).to(torch.bfloat16)
    t = torch.randint(0, vocab, (rows,), device="cuda", generator=g)
    t[::17] = -100
    leaf = x.detach().requires_grad_(True)

    def call(checked, reduction="sum"):
        def fn():
            leaf.grad = None
            CE.cross_entropy(leaf, t, reduction=reduction, backend="cuda", check_targets=checked).backward()
        return fn

    calls = {"checked": call(True), "unchecked": call(False), "mean, checked": call(True, "mean")}

    class Nothing(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a.new_zeros(())

        @staticmethod
        def backward(ctx, grad):
            return None

    def trivial():
        leaf.grad = None
        Nothing.apply(leaf).backward()

    def eager():
        leaf.grad = None
        F.cross_entropy(leaf, t, reduction="sum").backward()

    def forward_only():
        with torch.no_grad():
            CE.cross_entropy(leaf, t, reduction="sum", backend="cuda", check_targets=False)

    pieces = {"target test (CUDA, as called)": lambda: CE._targets_on_device(t, vocab, -100, True, False),
              "target test + mean's count (CUDA)": lambda: CE._targets_on_device(t, vocab, -100, True, True),
              "target test (the Triton twin's)": lambda: CE._targets_checked(t, vocab, -100),
              "mean's divisor as tensor operations": lambda: (t != -100).sum(dtype=torch.float32).reciprocal(),
              "event": lambda: torch.cuda.Event().record(),
              "loss alone (no_grad)": forward_only,
              "loss + grad, unchecked": calls["unchecked"],
              "trivial autograd.Function": trivial, "eager F.cross_entropy": eager}

    def behind_sleep(fn, n=40):
        """Python's microseconds per call, the GPU kept busy by a sleeping kernel meanwhile."""
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        torch.cuda._sleep(3_000_000_000)
        start = time.perf_counter()
        for _ in range(n):
            fn()
        took = time.perf_counter() - start
        torch.cuda.synchronize()
        return took / n * 1e6

    def idle(fn, n=30):
        """Microseconds from the call to its return on an idle GPU (the target test's wait included)."""
        took = []
        for _ in range(n):
            torch.cuda.synchronize()
            start = time.perf_counter()
            fn()
            took.append(time.perf_counter() - start)
        torch.cuda.synchronize()
        return float(np.median(took)) * 1e6

    def loop_ms(fn, n=50):
        fn()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(n):
            fn()
        e.record()
        torch.cuda.synchronize()
        return s.elapsed_time(e) / n

    def report(when):
        print(f"== {when}", flush=True)
        for name, fn in pieces.items():
            print(f"  host {behind_sleep(fn):7.1f} us  {name}", flush=True)
        for name, fn in calls.items():
            bench = [do_bench(fn, warmup=25, rep=100, return_mode="median") for _ in range(3)]
            print(f"  {name:<10} idle call {idle(fn):7.1f} us, do_bench {' '.join(f'{m:.3f}' for m in bench)} ms, "
                  f"in a loop {loop_ms(fn):.3f} ms", flush=True)

    # the GPU's own time for the target test and count (one block walks every target), by the
    # number of targets: CUPTI's kernel records through the torch profiler, medians of 20 launches
    for n in (4096, 65536, 2**20):
        tn = torch.randint(0, 50000, (n,), device="cuda", generator=g)
        tn[::7] = -100
        CE._targets_on_device(tn, 50000, -100, True, True)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                CE._targets_on_device(tn, 50000, -100, True, True)
            torch.cuda.synchronize()
        us = sorted(e.device_time for e in prof.events() if "cross_entropy_targets" in e.name)
        print(f"  GPU {us[len(us) // 2] if us else float('nan'):7.1f} us  cross_entropy_targets over {n} targets "
              f"({len(us)} launches profiled)", flush=True)
    report("fresh process")
    compiled = torch.compile(lambda a_, b_: F.cross_entropy(a_, b_, reduction="sum"), dynamic=False)
    peers = [compiled]
    try:
        from liger_kernel.transformers.cross_entropy import LigerCrossEntropyLoss
        peers.append(LigerCrossEntropyLoss(reduction="sum"))
    except Exception as e:
        print(f"liger_kernel not available ({e}); only torch.compile ran")
    for _ in range(5):
        for peer in peers:
            leaf.grad = None
            peer(leaf, t).backward()
    torch.cuda.synchronize()
    report(f"after {len(peers)} peer(s) ran in the process ({len(gc.get_objects())} objects tracked by gc)")
    gc.disable()
    report("garbage collector off")
    gc.enable()
    gc.freeze()
    report("garbage collector frozen")
    return 0


if __name__ == "__main__":
    sys.exit(main())

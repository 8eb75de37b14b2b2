"""Lab 1 and Lab 2 driven from Python (CuPy RawModule), and `make run`.

lab1() and lab2() print the same tables as the standalone programs cuda/bin/softmax and
cuda/bin/fused_softmax, and return the rows so that notebooks can plot them. Without a GPU,
compile_only() compiles the sources through NVRTC and shows the committed H200 output.
"""
from __future__ import annotations


import numpy as np

from . import accuracy, reference
from .native import BLOCK, DEFAULT_ITEMS, LAB1_KERNELS
from .paths import ROOT

RESULTS = ROOT / "results"


def time_ms(fn, reps: int = 50, warmup_ms: float = 50.0) -> float:
    """Median of `reps` timings of fn() bracketed by CUDA/HIP events, after at least `warmup_ms` of
    untimed calls (the GPU raises its clocks over the first milliseconds of work)."""
    import cupy

    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    while True:
        fn()
        stop.record()
        stop.synchronize()
        if cupy.cuda.get_elapsed_time(start, stop) >= warmup_ms:
            break
    times = []
    for _ in range(reps):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop))
    return float(np.median(times))


def poisoned_like(x):
    """An output buffer full of NaN: an element the kernel forgets to write shows up."""
    import cupy

    return cupy.full(x.shape, cupy.nan, dtype=x.dtype)


def lab1(rows: int = 262144, cols: int = 1024, items: int = DEFAULT_ITEMS, seed: int = 0, verbose: bool = True):
    """The four Lab 1 kernels on a (rows, cols) fp32 tensor whose row 0 holds a 100.0."""
    import cupy

    from . import native

    rng = np.random.default_rng(seed)
    hx = rng.uniform(-4, 4, size=(rows, cols)).astype(np.float32)
    hx[0, cols // 2] = 100.0
    ref = reference.softmax(hx)
    x = cupy.asarray(hx)
    results = []
    if verbose:
        print(f"Lab 1 on {rows} x {cols} fp32 ({hx.nbytes / 2**20:.0f} MiB), row 0 poisoned with 100.0, ITEMS {items}")
        print(f"{'kernel':<22} {'trav':>5} {'median ms':>10} {'GB/s':>8} {'max rel err':>12}  verdict")
    for k in LAB1_KERNELS:
        trav = reference.traversals(k)
        if k == "softmax_online_1pass" and cols > BLOCK * items:
            if verbose:
                print(f"{k:<22} skipped: cols {cols} > BLOCK * ITEMS = {BLOCK * items}; raise ITEMS")
            continue
        out = poisoned_like(x)
        native.softmax(x, k, out=out, items=items)
        got = cupy.asnumpy(out)
        err = reference.max_rel_err(got, ref)
        ms = time_ms(lambda: native.softmax(x, k, out=out, items=items))
        gbps = trav * hx.nbytes / (ms * 1e-3) / 1e9
        ok = err <= accuracy.tolerance("float32")
        results.append(dict(kernel=k, traversals=trav, ms=ms, GBps=gbps, max_rel_err=err, passed=ok,
                            row0=got[0].copy()))
        if verbose:
            print(f"{k:<22} {trav:>5} {ms:>10.4f} {gbps:>8.0f} {err:>12.3g}  {'PASSED' if ok else 'FAILED'}")
    if verbose and results and results[0]["kernel"] == "softmax_naive_unsafe":
        r0 = results[0]["row0"]
        print(f"\nrow 0 of softmax_naive_unsafe: {int(np.isnan(r0).sum())} of {cols} outputs are NaN; "
              f"y[0..5] = {np.array2string(r0[:6], precision=3)}")
    return results


def lab2(batch_heads: int = 256, seq: int = 1024, items: int = DEFAULT_ITEMS, seed: int = 0, verbose: bool = True):
    """Scale -> causal mask -> softmax, unfused (3 kernels) against fused (1 kernel). The default is
    1 GiB of fp32 scores (the unfused path needs 4 GiB of GPU memory); pass fewer batch_heads on a
    smaller GPU."""
    import cupy

    from . import native

    rows, cols, scale = batch_heads * seq, seq, 0.125
    rng = np.random.default_rng(seed)
    hx = rng.uniform(-30, 30, size=(rows, cols)).astype(np.float32)
    lens = np.full(rows, cols, dtype=np.int32)
    lens[1] = 0  # a fully-masked row (padding length 0)
    lens[2] = 1  # a single valid key
    causal = reference.causal_mask(seq, cols)

    def max_err(got):  # float64 reference, a block of rows at a time (bounded host memory)
        err = 0.0
        for r0 in range(0, rows, seq):
            r = np.arange(r0, min(rows, r0 + seq))
            mask = causal[r % seq] + reference.padding_mask(lens[r], cols)
            err = max(err, reference.max_rel_err(got[r], reference.scale_mask_softmax(hx[r], scale, mask)))
        return err

    x, vl = cupy.asarray(hx), cupy.asarray(lens)
    results = []
    if verbose:
        print(f"Lab 2 on {batch_heads} x ({seq} x {seq}) fp32 scores ({hx.nbytes / 2**20:.0f} MiB), scale {scale}")
        print(f"{'path':<10} {'launches':>8} {'trav':>5} {'model GB':>8} {'median ms':>10} {'GB/s':>8} "
              f"{'max rel err':>12}  verdict")
    for fused, name, launches in ((False, "unfused", 3), (True, "fused", 1)):
        trav = reference.traversals(f"scale_mask_softmax_{name}")
        run = lambda out: native.scale_mask_softmax(x, scale, causal=True, valid_len=vl, q_len=seq, fused=fused,
                                                    out=out, items=items)
        out = poisoned_like(x)
        run(out)
        got = cupy.asnumpy(out)
        err = max_err(got)
        zeros = bool(np.all(got[1] == 0))
        del got
        ms = time_ms(lambda: run(out))
        gb = trav * hx.nbytes / 1e9
        ok = err <= accuracy.tolerance("float32") and zeros
        results.append(dict(path=name, launches=launches, traversals=trav, GB=gb, ms=ms, GBps=gb / (ms * 1e-3),
                            max_rel_err=err, passed=ok, masked_row_zeros=zeros))
        if verbose:
            print(f"{name:<10} {launches:>8} {trav:>5} {gb:>8.2f} {ms:>10.4f} {gb / (ms * 1e-3):>8.0f} {err:>12.3g}  "
                  f"{'PASSED' if ok else 'FAILED'}")
    if verbose:
        print(f"\nfused is {results[0]['ms'] / results[1]['ms']:.2f}x faster; traffic model: 7 / 2 = 3.50x")
        print("row 1 (no valid key) came back as zeros" if results[1]["masked_row_zeros"] else "row 1 is NOT zeros")
    return results


def compile_only(arch: str = "sm_90") -> bool:
    """No GPU: NVRTC-compile every CUDA source and print registers and spills per kernel. False,
    with the reason, where NVRTC is not installed."""
    from . import backend, native

    if backend.detect().nvrtc is None:
        print("cannot compile here: " + backend.detect().reasons.get("nvrtc", "NVRTC is not installed"))
        return False
    ok_all = True
    for res in native.compile_report(arch):
        ok_all &= res.ok
        print(f"{res.source}: {'compiled' if res.ok else 'FAILED'} for {arch} with NVRTC")
        if not res.ok:
            print(res.log)
        for k in res.kernels:
            print(f"  {k.name:<28} {k.registers:>3} registers, {k.spill_stores} B spill stores, "
                  f"{k.spill_loads} B spill loads, {k.stack_bytes} B stack")
    return ok_all


def committed(name: str, gpu: str = "nvidia-h200") -> str | None:
    p = RESULTS / gpu / name
    return p.read_text() if p.exists() else None


def run_all(which: str = "all") -> int:
    """a07 run: the doctor, then every lab (or only `which`: "native" for Lab 1 and 2, "triton" for
    Lab 3) on the best backend found."""
    import os
    import subprocess
    import sys

    from . import backend

    backend.doctor()
    b = backend.detect()
    status = 0
    if which in ("all", "native"):
        print("\n== Lab 1 and Lab 2 (CUDA/HIP sources through CuPy RawModule)")
        if b.native:
            ok1 = all(r["passed"] == (r["kernel"] != "softmax_naive_unsafe") for r in lab1())
            print()
            ok2 = all(r["passed"] for r in lab2())
            status |= 0 if ok1 and ok2 else 1
        elif b.nvrtc:
            print("No GPU: compile-only.")
            status |= 0 if compile_only() else 1
            text = committed("run-cuda.txt")
            if text:
                print("\nWhat these programs print on an H200 (results/nvidia-h200/run-cuda.txt, a committed run):")
                print(text)
        else:
            print("No GPU and no NVRTC: Lab 1 and Lab 2 cannot run or compile here (see the doctor above).")
    if which in ("all", "triton"):
        print("\n== Lab 3 (Triton)")
        if not b.triton_installed or b.torch_version is None:
            print("triton or torch is not installed here: Lab 3 cannot run (the doctor above says why); "
                  "notebook 06 shows its committed outputs.")
            return status
        env = dict(os.environ)
        if not b.triton_gpu:
            env["TRITON_INTERPRET"] = "1"
        status |= subprocess.call([sys.executable, "-m", "a07_softmax.triton_softmax"], env=env)
    return status

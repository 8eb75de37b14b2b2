"""The benchmark (make bench): every course kernel and its peers, timed in one run on one GPU.

  a07 bench [--quick] [--out DIR] [--cols N ...]

- the ceiling: a device-to-device copy measured in the same run (bytes read + written);
- every implementation over fp32 and bf16, cols 128 ... 262144 (powers of two and a few odd
  sizes), rows x cols = 2^28 elements (1 GiB of fp32, many times the 60 MB L2);
- warm-up, then the median of CUDA-event timings (triton.testing.do_bench, median);
- the fast softmax and its two peers (torch.softmax, the Triton row kernel) are timed in ROUNDS
  interleaved rounds, each round in a rotated order, and each gets the median of its rounds; the
  rounds are kept (`ms_rounds`): one result is called faster only when all its rounds beat all
  of the other's, otherwise it is a tie (a07_softmax/results.py, fast_margins);
- every timed output checked against a float64 reference computed on the GPU;
- results/<gpu-slug>/bench.json plus PNG plots beside it.

GBps_min_bytes always counts one read and one write of the tensor, so implementations are compared
on the work they must do, whatever extra traffic they make; `traversals` is the traffic model's
count of what each one actually moves.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from . import accuracy, constants, provenance, reference
from .paths import ROOT

TOTAL = 2**28
COLS = [128, 256, 512, 1000, 1024, 2048, 3000, 4096, 8192, 16384, 32768, 65536, 131072, 262144]
QUICK_COLS = [128, 1024, 8192, 65536, 262144]
ROUNDS = 3  # interleaved timing rounds for the fast softmax and its peers
MASK_COLS = {128, 512, 1024, 2048, 4096, 8192}  # S for (batch*heads, S, S) attention scores

# implementation -> traversals in the traffic model (what it really moves)
# impl -> the traffic-model variant it is (reference.TRAFFIC holds the reads and writes)
MODEL = {
    **{f"cuda.{name}": name for name, _, _ in constants.LAB1_KERNELS_TRAFFIC + constants.LAB2_PATHS_TRAFFIC},
    "cuda.softmax_fast": "softmax_fast",
    "triton.softmax": "softmax_online_1pass", "triton.softmax_online": "softmax_online_2pass",
    "triton.log_softmax": "log_softmax", "triton.scale_mask_softmax": "scale_mask_softmax_fused",
    "torch.softmax": "softmax_online_1pass", "torch.log_softmax": "log_softmax",
    "torch.scale_mask_softmax": "scale_mask_softmax_torch", "torch.compile.scale_mask_softmax": "scale_mask_softmax_fused",
}
TRAVERSALS = {impl: reference.traversals(variant) for impl, variant in MODEL.items()}


def gbps(nbytes: float, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9


def interleaved(fns: dict, rounds: int, time) -> dict:
    """{name: [time of round 1, round 2, ...]}. Every round times every function once; round r
    starts r places further along the list, so no implementation is always timed first or last and
    a drift during the run (clocks, temperature) falls on all of them alike."""
    names = list(fns)
    out = {n: [] for n in names}
    for r in range(rounds):
        k = r % len(names)
        for n in names[k:] + names[:k]:
            out[n].append(time(fns[n]))
    return out


class Bench:
    def __init__(self, quick: bool):
        import torch
        import triton
        from triton.testing import do_bench

        self.torch, self.triton, self.do_bench = torch, triton, do_bench
        self.quick = quick
        self.runs = []

    def time(self, fn) -> float:
        """Median of CUDA-event timings after 25 ms of warm-up: at 2^28 elements one call takes
        0.1-10 ms, so 100 ms of repetitions is 10 to 1000 samples."""
        return float(self.do_bench(fn, warmup=25, rep=100, return_mode="median"))

    def copy_ceiling(self) -> float:
        torch = self.torch
        src = torch.randn(TOTAL, device="cuda")
        dst = torch.empty_like(src)
        ms = self.time(lambda: dst.copy_(src))
        del src, dst
        return gbps(2 * TOTAL * 4, ms)

    def copy_hinted(self) -> float | None:
        """The copy again, with the fast kernels' L2 hint on its loads (softmax_fast.cu's copy_hinted):
        the control for a kernel that runs faster than the plain copy. None where the fast kernels
        do not launch (no CuPy)."""
        import numpy as np

        torch = self.torch
        try:
            from . import fast, native

            copy = fast.kernel("copy_hinted")
        except Exception as e:  # no CuPy / NVRTC: said, not hidden
            print(f"hinted copy not measured ({e})")
            return None
        src = torch.randn(TOTAL, device="cuda")
        dst = torch.empty_like(src)
        blocks = torch.cuda.get_device_properties(src.device).multi_processor_count * 8
        args = (np.uint64(native.pointer(src)), np.uint64(native.pointer(dst)), np.int64(TOTAL * 4 // 16))

        def run():
            with native.launch_context(src):
                copy((blocks,), (256,), args)
        run()
        assert torch.equal(src, dst), "the hinted copy did not copy"
        ms = self.time(run)
        del src, dst
        return gbps(2 * TOTAL * 4, ms)

    def check(self, fn, out, ref64, log: bool = False) -> float:
        """Run fn once on a poisoned output; its max relative error against float64 (accuracy.py)."""
        out.fill_(float("nan"))
        fn()
        self.torch.cuda.synchronize()
        return accuracy.max_rel_err(out, ref64, log=log)

    def add(self, impl, op, x, ms, err, tol, **extra):
        """Append a run."""
        nbytes = 2 * x.numel() * x.element_size()
        run = dict(impl=impl, op=op, dtype=str(x.dtype).replace("torch.", ""), rows=x.shape[0], cols=x.shape[1],
                   ms=ms, GBps_min_bytes=gbps(nbytes, ms), traversals=TRAVERSALS[impl], max_rel_err=err,
                   passed=bool(err <= tol), **extra)
        self.runs.append(run)
        return run

    def record(self, impl, op, x, fn, out, ref64, tol):
        """Check once on a poisoned output, then time; append a run."""
        err = self.check(fn, out, ref64)
        return self.add(impl, op, x, self.time(fn), err, tol)

    def compare(self, op, x, entries, ref64, tol):
        """entries: [(impl, fn, output)], output the array fn writes or a function returning it.
        Check each once, then time them in ROUNDS interleaved rounds; append one run each, its ms
        the median of its rounds."""
        errs = {}
        for impl, fn, out in entries:
            if callable(out):  # an op that allocates its own output: check what it returns
                fn()
                errs[impl] = accuracy.max_rel_err(out(), ref64)
            else:
                errs[impl] = self.check(fn, out, ref64)
        rounds = interleaved({impl: fn for impl, fn, _ in entries}, ROUNDS, self.time)
        for impl, _, _ in entries:
            self.add(impl, op, x, float(np.median(rounds[impl])), errs[impl], tol, ms_rounds=rounds[impl])


def run_softmax_family(b: Bench, dtype, cols: int, progress):
    """softmax and log_softmax implementations at one shape."""
    import torch

    from . import fast, native
    from . import triton_softmax as T

    rows = TOTAL // cols
    x = (torch.randn(rows, cols, device="cuda") * 4).to(dtype)
    x64 = x.double()
    ref = torch.softmax(x64, -1)
    tol = accuracy.tolerance(dtype)
    out = torch.empty_like(x)
    res = {}  # torch ops allocate their output: time the op itself and check what it returns

    def torch_softmax():
        res["y"] = torch.softmax(x, -1)

    b_out = out
    # the fast softmax and its peers: interleaved rounds (see compare)
    peers = [("torch.softmax", torch_softmax, lambda: res["y"])]
    if cols <= T.MAX_ROW_COLS:
        peers.append(("triton.softmax", lambda: T.softmax(x, out=b_out), b_out))
    peers.append(("cuda.softmax_fast", lambda: fast.softmax(x, out=b_out), b_out))
    b.compare("softmax", x, peers, ref, tol)
    progress(3)
    b.record("triton.softmax_online", "softmax", x, lambda: T.softmax_online(x, out=b_out), b_out, ref, tol)
    progress()
    if dtype == torch.float32:
        for k in native.LAB1_KERNELS:
            items = native.DEFAULT_ITEMS
            if k in native.ROW_IN_REGISTERS:
                items = native.items_for(cols)
                if items is None:
                    continue
            # logits here stay below 88.7, so even the naive kernel must be right
            b.record(f"cuda.{k}", "softmax", x, lambda k=k, items=items: native.softmax(x, k, out=b_out, items=items),
                     b_out, ref, tol)
            progress()
    # log_softmax
    lref = torch.log_softmax(x64, -1)

    def torch_log_softmax():
        res["y"] = torch.log_softmax(x, -1)

    torch_log_softmax()
    lerr = accuracy.max_rel_err(res["y"], lref, log=True)
    b.add("torch.log_softmax", "log_softmax", x, b.time(torch_log_softmax), lerr, tol)
    if cols <= T.MAX_ROW_COLS:
        lerr = b.check(lambda: T.log_softmax(x, out=b_out), b_out, lref, log=True)
        b.add("triton.log_softmax", "log_softmax", x, b.time(lambda: T.log_softmax(x, out=b_out)), lerr, tol)
    progress()
    del x, x64, ref, lref, out, res


def run_scale_mask_family(b: Bench, dtype, cols: int, progress):
    """softmax(x * scale + causal mask) on (batch*heads, S, S) scores."""
    import torch

    from . import native
    from . import triton_softmax as T

    rows = TOTAL // cols
    q_len = min(cols, rows)
    scale = 1 / math.sqrt(128)
    x = (torch.randn(rows, cols, device="cuda") * 8).to(dtype)
    mask = torch.triu(torch.full((q_len, cols), float("-inf"), device="cuda"), 1)
    ref = torch.softmax(x.double().view(-1, q_len, cols) * scale + mask.double(), -1).view(rows, cols)
    tol = accuracy.tolerance(dtype)
    out = torch.empty_like(x)

    def eager():
        return torch.softmax(x.view(-1, q_len, cols) * scale + mask, -1).view(rows, cols)

    # Every shape gets a fresh compile: without the reset, dynamo stops recompiling after its cache
    # limit (8 shapes) and silently runs the eager code, which would be timed as "torch.compile".
    torch._dynamo.reset()
    compiled = torch.compile(eager, dynamic=False)
    for impl, fn in (("torch.scale_mask_softmax", eager), ("torch.compile.scale_mask_softmax", compiled)):
        y = fn()
        err = accuracy.max_rel_err(y.to(dtype), ref)
        b.add(impl, "scale_mask_softmax", x, b.time(fn), err, tol)
        progress()
    b.record("triton.scale_mask_softmax", "scale_mask_softmax", x,
             lambda: T.scale_mask_softmax(x, scale, causal=True, q_len=q_len, out=out), out, ref, tol)
    progress()
    if dtype == torch.float32:
        items = native.items_for(cols)
        for fused in (False, True):
            if fused and items is None:
                continue
            name = "cuda.scale_mask_softmax_" + ("fused" if fused else "unfused")
            b.record(name, "scale_mask_softmax", x,
                     lambda fused=fused: native.scale_mask_softmax(x, scale, causal=True, q_len=q_len, fused=fused,
                                                                   out=out, items=items or native.DEFAULT_ITEMS), out, ref, tol)
            progress()
    del x, ref, out, mask


def plots(result: dict, out_dir: Path):
    """GB/s against cols with the copy ceiling; measured time ratios against the traffic model;
    fused against unfused. PNG files beside bench.json."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from . import results

    runs = result["runs"]
    title = results.label(result)
    written = []
    for dtype in ("float32", "bfloat16"):
        fig, ax = plt.subplots(figsize=(10, 6))
        results.plot_gbps(result, "softmax", dtype, ax=ax)
        f = out_dir / f"softmax_gbps_{dtype}.png"
        fig.tight_layout()
        fig.savefig(f, dpi=110)
        plt.close(fig)
        written.append(f.name)

    lab1 = ["cuda.softmax_naive_unsafe", "cuda.softmax_safe_3pass", "cuda.softmax_online_2pass", "cuda.softmax_online_1pass"]
    by = {(r["impl"], r["cols"]): r for r in runs if r["dtype"] == "float32" and r["op"] == "softmax"}
    cols_all = sorted({c for (i, c) in by if i == lab1[0] and all((k, c) in by for k in lab1)})
    if cols_all:
        fig, ax = plt.subplots(figsize=(10, 5))
        w = 0.8 / (len(lab1) + 1)
        for j, k in enumerate(lab1):
            ratios = [by[(k, c)]["ms"] / by[(lab1[0], c)]["ms"] for c in cols_all]
            ax.bar(np.arange(len(cols_all)) + j * w, ratios, w, label=f"{k.split('.')[1]} measured")
            xs = np.arange(len(cols_all)) + j * w
            ax.hlines([TRAVERSALS[k] / TRAVERSALS[lab1[0]]] * len(xs), xs - w / 2, xs + w / 2, colors="k")
        ax.set_xticks(np.arange(len(cols_all)) + 1.5 * w, [str(c) for c in cols_all])
        ax.set_xlabel("cols")
        ax.set_ylabel("time / time of naive (black ticks: traffic model)")
        ax.set_title(f"Lab 1: measured time ratio against the traversal ratio, fp32\n{title}", fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
        f = out_dir / "lab1_time_ratio_vs_model.png"
        fig.tight_layout()
        fig.savefig(f, dpi=110)
        plt.close(fig)
        written.append(f.name)

    if any(r["impl"] == "cuda.softmax_fast" for r in runs):
        fig = results.plot_fast(result)
        f = out_dir / "fast_softmax.png"
        fig.savefig(f, dpi=110)
        plt.close(fig)
        written.append(f.name)

    fig, ax = plt.subplots(figsize=(10, 5))
    results.plot_gbps(result, "scale_mask_softmax", "float32", ax=ax)
    ax.set_xlabel("S (scores are (batch*heads, S, S), causal)")
    f = out_dir / "fused_vs_unfused.png"
    fig.tight_layout()
    fig.savefig(f, dpi=110)
    plt.close(fig)
    written.append(f.name)
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer shapes and shorter timings")
    ap.add_argument("--out", type=Path, default=None, help="folder (default results/<gpu-slug>)")
    ap.add_argument("--cols", type=int, nargs="*", default=None)
    args = ap.parse_args(argv)
    from . import backend

    if not backend.detect().triton_gpu:
        print("a07 bench: no GPU here (or triton/torch cannot use it), nothing to time. The committed "
              "results are in results/ (notebook 07 plots them); run it on a machine with a GPU.")
        return 1
    import torch

    b = Bench(args.quick)
    cols_list = args.cols or (QUICK_COLS if args.quick else COLS)
    name = provenance.gpu_name()
    out_dir = args.out or ROOT / "results" / provenance.slug(name)
    out_dir.mkdir(parents=True, exist_ok=True)
    copy = b.copy_ceiling()
    hinted = b.copy_hinted()
    peak = provenance.dram_peak_gbps()
    print(f"{name}: device-to-device copy {copy:.0f} GB/s"
          + (f", with the fast kernels' L2 hint {hinted:.0f} GB/s" if hinted else "")
          + (f"; DRAM peak from clock x bus width {peak:.0f} GB/s" if peak else ""))
    total_steps = len(cols_list) * 2 * 11 + sum(1 for c in cols_list if c in MASK_COLS) * 2 * 5
    done = [0]

    def step(n=1):
        done[0] += n
        print(f"\rbench: {done[0]}/{total_steps} runs", end="", flush=True)

    for dtype in (torch.float32, torch.bfloat16):
        for cols in cols_list:
            run_softmax_family(b, dtype, cols, step)
            if cols in MASK_COLS:
                run_scale_mask_family(b, dtype, cols, step)
            torch.cuda.empty_cache()
    print()
    result = dict(gpu=name, date=provenance.today(), versions=provenance.versions(),
                  sources_sha256=provenance.sources_sha256(), copy_GBps=copy, copy_hinted_GBps=hinted,
                  dram_peak_GBps=peak, total_elements=TOTAL, runs=b.runs)
    (out_dir / "bench.json").write_text(json.dumps(result, indent=1))
    written = plots(result, out_dir)
    print(f"wrote {out_dir / 'bench.json'} and {', '.join(written)}")
    summary(result)
    # every output is checked against float64; a course kernel that misses fails the run, a peer
    # (torch.*) that misses is reported and recorded, not hidden
    failed = [r for r in b.runs if not r["passed"]]
    for r in failed:
        who = "peer, reported" if r["impl"].startswith("torch.") else "course kernel"
        print(f"CHECK FAILED ({who}): {r['impl']} {r['dtype']} {r['rows']}x{r['cols']} "
              f"max rel err {r['max_rel_err']:.3g}")
    return 1 if any(not r["impl"].startswith("torch.") for r in failed) else 0


def summary(result: dict, file=sys.stdout):
    """A compact table: GB/s per implementation and cols, fp32 and bf16."""
    runs = result["runs"]
    for dtype in ("float32", "bfloat16"):
        for op in ("softmax", "scale_mask_softmax", "log_softmax"):
            rs = [r for r in runs if r["dtype"] == dtype and r["op"] == op]
            if not rs:
                continue
            cols = sorted({r["cols"] for r in rs})
            impls = sorted({r["impl"] for r in rs})
            print(f"\n{op} {dtype}: GB/s (1R+1W), copy ceiling {result['copy_GBps']:.0f}", file=file)
            print(f"{'impl':<34}" + "".join(f"{c:>8}" for c in cols), file=file)
            for i in impls:
                row = {r["cols"]: r["GBps_min_bytes"] for r in rs if r["impl"] == i}
                print(f"{i:<34}" + "".join(f"{row[c]:>8.0f}" if c in row else f"{'-':>8}" for c in cols), file=file)


if __name__ == "__main__":
    raise SystemExit(main())

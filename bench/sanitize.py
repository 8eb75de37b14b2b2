"""compute-sanitizer over every kernel the course ships: each fast-softmax template instance that
softmax() can launch (fast.instances(): every strategy, dtype, aligned and misaligned, clusters of
16, of 8 and none), the same for the fused operations (scale + mask + softmax, the same unmasked,
cross-entropy with and without its gradient, and its backward's scale), the Lab 1 and Lab 2 kernels, and the Triton kernels, each launched on a small
input with tails. memcheck (out-of-bounds and misaligned accesses), racecheck (shared-memory
hazards) and synccheck (barriers not every thread reaches) each run the whole set in one process;
the summary records the tool's version, the instances and the error count, with the provenance
header that makes it stale when a source changes (tests/test_results.py).

  python bench/sanitize.py [--out results/nvidia-h200/sanitizer.txt]   # on an NVIDIA GPU
  python bench/sanitize.py --launch                                    # the launches alone
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

TOOLS = ("memcheck", "racecheck", "synccheck")


def launch_all() -> list:
    """Launch every kernel once on small inputs; return their names (printed one per line)."""
    import torch

    from a07_softmax import fast, native
    from a07_softmax import triton_softmax as T

    g = torch.Generator(device="cuda").manual_seed(0)
    launched = []

    def rows(shape, dtype, aligned=True):
        n = shape[0] * shape[1]
        flat = torch.randn(n + 8, device="cuda", generator=g).mul_(8).to(getattr(torch, dtype))
        return flat[:n].view(shape) if aligned else flat[1:n + 1].view(shape)

    # the fast softmax: every instance fast.instances() lists (what softmax() can reach), launched
    # through softmax() itself so that the launcher's arguments are what the sanitizer sees
    seen = set()
    for dt in fast.DTYPES:
        n = fast.VEC_BYTES // fast.DTYPES[dt][1]
        for cols in fast.PLANNED_COLS:
            for aligned in (True, False):
                for clusters in (fast.MAX_CLUSTER, fast.PORTABLE_CLUSTER, 0):
                    p = fast.plan(cols, dt, 3, aligned=aligned and cols % n == 0, clusters=clusters)
                    if p.kernel in seen:
                        continue
                    seen.add(p.kernel)
                    x = rows((3, cols), dt, aligned=aligned)
                    fast.softmax(x, clusters=clusters)
                    torch.cuda.synchronize()
                    launched.append(p.kernel)
    # the fused operations on the same bodies: every instance their plans can pick, with every mask
    # kind (scale + mask) and ignored rows, label smoothing and z-loss (cross-entropy)
    from a07_softmax import cross_entropy as CE

    for op in ("scale_mask_softmax", "scale_span_softmax", "scaled_softmax", "cross_entropy", "cross_entropy_loss"):
        for dt in fast.DTYPES:
            n = fast.VEC_BYTES // fast.DTYPES[dt][1]
            for cols in fast.PLANNED_COLS:
                for aligned in (True, False):
                    for clusters in (fast.MAX_CLUSTER, fast.PORTABLE_CLUSTER, 0):
                        p = fast.plan(cols, dt, 4, aligned=aligned and cols % n == 0, clusters=clusters, op=op)
                        if p.kernel in seen:
                            continue
                        seen.add(p.kernel)
                        x = rows((4, cols), dt, aligned=aligned)
                        if op == "scale_mask_softmax":
                            lens = torch.tensor([0, 1, cols, max(0, cols - 3)], dtype=torch.int32, device="cuda")
                            add = torch.zeros(4, cols, device="cuda", dtype=x.dtype)
                            fast.scale_mask_softmax(x, 0.5, causal=True, window=5, valid_len=lens, mask=add,
                                                    clusters=clusters)
                        elif op == "scale_span_softmax":  # the mask from indices alone, no tensor
                            lens = torch.tensor([0, 1, cols, max(0, cols - 3)], dtype=torch.int32, device="cuda")
                            fast.scale_mask_softmax(x, 0.5, causal=True, window=5, valid_len=lens, clusters=clusters)
                        elif op == "scaled_softmax":  # scale_mask_softmax with nothing masked
                            fast.scale_mask_softmax(x, 0.5, clusters=clusters)
                        else:
                            t = torch.tensor([0, -100, cols - 1, cols // 2], device="cuda")
                            grad = torch.empty_like(x) if op == "cross_entropy" else None
                            CE._launch_cuda(x, t, -100, "mean", 0.1, 1e-4, grad, override={"clusters": clusters})
                        torch.cuda.synchronize()
                        launched.append(p.kernel)
    # cross-entropy's backward on the CUDA path (scale_rows_fast): an upstream gradient of 1 (the
    # kernel returns at once), a scalar, and one a row
    for dt in fast.DTYPES:
        x = rows((5, 1001), dt).clone().requires_grad_(True)
        t = torch.tensor([0, -100, 1000, 3, 7], device="cuda")
        for reduction, upstream in (("mean", None), ("mean", torch.tensor(0.5, device="cuda")),
                                    ("none", torch.arange(5.0, device="cuda"))):
            x.grad = None
            CE.cross_entropy(x, t, reduction=reduction).backward(upstream)
            torch.cuda.synchronize()
        launched.append(f"scale_rows_fast<{fast.DTYPES[dt][0]}>")
    # its test and count of the targets (cuda/cross_entropy_targets.cu): a bad target last, past a
    # whole round of the block's walk
    t = torch.randint(0, 50, (9001,), device="cuda", generator=g)
    t[::7] = -100
    t[-1] = 50
    CE._targets_on_device(t, 50, -100, True, True)
    torch.cuda.synchronize()
    launched.append("cross_entropy_targets")
    # Lab 1 and Lab 2
    for cols in (1000, 1025, 4099):
        x = rows((5, cols), "float32")
        for k in native.LAB1_KERNELS:
            native.softmax(x, k, items=native.items_for(cols))
            launched.append(f"{k} (cols {cols})")
        lens = torch.tensor([0, 1, cols, 7, cols - 3], dtype=torch.int32, device="cuda")
        for fused in (True, False):
            native.scale_mask_softmax(x, 0.5, causal=True, window=5, valid_len=lens, q_len=5, fused=fused,
                                      items=native.items_for(cols))
            launched.append(f"scale_mask_softmax {'fused' if fused else 'unfused (3 kernels)'} (cols {cols})")
    torch.cuda.synchronize()
    # Triton
    for dt in ("float32", "bfloat16"):
        for cols in (1000, 70001):
            x = rows((5, cols), dt)
            if cols <= T.MAX_ROW_COLS:
                T.softmax(x)
                T.log_softmax(x)
                T.scale_mask_softmax(x, 0.5, mask=torch.zeros(cols, device="cuda", dtype=x.dtype), causal=True)
                launched += [f"triton softmax_kernel {dt} (cols {cols})", f"triton scale_mask_softmax_kernel {dt} (cols {cols})"]
            T.softmax_online(x)
            launched.append(f"triton softmax_online_kernel {dt} (cols {cols})")
    torch.cuda.synchronize()
    return launched


def run_tool(tool: str, logs: str | None = None) -> tuple:
    """(tool, error count or None, launches, findings, finished) for one sanitizer pass over
    launch_all(); the full output goes to logs/<tool>.log when asked."""
    # --report-api-errors no: the errors counted are the kernels'. cuda-bindings probes the driver's
    # entry points through cuGetProcAddress, and memcheck would count each failed probe as an error
    cmd = ["compute-sanitizer", f"--tool={tool}", "--report-api-errors", "no", "--error-exitcode=0",
           sys.executable, __file__, "--launch"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    text = p.stdout + p.stderr
    if logs:
        Path(logs, f"{tool}.log").write_text(text)
    m = re.search(r"(?:ERROR SUMMARY: |RACECHECK SUMMARY: \d+ hazards displayed \()(\d+) error", text)
    launched = [line[len("launched: "):] for line in p.stdout.splitlines() if line.startswith("launched: ")]
    complete = "done" in p.stdout.splitlines()
    return tool, int(m.group(1)) if m else None, launched, findings(text) or text[-3000:], complete


def findings(text: str) -> str:
    """Each distinct error the tool reported, with the kernel it was in and how often."""
    from collections import Counter

    seen, what = Counter(), None
    for line in text.splitlines():
        body = line.removeprefix("========= ").strip()
        if not line.startswith("========= ") or not body:
            continue
        if body.startswith("at ") and what:
            seen[(what, re.sub(r"\+0x[0-9a-f]+.*", "", body[3:]))] += 1
            what = None
        elif not body.startswith(("at ", "by ", "Saved host", "Host Frame", "Device Frame", "ERROR SUMMARY",
                                  "COMPUTE-SANITIZER", "Program hit", "Address", "Access", "Thread", "is ",
                                  "and is", "Cuda", "Target")):
            what = body
    return "\n".join(f"{n} x {w} in {k}" for (w, k), n in seen.most_common(40))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--launch", action="store_true", help="only launch every kernel (what the sanitizer watches)")
    ap.add_argument("--out", help="write the summary here (default: print it)")
    ap.add_argument("--tools", default=",".join(TOOLS), help=f"comma-separated, default {','.join(TOOLS)}")
    ap.add_argument("--logs", help="a folder for each tool's full output")
    args = ap.parse_args(argv)
    if args.launch:
        for name in launch_all():
            print(f"launched: {name}", flush=True)
        print("done", flush=True)
        return 0
    from a07_softmax import provenance

    version = subprocess.run(["compute-sanitizer", "--version"], capture_output=True, text=True).stdout.strip()
    tools = args.tools.split(",")
    with ThreadPoolExecutor(len(tools)) as pool:  # the processes share the GPU: about a third of the time
        runs = list(pool.map(lambda t: run_tool(t, args.logs), tools))
    lines = [provenance.header("bench/sanitize.py (compute-sanitizer over every kernel the course ships)"),
             f"compute-sanitizer: {version.splitlines()[-1] if version else 'not found'}"]
    ok = True
    for tool, errors, launched, tail, complete in runs:
        ok &= errors == 0 and complete
        lines.append(f"{tool}: {errors if errors is not None else 'no summary'} errors over {len(launched)} launches"
                     f"{'' if complete else ' (INCOMPLETE: the launches did not finish)'}")
        if errors or not complete:
            lines.append("  " + tail.replace("\n", "\n  "))
    lines.append("launched:")
    lines += [f"  {name}" for name in runs[0][2]]
    text = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""DRAM bytes each kernel really moves, measured by Nsight Compute, against the traffic model.

The traffic model (reference.TRAFFIC) counts how many times a kernel's code touches the tensor:
the three-pass softmax reads its row three times. DRAM does not have to see all of it: a row that
is re-read while it still sits in the 60 MB L2 comes from L2. This script measures the DRAM side:
every case is launched once on a tensor of 2^26 elements (256 MB of fp32, four times the L2) under
`ncu --cache-control all` (caches flushed before each kernel), and the sums of
dram__bytes_read and dram__bytes_write are divided by the tensor's bytes: measured traversals.
A copy kernel (1 read + 1 write) is measured the same way as the control.

  python bench/traffic.py [--out results/nvidia-h200/traffic.txt]   # on an NVIDIA GPU, with ncu
  python bench/traffic.py --launch                                  # the launches alone

The summary is one line per case (case, dtype, rows, cols, model traversals, DRAM read and written
in bytes, measured traversals) under the provenance header (tests/test_results.py keeps it fresh;
a07_softmax.results.load_traffic reads it).
"""
from __future__ import annotations

import argparse
import csv
import io
import math
import subprocess
import sys
from pathlib import Path

ELEMENTS = 2**26
SCALE = 1 / math.sqrt(128)
# (case, dtype, cols, model variant in reference.TRAFFIC)
CASES = [("copy", "float32", 8192, "copy")]
CASES += [(f"cuda.{k}", "float32", c, k) for k in ("softmax_safe_3pass", "softmax_online_2pass") for c in (1024, 8192, 65536)]
CASES += [("cuda.softmax_online_1pass", "float32", c, "softmax_online_1pass") for c in (1024, 8192)]  # row in registers
CASES += [(f"cuda.scale_mask_softmax_{v}", "float32", c, f"scale_mask_softmax_{v}") for v in ("unfused", "fused")
          for c in (1024, 8192)]
CASES += [(impl, dt, c, v) for impl, v in (("cuda.softmax_fast", "softmax_fast"), ("torch.softmax", "softmax_online_1pass"))
          for dt in ("float32", "bfloat16") for c in (1024, 8192, 65536, 262144)]
CASES += [("triton.softmax", "float32", c, "softmax_online_1pass") for c in (1024, 8192)]
CASES += [("triton.softmax_online", "float32", c, "softmax_online_2pass") for c in (1024, 65536)]
# the fused operations of the fast family: a causal row reads up to its diagonal (half the scores);
# cross-entropy reads the logits once and writes the gradient once
CASES += [("cuda.scale_mask_softmax_fast", dt, c, "scale_mask_softmax_fast_causal") for dt in ("float32", "bfloat16")
          for c in (1024, 8192)]
CASES += [("cuda.cross_entropy_fast", dt, 131072, "cross_entropy_fast") for dt in ("float32", "bfloat16")]


def case_name(impl, dtype, cols) -> str:
    return f"{impl}|{dtype}|{cols}"


def launch_all(cases=CASES) -> list:
    """Launch every case once inside an NVTX range named after it (ncu renames its kernels by it)."""
    import torch

    from a07_softmax import cross_entropy as CE
    from a07_softmax import fast, native
    from a07_softmax import triton_softmax as T

    g = torch.Generator(device="cuda").manual_seed(0)
    done = []
    for impl, dtype, cols, _ in cases:
        rows = ELEMENTS // cols
        x = (torch.randn(rows, cols, device="cuda", generator=g) * 4).to(getattr(torch, dtype))
        out = torch.empty_like(x)
        q_len = min(cols, rows)
        target = torch.randint(0, cols, (rows,), device="cuda", generator=g)
        # the row-in-registers kernels need ITEMS that hold the row; the others stream it
        items = native.items_for(cols) if impl[5:] in native.ROW_IN_REGISTERS else native.DEFAULT_ITEMS
        run = {
            "copy": lambda: torch.neg(x, out=out),
            "cuda.softmax_fast": lambda: fast.softmax(x, out=out),
            "torch.softmax": lambda: torch.softmax(x, -1),
            "triton.softmax": lambda: T.softmax(x, out=out),
            "triton.softmax_online": lambda: T.softmax_online(x, out=out),
            "cuda.scale_mask_softmax_fast": lambda: fast.scale_mask_softmax(x, SCALE, causal=True, q_len=q_len, out=out),
            "cuda.cross_entropy_fast": lambda: CE._launch_cuda(x, target, -100, "sum", 0.0, 0.0, out),
            "cuda.scale_mask_softmax_fused": lambda: native.scale_mask_softmax(
                x, SCALE, causal=True, q_len=q_len, fused=True, out=out, items=items),
            "cuda.scale_mask_softmax_unfused": lambda: native.scale_mask_softmax(
                x, SCALE, causal=True, q_len=q_len, fused=False, out=out, items=items),
        }.get(impl) or (lambda k=impl[5:]: native.softmax(x, k, out=out, items=items))
        run()  # compile and warm up outside the range
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(case_name(impl, dtype, cols))
        run()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
        done.append(case_name(impl, dtype, cols))
        del x, out
    return done


def measure(ncu: str = "ncu", raw: Path | None = None) -> dict:
    """{case: (bytes read, bytes written, kernels)} from one ncu run over launch_all(): the kernels
    inside a case's NVTX range carry its name (input set-up and warm-up kernels keep theirs and are
    left out)."""
    cmd = [ncu, "--nvtx", "--print-nvtx-rename", "kernel",
           "--cache-control", "all", "--metrics", "dram__bytes_read.sum,dram__bytes_write.sum",
           "--csv", "--page", "raw", sys.executable, __file__, "--launch"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if raw:
        raw.write_text(p.stdout + "\n# stderr\n" + p.stderr)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith('"')]
    if p.returncode or not lines:
        raise RuntimeError(f"ncu failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
    units = rows[0]
    out = {}
    for r in rows[1:]:
        name = r["Kernel Name"].split("/")[0]  # "<range>/<kernel>" for kernels inside a range
        if "|" not in name:
            continue
        scale = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}
        rd = float(r["dram__bytes_read.sum"].replace(",", "")) * scale[units["dram__bytes_read.sum"]]
        wr = float(r["dram__bytes_write.sum"].replace(",", "")) * scale[units["dram__bytes_write.sum"]]
        prev = out.get(name, (0.0, 0.0, 0))
        out[name] = (prev[0] + rd, prev[1] + wr, prev[2] + 1)
    return out


def summary(measured: dict) -> str:
    from a07_softmax import provenance, reference

    lines = [provenance.header("bench/traffic.py (DRAM bytes per kernel, Nsight Compute, caches flushed)"),
             f"# {ELEMENTS} elements per tensor; measured traversals = (DRAM read + written) / tensor bytes",
             "# case\tdtype\trows\tcols\tkernels\tmodel_traversals\tdram_read_bytes\tdram_write_bytes\tmeasured_traversals"]
    for impl, dtype, cols, variant in CASES:
        name = case_name(impl, dtype, cols)
        if name not in measured:
            raise RuntimeError(f"ncu measured no kernel for {name}; it saw {sorted(measured)[:5]}")
        rd, wr, n = measured[name]
        tensor = ELEMENTS * (4 if dtype == "float32" else 2)
        model = 2 if variant == "copy" else reference.traversals(variant)
        lines.append(f"{impl}\t{dtype}\t{ELEMENTS // cols}\t{cols}\t{n}\t{model}\t{rd:.0f}\t{wr:.0f}\t{(rd + wr) / tensor:.3f}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--launch", action="store_true", help="launch every case once (what ncu profiles)")
    ap.add_argument("--ncu", default="ncu")
    ap.add_argument("--raw", type=Path, help="also keep ncu's raw CSV here")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    if a.launch:
        print("\n".join(launch_all()))
        return 0
    text = summary(measure(a.ncu, a.raw))
    print(text)
    if a.out:
        a.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Committed GPU measurements (results/<gpu>/): load them, label them, plot them.

Every figure drawn from here names the GPU, the date and the versions the numbers came from, so
a learner without a GPU always knows they are looking at someone else's run.
"""
from __future__ import annotations

import json
import re

import numpy as np

from .paths import ROOT
from .provenance import stale_sources

RESULTS = ROOT / "results"
BENCH_SCHEMA = {"gpu": str, "date": str, "versions": dict, "sources_sha256": dict, "copy_GBps": float, "runs": list}
RUN_SCHEMA = {"impl": str, "op": str, "dtype": str, "rows": int, "cols": int, "ms": float, "GBps_min_bytes": float,
              "traversals": int, "max_rel_err": float}
OPS = ("softmax", "scale_mask_softmax", "log_softmax")


def available() -> list:
    return sorted(p.parent.name for p in RESULTS.glob("*/bench.json"))


PREFERRED_GPU = "nvidia-h200"


def record_gpu(name: str) -> str:
    """The GPU folder whose results/<gpu>/<name> the course reads: the H200's where it holds one,
    else the folder that does. A record from another GPU stands in where the H200 was not at hand
    for a run; the H200's own, once stale, is deleted rather than kept (tests/test_results.py)."""
    holders = sorted(p.parent.name for p in RESULTS.glob(f"*/{name}"))
    if not holders:
        raise FileNotFoundError(f"no results/<gpu>/{name}: run `a07 results` on a GPU")
    return PREFERRED_GPU if PREFERRED_GPU in holders else holders[0]


def load_bench(gpu: str = "nvidia-h200") -> dict:
    return json.loads((RESULTS / gpu / "bench.json").read_text())


def schema_errors(d: dict) -> list:
    """Everything wrong with a bench.json's structure (empty if it follows the schema)."""
    errs = []
    for k, t in BENCH_SCHEMA.items():
        if not isinstance(d.get(k), t):
            errs.append(f"{k}: expected {t.__name__}, got {type(d.get(k)).__name__}")
    for v in ("torch", "triton", "cupy", "cuda"):
        if v not in d.get("versions", {}):
            errs.append(f"versions.{v} missing")
    for i, r in enumerate(d.get("runs", [])):
        for k, t in RUN_SCHEMA.items():
            val = r.get(k)
            ok = isinstance(val, t) or (t is float and isinstance(val, int) and not isinstance(val, bool))
            if not ok:
                errs.append(f"runs[{i}].{k}: expected {t.__name__}, got {val!r}")
        if r.get("op") not in OPS:
            errs.append(f"runs[{i}].op: {r.get('op')!r} not in {OPS}")
        if not str(r.get("impl", "")).startswith(("cuda.", "hip.", "triton.", "torch.")):
            errs.append(f"runs[{i}].impl: {r.get('impl')!r} does not name its source")
        if "ms_rounds" in r:  # optional: the interleaved timing rounds whose median is ms
            rounds = r["ms_rounds"]
            if not (isinstance(rounds, list) and rounds and all(isinstance(v, (int, float)) and v > 0 for v in rounds)):
                errs.append(f"runs[{i}].ms_rounds: expected a list of positive times, got {rounds!r}")
            elif isinstance(r.get("ms"), (int, float)) and abs(float(np.median(rounds)) - r["ms"]) > 1e-9 * r["ms"]:
                errs.append(f"runs[{i}].ms: {r['ms']} is not the median of its ms_rounds")
    return errs


def is_stale(d: dict) -> list:
    return stale_sources(d.get("sources_sha256", {}))


def failed_checks(d: dict) -> list:
    """Runs whose output missed the float64 tolerance (only peers may: tests/test_results.py)."""
    return [r for r in d["runs"] if not r["passed"]]


def check_summary(d: dict) -> str:
    """One line: how many timed outputs passed their float64 check, and which did not."""
    bad = failed_checks(d)
    line = f"{len(d['runs']) - len(bad)} of {len(d['runs'])} timed outputs passed their float64 check"
    for r in bad:
        line += (f"; {r['impl']} {r['dtype']} at {r['cols']} columns did not "
                 f"(max rel err {r['max_rel_err']:.3g})")
    return line


def label(d: dict) -> str:
    v = d["versions"]
    return (f"measured on {d['gpu']} on {d['date']} (torch {v.get('torch')}, triton {v.get('triton')}, "
            f"CuPy {v.get('cupy')}, CUDA {v.get('cuda')})")


def table(d: dict, op: str = "softmax", dtype: str = "float32", impls=None, value: str = "GBps_min_bytes"):
    """{impl: {cols: value}} for one op and dtype."""
    out = {}
    for r in d["runs"]:
        if r["op"] == op and r["dtype"] == dtype and (impls is None or r["impl"] in impls):
            out.setdefault(r["impl"], {})[r["cols"]] = r[value]
    return out


def print_table(d: dict, op: str = "softmax", dtype: str = "float32", impls=None, value: str = "GBps_min_bytes",
                fmt: str = "{:>8.0f}"):
    t = table(d, op, dtype, impls, value)
    cols = sorted({c for row in t.values() for c in row})
    print(f"{op}, {dtype}: {value} ({label(d)})")
    print(f"{'implementation':<34}" + "".join(f"{c:>8}" for c in cols))
    for impl in (impls or sorted(t)):
        if impl in t:
            print(f"{impl:<34}" + "".join(fmt.format(t[impl][c]) if c in t[impl] else f"{'-':>8}" for c in cols))


def plot_gbps(d: dict, op: str = "softmax", dtype: str = "float32", impls=None, ax=None):
    """GB/s (one read + one write) against cols, with the copy ceiling measured in the same run."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(9, 5))[1]
    for impl, row in sorted(table(d, op, dtype, impls).items()):
        cs = sorted(row)
        ax.plot(cs, [row[c] for c in cs], marker="o", label=impl)
    ax.axhline(d["copy_GBps"], color="k", ls="--", label=f"copy ceiling {d['copy_GBps']:.0f} GB/s")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("cols (elements per row)")
    ax.set_ylabel("GB/s (one read + one write of the tensor)")
    ax.set_title(f"{op}, {dtype}, rows x cols = 2^28\n{label(d)}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return ax


FAST_PEERS = ("cuda.softmax_fast", "torch.softmax", "triton.softmax")


def ceilings(d: dict) -> dict:
    """The three ceilings of a bench.json, GB/s, defined once for every notebook: the DRAM's
    theoretical peak (2 x memory clock x bus width, read from the device), a device-to-device copy
    (torch's, timed in the same run: one read and one write per byte) and the control copy
    (the course's copy kernel with the fast kernels' L2 hint on its loads). Missing ones are NaN."""
    nan = float("nan")
    return {"DRAM peak": d.get("dram_peak_GBps") or nan, "copy": d["copy_GBps"],
            "copy with the L2 hint": d.get("copy_hinted_GBps") or nan}


def ceilings_report(d: dict) -> str:
    c = ceilings(d)
    peak = c["DRAM peak"]
    why = {"DRAM peak": "2 x memory clock x bus width: no kernel moves DRAM bytes faster",
           "copy": "torch's device-to-device copy, same run: the practical ceiling",
           "copy with the L2 hint": "the course's copy kernel, loads hinted like the fast kernels: a control"}
    return "\n".join(f"{name:<22}{gbps:>7.0f} GB/s  {100 * gbps / peak:>4.0f} % of peak   {why[name]}"
                     for name, gbps in c.items())


def against_ceilings(gbps: float, d: dict) -> str:
    """'x % of copy, y % of DRAM peak', and what a figure above either means."""
    c = ceilings(d)
    of_copy, of_peak = 100 * gbps / c["copy"], 100 * gbps / c["DRAM peak"]
    note = ("above the DRAM peak: part of these bytes came from cache" if of_peak > 100 else
            "above the copy, below the peak: DRAM could have moved it; only measured bytes say if it did"
            if of_copy > 100 else "")
    return f"{of_copy:4.0f} % of copy, {of_peak:4.0f} % of DRAM peak" + (f"  ({note})" if note else "")


def fast_scorecard(d: dict, dtype: str):
    """{cols: (fast GB/s, % of copy, best peer name, best peer GB/s)} for the fast softmax."""
    t = table(d, "softmax", dtype, FAST_PEERS)
    out = {}
    for c, g in sorted(t.get("cuda.softmax_fast", {}).items()):
        peers = {i: t[i][c] for i in FAST_PEERS[1:] if c in t.get(i, {})}
        best = max(peers, key=peers.get) if peers else None
        out[c] = (g, 100 * g / d["copy_GBps"], best, peers.get(best, float("nan")))
    return out


def _rounds(d: dict, dtype: str) -> dict:
    """{(impl, cols): [ms of each timing round]} for the softmax runs that kept their rounds."""
    return {(r["impl"], r["cols"]): r["ms_rounds"] for r in d["runs"]
            if r["op"] == "softmax" and r["dtype"] == dtype and r.get("ms_rounds")}


def fast_spread(d: dict, dtype: str) -> dict:
    """{cols: spread in %} between the fast softmax and its best peer at each length: the larger of
    the two kernels' (max - min) / median over their timing rounds, i.e. how much the same kernel
    moved within the run (shown beside each margin; whether a margin is a tie is decided by the
    rounds themselves, fast_margins). Empty for a bench.json without rounds."""
    rounds = _rounds(d, dtype)
    out = {}
    for c, (_, _, peer, _) in fast_scorecard(d, dtype).items():
        pair = [rounds.get(("cuda.softmax_fast", c)), rounds.get((peer, c))]
        if all(pair):
            out[c] = max(100 * (max(ms) - min(ms)) / float(np.median(ms)) for ms in pair)
    return out


def fast_margins(d: dict, dtype: str) -> dict:
    """{cols: (margin in %, spread in % or None, tie)}: the fast softmax against its best peer at each
    length that has one. A tie when the two kernels' timing rounds overlap: the faster one's slowest
    round is not faster than the other's quickest. (Comparing the margin with the spread instead would
    let one slow round of a peer, e.g. torch.softmax allocating its output, hide a clear lead.)"""
    spread = fast_spread(d, dtype)
    rounds = _rounds(d, dtype)
    out = {}
    for c, (g, _, peer, pg) in fast_scorecard(d, dtype).items():
        if peer is not None:
            mine, theirs = rounds.get(("cuda.softmax_fast", c)), rounds.get((peer, c))
            tie = bool(mine and theirs) and max(mine) >= min(theirs) and max(theirs) >= min(mine)
            out[c] = (100 * (g / pg - 1), spread.get(c), tie)
    return out


def fast_summary(d: dict, dtype: str) -> str:
    """Where the fast softmax meets its targets (>= 95 % of copy, faster than every peer) and where
    not; margins whose timing rounds overlap (fast_margins) are called out as such."""
    card = fast_scorecard(d, dtype)
    margins = fast_margins(d, dtype)
    at95 = [c for c, v in card.items() if v[1] >= 95]
    behind = {c: m for c, (m, _, _) in margins.items() if m <= 0}
    line = (f"{dtype}: >= 95 % of copy at {len(at95)} of {len(card)} lengths; faster than torch.softmax and "
            f"the Triton row kernel at {len(card) - len(behind)} of {len(card)}")
    narrow = [str(c) for c, (m, _, tie) in margins.items() if tie and c not in behind]
    if narrow:
        line += f" (with overlapping timing rounds at {', '.join(narrow)})"
    if behind:
        line += "; behind the faster peer at " + ", ".join(
            f"{c} ({p:+.1f} %{', rounds overlap' if margins[c][2] else ''})" for c, p in behind.items())
    below = [f"{c} ({v[1]:.1f} %)" for c, v in card.items() if v[1] < 95]
    if below:
        line += "; below 95 % of copy at " + ", ".join(below)
    return line


def plot_fast(d: dict):
    """The fast softmax against torch.softmax and the course's Triton row kernel, fp32 and bf16,
    with the copy ceiling and its 95 % line. Returns the figure."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 5), sharey=True)
    for ax, dtype in zip(axes, ("float32", "bfloat16")):
        for impl, row in table(d, "softmax", dtype, FAST_PEERS).items():
            cs = sorted(row)
            ax.plot(cs, [row[c] for c in cs], marker="o", label=impl, lw=2.5 if impl == FAST_PEERS[0] else 1.2)
        ax.axhline(d["copy_GBps"], color="k", ls="--", label=f"copy {d['copy_GBps']:.0f} GB/s")
        ax.axhline(0.95 * d["copy_GBps"], color="k", ls=":", label="95 % of copy")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("cols (elements per row), rows x cols = 2^28")
        ax.set_title(dtype)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower left")
    axes[0].set_ylabel("GB/s (one read + one write)")
    fig.suptitle(f"fast softmax against its peers\n{label(d)}", fontsize=9)
    fig.tight_layout()
    return fig


def lab1_ratios(d: dict):
    """{cols: {kernel: (measured time / naive time, model traversals / naive traversals)}}"""
    from .reference import traversals

    names = ["softmax_naive_unsafe", "softmax_safe_3pass", "softmax_online_2pass", "softmax_online_1pass"]
    ms = table(d, "softmax", "float32", [f"cuda.{n}" for n in names], "ms")
    out = {}
    for c in sorted(ms.get("cuda.softmax_naive_unsafe", {})):
        base = ms["cuda.softmax_naive_unsafe"][c]
        out[c] = {n: (ms[f"cuda.{n}"][c] / base, traversals(n) / traversals(names[0]))
                  for n in names if c in ms.get(f"cuda.{n}", {})}
    return out


def effective_traversals(d: dict, impl: str, dtype: str = "float32"):
    """{cols: traversals the measured time would correspond to at the copy ceiling}: how many
    times the kernel *effectively* crossed HBM. Below the model's count means caches served
    some of the passes."""
    t = table(d, "softmax", dtype, [impl], "ms").get(impl, {})
    rows = {r["cols"]: r["rows"] for r in d["runs"] if r["impl"] == impl and r["dtype"] == dtype}
    esize = 4 if dtype == "float32" else 2
    return {c: (ms * 1e-3) * d["copy_GBps"] * 1e9 / (rows[c] * c * esize) for c, ms in t.items()}


def ratio_arrays(d: dict):
    r = lab1_ratios(d)
    cols = list(r)
    names = ["softmax_naive_unsafe", "softmax_safe_3pass", "softmax_online_2pass", "softmax_online_1pass"]
    meas = np.array([[r[c].get(n, (np.nan, np.nan))[0] for c in cols] for n in names])
    model = np.array([r[cols[0]][n][1] if n in r[cols[0]] else np.nan for n in names]) if cols else np.array([])
    return cols, names, meas, model


# ------------------------------------------------------------------------------------------------
# DRAM bytes measured by Nsight Compute (bench/traffic.py -> results/<gpu>/traffic.txt)
# ------------------------------------------------------------------------------------------------
def load_traffic(gpu: str = "nvidia-h200") -> list:
    """[{impl, dtype, rows, cols, kernels, model, read, written, measured}] from traffic.txt: per
    case the DRAM bytes read and written (caches flushed before the launch) and the traversals they
    amount to, beside the traffic model's count."""
    out = []
    for line in (RESULTS / gpu / "traffic.txt").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        impl, dtype, rows, cols, kernels, model, rd, wr, meas = line.split("\t")
        out.append(dict(impl=impl, dtype=dtype, rows=int(rows), cols=int(cols), kernels=int(kernels),
                        model=float(model), read=float(rd), written=float(wr), measured=float(meas)))
    return out


def traffic_report(rows: list, impls=None, dtype: str = "float32", bench: dict | None = None) -> str:
    """A table: model traversals against the DRAM traversals Nsight Compute measured, split into reads
    and writes (in units of the tensor); with `bench` (bench.json), also the traversals the measured
    time corresponds to at the copy rate (effective_traversals), for the same kernel and row length."""
    keep = [r for r in rows if r["dtype"] == dtype and (impls is None or r["impl"] in impls)]
    lines = [f"{'implementation':<34}{'cols':>7}{'model':>7}{'DRAM':>7}{'reads':>7}{'writes':>8}"
             + (f"{'from time':>11}" if bench else "")]
    for r in keep:
        tensor = r["rows"] * r["cols"] * (4 if r["dtype"] == "float32" else 2)
        line = (f"{r['impl']:<34}{r['cols']:>7}{r['model']:>7}{r['measured']:>7.2f}"
                f"{r['read'] / tensor:>7.2f}{r['written'] / tensor:>8.2f}")
        if bench:
            eff = effective_traversals(bench, r["impl"], dtype).get(r["cols"]) if r["impl"] != "copy" else 2.0
            line += f"{eff:>11.2f}" if eff is not None else f"{'-':>11}"
        lines.append(line)
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# Lab 4: attention (bench/attention.py -> results/<gpu>/attention.json)
# ------------------------------------------------------------------------------------------------
ATTENTION_NAIVE = "naive (matmul, course softmax, matmul)"


def load_attention(gpu: str | None = None) -> dict:
    """results/<gpu>/attention.json; by default the record the course reads (record_gpu)."""
    return json.loads((RESULTS / (gpu or record_gpu("attention.json")) / "attention.json").read_text())


def attention_rows(d: dict, copy_gbps: float | None = None) -> list:
    """Per (head_dim, S, causal): the course's forward against SDPA's flash and cuDNN backends
    (TFLOP/s), and against the naive pipeline in time and in the traffic model's bytes, each byte
    count turned into the time it needs at the copy rate (a lower bound): by default the copy the
    run timed on its own GPU."""
    from . import attention as A

    copy_gbps = d["copy_GBps"] if copy_gbps is None else copy_gbps

    runs = {(r["impl"], r["head_dim"], r["seq"], r["causal"]): r for r in d["runs"]}
    out = []
    for (impl, hd, s, causal), r in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][3])):
        if impl != "triton.flash_attention":
            continue
        flash, cudnn = runs.get(("sdpa.flash", hd, s, causal)), runs.get(("sdpa.cudnn", hd, s, causal))
        cuda = runs.get(("cuda.attention (fp32)", hd, s, causal))
        naive = runs[(ATTENTION_NAIVE, hd, s, causal)]
        bh = r["batch"] * r["heads"]
        fused_b = A.traffic_bytes(bh, s, hd, 2)
        naive_b = A.traffic_bytes(bh, s, hd, 2, fused=False, score_bytes=2)
        other = runs[("triton.flash_attention", hd, s, not causal)]
        out.append(dict(head_dim=hd, seq=s, causal=causal, tflops=r["TFLOPs"],
                        flash=flash["TFLOPs"] if flash else float("nan"),
                        cudnn=cudnn["TFLOPs"] if cudnn else float("nan"),
                        cuda_fp32=cuda["TFLOPs"] if cuda else float("nan"),
                        cuda_ms=cuda["ms"] if cuda else float("nan"),
                        causal_speedup=(other["ms"] / r["ms"]) if causal else float("nan"),
                        ms=r["ms"], naive_ms=naive["ms"], bytes_ratio=naive_b / fused_b,
                        fused_bound_ms=fused_b / copy_gbps / 1e6, naive_bound_ms=naive_b / copy_gbps / 1e6))
    return out


def attention_report(d: dict, copy_gbps: float | None = None) -> str:
    lines = [f"{'d':>4}{'S':>7}{'causal':>7}{'TFLOP/s':>9}{'flash':>7}{'% flash':>8}{'cuDNN':>7}{'causal x':>9}"
             f"{'naive/fused time':>17}{'bytes':>7}{'fused ms':>10}{'bound':>7}{'naive ms':>10}{'bound':>7}"]
    for r in attention_rows(d, copy_gbps):
        cx = f"{r['causal_speedup']:.2f}" if r["causal"] else "-"
        lines.append(f"{r['head_dim']:>4}{r['seq']:>7}{'yes' if r['causal'] else 'no':>7}{r['tflops']:>9.0f}"
                     f"{r['flash']:>7.0f}{r['tflops'] / r['flash']:>8.0%}{r['cudnn']:>7.0f}{cx:>9}"
                     f"{r['naive_ms'] / r['ms']:>17.2f}{r['bytes_ratio']:>7.1f}{r['ms']:>10.3f}{r['fused_bound_ms']:>7.3f}"
                     f"{r['naive_ms']:>10.3f}{r['naive_bound_ms']:>7.3f}")
    return "\n".join(lines)


def attention_cuda_report(d: dict) -> str:
    """The readable CUDA kernel (fp32, CUDA cores) beside the Triton kernel (bf16, tensor cores)."""
    lines = [f"{'d':>4}{'S':>7}{'causal':>7}{'CUDA fp32 TFLOP/s':>19}{'ms':>9}{'Triton bf16 TFLOP/s':>21}"]
    for r in attention_rows(d, 1.0):
        if r["cuda_fp32"] == r["cuda_fp32"]:  # measured (not NaN)
            lines.append(f"{r['head_dim']:>4}{r['seq']:>7}{'yes' if r['causal'] else 'no':>7}{r['cuda_fp32']:>19.1f}"
                         f"{r['cuda_ms']:>9.2f}{r['tflops']:>21.0f}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# The fused cross-entropy (bench/cross_entropy.py -> results/<gpu>/cross_entropy.json)
# ------------------------------------------------------------------------------------------------
CROSS_ENTROPY_IMPLS = {"a07.fast.cross_entropy": "course (CUDA)",
                       "a07.fast.cross_entropy[unchecked]": "course (CUDA), check_targets=False",
                       "a07.cross_entropy": "course (Triton)",
                       "F.cross_entropy": "eager PyTorch",
                       "torch.compile(F.cross_entropy)": "torch.compile", "liger.LigerCrossEntropyLoss": "Liger"}


def load_backward(gpu: str = "nvidia-h200") -> dict:
    return json.loads((RESULTS / gpu / "backward.json").read_text())


def backward_report(d: dict, dtype: str = "float32") -> str:
    """bench/backward.py: each implementation's rate, counting the three traversals (read y, read dy,
    write dx), as a fraction of the copy's rate in the same run, per operation and row length."""
    runs = [r for r in d["runs"] if r["dtype"] == dtype]
    cols = sorted({r["cols"] for r in runs})
    impls = ("triton", "eager", "torch.compile")
    lines = [f"{dtype}: rate (3 traversals / time) over the copy's rate",
             f"{'operation':<22}{'implementation':<15}" + "".join(f"{c:>8}" for c in cols)]
    for op in ("softmax_backward", "log_softmax_backward"):
        for impl in impls:
            by = {r["cols"]: r["vs_copy"] for r in runs if r["op"] == op and r["impl"] == impl}
            lines.append(f"{op:<22}{impl:<15}" + "".join(f"{by.get(c, float('nan')):>8.2f}" for c in cols))
    return "\n".join(lines)


def load_cross_entropy(gpu: str | None = None) -> dict:
    """results/<gpu>/cross_entropy.json; by default the record the course reads (record_gpu)."""
    return json.loads((RESULTS / (gpu or record_gpu("cross_entropy.json")) / "cross_entropy.json").read_text())


def cross_entropy_report(d: dict, mode: str = "loss+grad", vocabs=(32768, 131072)) -> str:
    """% of the copy rate (one read, plus one write for the gradient) and the memory each
    implementation allocated beyond its inputs, per dtype and vocabulary."""
    lines = [f"{'implementation':<16}{'dtype':>10}{'vocab':>8}{'ms':>8}{'% of copy':>11}{'extra MiB':>11}"]
    for r in sorted((r for r in d["runs"] if r["mode"] == mode and r["vocab"] in vocabs),
                    key=lambda r: (r["dtype"], r["vocab"], list(CROSS_ENTROPY_IMPLS).index(r["impl"]))):
        lines.append(f"{CROSS_ENTROPY_IMPLS[r['impl']]:<16}{r['dtype']:>10}{r['vocab']:>8}{r['ms']:>8.3f}"
                     f"{100 * r['GBps'] / d['copy_GBps']:>10.1f}%{r['peak_extra_bytes'] / 2**20:>11.0f}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# Fused scale + mask + softmax (bench/scale_mask.py -> results/<gpu>/scale_mask.json)
# ------------------------------------------------------------------------------------------------
SCALE_MASK_PEERS = ("triton", "torch.compile", "lab2.fused", "lab2.unfused", "eager")


def load_scale_mask(gpu: str = "nvidia-h200") -> dict:
    return json.loads((RESULTS / gpu / "scale_mask.json").read_text())


def scale_mask_rows(d: dict, dtype: str, causal: bool) -> dict:
    """{S: {impl: ms}} plus "copy" for one dtype and mask kind."""
    out = {}
    for r in d["runs"]:
        if r["dtype"] == dtype and r["causal"] == causal:
            out.setdefault(r["seq"], {"copy": r["copy_ms"]})[r["impl"]] = r["ms"]
    return dict(sorted(out.items()))


def scale_mask_report(d: dict, dtype: str = "float32") -> str:
    """Per S: the fast kernel's time against the copy of the same tensor, and each peer's time as a
    multiple of the fast kernel's (above 1: the fast kernel is faster), without a mask and causal."""
    lines = []
    for causal in (False, True):
        rows = scale_mask_rows(d, dtype, causal)
        peers = [p for p in SCALE_MASK_PEERS if any(p in v for v in rows.values())]
        lines.append(f"{dtype}, {'causal' if causal else 'no mask'}: times as multiples "
                     f"(fast / copy, then each peer / fast)")
        lines.append(f"{'S':>7}{'fast/copy':>11}" + "".join(f"{p:>15}" for p in peers))
        for seq, v in rows.items():
            cells = "".join(f"{v[p] / v['fast']:>15.2f}" if p in v else f"{'-':>15}" for p in peers)
            lines.append(f"{seq:>7}{v['fast'] / v['copy']:>11.2f}{cells}")
        lines.append("")
    return "\n".join(lines).rstrip()


def plot_attention(d: dict, copy_gbps: float | None = None, head_dim: int = 128):
    """Left: TFLOP/s against S for each implementation (solid: full, dashed: causal). Right: how
    many times slower the naive pipeline is, against how many times more bytes the traffic model says
    it moves: the points sit far below the diagonal because the fused kernel is not waiting for bytes."""
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.8))
    names = ("triton.flash_attention", "sdpa.flash", "sdpa.cudnn", ATTENTION_NAIVE, "cuda.attention (fp32)")
    for i, impl in enumerate(names):
        for causal, ls in ((False, "-"), (True, "--")):
            pts = sorted((r["seq"], r["TFLOPs"]) for r in d["runs"]
                         if r["impl"] == impl and r["head_dim"] == head_dim and r["causal"] == causal)
            if pts:
                ax.plot(*zip(*pts), ls=ls, marker="o", color=f"C{i}", label=f"{impl}{' (causal)' if causal else ''}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("S (sequence length)")
    ax.set_ylabel("TFLOP/s (causal counted as half)")
    ax.set_title(f"bf16 (CUDA kernel: fp32), head dim {head_dim}\n{label(d)}", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    rows = attention_rows(d, copy_gbps)
    for causal, marker in ((False, "o"), (True, "^")):
        pts = [(r["bytes_ratio"], r["naive_ms"] / r["ms"]) for r in rows if r["causal"] == causal]
        bx.scatter(*zip(*pts), marker=marker, label="causal" if causal else "full")
    lim = [1, max(r["bytes_ratio"] for r in rows) * 1.5]
    bx.plot(lim, lim, "k--", lw=1, label="time ratio = byte ratio")
    bx.set_xscale("log")
    bx.set_yscale("log")
    bx.set_xlabel("naive / fused bytes (traffic model)")
    bx.set_ylabel("naive / fused time (measured)")
    bx.grid(alpha=0.3, which="both")
    bx.legend(fontsize=8)
    fig.tight_layout()
    return fig


KERNEL_CAUSAL = "fast.scale_mask_softmax(causal)"


def load_causal_ceiling(gpu: str | None = None) -> dict:
    """causal_ceiling.txt (bench/sweeps/causal_ceiling.py) as {(dtype, S): {"copy_GBps": ..., name:
    time / the copy's time}}: the fast kernel's causal rows and each probe shape that moves the same
    bytes with no arithmetic, timed in the same rounds. `gpu`: default record_gpu()'s."""
    gpu = gpu or record_gpu("causal_ceiling.txt")
    out, shape = {}, None
    for line in (RESULTS / gpu / "causal_ceiling.txt").read_text().splitlines():
        head = re.match(r"(\w+) S = (\d+) \(copy (\d+) GB/s\)", line)
        if head:
            shape = (head.group(1), int(head.group(2)))
            out[shape] = {"copy_GBps": float(head.group(3))}
        elif shape and re.match(r"\s+\d+\.\d+\s+\S", line):
            ratio, name = line.split(None, 1)
            out[shape][name] = float(ratio)
    return out


def causal_floor(shape: dict, zeros_first: bool = False) -> tuple:
    """(ratio, name) of the fastest probe shape of one (dtype, S) entry of load_causal_ceiling(),
    among those that store the masked part's zeros first or among those that do not."""
    probes = [(r, n) for n, r in shape.items()
              if n.startswith("causal bytes") and n.endswith("zeros stored first") == zeros_first]
    return min(probes)

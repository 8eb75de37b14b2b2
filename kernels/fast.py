"""The fast softmax (cuda/softmax_fast.cu): one entry, a strategy per row length.

    from kernels import fast
    y = fast.softmax(x)          # x: (rows, cols) float32 / float16 / bfloat16, CuPy or CUDA torch
    fast.plan(cols, "bfloat16")  # which kernel, launch shape and why, without a GPU

`plan()` is plain Python, so the choice is testable (and printable) on any machine; `softmax()`
checks its arguments, compiles the chosen template instance once through CuPy RawModule (NVRTC on
NVIDIA, hiprtc on ROCm) and launches it.
"""
from __future__ import annotations

from dataclasses import dataclass
import math
import re

import numpy as np

from . import native

SOURCE = {"CUDA": "cuda/softmax_fast.cu", "HIP": "hip/softmax_fast.cpp"}
DTYPES = {"float32": ("float", 4), "float16": ("f16_t", 2), "bfloat16": ("bf16_t", 2)}
VEC_BYTES = 16
GROUP_MAX = 32      # lanes per row in the warp strategy (also fits a 64-lane AMD wavefront)
WARP_THREADS = 128  # block size of the warp strategy (its __launch_bounds__)
CLUSTERS = (2, 4, 8)  # portable cluster sizes on sm_90
ROWS_PER_CLUSTER = 4  # consecutive rows one cluster handles, the next one's loads in flight

# The strategy table, per element size (4: fp32, 2: fp16/bf16), in 16-byte vectors per row (rv).
# Every number is a measurement on the H200 (results/nvidia-h200/NOTES.md has the sweep); the
# shape of the table is general: few lanes for short rows, more data per thread as rows grow,
# then several SMs per row, then two reads.
TABLE = {
    4: dict(warp_max_rv=64,      # up to 256 fp32: 2 vectors (8 floats) per lane
            block_vecs=(2, 4, 8), block_max_threads=512,   # up to 16384 fp32
            # the smallest cluster of <= 512 threads a block, else the largest: up to 8 x 1024 x 32
            cluster_vecs=8, cluster_max_threads=512, cluster_last_threads=1024,
            twopass_vecs=4),
    2: dict(warp_max_rv=128,     # up to 1024 bf16: 2 or 4 vectors (16 or 32 values) per lane
            block_vecs=(2, 4), block_max_threads=512,      # up to 16384 bf16
            # the smallest cluster of <= 128 threads a block, else the largest: up to 8 x 512 x 64
            cluster_vecs=8, cluster_max_threads=128, cluster_last_threads=512,
            twopass_vecs=1),
}
@dataclass(frozen=True)
class Plan:
    strategy: str        # "warp", "block", "cluster" or "2pass"
    kernel: str          # the template instance, e.g. "softmax_fast_warp<float, 1, 32, 2>"
    grid: int
    threads: int
    rows_per_block: int
    why: str
    shared_bytes: int = 0     # dynamic shared memory (the cluster kernel's staging buffer)
    extra_args: tuple = ()    # launch arguments after (x, y, rows, cols)

    def describe(self) -> str:
        return f"{self.strategy:<7} {self.kernel:<42} grid {self.grid:>8} x {self.threads:>4} threads  ({self.why})"


def _pow2ceil(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


def plan(cols: int, dtype: str = "float32", rows: int = 1, *, clusters: bool = True, warp_size: int = 32,
         aligned: bool | None = None, **override) -> Plan:
    """The strategy for a (rows, cols) softmax of `dtype`. `clusters`: the device has thread-block
    clusters (NVIDIA sm_90+). `aligned`: rows start on 16-byte boundaries (default: cols is a
    multiple of the vector width, as for any freshly allocated tensor); otherwise the kernel loads
    element by element. Keyword overrides (strategy, vecs, group, rows_per_thread, cluster,
    threads) are for tuning experiments and tests."""
    if dtype not in DTYPES:
        raise TypeError(f"dtype {dtype} not supported; the fast softmax takes {', '.join(DTYPES)}")
    ctype, size = DTYPES[dtype]
    n = VEC_BYTES // size                # elements per 16-byte vector
    rv = -(-cols // n)                   # vectors per row
    t = TABLE[size]
    want = override.get("strategy")
    al = "true" if (cols % n == 0 if aligned is None else aligned) else "false"
    # 1. short rows: a group of lanes per row, no barrier
    if want == "warp" or (want is None and rv <= t["warp_max_rv"]):
        vecs = override.get("vecs", min(rv, 2 if rv <= 64 else 4))
        group = override.get("group", min(GROUP_MAX, _pow2ceil(-(-rv // vecs))))
        vecs = override.get("vecs", _pow2ceil(-(-rv // group)))
        rpt = override.get("rows_per_thread", 1)
        per_block = (WARP_THREADS // group) * rpt
        return Plan("warp", f"softmax_fast_warp<{ctype}, {vecs}, {group}, {rpt}, {al}>", -(-rows // per_block),
                    WARP_THREADS, per_block, f"{rv} vectors per row: {group} lanes x {vecs} vectors")
    # 2. medium rows: a block per row
    if want in (None, "block"):
        for vecs in ([override["vecs"]] if "vecs" in override else t["block_vecs"]):
            threads = override.get("threads", _round_up(-(-rv // vecs), warp_size))
            if threads <= t["block_max_threads"] or (want == "block" and threads <= 1024):
                return Plan("block", f"softmax_fast_block<{ctype}, {vecs}, {_bound(threads)}, {al}>", rows, threads, 1,
                            f"{rv} vectors per row: {threads} threads x {vecs} vectors")
    # 3. long rows: a cluster of blocks per row, (m, s) exchanged through distributed shared memory
    if clusters and want in (None, "cluster"):
        vecs = override.get("vecs", t["cluster_vecs"])
        options = [override["cluster"]] if "cluster" in override else CLUSTERS
        # the smallest cluster within the thread limit; failing that the largest within the last one
        for limit, order in ((t["cluster_max_threads"], options), (t["cluster_last_threads"], options[::-1])):
            for cluster in order:
                threads = override.get("threads", _round_up(-(-rv // (vecs * cluster)), warp_size))
                if threads <= limit or (want == "cluster" and threads <= 1024):
                    k = override.get("rows_per_cluster", ROWS_PER_CLUSTER)
                    return Plan("cluster", f"softmax_fast_cluster<{ctype}, {vecs}, {cluster}, {_bound(threads)}, {al}>",
                                -(-rows // k) * cluster, threads, k,
                                f"{rv} vectors per row: {cluster} blocks x {threads} threads x {vecs} vectors, "
                                f"{k} rows per cluster", threads * vecs * VEC_BYTES if al == "true" else 0,
                                (np.int32(k),))
    if want in ("block", "cluster"):
        raise ValueError(f"no {want} configuration holds {cols} columns of {dtype} in registers")
    # 4. anything else: read the row twice
    threads = override.get("threads", 1024)
    vecs = override.get("vecs", t["twopass_vecs"])
    return Plan("2pass", f"softmax_fast_2pass<{ctype}, {vecs}, {al}>", rows, threads, 1,
                "row too long to keep on chip" + ("" if clusters else " without clusters") + ": two reads")


def _bound(threads: int) -> int:
    """The launch bound compiled into a block or cluster kernel: the power of two >= threads."""
    return max(32, _pow2ceil(threads))


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def simulate(row, dtype: str = "float32", warp_size: int = 32, **override):
    """A NumPy model of the planned kernel on one row (float64 arithmetic): the same ownership of
    elements ((j * G + t) * N + k for vector j, thread t of the G sharing the row), the same
    one-exp-per-element statistics, and the same reduction tree (lanes -> warps -> blocks -> the
    cluster), each level merging (m, s) pairs with reference.combine(). Returns (y, levels), where
    levels lists how many (m, s) states each level of the tree merged. For the notebook, and to
    test the index arithmetic without a GPU."""
    from .reference import OnlineState, combine, online_softmax

    row = np.asarray(row, dtype=np.float64)
    cols = row.size
    p = plan(cols, dtype, 1, warp_size=warp_size, **override)
    n = VEC_BYTES // DTYPES[dtype][1]
    ints = [int(v) for v in re.findall(r"\b(\d+)\b", p.kernel.split("<", 1)[1])]
    if p.strategy == "2pass":  # per-thread states merged by the block, then a second read
        return online_softmax(row), [p.threads, 1]
    vecs = ints[0]
    group = {"warp": ints[1] if p.strategy == "warp" else 0, "block": p.threads,
             "cluster": p.threads * ints[1] if p.strategy == "cluster" else 0}[p.strategy]
    t, j, k = np.meshgrid(np.arange(group), np.arange(vecs), np.arange(n), indexing="ij")
    idx = (j * group + t) * n + k                                     # [thread, vector, element]
    v = np.where(idx < cols, row[np.minimum(idx, cols - 1)], -np.inf).reshape(group, -1)
    with np.errstate(invalid="ignore"):
        m_t = v.max(axis=1)
        e = np.exp(v - np.where(np.isneginf(m_t), 0.0, m_t)[:, None])  # one exp per element
    states = [OnlineState(float(m), float(s)) for m, s in zip(m_t, e.sum(axis=1))]
    levels = [len(states)]
    width = {"warp": group, "block": warp_size, "cluster": warp_size}[p.strategy]
    sizes = [width] + ([p.threads // warp_size] if p.strategy != "warp" else []) + \
        ([ints[1]] if p.strategy == "cluster" else [])
    for size in sizes:                                                # lanes, then warps, then blocks
        states = [_merge(states[i:i + size], combine, OnlineState) for i in range(0, len(states), size)]
        levels.append(len(states))
    total = states[0]
    f = np.zeros_like(m_t) if total.m == -np.inf else np.where(np.isneginf(m_t), 0.0, np.exp(m_t - total.m) / total.s)
    y = np.zeros(cols)
    flat = idx.reshape(group, -1)
    keep = flat < cols
    y[flat[keep]] = (e * f[:, None])[keep]
    return y, levels


def _merge(states, combine, empty):
    out = empty()
    for st in states:
        out = combine(out, st)
    return out


def bench_kernels(dtypes=("float32", "bfloat16", "float16"), cols=None) -> list:
    """Every template instance plan() picks over a range of row lengths (odd ones included)."""
    cols = cols or sorted({2**k for k in range(19)} | {3, 33, 1000, 1023, 3000, 16385, 262147})
    return sorted({plan(c, dt, 1024).kernel for dt in dtypes for c in cols})


def launch_bound(mangled: str) -> int:
    """The block size a compiled instance was built for, from its mangled name."""
    ints = [int(v) for v in re.findall(r"Li(\d+)E", mangled)]
    if "softmax_fast_warp" in mangled:
        return WARP_THREADS
    if "softmax_fast_2pass" in mangled:
        return 1024
    return ints[-1]  # block <T, VECS, MAX_THREADS>, cluster <T, VECS, CLUSTER, MAX_THREADS>


def compile_report(names=None, arch: str = "sm_90"):
    """NVRTC-compile template instances (default: bench_kernels()) without a GPU."""
    return native.nvrtc_compile(native.ROOT / SOURCE["CUDA"], arch, name_expressions=names or bench_kernels())


# ------------------------------------------------------------------------------------------------
# Launch
# ------------------------------------------------------------------------------------------------
_MODULES: dict = {}
_DEVICE: dict = {}


def device_info():
    """(vendor, has_clusters, warp_size) of the current device, asked once."""
    import cupy

    dev = cupy.cuda.Device().id
    if dev not in _DEVICE:
        props = cupy.cuda.runtime.getDeviceProperties(dev)
        if cupy.cuda.runtime.is_hip:
            _DEVICE[dev] = ("HIP", False, int(props["warpSize"]))
        else:
            _DEVICE[dev] = ("CUDA", int(props["major"]) >= 9, int(props["warpSize"]))
    return _DEVICE[dev]


def kernel(name: str):
    """The compiled template instance `name` (one RawModule per instance, compiled once)."""
    import cupy

    if name not in _MODULES:
        vendor = device_info()[0]
        src = (native.ROOT / SOURCE[vendor]).read_text()
        mod = cupy.RawModule(code=src, options=tuple(native._options(native.DEFAULT_ITEMS)),
                             name_expressions=[name], backend="hiprtc" if vendor == "HIP" else "nvrtc")
        _MODULES[name] = mod.get_function(name)
    return _MODULES[name]


def check(x, out=None):
    """Validate input (and output); return (rows, cols, dtype name). Raises before any launch."""
    m = native.meta(x)
    if not m.on_device:
        raise TypeError(f"x is a {m.kind} array in host memory; fast.softmax needs it on the GPU")
    if m.dtype not in DTYPES:
        raise TypeError(f"x has dtype {m.dtype}; fast.softmax takes {', '.join(DTYPES)}")
    if len(m.shape) != 2 or m.shape[0] < 1 or m.shape[1] < 1:
        raise ValueError(f"x must be 2-D (rows, cols) with rows, cols >= 1, got shape {m.shape}")
    if not m.contiguous:
        raise ValueError("x is not C-contiguous (a transpose or a strided slice?); pass .contiguous() / .copy()")
    rows, cols = m.shape
    if rows > 2**31 // 8 - 1 or cols > 2**31 - 1:
        raise ValueError(f"shape {m.shape} too large: rows must be < 2^28, cols < 2^31")
    if out is not None:
        o = native.meta(out)
        if not o.on_device or o.dtype != m.dtype or o.shape != m.shape or not o.contiguous:
            raise ValueError(f"out must be a contiguous {m.dtype} GPU array of shape {m.shape}, got "
                             f"{o.kind} {o.dtype} {o.shape}{'' if o.contiguous else ' (non-contiguous)'}")
    return rows, cols, m.dtype


def _pointer(a) -> int:
    return a.data_ptr() if type(a).__module__.startswith("torch") else a.data.ptr


def softmax(x, out=None, **override):
    """Row softmax of x with the strategy plan() picks; fp32 statistics for every dtype. A row of
    all -inf comes back as zeros."""
    rows, cols, dtype = check(x, out)
    if out is None:
        out = native._empty_like(x)
    vendor, clusters, warp_size = device_info()
    n = VEC_BYTES // DTYPES[dtype][1]
    px, py = _pointer(x), _pointer(out)
    aligned = cols % n == 0 and px % VEC_BYTES == 0 and py % VEC_BYTES == 0
    p = plan(cols, dtype, rows, clusters=clusters, warp_size=warp_size, aligned=aligned, **override)
    fn = kernel(p.kernel)
    if p.shared_bytes > 48 * 1024 and fn.max_dynamic_shared_size_bytes < p.shared_bytes:
        fn.max_dynamic_shared_size_bytes = p.shared_bytes  # opt in to more than 48 KB per block
    fn((p.grid,), (p.threads,), (np.uint64(px), np.uint64(py), np.int32(rows), np.int32(cols)) + p.extra_args,
       shared_mem=p.shared_bytes)
    return out

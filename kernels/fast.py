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
import functools
import math
import re

import numpy as np

from . import native

SOURCE = {"CUDA": "cuda/softmax_fast.cu", "HIP": "hip/softmax_fast.cpp"}
DTYPES = {"float32": ("float", 4), "float16": ("f16_t", 2), "bfloat16": ("bf16_t", 2)}
VEC_BYTES = 16
GROUP_MAX = 32      # lanes per row in the warp strategy (also fits a 64-lane AMD wavefront)
WARP_THREADS = 64   # block size of the warp strategy (its __launch_bounds__): 2 warps. Measured on the
                    # H200 against 128 (the earlier size): equal or 0.2-0.5 points faster, 2 at 1024 bf16
PORTABLE_CLUSTER = 8  # the largest cluster every sm_90 device runs; H100/H200 also run 16
MAX_CLUSTER = 16
SMS = 132             # plan()'s default device for sizing cluster grids: an H100/H200

# The strategy table, per element size (4: fp32, 2: fp16/bf16), in 16-byte vectors per row (rv).
# Every number is a measurement on the H200 (results/nvidia-h200/NOTES.md has the sweeps); the
# shape of the table is general: few lanes for short rows, more data per thread as rows grow,
# then several SMs per row, then two reads.
TABLE = {
    4: dict(warp_max_rv=64,      # up to 256 fp32: 2 vectors (8 floats) per lane
            # block tiers (vecs, most threads): 2 vectors a thread while 1024 threads hold the row
            # (8192 fp32: 98.7 % of copy against 96.9 % for 512 x 4), then 4 and 8 vectors in 512
            # threads; then 1024 threads of 8 (up to 32768 fp32, 98 % of copy where a cluster of 8
            # reached 93 %)
            block_tiers=((2, 1024), (4, 512), (8, 512), (8, 1024)),
            # cluster tiers (vecs, cluster, most threads a block, blocks per SM the launch bounds
            # promise): the first that holds the row wins. Always 8 vectors (32 floats) a thread,
            # loaded straight into registers (staging the next row through shared memory lost 6-11
            # points): 2 blocks of 1024 up to 65536 fp32, 8 of 512 (2 per SM) up to 131072, 16 of
            # 512 up to 262144, 16 of 1024 up to 524288; the last tier serves devices limited to 8
            # blocks (262144).
            cluster_tiers=((8, 2, 1024, 1), (8, 8, 512, 2), (8, 16, 512, 1), (8, 16, 1024, 1), (8, 8, 1024, 1)),
            twopass_vecs=4),
    2: dict(warp_max_rv=128,     # up to 1024 bf16: 2 or 4 vectors (16 or 32 values) per lane
            block_tiers=((2, 512), (4, 512)),             # up to 16384 bf16
            # Cluster threads keep 16-bit rows as raw bits (RowBits: a vector is 4 registers)
            # and compute exp twice; small blocks, several per SM, so that some load while others
            # reduce: 4 blocks of 128 threads x 8 vectors (6 per SM) up to 32768, 8 (7 per SM) up
            # to 65536, 8 of 128 x 16 vectors (5 per SM) up to 131072, 16 of them up to 262144;
            # 8 of 256 x 16 (2 per SM) where 16 is not available (262144), 16 up to 524288.
            # (Every bound keeps the instance free of spills: NVRTC's report, tests/test_fast.py.)
            cluster_tiers=((8, 4, 128, 6), (8, 8, 128, 7), (16, 8, 128, 5), (16, 16, 128, 5), (16, 8, 256, 2),
                           (16, 16, 256, 2)),
            twopass_vecs=1),
}


@dataclass(frozen=True)
class Plan:
    strategy: str        # "warp", "block", "cluster" or "2pass"
    kernel: str          # the template instance, e.g. "softmax_fast_warp<float, 2, 16, 1, true>"
    params: tuple        # its integer template arguments, e.g. (2, 16, 1): vecs, group, rows per thread
    grid: int
    threads: int
    rows_each: int       # rows one block handles (warp, block, 2pass), or one cluster on average (cluster)
    why: str

    def describe(self) -> str:
        return f"{self.strategy:<7} {self.kernel:<46} grid {self.grid:>8} x {self.threads:>4} threads  ({self.why})"


def _pow2ceil(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


def _instance(name: str, ctype: str, params: tuple, aligned: str) -> str:
    return f"softmax_fast_{name}<{', '.join([ctype, *map(str, params), aligned])}>"


def plan(cols: int, dtype: str = "float32", rows: int = 1, *, clusters: int = MAX_CLUSTER, warp_size: int = 32,
         aligned: bool | None = None, resident=None, **override) -> Plan:
    """The strategy for a (rows, cols) softmax of `dtype`. `clusters`: the largest thread-block
    cluster the device runs (0 or False: none, as on AMD and NVIDIA before sm_90; 8: portable;
    16: H100/H200). `aligned`: rows start on 16-byte boundaries (default: cols is a multiple of
    the vector width, as for any freshly allocated tensor); otherwise the kernel loads element by
    element. `resident(kernel, cluster, threads)`: how many clusters of that kernel fit on
    the GPU at once (softmax() asks the driver; by default SMS x blocks per SM // blocks per
    cluster, for the H200's 132 SMs). Keyword overrides (strategy, vecs, group, rows_per_thread, cluster,
    threads, min_blocks) are for tuning experiments and tests."""
    if dtype not in DTYPES:
        raise TypeError(f"dtype {dtype} not supported; the fast softmax takes {', '.join(DTYPES)}")
    ctype, size = DTYPES[dtype]
    n = VEC_BYTES // size                # elements per 16-byte vector
    rv = -(-cols // n)                   # vectors per row
    t = TABLE[size]
    want = override.get("strategy")
    al = "true" if (cols % n == 0 if aligned is None else aligned) else "false"
    max_cluster = MAX_CLUSTER if clusters is True else int(clusters or 0)
    # 1. short rows: a group of lanes per row, no barrier
    if want == "warp" or (want is None and rv <= t["warp_max_rv"]):
        group = override.get("group", min(GROUP_MAX, _pow2ceil(-(-rv // override.get("vecs", 2 if rv <= 64 else 4)))))
        vecs = override.get("vecs", _pow2ceil(-(-rv // group)))
        rpt = override.get("rows_per_thread", 1)
        per_block = (WARP_THREADS // group) * rpt
        return Plan("warp", _instance("warp", ctype, (vecs, group, rpt), al), (vecs, group, rpt), -(-rows // per_block),
                    WARP_THREADS, per_block, f"{rv} vectors per row: {group} lanes x {vecs} vectors")
    # 2. medium rows: a block per row
    if want in (None, "block"):
        strict = list(dict.fromkeys((override.get("vecs", v), limit) for v, limit in t["block_tiers"]))
        relaxed = [(v, 1024) for v, _ in strict] if want == "block" else []
        for vecs, limit in strict + relaxed:
            threads = override.get("threads", _round_up(-(-rv // vecs), warp_size))
            if threads <= limit:
                params = (vecs, _bound(threads))
                return Plan("block", _instance("block", ctype, params, al), params, rows, threads, 1,
                            f"{rv} vectors per row: {threads} threads x {vecs} vectors")
    # 3. long rows: a cluster of blocks per row, (m, s) exchanged through distributed shared memory;
    #    as many clusters as fit at once, sharing the rows through a ticket counter
    if max_cluster >= 2 and want in (None, "cluster"):
        tiers = t["cluster_tiers"]
        if al == "false":
            # a misaligned row is loaded element by element, which needs more registers than
            # several blocks per SM would leave, and more than 8 vectors' worth spills: the same
            # row share in twice the threads where a tier has more, one block per SM promised
            tiers = [(min(v, 8), c, min(1024, lim * v // min(v, 8)), 1) for v, c, lim, _ in tiers]
        tiers = [(override.get("vecs", v), override.get("cluster", c), lim, override.get("min_blocks", mb))
                 for v, c, lim, mb in tiers]  # tuning overrides win, on misaligned rows too
        # the first tier within its thread limit; a forced cluster may also take up to 1024 threads
        strict = [(tier, tier[2]) for tier in dict.fromkeys(tiers)]
        relaxed = [(tier, 1024) for tier, _ in strict] if want == "cluster" else []
        for (vecs, cluster, _, min_blocks), limit in strict + relaxed:
            threads = override.get("threads", _round_up(-(-rv // (vecs * cluster)), warp_size))
            if threads <= limit and cluster <= max_cluster and cluster * threads * vecs >= rv:
                # launched at its bound: the kernel's share of the row is then a compile-time
                # constant (cuda/softmax_fast.cu); the threads past the row hold -inf
                threads = _bound(threads)
                params = (vecs, cluster, threads, min_blocks)
                name = _instance("cluster", ctype, params, al)
                fit = resident(name, cluster, threads) if resident else max(1, SMS * min_blocks // cluster)
                n = max(1, min(rows, fit))
                return Plan("cluster", name, params, n * cluster, threads, -(-rows // n),
                            f"{rv} vectors per row: {cluster} blocks x {threads} threads x {vecs} vectors"
                            + (f" (up to {min_blocks} blocks per SM)" if min_blocks > 1 else "")
                            + f", {n} clusters share the rows")
    if want in ("block", "cluster"):
        raise ValueError(f"no {want} configuration holds {cols} columns of {dtype} in registers")
    # 4. anything else: read the row twice
    threads = override.get("threads", 1024)
    vecs = override.get("vecs", t["twopass_vecs"])
    return Plan("2pass", _instance("2pass", ctype, (vecs,), al), (vecs,), rows, threads, 1,
                "row too long to keep on chip" + ("" if max_cluster >= 2 else " without clusters") + ": two reads")


def _bound(threads: int) -> int:
    """The launch bound compiled into a block or cluster kernel: the power of two >= threads."""
    return max(32, _pow2ceil(threads))


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def simulate(row, dtype: str = "float32", warp_size: int = 32, **override):
    """A NumPy model of the planned kernel on one row (float64 arithmetic): the same ownership of
    elements ((j * G + t) * N + k for vector j, thread t of the G sharing the row), the same
    statistics (one exp per element, kept; the 16-bit cluster kernel recomputes it for the output
    instead, the same values), and the same reduction tree (lanes -> warps -> blocks -> the
    cluster), each level merging (m, s) pairs with reference.combine(). Returns (y, levels), where
    levels lists how many (m, s) states each level of the tree merged. For the notebook, and to
    test the index arithmetic without a GPU."""
    from .reference import OnlineState, combine, online_softmax

    row = np.asarray(row, dtype=np.float64)
    cols = row.size
    p = plan(cols, dtype, 1, warp_size=warp_size, **override)
    n = VEC_BYTES // DTYPES[dtype][1]
    if p.strategy == "2pass":  # per-thread states merged by the block, then a second read
        return online_softmax(row), [p.threads, 1]
    vecs = p.params[0]
    group = {"warp": p.params[1], "block": p.threads, "cluster": p.threads * p.params[1]}.get(p.strategy, 0)
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
        ([p.params[1]] if p.strategy == "cluster" else [])
    for size in sizes:                                                # lanes, then warps, then blocks
        states = [functools.reduce(combine, states[i:i + size], OnlineState()) for i in range(0, len(states), size)]
        levels.append(len(states))
    total = states[0]
    f = np.zeros_like(m_t) if total.m == -np.inf else np.where(np.isneginf(m_t), 0.0, np.exp(m_t - total.m) / total.s)
    y = np.zeros(cols)
    flat = idx.reshape(group, -1)
    keep = flat < cols
    y[flat[keep]] = (e * f[:, None])[keep]
    return y, levels


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
    # block <T, VECS, MAX_THREADS, ALIGNED>, cluster <T, VECS, CLUSTER, MAX_THREADS, MIN_BLOCKS, ALIGNED>
    return ints[1] if "softmax_fast_block" in mangled else ints[2]


def compile_report(names=None, arch: str = "sm_90"):
    """NVRTC-compile template instances (default: bench_kernels()) without a GPU."""
    return native.nvrtc_compile(native.ROOT / SOURCE["CUDA"], arch, name_expressions=names or bench_kernels())


# ------------------------------------------------------------------------------------------------
# Launch
# ------------------------------------------------------------------------------------------------
_MODULES: dict = {}
_DEVICE: dict = {}


def device_info():
    """(vendor, largest cluster, warp_size) of the current device, asked once. Clusters: 0 on AMD
    and on NVIDIA before sm_90; 16 on sm_90 (H100, H200: a non-portable size the launcher opts in
    to, seen working on the H200); 8 (the portable size) on later architectures, until measured."""
    import cupy

    dev = cupy.cuda.Device().id
    if dev not in _DEVICE:
        props = cupy.cuda.runtime.getDeviceProperties(dev)
        if cupy.cuda.runtime.is_hip:
            _DEVICE[dev] = ("HIP", 0, int(props["warpSize"]))
        else:
            major = int(props["major"])
            _DEVICE[dev] = ("CUDA", 0 if major < 9 else MAX_CLUSTER if major == 9 else PORTABLE_CLUSTER,
                            int(props["warpSize"]))
    return _DEVICE[dev]


NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14  # CUfunction_attribute


def kernel(name: str, cluster: int = 0):
    """The compiled template instance `name` (one RawModule per instance, compiled once). A cluster
    kernel of more than 8 blocks is allowed its non-portable size here."""
    import cupy

    if name not in _MODULES:
        vendor = device_info()[0]
        src = (native.ROOT / SOURCE[vendor]).read_text()
        mod = cupy.RawModule(code=src, options=tuple(native._options(native.DEFAULT_ITEMS)),
                             name_expressions=[name], backend="hiprtc" if vendor == "HIP" else "nvrtc")
        fn = mod.get_function(name)
        if cluster > PORTABLE_CLUSTER:
            cupy.cuda.driver.funcSetAttribute(fn.kernel.ptr, NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
        _MODULES[name] = fn
    return _MODULES[name]


_RESIDENT: dict = {}


def resident_clusters(name: str, cluster: int, threads: int) -> int:
    """How many clusters of this kernel the GPU runs at once, from the driver
    (cuOccupancyMaxActiveClusters): clusters live inside one GPC, so this is not simply SMs /
    cluster (an H200 fits 14 clusters of 16 and 15 of 8 one-block-per-SM ones, not 16)."""
    import cupy

    key = (cupy.cuda.Device().id, name, threads)
    if key not in _RESIDENT:
        import ctypes

        class LaunchConfig(ctypes.Structure):  # CUlaunchConfig
            _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                        ("stream", ctypes.c_void_p), ("attrs", ctypes.c_void_p), ("nattrs", ctypes.c_uint)]

        fn = kernel(name, cluster)
        cfg = LaunchConfig((ctypes.c_uint * 3)(cluster, 1, 1), (ctypes.c_uint * 3)(threads, 1, 1), 0)
        n = ctypes.c_int(0)
        rc = ctypes.CDLL("libcuda.so.1").cuOccupancyMaxActiveClusters(
            ctypes.byref(n), ctypes.c_void_p(fn.kernel.ptr), ctypes.byref(cfg))
        if rc != 0 or n.value < 1:
            raise RuntimeError(f"cuOccupancyMaxActiveClusters failed (CUresult {rc}) for {name} x {threads} threads")
        _RESIDENT[key] = n.value
    return _RESIDENT[key]


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
    all -inf comes back as zeros. Overrides as for plan(), plus `clusters` (a smaller cluster limit)
    and `resident` (launch at most this many clusters), for tests and tuning."""
    rows, cols, dtype = check(x, out)
    if out is None:
        out = native._empty_like(x)
    vendor, clusters, warp_size = device_info()
    clusters = min(clusters, override.pop("clusters", clusters))  # a smaller limit, for tests
    n = VEC_BYTES // DTYPES[dtype][1]
    px, py = _pointer(x), _pointer(out)
    aligned = cols % n == 0 and px % VEC_BYTES == 0 and py % VEC_BYTES == 0
    most = override.pop("resident", None)
    fit = resident_clusters if most is None else (lambda *a: min(int(most), resident_clusters(*a)))
    p = plan(cols, dtype, rows, clusters=clusters, warp_size=warp_size, aligned=aligned, resident=fit, **override)
    cluster = p.strategy == "cluster"
    fn = kernel(p.kernel, p.params[1] if cluster else 0)
    args = (np.uint64(px), np.uint64(py), np.int32(rows), np.int32(cols))
    if cluster:
        import cupy

        tickets = cupy.zeros(1, dtype=np.int32)  # per call: launches on other streams may overlap
        args += (tickets,)
    fn((p.grid,), (p.threads,), args)
    return out

"""The fast softmax (cuda/softmax_fast.cu): one entry, a strategy per row length, and the fused
operations built on the same kernel bodies.

    from a07_softmax import fast
    y = fast.softmax(x)          # x: (rows, cols) float32 / float16 / bfloat16, CuPy or CUDA torch
    p = fast.scale_mask_softmax(scores, scale, causal=True)   # scores: (..., q_len, keys)
    fast.plan(cols, "bfloat16")  # which kernel, launch shape and why, without a GPU

The cross-entropy kernel of the family is launched by a07_softmax.cross_entropy (backend="cuda").

`plan()` is plain Python, so the choice is testable (and printable) on any machine; `softmax()`
checks its arguments, compiles the chosen template instance once through CuPy RawModule (NVRTC on
NVIDIA, hiprtc on ROCm) and launches it.
"""
from __future__ import annotations

import contextlib

from dataclasses import dataclass, replace
import functools
import math

import numpy as np

from . import constants, native

SOURCE = {"CUDA": "cuda/softmax_fast.cu", "HIP": "hip/softmax_fast.cpp"}
DTYPES = {"float32": ("float", 4), "float16": ("f16_t", 2), "bfloat16": ("bf16_t", 2)}
VEC_BYTES = 16
GROUP_MAX = 32      # lanes per row in the warp strategy (also fits a 64-lane AMD wavefront)
WARP_THREADS = constants.FAST_WARP_THREADS      # block size (and launch bound) of the warp strategy
TWOPASS_THREADS = constants.FAST_TWOPASS_THREADS  # block size (and launch bound) of the 2-pass strategy
PORTABLE_CLUSTER = 8  # the largest cluster every sm_90 device runs; H100/H200 also run 16
MAX_CLUSTER = 16
SMS = 132             # plan()'s default device for sizing cluster grids: an H100/H200
STRATEGIES = ("warp", "block", "cluster", "2pass")
# Row operations (cuda/softmax_fast.cu, "Row operations"): the kernel-name prefix of each.
OPS = {"softmax": "softmax_fast", "scale_mask_softmax": "scale_mask_softmax_fast",
       "scale_span_softmax": "scale_span_softmax_fast", "scaled_softmax": "scaled_softmax_fast", "cross_entropy": "cross_entropy_fast",
       "cross_entropy_loss": "cross_entropy_loss_fast"}


@dataclass(frozen=True)
class BlockTier:
    """One block per row: `vecs` 16-byte vectors a thread, for rows that need at most `max_threads`;
    `raw`: a 16-bit row kept as its raw bits (cuda/softmax_fast.cu, PartOf): twice the bytes a
    register holds, a second exp per element."""
    vecs: int
    max_threads: int
    raw: bool = False


@dataclass(frozen=True)
class ClusterTier:
    """A cluster of `cluster` blocks per row, `vecs` vectors a thread, at most `max_threads` threads a
    block; the launch bounds promise `min_blocks` blocks per SM (so each thread's register budget is
    65536 / (max_threads * min_blocks))."""
    vecs: int
    cluster: int
    max_threads: int
    min_blocks: int


@dataclass(frozen=True)
class MisalignedFit:
    """How a cluster holds a row off the 16-byte grid (an odd length), fitted to the row: `vecs`
    vectors a thread, the cluster of `clusters` whose blocks the row fills best, blocks of the
    fewest warps that hold it among those that fill an SM exactly at `registers` a thread. Many
    small blocks keep loads in flight on every SM while some of them reduce, and a tight fit leaves
    few threads idle (bench/sweeps/fast_configs.py --claim misaligned-cluster-fit).

    An SM's four schedulers each hold 16384 registers: at 48 a thread, 10 warps each, 40 in all.
    The launch bounds promise 40 / (warps a block) blocks, so a block's warps divide 40: ptxas then
    allots exactly 48 registers (with 35 warps promised, as 5 blocks of 7, it allotted 56 and the
    cross-entropy instance spilled at that; at 48, none does: NVRTC's report, tests/test_fast.py).
    Rows that need more than 20 warps a block take any number of warps, one block an SM.

    Blocks have at least `min_warps` warps: at 32767 bf16 columns, 16 blocks of 2 warps (20 an SM)
    ran the softmax at half the copy's rate, 8 blocks of 4 warps (10 an SM) holding the same slots
    at 82 % (H200; the sweep's claim repeats it)."""
    vecs: int = 5
    clusters: tuple = (8, 16)
    registers: int = 48
    min_warps: int = 4

    def sm_warps(self, warp_size: int = 32) -> int:
        return 4 * (65536 // 4 // (self.registers * warp_size))

    def threads(self, need: int, warp_size: int = 32) -> tuple:
        """(threads a block, blocks an SM promised) for a block of at least `need` threads."""
        warps = self.sm_warps(warp_size)
        for w in range(self.min_warps, warps // 2 + 1):  # (an SM runs at most 32 blocks)
            if warps % w == 0 and warps // w <= 32 and w * warp_size >= need:
                return w * warp_size, warps // w
        return _round_up(need, warp_size), 1


@dataclass(frozen=True)
class Strategies:
    """The mapping for one element size. The first row of each list that holds the row wins."""
    warp_max_vectors: int          # rows of up to this many 16-byte vectors go to lanes of a warp
    block_tiers: tuple
    cluster_tiers: tuple
    twopass_vecs: int              # vectors a thread per step when the row is read twice
    twopass_threads: int = TWOPASS_THREADS  # threads a block then (at most the kernel's bound, TWOPASS_THREADS)
    # misaligned rows of 8 or more vectors a thread are compiled for 1024 threads (the plain
    # softmax's 512-thread instance spilled); 0: for the threads they launch, like the others
    wide_misaligned_bound: int = 1024
    misaligned_fit: MisalignedFit = MisalignedFit()  # misaligned rows past the block tiers
    warp_min_vecs: int = 2         # vectors a lane at least: fewer lanes a row, more rows a warp
    kernels: str = ""              # the op whose kernels run these rows, where not the op's own


# The strategy table, per element size (4: fp32, 2: fp16/bf16). Its shape is general: few lanes
# for short rows, more data per thread as rows grow, then several SMs per row, then two reads. Its
# numbers are the H200's; docs/performance.md has the evidence for each tier and the alternatives
# that lost, with the commands that measure them again. Every tier is held free of register
# spills by tests/test_fast.py.
TABLE = {
    4: Strategies(
        warp_max_vectors=64,  # up to 256 fp32: 2 vectors (8 floats) a lane
        block_tiers=(BlockTier(vecs=2, max_threads=1024), BlockTier(vecs=4, max_threads=512),
                     BlockTier(vecs=8, max_threads=512), BlockTier(vecs=8, max_threads=1024)),
        # always 8 vectors (32 floats) a thread, loaded straight into registers
        cluster_tiers=(ClusterTier(vecs=8, cluster=2, max_threads=1024, min_blocks=1),
                       ClusterTier(vecs=8, cluster=8, max_threads=512, min_blocks=2),
                       ClusterTier(vecs=8, cluster=16, max_threads=512, min_blocks=1),
                       ClusterTier(vecs=8, cluster=16, max_threads=1024, min_blocks=1),
                       ClusterTier(vecs=8, cluster=8, max_threads=1024, min_blocks=1)),  # devices limited to 8
        twopass_vecs=4),
    2: Strategies(
        warp_max_vectors=128,  # up to 1024 bf16: 2 or 4 vectors (16 or 32 values) a lane
        block_tiers=(BlockTier(vecs=2, max_threads=512), BlockTier(vecs=4, max_threads=512)),
        # cluster threads keep 16-bit rows as raw bits (RowBits) and compute exp twice; small blocks,
        # several per SM, so that some load while others reduce
        cluster_tiers=(ClusterTier(vecs=8, cluster=4, max_threads=128, min_blocks=6),
                       ClusterTier(vecs=8, cluster=8, max_threads=128, min_blocks=7),
                       ClusterTier(vecs=16, cluster=8, max_threads=128, min_blocks=5),
                       ClusterTier(vecs=16, cluster=16, max_threads=128, min_blocks=5),
                       ClusterTier(vecs=16, cluster=8, max_threads=256, min_blocks=2),  # devices limited to 8
                       ClusterTier(vecs=16, cluster=16, max_threads=256, min_blocks=2)),
        twopass_vecs=1),
}

# The fused operations carry more per row (a mask's span and pointer; the target, its logit and the
# loss), so where the softmax's tier sits at its register bound theirs would spill (NVRTC's report,
# held by tests/test_fast.py); those tiers change, nothing else:
#   - scale_mask_softmax, 16-bit: scores are recomputed from the raw bits at every use in the
#     cluster kernel, which spilled at every occupancy: rows longer than a block holds (16384) are
#     read twice, two vectors a thread a step; fp32 as cross-entropy below;
#   - scale_mask_softmax, block rows: a causal row reads only up to its diagonal, so in a block of
#     the softmax's shape half the threads of an average row load nothing and wait at the barriers.
#     Fewer threads with more vectors each (fp32: 4 x 64, then 8 x 512; 16-bit: 8 x 128, then
#     4 x 512) keep more of them busy (bench/sweeps/fast_configs.py --claim causal-block-tiers).
#     Misaligned rows compile for the threads they launch: the 16-bit 8-vector instance compiled
#     for 1024 threads spilled;
#   - scale_span_softmax (the mask from indices alone, no mask tensor), 16-bit: a causal row reads
#     half its vectors on average, so what decides its speed is how many loads an SM keeps in
#     flight. Short rows take 4 vectors a lane (512 keys: 16 lanes a row, not 32 with 2 each);
#     rows of 4097 to 16384 keep their raw bits (BlockTier.raw: 8 vectors in 32 registers, 1024
#     threads an SM, where floats held 640). The raw form lost at 2048 and 4096 keys
#     (bench/sweeps/fast_configs.py --claim causal-raw-rows);
#   - cross_entropy: fp16's 8 x 8 x 128 cluster tier promises 6 blocks an SM, not 7; misaligned
#     fp32 rows of more than 16384 go to a cluster instead of a 1024-thread block (misaligned:
#     spilled).
OP_TABLES = {
    "softmax": TABLE,
    "scale_mask_softmax": {
        4: replace(TABLE[4], block_tiers=(BlockTier(vecs=4, max_threads=64), BlockTier(vecs=8, max_threads=512)),
                   wide_misaligned_bound=0),
        2: replace(TABLE[2], block_tiers=(BlockTier(vecs=8, max_threads=128), BlockTier(vecs=4, max_threads=512)),
                   wide_misaligned_bound=0, cluster_tiers=(), twopass_vecs=2)},
    "cross_entropy": {
        4: replace(TABLE[4], block_tiers=TABLE[4].block_tiers[:3], wide_misaligned_bound=0),
        2: replace(TABLE[2], cluster_tiers=tuple(replace(c, min_blocks=6) if (c.vecs, c.cluster, c.min_blocks) == (8, 8, 7)
                                                 else c for c in TABLE[2].cluster_tiers))},
}
OP_TABLES["scale_span_softmax"] = {
    # fp32 rows run the masked kernels with a null mask: compiled without the mask's code, ptxas
    # spilled in three fp32 cluster instances, and fp32 has no raw form to gain from it
    4: replace(OP_TABLES["scale_mask_softmax"][4], kernels="scale_mask_softmax"),
    2: replace(OP_TABLES["scale_mask_softmax"][2], warp_min_vecs=4,
               block_tiers=(BlockTier(vecs=8, max_threads=64), BlockTier(vecs=8, max_threads=256, raw=True)))}
# scale_mask_softmax with nothing masked (scaled_softmax) reads whole rows: the softmax's block
# tiers (fp32 rows past 16384 to a cluster, as cross-entropy's), 16-bit rows longer than a block
# holds read twice, as the masked ones
OP_TABLES["scaled_softmax"] = {4: replace(TABLE[4], block_tiers=TABLE[4].block_tiers[:3]),
                               2: replace(OP_TABLES["scale_mask_softmax"][2], block_tiers=TABLE[2].block_tiers,
                                          wide_misaligned_bound=TABLE[2].wide_misaligned_bound)}
# The loss alone (no store) needs no row on chip: the two-pass kernel returns after its first pass,
# so rows past the block tiers stream through it and are read once, in small blocks (fp32: 256
# threads, 2 vectors a thread a step; 16-bit: 128 threads, 4 vectors). On the H200 it ran faster
# than every cluster tier at each vocabulary of the benchmark, odd lengths included; why the cluster
# tiers lose is not profiled (bench/sweeps/fast_configs.py --claim loss-tiers, results/nvidia-h200/sweeps.txt).
# 16-bit rows of 8 vectors a thread step spilled at the kernel's 1024-thread bound. The fp32 block of
# 8 vectors a thread at 512 threads spilled too (rows of 8193 to 16384 stream as well).
OP_TABLES["cross_entropy_loss"] = {
    4: replace(OP_TABLES["cross_entropy"][4], block_tiers=TABLE[4].block_tiers[:2], cluster_tiers=(),
               twopass_vecs=2, twopass_threads=256),
    2: replace(OP_TABLES["cross_entropy"][2], cluster_tiers=(), twopass_vecs=4, twopass_threads=128)}

# Ops whose two-pass kernel stops after its first pass (nothing to write: Row::WRITES is false)
ONE_READ = frozenset({"cross_entropy_loss"})

# What a tuning experiment or a test may force; anything else is a typo and an error.
OVERRIDES = frozenset({"strategy", "vecs", "group", "rows_per_thread", "cluster", "threads", "min_blocks", "raw"})


@dataclass(frozen=True)
class Plan:
    strategy: str        # "warp", "block", "cluster" or "2pass"
    kernel: str          # the template instance, e.g. "softmax_fast_warp<float, 2, 16, 1, true>"
    params: tuple        # its integer template arguments, e.g. (2, 16, 1): vecs, group, rows per thread
    grid: int
    threads: int
    rows_each: int       # rows one block handles (warp, block, 2pass), or one cluster on average (cluster)
    why: str
    launch_bound: int = 0  # the threads per block the instance is compiled for (__launch_bounds__)

    def describe(self) -> str:
        return f"{self.strategy:<7} {self.kernel:<46} grid {self.grid:>8} x {self.threads:>4} threads  ({self.why})"


def _pow2ceil(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


def _instance(name: str, ctype: str, params: tuple, aligned: str, op: str = "softmax", raw: bool = False) -> str:
    """The template instance's expression; RAW is named only where true (its default is false)."""
    return f"{OPS[op]}_{name}<{', '.join([ctype, *map(str, params), aligned] + (['true'] if raw else []))}>"


def plan(cols: int, dtype: str = "float32", rows: int = 1, *, clusters: int = MAX_CLUSTER, warp_size: int = 32,
         aligned: bool | None = None, resident=None, op: str = "softmax", **override) -> Plan:
    """The strategy for a (rows, cols) softmax of `dtype`. `clusters`: the largest thread-block
    cluster the device runs (0 or False: none, as on AMD and NVIDIA before sm_90; 8: portable;
    16: H100/H200). `aligned`: rows start on 16-byte boundaries (default: cols is a multiple of
    the vector width, as for any freshly allocated tensor); otherwise the kernel loads element by
    element. `resident(kernel, cluster, threads)`: how many clusters of that kernel fit on
    the GPU at once (softmax() asks the driver; by default SMS x blocks per SM // blocks per
    cluster, for the H200's 132 SMs). Keyword overrides (OVERRIDES: strategy, vecs, group,
    rows_per_thread, cluster, threads, min_blocks) are for tuning experiments and tests; an
    unknown one is a TypeError. `op` (OPS) names the row operation: the mapping is the same for
    all, only the kernel's name differs."""
    unknown = sorted(set(override) - OVERRIDES)
    if unknown:
        raise TypeError(f"plan() got unknown override(s) {', '.join(unknown)}; "
                        f"the tunable ones are {', '.join(sorted(OVERRIDES))}")
    if dtype not in DTYPES:
        raise TypeError(f"dtype {dtype} not supported; the fast softmax takes {', '.join(DTYPES)}")
    if op not in OPS:
        raise ValueError(f"op must be one of {', '.join(OPS)}, got {op!r}")
    want = override.get("strategy")
    if want is not None and want not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {want!r}")
    ctype, size = DTYPES[dtype]
    n = VEC_BYTES // size                # elements per 16-byte vector
    t = OP_TABLES[op][size]
    kop = t.kernels or op                # the kernels' op (same arguments)
    al = "true" if (cols % n == 0 if aligned is None else aligned) else "false"
    # vectors per row; a misaligned row's vectors start at the 16-byte boundary before it, up to
    # n - 1 elements early (cuda/softmax_fast.cu, lead_of())
    rv = -(-(cols + (n - 1 if al == "false" else 0)) // n)
    max_cluster = MAX_CLUSTER if clusters is True else int(clusters or 0)
    # 1. short rows: a group of lanes per row, no barrier
    if want == "warp" or (want is None and rv <= t.warp_max_vectors):
        least = override.get("vecs", max(t.warp_min_vecs, 2 if rv <= 64 else 4))
        group = override.get("group", min(GROUP_MAX, _pow2ceil(-(-rv // least))))
        vecs = override.get("vecs", _pow2ceil(-(-rv // group)))
        rpt = override.get("rows_per_thread", 1)
        if group * vecs < rv:
            raise ValueError(f"a warp row of {group} lanes x {vecs} vectors holds {group * vecs} of its {rv} vectors")
        per_block = (WARP_THREADS // group) * rpt
        raw = size == 2 and bool(override.get("raw", False))  # no tier keeps a warp's rows raw
        return Plan("warp", _instance("warp", ctype, (vecs, group, rpt), al, kop, raw), (vecs, group, rpt),
                    -(-rows // per_block), WARP_THREADS, per_block,
                    f"{rv} vectors per row: {group} lanes x {vecs} vectors" + (" (raw bits)" if raw else ""), WARP_THREADS)
    # 2. medium rows: a block per row
    if want in (None, "block"):
        strict = list(dict.fromkeys((override.get("vecs", tier.vecs), tier.max_threads, tier.raw) for tier in t.block_tiers))
        relaxed = [(v, 1024, r) for v, _, r in strict] if want == "block" else []
        for vecs, limit, raw in strict + relaxed:
            # misaligned rows stay floats: their element loads cost the registers raw rows save
            raw = size == 2 and bool(override.get("raw", raw and al == "true"))
            threads = override.get("threads", _round_up(-(-rv // vecs), warp_size))
            if threads <= limit and threads * vecs >= rv:  # (forced threads may hold less than the row)
                # misaligned rows of 8 vectors a thread: ptxas gives the 512-thread instance a stack
                # frame (spills, NVRTC's report) and the 1024-thread one none; the kernel reads
                # blockDim.x, so the larger bound costs nothing but the register ceiling
                bound = t.wide_misaligned_bound if (al == "false" and vecs >= 8 and t.wide_misaligned_bound) \
                    else _bound(threads)
                params = (vecs, bound)
                return Plan("block", _instance("block", ctype, params, al, kop, raw), params, rows, threads, 1,
                            f"{rv} vectors per row: {threads} threads x {vecs} vectors" + (" (raw bits)" if raw else ""),
                            params[1])
    # 3. long rows: a cluster of blocks per row, (m, s) exchanged through distributed shared memory;
    #    as many clusters as fit at once, sharing the rows through a ticket counter
    if max_cluster >= 2 and want in (None, "cluster") and al == "false" and (t.cluster_tiers or want):
        fit = _fit_misaligned(rv, t.misaligned_fit, max_cluster, warp_size, override)
        if fit is not None:
            return _cluster_plan(rv, rows, ctype, al, kop, *fit, resident, "fitted to the row")
    elif max_cluster >= 2 and want in (None, "cluster"):
        tiers = _cluster_tiers(t, size, forced=want == "cluster")
        tiers = [ClusterTier(override.get("vecs", c.vecs), override.get("cluster", c.cluster), c.max_threads,
                             override.get("min_blocks", c.min_blocks)) for c in tiers]  # overrides win
        # the first tier within its thread limit; a forced cluster may also take up to 1024 threads
        strict = [(tier, tier.max_threads) for tier in dict.fromkeys(tiers)]
        relaxed = [(tier, 1024) for tier, _ in strict] if want == "cluster" else []
        for tier, limit in strict + relaxed:
            threads = override.get("threads", _round_up(-(-rv // (tier.vecs * tier.cluster)), warp_size))
            if threads <= limit and tier.cluster <= max_cluster and tier.cluster * threads * tier.vecs >= rv:
                # launched at its bound, a power of two (few instances for the row lengths of one tier)
                return _cluster_plan(rv, rows, ctype, al, kop, tier.vecs, tier.cluster, _bound(threads),
                                     tier.min_blocks, resident)
    if want in ("block", "cluster"):
        raise ValueError(f"no {want} configuration holds {cols} columns of {dtype} in registers")
    # 4. anything else: read the row twice
    threads = override.get("threads", t.twopass_threads)
    vecs = override.get("vecs", t.twopass_vecs)
    why = "the loss alone keeps no row on chip: one read" if op in ONE_READ else \
        "row too long to keep on chip" + ("" if max_cluster >= 2 else " without clusters") + ": two reads"
    return Plan("2pass", _instance("2pass", ctype, (vecs,), al, kop), (vecs,), rows, threads, 1, why, TWOPASS_THREADS)


def _cluster_plan(rv: int, rows: int, ctype: str, al: str, kop: str, vecs: int, cluster: int, threads: int,
                  min_blocks: int, resident, how: str = "") -> Plan:
    """A cluster launch of `threads` a block, its launch bound: the kernel's share of the row is then
    a compile-time constant (cuda/softmax_fast.cu, cluster_rows); the threads past the row hold -inf.
    As many clusters as fit on the GPU at once (`resident`, as plan()'s) share the rows."""
    params = (vecs, cluster, threads, min_blocks)
    name = _instance("cluster", ctype, params, al, kop)
    fit = resident(name, cluster, threads) if resident else max(1, SMS * min_blocks // cluster)
    k = max(1, min(rows, fit))
    return Plan("cluster", name, params, k * cluster, threads, -(-rows // k),
                f"{rv} vectors per row: {cluster} blocks x {threads} threads x {vecs} vectors"
                + (f" (up to {min_blocks} blocks per SM)" if min_blocks > 1 else "")
                + (f", {how}" if how else "") + f", {k} clusters share the rows", threads)


def _fit_misaligned(rv: int, fit: MisalignedFit, max_cluster: int, warp_size: int, override: dict):
    """(vecs, cluster, threads, min_blocks) of a misaligned row's cluster (MisalignedFit), or None
    where no cluster of at most 1024 threads a block holds it. Overrides fix a field; the best fit
    is the one that leaves the fewest vector slots empty, the larger cluster (smaller blocks, more
    of them an SM) on a tie."""
    best = None
    for cluster in ([override["cluster"]] if "cluster" in override else sorted(fit.clusters)):
        if not 2 <= cluster <= max_cluster:
            continue
        vecs = override.get("vecs", fit.vecs)
        threads, blocks = fit.threads(-(-rv // (cluster * vecs)), warp_size)
        threads = override.get("threads", threads)
        if threads > 1024 or cluster * threads * vecs < rv:
            continue
        empty = cluster * threads * vecs - rv
        if best is None or empty <= best[0]:  # (clusters ascending)
            best = (empty, vecs, cluster, threads, blocks)
    if best is None:
        return None
    _, vecs, cluster, threads, blocks = best
    return vecs, cluster, threads, override.get("min_blocks", blocks)


def _cluster_tiers(t: Strategies, size: int, forced: bool) -> list:
    """The cluster tiers of an op's table; an op with none of its own (the loss alone), when a cluster
    is forced on it (a tuning experiment), takes the softmax's."""
    return list(t.cluster_tiers or (TABLE[size].cluster_tiers if forced else ()))


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


PLANNED_COLS = tuple(sorted({2**k for k in range(19)} | {3, 33, 1000, 1023, 3000, 16385, 262147}))


def instances(dtypes=("float32", "bfloat16", "float16"), cols=PLANNED_COLS, ops=tuple(OPS)) -> dict:
    """{template instance: its launch bound} for every instance softmax() can launch over these row
    lengths (odd ones included), aligned (where cols allows) and misaligned, with clusters of 16, of
    8 and none: what the compile tests build and bench/sanitize.py launches, so the strategy table
    and the compiled instances cannot drift apart."""
    out = {}
    for op in ops:
        for dt in dtypes:
            n = VEC_BYTES // DTYPES[dt][1]
            for c in cols:
                for aligned in (True, False):
                    for clusters in (MAX_CLUSTER, PORTABLE_CLUSTER, 0):
                        p = plan(c, dt, 1024, aligned=aligned and c % n == 0, clusters=clusters, op=op)
                        out[p.kernel] = p.launch_bound
    return dict(sorted(out.items()))


def compile_report(names=None, arch: str = "sm_90"):
    """NVRTC-compile template instances (default: every one in instances()) without a GPU; the
    report names each kernel by its instance expression. Each instance is compiled on its own, as
    kernel() compiles it at run time: in one program with the others, ptxas allocated some
    instances' registers differently and hid a spill that the run-time build has."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    names = list(names or instances())
    src = native.ROOT / SOURCE["CUDA"]
    with ThreadPoolExecutor(max(1, min(8, os.cpu_count() or 1))) as pool:
        results = list(pool.map(lambda n: native.nvrtc_compile(src, arch, name_expressions=[n]), names))
    kernels = {}
    for r in results:
        for k in r.kernels:
            kernels.setdefault(k.name, k)  # copy_hinted (not a template) is in every one
    failed = [r.log for r in results if not r.ok]
    return native.CompileResult(results[0].source, not failed, "\n".join(failed), list(kernels.values()))


_CPU_BUILDS: dict = {}


def _run_on_cpu(op: str, x, dtype: str, extra_kinds, extra_values, outputs, *, aligned, warp_size, override,
                offsets=(0, 0)):
    """Build (once) and run the planned instance of `op` on the CPU target; {argument index: array}.
    The kernel's arguments: x, y, rows, cols, then extra_kinds/extra_values; `outputs` are shapes of
    extra outputs among them. `offsets`: (x, y) start that many elements into their buffers, as views
    at an odd offset do (a misaligned first row; the output's rows off the input's alignment)."""
    import tempfile
    from pathlib import Path

    from . import cpu_target

    if len(x.shape) != 2 or x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(f"x must be 2-D (rows, cols) with rows, cols >= 1, got shape {tuple(x.shape)}")
    if dtype not in DTYPES:
        raise TypeError(f"dtype {dtype} not supported; the fast softmax takes {', '.join(DTYPES)}")
    rows, cols = map(int, x.shape)
    n = VEC_BYTES // DTYPES[dtype][1]
    if any(o % n for o in offsets):
        aligned = False
    p = plan(cols, dtype, rows, clusters=0, warp_size=warp_size, aligned=aligned, op=op, **override)
    kinds = [("in", dtype, offsets[0]), ("out", dtype, offsets[1]), ("i32", None), ("i32", None), *extra_kinds]
    key = (p.kernel, warp_size, tuple(kinds))  # a null pointer and an array build different drivers
    if key not in _CPU_BUILDS:
        work = cpu_target.scratch()
        _CPU_BUILDS[key] = (cpu_target.build(native.ROOT / SOURCE["CUDA"], p.kernel, kinds, work, warp=warp_size), work)
    exe, work = _CPU_BUILDS[key]
    with tempfile.TemporaryDirectory(dir=work) as run_dir:
        return cpu_target.run(exe, p.grid, p.threads, kinds, [x, (rows, cols), rows, cols, *extra_values],
                              Path(run_dir))


def _host(x):
    return np.asarray(x) if not type(x).__module__.startswith("torch") else x


def softmax_on_cpu(x, dtype: str = "float32", *, aligned: bool | None = None, warp_size: int = 32, offsets=(0, 0),
                   **override):
    """The same kernel source on the CPU target (common/cpu_target.h): plan() without clusters picks
    the instance (warp, block or two-pass strategy), the system C++ compiler builds it, and a CPU
    runs it, a block's threads as fibers. Correctness only, for small inputs: how CI and a laptop
    check the fast kernels' arithmetic against float64. `x`: a (rows, cols) array of values
    (NumPy, any float dtype; rounded to `dtype`); returns float32 values of the `dtype` output.
    `aligned=False` forces the misaligned path; `offsets` start x and y that many elements into their
    buffers (_run_on_cpu)."""
    return _run_on_cpu("softmax", _host(x), dtype, [], [], [], aligned=aligned, warp_size=warp_size,
                       override=override, offsets=offsets)[1]


def scale_mask_softmax_on_cpu(x, scale: float = 1.0, dtype: str = "float32", *, causal: bool = False,
                              window: int = 0, valid_len=None, mask=None, q_len: int | None = None,
                              aligned: bool | None = None, warp_size: int = 32, offsets=(0, 0), **override):
    """scale_mask_softmax() on the CPU target, for tests and laptops: `x` (rows, cols) or (batch, q_len,
    cols) or (batch, heads, q_len, cols) values; valid_len (rows,) integers; mask additive values that
    broadcast against x (see scale_mask_softmax). Returns the (rows, cols) float32 values of the output.
    `offsets`: as softmax_on_cpu's."""
    x = np.asarray(x)
    shape4, q = _query_layout(x.shape, q_len)
    x2 = x.reshape(-1, x.shape[-1])
    rows, cols = x2.shape
    native.check_mask_args(rows, cols, scale, q, window, causal)
    _check_scale(scale)
    kinds, values = [("f32", None), ("i32", None), ("i32", None), ("i32", None), ("i32", None)], \
        [scale, shape4[1], q, int(causal), int(window)]
    if valid_len is None:
        kinds.append(("null", "int"))
        values.append(None)
    else:
        vl = np.asarray(valid_len)
        if vl.shape != (rows,):
            raise ValueError(f"valid_len must have shape ({rows},), got {vl.shape}")
        kinds.append(("in", "int32"))
        values.append(vl.astype(np.int32))
    ctype = DTYPES[dtype][0]
    if mask is None:
        kinds += [("null", ctype), ("i64", None), ("i64", None), ("i64", None)]
        values += [None, 0, 0, 0]
    else:
        base = np.ascontiguousarray(np.asarray(mask, dtype=np.float32))
        if base.ndim == 0 or base.shape[-1] != cols:  # broadcast along the keys: materialised
            base = np.ascontiguousarray(np.broadcast_to(base, _logical_shape(x.shape, shape4)))
        strides = _mask_strides(np.broadcast_to(base, _logical_shape(x.shape, shape4)).strides, 4, shape4, x.ndim)
        kinds += [("in", dtype), ("i64", None), ("i64", None), ("i64", None)]
        values += [base.reshape(-1), *strides]
    if _nothing_masked(scale, causal, window, valid_len, mask):
        kinds, values = [("f32", None)], [scale]
        return _run_on_cpu("scaled_softmax", x2, dtype, kinds, values, [], aligned=aligned, warp_size=warp_size,
                           override=override, offsets=offsets)[1]
    return _run_on_cpu(_masked_op(mask), x2, dtype, kinds, values, [], aligned=aligned, warp_size=warp_size,
                       override=override, offsets=offsets)[1]


def _masked_op(mask) -> str:
    """The masked kernels' op: with an additive mask tensor, or with the mask from indices alone
    (scale_span_softmax, which compiles the tensor's code out and may keep 16-bit rows raw)."""
    return "scale_mask_softmax" if mask is not None else "scale_span_softmax"


def _nothing_masked(scale, causal, window, valid_len, mask) -> bool:
    """scale_mask_softmax is softmax(x * scale) here: its scaled_softmax kernels (no span to test per
    vector: the 16-bit rows stream as fast as the plain softmax's), for a positive scale, which they
    fold into the exp's factor scale * log2(e); a scale so large that the factor overflows float32
    (above FLT_MAX / log2(e)) takes the masked kernel, which multiplies each score instead."""
    if causal or window or valid_len is not None or mask is not None or not float(scale) > 0:
        return False
    with np.errstate(over="ignore"):
        return bool(np.isfinite(np.float32(scale) * np.float32(math.log2(math.e))))


def _check_scale(scale) -> None:
    """The kernels take the scale as a float32: a finite one past FLT_MAX would arrive as inf."""
    if not abs(float(scale)) <= float(np.finfo(np.float32).max):
        raise ValueError(f"scale must be finite as a float32 (|scale| <= 3.4e38), got {scale!r}")


def cross_entropy_on_cpu(logits, target, dtype: str = "float32", *, ignore_index: int = -100,
                         label_smoothing: float = 0.0, z_loss: float = 0.0, grad_scale: float | None = None,
                         grad: bool = True, aligned: bool | None = None, warp_size: int = 32, offsets=(0, 0),
                         **override):
    """The cross-entropy kernel on the CPU target: (per-row loss, gradient) as float32 arrays, the
    gradient of the summed loss times grad_scale (None: 1), rounded to `dtype`. grad=False runs the
    loss-only kernel; the gradient returned is then the poisoned (NaN) buffer it must not touch.
    `offsets`: (logits, gradient) as softmax_on_cpu's."""
    x = np.asarray(logits)
    rows, _ = x.shape
    t = np.asarray(target, dtype=np.int64)
    kinds = [("in", "int64"), ("out", None), ("null", "float") if grad_scale is None else ("in", "float32"),
             ("i64", None), ("f32", None), ("f32", None)]
    values = [t, (rows,), None if grad_scale is None else np.array([grad_scale], np.float32), ignore_index,
              label_smoothing, z_loss]
    out = _run_on_cpu("cross_entropy" if grad else "cross_entropy_loss", x, dtype, kinds, values, [],
                      aligned=aligned, warp_size=warp_size, override=override, offsets=offsets)
    return out[5], out[1]


def _query_layout(shape, q_len):
    """(batch, heads, q_len, cols) of scores of `shape`: (rows, cols) with q_len query rows a batch
    (default: all rows), (batch, q_len, cols), or (batch, heads, q_len, cols); and q_len."""
    if len(shape) not in (2, 3, 4):
        raise ValueError(f"scores must be (rows, cols), (batch, q_len, cols) or (batch, heads, q_len, cols), "
                         f"got shape {tuple(shape)}")
    if len(shape) == 2:
        q = shape[0] if q_len is None else q_len
        if isinstance(q, bool) or not isinstance(q, (int, np.integer)) or q < 1 or shape[0] % q:
            raise ValueError(f"q_len must be a positive integer dividing rows ({shape[0]}), got {q_len!r}")
        return (shape[0] // q, 1, int(q), shape[1]), int(q)
    if q_len is not None and q_len != shape[-2]:
        raise ValueError(f"q_len = {q_len} contradicts the scores' shape {tuple(shape)} (q_len is shape[-2])")
    return ((shape[0], 1) if len(shape) == 3 else tuple(shape[:2])) + tuple(shape[-2:]), int(shape[-2])


def _logical_shape(shape, shape4):
    """The shape a mask broadcasts against: the scores' own shape, or (batch, q_len, cols) for 2-D scores."""
    return (shape4[0], shape4[2], shape4[3]) if len(shape) == 2 else tuple(shape)


def _mask_strides(byte_strides, itemsize, shape4, ndim):
    """(batch, head, query) element strides of a mask broadcast to the scores' logical shape; its key
    stride must be 1 (a mask broadcast along the keys is materialised first by the caller)."""
    st = [s // itemsize for s in byte_strides]
    if st[-1] != 1:
        raise ValueError("the mask's last dimension must be contiguous (stride 1)")
    if ndim == 4:
        return st[0], st[1], st[2]
    return st[0], 0, st[1]


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


def _driver_call(what: str, result):
    """Unpack a cuda.bindings driver result (err, *values); raise with the call's name on an error."""
    from cuda.bindings import driver

    err, *values = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{what} failed: {err.name}")
    return values[0] if len(values) == 1 else values


def kernel(name: str, cluster: int = 0, defines=()):
    """The compiled template instance `name` (one RawModule per instance and set of -D defines,
    compiled once). A cluster kernel of more than 8 blocks is allowed its non-portable size here.
    `defines` (e.g. ("A07_L2_HINT=0",)) build a variant for a measurement (bench/sweeps)."""
    import cupy

    key = (name, tuple(defines), cupy.cuda.Device().id)  # a module is loaded per device
    if key not in _MODULES:
        vendor = device_info()[0]
        src = (native.ROOT / SOURCE[vendor]).read_text()
        mod = cupy.RawModule(code=src, options=tuple(native.compile_options(defines=defines)),
                             name_expressions=[name], backend="hiprtc" if vendor == "HIP" else "nvrtc")
        fn = mod.get_function(name)
        if cluster > PORTABLE_CLUSTER:
            from cuda.bindings import driver

            _driver_call("cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED)", driver.cuFuncSetAttribute(
                driver.CUfunction(fn.kernel.ptr),
                driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1))
        _MODULES[key] = fn
    return _MODULES[key]


_RESIDENT: dict = {}


def resident_clusters(name: str, cluster: int, threads: int, defines=()) -> int:
    """How many clusters of this kernel the GPU runs at once, from the driver
    (cuOccupancyMaxActiveClusters): clusters live inside one GPC, so this is not simply SMs /
    cluster (an H200 fits 14 clusters of 16 and 15 of 8 one-block-per-SM ones, not 16)."""
    import cupy

    key = (cupy.cuda.Device().id, name, threads, tuple(defines))
    if key not in _RESIDENT:
        from cuda.bindings import driver

        cfg = driver.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = cluster, 1, 1
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = threads, 1, 1
        cfg.sharedMemBytes = 0
        n = _driver_call(f"cuOccupancyMaxActiveClusters({name} x {threads} threads)",
                         driver.cuOccupancyMaxActiveClusters(driver.CUfunction(kernel(name, cluster, defines).kernel.ptr), cfg))
        if int(n) < 1:
            raise RuntimeError(f"cuOccupancyMaxActiveClusters: no cluster of {name} x {threads} threads fits")
        _RESIDENT[key] = int(n)
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
        native.check_out(out, x)
    return rows, cols, m.dtype


def softmax(x, out=None, *, defines=(), **override):
    """Row softmax of x with the strategy plan() picks; fp32 statistics for every dtype. A row of
    all -inf comes back as zeros. `out` may be x itself (in place). Runs on x's device and stream
    (native.launch_context); docs/contract.md has what it returns for every kind of input. Overrides as for plan(), plus `clusters` (a smaller cluster limit)
    and `resident` (launch at most this many clusters), and `defines` (a compile-time variant), for
    tests and tuning."""
    rows, cols, dtype = check(x, out)
    with _launch_context(x):
        if out is None:
            out = native._empty_like(x)
        _launch("softmax", x, out, rows, cols, dtype, (), defines, override)
    return out


# (op, shape, dtype, alignment, device, limits, variant) -> (plan, kernel): the planning and the
# lookups are pure functions of the key, and at a few tens of microseconds of Python per call they
# decided the speed of a forward + backward pass (the host could not keep the GPU busy).
_LAUNCHES: dict = {}
# (device, stream, thread) -> the cluster kernels' ticket counter, zeroed on that stream before each
# launch (cupy.zeros per call cost an allocation and a kernel). Launches on one stream run in order,
# so a counter is never zeroed under a running kernel; other streams and threads have their own.
_TICKETS: dict = {}
# (device, raw stream handle) -> CuPy's view of that torch stream, made once (a view is the bare
# handle and owns nothing, so it stays valid for whatever stream holds the handle).
_STREAMS: dict = {}


@contextlib.contextmanager
def _launch_context(x):
    """native.launch_context (x's device current, x's stream CuPy's current stream), with each torch
    stream's CuPy view made once instead of per call, and the stream's handle read through the call
    Triton's launcher makes (torch.cuda.current_stream() builds a Python object each time): built on
    every call, they kept the host behind the GPU in cross-entropy's forward + backward over 1 GiB."""
    if not type(x).__module__.startswith("torch"):
        with native.launch_context(x):
            yield
        return
    import cupy
    import torch

    dev = x.device.index
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    handle = raw(dev) if raw is not None else torch.cuda.current_stream(dev).cuda_stream
    with cupy.cuda.Device(dev):
        stream = _STREAMS.get((dev, handle))
        if stream is None:
            from_external = getattr(cupy.cuda.Stream, "from_external", None)  # CuPy 14: the stream protocol
            stream = _STREAMS[(dev, handle)] = from_external(_StreamHandle(handle)) if from_external \
                else cupy.cuda.ExternalStream(handle, dev)
        with stream:
            yield


class _StreamHandle:
    """A raw stream handle that speaks the CUDA stream protocol (__cuda_stream__: version, handle)."""

    def __init__(self, handle: int):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


def _tickets():
    """The ticket counter of this device, stream and thread, zeroed on the stream (_TICKETS)."""
    import threading

    import cupy

    stream = cupy.cuda.get_current_stream()
    key = (cupy.cuda.Device().id, stream.ptr, threading.get_ident())
    buf = _TICKETS.get(key)
    if buf is None:
        buf = _TICKETS[key] = cupy.empty(1, dtype=np.int32)
    cupy.cuda.runtime.memsetAsync(buf.data.ptr, 0, 4, stream.ptr)
    return buf


def _launch(op: str, x, out, rows: int, cols: int, dtype: str, extra: tuple, defines, override):
    """Plan and launch `op` over (rows, cols) x into out, with the operation's arguments `extra`."""
    vendor, clusters, warp_size = device_info()
    clusters = min(clusters, override.pop("clusters", clusters))  # a smaller limit, for tests
    n = VEC_BYTES // DTYPES[dtype][1]
    px, py = native.pointer(x), native.pointer(out)
    aligned = cols % n == 0 and px % VEC_BYTES == 0 and py % VEC_BYTES == 0
    most = override.pop("resident", None)
    import cupy

    key = (op, rows, cols, dtype, aligned, cupy.cuda.Device().id, clusters, most, tuple(defines),
           tuple(sorted(override.items())))
    hit = _LAUNCHES.get(key)
    if hit is None:
        fit = (lambda *a: resident_clusters(*a, defines)) if most is None else \
            (lambda *a: min(int(most), resident_clusters(*a, defines)))
        p = plan(cols, dtype, rows, clusters=clusters, warp_size=warp_size, aligned=aligned, resident=fit, op=op,
                 **override)
        hit = _LAUNCHES[key] = (p, kernel(p.kernel, p.params[1] if p.strategy == "cluster" else 0, defines))
    p, fn = hit
    args = (np.uint64(px), np.uint64(py), np.int32(rows), np.int32(cols))
    if p.strategy == "cluster":
        args += (_tickets(),)
    fn((p.grid,), (p.threads,), args + tuple(extra))
    return p


def scale_mask_softmax(x, scale: float = 1.0, *, causal: bool = False, window: int = 0, valid_len=None, mask=None,
                       q_len: int | None = None, out=None, defines=(), **override):
    """softmax(x * scale + mask) in the fast family: Lab 2's operation (native.scale_mask_softmax,
    same arguments and mask rules) at the fast softmax's speed, any row length, fp32 / fp16 / bf16.

    x: scores (rows, cols), (batch, q_len, cols) or (batch, heads, q_len, cols), contiguous, on the
    GPU. The mask is generated from indices (query i = row % q_len sees key j when j <= i with
    `causal`, j > i - window with `window`, j < valid_len[row] with `valid_len`, int32 (rows,)) and
    the masked columns are never read: a causal row reads i + 1 keys. `mask`: an additive mask of
    x's dtype (or bool, True = keep) that broadcasts against x, or against (batch, q_len, cols) for
    2-D scores; its broadcast dimensions cost nothing (read through strides). A row with no visible
    key comes back as zeros. `out` may be x itself."""
    m = native.meta(x)
    shape4, q = _query_layout(m.shape, q_len)
    if not m.contiguous:
        raise ValueError("x is not C-contiguous (a transpose or a strided slice?); pass .contiguous() / .copy()")
    x2 = x.reshape(-1, m.shape[-1])
    out2 = None if out is None else out.reshape(-1, m.shape[-1]) if native.meta(out).contiguous else out
    rows, cols, dtype = check(x2, out2)
    native.check_mask_args(rows, cols, scale, q, window, causal)
    _check_scale(scale)
    if valid_len is not None:
        native.check_valid_len(valid_len, x, rows, cols)
    mask_args = _device_mask(mask, x, m, shape4, dtype) if mask is not None else (None, 0, 0, 0)
    with _launch_context(x):
        if out is None:
            out = native._empty_like(x)
            out2 = out.reshape(rows, cols)
        base, sb, sh, sq = mask_args
        extra = (np.float32(scale), np.int32(shape4[1]), np.int32(q), np.int32(bool(causal)), np.int32(window),
                 np.uint64(0 if valid_len is None else native.pointer(valid_len)),
                 np.uint64(0 if base is None else native.pointer(base)), np.int64(sb), np.int64(sh), np.int64(sq))
        if _nothing_masked(scale, causal, window, valid_len, mask):
            _launch("scaled_softmax", x2, out2, rows, cols, dtype, (np.float32(scale),), defines, override)
        else:
            _launch(_masked_op(mask), x2, out2, rows, cols, dtype, extra, defines, override)
    return out


def _device_mask(mask, x, m, shape4, dtype):
    """(the mask's storage, batch / head / query strides) of an additive mask for the kernel."""
    mm = native.meta(mask)
    if not mm.on_device or (m.device is not None and mm.device is not None and mm.device != m.device):
        raise ValueError(f"mask must be on x's GPU, got a {mm.kind} array{'' if mm.on_device else ' in host memory'}")
    logical = _logical_shape(m.shape, shape4)
    torch_like = type(mask).__module__.startswith("torch")
    if mm.dtype == "bool":  # True = keep, as torch's attention masks
        if torch_like:
            import torch

            mask = torch.where(mask, 0.0, float("-inf")).to(x.dtype)
        else:
            import cupy

            mask = cupy.where(mask, 0.0, -np.inf).astype(x.dtype)
    elif mm.dtype != dtype:
        raise TypeError(f"mask has dtype {mm.dtype}; it must be x's ({dtype}) or bool")
    try:
        if torch_like:
            import torch

            if mask.dim() == 0 or mask.shape[-1] != m.shape[-1] or mask.stride(-1) != 1:
                mask = torch.broadcast_to(mask, logical).contiguous()   # broadcast along the keys: materialised
            view = torch.broadcast_to(mask, logical)
            strides, item = [st * mask.element_size() for st in view.stride()], mask.element_size()
        else:
            import cupy

            if mask.ndim == 0 or mask.shape[-1] != m.shape[-1] or mask.strides[-1] != mask.itemsize:
                mask = cupy.ascontiguousarray(cupy.broadcast_to(mask, logical))
            view = cupy.broadcast_to(mask, logical)
            strides, item = view.strides, mask.itemsize
    except (RuntimeError, ValueError) as e:
        raise ValueError(f"mask of shape {mm.shape} does not broadcast against {logical}: {e}") from None
    return (view, *_mask_strides(strides, item, shape4, len(m.shape)))

"""The fast softmax (cuda/softmax_fast.cu, a07_softmax/fast.py): the strategy table and the argument
checks on any machine, compilation with NVRTC and hipcc without a GPU, and on a GPU every strategy
against float64 on fresh random inputs with the output poisoned first."""
import math
import os
import re
import subprocess

import numpy as np
import pytest

from a07_softmax import fast, native

from a07_softmax import accuracy
from a07_softmax.paths import ROOT

from .helpers import FakeDeviceArray, bad_inputs, compiled_for_sm90, hipcc, load_script

ODD_COLS = [1, 2, 3, 7, 31, 33, 127, 128, 129, 255, 257, 1000, 1023, 1024, 1025, 2047, 2049, 3000, 4097,
            8191, 16384, 16385, 32767, 32769, 65537, 131072, 262144, 262147]


def _args(kernel):
    """Template arguments of an instance name: type, ints..., aligned."""
    inside = kernel[kernel.index("<") + 1:kernel.rindex(">")]
    parts = [p.strip() for p in inside.split(",")]
    return parts[0], [int(p) for p in parts[1:-1]], parts[-1] == "true"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("cols", ODD_COLS)
def test_plan_covers_the_row_and_fits_the_hardware(dtype, cols):
    rows = 1000
    p = fast.plan(cols, dtype, rows)
    n = 16 // (4 if dtype == "float32" else 2)
    ctype, ints, aligned = _args(p.kernel)
    assert ctype == fast.DTYPES[dtype][0] and aligned == (cols % n == 0) and tuple(ints) == p.params
    assert 32 <= p.threads <= 1024 and p.threads % 32 == 0
    if p.strategy == "warp":
        vecs, group, rpt = ints
        assert group & (group - 1) == 0 and group <= 32 and vecs * group * n >= cols
        assert p.grid * p.rows_each >= rows
    elif p.strategy == "block":
        vecs, bound = ints
        assert p.threads * vecs * n >= cols and p.threads <= bound and p.grid == rows
    elif p.strategy == "cluster":
        vecs, cluster, bound, min_blocks = ints
        assert cluster in (2, 4, 8, 16) and cluster * p.threads * vecs * n >= cols
        clusters = min(rows, fast.SMS * min_blocks // cluster)  # plan()'s default guess of what fits at once
        # launched at its bound: the kernel takes the threads sharing a row as a compile-time constant
        assert p.threads == bound and p.grid == clusters * cluster and clusters * p.rows_each >= rows
        # never more threads or blocks than an SM runs
        assert 1 <= min_blocks <= 32 and bound * min_blocks <= 2048
    else:
        assert p.strategy == "2pass" and p.grid == rows


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("clusters", [16, 8])
def test_a_misaligned_cluster_row_is_fitted_to_its_length(dtype, clusters):
    """Odd lengths past the block tiers: the cluster holds the row with its lead (the elements before
    it in its first vector), its blocks' warps divide the warps an SM holds at the fit's register
    budget (so the launch bound promises exactly that budget), a block has at least the fit's
    fewest warps, and no other cluster size or block of the allowed sizes leaves fewer vector slots
    empty."""
    fit = fast.OP_TABLES["cross_entropy"][fast.DTYPES[dtype][1]].misaligned_fit
    n = 16 // fast.DTYPES[dtype][1]
    warps = fit.sm_warps()
    sizes = [w * 32 for w in range(1, warps // 2 + 1) if warps % w == 0 and warps // w <= 32 and w >= fit.min_warps]
    assert sizes and fit.min_warps >= 2
    seen = 0
    for cols in range(16001, 330000, 9973):
        p = fast.plan(cols, dtype, 4096, clusters=clusters, op="cross_entropy", aligned=False)
        if p.strategy != "cluster":
            continue
        seen += 1
        vecs, cluster, threads, min_blocks = p.params
        rv = -(-(cols + n - 1) // n)
        assert vecs == fit.vecs and cluster <= clusters and cluster * threads * vecs >= rv, p.describe()
        if threads in sizes:
            assert min_blocks == warps * 32 // threads, p.describe()
        else:
            assert threads > sizes[-1] and min_blocks == 1, p.describe()
        best = min(c * t * vecs - rv for c in fit.clusters if c <= clusters
                   for t in sizes + list(range(sizes[-1] + 32, 1025, 32)) if c * t * vecs >= rv)
        assert cluster * threads * vecs - rv == best, f"{p.describe()}: {best} empty slots were possible"
    assert seen >= 10


ORDER = {s: i for i, s in enumerate(fast.STRATEGIES)}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("clusters", [16, 8, 0])
def test_strategy_grows_with_the_row_and_takes_the_first_tier_that_holds_it(dtype, clusters):
    """Longer rows never go to a smaller mapping (warp < block < cluster < 2pass), each length gets
    the first tier of its list that holds it, and without clusters long rows are read twice. The
    length that counts is the vectors a row spans: a misaligned row (cols not a multiple of the
    vector) starts up to n - 1 elements before its boundary, so 255 fp32 columns span 65 vectors
    and 256 span 64."""
    size = fast.DTYPES[dtype][1]
    table = fast.TABLE[size]
    n = 16 // size
    last = 0
    spans = lambda c: -(-(c + (n - 1 if c % n else 0)) // n)  # noqa: E731
    for cols in sorted(set(ODD_COLS) | {2**k for k in range(20)}, key=lambda c: (spans(c), c)):
        p = fast.plan(cols, dtype, clusters=clusters)
        rv = spans(cols)
        assert ORDER[p.strategy] >= last, (cols, p.strategy)
        last = ORDER[p.strategy]
        if p.strategy == "warp":
            assert rv <= table.warp_max_vectors
        elif p.strategy == "block":
            holds = [t for t in table.block_tiers if -(-(-(-rv // t.vecs)) // 32) * 32 <= t.max_threads]
            assert holds and p.params[0] == holds[0].vecs, (cols, p.params)
        elif p.strategy == "cluster":
            assert clusters >= 2
            holds = [t for t in table.cluster_tiers if t.cluster <= clusters
                     and -(-(-(-rv // (t.vecs * t.cluster))) // 32) * 32 <= t.max_threads]
            if cols % n == 0:
                assert p.params == (holds[0].vecs, holds[0].cluster, p.params[2], holds[0].min_blocks), cols
        else:
            assert clusters < 2 or cols > 2**18, (cols, p.describe())
    assert fast.plan(1024, dtype, aligned=False).kernel.endswith("false>")
    assert fast.plan(3000, dtype, warp_size=64).threads % 64 == 0 or fast.plan(3000, dtype).strategy == "warp"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_the_loss_alone_streams_long_rows_once_and_the_gradient_keeps_them_on_chip(dtype):
    """Vocabulary-sized rows: the loss alone (nothing to write, fast.ONE_READ) goes past its cluster
    tiers to the two-pass kernel, which stops after its first pass, so it says one read, and its
    blocks stay within the kernel's launch bound; the loss with its gradient must write the row
    from the values it read, so a row stays in a cluster's registers (read once; misaligned rows
    too, fitted to their length) and is never sent through two reads."""
    for cols in (131072, 262144, 262147):
        loss = fast.plan(cols, dtype, 4096, op="cross_entropy_loss")
        assert loss.strategy == "2pass" and "one read" in loss.describe() and "two reads" not in loss.describe(), \
            loss.describe()
        assert 32 <= loss.threads <= loss.launch_bound and loss.threads % 32 == 0, loss.describe()
        assert loss.threads == fast.OP_TABLES["cross_entropy_loss"][fast.DTYPES[dtype][1]].twopass_threads
    for cols in (131072, 262144, 262147):
        grad = fast.plan(cols, dtype, 4096, op="cross_entropy")
        assert grad.strategy == "cluster", grad.describe()
    assert "two reads" in fast.plan(600000, dtype, 4096, op="softmax").describe()
    assert fast.ONE_READ == {"cross_entropy_loss"}


def test_plan_rejects_unknown_overrides_and_strategies():
    with pytest.raises(TypeError, match="strategi"):
        fast.plan(4096, vec=8, strategi="warp")
    with pytest.raises(ValueError, match="strategy must be one of"):
        fast.plan(4096, strategy="wrap")
    assert fast.plan(4096, vecs=8, strategy="block").params[0] == 8


@pytest.mark.parametrize("op", ["softmax", "cross_entropy_loss"])
def test_forced_threads_or_lanes_that_cannot_hold_the_row_never_make_a_plan(op):
    """A tuning override that leaves part of the row to nobody (too few threads for a block row, too
    few lanes or vectors for a warp row) is refused or passed over, never launched: the kernel would
    read a prefix of the row and return a wrong answer without an error."""
    for dtype, cols in [("bfloat16", 50257), ("float32", 12000)]:
        n = fast.VEC_BYTES // fast.DTYPES[dtype][1]
        rv = -(-cols // n)
        with pytest.raises(ValueError, match="no block configuration"):
            fast.plan(cols, dtype, 64, op=op, strategy="block", threads=256)
        p = fast.plan(cols, dtype, 64, op=op, threads=256)        # not forced: a strategy that holds it
        if p.strategy != "2pass":  # (the two-pass kernel walks any length)
            held = p.threads * p.params[0] * (p.params[1] if p.strategy == "cluster" else 1)
            assert held >= rv, (dtype, cols, p.describe())
    with pytest.raises(ValueError, match="holds 8 of its 750 vectors"):
        fast.plan(3000, "float32", 64, op=op, strategy="warp", group=4, vecs=2)


@pytest.mark.parametrize("dtype, cols", [("float32", 262144), ("bfloat16", 262144), ("float32", 200), ("bfloat16", 3000)])
def test_plan_explains_itself_in_its_own_numbers(dtype, cols):
    """describe() states the launch the plan makes: its kernel, grid and threads, and the shape of
    the row's share in the plan's own parameters."""
    p = fast.plan(cols, dtype, 1024)
    d = p.describe()
    assert p.strategy in d and p.kernel in d and f"grid {p.grid:>8} x {p.threads:>4}" in d
    if p.strategy == "cluster":
        vecs, cluster, threads, min_blocks = p.params
        assert f"{cluster} blocks x {threads} threads x {vecs} vectors" in d
        assert ("per SM" in d) == (min_blocks > 1) and f"{p.grid // cluster} clusters share the rows" in d
    elif p.strategy == "warp":
        assert f"{p.params[1]} lanes x {p.params[0]} vectors" in d


def test_cluster_grid_is_what_fits_at_once():
    """The launcher passes the driver's count of co-resident clusters; the grid never exceeds it,
    nor the rows, and the rows are shared evenly among the clusters."""
    asked = []

    def fits(name, cluster, threads):
        asked.append((name, cluster, threads))
        return 14
    for dtype, cols in (("float32", 262144), ("bfloat16", 131072)):
        for rows in (1, 5, 14, 1000):
            p = fast.plan(cols, dtype, rows, resident=fits)
            assert p.strategy == "cluster"
            _, cluster, threads, _ = p.params
            assert asked[-1] == (p.kernel, cluster, threads)
            assert p.grid == min(rows, 14) * cluster and p.rows_each == -(-rows // min(rows, 14))


@pytest.mark.parametrize("make, err, words", bad_inputs("fast"))
def test_bad_input_is_a_clear_error(make, err, words):
    with pytest.raises(err, match=words):
        fast.check(make())


def test_out_must_match():
    with pytest.raises(ValueError, match="float16"):
        fast.check(FakeDeviceArray((2, 3), "float16"), FakeDeviceArray((2, 3), "float32"))
    with pytest.raises(ValueError, match="shape"):
        fast.check(FakeDeviceArray((2, 3)), FakeDeviceArray((3, 2)))


def test_torch_cpu_bf16_is_refused_before_a_launch():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="host memory"):
        fast.softmax(torch.zeros(2, 3, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="dtype"):
        fast.plan(128, "float64")


@pytest.mark.slow
def test_every_planned_instance_compiles_without_spills():
    """Every instance the strategy table can pick (fast.instances(): aligned and not, clusters of
    16, 8 and none) compiles for sm_90 without spills, and fits its launch bound in registers."""
    try:
        res = fast.compile_report()
    except RuntimeError as e:
        pytest.skip(str(e))
    assert res.ok, res.log[-3000:]
    bounds = fast.instances()
    bounds["copy_hinted"] = 256  # the benchmark's control copy (not a template: always compiled)
    assert {k.name for k in res.kernels} == set(bounds)
    for k in res.kernels:
        bound = bounds[k.name]
        print(f"{k.name:<60} {k.registers:>3} registers, bound {bound}")
        assert k.spill_stores == 0 and k.spill_loads == 0, k
        assert k.registers * bound <= 65536, f"{k.name} cannot launch {bound} threads with {k.registers} registers"


@pytest.mark.parametrize("cols", [2048, 4096, 8192])
def test_unmasked_scale_mask_rows_are_as_light_as_the_plain_softmax(cols):
    """docs/performance.md and notebook 05: an unmasked scale_mask_softmax runs the scaled kernel,
    whose 16-bit block instances take no more registers than the plain softmax's (32 or fewer, 2048
    threads an SM), where the masked kernel's per-vector span tests take more (fewer threads an SM),
    compared in the same shape (the masked rows' own tier has more vectors a thread)."""
    plans = {op: fast.plan(cols, "bfloat16", 2**28 // cols, op=op) for op in ("softmax", "scaled_softmax")}
    plans["scale_mask_softmax"] = fast.plan(cols, "bfloat16", 2**28 // cols, op="scale_mask_softmax",
                                            strategy="block", vecs=plans["softmax"].params[0])
    assert len({p.params for p in plans.values()}) == 1, plans   # the same shape, so registers compare
    try:
        res = fast.compile_report([p.kernel for p in plans.values()])
    except RuntimeError as e:
        pytest.skip(str(e))
    assert res.ok, res.log[-3000:]
    regs = {k.name: k.registers for k in res.kernels}
    plain, scaled, masked = (regs[plans[op].kernel] for op in ("softmax", "scaled_softmax", "scale_mask_softmax"))
    assert scaled <= plain <= 32 < masked, (plain, scaled, masked)


def test_hip_twin_compiles_for_gfx90a(tmp_path):
    """The HIP twin builds every instance the table can pick on a device without clusters."""
    kernels = [k for k in fast.instances() if "cluster" not in k]
    ce = ", const long long*, float*, const float*, long long, float, float"
    sm = ", float, int, int, int, int, const int*, const T*, long long, long long, long long"
    extra = {"softmax_fast": "", "scale_mask_softmax_fast": sm, "scale_span_softmax_fast": sm,
             "scaled_softmax_fast": ", float",
             "cross_entropy_fast": ce, "cross_entropy_loss_fast": ce}
    assert set(extra) == set(fast.OPS.values())
    unit = tmp_path / "instances.cpp"
    lines = ['#include "softmax_fast.cpp"']
    for k in kernels:
        ctype = k[k.index("<") + 1:].split(",")[0]
        sig = f"(const T*, T*, int, int{extra[k.split('<')[0].rsplit('_', 1)[0]]})".replace("T", ctype)
        lines.append(f"template __global__ void {k}{sig};")
    for ctype in ("float", "bf16_t", "f16_t"):   # cross-entropy's backward (the CUDA path's scale)
        lines.append(f"template __global__ void scale_rows_fast<{ctype}>({ctype}*, int, int, const float*, int);")
    unit.write_text("\n".join(lines) + "\n")
    cmd = [hipcc(), "-O3", "-std=c++17", "-Icommon", "-Icuda", "-Ihip", "--offload-arch=gfx90a", "-c", str(unit),
           "-o", str(tmp_path / "out.o"), "-Rpass-analysis=kernel-resource-usage"]
    p = subprocess.run(cmd, cwd=ROOT, env=dict(os.environ, HIP_PLATFORM="amd"), capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    names = [n for n in re.findall(r"Function Name: (\S+)", p.stderr) if n != "copy_hinted"]  # the bench's control
    assert len(names) == len(kernels) + 3, (len(names), len(kernels))
    assert not any("cluster" in n for n in names), "clusters are an NVIDIA feature; HIP must not build them"
    scratch = [int(v) for v in re.findall(r"ScratchSize \[bytes/lane\]: (\d+)", p.stderr)]
    assert scratch and not any(scratch)


# ------------------------------------------------------------------------------------------------
# On the GPU
# ------------------------------------------------------------------------------------------------
def _max_rel_err(y, ref, dtype):
    """The course's error measure (accuracy.py), on the GPU."""
    return accuracy.max_rel_err(y, ref, dtype=dtype)


def _reference(x):
    """torch.softmax in float64, with the course's contract for a fully masked row (zeros; torch
    gives NaN there)."""
    import torch

    ref = torch.softmax(x.double(), -1)
    ref[torch.isneginf(x).all(dim=-1)] = 0.0
    return ref


def _scores(rows, cols, dtype, seed):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    x = (torch.randn(rows, cols, device="cuda", generator=g) * 4).to(dtype)
    x[0, cols // 2] = 60.0                   # one large score
    x[1] = float("-inf")                     # fully masked: zeros
    x[2] = float("-inf")
    x[2, cols - 1] = 0.5                     # exactly one valid key: 1.0 there
    x[3, ::2] = float("-inf")                # half masked
    return x


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("cols", ODD_COLS)
def test_matches_float64(dtype, cols):
    import torch

    dt = getattr(torch, dtype)
    rows = max(5, min(300, 2**22 // cols))
    x = _scores(rows, cols, dt, seed=cols)
    y = torch.full_like(x, float("nan"))     # poisoned: anything unwritten stays NaN
    fast.softmax(x, out=y)
    ref = _reference(x)
    tol = accuracy.tolerance(dtype)
    err = _max_rel_err(y, ref, dt)
    assert err <= tol, f"{fast.plan(cols, dtype, rows).describe()}: max rel err {err:.3g}"
    assert bool((y[1] == 0).all()) and abs(float(y[2, cols - 1]) - 1.0) < 1e-6


@pytest.mark.gpu
@pytest.mark.parametrize("strategy, cols", [("warp", 200), ("block", 3000), ("cluster", 40000), ("2pass", 40000),
                                            ("2pass", 300001)])
def test_every_strategy_on_request(strategy, cols):
    import torch

    x = _scores(9, cols, torch.float32, seed=7)
    y = torch.full_like(x, float("nan"))
    fast.softmax(x, out=y, strategy=strategy)
    ref = _reference(x)
    assert _max_rel_err(y, ref, torch.float32) <= accuracy.tolerance(torch.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("cols", [40, 2048])
def test_more_than_65535_rows(cols):
    import torch

    x = torch.randn(70001, cols, device="cuda")
    y = torch.full_like(x, float("nan"))
    fast.softmax(x, out=y)
    assert _max_rel_err(y, torch.softmax(x.double(), -1), torch.float32) <= accuracy.tolerance(torch.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("cols", [2, 4096, 65536, 262144])  # warp, block, cluster (two tiers)
def test_probabilities_below_flt_min(dtype, cols):
    """The documented contract for probabilities below FLT_MIN: they lose precision or come out as
    zero (torch.softmax keeps fp32 subnormals; as compiled through CuPy the fast kernels flush
    them, NOTES.md), never NaN, negative or larger than they should be, and the rest of the row
    is unaffected."""
    import torch

    dt = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(cols)
    x = torch.rand(3, cols, device="cuda", generator=g).to(dt)  # scores in [0, 1)
    # one score whose probability is about 1e-39: subnormal in fp32 and bf16 (FLT_MIN is 1.2e-38)
    x[:, 1] = math.log(1e-39) + math.log(1.718 * cols)  # the row's sum is about 1.718 * cols
    y = torch.full_like(x, float("nan"))
    fast.softmax(x, out=y)
    ref = torch.softmax(x.double(), -1)
    assert bool(((ref[:, 1] > 1e-40) & (ref[:, 1] < torch.finfo(torch.float32).tiny)).all()), ref[:, 1]
    tiny = y[:, 1].double()
    assert bool(((tiny >= 0) & (tiny <= 1.5 * ref[:, 1])).all()), tiny
    rest = torch.cat([ref[:, :1], ref[:, 2:]], 1)
    got = torch.cat([y[:, :1], y[:, 2:]], 1)
    assert _max_rel_err(got, rest, dt) <= accuracy.tolerance(dtype)


@pytest.mark.gpu
def test_unaligned_rows_and_cupy_inputs():
    import cupy
    import torch

    base = torch.randn(64 * 1000 + 1, device="cuda")
    x = base[1:].view(1000, 64)              # 4-byte aligned, not 16: the element-wise path
    y = torch.full_like(x, float("nan"))
    fast.softmax(x, out=y)
    assert _max_rel_err(y, torch.softmax(x.double(), -1), torch.float32) <= accuracy.tolerance(torch.float32)
    xc = cupy.random.default_rng(3).standard_normal((300, 777), dtype=cupy.float32).astype(cupy.float16)
    yc = fast.softmax(xc)
    ref = torch.softmax(torch.as_tensor(xc, device="cuda").double(), -1)
    assert _max_rel_err(torch.as_tensor(yc, device="cuda"), ref, torch.float16) <= accuracy.tolerance(torch.float16)


@pytest.mark.gpu
def test_bad_gpu_input_raises_before_launch():
    import torch

    with pytest.raises(TypeError, match="float64"):
        fast.softmax(torch.zeros(4, 8, device="cuda", dtype=torch.float64))
    with pytest.raises(ValueError, match="not C-contiguous"):
        fast.softmax(torch.zeros(8, 4, device="cuda").t())
    with pytest.raises(ValueError, match="out must be"):
        fast.softmax(torch.zeros(4, 8, device="cuda"), out=torch.zeros(4, 8, device="cuda", dtype=torch.bfloat16))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("cols", [1, 3, 33, 129, 1000, 3000, 16385, 40000, 262144, 262147])
def test_numpy_model_of_each_plan_matches_the_reference(dtype, cols):
    """The element ownership and reduction tree of every strategy, checked without a GPU."""
    from a07_softmax import reference as R

    rng = np.random.default_rng(cols)
    x = rng.standard_normal(cols) * 4
    x[::3] = -np.inf if cols > 3 else x[::3]
    y, levels = fast.simulate(x, dtype)
    assert np.allclose(y, R.softmax(x), rtol=1e-12, atol=1e-300)
    assert levels[-1] == 1 and levels == sorted(levels, reverse=True)
    if fast.plan(cols, dtype).strategy == "cluster":
        assert len(levels) == 4  # threads -> warps -> blocks -> the cluster's one state
    masked, _ = fast.simulate(np.full(cols, -np.inf), dtype)
    assert not masked.any()


def test_a_forced_strategy_that_cannot_hold_the_row_is_refused():
    with pytest.raises(ValueError, match="no block configuration"):
        fast.plan(131072, "float32", strategy="block")
    with pytest.raises(ValueError, match="no cluster configuration"):
        fast.plan(10**6, "float32", strategy="cluster")


@pytest.mark.gpu
@pytest.mark.parametrize("rows, resident", [(1, None), (7, 3), (9, 1), (16, 2), (17, 4), (300, None), (301, 5)])
@pytest.mark.parametrize("dtype, cols, clusters, blocks", [
    ("float32", 65536, 16, 2),     # 2 blocks, loaded straight into registers as floats
    ("float32", 65537, 16, 16),    # misaligned: 16385 vectors with the lead, fitted: 16 blocks of 256 threads
    ("bfloat16", 32768, 16, 4),    # 4 blocks of 128 threads holding raw 16-bit pairs, 6 per SM
    ("bfloat16", 32767, 16, 8),    # misaligned: the grid starts up to 7 elements early, 4097 vectors: 8 x 128 (4 warps at least)
    ("float16", 65536, 16, 8),
    ("float16", 65537, 16, 16),   # misaligned: 8193 vectors, 8 x 256 and 16 x 128 tie: the smaller blocks
    ("float32", 262144, 16, 16),   # 16 blocks (non-portable cluster)
    ("float32", 262144, 8, 8),     # the portable fallback: 8 blocks of 1024 threads
    ("bfloat16", 131072, 8, 8),
    ("bfloat16", 262144, 8, 8),    # 8 blocks of 256 threads x 16 vectors
    ("float16", 524288, 16, 16),
])
def test_cluster_tickets_and_cluster_sizes(rows, resident, dtype, cols, clusters, blocks):
    """Clusters take their first rows by index and the rest by ticket, exchanging (m, s) and the
    next row through one mailbox per block whose two halves alternate between rows. A grid of one
    cluster takes every row after its first by ticket; more clusters than rows; rows left over."""
    import torch

    dt = getattr(torch, dtype)
    x = (torch.randn(rows, cols, device="cuda") * 4).to(dt)
    y = torch.full_like(x, float("nan"))
    fast.softmax(x, out=y, strategy="cluster", clusters=clusters, resident=resident)
    assert fast.plan(cols, dtype, rows, clusters=clusters, strategy="cluster").params[1] == blocks
    tol = accuracy.tolerance(dtype)
    assert _max_rel_err(y, torch.softmax(x.double(), -1), dt) <= tol
    fast.softmax(x, out=y, strategy="cluster", clusters=clusters, resident=resident)  # tickets start at 0 again
    assert _max_rel_err(y, torch.softmax(x.double(), -1), dt) <= tol


def test_tuning_overrides_hold_on_misaligned_rows():
    """A misaligned row is fitted to its length (fast.MisalignedFit: 5 vectors a thread; one block
    an SM where a block needs more than 20 warps), but an explicit override (a tuning experiment) is
    taken as given, not silently rewritten."""
    auto = fast.plan(262147, "bfloat16", aligned=False)
    assert auto.params[0] <= 8 and auto.params[3] == 1
    forced = fast.plan(262147, "bfloat16", aligned=False, vecs=16, min_blocks=2, strategy="cluster")
    assert forced.params[0] == 16 and forced.params[3] == 2


def test_every_sweep_behind_docs_performance_names_a_plan_it_can_build():
    """bench/sweeps/fast_configs.py repeats the measurements in docs/performance.md: each named
    configuration must be one plan() accepts (a typo is an error, not the default plan), no two of
    a claim's launch the same (instance, block size, defines), and the table's own choice must be
    among those compared."""
    sweeps = load_script("bench/sweeps/fast_configs.py")
    assert sweeps.parse_config("strategy=block vecs=4 -DA07_L2_HINT=0") == (
        {"strategy": "block", "vecs": 4}, ("A07_L2_HINT=0",))
    variants = {}
    for name, (_, runs) in sweeps.CLAIMS.items():
        for dtype, cols_list, configs, *op in runs:
            assert "" in configs, name
            op = sweeps.PLAN_OP[op[0] if op else "softmax"]
            for cols in cols_list:
                kernels = set()
                for cfg in configs:
                    overrides, defines = sweeps.parse_config(cfg)
                    p = fast.plan(cols, dtype, 2**28 // cols, op=op, **overrides)
                    kernel = p.kernel
                    kernels.add((kernel, p.threads, defines))  # one instance, launched with other blocks
                    if defines:
                        variants.setdefault(defines, set()).add(kernel)
                assert len(kernels) == len(configs), f"{name} {dtype} {cols}: two configurations are the same launch"
    # every -D variant a claim measures still builds (NVRTC, no GPU needed)
    for defines, kernels in variants.items():
        try:
            res = native.nvrtc_compile(native.ROOT / fast.SOURCE["CUDA"], defines=defines, name_expressions=sorted(kernels))
        except RuntimeError as e:
            pytest.skip(str(e))
        assert res.ok and {k.name for k in res.kernels} - {"copy_hinted"} == kernels, (defines, res.log[-2000:])
    with pytest.raises(TypeError, match="vec"):
        fast.plan(1024, **sweeps.parse_config("vec=4")[0])


def test_docs_performance_states_the_table_the_planner_uses():
    """docs/performance.md's strategy table is read by people deciding what to change: its block
    tiers and cluster block counts must be the ones in fast.TABLE."""
    doc = (ROOT / "docs" / "performance.md").read_text()
    for size, label in ((4, "| 4 B |"), (2, "| 2 B |")):
        t = fast.TABLE[size]
        block = ", ".join(f"{b.vecs} x {b.max_threads}" for b in t.block_tiers)
        assert f"{label} block | {block} |" in doc, block
        rows = [line for line in doc.splitlines() if line.startswith(f"{label} cluster |")]
        assert len(rows) == 1
        for c in t.cluster_tiers:
            assert f"{c.vecs} x {c.max_threads} in {c.cluster}" in rows[0] or \
                f"{c.vecs} x {c.max_threads} in 8 or 16" in rows[0], c


@pytest.mark.slow
def test_docs_register_cap_reading_holds():
    """docs/performance.md's registers and spills for the causal 4096-key bf16 instance held to 768
    and 1024 threads an SM, recomputed by bench/sweeps/register_cap.py (NVRTC, sm_90)."""
    cap = load_script("bench/sweeps/register_cap.py")
    try:
        rep = cap.report((0, 768, 1024))
    except RuntimeError as e:
        if "NVRTC unavailable" in str(e):
            pytest.skip(str(e))
        raise
    name = "scale_span_softmax_fast_block<bf16_t, 8, 64, true>"
    doc = " ".join((ROOT / "docs" / "performance.md").read_text().split())
    shipped, at768, at1024 = (rep[(name, n)] for n in (0, 768, 1024))
    assert shipped[1] == 0 and f"true>`, {shipped[0]} registers and no spill as shipped)" in doc
    assert f"takes {at768[0]} registers and {at768[1]} bytes of spill stores at 768 threads an SM, and " \
           f"{at1024[0]} registers and {at1024[1]} bytes at 1024" in doc


def test_register_cap_timing_runs_the_capped_copy_and_restores_the_source():
    """bench/sweeps/register_cap.py --time (GPU): while it measures, the fast family compiles the capped
    copy (its default the shipped behaviour, each cap a -D of it), and afterwards the shipped source
    again, also when the measurement fails. The measurement itself is stood in for here."""
    from pathlib import Path

    cap = load_script("bench/sweeps/register_cap.py")
    shipped = dict(fast.SOURCE)
    seen = []

    def measure(dtype, cols, configs, rounds, op):
        src = Path(fast.SOURCE["CUDA"])
        seen.append((dtype, cols, tuple(configs), op, src.is_absolute(), cap.CAPPED in src.read_text()))
        return [(c, "plan", 1.0, 100.0 / (1 + i), [1.0], 1e-3, True) for i, c in enumerate(configs)], 4000.0
    rows = cap.timed((0, 1024), (4096,), 1, print_=lambda *a: None, measure=measure)
    assert seen == [("bfloat16", 4096, ("", "-DA07_WIDE_MIN_THREADS=1024"), "scale_mask_causal", True, True)]
    assert [(r[0], r[1], round(r[3], 3)) for r in rows] == [(4096, "", 1.0), (4096, "-DA07_WIDE_MIN_THREADS=1024", 2.0)]
    assert fast.SOURCE == shipped

    def broken(*a):
        raise RuntimeError("no GPU")
    with pytest.raises(RuntimeError, match="no GPU"):
        cap.timed((0, 768), (2048,), 1, print_=lambda *a: None, measure=broken)
    assert fast.SOURCE == shipped


def test_register_cap_times_the_caps_even_where_nvrtc_cannot_report(monkeypatch, capsys):
    """register_cap.py --time on a machine whose NVRTC refuses the source: the failure is printed and
    the caps are still timed; without --time (the report is all it does) the failure is raised."""
    cap = load_script("bench/sweeps/register_cap.py")

    def refuse(threads):
        raise RuntimeError("softmax_fast.cu(269): error: not allowed in JIT mode\nmore")
    timed = []
    monkeypatch.setattr(cap, "report", refuse)
    monkeypatch.setattr(cap, "timed", lambda threads, cols, rounds: timed.append((tuple(threads), tuple(cols))) or
                        [(4096, "", 100.0, 1.0, 0.0, True)])
    assert cap.main(["--time", "--cols", "4096", "--threads", "0", "1024"]) == 0
    assert timed == [((0, 1024), (4096,))]
    assert "not allowed in JIT mode); timing without it" in capsys.readouterr().out
    with pytest.raises(RuntimeError, match="JIT mode"):
        cap.main([])


def test_causal_ceiling_probe_moves_exactly_the_causal_bytes(tmp_path):
    """bench/sweeps/causal_ceiling.py (GPU): its shapes cover a row with at most 16 vectors a thread,
    what it checks the probe against keeps each row's vectors up to the diagonal and zeros the rest,
    and its kernel compiles for sm_90 without a spill (NVRTC, no GPU)."""
    torch = pytest.importorskip("torch")
    ceiling = load_script("bench/sweeps/causal_ceiling.py")
    for seq, size in ((2048, 2), (4096, 2), (16384, 2), (2048, 4), (16384, 4)):
        got = ceiling.shapes(seq, size)
        assert got and all(t * v * 16 >= seq * size and v <= ceiling.MOST_VECTORS for t, v in got), (seq, size, got)
    assert (64, 8) in ceiling.shapes(4096, 2), "the fast table's 4096-key bf16 shape is not probed"
    x = torch.arange(1.0, 1.0 + 3 * 16).reshape(3, 16)        # rows = queries 0, 1, 2 of 16 keys
    kept = ceiling.expected(x, 4)                               # 4 columns a vector
    assert kept[0].tolist() == x[0, :4].tolist() + [0.0] * 12   # query 0 sees column 0: its vector moves
    assert kept[2].ne(0).sum() == 4 and kept[1].ne(0).sum() == 4
    wide = ceiling.expected(torch.ones(8, 8), 4)
    assert wide.sum(1).tolist() == [4, 4, 4, 4, 8, 8, 8, 8], "vectors holding no visible column must be zeros"
    r = compiled_for_sm90(ceiling.PROBE, tmp_path)
    assert r.kernels and all(k.spill_stores == 0 and k.spill_loads == 0 for k in r.kernels), r.log

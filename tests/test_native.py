"""The CUDA/HIP lab kernels: argument checks (CPU), compilation (NVRTC, hipcc), and on a GPU every
kernel against float64 on fresh random inputs with the output poisoned first."""
import os
import re
import subprocess

import numpy as np
import pytest

from a07_softmax import fast
from a07_softmax import native, reference as R
from a07_softmax.paths import ROOT

from .helpers import FakeDeviceArray, bad_inputs, hipcc



@pytest.mark.parametrize("make, err, words", bad_inputs("native"))
def test_bad_input_is_a_clear_error(make, err, words):
    with pytest.raises(err, match=words):
        native.check_scores(make())


def test_one_pass_cols_limit_names_items():
    assert native.check_scores(FakeDeviceArray((70000, 1024)), kernel="softmax_online_1pass") == (70000, 1024)
    with pytest.raises(ValueError, match=r"raise ITEMS \(items=5"):
        native.check_scores(FakeDeviceArray((4, 1025)), kernel="softmax_online_1pass")
    with pytest.raises(ValueError, match="BLOCK \\* ITEMS"):
        native.check_scores(FakeDeviceArray((4, 5000)), kernel="scale_mask_softmax_fused", items=8)
    # the 2-pass kernels take any length
    assert native.check_scores(FakeDeviceArray((1, 10**6)), kernel="softmax_online_2pass") == (1, 10**6)


def test_unknown_kernel_is_refused():
    with pytest.raises(ValueError, match="unknown kernel"):
        native.softmax(FakeDeviceArray((2, 3)), kernel="k4")


def test_every_kernel_is_extern_c_and_sources_are_shared():
    text = (ROOT / "cuda/softmax.cu").read_text() + (ROOT / "cuda/fused_softmax.cu").read_text()
    for k in native.LAB1_KERNELS + ("scale_kernel", "add_mask_kernel", "scale_mask_softmax_fused"):
        # extern "C" __global__ void [__launch_bounds__(...)] <name>(: RawModule finds it unmangled
        assert re.search(rf'extern "C" __global__ void (__launch_bounds__\(\w+\)\s*)?{k}\(', text), k
    for hip, cu in (("hip/softmax.cpp", "softmax.cu"), ("hip/fused_softmax.cpp", "fused_softmax.cu")):
        assert f'#include "{cu}"' in (ROOT / hip).read_text()
    # no kernel hard-codes the warp width: reductions read warpSize
    body = (ROOT / "common/online_softmax.h").read_text()
    assert "warpSize" in body and "__shfl_xor_sync" not in body and "__shfl_xor(" not in body


nvrtc_missing = None
try:
    from cuda.bindings import nvrtc as _nvrtc  # noqa: F401
except Exception as e:  # pragma: no cover
    nvrtc_missing = f"NVRTC unavailable: {e}"


@pytest.mark.skipif(nvrtc_missing is not None, reason=str(nvrtc_missing))
@pytest.mark.parametrize("module", list(native.MODULES))
@pytest.mark.parametrize("items", [4, 8])
def test_nvrtc_compiles_for_sm90_without_spills(module, items):
    res = native.nvrtc_compile(native.source_path(module), "sm_90", items)
    assert res.ok, res.log
    names = {k.name for k in res.kernels}
    expected = set(native.LAB1_KERNELS) | ({"scale_kernel", "add_mask_kernel", "scale_mask_softmax_fused"}
                                          if module == "fused_softmax" else set())
    assert expected <= names, f"kernels missing from the ptxas report: {expected - names}"
    for k in res.kernels:
        print(f"{module} ITEMS={items}: {k.name}: {k.registers} registers, {k.spill_stores} B spilled")
        assert k.spill_stores == 0 and k.spill_loads == 0 and k.stack_bytes == 0, k


def test_nvrtc_reports_a_compile_error_with_the_message(tmp_path):
    if nvrtc_missing:
        pytest.skip(nvrtc_missing)
    bad = tmp_path / "bad.cu"
    bad.write_text('extern "C" __global__ void f(float* y) { y[0] = undefined_name; }\n')
    res = native.nvrtc_compile(bad)
    assert not res.ok and "undefined_name" in res.log


@pytest.mark.parametrize("src", ["hip/softmax.cpp", "hip/fused_softmax.cpp"])
def test_hipcc_compiles_for_gfx90a(src, tmp_path):
    env = dict(os.environ, HIP_PLATFORM="amd")
    cmd = [hipcc(), "-O3", "-std=c++17", "-Icommon", "-Icuda", "--offload-arch=gfx90a", "-c", src,
           "-o", str(tmp_path / "out.o"), "-Rpass-analysis=kernel-resource-usage"]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    usage = [line for line in p.stderr.splitlines() if "VGPRs:" in line or "ScratchSize" in line]
    print("\n".join(usage))
    # the AMD compiler reports per kernel: no scratch (spill) memory for any lab kernel
    scratch = [int(m.group(1)) for m in re.finditer(r"ScratchSize \[bytes/lane\]: (\d+)", p.stderr)]
    assert scratch and not any(scratch), "\n".join(usage)


# ------------------------------------------------------------------------------------------------
# On the GPU
# ------------------------------------------------------------------------------------------------
ODD_COLS = [1, 3, 31, 33, 255, 257, 1023, 1024]


def _run(kernel, hx, items=4):
    import cupy

    x = cupy.asarray(hx)
    out = cupy.full(x.shape, cupy.nan, dtype=cupy.float32)  # poisoned: unwritten outputs stay NaN
    native.softmax(x, kernel, out=out, items=items)
    return cupy.asnumpy(out)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", native.LAB1_KERNELS[1:])
@pytest.mark.parametrize("cols", ODD_COLS + [1025, 4099])
def test_lab1_kernels_match_float64(kernel, cols, rng):
    items = 4 if cols <= 1024 else 17
    hx = rng.normal(0, 6, size=(67, cols)).astype(np.float32)
    hx[0, cols // 2] = 100.0
    err = R.max_rel_err(_run(kernel, hx, items), R.softmax(hx))
    assert err < 1e-5, f"{kernel} cols={cols}: max rel err {err}"


@pytest.mark.gpu
def test_naive_kernel_fails_exactly_where_it_should(rng):
    hx = rng.uniform(-4, 4, size=(5, 257)).astype(np.float32)
    got = _run("softmax_naive_unsafe", hx)
    assert R.max_rel_err(got[1:], R.softmax(hx[1:])) < 1e-5  # fine without large logits
    hx[0, 7] = 100.0  # exp(100) = inf, so the row's sum is inf
    got = _run("softmax_naive_unsafe", hx)
    assert np.isnan(got[0, 7])                      # inf / inf: where the answer should be ~1.0
    assert np.all(got[0, np.arange(257) != 7] == 0)  # finite / inf = 0 everywhere else
    assert np.isnan(got[0].sum()) and np.all(np.isfinite(got[1:]))  # the row no longer sums to 1


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", native.LAB1_KERNELS[1:])
def test_more_rows_than_one_grid_dimension(kernel, rng):
    hx = rng.normal(0, 3, size=(70001, 33)).astype(np.float32)
    assert R.max_rel_err(_run(kernel, hx), R.softmax(hx)) < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", native.LAB1_KERNELS[1:])
def test_special_values(kernel, rng):
    hx = rng.normal(0, 3, size=(6, 257)).astype(np.float32)
    hx[0, :] = -np.inf                  # fully masked: zeros
    hx[1, :] = -np.inf; hx[1, 100] = 2  # single valid element: a one-hot
    hx[2, 5] = np.inf                   # +inf: no finite answer, must not be silently finite
    hx[3, 9] = np.nan                   # NaN propagates
    got = _run(kernel, hx)
    assert np.array_equal(got[0], np.zeros(257))
    assert got[1, 100] == 1.0 and np.count_nonzero(got[1]) == 1
    assert np.isnan(got[2]).any() and np.isnan(got[3]).any()
    assert R.max_rel_err(got[4:], R.softmax(hx[4:])) < 1e-5


@pytest.mark.gpu
def test_one_pass_refuses_long_rows_before_launch():
    import cupy

    with pytest.raises(ValueError, match="raise ITEMS"):
        native.softmax(cupy.ones((2, 1025), cupy.float32), "softmax_online_1pass")
    with pytest.raises(TypeError, match="float32"):
        native.softmax(cupy.ones((2, 3), cupy.float64))
    with pytest.raises(ValueError, match="contiguous"):
        native.softmax(cupy.ones((4, 6), cupy.float32)[:, ::2])


@pytest.mark.gpu
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("seq", [1, 3, 33, 257, 1024])
def test_scale_mask_softmax(fused, seq, rng):
    import cupy

    bh = 3
    rows = bh * seq
    hx = rng.normal(0, 20, size=(rows, seq)).astype(np.float32)
    lens = rng.integers(0, seq + 1, size=rows).astype(np.int32)
    lens[0] = 0
    for window in (0, 4):
        mask = (R.causal_mask(seq, seq)[np.arange(rows) % seq] + R.padding_mask(lens, seq))
        if window:
            mask = mask + R.sliding_window_mask(seq, seq, window)[np.arange(rows) % seq]
        ref = R.scale_mask_softmax(hx, 0.125, mask)
        out = cupy.full(hx.shape, cupy.nan, cupy.float32)
        native.scale_mask_softmax(cupy.asarray(hx), 0.125, causal=True, window=window, q_len=seq,
                                  valid_len=cupy.asarray(lens), fused=fused, out=out)
        got = cupy.asnumpy(out)
        assert np.array_equal(got[0], np.zeros(seq)), "fully-masked row must be zeros"
        assert R.max_rel_err(got, ref) < 1e-5


@pytest.mark.gpu
def test_torch_tensors_work_too(rng):
    torch = pytest.importorskip("torch")
    hx = rng.normal(size=(9, 100)).astype(np.float32)
    x = torch.as_tensor(hx, device="cuda")
    y = native.softmax(x, "softmax_online_2pass")
    torch.cuda.synchronize()
    assert isinstance(y, torch.Tensor)
    assert R.max_rel_err(y.cpu().numpy(), R.softmax(hx)) < 1e-5


# ------------------------------------------------------------------------------------------------
# The CPU target (common/cpu_target.h): the same kernel sources, run on the CPU against float64
# ------------------------------------------------------------------------------------------------
def _cxx():
    from a07_softmax import cpu_target

    if cpu_target.compiler() is None:
        pytest.skip("no C++ compiler (g++ or clang++): the CPU target cannot build")


@pytest.mark.parametrize("warp", [32, 64])
def test_lab_kernels_run_on_the_cpu_against_float64(warp):
    """Lab 1 and Lab 2 executed, not only compiled, on a machine without a GPU: the naive kernel
    turns row 0's 100.0 into NaN; every other kernel matches float64 and writes the fully -inf
    (or fully masked) row as zeros; with 32- and 64-lane warps."""
    _cxx()
    from a07_softmax import cpu_labs

    for k, err, passed, y in cpu_labs.lab1_on_cpu(warp=warp, seed=warp):
        if k == "softmax_naive_unsafe":
            assert not passed and np.isnan(y[0]).any(), k
        else:
            assert passed and not y[1].any(), (k, err)
    for name, err, passed, y in cpu_labs.lab2_on_cpu(warp=warp, seed=warp):
        assert passed, (name, err)


def test_a_barrier_not_every_thread_reaches_is_a_deadlock_not_a_hang(tmp_path):
    _cxx()
    from a07_softmax import cpu_target

    src = tmp_path / "k.cu"
    src.write_text('#include "online_softmax.h"\n'
                   'extern "C" __global__ void k(const float* x, float* y, int rows, int cols) {\n'
                   '  float v = x[threadIdx.x % cols];\n'
                   '  if (threadIdx.x < 64) v = block_max(v);\n'
                   '  y[threadIdx.x % cols] = v;\n}\n')
    kinds = [("in", "float32"), ("out", None), ("i32", None), ("i32", None)]
    exe = cpu_target.build(src, "k", kinds, tmp_path)
    with pytest.raises(cpu_target.CpuTargetError, match=r"deadlock in block 0.*__syncthreads\(\)"):
        cpu_target.run(exe, 1, 256, kinds, [np.ones((1, 8), np.float32), (1, 8), 1, 8], tmp_path)


def test_the_fast_cluster_kernel_says_it_needs_a_gpu(tmp_path):
    """The cluster strategy cannot run on a CPU and says why; the other strategies run there
    (tests/test_contract.py)."""
    from a07_softmax import cpu_target

    name = fast.plan(2**18, "float32", 4).kernel
    assert name.startswith("softmax_fast_cluster")
    with pytest.raises(cpu_target.CpuTargetError, match="thread-block clusters"):
        cpu_target.build(native.ROOT / "cuda" / "softmax_fast.cu", name, [], tmp_path)


def test_an_empty_nvrtc_log_leaves_python_intact(monkeypatch):
    """NVRTC writes its log into the buffer it is given; an empty log (size 1: the NUL) once made
    that buffer CPython's shared one-byte b" ", and every b" " of the process became b"\\x00"."""
    if nvrtc_missing is not None:
        pytest.skip(str(nvrtc_missing))
    from cuda.bindings import nvrtc

    import ctypes

    def empty_log(prog, buf):  # what NVRTC does with an empty log: writes its terminating NUL
        ctypes.memmove(ctypes.c_char_p(buf), b"\x00", 1)
        return (nvrtc.nvrtcResult.NVRTC_SUCCESS,)

    monkeypatch.setattr(nvrtc, "nvrtcGetProgramLogSize", lambda prog: (nvrtc.nvrtcResult.NVRTC_SUCCESS, 1))
    monkeypatch.setattr(nvrtc, "nvrtcGetProgramLog", empty_log)
    native.nvrtc_compile(native.ROOT / "cuda" / "softmax.cu")
    assert b" ".join([b"a", b"b"]) == b"a b" and bytes([32]) == b" "

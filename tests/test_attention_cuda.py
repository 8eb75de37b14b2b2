"""Lab 4's CUDA/HIP attention forward (cuda/attention.cu) against float64 attention: on the CPU target
(the kernel source compiled by the system C++ compiler, warps of 32 and of 64 lanes), compiled by
NVRTC for sm_90 and by hipcc for gfx90a, and on a GPU (`pytest -m gpu`). Outputs are poisoned (the
CPU target poisons with NaN; the GPU tests fill NaN first). The cases hold the kernel's mistakes
visible: scores that rise from tile to tile (o must be rescaled at every tile), a key-padding length
of 0 (zeros, not NaN), causal rows on both sides of a tile edge and of a block edge, S = 1, sequences
that are not multiples of the 32-key tile or the 8-row block, and scores far above exp's range."""
import os
import subprocess

import numpy as np
import pytest

from a07_softmax import attention as A
from a07_softmax import attention_cuda as C
from a07_softmax import cpu_target, native
from .helpers import hipcc

TOL = 2e-5  # fp32 accumulation over a few hundred keys, against float64

CPU_CASES = [  # (batch, heads, seq, head_dim, causal, kv_len, score scale)
    (1, 1, 1, 64, True, None, 1.0),            # S = 1
    (2, 2, 37, 16, True, [0, 20], 1.0),        # a row with no key; padding inside the second tile
    (1, 2, 70, 128, False, [70], 1.0),         # head_dim 128, three tiles, tail of 6
    (2, 1, 45, 32, True, [45, 3], 1.0),        # causal rows across the 32-key tile edge
    (1, 1, 65, 64, True, None, 40.0),          # scores in the thousands: exp overflows without the max
    (1, 1, 96, 16, False, None, "rising"),     # the max moves at every tile
]


def _inputs(rng, b, h, s, d, how):
    q, k, v = (rng.normal(size=(b, h, s, d)) for _ in range(3))
    if how == "rising":  # key j aligned with every query and growing with j
        k = q.mean(axis=2, keepdims=True) * np.linspace(0.0, 4.0, s)[None, None, :, None] + 0.01 * k
    else:
        q = q * how
    return [t.astype(np.float32) for t in (q, k, v)]


def _err(got, ref):
    return float(np.abs(np.asarray(got, np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30))


needs_cxx = pytest.mark.skipif(cpu_target.compiler() is None, reason="no C++ compiler for the CPU target (g++/clang++)")


@needs_cxx
@pytest.mark.parametrize("warp", [32, 64])
@pytest.mark.parametrize("case", CPU_CASES, ids=[f"s{c[2]}-d{c[3]}-causal{c[4]}-kv{c[5]}-{c[6]}" for c in CPU_CASES])
def test_on_the_cpu_target_against_float64(rng, warp, case):
    b, h, s, d, causal, kv, how = case
    q, k, v = _inputs(rng, b, h, s, d, how)
    kv_len = None if kv is None else np.array(kv, np.int32)
    out = C.forward_on_cpu(q, k, v, causal=causal, kv_len=kv_len, warp_size=warp)
    ref = A.reference(q, k, v, causal=causal, kv_len=kv)
    assert not np.isnan(out).any(), f"{case}: NaN in the output (an -inf - -inf somewhere)"
    assert _err(out, ref) <= TOL, (case, _err(out, ref))
    for i, n in enumerate(kv or []):
        if n == 0:
            assert not out[i].any(), f"{case}: batch entry {i} sees no key and must be zeros"


BAD = [
    (lambda z: (z.astype(np.float64), z, z), None, TypeError, "float32"),
    (lambda z: (z, z[:, :, :3], z), None, ValueError, "share one shape"),
    (lambda z: (z[0], z[0], z[0]), None, ValueError, "batch, heads, seq, head_dim"),
    (lambda z: (np.zeros((1, 1, 4, 256), np.float32),) * 3, None, ValueError, "head_dim 256"),
    (lambda z: (z, z, z), np.array([5], np.int32), ValueError, "from 5 to 5"),
    (lambda z: (z, z, z), np.array([-1], np.int32), ValueError, "[0, seq"),
    (lambda z: (z, z, z), np.array([1, 2], np.int32), ValueError, "shape (1,)"),
    (lambda z: (z, z, z), np.array([1], np.int64), ValueError, "int32"),
]


def test_a_strided_kv_len_is_refused_before_a_launch():
    """The kernel reads batch entry i's length at kv_len + i: a strided view (lens[:, 0]) would hand
    entry 1 the length stored beside entry 0's."""
    z = np.ones((2, 2, 4, 16), np.float32)
    lens = np.array([[3, 0], [1, 0]], np.int32)
    with pytest.raises(ValueError, match="kv_len is not contiguous"):
        C.check(z, z, z, kv_len=lens[:, 0])
    assert C.check(z, z, z, kv_len=lens[:, 0].copy())[:3] == (2, 2, 4)


@pytest.mark.parametrize("make,kv_len,err,words", BAD, ids=[b[3] for b in BAD])
def test_bad_input_is_a_clear_error_before_a_launch(make, kv_len, err, words):
    z = np.ones((1, 2, 4, 16), np.float32)
    with pytest.raises(err, match=words.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        C.check(*make(z), kv_len=kv_len)
    with pytest.raises(ValueError, match="finite"):
        C.check(z, z, z, scale=float("nan"))


def test_nvrtc_compiles_it_for_sm90_without_spills():
    try:
        res = native.nvrtc_compile(native.ROOT / C.SOURCE["CUDA"], "sm_90")
    except RuntimeError as e:
        pytest.skip(str(e))
    assert res.ok, res.log
    (k,) = [k for k in res.kernels if k.name == C.KERNEL]
    assert k.spill_stores == 0 and k.spill_loads == 0 and k.stack_bytes == 0, k


@pytest.mark.slow
def test_the_hip_twin_compiles_for_gfx90a(tmp_path):
    cmd = [hipcc(), "-O3", "-std=c++17", "-Icommon", "-Icuda", "--offload-arch=gfx90a", "-c", C.SOURCE["HIP"],
           "-o", str(tmp_path / "attention.o"), "-Rpass-analysis=kernel-resource-usage"]
    p = subprocess.run(cmd, cwd=native.ROOT, env=dict(os.environ, HIP_PLATFORM="amd"), capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Function Name: attention_fwd" in p.stderr
    assert "ScratchSize [bytes/lane]: 0" in p.stderr, "the HIP build spills to scratch memory"


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128])
def test_on_the_gpu_at_real_lengths(rng, d):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    for b, h, s, causal, kv in ((1, 1, 1, True, None), (2, 2, 100, False, [0, 77]), (2, 2, 1000, True, [1000, 3]),
                                (1, 2, 4097, True, None), (1, 1, 2048, False, None)):
        q, k, v = (torch.tensor(t, device="cuda") for t in _inputs(rng, b, h, s, d, 1.0))
        kv_len = None if kv is None else torch.tensor(kv, dtype=torch.int32, device="cuda")
        out = torch.full_like(q, float("nan"))
        C.forward(q, k, v, causal=causal, kv_len=kv_len, out=out)
        torch.cuda.synchronize()
        ref = A.reference(*(t.double().cpu().numpy() for t in (q, k, v)), causal=causal, kv_len=kv)
        where = f"b{b} h{h} s{s} d{d} causal={causal} kv={kv}"
        assert not torch.isnan(out).any(), where
        assert _err(out.cpu().numpy(), ref) <= TOL, (where, _err(out.cpu().numpy(), ref))
    with pytest.raises(ValueError, match="overlaps k or v"):
        C.forward(q, k, v, out=k)

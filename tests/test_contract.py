"""Every softmax entry point held to docs/contract.md (a07_softmax.contract builds the rows and the
promised answers). On a CPU: the NumPy reference, the Triton kernels in the interpreter, and the CUDA
sources on the CPU target (fast softmax: warp, block and two-pass strategies; Lab 1; Lab 2). On a GPU
(`pytest -m gpu`): every launcher, every strategy of the fast softmax, plus what only a GPU can
show: in place, misaligned storage, more than 65535 rows, the caller's stream, a second device.
"""
from __future__ import annotations

import numpy as np
import pytest

from a07_softmax import backend, contract, cpu_labs, cpu_target, fast, native
from a07_softmax import reference as R

from .helpers import FakeDeviceArray

needs_cxx = pytest.mark.skipif(cpu_target.compiler() is None,
                               reason="no C++ compiler (g++ or clang++): the CPU target cannot build the kernels")
TRITON = backend.detect().triton_device  # conftest chose the interpreter where there is no GPU


def _assert_keeps(got, x, where: str, *, log=False, dtype="float32"):
    broken = contract.violations(got, x, log=log, dtype=dtype)
    assert not broken, f"{where} breaks the contract (docs/contract.md):\n  " + "\n  ".join(broken)


# ------------------------------------------------------------------------------------------------
# The contract's own oracle: it must tell right from wrong before it judges anything
# ------------------------------------------------------------------------------------------------
def test_the_oracle_rejects_the_classic_mistakes(rng):
    x = contract.rows("float32", 40, rng)
    right = contract.expected(x)
    assert not contract.violations(right, x)
    with np.errstate(all="ignore"):
        no_max = np.exp(x) / np.exp(x).sum(axis=1, keepdims=True)          # no max subtraction
        x32, l2e = x.astype(np.float32), np.float32(np.log2(np.e))  # the one-FFMA exp, in fp32
        scaled_first = np.exp2(x32 * l2e - np.nanmax(x32, axis=1, keepdims=True) * l2e)
        scaled_first = scaled_first / scaled_first.sum(axis=1, keepdims=True)
        nan_skipped = np.nan_to_num(right, nan=0.0)                           # a NaN hidden as 0
        masked_nan = np.where(np.isneginf(x).all(1, keepdims=True), np.nan, right)  # NaN for a masked row
    for wrong, family in ((no_max, "largest finite"), (scaled_first.astype(np.float64), "padding row"),
                          (nan_skipped, "NaN"), (masked_nan, "fully masked")):
        broken = contract.violations(wrong, x)
        assert any(family in b for b in broken), (family, broken)


def test_families_cover_what_the_contract_names():
    x = contract.rows("bfloat16", 9, np.random.default_rng(0))
    assert x.shape == (len(contract.FAMILIES), 9)
    big = contract.finfo("bfloat16")[0]
    assert np.isneginf(x[1]).all() and (x[5] == -big).all() and (x[7] == big).all()
    assert np.isnan(x[11]).sum() == 1 and np.isposinf(x[10]).sum() == 1
    assert np.array_equal(contract.round_to(x, "bfloat16"), x, equal_nan=True)  # representable in bf16


# ------------------------------------------------------------------------------------------------
# On any machine
# ------------------------------------------------------------------------------------------------
def test_reference(rng):
    for cols in (1, 7, 300):
        x = contract.rows("float32", cols, rng)
        _assert_keeps(R.softmax(x), x, "reference.softmax", dtype="float64")
        _assert_keeps(R.log_softmax(x), x, "reference.log_softmax", log=True, dtype="float64")


@needs_cxx
@pytest.mark.parametrize("dtype", contract.DTYPES)
@pytest.mark.parametrize("cols,aligned", [(1, None), (31, None), (257, None), (1000, None), (4099, None),
                                          (70001, None), (1000, False), (70001, False)])
def test_fast_softmax_on_the_cpu_target(rng, dtype, cols, aligned):
    x = contract.rows(dtype, cols, rng)
    p = fast.plan(cols, dtype, x.shape[0], clusters=0, aligned=aligned)
    _assert_keeps(fast.softmax_on_cpu(x, dtype, aligned=aligned), x, f"fast softmax {p.kernel}", dtype=dtype)


# (input, output) element offsets into their buffers: the input misaligned and the output on the
# same lead (whole vectors stored), or on a boundary, or each on its own lead (elements stored)
VIEW_OFFSETS = [(1, 1), (1, 0), (0, 3), (3, 1)]


@needs_cxx
@pytest.mark.parametrize("dtype", contract.DTYPES)
@pytest.mark.parametrize("cols,offsets,strategy", [(c, o, None) for c in (31, 1000) for o in VIEW_OFFSETS]
                         + [(4099, (3, 1), None), (16384, (1, 0), "2pass"), (16384, (0, 3), "2pass")])
def test_fast_softmax_on_views_at_odd_offsets_on_the_cpu_target(rng, dtype, cols, offsets, strategy):
    """Misaligned rows are read in 16-byte vectors from the boundary before them: the columns a
    first vector holds before the row (the previous row's, or poison before the buffer) must be
    dropped, the last vector must stop at the row's end, and nothing may be written before the
    output's start (the CPU target's driver checks the poison there). 31 columns: every row on its
    own lead; 1000: each row on the first one's; 4099: the block strategy; 16384 (a whole number
    of the two-pass kernel's steps): the two-pass walk must take one step more for the lead.
    Offset (0, 3): the input's rows start on a boundary, the output's do not."""
    x = contract.rows(dtype, cols, rng)
    over = {"strategy": strategy} if strategy else {}
    p = fast.plan(cols, dtype, x.shape[0], clusters=0, aligned=False, **over)
    _assert_keeps(fast.softmax_on_cpu(x, dtype, offsets=offsets, **over), x,
                  f"fast softmax {p.kernel}, input and output {offsets} elements into their buffers", dtype=dtype)


@needs_cxx
@pytest.mark.parametrize("dtype", contract.DTYPES)
@pytest.mark.parametrize("cols,aligned", [(1, None), (257, None), (4099, None), (70001, None), (1000, False)])
def test_fast_scale_mask_softmax_without_a_mask_on_the_cpu_target(rng, dtype, cols, aligned):
    """The fused operation at scale 1 without a mask is a softmax, so it keeps the same contract."""
    x = contract.rows(dtype, cols, rng)
    p = fast.plan(cols, dtype, x.shape[0], clusters=0, aligned=aligned, op="scale_mask_softmax")
    _assert_keeps(fast.scale_mask_softmax_on_cpu(x, 1.0, dtype, aligned=aligned), x,
                  f"fast scale_mask_softmax {p.kernel}", dtype=dtype)


@needs_cxx
@pytest.mark.parametrize("kernel", ["softmax_safe_3pass", "softmax_online_2pass", "softmax_online_1pass"])
@pytest.mark.parametrize("cols", [1, 31, 1000, 4099])
def test_lab1_on_the_cpu_target(rng, kernel, cols):
    x = contract.rows("float32", cols, rng)
    _assert_keeps(cpu_labs.softmax_on_cpu(x, kernel), x, f"Lab 1 {kernel}")


@needs_cxx
@pytest.mark.parametrize("fused", [True, False])
def test_lab2_without_a_mask_on_the_cpu_target(rng, fused):
    x = contract.rows("float32", 300, rng)
    _assert_keeps(cpu_labs.scale_mask_softmax_on_cpu(x, 1.0, fused=fused), x, f"Lab 2 fused={fused}")


def _triton():
    if TRITON is None:
        pytest.skip("triton is not installed here (Linux only): the Triton kernels cannot run")
    import torch

    from a07_softmax import triton_softmax

    return torch, triton_softmax


TORCH_DTYPES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16"}


def _tensor(x, dtype, device):
    import torch

    return torch.as_tensor(x, dtype=torch.float64).to(getattr(torch, dtype)).to(device)


@pytest.mark.parametrize("dtype", contract.DTYPES)
@pytest.mark.parametrize("cols", [1, 31, 1000])
def test_triton(rng, dtype, cols):
    torch, T = _triton()
    x = contract.rows(dtype, cols, rng)
    xt = _tensor(x, dtype, TRITON)
    for name, fn, log in (("softmax", T.softmax, False), ("log_softmax", T.log_softmax, True),
                          ("softmax_online", lambda t, out: T.softmax_online(t, out=out, tile=16), False),
                          ("scale_mask_softmax", lambda t, out: T.scale_mask_softmax(t, 1.0, out=out), False)):
        out = torch.full_like(xt, float("nan"))  # poisoned: an element never written shows up
        assert fn(xt, out=out) is out
        _assert_keeps(out, x, f"triton_softmax.{name}", log=log, dtype=dtype)


# ------------------------------------------------------------------------------------------------
# The masked variants: index masks (causal, window, valid lengths) replace a score by -inf, an
# additive mask tensor is added to it (so a NaN score under an additive -inf stays NaN, as in torch)
# ------------------------------------------------------------------------------------------------
def _masked_case(dtype, cols, rng):
    x = contract.rows(dtype, cols, rng)
    rows = x.shape[0]
    lens = rng.integers(1, cols + 1, size=rows).astype(np.int32)
    lens[1], lens[2], lens[0] = 0, 1, cols  # no valid key, one valid key, all valid
    causal = np.arange(cols)[None, :] > (np.arange(rows) % rows)[:, None]
    pad = np.arange(cols)[None, :] >= lens[:, None]
    return x, lens, causal | pad


@needs_cxx
@pytest.mark.parametrize("fused", [True, False])
def test_lab2_masks_on_the_cpu_target(rng, fused):
    x, lens, masked = _masked_case("float32", 45, rng)
    got = cpu_labs.scale_mask_softmax_on_cpu(x, 0.5, causal=True, valid_len=lens, fused=fused)
    want_in = np.where(masked, -np.inf, x * 0.5)
    _assert_keeps(got, want_in, f"Lab 2 fused={fused}, causal + valid_len")
    assert not got[1].any(), "a row with valid_len 0 must come back as zeros"


@pytest.mark.parametrize("dtype", contract.DTYPES)
def test_triton_masks(rng, dtype):
    torch, T = _triton()
    cols = 45
    x, _, masked = _masked_case(dtype, cols, rng)
    big = contract.finfo(dtype)[0]
    additive = np.where(rng.random(x.shape) < 0.3, -np.inf, 0.0)
    additive[3, ::2] = -big                                   # the lowest finite value as a mask value
    additive[4] = -np.inf                                     # a row the mask tensor removes entirely
    causal = np.arange(cols)[None, :] > np.arange(x.shape[0])[:, None]
    with np.errstate(invalid="ignore"):
        want_in = np.where(causal, -np.inf, x * 0.5 + contract.round_to(additive, dtype))
    got = T.scale_mask_softmax(_tensor(x, dtype, TRITON), 0.5, mask=_tensor(additive, dtype, TRITON), causal=True)
    _assert_keeps(got, want_in, "triton_softmax.scale_mask_softmax, causal + additive mask", dtype=dtype)
    assert not got[4].float().any(), "a row the mask removes entirely must come back as zeros"


# ------------------------------------------------------------------------------------------------
# Bad arguments: refused before any launch, with a message that says what was expected
# ------------------------------------------------------------------------------------------------
class FakeLengths(FakeDeviceArray):
    def __init__(self, values):
        super().__init__((len(values),), "int32")
        self.values = np.asarray(values)

    def min(self):
        return self.values.min()

    def max(self):
        return self.values.max()


def _fake_at(shape, dtype="float32", ptr=1 << 20, contiguous=True):
    a = FakeDeviceArray(shape, dtype, contiguous)
    a.__cuda_array_interface__ = {"data": (ptr, False)}
    return a


BAD_OUTS = [
    ("a wrong shape", lambda: _fake_at((3, 5), ptr=1 << 30), "shape"),
    ("a wrong dtype", lambda: _fake_at((3, 4), "float16", ptr=1 << 30), "float16"),
    ("host memory", lambda: np.zeros((3, 4), np.float32), "host memory"),
    ("non-contiguous", lambda: _fake_at((3, 4), ptr=1 << 30, contiguous=False), "non-contiguous"),
    ("a partial overlap", lambda: _fake_at((3, 4), ptr=(1 << 20) + 8), "overlaps"),
]


@pytest.mark.parametrize("what,make_out,words", BAD_OUTS, ids=[b[0] for b in BAD_OUTS])
@pytest.mark.parametrize("launcher", ["lab1", "lab2", "fast"])
def test_a_bad_out_is_refused_before_a_launch(launcher, what, make_out, words):
    x = _fake_at((3, 4))
    call = {"lab1": lambda o: native.softmax(x, "softmax_online_2pass", out=o),
            "lab2": lambda o: native.scale_mask_softmax(x, 0.5, out=o),
            "fast": lambda o: fast.softmax(x, out=o)}[launcher]
    with pytest.raises(ValueError, match=words):
        call(make_out())


def test_in_place_passes_the_checks():
    x = _fake_at((3, 4))
    native.check_out(x, x)                               # out = x: in place, allowed
    native.check_out(_fake_at((3, 4), ptr=(1 << 20) + 48), x)  # right after x: disjoint, allowed


@pytest.mark.parametrize("lengths,words", [([0, 4, -1], "from -1 to 4"), ([5, 0, 2], "from 0 to 5"),
                                           ([1, 2], r"shape \(3,\)")])
def test_valid_len_outside_0_to_cols_is_refused(lengths, words):
    with pytest.raises(ValueError, match=words):
        native.scale_mask_softmax(_fake_at((3, 4)), 0.5, valid_len=FakeLengths(lengths))


@pytest.mark.parametrize("kwargs,words", [(dict(scale=float("nan")), "finite"), (dict(scale=float("inf")), "finite"),
                                          (dict(scale=True), "finite"), (dict(q_len=2), "dividing rows"),
                                          (dict(q_len=0), "dividing rows"), (dict(window=-1), "window"),
                                          (dict(causal="yes"), "causal")])
def test_mask_parameters_are_checked(kwargs, words):
    args = dict(scale=0.5) | kwargs
    with pytest.raises(ValueError, match=words):
        native.scale_mask_softmax(_fake_at((3, 4)), **args)


def test_triton_refuses_bad_outs_and_masks():
    torch, T = _triton()
    x = torch.randn(3, 8, device=TRITON)
    bad = [(torch.empty(2, 8, device=TRITON), "shape"), (torch.empty(3, 8, device=TRITON, dtype=torch.float16), "float16"),
           (torch.empty(8, 3, device=TRITON).t(), "non-contiguous")]
    for fn in (T.softmax, T.log_softmax, T.softmax_online, lambda t, out: T.scale_mask_softmax(t, 1.0, out=out)):
        for out, words in bad:
            with pytest.raises(ValueError, match=words):
                fn(x, out=out)
    buf = torch.randn(40, device=TRITON)
    with pytest.raises(ValueError, match="overlaps"):
        T.softmax(buf[:24].view(3, 8), out=buf[8:32].view(3, 8))
    with pytest.raises(ValueError, match="finite"):
        T.scale_mask_softmax(x, float("nan"))
    with pytest.raises(TypeError, match="additive"):
        T.scale_mask_softmax(x, 1.0, mask=torch.ones(3, 8, dtype=torch.bool, device=TRITON))
    y = T.softmax(x.clone(), out=None)
    z = x.clone()
    assert T.softmax(z, out=z) is z and torch.allclose(z, y)  # in place


# ------------------------------------------------------------------------------------------------
# On a GPU: every launcher, every strategy
# ------------------------------------------------------------------------------------------------
FAST_COLS = [1, 3, 31, 256, 257, 1000, 1023, 4099, 8192, 16411, 65537, 131072, 262147, 524288, 600001]
FAST_VARIANTS = {"default": {}, "8-block clusters": {"clusters": 8}, "no clusters": {"clusters": 0},
                 "two reads": {"strategy": "2pass"}}


def _gpu_entries():
    """(name, fn(x) -> y, dtypes, log, largest cols) for every GPU entry point."""
    from a07_softmax import triton_softmax as T

    items = lambda c: native.items_for(c) or 4  # noqa: E731
    out = [(f"fast.softmax [{v}]", (lambda x, o=o: fast.softmax(x, **o)), contract.DTYPES, False, None)
           for v, o in FAST_VARIANTS.items()]
    out += [(f"fast.scale_mask_softmax [{v}]", (lambda x, o=o: fast.scale_mask_softmax(x, 1.0, **o)), contract.DTYPES,
             False, None) for v, o in FAST_VARIANTS.items()]
    out += [(f"native.softmax {k}", (lambda x, k=k: native.softmax(x, k, items=items(x.shape[1]))), ("float32",), False,
             None if k != "softmax_online_1pass" else native.BLOCK * 64)
            for k in ("softmax_safe_3pass", "softmax_online_2pass", "softmax_online_1pass")]
    out += [(f"native.scale_mask_softmax fused={f}", (lambda x, f=f: native.scale_mask_softmax(
        x, 1.0, fused=f, items=items(x.shape[1]))), ("float32",), False, None if not f else native.BLOCK * 64)
        for f in (True, False)]
    out += [("triton softmax", T.softmax, contract.DTYPES, False, T.MAX_ROW_COLS),
            ("triton log_softmax", T.log_softmax, contract.DTYPES, True, T.MAX_ROW_COLS),
            ("triton softmax_online", T.softmax_online, contract.DTYPES, False, None),
            ("triton scale_mask_softmax", lambda x: T.scale_mask_softmax(x, 1.0), contract.DTYPES, False,
             T.MAX_ROW_COLS)]
    return out


@pytest.mark.gpu
def test_every_gpu_entry_point_keeps_the_contract(rng):
    import torch

    broken = []
    for name, fn, dtypes, log, most in _gpu_entries():
        for dtype in dtypes:
            for cols in FAST_COLS:
                if most is not None and cols > most:
                    continue
                x = contract.rows(dtype, cols, rng)
                xt = _tensor(x, dtype, "cuda")
                y = fn(xt)
                torch.cuda.synchronize()
                broken += [f"{name} {dtype} cols {cols}: {b}" for b in contract.violations(y, x, log=log, dtype=dtype)]
    assert not broken, "\n".join(broken[:40])


@pytest.mark.gpu
def test_misaligned_storage_in_place_and_cupy_arrays(rng):
    """The same rows starting one element past a 16-byte boundary (the element-by-element path of the
    fast kernels) for every entry point; the fast softmax also in place (out = x) and on CuPy arrays."""
    import cupy
    import torch

    broken = []
    for name, fn, dtypes, log, most in _gpu_entries():
        for dtype in dtypes:
            for cols in (1, 257, 4099, 65537):
                if most is not None and cols > most:
                    continue
                x = contract.rows(dtype, cols, rng)
                xt = _tensor(x, dtype, "cuda")
                flat = torch.empty(xt.numel() + 1, dtype=xt.dtype, device="cuda")
                shifted = flat[1:].view(xt.shape)
                shifted.copy_(xt)
                assert shifted.data_ptr() % 16
                broken += [f"{name} misaligned {dtype} {cols}: {b}"
                           for b in contract.violations(fn(shifted), x, log=log, dtype=dtype)]
    for variant, options in FAST_VARIANTS.items():
        for dtype in contract.DTYPES:
            for cols in (3, 1000, 65537, 262147):
                x = contract.rows(dtype, cols, rng)
                t = _tensor(x, dtype, "cuda")
                assert fast.softmax(t, out=t, **options) is t
                broken += [f"fast [{variant}] in place {dtype} {cols}: {b}" for b in contract.violations(t, x, dtype=dtype)]
                if dtype != "bfloat16":  # CuPy has no bfloat16
                    y = fast.softmax(cupy.asarray(x.astype(dtype)), **options)
                    broken += [f"fast [{variant}] CuPy {dtype} {cols}: {b}"
                               for b in contract.violations(cupy.asnumpy(y), x, dtype=dtype)]
    torch.cuda.synchronize()
    assert not broken, "\n".join(broken[:40])


@pytest.mark.gpu
def test_lab_and_triton_kernels_in_place(rng):
    import torch

    from a07_softmax import triton_softmax as T

    x = contract.rows("float32", 1000, rng)
    for name, run in [(k, lambda t, k=k: native.softmax(t, k, out=t)) for k in
                      ("softmax_safe_3pass", "softmax_online_2pass", "softmax_online_1pass")] + [
            ("lab2 fused", lambda t: native.scale_mask_softmax(t, 1.0, out=t)),
            ("lab2 unfused", lambda t: native.scale_mask_softmax(t, 1.0, fused=False, out=t)),
            ("triton softmax", lambda t: T.softmax(t, out=t)), ("triton online", lambda t: T.softmax_online(t, out=t))]:
        t = _tensor(x, "float32", "cuda")
        run(t)
        torch.cuda.synchronize()
        _assert_keeps(t, x, f"{name} in place")


@pytest.mark.gpu
def test_more_than_65535_rows(rng):
    import torch

    broken = []
    for cols in (3, 40):
        x = np.tile(contract.rows("float32", cols, rng), (70001 // len(contract.FAMILIES) + 1, 1))[:70001]
        for name, fn, dtypes, log, most in _gpu_entries():
            y = fn(_tensor(x, "float32", "cuda"))
            torch.cuda.synchronize()
            broken += [f"{name} cols {cols}: {b}" for b in contract.violations(y, x, log=log)[:3]]
    assert not broken, "\n".join(broken[:40])


@pytest.mark.gpu
@pytest.mark.parametrize("fused", [True, False])
def test_lab2_masks_on_the_gpu(rng, fused):
    import torch

    x, lens, masked = _masked_case("float32", 1000, rng)
    got = native.scale_mask_softmax(_tensor(x, "float32", "cuda"), 0.5, causal=True, fused=fused,
                                    valid_len=torch.as_tensor(lens, device="cuda"))
    _assert_keeps(got, np.where(masked, -np.inf, x * 0.5), f"Lab 2 fused={fused}, causal + valid_len")


@pytest.mark.gpu
def test_launches_follow_the_callers_stream():
    """Each launcher on a side stream, behind 50 ms of GPU sleep and the copy that fills its input:
    a launch on any other stream runs before the input exists and gets the wrong rows."""
    import torch

    from a07_softmax import triton_softmax as T

    src = torch.randn(4096, 1000, device="cuda") * 8
    want = torch.softmax(src.double(), dim=1)
    for name, fn in [("fast", fast.softmax), ("fast 2pass", lambda t: fast.softmax(t, strategy="2pass")),
                     ("lab1", lambda t: native.softmax(t, "softmax_online_1pass")),
                     ("lab2", lambda t: native.scale_mask_softmax(t, 1.0)),
                     ("lab2 unfused", lambda t: native.scale_mask_softmax(t, 1.0, fused=False)),
                     ("triton", T.softmax)]:
        torch.cuda.synchronize()
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            x = torch.zeros_like(src)
            torch.cuda._sleep(100_000_000)  # ~50 ms on the side stream
            x.copy_(src)
            y = fn(x)
        side.synchronize()
        err = float((y.double() - want).abs().max())
        assert err < 1e-4, f"{name}: launched off the caller's stream (max error {err:.3g})"


@pytest.mark.gpu
def test_two_streams_at_once(rng):
    import torch

    a, b = (torch.randn(8192, 4096, device="cuda") * 8 for _ in range(2))
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(s1):
        ya = fast.softmax(a)
    with torch.cuda.stream(s2):
        yb = fast.softmax(b)
    torch.cuda.synchronize()
    for x, y in ((a, ya), (b, yb)):
        assert float((y.double() - torch.softmax(x.double(), 1)).abs().max()) < 1e-5


@pytest.mark.gpu
def test_a_second_device():
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip(f"one GPU here ({torch.cuda.get_device_name()}): the second-device test needs two")
    from a07_softmax import triton_softmax as T

    x = torch.randn(333, 1000, device="cuda:1") * 8
    want = torch.softmax(x.double(), 1)
    for name, fn in [("fast", fast.softmax), ("lab1", native.softmax), ("lab2", lambda t: native.scale_mask_softmax(t)),
                     ("triton", T.softmax)]:
        y = fn(x)
        assert y.device == x.device, name
        assert float((y.double() - want).abs().max()) < 1e-5, name

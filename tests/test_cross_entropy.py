"""The fused cross-entropy (a07_softmax.cross_entropy): its float64 reference against PyTorch's
autograd, then the Triton twin and the autograd function against the reference, in the interpreter on
a CPU and compiled on a GPU (`pytest -m gpu`): every reduction, label smoothing, z-loss, ignored rows
(an all-ignored batch included), V = 1, targets at both ends of the vocabulary, huge and -inf
logits, a non-scalar upstream gradient, the gradient written over the logits. On a GPU the default
backend is the fast family's CUDA kernel; the real-vocabulary test runs both backends."""
import re

import numpy as np
import pytest

from a07_softmax import accuracy, backend
from a07_softmax import reference as R
from a07_softmax.paths import ROOT

from .helpers import grad_err as _grad_err

DEVICE = backend.detect().triton_device
if DEVICE is None:
    pytest.skip("triton is not installed here (Linux only): the cross-entropy kernel cannot run", allow_module_level=True)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from a07_softmax import cross_entropy as CE  # noqa: E402


def _logits(rng, rows, vocab, scale=8.0):
    return rng.normal(0, scale, size=(rows, vocab))


def _targets(rng, rows, vocab, ignored=(1,)):
    t = rng.integers(0, vocab, size=rows)
    t[0], t[-1] = 0, vocab - 1             # the ends of the vocabulary
    for i in ignored:
        if i < rows:
            t[i] = -100
    return t


@pytest.mark.parametrize("reduction", CE.REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_the_reference_is_pytorchs_autograd_in_float64(rng, reduction, smoothing):
    x = _logits(rng, 9, 50)
    x[2, 7] = -np.inf
    t = _targets(rng, 9, 50)
    t[2] = 3
    for z in (0.0, 1e-3):
        xt = torch.tensor(x, requires_grad=True)
        per_row = F.cross_entropy(xt, torch.tensor(t), reduction="none", label_smoothing=smoothing)
        per_row = per_row + z * torch.logsumexp(xt, 1) ** 2 * (torch.tensor(t) != -100)
        n = int((torch.tensor(t) != -100).sum())
        loss = per_row.sum() / n if reduction == "mean" else per_row.sum() if reduction == "sum" else per_row
        upstream = torch.tensor(rng.normal(size=9)) if reduction == "none" else torch.tensor(1.7, dtype=torch.float64)
        loss.backward(upstream)
        ref_loss, ref_grad = R.cross_entropy_with_grad(x, t, reduction=reduction, label_smoothing=smoothing, z_loss=z)
        assert np.allclose(ref_loss, loss.detach().numpy(), rtol=1e-12, atol=1e-12)
        scale = upstream.numpy()[:, None] if reduction == "none" else upstream.item()
        assert np.allclose(ref_grad * scale, xt.grad.numpy(), rtol=1e-10, atol=1e-12)


def _run(x, t, dtype, device, reduction="mean", smoothing=0.0, z=0.0, upstream=None, inplace=False, backend=None):
    xt = torch.tensor(x).to(dtype).to(device)
    x_seen = xt.double().cpu().numpy()
    leaf = xt.clone().requires_grad_(True)
    src = leaf * 1 if inplace else leaf          # in place needs a non-leaf tensor
    loss = CE.cross_entropy(src, torch.tensor(t).to(device), reduction=reduction, label_smoothing=smoothing,
                            z_loss=z, inplace=inplace, backend=backend)
    loss.backward(upstream.to(device) if upstream is not None else None)
    return x_seen, loss.detach().float().cpu().numpy(), leaf.grad.float().cpu().numpy()


CASES = [("ordinary", 7, 100, 8.0), ("one class (V = 1)", 4, 1, 8.0), ("a tail past the tile", 5, 1000, 8.0),
         ("huge logits", 4, 300, 3e3)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("what,rows,vocab,scale", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("reduction", CE.REDUCTIONS)
def test_kernel_and_autograd_against_float64(rng, dtype, what, rows, vocab, scale, reduction):
    x = _logits(rng, rows, vocab, scale)
    if vocab > 3:
        x[rows - 1, 1] = -np.inf                  # a -inf logit that is not the target
    t = _targets(rng, rows, vocab)
    upstream = torch.tensor(rng.normal(size=rows), dtype=torch.float32) if reduction == "none" else None
    for smoothing, z in ((0.0, 0.0), (0.1, 1e-4)):
        seen, loss, grad = _run(x, t, dtype, DEVICE, reduction, smoothing, z, upstream)
        ref_loss, ref_grad = R.cross_entropy_with_grad(seen, t, reduction=reduction, label_smoothing=smoothing, z_loss=z)
        if upstream is not None:
            ref_grad = ref_grad * upstream.double().numpy()[:, None]
        where = f"{what} {dtype} {reduction} smoothing={smoothing} z={z}"
        assert accuracy.max_rel_err(loss, ref_loss, log=True) <= accuracy.tolerance("float32"), where
        assert _grad_err(grad, ref_grad) <= accuracy.tolerance(dtype), where


UPSTREAM = ["mean, upstream 1 (nothing to scale)", "mean, upstream 0.37", "none, one upstream value a row",
            "none, summed (an expanded upstream: stride 0)", "none, weighted sum"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("how", UPSTREAM)
def test_the_backward_scales_the_stored_gradient_by_any_upstream(rng, dtype, how):
    """The backward multiplies the gradient the forward stored by the upstream gradient, whatever
    shape autograd hands it: a scalar (1 or not), one value a row, or the stride-0 expansion that
    loss.sum() gives a per-row loss. A backward that scaled by the first factor alone, or not at
    all, fails here: a row whose factor is 1 stands among others."""
    x = _logits(rng, 7, 1000)
    t = _targets(rng, 7, 1000)
    xt = torch.tensor(x).to(dtype).to(DEVICE)
    seen = xt.double().cpu().numpy()
    leaf = xt.clone().requires_grad_(True)
    tt = torch.tensor(t).to(DEVICE)
    w = rng.normal(size=7)
    w[0] = 1.0                                         # a row whose factor is 1 among others
    if how.startswith("mean"):
        up = 1.0 if "upstream 1" in how else 0.37
        CE.cross_entropy(leaf, tt).backward(torch.tensor(up, device=DEVICE))
        _, ref = R.cross_entropy_with_grad(seen, t)
        ref = ref * up
    else:
        loss = CE.cross_entropy(leaf, tt, reduction="none")
        if "one upstream" in how:
            loss.backward(torch.tensor(w, dtype=torch.float32, device=DEVICE))
        elif "summed" in how:
            loss.sum().backward()
            w = np.ones(7)
        else:
            (loss * torch.tensor(w, dtype=torch.float32, device=DEVICE)).sum().backward()
        _, ref = R.cross_entropy_with_grad(seen, t, reduction="none")
        ref = ref * w[:, None]
    assert _grad_err(leaf.grad.float().cpu().numpy(), ref) <= accuracy.tolerance(dtype), \
        f"the gradient is not the stored one times the upstream gradient ({how}, {dtype})"


def test_an_all_ignored_batch_is_nan_with_zero_gradient_as_in_pytorch(rng):
    x = _logits(rng, 3, 20)
    t = np.full(3, -100)
    _, loss, grad = _run(x, t, torch.float32, DEVICE)
    assert np.isnan(loss) and not grad.any()
    _, loss, grad = _run(x, t, torch.float32, DEVICE, reduction="sum")
    assert loss == 0 and not grad.any()


def test_the_gradient_can_overwrite_the_logits(rng):
    x = _logits(rng, 6, 300)
    t = _targets(rng, 6, 300)
    seen, loss, grad = _run(x, t, torch.float32, DEVICE, inplace=True)
    ref_loss, ref_grad = R.cross_entropy_with_grad(seen, t)
    assert _grad_err(grad, ref_grad) <= accuracy.tolerance("float32")


def test_the_target_class_gradient_is_formed_in_fp32(rng):
    """bf16 logits where the target holds almost all the mass: p - 1 is about -1e-4, which bf16
    cannot form from a rounded p (p rounds to 1.0 and the difference to 0)."""
    x = np.zeros((2, 64))
    x[:, 5] = 12.0
    t = np.array([5, 5])
    seen, _, grad = _run(x, t, torch.bfloat16, DEVICE, reduction="sum")
    _, ref = R.cross_entropy_with_grad(seen, t, reduction="sum")
    # the target entry itself, p - 1 (about -3e-4), right to bf16's precision: formed in fp32, rounded once
    assert abs(grad[0, 5] - ref[0, 5]) <= accuracy.tolerance("bfloat16") * abs(ref[0, 5])


def test_bad_arguments_are_refused():
    x = torch.zeros(3, 10, device=DEVICE)
    with pytest.raises(ValueError, match=r"target\[1\] = 10 is outside"):
        CE.cross_entropy(x, torch.tensor([0, 10, 2], device=DEVICE))
    with pytest.raises(ValueError, match="reduction"):
        CE.cross_entropy(x, torch.tensor([0, 1, 2], device=DEVICE), reduction="avg")
    with pytest.raises(ValueError, match="label_smoothing"):
        CE.cross_entropy(x, torch.tensor([0, 1, 2], device=DEVICE), label_smoothing=1.5)
    with pytest.raises(TypeError, match="float64"):
        CE.cross_entropy(x.double(), torch.tensor([0, 1, 2], device=DEVICE))
    with pytest.raises(ValueError, match="shape"):
        CE.cross_entropy(x, torch.tensor([0, 1], device=DEVICE))


def test_a_tensor_the_twins_mode_cannot_take_is_refused_by_name():
    """Triton fixes a kernel's mode when it is defined: a process whose twin was defined compiled gets a
    ValueError naming the interpreter for CPU logits (not triton's "0 active drivers"), before any
    launch. Under TRITON_INTERPRET=1 the same call runs (on any triton and NumPy: use_interpreter()
    mends triton < 3.8's interpreter for NumPy >= 2.4). A fresh process: this one's mode is conftest's."""
    import os
    import subprocess
    import sys

    code = ("import torch\nimport a07_softmax\na07_softmax.use_interpreter()\n"
            "from a07_softmax import cross_entropy as CE\n"
            "try:\n    CE.cross_entropy(torch.randn(3, 10), torch.tensor([0, 1, 2]))\n"
            "except ValueError as e:\n    print('REFUSED', e)\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_INTERPRET"] = "0"
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert "REFUSED" in p.stdout and "use_interpreter()" in p.stdout, (p.stdout, p.stderr[-2000:])
    env["TRITON_INTERPRET"] = "1"
    p = subprocess.run([sys.executable, "-c", code.replace("REFUSED", "REFUSED?")], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "REFUSED" not in p.stdout, (p.stdout, p.stderr[-2000:])


@pytest.mark.parametrize("mode", ["loss", "autograd", "inplace"])
@pytest.mark.parametrize("bad", [10, -1, 2**40])
def test_a_target_outside_the_vocabulary_is_refused_whatever_runs(mode, bad):
    """The verdict on the targets arrives after the launch (no synchronisation before it), but
    always before anything is returned; in place it comes first, so the logits survive."""
    x = torch.randn(3, 10, device=DEVICE)
    leaf = x.clone().requires_grad_(mode != "loss")
    src = leaf * 1 if mode == "inplace" else leaf
    before = src.detach().clone()
    with pytest.raises(ValueError, match=rf"target\[1\] = {bad} is outside \[0, vocab = 10\)"):
        CE.cross_entropy(src, torch.tensor([0, bad, 9], device=DEVICE), inplace=mode == "inplace")
    assert torch.equal(src.detach(), before), "a refused call changed the logits"


def _unchecked_bad_target(backend=None):
    """check_targets=False: no error, and the bad row (a target of 10, one of 2^32: 0 in 32 bits)
    is NaN in loss and gradient while every other row keeps its right value."""
    rng = np.random.default_rng(5)
    x = _logits(rng, 4, 10)
    t = np.array([3, 10, 2**32, 9])
    leaf = torch.tensor(x, dtype=torch.float32, device=DEVICE, requires_grad=True)
    loss = CE.cross_entropy(leaf, torch.tensor(t, device=DEVICE), reduction="none", check_targets=False,
                            backend=backend)
    loss.sum().backward()
    got_loss, got_grad = loss.detach().cpu().numpy(), leaf.grad.cpu().numpy()
    assert np.isnan(got_loss[1:3]).all() and np.isnan(got_grad[1:3]).all(), "an out-of-range target must give NaN"
    ref_loss, ref_grad = R.cross_entropy_with_grad(x[[0, 3]], t[[0, 3]], reduction="none")
    assert np.allclose(got_loss[[0, 3]], ref_loss, rtol=1e-5) and np.allclose(got_grad[[0, 3]], ref_grad, atol=1e-6)


def test_unchecked_targets_give_nan_rows_not_errors():
    _unchecked_bad_target()


@pytest.mark.gpu
@pytest.mark.parametrize("backend", CE.BACKENDS)
def test_unchecked_targets_give_nan_rows_not_errors_on_the_gpu(backend):
    _unchecked_bad_target(backend)


# where a bad target goes: first, last, and both sides of each walk's step. On a GPU the CUDA test
# (one block of 1024 threads, 8 loads each: 8192 targets a round) runs by default, and the Triton
# test (4096 a step) where CuPy is missing; in the interpreter the Triton test takes 16 at a time.
_ROWS, _PLACES = (9000, (0, 1023, 1024, 4095, 4096, 8191, 8192, 8999)) if DEVICE == "cuda" else \
    (40, (0, 15, 16, 39))


@pytest.mark.parametrize("target_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("i", _PLACES)
@pytest.mark.parametrize("bad", [-1, 64, 2**32])
def test_the_target_test_reads_every_row(target_dtype, i, bad):
    """The test of the targets (targets_outside_vocab_kernel, or on a GPU cross_entropy_targets.cu)
    looks at every row, compares in 64 bits (2^32 is not 0), and takes ignore_index and both ends of
    the vocabulary for what they are."""
    if target_dtype == torch.int32 and bad == 2**32:
        pytest.skip("2^32 is not an int32 target")
    rows = _ROWS
    x = torch.randn(rows, 64, device=DEVICE)
    t = (torch.arange(rows, device=DEVICE) % 64).to(target_dtype)
    t[::7] = -100
    t[1] = 63
    CE.cross_entropy(x, t)  # valid
    t[i] = bad
    with pytest.raises(ValueError, match=rf"target\[{i}\] = {bad} is outside \[0, vocab = 64\)"):
        CE.cross_entropy(x, t)
    strided = torch.stack([t, torch.zeros_like(t)], 1)
    with pytest.raises(ValueError, match=rf"target\[{i}\] = {bad} is outside"):
        CE.cross_entropy(x, strided[:, 0])   # a strided view of the targets
    CE.cross_entropy(x, strided[:, 1])


def _strided_targets_case(rng, device, backend):
    rows, vocab = 9, 70
    x = torch.tensor(_logits(rng, rows, vocab), dtype=torch.float32, device=device)
    t = torch.tensor(_targets(rng, rows, vocab), device=device)
    # each target beside a decoy column that is a valid class too: read as if dense, the kernel
    # would take the decoys for every other row's target, and no error would say so
    pairs = torch.stack([t, (t + 1) % vocab * (t >= 0)], 1)
    for target in (pairs[:, 0], pairs[:, 0].to(torch.int32), t.flip(0).flip(0)[::1], pairs.t()[0]):
        assert target.dim() == 1 and torch.equal(target, t)
        leaf = x.clone().requires_grad_(True)
        loss = CE.cross_entropy(leaf, target, reduction="none", backend=backend)
        loss.backward(torch.ones_like(loss))
        ref_loss, ref_grad = R.cross_entropy_with_grad(x.double().cpu().numpy(), t.cpu().numpy(), reduction="none")
        where = f"target of stride {target.stride()} {target.dtype} backend={backend}"
        assert accuracy.max_rel_err(loss.detach().cpu().numpy(), ref_loss, log=True) <= accuracy.tolerance("float32"), where
        assert _grad_err(leaf.grad.cpu().numpy(), ref_grad) <= accuracy.tolerance("float32"), where


def test_under_no_grad_only_the_loss_is_computed_and_the_logits_stay(rng):
    """No backward can follow a loss computed under torch.no_grad(): the loss-only pass runs, and
    inplace=True must not write a gradient over logits that will never be differentiated."""
    x = torch.tensor(_logits(rng, 6, 50), dtype=torch.float32, device=DEVICE).requires_grad_(True)
    t = torch.tensor(_targets(rng, 6, 50), device=DEVICE)
    want = R.cross_entropy_with_grad(x.detach().double().cpu().numpy(), t.cpu().numpy(), reduction="none")[0]
    before = x.detach().clone()
    with torch.no_grad():
        loss = CE.cross_entropy(x, t, reduction="none", inplace=True)
    assert loss.grad_fn is None and torch.equal(x.detach(), before), "the logits were overwritten under no_grad"
    assert accuracy.max_rel_err(loss.cpu().numpy(), want, log=True) <= accuracy.tolerance("float32")


def test_a_strided_view_of_the_targets_is_read_by_row(rng):
    """target = labels[:, 0] (stride 2): row r's target is target[r], not the r-th number in memory."""
    _strided_targets_case(rng, DEVICE, None)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", CE.BACKENDS)
def test_a_strided_view_of_the_targets_is_read_by_row_on_the_gpu(rng, backend):
    _strided_targets_case(rng, "cuda", backend)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", CE.BACKENDS)
@pytest.mark.parametrize("vocab", [32768, 50257, 131072, 262144])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_on_the_gpu_at_real_vocabularies(rng, vocab, dtype, backend):
    x = _logits(rng, 8, vocab)
    t = _targets(rng, 8, vocab)
    seen, loss, grad = _run(x, t, dtype, "cuda", "mean", 0.1, 1e-4, backend=backend)
    ref_loss, ref_grad = R.cross_entropy_with_grad(seen, t, label_smoothing=0.1, z_loss=1e-4)
    assert accuracy.max_rel_err(loss, ref_loss, log=True) <= accuracy.tolerance("float32")
    assert _grad_err(grad, ref_grad) <= accuracy.tolerance(dtype)


def test_backward_skips_rows_whose_factor_is_one_and_scales_the_rest(rng):
    """reduction='none' with an upstream gradient of 1 on some rows: those rows keep the stored
    gradient (the scaling kernel returns early there), the others are scaled; nothing else changes."""
    x, t = _logits(rng, 6, 70), _targets(rng, 6, 70)
    upstream = torch.tensor([1.0, 2.5, 1.0, -0.5, 0.0, 1.0], dtype=torch.float32)
    x_seen, _, grad = _run(x, t, torch.float32, DEVICE, reduction="none", upstream=upstream)
    _, ref = R.cross_entropy_with_grad(x_seen, t, reduction="none")
    assert _grad_err(grad, ref * upstream.numpy()[:, None].astype(np.float64)) < 1e-6


def test_a_second_backward_is_refused():
    x = torch.randn(3, 10, device=DEVICE, requires_grad=True)
    loss = CE.cross_entropy(x, torch.tensor([1, 2, 3], device=DEVICE))
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="twice"):
        loss.backward()


def test_host_time_script_names_what_it_times():
    """bench/cross_entropy_host.py (GPU) times the target tests through the functions cross_entropy
    calls: they still take the arguments the script passes, and its --help runs."""
    import inspect

    from .helpers import load_script

    script = load_script("bench/cross_entropy_host.py")
    assert list(inspect.signature(CE._targets_checked).parameters) == ["target", "vocab", "ignore_index"]
    assert list(inspect.signature(CE._targets_on_device).parameters) == ["target", "vocab", "ignore_index", "check",
                                                                          "count"]
    for targets, verdict in (([1, -100, 3], 0), ([1, 4], 1)):
        flag, done = CE._targets_checked(torch.tensor(targets, device=DEVICE), 4, -100)
        assert (done is None) == (DEVICE == "cpu")    # on the CPU no event: the verdict at once
        if done is not None:
            done.synchronize()
        assert int(flag) == verdict, targets
    with pytest.raises(SystemExit) as exit_:
        script.main(["--help"])
    assert exit_.value.code == 0


# ------------------------------------------------------------------------------------------------
# The CUDA backend's test and count of the targets (cuda/cross_entropy_targets.cu), on the CPU target
# ------------------------------------------------------------------------------------------------
_TARGETS_KINDS = [("in", "int64"), ("i64", None), ("i64", None), ("i64", None), ("out", "int32"), ("out", None)]


def _targets_on_cpu(t, vocab, ignore_index, block, tmp_path):
    from a07_softmax import cpu_target

    if cpu_target.compiler() is None:
        pytest.skip("no C++ compiler here (g++ or clang++): the CPU target cannot build the target test")
    key = "exe"
    if key not in _TARGETS_BUILD:
        _TARGETS_BUILD[key] = cpu_target.build(ROOT / CE.TARGETS_SOURCE["CUDA"], "cross_entropy_targets",
                                               _TARGETS_KINDS, cpu_target.scratch())
    t = np.asarray(t, dtype=np.int64)
    out = cpu_target.run(_TARGETS_BUILD[key], 1, block, _TARGETS_KINDS, [t, t.size, vocab, ignore_index, (1,), (2,)],
                         tmp_path)
    return int(out[4][0]), out[5]


_TARGETS_BUILD: dict = {}


def _target_cases():
    """(name, targets, vocab, ignore_index): what the test must flag or count, at the places a
    one-block walk of `block` threads x UNROLL loads could miss (its first and last element, both
    sides of a thread's stride and of a whole round)."""
    rng = np.random.default_rng(11)
    base = rng.integers(0, 50, size=1000)
    base[::7] = -100
    cases = [("valid, some ignored", base, 50, -100), ("one row", np.array([49]), 50, -100),
             ("all ignored", np.full(300, -100), 50, -100),
             ("ignore_index inside the vocabulary", np.array([0, 3, 0, 7]), 50, 0),
             ("-100 when ignore_index is 0", np.array([0, -100, 3]), 50, 0)]
    # 32 threads: a stride of 32, a round of 256; 96 threads (three warps): 96 and 768
    for where in (0, 31, 32, 95, 96, 255, 256, 767, 768, 999):
        for bad, what in ((-1, "-1"), (50, "= vocab"), (2**32 + 3, "2^32 + 3"), (-(2**32), "-2^32")):
            t = base.copy()
            t[where] = bad
            cases.append((f"{what} at {where}", t, 50, -100))
    return cases


@pytest.mark.parametrize("block", [32, 96])
@pytest.mark.parametrize("name,t,vocab,ignore_index", _target_cases(), ids=[c[0] for c in _target_cases()])
def test_the_cuda_target_test_flags_and_counts_on_the_cpu_target(name, t, vocab, ignore_index, block, tmp_path):
    """The verdict (any target outside [0, vocab) that is not ignore_index, compared in 64 bits) and
    the mean's count and reciprocal, against NumPy, over one warp and over three (the block's merge
    of its warps), few enough threads that the walk takes several rounds; outputs poisoned before
    the launch."""
    t = np.asarray(t, dtype=np.int64)
    kept = t != ignore_index
    want_bad = int(bool((kept & ((t < 0) | (t >= vocab))).any()))
    verdict, counted = _targets_on_cpu(t, vocab, ignore_index, block, tmp_path)
    assert verdict == want_bad, f"{name}, {block} threads: verdict {verdict}, expected {want_bad}"
    n = int(kept.sum())
    assert counted[0] == n, f"{name}, {block} threads: counted {counted[0]} rows, expected {n}"
    with np.errstate(divide="ignore"):
        assert counted[1] == np.float32(1) / np.float32(n), f"{name}: reciprocal {counted[1]}, expected 1/{n}"


def test_the_cuda_target_test_compiles_for_sm90_and_gfx90a(tmp_path):
    """NVRTC (sm_90, no GPU needed) and hipcc (gfx90a) compile the same source, no spills or scratch."""
    import os
    import subprocess

    from .helpers import compiled_for_sm90, hipcc

    # the source's own text, not a probe that #includes it by path: NVRTC 13.0 (the GPU machine's)
    # compiled such a probe without error and without emitting the kernel; 13.5 emits it either way
    r = compiled_for_sm90((ROOT / CE.TARGETS_SOURCE["CUDA"]).read_text(), tmp_path)
    assert [k.name for k in r.kernels] == ["cross_entropy_targets"], r.log
    assert not (r.kernels[0].spill_stores or r.kernels[0].spill_loads), r.log
    p = subprocess.run([hipcc(), "-O3", "-std=c++17", "-Icommon", "-Icuda", "--offload-arch=gfx90a", "-c",
                        CE.TARGETS_SOURCE["HIP"], "-o", str(tmp_path / "t.o"), "-Rpass-analysis=kernel-resource-usage"],
                       cwd=ROOT, env=dict(os.environ, HIP_PLATFORM="amd"), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert re.findall(r"Function Name: (\S+)", p.stderr) == ["cross_entropy_targets"], p.stderr[-2000:]
    assert [int(v) for v in re.findall(r"ScratchSize \[bytes/lane\]: (\d+)", p.stderr)] == [0]


def test_inplace_over_a_leaf_that_requires_grad_is_refused_before_the_launch():
    """The gradient would overwrite a parameter (and autograd would hand the leaf its own storage as
    .grad): refused, the leaf untouched; the output of an operation may still be overwritten."""
    leaf = torch.randn(3, 10, device=DEVICE, requires_grad=True)
    before = leaf.detach().clone()
    t = torch.tensor([0, 4, 9], device=DEVICE)
    with pytest.raises(ValueError, match="leaf tensor that requires grad"):
        CE.cross_entropy(leaf, t, inplace=True)
    assert torch.equal(leaf.detach(), before)
    CE.cross_entropy(leaf * 1, t, inplace=True).backward()
    assert leaf.grad is not None and torch.isfinite(leaf.grad).all()
    with torch.no_grad():   # no gradient wanted: the loss alone, nothing overwritten
        CE.cross_entropy(leaf, t, inplace=True)
    assert torch.equal(leaf.detach(), before)


@pytest.mark.gpu
def test_each_thread_reads_its_own_verdict_on_the_gpu():
    """The verdict's pinned slot is per thread: threads calling at once, half of them with a bad
    target, each get their own answer, many times over."""
    import threading

    x = torch.randn(4096, 512, device="cuda")
    good = torch.randint(0, 512, (4096,), device="cuda")
    bad = good.clone()
    bad[4000] = 512
    errors, wrong = [], []

    def work(k):
        torch.cuda.set_device(0)
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            for i in range(40):
                is_bad = (k + i) % 2 == 1
                try:
                    CE.cross_entropy(x, bad if is_bad else good)
                    if is_bad:
                        wrong.append(f"thread {k}, call {i}: a bad target passed")
                except ValueError as e:
                    if not is_bad:
                        wrong.append(f"thread {k}, call {i}: a good batch refused ({e})")
                except Exception as e:  # noqa: BLE001
                    errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors and not wrong, (errors + wrong)[:5]

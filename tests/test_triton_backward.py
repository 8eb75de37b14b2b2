"""The Triton backward kernels (a07_softmax.triton_backward) against float64: the closed forms of
reference.py and PyTorch's autograd, in the interpreter on a CPU and compiled on a GPU. Outputs are
poisoned; row lengths are odd and past a power of two; rows are fully masked (softmax output 0,
log_softmax output -inf) and partly masked; the upstream gradients are not small."""
import numpy as np
import pytest

from a07_softmax import accuracy, backend
from a07_softmax import reference as R

DEVICE = backend.detect().triton_device
if DEVICE is None:
    pytest.skip("triton is not installed here (Linux only): the Triton kernels cannot run", allow_module_level=True)
import torch  # noqa: E402

from a07_softmax import triton_backward as B  # noqa: E402

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _forward(rng, rows, cols, log, dtype, device=DEVICE):
    """(y or z, dy) in `dtype` on `device`: the forward output of random logits with row 1 fully
    masked and a few masked entries elsewhere, and an upstream gradient of size ~3."""
    x = rng.normal(0, 4, size=(rows, cols))
    x[min(1, rows - 1)] = -np.inf
    x[0, :: max(2, cols // 3)] = -np.inf if cols > 1 else x[0, ::2]
    with np.errstate(all="ignore"):
        y = R.log_softmax(x) if log else R.softmax(x)
    dy = rng.normal(0, 3, size=(rows, cols))
    return (torch.tensor(y).to(dtype).to(device), torch.tensor(dy).to(dtype).to(device))


def _err(got, ref):
    """Normwise: a gradient entry is a difference that can cancel to nothing, so the largest error is
    measured against the largest entry of the tensor."""
    got = got.double().cpu().numpy()
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


def _tol(dtype):
    return 4 * accuracy.tolerance(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("rows,cols", [(1, 1), (5, 31), (4, 1000), (3, 1025)])
def test_against_the_closed_form_in_float64(rng, dtype, log, rows, cols):
    y, dy = _forward(rng, rows, cols, log, dtype)
    out = torch.full_like(y, float("nan"))
    (B.log_softmax_backward if log else B.softmax_backward)(y, dy, out=out)
    seen = [t.double().cpu().numpy() for t in (y, dy)]
    ref = (R.log_softmax_backward if log else R.softmax_backward)(*seen)
    assert not torch.isnan(out).any()
    assert _err(out, ref) <= _tol(dtype), (dtype, log, rows, cols, _err(out, ref))


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rows_walked_in_chunks(rng, monkeypatch, dtype, log):
    """Rows past WHOLE_ROW_MAX_COLS take the two-pass path (the row's sum over every chunk first,
    then dx): shrunk here so that the interpreter walks 4 chunks of 32 with a tail of 3, a fully
    masked row and masked entries included, out of place and in place over dy."""
    monkeypatch.setattr(B, "WHOLE_ROW_MAX_COLS", 64)
    monkeypatch.setattr(B, "CHUNK_COLS", 32)
    y, dy = _forward(rng, 5, 99, log, dtype)
    ref = (R.log_softmax_backward if log else R.softmax_backward)(*(t.double().cpu().numpy() for t in (y, dy)))
    out = torch.full_like(y, float("nan"))
    (B.log_softmax_backward if log else B.softmax_backward)(y, dy, out=out)
    assert _err(out, ref) <= _tol(dtype), ("a row walked in chunks: the sum must cover every chunk before dx",
                                           _err(out, ref))
    (B.log_softmax_backward if log else B.softmax_backward)(y, dy, out=dy)
    assert torch.equal(dy, out), "in place over dy, the chunked path must give the same dx"


def test_fully_masked_rows():
    """softmax: y = 0 gives dx = 0 exactly; log_softmax: z = -inf gives dx = dy (autograd's answer)."""
    dy = torch.tensor([[1.5, -2.0, 3.0]], device=DEVICE)
    assert not B.softmax_backward(torch.zeros(1, 3, device=DEVICE), dy).any()
    assert torch.equal(B.log_softmax_backward(torch.full((1, 3), float("-inf"), device=DEVICE), dy), dy)


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_matches_pytorch_autograd(rng, log):
    x = torch.tensor(rng.normal(0, 6, size=(6, 77)), dtype=torch.float64, requires_grad=True)
    dy = torch.tensor(rng.normal(0, 2, size=(6, 77)), dtype=torch.float64)
    y = torch.log_softmax(x, -1) if log else torch.softmax(x, -1)
    y.backward(dy)
    dx = (B.log_softmax_backward if log else B.softmax_backward)(y.detach().float().to(DEVICE), dy.float().to(DEVICE))
    assert _err(dx, x.grad.numpy()) <= 1e-5


def test_in_place_over_dy(rng):
    y, dy = _forward(rng, 3, 40, False, torch.float32)
    expect = B.softmax_backward(y, dy.clone())
    assert B.softmax_backward(y, dy, out=dy) is dy and torch.equal(dy, expect)


def test_bad_input_is_refused_before_a_launch():
    y = torch.zeros(4, 8, device=DEVICE)
    with pytest.raises(ValueError, match="dy must match y"):
        B.softmax_backward(y, torch.zeros(4, 9, device=DEVICE))
    with pytest.raises(ValueError, match="dy must match y"):
        B.softmax_backward(y, torch.zeros(4, 8, device=DEVICE, dtype=torch.float16))
    with pytest.raises(ValueError, match="contiguous"):
        B.softmax_backward(y, torch.zeros(8, 4, device=DEVICE).t())
    buf = torch.zeros(64, device=DEVICE)
    with pytest.raises(ValueError, match="overlaps dy"):
        B.log_softmax_backward(y, buf[:32].view(4, 8), out=buf[8:40].view(4, 8))
    with pytest.raises(ValueError, match="out must be"):
        B.softmax_backward(y, y.clone(), out=torch.zeros(4, 7, device=DEVICE))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", [1000, 4097, 16385, 65536])
def test_on_the_gpu_at_real_lengths(rng, dtype, cols):
    if DEVICE != "cuda":
        pytest.skip("the GPU tests need a CUDA device for triton")
    for log in (False, True):
        y, dy = _forward(rng, 64, cols, log, dtype, "cuda")
        out = torch.full_like(y, float("nan"))
        (B.log_softmax_backward if log else B.softmax_backward)(y, dy, out=out)
        ref = (R.log_softmax_backward if log else R.softmax_backward)(*(t.double().cpu().numpy() for t in (y, dy)))
        assert _err(out, ref) <= _tol(dtype), (dtype, cols, log, _err(out, ref))

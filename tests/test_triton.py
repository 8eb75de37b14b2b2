"""Lab 3 (Triton) against float64: in the interpreter on a CPU (CI), compiled on a GPU."""
import numpy as np
import pytest
import torch

from a07_softmax import accuracy, backend
from a07_softmax import reference as R
from a07_softmax import triton_softmax as T

DEVICE = backend.detect().triton_device  # conftest has already chosen the interpreter where needed
if DEVICE is None:
    pytest.skip("triton is not installed here (Linux only): the Triton lab cannot run", allow_module_level=True)
tol = accuracy.tolerance
ODD_COLS = [1, 3, 31, 33, 1023, 1025]


def poisoned(x):
    return torch.full_like(x, float("nan"))


def err(got, ref, log=False):
    return accuracy.max_rel_err(got.cpu(), ref, log=log)


def make(rng, rows, cols, dtype, lo=-8, hi=8):
    return torch.as_tensor(rng.uniform(lo, hi, size=(rows, cols)).astype(np.float32)).to(dtype).to(DEVICE)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("cols", ODD_COLS)
def test_softmax_odd_cols(rng, cols, dtype):
    x = make(rng, 5, cols, dtype)
    out = poisoned(x)
    T.softmax(x, out=out)
    assert out.dtype == dtype
    assert err(out, R.softmax(x.double().cpu().numpy())) <= tol(dtype)


def test_logits_50_to_100_do_not_overflow(rng):
    x = make(rng, 7, 257, torch.float32, 50, 100)
    assert err(T.softmax(x), R.softmax(x.double().cpu().numpy())) <= tol(torch.float32)


def test_fp16_logits_above_the_fp16_exp_limit(rng):
    x = make(rng, 4, 129, torch.float16, 11.1, 60)  # exp(x) overflows fp16 (max 65504) above ~11.1
    assert torch.isinf(torch.exp(x)).any()
    y = T.softmax(x)
    assert torch.isfinite(y).all() and err(y, R.softmax(x.double().cpu().numpy())) <= tol(torch.float16)


@pytest.mark.parametrize("cols", ODD_COLS)
def test_log_softmax(rng, cols):
    x = make(rng, 3, cols, torch.float32, -30, 30)
    out = poisoned(x)
    T.log_softmax(x, out=out)
    assert err(out, R.log_softmax(x.double().cpu().numpy()), log=True) <= tol(torch.float32)


def test_fully_masked_and_single_valid_rows(rng):
    x = make(rng, 4, 33, torch.float32)
    x[0] = float("-inf")
    x[1] = float("-inf")
    x[1, 17] = 3.0
    y = T.softmax(x).cpu()
    assert torch.equal(y[0], torch.zeros(33)) and y[1, 17] == 1 and int((y[1] != 0).sum()) == 1
    ls = T.log_softmax(x).cpu()
    assert torch.isneginf(ls[0]).all() and ls[1, 17] == 0
    assert torch.isfinite(y).all()


@pytest.mark.parametrize("seq", [1, 3, 33, 100])
def test_scale_mask_softmax_causal(rng, seq):
    bh = 2
    x = make(rng, bh * seq, seq, torch.float32, -20, 20)
    out = poisoned(x)
    T.scale_mask_softmax(x, 0.25, causal=True, q_len=seq, out=out)
    mask = R.causal_mask(seq, seq)[np.arange(bh * seq) % seq]
    assert err(out, R.scale_mask_softmax(x.double().cpu().numpy(), 0.25, mask)) <= tol(torch.float32)


def test_scale_mask_softmax_padding_tensor_with_empty_row(rng):
    rows, cols = 6, 37
    x = make(rng, rows, cols, torch.float16)
    lens = np.array([37, 0, 1, 20, 36, 5])
    pad = R.padding_mask(lens, cols)
    out = T.scale_mask_softmax(x, 0.5, mask=torch.as_tensor(pad, dtype=torch.float32, device=DEVICE))
    assert torch.equal(out[1].cpu(), torch.zeros(cols, dtype=torch.float16))
    assert err(out, R.scale_mask_softmax(x.double().cpu().numpy(), 0.5, pad)) <= tol(torch.float16)


def test_scale_mask_softmax_broadcast_mask_and_causal_together(rng):
    x = make(rng, 8, 8, torch.bfloat16)
    keymask = torch.zeros(8, device=DEVICE)
    keymask[0] = float("-inf")  # row 0 (sees only key 0) becomes fully masked
    y = T.scale_mask_softmax(x, 1.0, mask=keymask, causal=True)
    ref = R.scale_mask_softmax(x.double().cpu().numpy(), 1.0, R.causal_mask(8, 8) + keymask.cpu().numpy()[None])
    assert torch.equal(y[0].cpu().float(), torch.zeros(8))
    assert err(y, ref) <= tol(torch.bfloat16)


@pytest.mark.parametrize("cols, tile", [(1, 16), (31, 16), (33, 16), (1025, 256), (5000, 1024)])
def test_online_long_rows_across_tile_boundaries(rng, cols, tile):
    """The tile loop has a run-time bound: in the interpreter this also proves the installed NumPy
    runs such loops (triton issue 9171 broke them for some NumPy releases)."""
    x = make(rng, 3, cols, torch.float32, -40, 40)
    x[1, -1] = 90.0  # the max arrives in the last tile: every earlier tile's sum must be rescaled
    x[2] = float("-inf")
    out = poisoned(x)
    T.softmax_online(x, out=out, tile=tile)
    assert err(out, R.softmax(x.double().cpu().numpy())) <= tol(torch.float32)
    assert torch.equal(out[2].cpu(), torch.zeros(cols))


@pytest.mark.parametrize("bad, exc, words", [
    (lambda: torch.ones(2, 3, dtype=torch.float64), TypeError, "dtype"),
    (lambda: torch.ones(6), ValueError, "2-D"),
    (lambda: torch.ones(4, 6, device=DEVICE)[:, ::2], ValueError, "contiguous"),  # .to() would copy it
    (lambda: torch.ones(1, T.MAX_ROW_COLS + 1), ValueError, "softmax_online"),
    (lambda: np.ones((2, 3), np.float32), TypeError, "torch.Tensor"),
])
def test_bad_input_is_a_clear_error(bad, exc, words):
    x = bad()
    if isinstance(x, torch.Tensor):
        x = x.to(DEVICE)
    with pytest.raises(exc, match=words):
        T.softmax(x)


def test_q_len_must_divide_rows():
    with pytest.raises(ValueError, match="q_len"):
        T.scale_mask_softmax(torch.ones(6, 4, device=DEVICE), causal=True, q_len=4)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_full_size_and_many_rows(rng, dtype):
    for rows, cols in [(65537, 31), (70000, 128), (1024, 4097), (64, 65536)]:
        x = (torch.randn(rows, cols, device="cuda") * 10).to(dtype)
        ref64 = x.double().cpu().numpy()
        out = poisoned(x)
        T.softmax(x, out=out)
        assert err(out, R.softmax(ref64)) <= tol(dtype), (rows, cols)
        out = poisoned(x)
        T.scale_mask_softmax(x, 0.5, causal=True, q_len=1, out=out)  # every row sees only key 0
        assert bool((out[:, 0] == 1).all()) and int(torch.count_nonzero(out[:, 1:])) == 0


@pytest.mark.gpu
def test_gpu_online_long_rows():
    x = torch.randn(4, 1_048_576 + 3, device="cuda") * 10
    x[2, -1] = 100.0
    y = T.softmax_online(x)
    assert err(y, R.softmax(x.double().cpu().numpy())) <= tol(torch.float32)

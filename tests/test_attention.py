"""Lab 4's fused attention forward (a07_softmax.attention) against float64 attention: in the Triton
interpreter on a CPU (small sizes), compiled on a GPU (`pytest -m gpu`). Outputs are poisoned first;
key padding includes a length of 0 (rows that see no key must be zeros), lengths of 1 and tails past a
tile; scores that rise from tile to tile make every tile move the max (o must be rescaled). Padded keys
hold NaN and inf (key padding is memory the kernel must not let through). The key and value tiles come
through tensor descriptors (TMA) for 16-bit data, in the interpreter and on a Hopper GPU, and through
pointers otherwise; the tests run both paths."""
import numpy as np
import pytest

from a07_softmax import accuracy, backend

DEVICE = backend.detect().triton_device
if DEVICE is None:
    pytest.skip("triton is not installed here (Linux only): the attention kernel cannot run", allow_module_level=True)
import torch  # noqa: E402

from a07_softmax import attention as A  # noqa: E402

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _case(rng, b, h, s, d, dtype, device, rising=False):
    q, k, v = (rng.normal(size=(b, h, s, d)) for _ in range(3))
    if rising:  # key j aligned with every query and growing with j: the max moves at every tile
        k = q.mean(axis=2, keepdims=True) * np.linspace(0.0, 3.0, s)[None, None, :, None] + 0.01 * k
    return [torch.tensor(t).to(dtype).to(device) for t in (q, k, v)]


def _err(got, ref):
    return float(np.abs(got.double().cpu().numpy() - ref).max() / max(np.abs(ref).max(), 1e-30))


def _reference(q, k, v, causal, kv, scale=None, in_torch=None):
    """attention.reference's float64 answer; for GPU tensors the same contract in float64 torch on the
    GPU (NumPy's einsum takes minutes at S = 4097), held to attention.reference by
    test_the_torch_yardstick_agrees."""
    if not (q.is_cuda if in_torch is None else in_torch):
        return A.reference(*(t.double().cpu().numpy() for t in (q, k, v)), causal=causal, kv_len=kv, scale=scale)
    q, k, v = q.double(), k.double(), v.double()
    s = q.shape[2]
    scores = q @ k.transpose(-1, -2) * (q.shape[-1] ** -0.5 if scale is None else scale)
    keep = torch.ones(q.shape[0], 1, s, s, dtype=torch.bool, device=q.device)
    if causal:
        keep &= torch.ones(s, s, dtype=torch.bool, device=q.device).tril()
    if kv is not None:
        keep &= (torch.arange(s, device=q.device)[None, :] < torch.tensor(kv, device=q.device)[:, None])[:, None, None, :]
    p = torch.softmax(scores.masked_fill(~keep, float("-inf")), -1).nan_to_num(0.0)  # nothing visible: zeros
    return (p @ v).cpu().numpy()


def _check(rng, b, h, s, d, dtype, causal, kv, device, rising=False, **launch):
    q, k, v = _case(rng, b, h, s, d, dtype, device, rising)
    kv_len = None if kv is None else torch.tensor(kv, dtype=torch.int32, device=device)
    k_in, v_in = k.clone(), v.clone()
    for i, n in enumerate(kv or ()):  # padded keys: garbage that a masked score or a zeroed value must stop
        k_in[i, :, n:] = float("inf")
        v_in[i, :, n:] = float("nan")
    out = torch.full_like(q, float("nan"))
    A.flash_attention(q, k_in, v_in, causal=causal, kv_len=kv_len, out=out, **launch)
    ref = _reference(q, k, v, causal, kv)
    where = f"{dtype} b{b} h{h} s{s} d{d} causal={causal} kv_len={kv} {launch or ''}"
    assert _err(out, ref) <= accuracy.tolerance(dtype), (where, _err(out, ref))
    if kv is not None:
        for i, n in enumerate(kv):
            if n == 0:
                assert not out[i].float().any(), f"{where}: a row that sees no key must be zeros"
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("s", [1, 5, 16, 17, 37])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("tma", [None, False], ids=["chosen-path", "pointers"])
def test_against_float64_in_the_interpreter_or_on_the_gpu(rng, dtype, s, causal, tma):
    _check(rng, 3, 2, s, 16, dtype, causal, None, DEVICE, tma=tma)
    _check(rng, 3, 2, s, 32, dtype, causal, [0, 1, s], DEVICE, tma=tma)


def test_tensor_descriptors_only_where_they_can_work():
    """TMA needs 16-byte aligned bases: a view that starts one element in takes the pointer path, and
    gives the right answer; float32 takes the pointer path too."""
    base = torch.randn(1 + 2 * 3 * 21 * 16, dtype=torch.bfloat16, device=DEVICE)
    q = base[1:].view(2, 3, 21, 16)
    assert not A._use_tma(q, q, q, interp=not q.is_cuda), "a base 2 bytes past an alignment took TMA"
    assert not A._use_tma(*(q.float(),) * 3, interp=not q.is_cuda), "float32 took TMA"
    aligned = q.clone()
    if not q.is_cuda:
        assert A._use_tma(aligned, aligned, aligned, interp=True), "the interpreter must cover the TMA path"
    out = torch.full_like(q, float("nan"))
    A.flash_attention(q, q, q, causal=True, out=out)
    ref = _reference(q, q, q, True, None)
    assert _err(out, ref) <= accuracy.tolerance(torch.bfloat16), _err(out, ref)
    out = torch.full_like(base, float("nan"))[1:].view(2, 3, 21, 16)
    A.flash_attention(aligned, aligned, aligned, causal=True, out=out)
    assert _err(out, ref) <= accuracy.tolerance(torch.bfloat16), ("a misaligned out", _err(out, ref))


@pytest.mark.parametrize("causal", [False, True])
def test_every_tile_moves_the_max(rng, causal):
    """Rising scores: without rescaling o by exp(m_old - m_new) the output would be dominated by the
    first tiles; 4 key tiles of 16."""
    _check(rng, 1, 2, 64, 16, torch.float32, causal, None, DEVICE, rising=True, block_m=16, block_n=16)


@pytest.mark.parametrize("masked_first", [False, True], ids=["masked-last", "masked-first"])
@pytest.mark.parametrize("tma", [None, False], ids=["chosen-path", "pointers"])
def test_either_order_of_the_two_runs_of_key_tiles(rng, masked_first, tma):
    """The masked run (diagonal, tail) may come before or after the unmasked one: rising scores make
    every tile move the max whichever comes first; a 32-row query tile over 16-key tiles puts two
    masked tiles on each causal diagonal, the second wholly hidden from the tile's first rows; key
    padding (0, 1, a tail) and S past a tile cover the tail run, with and without kv_len."""
    for causal in (False, True):
        _check(rng, 1, 2, 64, 16, torch.float32, causal, None, DEVICE, rising=True, block_m=32, block_n=16,
               masked_first=masked_first, tma=tma)
        _check(rng, 3, 2, 53, 16, torch.bfloat16, causal, [0, 1, 37], DEVICE, block_m=32, block_n=16,
               masked_first=masked_first, tma=tma)
        _check(rng, 2, 1, 53, 32, torch.float16, causal, None, DEVICE, block_m=32, block_n=16,
               masked_first=masked_first, tma=tma)


@pytest.mark.parametrize("scale", [2.5, -0.7, 0.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32-pointers", "bf16-chosen-path"])
def test_every_sign_of_scale(rng, scale, dtype):
    """A positive scale is folded into the exponent (the max taken on raw products); a negative one
    turns the max into a min and must not be, and a zero one makes every visible key equal. float32
    loads through pointers; bfloat16 through tensor descriptors in the interpreter and on a Hopper
    GPU from head dim 64 (here 16: pointers on a GPU)."""
    for causal in (False, True):
        q, k, v = _case(rng, 2, 1, 37, 16, dtype, DEVICE)
        kv = [0, 29]
        out = torch.full_like(q, float("nan"))
        A.flash_attention(q, k, v, causal=causal, kv_len=torch.tensor(kv, dtype=torch.int32, device=DEVICE),
                          scale=scale, out=out)
        ref = A.reference(*(t.double().cpu().numpy() for t in (q, k, v)), causal=causal, kv_len=kv, scale=scale)
        assert _err(out, ref) <= accuracy.tolerance(dtype), \
            (f"scale {scale} causal={causal}: the softmax of scale * q k^T is wrong (a max taken before a "
             f"negative scale is a min)", _err(out, ref))
        assert not out[0].any(), f"scale {scale}: a row that sees no key must be zeros"


@pytest.mark.parametrize("group", [1, 4, 6, 9])
def test_causal_tiles_ordered_across_a_group_of_heads(rng, group):
    """Causal programs are renumbered so that a group of heads runs its longest tiles first: the
    renumbering must reach every (query tile, head) exactly once. 3 x 3 heads and 5 query tiles: a
    group of 4 leaves a last group of 1, 6 one of 3, 9 takes every head; a tile never computed
    stays NaN (the output is poisoned), and one computed for the wrong head is wrong."""
    _check(rng, 3, 3, 75, 16, torch.float32, True, [75, 40, 0], DEVICE, block_m=16, block_n=16,
           heads_per_group=group)


def test_the_head_group_keeps_keys_and_values_within_its_l2_share():
    for bh, s, d in ((128, 4096, 64), (64, 4096, 128), (16, 16384, 128), (512, 1024, 64), (3, 64, 16)):
        g = A.head_group(bh, s, d, 2)
        assert 1 <= g <= bh
        assert g == 1 or g * 2 * s * d * 2 <= A.HEAD_GROUP_L2_BYTES, (bh, s, d, g)
        assert g == bh or (g + 1) * 2 * s * d * 2 > A.HEAD_GROUP_L2_BYTES, (bh, s, d, g)


def test_head_dim_64_and_tails(rng):
    _check(rng, 1, 1, 70, 64, torch.float16, True, [45], DEVICE)


def test_a_strided_kv_len_is_read_by_batch_entry(rng):
    """kv_len = lens[:, 0] (stride 2): batch entry i sees kv_len[i] keys, not the i-th int in memory."""
    b, h, s, d = 3, 2, 20, 16
    q, k, v = (torch.tensor(rng.normal(size=(b, h, s, d)), dtype=torch.float32, device=DEVICE) for _ in range(3))
    lens = torch.tensor([[5, 19], [20, 7], [0, 1]], dtype=torch.int32, device=DEVICE)
    for causal in (False, True):
        out = A.flash_attention(q, k, v, causal=causal, kv_len=lens[:, 0])
        ref = A.reference(*(t.double().cpu().numpy() for t in (q, k, v)), causal=causal, kv_len=[5, 20, 0])
        assert _err(out, ref) <= accuracy.tolerance(torch.float32), (causal, _err(out, ref))


def test_batches_past_the_grid_limit_run_a_slice_at_a_time(rng, monkeypatch):
    """CUDA's grid holds at most 65535 programs in its second dimension (batch x heads here): larger
    batches go a slice of whole batch entries at a time, each with its own kv_len; a batch entry of
    more heads than that is a clear error. The limit is lowered here so that a CPU sees the slices."""
    monkeypatch.setattr(A, "MAX_GRID_HEADS", 5)
    b, h, s, d = 5, 2, 24, 16   # two batch entries a launch: slices of 2, 2 and 1
    q, k, v = (torch.tensor(rng.normal(size=(b, h, s, d)), dtype=torch.float32, device=DEVICE) for _ in range(3))
    kv = [24, 0, 7, 1, 19]
    launched, launch = [], A._launch
    monkeypatch.setattr(A, "_launch", lambda q, *rest: launched.append(q.shape[0]) or launch(q, *rest))
    for causal in (False, True):
        out = A.flash_attention(q, k, v, causal=causal, kv_len=torch.tensor(kv, dtype=torch.int32, device=DEVICE))
        ref = _reference(q, k, v, causal, kv)
        assert _err(out, ref) <= accuracy.tolerance(torch.float32), (causal, _err(out, ref))
    assert launched == [2, 2, 1] * 2   # whole batch entries, never more than 5 programs down the grid
    wide = torch.zeros(1, 6, 4, 16, device=DEVICE)
    with pytest.raises(ValueError, match="heads = 6 > 5"):
        A.flash_attention(wide, wide, wide)


def test_out_may_be_q_but_never_k_or_v(rng):
    """Every program reads all of its head's k and v: an out over them would be read after it was
    written. Over q itself it is safe (a program reads its block of q before it writes it)."""
    q, k, v = (torch.tensor(rng.normal(size=(1, 2, 40, 16)), dtype=torch.float32, device=DEVICE) for _ in range(3))
    ref = _reference(q, k, v, False, None)
    for name, t in (("k", k), ("v", v)):
        with pytest.raises(ValueError, match="out overlaps k or v"):
            A.flash_attention(q, k, v, out=t)
    both = torch.zeros((2, 1, 2, 40, 16), dtype=torch.float32, device=DEVICE)
    both[0] = q
    with pytest.raises(ValueError, match="part of q"):   # q shifted by one row: another block's rows
        A.flash_attention(both[0], k, v, out=both.view(-1)[16:16 + q.numel()].view(q.shape))
    q_again = q.clone()
    out = A.flash_attention(q_again, k, v, out=q_again)
    assert out.data_ptr() == q_again.data_ptr() and _err(out, ref) <= accuracy.tolerance(torch.float32)


def test_bad_arguments_are_refused_before_a_launch():
    q = torch.zeros(1, 1, 4, 16, device=DEVICE)
    with pytest.raises(ValueError, match="head_dim"):
        A.flash_attention(*(torch.zeros(1, 1, 4, 24, device=DEVICE),) * 3)
    with pytest.raises(ValueError, match="share shape"):
        A.flash_attention(q, q, torch.zeros(1, 1, 5, 16, device=DEVICE))
    with pytest.raises(ValueError, match=r"\[0, seq = 4\]"):
        A.flash_attention(q, q, q, kv_len=torch.tensor([5], dtype=torch.int32, device=DEVICE))
    with pytest.raises(ValueError, match="int32"):
        A.flash_attention(q, q, q, kv_len=torch.tensor([2], dtype=torch.int64, device=DEVICE))
    with pytest.raises(TypeError, match="float64"):
        A.flash_attention(*(torch.zeros(1, 1, 4, 16, dtype=torch.float64, device=DEVICE),) * 3)
    # float32 forms scale * log2(e): inf (then NaN) past FLT_MAX / log2(e), or for a scale that is inf
    # as a float32 already
    for scale in (float("inf"), float("nan"), 1e39, -4e38, 2.4e38, -A.MAX_ABS_SCALE * 1.0001):
        with pytest.raises(ValueError, match="scale"):
            A.flash_attention(q, q, q, scale=scale)
    for group in (0, -1, 2.5):
        with pytest.raises(ValueError, match="heads_per_group"):
            A.flash_attention(q, q, q, causal=True, heads_per_group=group)
    for name, size in (("block_m", 0), ("block_n", 0), ("block_m", 48), ("block_n", 8), ("block_m", 32.5)):
        with pytest.raises(ValueError, match=f"{name} must be a power of two"):
            A.flash_attention(q, q, q, **{name: size})
    with pytest.raises(ValueError, match="multiple of block_n"):
        A.flash_attention(q, q, q, block_m=16, block_n=32)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_the_largest_scale_allowed_gives_no_nan(rng, sign):
    """At |scale| = MAX_ABS_SCALE, scale * log2(e) is the largest float32. With products q.k below 1
    every scaled score is finite, so the softmax must be taken (the largest score of a row takes all
    the mass), never inf - inf: the fold's max(s) * c and each s * c - m stay in range. (A product
    that overflows float32 is +inf, and its row NaN, as torch.softmax of +inf; docs/contract.md.)"""
    q, k, v = _case(rng, 1, 2, 21, 16, torch.float32, DEVICE)
    q, k = 0.1 * q, 0.1 * k
    assert float((q @ k.transpose(-1, -2)).abs().max()) < 0.9
    for causal in (False, True):
        out = torch.full_like(q, float("nan"))
        A.flash_attention(q, k, v, causal=causal, scale=sign * A.MAX_ABS_SCALE, out=out)
        ref = A.reference(*(t.double().cpu().numpy() for t in (q, k, v)), causal=causal,
                          scale=sign * A.MAX_ABS_SCALE)
        assert not torch.isnan(out).any(), f"scale {sign * A.MAX_ABS_SCALE:.4g} causal={causal}: NaN"
        assert _err(out, ref) <= accuracy.tolerance(torch.float32), (causal, _err(out, ref))


@pytest.mark.parametrize("d", [16, 64])
def test_float16_over_its_whole_finite_range(rng, d):
    """q and k drawn over float16's whole range (|x| up to 65504): the scores reach ~1e10 (float32
    holds them) and each row's softmax is all but an argmax. With the scale folded into a
    multiply-add, the largest score lands 2^(rounding error of max(s) * c) from 1, which at these
    magnitudes flushes to 0 or overflows on a GPU (zeros, or NaN); the kernel must notice and take
    the unfolded walk. Causal or not, key padding included."""
    top = float(np.finfo(np.float16).max)
    q, k = (torch.tensor(rng.uniform(-top, top, size=(2, 2, 45, d))).to(torch.float16).to(DEVICE) for _ in range(2))
    v = torch.tensor(rng.normal(size=(2, 2, 45, d))).to(torch.float16).to(DEVICE)
    for causal in (False, True):
        out = torch.full_like(q, float("nan"))
        kv = [45, 30]
        A.flash_attention(q, k, v, causal=causal, kv_len=torch.tensor(kv, dtype=torch.int32, device=DEVICE), out=out)
        ref = _reference(q, k, v, causal, kv)
        assert not torch.isnan(out).any(), f"d {d} causal={causal}: NaN from scores near 1e10 (the fold's rounding)"
        assert _err(out, ref) <= accuracy.tolerance(torch.float16), \
            (f"d {d} causal={causal}: scores near 1e10 lost their largest key (the fold's rounding)", _err(out, ref))


def test_the_traffic_model():
    bh, s, d = 32, 4096, 64
    fused, naive = A.traffic_bytes(bh, s, d, 2), A.traffic_bytes(bh, s, d, 2, fused=False)
    assert fused == 4 * bh * s * d * 2
    assert naive - fused == 4 * bh * s * s * 4   # scores written and read, probabilities written and read


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", [64, 128])
def test_on_the_gpu_at_real_lengths(rng, dtype, d):
    for s, causal, kv in ((1, True, None), (100, False, [0, 77]), (1000, True, [1000, 3]), (4097, True, None)):
        for tma in ((None, False) if dtype != torch.float32 else (None,)):
            _check(rng, 2, 2, s, d, dtype, causal, kv, "cuda", tma=tma)


def test_the_torch_yardstick_agrees(rng):
    """The float64 torch reference the GPU tests use gives attention.reference's answer: causal or
    not, key padding, and a batch entry with no visible key (zeros)."""
    q, k, v = _case(rng, 2, 3, 37, 16, torch.float64, "cpu")
    for causal in (False, True):
        got = _reference(q, k, v, causal, [0, 30], in_torch=True)
        want = A.reference(*(t.numpy() for t in (q, k, v)), causal=causal, kv_len=[0, 30])
        assert np.allclose(got, want, rtol=1e-12, atol=1e-12), f"causal={causal}: the torch yardstick disagrees"
        assert not got[0].any(), "a batch entry with no visible key must be zeros in the yardstick too"

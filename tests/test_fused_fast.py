"""The fused operations of the fast family (cuda/softmax_fast.cu's row operations): scale + mask +
softmax and cross-entropy with its gradient, on the same kernel bodies as the fast softmax.

On any machine with a C++ compiler, the CPU target runs the warp, block and two-pass strategies
against float64: every mask kind (causal, sliding window, per-row valid length, an additive mask
broadcast through strides), fully masked and single-key rows, odd lengths and tails, misaligned
rows, scores across each dtype's range, and masked columns filled with NaN (they must not count).
On the H200 (`pytest -m gpu`) every strategy, the cluster one included, at the lengths the bench
runs, with outputs poisoned before the launch."""
import numpy as np
import pytest

from a07_softmax import accuracy, contract, cpu_target, fast
from a07_softmax import cross_entropy as CE
from a07_softmax import reference as R

from .helpers import grad_err as _grad_err  # noqa: E402

if cpu_target.compiler() is None:
    pytest.skip("no C++ compiler (g++ or clang++): the CPU target cannot build the kernels", allow_module_level=True)

DTYPES = ["float32", "bfloat16", "float16"]
LARGEST = {"float32": 3.0e38, "bfloat16": 3.0e38, "float16": 6.0e4}   # near each dtype's largest finite value


# x as the kernel sees it, as float64: the same conversions as the CPU target's driver (float64 to
# float16 in one rounding: via float32 first would round twice and can land one ulp away)
_rounded = contract.round_to


def _visible(rows, cols, q_len, causal, window, valid_len):
    i = (np.arange(rows) % q_len)[:, None]
    j = np.arange(cols)[None, :]
    keep = np.ones((rows, cols), bool)
    if causal:
        keep &= j <= i
    if window:
        keep &= j > i - window
    if valid_len is not None:
        keep &= j < np.asarray(valid_len)[:, None]
    return keep


def _expected(x, scale, keep, additive=None):
    """float64 softmax(x * scale + mask) over the visible columns (reference.softmax gives zeros for a
    row with none)."""
    a = np.asarray(x, np.float64) * scale
    if additive is not None:
        a = a + additive
    with np.errstate(invalid="ignore"):
        return R.softmax(np.where(keep, a, -np.inf))


def _check(got, ref, dtype, where):
    bad = accuracy.first_mismatch(got, ref, accuracy.tolerance(dtype), dtype=dtype)
    assert bad is None, f"{where}: {bad}"


# ------------------------------------------------------------------------------------------------
# scale + mask + softmax on the CPU target
# ------------------------------------------------------------------------------------------------
MASKS = [  # (name, causal, window, with valid lengths)
    ("causal", True, 0, False), ("window", False, 3, False), ("causal + window + padding", True, 4, True),
    ("padding", False, 0, True), ("none", False, 0, False)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", [1, 3, 8, 33, 257, 1000, 3001])
@pytest.mark.parametrize("name,causal,window,padded", MASKS, ids=[m[0] for m in MASKS])
def test_scale_mask_softmax_matches_float64_on_the_cpu(rng, dtype, cols, name, causal, window, padded):
    q_len = 6
    rows = 3 * q_len
    x = rng.normal(0, 6, size=(rows, cols))
    vl = rng.integers(0, cols + 1, size=rows).astype(np.int32) if padded else None
    if padded:
        vl[1], vl[2] = 0, 1                            # fully masked; exactly one key
    keep = _visible(rows, cols, q_len, causal, window, vl)
    x = np.where(keep, x, np.nan)                      # masked scores must never count: NaN there
    got = fast.scale_mask_softmax_on_cpu(x, 0.3, dtype, causal=causal, window=window, valid_len=vl, q_len=q_len)
    ref = _expected(_rounded(x, dtype), 0.3, keep)
    _check(got, ref, dtype, f"{name}, {cols} columns, {dtype} ({fast.plan(cols, dtype, rows, clusters=0).strategy})")
    if padded:
        assert not got[1].any(), "a row with no visible key must be zeros"
        assert got[2, 0] == 1.0


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("cols", [33, 1000, 3001])
@pytest.mark.parametrize("scale", [2.5, 1.0, 0.0, -0.7])
def test_scale_mask_softmax_every_sign_of_scale(rng, dtype, cols, scale):
    """A positive scale goes into the exp (softmax(x * s) = exp((x - max x) * s) / sum); zero and
    negative ones cannot (the max would become a min, and a masked -inf times 0 is NaN) and are
    applied element by element. Causal + window rows cut vectors at both ends of their span."""
    q_len, rows = 6, 18
    x = rng.normal(0, 6, size=(rows, cols))
    keep = _visible(rows, cols, q_len, True, 4, None)
    x = np.where(keep, x, np.nan)
    got = fast.scale_mask_softmax_on_cpu(x, scale, dtype, causal=True, window=4, q_len=q_len)
    _check(got, _expected(_rounded(x, dtype), scale, keep), dtype, f"scale {scale}, {cols} columns, {dtype}")
    full = fast.scale_mask_softmax_on_cpu(np.nan_to_num(x), scale, dtype)      # no mask: every vector whole
    _check(full, _expected(_rounded(np.nan_to_num(x), dtype), scale, np.ones_like(keep, bool)), dtype,
           f"scale {scale}, no mask, {cols} columns, {dtype}")


RAW = [  # 16-bit rows of the span op kept as raw bits (fast.BlockTier.raw): the table and forced shapes
    ("table", {}, (40, 256, 5000)), ("raw block of 8 vectors", {"strategy": "block", "vecs": 8, "raw": 1}, (40, 256, 5000)),
    ("raw block of 4 vectors", {"strategy": "block", "vecs": 4, "raw": 1}, (256, 5000)),
    ("raw warp", {"strategy": "warp", "raw": 1}, (40, 256))]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("how,override,lengths", RAW, ids=[r[0] for r in RAW])
def test_raw_16bit_rows_match_float64_on_the_cpu(rng, dtype, how, override, lengths):
    """16-bit rows held as raw bits (two exps an element; vectors the span hides are neither read
    nor exponentiated): every mask kind, fully masked and one-key rows, NaN in the hidden columns
    (never read), and a NaN or a +inf in a visible column, which makes the whole row NaN, hidden
    columns included (docs/contract.md)."""
    q_len, rows = 6, 18
    for cols in lengths:
        p = fast.plan(cols, dtype, rows, clusters=0, op="scale_span_softmax", **override)
        if override:
            assert p.kernel.endswith(", true>") and p.kernel.count("true") == 2, p.kernel
        for name, causal, window, padded in MASKS[:4]:
            x = rng.normal(0, 6, size=(rows, cols))
            vl = rng.integers(0, cols + 1, size=rows).astype(np.int32) if padded else None
            if padded:
                vl[1], vl[2] = 0, 1
            keep = _visible(rows, cols, q_len, causal, window, vl)
            x = np.where(keep, x, np.nan)
            x[7, np.flatnonzero(keep[7])[-1]] = np.nan     # visible: the row is NaN, hidden columns too
            x[13, np.flatnonzero(keep[13])[0]] = np.inf    # visible +inf: inf - inf, NaN as torch's
            got = fast.scale_mask_softmax_on_cpu(x, 0.3, dtype, causal=causal, window=window, valid_len=vl,
                                                 q_len=q_len, **override)
            where = f"{how}, {name}, {cols} columns, {dtype} ({p.kernel})"
            for r in (7, 13):
                assert np.isnan(got[r]).all(), f"{where}: row {r} has a {'NaN' if r == 7 else '+inf'} score, " \
                    f"so every column must be NaN; {np.count_nonzero(~np.isnan(got[r]))} are not (hidden columns written 0?)"
            ok = np.ones(rows, bool)
            ok[[7, 13]] = False
            _check(got[ok], _expected(_rounded(x, dtype), 0.3, keep)[ok], dtype, where)
            if padded:
                assert not got[1].any(), f"{where}: a row with no visible key must be zeros"


@pytest.mark.parametrize("dtype", DTYPES)
def test_scale_mask_softmax_over_the_whole_finite_range(rng, dtype):
    """Scores up to the dtype's largest magnitude, scaled by 1: the exp must not overflow anywhere,
    and a row of the lowest value (a model's padding) with one real score gives 1 there."""
    cols, big = 40, LARGEST[dtype]
    x = rng.uniform(-big, big, size=(8, cols))
    x[3] = -big
    x[3, 5] = 0.0
    keep = _visible(8, cols, 8, True, 0, None)
    got = fast.scale_mask_softmax_on_cpu(x, 1.0, dtype, causal=True)
    _check(got, _expected(_rounded(x, dtype), 1.0, keep), dtype, f"{dtype} scores up to {big:g}")
    got = fast.scale_mask_softmax_on_cpu(x, 0.5, dtype)                  # nothing masked: the scaled kernel
    _check(got, _expected(_rounded(x, dtype), 0.5, np.ones_like(keep)), dtype,
           f"{dtype} scores up to {big:g}, nothing masked, scale 0.5")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scale", [3e38, 2.5e38])
def test_a_scale_too_large_to_fold_multiplies_each_score(rng, dtype, scale):
    """A positive scale is folded into the exp's factor scale * log2(e); above FLT_MAX / log2(e)
    (2.36e38) that factor is inf and every exponent inf - inf. Such a scale must multiply each score
    instead, which stays finite while |x * scale| does (here |x| < 1), in the unmasked (scaled)
    kernel and the masked one, in every strategy."""
    for cols in (40, 3000, 9000):
        x = rng.uniform(-0.99, 0.99, size=(6, cols))
        x[:, 0] = 0.99  # one certain winner per row: the softmax of scores 1e38 apart is one-hot
        for causal in (False, True):
            keep = _visible(6, cols, 6, True, 0, None) if causal else np.ones((6, cols), bool)
            got = fast.scale_mask_softmax_on_cpu(x, scale, dtype, causal=causal, q_len=6)
            _check(got, _expected(_rounded(x, dtype), scale, keep), dtype,
                   f"scale {scale:g} ({'causal' if causal else 'nothing masked'}), {cols} columns, {dtype}: "
                   "the scale folded into the exp overflows to inf")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("shape,mask_shape", [((2, 3, 5, 37), (5, 37)), ((2, 3, 5, 37), (2, 1, 1, 37)),
                                              ((2, 5, 40), (2, 5, 40)), ((10, 16), (5, 16)), ((2, 3, 5, 37), (37,))])
def test_an_additive_mask_broadcasts_through_strides(rng, dtype, shape, mask_shape):
    x = rng.normal(0, 4, size=shape)
    add = np.where(rng.random(mask_shape) < 0.3, -np.inf, rng.normal(0, 2, size=mask_shape))
    q_len = 5 if len(shape) == 2 else None
    got = fast.scale_mask_softmax_on_cpu(x, 0.5, dtype, causal=True, mask=add, q_len=q_len)
    logical = (shape[0] // 5, 5, shape[1]) if len(shape) == 2 else shape
    full = np.broadcast_to(_rounded(add, dtype), logical).reshape(-1, shape[-1])
    rows = full.shape[0]
    keep = _visible(rows, shape[-1], 5, True, 0, None)
    ref = _expected(_rounded(x, dtype).reshape(rows, -1), 0.5, keep, full)
    _check(got, ref, dtype, f"mask {mask_shape} over scores {shape}")


@pytest.mark.parametrize("strategy,cols", [("warp", 60), ("block", 700), ("2pass", 3001)])
@pytest.mark.parametrize("aligned", [True, False])
def test_each_cpu_strategy_and_the_element_path(rng, strategy, cols, aligned):
    x = rng.normal(0, 6, size=(12, cols))
    vl = rng.integers(0, cols + 1, size=12).astype(np.int32)
    keep = _visible(12, cols, 4, True, 0, vl)
    got = fast.scale_mask_softmax_on_cpu(np.where(keep, x, np.nan), 1.0, causal=True, valid_len=vl, q_len=4,
                                         strategy=strategy, aligned=None if aligned else False)
    _check(got, _expected(x, 1.0, keep), "float32", f"{strategy}, aligned={aligned}")
    got = fast.scale_mask_softmax_on_cpu(x, 0.7, strategy=strategy, aligned=None if aligned else False)
    _check(got, _expected(x, 0.7, np.ones_like(keep)), "float32", f"{strategy}, aligned={aligned}, nothing masked")


# (input, output) element offsets into their buffers (see test_contract.VIEW_OFFSETS)
VIEW_OFFSETS = [(1, 1), (1, 0), (0, 3), (3, 1)]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("offsets", VIEW_OFFSETS)
@pytest.mark.parametrize("cols,strategy", [(37, "warp"), (700, "block"), (16384, "2pass")])
def test_scale_mask_softmax_on_views_at_odd_offsets(rng, dtype, offsets, cols, strategy):
    """Rows read from the 16-byte boundary before them: the mask's span is counted in the row's
    columns, not the vector grid's, and the columns before the row (a neighbour's scores, NaN
    here) never count. Every mask kind at once, and nothing masked (the scaled kernel). 16384
    columns are a whole number of two-pass steps: the walk must take one step more for the lead."""
    q_len, rows = 4, 12
    x = rng.normal(0, 6, size=(rows, cols))
    vl = rng.integers(1, cols + 1, size=rows).astype(np.int32)
    vl[5] = 0                                              # fully masked
    keep = _visible(rows, cols, q_len, True, 5, vl)
    got = fast.scale_mask_softmax_on_cpu(np.where(keep, x, np.nan), 0.6, dtype, causal=True, window=5,
                                         valid_len=vl, q_len=q_len, offsets=offsets, strategy=strategy)
    where = f"{cols} columns ({strategy}), {dtype}, input and output {offsets} elements into their buffers"
    _check(got, _expected(_rounded(x, dtype), 0.6, keep), dtype, f"causal + window + padding, {where}")
    assert not got[5].any(), f"a fully masked row must be zeros ({where})"
    got = fast.scale_mask_softmax_on_cpu(x, 0.6, dtype, offsets=offsets, strategy=strategy)
    _check(got, _expected(_rounded(x, dtype), 0.6, np.ones_like(keep)), dtype, f"nothing masked, {where}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("offsets", VIEW_OFFSETS)
@pytest.mark.parametrize("vocab,strategy", [(13, "warp"), (1001, "block"), (16384, "2pass")])
def test_cross_entropy_on_views_at_odd_offsets(rng, dtype, offsets, vocab, strategy):
    """Logits and gradient at odd offsets: targets at both ends of the vocabulary, ignored rows
    (whose first vector may hold columns of the row before: none may be taken for the target), the
    loss alone. 16384: a whole number of two-pass steps (the walk takes one more for the lead)."""
    rows = 9
    x = rng.normal(0, 8, size=(rows, vocab))
    t = _targets(rng, rows, vocab)
    t[4] = t[6] = -100
    t[5] = 0
    where = f"V = {vocab} ({strategy}), {dtype}, logits and gradient {offsets} elements into their buffers"
    loss, grad = fast.cross_entropy_on_cpu(x, t, dtype, label_smoothing=0.1, offsets=offsets, strategy=strategy)
    ref_loss, ref_grad = R.cross_entropy_with_grad(_rounded(x, dtype), t, reduction="none", label_smoothing=0.1)
    _loss_close(loss, ref_loss, where)
    assert _grad_err(grad, ref_grad) <= accuracy.tolerance(dtype), f"gradient, {where}"
    assert not grad[[1, 4, 6]].any() and not loss[[1, 4, 6]].any(), f"ignored rows: zero gradient and loss ({where})"
    only, _ = fast.cross_entropy_on_cpu(x, t, dtype, label_smoothing=0.1, grad=False, offsets=offsets,
                                        strategy=strategy)
    _loss_close(only, ref_loss, f"loss alone, {where}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("offsets", [(1, 0), (3, 0), (7, 0)])
@pytest.mark.parametrize("vocab,strategy", [(1001, "block"), (16387, "2pass"), (16384, "2pass")])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_the_loss_alone_never_takes_a_neighbouring_rows_columns_into_a_misaligned_row(rng, dtype, offsets, vocab, strategy,
                                                                        smoothing):
    """A misaligned row's first vector starts at the 16-byte boundary before it and holds the previous
    row's last columns, which the kernel must drop. Here they are the largest logits of the tensor (60
    against N(0, 2)), so one taken into a row's max, its sum, or its label smoothing's mean moves that
    loss by far more than the tolerance; a vector read whole past the row's end would take the next
    row's first columns. Targets at column 0 (in that first vector) and at the end."""
    rows = 7
    x = rng.normal(0, 2, size=(rows, vocab))
    x[::2, -7:] = 60.0                       # the tails a misaligned next row's first vector reads
    t = _targets(rng, rows, vocab)
    t[2] = 0
    where = (f"V = {vocab} ({strategy}), {dtype}, label smoothing {smoothing}, logits {offsets[0]} elements into "
             f"their buffer: columns of the row before or after must not count")
    only, _ = fast.cross_entropy_on_cpu(x, t, dtype, label_smoothing=smoothing, grad=False, offsets=offsets,
                                        strategy=strategy)
    ref_loss, _ = R.cross_entropy_with_grad(_rounded(x, dtype), t, reduction="none", label_smoothing=smoothing)
    _loss_close(only, ref_loss, where)


def test_bad_mask_arguments_are_clear_errors(rng):
    x = rng.normal(size=(6, 10))
    with pytest.raises(ValueError, match="q_len"):
        fast.scale_mask_softmax_on_cpu(x, q_len=4)
    with pytest.raises(ValueError, match="window"):
        fast.scale_mask_softmax_on_cpu(x, window=-1)
    with pytest.raises(ValueError, match="scale"):
        fast.scale_mask_softmax_on_cpu(x, float("inf"))
    with pytest.raises(ValueError, match="finite as a float32"):
        fast.scale_mask_softmax_on_cpu(x, -1e39)                         # finite, but inf as a float32
    with pytest.raises(ValueError, match="valid_len"):
        fast.scale_mask_softmax_on_cpu(x, valid_len=np.zeros(5, np.int32))
    with pytest.raises(ValueError, match="contradicts"):
        fast.scale_mask_softmax_on_cpu(x.reshape(2, 3, 10), q_len=2)
    with pytest.raises(ValueError):
        fast.scale_mask_softmax_on_cpu(x, mask=np.zeros((4, 10)))      # does not broadcast


def test_the_gpu_entry_refuses_bad_masks_before_a_launch():
    """fast.scale_mask_softmax's own checks, driven without a GPU: each refusal comes before any
    compilation or launch, and names what was wrong."""
    from .helpers import FakeDeviceArray

    x = FakeDeviceArray((2, 3, 5, 10))
    with pytest.raises(ValueError, match="on x's GPU"):
        fast.scale_mask_softmax(x, 0.5, mask=np.zeros((5, 10), np.float32))
    with pytest.raises(TypeError, match="dtype float64"):
        fast.scale_mask_softmax(x, 0.5, mask=FakeDeviceArray((5, 10), "float64"))
    with pytest.raises(ValueError, match="contradicts"):
        fast.scale_mask_softmax(x, 0.5, q_len=4)
    with pytest.raises(ValueError, match="scores must be"):
        fast.scale_mask_softmax(FakeDeviceArray((2, 2, 3, 5, 10)), 0.5)
    with pytest.raises(ValueError, match="scale"):
        fast.scale_mask_softmax(x, float("nan"))
    with pytest.raises(ValueError, match="finite as a float32"):
        fast.scale_mask_softmax(x, 1e39)
    with pytest.raises(ValueError, match="valid_len"):
        fast.scale_mask_softmax(x, 0.5, valid_len=np.zeros(30, np.int32))
    with pytest.raises(ValueError, match="not C-contiguous"):
        fast.scale_mask_softmax(FakeDeviceArray((4, 10), contiguous=False), 0.5)
    with pytest.raises(TypeError, match="float64"):
        fast.scale_mask_softmax(FakeDeviceArray((4, 10), "float64"), 0.5)


def test_the_plan_never_gives_16_bit_masked_rows_a_cluster():
    """The 16-bit cluster kernel keeps raw bits and would recompute every score at each use; it
    spilled at every occupancy (fast.OP_TABLES), so longer masked rows are read twice instead."""
    assert fast.plan(16384, "bfloat16", 64, op="scale_mask_softmax").strategy == "block"
    assert fast.plan(16385, "bfloat16", 64, op="scale_mask_softmax").strategy == "2pass"
    assert fast.plan(40000, "float32", 64, op="scale_mask_softmax").strategy == "cluster"
    assert fast.plan(40000, "bfloat16", 64).strategy == "cluster"


# ------------------------------------------------------------------------------------------------
# cross-entropy on the CPU target
# ------------------------------------------------------------------------------------------------
def _targets(rng, rows, vocab):
    t = rng.integers(0, vocab, size=rows)
    t[0], t[-1] = 0, vocab - 1             # both ends of the vocabulary
    if rows > 2:
        t[1] = -100                        # ignored
    return t


def _loss_close(got, ref, where):
    with np.errstate(over="ignore"):
        ref = np.asarray(ref, np.float64).astype(np.float32).astype(np.float64)  # the loss is fp32: z lse^2 may overflow
    both_inf = np.isinf(got) & np.isinf(ref) & (np.sign(got) == np.sign(ref))
    g, r = np.where(both_inf, 0, got), np.where(both_inf, 0, ref)
    bad = accuracy.first_mismatch(g, r, accuracy.tolerance("float32"), log=True)
    assert bad is None, f"loss, {where}: {bad}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("vocab", [1, 2, 33, 1000, 4099])
@pytest.mark.parametrize("smoothing,z", [(0.0, 0.0), (0.1, 1e-3)])
def test_cross_entropy_kernel_matches_float64_on_the_cpu(rng, dtype, vocab, smoothing, z):
    rows = 7
    x = rng.normal(0, 8, size=(rows, vocab))
    t = _targets(rng, rows, vocab)
    if vocab > 3:
        x[2, : vocab // 2] = -np.inf       # -inf logits, the target among the finite ones
        t[2] = vocab - 1
        x[3, 1] = LARGEST[dtype] / 2       # a huge logit
    loss, grad = fast.cross_entropy_on_cpu(x, t, dtype, label_smoothing=smoothing, z_loss=z, grad_scale=0.25)
    seen = _rounded(x, dtype)
    ref_loss, ref_grad = R.cross_entropy_with_grad(seen, t, reduction="none", label_smoothing=smoothing, z_loss=z)
    where = f"V = {vocab}, {dtype}, smoothing {smoothing}, z {z}"
    _loss_close(loss, ref_loss, where)
    assert _grad_err(grad, 0.25 * ref_grad) <= accuracy.tolerance(dtype), where
    assert not grad[1].any() and loss[1] == 0, "an ignored row: zero gradient, zero loss"


_FLOAT_ROWS = [(d, dict(strategy=s)) for d in DTYPES for s in ("warp", "block", "2pass")]
_RAW_ROWS = [(d, h) for d in ("bfloat16", "float16")
             for h in (dict(strategy="block", raw=1, vecs=2, threads=64), dict(strategy="warp", raw=1, vecs=4, group=8))]


@pytest.mark.parametrize("dtype,how", _FLOAT_ROWS + _RAW_ROWS, ids=str)
@pytest.mark.parametrize("grad_scale", [1.0, "tiny", "large", -0.5, 0.0])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_gradient_for_every_sign_of_its_factor(rng, dtype, how, grad_scale, smoothing):
    """The gradient is p k - eps / V with k = (1 + 2 z lse) grad_scale (CrossEntropyRow::out() in
    cuda/softmax_fast.cu), in float rows (RowPart) and raw 16-bit rows (RowBits). The z-loss makes
    1 + 2 z lse negative in the rows whose logits sit far below 0, so each grad_scale meets k of
    both signs, and 0; with and without label smoothing (the eps / V)."""
    # far from 1, yet within what the dtype's gradient can hold (fp16 underflows below 6e-8 and
    # overflows past 65504; k reaches 5.5 grad_scale in row 1)
    grad_scale = {"tiny": 2.0 ** (-10 if dtype == "float16" else -40),
                  "large": 2.0 ** (6 if dtype == "float16" else 15)}.get(grad_scale, grad_scale)
    vocab = ({"warp": 256, "block": 512} if how.get("raw") else {"warp": 100, "block": 3000, "2pass": 5001})[how["strategy"]]
    rows = 6
    x = rng.normal(0, 3, size=(rows, vocab)) + np.array([-40, 40, -25, 5, -60, 0])[:, None]
    t = rng.integers(0, vocab, size=rows)
    t[0], t[1] = 0, vocab - 1
    z = 0.05   # 1 + 2 z lse < 0 where lse < -10: rows 0, 2 and 4
    loss, grad = fast.cross_entropy_on_cpu(x, t, dtype, label_smoothing=smoothing, z_loss=z,
                                           grad_scale=grad_scale, **how)
    seen = _rounded(x, dtype)
    ref_loss, ref_grad = R.cross_entropy_with_grad(seen, t, reduction="none", label_smoothing=smoothing, z_loss=z)
    lse = np.logaddexp.reduce(seen, axis=1)
    assert (1 + 2 * z * lse < 0).sum() == 3 and (1 + 2 * z * lse > 0).sum() == 3, "the rows must give k both signs"
    for r in range(rows):
        where = f"{dtype} {how}, grad_scale {grad_scale}, smoothing {smoothing}, row {r}"
        _loss_close(loss[r:r + 1], ref_loss[r:r + 1], where)
        want = grad_scale * ref_grad[r]
        if grad_scale == 0.0:
            assert not grad[r].any(), f"gradient, {where}: a zero upstream gradient must give zeros"
        else:
            assert _grad_err(grad[r], want) <= accuracy.tolerance(dtype), \
                f"gradient, {where}: p k - eps / V with k = (1 + 2 z lse) grad_scale is off"


@pytest.mark.parametrize("strategy,vocab", [("warp", 100), ("block", 3000), ("2pass", 5001)])
def test_cross_entropy_each_cpu_strategy_and_the_loss_alone(rng, strategy, vocab):
    x = rng.normal(0, 8, size=(6, vocab))
    t = _targets(rng, 6, vocab)
    ref_loss, ref_grad = R.cross_entropy_with_grad(x.astype(np.float32).astype(np.float64), t, reduction="none")
    loss, grad = fast.cross_entropy_on_cpu(x, t, strategy=strategy)
    _loss_close(loss, ref_loss, strategy)
    assert _grad_err(grad, ref_grad) <= accuracy.tolerance("float32")
    only, untouched = fast.cross_entropy_on_cpu(x, t, strategy=strategy, grad=False)
    _loss_close(only, ref_loss, f"{strategy}, loss alone")
    assert np.isnan(untouched).all(), "the loss-only kernel must not write the gradient (it was poisoned)"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("strategy,cols,override", [("block", 512, dict(vecs=2, threads=32)),
                                                    ("warp", 256, dict(vecs=4, group=8))])
def test_cross_entropy_raw_rows_find_the_target_in_every_column(rng, dtype, strategy, cols, override):
    """16-bit rows held as raw bits (RowBits, the layout of the 16-bit clusters) look for the
    target's column once, after the loads (see_all in cuda/softmax_fast.cu): the thread whose
    vectors hold it must read x_t, write the loss and subtract the one-hot there. Row r's target is
    column r, so every column of every thread's every vector (first and last element, first and
    last vector) is the target once."""
    x = rng.normal(0, 4, size=(cols, cols))
    t = np.arange(cols)
    p = fast.plan(cols, dtype, cols, op="cross_entropy", strategy=strategy, raw=1, **override)
    assert "raw bits" in p.describe(), p.describe()
    loss, grad = fast.cross_entropy_on_cpu(x, t, dtype, strategy=strategy, raw=1, **override)
    ref_loss, ref_grad = R.cross_entropy_with_grad(_rounded(x, dtype), t, reduction="none")
    for r in range(cols):
        where = f"{dtype} {strategy} raw rows, target column {r} (vector {r // 8}, element {r % 8})"
        _loss_close(loss[r:r + 1], ref_loss[r:r + 1], where)
        assert _grad_err(grad[r:r + 1], ref_grad[r:r + 1]) <= accuracy.tolerance(dtype), \
            f"gradient, {where}: the one-hot at the target was not subtracted where it lies"


def test_rows_with_no_softmax_or_no_valid_target_are_nan(rng):
    """All -inf logits: no softmax exists, loss and gradient NaN (as PyTorch); a target outside the
    vocabulary (refused on the host before a launch) would give NaN, never a silent 0."""
    x = rng.normal(size=(4, 50))
    x[0] = -np.inf
    t = np.array([3, 60, -100, 7])
    loss, grad = fast.cross_entropy_on_cpu(x, t)
    assert np.isnan(loss[0]) and np.isnan(grad[0]).all()
    assert np.isnan(loss[1]) and np.isnan(grad[1]).all()
    assert loss[2] == 0 and not grad[2].any()
    assert np.isfinite(loss[3])


def test_the_target_gradient_is_formed_in_fp32_in_every_dtype():
    x = np.zeros((2, 64))
    x[:, 5] = 12.0                         # p_target = 1 - 3.7e-4: p - 1 cancels if p is rounded first
    t = np.array([5, 5])
    for dtype in ("bfloat16", "float16"):
        _, grad = fast.cross_entropy_on_cpu(x, t, dtype)
        _, ref = R.cross_entropy_with_grad(x, t, reduction="none")
        assert abs(grad[0, 5] - ref[0, 5]) <= accuracy.tolerance(dtype) * abs(ref[0, 5]), dtype


def _scale_rows_on_cpu(g, factor, dtype, grid):
    kinds = [("inout", dtype), ("i32", None), ("i32", None), ("in", "float32"), ("i32", None)]
    key = ("scale_rows", dtype)
    if key not in _SCALE_BUILDS:
        work = cpu_target.scratch()
        name = f"scale_rows_fast<{fast.DTYPES[dtype][0]}>"
        _SCALE_BUILDS[key] = (cpu_target.build(fast.native.ROOT / fast.SOURCE["CUDA"], name, kinds, work), work)
    exe, work = _SCALE_BUILDS[key]
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(dir=work) as run_dir:
        out = cpu_target.run(exe, grid, 64, kinds, [g, *g.shape, np.asarray(factor, np.float32), int(np.size(factor) > 1)],
                             Path(run_dir))
    return out[0]


_SCALE_BUILDS: dict = {}


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_backward_scale_kernel_on_the_cpu(rng, dtype):
    """scale_rows_fast, cross-entropy's backward on the CUDA path: rows times the upstream gradient,
    in place, a factor of exactly 1 leaving its row as it was. Fewer blocks (3) than rows (7), and
    rows (101) longer than a block (64 threads) and not a multiple of it: every row and column must
    be reached.
    Per-row factors start with a 1, so a kernel that judged every row by the first factor fails."""
    g = _rounded(rng.normal(0, 3, size=(7, 101)), dtype)
    # factors of few bits: each product is exact in fp32, so it is rounded to the dtype once, as here
    for factor, why in ((np.array([1.0]), "a scalar 1: untouched"), (np.array([0.375]), "a scalar"),
                        (np.array([1.0, 2.0, 0.0, -1.5, 1.0, 0.5, np.nan]), "one factor a row")):
        got = _scale_rows_on_cpu(g, factor, dtype, grid=3)
        want = _rounded(g * (factor[:, None] if factor.size > 1 else factor[0]), dtype)
        wrong = sorted(set(np.nonzero(~np.isclose(got, want, rtol=0, atol=0, equal_nan=True))[0].tolist()))
        assert not wrong, f"{dtype}, {why}: rows {wrong} of 7 not scaled by their factor"


# ------------------------------------------------------------------------------------------------
# On the GPU
# ------------------------------------------------------------------------------------------------
GPU_COLS = [1, 3, 33, 128, 257, 1000, 2049, 4096, 8191, 16384, 16385, 40000]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", GPU_COLS)
def test_scale_mask_softmax_on_the_gpu(rng, dtype, cols):
    import torch

    q_len = 4
    rows = 3 * q_len
    x = rng.normal(0, 6, size=(rows, cols))
    vl = rng.integers(0, cols + 1, size=rows).astype(np.int32)
    vl[1], vl[2] = 0, 1
    for causal, window, lens, scale in ((True, 0, None, 0.3), (True, 5, vl, 0.3), (False, 0, vl, 0.3),
                                        (False, 0, None, 0.3), (True, 5, None, -0.7), (True, 0, vl, 0.0)):
        keep = _visible(rows, cols, q_len, causal, window, lens)
        xt = torch.tensor(np.where(keep, x, np.nan)).to(getattr(torch, dtype)).cuda()
        out = torch.full_like(xt, float("nan"))
        fast.scale_mask_softmax(xt, scale, causal=causal, window=window, q_len=q_len, out=out,
                                valid_len=None if lens is None else torch.tensor(lens).cuda())
        ref = _expected(xt.double().cpu().numpy(), scale, keep)
        plan = fast.plan(cols, dtype, rows, op="scale_mask_softmax")
        _check(out.float().cpu().numpy(), ref, dtype, f"{plan.describe()} causal={causal} window={window} scale={scale}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_scale_mask_softmax_gpu_mask_tensor_in_place_and_cupy(rng, dtype):
    import cupy
    import torch

    dt = getattr(torch, dtype)
    x = torch.tensor(rng.normal(0, 4, size=(2, 3, 64, 300))).to(dt).cuda()
    keep_keys = torch.tensor(rng.random((2, 1, 1, 300)) < 0.8).cuda()
    ref = _expected(x.double().cpu().numpy().reshape(-1, 300), 0.2,
                    np.broadcast_to(keep_keys.cpu().numpy(), x.shape).reshape(-1, 300))
    y = x.clone()
    fast.scale_mask_softmax(y, 0.2, mask=keep_keys, out=y)                 # bool mask, in place
    _check(y.float().cpu().numpy().reshape(-1, 300), ref, dtype, "bool key mask, in place")
    if dtype == "float32":
        xc = cupy.asarray(x.cpu().numpy())
        add = cupy.where(cupy.asarray(keep_keys.cpu().numpy()), 0.0, -cupy.inf).astype(cupy.float32)
        yc = fast.scale_mask_softmax(xc, 0.2, mask=add)
        _check(cupy.asnumpy(yc).reshape(-1, 300), ref, dtype, "CuPy, additive mask")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("vocab", [1, 33, 4099, 32768, 50257, 131072, 262144, 262147])
def test_cross_entropy_kernel_on_the_gpu(rng, dtype, vocab):
    import torch

    rows = 6
    x = rng.normal(0, 8, size=(rows, vocab))
    t = _targets(rng, rows, vocab)
    xt = torch.tensor(x).to(getattr(torch, dtype)).cuda()
    seen = xt.double().cpu().numpy()
    for smoothing, z in ((0.0, 0.0), (0.1, 1e-4)):
        leaf = xt.clone().requires_grad_(True)
        loss = CE.cross_entropy(leaf, torch.tensor(t).cuda(), reduction="sum", label_smoothing=smoothing,
                                z_loss=z, backend="cuda")
        loss.backward()
        ref_loss, ref_grad = R.cross_entropy_with_grad(seen, t, reduction="sum", label_smoothing=smoothing, z_loss=z)
        plan = fast.plan(vocab, dtype, rows, op="cross_entropy")
        where = f"{plan.describe()} smoothing {smoothing} z {z}"
        _loss_close(np.array([loss.item()]), np.array([ref_loss]), where)
        assert _grad_err(leaf.grad.double().cpu().numpy(), ref_grad) <= accuracy.tolerance(dtype), where
        with torch.no_grad():
            only = CE.cross_entropy(xt, torch.tensor(t).cuda(), reduction="sum", label_smoothing=smoothing,
                                    z_loss=z, backend="cuda")
        _loss_close(np.array([only.item()]), np.array([ref_loss]), where + " (loss alone)")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("offsets", VIEW_OFFSETS)
@pytest.mark.parametrize("cols,strategy", [(31, None), (1000, None), (16384, "2pass"), (65537, None), (262147, None)])
def test_views_at_odd_offsets_on_the_gpu(rng, dtype, offsets, cols, strategy):
    """Softmax, scale + mask + softmax and cross-entropy on views that start off a 16-byte boundary
    (and rows whose length is not a multiple of the vector), through every strategy the GPU runs:
    warp, block, two-pass, and the cluster kernels (fp32 rows in registers as floats, 16-bit rows as
    raw bits: only a GPU runs them). Row 1's largest score is its first column, row 2's its last,
    row 3 is all -inf after it (fully masked; ignored in cross-entropy): a first vector that kept the
    previous row's columns, or a last one cut short, shows. Both buffers are NaN around the views,
    and must stay so."""
    import torch

    dt = getattr(torch, dtype)
    rows = 5
    x = rng.normal(0, 6, size=(rows, cols))
    x[1, 0] = x[2, -1] = 60.0
    x[3] = -np.inf
    over = {"strategy": strategy} if strategy else {}

    def views():
        bufs = [torch.full((rows * cols + o + 64,), float("nan"), dtype=dt, device="cuda") for o in offsets]
        xv, yv = (b[o:o + rows * cols].view(rows, cols) for b, o in zip(bufs, offsets))
        xv.copy_(torch.tensor(x))
        return bufs, xv, yv

    def untouched(bufs, what):
        for b, o in zip(bufs, offsets):
            outside = torch.cat([b[:o], b[o + rows * cols:]])
            assert bool(torch.isnan(outside).all()), f"{what}: written outside its view (offsets {offsets})"

    # the scores as the kernel sees them: read back, because copy_ from float64 may round through
    # float32 (twice) and land one 16-bit ulp away from a single rounding (seen at 65537 columns, fp16)
    seen = views()[1].double().cpu().numpy()
    for what, run, keep, scale in (
            ("softmax", lambda xv, yv: fast.softmax(xv, out=yv, **over), np.ones((rows, cols), bool), 1.0),
            ("causal scale_mask_softmax", lambda xv, yv: fast.scale_mask_softmax(
                xv, 0.6, causal=True, window=cols // 2 + 1, q_len=rows, out=yv, **over),
             _visible(rows, cols, rows, True, cols // 2 + 1, None), 0.6),
            ("scale_mask_softmax, nothing masked", lambda xv, yv: fast.scale_mask_softmax(xv, 0.6, out=yv, **over),
             np.ones((rows, cols), bool), 0.6)):
        bufs, xv, yv = views()
        run(xv, yv)
        op = "softmax" if what == "softmax" else "scaled_softmax" if "nothing" in what else "scale_mask_softmax"
        where = f"{what}, {cols} columns, {dtype}, {fast.plan(cols, dtype, rows, op=op, aligned=False, **over).describe()}"
        _check(yv.float().cpu().numpy(), _expected(seen, scale, keep), dtype, f"{where}, offsets {offsets}")
        untouched(bufs, where)

    t = _targets(rng, rows, cols)
    t[3] = -100
    bufs, xv, yv = views()
    tt = torch.tensor(t).cuda()
    where = f"cross-entropy, V = {cols}, {dtype}, offsets {offsets}, " \
            f"{fast.plan(cols, dtype, rows, op='cross_entropy', aligned=False, **over).describe()}"
    loss = CE._launch_cuda(xv, tt, -100, "none", 0.1, 0.0, yv, override=over)
    ref_loss, ref_grad = R.cross_entropy_with_grad(seen, t, reduction="none", label_smoothing=0.1)
    _loss_close(loss.cpu().numpy(), ref_loss, where)
    assert _grad_err(yv.double().cpu().numpy(), ref_grad) <= accuracy.tolerance(dtype), f"gradient, {where}"
    untouched(bufs, where)
    only = CE._launch_cuda(xv, tt, -100, "none", 0.1, 0.0, None, override=over)
    _loss_close(only.cpu().numpy(), ref_loss, f"loss alone, {where}")

"""The float64 references against a direct formula, the online state, and the traffic model."""
import math

import numpy as np
import pytest

from a07_softmax import reference as R

from .helpers import whole_range_cross_entropy_rows


def direct_softmax(row):
    """Textbook formula in extended precision, shifted only by a constant so it cannot overflow."""
    row = np.asarray(row, dtype=np.longdouble)
    e = np.exp(row - row.max())
    return np.asarray(e / e.sum(), dtype=np.float64)


@pytest.mark.parametrize("cols", [1, 3, 31, 33, 255, 257, 1023, 1025])
def test_softmax_matches_direct_formula(rng, cols):
    for _ in range(20):
        x = rng.normal(0, rng.uniform(0.1, 20), size=(4, cols))
        got = R.softmax(x)
        for r in range(4):
            np.testing.assert_allclose(got[r], direct_softmax(x[r]), rtol=1e-12, atol=1e-300)
        np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=1e-12)


def test_softmax_is_shift_invariant(rng):
    x = rng.normal(size=(8, 100))
    for c in (-1000.0, -3.0, 7.5, 500.0):
        np.testing.assert_allclose(R.softmax(x + c), R.softmax(x), rtol=1e-12)


def test_extreme_rows_do_not_overflow():
    x = np.array([[1000.0, 999.0, 997.0], [100.0, 0.0, -100.0], [-1e4, -1e4, -1e4], [88.8, 88.7, 0.0]])
    y = R.softmax(x)
    assert np.all(np.isfinite(y))
    np.testing.assert_allclose(y[0], direct_softmax([0.0, -1.0, -3.0]), rtol=1e-12)
    np.testing.assert_allclose(y[2], [1 / 3] * 3, rtol=1e-12)
    # the naive formula really does fail on row 0: that is the point of the reference
    with np.errstate(over="ignore", invalid="ignore"):
        naive = np.exp(x[0]) / np.exp(x[0]).sum()
    assert np.all(np.isnan(naive))


def test_fully_masked_row_gives_zeros_and_ninf_log():
    x = np.array([[-np.inf] * 4, [-np.inf, 2.0, -np.inf, -np.inf]])
    y = R.softmax(x)
    assert np.array_equal(y[0], np.zeros(4))
    assert np.array_equal(y[1], [0, 1, 0, 0])
    ls = R.log_softmax(x)
    assert np.all(np.isneginf(ls[0]))
    assert ls[1, 1] == 0.0 and np.all(np.isneginf(ls[1, [0, 2, 3]]))


def test_log_softmax_matches_log_of_softmax_where_that_is_finite(rng):
    x = rng.normal(0, 5, size=(16, 77))
    np.testing.assert_allclose(R.log_softmax(x), np.log(R.softmax(x)), rtol=1e-12, atol=1e-12)
    # and stays exact where log(softmax) underflows to -inf
    x = np.array([[0.0, -800.0]])
    with np.errstate(divide="ignore"):
        assert np.isneginf(np.log(R.softmax(x))[0, 1])
    assert R.log_softmax(x)[0, 1] == pytest.approx(-800.0)


def test_masks():
    c = R.causal_mask(3, 3)
    assert np.array_equal(np.isneginf(c), [[False, True, True], [False, False, True], [False, False, False]])
    p = R.padding_mask([2, 0], 3)
    assert np.array_equal(np.isneginf(p), [[False, False, True], [True, True, True]])
    w = R.sliding_window_mask(4, 4, 2)
    assert np.array_equal(np.isneginf(w[3]), [True, True, False, False])
    x = np.ones((2, 3))
    y = R.scale_mask_softmax(x, 2.0, p)
    np.testing.assert_allclose(y[0], [0.5, 0.5, 0.0])
    assert np.array_equal(y[1], np.zeros(3))


def test_scale_mask_softmax_matches_masked_direct(rng):
    x = rng.normal(0, 4, size=(33, 33))
    m = R.causal_mask(33, 33)
    y = R.scale_mask_softmax(x, 0.3, m)
    for r in range(33):
        np.testing.assert_allclose(y[r, : r + 1], direct_softmax(0.3 * x[r, : r + 1]), rtol=1e-12)
        assert np.all(y[r, r + 1:] == 0)


def test_cross_entropy(rng):
    x = rng.normal(0, 3, size=(10, 7))
    t = rng.integers(0, 7, size=10)
    np.testing.assert_allclose(R.cross_entropy(x, t), -np.log(R.softmax(x)[np.arange(10), t]), rtol=1e-12)


def test_online_trace_of_the_course_row():
    row = [1.0, 2.0, -3.0, 12.0, 11.0, 4.0]
    tr = R.online_trace(row)
    assert [s.m for s in tr] == [1.0, 2.0, 2.0, 12.0, 12.0, 12.0]
    for k, st in enumerate(tr):
        seen = np.array(row[: k + 1])
        assert st.s == pytest.approx(np.exp(seen - seen.max()).sum(), rel=1e-14)
    np.testing.assert_allclose(R.online_softmax(row), R.softmax(np.array(row)), rtol=1e-14)


def test_worked_merge_example():
    st = R.combine(R.OnlineState(10.0, 1.8), R.OnlineState(12.0, 1.3))
    assert st.m == 12.0
    assert st.s == pytest.approx(1.8 * math.exp(-2) + 1.3)
    assert round(st.s, 3) == 1.544  # not 1.8 + 1.3 = 3.1


def test_combine_is_associative_commutative_with_identity(rng):
    for _ in range(200):
        a, b, c = (R.OnlineState.of_block(rng.normal(0, 30, size=rng.integers(1, 9))) for _ in range(3))
        left, right = R.combine(R.combine(a, b), c), R.combine(a, R.combine(b, c))
        assert left.m == right.m and left.s == pytest.approx(right.s, rel=1e-12)
        ab, ba = R.combine(a, b), R.combine(b, a)
        assert ab.m == ba.m and ab.s == pytest.approx(ba.s, rel=1e-15)
        assert R.combine(a, R.OnlineState()) == a


def test_combine_of_blocks_equals_whole_row(rng):
    x = rng.normal(0, 10, size=1000)
    st = R.OnlineState()
    for blk in np.array_split(x, 13):
        st = R.combine(st, R.OnlineState.of_block(blk))
    whole = R.OnlineState.of_block(x)
    assert st.m == whole.m and st.s == pytest.approx(whole.s, rel=1e-12)


def test_the_guard_is_what_prevents_nan():
    empty = R.OnlineState()
    assert R.combine(empty, empty) == R.OnlineState()
    bad = R.combine_unguarded(empty, empty)
    assert math.isnan(bad.s)  # exp(-inf - -inf) = exp(nan)


def test_traffic_model_invariants():
    """Every lab kernel of the header's tables is in the model, writes its output exactly once and
    reads it at least once; keeping the row on chip saves exactly the re-reads; bytes scale with
    the tensor and the element size."""
    from a07_softmax import constants

    rows = {name: (r, w) for name, r, w in constants.LAB1_KERNELS_TRAFFIC + constants.LAB2_PATHS_TRAFFIC}
    table = {name: (r, w, tr) for name, r, w, tr, _ in R.traffic_table()}
    assert set(table) == set(rows)
    for name, (r, w, tr) in table.items():
        assert (r, w) == rows[name] and tr == r + w and r >= 1 and w >= 1, name
    lab1 = [table[k] for k in constants.LAB1_KERNELS]
    assert all(k[1] == 1 for k in lab1) and table["softmax_online_1pass"][2] == R.traversals("copy")
    assert table["softmax_safe_3pass"][0] == table["softmax_online_2pass"][0] + 1  # the online merge saves a read
    assert R.traffic_bytes("softmax_online_1pass", 3, 5, 2) == R.traversals("softmax_online_1pass") * 3 * 5 * 2
    assert R.traffic_bytes("scale_mask_softmax_unfused", 10, 10) == 10 * R.traffic_bytes("scale_mask_softmax_unfused", 1, 10)


def test_butterfly_simulation_gives_every_lane_the_result(rng):
    from a07_softmax.plots import butterfly

    lanes = [R.OnlineState.of_block(b) for b in np.array_split(rng.normal(0, 5, size=64), 8)]
    steps = butterfly(lanes, R.combine)
    assert [k for k, _ in steps] == [0, 4, 2, 1]
    assert R.OnlineState.of_block([]) == R.OnlineState()  # an empty block is the identity
    final = steps[-1][1]
    ref = lanes[0]
    for st in lanes[1:]:
        ref = R.combine(ref, st)
    assert all(st.m == ref.m and st.s == pytest.approx(ref.s, rel=1e-12) for st in final)
    with pytest.raises(ValueError):
        butterfly(lanes[:6], R.combine)


def _autograd(fn, x, dy=None):
    import torch

    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    out = fn(xt)
    out.backward(torch.tensor(dy, dtype=torch.float64) if dy is not None else None)
    return out.detach().numpy(), xt.grad.numpy()


def test_gradients_match_float64_autograd(rng):
    import torch

    x = rng.normal(0, 6, size=(9, 37))
    x[1, ::3] = -np.inf           # masked entries: their probability and gradient are 0
    x[2, 5] = 80.0                # a score far above the rest
    dy = rng.normal(size=x.shape)
    y, g = _autograd(lambda t: torch.softmax(t, -1), x, dy)
    assert np.allclose(R.softmax_backward(y, dy), g, rtol=1e-12, atol=1e-14)
    z, g = _autograd(lambda t: torch.log_softmax(t, -1), x[[0, 2, 3]], dy[[0, 2, 3]])
    assert np.allclose(R.log_softmax_backward(z, dy[[0, 2, 3]]), g, rtol=1e-12, atol=1e-14)
    targets = rng.integers(0, 37, size=9)
    targets[0], targets[3] = 0, 36  # the ends of the vocabulary
    xf = np.where(np.isinf(x), -30.0, x)
    for reduction in ("mean", "sum"):
        _, g = _autograd(lambda t: torch.nn.functional.cross_entropy(t, torch.tensor(targets), reduction=reduction), xf)
        assert np.allclose(R.cross_entropy_backward(xf, targets, reduction), g, rtol=1e-12, atol=1e-14)


def test_cross_entropy_with_grad_is_pytorchs_autograd_over_the_whole_finite_range(rng):
    """The reference that the fused cross-entropy and exercise 06 are judged by, against
    F.cross_entropy's float64 autograd: logits up to float32's largest value (tests/helpers.py says
    what each row holds), an ignored row, targets at both ends, label smoothing, every reduction. A
    reference that forms lse - x_t or exp(x - lse) fails here (loss 0 where it is log 8, p = 1)."""
    import torch
    import torch.nn.functional as F

    x, t, _ = whole_range_cross_entropy_rows(rng, "float32", 40)
    x = np.concatenate([x, rng.normal(0, 8, size=(3, 40))])
    t = np.concatenate([t, [-100, 0, 39]])
    for smoothing in (0.0, 0.1):
        for reduction in ("none", "mean", "sum"):
            def loss_fn(xt):
                return F.cross_entropy(xt, torch.tensor(t), reduction=reduction, label_smoothing=smoothing)
            want, want_grad = _autograd(loss_fn, x, np.ones(len(t)) if reduction == "none" else None)
            loss, grad = R.cross_entropy_with_grad(x, t, reduction=reduction, label_smoothing=smoothing)
            assert np.allclose(loss, want, rtol=1e-12, atol=1e-12), (smoothing, reduction, loss, want)
            assert np.allclose(grad, want_grad, rtol=1e-10, atol=1e-12), (smoothing, reduction)
    # the per-row loss of notebook 08 is the same function of the logits
    keep = t != -100
    assert np.allclose(R.cross_entropy(x[keep], t[keep]), R.cross_entropy_with_grad(x, t, reduction="none")[0][keep],
                       rtol=1e-12, atol=1e-12)
    # (z-loss, on ordinary rows: tests/test_cross_entropy.py's test against autograd)
    # the mean of an all-ignored batch is NaN, its gradient zeros, as in PyTorch
    loss, grad = R.cross_entropy_with_grad(x[:2], np.array([-100, -100]))
    assert np.isnan(loss) and not grad.any()
    with pytest.raises(ValueError, match="reduction"):
        R.cross_entropy_with_grad(x, t, reduction="batchmean")


def test_gradient_formulas_catch_the_usual_slips(rng):
    """The right formulas differ from the slips a derivation invites, on inputs that show it."""
    x = rng.normal(0, 3, size=(4, 11))
    dy = rng.normal(size=x.shape)
    y = R.softmax(x)
    right = R.softmax_backward(y, dy)
    assert not np.allclose(right, y * (1 - y) * dy)                     # only the diagonal of the Jacobian
    assert not np.allclose(right, y * (dy - dy.sum(-1, keepdims=True)))  # <dy, 1> instead of <dy, y>
    assert np.allclose(right.sum(-1), 0, atol=1e-12)                     # softmax is shift-invariant
    with pytest.raises(ValueError, match="reduction"):
        R.cross_entropy_backward(x, [0, 1, 2, 3], "none")


def test_the_tiled_attention_row_and_its_deliberate_error(rng):
    scores = np.sort(rng.normal(0, 6, size=41))   # rising: the max moves in every tile
    V = rng.normal(size=(41, 3))
    want = R.softmax(scores) @ V
    for tile in (1, 8, 41):
        assert np.allclose(R.attention_row_tiled(scores, V, tile), want, rtol=1e-12, atol=1e-12)
    for mistake in R.ATTENTION_MISTAKES:
        # seen only where a whole tile is masked before any key is visible, or where the max falls
        if mistake in ("no -inf guard", "max of the tile alone"):
            continue
        assert not np.allclose(R.attention_row_tiled(scores, V, 8, mistake=mistake), want, atol=1e-3), mistake
    falling = np.where(np.arange(41) == 3, 700.0, -100.0 + scores)   # the max set in the first tile, 800 above
    assert np.allclose(R.attention_row_tiled(falling, V, 8), R.softmax(falling) @ V, rtol=1e-12, atol=1e-12)
    assert not np.isfinite(R.attention_row_tiled(falling, V, 8, mistake="max of the tile alone")).all()
    assert np.allclose(R.attention_row_tiled(scores, V, 8, mistake="max of the tile alone"), want)  # rising: harmless
    left_padded = np.where(np.arange(41) < 16, -np.inf, scores)       # the first two tiles hide every key
    assert np.allclose(R.attention_row_tiled(left_padded, V, 8), R.softmax(left_padded) @ V, rtol=1e-12, atol=1e-12)
    assert np.isnan(R.attention_row_tiled(left_padded, V, 8, mistake="no -inf guard")).all()
    assert np.allclose(R.attention_row_tiled(scores, V, 8, mistake="no -inf guard"), want)  # harmless otherwise
    masked = np.where(np.arange(41) % 3 == 0, scores, -np.inf)   # masked keys, a first tile with one key
    assert np.allclose(R.attention_row_tiled(masked, V, 8), R.softmax(masked) @ V, rtol=1e-12, atol=1e-12)
    assert not R.attention_row_tiled(np.full(41, -np.inf), V, 8).any()   # no visible key: zeros

"""Float64 references for every kernel in the course, the online (m, s) state, and the traffic model.

Everything here runs in NumPy on the CPU in float64. Kernels are checked against these functions,
never against each other.

The course contract for a fully-masked row (every score is -inf after masking): the output row is
all zeros, and log_softmax of such a row is all -inf. There is no mathematically correct answer for
an empty distribution; zeros is what PyTorch's scaled-dot-product attention and FlashAttention
return, so it is what a learner will meet in practice.
"""
from __future__ import annotations

from dataclasses import dataclass
import math

import numpy as np

from . import accuracy, constants

NEG_INF = -math.inf


def _shifted(x, axis: int):
    """(z, s, empty): z = x - m with the row max m (0 for an all -inf row, so no -inf - -inf),
    s = sum(exp(z)) along axis, and which rows are empty (every entry -inf)."""
    a = np.asarray(x, dtype=np.float64)
    m = np.max(a, axis=axis, keepdims=True)
    empty = np.isneginf(m)
    with np.errstate(invalid="ignore", over="ignore"):  # +inf or NaN inputs give NaN rows, quietly
        z = a - np.where(empty, 0.0, m)
        s = np.sum(np.exp(z), axis=axis, keepdims=True)
    return z, np.where(empty, 1.0, s), empty


def softmax(x, axis: int = -1) -> np.ndarray:
    """Row softmax in float64 with the max subtracted. Fully -inf rows give zeros (the contract)."""
    z, s, empty = _shifted(x, axis)
    with np.errstate(invalid="ignore"):
        return np.where(empty, 0.0, np.exp(z) / s)


def log_softmax(x, axis: int = -1) -> np.ndarray:
    """(x - m) - log(s) in float64. Fully -inf rows give -inf everywhere."""
    z, s, empty = _shifted(x, axis)
    with np.errstate(invalid="ignore"):
        return np.where(empty, NEG_INF, z - np.log(s))


def causal_mask(rows: int, cols: int, offset: int = 0) -> np.ndarray:
    """Additive causal mask: 0 where col <= row + offset, -inf above that diagonal."""
    r = np.arange(rows)[:, None]
    c = np.arange(cols)[None, :]
    return np.where(c <= r + offset, 0.0, NEG_INF)


def padding_mask(valid_lengths, cols: int) -> np.ndarray:
    """Additive padding mask: row i keeps its first valid_lengths[i] columns, -inf for the rest.
    A valid length of 0 masks the whole row."""
    v = np.asarray(valid_lengths)[:, None]
    return np.where(np.arange(cols)[None, :] < v, 0.0, NEG_INF)


def sliding_window_mask(rows: int, cols: int, window: int) -> np.ndarray:
    """Additive causal sliding-window mask: each row sees itself and the window-1 columns before it."""
    r = np.arange(rows)[:, None]
    c = np.arange(cols)[None, :]
    return np.where((c <= r) & (c > r - window), 0.0, NEG_INF)


def scale_mask_softmax(x, scale: float = 1.0, mask=None) -> np.ndarray:
    """softmax(x * scale + mask) with an additive mask (0 or -inf, broadcast against x)."""
    a = np.asarray(x, dtype=np.float64) * float(scale)
    if mask is not None:
        a = a + np.asarray(mask, dtype=np.float64)
    return softmax(a)


def cross_entropy(logits, targets) -> np.ndarray:
    """Per-row cross-entropy -log_softmax(logits)[target] in float64."""
    ls = log_softmax(logits)
    t = np.asarray(targets, dtype=np.int64)
    return -ls[np.arange(ls.shape[0]), t]


def cross_entropy_with_grad(logits, target, *, ignore_index: int = -100, reduction: str = "mean",
                            label_smoothing: float = 0.0, z_loss: float = 0.0):
    """(loss, d loss / d logits) in float64 with F.cross_entropy's conventions, plus a z-loss term
    z_loss * lse^2: what the fused cross-entropy kernels and exercise 06 are judged against. An
    ignored row contributes 0 and gets a zero gradient; the mean of an all-ignored batch is NaN, its
    gradient zeros, as in PyTorch.

    log p is taken as log_softmax forms it, (x - m) - log s, never as x - lse: near the largest
    finite logits lse = m + log s rounds log s away even in float64 (3e38 + 2 is 3e38), so eight
    equal logits at 3e38 would give a loss of 0 where it is log 8, and p = exp(x - lse) would be 1."""
    x = np.asarray(logits, dtype=np.float64)
    t = np.asarray(target, dtype=np.int64)
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"reduction must be 'none', 'mean' or 'sum', got {reduction!r}")
    rows, v = x.shape
    keep = t != ignore_index
    tt = np.where(keep, t, 0)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        m = x.max(axis=1)
        m_ref = np.where(np.isneginf(m), 0.0, m)
        log_s = np.log(np.exp(x - m_ref[:, None]).sum(axis=1))
        lse = m_ref + log_s
        logp = (x - m_ref[:, None]) - log_s[:, None]
        # a weight of 0 drops its term: 0 * -inf (a -inf logit) would be NaN
        target_term = (1 - label_smoothing) * logp[np.arange(rows), tt] if label_smoothing < 1 else 0.0
        smooth_term = label_smoothing * logp.mean(axis=1) if label_smoothing > 0 else 0.0
        loss = -target_term - smooth_term + z_loss * lse ** 2
        p = np.exp(logp)
    onehot = np.zeros_like(x)
    onehot[np.arange(rows), tt] = 1.0
    g = (p - onehot) + 2 * z_loss * lse[:, None] * p + label_smoothing * (onehot - 1.0 / v)
    loss = np.where(keep, loss, 0.0)
    g[~keep] = 0.0
    if reduction == "mean":
        n = keep.sum()
        with np.errstate(invalid="ignore", divide="ignore"):
            return loss.sum() / n, g / max(n, 1)
    if reduction == "sum":
        return loss.sum(), g
    return loss, g


# ---------------------------------------------------------------------------------------------
# Gradients (float64): what a backward kernel must compute, derived in notebook 08
# ---------------------------------------------------------------------------------------------
def softmax_backward(y, dy, axis: int = -1) -> np.ndarray:
    """dL/dx for y = softmax(x) and upstream dL/dy: y * (dy - <dy, y>) along the row. It needs the
    output y, not x: a backward kernel reads y and dy once and writes dx once."""
    y, dy = np.asarray(y, dtype=np.float64), np.asarray(dy, dtype=np.float64)
    return y * (dy - (dy * y).sum(axis=axis, keepdims=True))


def log_softmax_backward(log_y, dy, axis: int = -1) -> np.ndarray:
    """dL/dx for z = log_softmax(x): dy - softmax(x) * sum(dy), with softmax(x) = exp(z)."""
    log_y, dy = np.asarray(log_y, dtype=np.float64), np.asarray(dy, dtype=np.float64)
    with np.errstate(under="ignore"):
        return dy - np.exp(log_y) * dy.sum(axis=axis, keepdims=True)


def cross_entropy_backward(logits, targets, reduction: str = "mean") -> np.ndarray:
    """dL/dlogits of the cross-entropy: softmax(logits) - onehot(target), divided by the number of
    rows for reduction="mean"."""
    g = softmax(logits)
    rows = np.arange(g.shape[0])
    g[rows, np.asarray(targets, dtype=np.int64)] -= 1.0
    if reduction == "mean":
        g /= g.shape[0]
    elif reduction != "sum":
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    return g


# ---------------------------------------------------------------------------------------------
# The online (m, s) state
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OnlineState:
    """Running max m and running sum s = sum(exp(x - m)) over the elements seen so far.
    The empty state (-inf, 0) is the identity of combine()."""

    m: float = NEG_INF
    s: float = 0.0

    @staticmethod
    def of(x: float) -> "OnlineState":
        x = float(x)
        return OnlineState(x, 1.0) if x != NEG_INF else OnlineState()

    @staticmethod
    def of_block(xs) -> "OnlineState":
        xs = np.asarray(xs, dtype=np.float64)
        if xs.size == 0 or np.all(np.isneginf(xs)):
            return OnlineState()
        m = float(np.max(xs))
        return OnlineState(m, float(np.sum(np.exp(xs - m))))


def combine(a: OnlineState, b: OnlineState) -> OnlineState:
    """Merge two partial states. Associative and commutative with identity (-inf, 0).

    The guard is load-bearing: without it, two empty states compute exp(-inf - -inf) = exp(nan)."""
    m = max(a.m, b.m)
    if m == NEG_INF:  # both empty (e.g. a fully-masked row): stay empty, never form -inf - -inf
        return OnlineState()
    return OnlineState(m, a.s * math.exp(a.m - m) + b.s * math.exp(b.m - m))


def combine_unguarded(a: OnlineState, b: OnlineState) -> OnlineState:
    """The same merge without the -inf guard: shows where a fully-masked row's NaN is born."""
    m = max(a.m, b.m)
    with np.errstate(invalid="ignore"):
        fa = float(np.exp(np.float64(a.m) - np.float64(m)))
        fb = float(np.exp(np.float64(b.m) - np.float64(m)))
    return OnlineState(m, a.s * fa + b.s * fb)


def online_trace(row):
    """The state after every element of row, built with one combine() per element."""
    st, trace = OnlineState(), []
    for x in np.asarray(row, dtype=np.float64):
        st = combine(st, OnlineState.of(x))
        trace.append(st)
    return trace


def online_trace_no_rescale(row):
    """The deliberately wrong recurrence: the old sum is never moved onto a new max. For notebook 03's
    demonstration of the error; exercise 04 asks you to write it (and the right one) yourself."""
    m, s, trace = NEG_INF, 0.0, []
    for x in np.asarray(row, dtype=np.float64):
        m = max(m, float(x))
        s = s + (math.exp(x - m) if m != NEG_INF else 0.0)
        trace.append(OnlineState(m, s))
    return trace


ATTENTION_MISTAKES = ("o not rescaled", "l not rescaled", "exp against the old max", "no -inf guard",
                      "neither rescaled", "rescaled by the inverse", "max of the tile alone", "m never updated")


def _exp(x: float) -> float:
    """math.exp, inf past its range (as NumPy's exp), so that a mistake that overflows shows as inf/NaN."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def attention_row_tiled(scores, V, tile: int, *, mistake: str | None = None) -> np.ndarray:
    """sum_j softmax(scores)_j V_j with the keys taken `tile` at a time and the running (m, l, o);
    scores may hold -inf (masked keys), and a row with no visible key gives zeros. `mistake`, one of
    ATTENTION_MISTAKES, makes the classic error on purpose: notebook 03 shows its effect and the
    checker of exercise 07 recognises it in an answer. Writing the loop is notebook 03's inline
    exercise and, with causal tiles, exercise 07."""
    if mistake not in (None, *ATTENTION_MISTAKES):
        raise ValueError(f"mistake must be one of {ATTENTION_MISTAKES}, got {mistake!r}")
    scores, V = np.asarray(scores, dtype=np.float64), np.asarray(V, dtype=np.float64)
    m, l, o = NEG_INF, 0.0, np.zeros(V.shape[1])
    with np.errstate(over="ignore", invalid="ignore"):
        for start in range(0, len(scores), tile):
            x, v = scores[start:start + tile], V[start:start + tile]
            # the running max never falls; "max of the tile alone" lets it, and a tile whose max lies
            # far below an earlier one overflows exp(m - m_new)
            m_new = float(x.max()) if mistake == "max of the tile alone" else max(m, float(x.max()))
            ref = 0.0 if m_new == NEG_INF else m_new          # no visible key yet: never -inf - -inf
            if mistake == "no -inf guard":                      # a tile that hides every key: NaN
                ref = m_new
            if mistake == "neither rescaled":                   # m moved on before the factor was formed
                m = m_new
            old = 0.0 if m == NEG_INF else m
            a = math.exp(ref - old) if mistake == "rescaled by the inverse" and m != NEG_INF else _exp(m - ref)
            e = np.exp(x - (old if mistake == "exp against the old max" else ref))
            l = (l if mistake == "l not rescaled" else l * a) + e.sum()
            o = (o if mistake == "o not rescaled" else o * a) + e @ v
            if mistake != "m never updated":
                m = m_new
        return o / (l if l != 0 else 1.0)


def online_softmax(row) -> np.ndarray:
    """Softmax of one row from its final online state (the second pass of the 2-pass kernel)."""
    row = np.asarray(row, dtype=np.float64)
    st = online_trace(row)[-1] if row.size else OnlineState()
    if st.m == NEG_INF:
        return np.zeros_like(row)
    return np.exp(row - st.m) / st.s


# ---------------------------------------------------------------------------------------------
# The traffic model: how many times each variant traverses the tensor (one traversal = one read
# or one write of every element) and the HBM bytes that follow.
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Traffic:
    name: str
    reads: float  # traversals: 0.5 where a kernel reads half the tensor (a causal mask's span)
    writes: int
    description: str

    @property
    def traversals(self) -> float:
        return self.reads + self.writes

    def bytes(self, rows: int, cols: int, elem_bytes: int = 4) -> int:
        return int(self.traversals * rows * cols * elem_bytes)


_DESCRIPTIONS = {
    "softmax_naive_unsafe": "read to sum, read to normalise, write",
    "softmax_safe_3pass": "read for max, read to sum, read to normalise, write",
    "softmax_online_2pass": "read for (m, s) together, read to normalise, write",
    "softmax_online_1pass": "row cached on chip: one read, one write",
    "scale_mask_softmax_unfused": "scale 1R+1W, mask 1R+1W, online 2-pass softmax 2R+1W (three launches)",
    "scale_mask_softmax_fused": "read once, scale + mask + softmax on chip, write once",
}
# The lab kernels' counts come from the table the kernels themselves are built from
# (common/course_constants.h); the rest are Python-only variants.
TRAFFIC = {
    t.name: t
    for t in (
        *(Traffic(name, r, w, _DESCRIPTIONS[name])
          for name, r, w in constants.LAB1_KERNELS_TRAFFIC + constants.LAB2_PATHS_TRAFFIC),
        Traffic("softmax_fast", 1, 1, "row on chip however long (warp, block, cluster): one read, one write"),
        Traffic("scale_mask_softmax_fast_causal", 0.5, 1,
                "causal rows read up to their diagonal (half the scores on average), write every column"),
        Traffic("cross_entropy_fast", 1, 1, "logits read once, gradient written once (plus a float a row)"),
        Traffic("log_softmax", 1, 1, "fused: read once, write once"),
        Traffic("log_of_softmax", 2, 2, "softmax (1R+1W) then log (1R+1W)"),
        Traffic("scale_mask_softmax_torch", 3, 3, "eager torch: scale 1R+1W, add mask 1R+1W, softmax 1R+1W"),
        Traffic("copy", 1, 1, "the ceiling: read once, write once"),
    )
}


def traversals(name: str) -> int:
    return TRAFFIC[name].traversals


def traffic_bytes(name: str, rows: int, cols: int, elem_bytes: int = 4) -> int:
    return TRAFFIC[name].bytes(rows, cols, elem_bytes)


def traffic_table():
    """Rows of (variant, reads, writes, traversals, ratio to naive) for the Lab 1/2 variants."""
    base = traversals("softmax_naive_unsafe")
    names = [name for name, _, _ in constants.LAB1_KERNELS_TRAFFIC + constants.LAB2_PATHS_TRAFFIC]
    return [(n, TRAFFIC[n].reads, TRAFFIC[n].writes, TRAFFIC[n].traversals,
             TRAFFIC[n].traversals / base) for n in names]


# The course's one error measure lives in accuracy.py; it is handed on here because every
# notebook already has the references imported as R.
max_rel_err = accuracy.max_rel_err

"""Instant checks for the notebooks' inline exercises, in the spirit of srush's Triton-Puzzles: you
write a few lines in the notebook, `check_...(your_function)` runs them on inputs chosen to expose
the usual mistakes, and answers with the first broken case, naming the concept and the input. These
are for practice while reading; the graded exercises (exercises/, `make check EX=NN` or
`a07 check NN`) are judged by the checker in a separate process.

Every check returns True only when every case passes. A function that is still the stub (returns
None, or raises NotImplementedError) reads "not attempted yet", never as passed.
"""
from __future__ import annotations

import math

import numpy as np

from . import reference as R

F32 = np.float32
LOWEST = float(np.finfo(F32).min)   # the lowest finite float32: a score, never a mask
# what a row that sees +inf or NaN gives (docs/contract.md): NaN across it, as torch.softmax
INF_SEEN = ("a +inf score makes the whole row NaN (inf - inf has no value, as torch.softmax): a guard that takes "
            "any infinite max for a masked row (isinf) hides it; only a max of exactly -inf marks a masked row")
NAN_SEEN = "a NaN score makes the whole row NaN: a NaN is never hidden (not skipped, not replaced by -inf)"
# rows whose max stands more than 709 above every other score (exp overflows past 88.7 in float32 and
# past 709.8 in float64): measured against anything but the max of the whole row (its first or last
# element, the max of part of it), some exp overflows, whatever float the answer computes in
FAR_MAX = "subtract the max of the whole row: any other reference (an element, the max of part of the row) lies " \
    "below the max, and exp of the gap overflows"
FAR_MAX_ROWS = (("the max in the middle, 720 above every other score", np.array([-1000, -760, 0, -900, -720], F32)),
                ("the max first, 720 above every other score", np.array([0, -760, -1000, -720, -900], F32)),
                ("the max last, 720 above every other score", np.array([-760, -1000, -720, -900, 0], F32)))


# Eight scores at float32's largest value beside small ones: each of the eight has probability 1/8.
# lse = m + log(s) is m itself there (log 8 is far below the spacing of floats near 3.4e38, 2e31), so
# an answer that goes through lse (x - lse, exp(x - lse): THROUGH_LSE names it) gives log p = 0 and p = 1
TOP_ROW_WHAT = "eight scores at float32's largest value (3.4e38) beside small ones"
TOP_ROW = np.concatenate([np.full(8, np.finfo(F32).max, F32), np.array([0, -5, 7], F32)])
TOP_ROW_LOG = ("lse = m + log(s) rounds log(s) away at 3.4e38 (3e38 + 2 is 3e38), so x - lse gives 0 for each of the "
               "eight where log p is log(1/8): compute (x - m) - log(s)")
TOP_ROW_SOFTMAX = "each of the eight scores at the max gets 1/8: divide exp(x - m) by its sum"


class _Fail(Exception):
    pass


class Verdict:
    """True when every case passed. Shows nothing as a cell's value: the printed line is the verdict."""

    def __init__(self, passed: bool):
        self.passed = passed

    def __bool__(self) -> Verdict:
        return self.passed

    def __repr__(self) -> str:
        return f"Verdict(passed={self.passed})"

    def _ipython_display_(self):
        pass


def _run(name: str, fn, cases) -> Verdict:
    """Run `cases` (callables that raise _Fail with a message); print one verdict line."""
    try:
        for case in cases:
            case(fn)
    except NotImplementedError:
        print(f"[ ] {name}: not attempted yet (the stub raises NotImplementedError)")
        return Verdict(False)
    except _Fail as e:
        msg = str(e)
        if msg.startswith("returned None"):
            print(f"[ ] {name}: not attempted yet (the function returns None)")
        else:
            print(f"[x] {name}: {msg}")
        return Verdict(False)
    except Exception as e:  # the learner's code crashed: say where, without a traceback wall
        print(f"[x] {name}: raised {type(e).__name__}: {e}")
        return Verdict(False)
    print(f"[v] {name}: every case passes ({len(cases)} cases)")
    return Verdict(True)


def _array(got, what: str) -> np.ndarray:
    if got is None:
        raise _Fail("returned None")
    try:
        return np.asarray(got, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise _Fail(f"{what} must be an array of numbers, got {type(got).__name__}") from e


def _compare(got, want, what: str, *, rtol: float, floor: float = 1e-12):
    got = _array(got, what)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        raise _Fail(f"{what}: shape {got.shape}, expected {want.shape}")
    bad_nan = np.isnan(got) & ~np.isnan(want)
    if bad_nan.any():
        i = int(np.flatnonzero(bad_nan.ravel())[0])
        raise _Fail(f"{what}: NaN at position {i} where {want.ravel()[i]:.6g} was expected")
    hidden = np.isnan(want) & ~np.isnan(got)
    if hidden.any():   # nan_to_num below would score a 0 here as right
        i = int(np.flatnonzero(hidden.ravel())[0])
        raise _Fail(f"{what}: position {i} is {got.ravel()[i]:.6g} where NaN was expected (a NaN is never hidden)")
    same_inf = np.isinf(got) & np.isinf(want) & (np.sign(got) == np.sign(want))
    err = np.where(same_inf | (np.isnan(got) & np.isnan(want)), 0.0,
                   np.abs(got - np.nan_to_num(want)) / np.maximum(np.abs(np.nan_to_num(want)), floor))
    err = np.where(np.isinf(got) & ~same_inf, np.inf, err)
    if not (err <= rtol).all():
        i = int(np.argmax(np.where(np.isnan(err), np.inf, err).ravel()))
        worst = float(err.ravel()[i])
        if worst < 5e-2 and np.isfinite(got).all():
            raise _Fail(f"{what}: right to only {worst:.1e} (position {i} is {got.ravel()[i]:.6g}, expected "
                        f"{want.ravel()[i]:.6g}); the check asks for {rtol:g}: compute in float32 or wider, "
                        "not float16")
        raise _Fail(f"{what}: position {i} is {got.ravel()[i]:.6g}, expected {want.ravel()[i]:.6g}")


# ------------------------------------------------------------------------------------------------
# Notebooks 00-02: measuring, overflow, the max trick
# ------------------------------------------------------------------------------------------------
def check_gbps(fn) -> Verdict:
    """fn(nbytes, ms) -> GB/s (10^9 bytes per second) for nbytes moved in ms milliseconds."""
    def case(nbytes, ms, why):
        def run(f):
            got = f(nbytes, ms)
            if got is None:
                raise _Fail("returned None")
            want = nbytes / (ms * 1e-3) / 1e9
            if not math.isclose(float(got), want, rel_tol=1e-9):
                hint = ("milliseconds are 1e-3 s" if math.isclose(float(got), want * 1e-3, rel_tol=1e-6) or
                        math.isclose(float(got), want * 1e3, rel_tol=1e-6) else
                        "a GB here is 10^9 bytes, not 2^30" if math.isclose(float(got), nbytes / (ms * 1e-3) / 2**30,
                                                                            rel_tol=1e-6) else "bytes / seconds / 1e9")
                raise _Fail(f"{why}: {nbytes} bytes in {ms} ms gave {got}, expected {want:.6g} ({hint})")
        return run
    return _run("check_gbps", fn, [case(2 * 2**30, 0.5, "2 GiB in half a millisecond"),
                                   case(10**9, 1000.0, "1e9 bytes in a second"),
                                   case(3 * 2**28 * 4, 0.7517, "three traversals of 2^28 fp32")])


def check_exp_limit(value) -> Verdict:
    """`value`: the largest float32 x whose exp(x) is finite in float32 (to 4 significant digits)."""
    want = float(np.log(np.finfo(np.float32).max))  # 88.72...

    def run(v):
        if v is None:
            raise _Fail("returned None")
        if not math.isclose(float(v), want, rel_tol=2e-4):
            side = "exp of it is already inf" if v > want else "a larger x still has a finite exp"
            raise _Fail(f"{float(v):.6g} is not the limit: {side} (float32's largest value is 3.4e38)")
    return _run("check_exp_limit", value, [run])


def _softmax_cases():
    rng = np.random.default_rng(7)
    return [
        ("the seeds' row [1000, 999, 997]", np.array([1000, 999, 997], F32),
         "exp(1000) overflows float32: subtract the row's max before exponentiating"),
        ("a row of large negative scores [-1000, -999]", np.array([-1000, -999], F32),
         "exp(-1000) underflows to 0 and 0/0 is NaN: subtract the max (it is the largest, not the smallest value)"),
        ("random scores", (rng.normal(size=37) * 3).astype(F32), "the outputs must be exp(x - m) / sum"),
        ("a single element [5]", np.array([5], F32), "one element gets all the probability"),
        ("equal scores", np.full(8, 3.5, F32), "equal scores share the mass equally"),
        ("a wide row [88, 0, -100]", np.array([88, 0, -100], F32),
         "subtracting anything but the max (the mean, the min) still lets exp overflow or underflow"),
        ("a row with -inf (masked) entries", np.array([2, -np.inf, 1, -np.inf], F32),
         "a -inf score gets probability 0"),
        ("a long row (4099 values)", (rng.normal(size=4099) * 10).astype(F32), "the outputs must sum to 1"),
        *((what, x, FAR_MAX) for what, x in FAR_MAX_ROWS),
        (TOP_ROW_WHAT, TOP_ROW, TOP_ROW_SOFTMAX),
    ]


def _sums_to_one(got, what):
    g = _array(got, what)
    total = float(g.sum()) if g.size else 0.0
    if np.isfinite(g).all() and abs(total - 1.0) > 1e-3:
        raise _Fail(f"{what}: the outputs sum to {total:.6g}, not 1 -- probabilities: divide exp(x - m) by its sum")


THROUGH_LSE = ("these are exp(x - lse) with lse = m + log(s) in float32: lse is rounded to the spacing of floats at m "
               "(6e-5 at 1000; at 3.4e38 it is m itself, and every score at the max gets 1), and the error lands on "
               "every output; divide exp(x - m) by its sum instead")


def _through_lse(g, x) -> bool:
    """Whether the outputs g are softmax taken as exp(x - lse), lse rounded to float32, where that is
    not the right answer (so a right answer is never taken for it)."""
    with np.errstate(all="ignore"):
        m = x.max()
        if g.shape != x.shape or not np.isfinite(m):
            return False
        lse = np.float32(m) + np.float32(np.log(np.exp(x.astype(np.float64) - m).sum()))
        cand = np.exp(x.astype(np.float64) - np.float64(lse))
        return bool(np.allclose(g, cand, rtol=1e-6, atol=0) and
                    not np.allclose(cand, R.softmax(x.astype(np.float64)), rtol=2e-5, atol=0))


def _softmax_cases_run(name, fn, cases, masked_rows_zero: bool):
    runs = []
    for what, x, concept in cases:
        def run(f, x=x, what=what, concept=concept):
            with np.errstate(all="ignore"):
                got = f(x.copy())
            empty = masked_rows_zero and np.isneginf(x).all()
            if not empty and np.isfinite(x).any() and not np.any(_array(got, what)):
                raise _Fail(f"{what}: every output is 0, as for a fully masked row -- {concept}")
            if not empty:
                if _through_lse(_array(got, what), x):
                    raise _Fail(f"{what}: {THROUGH_LSE}")
                _sums_to_one(got, what)
            try:
                _compare(got, np.zeros(x.shape) if empty else R.softmax(x.astype(np.float64)), what, rtol=2e-5)
            except _Fail as e:
                raise _Fail(f"{e} -- {concept}") from None
        runs.append(run)
    return _run(name, fn, runs)


def check_softmax(fn) -> Verdict:
    """fn(x: 1-D float32 array) -> its softmax. Judged against float64 at float32 precision."""
    return _softmax_cases_run("check_softmax", fn, _softmax_cases(), False)


def check_masked_row_softmax(fn) -> Verdict:
    """fn(x: 1-D float32 array, possibly all -inf) -> softmax, with zeros for a fully masked row."""
    return _softmax_cases_run("check_masked_row_softmax", fn, _softmax_cases() + [
        ("a fully masked row (all -inf)", np.full(5, -np.inf, F32),
         "a row with no valid score returns zeros, the course's contract: guard the max before x - m"),
        ("a row of the lowest finite float32", np.full(6, LOWEST, F32),
         "finite scores are never a masked row, however low: only a max of exactly -inf means nothing is valid "
         "(a guard on \"very negative\" takes this row for masked)"),
        ("a row holding +inf", np.array([1, np.inf, 2, -np.inf], F32), INF_SEEN),
        ("a row holding NaN", np.array([1, np.nan, 2, -np.inf], F32), NAN_SEEN)], True)


# ------------------------------------------------------------------------------------------------
# Notebook 03: the online recurrence
# ------------------------------------------------------------------------------------------------
def _state(got, what):
    if got is None:
        raise _Fail("returned None")
    try:
        m, s = (float(v) for v in got)
    except (TypeError, ValueError) as e:
        raise _Fail(f"{what}: return the pair (m, s), got {got!r}") from e
    return m, s


def _close_state(got, want, what, concept):
    m, s = got
    wm, ws = want
    ok_m = (m == wm) or (math.isnan(m) and math.isnan(wm))
    ok_s = math.isclose(s, ws, rel_tol=1e-9, abs_tol=1e-300) if not math.isnan(ws) else math.isnan(s)
    if not (ok_m and ok_s):
        raise _Fail(f"{what}: got (m, s) = ({m:.6g}, {s:.6g}), expected ({wm:.6g}, {ws:.6g}) -- {concept}")


def check_online_step(fn) -> Verdict:
    """fn(m, s, x) -> (m', s'): fold one score x into the running state (m, s)."""
    ninf = -math.inf
    cases = [
        ((ninf, 0.0, 3.0), (3.0, 1.0), "the first element", "from the empty state (-inf, 0), x gives (x, 1)"),
        ((2.0, 1.5, 1.0), (2.0, 1.5 + math.exp(-1.0)), "a smaller x", "below the max, x adds exp(x - m)"),
        ((2.0, 1.37, 12.0), (12.0, 1.37 * math.exp(-10.0) + 1.0), "a new max (2 -> 12)",
         "when the max grows from m to m', the old sum must be multiplied by exp(m - m') <= 1"),
        ((5.0, 2.0, 5.0), (5.0, 3.0), "x equal to the max", "exp(0) = 1 is added"),
        ((2.0, 1.5, ninf), (2.0, 1.5), "a masked x = -inf", "a -inf score adds exp(-inf) = 0"),
        ((ninf, 0.0, ninf), (ninf, 0.0), "a masked x into the empty state",
         "(-inf, 0) must stay (-inf, 0): never form -inf - (-inf) = NaN"),
        ((1000.0, 1.0, 999.0), (1000.0, 1.0 + math.exp(-1.0)), "scores near 1000",
         "only differences to the max are exponentiated"),
        ((ninf, 0.0, LOWEST), (LOWEST, 1.0), "the lowest finite float32 into the empty state",
         "a finite score is a score, however low: the state becomes (x, 1); only m = -inf means nothing seen "
         "(a guard on \"very negative\", or a stand-in such as -1e30 for -inf, loses it)"),
        ((LOWEST, 2.0, -3.0e38), (-3.0e38, 1.0), "a new max near the lowest finite float32",
         "the old sum is rescaled by exp(m - m') like any other; a guard on \"very negative\" drops it"),
    ]

    def mk(args, want, what, concept):
        def run(f):
            with np.errstate(all="ignore"):
                _close_state(_state(f(*args), what), want, f"{what}, (m, s, x) = {args}", concept)
        return run
    return _run("check_online_step", fn, [mk(*c) for c in cases])


def check_combine(fn) -> Verdict:
    """fn((m_a, s_a), (m_b, s_b)) -> (m, s): merge two partial states, in either order."""
    ninf = -math.inf
    rng = np.random.default_rng(11)
    cases = [
        (((10.0, 1.8), (12.0, 1.3)), (12.0, 1.8 * math.exp(-2) + 1.3), "m_a < m_b (the seeds' blocks)",
         "the smaller max's sum is rescaled by exp(m_small - m) before adding"),
        (((12.0, 1.3), (10.0, 1.8)), (12.0, 1.8 * math.exp(-2) + 1.3), "m_b < m_a, the other order",
         "combine is commutative: the rescale goes to whichever side has the smaller max"),
        (((4.0, 2.0), (4.0, 3.0)), (4.0, 5.0), "equal maxima", "with equal maxima the sums simply add"),
        (((ninf, 0.0), (3.0, 2.0)), (3.0, 2.0), "the identity on the left", "(-inf, 0) is the identity"),
        (((3.0, 2.0), (ninf, 0.0)), (3.0, 2.0), "the identity on the right", "(-inf, 0) is the identity"),
        (((ninf, 0.0), (ninf, 0.0)), (ninf, 0.0), "two empty states (a fully masked row)",
         "exp(-inf - (-inf)) is NaN: test m == -inf before forming the rescale factor"),
        (((700.0, 1.0), (-700.0, 1.0)), (700.0, 1.0), "maxima 1400 apart",
         "rescale only the smaller side, by exp(min - max) <= 1: exp(max - min) would overflow"),
        (((LOWEST, 2.0), (ninf, 0.0)), (LOWEST, 2.0), "a block of the lowest finite float32 and an empty one",
         "a finite max is a block that holds scores, however low: only m = -inf is the empty state "
         "(a guard on \"very negative\" takes this block for empty)"),
    ]

    def mk(args, want, what, concept):
        def run(f):
            with np.errstate(all="ignore"):
                _close_state(_state(f(*args), what), want, what, concept)
        return run

    def associative(f):
        for _ in range(20):
            xs = [rng.normal(0, 20, size=int(rng.integers(1, 9))) for _ in range(3)]
            a, b, c = ((float(x.max()), float(np.exp(x - x.max()).sum())) for x in xs)
            left = _state(f(_state(f(a, b), "combine(a, b)"), c), "combine(combine(a, b), c)")
            right = _state(f(a, _state(f(b, c), "combine(b, c)")), "combine(a, combine(b, c))")
            whole = np.concatenate(xs)
            want = (float(whole.max()), float(np.exp(whole - whole.max()).sum()))
            for got, order in ((left, "(a . b) . c"), (right, "a . (b . c)")):
                _close_state(got, want, f"three random blocks merged as {order}",
                             "merging in any grouping must give the state of the whole row (associativity)")
    return _run("check_combine", fn, [mk(*c) for c in cases] + [associative])


def check_attention_row(fn) -> Verdict:
    """fn(scores: (n,), V: (n, d), tile: int) -> sum_j softmax(scores)_j V_j, one tile of keys at a
    time with the running (m, s, o): the weighted numerator o must be rescaled with s."""
    rng = np.random.default_rng(3)
    cases = []
    for n, tile, what, concept in (
            (12, 4, "scores rising from tile to tile", "when the max grows, rescale o by exp(m - m') like s"),
            (40, 8, "random scores, five tiles", "o accumulates exp(x - m) V for each tile"),
            (13, 5, "a last tile shorter than the others", "the tail tile counts its keys only"),
            (6, 6, "one tile", "a single tile is a plain softmax @ V"),
            # any reference point is exact in arithmetic: only exp's range tells these three apart
            (12, 4, "scores near 1000",
             "exp(1000) overflows: every exponential is taken against the running max, exp(x - m)"),
            (12, 4, "scores near 0, then 400 in the second tile and 800 in the third",
             "the max is raised on every tile, m' = max(m, max of the tile): a max left at an earlier "
             "tile's lets exp(x - m) overflow"),
            (12, 4, "a first tile at 800, every later score near -100",
             "the running max never falls, m' = max(m, max of the tile): the tile's own max makes "
             "exp(m - m') overflow"),
            (10, 4, "every score the lowest finite float32",
             "finite scores are scores, however low: the row averages V; only a max of exactly -inf means no "
             "key is visible (a guard on \"very negative\" skips these tiles)")):
        scores = rng.normal(0, 4, size=n)
        if what.startswith("scores rising"):
            scores = np.sort(scores) * 3
        if what == "scores near 1000":
            scores = 1000 + scores
        if what.startswith("scores near 0, then"):
            scores[5], scores[9] = 400.0, 800.0
        if what.startswith("a first tile at 800"):
            scores = -100 + scores
            scores[1] = 800.0
        if what.startswith("every score the lowest"):
            scores = np.full(n, LOWEST)
        V = rng.normal(size=(n, 3))

        def run(f, scores=scores, V=V, tile=tile, what=what, concept=concept):
            got = f(scores.copy(), V.copy(), tile)
            try:
                _compare(got, R.softmax(scores) @ V, what, rtol=1e-9, floor=1e-9)
            except _Fail as e:
                raise _Fail(f"{e} -- {concept}") from None
        cases.append(run)
    return _run("check_attention_row", fn, cases)


# ------------------------------------------------------------------------------------------------
# Notebooks 04-09: traffic, masks, tiles, log-probabilities, thread ownership
# ------------------------------------------------------------------------------------------------
def check_traversals(fn) -> Verdict:
    """fn(kernel_name) -> how many times the kernel moves the whole tensor through HBM (reads +
    writes), by the traffic model, for the four Lab 1 kernels and Lab 2's two paths."""
    names = list(R.TRAFFIC)[:6]
    cases = []
    for name in names:
        t = R.TRAFFIC[name]

        def run(f, name=name, t=t):
            got = f(name)
            if got is None:
                raise _Fail("returned None")
            if got != t.traversals:
                raise _Fail(f"{name}: {got}, the model says {t.reads} read(s) + {t.writes} write(s) = "
                            f"{t.traversals} -- count every full pass over the tensor, the write included")
        cases.append(run)
    return _run("check_traversals", fn, cases)


def check_causal_keep(fn) -> Verdict:
    """fn(q, cols) -> boolean array of the keys query q may see under a causal mask (key <= q)."""
    cases = []
    for q, cols in ((0, 5), (3, 5), (4, 5), (7, 5), (2, 1)):
        def run(f, q=q, cols=cols):
            got = f(q, cols)
            if got is None:
                raise _Fail("returned None")
            got = np.asarray(got, dtype=bool)
            want = np.arange(cols) <= q
            if got.shape != want.shape or (got != want).any():
                raise _Fail(f"query {q}, {cols} keys: {got.astype(int).tolist()}, expected "
                            f"{want.astype(int).tolist()} -- a query sees itself and the keys before it (key <= q)")
        cases.append(run)
    return _run("check_causal_keep", fn, cases)


def check_tile_softmax(fn) -> Verdict:
    """fn(tile: (rows, cols) float32 with -inf where masked) -> row-wise softmax, zeros for a row
    that is entirely -inf: the math inside a Triton program's tile."""
    rng = np.random.default_rng(5)
    t = (rng.normal(size=(8, 16)) * 6).astype(F32)
    t[1, 5:] = -np.inf
    t[2] = -np.inf
    t[3, 0] = 1000.0
    t[4] = LOWEST              # finite, however low: row 4 is not masked (uniform)
    t[5, 3] = np.inf           # rows 5 and 6 come out NaN (docs/contract.md)
    t[6, 9:] = -np.inf
    t[6, 2] = np.nan
    t[7] -= 800.0              # row 7: its max, in the last column, 720 above every other score
    t[7, -1] = 0.0

    def run(f):
        with np.errstate(all="ignore"):
            got = f(t.copy())
        want = np.zeros(t.shape)
        keep = ~np.isneginf(t).all(axis=1)
        want[keep] = R.softmax(t[keep].astype(np.float64), axis=1)
        g = _array(got, "the tile")
        if g.shape != t.shape:
            raise _Fail(f"the tile: shape {g.shape}, expected {t.shape} -- reduce along axis 1 (each row)")
        for r, concept in ((2, "a fully masked row gives zeros: replace a -inf max by 0 before x - m"),
                           (3, "subtract each row's own max"), (1, "masked entries get 0"),
                           (0, "row-wise softmax"),
                           (4, "a row of the lowest finite float32 is uniform: its scores are finite, however low, "
                               "and only a max of exactly -inf marks a masked row"),
                           (7, FAR_MAX + " (row 7's max is in its last column)"), (5, INF_SEEN), (6, NAN_SEEN)):
            try:
                _compare(g[r], want[r], f"row {r}", rtol=2e-5)
            except _Fail as e:
                raise _Fail(f"{e} -- {concept}") from None
    return _run("check_tile_softmax", fn, [run])


def check_log_softmax(fn) -> Verdict:
    """fn(x: 1-D float32) -> log-probabilities, -inf everywhere for a fully masked row."""
    cases = []
    for what, x, concept in (
            ("the seeds' row [1000, 999, 997]", np.array([1000, 999, 997], F32), "subtract the max first"),
            ("a gap of 200", np.array([0, -200, 5], F32),
             "log(softmax(x)) underflows: exp(-205) is 0 in float32 and log(0) = -inf; compute (x - m) - log(s)"),
            ("random scores", np.random.default_rng(2).normal(size=33).astype(F32) * 4, "(x - m) - log(sum exp(x - m))"),
            *((what, x, FAR_MAX) for what, x in FAR_MAX_ROWS),
            (TOP_ROW_WHAT, TOP_ROW, TOP_ROW_LOG),
            ("a fully masked row", np.full(4, -np.inf, F32), "an empty row gives -inf everywhere, never NaN"),
            ("a row of the lowest finite float32", np.full(4, LOWEST, F32),
             "finite scores are never a masked row, however low: this one is uniform, log(1/4) everywhere; only a "
             "max of exactly -inf means nothing is valid"),
            ("a row holding +inf", np.array([0, np.inf, -3, -np.inf], F32), INF_SEEN),
            ("a row holding NaN", np.array([0, np.nan, -3, -np.inf], F32), NAN_SEEN)):
        def run(f, x=x, what=what, concept=concept):
            with np.errstate(all="ignore"):
                got = f(x.copy())
            want = np.full(x.shape, -np.inf) if np.isneginf(x).all() else R.log_softmax(x.astype(np.float64))
            try:
                _compare(got, want, what, rtol=2e-5, floor=1.0)
            except _Fail as e:
                raise _Fail(f"{e} -- {concept}") from None
        cases.append(run)
    return _run("check_log_softmax", fn, cases)


def check_owned_column(fn) -> Verdict:
    """fn(t, j, G, N) -> the first column of vector j of thread t, when G threads share a row and a
    vector holds N elements, laid out so that neighbouring threads read neighbouring 16-byte chunks."""
    cases = []
    for t, j, G, N in ((0, 0, 32, 4), (1, 0, 32, 4), (0, 1, 32, 4), (5, 3, 16, 8), (31, 7, 32, 4)):
        def run(f, args=(t, j, G, N)):
            got = f(*args)
            if got is None:
                raise _Fail("returned None")
            t, j, G, N = args
            want = (j * G + t) * N
            if got != want:
                hint = ("thread t's vectors are then contiguous, and a warp's loads stride over memory: "
                        "neighbouring threads must take neighbouring vectors" if got == (t * 8 + j) * N or
                        got == (t * (j + 1)) * N else "vector j of all G threads comes before vector j + 1")
                raise _Fail(f"(t, j, G, N) = {args}: {got}, expected {want} -- {hint}")
        cases.append(run)
    return _run("check_owned_column", fn, cases)


def check_model_time(fn) -> Verdict:
    """fn(traversals, nbytes, copy_gbps) -> the traffic model's time in ms: `traversals` passes over a
    tensor of `nbytes` bytes at the copy rate (GB/s counting bytes read + written). A lower bound."""
    cases = []
    for t, nbytes, gbps in ((2, 2**30, 4200.0), (4, 2**30, 4200.0), (7, 2**28, 3000.0)):
        def run(f, args=(t, nbytes, gbps)):
            got = f(*args)
            if got is None:
                raise _Fail("returned None")
            t, nbytes, gbps = args
            want = t * nbytes / (gbps * 1e9) * 1e3
            if not math.isclose(float(got), want, rel_tol=1e-9):
                hint = ("each traversal moves the whole tensor once: multiply by the traversals"
                        if math.isclose(float(got), want / t, rel_tol=1e-6) else
                        "the answer is in milliseconds" if math.isclose(float(got), want / 1e3, rel_tol=1e-6) else
                        "time = traversals x bytes / (GB/s x 1e9), in seconds, x 1e3 for ms")
                raise _Fail(f"{t} traversals of {nbytes} bytes at {gbps} GB/s: {got}, expected {want:.6g} ms -- {hint}")
        cases.append(run)
    return _run("check_model_time", fn, cases)


def check_softmax_backward(fn) -> Verdict:
    """fn(y, dy) -> dx for y = softmax(x) along the last axis (2-D arrays), given the upstream dy."""
    rng = np.random.default_rng(9)
    x = rng.normal(0, 3, size=(5, 13))
    x[1, ::2] = -np.inf
    x[2, 4] = 60.0
    x[4] = -np.inf      # a fully masked row: y = 0 there (the course's contract), and so is dx
    y = R.softmax(x)
    dy = rng.normal(size=x.shape)
    want = R.softmax_backward(y, dy)

    def run(f):
        got = f(y.copy(), dy.copy())
        g = _array(got, "dx")
        if g.shape != want.shape:
            raise _Fail(f"dx: shape {g.shape}, expected {want.shape} -- one gradient per input element")
        if np.allclose(g, y * (1 - y) * dy):
            raise _Fail("dx is y (1 - y) dy: that is only the diagonal of the Jacobian; every output depends on "
                        "every input, so subtract <dy, y> (the row's dot product) from dy")
        if np.allclose(g, y * (dy - dy.sum(axis=-1, keepdims=True))):
            raise _Fail("dx uses the plain sum of dy; the term is the dot product <dy, y>")
        if np.allclose(g, y * (dy - (dy * y).sum())):
            raise _Fail("dx sums <dy, y> over the whole array; it is one dot product per row (axis=-1, keepdims)")
        if np.allclose(g, dy - (dy * y).sum(axis=-1, keepdims=True)):
            raise _Fail("dx is missing the factor y: dx = y * (dy - <dy, y>)")
        for r, concept in ((0, "dx = y * (dy - <dy, y>)"), (1, "masked entries (y = 0) get no gradient"),
                           (2, "a row dominated by one score"),
                           (4, "a fully masked row (y = 0 everywhere) gets no gradient: <dy, y> is 0 there, and "
                               "y sums to 1 only where a score is visible, so never divide by its sum")):
            try:
                _compare(g[r], want[r], f"row {r}", rtol=1e-9, floor=1e-12)
            except _Fail as e:
                raise _Fail(f"{e} -- {concept}") from None
    return _run("check_softmax_backward", fn, [run])


def causal_key_end_mistake(got: int, q_start: int, q_end: int, n_keys: int) -> str | None:
    """None when `got` is the end of the keys a causal block [q_start, q_end) must visit, else what
    is wrong with it (shared with exercise 07's checker)."""
    want = min(n_keys, q_end)
    if got == want:
        return None
    if got == min(n_keys, q_start):
        hint = "that skips the block's diagonal tile, whose keys its own rows see (query i sees key i)"
    elif got == min(n_keys, q_end - 1):
        hint = "off by one: query q_end - 1 sees key q_end - 1, and the end is exclusive"
    elif got == n_keys:
        hint = ("keys from q_end on are masked for every row of the block: skipping them is the causal saving, "
                "about half the work")
    else:
        hint = "the keys a causal block needs end at min(n_keys, q_end)"
    return f"{got}, expected {want} -- {hint}"


def check_causal_key_end(fn) -> Verdict:
    """fn(q_start, q_end, n_keys) -> the end (exclusive) of the keys a block of causal query rows
    [q_start, q_end) must visit when n_keys keys are valid."""
    cases = []
    for args in ((0, 16, 100), (32, 48, 100), (32, 48, 40), (0, 16, 0), (16, 32, 17)):
        def run(f, args=args):
            got = f(*args)
            if got is None:
                raise _Fail("returned None")
            wrong = causal_key_end_mistake(int(got), *args)
            if wrong:
                raise _Fail(f"(q_start, q_end, n_keys) = {args}: {wrong}")
        cases.append(run)
    return _run("check_causal_key_end", fn, cases)

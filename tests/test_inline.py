"""The notebooks' inline checks (a07_softmax.inline): each passes a right answer and fails every
wrong one a reader is likely to write, with a message that names the concept; a stub never passes."""
import math

import numpy as np
import pytest

from a07_softmax import inline


def _verdict(capsys, check, fn):
    ok = check(fn)
    return ok, capsys.readouterr().out


def naive(x):
    e = np.exp(x)
    return e / e.sum()


def safe(x):
    e = np.exp(x - x.max())
    return e / e.sum()


def guarded(x):
    m = x.max()
    if m == -np.inf:
        return np.zeros_like(x)
    e = np.exp(x - m)
    return e / e.sum()


def step(m, s, x):
    m2 = max(m, x)
    if m2 == -math.inf:
        return m2, s
    return m2, s * math.exp(m - m2) + math.exp(x - m2)


def combine(a, b):
    m = max(a[0], b[0])
    if m == -math.inf:
        return m, 0.0
    return m, a[1] * math.exp(a[0] - m) + b[1] * math.exp(b[0] - m)


def attention(scores, V, tile, rescale_o=True, new_max=lambda m, tile_max: max(m, tile_max)):
    m, s, o = -np.inf, 0.0, np.zeros(V.shape[1])
    for i in range(0, len(scores), tile):
        x, v = scores[i:i + tile], V[i:i + tile]
        m2 = new_max(m, x.max())
        e = np.exp(x - m2)
        s, o, m = s * np.exp(m - m2) + e.sum(), (o * np.exp(m - m2) if rescale_o else o) + e @ v, m2
    return o / s


def tile_softmax(t):
    m = t.max(axis=1, keepdims=True)
    m = np.where(np.isneginf(m), 0, m)
    e = np.exp(t - m)
    s = e.sum(axis=1, keepdims=True)
    return np.where(s == 0, 0, e / np.where(s == 0, 1, s))


def shifted(x, ref):
    """softmax measured against `ref` instead of the row's max (right for any finite ref in exact
    arithmetic)."""
    e = np.exp(x - ref)
    return e / e.sum()


def tile_softmax_against(t, ref):
    e = np.exp(t - ref)
    s = e.sum(axis=1, keepdims=True)
    return np.where(s == 0, 0, e / np.where(s == 0, 1, s))


def log_softmax_against(x, ref):
    if np.isneginf(x).all():
        return np.full_like(x, -np.inf)
    return (x - ref) - np.log(np.exp(x - ref).sum())


def log_softmax(x):
    m = x.max()
    if m == -np.inf:
        return np.full_like(x, -np.inf)
    z = x - m
    return z - np.log(np.exp(z).sum())


RIGHT = [(inline.check_gbps, lambda b, ms: b / (ms * 1e-3) / 1e9),
         (inline.check_softmax, safe), (inline.check_masked_row_softmax, guarded),
         (inline.check_online_step, step), (inline.check_combine, combine),
         (inline.check_attention_row, attention), (inline.check_traversals, lambda k: inline.R.traversals(k)),
         (inline.check_causal_keep, lambda q, c: np.arange(c) <= q), (inline.check_tile_softmax, tile_softmax),
         (inline.check_log_softmax, log_softmax), (inline.check_owned_column, lambda t, j, G, N: (j * G + t) * N),
         (inline.check_model_time, lambda t, b, g: t * b / (g * 1e9) * 1e3),
         (inline.check_softmax_backward, lambda y, dy: y * (dy - (dy * y).sum(-1, keepdims=True))),
         (inline.check_causal_key_end, lambda q0, q1, n: min(n, q1))]


@pytest.mark.parametrize("check,fn", RIGHT, ids=[c.__name__ for c, _ in RIGHT])
def test_a_right_answer_passes(capsys, check, fn):
    ok, out = _verdict(capsys, check, fn)
    assert ok and out.startswith("[v]"), out


WRONG = [
    (inline.check_gbps, lambda b, ms: b / ms / 1e9, "milliseconds"),
    (inline.check_gbps, lambda b, ms: b / (ms * 1e-3) / 2**30, "10^9"),
    (inline.check_softmax, naive, "exp(1000) overflows"),
    (inline.check_softmax, lambda x: np.exp(x - x.min()) / np.exp(x - x.min()).sum(), "overflow"),
    (inline.check_softmax, lambda x: np.exp(x - x.mean()) / np.exp(x - x.mean()).sum(), "max"),
    (inline.check_softmax, lambda x: np.exp(x - x.max()), "divide exp(x - m) by its sum"),
    (inline.check_softmax, lambda x: safe(x.astype(np.float16)), "not float16"),
    # a reference other than the max of the whole row: right while the row's scores lie close together,
    # in float32 or float64 alike
    (inline.check_softmax, lambda x: shifted(x, x[0]), "subtract the max of the whole row"),
    (inline.check_softmax, lambda x: shifted(x.astype(np.float64), x[0]), "subtract the max of the whole row"),
    (inline.check_softmax, lambda x: shifted(x, x[1:].max() if x.size > 1 else x[0]), "the max of part of the row"),
    (inline.check_softmax, lambda x: shifted(x, x[:max(1, x.size // 2)].max()), "the max of part of the row"),
    (inline.check_masked_row_softmax, lambda x: np.zeros_like(x) if np.isneginf(x).all()
     else shifted(x, x[:max(1, x.size // 2)].max()), "subtract the max of the whole row"),
    (inline.check_tile_softmax, lambda t: tile_softmax_against(t, np.where(np.isneginf(t[:, :8].max(axis=1, keepdims=True)),
                                                                     0, t[:, :8].max(axis=1, keepdims=True))),
     "row 7's max is in its last column"),
    (inline.check_tile_softmax, lambda t: tile_softmax_against(t, np.where(np.isneginf(t[:, :1]), 0, t[:, :1])), "row 7"),
    (inline.check_log_softmax, lambda x: log_softmax_against(x, x[:max(1, x.size // 2)].max()),
     "subtract the max of the whole row"),
    (inline.check_log_softmax, lambda x: log_softmax_against(x.astype(np.float64), x[-1]),
     "subtract the max of the whole row"),
    (inline.check_masked_row_softmax, safe, "fully masked"),
    (inline.check_masked_row_softmax, lambda x: np.zeros_like(x) if x.max() < -1e30 else safe(x), "however low"),
    (inline.check_online_step, lambda m, s, x: (max(m, x), s + math.exp(x - max(m, x))), "exp(m - m')"),
    (inline.check_online_step, lambda m, s, x: (max(m, x), s * math.exp(max(m, x) - m) + math.exp(x - max(m, x))
                                                if m > -math.inf else 1.0), "exp(m - m')"),
    (inline.check_online_step, lambda m, s, x: (max(m, x), s * math.exp(m - max(m, x)) + math.exp(x - max(m, x))),
     "NaN"),
    (inline.check_combine, lambda a, b: (max(a[0], b[0]), a[1] + b[1]), "rescaled"),
    (inline.check_combine, lambda a, b: (max(a[0], b[0]), a[1] * math.exp(a[0] - max(a[0], b[0])) +
                                          b[1] * math.exp(b[0] - max(a[0], b[0]))), "-inf"),
    (inline.check_combine, lambda a, b: (b[0], a[1] * math.exp(a[0] - b[0]) + b[1]) if a[0] > -math.inf else b,
     "commutative"),
    (inline.check_combine, lambda a, b: (max(a[0], b[0]), (a[1] + b[1] * math.exp(b[0] - a[0])) if a[0] >= b[0]
                                          else (a[1] + b[1]) * math.exp(a[0] - b[0])), "rescale"),
    # a guard on "very negative" (or a finite stand-in for -inf) takes the lowest finite scores for nothing
    (inline.check_online_step, lambda m, s, x: (max(m, x), 0.0) if max(m, x) < -1e30 else step(m, s, x), "however low"),
    (inline.check_online_step, lambda m, s, x: step(max(m, -1e30), s, x) if x > -math.inf else (m, s), "-1e30"),
    (inline.check_combine, lambda a, b: (max(a[0], b[0]), 0.0) if max(a[0], b[0]) < -1e30 else combine(a, b),
     "however low"),
    (inline.check_attention_row, lambda s, V, t: np.zeros(V.shape[1]) if s.max() < -1e30 else attention(s, V, t),
     "however low"),
    (inline.check_attention_row, lambda s, V, t: attention(s, V, t, rescale_o=False), "rescale o"),
    # exact in arithmetic for any reference point: only exp's range shows these
    (inline.check_attention_row, lambda s, V, t: attention(s, V, t, new_max=lambda m, tm: tm if m == -np.inf else m),
     "raised on every tile"),
    (inline.check_attention_row, lambda s, V, t: attention(s, V, t, new_max=lambda m, tm: tm), "never falls"),
    (inline.check_attention_row, lambda s, V, t: attention(s, V, t, new_max=lambda m, tm: 0.0), "exp(1000) overflows"),
    (inline.check_attention_row, lambda s, V, t: attention(s[:len(s) // t * t], V[:len(s) // t * t], t), "tail"),
    (inline.check_traversals, lambda k: inline.R.TRAFFIC[k].reads, "write"),
    (inline.check_causal_keep, lambda q, c: np.arange(c) < q, "sees itself"),
    (inline.check_tile_softmax, lambda t: np.exp(t - t.max(axis=1, keepdims=True)) /
     np.exp(t - t.max(axis=1, keepdims=True)).sum(axis=1, keepdims=True), "fully masked"),
    (inline.check_tile_softmax, lambda t: np.exp(t - t.max()) / np.exp(t - t.max()).sum(axis=1, keepdims=True),
     "row"),
    (inline.check_log_softmax, lambda x: np.log(safe(x)), "underflow"),
    (inline.check_log_softmax, lambda x: np.full_like(x, -np.inf) if x.max() < -1e30 else log_softmax(x),
     "however low"),
    (inline.check_tile_softmax, lambda t: tile_softmax(np.where(t.max(axis=1, keepdims=True) < -1e30, -np.inf, t)),
     "only a max of exactly -inf"),
    (inline.check_log_softmax, lambda x: x - np.log(np.exp(x).sum()), "max"),
    # through lse = m + log(s): exact in arithmetic, but lse is m itself near float32's largest value
    (inline.check_log_softmax, lambda x: np.full_like(x, -np.inf) if np.isneginf(x).all() else
     x - (x.max() + np.log(np.exp(x - x.max()).sum())), "x - lse gives 0"),
    (inline.check_softmax, lambda x: np.exp(x.astype(np.float64) - (x.max() + np.log(np.exp(x - x.max()).sum()))),
     "exp(x - lse) with lse = m + log(s) in float32"),
    # +inf and NaN make the row NaN (docs/contract.md): an isinf guard, or NaN skipped, hides them
    (inline.check_masked_row_softmax, lambda x: np.zeros_like(x) if np.isinf(x.max()) else safe(x), "isinf"),
    (inline.check_masked_row_softmax, lambda x: guarded(np.where(np.isnan(x), -np.inf, x)), "never hidden"),
    (inline.check_tile_softmax, lambda t: tile_softmax(np.where(np.isinf(t.max(axis=1, keepdims=True)), -np.inf, t)),
     "isinf"),
    (inline.check_tile_softmax, lambda t: tile_softmax(np.where(np.isnan(t), -np.inf, t)), "never hidden"),
    (inline.check_log_softmax, lambda x: np.full_like(x, -np.inf) if np.isinf(x.max()) else log_softmax(x), "isinf"),
    (inline.check_log_softmax, lambda x: log_softmax(np.where(np.isnan(x), -np.inf, x)), "never hidden"),
    (inline.check_owned_column, lambda t, j, G, N: (t * 8 + j) * N, "neighbouring threads"),
    (inline.check_model_time, lambda t, b, g: b / (g * 1e9) * 1e3, "multiply by the traversals"),
    (inline.check_model_time, lambda t, b, g: t * b / (g * 1e9), "milliseconds"),
    (inline.check_softmax_backward, lambda y, dy: y * (1 - y) * dy, "diagonal of the Jacobian"),
    (inline.check_softmax_backward, lambda y, dy: y * (dy - dy.sum(-1, keepdims=True)), "<dy, y>"),
    (inline.check_softmax_backward, lambda y, dy: dy - (dy * y).sum(-1, keepdims=True), "factor y"),
    (inline.check_softmax_backward, lambda y, dy: y * (dy - (dy * y).sum()), "one dot product per row"),
    (inline.check_softmax_backward, lambda y, dy: y * (dy - (dy * y).sum(-1, keepdims=True) / y.sum(-1, keepdims=True)),
     "fully masked row"),
    (inline.check_causal_key_end, lambda q0, q1, n: min(n, q0), "diagonal tile"),
    (inline.check_causal_key_end, lambda q0, q1, n: min(n, q1 - 1), "exclusive"),
    (inline.check_causal_key_end, lambda q0, q1, n: n, "causal saving"),
]


@pytest.mark.parametrize("check,fn,words", WRONG, ids=[f"{c.__name__}-{i}" for i, (c, _, _) in enumerate(WRONG)])
def test_a_wrong_answer_fails_naming_the_concept(capsys, check, fn, words):
    ok, out = _verdict(capsys, check, fn)
    assert not ok and out.startswith("[x]"), out
    assert words in out, out


@pytest.mark.parametrize("check", [c for c, _ in RIGHT], ids=[c.__name__ for c, _ in RIGHT])
def test_a_stub_is_not_attempted_never_passed(capsys, check):
    def stub(*args):
        ...

    def raising(*args):
        raise NotImplementedError

    for fn in (stub, raising):
        ok, out = _verdict(capsys, check, fn)
        assert not ok and "not attempted yet" in out, out


def test_the_exp_limit():
    assert inline.check_exp_limit(88.72) and not inline.check_exp_limit(89.0) and not inline.check_exp_limit(88.0)

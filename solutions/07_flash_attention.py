"""Exercise 07: attention one tile of keys at a time, the loop inside Lab 4's kernel.

One program of the kernel owns a block of query rows. It walks the keys and values a tile at a
time, keeping for each of its rows the running max m, the running sum l of exp(s - m) and the
running numerator o = sum exp(s - m) V, and never forms the whole row of scores. Write the two
pieces the kernel's correctness rests on: which key tiles a causal block must visit, and the update
of (m, l, o) by one tile. `make check EX=07` runs them on queries, keys and values it draws (causal
and not, key padding down to no key at all, tiles that do not divide the length) against float64
attention.
"""
import numpy as np


def causal_key_end(q_start, q_end, n_keys):
    """The end (exclusive) of the keys a block of query rows [q_start, q_end) must visit under a
    causal mask (query i sees keys 0..i) when only the first n_keys keys are valid. Every key any row
    of the block may see must be visited; no tile entirely above the diagonal need be."""
    ### BEGIN SOLUTION
    return min(n_keys, q_end)
    ### END SOLUTION


def attention_block(q, k, v, q_start, causal, n_keys, tile):
    """softmax(q k^T / sqrt(d) + mask) v for the query rows q (rows q_start, q_start + 1, ...) of
    shape (M, d), against k and v of shape (S, d), walking the keys in tiles of `tile`: for each
    tile, scores, mask (keys at or past n_keys; with `causal`, keys after the row's query), the new
    max, and (m, l, o) brought onto it. Rows that see no key return zeros. A score may already be
    -inf (an additive mask makes it so): a row can meet a whole tile of -inf before its first
    visible key. Returns (M, d)."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    rows = q_start + np.arange(q.shape[0])
    scale = 1.0 / np.sqrt(q.shape[1])
    m = np.full(q.shape[0], -np.inf)
    l = np.zeros(q.shape[0])
    o = np.zeros((q.shape[0], v.shape[1]))
    end = causal_key_end(q_start, q_start + q.shape[0], n_keys) if causal else n_keys
    for start in range(0, end, tile):
        cols = np.arange(start, min(start + tile, end))
        s = q @ k[cols].T * scale
        keep = cols[None, :] < n_keys
        if causal:
            keep = keep & (cols[None, :] <= rows[:, None])
        s = np.where(keep, s, -np.inf)
        ### BEGIN SOLUTION
        m_new = np.maximum(m, s.max(axis=1))
        m_ref = np.where(np.isneginf(m_new), 0.0, m_new)   # no visible key yet: never -inf - -inf
        alpha = np.exp(m - m_ref)
        p = np.exp(s - m_ref[:, None])
        l = l * alpha + p.sum(axis=1)
        o = o * alpha[:, None] + p @ v[cols]
        m = m_new
        ### END SOLUTION
    return o / np.where(l == 0, 1.0, l)[:, None]

"""The Triton twin of the fused cross-entropy (a07_softmax.cross_entropy launches it; read it there).
A module of its own so that importing a07_softmax.cross_entropy needs no triton."""
import triton
import triton.language as tl


@triton.jit
def cross_entropy_fwd_bwd_kernel(X, T, LOSS, G, N_VALID, n_cols, stride_x, stride_g, ignore_index,
                                 smoothing, z_coef, TILE: tl.constexpr, REDUCE_MEAN: tl.constexpr,
                                 WRITE_GRAD: tl.constexpr):
    # One program per row. Pass 1 reads the logits once for the online (m, s), the target's logit
    # and the sum of the logits (label smoothing); pass 2 reads them again to write the gradient,
    # formed in fp32 and rounded once (p - 1 near p = 1 must not be formed in bf16).
    row = tl.program_id(0).to(tl.int64)
    x_row = X + row * stride_x
    offs = tl.arange(0, TILE)
    t64 = tl.load(T + row)
    ignored = t64 == ignore_index
    # a target outside [0, V) (possible only with check_targets=False) makes the row NaN, as in the
    # CUDA kernel; compared in 64 bits, so that 2^32 does not pass for 0
    outside = (t64 < 0) | (t64 >= n_cols)
    invalid = outside & (t64 != ignore_index)
    t = tl.where(outside, -1, t64).to(tl.int32)
    m = tl.full([TILE], -float("inf"), tl.float32)
    s = tl.zeros([TILE], tl.float32)
    sum_x = tl.zeros([TILE], tl.float32)
    x_t = tl.zeros([TILE], tl.float32)
    for start in tl.range(0, n_cols, TILE):
        cols = start + offs
        x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        m_ref = tl.where(m_new == -float("inf"), 0.0, m_new)
        s = s * tl.exp(m - m_ref) + tl.exp(x - m_ref)
        m = m_new
        sum_x += tl.where(cols < n_cols, x, 0.0)
        x_t += tl.where(cols == t, x, 0.0)
    m_row = tl.max(m, 0)
    m_row_ref = tl.where(m_row == -float("inf"), 0.0, m_row)
    s_row = tl.sum(s * tl.exp(m - m_row_ref), 0)
    lse = m_row_ref + tl.log(s_row)
    # a weight of 0 drops its term outright: 0 * -inf (a -inf logit) would be NaN
    target_term = tl.where(smoothing < 1.0, (1.0 - smoothing) * tl.sum(x_t, 0), 0.0)
    smooth_term = tl.where(smoothing > 0.0, smoothing / n_cols * tl.sum(sum_x, 0), 0.0)
    loss = lse - target_term - smooth_term + z_coef * lse * lse
    scale = 1.0
    if REDUCE_MEAN:
        scale = 1.0 / tl.maximum(tl.load(N_VALID).to(tl.float32), 1.0)
    loss = tl.where(invalid, float("nan"), loss)
    tl.store(LOSS + row, tl.where(ignored, 0.0, loss))
    if WRITE_GRAD:
        g_row = G + row * stride_g
        for start in tl.range(0, n_cols, TILE):
            cols = start + offs
            x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
            p = tl.exp(x - lse)
            onehot = (cols == t).to(tl.float32)
            # p - onehot first (exact where p is exactly 1), then the small terms: formed in fp32,
            # rounded once at the store
            g = (p - onehot) + 2.0 * z_coef * lse * p + smoothing * (onehot - 1.0 / n_cols)
            g = tl.where(ignored, 0.0, tl.where(invalid, float("nan"), g * scale))
            tl.store(g_row + cols, g.to(G.dtype.element_ty), mask=cols < n_cols)


@triton.jit
def scale_rows_kernel(G, SCALE, n_cols, stride_g, stride_scale, TILE: tl.constexpr):
    # The backward pass: the stored gradient times the upstream gradient, in place, one program per
    # row. A row whose factor is exactly 1 (the usual loss.backward() of a mean or a sum) returns at
    # once: the gradient is not read again, and the host never had to look at the factor.
    row = tl.program_id(0).to(tl.int64)
    factor = tl.load(SCALE + row * stride_scale).to(tl.float32)
    if factor != 1.0:
        g_row = G + row * stride_g
        for start in tl.range(0, n_cols, TILE):
            cols = start + tl.arange(0, TILE)
            g = tl.load(g_row + cols, mask=cols < n_cols).to(tl.float32)
            tl.store(g_row + cols, (g * factor).to(G.dtype.element_ty), mask=cols < n_cols)


@triton.jit
def targets_outside_vocab_kernel(T, n, vocab, ignore_index, VERDICT, BLOCK: tl.constexpr):
    # cross_entropy()'s test of its targets: VERDICT = 1 when some target is outside [0, vocab) and
    # is not ignore_index, else 0. One program walks them all (a target is 8 bytes, its row of
    # logits thousands), so that its one store is the whole verdict and nothing needs zeroing first.
    # Compared in the targets' own width (int64: 2^32 is not 0).
    offs = tl.arange(0, BLOCK)
    bad = tl.zeros([BLOCK], tl.int32)
    for start in tl.range(0, n, BLOCK):
        idx = start + offs
        live = idx < n
        t = tl.load(T + idx, mask=live, other=0)
        bad |= (live & (t != ignore_index) & ((t < 0) | (t >= vocab))).to(tl.int32)
    tl.store(VERDICT, tl.max(bad, 0).to(tl.uint8))

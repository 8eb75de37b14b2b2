"""The Triton kernel of Lab 4 (a07_softmax.attention launches it; read it there first). A module of
its own so that importing a07_softmax.attention needs no triton, and so that the kernel and its
helper are module-level names, which is how @triton.jit functions find each other."""
import triton
import triton.language as tl


@triton.jit
def _mm(a, b, IEEE: tl.constexpr):
    # fp32 inputs: full-precision products (tl.dot would use TF32 on a GPU and lose 3 digits)
    if IEEE:
        return tl.dot(a, b, input_precision="ieee")
    return tl.dot(a, b)


@triton.jit
def _attend(q, K, V, KD, VD, bh, base, stride_s, start, offs_m, offs_n, offs_d, n_keys, m_i, l_i, acc, qk_scale,
            MASKED: tl.constexpr, CAUSAL: tl.constexpr, HAS_KV_LEN: tl.constexpr, IEEE: tl.constexpr,
            UPCAST: tl.constexpr, FOLD: tl.constexpr, TMA: tl.constexpr, BLOCK_N: tl.constexpr,
            HEAD_DIM: tl.constexpr):
    """One key tile folded into the running (m, l, o) of BLOCK_M query rows: the online recurrence
    of notebook 03 with a weighted numerator. Scores are kept in log2 units (qk_scale holds
    log2(e)), so every exp is one exp2. MASKED tiles (the diagonal tile, the tail past n_keys)
    mask element by element; the others are wholly visible and skip it.
    FOLD (a positive scale): max(s * c) = max(s) * c for c > 0, so the tile's max is taken on the raw
    products and the scale joins the exponent, s * c - m: one fused multiply-add per score instead of
    a multiply and a subtract. A negative scale turns the max into a min, so it multiplies first.
    flash_attention leaves it off (attention.FOLD_SCALE: the multiply-add loses the row's largest
    score once |m| passes ~2^30); the sweep still measures it.
    TMA: the key and value tiles come through tensor descriptors (KD, VD: the (B*H, S, D) views of K
    and V), each tile one bulk copy by the Hopper's tensor memory accelerator instead of an address
    per element and thread; rows past S read as zeros. Rows in [n_keys, S) (key padding) are real
    memory and may hold anything, so a masked tile zeroes its values there: p is 0 for those keys,
    but 0 * NaN is NaN.
    Without key padding (HAS_KV_LEN off) n_keys is S, so neither test is made where it cannot fail:
    the values need no zeroing (rows past S already read as zeros), and a causal row keeps exactly
    the keys up to itself (a row that is stored lies below S, so every key it keeps does too). On
    the diagonal tile that spares a select over the whole value tile, which would otherwise travel
    from shared memory to registers and back before the tensor cores could read it."""
    cols = start + offs_n
    if TMA:
        k = KD.load([bh, start, 0]).reshape(BLOCK_N, HEAD_DIM)
        v = VD.load([bh, start, 0]).reshape(BLOCK_N, HEAD_DIM)
        if MASKED and HAS_KV_LEN:
            v = tl.where(cols[:, None] < n_keys, v, 0.0)
    elif MASKED:
        kv_mask = cols[:, None] < n_keys
        k = tl.load(K + base + cols[:, None] * stride_s + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(V + base + cols[:, None] * stride_s + offs_d[None, :], mask=kv_mask, other=0.0)
    else:
        k = tl.load(K + base + cols[:, None] * stride_s + offs_d[None, :])
        v = tl.load(V + base + cols[:, None] * stride_s + offs_d[None, :])
    if UPCAST:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    s = _mm(q, tl.trans(k), IEEE)
    if not FOLD:
        s = s * qk_scale
    if MASKED:
        if CAUSAL:
            keep = cols[None, :] <= offs_m[:, None]
            if HAS_KV_LEN:
                keep = keep & (cols[None, :] < n_keys)
        else:
            keep = cols[None, :] < n_keys
        s = tl.where(keep, s, -float("inf"))
    if FOLD:
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
    else:
        m_new = tl.maximum(m_i, tl.max(s, 1))
    # the -inf guard: a row with nothing visible yet keeps m = -inf; measure against 0 instead,
    # so that no -inf - -inf is formed (its exps are 0 and l, o stay 0). With causal masks and
    # right padding every processed tile shows a row at least key 0, so the guard only matters
    # for masks that can hide a row's first tiles (sliding windows, left padding); it is kept so
    # that adding one cannot bring the NaN back.
    m_ref = tl.where(m_new == -float("inf"), 0.0, m_new)
    alpha = tl.math.exp2(m_i - m_ref)
    if FOLD:
        p = tl.math.exp2(s * qk_scale - m_ref[:, None])
    else:
        p = tl.math.exp2(s - m_ref[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + _mm(p.to(v.dtype), v, IEEE)  # o rescaled like l
    return m_new, l_i, acc


@triton.jit
def _walk(q, K, V, KD, VD, bh, base, stride_s, full, hi, offs_m, offs_n, offs_d, n_keys, qk_scale,
          CAUSAL: tl.constexpr, HAS_KV_LEN: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr,
          FOLD: tl.constexpr, TMA: tl.constexpr, MASKED_FIRST: tl.constexpr, BLOCK_M: tl.constexpr,
          BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    """The key tiles of one query tile, in two runs: [0, full) wholly visible, unmasked; [full, hi)
    the diagonal tile (causal) and the tail past n_keys, masked element by element. Returns the
    final (m, l, o) of the online recurrence, from the empty state (m = -inf, l = 0, o = 0).
    The recurrence does not care which tiles come first. MASKED_FIRST walks the masked run before
    the unmasked one (FlashAttention's order): its loads then start beside the query tile's, and
    the pipelined run ends the walk; the sweep measures both orders."""
    m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    if MASKED_FIRST:
        for start in tl.range(full, hi, BLOCK_N):
            m_i, l_i, acc = _attend(q, K, V, KD, VD, bh, base, stride_s, start, offs_m, offs_n, offs_d, n_keys,
                                    m_i, l_i, acc, qk_scale, True, CAUSAL, HAS_KV_LEN, IEEE, UPCAST, FOLD,
                                    TMA, BLOCK_N, HEAD_DIM)
    for start in tl.range(0, full, BLOCK_N):
        m_i, l_i, acc = _attend(q, K, V, KD, VD, bh, base, stride_s, start, offs_m, offs_n, offs_d, n_keys,
                                m_i, l_i, acc, qk_scale, False, CAUSAL, HAS_KV_LEN, IEEE, UPCAST, FOLD,
                                TMA, BLOCK_N, HEAD_DIM)
    if not MASKED_FIRST:
        for start in tl.range(full, hi, BLOCK_N):
            m_i, l_i, acc = _attend(q, K, V, KD, VD, bh, base, stride_s, start, offs_m, offs_n, offs_d, n_keys,
                                    m_i, l_i, acc, qk_scale, True, CAUSAL, HAS_KV_LEN, IEEE, UPCAST, FOLD,
                                    TMA, BLOCK_N, HEAD_DIM)
    return m_i, l_i, acc


@triton.jit
def attention_fwd_kernel(Q, K, V, O, KD, VD, KV_LEN, seq, sm_scale, heads, head_group,
                         stride_b, stride_h, stride_s,
                         HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         CAUSAL: tl.constexpr, HAS_KV_LEN: tl.constexpr, IEEE: tl.constexpr,
                         UPCAST: tl.constexpr, HEAVY_FIRST: tl.constexpr, FOLD: tl.constexpr, TMA: tl.constexpr,
                         MASKED_FIRST: tl.constexpr):
    # HEAVY_FIRST (causal): programs start in launch order (axis 0 fastest), and a causal tile's work
    # grows with its row index. Launched as they come, the grid would end on a head's longest tiles
    # and leave SMs idle behind them. So the launch order is renumbered: within a group of
    # `head_group` heads, every head's longest tile first, then every head's next longest, down to
    # the shortest (longest-processing-time-first scheduling, as FlashAttention-2 orders its causal
    # blocks, taken across heads). The group is kept small enough that its keys and values stay in
    # L2 while its tiles run (attention.head_group()); head_group = 1 reverses each head alone.
    # The renumbering is a bijection of the grid: a group of width w (the last may be narrower)
    # owns w * n_tiles consecutive launch slots.
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    if HEAVY_FIRST:
        n_tiles = tl.num_programs(0)
        slot = bh * n_tiles + pid_m
        first = slot // (n_tiles * head_group) * head_group
        width = tl.minimum(head_group, tl.num_programs(1) - first)
        r = slot - first * n_tiles
        bh = first + r % width
        pid_m = n_tiles - 1 - r // width
    b = bh // heads
    h = bh % heads
    base = b.to(tl.int64) * stride_b + h.to(tl.int64) * stride_h
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + base + offs_m[:, None] * stride_s + offs_d[None, :], mask=offs_m[:, None] < seq, other=0.0)
    if UPCAST:  # the interpreter's tl.dot mishandles bfloat16: compute in float32 there
        q = q.to(tl.float32)
    qk_scale = sm_scale * 1.4426950408889634  # log2(e): exp(x) = exp2(x log2(e))
    n_keys = seq
    if HAS_KV_LEN:
        n_keys = tl.minimum(tl.load(KV_LEN + b), seq)
    # Key tiles in two runs. [0, full): every key visible to every row of the tile, no masks.
    # [full, hi): the diagonal tile (causal) and the tail past n_keys, masked element by element.
    # Causal: keys past this tile's last query row are never needed, so their tiles are never
    # loaded (block skipping). BLOCK_M is a multiple of BLOCK_N, so pid_m * BLOCK_M starts a tile.
    full = n_keys // BLOCK_N * BLOCK_N
    hi = n_keys
    if CAUSAL:
        full = tl.minimum(full, pid_m * BLOCK_M)
        hi = tl.minimum(hi, (pid_m + 1) * BLOCK_M)
    m_i, l_i, acc = _walk(q, K, V, KD, VD, bh, base, stride_s, full, hi, offs_m, offs_n, offs_d, n_keys, qk_scale,
                          CAUSAL, HAS_KV_LEN, IEEE, UPCAST, FOLD, TMA, MASKED_FIRST, BLOCK_M, BLOCK_N, HEAD_DIM)
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]          # no visible key: zeros
    tl.store(O + base + offs_m[:, None] * stride_s + offs_d[None, :], out.to(O.dtype.element_ty),
             mask=offs_m[:, None] < seq)

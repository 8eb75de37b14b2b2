// softmax_fast.cu -- the course's answer to "so what should I actually use?": one row softmax that
// streams near the copy bandwidth from 128 to 262144 columns, in fp32, fp16 and bf16.
//
// The labs teach the algorithm with one 256-thread block per row. Where that mapping is wrong:
//   - a short row (128 fp32 = 512 B) leaves most of a 256-thread block idle, and pays two barriers
//     for a few hundred bytes;
//   - a long row (262144 fp32 = 1 MiB) does not fit in one block's registers, so the lab falls back
//     to two reads.
// So the row length picks the mapping (a07_softmax/fast.py holds the table; docs/performance.md the
// evidence behind each tier):
//
//   kernel                 one row is owned by           row lives in          (m, s) reduction
//   softmax_fast_warp      GROUP lanes of a warp         registers             xor shuffles in the group
//   softmax_fast_block     one block                     registers             shuffles + shared memory
//   softmax_fast_cluster   a cluster of CLUSTER blocks   registers of CLUSTER  + one message per block
//                          (sm_90; 2 to 16), as many     blocks (16-bit:         into every block's shared
//                          as fit, rows by ticket        as raw bits)            memory (st.async + mbarrier)
//   softmax_fast_2pass     one block                     nowhere: read twice   shuffles + shared memory
//
// Common to all: 16-byte vector loads and stores (4 fp32 or 8 fp16/bf16), an element-by-element path
// for rows whose length or address is not a multiple of 16 bytes, statistics in fp32, (m, s) merged
// in one reduction round with combine() at every level, one exp per element (except 16-bit rows in
// a cluster: two, see RowBits), a fully -inf row written as zeros, every finite input right up to
// the dtype's largest magnitude (exp_minus), and a NaN or +inf in a row giving a NaN row, as
// torch.softmax does (docs/contract.md). Probabilities below FLT_MIN
// (1.2e-38) come out as zero: exp2 is the one-instruction .ftz form, which flushes them (torch.softmax
// keeps fp32 subnormals; portability.h says why the exact form buys nothing here). The 16-bit types
// travel as raw bits (f16_t, bf16_t): no vendor fp16 header.
//
// The loads carry an L2 eviction-priority hint, evict_last (load16_if in portability.h), although
// each input byte is read once. It moves the same DRAM bytes (ncu) in less time; it changes only
// which lines the L2 evicts first, and why that helps is an open question (docs/performance.md).
//
// Fused variants reuse the same four bodies: each strategy is written once, as a __device__ body
// templated on a row operation (Op), and a kernel per operation only names its arguments. An Op
// says which columns of a row hold data (a causal mask never reads above the diagonal), what the
// softmax sees for each element (a scale, an additive mask), what is written for each probability
// (softmax: p; cross-entropy: the gradient p - onehot), and what happens once per row after the
// reduction (cross-entropy's loss). See "Row operations" below; OneFlow's softmax.cuh load/store
// functors are the model.
//
//   operation                  kernels                                what it writes
//   Softmax                    softmax_fast_<strategy>                p
//   ScaleMask                  scale_mask_softmax_fast_<strategy>     softmax(x * scale + mask) over
//                                                                    the visible columns, 0 elsewhere
//                              scale_span_softmax_fast_<strategy>     the same, no additive mask tensor
//   Scaled                     scaled_softmax_fast_<strategy>         softmax(x * scale), scale > 0
//                                                                    (the same with nothing masked)
//   CrossEntropy               cross_entropy_fast_<strategy>          the gradient, and one loss a row
//                              cross_entropy_loss_fast_<strategy>     one loss a row (no gradient)
//
// Every kernel is a template; a07_softmax/fast.py instantiates the ones a shape needs through CuPy
// RawModule name expressions, e.g. "softmax_fast_warp<bf16_t, 2, 8, 1, true>", and the compile
// tests instantiate every one its strategy table can pick (fast.instances()).
#include "online_softmax.h"

#define LOG2E 1.4426950408889634f
#ifndef A07_SKIP_HIDDEN  // 0: exponentiate the columns a mask hides too (a control for the sweep)
#define A07_SKIP_HIDDEN 1
#endif

// exp(x - m) as 2^((x - m) * log2(e)): one subtraction, one multiply, one EX2. The subtraction
// comes first, on purpose. The one-FFMA form 2^(x * log2(e) - m * log2(e)) scales x and m before
// subtracting, and both products overflow once |x| > FLT_MAX / log2(e) (2.4e38): a row filled with
// the dtype's lowest value (how model libraries build padding masks) then gives -inf - -inf = NaN.
// x - m <= 0 can only overflow towards -inf, whose exp is the 0 it should be. The extra instruction
// is free at the copy ceiling (docs/performance.md, results/nvidia-h200/bench.json).
// k: log2(e), or scale * log2(e) for softmax(x * scale) with the scale folded in (ScaleMaskRow).
#if A07_EXP_FFMA  // the one-FFMA form, for a measurement only (bench/sweeps/fast_configs.py --claim exp-form)
__device__ __forceinline__ float exp_minus(float x, float m, float k = LOG2E) { return fast_exp2(fmaf(x, k, -m * k)); }
#else
__device__ __forceinline__ float exp_minus(float x, float m, float k = LOG2E) { return fast_exp2((x - m) * k); }
#endif
// Below this |m log2(e)| the one-FFMA form is exact to 2^-12 in the exponent (RowBits uses it).
#define FFMA_EXP_LIMIT 4096.0f

struct f16_t { unsigned short bits; };
struct bf16_t { unsigned short bits; };

// Elements of T in one 16-byte vector, and how to unpack / pack one.
template <class T> struct Vec;
template <> struct Vec<float> {
  static constexpr int N = 4;
  static constexpr unsigned NEG_INF_WORD = 0xff800000u;  // a 32-bit word of -inf values
  __device__ static void unpack(uint4 u, float* f) {
    f[0] = __uint_as_float(u.x), f[1] = __uint_as_float(u.y), f[2] = __uint_as_float(u.z), f[3] = __uint_as_float(u.w);
  }
  __device__ static uint4 pack(const float* f) {
    return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]), __float_as_uint(f[3]));
  }
  __device__ static float scalar(float x) { return x; }
  __device__ static float from_float(float f) { return f; }
};
// Eight 16-bit values, two per 32-bit word; Bits says how one word converts.
template <class T, class B>
struct Vec16 {
  using Bits = B;
  static constexpr int N = 8;
  static constexpr unsigned NEG_INF_WORD = B::NEG_INF2;
  __device__ static void unpack(uint4 u, float* f) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) f[2 * i] = Bits::lo(w[i]), f[2 * i + 1] = Bits::hi(w[i]);
  }
  __device__ static uint4 pack(const float* f) {
    return make_uint4(Bits::pack2(f[0], f[1]), Bits::pack2(f[2], f[3]), Bits::pack2(f[4], f[5]),
                      Bits::pack2(f[6], f[7]));
  }
  __device__ static float scalar(T x) { return Bits::lo(x.bits); }
  __device__ static T from_float(float f) { return T{static_cast<unsigned short>(Bits::pack2(f, 0.0f) & 0xffffu)}; }
};
struct BF16Bits {  // bf16 is the top half of a float: widening is a shift
  __device__ static float lo(unsigned w) { return __uint_as_float(w << 16); }
  __device__ static float hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
  __device__ static unsigned pack2(float a, float b) { return pack_bf162(a, b); }
  static constexpr unsigned NEG_INF2 = 0xff80ff80u;  // two -inf
  static constexpr bool SHIFT_UNPACK = true;           // widening needs no extra registers
  __device__ static unsigned max2(unsigned a, unsigned b) { return max_bf162(a, b); }
};
struct F16Bits {
  __device__ static float lo(unsigned w) { return half_bits_to_float(static_cast<unsigned short>(w)); }
  __device__ static float hi(unsigned w) { return half_bits_to_float(static_cast<unsigned short>(w >> 16)); }
  __device__ static unsigned pack2(float a, float b) { return pack_half2(a, b); }
  static constexpr unsigned NEG_INF2 = 0xfc00fc00u;
  static constexpr bool SHIFT_UNPACK = false;
  __device__ static unsigned max2(unsigned a, unsigned b) { return max_half2(a, b); }
};
template <> struct Vec<bf16_t> : Vec16<bf16_t, BF16Bits> {};
template <> struct Vec<f16_t> : Vec16<f16_t, F16Bits> {};

// ------------------------------------------------------------------------------------------------
// Reduction states. MS (online_softmax.h) is (max, sum of exp); cross-entropy with label smoothing
// also needs the plain sum of the logits, so its state carries a third field through the same
// reductions (combine(), shuffles, the block round, the cluster message's spare slot).
struct MSX {
  float m;
  float s;
  float x;  // sum of the scores themselves
};
__device__ __forceinline__ MSX combine(MSX a, MSX b) {
  const MS ms = combine(MS{a.m, a.s}, MS{b.m, b.s});
  return MSX{ms.m, ms.s, a.x + b.x};
}
__device__ __forceinline__ MSX shfl_xor(MSX v, int lane_mask) {
  return MSX{SHFL_XOR(v.m, lane_mask), SHFL_XOR(v.s, lane_mask), SHFL_XOR(v.x, lane_mask)};
}
template <class State> __device__ __forceinline__ State make_state(float m, float s, float x);
template <> __device__ __forceinline__ MS make_state<MS>(float m, float s, float) { return MS{m, s}; }
template <> __device__ __forceinline__ MSX make_state<MSX>(float m, float s, float x) { return MSX{m, s, x}; }
__device__ __forceinline__ float sum_of(MS) { return 0.0f; }
__device__ __forceinline__ float sum_of(MSX st) { return st.x; }
template <class State> __device__ __forceinline__ State block_reduce(State st) {
  return block_allreduce(st, CombineOp(), make_state<State>(A07_NEG_INF, 0.0f, 0.0f));
}

// ------------------------------------------------------------------------------------------------
// Row operations. A kernel body asks its Op for a Row object per row (op.row(r, cols); a
// default-constructed Row is a row with nothing to read) and calls, in this order:
//   reads(c0, n, cols)   load the n elements from column c0? (false: they count as -inf)
//   see(xr, c0, n)       once per vector a thread owns, before anything is written (in place too);
//   see_all(xr, c, d, k, n)  or once for all of them, the k vectors at c + j * d (RowBits)
//   score(c, x)          what the softmax sees for element x of column c (SCORES only)
//   exp_factor()         k in exp2((x - m) * k) for the values a RowPart holds: log2(e), unless
//   state_max(m)         the Row folds a positive scale into the exp; then the row's max in
//                        score units is state_max(m) = m * scale (RowPart only)
//   wants_sum()          whether the sum of the scores is needed (SUMS only; false: it stays 0)
//   reduced(total, lead) once the row's state is known, before the store; `lead` is true in one
//                        thread of the row
//   out(c, p)            what is written for probability p at column c (OUTPUTS only)
//   stored(yr)           after the thread's stores (one element may be rewritten by its owner)
// Columns outside what a Row reads are written like any other: their probability is 0.
// SCORES / OUTPUTS / SUMS / WRITES are compile-time, so the plain softmax compiles to the same
// instructions as before the operations existed. A Row that does not write (WRITES false: the loss
// alone) skips the store, and the 2-pass kernel its second read.

// y = softmax(x).
struct SoftmaxRow {
  using State = MS;
  static constexpr bool SCORES = false, OUTPUTS = false, SUMS = false, WRITES = true;
  __device__ __forceinline__ bool reads(int c0, int, int cols) const { return c0 < cols; }
  template <class T> __device__ __forceinline__ void see(const T*, int, int) {}
  template <class T> __device__ __forceinline__ void see_all(const T*, int, int, int, int) {}
  __device__ __forceinline__ float score(int, float x) const { return x; }
  __device__ __forceinline__ float exp_factor() const { return LOG2E; }
  __device__ __forceinline__ float state_max(float m) const { return m; }
  __device__ __forceinline__ void reduced(MS, bool) {}
  __device__ __forceinline__ float out(int, float p) const { return p; }
  template <class T> __device__ __forceinline__ void stored(T*) const {}
};
struct SoftmaxOp {
  using Row = SoftmaxRow;
  __device__ __forceinline__ Row row(int, int) const { return Row{}; }
};

// y = softmax(x * scale) for scale > 0, every column visible: scale_mask_softmax when nothing
// masks. A vector needs no work of its own here (no span to test, no mask to add): the scale goes
// into the exp's factor, max(x * scale) = (max x) * scale, and the row streams like the plain
// softmax. ScaleMaskRow's per-vector span tests cost the 16-bit block rows their occupancy
// (40 registers against 32) and ran 8 to 12 % slower there (docs/performance.md). The host
// (fast.scale_mask_softmax) takes this row only for a positive scale; RowBits (16-bit clusters)
// asks for score() instead, the scaled value.
struct ScaledRow {
  using State = MS;
  static constexpr bool SCORES = true, OUTPUTS = false, SUMS = false, WRITES = true;
  float scale = 1.0f;
  __device__ __forceinline__ bool reads(int c0, int, int cols) const { return c0 < cols; }
  template <class T> __device__ __forceinline__ void see(const T*, int, int) {}
  template <class T> __device__ __forceinline__ void see_all(const T*, int, int, int, int) {}
  __device__ __forceinline__ float score(int, float x) const { return x * scale; }
  __device__ __forceinline__ bool hidden(int, int) const { return false; }
  __device__ __forceinline__ bool whole(int, int) const { return true; }
  __device__ __forceinline__ float score_inside(int c, float x) const { return score(c, x); }
  template <int VECS, int N, bool ALIGNED>
  __device__ __forceinline__ void score_part(float*, int, int, int) const {}  // folded into the exp
  __device__ __forceinline__ float exp_factor() const { return scale * LOG2E; }
  __device__ __forceinline__ float state_max(float m) const { return m * scale; }
  __device__ __forceinline__ void reduced(MS, bool) {}
  __device__ __forceinline__ float out(int, float p) const { return p; }
  template <class T> __device__ __forceinline__ void stored(T*) const {}
};
struct ScaledOp {
  float scale;
  using Row = ScaledRow;
  __device__ __forceinline__ Row row(int, int) const { return Row{scale}; }
};

// y = softmax(x * scale + mask) over the columns a query may see, 0 elsewhere: Lab 2's operation
// (cuda/fused_softmax.cu, same mask rules) in the fast family. The rows are (batch, head, query)
// flattened, `q_len` queries a head, `heads` heads a batch; query i = row % q_len sees key j when
// j <= i (causal), j > i - window (sliding window), j < valid_len[row] (padding). Those bounds make
// one span [lo, hi): its outside is neither read nor exponentiated, so a causal row reads i + 1
// columns, not cols. The additive mask (optional) is indexed by strides, so a broadcast of it (one
// (q_len, cols) mask for every head, one row per batch for padding) costs no copy.
template <class T, bool MASKED>
struct ScaleMaskRow {
  using State = MS;
  static constexpr bool SCORES = true, OUTPUTS = false, SUMS = false, WRITES = true;
  int lo = 0, hi = 0;        // the span that may be visible
  float scale = 1.0f;
  bool folded = false;       // the scale goes into the exp (no additive mask, scale > 0)
  const T* mask_ = nullptr;  // this row's additive mask, or none (read through mask())
  // MASKED false (scale_span_softmax: the mask comes from indices alone) makes the additive mask a
  // compile-time null, so none of its code or registers is compiled in: the 16-bit raw rows
  // (RowBits) fit their register bound without spilling only so.
  __device__ __forceinline__ const T* mask() const { return MASKED ? mask_ : nullptr; }
  __device__ __forceinline__ bool reads(int c0, int n, int) const { return !hidden(c0, n); }
  template <class U> __device__ __forceinline__ void see(const U*, int, int) {}
  template <class U> __device__ __forceinline__ void see_all(const U*, int, int, int, int) {}
  // Columns [c0, c0 + n) wholly outside the span (never read: every score -inf), or wholly inside.
  __device__ __forceinline__ bool hidden(int c0, int n) const { return c0 >= hi || c0 + n <= lo; }
  __device__ __forceinline__ bool whole(int c0, int n) const { return c0 >= lo && c0 + n <= hi; }
  // The score of element x at column c, whole (RowBits recomputes it at every use), and the same
  // for a column known to be inside the span.
  __device__ __forceinline__ float score_inside(int c, float x) const {
    return mask() ? fmaf(x, scale, Vec<T>::scalar(mask()[c])) : x * scale;
  }
  __device__ __forceinline__ float score(int c, float x) const { return c < lo || c >= hi ? A07_NEG_INF : score_inside(c, x); }
  // A RowPart's share at once, with as little work per element as the row allows:
  //   - softmax(x * scale) = exp((x - max x) * scale) / sum for scale > 0 (x * scale is monotone
  //     in x, so max(x * scale) = (max x) * scale even after rounding): without an additive mask
  //     the scale goes into the exp's factor (exp_factor, state_max) and costs nothing per element;
  //   - a vector wholly inside [lo, hi) needs no test per element, one wholly outside was never
  //     loaded and holds -inf already (reads()); only the (at most two) vectors that straddle lo or
  //     hi are tested element by element. The test, not the -inf, matters there: -inf * 0 is NaN.
  template <int VECS, int N, bool ALIGNED>
  __device__ __forceinline__ void score_part(float* v, int base, int t, int G) const {
    if constexpr (!ALIGNED) {  // element by element anyway: the per-vector branches only cost registers
      const unsigned span = unsigned(hi - lo);  // the span test as one unsigned compare (c - lo wraps below lo)
      const auto each = [&](auto score) {  // one loop per case: a select per element costs registers
#pragma unroll
        for (int i = 0; i < VECS * N; ++i) {
          const int c = base + ((i / N) * G + t) * N + i % N;
          v[i] = unsigned(c - lo) < span ? score(v[i], c) : A07_NEG_INF;
        }
      };
      if (mask()) each([&](float x, int c) { return fmaf(x, scale, Vec<T>::scalar(mask()[c])); });
      else if (folded) each([](float x, int) { return x; });
      else each([&](float x, int) { return x * scale; });
      return;
    }
#pragma unroll
    for (int j = 0; j < VECS; ++j) {
      const int c0 = base + (j * G + t) * N;
      float* w = v + j * N;
      if (c0 >= lo && c0 + N <= hi) {
        if (mask()) {
#pragma unroll
          for (int e = 0; e < N; ++e) w[e] = fmaf(w[e], scale, Vec<T>::scalar(mask()[c0 + e]));
        } else if (!folded) {
#pragma unroll
          for (int e = 0; e < N; ++e) w[e] *= scale;
        }
      } else if (c0 < hi && c0 + N > lo) {
#pragma unroll
        for (int e = 0; e < N; ++e) {
          const int c = c0 + e;
          const float x = mask() ? fmaf(w[e], scale, Vec<T>::scalar(mask()[c])) : folded ? w[e] : w[e] * scale;
          w[e] = c >= lo && c < hi ? x : A07_NEG_INF;
        }
      }
    }
  }
  __device__ __forceinline__ float exp_factor() const { return folded ? scale * LOG2E : LOG2E; }
  __device__ __forceinline__ float state_max(float m) const { return folded ? m * scale : m; }
  __device__ __forceinline__ void reduced(MS, bool) {}
  __device__ __forceinline__ float out(int, float p) const { return p; }
  template <class U> __device__ __forceinline__ void stored(U*) const {}
};
template <class T, bool MASKED>
struct ScaleMaskOp {
  float scale;
  int heads, q_len, causal, window;  // window: 0 for none
  const int* valid_len;              // per row, or null
  const T* mask;                     // additive, or null; element (b, h, i, j) at b*sb + h*sh + i*sq + j
                                     // (MASKED false: ignored, the launcher passes null)
  long long mask_sb, mask_sh, mask_sq;
  using Row = ScaleMaskRow<T, MASKED>;
  __device__ __forceinline__ Row row(int r, int cols) const {
    const T* const mask = MASKED ? this->mask : nullptr;
    // integer divisions cost tens of instructions: only what the row's mask needs
    const int bh = causal || window > 0 || mask ? r / q_len : 0, i = r - bh * q_len;
    Row row;
    row.hi = causal && i + 1 < cols ? i + 1 : cols;
    if (valid_len && valid_len[r] < row.hi) row.hi = valid_len[r] > 0 ? valid_len[r] : 0;
    if (window > 0 && i - window + 1 > 0) row.lo = i - window + 1;
    if (row.lo > row.hi) row.lo = row.hi;  // an empty span: lo <= hi <= cols, nothing read past the row
    row.scale = scale;
    // folded only for scale > 0: a negative one would turn the max into a min, and 0 * -inf is NaN;
    // and only while scale * log2(e) stays finite (a scale above FLT_MAX / log2(e) would make every
    // exponent inf - inf: multiplied first, its scores are finite wherever x * scale is)
    row.folded = !mask && scale > 0.0f && scale * LOG2E < -A07_NEG_INF;
    if (mask) {
      const int b = bh / heads, h = bh - b * heads;
      row.mask_ = mask + b * mask_sb + h * mask_sh + i * mask_sq;
    }
    return row;
  }
};

// Cross-entropy of one row of logits x against its target t, and its gradient, in one pass:
//   lse  = M + log S                                  (the row's (M, S))
//   loss = lse - (1 - eps) x_t - eps mean(x) + z lse^2
//   grad = (p (1 + 2 z lse) - (1 - eps) [c = t] - eps / V) * grad_scale
// formed in fp32 and rounded once, so p - 1 near p = 1 does not cancel in bf16. The thread whose
// vector holds column t reads x_t (before any store: the gradient may overwrite the logits), writes
// the loss, and after its vector stores rewrites element t from x_t (p_t = exp(x_t - lse) in fp32):
// every other element is one FMA, with no per-element test for the one-hot. An ignored row reads nothing, writes zeros and a loss of 0. A row whose logits
// are all -inf has no softmax: its loss and gradient are NaN, as in PyTorch.
template <class T, bool GRAD>
struct CrossEntropyRow {
  using State = MSX;
  static constexpr bool SCORES = false, OUTPUTS = true, SUMS = true, WRITES = GRAD;
  int hi = 0;              // columns read: the vocabulary, or 0 for an ignored row
  // no column: far below any column a vector can start at (a misaligned row's first vector starts
  // up to N - 1 columns before 0), so that see() never takes one for a column it holds
  static constexpr int IGNORED = -0x40000000, OUT_OF_RANGE = -0x3fffffff;
  int target = IGNORED;    // the target's column, or IGNORED (no one-hot), or OUT_OF_RANGE
  bool holds_target = false;
  float x_t = 0.0f;
  float on = 0.0f;         // (1 - eps), then times the gradient's scale
  float off = 0.0f;        // eps / V, then times the gradient's scale
  float z = 0.0f;
  float k = 0.0f;          // (1 + 2 z lse) times the gradient's scale, once the row is reduced
  float gscale = 0.0f;
  float lse = 0.0f;
  float* loss = nullptr;   // registers are scarce in the 16-bit cluster kernel: nothing else is kept
  __device__ __forceinline__ bool reads(int c0, int, int) const { return c0 < hi; }
  __device__ __forceinline__ bool wants_sum() const { return off > 0.0f; }  // label smoothing only
  template <class U> __device__ __forceinline__ void see(const U* xr, int c0, int n) {
    if (target >= c0 && target < c0 + n) holds_target = true, x_t = Vec<U>::scalar(xr[target]);
  }
  template <class U> __device__ __forceinline__ void see_all(const U* xr, int c_first, int stride, int count, int n) {
    const int d = target - c_first;
    if (d >= 0 && d < count * stride && d % stride < n) holds_target = true, x_t = Vec<U>::scalar(xr[target]);
  }
  __device__ __forceinline__ float score(int, float x) const { return x; }
  __device__ __forceinline__ float exp_factor() const { return LOG2E; }
  __device__ __forceinline__ float state_max(float m) const { return m; }
  __device__ __forceinline__ void reduced(MSX total, bool lead) {
    if (target == IGNORED) {
      if (lead) *loss = 0.0f;
      return;
    }
    const float nan = __int_as_float(0x7fc00000);
    lse = total.m + logf(total.s);
    k = total.m == A07_NEG_INF || target < 0 ? nan : fmaf(2.0f * z, lse, 1.0f) * gscale;  // no softmax/target: NaN
    if (target < 0 && lead) *loss = nan;
    if (holds_target) {
      float l = lse - on * x_t + z * lse * lse;
      if (off > 0.0f) l -= off * total.x;  // eps * mean(x); skipped at eps = 0, where 0 * -inf would be NaN
      *loss = l;
    }
    on *= gscale, off *= gscale;
  }
  __device__ __forceinline__ float out(int, float p) const { return fmaf(p, k, -off); }
  template <class U> __device__ __forceinline__ void stored(U* yr) const {
    if (holds_target) yr[target] = Vec<U>::from_float(fmaf(expf(x_t - lse), k, -on - off));
  }
};
template <class T, bool GRAD>
struct CrossEntropyOp {
  const long long* target;
  float* loss;                // one per row
  const float* grad_scale;    // one value for every row (1 / the number of counted rows for a mean), or null: 1
  long long ignore_index;
  float eps, z;
  using Row = CrossEntropyRow<T, GRAD>;
  __device__ __forceinline__ Row row(int r, int cols) const {
    Row row;
    row.loss = loss + r;
    const long long t = target[r];
    if (t == ignore_index) return row;  // hi = 0: nothing read, zeros written
    row.hi = cols;
    row.target = t >= 0 && t < cols ? int(t) : Row::OUT_OF_RANGE;  // (the host refuses it first): NaN
    row.on = 1.0f - eps, row.off = eps / float(cols), row.z = z;
    row.gscale = grad_scale ? *grad_scale : 1.0f;
    return row;
  }
};

// Misaligned rows (a length that is not a multiple of the vector, or a view at an odd offset)
// are still read in 16-byte vectors: a row's vector grid starts at the 16-byte boundary at or
// before the row, `lead` elements early, so position p of the grid is column p - lead. The first
// vector's columns below 0 belong to the previous row, or, for the first row of a view that starts
// off a boundary, to the allocation before it (allocations start on 256-byte boundaries, so that
// boundary lies inside the allocation); they are loaded with the vector and dropped. The vector
// that would reach past the row's end is read element by element: past the last row lies memory
// the tensor does not own. plan() sizes misaligned rows for cols + N - 1 elements.
template <class T>
__device__ __forceinline__ int lead_of(const T* p) {
  return int((reinterpret_cast<unsigned long long>(p) & 15u) / sizeof(T));
}
// Whether every vector a thread owns ends inside the row (true for all but the threads at its end):
// its vector j starts at column start + (j * G + t) * N. A misaligned row's loads then go out as
// plain 16-byte loads, back to back. Chosen vector by vector, the branches kept the loads apart: in
// the bf16 loss alone at V = 50257 ncu counted 7.5 long-scoreboard stalls an issued instruction
// (aligned rows: 2.3-2.5) and 56 % of DRAM's peak; with this test, 2.9 and 72 %, and the kernel
// went from 64 to 99 % of the copy's rate (H200, 2026-12-03).
template <int VECS, int N>
__device__ __forceinline__ bool ends_inside(int start, int t, int G, int cols) {
  return start + ((VECS - 1) * G + t) * N + N <= cols;
}

// The part of a row that one thread owns, held in registers as floats: VECS vectors; vector j of
// thread t (of the G threads sharing the row) starts at element (j * G + t) * Vec<T>::N, so
// neighbouring threads touch neighbouring 16-byte chunks (coalesced).
template <class T, int VECS, bool ALIGNED>
struct RowPart {
  static constexpr int N = Vec<T>::N;
  float v[VECS * N];
  int lead = 0;  // misaligned rows: elements between the row's start and the boundary before it

  // ALIGNED: cols is a multiple of N and both pointers are 16-byte aligned (checked on the host),
  // so every row starts on a 16-byte boundary. Otherwise (lead_of() above says how) the
  // vectors shift to the boundary before the row. A template parameter, not a runtime flag: the
  // misaligned path costs registers even when it never runs. Missing elements are -inf. xr is
  // the row's start; the thread's vectors start at position base (the 2-pass kernel walks the row).
  template <class Row>
  __device__ __forceinline__ void load(const T* __restrict__ xr, int cols, int t, int G, Row& row, int base = 0) {
    if constexpr (!ALIGNED) lead = lead_of(xr);
    // Misaligned rows take this path where the thread holds whole vectors, except in 16-bit rows
    // that store: with both paths, some of their instances spilled (NVRTC's report); fp32 and
    // loss-only instances did not.
    if (ALIGNED || ((!Row::WRITES || N == 4) && ends_inside<VECS, N>(base - lead, t, G, cols))) {
#pragma unroll
      for (int j = 0; j < VECS; ++j) {
        const int c0 = base + (j * G + t) * N - lead;  // the vector's first column (below 0: before the row)
        Vec<T>::unpack(load16_if(xr + c0, row.reads(c0, N, cols), Vec<T>::NEG_INF_WORD), v + j * N);
        row.see(xr, c0, N);
      }
      if (!ALIGNED && base - lead + t * N < 0) {  // the row's first vector: its columns below 0 dropped
#pragma unroll
        for (int e = 0; e < N; ++e)
          if (e < lead) v[e] = A07_NEG_INF;
      }
    } else {  // a thread at the row's end
#pragma unroll
      for (int j = 0; j < VECS; ++j) {
        const int c0 = base + (j * G + t) * N - lead;
        if (c0 + N <= cols) {  // ends inside the row: one vector, its columns below 0 dropped
          Vec<T>::unpack(load16_if(xr + c0, row.reads(c0, N, cols), Vec<T>::NEG_INF_WORD), v + j * N);
          if (c0 < 0) {
#pragma unroll
            for (int e = 0; e < N; ++e)
              if (c0 + e < 0) v[j * N + e] = A07_NEG_INF;
          }
        } else {  // reaches past the row's end: element by element, nothing read past it
#pragma unroll
          for (int e = 0; e < N; ++e)
            v[j * N + e] = c0 + e >= 0 && row.reads(c0 + e, 1, cols) ? Vec<T>::scalar(xr[c0 + e]) : A07_NEG_INF;
        }
        row.see(xr, c0, N);
      }
    }
    if constexpr (Row::SCORES) row.template score_part<VECS, N, ALIGNED>(v, base - lead, t, G);
  }

  // This thread's (m, s); afterwards v holds exp(x - m_thread): one exp per element, ever.
  template <class Row>
  __device__ __forceinline__ typename Row::State stats(const Row& row, int t, int G, int base = 0) {
    float m = A07_NEG_INF;
#pragma unroll
    for (int i = 0; i < VECS * N; ++i) m = max_nan(m, v[i]);
    float sx = 0.0f;  // the sum of the scores the row holds (SUMS, and only where the Row wants it)
    if constexpr (Row::SUMS) {
      if (row.wants_sum()) {  // one branch a thread: the 16-bit loss streams at the issue rate, not DRAM's
#pragma unroll
        for (int j = 0; j < VECS; ++j) {
          const int c0 = base - lead + (j * G + t) * N;
          // aligned rows end on a vector boundary: a vector is wholly in the row or wholly padding
#pragma unroll
          for (int e = 0; e < N; ++e)  // columns in [0, hi): one unsigned compare
            if (ALIGNED ? c0 < row.hi : unsigned(c0 + e) < unsigned(row.hi)) sx += v[j * N + e];
        }
      }
    }
    const float m_sub = m == A07_NEG_INF ? 0.0f : m;  // no elements: every exp below is 0
    const float k = row.exp_factor();  // log2(e), or a folded scale times it (ScaleMaskRow)
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < VECS; ++j) {
      float* w = v + j * N;
      // a vector the Row's span hides was never read: its exps are 0, with no exp computed (a
      // causal row hides half its vectors on average). A NaN elsewhere still reaches every
      // column through the store's factor. Aligned 16-bit rows only: fp32 rows measured the same
      // either way (bench/sweeps/fast_configs.py --claim skip-hidden), and misaligned and fp32
      // cluster instances spilled with it (NVRTC's report).
      if constexpr (Row::SCORES && ALIGNED && N == 8 && A07_SKIP_HIDDEN) {
        if (row.hidden(base - lead + (j * G + t) * N, N)) {
#pragma unroll
          for (int e = 0; e < N; ++e) w[e] = 0.0f;
          continue;
        }
      }
#pragma unroll
      for (int e = 0; e < N; ++e) s += (w[e] = exp_minus(w[e], m_sub, k));
    }
    return make_state<typename Row::State>(row.state_max(m), s, sx);
  }

  // y = exp(x - M) / S = exp(x - m_thread) * exp(m_thread - M) / S. A row whose max is -inf
  // (fully masked) is written as zeros; a thread whose elements are all -inf needs no test of its
  // own (exp(-inf - M) = 0 for any other M, and a NaN M keeps the row NaN). The Row turns each
  // probability into what is written (OUTPUTS). Misaligned rows store whole vectors where the
  // output row has the input's lead (same offset past a boundary), elements elsewhere.
  template <class Row>
  __device__ __forceinline__ void store(T* __restrict__ yr, int cols, int t, int G, float m_thread, MS row_ms,
                                        const Row& row, int base = 0) {
    const float f = row_ms.m == A07_NEG_INF ? 0.0f : fast_exp(m_thread - row_ms.m) / row_ms.s;
#pragma unroll
    for (int i = 0; i < VECS * N; ++i) {
      v[i] *= f;
      if constexpr (Row::OUTPUTS) v[i] = row.out(base - lead + ((i / N) * G + t) * N + i % N, v[i]);
    }
    const bool same_lead = ALIGNED || lead_of(yr) == lead;
#pragma unroll
    for (int j = 0; j < VECS; ++j) {
      const int c0 = base + (j * G + t) * N - lead;
      if (ALIGNED) {
        if (c0 < cols) *reinterpret_cast<uint4*>(yr + c0) = Vec<T>::pack(v + j * N);
      } else if (same_lead && c0 >= 0 && c0 + N <= cols) {
        *reinterpret_cast<uint4*>(yr + c0) = Vec<T>::pack(v + j * N);
      } else {
#pragma unroll
        for (int e = 0; e < N; ++e)
          if (unsigned(c0 + e) < unsigned(cols)) yr[c0 + e] = Vec<T>::from_float(v[j * N + e]);
      }
    }
    row.stored(yr);
  }
};

// The part of a 16-bit row that one thread of a cluster owns, kept as the raw 16-bit values, two
// per 32-bit register (same element ownership as RowPart). Held as floats the same bytes take twice
// the registers, so a block would hold half as many bytes, or an SM half as many blocks, and too
// few loads would be in flight to stream long 16-bit rows. The price: exp is computed twice per
// element, once for the sum and once for the output; affordable only because exp2 is the
// one-instruction .ftz form. The max is taken on the pairs as they are, one instruction per two
// values.
template <bool B> struct Whole { static constexpr bool value = B; };

template <class T, int VECS, bool ALIGNED>
struct RowBits {
  static constexpr int N = Vec<T>::N;  // 8 values, 4 words, one uint4
  using Bits = typename Vec<T>::Bits;
  static constexpr unsigned NEG_INF2 = Bits::NEG_INF2;  // two -inf
  // load16_if (the L2-hinted load) takes a few more registers than the plain load. The instances
  // with 16 vectors a thread, and fp16's (its conversions need registers of their own), sit at
  // their launch bound and spilled with it (NVRTC's report), so they keep the plain load; the
  // others take the hint like every other fast kernel (tests/test_fast.py holds every instance
  // free of spills).
  static constexpr bool HINTED = Bits::SHIFT_UNPACK && VECS <= 8;
  uint4 u[VECS];
  int lead = 0;  // misaligned rows: as RowPart's (lead_of())

  template <class Row>
  __device__ __forceinline__ void load(const T* __restrict__ xr, int cols, int t, int G, Row& row) {
    static_assert(!(Row::SUMS && Row::SCORES), "RowBits sums the raw values: a Row that sums has no scores");
    if constexpr (!ALIGNED) lead = lead_of(xr);
    const bool whole = ALIGNED || ends_inside<VECS, N>(-lead, t, G, cols);  // (then no element loads)
#pragma unroll
    for (int j = 0; j < VECS; ++j) {
      const int c0 = (j * G + t) * N - lead;
      if (whole || c0 + N <= cols) {  // one vector (misaligned: the columns below 0 are dropped below)
        const bool inside = row.reads(c0, N, cols);
        if constexpr (HINTED) u[j] = load16_if(xr + c0, inside, NEG_INF2);
        else u[j] = inside ? *reinterpret_cast<const uint4*>(xr + c0) : make_uint4(NEG_INF2, NEG_INF2, NEG_INF2, NEG_INF2);
      } else {  // reaches past the row's end: one element at a time, paired up; missing ones are -inf
        unsigned w[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int c = c0 + 2 * k;
          w[k] = (c >= 0 && row.reads(c, 1, cols) ? xr[c].bits : NEG_INF2 & 0xffffu) |
                 (c + 1 >= 0 && row.reads(c + 1, 1, cols) ? xr[c + 1].bits : NEG_INF2 >> 16) << 16;
        }
        u[j] = make_uint4(w[0], w[1], w[2], w[3]);
      }
    }
    // Asked once, after the loads: asked vector by vector, the test and its load sat between the
    // row's loads and the 16-bit cross-entropy ran 1 to 1.5 points slower. RowPart keeps the
    // per-vector form: asked once there, the fp32 cluster row of 262144 columns ran a fifth slower,
    // not understood (docs/performance.md, the cross-entropy section)
    row.see_all(xr, t * N - lead, G * N, VECS, N);
    // The row's first vector (thread 0's first): its columns below 0 dropped once, after the loads,
    // not vector by vector inside the loop, where the test's branch would sit between the loads
    if (!ALIGNED && t * N - lead < 0) {
      unsigned w[4] = {u[0].x, u[0].y, u[0].z, u[0].w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        if (2 * k < lead) w[k] = (w[k] & 0xffff0000u) | (NEG_INF2 & 0xffffu);
        if (2 * k + 1 < lead) w[k] = (w[k] & 0xffffu) | (NEG_INF2 & 0xffff0000u);
      }
      u[0] = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }

  // Element 2k (lo) or 2k + 1 (hi) of vector j as the softmax sees it: the raw value, or the Row's
  // score of it (SCORES: recomputed wherever it is needed, registers are what this path lacks).
  // WHOLE: the vector lies inside the Row's span, so no column needs its own test.
  template <bool WHOLE, class Row>
  static __device__ __forceinline__ float value(const Row& row, unsigned w, bool high, int c) {
    const float x = high ? Bits::hi(w) : Bits::lo(w);
    if constexpr (!Row::SCORES) return x;
    else if constexpr (WHOLE) return row.score_inside(c, x);
    else return row.score(c, x);
  }
  // Calls f(std::integral_constant-like WHOLE) for vector c0's case, or nothing where the Row's span
  // hides it: such a vector was never read, all its scores are -inf and its exps 0. A masked row
  // (causal: half the columns on average) so spends no arithmetic on what it does not see, and a
  // vector needs a test per column only where it straddles the span's edge.
  template <class Row, class F>
  static __device__ __forceinline__ void visit(const Row& row, int c0, F&& f) {
    if constexpr (!Row::SCORES) {
      f(Whole<true>{});
    } else if (!row.hidden(c0, N)) {
      if (row.whole(c0, N)) f(Whole<true>{});
      else f(Whole<false>{});
    }
  }

  // 2^(x log2(e) - bias) in the one-FFMA form (FFMA), or 2^((x - m) log2(e) - bias) with the
  // subtraction first. A template parameter, not a per-element select: the compiler may turn a
  // select into computing both exps, which is what this path cannot afford (see stats()).
  template <bool FFMA>
  static __device__ __forceinline__ float exp_of(float x, float m, float bias) {
    return FFMA ? fast_exp2(fmaf(x, LOG2E, -bias)) : fast_exp2(fmaf(x - m, LOG2E, -bias));
  }

  // The sum of the exps, and (SUMS) of the scores the row holds, in one sweep over the registers.
  template <bool FFMA, class Row>
  __device__ __forceinline__ float sum_exps(float m, float bias, const Row& row, int t, int G, float& sx) const {
    float s_lo = 0.0f, s_hi = 0.0f;
#pragma unroll
    for (int j = 0; j < VECS; ++j) {
      const unsigned w[4] = {u[j].x, u[j].y, u[j].z, u[j].w};
      const int c0 = (j * G + t) * N - lead;
      visit(row, c0, [&](auto whole) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          s_lo += exp_of<FFMA>(value<decltype(whole)::value>(row, w[k], false, c0 + 2 * k), m, bias);
          s_hi += exp_of<FFMA>(value<decltype(whole)::value>(row, w[k], true, c0 + 2 * k + 1), m, bias);
          // (SUMS rows are never SCORES rows: the raw values are the scores)
          if constexpr (Row::SUMS) {
            if (row.wants_sum()) {
              const float lo = Bits::lo(w[k]), hi = Bits::hi(w[k]);
              // aligned rows end on a vector boundary: a vector is wholly in the row or wholly padding
              if constexpr (ALIGNED) sx += c0 < row.hi ? lo + hi : 0.0f;
              else sx += (unsigned(c0 + 2 * k) < unsigned(row.hi) ? lo : 0.0f) +
                         (unsigned(c0 + 2 * k + 1) < unsigned(row.hi) ? hi : 0.0f);
            }
          }
        }
      });
    }
    return s_lo + s_hi;
  }

  // This thread's (m, s): the max over pairs (over scores, where the Row computes them), then one
  // exp per element for the sum.
  template <class Row>
  __device__ __forceinline__ typename Row::State stats(const Row& row, int t, int G) const {
    float m;
    if constexpr (Row::SCORES) {
      m = A07_NEG_INF;
#pragma unroll
      for (int j = 0; j < VECS; ++j) {
        const unsigned w[4] = {u[j].x, u[j].y, u[j].z, u[j].w};
        const int c0 = (j * G + t) * N - lead;
        visit(row, c0, [&](auto whole) {
#pragma unroll
          for (int k = 0; k < 8; ++k) m = max_nan(m, value<decltype(whole)::value>(row, w[k / 2], k % 2, c0 + k));
        });
      }
    } else {
      unsigned pair = NEG_INF2;
#pragma unroll
      for (int j = 0; j < VECS; ++j)
        pair = Bits::max2(Bits::max2(pair, Bits::max2(u[j].x, u[j].y)), Bits::max2(u[j].z, u[j].w));
      m = max_nan(Bits::lo(pair), Bits::hi(pair));
    }
    // This path computes two exps per element and is bound by arithmetic, not memory: the exp's
    // subtraction (exp_minus) cost 5-8 % on long bf16 rows. So where it is exact enough the exp
    // takes the one-FFMA form 2^(x log2(e) - m log2(e)), whose only error is m log2(e) rounded to
    // fp32: at most half a unit in its last place, 2^-12 below |m log2(e)| = 4096 (a relative
    // error of 1.7e-4 in the result, against bf16's 3.9e-3 rounding). Beyond it, for rows with
    // scores above 2839 in magnitude, where the rounding would grow with m (and m log2(e) overflows
    // past 2.4e38), the thread takes the subtraction first. The choice is one branch per thread,
    // around the whole loop.
    const float m_scaled = m == A07_NEG_INF ? 0.0f : m * LOG2E;  // no elements: every exp below is 0
    const bool ffma = fabsf(m_scaled) < FFMA_EXP_LIMIT;           // false for a NaN or infinite max too
    float sx = 0.0f;  // the sum of the scores the row holds (SUMS only)
    const float s = ffma ? sum_exps<true>(m, m_scaled, row, t, G, sx) : sum_exps<false>(m, 0.0f, row, t, G, sx);
    return make_state<typename Row::State>(m, s, sx);
  }

  template <bool FFMA, class Row>
  __device__ __forceinline__ void store_exps(T* __restrict__ yr, int cols, int t, int G, float m, float bias,
                                             const Row& row) const {
    const bool same_lead = ALIGNED || lead_of(yr) == lead;  // whole vectors where the output lines up
    // what a hidden column gets: exp(-inf - M) / S = 0, or NaN where the row has no softmax (M is
    // NaN, or S is, from an inf - inf: bias is then NaN too). A NaN or +inf score makes the whole
    // row NaN, as it does unmasked (docs/contract.md); hidden columns are no exception.
    const float qnan = __int_as_float(0x7fc00000);
    const unsigned hidden2 = m != m || bias != bias ? Bits::pack2(qnan, qnan) : 0u;
#pragma unroll
    for (int j = 0; j < VECS; ++j) {
      const int c0 = (j * G + t) * N - lead;
      const unsigned w[4] = {u[j].x, u[j].y, u[j].z, u[j].w};
      unsigned out[4] = {hidden2, hidden2, hidden2, hidden2};
      static_assert(!(Row::OUTPUTS && Row::SCORES), "a hidden column's output is the probability 0 itself");
      visit(row, c0, [&](auto whole) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int c = c0 + 2 * k;
          if constexpr (Row::OUTPUTS) {
            const bool any = FFMA || m != A07_NEG_INF;
            const float lo = any ? exp_of<FFMA>(value<decltype(whole)::value>(row, w[k], false, c), m, bias) : 0.0f;
            const float hi = any ? exp_of<FFMA>(value<decltype(whole)::value>(row, w[k], true, c + 1), m, bias) : 0.0f;
            out[k] = Bits::pack2(row.out(c, lo), row.out(c + 1, hi));
          } else {
            out[k] = FFMA || m != A07_NEG_INF
                         ? Bits::pack2(exp_of<FFMA>(value<decltype(whole)::value>(row, w[k], false, c), m, bias),
                                       exp_of<FFMA>(value<decltype(whole)::value>(row, w[k], true, c + 1), m, bias))
                         : 0u;
          }
        }
      });
      if (ALIGNED) {
        if (c0 < cols) *reinterpret_cast<uint4*>(yr + c0) = make_uint4(out[0], out[1], out[2], out[3]);
      } else if (same_lead && c0 >= 0 && c0 + N <= cols) {
        *reinterpret_cast<uint4*>(yr + c0) = make_uint4(out[0], out[1], out[2], out[3]);
      } else {
#pragma unroll
        for (int e = 0; e < N; ++e)
          if (unsigned(c0 + e) < unsigned(cols)) yr[c0 + e] = T{static_cast<unsigned short>(out[e / 2] >> (16 * (e % 2)))};
      }
    }
  }

  // y = exp(x - M) / S = 2^(x log2(e) - (M log2(e) + log2(S))): the second exp, and no divide;
  // 2^((x - M) log2(e) - log2(S)) where M log2(e) + log2(S) is too large to round finely enough
  // (see stats()). A fully masked row (M = -inf) is written as zeros: it fails the FFMA test
  // (c = -inf), and the subtraction-first form writes zeros for it.
  template <class Row>
  __device__ __forceinline__ void store(T* __restrict__ yr, int cols, int t, int G, float, MS row_ms, const Row& row) const {
    const float log2_s = __log2f(row_ms.s);
    const float c = fmaf(row_ms.m, LOG2E, log2_s);
    if (fabsf(c) < FFMA_EXP_LIMIT) store_exps<true>(yr, cols, t, G, row_ms.m, c, row);
    else store_exps<false>(yr, cols, t, G, row_ms.m, log2_s, row);
    row.stored(yr);
  }
};

// What a thread of a warp or block row holds: floats (one exp per element), or, where the strategy
// table asks for it (RAW), a 16-bit row's raw bits: twice the bytes in the same registers, so twice
// the loads in flight for an SM's register file, for a second exp per element (RowBits). fp32 rows
// have no raw form.
template <class T, int VECS, bool ALIGNED, bool RAW> struct PartOf { using type = RowPart<T, VECS, ALIGNED>; };
template <class T, int VECS, bool ALIGNED> struct PartOf<T, VECS, ALIGNED, true> {
  using type = RowBits<T, VECS, ALIGNED>;
  static_assert(Vec<T>::N == 8, "raw rows are 16-bit rows");
};

__device__ __forceinline__ MS as_ms(MS st) { return st; }
__device__ __forceinline__ MS as_ms(MSX st) { return MS{st.m, st.s}; }

// Butterfly over the GROUP lanes that share a row (xor offsets below GROUP stay inside it).
template <int GROUP, class State>
__device__ __forceinline__ State group_combine(State st) {
#pragma unroll
  for (int offset = GROUP / 2; offset > 0; offset /= 2) st = combine(st, shfl_xor(st, offset));
  return st;
}

// Each strategy below is a __device__ body, templated on the row operation, and one kernel per
// operation (at the end of the file) that passes its arguments in.

// Short rows: GROUP lanes (a power of two, at most 32) per row, ROWS rows per thread, so each
// thread has ROWS * VECS 16-byte loads in flight before its first reduction. No barrier at all.
// Blocks of A07_FAST_WARP_THREADS (course_constants.h): two warps, enough for many resident blocks
// per SM without the barrier-free groups idling; one warp per block leaves too few warps per SM.
template <class T, int VECS, int GROUP, int ROWS, bool ALIGNED, bool RAW, class Op>
__device__ __forceinline__ void warp_rows(const T* __restrict__ x, T* __restrict__ y, int rows, int cols, const Op& op) {
  const int groups_per_block = blockDim.x / GROUP;
  const int t = threadIdx.x % GROUP;
  const long long first = (long long)blockIdx.x * groups_per_block * ROWS + threadIdx.x / GROUP;
  typename PartOf<T, VECS, ALIGNED, RAW>::type part[ROWS];
  typename Op::Row ro[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const long long row = first + (long long)r * groups_per_block;
    if (row < rows) {
      ro[r] = op.row(int(row), cols);
      part[r].load(x + row * cols, cols, t, GROUP, ro[r]);
    } else {
      part[r].load(x, 0, t, GROUP, ro[r]);  // no elements: all -inf, no memory touched
    }
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const long long row = first + (long long)r * groups_per_block;
    const auto mine = part[r].stats(ro[r], t, GROUP);
    const auto total = group_combine<GROUP>(mine);  // every lane of the warp takes part
    if (row < rows) {
      ro[r].reduced(total, t == 0);
      if constexpr (Op::Row::WRITES) part[r].store(y + row * cols, cols, t, GROUP, mine.m, as_ms(total), ro[r]);
    }
  }
}

// Medium rows: one block per row; blockDim.x * VECS vectors cover the row. MAX_THREADS (the
// launch bound, >= blockDim.x) tells the compiler how many registers a thread may use: 64 at 1024
// threads, 128 at 512, so a thread can hold 64 floats of its row only in smaller blocks.
template <class T, int VECS, bool ALIGNED, bool RAW, class Op>
__device__ __forceinline__ void block_row(const T* __restrict__ x, T* __restrict__ y, int cols, const Op& op) {
  const long long row = blockIdx.x;
  auto ro = op.row(int(row), cols);
  typename PartOf<T, VECS, ALIGNED, RAW>::type part;
  part.load(x + row * cols, cols, threadIdx.x, blockDim.x, ro);
  const auto mine = part.stats(ro, threadIdx.x, blockDim.x);
  const auto total = block_reduce(mine);
  ro.reduced(total, threadIdx.x == 0);
  if constexpr (Op::Row::WRITES) part.store(y + row * cols, cols, threadIdx.x, blockDim.x, mine.m, as_ms(total), ro);
}

#if A07_HAS_CLUSTERS
// The row's (M, S) from every block's (m, s), through distributed shared memory, without a cluster
// barrier: each block posts a 16-byte message (m, s, the next row claimed, unused) into slot [its
// rank] of every block's inbox (st.async), and each block's mbarrier completes once all CLUSTER
// messages have landed. Every warp then merges the pairs with the same combine() (lane l reads
// pair l % CLUSTER, a butterfly over CLUSTER lanes). The unused slot carries MSX's third field. Two inboxes alternate between rows: a block
// can post row i + 2 only after every block has posted row i + 1, which each does only after
// reading its inbox for row i.
template <int CLUSTER, class State>
struct Mailbox {
  float4 msg[2][CLUSTER];
  unsigned long long full[2];
  int claimed[2];  // block 0's thread 0 parks the row it claimed here for its senders (the same
                   // alternation keeps it from being overwritten before they have read it)

  __device__ __forceinline__ void init() {
    if (threadIdx.x == 0) mbar_init(&full[0], 1), mbar_init(&full[1], 1);
  }
  // Call from every thread of the block, for the block's i-th row, with the block's (m, s), after
  // a block barrier that follows the claim (block_combine() has two). Returns the row's (M, S);
  // `claim` becomes the row block 0 claimed.
  __device__ __forceinline__ State exchange(State block_state, int i, int& claim) {
    const int box = i & 1;
    if (threadIdx.x == 0) mbar_expect(&full[box], CLUSTER * sizeof(float4));
    if (threadIdx.x < CLUSTER)
      cluster_send_float4(&msg[box][cluster_rank()], &full[box], threadIdx.x,
                          make_float4(block_state.m, block_state.s, __int_as_float(claimed[box]), sum_of(block_state)));
    mbar_wait(&full[box], (i >> 1) & 1);
    const float4 p = msg[box][threadIdx.x % warpSize % CLUSTER];
    claim = __float_as_int(msg[box][0].z);
    return group_combine<CLUSTER>(make_state<State>(p.x, p.y, p.w));
  }
};

// What a cluster thread holds: fp32 as floats (one exp per element), 16-bit types as raw bits.
template <class T, int VECS, bool ALIGNED> struct ClusterPart { using type = RowBits<T, VECS, ALIGNED>; };
template <int VECS, bool ALIGNED> struct ClusterPart<float, VECS, ALIGNED> { using type = RowPart<float, VECS, ALIGNED>; };

// Long rows: a cluster of CLUSTER blocks (on CLUSTER SMs, or fewer SMs with MIN_BLOCKS blocks
// each) holds one row in their registers. Each block reduces its share to one (m, s); the Mailbox
// merges the blocks' pairs. The row is read once and written once however long it is, up to
// CLUSTER * blockDim.x * VECS vectors. CLUSTER may be 16 (non-portable: the launcher sets the
// function attribute that allows it). MIN_BLOCKS (launch bounds) caps registers so that that
// many blocks fit on one SM: while one block reduces or waits for its cluster, the others load.
//
// The grid is what fits on the GPU at once (the launcher asks the driver), and the clusters share
// the rows dynamically: cluster c starts with row c, every later row comes from a ticket counter
// (`tickets`, zeroed by the launcher): block 0 claims one per row and its exchange message hands
// it to every block of the cluster. Why not simpler:
//   - one row per cluster launch pays two cluster barriers per row;
//   - fixed shares (cluster c takes rows c, c + clusters, ...) make the slowest SM's share the
//     kernel's time (docs/performance.md has both measurements).
template <class T, int VECS, int CLUSTER, int MAX_THREADS, bool ALIGNED, class Op>
__device__ __forceinline__ void cluster_rows(const T* __restrict__ x, T* __restrict__ y, int rows, int cols,
                                             int* __restrict__ tickets, const Op& op) {
  using State = typename Op::Row::State;
  __shared__ Mailbox<CLUSTER, State> mail;
  using Part = typename ClusterPart<T, VECS, ALIGNED>::type;
  // The launch is always MAX_THREADS threads a block, so the threads sharing a row are a constant
  // and the distances between a thread's vectors are compile-time offsets. With blockDim.x here
  // the row loop keeps one 64-bit offset per vector alive, which costs the registers that decide
  // how many blocks fit on an SM.
  constexpr int G = MAX_THREADS * CLUSTER;
  const int t = cluster_rank() * MAX_THREADS + threadIdx.x;
  int row = blockIdx.x / CLUSTER;
  mail.init();
  cluster_arrive();  // every block's mailbox is set up before anyone posts to it
  cluster_wait();
  for (int i = 0; row < rows; ++i) {
    // Block 0 claims the cluster's next row after issuing its loads, so the atomic's round trip
    // overlaps them instead of holding warp 0, and with it the block, back; misaligned rows claim
    // first (it spares the element loads a register).
    const auto claim = [&] {
      if (cluster_rank() == 0 && threadIdx.x == 0) mail.claimed[i & 1] = gridDim.x / CLUSTER + atomicAdd(tickets, 1);
    };
    if constexpr (!ALIGNED) claim();
    auto ro = op.row(row, cols);
    Part part;
    part.load(x + (long long)row * cols, cols, t, G, ro);
    if constexpr (ALIGNED) claim();
    const State mine = part.stats(ro, t, G);
    int claimed;
    const State total = mail.exchange(block_reduce(mine), i, claimed);
    ro.reduced(total, t == 0);
    if constexpr (Op::Row::WRITES) part.store(y + (long long)row * cols, cols, t, G, mine.m, as_ms(total), ro);
    row = claimed;
  }
  cluster_arrive();  // no block leaves while a message to it could still be on its way
  cluster_wait();
}
#endif

// Any length, any hardware: one block per row, (m, s) in one read, then a second read to write.
// VECS vectors per thread per step keep enough loads in flight. For rows of a few hundred KB the
// second read mostly hits L2 (the rows in flight at once are far smaller than its 50 MB).
template <class T, int VECS, bool ALIGNED, class Op>
__device__ __forceinline__ void twopass_row(const T* __restrict__ x, T* __restrict__ y, int cols, const Op& op) {
  using State = typename Op::Row::State;
  const long long row = blockIdx.x;
  const T* xr = x + row * cols;
  T* yr = y + row * cols;
  auto ro = op.row(int(row), cols);
  const int step = blockDim.x * VECS * Vec<T>::N;
  const int span = ALIGNED ? cols : cols + lead_of(xr);  // grid positions: misaligned rows start early
  State st = make_state<State>(A07_NEG_INF, 0.0f, 0.0f);
  for (int base = 0; base < span; base += step) {
    RowPart<T, VECS, ALIGNED> part;
    part.load(xr, cols, threadIdx.x, blockDim.x, ro, base);
    st = combine(st, part.stats(ro, threadIdx.x, blockDim.x, base));
  }
  const State total = block_reduce(st);
  ro.reduced(total, threadIdx.x == 0);
  if constexpr (!Op::Row::WRITES) return;
  for (int base = 0; base < span; base += step) {
    RowPart<T, VECS, ALIGNED> part;
    part.load(xr, cols, threadIdx.x, blockDim.x, ro, base);
    const auto mine = part.stats(ro, threadIdx.x, blockDim.x, base);
    part.store(yr, cols, threadIdx.x, blockDim.x, mine.m, as_ms(total), ro, base);
  }
}

// ------------------------------------------------------------------------------------------------
// The kernels: one per strategy and row operation, each only passing its arguments to the body.
// Launch bounds and cluster dimensions belong to the kernel, so they are stated here.
// An operation's extra parameters travel as one parenthesised list (its leading comma included) and
// its Op as one parenthesised expression, so that their commas do not split the macros' arguments.
#define A07_UNPAREN(...) __VA_ARGS__
#define A07_SCALE_MASK_PARAMS                                                                          \
  (, float scale, int heads, int q_len, int causal, int window, const int* __restrict__ valid_len,      \
   const T* __restrict__ mask, long long mask_sb, long long mask_sh, long long mask_sq)
#define A07_SCALE_MASK_OP(MASKED) \
  (ScaleMaskOp<T, MASKED>{scale, heads, q_len, causal, window, valid_len, mask, mask_sb, mask_sh, mask_sq})
#define A07_CROSS_ENTROPY_PARAMS                                                                       \
  (, const long long* __restrict__ target, float* __restrict__ loss, const float* __restrict__ grad_scale, \
   long long ignore_index, float label_smoothing, float z_loss)
#define A07_CROSS_ENTROPY_OP(GRAD) (CrossEntropyOp<T, GRAD>{target, loss, grad_scale, ignore_index, label_smoothing, z_loss})

// A variant for a measurement (bench/sweeps/fast_configs.py --claim block-occupancy):
// -DA07_BLOCK_MIN_THREADS=2048 holds the 16-bit block instances of two vectors a thread to 2048
// threads an SM (32 registers). The 16-bit scale-mask rows stream closer to the copy that way,
// but several instances then spill (NVRTC's report), so the shipped build leaves ptxas its choice.
// CUDA only: HIP's second launch bound means something else.
#ifndef A07_BLOCK_MIN_THREADS
#define A07_BLOCK_MIN_THREADS 0
#endif
// Raw 16-bit rows (RAW) hold their bytes in half the registers, but the compiler, left free, keeps
// the unpacked floats across the passes and uses as many as the float rows do. Their launch bound
// promises A07_RAW_MIN_THREADS threads an SM (64 registers): spill-free (NVRTC's report, held by
// tests/test_fast.py) for the span op, whose mask tensor is compiled out (ScaleMaskRow<T, false>).
#ifndef A07_RAW_MIN_THREADS
#define A07_RAW_MIN_THREADS 1024
#endif
#if A07_HIP_BUILD
#define A07_BLOCK_MIN_BLOCKS(T, VECS, MAX_THREADS) 0
#define A07_RAW_MIN_BLOCKS(MAX_THREADS) 0
#else
#define A07_BLOCK_MIN_BLOCKS(T, VECS, MAX_THREADS) (sizeof(T) == 2 && (VECS) <= 2 ? A07_BLOCK_MIN_THREADS / (MAX_THREADS) : 0)
#define A07_RAW_MIN_BLOCKS(MAX_THREADS) (A07_RAW_MIN_THREADS / (MAX_THREADS) > 1 ? A07_RAW_MIN_THREADS / (MAX_THREADS) : 0)
#endif
// RAW (PartOf): a 16-bit row held as raw bits; named only where true (fast.plan()).
#define A07_WARP_KERNEL(NAME, PARAMS, OP)                                                              \
  template <class T, int VECS, int GROUP, int ROWS, bool ALIGNED, bool RAW = false>                    \
  __global__ void __launch_bounds__(A07_FAST_WARP_THREADS)                                             \
      NAME(const T* __restrict__ x, T* __restrict__ y, int rows, int cols A07_UNPAREN PARAMS) {        \
    warp_rows<T, VECS, GROUP, ROWS, ALIGNED, RAW>(x, y, rows, cols, OP);                               \
  }
#define A07_BLOCK_KERNEL(NAME, PARAMS, OP)                                                             \
  template <class T, int VECS, int MAX_THREADS, bool ALIGNED, bool RAW = false>                        \
  __global__ void __launch_bounds__(MAX_THREADS, RAW ? A07_RAW_MIN_BLOCKS(MAX_THREADS) : A07_BLOCK_MIN_BLOCKS(T, VECS, MAX_THREADS)) \
      NAME(const T* __restrict__ x, T* __restrict__ y, int rows, int cols A07_UNPAREN PARAMS) {        \
    block_row<T, VECS, ALIGNED, RAW>(x, y, cols, OP);                                                  \
  }
#define A07_TWOPASS_KERNEL(NAME, PARAMS, OP)                                                           \
  template <class T, int VECS, bool ALIGNED>                                                           \
  __global__ void __launch_bounds__(A07_FAST_TWOPASS_THREADS)                                          \
      NAME(const T* __restrict__ x, T* __restrict__ y, int rows, int cols A07_UNPAREN PARAMS) {        \
    twopass_row<T, VECS, ALIGNED>(x, y, cols, OP);                                                     \
  }
// MIN_BLOCKS 1 is passed as 0, no minimum: with an explicit 1 ptxas spilled in the misaligned fp32
// instances.
#if A07_HAS_CLUSTERS
#define A07_CLUSTER_KERNEL(NAME, PARAMS, OP)                                                           \
  template <class T, int VECS, int CLUSTER, int MAX_THREADS, int MIN_BLOCKS, bool ALIGNED>             \
  __global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(MAX_THREADS, MIN_BLOCKS > 1 ? MIN_BLOCKS : 0) \
      NAME(const T* __restrict__ x, T* __restrict__ y, int rows, int cols, int* __restrict__ tickets    \
           A07_UNPAREN PARAMS) {                                                                       \
    cluster_rows<T, VECS, CLUSTER, MAX_THREADS, ALIGNED>(x, y, rows, cols, tickets, OP);              \
  }
#else
#define A07_CLUSTER_KERNEL(NAME, PARAMS, OP)
#endif
#define A07_ROW_KERNELS(PREFIX, PARAMS, OP)          \
  A07_WARP_KERNEL(PREFIX##_warp, PARAMS, OP)         \
  A07_BLOCK_KERNEL(PREFIX##_block, PARAMS, OP)       \
  A07_CLUSTER_KERNEL(PREFIX##_cluster, PARAMS, OP)   \
  A07_TWOPASS_KERNEL(PREFIX##_2pass, PARAMS, OP)

A07_ROW_KERNELS(softmax_fast, (), SoftmaxOp{})
A07_ROW_KERNELS(scale_mask_softmax_fast, A07_SCALE_MASK_PARAMS, A07_SCALE_MASK_OP(true))
// the same with the mask from indices alone (causal, window, valid length): no additive mask tensor
A07_ROW_KERNELS(scale_span_softmax_fast, A07_SCALE_MASK_PARAMS, A07_SCALE_MASK_OP(false))
// scale_mask_softmax with nothing masked and a positive scale
A07_ROW_KERNELS(scaled_softmax_fast, (, float scale), (ScaledOp{scale}))
A07_ROW_KERNELS(cross_entropy_fast, A07_CROSS_ENTROPY_PARAMS, A07_CROSS_ENTROPY_OP(true))
// the loss alone: the logits read once, nothing written but one float a row (y is not touched)
A07_ROW_KERNELS(cross_entropy_loss_fast, A07_CROSS_ENTROPY_PARAMS, A07_CROSS_ENTROPY_OP(false))

// The backward of the fused cross-entropy: the gradient its forward stored, times the upstream
// gradient, in place: g[row] *= factor[per_row ? row : 0]. A factor of exactly 1 (loss.backward()
// of a mean or a sum) leaves the row untouched and costs no memory traffic; the host never asks
// what the factor is (that would wait for the GPU). The rare other factors take the plain
// element-by-element loop: one read and one write of the gradient either way.
template <class T>
__global__ void __launch_bounds__(256) scale_rows_fast(T* __restrict__ g, int rows, int cols,
                                                       const float* __restrict__ factor, int per_row) {
  if (!per_row && factor[0] == 1.0f) return;
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const float f = factor[per_row ? row : 0];
    if (f == 1.0f) continue;
    T* gr = g + row * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) gr[c] = Vec<T>::from_float(Vec<T>::scalar(gr[c]) * f);
  }
}

// The control for "faster than the copy": a device-to-device copy of n 16-byte vectors whose loads
// carry the same L2 hint as the kernels above (load16_if). The benchmark times it beside the plain
// copy (a07_softmax/bench.py, copy_hinted_GBps in bench.json).
extern "C" __global__ void copy_hinted(const uint4* __restrict__ x, uint4* __restrict__ y, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y[i] = load16_if(x + i, true, 0u);
}

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
// Every kernel is a template; a07_softmax/fast.py instantiates the ones a shape needs through CuPy
// RawModule name expressions, e.g. "softmax_fast_warp<bf16_t, 2, 8, 1, true>", and the compile
// tests instantiate every one its strategy table can pick (fast.instances()).
#include "online_softmax.h"

#define LOG2E 1.4426950408889634f

// exp(x - m) as 2^((x - m) * log2(e)): one subtraction, one multiply, one EX2. The subtraction
// comes first, on purpose. The one-FFMA form 2^(x * log2(e) - m * log2(e)) scales x and m before
// subtracting, and both products overflow once |x| > FLT_MAX / log2(e) (2.4e38): a row filled with
// the dtype's lowest value (how model libraries build padding masks) then gives -inf - -inf = NaN.
// x - m <= 0 can only overflow towards -inf, whose exp is the 0 it should be. The extra instruction
// is free at the copy ceiling (docs/performance.md, results/nvidia-h200/bench.json).
__device__ __forceinline__ float exp_minus(float x, float m) { return fast_exp2((x - m) * LOG2E); }
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
#if A07_HAS_CLUSTERS
  __device__ static unsigned max2(unsigned a, unsigned b) { return max_bf162(a, b); }
#endif
};
struct F16Bits {
  __device__ static float lo(unsigned w) { return half_bits_to_float(static_cast<unsigned short>(w)); }
  __device__ static float hi(unsigned w) { return half_bits_to_float(static_cast<unsigned short>(w >> 16)); }
  __device__ static unsigned pack2(float a, float b) { return pack_half2(a, b); }
  static constexpr unsigned NEG_INF2 = 0xfc00fc00u;
  static constexpr bool SHIFT_UNPACK = false;
#if A07_HAS_CLUSTERS
  __device__ static unsigned max2(unsigned a, unsigned b) { return max_half2(a, b); }
#endif
};
template <> struct Vec<bf16_t> : Vec16<bf16_t, BF16Bits> {};
template <> struct Vec<f16_t> : Vec16<f16_t, F16Bits> {};

// The part of a row that one thread owns, held in registers as floats: VECS vectors; vector j of
// thread t (of the G threads sharing the row) starts at element (j * G + t) * Vec<T>::N, so
// neighbouring threads touch neighbouring 16-byte chunks (coalesced).
template <class T, int VECS, bool ALIGNED>
struct RowPart {
  static constexpr int N = Vec<T>::N;
  float v[VECS * N];

  // ALIGNED: cols is a multiple of N and both pointers are 16-byte aligned (checked on the host);
  // otherwise every element is loaded on its own. A template parameter, not a runtime flag: the
  // scalar path costs registers even when it never runs. Missing elements are -inf.
  __device__ __forceinline__ void load(const T* __restrict__ xr, int cols, int t, int G) {
#pragma unroll
    for (int j = 0; j < VECS; ++j) {
      const int c0 = (j * G + t) * N;
      if (ALIGNED) {
        Vec<T>::unpack(load16_if(xr + c0, c0 < cols, Vec<T>::NEG_INF_WORD), v + j * N);
      } else {
#pragma unroll
        for (int e = 0; e < N; ++e) v[j * N + e] = c0 + e < cols ? Vec<T>::scalar(xr[c0 + e]) : A07_NEG_INF;
      }
    }
  }

  // This thread's (m, s); afterwards v holds exp(x - m_thread): one exp per element, ever.
  __device__ __forceinline__ MS stats() {
    float m = A07_NEG_INF;
#pragma unroll
    for (int i = 0; i < VECS * N; ++i) m = max_nan(m, v[i]);
    const float m_sub = m == A07_NEG_INF ? 0.0f : m;  // no elements: every exp below is 0
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < VECS * N; ++i) s += (v[i] = exp_minus(v[i], m_sub));
    return MS{m, s};
  }

  // y = exp(x - M) / S = exp(x - m_thread) * exp(m_thread - M) / S. A row whose max is -inf
  // (fully masked) is written as zeros; a thread whose elements are all -inf needs no test of its
  // own (exp(-inf - M) = 0 for any other M, and a NaN M keeps the row NaN).
  __device__ __forceinline__ void store(T* __restrict__ yr, int cols, int t, int G, float m_thread, MS row) {
    const float f = row.m == A07_NEG_INF ? 0.0f : fast_exp(m_thread - row.m) / row.s;
#pragma unroll
    for (int i = 0; i < VECS * N; ++i) v[i] *= f;
#pragma unroll
    for (int j = 0; j < VECS; ++j) {
      const int c0 = (j * G + t) * N;
      if (ALIGNED) {
        if (c0 < cols) *reinterpret_cast<uint4*>(yr + c0) = Vec<T>::pack(v + j * N);
      } else {
#pragma unroll
        for (int e = 0; e < N; ++e)
          if (c0 + e < cols) yr[c0 + e] = Vec<T>::from_float(v[j * N + e]);
      }
    }
  }
};

// Butterfly over the GROUP lanes that share a row (xor offsets below GROUP stay inside it).
template <int GROUP>
__device__ __forceinline__ MS group_combine(MS st) {
#pragma unroll
  for (int offset = GROUP / 2; offset > 0; offset /= 2) st = combine(st, shfl_xor(st, offset));
  return st;
}

// Short rows: GROUP lanes (a power of two, at most 32) per row, ROWS rows per thread, so each
// thread has ROWS * VECS 16-byte loads in flight before its first reduction. No barrier at all.
// Blocks of A07_FAST_WARP_THREADS (course_constants.h): two warps, enough for many resident blocks
// per SM without the barrier-free groups idling; one warp per block leaves too few warps per SM.
template <class T, int VECS, int GROUP, int ROWS, bool ALIGNED>
__global__ void __launch_bounds__(A07_FAST_WARP_THREADS)
softmax_fast_warp(const T* __restrict__ x, T* __restrict__ y, int rows, int cols) {
  const int groups_per_block = blockDim.x / GROUP;
  const int t = threadIdx.x % GROUP;
  const long long first = (long long)blockIdx.x * groups_per_block * ROWS + threadIdx.x / GROUP;
  RowPart<T, VECS, ALIGNED> part[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const long long row = first + (long long)r * groups_per_block;
    if (row < rows) part[r].load(x + row * cols, cols, t, GROUP);
    else part[r].load(x, 0, t, GROUP);  // no elements: all -inf, no memory touched
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const long long row = first + (long long)r * groups_per_block;
    const MS mine = part[r].stats();
    const MS total = group_combine<GROUP>(mine);  // every lane of the warp takes part
    if (row < rows) part[r].store(y + row * cols, cols, t, GROUP, mine.m, total);
  }
}

// Medium rows: one block per row; blockDim.x * VECS vectors cover the row. MAX_THREADS (the
// launch bound, >= blockDim.x) tells the compiler how many registers a thread may use: 64 at 1024
// threads, 128 at 512, so a thread can hold 64 floats of its row only in smaller blocks.
template <class T, int VECS, int MAX_THREADS, bool ALIGNED>
__global__ void __launch_bounds__(MAX_THREADS)
softmax_fast_block(const T* __restrict__ x, T* __restrict__ y, int rows, int cols) {
  const long long row = blockIdx.x;
  RowPart<T, VECS, ALIGNED> part;
  part.load(x + row * cols, cols, threadIdx.x, blockDim.x);
  const MS mine = part.stats();
  const MS total = block_combine(mine);
  part.store(y + row * cols, cols, threadIdx.x, blockDim.x, mine.m, total);
}

#if A07_HAS_CLUSTERS
// The row's (M, S) from every block's (m, s), through distributed shared memory, without a cluster
// barrier: each block posts a 16-byte message (m, s, the next row claimed, unused) into slot [its
// rank] of every block's inbox (st.async), and each block's mbarrier completes once all CLUSTER
// messages have landed. Every warp then merges the pairs with the same combine() (lane l reads
// pair l % CLUSTER, a butterfly over CLUSTER lanes). Two inboxes alternate between rows: a block
// can post row i + 2 only after every block has posted row i + 1, which each does only after
// reading its inbox for row i.
template <int CLUSTER>
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
  __device__ __forceinline__ MS exchange(MS block_state, int i, int& claim) {
    const int box = i & 1;
    if (threadIdx.x == 0) mbar_expect(&full[box], CLUSTER * sizeof(float4));
    if (threadIdx.x < CLUSTER)
      cluster_send_float4(&msg[box][cluster_rank()], &full[box], threadIdx.x,
                          make_float4(block_state.m, block_state.s, __int_as_float(claimed[box]), 0.0f));
    mbar_wait(&full[box], (i >> 1) & 1);
    const float4 p = msg[box][threadIdx.x % warpSize % CLUSTER];
    claim = __float_as_int(msg[box][0].z);
    return group_combine<CLUSTER>(MS{p.x, p.y});
  }
};

// The part of a 16-bit row that one thread of a cluster owns, kept as the raw 16-bit values, two
// per 32-bit register (same element ownership as RowPart). Held as floats the same bytes take twice
// the registers, so a block would hold half as many bytes, or an SM half as many blocks, and too
// few loads would be in flight to stream long 16-bit rows. The price: exp is computed twice per
// element, once for the sum and once for the output; affordable only because exp2 is the
// one-instruction .ftz form. The max is taken on the pairs as they are, one instruction per two
// values.
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

  __device__ __forceinline__ void load(const T* __restrict__ xr, int cols, int t, int G) {
#pragma unroll
    for (int j = 0; j < VECS; ++j) {
      const int c0 = (j * G + t) * N;
      if (ALIGNED) {
        if constexpr (HINTED) u[j] = load16_if(xr + c0, c0 < cols, NEG_INF2);
        else u[j] = c0 < cols ? *reinterpret_cast<const uint4*>(xr + c0) : make_uint4(NEG_INF2, NEG_INF2, NEG_INF2, NEG_INF2);
      } else {  // one element at a time, paired up in registers; missing ones are -inf
        unsigned w[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int c = c0 + 2 * k;
          w[k] = (c < cols ? xr[c].bits : NEG_INF2 & 0xffffu) | (c + 1 < cols ? xr[c + 1].bits : NEG_INF2 >> 16) << 16;
        }
        u[j] = make_uint4(w[0], w[1], w[2], w[3]);
      }
    }
  }

  // 2^(x log2(e) - bias) in the one-FFMA form (FFMA), or 2^((x - m) log2(e) - bias) with the
  // subtraction first. A template parameter, not a per-element select: the compiler may turn a
  // select into computing both exps, which is what this path cannot afford (see stats()).
  template <bool FFMA>
  static __device__ __forceinline__ float exp_of(float x, float m, float bias) {
    return FFMA ? fast_exp2(fmaf(x, LOG2E, -bias)) : fast_exp2(fmaf(x - m, LOG2E, -bias));
  }

  template <bool FFMA> __device__ __forceinline__ float sum_exps(float m, float bias) const {
    float s_lo = 0.0f, s_hi = 0.0f;
#pragma unroll
    for (int j = 0; j < VECS; ++j) {
      const unsigned w[4] = {u[j].x, u[j].y, u[j].z, u[j].w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        s_lo += exp_of<FFMA>(Bits::lo(w[k]), m, bias);
        s_hi += exp_of<FFMA>(Bits::hi(w[k]), m, bias);
      }
    }
    return s_lo + s_hi;
  }

  // This thread's (m, s): the max over pairs, then one exp per element for the sum.
  __device__ __forceinline__ MS stats() const {
    unsigned pair = NEG_INF2;
#pragma unroll
    for (int j = 0; j < VECS; ++j)
      pair = Bits::max2(Bits::max2(pair, Bits::max2(u[j].x, u[j].y)), Bits::max2(u[j].z, u[j].w));
    const float m = max_nan(Bits::lo(pair), Bits::hi(pair));
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
    return MS{m, ffma ? sum_exps<true>(m, m_scaled) : sum_exps<false>(m, 0.0f)};
  }

  template <bool FFMA>
  __device__ __forceinline__ void store_exps(T* __restrict__ yr, int cols, int t, int G, float m, float bias) const {
#pragma unroll
    for (int j = 0; j < VECS; ++j) {
      const int c0 = (j * G + t) * N;
      const unsigned w[4] = {u[j].x, u[j].y, u[j].z, u[j].w};
      unsigned out[4];
#pragma unroll
      for (int k = 0; k < 4; ++k)
        out[k] = FFMA || m != A07_NEG_INF
                     ? Bits::pack2(exp_of<FFMA>(Bits::lo(w[k]), m, bias), exp_of<FFMA>(Bits::hi(w[k]), m, bias))
                     : 0u;
      if (ALIGNED) {
        if (c0 < cols) *reinterpret_cast<uint4*>(yr + c0) = make_uint4(out[0], out[1], out[2], out[3]);
      } else {
#pragma unroll
        for (int e = 0; e < N; ++e)
          if (c0 + e < cols) yr[c0 + e] = T{static_cast<unsigned short>(out[e / 2] >> (16 * (e % 2)))};
      }
    }
  }

  // y = exp(x - M) / S = 2^(x log2(e) - (M log2(e) + log2(S))): the second exp, and no divide;
  // 2^((x - M) log2(e) - log2(S)) where M log2(e) + log2(S) is too large to round finely enough
  // (see stats()). A fully masked row (M = -inf) is written as zeros: it fails the FFMA test
  // (c = -inf), and the subtraction-first form writes zeros for it.
  __device__ __forceinline__ void store(T* __restrict__ yr, int cols, int t, int G, float, MS row) const {
    const float log2_s = __log2f(row.s);
    const float c = fmaf(row.m, LOG2E, log2_s);
    if (fabsf(c) < FFMA_EXP_LIMIT) store_exps<true>(yr, cols, t, G, row.m, c);
    else store_exps<false>(yr, cols, t, G, row.m, log2_s);
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
// (MIN_BLOCKS 1 is passed as 0, no minimum: with an explicit 1 ptxas spilled in the misaligned fp32
// instances.)
//
// The grid is what fits on the GPU at once (the launcher asks the driver), and the clusters share
// the rows dynamically: cluster c starts with row c, every later row comes from a ticket counter
// (`tickets`, zeroed by the launcher): block 0 claims one per row and its exchange message hands
// it to every block of the cluster. Why not simpler:
//   - one row per cluster launch pays two cluster barriers per row;
//   - fixed shares (cluster c takes rows c, c + clusters, ...) make the slowest SM's share the
//     kernel's time (docs/performance.md has both measurements).
template <class T, int VECS, int CLUSTER, int MAX_THREADS, int MIN_BLOCKS, bool ALIGNED>
__global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(MAX_THREADS, MIN_BLOCKS > 1 ? MIN_BLOCKS : 0)
softmax_fast_cluster(const T* __restrict__ x, T* __restrict__ y, int rows, int cols, int* __restrict__ tickets) {
  __shared__ Mailbox<CLUSTER> mail;
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
    Part part;
    part.load(x + (long long)row * cols, cols, t, G);
    if constexpr (ALIGNED) claim();
    const MS mine = part.stats();
    int claimed;
    const MS total = mail.exchange(block_combine(mine), i, claimed);
    part.store(y + (long long)row * cols, cols, t, G, mine.m, total);
    row = claimed;
  }
  cluster_arrive();  // no block leaves while a message to it could still be on its way
  cluster_wait();
}
#endif

// Any length, any hardware: one block per row, (m, s) in one read, then a second read to write.
// VECS vectors per thread per step keep enough loads in flight. For rows of a few hundred KB the
// second read mostly hits L2 (the rows in flight at once are far smaller than its 50 MB).
template <class T, int VECS, bool ALIGNED>
__global__ void __launch_bounds__(A07_FAST_TWOPASS_THREADS)
softmax_fast_2pass(const T* __restrict__ x, T* __restrict__ y, int rows, int cols) {
  const long long row = blockIdx.x;
  const T* xr = x + row * cols;
  T* yr = y + row * cols;
  const int step = blockDim.x * VECS * Vec<T>::N;
  MS st = ms_empty();
  for (int base = 0; base < cols; base += step) {
    RowPart<T, VECS, ALIGNED> part;
    part.load(xr + base, cols - base, threadIdx.x, blockDim.x);
    st = combine(st, part.stats());
  }
  const MS total = block_combine(st);
  for (int base = 0; base < cols; base += step) {
    RowPart<T, VECS, ALIGNED> part;
    part.load(xr + base, cols - base, threadIdx.x, blockDim.x);
    const MS mine = part.stats();
    part.store(yr + base, cols - base, threadIdx.x, blockDim.x, mine.m, total);
  }
}

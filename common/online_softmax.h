// online_softmax.h -- the device building blocks every softmax kernel in the course shares:
// the (m, s) state, its one combine(), and butterfly reductions over a warp and over a block.
//
// Nothing here knows whether it runs on NVIDIA (warpSize 32) or AMD CDNA (warpSize 64): the
// reductions read the warp width from the built-in warpSize and shuffle through SHFL_XOR.
#pragma once
#include "course_constants.h"
#include "portability.h"

#ifndef BLOCK
#define BLOCK A07_BLOCK  // threads per block (a caller may override it with -DBLOCK=...)
#endif

// Running statistics of a set of scores: m = their max, s = sum(exp(x - m)).
// The empty set is (-inf, 0), the identity of combine().
struct MS {
  float m;
  float s;
};

// exp through the hardware's exp2 unit (__expf): a handful of instructions instead of the
// accurate expf's dozen. Its relative error stays near 1e-6 for the exponents that matter here
// (x - m in [-16, 0]); smaller terms are far below the tolerance of any check in the course.
// Softmax is memory-bound only if the arithmetic per element stays this cheap.
__device__ __forceinline__ float fast_exp(float x) { return __expf(x); }

__device__ __forceinline__ MS ms_empty() { return MS{A07_NEG_INF, 0.0f}; }
// One element's state: (x, exp(x - x)). exp(0) = 1 for a finite x; written as x - x + 1 so that
// +inf and NaN give a NaN sum (inf - inf), as exp(x - m) does in every other kernel: a row with
// either comes out NaN, never as a softmax that quietly ignored them.
__device__ __forceinline__ MS ms_of(float x) { return MS{x, x == A07_NEG_INF ? 0.0f : x - x + 1.0f}; }

// combine(): merge two partial states. Associative and commutative, identity (-inf, 0), so the
// same function reduces elements into a thread's state, lanes in a warp, warps in a block and
// tiles of a long row:
//   m = max(a.m, b.m),  s = a.s * exp(a.m - m) + b.s * exp(b.m - m)
// One of the two factors is exp(0) = 1, so only the side with the smaller max is rescaled, by
// exp(min - max) <= 1: no overflow is possible, and it costs one exp instead of two.
//
// The guard is load-bearing. With both states empty (a fully-masked row) the rescale factor is
// exp(-inf - -inf) = exp(nan) = nan, and 0 * nan = nan: the NaN of a masked row is born here.
// (Written with selects rather than an early return, so warps never diverge inside a reduction.)
//
// NaN is never hidden: max_nan() keeps a NaN max, so a NaN anywhere makes the merged state NaN.
__device__ __forceinline__ MS combine(MS a, MS b) {
  const float m = max_nan(a.m, b.m);
  const bool a_larger = a.m >= b.m;
  const float f = fast_exp(-fabsf(a.m - b.m));  // exp(smaller max - larger max); NaN if both -inf
  const float s = a_larger ? a.s + b.s * f : a.s * f + b.s;
  return MS{m, m == A07_NEG_INF ? 0.0f : s};  // the -inf guard: never let that NaN out
}

// Shuffles for each type a reduction carries.
__device__ __forceinline__ float shfl_xor(float v, int lane_mask) { return SHFL_XOR(v, lane_mask); }
__device__ __forceinline__ MS shfl_xor(MS v, int lane_mask) {
  return MS{SHFL_XOR(v.m, lane_mask), SHFL_XOR(v.s, lane_mask)};
}

struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return max_nan(a, b); }
};
struct SumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct CombineOp {  // for MS and for any state that extends it with its own combine()
  template <class State>
  __device__ __forceinline__ State operator()(State a, State b) const { return combine(a, b); }
};

// Butterfly all-reduce: after log2(warpSize) xor-shuffles every lane holds the warp's result,
// so no broadcast is needed afterwards.
template <class T, class Op>
__device__ __forceinline__ T warp_allreduce(T v, Op op) {
  for (int offset = warpSize / 2; offset > 0; offset /= 2) v = op(v, shfl_xor(v, offset));
  return v;
}

// Block all-reduce: each warp reduces its lanes, warp leaders park their results in shared
// memory, warp 0 reduces those, and every thread reads the block's result back.
// blockDim.x must be a multiple of warpSize and at most 32 * warpSize.
template <class T, class Op>
__device__ __forceinline__ T block_allreduce(T v, Op op, T identity) {
  __shared__ T partial[32];  // 1024 threads / the smallest warp (32)
  __shared__ T result;
  const int lane = threadIdx.x % warpSize;
  const int warp = threadIdx.x / warpSize;
  const int warps = blockDim.x / warpSize;
  v = warp_allreduce(v, op);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {  // one warp finishes; the others would only repeat its work
    // log2(warps) butterfly steps are enough (3 for 8 warps, not 5): the lanes past `warps`
    // hold the identity and are never read by lane 0's chain.
    v = lane < warps ? partial[lane] : identity;
    for (int offset = 1; offset < warps; offset *= 2) v = op(v, shfl_xor(v, offset));
    if (lane == 0) result = v;
  }
  __syncthreads();
  return result;  // safe to reuse partial[] and result in the next call: see the two barriers
}

// Load the ITEMS elements of `row` that thread threadIdx.x owns (columns t, t + BLOCK, ...) into
// registers; -inf past the end of the row or of the tensor. Issued one row ahead by the 1-pass
// kernels, so that a block's next loads are in flight while it reduces the current row.
template <int N>
__device__ __forceinline__ void load_row(float (&v)[N], const float* __restrict__ x, long long row, int rows,
                                         int cols) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int c = threadIdx.x + i * BLOCK;
    v[i] = row < rows && c < cols ? x[row * cols + c] : A07_NEG_INF;
  }
}

__device__ __forceinline__ float block_max(float v) { return block_allreduce(v, MaxOp(), A07_NEG_INF); }
__device__ __forceinline__ float block_sum(float v) { return block_allreduce(v, SumOp(), 0.0f); }
__device__ __forceinline__ MS block_combine(MS v) { return block_allreduce(v, CombineOp(), ms_empty()); }

// The thread's share of a row held in registers (kernel 4 and the fused kernel): turn v[] into
// exp(v - m) for the thread's own max m and return (m, sum). A thread with no elements (m = -inf)
// gets zeros and (-inf, 0).
template <int N>
__device__ __forceinline__ MS thread_exp(float (&v)[N], float m) {
  const float m_safe = m == A07_NEG_INF ? 0.0f : m;
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < N; ++i) s += (v[i] = fast_exp(v[i] - m_safe));
  return MS{m, s};
}

// Write the row from e = exp(v - m) (thread_exp's output): y = e * exp(m - M) / S, for the row's
// (M, S). A fully -inf row (M = -inf) is written as zeros. A thread whose elements are all -inf
// (m = -inf) needs no test: exp(-inf - M) = 0 for any other M, and a NaN M keeps the row NaN.
template <int N>
__device__ __forceinline__ void store_row(float* __restrict__ yr, const float (&e)[N], float m, MS row, int cols) {
  const float f = row.m == A07_NEG_INF ? 0.0f : fast_exp(m - row.m) / row.s;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int c = threadIdx.x + i * BLOCK;
    if (c < cols) yr[c] = e[i] * f;
  }
}


// Lab 4 in CUDA/HIP -- attention without the S x S matrix, written to be read.
//
//   o_i = sum_j softmax_j(scale * q_i . k_j + mask_ij) v_j        for (batch, heads, seq, head_dim)
//
// Each warp owns one query row; a block owns ROWS consecutive query rows of one (batch, head) and
// walks the keys in tiles of TILE_KEYS. Per tile the block stages K and V in shared memory (every
// row of the block reads them), each lane scores one key against its warp's query, and the warp
// folds the tile into its running state with the course's one combine():
//   run = (m, l): the max and the sum of exp(s - m) so far (the MS of online_softmax.h)
//   o          : the weighted numerator sum exp(s_j - m) v_j, one slice of head_dim per lane
// When a tile raises the max, l (inside combine()) and o are both multiplied by exp(m_old - m_new):
// forgetting o is the classic error (notebook 03, exercise 07).
//
// Masks: key j is visible to query i when j < n_keys (key padding: kv_len[b]) and, if causal,
// j <= i. With causal masking the block stops at its last row's bound (causal_key_end of
// exercise 07): the tiles after it are never loaded. A row that sees no key at all keeps l = 0 and
// is written as zeros, the course's contract for a fully masked row.
//
// What this kernel is not: fast. It computes in fp32 on the CUDA cores (no tensor cores) and
// re-reads K and V from L2 for every block of ROWS queries; a07_softmax.attention (Triton) is the
// fast one. fp32 in and out, head_dim <= MAX_HEAD_DIM, contiguous (batch, heads, seq, head_dim).
//
// Python: a07_softmax.attention_cuda launches it through CuPy RawModule and, without a GPU, on the
// CPU target (common/cpu_target.h). hip/attention.cpp compiles this same file for AMD GPUs.
#include "online_softmax.h"

#define TILE_KEYS 32                     // keys per tile: one per lane (of a 32-lane warp)
#define MAX_HEAD_DIM 128
#define MAX_ROWS (BLOCK / 32)            // query rows per block: one per warp (fewer with 64-lane warps)
#define O_PER_LANE (MAX_HEAD_DIM / 32)   // head_dim elements of o each lane accumulates, at most

// exp(x - m) against a running max that may still be -inf (nothing visible yet): 0, never the NaN
// of exp(-inf - -inf). The same guard as combine()'s. With causal masks and right padding every
// tile a row processes shows it key 0, so no input reaches the guard today (the tests cannot see it
// go); it is kept so that a mask that hides a row's first tiles (a sliding window, left padding)
// cannot bring the NaN back.
__device__ __forceinline__ float exp_from(float x, float m) { return m == A07_NEG_INF ? 0.0f : fast_exp(x - m); }
__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }

extern "C" __global__ void __launch_bounds__(BLOCK)
attention_fwd(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
              float* __restrict__ o, const int* __restrict__ kv_len, int has_kv_len, int batch_heads, int heads,
              int seq, int head_dim, float scale, int causal) {
  __shared__ float k_tile[TILE_KEYS][MAX_HEAD_DIM];
  __shared__ float v_tile[TILE_KEYS][MAX_HEAD_DIM];
  __shared__ float q_rows[MAX_ROWS][MAX_HEAD_DIM];
  __shared__ float p_rows[MAX_ROWS][TILE_KEYS];

  const int rows = blockDim.x / warpSize, warp = threadIdx.x / warpSize, lane = threadIdx.x % warpSize;
  const int q_blocks = (seq + rows - 1) / rows;
  const int bh = blockIdx.x / q_blocks;             // which (batch, head)
  const int q_start = (blockIdx.x % q_blocks) * rows;
  const int i = q_start + warp;                     // this warp's query row
  const bool row_exists = i < seq;                  // the last block may hang past the sequence
  const long long base = static_cast<long long>(bh) * seq * head_dim;
  const int n_keys = has_kv_len ? imin(kv_len[bh / heads], seq) : seq;
  // The block's last key: causal rows in [q_start, q_end) see no key at or past q_end.
  const int key_end = causal ? imin(n_keys, imin(seq, q_start + rows)) : n_keys;

  for (int c = lane; c < head_dim; c += warpSize) q_rows[warp][c] = row_exists ? q[base + static_cast<long long>(i) * head_dim + c] : 0.0f;

  MS run = ms_empty();
  float acc[O_PER_LANE];
  for (int r = 0; r < O_PER_LANE; ++r) acc[r] = 0.0f;

  // Every warp of the block runs the same number of tiles (key_end is the block's), so the
  // __syncthreads() inside the loop are reached by all threads.
  for (int t0 = 0; t0 < key_end; t0 += TILE_KEYS) {
    __syncthreads();  // the previous tile is no longer read (and, the first time, q_rows is written)
    for (int e = threadIdx.x; e < TILE_KEYS * head_dim; e += blockDim.x) {
      const int j = e / head_dim, c = e % head_dim;
      const bool inside = t0 + j < key_end;
      const long long at = base + static_cast<long long>(t0 + j) * head_dim + c;
      k_tile[j][c] = inside ? k[at] : 0.0f;
      v_tile[j][c] = inside ? v[at] : 0.0f;
    }
    __syncthreads();

    // One key per lane: its score, or -inf where the mask hides it.
    const int j = t0 + lane;
    float s = A07_NEG_INF;
    if (row_exists && lane < TILE_KEYS && j < n_keys && (!causal || j <= i)) {
      float dot = 0.0f;
      for (int c = 0; c < head_dim; ++c) dot += q_rows[warp][c] * k_tile[lane][c];
      s = dot * scale;
    }
    // The tile's (max, sum of exp) over the warp, merged into the running state: combine() moves
    // l onto the new max; o is moved by the same factor below.
    const MS tile = warp_allreduce(ms_of(s), CombineOp());
    const MS next = combine(run, tile);
    const float alpha = exp_from(run.m, next.m);  // exp(m_old - m_new); 0 while nothing was visible
    if (lane < TILE_KEYS) p_rows[warp][lane] = exp_from(s, next.m);
    __syncthreads();  // p_rows complete for every warp

    for (int r = 0; r < O_PER_LANE; ++r) {
      const int c = lane + r * warpSize;
      if (c < head_dim) {
        float pv = 0.0f;
        for (int jj = 0; jj < TILE_KEYS; ++jj) pv += p_rows[warp][jj] * v_tile[jj][c];
        acc[r] = acc[r] * alpha + pv;  // o rescaled like l
      }
    }
    run = next;
  }

  if (row_exists) {
    const float inv_l = run.s == 0.0f ? 0.0f : 1.0f / run.s;  // no visible key: zeros
    for (int r = 0; r < O_PER_LANE; ++r) {
      const int c = lane + r * warpSize;
      if (c < head_dim) o[base + static_cast<long long>(i) * head_dim + c] = acc[r] * inv_l;
    }
  }
}

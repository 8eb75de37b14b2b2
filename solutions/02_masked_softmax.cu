// Exercise 02: masked softmax, y = softmax(x + mask), one block of BLOCK threads per row.
//
// The mask is additive and generated from indices: a score at (row, col) is masked (-inf) when
//   causal && col > row % q_len       (no looking ahead)
//   use_valid_len && col >= valid_len[row]   (padding; a valid length of 0 masks the whole row)
// The statistics use the online (m, s) state and combine() from common/online_softmax.h.
// A masked score is replaced by -inf, whatever it held: padding memory may hold anything, NaN
// included, and it must change nothing. A NaN that the row does see makes the whole row NaN.
//
// Then the trap: a fully-masked row. Its state stays (-inf, 0) and exp(x - m) = exp(-inf - -inf)
// is NaN. The course's contract is that such a row comes out as zeros.
// Check with:  make check EX=02
#include "online_softmax.h"

extern "C" __global__ void __launch_bounds__(BLOCK)
masked_softmax(const float* __restrict__ x, float* __restrict__ y, int rows, int cols, int q_len, int causal,
               const int* __restrict__ valid_len, int use_valid_len) {
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* xr = x + row * cols;
    float* yr = y + row * cols;
    const int q = int(row % q_len);
    const int len = use_valid_len ? valid_len[row] : cols;

    MS st = ms_empty();
    for (int c = threadIdx.x; c < cols; c += BLOCK) {
      float v = xr[c];
      // TODO 1: add the mask: v becomes -inf where (row, col) is masked (causal or padding).
      // BEGIN SOLUTION
      if ((causal && c > q) || c >= len) v = A07_NEG_INF;
      // END SOLUTION
      st = combine(st, ms_of(v));
    }
    st = block_combine(st);

    for (int c = threadIdx.x; c < cols; c += BLOCK) {
      float v = xr[c];
      // BEGIN SOLUTION
      if ((causal && c > q) || c >= len) v = A07_NEG_INF;
      // END SOLUTION
      float out = fast_exp(v - st.m) / st.s;
      // TODO 2: a fully-masked row (st.m == -inf) must give zeros, not NaN.
      // BEGIN SOLUTION
      if (st.m == A07_NEG_INF) out = 0.0f;
      // END SOLUTION
      yr[c] = out;
    }
  }
}

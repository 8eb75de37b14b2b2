// Lab 2 -- fusion: y = softmax(x * scale + mask), the attention-score pipeline.
//
//   unfused  scale_kernel       1 read + 1 write   \
//            add_mask_kernel    1 read + 1 write    > 3 launches, 7 traversals of the tensor
//            softmax_online_2pass 2 reads + 1 write /   (Lab 1's kernel 3)
//   fused    scale_mask_softmax_fused  1 read + 1 write: scale and mask happen in registers
//
// The mask is additive (-inf where masked) and generated from indices, so every path reads only
// the scores. Rows are (batch * heads * q_len) query rows of a (q_len, cols) score matrix; the
// query index of a row is row % q_len. A score at (row, col) is masked when
//   causal  and col > q                  (no looking ahead)
//   window  and col <= q - window        (sliding window: only the last `window` keys)
//   valid_len and col >= valid_len[row]  (padding; a valid length of 0 masks the whole row)
// A fully-masked row gives zeros: the course's contract, never NaN.
//
// The fused kernel loads the whole row even when causal masking hides most of it, so the
// comparison with the unfused path is like for like. Skipping masked tiles is FlashAttention's
// block sparsity (module A09).
#define A07_LAB1_NO_MAIN
#include "softmax.cu"

struct Window {  // the unmasked columns of one row: [lo, hi)
  int lo, hi;
};
// Every mask of this lab leaves one interval of a row unmasked, so the interval is computed once per
// row and each element costs two compares. q: the row's query index (row % q_len); len: its number
// of valid keys (cols without padding).
__device__ __forceinline__ Window unmasked(int q, int cols, int causal, int window, int len) {
  Window w{0, len < cols ? len : cols};
  if (causal && q + 1 < w.hi) w.hi = q + 1;             // no looking ahead: col <= q
  if (window > 0 && q - window + 1 > w.lo) w.lo = q - window + 1;  // only the last `window` keys
  return w;
}

extern "C" __global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, long long n,
                                        float scale) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y[i] = x[i] * scale;
}

// use_valid_len = 0 ignores valid_len (CuPy has no null pointer to pass).
extern "C" __global__ void add_mask_kernel(const float* __restrict__ x, float* __restrict__ y, int rows,
                                           int cols, int q_len, int causal, int window,
                                           const int* __restrict__ valid_len, int use_valid_len) {
  const long long n = (long long)rows * cols;
  const int* vl = use_valid_len ? valid_len : nullptr;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const long long row = i / cols;
    const Window w = unmasked(int(row % q_len), cols, causal, window, vl ? vl[row] : cols);
    const int c = int(i % cols);
    y[i] = c >= w.lo && c < w.hi ? x[i] : A07_NEG_INF;
  }
}

// One read, one write. The same register-resident row as Lab 1's kernel 4, with scale and mask
// applied between the load and the statistics. Needs cols <= BLOCK * ITEMS. The next row (and its
// valid length) is requested before this row's masking arithmetic, so HBM stays busy meanwhile.
extern "C" __global__ void __launch_bounds__(BLOCK)
scale_mask_softmax_fused(const float* __restrict__ x, float* __restrict__ y, int rows, int cols, float scale,
                         int q_len, int causal, int window, const int* __restrict__ valid_len,
                         int use_valid_len) {
  const int* vl = use_valid_len ? valid_len : nullptr;
  float v[ITEMS], next[ITEMS];
  load_row(next, x, blockIdx.x, rows, cols);
  int next_len = vl && blockIdx.x < rows ? vl[blockIdx.x] : cols;
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) v[i] = next[i];
    const Window w = unmasked(row % q_len, cols, causal, window, next_len);
    load_row(next, x, row + gridDim.x, rows, cols);  // the next row's read, in flight meanwhile
    next_len = vl && row + gridDim.x < rows ? vl[row + gridDim.x] : cols;
    float m = A07_NEG_INF;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {  // scale and mask in registers: free
      const int c = threadIdx.x + i * BLOCK;
      v[i] = c >= w.lo && c < w.hi ? v[i] * scale : A07_NEG_INF;
      m = max_nan(m, v[i]);
    }
    const MS st = block_combine(thread_exp(v, m));
    store_row(y + (long long)row * cols, v, m, st, cols);
  }
}

#if defined(A07_HOST)
#include "lab_host.h"

int main(int argc, char** argv) {
  const int batch_heads = lab::arg_int(argc, argv, 1, 256);
  const int seq = lab::arg_int(argc, argv, 2, 1024);  // q_len = cols = seq: square causal scores
  // default 256 x 1024 x 1024 fp32 = 1 GiB of scores (the unfused path needs 4 GiB of GPU memory)
  const int rows = batch_heads * seq, cols = seq;
  const size_t n = size_t(rows) * cols;
  const float scale = 0.125f;  // 1 / sqrt(head_dim 64)
  lab::print_device_header("Lab 2: scale -> causal mask -> softmax, unfused and fused");
  std::printf("%d x (%d x %d) scores, tensor %.1f MiB, scale %.3f, ITEMS %d\n", batch_heads, seq, seq,
              n * 4.0 / (1 << 20), scale, ITEMS);
  if (cols > BLOCK * ITEMS) {
    std::fprintf(stderr, "seq %d > BLOCK * ITEMS = %d: rebuild with -DITEMS=%d\n", cols, BLOCK * ITEMS,
                 (cols + BLOCK - 1) / BLOCK);
    return 2;
  }

  std::vector<float> hx(n), hy(n);
  lab::fill_uniform(hx, -30.0f, 30.0f, 2);
  // Padding: row 1 has no valid key at all (fully masked), row 2 exactly one; the rest are full.
  std::vector<int> hlen(rows, cols);
  hlen[1] = 0;
  if (rows > 2) hlen[2] = 1;
  const auto masked = [&](int r, int c) { return c > r % seq || c >= hlen[r]; };
  const auto ref = lab::reference_softmax(hx, rows, cols, scale, masked);

  float *dx, *dy, *dt1, *dt2;
  int* dlen;
  GPU_CHECK(gpu(Malloc)(&dx, n * sizeof(float)));
  GPU_CHECK(gpu(Malloc)(&dy, n * sizeof(float)));
  GPU_CHECK(gpu(Malloc)(&dt1, n * sizeof(float)));
  GPU_CHECK(gpu(Malloc)(&dt2, n * sizeof(float)));
  GPU_CHECK(gpu(Malloc)(&dlen, rows * sizeof(int)));
  GPU_CHECK(gpu(Memcpy)(dx, hx.data(), n * sizeof(float), gpu(MemcpyHostToDevice)));
  GPU_CHECK(gpu(Memcpy)(dlen, hlen.data(), rows * sizeof(int), gpu(MemcpyHostToDevice)));

  const unsigned ew_grid = 65535;
  auto unfused = [&] {
    scale_kernel<<<ew_grid, BLOCK>>>(dx, dt1, (long long)n, scale);
    add_mask_kernel<<<ew_grid, BLOCK>>>(dt1, dt2, rows, cols, seq, 1, 0, dlen, 1);
    softmax_online_2pass<<<lab::row_grid(rows), BLOCK>>>(dt2, dy, rows, cols);
  };
  auto fused = [&] {
    scale_mask_softmax_fused<<<lab::row_grid(rows), BLOCK>>>(dx, dy, rows, cols, scale, seq, 1, 0, dlen, 1);
  };
  struct Path {
    const char* name;
    std::function<void()> run;
    int launches, traversals;
  };
  // traversal counts from the traffic model's table (course_constants.h), in its order
#define A07_TRAVERSALS(name, reads, writes) reads + writes,
  const int traversals[2] = {A07_LAB2_PATHS(A07_TRAVERSALS)};
#undef A07_TRAVERSALS
  float ms_of[2];
  const Path paths[2] = {{"unfused (3 kernels)", unfused, 3, traversals[0]},
                         {"fused (1 kernel)", fused, 1, traversals[1]}};
  bool ok_all = true;
  std::printf("\n%-20s %8s %5s %9s %10s %10s %12s  %s\n", "path", "launches", "trav", "model GB", "median ms",
              "GB/s", "max rel err", "verdict");
  for (int p = 0; p < 2; ++p) {
    lab::poison(dy, n);
    paths[p].run();
    GPU_CHECK(gpu(GetLastError)());
    GPU_CHECK(gpu(Memcpy)(hy.data(), dy, n * sizeof(float), gpu(MemcpyDeviceToHost)));
    const lab::Check chk = lab::compare(hy, ref, cols);
    bool zeros = true;
    for (int c = 0; c < cols; ++c) zeros &= hy[size_t(cols) + c] == 0.0f;  // row 1: fully masked
    const bool ok = chk.passed() && zeros;
    ok_all &= ok;
    ms_of[p] = lab::median_ms(paths[p].run);
    const double bytes = double(paths[p].traversals) * n * 4;
    std::printf("%-20s %8d %5d %9.3f %10.4f %10.1f %12.3g  %s%s\n", paths[p].name, paths[p].launches,
                paths[p].traversals, bytes / 1e9, ms_of[p], bytes / (ms_of[p] * 1e-3) / 1e9, chk.max_rel_err,
                ok ? "PASSED" : "FAILED", zeros ? "" : " (fully-masked row is not all zeros)");
  }
  std::printf("\nfused is %.2fx faster; the traffic model predicts %.2fx (%d / %d traversals)\n",
              ms_of[0] / ms_of[1], double(traversals[0]) / traversals[1], traversals[0], traversals[1]);
  std::printf("row 1 is fully masked (padding length 0): output row is all zeros, not NaN\n");
  for (float* d : {dx, dy, dt1, dt2}) GPU_CHECK(gpu(Free)(d));
  GPU_CHECK(gpu(Free)(dlen));
  return ok_all ? 0 : 1;
}
#endif

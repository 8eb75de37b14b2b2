// Lab 1 -- four row softmaxes, from broken to optimal.
//
//   #  kernel                 HBM traffic        what it shows
//   1  softmax_naive_unsafe   2 reads + 1 write  exp(x) / sum(exp(x)): overflows, fails on purpose
//   2  softmax_safe_3pass     3 reads + 1 write  subtract the max first: correct, one pass dearer
//   3  softmax_online_2pass   2 reads + 1 write  (m, s) in one pass: safety at the naive price
//   4  softmax_online_1pass   1 read  + 1 write  row held in registers: the algorithmic minimum
//
// One block of BLOCK threads per row; a grid-stride loop over rows, so any row count works and the
// grid can be sized from the device (enough blocks to fill every SM, see lab::row_grid).
// x and y are row-major float32 (rows, cols). A fully -inf row gives zeros (kernels 2-4).
//
// Build:  make cuda SM_ARCH=sm_90 && ./cuda/bin/softmax [rows] [cols]     (nvcc)
//         hip/softmax.cpp compiles this same file with hipcc.
// Python: a07_softmax.native compiles it through CuPy RawModule (NVRTC / hiprtc); the kernels are
//         extern "C" so RawModule finds them by name, and main() is hidden from the runtime
//         compilers by A07_HOST.
#include "online_softmax.h"

#ifndef ITEMS
#define ITEMS A07_ITEMS  // elements each thread keeps in registers in kernel 4: cols <= BLOCK * ITEMS
#endif

#define ROW_LOOP(row) for (long long row = blockIdx.x; row < rows; row += gridDim.x)

// 1. The textbook formula. exp(100) is +inf in fp32, inf / inf is NaN: one large score poisons
//    the whole row. Left broken on purpose.
extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_naive_unsafe(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
  ROW_LOOP(row) {
    const float* xr = x + row * cols;
    float* yr = y + row * cols;
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += BLOCK) s += fast_exp(xr[c]);  // read 1
    s = block_sum(s);
    for (int c = threadIdx.x; c < cols; c += BLOCK) yr[c] = fast_exp(xr[c]) / s;  // read 2, write
  }
}

// 2. Max subtraction: every exponent <= 0, so every exp is in (0, 1]. Correct, but the max
//    needs a pass of its own.
extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_safe_3pass(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
  ROW_LOOP(row) {
    const float* xr = x + row * cols;
    float* yr = y + row * cols;
    float m = A07_NEG_INF;
    for (int c = threadIdx.x; c < cols; c += BLOCK) m = max_nan(m, xr[c]);  // read 1 (a NaN is kept, never skipped)
    m = block_max(m);
    float s = 0.0f;
    if (m != A07_NEG_INF)
      for (int c = threadIdx.x; c < cols; c += BLOCK) s += fast_exp(xr[c] - m);  // read 2
    s = block_sum(s);
    const float inv = m == A07_NEG_INF ? 0.0f : 1.0f / s;  // fully masked row -> zeros
    for (int c = threadIdx.x; c < cols; c += BLOCK)
      yr[c] = m == A07_NEG_INF ? 0.0f : fast_exp(xr[c] - m) * inv;  // read 3, write
  }
}

// 3. The online recurrence: each thread folds its elements into (m, s) with combine(), the block
//    merges the threads' states with the same combine(), then one more pass normalises.
extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_online_2pass(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
  ROW_LOOP(row) {
    const float* xr = x + row * cols;
    float* yr = y + row * cols;
    MS st = ms_empty();
    for (int c = threadIdx.x; c < cols; c += BLOCK) st = combine(st, ms_of(xr[c]));  // read 1
    st = block_combine(st);
    const float inv = st.m == A07_NEG_INF ? 0.0f : 1.0f / st.s;
    for (int c = threadIdx.x; c < cols; c += BLOCK)
      yr[c] = st.m == A07_NEG_INF ? 0.0f : fast_exp(xr[c] - st.m) * inv;  // read 2, write
  }
}

// 4. The row stays in registers between the statistics and the write: one read, one write.
//    Thread t holds columns t, t + BLOCK, ..., t + (ITEMS-1) * BLOCK. The indices are
//    compile-time constants after unrolling, so v[] lives in registers, not local memory.
//    While the block reduces one row, the loads of its next row are already in flight (next[]):
//    without that, HBM idles during every reduction (docs/performance.md, "The lab kernels").
//    One exp per element: each thread keeps e = exp(x - m_t) relative to its own max m_t, and
//    at the end multiplies by exp(m_t - M) / S, since exp(x - M) = exp(x - m_t) * exp(m_t - M).
//    Needs cols <= BLOCK * ITEMS; the launchers refuse larger rows (raise ITEMS: -DITEMS=8).
extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_online_1pass(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
  float v[ITEMS], next[ITEMS];
  load_row(next, x, blockIdx.x, rows, cols);
  ROW_LOOP(row) {
    float m = A07_NEG_INF;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      v[i] = next[i];
      m = max_nan(m, v[i]);
    }
    load_row(next, x, row + gridDim.x, rows, cols);  // the only read (of the next row)
    const MS st = block_combine(thread_exp(v, m));     // one reduction round for (m, s) together
    store_row(y + row * cols, v, m, st, cols);          // the only write
  }
}

// ------------------------------------------------------------------------------------------------
// The standalone program: poisons row 0 with 100.0, checks every kernel against a float64
// reference that itself subtracts the max, and times each with device events.
// ------------------------------------------------------------------------------------------------
#if defined(A07_HOST) && !defined(A07_LAB1_NO_MAIN)
#include "lab_host.h"

int main(int argc, char** argv) {
  const int rows = lab::arg_int(argc, argv, 1, 262144);
  const int cols = lab::arg_int(argc, argv, 2, 1024);
  const size_t n = size_t(rows) * cols;
  lab::print_device_header("Lab 1: four softmaxes");
  std::printf("rows %d, cols %d, ITEMS %d, tensor %.1f MiB; row 0 poisoned with x = 100.0\n\n", rows,
              cols, ITEMS, n * 4.0 / (1 << 20));

  std::vector<float> hx(n), hy(n);
  lab::fill_uniform(hx, -4.0f, 4.0f, 1);
  hx[cols / 2] = 100.0f;  // exp(100) overflows fp32 (limit ~88.7)
  const auto ref = lab::reference_softmax(hx, rows, cols, 1.0, [](int, int) { return false; });

  float *dx, *dy;
  GPU_CHECK(gpu(Malloc)(&dx, n * sizeof(float)));
  GPU_CHECK(gpu(Malloc)(&dy, n * sizeof(float)));
  GPU_CHECK(gpu(Memcpy)(dx, hx.data(), n * sizeof(float), gpu(MemcpyHostToDevice)));

  struct Kernel {
    const char* name;
    void (*fn)(const float*, float*, int, int);
    int traversals;
  };
#define A07_KERNEL_ROW(name, reads, writes) {#name, name, reads + writes},
  const Kernel kernels[] = {A07_LAB1_KERNELS(A07_KERNEL_ROW)};
#undef A07_KERNEL_ROW
  const double tol = A07_TOL_FLOAT32;
  std::vector<float> naive_row0(cols);
  bool all_as_expected = true;
  std::printf("%-22s %5s %10s %10s %12s  %s\n", "kernel", "trav", "median ms", "GB/s", "max rel err",
              "verdict");
  for (const Kernel& k : kernels) {
    if (k.fn == softmax_online_1pass && cols > BLOCK * ITEMS) {
      std::printf("%-22s skipped: cols %d > BLOCK * ITEMS = %d; rebuild with -DITEMS=%d\n", k.name, cols,
                  BLOCK * ITEMS, (cols + BLOCK - 1) / BLOCK);
      continue;
    }
    auto launch = [&] { k.fn<<<lab::row_grid(rows), BLOCK>>>(dx, dy, rows, cols); };
    lab::poison(dy, n);
    launch();
    GPU_CHECK(gpu(GetLastError)());
    GPU_CHECK(gpu(Memcpy)(hy.data(), dy, n * sizeof(float), gpu(MemcpyDeviceToHost)));
    const lab::Check chk = lab::compare(hy, ref, cols);
    if (k.fn == softmax_naive_unsafe) std::copy(hy.begin(), hy.begin() + cols, naive_row0.begin());
    const float ms = lab::median_ms(launch);
    const double gbps = double(k.traversals) * n * 4 / (ms * 1e-3) / 1e9;
    const bool ok = chk.passed(tol);
    const bool expect_pass = k.fn != softmax_naive_unsafe;  // row 0 overflows exp() without the max
    all_as_expected &= ok == expect_pass;
    std::printf("%-22s %5d %10.4f %10.1f %12.3g  %s%s\n", k.name, k.traversals, ms, gbps, chk.max_rel_err,
                ok ? "PASSED" : "FAILED", ok == expect_pass ? "" : "  (unexpected)");
    if (!ok && chk.nan_count)
      std::printf("%22s %zu non-finite outputs, first at row %zu col %zu\n", "", chk.nan_count, chk.worst_row,
                  chk.worst_col);
  }
  std::printf("\nGB/s is effective: the traffic model's bytes (traversals x 4 B x rows x cols) / time, not measured DRAM bytes.\n");

  size_t nan_in_row0 = 0;
  float row0_sum = 0;
  for (float v : naive_row0) nan_in_row0 += std::isnan(v), row0_sum += v;
  std::printf("\nRow 0 of softmax_naive_unsafe (x[%d] = 100, so sum(exp(x)) = inf):\n", cols / 2);
  std::printf("  y[%d] = %g (inf / inf), the other %d outputs are 0 (finite / inf); %zu NaN in the row\n",
              cols / 2, naive_row0[cols / 2], cols - 1, nan_in_row0);
  std::printf("  the row sums to %g instead of 1: anything that consumes it (P @ V) is NaN too\n", row0_sum);
  std::printf("  reference: y[%d] = %.6f, y[0] = %.3g\n", cols / 2, ref[cols / 2], ref[0]);

  GPU_CHECK(gpu(Free)(dx));
  GPU_CHECK(gpu(Free)(dy));
  return all_as_expected ? 0 : 1;
}
#endif

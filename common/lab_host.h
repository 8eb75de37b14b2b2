// lab_host.h -- host-side helpers shared by the standalone lab programs (CUDA and HIP alike):
// random inputs, the float64 reference, error measures, event timing. Never seen by NVRTC/hiprtc.
#pragma once
#include "online_softmax.h"
#ifdef A07_HOST
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace lab {

// Deterministic uniform floats in [lo, hi): the same inputs on every vendor and every run.
inline void fill_uniform(std::vector<float>& v, float lo, float hi, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& x : v) {
    s ^= s << 13; s ^= s >> 7; s ^= s << 17;
    x = lo + (hi - lo) * float((s >> 40) * (1.0 / 16777216.0));
  }
}

// Float64 softmax of each row of (x * scale + mask), max subtracted; a fully -inf row gives zeros.
// mask(row, col) returns true where the score is masked (-inf).
template <class MaskFn>
std::vector<double> reference_softmax(const std::vector<float>& x, int rows, int cols, double scale,
                                      MaskFn masked) {
  std::vector<double> y(size_t(rows) * cols);
  std::vector<double> t(cols);
  for (int r = 0; r < rows; ++r) {
    double m = -INFINITY;
    for (int c = 0; c < cols; ++c) {
      t[c] = masked(r, c) ? -INFINITY : double(x[size_t(r) * cols + c]) * scale;
      m = std::max(m, t[c]);
    }
    double s = 0;
    if (m != -INFINITY)
      for (int c = 0; c < cols; ++c) s += std::exp(t[c] - m);
    for (int c = 0; c < cols; ++c) y[size_t(r) * cols + c] = m == -INFINITY ? 0.0 : std::exp(t[c] - m) / s;
  }
  return y;
}

// The course's error measure (a07_softmax/accuracy.py, probabilities): max over elements of
// |got - ref| / max(|ref|, A07_RELATIVE_FLOOR * max|ref|), infinite for a non-finite output.
struct Check {
  double max_rel_err = 0;
  size_t nan_count = 0;
  size_t worst_row = 0, worst_col = 0;
  bool passed(double tol = A07_TOL_FLOAT32) const { return nan_count == 0 && max_rel_err <= tol; }
};

inline Check compare(const std::vector<float>& got, const std::vector<double>& ref, int cols) {
  Check k;
  const size_t n = ref.size();
  double largest = 0;
  for (double r : ref) largest = std::max(largest, std::fabs(r));
  const double floor = std::max(A07_RELATIVE_FLOOR * largest, 1e-30);
  for (size_t i = 0; i < n; ++i) {
    const double g = got[i], r = ref[i];
    if (std::isnan(g) || std::isinf(g)) {
      if (k.nan_count++ == 0) { k.worst_row = i / cols; k.worst_col = i % cols; }
      k.max_rel_err = INFINITY;
      continue;
    }
    const double e = std::fabs(g - r) / std::max(std::fabs(r), floor);
    if (e > k.max_rel_err) { k.max_rel_err = e; k.worst_row = i / cols; k.worst_col = i % cols; }
  }
  return k;
}

// Median of `reps` timings of launch(), each bracketed by device events, after at least
// `warmup_ms` of untimed runs (the GPU raises its clocks over the first milliseconds of work;
// a few warm-up launches of a 0.5 ms kernel are not enough).
template <class Launch>
float median_ms(Launch launch, int reps = 50, float warmup_ms = 50.0f) {
  gpu(Event_t) w0, w1;
  GPU_CHECK(gpu(EventCreate)(&w0));
  GPU_CHECK(gpu(EventCreate)(&w1));
  GPU_CHECK(gpu(EventRecord)(w0));
  for (float spent = 0.0f; spent < warmup_ms;) {
    launch();
    GPU_CHECK(gpu(EventRecord)(w1));
    GPU_CHECK(gpu(EventSynchronize)(w1));
    GPU_CHECK(gpu(EventElapsedTime)(&spent, w0, w1));
  }
  GPU_CHECK(gpu(EventDestroy)(w0));
  GPU_CHECK(gpu(EventDestroy)(w1));
  GPU_CHECK(gpu(GetLastError)());
  gpu(Event_t) start, stop;
  GPU_CHECK(gpu(EventCreate)(&start));
  GPU_CHECK(gpu(EventCreate)(&stop));
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; ++i) {
    GPU_CHECK(gpu(EventRecord)(start));
    launch();
    GPU_CHECK(gpu(EventRecord)(stop));
    GPU_CHECK(gpu(EventSynchronize)(stop));
    GPU_CHECK(gpu(EventElapsedTime)(&ms[i], start, stop));
  }
  GPU_CHECK(gpu(GetLastError)());
  GPU_CHECK(gpu(EventDestroy)(start));
  GPU_CHECK(gpu(EventDestroy)(stop));
  std::sort(ms.begin(), ms.end());
  return ms[reps / 2];
}

// Grid for the row loop `for (row = blockIdx.x; row < rows; row += gridDim.x)`: A07_ROW_GRID_WAVES
// times as many blocks as the device holds at once (course_constants.h), never more than there are
// rows; every block loops over the rows it is dealt, so any row count works.
inline unsigned row_grid(long long rows) {
  static int sms = 0;  // asked once: the device-properties query is slow
  if (sms == 0) {
    int dev = 0;
    gpuDeviceProp p;
    GPU_CHECK(gpu(GetDevice)(&dev));
    GPU_CHECK(gpu(GetDeviceProperties)(&p, dev));
    sms = p.multiProcessorCount;
  }
  return unsigned(std::min<long long>(rows, (long long)sms * (A07_THREADS_PER_SM / BLOCK) * A07_ROW_GRID_WAVES));
}

inline void poison(float* d, size_t n) {  // 0xFF bytes are a NaN: an unwritten output shows
  GPU_CHECK(gpu(Memset)(d, 0xFF, n * sizeof(float)));
}

inline void print_device_header(const char* lab) {
  int dev = 0;
  gpuDeviceProp p;
  GPU_CHECK(gpu(GetDevice)(&dev));
  GPU_CHECK(gpu(GetDeviceProperties)(&p, dev));
  std::printf("%s on %s (%s, %d SMs/CUs, warpSize %d), BLOCK %d\n", lab, p.name, A07_VENDOR,
              p.multiProcessorCount, p.warpSize, BLOCK);
}

inline int arg_int(int argc, char** argv, int i, int fallback) {
  if (argc <= i) return fallback;
  const long v = std::strtol(argv[i], nullptr, 10);
  if (v <= 0 || v > std::numeric_limits<int>::max()) {
    std::fprintf(stderr, "argument %d must be a positive integer, got '%s'\n", i, argv[i]);
    std::exit(2);
  }
  return int(v);
}

}  // namespace lab
#endif  // A07_HOST

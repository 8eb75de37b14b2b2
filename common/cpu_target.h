// cpu_target.h -- the course's third target: the CUDA/HIP teaching kernels compiled by the system
// C++ compiler and run on the CPU, so that a laptop without a GPU (and CI) executes the same
// kernel source against float64 instead of only compiling it.
//
// Force-included ahead of the kernel source (g++ -std=c++20 -include cpu_target.h). It stands in
// for what nvcc/hipcc provide: the qualifiers, threadIdx/blockIdx/blockDim/gridDim, warpSize,
// __shared__ memory, __syncthreads(), warp shuffles, atomics and the float intrinsics, and then
// lets portability.h take its device-only path (as NVRTC does). What a CPU cannot give is absent:
// inline PTX (clusters, cache hints, the fast softmax) does not compile here, and the launcher
// says so.
//
// Execution model: a block's threads are fibers (ucontext) scheduled cooperatively on one CPU
// thread; blocks run one after another. A thread runs until it reaches a barrier: __syncthreads()
// for the block, or a warp shuffle (a barrier over its warp, as __shfl_xor_sync is on a GPU). When
// every thread of the block (or warp) has arrived, all go on. A barrier that not every thread
// reaches is found at once and reported as a deadlock, naming the barrier and how many threads
// arrived, instead of a hang. warpSize is A07_CPU_WARP (32, or 64 as on AMD CDNA). Shared memory
// is one static object per __shared__ declaration, shared by the block's threads, as on a GPU.
// What it cannot catch: a data race that a missing barrier would cause on a GPU only shows here if
// the cooperative order exposes it (a thread runs ahead of the others until it blocks, which makes
// many missing barriers visible, but not all), and nothing about timing or memory coalescing.
#pragma once
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <functional>
#include <vector>

// CUDA's math API declares isnan, isinf and isfinite in the global namespace (device code, a
// learner's exercise included, calls them unqualified); <cmath> declares them in std only
using std::isinf, std::isfinite, std::isnan;

#define __CUDACC_RTC__ 1  // portability.h: the device-only path, no runtime headers
#define A07_CPU_BUILD 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __shared__ static

#ifndef A07_CPU_WARP
#define A07_CPU_WARP 32
#endif
#define warpSize A07_CPU_WARP

// The vector types portability.h names; the CPU target never executes what uses them (inline PTX).
struct uint4 { unsigned x, y, z, w; };
struct float4 { float x, y, z, w; };
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
inline unsigned long long __cvta_generic_to_shared(const void* p) { return reinterpret_cast<unsigned long long>(p); }

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};
inline dim3 threadIdx;  // set by the scheduler before it switches to a thread
inline dim3 blockIdx;
inline dim3 blockDim;
inline dim3 gridDim;

#include <ucontext.h>

namespace a07cpu {
struct Fiber {
  ucontext_t ctx;
  std::unique_ptr<char[]> stack;
  bool done = false;
  const char* waiting = nullptr;  // the barrier it waits at, for the deadlock report
};
struct Barrier {
  unsigned arrived = 0;
  unsigned long long generation = 0;
};
struct WarpSync {
  Barrier bar;
  unsigned long long slot[64];
};
constexpr size_t STACK_BYTES = 256 * 1024;
inline std::vector<Fiber> fibers;
inline std::vector<WarpSync> warps;
inline Barrier block_bar;
inline ucontext_t scheduler;
inline unsigned current = 0;
inline unsigned long long progress = 0;
inline void (*entry)() = nullptr;

inline void arrive_and_wait(Barrier& b, unsigned count, const char* what) {
  const unsigned long long gen = b.generation;
  ++progress;
  if (++b.arrived == count) {
    b.arrived = 0;
    ++b.generation;
    return;
  }
  while (b.generation == gen) {
    fibers[current].waiting = what;
    swapcontext(&fibers[current].ctx, &scheduler);
  }
  fibers[current].waiting = nullptr;
}

inline void trampoline() {
  entry();
  fibers[current].done = true;
  ++progress;
  swapcontext(&fibers[current].ctx, &scheduler);
}
}  // namespace a07cpu

inline void __syncthreads() { a07cpu::arrive_and_wait(a07cpu::block_bar, blockDim.x, "__syncthreads()"); }

template <class T>
inline T __shfl_xor_sync(unsigned, T v, int lane_mask) {
  static_assert(sizeof(T) <= sizeof(unsigned long long), "a shuffle moves at most 8 bytes");
  auto& w = a07cpu::warps[threadIdx.x / warpSize];
  const unsigned lane = threadIdx.x % warpSize;
  std::memcpy(&w.slot[lane], &v, sizeof(T));
  a07cpu::arrive_and_wait(w.bar, warpSize, "a warp shuffle");  // every lane has written
  T r;
  std::memcpy(&r, &w.slot[(lane ^ unsigned(lane_mask)) % warpSize], sizeof(T));
  a07cpu::arrive_and_wait(w.bar, warpSize, "a warp shuffle");  // every lane has read
  return r;
}
template <class T>
inline T __shfl_xor(T v, int lane_mask) { return __shfl_xor_sync(0u, v, lane_mask); }

inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __log2f(float x) { return std::log2(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline float __int_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
inline unsigned __float_as_uint(float f) { unsigned i; std::memcpy(&i, &f, 4); return i; }
inline float fabsf(float x) { return std::fabs(x); }
inline float fmaxf(float a, float b) { return std::fmax(a, b); }
inline float fminf(float a, float b) { return std::fmin(a, b); }
template <class T>
inline T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
template <class T>
inline T atomicMax(T* p, T v) {
  T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (old < v && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
  return old;
}

namespace a07cpu {
// Run kernel<<<grid, block>>>(args...): the block's threads as fibers, blocks in turn. Exits with
// status 3 and a message on a deadlock (a barrier some threads never reach).
template <class Kernel, class... Args>
void launch(Kernel kernel, unsigned grid, unsigned block, Args... args) {
  if (block == 0 || block % warpSize || block > 1024) {
    std::fprintf(stderr, "a07cpu: block size %u must be a multiple of warpSize %d, at most 1024\n", block, warpSize);
    std::exit(2);
  }
  gridDim = dim3{grid, 1, 1};
  blockDim = dim3{block, 1, 1};
  static std::function<void()> body;
  for (unsigned b = 0; b < grid; ++b) {
    blockIdx = dim3{b, 0, 0};
    body = [=] { kernel(args...); };
    entry = [] { body(); };
    block_bar = Barrier{};
    warps = std::vector<WarpSync>(block / warpSize);
    fibers = std::vector<Fiber>(block);
    for (unsigned t = 0; t < block; ++t) {
      Fiber& f = fibers[t];
      f.stack.reset(new char[STACK_BYTES]);
      getcontext(&f.ctx);
      f.ctx.uc_stack.ss_sp = f.stack.get();
      f.ctx.uc_stack.ss_size = STACK_BYTES;
      f.ctx.uc_link = nullptr;
      makecontext(&f.ctx, trampoline, 0);
    }
    for (unsigned alive = block; alive > 0;) {
      const unsigned long long before = progress;
      alive = 0;
      for (unsigned t = 0; t < block; ++t) {
        if (fibers[t].done) continue;
        current = t;
        threadIdx = dim3{t, 0, 0};
        swapcontext(&scheduler, &fibers[t].ctx);
        alive += !fibers[t].done;
      }
      if (alive && progress == before) {  // every live thread waits, and no barrier can complete
        unsigned finished = 0, first = block;
        const char* what = "a barrier";
        for (unsigned t = 0; t < block; ++t) {
          finished += fibers[t].done;
          if (!fibers[t].done && first == block) first = t, what = fibers[t].waiting ? fibers[t].waiting : what;
        }
        std::fprintf(stderr,
                     "deadlock in block %u: thread %u (and %u others) wait at %s that the other threads never "
                     "reach (%u threads finished the kernel): a barrier or shuffle inside code that not every "
                     "thread runs?\n", b, first, alive - 1, what, finished);
        std::exit(3);
      }
    }
  }
}

// The poison an output starts as: NaN (its bits for the 16-bit types), so an element the kernel
// never writes shows up.
template <class T>
T poison() {
  if constexpr (sizeof(T) == 2) return T(0x7fff);
  else return T(NAN);
}

// Outputs get GUARD poisoned elements past their end: a kernel that writes there (an off-by-one
// bound) is reported, where a GPU would silently overwrite whatever follows.
constexpr size_t GUARD = 64;
template <class T>
void check_guard(const std::vector<T>& v, size_t n) {
  for (size_t i = n; i < v.size(); ++i)
    if (const T p = poison<T>(); std::memcmp(&v[i], &p, sizeof(T)) != 0) {  // any write, even a NaN of other bits
      std::fprintf(stderr, "the kernel wrote past the end of its output: element %zu of %zu (an off-by-one bound?)\n", i, n);
      std::exit(4);
    }
}

template <class T>
std::vector<T> read(const char* path, size_t n) {
  std::vector<T> v(n);
  FILE* f = std::fopen(path, "rb");
  if (!f || std::fread(v.data(), sizeof(T), n, f) != n) {
    std::fprintf(stderr, "a07cpu: cannot read %zu values from %s\n", n, path);
    std::exit(2);
  }
  std::fclose(f);
  return v;
}

template <class T>
void write(const char* path, const std::vector<T>& v) {
  FILE* f = std::fopen(path, "wb");
  if (!f || std::fwrite(v.data(), sizeof(T), v.size(), f) != v.size()) {
    std::fprintf(stderr, "a07cpu: cannot write %s\n", path);
    std::exit(2);
  }
  std::fclose(f);
}
}  // namespace a07cpu

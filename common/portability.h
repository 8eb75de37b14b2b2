// portability.h -- the only place where CUDA and HIP differ.
//
// Every kernel in cuda/ and hip/ is written once against the names below. Compare PyTorch's
// WARP_SHFL_XOR in ATen/cuda/DeviceUtils.cuh: one macro hides __shfl_xor_sync (CUDA, explicit
// lane mask) versus __shfl_xor (HIP, whole wavefront).
//
// The same file is read by four compilers: nvcc, NVRTC (CuPy RawModule on NVIDIA), hipcc and
// hiprtc (CuPy RawModule on ROCm). The runtime compilers get no host headers, so host code is
// hidden behind A07_HOST.
#pragma once

#if defined(__HIPCC__) || defined(__HIPCC_RTC__) || defined(__HIP_PLATFORM_AMD__)
#define A07_VENDOR "HIP"
#define A07_HIP_BUILD 1
#if !defined(__HIPCC_RTC__)
#include <hip/hip_runtime.h>
#define A07_HOST 1
typedef hipDeviceProp_t gpuDeviceProp;
#endif
// A wavefront shuffle: every lane takes part, no mask.
#define SHFL_XOR(value, lane_mask) __shfl_xor((value), (lane_mask))
#define gpu(name) hip##name
#else
#define A07_VENDOR "CUDA"
#if !defined(__CUDACC_RTC__)
#include <cuda_runtime.h>
#define A07_HOST 1
typedef cudaDeviceProp gpuDeviceProp;
#endif
// All 32 lanes of the warp take part; the kernels call it only from converged code.
#define SHFL_XOR(value, lane_mask) __shfl_xor_sync(0xffffffffu, (value), (lane_mask))
#define gpu(name) cuda##name
#endif

// 16-bit floats travel as raw bits (unsigned short) so that no vendor header is needed; the
// conversions are the vendor part. bf16 -> float is a shift and needs nothing special.
//
// Two forms of the device helpers below: plain C++ (HIP, and the CPU target of common/cpu_target.h,
// whose compiler knows no PTX), and NVIDIA's with the one PTX instruction each stands for.
#if defined(A07_HIP_BUILD) || defined(A07_CPU_BUILD)
__device__ __forceinline__ float half_bits_to_float(unsigned short h) {
  return static_cast<float>(__builtin_bit_cast(_Float16, h));
}
// Two floats -> two 16-bit values in one 32-bit word, round to nearest even; lo in the low half.
__device__ __forceinline__ unsigned pack_half2(float lo, float hi) {
  return unsigned(__builtin_bit_cast(unsigned short, static_cast<_Float16>(lo))) |
         unsigned(__builtin_bit_cast(unsigned short, static_cast<_Float16>(hi))) << 16;
}
__device__ __forceinline__ unsigned bf16_bits_rne(float f) {  // round to nearest even, NaN stays NaN
  const unsigned u = __float_as_uint(f);
  return (u & 0x7fffffffu) > 0x7f800000u ? 0x7fc0u : (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}
__device__ __forceinline__ unsigned pack_bf162(float lo, float hi) { return bf16_bits_rne(lo) | bf16_bits_rne(hi) << 16; }
// 2^x, approximately (one hardware instruction where the compiler can use one).
__device__ __forceinline__ float fast_exp2(float x) { return exp2f(x); }
// A 16-byte load where `inside`, else four words of `other` (the NVIDIA form below adds an L2
// hint; HIP gets the plain load).
__device__ __forceinline__ uint4 load16_if(const void* p, bool inside, unsigned other) {
  return inside ? *reinterpret_cast<const uint4*>(p) : make_uint4(other, other, other, other);
}
// max(a, b) that returns NaN when either is NaN (fmaxf drops a NaN and would hide it: a row with a
// NaN must come out NaN, never as a softmax of the other values).
__device__ __forceinline__ float max_nan(float a, float b) { return a != a || a > b ? a : b; }
// Lane-wise max of two pairs of 16-bit values, NaN kept. Each half's max is one of its inputs, so
// the repacking is exact (a NaN comes back as the canonical quiet NaN).
__device__ __forceinline__ unsigned max_bf162(unsigned a, unsigned b) {
  const auto f = [](unsigned w) { return __uint_as_float(w << 16); };
  return pack_bf162(max_nan(f(a), f(b)), max_nan(f(a >> 16), f(b >> 16)));
}
__device__ __forceinline__ unsigned max_half2(unsigned a, unsigned b) {
  const auto f = [](unsigned w) { return half_bits_to_float(static_cast<unsigned short>(w)); };
  return pack_half2(max_nan(f(a), f(b)), max_nan(f(a >> 16), f(b >> 16)));
}
#define A07_HAS_CLUSTERS 0
#else
// 2^x on the special-function unit: the MUFU.EX2 alone. `.ftz`: results below FLT_MIN (1.2e-38)
// are 0. The form without .ftz returns them as subnormals for three more instructions per exp (a
// compare and two predicated multiplies) on a path that is at the copy ceiling, and buys nothing
// here: as CuPy compiles the kernels, the arithmetic around the exp flushes subnormals anyway
// (docs/performance.md). fp16 cannot hold such values at all.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// A 16-byte load of read-only data where `inside`, else four words of `other`. Two things differ
// from `inside ? *p : other`: the predicate sits on the load instruction itself, so no branch
// separates a thread's loads and they are all in flight together; and the load carries an L2
// eviction-priority hint, evict_last (a cache policy from createpolicy, which ptxas folds into a
// constant). Each input byte is read once, yet the hint makes the fast softmax faster and
// evict_first makes it slower (docs/performance.md has the measurements and their controls).
// -DA07_L2_HINT=0 builds the same predicated load without the hint: the control in those sweeps.
#ifndef A07_L2_HINT
#define A07_L2_HINT 1
#endif
__device__ __forceinline__ uint4 load16_if(const void* p, bool inside, unsigned other) {
  uint4 r;
#if A07_L2_HINT
  unsigned long long policy;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  asm("{\n .reg .pred p;\n setp.ne.b32 p, %4, 0;\n"
      " mov.b32 %0, %6;\n mov.b32 %1, %6;\n mov.b32 %2, %6;\n mov.b32 %3, %6;\n"
      " @p ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%5], %7;\n}"
      : "=&r"(r.x), "=&r"(r.y), "=&r"(r.z), "=&r"(r.w)
      : "r"(int(inside)), "l"(p), "r"(other), "l"(policy));
#else
  asm("{\n .reg .pred p;\n setp.ne.b32 p, %4, 0;\n"
      " mov.b32 %0, %6;\n mov.b32 %1, %6;\n mov.b32 %2, %6;\n mov.b32 %3, %6;\n"
      " @p ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%5];\n}"
      : "=&r"(r.x), "=&r"(r.y), "=&r"(r.z), "=&r"(r.w)
      : "r"(int(inside)), "l"(p), "r"(other));
#endif
  return r;
}
__device__ __forceinline__ float half_bits_to_float(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
// One PTX instruction converts and packs two values (the first source lands in the high half).
__device__ __forceinline__ unsigned pack_half2(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ unsigned pack_bf162(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
// max that keeps a NaN (max.NaN, sm_80 and later: one instruction, as fmaxf's max.f32 is).
__device__ __forceinline__ float max_nan(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
// Lane-wise max of two pairs of 16-bit values (one instruction for two elements), NaN kept.
__device__ __forceinline__ unsigned max_bf162(unsigned a, unsigned b) {
  unsigned r;
  asm("max.NaN.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
__device__ __forceinline__ unsigned max_half2(unsigned a, unsigned b) {
  unsigned r;
  asm("max.NaN.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
// Thread-block clusters and distributed shared memory: NVIDIA sm_90 and later only. Kernels that
// use them are compiled only where this is 1 (the Python launcher also checks the device).
#define A07_HAS_CLUSTERS 1
__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
// Cluster barrier, split: arrive (release our shared-memory writes) ... wait (acquire the others').
// The cluster kernel uses it twice per cluster lifetime: after setting up its mailbox, and before exit.
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
__device__ __forceinline__ unsigned smem_address(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
// The address of `addr` (a shared-memory address of ours) in block `rank` of the cluster: every
// block of a kernel has the same shared-memory layout.
__device__ __forceinline__ unsigned cluster_map(unsigned addr, unsigned rank) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
  return remote;
}
// mbarrier: a shared-memory word that completes a phase when its expected arrivals and bytes are in.
// mbar_expect() is the one arrival of a phase and announces how many bytes will land in it; a
// message (cluster_send_float4) may land before or after the announcement.
__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_address(bar)), "r"(arrivals) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");  // visible to the other blocks
}
__device__ __forceinline__ void mbar_expect(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_address(bar)), "r"(bytes) : "memory");
}
// Wait until the phase with this parity (0, 1, 0, ... for the barrier's 1st, 2nd, 3rd use) completes.
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity) {
  asm volatile(
      "{\n .reg .pred done;\n MBAR_WAIT_%=:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra MBAR_WAIT_%=;\n}\n" ::"r"(smem_address(bar)), "r"(parity) : "memory");
}
// One-sided message: write four 32-bit words into `slot` of block `rank` and count their 16 bytes on
// that block's `bar` (both given by their address in our own shared memory). No barrier, no waiting.
__device__ __forceinline__ void cluster_send_float4(float4* slot, unsigned long long* bar, unsigned rank, float4 v) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];"
               ::"r"(cluster_map(smem_address(slot), rank)), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w),
                 "r"(cluster_map(smem_address(bar), rank))
               : "memory");
}
#endif

// -inf without <math.h> (NVRTC and hiprtc have none): the IEEE-754 bit pattern.
#define A07_NEG_INF (__int_as_float(0xff800000))
#define A07_POS_INF (__int_as_float(0x7f800000))

#ifdef A07_HOST
#include <cstdio>
#include <cstdlib>
// gpu(Malloc) is cudaMalloc or hipMalloc; GPU_CHECK stops the program with the call and the error.
#define GPU_CHECK(call)                                                                       \
  do {                                                                                        \
    auto gpu_check_err_ = (call);                                                             \
    if (gpu_check_err_ != gpu(Success)) {                                                     \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,               \
                   gpu(GetErrorString)(gpu_check_err_));                                      \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)
#endif

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

// -inf without <math.h> (NVRTC and hiprtc have none): the IEEE-754 bit pattern.
#define A07_NEG_INF (__int_as_float(0xff800000))

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

// Lab 1 for AMD GPUs. The kernels are written once, in ../cuda/softmax.cu, against the names in
// ../common/portability.h (SHFL_XOR, gpu(Malloc), ...); hipcc and hiprtc compile that same text
// here. Reductions size themselves from warpSize, so on CDNA (64-lane wavefronts) nothing changes.
//   make hip GPU_ARCH=gfx942 && ./hip/bin/softmax [rows] [cols]
#include "softmax.cu"

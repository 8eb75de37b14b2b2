// Lab 2 for AMD GPUs: ../cuda/fused_softmax.cu compiled by hipcc (see hip/softmax.cpp).
//   make hip GPU_ARCH=gfx942 && ./hip/bin/fused_softmax [batch_heads] [seq]
#include "fused_softmax.cu"

// Lab 4's readable attention forward for AMD GPUs: the kernel is written once, in
// ../cuda/attention.cu, against the names in ../common/portability.h; hiprtc (through CuPy) and
// hipcc compile that same text here. Warps of 64 lanes change nothing in it: a tile still holds 32
// keys (the upper lanes score none), and each lane's slice of head_dim is read from warpSize.
#include "attention.cu"

// The cross-entropy target test and row count for AMD GPUs: ../cuda/cross_entropy_targets.cu, the
// same text, compiled by hiprtc (through CuPy) or hipcc. Nothing in it depends on the warp width.
#include "cross_entropy_targets.cu"

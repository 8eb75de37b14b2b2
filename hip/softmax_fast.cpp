// The fast softmax for AMD GPUs: ../cuda/softmax_fast.cu compiled by hipcc / hiprtc. Everything but
// the cluster strategy (an NVIDIA sm_90 feature; A07_HAS_CLUSTERS is 0 here) carries over: long rows
// take the 2-pass kernel. Wavefronts of 64 lanes change nothing: a group is at most 32 lanes and the
// block reductions size themselves from warpSize.
#include "softmax_fast.cu"

// cross_entropy_targets.cu -- what a07_softmax.cross_entropy asks of its targets before it returns:
// is any outside [0, vocab) and not ignore_index (a verdict the host waits for, written straight into
// pinned host memory), and how many rows count (the mean's divisor, and its reciprocal for the
// gradient, left on the device for the loss kernel: the host never reads them).
//
// One launch does both. It runs before the cross-entropy kernel on the same stream, so the host's
// wait for the verdict is a wait for this launch alone, never for the (much longer) loss kernel
// queued behind it: while the host prepares its next call the GPU still has that kernel to run.
// A launch through CuPy costs the host a fraction of a Triton launch plus the tensor operations it
// replaces (the host time of this call decides whether the GPU waits; docs/performance.md).
//
// One block walks every target (8 bytes each against a row of thousands of logits), UNROLL loads a
// thread in flight at a time, so that a few round trips to memory cover tens of thousands of rows.
// Each thread tallies its targets, and the block merges the tallies with the course's
// block_allreduce (online_softmax.h: shuffles, then one slot a warp): a shared-memory atomic from
// every thread would be serialised on one address, and took 36 us for 4096 targets on an H100
// (a tenth of the host time this launch is meant to save). Thread 0 writes the results, so
// nothing needs zeroing before the launch.
//
// One block is a latency-bound walk: on an H100 it took 2.8 us for 4096 targets, 9.8 us for 65536
// and 128 us for 2^20 (about 0.12 ns a target). Against the loss kernel's pass over a row of V
// logits (bf16, read and written at ~3 TB/s) that is about 90 / V of its time: nothing at a
// language model's vocabulary, 2 % at V = 4096, 18 % at V = 512. Many blocks would cut it there, at
// the price of a merge across blocks (a counter zeroed before each launch, or a last-block ticket).
#include "online_softmax.h"

#define TARGETS_UNROLL 8

struct TargetTally {
  unsigned kept;  // targets that are not ignore_index (rows are int32 in every kernel: no overflow)
  int outside;              // 1 if one of them is outside [0, vocab)
};
struct TallyOp {
  __device__ __forceinline__ TargetTally operator()(TargetTally a, TargetTally b) const {
    return TargetTally{a.kept + b.kept, a.outside | b.outside};
  }
};
__device__ __forceinline__ TargetTally shfl_xor(TargetTally v, int lane_mask) {
  return TargetTally{SHFL_XOR(v.kept, lane_mask), SHFL_XOR(v.outside, lane_mask)};
}

extern "C" __global__ void cross_entropy_targets(const long long* __restrict__ target, long long n, long long vocab,
                                                 long long ignore_index, int* __restrict__ verdict,
                                                 float* __restrict__ counted) {
  // verdict (may be null): 1 when a target is outside [0, vocab) and is not ignore_index, else 0.
  // counted (may be null): {rows whose target is not ignore_index, 1 / that number} (1/0 = inf, as
  // in PyTorch's mean over an all-ignored batch, whose loss is then 0/0 = NaN).
  // blockDim.x: a multiple of warpSize, at most 1024 (block_allreduce's condition).
  TargetTally mine{0u, 0};
  const long long step = (long long)blockDim.x * TARGETS_UNROLL;
  for (long long base = threadIdx.x; base < n; base += step) {
    long long t[TARGETS_UNROLL];
#pragma unroll
    for (int j = 0; j < TARGETS_UNROLL; ++j) {  // every load first: UNROLL of them in flight
      const long long i = base + (long long)j * blockDim.x;
      t[j] = i < n ? target[i] : ignore_index;
    }
#pragma unroll
    for (int j = 0; j < TARGETS_UNROLL; ++j) {
      const bool counts = t[j] != ignore_index;   // compared in 64 bits: 2^32 is not 0
      mine.kept += counts;
      mine.outside |= counts && (t[j] < 0 || t[j] >= vocab);
    }
  }
  const TargetTally all = block_allreduce(mine, TallyOp(), TargetTally{0u, 0});
  if (threadIdx.x == 0) {
    if (verdict) *verdict = all.outside;
    if (counted) {
      counted[0] = (float)all.kept;
      counted[1] = 1.0f / (float)all.kept;
    }
  }
}

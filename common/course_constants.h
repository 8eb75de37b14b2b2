// course_constants.h -- every number that device code and Python must agree on, written once.
//
// The C++ sources include this file; a07_softmax/constants.py reads the same lines (each
// `#define A07_NAME value` and each X(...) row of the tables below), and the Python launchers
// pass a value on to the compiler only when a caller overrides it (-DITEMS=8). So a change here
// reaches the kernels, their launchers, the traffic model and the checks together.
#pragma once

// Lab kernels: threads per block (a power of two, a multiple of both 32 and 64 lanes).
#define A07_BLOCK 256
// Lab kernels that keep a row in registers hold ITEMS values per thread: cols <= BLOCK * ITEMS.
#define A07_ITEMS 4
// The most ITEMS a launcher compiles for (a thread then holds 2 x 32 floats: the row and the next).
#define A07_ITEMS_MAX 32
// Resident threads per SM (NVIDIA) or CU (AMD CDNA) on current parts.
#define A07_THREADS_PER_SM 2048
// Row-loop grids hold this many device-fulls of blocks, so blocks that finish early are replaced
// instead of leaving an SM part-idle at the end (docs/performance.md, "row grid").
#define A07_ROW_GRID_WAVES 8

// Fast softmax: block size of the warp strategy (groups of lanes per row) and of the 2-pass one.
#define A07_FAST_WARP_THREADS 64
#define A07_FAST_TWOPASS_THREADS 1024

// Largest max relative error against float64 that a kernel's output may have, per output dtype
// (a07_softmax/accuracy.py defines the error; the standalone lab programs use the float32 one).
// Below this fraction of the largest |ref|, an output's error counts against that floor instead of
// against itself (the error measure's floor for probabilities).
#define A07_RELATIVE_FLOOR 1e-6
#define A07_TOL_FLOAT64 1e-9
#define A07_TOL_FLOAT32 2e-5
#define A07_TOL_FLOAT16 2e-3
#define A07_TOL_BFLOAT16 1.6e-2

// Lab 1: the four softmaxes, in teaching order, with the times each one reads and writes the
// tensor (the traffic model). X(name, reads, writes)
#define A07_LAB1_KERNELS(X)       \
  X(softmax_naive_unsafe, 2, 1)   \
  X(softmax_safe_3pass, 3, 1)     \
  X(softmax_online_2pass, 2, 1)   \
  X(softmax_online_1pass, 1, 1)

// Lab 2: the unfused (three launches: scale 1R+1W, mask 1R+1W, Lab 1's 2-pass 2R+1W) and the
// fused path. X(name, reads, writes)
#define A07_LAB2_PATHS(X)               \
  X(scale_mask_softmax_unfused, 4, 3)   \
  X(scale_mask_softmax_fused, 1, 1)

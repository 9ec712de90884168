// What the few-channel convolutions' two files share (conv2d_small.cc: the
// forward kernels and the fused max pooling; conv2d_small_backward.cc: the
// weight gradient): the input as the kernels read it, each tap's offset in
// it, and how many compute threads a geometry is worth. Internal to
// services/tensor. Thread-safety and failure as conv2d_small.h says.
#pragma once

#include <array>
#include <cstdint>

#include "services/tensor/conv2d.h"

namespace tfjob::small_conv::internal {

constexpr int64_t kMaxTaps = 32;

// The (padded) input the kernels read: valid positions only.
struct Input {
  const float* x;
  int64_t height, width;  // of the (padded) input
};

// The input as the kernels read it: x itself for "valid" float32, else a
// copy in `buf` (InputElements(g) floats; zero-padded for "same", rounded
// to bfloat16 when asked).
Input Prepare(const Conv2DGeometry& g, const float* x, bool round_bf16, float* buf);
int64_t InputElements(const Conv2DGeometry& g);

// Each tap's (ky, kx, c: HWIO's row order) input offset from its output
// pixel's first input.
std::array<int64_t, kMaxTaps> TapOffsets(const Conv2DGeometry& g, const Input& in);

// `from`'s n floats rounded to bfloat16 into `to` (n floats); returns `to`.
const float* RoundedToBfloat16(const float* from, int64_t n, float* to);

// The compute threads a geometry's batch is split over (1 for small ones).
int ThreadsFor(const Conv2DGeometry& g);

}  // namespace tfjob::small_conv::internal

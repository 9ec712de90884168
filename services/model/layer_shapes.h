// Shape helpers the layer files share: a batch's shape, an input's check
// and its error text, and TensorFlow's output size and padding of one
// spatial axis. Internal to services/model (and the GPU kernels that must
// agree with it).
// Thread-safety: pure inline functions. Failure: none.
#pragma once

#include <algorithm>
#include <string>

#include "services/model/layers.h"

namespace tfjob::model::internal {

// [batch] + per_example.
inline Shape WithBatch(int64_t batch, const Shape& per_example) {
  Shape s{batch};
  s.insert(s.end(), per_example.begin(), per_example.end());
  return s;
}

// True when x is `dtype` with per-example shape `per_example`.
inline bool Matches(const Tensor& x, DType dtype, const Shape& per_example) {
  return x.dtype() == dtype && x.rank() == static_cast<int>(per_example.size()) + 1 &&
         std::equal(per_example.begin(), per_example.end(), x.shape().begin() + 1);
}

inline std::string Expected(DType dtype, const Shape& per_example, const Tensor& got) {
  return "expected input " + std::string(DTypeName(dtype)) + ShapeString(WithBatch(-1, per_example)) + ", got " +
         got.DebugString();
}

// Output size and leading padding of one spatial axis, as TensorFlow
// computes them: "valid" fits whole windows only; "same" gives ceil(in /
// stride) outputs and pads the total shortfall, the smaller half first.
struct AxisGeometry {
  int64_t out = 0;
  int64_t pad_before = 0;
};
inline AxisGeometry Geometry(int64_t in, int64_t window, int64_t stride, Padding padding) {
  AxisGeometry g;
  if (padding == Padding::kValid) {
    g.out = in >= window ? (in - window) / stride + 1 : 0;
    return g;
  }
  g.out = (in + stride - 1) / stride;
  const int64_t total = std::max<int64_t>((g.out - 1) * stride + window - in, 0);
  g.pad_before = total / 2;
  return g;
}

}  // namespace tfjob::model::internal

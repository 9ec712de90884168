// What the layer files share: the factories MakeLayer dispatches to, and
// small shape helpers. Internal to services/model.
// Thread-safety: stateless helpers. Failure: none (helpers), factories never fail.
#pragma once

#include <algorithm>
#include <memory>
#include <string>

#include "services/model/layers.h"
#include "services/model/preprocessing.h"
#include "services/model/text.h"

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

// A layer whose state comes from the training data (Keras' adapt()): the
// model hands it what reaches it from the whole training set, once, before
// the initial values are taken (Model::Adapt).
class AdaptableLayer : public Layer {
 public:
  using Layer::Layer;
  virtual bool adaptable() const = 0;  // false when its state was given
  virtual Status Adapt(const Tensor& inputs) = 0;
  virtual int64_t adapt_count() const = 0;  // examples adapted to; 0 before
};

std::unique_ptr<Layer> MakeConv2D(const LayerSpec& spec);
std::unique_ptr<Layer> MakePooling2D(const LayerSpec& spec);  // max, average, global average
std::unique_ptr<Layer> MakeBatchNormalization(const LayerSpec& spec);
std::unique_ptr<Layer> MakeNormalization(const LayerSpec& spec);
std::unique_ptr<Layer> MakeDropout(const LayerSpec& spec);
std::unique_ptr<Layer> MakeReshape(const LayerSpec& spec);
StatusOr<std::unique_ptr<Layer>> MakeLookupLayer(const LayerSpec& spec);  // String/IntegerLookup
std::unique_ptr<Layer> MakeMerge(const LayerSpec& spec);                  // Add ... Dot (merge.cc)
// The layers added for Functional models (layers_more.cc): their factory,
// INVALID_ARGUMENT for a type that is none of them.
StatusOr<std::unique_ptr<Layer>> MakeMoreLayer(const LayerSpec& spec);
// The table of a lookup layer; nullptr for any other layer.
const Lookup* LookupTable(const Layer& layer);

}  // namespace tfjob::model::internal

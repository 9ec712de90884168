// The interface of layers adapted to the training data (Keras' adapt():
// Normalization, the lookups, TextVectorization), which Model::Adapt walks.
// Internal to services/model.
// Thread-safety: as Layer (one thread at a time). Failure: Adapt returns
// INVALID_ARGUMENT for data the layer cannot take.
#pragma once

#include "services/model/layers.h"

namespace tfjob::model::internal {

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

}  // namespace tfjob::model::internal

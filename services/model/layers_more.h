// What the files of the layers added for Functional models share: their
// family factories (layers_more.cc dispatches to them) and a base for layers
// computed on the host only. Internal to services/model.
// Thread-safety: as layers.h. Failure: factories never fail; HostLayer's
// checks return INVALID_ARGUMENT naming the layer.
#pragma once

#include <memory>
#include <string>

#include "services/model/layer_shapes.h"

namespace tfjob::model::internal {

// A layer without CUDA kernels: Model::CheckDeviceSupport refuses it on a
// device, so Forward sees host tensors only (CheckInput says so otherwise).
class HostLayer : public Layer {
 public:
  using Layer::Layer;
  bool device_kernels() const override { return false; }

 protected:
  // x matches the shape Build saw (in_shape_) and dtype; the batch is kept.
  Status CheckInput(const Tensor& x, DType dtype = DType::kFloat32) {
    if (!x.on_cpu()) return Error("has no CUDA kernels; its input must be on the host");
    if (!Matches(x, dtype, in_shape_)) return Error(Expected(dtype, in_shape_, x));
    batch_ = x.dim(0);
    return Status::Ok();
  }
  Status CheckGradient(const Tensor& dy, const Shape& out_per_example) const {
    if (!dy.on_cpu() || dy.shape() != WithBatch(batch_, out_per_example)) {
      return Error("gradient " + dy.DebugString() + " does not match the output " +
                   ShapeString(WithBatch(batch_, out_per_example)));
    }
    return Status::Ok();
  }

  Shape in_shape_;
  int64_t batch_ = 0;
};

// A variable with its Keras regularizer and constraint.
inline VariableSpec Weight(const std::string& name, Shape shape, const Initializer& init, const Regularizer& r,
                           const Constraint& c) {
  VariableSpec v(name, std::move(shape), init);
  v.regularizer = r;
  v.constraint = c;
  return v;
}

// activation_layers.cc: ReLU, LeakyReLU, ELU, ThresholdedReLU, Rescaling,
// Softmax, PReLU.
std::unique_ptr<Layer> MakeActivationLayer(const LayerSpec& spec);
// layer_norm.cc
std::unique_ptr<Layer> MakeLayerNormalization(const LayerSpec& spec);
// shape_layers.cc: Permute, RepeatVector, ZeroPadding1D/2D, Cropping1D/2D,
// UpSampling1D/2D.
std::unique_ptr<Layer> MakeShapeLayer(const LayerSpec& spec);
// noise_layers.cc: SpatialDropout1D/2D, GaussianNoise, GaussianDropout.
std::unique_ptr<Layer> MakeNoiseLayer(const LayerSpec& spec);
// pooling_more.cc: the 1D poolings and the global ones beyond
// GlobalAveragePooling2D.
std::unique_ptr<Layer> MakePoolingMore(const LayerSpec& spec);
// conv_more.cc: Conv1D, DepthwiseConv2D, SeparableConv2D, Conv2DTranspose.
std::unique_ptr<Layer> MakeConvMore(const LayerSpec& spec);
// encoding_layers.cc: CategoryEncoding, Hashing.
std::unique_ptr<Layer> MakeEncodingLayer(const LayerSpec& spec);
// recurrent.cc: SimpleRNN, LSTM, GRU.
std::unique_ptr<Layer> MakeRecurrent(const LayerSpec& spec);
std::unique_ptr<Layer> MakeOutputPart(const LayerSpec& spec);
// wrappers.cc: Bidirectional, TimeDistributed.
std::unique_ptr<Layer> MakeWrapper(const LayerSpec& spec);
// masking.cc
std::unique_ptr<Layer> MakeMasking(const LayerSpec& spec);
// text.cc: the TextVectorization layer (the model checks its vocabulary
// and keeps its table: Model::Build).
std::unique_ptr<Layer> MakeTextVectorization(const LayerSpec& spec);

}  // namespace tfjob::model::internal

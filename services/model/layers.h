// Layers of a model. A layer owns no parameter values: the model
// passes them in (so a worker can train with values pulled from parameter
// servers), and the layer caches what Forward saw for the next Backward.
//
// Thread-safety: a layer instance serves one training thread (its cache is
// per call sequence). Failure: shape, dtype and index problems are returned as
// INVALID_ARGUMENT naming the layer.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "services/model/initializers.h"
#include "services/model/spec.h"
#include "services/tensor/tensor.h"

namespace tfjob::model {

struct VariableSpec {
  VariableSpec() = default;
  VariableSpec(std::string name, Shape shape, Initializer init = Initializer::kZeros, bool sparse_grad = false)
      : name(std::move(name)), shape(std::move(shape)), init(init), sparse_grad(sparse_grad) {}

  std::string name;  // "dense/kernel"
  Shape shape;
  Initializer init = Initializer::kZeros;
  // Keras' kernel_regularizer / bias_regularizer: a penalty added to the loss.
  Regularizer regularizer;
  // Keras' kernel_constraint / bias_constraint: applied after each update.
  Constraint constraint;
  // Gradients arrive as rows (indices + values), as for embeddings.
  bool sparse_grad = false;
  // Non-trainable state (BatchNormalization's moving statistics, adapted
  // Normalization statistics): no optimizer touches it; its "gradient" is a
  // delta (Gradient::delta) added as is.
  bool trainable = true;
  Tensor value;  // the initial value, for Initializer::kValue
};

// A gradient for one variable: dense, or a set of distinct rows. For a
// non-trainable variable it is a delta: dense, marked `delta`, added to the
// variable without the optimizer (replicas' deltas are averaged like their
// gradients, as MirroredStrategy averages the moving statistics' updates).
struct Gradient {
  Gradient() = default;
  Gradient(bool sparse, Tensor dense, Tensor indices, Tensor values, bool delta = false)
      : sparse(sparse), dense(std::move(dense)), indices(std::move(indices)), values(std::move(values)), delta(delta) {}

  bool sparse = false;
  Tensor dense;
  Tensor indices;  // int64 [k], distinct
  Tensor values;   // float32 [k, ...row shape]
  bool delta = false;
};

class Layer {
 public:
  explicit Layer(LayerSpec spec) : spec_(std::move(spec)) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return spec_.name; }
  const LayerSpec& spec() const { return spec_; }

  // Validates the per-example input and returns the per-example output shape.
  virtual StatusOr<Shape> Build(const Shape& input_shape, DType input_dtype) = 0;
  // The dtype of the output (after Build): float32 but for lookups.
  virtual DType output_dtype() const { return DType::kFloat32; }
  virtual std::vector<VariableSpec> Variables() const { return {}; }

  // `params` has one tensor per Variables() entry, in order.
  virtual StatusOr<Tensor> Forward(std::span<const Tensor> params, const Tensor& x, bool training) = 0;
  // Consumes `dy` (it may be modified); writes one gradient per variable into
  // `grads`; returns dL/dx, or an empty tensor when !need_input_grad.
  virtual StatusOr<Tensor> Backward(std::span<const Tensor> params, Tensor dy, bool need_input_grad,
                                    std::span<Gradient> grads) = 0;

  // Merge layers (Add, Concatenate, ...) take several inputs: arity() is
  // their count, or 0 for "two or more". The model calls the *Multi forms
  // for them and the single forms above for every other layer (whose
  // arity() is 1); the defaults of each form report the mix-up.
  virtual int arity() const { return 1; }
  virtual StatusOr<Shape> BuildMulti(std::span<const Shape> in, std::span<const DType> dtypes);
  virtual StatusOr<Tensor> ForwardMulti(std::span<const Tensor> params, std::span<const Tensor> xs, bool training);
  // dL/dx for each input: an empty tensor where need_input_grad[i] is false.
  virtual StatusOr<std::vector<Tensor>> BackwardMulti(std::span<const Tensor> params, Tensor dy,
                                                      const std::vector<bool>& need_input_grad,
                                                      std::span<Gradient> grads);
  // A max pooling fused into the layer before it (Model::Build: a Conv2D
  // whose only consumer is a MaxPooling2D whose windows tile its input), so
  // that the convolution's output, pool_h x pool_w times the pooling's, is
  // never stored. TiledMaxPool: such a pooling's [pool_h, pool_w].
  // FuseMaxPool: whether this layer takes it as its epilogue, producing
  // `pooled_shape` per example. pooled(): whether the last Forward did (the
  // pooling layer then passes the value and its gradient on untouched, and
  // this layer's Backward takes the pooled gradient); a call it cannot fuse
  // (a device, a precision) returns the layer's own output as before.
  virtual std::optional<std::array<int64_t, 2>> TiledMaxPool() const { return std::nullopt; }
  virtual bool FuseMaxPool(std::array<int64_t, 2> /*pool*/, const Shape& /*pooled_shape*/) { return false; }
  virtual bool pooled() const { return false; }
  // A plain ReLU (Keras' defaults) fused into the layer before it in the
  // same way (Model::Build: a BatchNormalization or an Add whose only
  // reader it is), so that its output and gradient come out of that
  // layer's own passes instead of two more passes over the activations.
  // PlainRelu: whether this layer is one. FuseRelu: whether this layer
  // takes it as its epilogue. relu_fused(): whether the last Forward applied
  // it (the ReLU then passes the value and its gradient on untouched, and
  // this layer's Backward takes the ReLU's output gradient); a call it
  // cannot fuse (on a device) returns the layer's own output as before.
  virtual bool PlainRelu() const { return false; }
  virtual bool FuseRelu() { return false; }
  virtual bool relu_fused() const { return false; }

  // Whether the layer computes on a CUDA device (Model::CheckDeviceSupport).
  virtual bool device_kernels() const { return true; }
  // The oneDNN kernel the last Forward on the CPU ran, where the layer
  // calls one by name (Conv2D: "jit_wino_4x3:avx512_core", ...); "" else.
  virtual std::string cpu_kernel() const { return ""; }

  // Keras' masks: which time steps of each example are real, a host
  // float32 [batch, time] of 1 (real) and 0 (padding). Masking and
  // Embedding(mask_zero) make one; the recurrent layers and
  // GlobalAveragePooling1D consume it (padded steps neither update the
  // state nor count); layers that compute each step on its own (Dense,
  // activations, dropout, LayerNormalization, TimeDistributed) pass it on; merges pass the
  // product of their inputs' masks (the model does that). Any other layer
  // refuses a masked input when the model is built, as Keras does.
  enum class MaskUse { kRefuse, kPass, kConsume };
  virtual MaskUse mask_use() const;
  // Whether the output carries a mask of the layer's own (a producer).
  virtual bool makes_mask() const { return false; }
  // Whether the output carries a mask, given whether the input does.
  bool output_masked(bool input_masked) const;
  // Before Forward: the input's mask, or an empty tensor.
  void SetInputMask(Tensor mask) { mask_ = std::move(mask); }
  // After Forward(x): the output's mask, or an empty tensor. The default
  // passes the input's on (kPass) and drops it otherwise; a recurrent layer
  // with return_sequences passes it; producers make theirs from x.
  virtual StatusOr<Tensor> OutputMask(const Tensor& x) const;

 protected:
  Status Error(const std::string& what) const;

  LayerSpec spec_;
  Tensor mask_;  // SetInputMask's
};

StatusOr<std::unique_ptr<Layer>> MakeLayer(const LayerSpec& spec);
// Keras' class name ("Conv2D").
std::string_view LayerTypeName(LayerType t);
// The same for the layers of layers_more.cc.
std::string_view MoreLayerTypeName(LayerType t);

}  // namespace tfjob::model

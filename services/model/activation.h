// Activation functions, applied in place on float32 tensors whose last axis is
// the feature axis. Most derivatives are functions of the output y, so layers
// cache only their output; gelu, swish and mish are not invertible that way,
// and for them (ActivationNeedsInput) a layer keeps the pre-activation x too.
// Only linear, relu, sigmoid, tanh and softmax have CUDA kernels
// (ActivationOnDevice); the device entry points refuse the others.
//
// Where Keras and TF.js disagree the goldens' side wins: hard_sigmoid is
// tf.keras 2's and TF.js' clip(0.2 x + 0.5, 0, 1), not Keras 3's
// relu6(x + 3) / 6; gelu is the exact erf form (Keras' default
// approximate=False, TF.js' "gelu"), gelu_new TF.js' tanh approximation;
// leaky_relu is Keras 3's with negative_slope 0.2 (TF.js has no such name).
// Thread-safety: stateless functions.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "services/tensor/tensor.h"

namespace tfjob::model {

enum class Activation {
  kLinear,
  kRelu,
  kSigmoid,
  kTanh,
  kSoftmax,
  kElu,
  kSelu,
  kSoftplus,
  kSoftsign,
  kSwish,
  kGelu,
  kGeluTanh,
  kHardSigmoid,
  kExponential,
  kRelu6,
  kLeakyRelu,
  kMish,
  kLogSoftmax,
};

// Keras names: "linear" (or absent), "relu", "sigmoid", "tanh", "softmax",
// "elu", "selu", "softplus", "softsign", "swish" / "silu", "gelu",
// "gelu_new", "hard_sigmoid", "exponential", "relu6", "leaky_relu", "mish",
// "log_softmax".
StatusOr<Activation> ParseActivation(std::string_view name);
std::string_view ActivationName(Activation a);

// Whether backward needs the pre-activation x (not only the output y).
bool ActivationNeedsInput(Activation a);
// Whether Activate/ActivateBackward run it on a CUDA device.
bool ActivationOnDevice(Activation a);

// Host tensors.
void ApplyActivation(Activation a, Tensor& x);
// grad (dL/dy) becomes dL/dx in place, given y = act(x). `x` may be empty
// unless ActivationNeedsInput(a).
void ActivationBackward(Activation a, const Tensor& x, const Tensor& y, Tensor& grad);
// The same for an activation that does not need x.
void ActivationBackward(Activation a, const Tensor& y, Tensor& grad);

// The same wherever the tensors live: on a device through its backend
// (errors: no backend, a failed launch, tensors on different devices, an
// activation without device kernels).
Status Activate(Activation a, Tensor& x);
Status ActivateBackward(Activation a, const Tensor& y, Tensor& grad);
Status ActivateBackward(Activation a, const Tensor& x, const Tensor& y, Tensor& grad);

}  // namespace tfjob::model

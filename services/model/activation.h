// Activation functions, applied in place on float32 tensors whose last axis is
// the feature axis. Backward works from the activation's output (all four
// derivatives are functions of it), so layers cache only their output.
// Thread-safety: stateless functions.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "services/tensor/tensor.h"

namespace tfjob::model {

enum class Activation { kLinear, kRelu, kSigmoid, kTanh, kSoftmax };

// Keras names: "linear" (or absent), "relu", "sigmoid", "tanh", "softmax".
StatusOr<Activation> ParseActivation(std::string_view name);
std::string_view ActivationName(Activation a);

// Host tensors.
void ApplyActivation(Activation a, Tensor& x);
// grad (dL/dy) becomes dL/dx in place, given y = act(x).
void ActivationBackward(Activation a, const Tensor& y, Tensor& grad);

// The same wherever the tensors live: on a device through its backend
// (errors: no backend, a failed launch, tensors on different devices).
Status Activate(Activation a, Tensor& x);
Status ActivateBackward(Activation a, const Tensor& y, Tensor& grad);

}  // namespace tfjob::model

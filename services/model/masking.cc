// Keras' Masking layer: a time step whose every value equals mask_value is
// padding. The layer zeroes such steps (as Keras multiplies its input by
// the mask) and starts a mask for the layers after it (layers.h).
#include <algorithm>

#include "services/model/layers_more.h"

namespace tfjob::model::internal {
namespace {

class Masking final : public HostLayer {
 public:
  using HostLayer::HostLayer;

  StatusOr<Shape> Build(const Shape& in, DType dtype) override {
    if (dtype != DType::kFloat32) return Error("expects float32 input, got " + std::string(DTypeName(dtype)));
    if (in.size() < 2 || NumElements(in) == 0) {
      return Error("expects input [time steps, features...] per example, got " + ShapeString(WithBatch(-1, in)));
    }
    in_shape_ = in;
    steps_ = in[0];
    row_ = NumElements(in) / steps_;
    return in;
  }

  bool makes_mask() const override { return true; }
  StatusOr<Tensor> OutputMask(const Tensor&) const override { return step_mask_; }

  StatusOr<Tensor> Forward(std::span<const Tensor>, const Tensor& x, bool) override {
    RETURN_IF_ERROR(CheckInput(x));
    const auto v = static_cast<float>(spec_.masking_value);
    step_mask_ = Tensor::Zeros(DType::kFloat32, {batch_, steps_});
    Tensor y = x.Clone();
    for (int64_t s = 0; s < batch_ * steps_; ++s) {
      float* row = y.data<float>() + s * row_;
      bool real = false;
      for (int64_t j = 0; j < row_ && !real; ++j) real = row[j] != v;
      step_mask_.data<float>()[s] = real ? 1.f : 0.f;
      if (!real) std::fill(row, row + row_, 0.f);
    }
    return y;
  }

  StatusOr<Tensor> Backward(std::span<const Tensor>, Tensor dy, bool need_input_grad, std::span<Gradient>) override {
    if (!need_input_grad) return Tensor();
    RETURN_IF_ERROR(CheckGradient(dy, in_shape_));
    for (int64_t s = 0; s < batch_ * steps_; ++s) {
      if (step_mask_.data<float>()[s] == 0)
        std::fill(dy.data<float>() + s * row_, dy.data<float>() + (s + 1) * row_, 0.f);
    }
    return dy;
  }

 private:
  int64_t steps_ = 0, row_ = 0;
  Tensor step_mask_;  // [batch, time] of the last Forward
};

}  // namespace

std::unique_ptr<Layer> MakeMasking(const LayerSpec& spec) { return std::make_unique<Masking>(spec); }

}  // namespace tfjob::model::internal

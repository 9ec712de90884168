// Keras' activation layers and Rescaling, on the host.
//
// The elementwise ones keep their input and differentiate from it: ReLU's
// clipping and threshold, ELU's alpha and Rescaling's affine map are not
// functions of the output alone. ReLU follows Keras 3 (max_value,
// negative_slope, threshold; TF.js has max_value only): y = min(x,
// max_value) above the threshold, negative_slope * (x - threshold) at or
// below it. Softmax normalizes along one axis of any rank; PReLU's alpha has
// the input's per-example shape with 1 on each shared axis.
#include <cmath>

#include "services/model/layers_more.h"

namespace tfjob::model::internal {
namespace {

class Elementwise final : public HostLayer {
 public:
  using HostLayer::HostLayer;

  StatusOr<Shape> Build(const Shape& in, DType dtype) override {
    const bool ints_ok = spec_.type == LayerType::kRescaling;
    if (dtype != DType::kFloat32 && !(ints_ok && dtype == DType::kInt64)) {
      return Error("expects float32 input, got " + std::string(DTypeName(dtype)));
    }
    if (spec_.type == LayerType::kReLU &&
        (spec_.negative_slope < 0 || spec_.threshold < 0 || (spec_.has_max_value && spec_.max_value < 0))) {
      return Error("max_value, negative_slope and threshold must be >= 0");
    }
    dtype_ = dtype;
    in_shape_ = in;
    return in;
  }

  bool PlainRelu() const override {
    return spec_.type == LayerType::kReLU && dtype_ == DType::kFloat32 && !spec_.has_max_value &&
           spec_.negative_slope == 0 && spec_.threshold == 0;
  }

  StatusOr<Tensor> Forward(std::span<const Tensor>, const Tensor& x, bool) override {
    RETURN_IF_ERROR(CheckInput(x, dtype_));
    x_ = x;
    ASSIGN_OR_RETURN(Tensor y, Tensor::CreateUninitialized(DType::kFloat32, x.shape()));
    float* out = y.data<float>();
    if (dtype_ == DType::kInt64) {
      const int64_t* in = x.data<int64_t>();
      for (int64_t i = 0; i < x.size(); ++i) out[i] = Apply(static_cast<float>(in[i]));
      return y;
    }
    const float* in = x.data<float>();
    const int64_t n = x.size();
    // The common layers as branch-free loops of their own (they vectorise);
    // the rest through Apply.
    const auto slope = static_cast<float>(spec_.negative_slope), thr = static_cast<float>(spec_.threshold);
    switch (spec_.type) {
      case LayerType::kReLU: {
        const float top = spec_.has_max_value ? static_cast<float>(spec_.max_value) : HUGE_VALF;
        Each(in, out, n, [=](float v) { return v > thr ? std::min(v, top) : slope * (v - thr); });
        break;
      }
      case LayerType::kLeakyReLU: Each(in, out, n, [=](float v) { return v > 0 ? v : slope * v; }); break;
      default: Each(in, out, n, [this](float v) { return Apply(v); });
    }
    return y;
  }

  StatusOr<Tensor> Backward(std::span<const Tensor>, Tensor dy, bool need_input_grad, std::span<Gradient>) override {
    if (!need_input_grad) return Tensor();
    if (dtype_ != DType::kFloat32) return Error("integer input has no gradient");
    RETURN_IF_ERROR(CheckGradient(dy, in_shape_));
    const float* in = x_.data<float>();
    float* g = dy.data<float>();
    const int64_t n = dy.size();
    const auto slope = static_cast<float>(spec_.negative_slope), thr = static_cast<float>(spec_.threshold);
    switch (spec_.type) {
      case LayerType::kReLU: {
        const float top = spec_.has_max_value ? static_cast<float>(spec_.max_value) : HUGE_VALF;
        Scale(in, g, n, [=](float v) { return v > thr ? (v >= top ? 0.f : 1.f) : slope; });
        break;
      }
      case LayerType::kLeakyReLU: Scale(in, g, n, [=](float v) { return v > 0 ? 1.f : slope; }); break;
      default: Scale(in, g, n, [this](float v) { return Derivative(v); });
    }
    return dy;
  }

 private:
  // out[i] = f(in[i]), and g[i] *= f(in[i]): loops the compiler vectorises
  // when f is branch-free (the pointers never alias).
  template <typename F>
  static void Each(const float* __restrict in, float* __restrict out, int64_t n, F f) {
    for (int64_t i = 0; i < n; ++i) out[i] = f(in[i]);
  }
  template <typename F>
  static void Scale(const float* __restrict in, float* __restrict g, int64_t n, F f) {
    for (int64_t i = 0; i < n; ++i) g[i] *= f(in[i]);
  }

  float Apply(float x) const {
    const auto slope = static_cast<float>(spec_.negative_slope), thr = static_cast<float>(spec_.threshold);
    const auto alpha = static_cast<float>(spec_.alpha);
    switch (spec_.type) {
      case LayerType::kReLU:
        if (x <= thr) return slope * (x - thr);
        return spec_.has_max_value ? std::min(x, static_cast<float>(spec_.max_value)) : x;
      case LayerType::kLeakyReLU: return x > 0 ? x : slope * x;
      case LayerType::kELU: return x > 0 ? x : alpha * std::expm1(x);
      case LayerType::kThresholdedReLU: return x > thr ? x : 0.f;
      case LayerType::kRescaling: return x * static_cast<float>(spec_.rescale) + static_cast<float>(spec_.offset);
      default: return x;
    }
  }

  float Derivative(float x) const {
    switch (spec_.type) {
      case LayerType::kReLU:
        if (x <= spec_.threshold) return static_cast<float>(spec_.negative_slope);
        return spec_.has_max_value && x >= spec_.max_value ? 0.f : 1.f;
      case LayerType::kLeakyReLU: return x > 0 ? 1.f : static_cast<float>(spec_.negative_slope);
      case LayerType::kELU: return x > 0 ? 1.f : static_cast<float>(spec_.alpha) * std::exp(x);
      case LayerType::kThresholdedReLU: return x > spec_.threshold ? 1.f : 0.f;
      case LayerType::kRescaling: return static_cast<float>(spec_.rescale);
      default: return 1.f;
    }
  }

  DType dtype_ = DType::kFloat32;
  Tensor x_;
};

// Softmax along one axis: the per-example tensor seen as [outer, n, inner].
class Softmax final : public HostLayer {
 public:
  using HostLayer::HostLayer;

  StatusOr<Shape> Build(const Shape& in, DType dtype) override {
    if (dtype != DType::kFloat32) return Error("expects float32 input, got " + std::string(DTypeName(dtype)));
    const auto rank = static_cast<int64_t>(in.size());
    const int64_t a = spec_.axis < 0 ? spec_.axis + rank + 1 : spec_.axis;  // counting the batch axis
    if (a < 1 || a > rank) {
      return Error("axis " + std::to_string(spec_.axis) + " is not a non-batch axis of input " +
                   ShapeString(WithBatch(-1, in)));
    }
    n_ = in[static_cast<size_t>(a - 1)];
    inner_ = 1;
    for (size_t d = static_cast<size_t>(a); d < in.size(); ++d) inner_ *= in[d];
    in_shape_ = in;
    return in;
  }

  StatusOr<Tensor> Forward(std::span<const Tensor>, const Tensor& x, bool) override {
    RETURN_IF_ERROR(CheckInput(x));
    y_ = x.Clone();
    float* v = y_.data<float>();
    ForEachLine(y_.size(), [&](int64_t base) {
      float mx = v[base];
      for (int64_t j = 1; j < n_; ++j) mx = std::max(mx, v[base + j * inner_]);
      float sum = 0;
      for (int64_t j = 0; j < n_; ++j) sum += v[base + j * inner_] = std::exp(v[base + j * inner_] - mx);
      for (int64_t j = 0; j < n_; ++j) v[base + j * inner_] /= sum;
    });
    return y_;
  }

  StatusOr<Tensor> Backward(std::span<const Tensor>, Tensor dy, bool need_input_grad, std::span<Gradient>) override {
    if (!need_input_grad) return Tensor();
    RETURN_IF_ERROR(CheckGradient(dy, in_shape_));
    const float* p = y_.data<float>();
    float* g = dy.data<float>();
    ForEachLine(dy.size(), [&](int64_t base) {
      float dot = 0;
      for (int64_t j = 0; j < n_; ++j) dot += g[base + j * inner_] * p[base + j * inner_];
      for (int64_t j = 0; j < n_; ++j) g[base + j * inner_] = p[base + j * inner_] * (g[base + j * inner_] - dot);
    });
    return dy;
  }

 private:
  // f(offset of a line's first element) for every line along the axis.
  template <typename F>
  void ForEachLine(int64_t total, F&& f) const {
    if (n_ == 0) return;
    for (int64_t o = 0; o < total / (n_ * inner_); ++o) {
      for (int64_t i = 0; i < inner_; ++i) f(o * n_ * inner_ + i);
    }
  }

  int64_t n_ = 0, inner_ = 1;
  Tensor y_;
};

class PReLU final : public HostLayer {
 public:
  using HostLayer::HostLayer;

  StatusOr<Shape> Build(const Shape& in, DType dtype) override {
    if (dtype != DType::kFloat32) return Error("expects float32 input, got " + std::string(DTypeName(dtype)));
    alpha_shape_ = in;
    for (int64_t a : spec_.shared_axes) {
      if (a < 1 || a > static_cast<int64_t>(in.size())) {
        return Error("shared_axes holds " + std::to_string(a) + ", not an axis of input " +
                     ShapeString(WithBatch(-1, in)) + " (1 is the first after the batch)");
      }
      alpha_shape_[static_cast<size_t>(a - 1)] = 1;
    }
    // Each element's alpha, by broadcasting alpha_shape_ over the input.
    alpha_index_.assign(static_cast<size_t>(NumElements(in)), 0);
    for (int64_t i = 0; i < NumElements(in); ++i) {
      int64_t rest = i, index = 0, stride = 1;
      for (size_t d = in.size(); d-- > 0;) {
        const int64_t coord = rest % in[d];
        rest /= in[d];
        if (alpha_shape_[d] != 1) index += coord * stride;
        stride *= alpha_shape_[d];
      }
      alpha_index_[static_cast<size_t>(i)] = index;
    }
    in_shape_ = in;
    return in;
  }

  std::vector<VariableSpec> Variables() const override {
    return {Weight(spec_.name + "/alpha", alpha_shape_, spec_.alpha_initializer, spec_.alpha_regularizer,
                   spec_.alpha_constraint)};
  }

  StatusOr<Tensor> Forward(std::span<const Tensor> params, const Tensor& x, bool) override {
    RETURN_IF_ERROR(CheckInput(x));
    x_ = x;
    Tensor y = x.Clone();
    float* v = y.data<float>();
    const float* alpha = params[0].data<float>();
    const auto per = static_cast<int64_t>(alpha_index_.size());
    for (int64_t i = 0; i < y.size(); ++i) {
      if (v[i] < 0) v[i] *= alpha[alpha_index_[static_cast<size_t>(i % per)]];
    }
    return y;
  }

  StatusOr<Tensor> Backward(std::span<const Tensor> params, Tensor dy, bool need_input_grad,
                            std::span<Gradient> grads) override {
    RETURN_IF_ERROR(CheckGradient(dy, in_shape_));
    Tensor da = Tensor::Zeros(DType::kFloat32, alpha_shape_);
    float* d = da.data<float>();
    const float* alpha = params[0].data<float>();
    const float* x = x_.data<float>();
    float* g = dy.data<float>();
    const auto per = static_cast<int64_t>(alpha_index_.size());
    for (int64_t i = 0; i < dy.size(); ++i) {
      if (x[i] >= 0) continue;
      const int64_t a = alpha_index_[static_cast<size_t>(i % per)];
      d[a] += g[i] * x[i];
      g[i] *= alpha[a];
    }
    grads[0] = Gradient{false, da, {}, {}};
    return need_input_grad ? dy : Tensor();
  }

 private:
  Shape alpha_shape_;
  std::vector<int64_t> alpha_index_;
  Tensor x_;
};

}  // namespace

std::unique_ptr<Layer> MakeActivationLayer(const LayerSpec& spec) {
  if (spec.type == LayerType::kSoftmax) return std::make_unique<Softmax>(spec);
  if (spec.type == LayerType::kPReLU) return std::make_unique<PReLU>(spec);
  return std::make_unique<Elementwise>(spec);
}

}  // namespace tfjob::model::internal

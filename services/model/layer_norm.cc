// LayerNormalization on the host: each example's values over the
// normalized (trailing) axes are centered and scaled by their own mean and
// biased variance, then multiplied by gamma and shifted by beta, which have
// the normalized axes' shape (Keras creates gamma first, then beta).
// Backward is the usual closed form per row:
//   dx = inv / N * (N * dxhat - sum(dxhat) - xhat * sum(dxhat * xhat)).
#include <cmath>

#include "services/model/layers_more.h"

namespace tfjob::model::internal {
namespace {

class LayerNormalization final : public HostLayer {
 public:
  using HostLayer::HostLayer;

  StatusOr<Shape> Build(const Shape& in, DType dtype) override {
    if (dtype != DType::kFloat32) return Error("expects float32 input, got " + std::string(DTypeName(dtype)));
    const auto rank = static_cast<int64_t>(in.size());
    if (spec_.norm_axes.empty()) return Error("axis must name at least one axis");
    // Keras counts the batch axis: axis k is in[k - 1].
    int64_t first = 0;
    for (size_t i = 0; i < spec_.norm_axes.size(); ++i) {
      int64_t a = spec_.norm_axes[i];
      if (a < 0) a += rank + 1;
      const int64_t want = rank - static_cast<int64_t>(spec_.norm_axes.size()) + 1 + static_cast<int64_t>(i);
      if (a != want || a < 1) {
        return Error("axis must be the trailing axes of input " + ShapeString(WithBatch(-1, in)) +
                     " in ascending order (-1, or [-2, -1], ...)");
      }
      if (i == 0) first = a - 1;
    }
    param_shape_ = Shape(in.begin() + first, in.end());
    n_ = NumElements(param_shape_);
    if (n_ == 0) return Error("normalizes over no values");
    in_shape_ = in;
    return in;
  }

  std::vector<VariableSpec> Variables() const override {
    std::vector<VariableSpec> v;
    if (spec_.scale) {
      v.push_back(Weight(spec_.name + "/gamma", param_shape_, spec_.gamma_initializer, spec_.gamma_regularizer,
                         spec_.gamma_constraint));
    }
    if (spec_.center) {
      v.push_back(Weight(spec_.name + "/beta", param_shape_, spec_.beta_initializer, spec_.beta_regularizer,
                         spec_.beta_constraint));
    }
    return v;
  }

  StatusOr<Tensor> Forward(std::span<const Tensor> params, const Tensor& x, bool) override {
    RETURN_IF_ERROR(CheckInput(x));
    const int64_t rows = x.size() / n_;
    xhat_ = Tensor::Zeros(DType::kFloat32, x.shape());
    inv_.assign(static_cast<size_t>(rows), 0.f);
    Tensor y = Tensor::Zeros(DType::kFloat32, x.shape());
    const float* gamma = spec_.scale ? params[0].data<float>() : nullptr;
    const float* beta = spec_.center ? params[spec_.scale ? 1 : 0].data<float>() : nullptr;
    for (int64_t r = 0; r < rows; ++r) {
      const float* in = x.data<float>() + r * n_;
      float* h = xhat_.data<float>() + r * n_;
      float* out = y.data<float>() + r * n_;
      double mean = 0, var = 0;
      for (int64_t j = 0; j < n_; ++j) mean += in[j];
      mean /= static_cast<double>(n_);
      for (int64_t j = 0; j < n_; ++j) var += (in[j] - mean) * (in[j] - mean);
      var /= static_cast<double>(n_);
      const auto inv = static_cast<float>(1.0 / std::sqrt(var + spec_.epsilon));
      inv_[static_cast<size_t>(r)] = inv;
      for (int64_t j = 0; j < n_; ++j) {
        h[j] = (in[j] - static_cast<float>(mean)) * inv;
        out[j] = h[j] * (gamma ? gamma[j] : 1.f) + (beta ? beta[j] : 0.f);
      }
    }
    return y;
  }

  StatusOr<Tensor> Backward(std::span<const Tensor> params, Tensor dy, bool need_input_grad,
                            std::span<Gradient> grads) override {
    RETURN_IF_ERROR(CheckGradient(dy, in_shape_));
    const int64_t rows = dy.size() / n_;
    const float* gamma = spec_.scale ? params[0].data<float>() : nullptr;
    Tensor dgamma = Tensor::Zeros(DType::kFloat32, param_shape_);
    Tensor dbeta = Tensor::Zeros(DType::kFloat32, param_shape_);
    std::vector<float> dh(static_cast<size_t>(n_));
    for (int64_t r = 0; r < rows; ++r) {
      float* g = dy.data<float>() + r * n_;
      const float* h = xhat_.data<float>() + r * n_;
      double sum = 0, dot = 0;
      for (int64_t j = 0; j < n_; ++j) {
        dgamma.data<float>()[j] += g[j] * h[j];
        dbeta.data<float>()[j] += g[j];
        dh[static_cast<size_t>(j)] = g[j] * (gamma ? gamma[j] : 1.f);
        sum += dh[static_cast<size_t>(j)];
        dot += dh[static_cast<size_t>(j)] * h[j];
      }
      const float inv = inv_[static_cast<size_t>(r)];
      const auto n = static_cast<double>(n_);
      for (int64_t j = 0; j < n_; ++j) {
        g[j] = static_cast<float>(inv / n * (n * dh[static_cast<size_t>(j)] - sum - h[j] * dot));
      }
    }
    size_t v = 0;
    if (spec_.scale) grads[v++] = Gradient{false, dgamma, {}, {}};
    if (spec_.center) grads[v++] = Gradient{false, dbeta, {}, {}};
    return need_input_grad ? dy : Tensor();
  }

 private:
  Shape param_shape_;
  int64_t n_ = 0;  // values normalized together
  Tensor xhat_;
  std::vector<float> inv_;  // 1 / sqrt(var + epsilon) per row
};

}  // namespace

std::unique_ptr<Layer> MakeLayerNormalization(const LayerSpec& spec) {
  return std::make_unique<LayerNormalization>(spec);
}

}  // namespace tfjob::model::internal

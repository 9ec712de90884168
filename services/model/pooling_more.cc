// MaxPooling1D and AveragePooling1D as pooling.cc's 2D layers on
// [steps, 1, channels] (the same TensorFlow padding rules, so "same" leaves
// padded positions out of the maximum and the average); and the global
// poolings pooling.cc lacks: GlobalMaxPooling1D/2D, GlobalAveragePooling1D,
// over every position of an example per channel (keepdims keeps the
// pooled axes as 1s). The first maximum of a channel takes its gradient.
#include "services/model/layer_factories.h"
#include "services/model/layers_more.h"

namespace tfjob::model::internal {
namespace {

class Pooling1D final : public HostLayer {
 public:
  explicit Pooling1D(const LayerSpec& spec) : HostLayer(spec) {
    LayerSpec s = spec;
    s.type = spec.type == LayerType::kMaxPooling1D ? LayerType::kMaxPooling2D : LayerType::kAveragePooling2D;
    s.kernel_size = {spec.kernel_size[0], 1};
    s.strides = {spec.strides[0], 1};
    inner_ = MakePooling2D(s);
  }

  StatusOr<Shape> Build(const Shape& in, DType dtype) override {
    if (in.size() != 2) return Error("expects input [steps, channels] per example, got " + ShapeString(in));
    in_shape_ = in;
    ASSIGN_OR_RETURN(Shape out, inner_->Build({in[0], 1, in[1]}, dtype));
    out_shape_ = {out[0], out[2]};
    return out_shape_;
  }

  StatusOr<Tensor> Forward(std::span<const Tensor> params, const Tensor& x, bool training) override {
    RETURN_IF_ERROR(CheckInput(x));
    ASSIGN_OR_RETURN(Tensor x4, x.Reshape({batch_, in_shape_[0], 1, in_shape_[1]}));
    ASSIGN_OR_RETURN(Tensor y, inner_->Forward(params, x4, training));
    return y.Reshape(WithBatch(batch_, out_shape_));
  }

  StatusOr<Tensor> Backward(std::span<const Tensor> params, Tensor dy, bool need_input_grad,
                            std::span<Gradient> grads) override {
    if (!need_input_grad) return Tensor();
    RETURN_IF_ERROR(CheckGradient(dy, out_shape_));
    ASSIGN_OR_RETURN(Tensor dy4, dy.Reshape({batch_, out_shape_[0], 1, out_shape_[1]}));
    ASSIGN_OR_RETURN(Tensor dx, inner_->Backward(params, std::move(dy4), true, grads));
    return dx.Reshape(WithBatch(batch_, in_shape_));
  }

 private:
  std::unique_ptr<Layer> inner_;
  Shape out_shape_;
};

class GlobalPooling final : public HostLayer {
 public:
  using HostLayer::HostLayer;

  StatusOr<Shape> Build(const Shape& in, DType dtype) override {
    if (dtype != DType::kFloat32) return Error("expects float32 input, got " + std::string(DTypeName(dtype)));
    const bool two_d = spec_.type == LayerType::kGlobalMaxPooling2D;
    if (in.size() != (two_d ? 3u : 2u) || in.back() == 0) {
      return Error(two_d ? "expects input [height, width, channels] per example (NHWC), got " + ShapeString(in)
                         : "expects input [steps, channels] per example, got " + ShapeString(in));
    }
    in_shape_ = in;
    c_ = in.back();
    positions_ = NumElements(in) / c_;
    if (positions_ == 0) return Error("pools over no positions");
    out_shape_ = !spec_.keepdims ? Shape{c_} : two_d ? Shape{1, 1, c_} : Shape{1, c_};
    return out_shape_;
  }

  // GlobalAveragePooling1D averages over the real steps only (Keras 3).
  MaskUse mask_use() const override {
    return spec_.type == LayerType::kGlobalAveragePooling1D ? MaskUse::kConsume : MaskUse::kRefuse;
  }

  StatusOr<Tensor> Forward(std::span<const Tensor>, const Tensor& x, bool) override {
    RETURN_IF_ERROR(CheckInput(x));
    RETURN_IF_ERROR(MaskWeights());
    if (!weights_.empty()) {
      // The mean over the real steps; an example without any is all zero
      // (Keras divides 0 by 0 there).
      Tensor y = Tensor::Zeros(DType::kFloat32, WithBatch(batch_, out_shape_));
      for (int64_t b = 0; b < batch_; ++b) {
        for (int64_t p = 0; p < positions_; ++p) {
          const float w = weights_[static_cast<size_t>(b * positions_ + p)];
          for (int64_t ch = 0; ch < c_; ++ch)
            y.data<float>()[b * c_ + ch] += w * x.data<float>()[(b * positions_ + p) * c_ + ch];
        }
      }
      return y;
    }
    const bool max = spec_.type != LayerType::kGlobalAveragePooling1D;
    Tensor y = Tensor::Zeros(DType::kFloat32, WithBatch(batch_, out_shape_));
    if (max) argmax_.assign(static_cast<size_t>(batch_ * c_), 0);
    const float* in = x.data<float>();
    float* out = y.data<float>();
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t ch = 0; ch < c_; ++ch) {
        const int64_t first = b * positions_ * c_ + ch;
        float acc = in[first];
        int64_t arg = first;
        for (int64_t p = 1; p < positions_; ++p) {
          const float v = in[first + p * c_];
          if (!max) {
            acc += v;
          } else if (v > acc) {
            acc = v, arg = first + p * c_;
          }
        }
        out[b * c_ + ch] = max ? acc : acc / static_cast<float>(positions_);
        if (max) argmax_[static_cast<size_t>(b * c_ + ch)] = arg;
      }
    }
    return y;
  }

  StatusOr<Tensor> Backward(std::span<const Tensor>, Tensor dy, bool need_input_grad, std::span<Gradient>) override {
    if (!need_input_grad) return Tensor();
    RETURN_IF_ERROR(CheckGradient(dy, out_shape_));
    Tensor dx = Tensor::Zeros(DType::kFloat32, WithBatch(batch_, in_shape_));
    const float* g = dy.data<float>();
    float* d = dx.data<float>();
    const bool max = spec_.type != LayerType::kGlobalAveragePooling1D;
    const float inv = 1.f / static_cast<float>(positions_);
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t ch = 0; ch < c_; ++ch) {
        const float v = g[b * c_ + ch];
        if (max) {
          d[argmax_[static_cast<size_t>(b * c_ + ch)]] += v;
          continue;
        }
        for (int64_t p = 0; p < positions_; ++p) {
          const float w = weights_.empty() ? inv : weights_[static_cast<size_t>(b * positions_ + p)];
          d[(b * positions_ + p) * c_ + ch] = v * w;
        }
      }
    }
    return dx;
  }

 private:
  int64_t c_ = 0, positions_ = 0;
  Shape out_shape_;
  std::vector<int64_t> argmax_;  // max pooling: the input offset each output took
  std::vector<float> weights_;   // masked average: each step's weight, [batch * steps]; empty unmasked

  Status MaskWeights() {
    weights_.clear();
    if (mask_.size() == 0) return Status::Ok();
    if (!mask_.on_cpu() || mask_.shape() != Shape{batch_, positions_}) {
      return Error("mask " + mask_.DebugString() + " does not match the input's steps");
    }
    weights_.assign(static_cast<size_t>(batch_ * positions_), 0.f);
    for (int64_t b = 0; b < batch_; ++b) {
      const float* m = mask_.data<float>() + b * positions_;
      float real = 0;
      for (int64_t p = 0; p < positions_; ++p) real += m[p];
      for (int64_t p = 0; p < positions_ && real > 0; ++p)
        weights_[static_cast<size_t>(b * positions_ + p)] = m[p] / real;
    }
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<Layer> MakePoolingMore(const LayerSpec& spec) {
  if (spec.type == LayerType::kMaxPooling1D || spec.type == LayerType::kAveragePooling1D) {
    return std::make_unique<Pooling1D>(spec);
  }
  return std::make_unique<GlobalPooling>(spec);
}

}  // namespace tfjob::model::internal

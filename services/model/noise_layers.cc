// SpatialDropout1D/2D, GaussianNoise and GaussianDropout: the identity at
// inference; while training, noise drawn as Dropout draws its masks (a
// generator seeded with the layer's seed and name, advanced every training
// step), so a run is reproducible.
//
// SpatialDropout drops whole channels (one keep decision per example and
// channel, scaled by 1 / (1 - rate)); GaussianNoise adds N(0, stddev);
// GaussianDropout multiplies by N(1, rate / (1 - rate)).
#include <cmath>

#include "services/model/layers_more.h"
#include "services/model/random.h"

namespace tfjob::model::internal {
namespace {

class Noise final : public HostLayer {
 public:
  explicit Noise(const LayerSpec& spec)
      : HostLayer(spec), rng_(MixSeed(static_cast<uint64_t>(spec.seed), NameHash(spec.name))) {}

  StatusOr<Shape> Build(const Shape& in, DType dtype) override {
    if (dtype != DType::kFloat32) return Error("expects float32 input, got " + std::string(DTypeName(dtype)));
    if (spec_.type == LayerType::kGaussianNoise) {
      if (!(spec_.stddev >= 0)) return Error("stddev must be >= 0, got " + std::to_string(spec_.stddev));
    } else if (!(spec_.rate >= 0 && spec_.rate < 1)) {
      return Error("rate must be in [0, 1), got " + std::to_string(spec_.rate));
    }
    if (spec_.type == LayerType::kSpatialDropout1D && in.size() != 2) {
      return Error("expects input [steps, channels] per example, got " + ShapeString(in));
    }
    if (spec_.type == LayerType::kSpatialDropout2D && in.size() != 3) {
      return Error("expects input [height, width, channels] per example (NHWC), got " + ShapeString(in));
    }
    in_shape_ = in;
    return in;
  }

  StatusOr<Tensor> Forward(std::span<const Tensor>, const Tensor& x, bool training) override {
    RETURN_IF_ERROR(CheckInput(x));
    mask_ = Tensor();
    const bool noisy = spec_.type == LayerType::kGaussianNoise ? spec_.stddev > 0 : spec_.rate > 0;
    if (!training || !noisy) return x;
    Tensor y = x.Clone();
    float* v = y.data<float>();
    if (spec_.type == LayerType::kGaussianNoise) {
      const auto sd = static_cast<float>(spec_.stddev);
      for (int64_t i = 0; i < y.size(); ++i) v[i] += sd * rng_.Normal();
      return y;
    }
    mask_ = Tensor::Zeros(DType::kFloat32, x.shape());
    float* m = mask_.data<float>();
    const float keep = 1.f - static_cast<float>(spec_.rate);
    if (spec_.type == LayerType::kGaussianDropout) {
      const float sd = std::sqrt(static_cast<float>(spec_.rate) / keep);
      for (int64_t i = 0; i < mask_.size(); ++i) m[i] = 1.f + sd * rng_.Normal();
    } else {
      // One draw per example and channel, shared by every position.
      const int64_t c = in_shape_.back(), positions = NumElements(in_shape_) / std::max<int64_t>(c, 1);
      for (int64_t b = 0; b < batch_; ++b) {
        for (int64_t ch = 0; ch < c; ++ch) {
          const float k = rng_.Uniform() < keep ? 1.f / keep : 0.f;
          for (int64_t p = 0; p < positions; ++p) m[(b * positions + p) * c + ch] = k;
        }
      }
    }
    for (int64_t i = 0; i < y.size(); ++i) v[i] *= m[i];
    return y;
  }

  StatusOr<Tensor> Backward(std::span<const Tensor>, Tensor dy, bool need_input_grad, std::span<Gradient>) override {
    if (!need_input_grad) return Tensor();
    RETURN_IF_ERROR(CheckGradient(dy, in_shape_));
    if (mask_.size() == 0) return dy;
    float* g = dy.data<float>();
    const float* m = mask_.data<float>();
    for (int64_t i = 0; i < dy.size(); ++i) g[i] *= m[i];
    return dy;
  }

 private:
  Rng rng_;
  Tensor mask_;  // the multiplier of the last training step; empty otherwise
};

}  // namespace

std::unique_ptr<Layer> MakeNoiseLayer(const LayerSpec& spec) { return std::make_unique<Noise>(spec); }

}  // namespace tfjob::model::internal

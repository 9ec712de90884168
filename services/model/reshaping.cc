// Dropout and Reshape.
//
// Dropout is inverted, as in Keras: while training each element is kept
// with probability 1 - rate and scaled by 1 / (1 - rate); at inference it
// is the identity. The masks come from a generator seeded with the layer's
// seed and name, advanced every training step, so a run is reproducible.
// On a device the mask is drawn the same way on the host and uploaded (a
// copy that overlaps the compute already queued), so a GPU run drops the
// same units as a CPU run from the same seed.
//
// Reshape gives each example a new shape with the same number of elements
// (one dimension may be -1); it copies nothing.
#include "services/model/layer_factories.h"
#include "services/model/layer_shapes.h"
#include "services/model/random.h"
#include "services/tensor/eigen.h"
#include "services/tensor/ops.h"

namespace tfjob::model::internal {
namespace {

class Dropout final : public Layer {
 public:
  explicit Dropout(const LayerSpec& spec)
      : Layer(spec), rng_(MixSeed(static_cast<uint64_t>(spec.seed), NameHash(spec.name))) {}

  StatusOr<Shape> Build(const Shape& in, DType dtype) override {
    if (dtype != DType::kFloat32) return Error("expects float32 input, got " + std::string(DTypeName(dtype)));
    if (!(spec_.rate >= 0 && spec_.rate < 1)) return Error("rate must be in [0, 1), got " + std::to_string(spec_.rate));
    in_shape_ = in;
    return in;
  }

  StatusOr<Tensor> Forward(std::span<const Tensor>, const Tensor& x, bool training) override {
    if (!Matches(x, DType::kFloat32, in_shape_)) return Error(Expected(DType::kFloat32, in_shape_, x));
    mask_ = Tensor();
    if (!training || spec_.rate == 0) return x;
    const float keep = 1.f - static_cast<float>(spec_.rate);
    mask_ = Tensor::Zeros(DType::kFloat32, x.shape());
    float* m = mask_.data<float>();
    for (int64_t i = 0; i < mask_.size(); ++i) m[i] = rng_.Uniform() < keep ? 1.f / keep : 0.f;
    if (!x.on_cpu()) {
      ASSIGN_OR_RETURN(mask_, mask_.ToDevice(x.device()));
      return ops::Mul(x, mask_);
    }
    Tensor y = Tensor::Zeros(DType::kFloat32, x.shape());
    AsArray(y) = AsArray(x) * AsArray(mask_);
    return y;
  }

  StatusOr<Tensor> Backward(std::span<const Tensor>, Tensor dy, bool need_input_grad, std::span<Gradient>) override {
    if (!need_input_grad) return Tensor();
    if (mask_.size() == 0) return dy;
    if (dy.shape() != mask_.shape())
      return Error("gradient shape " + ShapeString(dy.shape()) + " does not match output");
    if (!dy.on_cpu() || !mask_.on_cpu()) return ops::Mul(dy, mask_);
    AsArray(dy) *= AsArray(mask_);
    return dy;
  }

 private:
  Shape in_shape_;
  Rng rng_;
  Tensor mask_;  // scaled keep mask of the last training step; empty otherwise
};

class Reshape final : public Layer {
 public:
  using Layer::Layer;

  StatusOr<Shape> Build(const Shape& in, DType dtype) override {
    dtype_ = dtype;
    in_shape_ = in;
    const int64_t n = NumElements(in);
    Shape out = spec_.target_shape;
    int unknown = -1;
    int64_t known = 1;
    for (size_t i = 0; i < out.size(); ++i) {
      if (out[i] == -1 && unknown < 0) {
        unknown = static_cast<int>(i);
      } else if (out[i] <= 0) {
        return Error("target_shape " + ShapeString(spec_.target_shape) +
                     ": dimensions must be > 0, with at most one -1");
      } else {
        known *= out[i];
      }
    }
    if (unknown >= 0) {
      if (known == 0 || n % known != 0) {
        return Error("cannot reshape " + ShapeString(in) + " (" + std::to_string(n) + " values) to " +
                     ShapeString(spec_.target_shape));
      }
      out[static_cast<size_t>(unknown)] = n / known;
    }
    if (NumElements(out) != n) {
      return Error("cannot reshape " + ShapeString(in) + " (" + std::to_string(n) + " values) to " +
                   ShapeString(spec_.target_shape) + " (" + std::to_string(NumElements(out)) + " values)");
    }
    out_shape_ = out;
    return out;
  }

  DType output_dtype() const override { return dtype_; }

  StatusOr<Tensor> Forward(std::span<const Tensor>, const Tensor& x, bool) override {
    if (!Matches(x, dtype_, in_shape_)) return Error(Expected(dtype_, in_shape_, x));
    batch_ = x.dim(0);
    return x.Reshape(WithBatch(batch_, out_shape_));
  }

  StatusOr<Tensor> Backward(std::span<const Tensor>, Tensor dy, bool need_input_grad, std::span<Gradient>) override {
    if (!need_input_grad) return Tensor();
    return dy.Reshape(WithBatch(batch_, in_shape_));
  }

 private:
  DType dtype_ = DType::kFloat32;
  Shape in_shape_, out_shape_;
  int64_t batch_ = 0;
};

}  // namespace

std::unique_ptr<Layer> MakeDropout(const LayerSpec& spec) { return std::make_unique<Dropout>(spec); }
std::unique_ptr<Layer> MakeReshape(const LayerSpec& spec) { return std::make_unique<Reshape>(spec); }

}  // namespace tfjob::model::internal

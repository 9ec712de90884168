// CategoryEncoding and Hashing: integer ids in, no gradient to them.
//
// CategoryEncoding (Keras' and TF.js' semantics per example): one_hot
// turns ids [] or [1] into [num_tokens] and [n] into [n, num_tokens];
// multi_hot and count turn [n] into [num_tokens] (a 1 for each id present,
// or its count). Keras would fold a whole batch of scalar ids into one row
// for those two, so a scalar per example is refused there (a Reshape to [1]
// says what is meant). Ids outside [0, num_tokens) are errors, as in Keras.
//
// Hashing buckets int64 ids as Keras does for integers: the decimal string
// of the id through FarmHash's Fingerprint64 (tf.strings.to_hash_bucket_fast),
// modulo num_bins; with a mask_value, that value takes bin 0 and the others
// the remaining num_bins - 1 bins, shifted by one.
#include <farmhash.h>

#include <cmath>

#include "services/model/layers_more.h"

namespace tfjob::model::internal {
namespace {

class CategoryEncoding final : public HostLayer {
 public:
  using HostLayer::HostLayer;

  StatusOr<Shape> Build(const Shape& in, DType dtype) override {
    if (dtype != DType::kInt64 && dtype != DType::kFloat32) {
      return Error("expects int64 (or integral float32) ids, got " + std::string(DTypeName(dtype)));
    }
    if (spec_.num_tokens <= 0) return Error("num_tokens must be positive, got " + std::to_string(spec_.num_tokens));
    if (in.size() > 1 || (in.size() == 1 && in[0] == 0)) {
      return Error("expects ids [] or [n] (n > 0) per example, got " + ShapeString(in));
    }
    dtype_ = dtype;
    in_shape_ = in;
    if (spec_.encoding == EncodingMode::kOneHot) {
      rows_ = in.empty() ? 1 : in[0];
      out_shape_ = in.empty() || in[0] == 1 ? Shape{spec_.num_tokens} : Shape{in[0], spec_.num_tokens};
      return out_shape_;
    }
    if (in.empty()) {
      return Error(
          "multi_hot and count need ids [n] per example, got a scalar (Keras would encode the whole "
          "batch as one row; add a Reshape to [1])");
    }
    rows_ = 1;
    out_shape_ = {spec_.num_tokens};
    return out_shape_;
  }

  StatusOr<Tensor> Forward(std::span<const Tensor>, const Tensor& x, bool) override {
    RETURN_IF_ERROR(CheckInput(x, dtype_));
    Tensor y = Tensor::Zeros(DType::kFloat32, WithBatch(batch_, out_shape_));
    float* out = y.data<float>();
    const int64_t per = std::max<int64_t>(NumElements(in_shape_), 1) / rows_;  // ids per output row
    for (int64_t i = 0; i < x.size(); ++i) {
      int64_t id = 0;
      if (dtype_ == DType::kInt64) {
        id = x.data<int64_t>()[i];
      } else {
        const float f = x.data<float>()[i];
        if (f != std::floor(f)) return Error("id " + std::to_string(f) + " is not an integer");
        id = static_cast<int64_t>(f);
      }
      if (id < 0 || id >= spec_.num_tokens) {
        return Error("id " + std::to_string(id) + " is outside [0, " + std::to_string(spec_.num_tokens) + ")");
      }
      float& slot = out[(i / per) * spec_.num_tokens + id];
      slot = spec_.encoding == EncodingMode::kCount ? slot + 1 : 1;
    }
    return y;
  }

  StatusOr<Tensor> Backward(std::span<const Tensor>, Tensor dy, bool need_input_grad, std::span<Gradient>) override {
    if (!need_input_grad || dtype_ != DType::kFloat32) return Tensor();
    RETURN_IF_ERROR(CheckGradient(dy, out_shape_));
    return Tensor::Zeros(DType::kFloat32, WithBatch(batch_, in_shape_));  // ids: no gradient, as in Keras
  }

 private:
  DType dtype_ = DType::kInt64;
  int64_t rows_ = 1;
  Shape out_shape_;
};

class Hashing final : public HostLayer {
 public:
  using HostLayer::HostLayer;

  StatusOr<Shape> Build(const Shape& in, DType dtype) override {
    if (dtype != DType::kInt64) return Error("expects int64 ids, got " + std::string(DTypeName(dtype)));
    if (spec_.num_bins <= 0 || (spec_.has_mask_value && spec_.num_bins < 2)) {
      return Error("num_bins must be positive (at least 2 with a mask_value), got " + std::to_string(spec_.num_bins));
    }
    in_shape_ = in;
    return in;
  }

  DType output_dtype() const override { return DType::kInt64; }

  StatusOr<Tensor> Forward(std::span<const Tensor>, const Tensor& x, bool) override {
    RETURN_IF_ERROR(CheckInput(x, DType::kInt64));
    Tensor y = Tensor::Zeros(DType::kInt64, x.shape());
    const int64_t* in = x.data<int64_t>();
    int64_t* out = y.data<int64_t>();
    const bool mask = spec_.has_mask_value;
    const auto bins = static_cast<uint64_t>(mask ? spec_.num_bins - 1 : spec_.num_bins);
    for (int64_t i = 0; i < x.size(); ++i) {
      if (mask && in[i] == spec_.mask_value) continue;  // bin 0
      const std::string s = std::to_string(in[i]);
      out[i] = static_cast<int64_t>(util::Fingerprint64(s.data(), s.size()) % bins) + (mask ? 1 : 0);
    }
    return y;
  }

  StatusOr<Tensor> Backward(std::span<const Tensor>, Tensor, bool need_input_grad, std::span<Gradient>) override {
    if (need_input_grad) return Error("ids have no gradient");
    return Tensor();
  }
};

}  // namespace

std::unique_ptr<Layer> MakeEncodingLayer(const LayerSpec& spec) {
  if (spec.type == LayerType::kHashing) return std::make_unique<Hashing>(spec);
  return std::make_unique<CategoryEncoding>(spec);
}

}  // namespace tfjob::model::internal

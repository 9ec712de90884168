// Layers that move values without changing them: Permute, RepeatVector,
// ZeroPadding1D/2D, Cropping1D/2D and UpSampling1D/2D (nearest). Each is
// an index map built once per shape: output element i of an example takes
// input element src[i], or zero where src[i] is -1 (padding). Forward
// gathers, backward scatters (adding, where UpSampling or RepeatVector read
// one input several times). float32 and int64 values both pass; int64 ones
// have no gradient.
#include "services/model/layers_more.h"

namespace tfjob::model::internal {
namespace {

class IndexMap final : public HostLayer {
 public:
  using HostLayer::HostLayer;

  StatusOr<Shape> Build(const Shape& in, DType dtype) override {
    if (dtype != DType::kFloat32 && dtype != DType::kInt64) {
      return Error("expects float32 or int64 input, got " + std::string(DTypeName(dtype)));
    }
    dtype_ = dtype;
    in_shape_ = in;
    switch (spec_.type) {
      case LayerType::kPermute: RETURN_IF_ERROR(BuildPermute(in)); break;
      case LayerType::kRepeatVector: RETURN_IF_ERROR(BuildRepeat(in)); break;
      default: RETURN_IF_ERROR(BuildSpatial(in)); break;
    }
    return out_shape_;
  }

  DType output_dtype() const override { return dtype_; }

  StatusOr<Tensor> Forward(std::span<const Tensor>, const Tensor& x, bool) override {
    RETURN_IF_ERROR(CheckInput(x, dtype_));
    Tensor y = Tensor::Zeros(dtype_, WithBatch(batch_, out_shape_));
    if (dtype_ == DType::kInt64) {
      Gather(x.data<int64_t>(), y.data<int64_t>());
    } else {
      Gather(x.data<float>(), y.data<float>());
    }
    return y;
  }

  StatusOr<Tensor> Backward(std::span<const Tensor>, Tensor dy, bool need_input_grad, std::span<Gradient>) override {
    if (!need_input_grad) return Tensor();
    if (dtype_ != DType::kFloat32) return Error("integer input has no gradient");
    RETURN_IF_ERROR(CheckGradient(dy, out_shape_));
    Tensor dx = Tensor::Zeros(DType::kFloat32, WithBatch(batch_, in_shape_));
    const int64_t in_n = NumElements(in_shape_), out_n = static_cast<int64_t>(src_.size());
    const float* g = dy.data<float>();
    float* d = dx.data<float>();
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t i = 0; i < out_n; ++i) {
        const int64_t s = src_[static_cast<size_t>(i)];
        if (s >= 0) d[b * in_n + s] += g[b * out_n + i];
      }
    }
    return dx;
  }

 private:
  template <typename T>
  void Gather(const T* x, T* y) const {
    const int64_t in_n = NumElements(in_shape_), out_n = static_cast<int64_t>(src_.size());
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t i = 0; i < out_n; ++i) {
        const int64_t s = src_[static_cast<size_t>(i)];
        if (s >= 0) y[b * out_n + i] = x[b * in_n + s];
      }
    }
  }

  // Keras' dims: a permutation of 1..rank.
  Status BuildPermute(const Shape& in) {
    const size_t rank = in.size();
    std::vector<bool> seen(rank, false);
    if (spec_.permutation.size() != rank) {
      return Error("dims must list each of the " + std::to_string(rank) + " non-batch axes of input " +
                   ShapeString(WithBatch(-1, in)) + " once");
    }
    for (int64_t d : spec_.permutation) {
      if (d < 1 || d > static_cast<int64_t>(rank) || seen[static_cast<size_t>(d - 1)]) {
        return Error("dims must be a permutation of 1.." + std::to_string(rank));
      }
      seen[static_cast<size_t>(d - 1)] = true;
    }
    out_shape_.clear();
    for (int64_t d : spec_.permutation) out_shape_.push_back(in[static_cast<size_t>(d - 1)]);
    std::vector<int64_t> in_strides(rank, 1);
    for (size_t d = rank; d-- > 1;) in_strides[d - 1] = in_strides[d] * in[d];
    src_.assign(static_cast<size_t>(NumElements(in)), 0);
    for (int64_t i = 0; i < NumElements(in); ++i) {
      int64_t rest = i, s = 0;
      for (size_t k = rank; k-- > 0;) {
        s += (rest % out_shape_[k]) * in_strides[static_cast<size_t>(spec_.permutation[k] - 1)];
        rest /= out_shape_[k];
      }
      src_[static_cast<size_t>(i)] = s;
    }
    return Status::Ok();
  }

  Status BuildRepeat(const Shape& in) {
    if (in.size() != 1) return Error("expects input [features] per example, got " + ShapeString(in));
    if (spec_.repeats <= 0) return Error("n must be positive, got " + std::to_string(spec_.repeats));
    out_shape_ = {spec_.repeats, in[0]};
    src_.clear();
    for (int64_t r = 0; r < spec_.repeats; ++r) {
      for (int64_t j = 0; j < in[0]; ++j) src_.push_back(j);
    }
    return Status::Ok();
  }

  // Padding, cropping and upsampling on [h, w, c] (1D layers: [steps, c]
  // as [steps, 1, c]).
  Status BuildSpatial(const Shape& in) {
    const bool one_d = spec_.type == LayerType::kZeroPadding1D || spec_.type == LayerType::kCropping1D ||
                       spec_.type == LayerType::kUpSampling1D;
    if (in.size() != (one_d ? 2u : 3u)) {
      return Error(one_d ? "expects input [steps, channels] per example, got " + ShapeString(in)
                         : "expects input [height, width, channels] per example (NHWC), got " + ShapeString(in));
    }
    const int64_t h = in[0], w = one_d ? 1 : in[1], c = in.back();
    const auto& m = spec_.margins;
    for (int64_t v : m) {
      if (v < 0) return Error("padding and cropping must be >= 0");
    }
    int64_t oh = h, ow = w, sh = 1, sw = 1;
    const bool pad = spec_.type == LayerType::kZeroPadding1D || spec_.type == LayerType::kZeroPadding2D;
    const bool crop = spec_.type == LayerType::kCropping1D || spec_.type == LayerType::kCropping2D;
    if (pad) oh = h + m[0] + m[1], ow = w + m[2] + m[3];
    if (crop) oh = h - m[0] - m[1], ow = w - m[2] - m[3];
    if (!pad && !crop) {
      sh = spec_.kernel_size[0], sw = one_d ? 1 : spec_.kernel_size[1];
      if (sh <= 0 || sw <= 0) return Error("size must be positive");
      oh = h * sh, ow = w * sw;
    }
    if (oh <= 0 || ow <= 0) return Error("cropping leaves nothing of input " + ShapeString(in));
    out_shape_ = one_d ? Shape{oh, c} : Shape{oh, ow, c};
    src_.assign(static_cast<size_t>(oh * ow * c), -1);
    for (int64_t oy = 0; oy < oh; ++oy) {
      for (int64_t ox = 0; ox < ow; ++ox) {
        int64_t iy = oy / sh, ix = ox / sw;
        if (pad) iy = oy - m[0], ix = ox - m[2];
        if (crop) iy = oy + m[0], ix = ox + m[2];
        if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
        for (int64_t ch = 0; ch < c; ++ch) src_[static_cast<size_t>((oy * ow + ox) * c + ch)] = (iy * w + ix) * c + ch;
      }
    }
    return Status::Ok();
  }

  DType dtype_ = DType::kFloat32;
  Shape out_shape_;
  std::vector<int64_t> src_;  // per output element of an example: its input element, or -1
};

}  // namespace

std::unique_ptr<Layer> MakeShapeLayer(const LayerSpec& spec) { return std::make_unique<IndexMap>(spec); }

}  // namespace tfjob::model::internal

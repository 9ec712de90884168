// Keras' merge layers: Add, Subtract, Multiply, Average, Maximum, Minimum
// (element-wise over inputs of one shape), Concatenate (along an axis) and
// Dot (a batched dot product along one axis of each input). Host kernels.
#include <omp.h>

#include <cmath>

#include "services/model/layer_factories.h"
#include "services/model/layer_shapes.h"
#include "services/tensor/eigen.h"
#include "services/tensor/threads.h"

namespace tfjob::model::internal {
namespace {

// Keras' axis counting the batch axis (negative from the end) as an index
// into the per-example shape of rank `rank`; -1 when out of range or 0.
int64_t PerExampleAxis(int64_t axis, size_t rank) {
  const int64_t full = static_cast<int64_t>(rank) + 1;
  if (axis < 0) axis += full;
  return axis >= 1 && axis < full ? axis - 1 : -1;
}

// f(begin, end) on each compute thread for its part of [0, n) (one part
// below kParallel elements, where a thread's start costs more than it
// saves): an Add over a residual network's activations is memory-bound,
// and on one thread at two it also read what the other thread's layers had
// just written.
template <typename F>
void ForParts(int64_t n, F f) {
  constexpr int64_t kParallel = int64_t{1} << 16;
  UseComputeThreadsHere();
  const int threads = n >= kParallel ? ComputeThreads() : 1;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int64_t k = omp_get_num_threads(), i = omp_get_thread_num();
    f(n * i / k, n * (i + 1) / k);
  }
}

class Merge : public Layer {
 public:
  using Layer::Layer;
  int arity() const override { return spec_.type == LayerType::kSubtract || spec_.type == LayerType::kDot ? 2 : 0; }
  bool device_kernels() const override { return false; }
  StatusOr<Shape> Build(const Shape&, DType) override { return Error("takes a list of inputs"); }
  StatusOr<Tensor> Forward(std::span<const Tensor>, const Tensor&, bool) override {
    return Error("takes a list of inputs");
  }
  StatusOr<Tensor> Backward(std::span<const Tensor>, Tensor, bool, std::span<Gradient>) override {
    return Error("takes a list of inputs");
  }

 protected:
  Status CheckInputs(std::span<const Tensor> xs) const {
    if (xs.size() != in_.size()) return Error("expected " + std::to_string(in_.size()) + " inputs");
    for (size_t i = 0; i < xs.size(); ++i) {
      if (!xs[i].on_cpu()) return Error("computes on the host only");
      if (!Matches(xs[i], DType::kFloat32, in_[i]))
        return Error("input " + std::to_string(i) + ": " + Expected(DType::kFloat32, in_[i], xs[i]));
      if (xs[i].dim(0) != xs[0].dim(0)) return Error("inputs have different batch sizes");
    }
    return Status::Ok();
  }
  Status CheckFloat(std::span<const DType> dtypes) const {
    for (DType d : dtypes) {
      if (d != DType::kFloat32) return Error("expects float32 inputs, got " + std::string(DTypeName(d)));
    }
    return Status::Ok();
  }
  std::vector<Shape> in_;
};

// Add ... Minimum: inputs of one shape.
class Elementwise final : public Merge {
 public:
  using Merge::Merge;

  StatusOr<Shape> BuildMulti(std::span<const Shape> in, std::span<const DType> dtypes) override {
    RETURN_IF_ERROR(CheckFloat(dtypes));
    if (in.size() < 2) return Error("needs at least two inputs, got " + std::to_string(in.size()));
    for (const Shape& s : in) {
      if (s != in[0]) {
        return Error("inputs must have one shape (Keras' broadcasting of merge inputs is not supported), got " +
                     ShapeString(in[0]) + " and " + ShapeString(s));
      }
    }
    in_.assign(in.begin(), in.end());
    return in[0];
  }

  // A ReLU after an Add: max(0, .) in the same pass, and its gradient (where
  // the sum is positive) before Add's.
  bool FuseRelu() override {
    fuse_relu_ = spec_.type == LayerType::kAdd;
    return fuse_relu_;
  }
  bool relu_fused() const override { return fuse_relu_; }

  StatusOr<Tensor> ForwardMulti(std::span<const Tensor>, std::span<const Tensor> xs, bool) override {
    RETURN_IF_ERROR(CheckInputs(xs));
    // The first two inputs combine into y in one pass (not a copy of the
    // first and then a second pass); y is written whole there.
    ASSIGN_OR_RETURN(Tensor y, Tensor::CreateUninitialized(DType::kFloat32, xs[0].shape()));
    const LayerType t = spec_.type;
    switch (t) {
      case LayerType::kAdd:
      case LayerType::kAverage:
      case LayerType::kSubtract:
      case LayerType::kMultiply:
      case LayerType::kMaximum:
      case LayerType::kMinimum: break;
      default: return Error("not an element-wise merge");
    }
    ForParts(y.size(), [&](int64_t begin, int64_t end) {
      auto Y = AsArray(y).segment(begin, end - begin);
      for (size_t i = 1; i < xs.size(); ++i) {
        auto X = AsArray(xs[i]).segment(begin, end - begin);
        auto A = AsArray(i == 1 ? xs[0] : y).segment(begin, end - begin);
        switch (t) {
          case LayerType::kAdd:
            if (fuse_relu_ && i + 1 == xs.size()) {
              Y = (A + X).max(0.f);
            } else {
              Y = A + X;
            }
            break;
          case LayerType::kAverage: Y = A + X; break;
          case LayerType::kSubtract: Y = A - X; break;
          case LayerType::kMultiply: Y = A * X; break;
          case LayerType::kMaximum: Y = A.max(X); break;
          default: Y = A.min(X); break;
        }
      }
      if (t == LayerType::kAverage) Y /= static_cast<float>(xs.size());
    });
    // Backward of Multiply needs the inputs; of Maximum/Minimum, which won.
    xs_.assign(xs.begin(), xs.end());
    y_ = y;
    return y;
  }

  StatusOr<std::vector<Tensor>> BackwardMulti(std::span<const Tensor>, Tensor dy, const std::vector<bool>& need,
                                              std::span<Gradient>) override {
    if (dy.shape() != y_.shape()) return Error("gradient shape does not match output");
    std::vector<Tensor> dxs(xs_.size());
    auto D = AsArray(dy);
    if (fuse_relu_) {
      ForParts(dy.size(), [&](int64_t begin, int64_t end) {
        D.segment(begin, end - begin) =
            (AsArray(y_).segment(begin, end - begin) > 0.f).select(D.segment(begin, end - begin), 0.f);
      });
    }
    const float n = static_cast<float>(xs_.size());
    // Maximum/Minimum: the first input holding the winning value takes the
    // gradient (as TensorFlow's gradient of a chain of tf.maximum does for ties).
    std::vector<bool> taken;
    if (spec_.type == LayerType::kMaximum || spec_.type == LayerType::kMinimum) taken.assign(dy.size(), false);
    // Add's last needed input takes dy itself (a layer owns the gradient it
    // is given, and may write into it), the others a copy.
    size_t last_needed = xs_.size();
    for (size_t i = 0; i < xs_.size(); ++i) {
      if (need[i]) last_needed = i;
    }
    for (size_t i = 0; i < xs_.size(); ++i) {
      if (!need[i] && taken.empty()) continue;
      if (spec_.type == LayerType::kAdd && i == last_needed) {
        dxs[i] = dy;
        continue;
      }
      // Only Maximum and Minimum leave elements unwritten (the losers').
      ASSIGN_OR_RETURN(Tensor dx, taken.empty() ? Tensor::CreateUninitialized(DType::kFloat32, dy.shape())
                                                : StatusOr<Tensor>(Tensor::Zeros(DType::kFloat32, dy.shape())));
      auto DX = AsArray(dx);
      switch (spec_.type) {
        case LayerType::kAdd:
          ForParts(dx.size(),
                   [&](int64_t begin, int64_t end) { DX.segment(begin, end - begin) = D.segment(begin, end - begin); });
          break;
        case LayerType::kAverage: DX = D / n; break;
        case LayerType::kSubtract:
          if (i == 0)
            DX = D;
          else
            DX = -D;
          break;
        case LayerType::kMultiply: {
          DX = D;
          for (size_t j = 0; j < xs_.size(); ++j) {
            if (j != i) DX *= AsArray(xs_[j]);
          }
          break;
        }
        default: {
          const float* x = xs_[i].data<float>();
          const float* y = y_.data<float>();
          const float* d = dy.data<float>();
          float* g = dx.data<float>();
          for (int64_t k = 0; k < dy.size(); ++k) {
            if (!taken[k] && x[k] == y[k]) {
              taken[k] = true;
              g[k] = d[k];
            }
          }
        }
      }
      if (need[i]) dxs[i] = std::move(dx);
    }
    return dxs;
  }

 private:
  std::vector<Tensor> xs_;
  Tensor y_;
  bool fuse_relu_ = false;  // Layer::FuseRelu
};

class Concatenate final : public Merge {
 public:
  using Merge::Merge;

  StatusOr<Shape> BuildMulti(std::span<const Shape> in, std::span<const DType> dtypes) override {
    RETURN_IF_ERROR(CheckFloat(dtypes));
    if (in.size() < 2) return Error("needs at least two inputs, got " + std::to_string(in.size()));
    axis_ = PerExampleAxis(spec_.merge_axis, in[0].size());
    if (axis_ < 0)
      return Error("axis " + std::to_string(spec_.merge_axis) + " is outside inputs " +
                   ShapeString(WithBatch(-1, in[0])));
    Shape out = in[0];
    out[axis_] = 0;
    for (const Shape& s : in) {
      bool ok = s.size() == in[0].size();
      for (size_t d = 0; ok && d < s.size(); ++d) ok = static_cast<int64_t>(d) == axis_ || s[d] == in[0][d];
      if (!ok) {
        return Error("inputs must match but on axis " + std::to_string(spec_.merge_axis) + ", got " +
                     ShapeString(in[0]) + " and " + ShapeString(s));
      }
      out[axis_] += s[axis_];
    }
    in_.assign(in.begin(), in.end());
    out_ = out;
    // Rows of the copy: everything before the axis; a row of input i is
    // its axis extent times everything after.
    inner_ = 1;
    for (size_t d = static_cast<size_t>(axis_) + 1; d < out.size(); ++d) inner_ *= out[d];
    outer_ = 1;
    for (int64_t d = 0; d < axis_; ++d) outer_ *= out[static_cast<size_t>(d)];
    return out;
  }

  StatusOr<Tensor> ForwardMulti(std::span<const Tensor>, std::span<const Tensor> xs, bool) override {
    RETURN_IF_ERROR(CheckInputs(xs));
    const int64_t batch = xs[0].dim(0);
    Tensor y = Tensor::Zeros(DType::kFloat32, WithBatch(batch, out_));
    const int64_t out_row = out_[axis_] * inner_;
    float* dst = y.data<float>();
    int64_t offset = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      const int64_t row = in_[i][axis_] * inner_;
      const float* src = xs[i].data<float>();
      for (int64_t r = 0; r < batch * outer_; ++r) std::copy_n(src + r * row, row, dst + r * out_row + offset);
      offset += row;
    }
    batch_ = batch;
    return y;
  }

  StatusOr<std::vector<Tensor>> BackwardMulti(std::span<const Tensor>, Tensor dy, const std::vector<bool>& need,
                                              std::span<Gradient>) override {
    std::vector<Tensor> dxs(in_.size());
    const int64_t out_row = out_[axis_] * inner_;
    const float* src = dy.data<float>();
    int64_t offset = 0;
    for (size_t i = 0; i < in_.size(); ++i) {
      const int64_t row = in_[i][axis_] * inner_;
      if (need[i]) {
        Tensor dx = Tensor::Zeros(DType::kFloat32, WithBatch(batch_, in_[i]));
        float* dst = dx.data<float>();
        for (int64_t r = 0; r < batch_ * outer_; ++r) std::copy_n(src + r * out_row + offset, row, dst + r * row);
        dxs[i] = std::move(dx);
      }
      offset += row;
    }
    return dxs;
  }

 private:
  int64_t axis_ = 0, inner_ = 1, outer_ = 1, batch_ = 0;
  Shape out_;
};

// Dot of two inputs [batch, n] (axes 1: [batch, 1]) or [batch, a, b] with
// one axis each (a batched matrix product), optionally of l2-normalized
// inputs (cosine similarity).
class Dot final : public Merge {
 public:
  using Merge::Merge;

  StatusOr<Shape> BuildMulti(std::span<const Shape> in, std::span<const DType> dtypes) override {
    RETURN_IF_ERROR(CheckFloat(dtypes));
    if (in.size() != 2) return Error("takes two inputs, got " + std::to_string(in.size()));
    for (const Shape& s : in) {
      if (s.empty() || s.size() > 2) {
        return Error("takes two inputs of rank 2 or 3 with the batch, got " + ShapeString(in[0]) + " and " +
                     ShapeString(in[1]));
      }
    }
    a0_ = PerExampleAxis(spec_.dot_axes[0], in[0].size());
    a1_ = PerExampleAxis(spec_.dot_axes[1], in[1].size());
    if (a0_ < 0 || a1_ < 0 || in[0][a0_] != in[1][a1_]) {
      return Error("axes [" + std::to_string(spec_.dot_axes[0]) + ", " + std::to_string(spec_.dot_axes[1]) +
                   "] do not pair inputs " + ShapeString(in[0]) + " and " + ShapeString(in[1]));
    }
    in_.assign(in.begin(), in.end());
    return Out();
  }

  StatusOr<Tensor> ForwardMulti(std::span<const Tensor>, std::span<const Tensor> xs, bool) override {
    RETURN_IF_ERROR(CheckInputs(xs));
    batch_ = xs[0].dim(0);
    raw_[0] = xs[0];
    raw_[1] = xs[1];
    for (int k = 0; k < 2; ++k) {
      u_[k] = xs[k].Clone();
      norms_[k] = spec_.normalize ? Normalize(u_[k], k) : Tensor();
    }
    Tensor y = Tensor::Zeros(DType::kFloat32, WithBatch(batch_, Out()));
    for (int64_t b = 0; b < batch_; ++b) {
      auto A = Mat(u_[0], 0, b), B = Mat(u_[1], 1, b);
      OutMap(y, b) = A.transpose() * B;
    }
    return y;
  }

  StatusOr<std::vector<Tensor>> BackwardMulti(std::span<const Tensor>, Tensor dy, const std::vector<bool>& need,
                                              std::span<Gradient>) override {
    std::vector<Tensor> dxs(2);
    for (int k = 0; k < 2; ++k) {
      if (!need[k]) continue;
      Tensor du = Tensor::Zeros(DType::kFloat32, raw_[k].shape());
      for (int64_t b = 0; b < batch_; ++b) {
        auto D = OutMap(dy, b);
        // y = A^T B: dA = B D^T, dB = A D (A, B with the summed axis as rows).
        Eigen::MatrixXf g =
            k == 0 ? Eigen::MatrixXf(Mat(u_[1], 1, b) * D.transpose()) : Eigen::MatrixXf(Mat(u_[0], 0, b) * D);
        MatOutSet(du, k, b, g);
      }
      if (spec_.normalize) du = NormalizeBackward(du, k);
      dxs[k] = std::move(du);
    }
    return dxs;
  }

 private:
  using MatMap = Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
  // Keras' batch_dot: each input's other axis, in order; [1] when neither has one.
  Shape Out() const {
    Shape out;
    if (in_[0].size() == 2) out.push_back(in_[0][1 - a0_]);
    if (in_[1].size() == 2) out.push_back(in_[1][1 - a1_]);
    return out.empty() ? Shape{1} : out;
  }
  // Example b of the output (or its gradient) as the product's matrix.
  Eigen::Map<Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> OutMap(Tensor& t, int64_t b) const {
    return {t.data<float>() + b * Cols(0) * Cols(1), Cols(0), Cols(1)};
  }
  // Example b of input k as a matrix whose rows run along the summed axis.
  Eigen::MatrixXf Mat(const Tensor& t, int k, int64_t b) const {
    const Shape& s = in_[k];
    const int64_t axis = k == 0 ? a0_ : a1_;
    const float* p = t.data<float>() + b * NumElements(s);
    if (s.size() == 1) return MatMap(p, s[0], 1);
    MatMap m(p, s[0], s[1]);
    return axis == 0 ? Eigen::MatrixXf(m) : Eigen::MatrixXf(m.transpose());
  }
  void MatOutSet(Tensor& t, int k, int64_t b, const Eigen::MatrixXf& g) const {
    const Shape& s = in_[k];
    const int64_t axis = k == 0 ? a0_ : a1_;
    float* p = t.data<float>() + b * NumElements(s);
    Eigen::Map<Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> m(p, s[0],
                                                                                        s.size() == 1 ? 1 : s[1]);
    if (s.size() == 1 || axis == 0)
      m = g;
    else
      m = g.transpose();
  }
  // l2-normalizes `t` along the summed axis in place (tf.math.l2_normalize,
  // epsilon 1e-12 on the squared norm); returns the norms used.
  Tensor Normalize(Tensor& t, int k) {
    Tensor norms = Tensor::Zeros(DType::kFloat32, {batch_, Cols(k)});
    for (int64_t b = 0; b < batch_; ++b) {
      Eigen::MatrixXf m = Mat(t, k, b);
      for (int64_t c = 0; c < m.cols(); ++c) {
        const float n = std::sqrt(std::max(m.col(c).squaredNorm(), 1e-12f));
        norms.data<float>()[b * Cols(k) + c] = n;
        m.col(c) /= n;
      }
      MatOutSet(t, k, b, m);
    }
    return norms;
  }
  // d(x / |x|) = (g - u (u . g)) / |x|, per column of the summed axis.
  Tensor NormalizeBackward(const Tensor& du, int k) {
    Tensor dx = Tensor::Zeros(DType::kFloat32, du.shape());
    for (int64_t b = 0; b < batch_; ++b) {
      Eigen::MatrixXf g = Mat(du, k, b), u = Mat(u_[k], k, b);
      for (int64_t c = 0; c < g.cols(); ++c) {
        const float n = norms_[k].data<float>()[b * Cols(k) + c];
        g.col(c) = (g.col(c) - u.col(c) * u.col(c).dot(g.col(c))) / n;
      }
      MatOutSet(dx, k, b, g);
    }
    return dx;
  }
  int64_t Cols(int k) const {
    const Shape& s = in_[k];
    return s.size() == 1 ? 1 : s[1 - (k == 0 ? a0_ : a1_)];
  }

  int64_t a0_ = 0, a1_ = 0, batch_ = 0;
  Tensor raw_[2], u_[2], norms_[2];
};

}  // namespace

std::unique_ptr<Layer> MakeMerge(const LayerSpec& spec) {
  if (spec.type == LayerType::kConcatenate) return std::make_unique<Concatenate>(spec);
  if (spec.type == LayerType::kDot) return std::make_unique<Dot>(spec);
  return std::make_unique<Elementwise>(spec);
}

}  // namespace tfjob::model::internal

// BatchNormalization and Normalization, as Keras 3 computes them.
//
// BatchNormalization normalizes over every axis but the last with the
// batch's own (biased) statistics while training, and with its moving
// statistics at inference. The moving statistics are non-trainable
// variables; a training step reports their Keras update
// (moving = moving * momentum + batch * (1 - momentum)) as a delta, which
// every strategy adds outside the optimizer. Replicas of a synchronous
// strategy each use the statistics of their own slice of the batch, as
// Keras does unless `synchronized`. Device tensors take the same formulas
// through the backend: a per-channel moments kernel, then elementwise ops;
// the moving-statistics deltas stay on the device with the rest.
//
// Normalization computes (x - mean) / max(sqrt(variance), 1e-7) per feature
// of the last axis (or with one scalar pair for axis None); `invert` undoes
// it. Given mean and variance are constants; otherwise they are adapted to
// the training data (Model::Adapt) and kept as non-trainable variables, so
// checkpoints, parameter servers and the evaluator all carry them.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "services/model/adaptable_layer.h"
#include "services/model/batch_norm_passes.h"
#include "services/model/layer_factories.h"
#include "services/model/layer_shapes.h"
#include "services/tensor/backend.h"
#include "services/tensor/eigen.h"
#include "services/tensor/ops.h"
#include "services/tensor/threads.h"

namespace tfjob::model::internal {
namespace {

class BatchNormalization final : public Layer {
 public:
  using Layer::Layer;

  StatusOr<Shape> Build(const Shape& in, DType dtype) override {
    if (dtype != DType::kFloat32) return Error("expects float32 input, got " + std::string(DTypeName(dtype)));
    if (in.empty()) return Error("expects a feature axis (the last one), got a scalar per example");
    if (spec_.axis != -1 && spec_.axis != static_cast<int64_t>(in.size())) {
      return Error("axis " + std::to_string(spec_.axis) + " is not the last axis of input " +
                   ShapeString(WithBatch(-1, in)) + " (only channels_last is supported)");
    }
    if (!(spec_.momentum >= 0 && spec_.momentum <= 1)) return Error("momentum must be in [0, 1]");
    if (!(spec_.epsilon > 0)) return Error("epsilon must be > 0");
    in_shape_ = in;
    c_ = in.back();
    return in;
  }

  std::vector<VariableSpec> Variables() const override {
    std::vector<VariableSpec> v;
    if (spec_.scale) v.push_back({spec_.name + "/gamma", {c_}, Initializer::kOnes, false});
    if (spec_.center) v.push_back({spec_.name + "/beta", {c_}, Initializer::kZeros, false});
    VariableSpec mean{spec_.name + "/moving_mean", {c_}, Initializer::kZeros, false};
    VariableSpec var{spec_.name + "/moving_variance", {c_}, Initializer::kOnes, false};
    mean.trainable = var.trainable = false;
    v.push_back(mean);
    v.push_back(var);
    return v;
  }

  bool FuseRelu() override {
    fuse_relu_ = true;
    return true;
  }
  bool relu_fused() const override { return relu_applied_; }

  StatusOr<Tensor> Forward(std::span<const Tensor> params, const Tensor& x, bool training) override {
    if (!Matches(x, DType::kFloat32, in_shape_)) return Error(Expected(DType::kFloat32, in_shape_, x));
    relu_applied_ = false;
    y_ = Tensor();
    if (!x.on_cpu()) return ForwardOnDevice(params, x, training);
    relu_applied_ = fuse_relu_;
    const Params p = Split(params);
    const int64_t rows = x.size() / std::max<int64_t>(c_, 1);
    // y is written whole below.
    ASSIGN_OR_RETURN(Tensor y, Tensor::CreateUninitialized(DType::kFloat32, x.shape()));
    const float eps = static_cast<float>(spec_.epsilon);
    training_ = training;
    rows_ = rows;
    // The backward makes x-hat again from x (one more read) instead of
    // keeping it (one more write, and as much memory as the output).
    x_ = x;
    xhat_ = Tensor();
    if (training) {
      BatchMoments(x.data<float>(), rows, c_, mean_, var_);
      shift_ = mean_;
      inv_ = (var_ + eps).rsqrt();
    } else {
      // Kept for a backward in inference mode (a frozen BatchNormalization,
      // as Keras differentiates it): x-hat from the moving statistics.
      shift_ = p.moving_mean;
      inv_ = (p.moving_variance + eps).rsqrt();
    }
    Normalize(x.data<float>(), rows, c_, shift_, inv_, p.gamma, p.beta, relu_applied_, y.data<float>());
    // The fused ReLU's gradient is dL/dy where y > 0 (Keras' ReLU: where its
    // input is), so the backward reads y.
    y_ = relu_applied_ ? y : Tensor();
    return y;
  }

  StatusOr<Tensor> Backward(std::span<const Tensor> params, Tensor dy, bool need_input_grad,
                            std::span<Gradient> grads) override {
    const Shape& out = dy.on_cpu() ? x_.shape() : xhat_.shape();
    if (dy.shape() != out) {
      return Error("gradient shape " + ShapeString(dy.shape()) + " does not match output " + ShapeString(out));
    }
    if (!dy.on_cpu()) {
      if (!training_) return Error("backward in inference mode computes on the host only");
      return BackwardOnDevice(params, dy, need_input_grad, grads);
    }
    const Params p = Split(params);
    auto dense = [&](const Array& a) {
      Tensor t = Tensor::Zeros(DType::kFloat32, {c_});
      Eigen::Map<Array>(t.data<float>(), c_) = a;
      return t;
    };
    // A fused ReLU's gradient first: dL/dy where y > 0, written into dy
    // (which the input's gradient below reads).
    Array dgamma, dbeta;
    GradientSums(dy.data<float>(), x_.data<float>(), y_.size() > 0 ? y_.data<float>() : nullptr, rows_, c_, shift_,
                 inv_, dgamma, dbeta);
    size_t g = 0;
    if (spec_.scale) grads[g++] = Gradient{false, dense(dgamma), {}, {}};
    if (spec_.center) grads[g++] = Gradient{false, dense(dbeta), {}, {}};
    if (!training_) {
      // The moving statistics are constants here: no update, and x-hat's
      // gradient is plain scaling.
      grads[g++] = Gradient{false, dense(Array::Zero(c_)), {}, {}, /*delta=*/true};
      grads[g++] = Gradient{false, dense(Array::Zero(c_)), {}, {}, /*delta=*/true};
      if (!need_input_grad) return Tensor();
      Tensor dx = Tensor::Zeros(DType::kFloat32, dy.shape());
      Eigen::Map<RowMatrix>(dx.data<float>(), rows_, c_).array() =
          Eigen::Map<const RowMatrix>(dy.data<float>(), rows_, c_).array().rowwise() * (p.gamma * inv_);
      return dx;
    }
    const float keep = 1.f - static_cast<float>(spec_.momentum);
    grads[g++] = Gradient{false, dense((mean_ - p.moving_mean) * keep), {}, {}, /*delta=*/true};
    grads[g++] = Gradient{false, dense((var_ - p.moving_variance) * keep), {}, {}, /*delta=*/true};
    if (!need_input_grad) return Tensor();
    // dx = inv * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), with
    // dxhat = dy * gamma.
    const float m = static_cast<float>(std::max<int64_t>(rows_, 1));
    const Array mean_dxhat = dbeta * p.gamma / m;
    const Array mean_dxhat_xhat = dgamma * p.gamma / m;
    InputGradient(dy.data<float>(), x_.data<float>(), rows_, c_, p.gamma, mean_dxhat, mean_dxhat_xhat, shift_, inv_);
    return dy;
  }

 private:
  // The parameters on the device; a missing gamma is ones, a missing beta
  // zeros (made once per device and kept).
  struct DeviceParams {
    Tensor gamma, beta, moving_mean, moving_variance;
  };
  StatusOr<DeviceParams> SplitOnDevice(std::span<const Tensor> params, const Tensor& x) {
    std::vector<const Tensor*> all{&x};
    for (const Tensor& t : params) all.push_back(&t);
    for (const Tensor* t : all) RETURN_IF_ERROR(device::CheckSameDevice(spec_.name, {&x, t}));
    if ((!spec_.scale || !spec_.center) && (constants_.ones.size() == 0 || constants_.ones.device() != x.device())) {
      ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(x.device()));
      ASSIGN_OR_RETURN(constants_.ones, Tensor::CreateUninitialized(DType::kFloat32, {c_}, x.device()));
      RETURN_IF_ERROR(b->Fill(constants_.ones, 1.f));
      ASSIGN_OR_RETURN(constants_.zeros, Tensor::Create(DType::kFloat32, {c_}, x.device()));
    }
    size_t i = 0;
    DeviceParams p;
    p.gamma = spec_.scale ? params[i++] : constants_.ones;
    p.beta = spec_.center ? params[i++] : constants_.zeros;
    p.moving_mean = params[i++];
    p.moving_variance = params[i++];
    return p;
  }

  StatusOr<Tensor> ForwardOnDevice(std::span<const Tensor> params, const Tensor& x, bool training) {
    x_ = Tensor();
    ASSIGN_OR_RETURN(DeviceParams p, SplitOnDevice(params, x));
    ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(x.device()));
    const float eps = static_cast<float>(spec_.epsilon);
    training_ = training;
    if (!training) {
      ASSIGN_OR_RETURN(Tensor inv, Tensor::CreateUninitialized(DType::kFloat32, {c_}, x.device()));
      RETURN_IF_ERROR(b->InverseSqrt(p.moving_variance, eps, inv));
      ASSIGN_OR_RETURN(Tensor scale, ops::Mul(p.gamma, inv));
      ASSIGN_OR_RETURN(Tensor mm_scale, ops::Mul(p.moving_mean, scale));
      ASSIGN_OR_RETURN(Tensor shift, ops::Sub(p.beta, mm_scale));
      ASSIGN_OR_RETURN(Tensor y, ops::Mul(x, scale));
      RETURN_IF_ERROR(b->BinaryOp(device::Binary::kAdd, y, shift, y));
      return y;
    }
    rows_ = x.size() / std::max<int64_t>(c_, 1);
    ASSIGN_OR_RETURN(dmean_, Tensor::CreateUninitialized(DType::kFloat32, {c_}, x.device()));
    ASSIGN_OR_RETURN(dvar_, Tensor::CreateUninitialized(DType::kFloat32, {c_}, x.device()));
    ASSIGN_OR_RETURN(dinv_, Tensor::CreateUninitialized(DType::kFloat32, {c_}, x.device()));
    RETURN_IF_ERROR(b->Moments(x, dmean_, dvar_));
    RETURN_IF_ERROR(b->InverseSqrt(dvar_, eps, dinv_));
    ASSIGN_OR_RETURN(xhat_, ops::Sub(x, dmean_));
    RETURN_IF_ERROR(b->BinaryOp(device::Binary::kMul, xhat_, dinv_, xhat_));
    ASSIGN_OR_RETURN(Tensor y, ops::Mul(xhat_, p.gamma));
    RETURN_IF_ERROR(b->BinaryOp(device::Binary::kAdd, y, p.beta, y));
    return y;
  }

  StatusOr<Tensor> BackwardOnDevice(std::span<const Tensor> params, const Tensor& dy, bool need_input_grad,
                                    std::span<Gradient> grads) {
    ASSIGN_OR_RETURN(DeviceParams p, SplitOnDevice(params, dy));
    RETURN_IF_ERROR(device::CheckSameDevice(spec_.name, {&dy, &xhat_, &dmean_}));
    ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(dy.device()));
    ASSIGN_OR_RETURN(Tensor dh, ops::Mul(dy, xhat_));
    ASSIGN_OR_RETURN(Tensor dgamma, Tensor::CreateUninitialized(DType::kFloat32, {c_}, dy.device()));
    ASSIGN_OR_RETURN(Tensor dbeta, Tensor::CreateUninitialized(DType::kFloat32, {c_}, dy.device()));
    RETURN_IF_ERROR(b->ColumnSum(dh, dgamma));
    RETURN_IF_ERROR(b->ColumnSum(dy, dbeta));
    size_t g = 0;
    if (spec_.scale) grads[g++] = Gradient{false, dgamma, {}, {}};
    if (spec_.center) grads[g++] = Gradient{false, dbeta, {}, {}};
    const float keep = 1.f - static_cast<float>(spec_.momentum);
    ASSIGN_OR_RETURN(Tensor dm, ops::Sub(dmean_, p.moving_mean));
    ASSIGN_OR_RETURN(Tensor dv, ops::Sub(dvar_, p.moving_variance));
    RETURN_IF_ERROR(b->Scale(dm, keep, dm));
    RETURN_IF_ERROR(b->Scale(dv, keep, dv));
    grads[g++] = Gradient{false, dm, {}, {}, /*delta=*/true};
    grads[g++] = Gradient{false, dv, {}, {}, /*delta=*/true};
    if (!need_input_grad) return Tensor();
    // dx = inv * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), with
    // dxhat = dy * gamma, as on the host.
    const float inv_m = 1.f / static_cast<float>(std::max<int64_t>(rows_, 1));
    ASSIGN_OR_RETURN(Tensor mean_dxhat, ops::Mul(dbeta, p.gamma));
    RETURN_IF_ERROR(b->Scale(mean_dxhat, inv_m, mean_dxhat));
    ASSIGN_OR_RETURN(Tensor mean_dxhat_xhat, ops::Mul(dgamma, p.gamma));
    RETURN_IF_ERROR(b->Scale(mean_dxhat_xhat, inv_m, mean_dxhat_xhat));
    ASSIGN_OR_RETURN(Tensor dx, ops::Mul(dy, p.gamma));
    RETURN_IF_ERROR(b->BinaryOp(device::Binary::kSub, dx, mean_dxhat, dx));
    RETURN_IF_ERROR(b->BinaryOp(device::Binary::kMul, xhat_, mean_dxhat_xhat, dh));
    RETURN_IF_ERROR(b->BinaryOp(device::Binary::kSub, dx, dh, dx));
    RETURN_IF_ERROR(b->BinaryOp(device::Binary::kMul, dx, dinv_, dx));
    return dx;
  }

  // The parameters as per-channel rows; a missing gamma is ones, a missing
  // beta zeros.
  struct Params {
    Array gamma, beta, moving_mean, moving_variance;
  };
  Params Split(std::span<const Tensor> params) const {
    size_t i = 0;
    auto row = [&](size_t k) { return Array(Eigen::Map<const Array>(params[k].data<float>(), c_)); };
    Params p;
    p.gamma = spec_.scale ? row(i++) : Array::Ones(c_);
    p.beta = spec_.center ? row(i++) : Array::Zero(c_);
    p.moving_mean = row(i++);
    p.moving_variance = row(i++);
    return p;
  }

  Shape in_shape_;
  int64_t c_ = 0, rows_ = 0;
  bool training_ = false;
  // Host: the input and x-hat's shift (the batch mean, or the moving mean
  // at inference) and scale. Device: x-hat itself.
  Tensor x_;
  Array mean_, var_, shift_, inv_;
  Tensor xhat_;
  // A ReLU fused into the layer (Layer::FuseRelu), whether the last Forward
  // applied it, and then its output (the ReLU's gradient is where y > 0).
  bool fuse_relu_ = false, relu_applied_ = false;
  Tensor y_;
  // The batch statistics of a training pass on a device.
  Tensor dmean_, dvar_, dinv_;
  struct {
    Tensor ones, zeros;
  } constants_;
};

class Normalization final : public AdaptableLayer {
 public:
  bool device_kernels() const override { return false; }
  using AdaptableLayer::AdaptableLayer;

  StatusOr<Shape> Build(const Shape& in, DType dtype) override {
    if (dtype != DType::kFloat32) return Error("expects float32 input, got " + std::string(DTypeName(dtype)));
    if (!spec_.axis_none && in.empty()) {
      return Error("axis -1 needs a feature axis, got a scalar per example (use \"axis\": null)");
    }
    in_shape_ = in;
    f_ = spec_.axis_none ? 1 : in.back();
    if (spec_.mean.size() != spec_.variance.size()) return Error("mean and variance must have the same length");
    if (!spec_.mean.empty()) {
      const int64_t n = static_cast<int64_t>(spec_.mean.size());
      if (n != 1 && n != f_) {
        return Error("mean has " + std::to_string(n) + " values; the input has " + std::to_string(f_) +
                     " features on its last axis (give 1 or " + std::to_string(f_) + ")");
      }
      mean_ = Array(f_), std_ = Array(f_);
      for (int64_t i = 0; i < f_; ++i) {
        const double v = spec_.variance[static_cast<size_t>(n == 1 ? 0 : i)];
        if (!(v >= 0)) return Error("variance must be >= 0");
        mean_[i] = static_cast<float>(spec_.mean[static_cast<size_t>(n == 1 ? 0 : i)]);
        std_[i] = std::max(static_cast<float>(std::sqrt(v)), kEpsilon);
      }
    }
    return in;
  }

  std::vector<VariableSpec> Variables() const override {
    if (!spec_.mean.empty()) return {};
    VariableSpec mean{spec_.name + "/mean", {f_}, Initializer::kZeros, false};
    VariableSpec var{spec_.name + "/variance", {f_}, Initializer::kOnes, false};
    mean.trainable = var.trainable = false;
    if (adapted_) {
      mean.init = var.init = Initializer::kValue;
      mean.value = adapted_mean_;
      var.value = adapted_variance_;
    }
    return {mean, var};
  }

  bool adaptable() const override { return spec_.mean.empty(); }
  int64_t adapt_count() const override { return count_; }

  Status Adapt(const Tensor& x) override {
    if (!Matches(x, DType::kFloat32, in_shape_)) return Error(Expected(DType::kFloat32, in_shape_, x));
    const int64_t rows = f_ == 0 ? 0 : x.size() / f_;
    if (rows == 0) return Error("nothing to adapt to: the training data is empty");
    Eigen::Map<const RowMatrix> X(x.data<float>(), rows, f_);
    // In double: a data set's worth of float32 sums loses digits.
    const Eigen::ArrayXXd xd = X.cast<double>().array();
    const Eigen::Array<double, 1, Eigen::Dynamic> mean = xd.colwise().mean();
    const Eigen::Array<double, 1, Eigen::Dynamic> var = (xd.rowwise() - mean).square().colwise().mean();
    adapted_mean_ = Tensor::Zeros(DType::kFloat32, {f_});
    adapted_variance_ = Tensor::Zeros(DType::kFloat32, {f_});
    for (int64_t i = 0; i < f_; ++i) {
      adapted_mean_.data<float>()[i] = static_cast<float>(mean[i]);
      adapted_variance_.data<float>()[i] = static_cast<float>(var[i]);
    }
    adapted_ = true;
    count_ = x.dim(0);
    return Status::Ok();
  }

  StatusOr<Tensor> Forward(std::span<const Tensor> params, const Tensor& x, bool) override {
    if (!Matches(x, DType::kFloat32, in_shape_)) return Error(Expected(DType::kFloat32, in_shape_, x));
    Stats(params);
    const int64_t rows = f_ == 0 ? 0 : x.size() / f_;
    Tensor y = Tensor::Zeros(DType::kFloat32, x.shape());
    Eigen::Map<const RowMatrix> X(x.data<float>(), rows, f_);
    Eigen::Map<RowMatrix> Y(y.data<float>(), rows, f_);
    if (spec_.invert) {
      Y.array() = (X.array().rowwise() * std_).rowwise() + mean_;
    } else {
      Y.array() = (X.array().rowwise() - mean_).rowwise() / std_;
    }
    return y;
  }

  StatusOr<Tensor> Backward(std::span<const Tensor> params, Tensor dy, bool need_input_grad,
                            std::span<Gradient> grads) override {
    // The statistics are state, not parameters: their update is nothing.
    for (size_t i = 0; i < grads.size(); ++i) {
      grads[i] = Gradient{false, Tensor::Zeros(DType::kFloat32, params[i].shape()), {}, {}, /*delta=*/true};
    }
    if (!need_input_grad) return Tensor();
    Stats(params);
    const int64_t rows = f_ == 0 ? 0 : dy.size() / f_;
    Eigen::Map<RowMatrix> D(dy.data<float>(), rows, f_);
    if (spec_.invert) {
      D.array().rowwise() *= std_;
    } else {
      D.array().rowwise() /= std_;
    }
    return dy;
  }

 private:
  static constexpr float kEpsilon = 1e-7f;  // Keras' backend.epsilon()

  // Adapted statistics come in as variables.
  void Stats(std::span<const Tensor> params) {
    if (!spec_.mean.empty()) return;
    mean_ = Eigen::Map<const Array>(params[0].data<float>(), f_);
    std_ = Eigen::Map<const Array>(params[1].data<float>(), f_).sqrt().max(kEpsilon);
  }

  Shape in_shape_;
  int64_t f_ = 0;
  Array mean_, std_;
  bool adapted_ = false;
  int64_t count_ = 0;
  Tensor adapted_mean_, adapted_variance_;
};

}  // namespace

std::unique_ptr<Layer> MakeBatchNormalization(const LayerSpec& spec) {
  return std::make_unique<BatchNormalization>(spec);
}
std::unique_ptr<Layer> MakeNormalization(const LayerSpec& spec) { return std::make_unique<Normalization>(spec); }

}  // namespace tfjob::model::internal

// Conv2D on NHWC tensors (Keras' "channels_last") with an HWIO kernel
// [kh, kw, in_channels, filters], Keras' own layout. On the CPU, oneDNN's
// direct convolutions compute it where the build has them (services/tensor/
// conv2d.h; ReLU fused into the forward pass). Otherwise, and whenever
// oneDNN refuses a geometry, an im2col followed by one matrix product
// (services/tensor/gemm.h): the patches of a batch form a matrix
// [batch * out_h * out_w, kh * kw * in_channels] whose product with the
// kernel (viewed as [kh * kw * in_channels, filters]) is the NHWC output.
// Backward is the same two products transposed plus a col2im scatter.
// Device tensors take the same route through their backend: an im2col
// kernel, cuBLAS products, a col2im kernel that gathers (no atomics, so
// the sums are the host's, in the host's order).
#include <cstring>

#include "services/model/activation.h"
#include "services/model/layer_factories.h"
#include "services/model/layers_more.h"
#include "services/tensor/backend.h"
#include "services/tensor/conv2d.h"
#include "services/tensor/eigen.h"
#include "services/tensor/gemm.h"

namespace tfjob::model::internal {
namespace {

class Conv2D final : public Layer {
 public:
  using Layer::Layer;

  bool device_kernels() const override { return ActivationOnDevice(spec_.activation); }

  StatusOr<Shape> Build(const Shape& in, DType dtype) override {
    if (dtype != DType::kFloat32) return Error("expects float32 input, got " + std::string(DTypeName(dtype)));
    if (in.size() != 3) {
      return Error("expects input [height, width, channels] per example (NHWC), got " + ShapeString(in) +
                   (in.size() == 2 ? " (add a Reshape to [h, w, 1] for one channel)" : ""));
    }
    if (spec_.filters <= 0) return Error("filters must be positive, got " + std::to_string(spec_.filters));
    for (int a = 0; a < 2; ++a) {
      if (spec_.kernel_size[a] <= 0) return Error("kernel_size must be positive");
      if (spec_.strides[a] <= 0) return Error("strides must be positive");
    }
    h_ = in[0], w_ = in[1], c_ = in[2];
    kh_ = spec_.kernel_size[0], kw_ = spec_.kernel_size[1];
    const AxisGeometry gh = Geometry(h_, kh_, spec_.strides[0], spec_.padding);
    const AxisGeometry gw = Geometry(w_, kw_, spec_.strides[1], spec_.padding);
    if (gh.out <= 0 || gw.out <= 0) {
      return Error("kernel " + std::to_string(kh_) + "x" + std::to_string(kw_) + " does not fit input " +
                   std::to_string(h_) + "x" + std::to_string(w_) + " with padding \"valid\"");
    }
    oh_ = gh.out, ow_ = gw.out, pt_ = gh.pad_before, pl_ = gw.pad_before;
    in_shape_ = in;
    return Shape{oh_, ow_, spec_.filters};
  }

  std::vector<VariableSpec> Variables() const override {
    std::vector<VariableSpec> v{
        {spec_.name + "/kernel", {kh_, kw_, c_, spec_.filters}, spec_.kernel_initializer, false}};
    if (spec_.use_bias) v.push_back({spec_.name + "/bias", {spec_.filters}, spec_.bias_initializer, false});
    return v;
  }

  bool FuseMaxPool(std::array<int64_t, 2> pool, const Shape& pooled_shape) override {
    const bool activation = spec_.activation == Activation::kRelu || spec_.activation == Activation::kLinear;
    if (!activation || spec_.precision == Precision::kFloat16 ||
        !DirectConv2D::CanPool(DirectGeometry(1), pool[0], pool[1]) ||
        pooled_shape != Shape{oh_ / pool[0], ow_ / pool[1], spec_.filters}) {
      return false;
    }
    pool_ = pool;
    return true;
  }

  bool pooled() const override { return pooled_; }
  std::string cpu_kernel() const override { return direct_used_ ? direct_.ForwardKernel() : ""; }

  StatusOr<Tensor> Forward(std::span<const Tensor> params, const Tensor& x, bool) override {
    if (!Matches(x, DType::kFloat32, in_shape_)) return Error(Expected(DType::kFloat32, in_shape_, x));
    pooled_ = false;
    if (!x.on_cpu() || !params[0].on_cpu()) return ForwardOnDevice(params, x);
    if (pool_ && ComputePrecision() != Precision::kFloat16) {
      auto y = ForwardPooled(params, x);
      if (y.ok()) return y;
      // Not for this geometry after all: the convolution alone, then the pooling layer.
    }
    // The direct kernels compute in float32 or bfloat16; a float16 layer's
    // patch products go through Gemm in its (emulated) precision.
    if (DirectConv2D::Available() && ComputePrecision() != Precision::kFloat16) {
      auto y = ForwardDirect(params, x);
      if (y.ok()) return y;
      // oneDNN refused the geometry: the im2col path below computes it.
    }
    direct_used_ = false;
    const int64_t n = x.dim(0), k = kh_ * kw_ * c_, rows = n * oh_ * ow_;
    // Every element of a "valid" patch matrix is written below.
    ASSIGN_OR_RETURN(patches_, spec_.padding == Padding::kValid
                                   ? Tensor::CreateUninitialized(DType::kFloat32, {rows, k})
                                   : Tensor::Create(DType::kFloat32, {rows, k}));
    Im2Col(x.data<float>(), n, patches_.data<float>());
    ASSIGN_OR_RETURN(Tensor y, Tensor::CreateUninitialized(DType::kFloat32, {n, oh_, ow_, spec_.filters}));
    Eigen::Map<RowMatrix> Y(y.data<float>(), rows, spec_.filters);
    Gemm(false, false, rows, spec_.filters, k, patches_.data<float>(), k, params[0].data<float>(), spec_.filters, 0.f,
         y.data<float>(), spec_.filters);
    if (spec_.use_bias) Y.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(params[1].data<float>(), spec_.filters);
    z_ = ActivationNeedsInput(spec_.activation) ? y.Clone() : Tensor();
    ApplyActivation(spec_.activation, y);
    y_ = y;
    batch_ = n;
    return y;
  }

  StatusOr<Tensor> Backward(std::span<const Tensor> params, Tensor dy, bool need_input_grad,
                            std::span<Gradient> grads) override {
    if (dy.shape() != y_.shape()) {
      return Error("gradient shape " + ShapeString(dy.shape()) + " does not match output " + ShapeString(y_.shape()));
    }
    if (!dy.on_cpu() || !y_.on_cpu()) return BackwardOnDevice(params, std::move(dy), need_input_grad, grads);
    if (pooled_) {
      if (!need_input_grad && BackwardPooled(dy, grads).ok()) return Tensor();
      // The pooled gradient back to the convolution's positions (the ReLU's
      // gradient too), for the input's gradient.
      ASSIGN_OR_RETURN(Tensor dz, Tensor::CreateUninitialized(DType::kFloat32, {batch_, oh_, ow_, spec_.filters}));
      DirectConv2D::MaxPoolGradient(DirectGeometry(batch_), (*pool_)[0], (*pool_)[1], winners_.data(), dy.data<float>(),
                                    dz.data<float>());
      dy = std::move(dz);
    } else {
      ActivationBackward(spec_.activation, z_, y_, dy);
    }
    const int64_t k = kh_ * kw_ * c_, rows = batch_ * oh_ * ow_;
    if (direct_used_) {
      auto dx = BackwardDirect(params, dy, need_input_grad, grads);
      if (dx.ok()) return dx;
      // Refused after all: the patches the path below needs, from the input.
      ASSIGN_OR_RETURN(patches_, Tensor::Create(DType::kFloat32, {rows, k}));
      Im2Col(x_.data<float>(), batch_, patches_.data<float>());
    }
    Eigen::Map<const RowMatrix> D(dy.data<float>(), rows, spec_.filters);
    ASSIGN_OR_RETURN(Tensor dk, Tensor::CreateUninitialized(DType::kFloat32, {kh_, kw_, c_, spec_.filters}));
    Gemm(true, false, k, spec_.filters, rows, patches_.data<float>(), k, dy.data<float>(), spec_.filters, 0.f,
         dk.data<float>(), spec_.filters);
    grads[0] = Gradient{false, dk, {}, {}};
    if (spec_.use_bias) {
      Tensor db = Tensor::Zeros(DType::kFloat32, {spec_.filters});
      Eigen::Map<Eigen::RowVectorXf>(db.data<float>(), spec_.filters) = D.colwise().sum();
      grads[1] = Gradient{false, db, {}, {}};
    }
    if (!need_input_grad) return Tensor();
    // The patches are not needed any more: their buffer takes dL/dpatches.
    Gemm(false, true, rows, k, spec_.filters, dy.data<float>(), spec_.filters, params[0].data<float>(), spec_.filters,
         0.f, patches_.data<float>(), k);
    Tensor dx = Tensor::Zeros(DType::kFloat32, WithBatch(batch_, in_shape_));
    Col2Im(patches_.data<float>(), batch_, dx.data<float>());
    patches_ = Tensor();
    return dx;
  }

 private:
  Conv2DGeometry DirectGeometry(int64_t n) const {
    return {.batch = n,
            .height = h_,
            .width = w_,
            .channels = c_,
            .kernel_h = kh_,
            .kernel_w = kw_,
            .filters = spec_.filters,
            .stride_h = spec_.strides[0],
            .stride_w = spec_.strides[1],
            .out_h = oh_,
            .out_w = ow_,
            .pad_top = pt_,
            .pad_left = pl_};
  }

  // oneDNN's direct convolution, ReLU fused; the input is kept for the
  // backward pass (no patches).
  StatusOr<Tensor> ForwardDirect(std::span<const Tensor> params, const Tensor& x) {
    const int64_t n = x.dim(0);
    const bool fuse_relu = spec_.activation == Activation::kRelu;
    ASSIGN_OR_RETURN(Tensor y, Tensor::CreateUninitialized(DType::kFloat32, {n, oh_, ow_, spec_.filters}));
    RETURN_IF_ERROR(direct_.Forward(DirectGeometry(n), x.data<float>(), params[0].data<float>(),
                                    spec_.use_bias ? params[1].data<float>() : nullptr, fuse_relu, y.data<float>()));
    z_ = !fuse_relu && ActivationNeedsInput(spec_.activation) ? y.Clone() : Tensor();
    if (!fuse_relu) ApplyActivation(spec_.activation, y);
    x_ = x;
    y_ = y;
    batch_ = n;
    patches_ = Tensor();
    direct_used_ = true;
    return y;
  }

  // The convolution and the max pooling fused into it (FuseMaxPool), in
  // one pass: only the pooled output and each window's winner are kept.
  StatusOr<Tensor> ForwardPooled(std::span<const Tensor> params, const Tensor& x) {
    const int64_t n = x.dim(0), ph = (*pool_)[0], pw = (*pool_)[1];
    ASSIGN_OR_RETURN(Tensor y, Tensor::CreateUninitialized(DType::kFloat32, {n, oh_ / ph, ow_ / pw, spec_.filters}));
    winners_.resize(static_cast<size_t>(y.size()));
    RETURN_IF_ERROR(direct_.ForwardMaxPool(
        DirectGeometry(n), x.data<float>(), params[0].data<float>(), spec_.use_bias ? params[1].data<float>() : nullptr,
        spec_.activation == Activation::kRelu, ph, pw, y.data<float>(), winners_.data()));
    z_ = Tensor();
    x_ = x;
    y_ = y;
    batch_ = n;
    patches_ = Tensor();
    direct_used_ = true;
    pooled_ = true;
    return y;
  }

  // The kernel's and bias' gradients straight from the pooled gradient
  // (the first layer: no input gradient asked).
  Status BackwardPooled(const Tensor& dy, std::span<Gradient> grads) {
    ASSIGN_OR_RETURN(Tensor dk, Tensor::CreateUninitialized(DType::kFloat32, {kh_, kw_, c_, spec_.filters}));
    Tensor db;
    if (spec_.use_bias) {
      ASSIGN_OR_RETURN(db, Tensor::CreateUninitialized(DType::kFloat32, {spec_.filters}));
    }
    RETURN_IF_ERROR(direct_.BackwardWeightsPooled(DirectGeometry(batch_), (*pool_)[0], (*pool_)[1], x_.data<float>(),
                                                  winners_.data(), dy.data<float>(), dk.data<float>(),
                                                  spec_.use_bias ? db.data<float>() : nullptr));
    grads[0] = Gradient{false, dk, {}, {}};
    if (spec_.use_bias) grads[1] = Gradient{false, db, {}, {}};
    x_ = Tensor();
    return Status::Ok();
  }

  StatusOr<Tensor> BackwardDirect(std::span<const Tensor> params, const Tensor& dy, bool need_input_grad,
                                  std::span<Gradient> grads) {
    ASSIGN_OR_RETURN(Tensor dk, Tensor::CreateUninitialized(DType::kFloat32, {kh_, kw_, c_, spec_.filters}));
    Tensor db;
    if (spec_.use_bias) {
      ASSIGN_OR_RETURN(db, Tensor::CreateUninitialized(DType::kFloat32, {spec_.filters}));
    }
    RETURN_IF_ERROR(direct_.BackwardWeights(DirectGeometry(batch_), x_.data<float>(), dy.data<float>(),
                                            dk.data<float>(), spec_.use_bias ? db.data<float>() : nullptr));
    Tensor dx;
    if (need_input_grad) {
      ASSIGN_OR_RETURN(dx, Tensor::CreateUninitialized(DType::kFloat32, WithBatch(batch_, in_shape_)));
      RETURN_IF_ERROR(
          direct_.BackwardData(DirectGeometry(batch_), dy.data<float>(), params[0].data<float>(), dx.data<float>()));
    }
    grads[0] = Gradient{false, dk, {}, {}};
    if (spec_.use_bias) grads[1] = Gradient{false, db, {}, {}};
    x_ = Tensor();
    return dx;
  }

  device::Window2D Geometry2D(int64_t n) const {
    device::Window2D w;
    w.batch = n, w.height = h_, w.width = w_, w.channels = c_;
    w.window_h = kh_, w.window_w = kw_, w.stride_h = spec_.strides[0], w.stride_w = spec_.strides[1];
    w.out_h = oh_, w.out_w = ow_, w.pad_top = pt_, w.pad_left = pl_;
    return w;
  }

  StatusOr<Tensor> ForwardOnDevice(std::span<const Tensor> params, const Tensor& x) {
    RETURN_IF_ERROR(device::CheckSameDevice(spec_.name, {&x, &params[0]}));
    if (spec_.use_bias) RETURN_IF_ERROR(device::CheckSameDevice(spec_.name, {&x, &params[1]}));
    ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(x.device()));
    const int64_t n = x.dim(0), k = kh_ * kw_ * c_, rows = n * oh_ * ow_;
    ASSIGN_OR_RETURN(patches_, Tensor::CreateUninitialized(DType::kFloat32, {rows, k}, x.device()));
    RETURN_IF_ERROR(b->Im2Col(x, Geometry2D(n), patches_));
    ASSIGN_OR_RETURN(Tensor y, Tensor::CreateUninitialized(DType::kFloat32, {n, oh_, ow_, spec_.filters}, x.device()));
    ASSIGN_OR_RETURN(Tensor y2, y.Reshape({rows, spec_.filters}));
    ASSIGN_OR_RETURN(Tensor k2, params[0].Reshape({k, spec_.filters}));
    RETURN_IF_ERROR(b->MatMul(patches_, false, k2, false, y2, 0.f));
    if (spec_.use_bias) RETURN_IF_ERROR(b->BiasAdd(y, params[1]));
    RETURN_IF_ERROR(Activate(spec_.activation, y));
    y_ = y;
    batch_ = n;
    return y;
  }

  StatusOr<Tensor> BackwardOnDevice(std::span<const Tensor> params, Tensor dy, bool need_input_grad,
                                    std::span<Gradient> grads) {
    RETURN_IF_ERROR(device::CheckSameDevice(spec_.name, {&dy, &y_, &params[0], &patches_}));
    ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(dy.device()));
    RETURN_IF_ERROR(ActivateBackward(spec_.activation, y_, dy));
    const int64_t k = kh_ * kw_ * c_, rows = batch_ * oh_ * ow_;
    ASSIGN_OR_RETURN(Tensor d2, dy.Reshape({rows, spec_.filters}));
    ASSIGN_OR_RETURN(Tensor dk,
                     Tensor::CreateUninitialized(DType::kFloat32, {kh_, kw_, c_, spec_.filters}, dy.device()));
    ASSIGN_OR_RETURN(Tensor dk2, dk.Reshape({k, spec_.filters}));
    RETURN_IF_ERROR(b->MatMul(patches_, true, d2, false, dk2, 0.f));
    grads[0] = Gradient{false, dk, {}, {}};
    if (spec_.use_bias) {
      ASSIGN_OR_RETURN(Tensor db, Tensor::CreateUninitialized(DType::kFloat32, {spec_.filters}, dy.device()));
      RETURN_IF_ERROR(b->ColumnSum(d2, db));
      grads[1] = Gradient{false, db, {}, {}};
    }
    if (!need_input_grad) {
      patches_ = Tensor();
      return Tensor();
    }
    // As on the host, the patches' buffer takes dL/dpatches (the stream
    // orders this product after the one above that reads them).
    ASSIGN_OR_RETURN(Tensor k2, params[0].Reshape({k, spec_.filters}));
    RETURN_IF_ERROR(b->MatMul(d2, false, k2, true, patches_, 0.f));
    ASSIGN_OR_RETURN(Tensor dx,
                     Tensor::CreateUninitialized(DType::kFloat32, WithBatch(batch_, in_shape_), dy.device()));
    RETURN_IF_ERROR(b->Col2Im(patches_, Geometry2D(batch_), dx));
    patches_ = Tensor();
    return dx;
  }

  // Calls f(patch offset, input offset, length) for every kernel row of
  // every output pixel, covering the row's taps that land inside the input:
  // those taps are neighbours in both the patch row and the input (NHWC),
  // so each call is one contiguous run of floats.
  template <typename F>
  void ForEachRun(int64_t n, F&& f) const {
    const int64_t k = kh_ * kw_ * c_;
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t oy = 0; oy < oh_; ++oy) {
        for (int64_t ox = 0; ox < ow_; ++ox) {
          const int64_t row = ((b * oh_ + oy) * ow_ + ox) * k;
          const int64_t x0 = ox * spec_.strides[1] - pl_;
          const int64_t kx0 = std::max<int64_t>(0, -x0), kx1 = std::min(kw_, w_ - x0);
          if (kx1 <= kx0) continue;
          for (int64_t ky = 0; ky < kh_; ++ky) {
            const int64_t iy = oy * spec_.strides[0] - pt_ + ky;
            if (iy < 0 || iy >= h_) continue;
            f(row + (ky * kw_ + kx0) * c_, ((b * h_ + iy) * w_ + x0 + kx0) * c_, (kx1 - kx0) * c_);
          }
        }
      }
    }
  }

  // Loops, not memcpy: a run is often a few floats (one input channel), and
  // a call per run cost more than the copy.
  void Im2Col(const float* x, int64_t n, float* p) const {
    ForEachRun(n, [&](int64_t to, int64_t from, int64_t len) {
      float* __restrict dst = p + to;
      const float* __restrict src = x + from;
      for (int64_t i = 0; i < len; ++i) dst[i] = src[i];
    });
  }

  void Col2Im(const float* p, int64_t n, float* dx) const {
    ForEachRun(n, [&](int64_t from, int64_t to, int64_t len) {
      float* __restrict dst = dx + to;
      const float* __restrict src = p + from;
      for (int64_t i = 0; i < len; ++i) dst[i] += src[i];
    });
  }

  Shape in_shape_;
  int64_t h_ = 0, w_ = 0, c_ = 0, kh_ = 0, kw_ = 0, oh_ = 0, ow_ = 0, pt_ = 0, pl_ = 0;
  int64_t batch_ = 0;
  Tensor patches_, y_;
  Tensor z_;  // the pre-activation, when the activation's gradient needs it
  DirectConv2D direct_;
  bool direct_used_ = false;                    // the last forward went through direct_: x_ kept, no patches
  std::optional<std::array<int64_t, 2>> pool_;  // FuseMaxPool's
  bool pooled_ = false;                         // the last forward was ForwardPooled: y_ is pooled
  std::vector<uint8_t> winners_;                // ForwardPooled's: per pooled value, its window's tap
  Tensor x_;
};

}  // namespace

std::unique_ptr<Layer> MakeConv2D(const LayerSpec& spec) {
  // Dilated and grouped convolutions: conv_more.cc's host engine.
  if (spec.dilation_rate != std::array<int64_t, 2>{1, 1} || spec.groups != 1) return MakeConvMore(spec);
  return std::make_unique<Conv2D>(spec);
}

}  // namespace tfjob::model::internal

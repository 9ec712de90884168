// Host convolutions beyond conv.cc's device-capable Conv2D: Conv1D, Conv2D
// with dilation_rate or groups, DepthwiseConv2D, SeparableConv2D and
// Conv2DTranspose, NHWC ("channels_last") with Keras' kernel layouts.
//
// One engine (Conv) does the grouped, dilated convolution as conv.cc does
// the plain one: per group an im2col patch matrix [batch * oh * ow,
// kh * kw * channels_per_group] times that group's kernel columns; backward
// is the two transposed products and a col2im scatter. The layouts line up
// without copies: Conv1D's [k, in, filters] is [k, 1, in, filters], and
// DepthwiseConv2D's [kh, kw, in, multiplier] is a grouped [kh, kw, 1,
// in * multiplier] with one group per input channel. SeparableConv2D is a
// depthwise Conv then a 1x1 Conv. Conv2DTranspose is the gradient of a
// convolution with respect to its input: col2im of x times the kernel
// [kh, kw, filters, in] transposed, over the output Keras sizes
// (in * stride, plus max(dilated kernel - stride, 0) when "valid").
#include <cstring>

#include "services/model/activation.h"
#include "services/model/layers_more.h"
#include "services/tensor/eigen.h"
#include "services/tensor/gemm.h"

namespace tfjob::model::internal {
namespace {

// The geometry of a convolution from an input [h, w, c] to an output
// [oh, ow, filters]: window, stride, dilation, leading padding, groups.
struct Geometry2 {
  int64_t h = 0, w = 0, c = 0, kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  int64_t oh = 0, ow = 0, pt = 0, pl = 0, groups = 1;
  int64_t cpg() const { return c / groups; }
  int64_t taps() const { return kh * kw * cpg(); }

  // Calls f(patch offset, input offset) for every kernel tap of every
  // output pixel that lands inside the input, in group g's patch matrix;
  // each call covers cpg() contiguous channels.
  template <typename F>
  void ForEachTap(int64_t n, int64_t g, F&& f) const {
    const int64_t k = taps(), cg = cpg();
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t oy = 0; oy < oh; ++oy) {
        for (int64_t ox = 0; ox < ow; ++ox) {
          const int64_t row = ((b * oh + oy) * ow + ox) * k;
          for (int64_t ky = 0; ky < kh; ++ky) {
            const int64_t iy = oy * sh - pt + ky * dh;
            if (iy < 0 || iy >= h) continue;
            for (int64_t kx = 0; kx < kw; ++kx) {
              const int64_t ix = ox * sw - pl + kx * dw;
              if (ix < 0 || ix >= w) continue;
              f(row + (ky * kw + kx) * cg, ((b * h + iy) * w + ix) * c + g * cg);
            }
          }
        }
      }
    }
  }

  void Im2Col(const float* x, int64_t n, int64_t g, float* p) const {
    const size_t bytes = static_cast<size_t>(cpg()) * sizeof(float);
    ForEachTap(n, g, [&](int64_t to, int64_t from) { std::memcpy(p + to, x + from, bytes); });
  }
  void Col2Im(const float* p, int64_t n, int64_t g, float* dx) const {
    const int64_t cg = cpg();
    ForEachTap(n, g, [&](int64_t from, int64_t to) {
      for (int64_t ch = 0; ch < cg; ++ch) dx[to + ch] += p[from + ch];
    });
  }
};

// Output size and leading padding of one axis with a dilated window.
AxisGeometry DilatedAxis(int64_t in, int64_t k, int64_t stride, int64_t dilation, Padding padding, bool causal) {
  const int64_t window = (k - 1) * dilation + 1;
  if (!causal) return Geometry(in, window, stride, padding);
  AxisGeometry g = Geometry(in + window - 1, window, stride, Padding::kValid);
  g.pad_before = window - 1;
  return g;
}

// What a Conv computes beyond the geometry.
struct ConvSetup {
  int64_t filters = 0;
  bool depthwise = false;  // one group per input channel, filters = channels * depth_multiplier
  bool one_d = false;      // [steps, c] input as [steps, 1, c]
  bool use_bias = true;
  Activation activation = Activation::kLinear;
  std::string kernel_name, bias_name;
  Initializer kernel_init, bias_init;
  Regularizer kernel_reg, bias_reg;
  Constraint kernel_con, bias_con;
};

class Conv final : public HostLayer {
 public:
  Conv(const LayerSpec& spec, ConvSetup setup) : HostLayer(spec), s_(std::move(setup)) {}

  StatusOr<Shape> Build(const Shape& in, DType dtype) override {
    if (dtype != DType::kFloat32) return Error("expects float32 input, got " + std::string(DTypeName(dtype)));
    if (in.size() != (s_.one_d ? 2u : 3u)) {
      return Error(s_.one_d ? "expects input [steps, channels] per example, got " + ShapeString(in)
                            : "expects input [height, width, channels] per example (NHWC), got " + ShapeString(in));
    }
    Geometry2& g = g_;
    g.h = in[0], g.w = s_.one_d ? 1 : in[1], g.c = in.back();
    g.kh = spec_.kernel_size[0], g.kw = s_.one_d ? 1 : spec_.kernel_size[1];
    g.sh = spec_.strides[0], g.sw = s_.one_d ? 1 : spec_.strides[1];
    g.dh = spec_.dilation_rate[0], g.dw = s_.one_d ? 1 : spec_.dilation_rate[1];
    if (g.kh <= 0 || g.kw <= 0 || g.sh <= 0 || g.sw <= 0 || g.dh <= 0 || g.dw <= 0) {
      return Error("kernel_size, strides and dilation_rate must be positive");
    }
    if ((g.sh > 1 || g.sw > 1) && (g.dh > 1 || g.dw > 1))
      return Error("strides > 1 and dilation_rate > 1 exclude each other");
    g.groups = s_.depthwise ? g.c : spec_.groups;
    filters_ = s_.depthwise ? g.c * spec_.depth_multiplier : s_.filters;
    if (filters_ <= 0) return Error("filters and depth_multiplier must be positive");
    if (g.groups <= 0 || g.c % g.groups != 0 || filters_ % g.groups != 0) {
      return Error("groups " + std::to_string(g.groups) + " must divide the input channels (" + std::to_string(g.c) +
                   ") and filters (" + std::to_string(filters_) + ")");
    }
    const AxisGeometry ah = DilatedAxis(g.h, g.kh, g.sh, g.dh, spec_.padding, spec_.causal);
    const AxisGeometry aw = DilatedAxis(g.w, g.kw, g.sw, g.dw, spec_.padding, false);
    if (ah.out <= 0 || aw.out <= 0) return Error("the kernel does not fit input " + ShapeString(in));
    g.oh = ah.out, g.ow = aw.out, g.pt = ah.pad_before, g.pl = aw.pad_before;
    in_shape_ = in;
    out_shape_ = s_.one_d ? Shape{g.oh, filters_} : Shape{g.oh, g.ow, filters_};
    if (s_.depthwise) {
      kernel_shape_ = {g.kh, g.kw, g.c, spec_.depth_multiplier};
    } else {
      kernel_shape_ = s_.one_d ? Shape{g.kh, g.cpg(), filters_} : Shape{g.kh, g.kw, g.cpg(), filters_};
    }
    return out_shape_;
  }

  std::vector<VariableSpec> Variables() const override {
    std::vector<VariableSpec> v{Weight(s_.kernel_name, kernel_shape_, s_.kernel_init, s_.kernel_reg, s_.kernel_con)};
    if (s_.use_bias) v.push_back(Weight(s_.bias_name, {filters_}, s_.bias_init, s_.bias_reg, s_.bias_con));
    return v;
  }

  StatusOr<Tensor> Forward(std::span<const Tensor> params, const Tensor& x, bool) override {
    RETURN_IF_ERROR(CheckInput(x));
    const int64_t rows = batch_ * g_.oh * g_.ow, k = g_.taps(), fpg = filters_ / g_.groups;
    patches_ = Tensor::Zeros(DType::kFloat32, {g_.groups, rows, k});
    Tensor y = Tensor::Zeros(DType::kFloat32, WithBatch(batch_, out_shape_));
    Eigen::Map<RowMatrix> Y(y.data<float>(), rows, filters_);
    for (int64_t grp = 0; grp < g_.groups; ++grp) {
      float* p = patches_.data<float>() + grp * rows * k;
      g_.Im2Col(x.data<float>(), batch_, grp, p);
      // The group's filters: a block of columns of the kernel and the output.
      Gemm(false, false, rows, fpg, k, p, k, params[0].data<float>() + grp * fpg, filters_, 0.f,
           y.data<float>() + grp * fpg, filters_);
    }
    if (s_.use_bias) Y.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(params[1].data<float>(), filters_);
    z_ = ActivationNeedsInput(s_.activation) ? y.Clone() : Tensor();
    ApplyActivation(s_.activation, y);
    y_ = y;
    return y;
  }

  StatusOr<Tensor> Backward(std::span<const Tensor> params, Tensor dy, bool need_input_grad,
                            std::span<Gradient> grads) override {
    RETURN_IF_ERROR(CheckGradient(dy, out_shape_));
    ActivationBackward(s_.activation, z_, y_, dy);
    const int64_t rows = batch_ * g_.oh * g_.ow, k = g_.taps(), fpg = filters_ / g_.groups;
    Eigen::Map<const RowMatrix> D(dy.data<float>(), rows, filters_);
    const float* kernel = params[0].data<float>();
    Tensor dk = Tensor::Zeros(DType::kFloat32, kernel_shape_);
    Tensor dx = need_input_grad ? Tensor::Zeros(DType::kFloat32, WithBatch(batch_, in_shape_)) : Tensor();
    for (int64_t grp = 0; grp < g_.groups; ++grp) {
      float* p = patches_.data<float>() + grp * rows * k;
      const float* d = dy.data<float>() + grp * fpg;
      Gemm(true, false, k, fpg, rows, p, k, d, filters_, 0.f, dk.data<float>() + grp * fpg, filters_);
      if (!need_input_grad) continue;
      // The patches are not needed any more: their buffer takes dL/dpatches.
      Gemm(false, true, rows, k, fpg, d, filters_, kernel + grp * fpg, filters_, 0.f, p, k);
      g_.Col2Im(p, batch_, grp, dx.data<float>());
    }
    grads[0] = Gradient{false, dk, {}, {}};
    if (s_.use_bias) {
      Tensor db = Tensor::Zeros(DType::kFloat32, {filters_});
      Eigen::Map<Eigen::RowVectorXf>(db.data<float>(), filters_) = D.colwise().sum();
      grads[1] = Gradient{false, db, {}, {}};
    }
    patches_ = Tensor();
    return dx;
  }

 private:
  ConvSetup s_;
  Geometry2 g_;
  int64_t filters_ = 0;
  Shape out_shape_, kernel_shape_;
  Tensor patches_;  // [groups, rows, taps]
  Tensor y_, z_;    // output; pre-activation when the activation's gradient needs it
};

ConvSetup KernelSetup(const LayerSpec& spec) {
  ConvSetup s;
  s.filters = spec.filters;
  s.use_bias = spec.use_bias;
  s.activation = spec.activation;
  s.kernel_name = spec.name + "/kernel";
  s.bias_name = spec.name + "/bias";
  s.kernel_init = spec.kernel_initializer, s.bias_init = spec.bias_initializer;
  s.kernel_reg = spec.kernel_regularizer, s.bias_reg = spec.bias_regularizer;
  s.kernel_con = spec.kernel_constraint, s.bias_con = spec.bias_constraint;
  return s;
}

ConvSetup DepthwiseSetup(const LayerSpec& spec) {
  ConvSetup s = KernelSetup(spec);
  s.depthwise = true;
  s.kernel_name = spec.name + "/depthwise_kernel";
  s.kernel_init = spec.depthwise_initializer;
  s.kernel_reg = spec.depthwise_regularizer;
  s.kernel_con = spec.depthwise_constraint;
  return s;
}

// A depthwise Conv (no bias, linear) then a 1x1 Conv with the bias and
// activation; variables depthwise_kernel, pointwise_kernel, bias.
class SeparableConv2D final : public HostLayer {
 public:
  explicit SeparableConv2D(const LayerSpec& spec) : HostLayer(spec) {
    ConvSetup d = DepthwiseSetup(spec);
    d.use_bias = false;
    d.activation = Activation::kLinear;
    depthwise_ = std::make_unique<Conv>(spec, d);
    LayerSpec p = spec;
    p.kernel_size = {1, 1}, p.strides = {1, 1}, p.dilation_rate = {1, 1}, p.padding = Padding::kValid;
    p.groups = 1;
    ConvSetup ps = KernelSetup(spec);
    ps.kernel_name = spec.name + "/pointwise_kernel";
    ps.kernel_init = spec.pointwise_initializer;
    ps.kernel_reg = spec.pointwise_regularizer;
    ps.kernel_con = spec.pointwise_constraint;
    pointwise_ = std::make_unique<Conv>(p, ps);
  }

  StatusOr<Shape> Build(const Shape& in, DType dtype) override {
    ASSIGN_OR_RETURN(Shape mid, depthwise_->Build(in, dtype));
    return pointwise_->Build(mid, dtype);
  }
  std::vector<VariableSpec> Variables() const override {
    std::vector<VariableSpec> v = depthwise_->Variables();
    for (VariableSpec& p : pointwise_->Variables()) v.push_back(std::move(p));
    return v;
  }
  StatusOr<Tensor> Forward(std::span<const Tensor> params, const Tensor& x, bool training) override {
    ASSIGN_OR_RETURN(Tensor mid, depthwise_->Forward(params.first(1), x, training));
    return pointwise_->Forward(params.subspan(1), mid, training);
  }
  StatusOr<Tensor> Backward(std::span<const Tensor> params, Tensor dy, bool need_input_grad,
                            std::span<Gradient> grads) override {
    ASSIGN_OR_RETURN(Tensor dmid, pointwise_->Backward(params.subspan(1), std::move(dy), true, grads.subspan(1)));
    return depthwise_->Backward(params.first(1), std::move(dmid), need_input_grad, grads.first(1));
  }

 private:
  std::unique_ptr<Conv> depthwise_, pointwise_;
};

class Conv2DTranspose final : public HostLayer {
 public:
  using HostLayer::HostLayer;

  StatusOr<Shape> Build(const Shape& in, DType dtype) override {
    if (dtype != DType::kFloat32) return Error("expects float32 input, got " + std::string(DTypeName(dtype)));
    if (in.size() != 3)
      return Error("expects input [height, width, channels] per example (NHWC), got " + ShapeString(in));
    if (spec_.filters <= 0) return Error("filters must be positive");
    // The convolution this layer is the input gradient of maps the output
    // [oh, ow, filters] back to the input [h, w, c].
    Geometry2& g = g_;
    g.c = spec_.filters;
    g.kh = spec_.kernel_size[0], g.kw = spec_.kernel_size[1];
    g.sh = spec_.strides[0], g.sw = spec_.strides[1];
    g.dh = spec_.dilation_rate[0], g.dw = spec_.dilation_rate[1];
    if (g.kh <= 0 || g.kw <= 0 || g.sh <= 0 || g.sw <= 0 || g.dh <= 0 || g.dw <= 0) {
      return Error("kernel_size, strides and dilation_rate must be positive");
    }
    auto out_len = [&](int64_t n, int64_t k, int64_t s, int64_t d) {
      const int64_t window = (k - 1) * d + 1;
      return spec_.padding == Padding::kSame ? n * s : n * s + std::max<int64_t>(window - s, 0);
    };
    g.h = out_len(in[0], g.kh, g.sh, g.dh), g.w = out_len(in[1], g.kw, g.sw, g.dw);
    const AxisGeometry ah = DilatedAxis(g.h, g.kh, g.sh, g.dh, spec_.padding, false);
    const AxisGeometry aw = DilatedAxis(g.w, g.kw, g.sw, g.dw, spec_.padding, false);
    if (ah.out != in[0] || aw.out != in[1]) return Error("cannot invert the convolution for input " + ShapeString(in));
    g.oh = in[0], g.ow = in[1], g.pt = ah.pad_before, g.pl = aw.pad_before;
    cin_ = in[2];
    in_shape_ = in;
    return Shape{g.h, g.w, spec_.filters};
  }

  std::vector<VariableSpec> Variables() const override {
    std::vector<VariableSpec> v{Weight(spec_.name + "/kernel", {g_.kh, g_.kw, spec_.filters, cin_},
                                       spec_.kernel_initializer, spec_.kernel_regularizer, spec_.kernel_constraint)};
    if (spec_.use_bias) {
      v.push_back(Weight(spec_.name + "/bias", {spec_.filters}, spec_.bias_initializer, spec_.bias_regularizer,
                         spec_.bias_constraint));
    }
    return v;
  }

  StatusOr<Tensor> Forward(std::span<const Tensor> params, const Tensor& x, bool) override {
    RETURN_IF_ERROR(CheckInput(x));
    x_ = x;
    const int64_t rows = batch_ * g_.oh * g_.ow, k = g_.taps();
    Tensor cols = Tensor::Zeros(DType::kFloat32, {rows, k});
    Gemm(false, true, rows, k, cin_, x.data<float>(), cin_, params[0].data<float>(), cin_, 0.f, cols.data<float>(), k);
    Tensor y = Tensor::Zeros(DType::kFloat32, {batch_, g_.h, g_.w, spec_.filters});
    g_.Col2Im(cols.data<float>(), batch_, 0, y.data<float>());
    if (spec_.use_bias) {
      Eigen::Map<RowMatrix>(y.data<float>(), batch_ * g_.h * g_.w, spec_.filters).rowwise() +=
          Eigen::Map<const Eigen::RowVectorXf>(params[1].data<float>(), spec_.filters);
    }
    z_ = ActivationNeedsInput(spec_.activation) ? y.Clone() : Tensor();
    ApplyActivation(spec_.activation, y);
    y_ = y;
    return y;
  }

  StatusOr<Tensor> Backward(std::span<const Tensor> params, Tensor dy, bool need_input_grad,
                            std::span<Gradient> grads) override {
    RETURN_IF_ERROR(CheckGradient(dy, {g_.h, g_.w, spec_.filters}));
    ActivationBackward(spec_.activation, z_, y_, dy);
    const int64_t rows = batch_ * g_.oh * g_.ow, k = g_.taps();
    Tensor cols = Tensor::Zeros(DType::kFloat32, {rows, k});
    g_.Im2Col(dy.data<float>(), batch_, 0, cols.data<float>());
    Tensor dk = Tensor::Zeros(DType::kFloat32, {g_.kh, g_.kw, spec_.filters, cin_});
    Gemm(true, false, k, cin_, rows, cols.data<float>(), k, x_.data<float>(), cin_, 0.f, dk.data<float>(), cin_);
    grads[0] = Gradient{false, dk, {}, {}};
    if (spec_.use_bias) {
      Tensor db = Tensor::Zeros(DType::kFloat32, {spec_.filters});
      Eigen::Map<Eigen::RowVectorXf>(db.data<float>(), spec_.filters) =
          Eigen::Map<const RowMatrix>(dy.data<float>(), batch_ * g_.h * g_.w, spec_.filters).colwise().sum();
      grads[1] = Gradient{false, db, {}, {}};
    }
    if (!need_input_grad) return Tensor();
    Tensor dx = Tensor::Zeros(DType::kFloat32, x_.shape());
    Gemm(false, false, rows, cin_, k, cols.data<float>(), k, params[0].data<float>(), cin_, 0.f, dx.data<float>(),
         cin_);
    return dx;
  }

 private:
  Geometry2 g_;  // of the convolution from the output back to the input
  int64_t cin_ = 0;
  Tensor x_, y_, z_;
};

}  // namespace

std::unique_ptr<Layer> MakeConvMore(const LayerSpec& spec) {
  switch (spec.type) {
    case LayerType::kDepthwiseConv2D: return std::make_unique<Conv>(spec, DepthwiseSetup(spec));
    case LayerType::kSeparableConv2D: return std::make_unique<SeparableConv2D>(spec);
    case LayerType::kConv2DTranspose: return std::make_unique<Conv2DTranspose>(spec);
    default: {
      ConvSetup s = KernelSetup(spec);
      s.one_d = spec.type == LayerType::kConv1D;
      return std::make_unique<Conv>(spec, s);
    }
  }
}

}  // namespace tfjob::model::internal

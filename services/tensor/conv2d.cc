#include "services/tensor/conv2d.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <unordered_map>

#include <vector>

#include "services/tensor/conv2d_small.h"
#include "services/tensor/conv2d_winograd.h"
#include "services/tensor/gemm.h"
#include "services/tensor/precision.h"
#include "services/tensor/threads.h"

#ifdef TFJOB_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace tfjob {

namespace {
std::atomic<bool> g_direct_only{false};
}  // namespace

void UseDirectConvolutionsOnly(bool only) { g_direct_only.store(only, std::memory_order_relaxed); }

bool DirectConv2D::WinogradApplies(const Conv2DGeometry& g) {
  // Measured against the direct kernels, the activations' reorders included
  // (docs/performance.md): 1.2-1.8x from 32 channels and filters up once
  // there are enough products per image (C32 -> 32 at 14x14, C64 at 7x7),
  // about even below that, and slower with 16 or 24 channels (0.3-0.9x)
  // but at 28x28, where the transforms outweigh the products they save.
  constexpr int64_t kMinProducts = 96 * 1024;  // channels x filters x output pixels, per image
  return Available() && !g_direct_only.load(std::memory_order_relaxed) && g.kernel_h == 3 && g.kernel_w == 3 &&
         g.stride_h == 1 && g.stride_w == 1 && g.channels >= 32 && g.filters >= 32 &&
         g.channels * g.filters * g.out_h * g.out_w >= kMinProducts && g.pad_top <= 1 && g.pad_left <= 1 &&
         g.out_h + 2 - g.height - g.pad_top <= 1 && g.out_w + 2 - g.width - g.pad_left <= 1;
}

bool DirectConv2D::OwnWinogradApplies(const Conv2DGeometry& g) {
  return Available() && !g_direct_only.load(std::memory_order_relaxed) && !WinogradApplies(g) && winograd::Applies(g);
}

#ifdef TFJOB_HAVE_DNNL

namespace {

using Tag = dnnl::memory::format_tag;
using Dims = dnnl::memory::dims;
constexpr auto kF32 = dnnl::memory::data_type::f32;
constexpr auto kBf16 = dnnl::memory::data_type::bf16;

Status FromDnnl(const dnnl::error& e, const char* what) {
  const Code code = e.status == dnnl_unimplemented ? Code::kUnimplemented : Code::kInternal;
  return Status(code, std::string("oneDNN ") + what + ": " + e.what());
}

}  // namespace

// The primitives of one geometry. Kernels in oneDNN's blocked layouts
// ("any": the fastest it has for the shape) are reordered from and to the
// layer's HWIO buffers at each call: a kernel is small beside the
// activations.
//
// Winograd (WinogradApplies): the primitives take their activations in
// oneDNN's blocked layout (nChw16c), which the layer's NHWC buffers are
// reordered into and out of at each call; the forward's blocked input is
// kept for the weight gradient, and a dL/dy reordered for one backward
// call serves the other.
//
// In bfloat16 (the thread's ComputePrecision, precision.h) the input, the
// kernel and dL/dy enter the primitives as bfloat16 (converted here); the
// output and the gradients leave as float32, accumulated in float32.
struct DirectConv2D::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  Conv2DGeometry geometry;
  bool built = false, relu = false, bias = false, bf16 = false, wino = false;
  // src, dst: the layer's NHWC float32 activations. src_lp, dst_lp: the
  // input and dL/dy as the primitives read them (the same, bf16 in
  // bfloat16, "any" for Winograd).
  dnnl::memory::desc src, dst, hwio, bias_md, src_lp, dst_lp;
  std::vector<uint16_t> x_bf16, dy_bf16;
  dnnl::convolution_forward::primitive_desc fwd_pd;
  dnnl::convolution_forward fwd;
  dnnl::memory fwd_weights;  // in fwd_pd's layout
  bool bwd_built = false;
  dnnl::convolution_backward_weights::primitive_desc bww_pd;
  dnnl::convolution_backward_weights bww;
  dnnl::memory bww_diff_weights;
  dnnl::convolution_backward_data::primitive_desc bwd_pd;
  dnnl::convolution_backward_data bwd;
  dnnl::memory bwd_weights;
  // Winograd's blocked activations, and whose values x_blk and dy_blk hold
  // (the caller's buffers; reset by each forward, since a buffer's next
  // values come with the next step).
  dnnl::memory x_blk, y_blk, dy_blk, dx_blk;
  const float* x_blk_of = nullptr;
  const float* dy_blk_of = nullptr;
  // The last forward ran small_conv's kernels (conv2d_small.h) for this
  // geometry, or with `own_wino` winograd's (conv2d_winograd.h); their
  // padded copies, transforms and partial sums live in `scratch`.
  bool small = false, own_wino = false;
  std::vector<float> scratch;

  dnnl::algorithm Algorithm() const {
    return wino ? dnnl::algorithm::convolution_winograd : dnnl::algorithm::convolution_direct;
  }
  Dims Strides() const { return {geometry.stride_h, geometry.stride_w}; }
  Dims PadLeft() const { return {geometry.pad_top, geometry.pad_left}; }
  // oneDNN's bottom/right padding: what the output size needs past the
  // input, never negative ("valid" with a stride that leaves input over).
  Dims PadRight() const {
    const Conv2DGeometry& g = geometry;
    return {std::max<int64_t>(0, (g.out_h - 1) * g.stride_h + g.kernel_h - g.height - g.pad_top),
            std::max<int64_t>(0, (g.out_w - 1) * g.stride_w + g.kernel_w - g.width - g.pad_left)};
  }
  dnnl::memory::desc WeightsAny(bool low = true) const {
    return dnnl::memory::desc({geometry.filters, geometry.channels, geometry.kernel_h, geometry.kernel_w},
                              bf16 && low ? kBf16 : kF32, Tag::any);
  }
  dnnl::memory::desc Activations(int64_t channels, int64_t h, int64_t w, dnnl::memory::data_type type) const {
    return dnnl::memory::desc({geometry.batch, channels, h, w}, type, wino ? Tag::any : Tag::nhwc);
  }

  // Winograd where it applies and oneDNN builds it here; the direct
  // kernels otherwise.
  void Build(const Conv2DGeometry& g, bool with_bias, bool with_relu, bool in_bf16) {
    geometry = g;
    relu = with_relu;
    bias = with_bias;
    bf16 = in_bf16;
    built = bwd_built = false;
    x_blk_of = dy_blk_of = nullptr;
    wino = !in_bf16 && WinogradApplies(g);
    if (wino) {
      try {
        BuildForward();
        x_blk = dnnl::memory(fwd_pd.src_desc(), engine);
        y_blk = dnnl::memory(fwd_pd.dst_desc(), engine);
        return;
      } catch (const dnnl::error& e) {
        if (e.status != dnnl_unimplemented) throw;
        wino = false;  // this CPU has no Winograd kernel (it needs AVX-512)
      }
    }
    BuildForward();
  }

  void BuildForward() {
    const Conv2DGeometry& g = geometry;
    src = dnnl::memory::desc({g.batch, g.channels, g.height, g.width}, kF32, Tag::nhwc);
    dst = dnnl::memory::desc({g.batch, g.filters, g.out_h, g.out_w}, kF32, Tag::nhwc);
    src_lp = Activations(g.channels, g.height, g.width, bf16 ? kBf16 : kF32);
    dst_lp = Activations(g.filters, g.out_h, g.out_w, bf16 ? kBf16 : kF32);
    hwio = dnnl::memory::desc({g.filters, g.channels, g.kernel_h, g.kernel_w}, kF32, Tag::hwio);
    bias_md = dnnl::memory::desc({g.filters}, kF32, Tag::x);
    const dnnl::memory::desc out = Activations(g.filters, g.out_h, g.out_w, kF32);
    const dnnl::convolution_forward::desc d =
        bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, Algorithm(), src_lp, WeightsAny(),
                                               bias_md, out, Strides(), PadLeft(), PadRight())
             : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, Algorithm(), src_lp, WeightsAny(),
                                               out, Strides(), PadLeft(), PadRight());
    dnnl::primitive_attr attr;
    if (relu) {
      dnnl::post_ops ops;
      ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
      attr.set_post_ops(ops);
    }
    fwd_pd = dnnl::convolution_forward::primitive_desc(d, attr, engine);
    fwd = dnnl::convolution_forward(fwd_pd);
    fwd_weights = dnnl::memory(fwd_pd.weights_desc(), engine);
    built = true;
  }

  void BuildBackward() {
    const dnnl::convolution_backward_weights::desc w =
        bias ? dnnl::convolution_backward_weights::desc(Algorithm(), src_lp, WeightsAny(false), bias_md, dst_lp,
                                                        Strides(), PadLeft(), PadRight())
             : dnnl::convolution_backward_weights::desc(Algorithm(), src_lp, WeightsAny(false), dst_lp, Strides(),
                                                        PadLeft(), PadRight());
    bww_pd = dnnl::convolution_backward_weights::primitive_desc(w, engine, fwd_pd);
    bww = dnnl::convolution_backward_weights(bww_pd);
    bww_diff_weights = dnnl::memory(bww_pd.diff_weights_desc(), engine);
    const dnnl::memory::desc diff_src = Activations(geometry.channels, geometry.height, geometry.width, kF32);
    const dnnl::convolution_backward_data::desc d(Algorithm(), diff_src, WeightsAny(), dst_lp, Strides(), PadLeft(),
                                                  PadRight());
    bwd_pd = dnnl::convolution_backward_data::primitive_desc(d, engine, fwd_pd);
    bwd = dnnl::convolution_backward_data(bwd_pd);
    bwd_weights = dnnl::memory(bwd_pd.weights_desc(), engine);
    if (wino) {
      dy_blk = dnnl::memory(bwd_pd.diff_dst_desc(), engine);
      dx_blk = dnnl::memory(bwd_pd.diff_src_desc(), engine);
    }
    bwd_built = true;
  }

  // `x` (float32, `desc`'s elements) as the primitives read it: itself, or
  // converted into `buf` in bfloat16.
  dnnl::memory LowPrecision(const dnnl::memory::desc& desc, const dnnl::memory::desc& lp, const float* x,
                            std::vector<uint16_t>& buf) {
    if (!bf16) return dnnl::memory(desc, engine, const_cast<float*>(x));
    int64_t n = 1;
    for (int64_t d : desc.dims()) n *= d;
    buf.resize(static_cast<size_t>(n));
    ToBfloat16(x, buf.data(), n);
    return dnnl::memory(lp, engine, buf.data());
  }

  // The NHWC buffer `user` (of `desc`) in `into`'s blocked layout, unless
  // `into` already holds it (`of` names whose values it holds).
  dnnl::memory Blocked(const dnnl::memory::desc& desc, const float* user, dnnl::memory& into, const float*& of) {
    if (of != user) {
      dnnl::memory u(desc, engine, const_cast<float*>(user));
      dnnl::reorder(u, into).execute(stream, u, into);
      of = user;
    }
    return into;
  }

  // `blocked` into the NHWC buffer `user` of `desc`.
  void Unblock(dnnl::memory& blocked, const dnnl::memory::desc& desc, float* user) {
    dnnl::memory u(desc, engine, user);
    dnnl::reorder(blocked, u).execute(stream, blocked, u);
  }

  // The HWIO buffer `kernel` into `into`'s layout.
  void ReorderIn(const float* kernel, dnnl::memory& into) {
    dnnl::memory user(hwio, engine, const_cast<float*>(kernel));
    dnnl::reorder(user, into).execute(stream, user, into);
  }
};

DirectConv2D::DirectConv2D() = default;
DirectConv2D::~DirectConv2D() = default;

bool DirectConv2D::Available() { return UseOneDnn(); }

std::string DirectConv2D::ForwardKernel() const {
  if (impl_ && impl_->small && impl_->own_wino) {
    const int m = winograd::Tile(impl_->geometry);
    return "winograd_" + std::to_string(m) + "x" + std::to_string(m) + "_3x3:own";
  }
  if (!impl_ || impl_->small || !impl_->built) return "";
  return impl_->fwd_pd.impl_info_str();
}

Status DirectConv2D::Forward(const Conv2DGeometry& g, const float* x, const float* kernel, const float* bias, bool relu,
                             float* y) {
  if (!Available()) return Unimplemented("this build computes convolutions without oneDNN");
  try {
    UseComputeThreadsHere();
    if (!impl_) impl_ = std::make_unique<Impl>();
    Impl& m = *impl_;
    const bool bf16 = ComputePrecision() == Precision::kBfloat16;
    const bool own_wino = !bf16 && OwnWinogradApplies(g);
    if (own_wino || small_conv::Applies(g)) {
      // The oneDNN primitives are built only if the data gradient is asked.
      if (!(m.geometry == g) || m.relu != relu || m.bias != (bias != nullptr) || m.bf16 != bf16) m.built = false;
      m.geometry = g, m.relu = relu, m.bias = bias != nullptr, m.bf16 = bf16, m.small = true, m.own_wino = own_wino;
      if (own_wino) {
        winograd::Forward(g, x, kernel, bias, relu, y, m.scratch);
      } else {
        small_conv::Forward(g, x, kernel, bias, relu, bf16, y, m.scratch);
      }
      return Status::Ok();
    }
    m.small = m.own_wino = false;
    if (!m.built || !(m.geometry == g) || m.relu != relu || m.bias != (bias != nullptr) || m.bf16 != bf16) {
      m.Build(g, bias != nullptr, relu, bf16);
    }
    m.ReorderIn(kernel, m.fwd_weights);
    m.x_blk_of = m.dy_blk_of = nullptr;
    dnnl::memory src = m.wino ? m.Blocked(m.src, x, m.x_blk, m.x_blk_of) : m.LowPrecision(m.src, m.src_lp, x, m.x_bf16);
    dnnl::memory dst = m.wino ? m.y_blk : dnnl::memory(m.dst, m.engine, y);
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, m.fwd_weights}, {DNNL_ARG_DST, dst}};
    if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(m.bias_md, m.engine, const_cast<float*>(bias)));
    m.fwd.execute(m.stream, args);
    if (m.wino) m.Unblock(m.y_blk, m.dst, y);
    m.stream.wait();
    return Status::Ok();
  } catch (const dnnl::error& e) {
    impl_.reset();
    return FromDnnl(e, "convolution forward");
  }
}

bool DirectConv2D::CanPool(const Conv2DGeometry& g, int64_t pool_h, int64_t pool_w) {
  return Available() && small_conv::AppliesPooled(g, pool_h, pool_w);
}

Status DirectConv2D::ForwardMaxPool(const Conv2DGeometry& g, const float* x, const float* kernel, const float* bias,
                                    bool relu, int64_t pool_h, int64_t pool_w, float* pooled, uint8_t* winners) {
  const Precision p = ComputePrecision();
  if (!CanPool(g, pool_h, pool_w) || p == Precision::kFloat16) {
    return Unimplemented("no fused convolution and max pooling for this geometry or precision");
  }
  UseComputeThreadsHere();
  if (!impl_) impl_ = std::make_unique<Impl>();
  Impl& m = *impl_;
  const bool bf16 = p == Precision::kBfloat16;
  if (!(m.geometry == g) || m.relu != relu || m.bias != (bias != nullptr) || m.bf16 != bf16) m.built = false;
  m.geometry = g, m.relu = relu, m.bias = bias != nullptr, m.bf16 = bf16, m.small = true, m.own_wino = false;
  small_conv::ForwardMaxPool(g, x, kernel, bias, relu, bf16, pool_h, pool_w, pooled, winners, m.scratch);
  return Status::Ok();
}

void DirectConv2D::MaxPoolGradient(const Conv2DGeometry& g, int64_t pool_h, int64_t pool_w, const uint8_t* winners,
                                   const float* dpooled, float* dy) {
  small_conv::MaxPoolGradient(g, pool_h, pool_w, winners, dpooled, dy);
}

Status DirectConv2D::BackwardWeightsPooled(const Conv2DGeometry& g, int64_t pool_h, int64_t pool_w, const float* x,
                                           const uint8_t* winners, const float* dpooled, float* dkernel, float* dbias) {
  if (!impl_ || !impl_->small || !(impl_->geometry == g) || impl_->bias != (dbias != nullptr) ||
      !CanPool(g, pool_h, pool_w)) {
    return FailedPrecondition("pooled convolution backward without its pooled forward");
  }
  if (!small_conv::AppliesPooledBackward(g, pool_h, pool_w)) {
    return Unimplemented("no pooled weight gradient for " + std::to_string(g.filters) + " filters");
  }
  UseComputeThreadsHere();
  small_conv::BackwardWeightsPooled(g, pool_h, pool_w, x, winners, dpooled, impl_->bf16, dkernel, dbias,
                                    impl_->scratch);
  return Status::Ok();
}

Status DirectConv2D::BackwardWeights(const Conv2DGeometry& g, const float* x, const float* dy, float* dkernel,
                                     float* dbias) {
  if (!impl_ || !(impl_->built || impl_->small) || !(impl_->geometry == g) || impl_->bias != (dbias != nullptr)) {
    return FailedPrecondition("convolution backward without a forward of the same geometry");
  }
  try {
    UseComputeThreadsHere();
    Impl& m = *impl_;
    if (m.own_wino) {
      winograd::BackwardWeights(g, x, dy, dkernel, dbias, m.scratch);
      return Status::Ok();
    }
    if (m.small) {
      small_conv::BackwardWeights(g, x, dy, m.bf16, dkernel, dbias, m.scratch);
      return Status::Ok();
    }
    if (!m.bwd_built) m.BuildBackward();
    dnnl::memory src, diff_dst;
    if (m.wino) {
      // The primitives agree on the blocked layouts here; a oneDNN that
      // did not would get them in its own (reordered afresh each call).
      dnnl::memory x_own, dy_own;
      const float* none = nullptr;
      src = m.bww_pd.src_desc() == m.x_blk.get_desc()
                ? m.Blocked(m.src, x, m.x_blk, m.x_blk_of)
                : m.Blocked(m.src, x, x_own = dnnl::memory(m.bww_pd.src_desc(), m.engine), none);
      none = nullptr;
      diff_dst = m.bww_pd.diff_dst_desc() == m.dy_blk.get_desc()
                     ? m.Blocked(m.dst, dy, m.dy_blk, m.dy_blk_of)
                     : m.Blocked(m.dst, dy, dy_own = dnnl::memory(m.bww_pd.diff_dst_desc(), m.engine), none);
    } else {
      src = m.LowPrecision(m.src, m.src_lp, x, m.x_bf16);
      diff_dst = m.LowPrecision(m.dst, m.dst_lp, dy, m.dy_bf16);
    }
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_DIFF_WEIGHTS, m.bww_diff_weights}};
    if (dbias) args.emplace(DNNL_ARG_DIFF_BIAS, dnnl::memory(m.bias_md, m.engine, dbias));
    m.bww.execute(m.stream, args);
    dnnl::memory user(m.hwio, m.engine, dkernel);
    dnnl::reorder(m.bww_diff_weights, user).execute(m.stream, m.bww_diff_weights, user);
    m.stream.wait();
    return Status::Ok();
  } catch (const dnnl::error& e) {
    impl_.reset();
    return FromDnnl(e, "convolution backward (weights)");
  }
}

Status DirectConv2D::BackwardData(const Conv2DGeometry& g, const float* dy, const float* kernel, float* dx) {
  if (!impl_ || !(impl_->built || impl_->small) || !(impl_->geometry == g)) {
    return FailedPrecondition("convolution backward without a forward of the same geometry");
  }
  try {
    UseComputeThreadsHere();
    Impl& m = *impl_;
    if (m.own_wino) {
      winograd::BackwardData(g, dy, kernel, dx, m.scratch);
      return Status::Ok();
    }
    if (!m.built) m.Build(g, m.bias, m.relu, m.bf16);  // the forward ran small_conv's kernels
    if (!m.bwd_built) m.BuildBackward();
    m.ReorderIn(kernel, m.bwd_weights);
    dnnl::memory diff_dst =
        m.wino ? m.Blocked(m.dst, dy, m.dy_blk, m.dy_blk_of) : m.LowPrecision(m.dst, m.dst_lp, dy, m.dy_bf16);
    dnnl::memory diff_src = m.wino ? m.dx_blk : dnnl::memory(m.src, m.engine, dx);
    m.bwd.execute(m.stream,
                  {{DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_WEIGHTS, m.bwd_weights}, {DNNL_ARG_DIFF_SRC, diff_src}});
    if (m.wino) m.Unblock(m.dx_blk, m.src, dx);
    m.stream.wait();
    return Status::Ok();
  } catch (const dnnl::error& e) {
    impl_.reset();
    return FromDnnl(e, "convolution backward (data)");
  }
}

#else  // no oneDNN: the layer computes its own way

struct DirectConv2D::Impl {};
DirectConv2D::DirectConv2D() = default;
DirectConv2D::~DirectConv2D() = default;
bool DirectConv2D::Available() { return false; }
std::string DirectConv2D::ForwardKernel() const { return ""; }
Status DirectConv2D::Forward(const Conv2DGeometry&, const float*, const float*, const float*, bool, float*) {
  return Unimplemented("this build has no oneDNN");
}
bool DirectConv2D::CanPool(const Conv2DGeometry&, int64_t, int64_t) { return false; }
Status DirectConv2D::ForwardMaxPool(const Conv2DGeometry&, const float*, const float*, const float*, bool, int64_t,
                                    int64_t, float*, uint8_t*) {
  return Unimplemented("this build has no oneDNN");
}
void DirectConv2D::MaxPoolGradient(const Conv2DGeometry& g, int64_t pool_h, int64_t pool_w, const uint8_t* winners,
                                   const float* dpooled, float* dy) {
  small_conv::MaxPoolGradient(g, pool_h, pool_w, winners, dpooled, dy);
}
Status DirectConv2D::BackwardWeightsPooled(const Conv2DGeometry&, int64_t, int64_t, const float*, const uint8_t*,
                                           const float*, float*, float*) {
  return Unimplemented("this build has no oneDNN");
}
Status DirectConv2D::BackwardWeights(const Conv2DGeometry&, const float*, const float*, float*, float*) {
  return Unimplemented("this build has no oneDNN");
}
Status DirectConv2D::BackwardData(const Conv2DGeometry&, const float*, const float*, float*) {
  return Unimplemented("this build has no oneDNN");
}

#endif

}  // namespace tfjob

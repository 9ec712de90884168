// MaxPooling2D, AveragePooling2D and GlobalAveragePooling2D on NHWC tensors,
// as TensorFlow computes them: "same" padding leaves padded positions out of
// both the maximum and the average (the divisor counts real inputs only).
// Device tensors go through their backend's pooling kernels (one thread per
// output in the forward pass, one per input in the backward pass, summing
// in the host's order) and its axis reduction for the global average.
#include <cstdint>
#include <vector>

#include "services/model/layer_factories.h"
#include "services/model/layer_shapes.h"
#include "services/tensor/backend.h"
#include "services/tensor/eigen.h"
#include "services/tensor/threads.h"

namespace tfjob::model::internal {
namespace {

class Pooling2D final : public Layer {
 public:
  using Layer::Layer;

  StatusOr<Shape> Build(const Shape& in, DType dtype) override {
    if (dtype != DType::kFloat32) return Error("expects float32 input, got " + std::string(DTypeName(dtype)));
    if (in.size() != 3)
      return Error("expects input [height, width, channels] per example (NHWC), got " + ShapeString(in));
    in_shape_ = in;
    h_ = in[0], w_ = in[1], c_ = in[2];
    if (spec_.type == LayerType::kGlobalAveragePooling2D) {
      return spec_.keepdims ? Shape{1, 1, c_} : Shape{c_};
    }
    for (int a = 0; a < 2; ++a) {
      if (spec_.kernel_size[a] <= 0) return Error("pool_size must be positive");
      if (spec_.strides[a] <= 0) return Error("strides must be positive");
    }
    ph_ = spec_.kernel_size[0], pw_ = spec_.kernel_size[1];
    const AxisGeometry gh = Geometry(h_, ph_, spec_.strides[0], spec_.padding);
    const AxisGeometry gw = Geometry(w_, pw_, spec_.strides[1], spec_.padding);
    if (gh.out <= 0 || gw.out <= 0) {
      return Error("pool " + std::to_string(ph_) + "x" + std::to_string(pw_) + " does not fit input " +
                   std::to_string(h_) + "x" + std::to_string(w_) + " with padding \"valid\"");
    }
    oh_ = gh.out, ow_ = gw.out, pt_ = gh.pad_before, pl_ = gw.pad_before;
    return Shape{oh_, ow_, c_};
  }

  std::optional<std::array<int64_t, 2>> TiledMaxPool() const override {
    if (spec_.type != LayerType::kMaxPooling2D || !Tiled()) return std::nullopt;
    return std::array<int64_t, 2>{ph_, pw_};
  }

  StatusOr<Tensor> Forward(std::span<const Tensor>, const Tensor& x, bool) override {
    if (!Matches(x, DType::kFloat32, in_shape_)) return Error(Expected(DType::kFloat32, in_shape_, x));
    batch_ = x.dim(0);
    if (!x.on_cpu()) return ForwardOnDevice(x);
    const float* in = x.data<float>();
    if (spec_.type == LayerType::kGlobalAveragePooling2D) {
      Tensor y = Tensor::Zeros(DType::kFloat32, spec_.keepdims ? Shape{batch_, 1, 1, c_} : Shape{batch_, c_});
      Eigen::Map<const RowMatrix> X(in, batch_ * h_ * w_, c_);
      for (int64_t b = 0; b < batch_; ++b) {
        Eigen::Map<Eigen::RowVectorXf>(y.data<float>() + b * c_, c_) =
            X.middleRows(b * h_ * w_, h_ * w_).colwise().mean();
      }
      return y;
    }
    const bool max = spec_.type == LayerType::kMaxPooling2D;
    tiled_ = max && Tiled();
    if (tiled_) return MaxForwardTiled(x);
    // Max writes every output; average sums into zeros.
    ASSIGN_OR_RETURN(Tensor y, max ? Tensor::CreateUninitialized(DType::kFloat32, {batch_, oh_, ow_, c_})
                                   : Tensor::Create(DType::kFloat32, {batch_, oh_, ow_, c_}));
    float* out = y.data<float>();
    if (max) {
      ASSIGN_OR_RETURN(argmax_, Tensor::CreateUninitialized(DType::kInt64, {batch_, oh_, ow_, c_}));
    }
    int64_t* arg = max ? argmax_.data<int64_t>() : nullptr;
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t oy = 0; oy < oh_; ++oy) {
        for (int64_t ox = 0; ox < ow_; ++ox) {
          const Window win = WindowAt(oy, ox);
          float* o = out + ((b * oh_ + oy) * ow_ + ox) * c_;
          if (max) {
            int64_t* a = arg + ((b * oh_ + oy) * ow_ + ox) * c_;
            // The window's first tap, then the others.
            const int64_t first = ((b * h_ + win.y0) * w_ + win.x0) * c_;
            for (int64_t ch = 0; ch < c_; ++ch) {
              o[ch] = in[first + ch];
              a[ch] = first + ch;
            }
            for (int64_t iy = win.y0; iy < win.y1; ++iy) {
              for (int64_t ix = iy == win.y0 ? win.x0 + 1 : win.x0; ix < win.x1; ++ix) {
                const int64_t base = ((b * h_ + iy) * w_ + ix) * c_;
                MaxTap(in + base, base, c_, o, a);
              }
            }
          } else {
            for (int64_t iy = win.y0; iy < win.y1; ++iy) {
              for (int64_t ix = win.x0; ix < win.x1; ++ix) {
                const float* p = in + ((b * h_ + iy) * w_ + ix) * c_;
                for (int64_t ch = 0; ch < c_; ++ch) o[ch] += p[ch];
              }
            }
            const float inv = 1.f / static_cast<float>(win.count());
            for (int64_t ch = 0; ch < c_; ++ch) o[ch] *= inv;
          }
        }
      }
    }
    return y;
  }

  StatusOr<Tensor> Backward(std::span<const Tensor>, Tensor dy, bool need_input_grad, std::span<Gradient>) override {
    if (!need_input_grad) return Tensor();
    if (!dy.on_cpu()) return BackwardOnDevice(dy);
    const float* g = dy.data<float>();
    if (spec_.type == LayerType::kMaxPooling2D && tiled_) {
      if (dy.size() != batch_ * oh_ * ow_ * c_) {
        return Error("gradient shape " + ShapeString(dy.shape()) + " does not match output");
      }
      if (x_.size() != batch_ * h_ * w_ * c_) return Error("backward without its forward pass");
      return MaxBackwardTiled(g);
    }
    Tensor dx = Tensor::Zeros(DType::kFloat32, WithBatch(batch_, in_shape_));
    float* d = dx.data<float>();
    if (spec_.type == LayerType::kGlobalAveragePooling2D) {
      if (dy.size() != batch_ * c_)
        return Error("gradient shape " + ShapeString(dy.shape()) + " does not match output");
      const float inv = 1.f / static_cast<float>(h_ * w_);
      for (int64_t b = 0; b < batch_; ++b) {
        for (int64_t p = 0; p < h_ * w_; ++p) {
          for (int64_t ch = 0; ch < c_; ++ch) d[(b * h_ * w_ + p) * c_ + ch] = g[b * c_ + ch] * inv;
        }
      }
      return dx;
    }
    if (dy.size() != batch_ * oh_ * ow_ * c_) {
      return Error("gradient shape " + ShapeString(dy.shape()) + " does not match output");
    }
    if (spec_.type == LayerType::kMaxPooling2D) {
      const int64_t* a = argmax_.data<int64_t>();
      for (int64_t i = 0; i < dy.size(); ++i) d[a[i]] += g[i];
      return dx;
    }
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t oy = 0; oy < oh_; ++oy) {
        for (int64_t ox = 0; ox < ow_; ++ox) {
          const Window win = WindowAt(oy, ox);
          const float inv = 1.f / static_cast<float>(win.count());
          const float* go = g + ((b * oh_ + oy) * ow_ + ox) * c_;
          for (int64_t iy = win.y0; iy < win.y1; ++iy) {
            for (int64_t ix = win.x0; ix < win.x1; ++ix) {
              float* p = d + ((b * h_ + iy) * w_ + ix) * c_;
              for (int64_t ch = 0; ch < c_; ++ch) p[ch] += go[ch] * inv;
            }
          }
        }
      }
    }
    return dx;
  }

 private:
  // Keras' default max pooling (strides = pool size, no padding): windows
  // tile the input without overlap. The forward pass is then a maximum
  // only (no per-output bookkeeping, no data-dependent branches), and the
  // backward pass finds each window's winner again by comparing its inputs
  // with the output it kept (the first equal tap wins, as in TF), writing
  // every input once instead of zero-filling and scattering.
  // Inputs from which the tiled passes split their rows over the compute
  // threads (threads.h): below it a thread's start costs more than it saves.
  static constexpr int64_t kParallel = int64_t{1} << 16;

  bool Tiled() const {
    return spec_.strides[0] == ph_ && spec_.strides[1] == pw_ && pt_ == 0 && pl_ == 0 && oh_ * ph_ <= h_ &&
           ow_ * pw_ <= w_;
  }

  StatusOr<Tensor> MaxForwardTiled(const Tensor& x) {
    ASSIGN_OR_RETURN(Tensor y, Tensor::CreateUninitialized(DType::kFloat32, {batch_, oh_, ow_, c_}));
    const float* in = x.data<float>();
    float* out = y.data<float>();
    UseComputeThreadsHere();
#pragma omp parallel for num_threads(ComputeThreads()) if (ComputeThreads() > 1 && batch_ * h_ * w_ * c_ >= kParallel)
    for (int64_t r = 0; r < batch_ * oh_; ++r) {
      const int64_t b = r / oh_, oy = r % oh_;
      for (int64_t ox = 0; ox < ow_; ++ox) {
        float* __restrict o = out + (r * ow_ + ox) * c_;
        const float* first = in + ((b * h_ + oy * ph_) * w_ + ox * pw_) * c_;
        for (int64_t ch = 0; ch < c_; ++ch) o[ch] = first[ch];
        for (int64_t ky = 0; ky < ph_; ++ky) {
          for (int64_t kx = ky == 0 ? 1 : 0; kx < pw_; ++kx) {
            const float* __restrict p = first + (ky * w_ + kx) * c_;
            for (int64_t ch = 0; ch < c_; ++ch) o[ch] = p[ch] > o[ch] ? p[ch] : o[ch];
          }
        }
      }
    }
    argmax_ = Tensor();
    x_ = x;
    y_ = y;
    return y;
  }

  StatusOr<Tensor> MaxBackwardTiled(const float* g) {
    // Rows or columns past the last window take no gradient.
    const bool covered = oh_ * ph_ == h_ && ow_ * pw_ == w_;
    ASSIGN_OR_RETURN(Tensor dx, covered ? Tensor::CreateUninitialized(DType::kFloat32, WithBatch(batch_, in_shape_))
                                        : Tensor::Create(DType::kFloat32, WithBatch(batch_, in_shape_)));
    const float* in = x_.data<float>();
    const float* out = y_.data<float>();
    float* d = dx.data<float>();
    UseComputeThreadsHere();
#pragma omp parallel num_threads(ComputeThreads()) if (ComputeThreads() > 1 && batch_ * h_ * w_ * c_ >= kParallel)
    {
      std::vector<float> left(static_cast<size_t>(c_));  // the gradient no tap has taken yet
#pragma omp for
      for (int64_t r = 0; r < batch_ * oh_; ++r) {
        const int64_t b = r / oh_, oy = r % oh_;
        for (int64_t ox = 0; ox < ow_; ++ox) {
          const int64_t at = (r * ow_ + ox) * c_, first = ((b * h_ + oy * ph_) * w_ + ox * pw_) * c_;
          const float* __restrict best = out + at;
          float* __restrict rest = left.data();
          for (int64_t ch = 0; ch < c_; ++ch) rest[ch] = g[at + ch];
          for (int64_t ky = 0; ky < ph_; ++ky) {
            for (int64_t kx = 0; kx < pw_; ++kx) {
              const int64_t tap = first + (ky * w_ + kx) * c_;
              const float* __restrict p = in + tap;
              float* __restrict q = d + tap;
              for (int64_t ch = 0; ch < c_; ++ch) {
                const bool wins = p[ch] == best[ch];
                q[ch] = wins ? rest[ch] : 0.f;
                rest[ch] = wins ? 0.f : rest[ch];
              }
            }
          }
        }
      }
    }
    x_ = Tensor();
    y_ = Tensor();
    return dx;
  }

  device::Window2D Geometry2D() const {
    device::Window2D w;
    w.batch = batch_, w.height = h_, w.width = w_, w.channels = c_;
    w.window_h = ph_, w.window_w = pw_, w.stride_h = spec_.strides[0], w.stride_w = spec_.strides[1];
    w.out_h = oh_, w.out_w = ow_, w.pad_top = pt_, w.pad_left = pl_;
    return w;
  }

  StatusOr<Tensor> ForwardOnDevice(const Tensor& x) {
    ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(x.device()));
    if (spec_.type == LayerType::kGlobalAveragePooling2D) {
      ASSIGN_OR_RETURN(Tensor y,
                       Tensor::CreateUninitialized(
                           DType::kFloat32, spec_.keepdims ? Shape{batch_, 1, 1, c_} : Shape{batch_, c_}, x.device()));
      RETURN_IF_ERROR(b->ReduceAxis(device::Reduce::kMean, x, batch_, h_ * w_, c_, y));
      return y;
    }
    const bool max = spec_.type == LayerType::kMaxPooling2D;
    ASSIGN_OR_RETURN(Tensor y, Tensor::CreateUninitialized(DType::kFloat32, {batch_, oh_, ow_, c_}, x.device()));
    if (max) {
      ASSIGN_OR_RETURN(argmax_, Tensor::CreateUninitialized(DType::kInt64, {batch_, oh_, ow_, c_}, x.device()));
    }
    RETURN_IF_ERROR(b->Pool2D(max, x, Geometry2D(), y, max ? &argmax_ : nullptr));
    return y;
  }

  StatusOr<Tensor> BackwardOnDevice(const Tensor& dy) {
    ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(dy.device()));
    ASSIGN_OR_RETURN(Tensor dx,
                     Tensor::CreateUninitialized(DType::kFloat32, WithBatch(batch_, in_shape_), dy.device()));
    if (spec_.type == LayerType::kGlobalAveragePooling2D) {
      if (dy.size() != batch_ * c_)
        return Error("gradient shape " + ShapeString(dy.shape()) + " does not match output");
      RETURN_IF_ERROR(b->BroadcastAxis(dy, batch_, h_ * w_, c_, 1.f / static_cast<float>(h_ * w_), dx));
      return dx;
    }
    if (dy.size() != batch_ * oh_ * ow_ * c_) {
      return Error("gradient shape " + ShapeString(dy.shape()) + " does not match output");
    }
    const bool max = spec_.type == LayerType::kMaxPooling2D;
    if (max) RETURN_IF_ERROR(device::CheckSameDevice(spec_.name, {&dy, &argmax_}));
    RETURN_IF_ERROR(b->Pool2DBackward(max, dy, max ? &argmax_ : nullptr, Geometry2D(), dx));
    return dx;
  }

  // The input rows [y0, y1) and columns [x0, x1) under one output pixel,
  // padding excluded.
  // One window tap of max pooling over `channels` channels: where the tap
  // `p` (at flat input index `base`) is strictly greater than the best so
  // far, it becomes the best, so the first maximum wins, as in TF. The
  // pointers never alias and every channel is a compare and two selects,
  // so the loop vectorises.
  static void MaxTap(const float* __restrict p, int64_t base, int64_t channels, float* __restrict best,
                     int64_t* __restrict at) {
    for (int64_t ch = 0; ch < channels; ++ch) {
      const bool greater = p[ch] > best[ch];
      best[ch] = greater ? p[ch] : best[ch];
      at[ch] = greater ? base + ch : at[ch];
    }
  }

  struct Window {
    int64_t y0, y1, x0, x1;
    int64_t count() const { return (y1 - y0) * (x1 - x0); }
  };
  Window WindowAt(int64_t oy, int64_t ox) const {
    const int64_t y = oy * spec_.strides[0] - pt_, x = ox * spec_.strides[1] - pl_;
    return {std::max<int64_t>(y, 0), std::min(y + ph_, h_), std::max<int64_t>(x, 0), std::min(x + pw_, w_)};
  }

  Shape in_shape_;
  int64_t h_ = 0, w_ = 0, c_ = 0, ph_ = 0, pw_ = 0, oh_ = 0, ow_ = 0, pt_ = 0, pl_ = 0;
  int64_t batch_ = 0;
  Tensor argmax_;       // max pooling: the input offset each output took
  bool tiled_ = false;  // the last forward took MaxForwardTiled,
  Tensor x_, y_;        // keeping its input and output (shared, not copied)
};

}  // namespace

std::unique_ptr<Layer> MakePooling2D(const LayerSpec& spec) { return std::make_unique<Pooling2D>(spec); }

}  // namespace tfjob::model::internal

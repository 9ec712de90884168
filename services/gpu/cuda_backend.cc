// The CUDA implementation of device::Backend (services/tensor/backend.h):
// every operation checks its operands, then queues cuBLAS or a kernel of
// kernels.cu on the device's compute stream. The devices' streams, memory and
// transfers are cuda_devices.h's. A thread computing in a mixed precision
// (services/tensor/precision.h) multiplies bfloat16 / float16 copies of the
// operands on tensor cores (LowPrecisionMatMul).
#include "services/gpu/gpu.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <array>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "services/gpu/cuda_devices.h"
#include "services/gpu/kernels.h"
#include "services/tensor/backend.h"
#include "services/tensor/precision.h"
#ifdef TFJOB_HAVE_NCCL
#include "services/collective/nccl.h"
#endif

namespace tfjob::gpu {
namespace {

using device::Backend;
using internal::Blas;
using internal::Cuda;
using internal::CudaDevices;
using internal::DeviceGuard;
using internal::Launch;
using internal::PerDevice;
using internal::SameSize;

Status NeedF32(const Tensor& t, const char* op) {
  if (t.dtype() != DType::kFloat32)
    return InvalidArgument(std::string(op) + ": expected float32, got " + t.DebugString());
  return Status::Ok();
}

Status NeedI64(const Tensor& t, const char* op) {
  if (t.dtype() != DType::kInt64) return InvalidArgument(std::string(op) + ": expected int64, got " + t.DebugString());
  return Status::Ok();
}

math::Opt ToOpt(const device::OptimizerStep& s) {
  math::Opt o{};
  o.rule = static_cast<int>(s.rule);
  o.lr = s.learning_rate;
  o.momentum = s.momentum;
  o.rho = s.rho;
  o.beta_1 = s.beta_1;
  o.beta_2 = s.beta_2;
  o.epsilon = s.epsilon;
  o.alpha = s.alpha;
  o.nesterov = s.nesterov;
  o.centered = s.centered;
  o.amsgrad = s.amsgrad;
  return o;
}

// The kernels' window, after checking the geometry is one a layer could
// have computed (positive sizes, outputs that exist).
StatusOr<math::Window> ToWindow(const device::Window2D& w, const char* op) {
  if (w.batch < 0 || w.height <= 0 || w.width <= 0 || w.channels <= 0 || w.window_h <= 0 || w.window_w <= 0 ||
      w.stride_h <= 0 || w.stride_w <= 0 || w.out_h <= 0 || w.out_w <= 0 || w.pad_top < 0 || w.pad_left < 0 ||
      w.pad_top >= w.window_h || w.pad_left >= w.window_w) {
    return InvalidArgument(std::string(op) + ": invalid window geometry");
  }
  return math::Window{w.batch,    w.height,   w.width, w.channels, w.window_h, w.window_w,
                      w.stride_h, w.stride_w, w.out_h, w.out_w,    w.pad_top,  w.pad_left};
}

Status NeedSize(const Tensor& t, int64_t n, const char* op, const char* what) {
  if (t.size() != n) {
    return InvalidArgument(std::string(op) + ": " + what + " " + t.DebugString() + " should have " + std::to_string(n) +
                           " elements");
  }
  return Status::Ok();
}

class CudaBackend final : public Backend {
 public:
  int DeviceCount() override { return devices_.Count(); }

  std::string DeviceDescription(int index) override { return devices_.Description(index); }

  StatusOr<std::shared_ptr<std::byte[]>> Allocate(int device, size_t bytes) override {
    ASSIGN_OR_RETURN(PerDevice * d, Get(device));
    return devices_.Allocate(device, d, d->compute, bytes);
  }

  Status Fill(Tensor& t, float value) override {
    ASSIGN_OR_RETURN(PerDevice * d, Get(t));
    if (t.size() == 0) return Status::Ok();
    if (t.dtype() == DType::kInt64 || value == 0.f) {
      return Cuda(cudaMemsetAsync(t.raw(), 0, t.bytes(), d->compute), "cudaMemsetAsync");
    }
    return Launch(kernels::Fill(t.data<float>(), t.size(), value, d->compute), "Fill");
  }

  StatusOr<Tensor> UploadNew(const Tensor& host, int device) override { return devices_.UploadNew(host, device); }

  Status Upload(const Tensor& host, Tensor& dst) override { return devices_.Upload(host, dst); }

  Status Download(const Tensor& src, Tensor& host) override { return devices_.Download(src, host); }

  Status CopyOnDevice(const Tensor& src, Tensor& dst) override { return devices_.CopyOnDevice(src, dst); }

  Status Synchronize(int device) override { return devices_.Synchronize(device); }

  Status MatMul(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, float beta) override {
    RETURN_IF_ERROR(NeedF32(a, "MatMul"));
    RETURN_IF_ERROR(NeedF32(b, "MatMul"));
    RETURN_IF_ERROR(NeedF32(c, "MatMul"));
    if (a.rank() != 2 || b.rank() != 2 || c.rank() != 2) return InvalidArgument("MatMul: operands must be 2-D");
    const int64_t m = ta ? a.dim(1) : a.dim(0), k = ta ? a.dim(0) : a.dim(1);
    const int64_t k2 = tb ? b.dim(1) : b.dim(0), n = tb ? b.dim(0) : b.dim(1);
    if (k != k2 || c.dim(0) != m || c.dim(1) != n) {
      return InvalidArgument("MatMul: " + a.DebugString() + (ta ? "^T" : "") + " x " + b.DebugString() +
                             (tb ? "^T" : "") + " -> " + c.DebugString());
    }
    const int64_t limit = std::numeric_limits<int>::max();
    if (m > limit || n > limit || k > limit) return InvalidArgument("MatMul: dimension exceeds cuBLAS's int range");
    ASSIGN_OR_RETURN(PerDevice * d, Get(c));
    if (m == 0 || n == 0) return Status::Ok();
    if (k == 0) return Fill(c, 0.f);
    DeviceGuard g(c.device().index);
    if (const Precision p = ComputePrecision(); p != Precision::kFloat32) {
      return LowPrecisionMatMul(p, d, a, ta, b, tb, c, beta);
    }
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the
    // same buffers, operands swapped.
    const float alpha = 1.f;
    return Blas(
        cublasSgemm(d->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
                    static_cast<int>(m), static_cast<int>(k), &alpha, b.data<float>(), static_cast<int>(b.dim(1)),
                    a.data<float>(), static_cast<int>(a.dim(1)), &beta, c.data<float>(), static_cast<int>(n)),
        "cublasSgemm");
  }

  Status Transpose(const Tensor& a, Tensor& out) override {
    RETURN_IF_ERROR(NeedF32(a, "Transpose"));
    if (a.rank() != 2 || out.shape() != Shape{a.dim(1), a.dim(0)}) return InvalidArgument("Transpose: bad shapes");
    ASSIGN_OR_RETURN(PerDevice * d, Get(out));
    return Launch(kernels::Transpose(a.data<float>(), out.data<float>(), a.dim(0), a.dim(1), d->compute), "Transpose");
  }

  Status BiasAdd(Tensor& y, const Tensor& bias) override {
    RETURN_IF_ERROR(NeedF32(y, "BiasAdd"));
    RETURN_IF_ERROR(NeedF32(bias, "BiasAdd"));
    if (bias.size() == 0 || y.size() % bias.size() != 0) return InvalidArgument("BiasAdd: bias does not divide y");
    ASSIGN_OR_RETURN(PerDevice * d, Get(y));
    return Launch(
        kernels::BiasAdd(y.data<float>(), bias.data<float>(), y.size() / bias.size(), bias.size(), d->compute),
        "BiasAdd");
  }

  Status ColumnSum(const Tensor& x, Tensor& out) override {
    RETURN_IF_ERROR(NeedF32(x, "ColumnSum"));
    RETURN_IF_ERROR(NeedF32(out, "ColumnSum"));
    if (out.size() == 0 || x.size() % out.size() != 0) return InvalidArgument("ColumnSum: out does not divide x");
    const int64_t cols = out.size(), rows = x.size() / cols;
    if (rows > std::numeric_limits<int>::max() || cols > std::numeric_limits<int>::max()) {
      return InvalidArgument("ColumnSum: dimension exceeds cuBLAS's int range");
    }
    ASSIGN_OR_RETURN(PerDevice * d, Get(out));
    if (rows == 0) return Fill(out, 0.f);
    ASSIGN_OR_RETURN(const float* ones, devices_.Ones(out.device().index, d, rows));
    DeviceGuard g(out.device().index);
    // x row-major [rows, cols] is column-major [cols, rows]: out = x^T * 1.
    const float alpha = 1.f, beta = 0.f;
    return Blas(cublasSgemv(d->blas, CUBLAS_OP_N, static_cast<int>(cols), static_cast<int>(rows), &alpha,
                            x.data<float>(), static_cast<int>(cols), ones, 1, &beta, out.data<float>(), 1),
                "cublasSgemv");
  }

  Status UnaryOp(device::Unary op, const Tensor& a, Tensor& out) override {
    RETURN_IF_ERROR(NeedF32(a, "Unary"));
    RETURN_IF_ERROR(SameSize(a, out, "Unary"));
    ASSIGN_OR_RETURN(PerDevice * d, Get(out));
    return Launch(kernels::Unary(static_cast<int>(op), a.data<float>(), out.data<float>(), a.size(), d->compute),
                  "Unary");
  }

  Status BinaryOp(device::Binary op, const Tensor& a, const Tensor& b, Tensor& out) override {
    RETURN_IF_ERROR(NeedF32(a, "Binary"));
    RETURN_IF_ERROR(NeedF32(b, "Binary"));
    RETURN_IF_ERROR(SameSize(a, out, "Binary"));
    if (b.size() == 0 || (b.size() != a.size() && a.size() % b.size() != 0)) {
      return InvalidArgument("Binary: " + b.DebugString() + " does not broadcast to " + a.DebugString());
    }
    ASSIGN_OR_RETURN(PerDevice * d, Get(out));
    return Launch(kernels::Binary(static_cast<int>(op), a.data<float>(), b.data<float>(), out.data<float>(), a.size(),
                                  b.size(), d->compute),
                  "Binary");
  }

  Status Scale(const Tensor& a, float s, Tensor& out) override {
    RETURN_IF_ERROR(NeedF32(a, "Scale"));
    RETURN_IF_ERROR(SameSize(a, out, "Scale"));
    ASSIGN_OR_RETURN(PerDevice * d, Get(out));
    return Launch(kernels::Scale(a.data<float>(), s, out.data<float>(), a.size(), d->compute), "Scale");
  }

  Status Softmax(const Tensor& a, bool log, Tensor& out) override {
    RETURN_IF_ERROR(NeedF32(a, "Softmax"));
    RETURN_IF_ERROR(SameSize(a, out, "Softmax"));
    if (a.rank() < 1) return InvalidArgument("Softmax: input must have rank >= 1");
    ASSIGN_OR_RETURN(PerDevice * d, Get(out));
    const int64_t cols = a.dim(-1), rows = cols ? a.size() / cols : 0;
    return Launch(kernels::Softmax(a.data<float>(), out.data<float>(), rows, cols, log, d->compute), "Softmax");
  }

  Status ActivationBackward(device::ActivationGrad kind, const Tensor& y, Tensor& grad) override {
    RETURN_IF_ERROR(NeedF32(y, "ActivationBackward"));
    RETURN_IF_ERROR(SameSize(y, grad, "ActivationBackward"));
    ASSIGN_OR_RETURN(PerDevice * d, Get(grad));
    const int64_t cols = y.rank() ? y.dim(-1) : 1, rows = cols ? y.size() / cols : 0;
    return Launch(
        kernels::ActivationGrad(static_cast<int>(kind), y.data<float>(), grad.data<float>(), rows, cols, d->compute),
        "ActivationBackward");
  }

  Status ReduceAxis(device::Reduce op, const Tensor& a, int64_t outer, int64_t n, int64_t inner, Tensor& out) override {
    RETURN_IF_ERROR(NeedF32(a, "Reduce"));
    if (outer * n * inner != a.size() || out.size() != outer * inner) return InvalidArgument("Reduce: bad view");
    ASSIGN_OR_RETURN(PerDevice * d, Get(out));
    return Launch(
        kernels::ReduceAxis(static_cast<int>(op), a.data<float>(), out.data<float>(), outer, n, inner, d->compute),
        "Reduce");
  }

  Status ArgMax(const Tensor& a, Tensor& out) override {
    RETURN_IF_ERROR(NeedF32(a, "ArgMax"));
    RETURN_IF_ERROR(NeedI64(out, "ArgMax"));
    const int64_t cols = a.rank() ? a.dim(-1) : 0, rows = cols ? a.size() / cols : 0;
    if (out.size() != rows) return InvalidArgument("ArgMax: bad output size");
    ASSIGN_OR_RETURN(PerDevice * d, Get(out));
    return Launch(kernels::ArgMax(a.data<float>(), out.data<int64_t>(), rows, cols, d->compute), "ArgMax");
  }

  Status Gather(const Tensor& params, const Tensor& indices, Tensor& out) override {
    RETURN_IF_ERROR(NeedF32(params, "Gather"));
    RETURN_IF_ERROR(NeedI64(indices, "Gather"));
    const int64_t rows = params.rank() ? params.dim(0) : 0, row = rows ? params.size() / rows : 0;
    if (out.size() != indices.size() * row) return InvalidArgument("Gather: bad output size");
    ASSIGN_OR_RETURN(PerDevice * d, Get(out));
    return Launch(kernels::Gather(params.data<float>(), indices.data<int64_t>(), out.data<float>(), indices.size(),
                                  rows, row, d->compute),
                  "Gather");
  }

  Status ScatterAdd(Tensor& ref, const Tensor& indices, const Tensor& updates) override {
    RETURN_IF_ERROR(NeedF32(ref, "ScatterAdd"));
    RETURN_IF_ERROR(NeedF32(updates, "ScatterAdd"));
    RETURN_IF_ERROR(NeedI64(indices, "ScatterAdd"));
    const int64_t rows = ref.rank() ? ref.dim(0) : 0, row = rows ? ref.size() / rows : 0;
    if (updates.size() != indices.size() * row) return InvalidArgument("ScatterAdd: updates do not match indices");
    ASSIGN_OR_RETURN(PerDevice * d, Get(ref));
    return Launch(kernels::ScatterAdd(ref.data<float>(), indices.data<int64_t>(), updates.data<float>(), indices.size(),
                                      rows, row, d->compute),
                  "ScatterAdd");
  }

  Status Cast(const Tensor& a, Tensor& out) override {
    if (a.size() != out.size()) return InvalidArgument("Cast: sizes differ");
    ASSIGN_OR_RETURN(PerDevice * d, Get(out));
    if (a.dtype() == out.dtype()) return CopyOnDevice(a, out);
    if (a.dtype() == DType::kFloat32) {
      return Launch(kernels::CastToInt(a.data<float>(), out.data<int64_t>(), a.size(), d->compute), "Cast");
    }
    return Launch(kernels::CastToFloat(a.data<int64_t>(), out.data<float>(), a.size(), d->compute), "Cast");
  }

  Status EmbeddingForward(const Tensor& table, const Tensor& ids, int64_t bag, bool combine, float scale,
                          Tensor& out) override {
    RETURN_IF_ERROR(NeedF32(table, "EmbeddingForward"));
    RETURN_IF_ERROR(NeedI64(ids, "EmbeddingForward"));
    if (table.rank() != 2) return InvalidArgument("EmbeddingForward: table must be 2-D");
    const int64_t dim = table.dim(1);
    const int64_t out_rows = combine ? (bag ? ids.size() / bag : 0) : ids.size();
    if (out.size() != out_rows * dim) return InvalidArgument("EmbeddingForward: bad output size");
    ASSIGN_OR_RETURN(PerDevice * d, Get(out));
    return Launch(kernels::EmbeddingForward(table.data<float>(), ids.data<int64_t>(), out.data<float>(), out_rows, bag,
                                            combine, scale, dim, table.dim(0), d->compute),
                  "EmbeddingForward");
  }

  Status EmbeddingBackward(const Tensor& dy, const Tensor& positions, const Tensor& offsets, int64_t divisor,
                           float scale, Tensor& values) override {
    RETURN_IF_ERROR(NeedF32(dy, "EmbeddingBackward"));
    RETURN_IF_ERROR(NeedI64(positions, "EmbeddingBackward"));
    RETURN_IF_ERROR(NeedI64(offsets, "EmbeddingBackward"));
    if (values.rank() != 2 || offsets.size() != values.dim(0) + 1 || divisor < 1) {
      return InvalidArgument("EmbeddingBackward: bad shapes");
    }
    ASSIGN_OR_RETURN(PerDevice * d, Get(values));
    return Launch(
        kernels::EmbeddingBackward(dy.data<float>(), positions.data<int64_t>(), offsets.data<int64_t>(), values.dim(0),
                                   divisor, scale, values.dim(1), values.data<float>(), d->compute),
        "EmbeddingBackward");
  }

  Status Im2Col(const Tensor& x, const device::Window2D& w, Tensor& patches) override {
    RETURN_IF_ERROR(NeedF32(x, "Im2Col"));
    RETURN_IF_ERROR(NeedF32(patches, "Im2Col"));
    ASSIGN_OR_RETURN(math::Window g, ToWindow(w, "Im2Col"));
    RETURN_IF_ERROR(NeedSize(x, g.n * g.h * g.w * g.c, "Im2Col", "input"));
    RETURN_IF_ERROR(NeedSize(patches, g.n * g.oh * g.ow * g.kh * g.kw * g.c, "Im2Col", "patches"));
    RETURN_IF_ERROR(device::CheckSameDevice("Im2Col", {&x, &patches}));
    ASSIGN_OR_RETURN(PerDevice * d, Get(patches));
    return Launch(kernels::Im2Col(g, x.data<float>(), patches.data<float>(), d->compute), "Im2Col");
  }

  Status Col2Im(const Tensor& patches, const device::Window2D& w, Tensor& dx) override {
    RETURN_IF_ERROR(NeedF32(patches, "Col2Im"));
    RETURN_IF_ERROR(NeedF32(dx, "Col2Im"));
    ASSIGN_OR_RETURN(math::Window g, ToWindow(w, "Col2Im"));
    RETURN_IF_ERROR(NeedSize(dx, g.n * g.h * g.w * g.c, "Col2Im", "dx"));
    RETURN_IF_ERROR(NeedSize(patches, g.n * g.oh * g.ow * g.kh * g.kw * g.c, "Col2Im", "patches"));
    RETURN_IF_ERROR(device::CheckSameDevice("Col2Im", {&patches, &dx}));
    ASSIGN_OR_RETURN(PerDevice * d, Get(dx));
    return Launch(kernels::Col2Im(g, patches.data<float>(), dx.data<float>(), d->compute), "Col2Im");
  }

  Status Pool2D(bool max, const Tensor& x, const device::Window2D& w, Tensor& y, Tensor* argmax) override {
    RETURN_IF_ERROR(NeedF32(x, "Pool2D"));
    RETURN_IF_ERROR(NeedF32(y, "Pool2D"));
    ASSIGN_OR_RETURN(math::Window g, ToWindow(w, "Pool2D"));
    RETURN_IF_ERROR(NeedSize(x, g.n * g.h * g.w * g.c, "Pool2D", "input"));
    RETURN_IF_ERROR(NeedSize(y, g.n * g.oh * g.ow * g.c, "Pool2D", "output"));
    RETURN_IF_ERROR(device::CheckSameDevice("Pool2D", {&x, &y}));
    if (max) {
      if (!argmax) return InvalidArgument("Pool2D: max pooling needs an argmax tensor");
      RETURN_IF_ERROR(NeedI64(*argmax, "Pool2D"));
      RETURN_IF_ERROR(NeedSize(*argmax, y.size(), "Pool2D", "argmax"));
      RETURN_IF_ERROR(device::CheckSameDevice("Pool2D", {&y, argmax}));
    }
    ASSIGN_OR_RETURN(PerDevice * d, Get(y));
    return Launch(
        kernels::Pool2D(g, max, x.data<float>(), y.data<float>(), max ? argmax->data<int64_t>() : nullptr, d->compute),
        "Pool2D");
  }

  Status Pool2DBackward(bool max, const Tensor& dy, const Tensor* argmax, const device::Window2D& w,
                        Tensor& dx) override {
    RETURN_IF_ERROR(NeedF32(dy, "Pool2DBackward"));
    RETURN_IF_ERROR(NeedF32(dx, "Pool2DBackward"));
    ASSIGN_OR_RETURN(math::Window g, ToWindow(w, "Pool2DBackward"));
    RETURN_IF_ERROR(NeedSize(dx, g.n * g.h * g.w * g.c, "Pool2DBackward", "dx"));
    RETURN_IF_ERROR(NeedSize(dy, g.n * g.oh * g.ow * g.c, "Pool2DBackward", "dy"));
    RETURN_IF_ERROR(device::CheckSameDevice("Pool2DBackward", {&dy, &dx}));
    if (max) {
      if (!argmax) return InvalidArgument("Pool2DBackward: max pooling needs the forward pass's argmax");
      RETURN_IF_ERROR(NeedI64(*argmax, "Pool2DBackward"));
      RETURN_IF_ERROR(NeedSize(*argmax, dy.size(), "Pool2DBackward", "argmax"));
      RETURN_IF_ERROR(device::CheckSameDevice("Pool2DBackward", {&dy, argmax}));
    }
    ASSIGN_OR_RETURN(PerDevice * d, Get(dx));
    return Launch(kernels::Pool2DBackward(g, max, dy.data<float>(), max ? argmax->data<int64_t>() : nullptr,
                                          dx.data<float>(), d->compute),
                  "Pool2DBackward");
  }

  Status BroadcastAxis(const Tensor& a, int64_t outer, int64_t n, int64_t inner, float scale, Tensor& out) override {
    RETURN_IF_ERROR(NeedF32(a, "BroadcastAxis"));
    RETURN_IF_ERROR(NeedF32(out, "BroadcastAxis"));
    if (outer < 0 || n < 0 || inner < 0 || a.size() != outer * inner || out.size() != outer * n * inner) {
      return InvalidArgument("BroadcastAxis: bad view");
    }
    RETURN_IF_ERROR(device::CheckSameDevice("BroadcastAxis", {&a, &out}));
    ASSIGN_OR_RETURN(PerDevice * d, Get(out));
    return Launch(kernels::BroadcastAxis(a.data<float>(), out.data<float>(), outer, n, inner, scale, d->compute),
                  "BroadcastAxis");
  }

  Status Moments(const Tensor& x, Tensor& mean, Tensor& variance) override {
    RETURN_IF_ERROR(NeedF32(x, "Moments"));
    RETURN_IF_ERROR(NeedF32(mean, "Moments"));
    RETURN_IF_ERROR(SameSize(mean, variance, "Moments"));
    if (mean.size() == 0 || x.size() % mean.size() != 0) return InvalidArgument("Moments: mean does not divide x");
    RETURN_IF_ERROR(device::CheckSameDevice("Moments", {&x, &mean, &variance}));
    ASSIGN_OR_RETURN(PerDevice * d, Get(mean));
    return Launch(kernels::Moments(x.data<float>(), mean.data<float>(), variance.data<float>(), x.size() / mean.size(),
                                   mean.size(), d->compute),
                  "Moments");
  }

  Status InverseSqrt(const Tensor& a, float epsilon, Tensor& out) override {
    RETURN_IF_ERROR(NeedF32(a, "InverseSqrt"));
    RETURN_IF_ERROR(SameSize(a, out, "InverseSqrt"));
    RETURN_IF_ERROR(device::CheckSameDevice("InverseSqrt", {&a, &out}));
    ASSIGN_OR_RETURN(PerDevice * d, Get(out));
    return Launch(kernels::InverseSqrt(a.data<float>(), epsilon, out.data<float>(), a.size(), d->compute),
                  "InverseSqrt");
  }

  Status LossAndGradient(device::Loss loss, bool from_logits, const Tensor& pred, const Tensor& target, Tensor& grad,
                         Tensor& stats, int64_t slot) override {
    RETURN_IF_ERROR(SameSize(pred, grad, "Loss"));
    return RunLoss(loss, from_logits, pred, target, &grad, stats, slot);
  }

  Status LossValue(device::Loss loss, bool from_logits, const Tensor& pred, const Tensor& target, Tensor& stats,
                   int64_t slot) override {
    return RunLoss(loss, from_logits, pred, target, nullptr, stats, slot);
  }

  Status MetricUpdate(device::Metric metric, bool logits, const Tensor& pred, const Tensor& target, Tensor& stats,
                      int64_t slot) override {
    RETURN_IF_ERROR(NeedF32(pred, "Metric"));
    RETURN_IF_ERROR(SameSize(pred, target, "Metric"));
    RETURN_IF_ERROR(CheckStats(stats, slot));
    if (pred.rank() < 1) return InvalidArgument("Metric: predictions need a batch axis");
    const int64_t rows = pred.dim(0), cols = rows ? pred.size() / rows : 0;
    ASSIGN_OR_RETURN(Tensor scratch, Tensor::CreateUninitialized(DType::kFloat32, {rows}, pred.device()));
    ASSIGN_OR_RETURN(PerDevice * d, Get(stats));
    return Launch(kernels::Metric(static_cast<int>(metric), logits, pred.data<float>(), target.data<float>(), rows,
                                  cols, scratch.data<float>(), stats.data<float>(), slot, d->compute),
                  "Metric");
  }

  Status ApplyDense(const device::OptimizerStep& step, Tensor& var, const Tensor& grad,
                    std::span<Tensor> slots) override {
    RETURN_IF_ERROR(SameSize(var, grad, "ApplyDense"));
    ASSIGN_OR_RETURN(auto s, SlotPointers(var, slots));
    ASSIGN_OR_RETURN(PerDevice * d, Get(var));
    return Launch(kernels::OptimizerDense(ToOpt(step), var.data<float>(), grad.data<float>(), s[0], s[1], s[2],
                                          var.size(), d->compute),
                  "ApplyDense");
  }

  Status ApplyRows(const device::OptimizerStep& step, Tensor& var, const Tensor& indices, const Tensor& values,
                   std::span<Tensor> slots) override {
    RETURN_IF_ERROR(NeedI64(indices, "ApplyRows"));
    const int64_t rows = var.rank() ? var.dim(0) : 0, row = rows ? var.size() / rows : 0;
    if (values.size() != indices.size() * row) return InvalidArgument("ApplyRows: values do not match indices");
    ASSIGN_OR_RETURN(auto s, SlotPointers(var, slots));
    ASSIGN_OR_RETURN(PerDevice * d, Get(var));
    return Launch(kernels::OptimizerRows(ToOpt(step), var.data<float>(), indices.data<int64_t>(), values.data<float>(),
                                         s[0], s[1], s[2], indices.size(), rows, row, d->compute),
                  "ApplyRows");
  }

  Status ApplyMaskedRows(const device::OptimizerStep& step, Tensor& var, const Tensor& grad, const Tensor& mask,
                         std::span<Tensor> slots) override {
    RETURN_IF_ERROR(SameSize(var, grad, "ApplyMaskedRows"));
    const int64_t rows = var.rank() ? var.dim(0) : 0, row = rows ? var.size() / rows : 0;
    if (mask.size() != rows || mask.dtype() != DType::kFloat32) return InvalidArgument("ApplyMaskedRows: bad mask");
    ASSIGN_OR_RETURN(auto s, SlotPointers(var, slots));
    ASSIGN_OR_RETURN(PerDevice * d, Get(var));
    return Launch(kernels::OptimizerMasked(ToOpt(step), var.data<float>(), grad.data<float>(), mask.data<float>(), s[0],
                                           s[1], s[2], rows, row, d->compute),
                  "ApplyMaskedRows");
  }

 private:
  StatusOr<PerDevice*> Get(int device) { return devices_.Get(device); }

  // A mixed layer's product (services/tensor/precision.h), as Keras' mixed
  // policies compute it on a GPU: the operands rounded to bfloat16 /
  // float16 on the device (kernels::ToLowPrecision), multiplied on tensor
  // cores with float32 accumulation (CUBLAS_COMPUTE_32F), the result
  // written as float32 (cuBLAS rounds nothing further; the CPU's
  // LowPrecisionGemm rounds it to the low precision too, a difference of
  // at most half a unit of that precision). MatMul has checked the shapes.
  Status LowPrecisionMatMul(Precision p, PerDevice* d, const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c,
                            float beta) {
    const int device = c.device().index;
    const bool bf16 = p == Precision::kBfloat16;
    // Both copies in one block from the stream-ordered pool (CudaDevices:
    // cudaMallocAsync with the release threshold raised, so a step's
    // blocks are recycled, never returned to the driver), freed in order
    // after the product. b's copy starts 256 bytes aligned, as tensor
    // cores want their operands.
    const int64_t a_slots = (a.size() + 127) / 128 * 128;
    ASSIGN_OR_RETURN(std::shared_ptr<std::byte[]> block,
                     devices_.Allocate(device, d, d->compute, static_cast<size_t>(a_slots + b.size()) * 2));
    uint16_t* a16 = reinterpret_cast<uint16_t*>(block.get());
    uint16_t* b16 = a16 + a_slots;
    RETURN_IF_ERROR(
        Launch(kernels::ToLowPrecision(bf16, a.data<float>(), a16, a.size(), d->compute), "ToLowPrecision"));
    RETURN_IF_ERROR(
        Launch(kernels::ToLowPrecision(bf16, b.data<float>(), b16, b.size(), d->compute), "ToLowPrecision"));
    const cudaDataType low = bf16 ? CUDA_R_16BF : CUDA_R_16F;
    const int m = static_cast<int>(c.dim(0)), n = static_cast<int>(c.dim(1)),
              k = static_cast<int>(ta ? a.dim(0) : a.dim(1));
    const float alpha = 1.f;
    // The same operand swap as MatMul's float32 product.
    return Blas(cublasGemmEx(d->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha,
                             b16, low, static_cast<int>(b.dim(1)), a16, low, static_cast<int>(a.dim(1)), &beta,
                             c.data<float>(), CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                "cublasGemmEx");
  }
  StatusOr<PerDevice*> Get(const Tensor& t) { return devices_.Get(t); }

  static Status CheckStats(const Tensor& stats, int64_t slot) {
    if (stats.dtype() != DType::kFloat32 || slot < 0 || slot + 1 >= stats.size()) {
      return InvalidArgument("stats " + stats.DebugString() + " has no slot " + std::to_string(slot));
    }
    return Status::Ok();
  }

  Status RunLoss(device::Loss loss, bool from_logits, const Tensor& pred, const Tensor& target, Tensor* grad,
                 Tensor& stats, int64_t slot) {
    RETURN_IF_ERROR(NeedF32(pred, "Loss"));
    RETURN_IF_ERROR(SameSize(pred, target, "Loss"));
    RETURN_IF_ERROR(CheckStats(stats, slot));
    if (pred.rank() < 1 || pred.dim(0) == 0) return InvalidArgument("Loss: empty batch of predictions");
    const int64_t rows = pred.dim(0), cols = pred.size() / rows;
    ASSIGN_OR_RETURN(Tensor scratch, Tensor::CreateUninitialized(DType::kFloat32, {rows}, pred.device()));
    ASSIGN_OR_RETURN(PerDevice * d, Get(stats));
    return Launch(kernels::Loss(static_cast<int>(loss), from_logits, pred.data<float>(), target.data<float>(),
                                grad ? grad->data<float>() : nullptr, rows, cols, scratch.data<float>(),
                                stats.data<float>(), slot, d->compute),
                  "Loss");
  }

  static StatusOr<std::array<float*, 3>> SlotPointers(const Tensor& var, std::span<Tensor> slots) {
    if (slots.size() > 3) return InvalidArgument("optimizer: more than 3 slots");
    std::array<float*, 3> p{nullptr, nullptr, nullptr};
    for (size_t i = 0; i < slots.size(); ++i) {
      if (slots[i].size() != var.size() || slots[i].device() != var.device() || slots[i].dtype() != DType::kFloat32) {
        return InvalidArgument("optimizer: slot " + slots[i].DebugString() + " does not match " + var.DebugString());
      }
      p[i] = slots[i].data<float>();
    }
    return p;
  }

  CudaDevices devices_;
};

}  // namespace

void RegisterBackend() {
  static std::once_flag once;
  std::call_once(once, [] {
    device::RegisterCudaBackend(new CudaBackend());  // lives for the process
    RegisterGpuPathCheck([](Precision p, int device) -> Status {
      // The float16 products are here, but training in float16 needs Keras'
      // dynamic loss scaling, which the GPU training path does not apply
      // yet: refused rather than trained unscaled.
      if (p == Precision::kFloat16) {
        return FailedPrecondition(
            "float16 on a GPU: Keras' dynamic loss scaling is not applied on the GPU training path yet; use "
            "--mixed-precision bfloat16");
      }
      return MixedPrecisionSupport(p, device);
    });
#ifdef TFJOB_HAVE_NCCL
    collective::RegisterNccl();
#endif
  });
}

}  // namespace tfjob::gpu

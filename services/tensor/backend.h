// The device backend: memory and kernels for tensors that live on a CUDA
// device (Device::Type::kCuda). The tensor library defines the interface and
// stays free of CUDA; services/gpu implements it and registers it
// (gpu::RegisterBackend) in binaries built with the toolkit. Code that meets
// a device tensor asks BackendFor(device) and gets FAILED_PRECONDITION, with
// the reason, where there is no backend or no such device.
//
// Semantics every implementation keeps:
//   - Work is queued in order on one compute stream per device and runs
//     asynchronously: a call returns once the work is queued. Only
//     Download and Synchronize wait for it. Nothing inside a training step
//     waits for the device, so the host prepares the next step while the
//     device computes this one.
//   - Upload stages host bytes through pinned memory and copies them on a
//     separate copy stream; the compute stream waits for that copy (an
//     event), so an upload overlaps the compute already queued.
//   - Results match the host kernels (services/tensor/ops.h and the model's
//     Eigen code) to float32 rounding: the same formulas, reductions in a
//     fixed order (deterministic run to run).
//   - Shapes and dtypes are checked before anything is queued
//     (INVALID_ARGUMENT). A failed launch or allocation, or an asynchronous
//     error found by Synchronize or Download, is FAILED_PRECONDITION with
//     the CUDA error string (the device cannot serve the run). After an
//     asynchronous error the device's context is unusable; the caller stops.
//
// Thread-safety: calls on different devices may run concurrently (mirrored
// replicas run one thread per device); calls on one device come from one
// thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"
#include "services/tensor/tensor.h"

namespace tfjob::device {

enum class Unary : uint8_t { kRelu, kSigmoid, kTanh, kExp, kLog, kSquare };
enum class Binary : uint8_t { kAdd, kSub, kMul, kDiv };
enum class Reduce : uint8_t { kSum, kMean, kMax };
// Derivative of an activation from its output y: grad becomes dL/dx.
enum class ActivationGrad : uint8_t { kRelu, kSigmoid, kTanh, kSoftmax };
// Keras losses on float targets shaped like the prediction (sparse labels
// arrive one-hot). Mean over the batch's elements as Keras'
// sum_over_batch_size.
enum class Loss : uint8_t { kMeanSquaredError, kBinaryCrossentropy, kCategoricalCrossentropy };
// Counting correct predictions against float targets shaped like them:
// argmax equal (sparse and categorical accuracy), threshold (binary), exact
// equality (Keras' plain "accuracy").
enum class Metric : uint8_t { kArgMaxMatch, kBinary, kEqual };

// One optimizer update with Keras 3's rules (services/model/optimizers.h).
struct OptimizerStep {
  enum class Rule : uint8_t { kSgd, kAdagrad, kRmsprop, kAdam };
  Rule rule = Rule::kSgd;
  float learning_rate = 0.01f;
  float momentum = 0;
  bool nesterov = false;
  float rho = 0.9f;
  bool centered = false;
  float beta_1 = 0.9f, beta_2 = 0.999f;
  bool amsgrad = false;
  float epsilon = 1e-7f;
  // Adam's bias-corrected step size for this iteration (lr otherwise).
  float alpha = 0.01f;
};

// The geometry of a 2-D window over NHWC tensors (Conv2D's kernel or a
// pooling window), as the layer computed it (TensorFlow's "valid" and
// "same"): input [batch, height, width, channels], output pixels
// [out_h, out_w], `pad_top` / `pad_left` positions of padding before the
// first row and column.
struct Window2D {
  int64_t batch = 0, height = 0, width = 0, channels = 0;
  int64_t window_h = 1, window_w = 1, stride_h = 1, stride_w = 1;
  int64_t out_h = 0, out_w = 0, pad_top = 0, pad_left = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // Devices this process sees (after CUDA_VISIBLE_DEVICES); 0 without a GPU.
  virtual int DeviceCount() = 0;
  // "NVIDIA H100 80GB HBM3 (cuda:0, 79.1 GiB, sm_90)"
  virtual std::string DeviceDescription(int index) = 0;

  // ---- memory ----
  // Uninitialised bytes on `device`, ordered on its compute stream and
  // returned to its pool when the last handle goes.
  virtual StatusOr<std::shared_ptr<std::byte[]>> Allocate(int device, size_t bytes) = 0;
  virtual Status Fill(Tensor& t, float value) = 0;  // float32; 0 also zeroes int64
  // host -> a new tensor on `device`, allocated on the copy stream so the
  // copy does not wait for compute already queued (the way input batches
  // travel).
  virtual StatusOr<Tensor> UploadNew(const Tensor& host, int device) = 0;
  // host -> an existing device tensor, same dtype and element count; ordered
  // after the work already queued on the device.
  virtual Status Upload(const Tensor& host, Tensor& dst) = 0;
  // device -> host, same dtype and element count; waits for the device.
  virtual Status Download(const Tensor& src, Tensor& host) = 0;
  // device -> device (the same device, or another one).
  virtual Status CopyOnDevice(const Tensor& src, Tensor& dst) = 0;
  // Waits for the device's queued work; reports asynchronous errors.
  virtual Status Synchronize(int device) = 0;

  // ---- dense algebra (float32) ----
  // c = op(a) * op(b) + beta * c for 2-D a, b, c (cuBLAS).
  virtual Status MatMul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& c,
                        float beta) = 0;
  // out = a^T for 2-D a.
  virtual Status Transpose(const Tensor& a, Tensor& out) = 0;
  // Every row of y (y viewed as [rows, bias.size()]) += bias.
  virtual Status BiasAdd(Tensor& y, const Tensor& bias) = 0;
  // out[j] = sum_i x[i, j], x viewed as [rows, out.size()].
  virtual Status ColumnSum(const Tensor& x, Tensor& out) = 0;
  // out may be a itself.
  virtual Status UnaryOp(Unary op, const Tensor& a, Tensor& out) = 0;
  // b has a's shape, one element, or a shape equal to a suffix of a's
  // (repeated over a's leading dims); out may be a.
  virtual Status BinaryOp(Binary op, const Tensor& a, const Tensor& b, Tensor& out) = 0;
  virtual Status Scale(const Tensor& a, float s, Tensor& out) = 0;
  // Along the last axis, max subtracted; out may be a.
  virtual Status Softmax(const Tensor& a, bool log, Tensor& out) = 0;
  // grad (dL/dy) becomes dL/dx in place, given y = act(x).
  virtual Status ActivationBackward(ActivationGrad g, const Tensor& y, Tensor& grad) = 0;
  // a viewed as [outer, n, inner]; out is [outer, inner].
  virtual Status ReduceAxis(Reduce op, const Tensor& a, int64_t outer, int64_t n, int64_t inner, Tensor& out) = 0;
  // Index of the maximum along the last axis (first on ties), int64.
  virtual Status ArgMax(const Tensor& a, Tensor& out) = 0;
  // Rows of params picked by int64 indices (out of range: OUT_OF_RANGE is
  // the caller's check; the kernel clamps so it never reads outside).
  virtual Status Gather(const Tensor& params, const Tensor& indices, Tensor& out) = 0;
  // ref[indices[i]] += updates[i]; repeated indices accumulate.
  virtual Status ScatterAdd(Tensor& ref, const Tensor& indices, const Tensor& updates) = 0;
  // float32 <-> int64 (toward zero).
  virtual Status Cast(const Tensor& a, Tensor& out) = 0;

  // ---- layers ----
  // out[i] = table[ids[i]] (combine = false), or
  // out[b] = scale * sum_j table[ids[b * bag + j]] (combine = true).
  virtual Status EmbeddingForward(const Tensor& table, const Tensor& ids, int64_t bag, bool combine, float scale,
                                  Tensor& out) = 0;
  // Sparse gradient rows: values[k] = scale * sum of dy[positions[p] / divisor]
  // over p in [offsets[k], offsets[k + 1]), in that order (deterministic).
  virtual Status EmbeddingBackward(const Tensor& dy, const Tensor& positions, const Tensor& offsets, int64_t divisor,
                                   float scale, Tensor& values) = 0;

  // ---- convolution and pooling (NHWC, geometry in Window2D) ----
  // patches [batch * out_h * out_w, window_h * window_w * channels]: row r
  // holds the input under output pixel r, zeros where the window hangs over
  // padding (Conv2D's im2col).
  virtual Status Im2Col(const Tensor& x, const Window2D& w, Tensor& patches) = 0;
  // dx (the input's shape, overwritten) = for each input element, the sum of
  // the patch gradients of every tap that copied it.
  virtual Status Col2Im(const Tensor& patches, const Window2D& w, Tensor& dx) = 0;
  // y [batch, out_h, out_w, channels]. Max: the first maximum wins and
  // argmax (int64, y's shape) receives its flat input offset. Average: the
  // divisor counts real inputs only (argmax unused, may be null).
  virtual Status Pool2D(bool max, const Tensor& x, const Window2D& w, Tensor& y, Tensor* argmax) = 0;
  // dx (the input's shape, overwritten) from dy; max needs Pool2D's argmax.
  virtual Status Pool2DBackward(bool max, const Tensor& dy, const Tensor* argmax, const Window2D& w, Tensor& dx) = 0;
  // out viewed as [outer, n, inner] = scale * a [outer, inner], repeated
  // along the middle axis (the adjoint of ReduceAxis).
  virtual Status BroadcastAxis(const Tensor& a, int64_t outer, int64_t n, int64_t inner, float scale, Tensor& out) = 0;

  // ---- batch normalization ----
  // Per column of x viewed as [rows, mean.size()]: the mean and the biased
  // variance (mean of squared deviations from that mean).
  virtual Status Moments(const Tensor& x, Tensor& mean, Tensor& variance) = 0;
  // out = 1 / sqrt(a + epsilon), elementwise; out may be a.
  virtual Status InverseSqrt(const Tensor& a, float epsilon, Tensor& out) = 0;

  // ---- losses and metrics ----
  // grad = dL/dpred; stats[slot] += loss * batch and stats[slot + 1] += batch
  // (batch = pred's first dim), as Keras' weighted Mean accumulates them.
  virtual Status LossAndGradient(Loss loss, bool from_logits, const Tensor& pred, const Tensor& target, Tensor& grad,
                                 Tensor& stats, int64_t slot) = 0;
  // Loss only (evaluation).
  virtual Status LossValue(Loss loss, bool from_logits, const Tensor& pred, const Tensor& target, Tensor& stats,
                           int64_t slot) = 0;
  // stats[slot] += correct, stats[slot + 1] += examples counted.
  virtual Status MetricUpdate(Metric metric, bool logits, const Tensor& pred, const Tensor& target, Tensor& stats,
                              int64_t slot) = 0;

  // ---- optimizers ----
  // `slots` are the optimizer's slot tensors for var (same shape), in
  // Optimizer::SlotNames() order.
  virtual Status ApplyDense(const OptimizerStep& step, Tensor& var, const Tensor& grad, std::span<Tensor> slots) = 0;
  // Rows indices[i] (distinct, int64 on the device) get values[i].
  virtual Status ApplyRows(const OptimizerStep& step, Tensor& var, const Tensor& indices, const Tensor& values,
                           std::span<Tensor> slots) = 0;
  // Rows whose mask (float32 [rows]) is > 0 get the rows of a dense grad.
  virtual Status ApplyMaskedRows(const OptimizerStep& step, Tensor& var, const Tensor& grad, const Tensor& mask,
                                 std::span<Tensor> slots) = 0;
};

// The registered backend, or nullptr.
Backend* CudaBackend();
// Called once by the GPU library's registration; the backend lives for the
// rest of the process (it is never destroyed: device buffers may be freed
// during static destruction).
void RegisterCudaBackend(Backend* backend);

// The backend serving `device`: FAILED_PRECONDITION when this build has no
// CUDA, no device is visible, or the index is not a visible device.
StatusOr<Backend*> BackendFor(const Device& device);

// Every tensor on `device` (INVALID_ARGUMENT naming the one that is not).
Status CheckSameDevice(std::string_view op, std::initializer_list<const Tensor*> tensors);

}  // namespace tfjob::device

// 2-D convolutions on the CPU through oneDNN's direct convolution kernels
// (the ones TensorFlow's CPU build uses), for Conv2D (services/model/
// conv.cc): NHWC activations, HWIO kernels as Keras stores them, Keras'
// geometry (strides, "valid" / "same" padding as the layer computed it).
// Measured against the layer's own im2col + matrix product: docs/
// architecture.md. Where the build has no oneDNN (or TFJOB_CPU_KERNELS=
// eigen), Available() is false and the layer keeps its own path.
//
// Ownership: a DirectConv2D owns the oneDNN primitives and blocked-layout
// buffers of the last geometry it ran (a new batch size rebuilds them).
// Thread-safety: one call at a time per object (a layer call owns one).
// Failure: every oneDNN error is caught here and returned as INTERNAL or
// UNIMPLEMENTED (a geometry oneDNN refuses); the caller then computes the
// same result its own way, so nothing is lost.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace tfjob {

struct Conv2DGeometry {
  int64_t batch = 0, height = 0, width = 0, channels = 0;
  int64_t kernel_h = 1, kernel_w = 1, filters = 0, stride_h = 1, stride_w = 1;
  int64_t out_h = 0, out_w = 0, pad_top = 0, pad_left = 0;
  bool operator==(const Conv2DGeometry&) const = default;
};

class DirectConv2D {
 public:
  DirectConv2D();
  ~DirectConv2D();
  DirectConv2D(const DirectConv2D&) = delete;
  DirectConv2D& operator=(const DirectConv2D&) = delete;

  // True where the kernels below compute (a oneDNN build, not switched off).
  static bool Available();
  // Whether a float32 convolution of `g` takes oneDNN's Winograd kernels
  // (F(4x4, 3x3): 3x3, stride 1, at least 32 channels and 32 filters and
  // 96 Ki channel x filter x output-pixel products per image, at most one
  // pixel of padding a side; fewer multiplications than the
  // direct kernels, with rounding errors of the same order: tests/
  // conv2d_test.cc) rather than the direct ones, unless
  // UseDirectConvolutionsOnly() was called. A CPU without oneDNN's Winograd
  // kernels (they need AVX-512) gets the direct ones all the same.
  static bool WinogradApplies(const Conv2DGeometry& g);
  // Whether it takes this project's own Winograd kernels (F(4x4, 3x3),
  // conv2d_winograd.h: 3x3 "same", 16 or 32 channels and filters, an
  // AVX-512 CPU) where oneDNN's do not apply; also off with
  // UseDirectConvolutionsOnly().
  static bool OwnWinogradApplies(const Conv2DGeometry& g);
  // The kernel of the last Forward: oneDNN's ("jit_wino_4x3:avx512_core",
  // "brgconv:avx512_core", ...) or the own Winograd's
  // ("winograd_4x4_3x3:own"); "" before one, or after one through
  // conv2d_small.h's kernels.
  std::string ForwardKernel() const;

  // y [batch, out_h, out_w, filters] = conv(x, kernel) + bias (bias may be
  // null), then max(0, .) when `relu`.
  Status Forward(const Conv2DGeometry& g, const float* x, const float* kernel, const float* bias, bool relu, float* y);
  // The same followed by a max pooling whose pool_h x pool_w windows tile
  // y (strides = pool size, "valid"), in one pass that never stores y
  // (conv2d_small.h): `pooled` [batch, out_h / pool_h, out_w / pool_w,
  // filters] and one byte per pooled value in `winners` (the tap that takes
  // its gradient). float32 or bfloat16 (ComputePrecision: the input and
  // kernel rounded to it, as Forward's few-channel path does); CanPool() says
  // where it applies, elsewhere (and in float16) UNIMPLEMENTED (the caller
  // then runs the two layers apart). The backward
  // calls below then take dy from MaxPoolGradient.
  static bool CanPool(const Conv2DGeometry& g, int64_t pool_h, int64_t pool_w);
  Status ForwardMaxPool(const Conv2DGeometry& g, const float* x, const float* kernel, const float* bias, bool relu,
                        int64_t pool_h, int64_t pool_w, float* pooled, uint8_t* winners);
  // dL/dy [batch, out_h, out_w, filters] (the ReLU's gradient included)
  // from ForwardMaxPool's winners and the pooled gradient, for BackwardData.
  static void MaxPoolGradient(const Conv2DGeometry& g, int64_t pool_h, int64_t pool_w, const uint8_t* winners,
                              const float* dpooled, float* dy);
  // BackwardWeights after ForwardMaxPool, from the winners and the pooled
  // gradient without storing dL/dy; UNIMPLEMENTED above 32 filters (the
  // caller then stores dL/dy with MaxPoolGradient and calls BackwardWeights).
  Status BackwardWeightsPooled(const Conv2DGeometry& g, int64_t pool_h, int64_t pool_w, const float* x,
                               const uint8_t* winners, const float* dpooled, float* dkernel, float* dbias);
  // dkernel (HWIO) and dbias (may be null) from the input of the last
  // Forward's geometry and dy; both are overwritten.
  Status BackwardWeights(const Conv2DGeometry& g, const float* x, const float* dy, float* dkernel, float* dbias);
  // dx (NHWC, overwritten) from dy and the kernel.
  Status BackwardData(const Conv2DGeometry& g, const float* dy, const float* kernel, float* dx);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Direct convolutions only, never Winograd (TFJOB_CPU_KERNELS=direct at
// start-up; bench/roofline.sh compares the two). Takes effect at the next
// geometry a DirectConv2D builds; call it before any kernel runs.
void UseDirectConvolutionsOnly(bool only = true);

}  // namespace tfjob

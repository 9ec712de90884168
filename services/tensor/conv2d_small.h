// Stride-1 and -2 convolutions over inputs with few channels (the first layer of an
// image model: MNIST's one channel) as this project's own AVX-512 kernels.
// oneDNN blocks its kernels on input channels, so with one channel its
// forward and weight-gradient kernels ran the MNIST CNN's first layer at
// about a tenth of the FMA peak and took 30-45% of the CNN's training time
// (docs/performance.md); here each output pixel is kernel_h x kernel_w x
// channels broadcasts times the filter vectors, accumulated in registers.
//
// Applies() says whether a geometry is one of these (strides 1 or 2, a
// residual network's stem among them; filters a
// multiple of 16 up to 64, kernel_h x kernel_w x channels small enough that
// the weight gradient's accumulators fit in registers, a CPU with
// AVX-512F). "same" padding is computed on a zero-padded copy of the input.
// The fused max pooling below takes stride 1 only.
//
// Thread-safety: the functions share nothing but `scratch`, which is the
// caller's (one call at a time per scratch). They split the batch over the
// compute threads (threads.h). Failure: none; callers check Applies() first.
#pragma once

#include <cstdint>
#include <vector>

#include "services/tensor/conv2d.h"

namespace tfjob {

namespace small_conv {

bool Applies(const Conv2DGeometry& g);

// y = conv(x, kernel) + bias (bias may be null), then max(0, .) when relu;
// NHWC activations, HWIO kernel, as DirectConv2D. `round_bf16` rounds the
// input and kernel to bfloat16 first (products then equal bfloat16's, summed
// in float32, as oneDNN's bfloat16 kernels do).
void Forward(const Conv2DGeometry& g, const float* x, const float* kernel, const float* bias, bool relu,
             bool round_bf16, float* y, std::vector<float>& scratch);

// A Forward followed by a max pooling whose pool_h x pool_w windows tile
// the output (strides = pool size, "valid"), in one pass (`round_bf16` as in
// Forward, and the outputs rounded to bfloat16 before they are compared and
// pooled): each window's convolution rows live in a per-thread buffer, so the
// convolution's output (the MNIST CNN's 2.7 MB a batch) is never stored.
// Writes `pooled` [batch, out_h / pool_h, out_w / pool_w, filters] and, one
// byte per pooled value, `winners`: the first tap (ky * pool_w + kx) that
// holds the window's maximum, which takes its gradient (as in TF), or
// kNoWinner where none does (with `relu`, a maximum of 0: the ReLU's
// gradient is 0 at every tap). AppliesPooled() says whether a geometry and
// pool are one of these.
inline constexpr uint8_t kNoWinner = 255;
bool AppliesPooled(const Conv2DGeometry& g, int64_t pool_h, int64_t pool_w);
void ForwardMaxPool(const Conv2DGeometry& g, const float* x, const float* kernel, const float* bias, bool relu,
                    bool round_bf16, int64_t pool_h, int64_t pool_w, float* pooled, uint8_t* winners,
                    std::vector<float>& scratch);

// The convolution's dL/dy [batch, out_h, out_w, filters] (overwritten; the
// activation's gradient included) from the pooled gradient: each window's
// winner takes it; every other position, and rows or columns no window
// covers, 0. What BackwardData needs; the weight gradient does without it.
void MaxPoolGradient(const Conv2DGeometry& g, int64_t pool_h, int64_t pool_w, const uint8_t* winners,
                     const float* dpooled, float* dy);

// BackwardWeights of that dL/dy, each pixel's made in registers from the
// pooled gradient and the winners as the passes go (never stored); for 16
// or 32 filters (AppliesPooledBackward), the MNIST-sized first layers;
// `round_bf16` rounds x and the pooled gradient to bfloat16 first.
bool AppliesPooledBackward(const Conv2DGeometry& g, int64_t pool_h, int64_t pool_w);
void BackwardWeightsPooled(const Conv2DGeometry& g, int64_t pool_h, int64_t pool_w, const float* x,
                           const uint8_t* winners, const float* dpooled, bool round_bf16, float* dkernel, float* dbias,
                           std::vector<float>& scratch);

// dkernel (HWIO) and dbias (may be null), overwritten, from the input x and
// dL/dy; `round_bf16` as in Forward (x and dy rounded).
void BackwardWeights(const Conv2DGeometry& g, const float* x, const float* dy, bool round_bf16, float* dkernel,
                     float* dbias, std::vector<float>& scratch);

}  // namespace small_conv

}  // namespace tfjob

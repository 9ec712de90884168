// 3x3, stride-1, "same" convolutions of 16 or 32 channels into 16 or 32
// filters as this project's own Winograd kernels (Lavin and Gray, "Fast
// Algorithms for Convolutional Neural Networks", 2016): F(4x4, 3x3), each
// 4x4 block of outputs from a 6x6 input tile with 36 products per channel
// and filter instead of 144 (F(2x2, 3x3), 16 instead of 36, for images
// under 4 pixels a side). oneDNN's Winograd (also F(4x4, 3x3), conv2d.h)
// needs 32 channels and many pixels to win and lost to the direct kernels
// with 16 channels (0.69-0.80x at 7x7-14x14): its blocked-layout reorders
// and transforms, built for wide layers, cost more than the products they
// save. Here the transforms run on NHWC rows a 16-channel vector at a
// time, and the products are small register-blocked GEMMs per transform
// position: measured against the direct kernels in docs/performance.md.
//
// Forward: y = A^T [(G g G^T) . (B^T d B)] A per tile. The input's gradient
// is the same convolution of dL/dy with the kernel flipped and its channels
// and filters swapped. The kernel's gradient sums, over every tile,
// (B^T d B) . (A dy A^T) per transform position and channel x filter, then
// maps the sum back once: G^T [sum] G.
//
// Rounding: the forward and the input gradient differ from a direct sum in
// the last bits, of the same order; the kernel gradient sums transformed
// terms whose coefficients reach 1,600 and rounds to about 1e-5 of the
// gradient (tests/conv2d_test.cc and the TF.js goldens hold each to its
// tolerance).
//
// Thread-safety: the functions share nothing but `scratch`, the caller's
// (one call at a time per scratch), and UseTile's setting; each splits its
// tiles over the compute threads (threads.h). Failure: none; callers check
// Applies() first.
#pragma once

#include <cstdint>
#include <vector>

#include "services/tensor/conv2d.h"

namespace tfjob::winograd {

// 3x3 kernel, stride 1, one pixel of padding a side with the output the
// input's size ("same"), 16 or 32 channels and filters, a CPU with
// AVX-512F.
bool Applies(const Conv2DGeometry& g);

// y [batch, h, w, filters] = conv(x, kernel) + bias (bias may be null), then
// max(0, .) when `relu`; NHWC activations, an HWIO kernel, as DirectConv2D.
void Forward(const Conv2DGeometry& g, const float* x, const float* kernel, const float* bias, bool relu, float* y,
             std::vector<float>& scratch);

// The output block a tile computes for `g`: 4 (F(4x4, 3x3): 36 products
// per channel and filter for 16 outputs, 2.25 an output), or 2 (F(2x2,
// 3x3): 16 for 4, 4 an output) for images under 4 pixels a side. 4x4
// tiles won even where a third of them lies past the image (14x14, 7x7).
int Tile(const Conv2DGeometry& g);
// Forces the tile (2 or 4; 0: as Tile() says) for tests and bench/conv.cc.
void UseTile(int m);

// dx [batch, h, w, channels] (overwritten) from dL/dy and the kernel.
void BackwardData(const Conv2DGeometry& g, const float* dy, const float* kernel, float* dx,
                  std::vector<float>& scratch);

// dkernel (HWIO) and dbias (may be null), overwritten, from x and dL/dy.
void BackwardWeights(const Conv2DGeometry& g, const float* x, const float* dy, float* dkernel, float* dbias,
                     std::vector<float>& scratch);

}  // namespace tfjob::winograd

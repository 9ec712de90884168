// BatchNormalization's host passes over a row-major [rows, channels] block
// (services/model/normalization.cc): the batch's moments, the normalization
// (with a fused ReLU), and the two backward passes.
//
// Each pass is one contiguous walk over the rows, split across the compute
// threads (threads.h) above 64 Ki elements; sums are float partials of 64
// rows folded into double in row order, so results do not depend on the
// thread count. Thread-safety: no state; callers own the buffers. Failure:
// none (shapes are the caller's).
#pragma once

#include <cstdint>

#include "services/tensor/eigen.h"

namespace tfjob::model::internal {

using Array = Eigen::Array<float, 1, Eigen::Dynamic>;

// The batch's mean and biased variance per channel (two passes: the
// variance of x - mean, not E[x^2] - mean^2, which cancels).
void BatchMoments(const float* x, int64_t rows, int64_t c, Array& mean, Array& var);

// y = (x - shift) * scale * gamma + beta, row by row (the parenthesized
// part is x-hat; the backward makes it again from x rather than keep it),
// then max(0, y) with `relu` (a ReLU fused into the layer).
void Normalize(const float* x, int64_t rows, int64_t c, const Array& shift, const Array& scale, const Array& gamma,
               const Array& beta, bool relu, float* y);

// dgamma = the sum over rows of dy * x-hat, dbeta = that of dy, x-hat being
// (x - shift) * inv. With `y` (the output of a fused ReLU; null otherwise)
// dy is first the ReLU's input gradient, dL/dy where y > 0, written into dy.
void GradientSums(float* dy, const float* x, const float* y, int64_t rows, int64_t c, const Array& shift,
                  const Array& inv, Array& dgamma, Array& dbeta);

// dL/dx in place of dy: inv * (dy * gamma - mean_dxhat - x-hat *
// mean_dxhat_xhat), per element from dy, x and per-channel constants.
void InputGradient(float* dy, const float* x, int64_t rows, int64_t c, const Array& gamma, const Array& mean_dxhat,
                   const Array& mean_dxhat_xhat, const Array& shift, const Array& inv);

}  // namespace tfjob::model::internal

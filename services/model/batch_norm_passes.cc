#include "services/model/batch_norm_passes.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>
#include <vector>

#include "services/tensor/threads.h"

namespace tfjob::model::internal {
namespace {

// BatchNormalization's host passes over a row-major [rows, channels] block,
// each one contiguous walk: Eigen's colwise() reductions over a row-major
// map walk it once per channel with a stride of the channel count, which
// made the layer cost more than the convolution before it (residual CNN,
// stem_bn forward 0.029 s against stem_conv's 0.020 s). Each pass splits
// its rows across the compute threads above kParallel elements.
constexpr int64_t kParallel = int64_t{1} << 16;
// Sums are float partials of kStatRows rows, folded into double in block
// order: a batch of 10^5 rows keeps float's precision, and the result does
// not depend on the thread count.
constexpr int64_t kStatRows = 64;

bool SplitAcrossThreads(int64_t rows, int64_t c) { return ComputeThreads() > 1 && rows * c >= kParallel; }

// Sixteen floats, one AVX-512 register (two AVX ones): with 16, 32 or 64
// channels a row is one, two or four of them, and the passes below keep
// their per-channel sums in registers across rows. Their generic loops
// (any channel count) add each row into sums in memory, and every row then
// waited for the last one's store: 11 cycles a row, the residual CNN's
// BatchNormalization layers 12 % of its step for 2 % of its arithmetic.
using V16 = float __attribute__((vector_size(64)));
inline V16 Load16(const float* p) {
  V16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void Store16(float* p, const V16& v) { std::memcpy(p, &v, sizeof v); }

// Calls f(std::integral_constant<int, vectors a row>) for 16, 32 or 64
// channels and says whether it did.
template <typename F>
bool WithVectorRows(int64_t c, F f) {
  switch (c) {
    case 16: f(std::integral_constant<int, 1>{}); return true;
    case 32: f(std::integral_constant<int, 2>{}); return true;
    case 64: f(std::integral_constant<int, 4>{}); return true;
    default: return false;
  }
}

// out[k][ch] = the sum over rows of what block(begin, end, part) adds for
// rows [begin, end) into part[k][ch] (zeros before, float), one call per
// kStatRows rows; the rows' partials are folded in double in block order.
template <int kSums, typename BlockTerms>
void ChannelSums(int64_t rows, int64_t c, BlockTerms block, std::array<std::vector<double>, kSums>& out) {
  const int64_t blocks = (rows + kStatRows - 1) / kStatRows;
  std::vector<float> partials(static_cast<size_t>(blocks * kSums * c), 0.f);
  UseComputeThreadsHere();
#pragma omp parallel for num_threads(ComputeThreads()) if (SplitAcrossThreads(rows, c))
  for (int64_t blk = 0; blk < blocks; ++blk) {
    std::array<float*, kSums> part;
    for (int k = 0; k < kSums; ++k) part[k] = partials.data() + (blk * kSums + k) * c;
    block(blk * kStatRows, std::min(rows, (blk + 1) * kStatRows), part);
  }
  for (int k = 0; k < kSums; ++k) out[k].assign(c, 0.0);
  for (int64_t blk = 0; blk < blocks; ++blk) {
    for (int k = 0; k < kSums; ++k) {
      const float* part = partials.data() + (blk * kSums + k) * c;
      for (int64_t ch = 0; ch < c; ++ch) out[k][ch] += part[ch];
    }
  }
}

// sums / n as float (an empty batch's sums are zeros, and so its moments).
Array Divided(const std::vector<double>& sums, int64_t n) {
  Array a(static_cast<Eigen::Index>(sums.size()));
  for (size_t ch = 0; ch < sums.size(); ++ch) a[ch] = static_cast<float>(sums[ch] / std::max<int64_t>(n, 1));
  return a;
}

// Per channel, the sum over rows of x, or with kSquared of (x - center)^2.
template <bool kSquared>
std::vector<double> RowSums(const float* x, int64_t rows, int64_t c, const float* center) {
  std::array<std::vector<double>, 1> sums;
  const bool vectors = WithVectorRows(c, [&](auto nv) {
    constexpr int kV = decltype(nv)::value;
    ChannelSums<1>(
        rows, c,
        [&](int64_t begin, int64_t end, const std::array<float*, 1>& part) {
          V16 acc[kV] = {}, ctr[kV] = {};
          if constexpr (kSquared) {
            for (int v = 0; v < kV; ++v) ctr[v] = Load16(center + 16 * v);
          }
          for (int64_t r = begin; r < end; ++r) {
            for (int v = 0; v < kV; ++v) {
              const V16 d = Load16(x + r * c + 16 * v) - ctr[v];
              if constexpr (kSquared) {
                acc[v] += d * d;
              } else {
                acc[v] += d;
              }
            }
          }
          for (int v = 0; v < kV; ++v) Store16(part[0] + 16 * v, acc[v]);
        },
        sums);
  });
  if (vectors) return std::move(sums[0]);
  ChannelSums<1>(
      rows, c,
      [&](int64_t begin, int64_t end, const std::array<float*, 1>& part) {
        for (int64_t r = begin; r < end; ++r) {
          const float* __restrict row = x + r * c;
          float* __restrict s = part[0];
#pragma omp simd
          for (int64_t ch = 0; ch < c; ++ch) {
            if constexpr (kSquared) {
              const float d = row[ch] - center[ch];
              s[ch] += d * d;
            } else {
              s[ch] += row[ch];
            }
          }
        }
      },
      sums);
  return std::move(sums[0]);
}

}  // namespace

// The batch's mean and biased variance per channel (two passes: the
// variance of x - mean, not E[x^2] - mean^2, which cancels).
void BatchMoments(const float* x, int64_t rows, int64_t c, Array& mean, Array& var) {
  mean = Divided(RowSums<false>(x, rows, c, nullptr), rows);
  var = Divided(RowSums<true>(x, rows, c, mean.data()), rows);
}

// y = (x - shift) * scale * gamma + beta, row by row (the parenthesized
// part is x-hat; the backward makes it again from x rather than keep it),
// then max(0, y) with `relu` (a ReLU fused into the layer).
void Normalize(const float* x, int64_t rows, int64_t c, const Array& shift, const Array& scale, const Array& gamma,
               const Array& beta, bool relu, float* y) {
  const float* __restrict sh = shift.data(), * __restrict sc = scale.data(), * __restrict g = gamma.data(), * __restrict b = beta.data();
  UseComputeThreadsHere();
  const bool vectors = WithVectorRows(c, [&](auto nv) {
    constexpr int kV = decltype(nv)::value;
    V16 vsh[kV], vsc[kV], vg[kV], vb[kV];
    for (int v = 0; v < kV; ++v) {
      vsh[v] = Load16(sh + 16 * v), vsc[v] = Load16(sc + 16 * v), vg[v] = Load16(g + 16 * v),
      vb[v] = Load16(b + 16 * v);
    }
#pragma omp parallel for num_threads(ComputeThreads()) if (SplitAcrossThreads(rows, c))
    for (int64_t r = 0; r < rows; ++r) {
      for (int v = 0; v < kV; ++v) {
        V16 out = (Load16(x + r * c + 16 * v) - vsh[v]) * vsc[v] * vg[v] + vb[v];
        if (relu) out = out > V16{} ? out : V16{};
        Store16(y + r * c + 16 * v, out);
      }
    }
  });
  if (vectors) return;
#pragma omp parallel for num_threads(ComputeThreads()) if (SplitAcrossThreads(rows, c))
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict xr = x + r * c;
    float* __restrict yr = y + r * c;
#pragma omp simd
    for (int64_t ch = 0; ch < c; ++ch) {
      const float out = (xr[ch] - sh[ch]) * sc[ch] * g[ch] + b[ch];
      yr[ch] = relu ? std::max(out, 0.f) : out;
    }
  }
}

void GradientSums(float* dy, const float* x, const float* y, int64_t rows, int64_t c, const Array& shift,
                  const Array& inv, Array& dgamma, Array& dbeta) {
  std::array<std::vector<double>, 2> sums;
  const bool relu = y != nullptr;
  const bool vectors = WithVectorRows(c, [&](auto nv) {
    constexpr int kV = decltype(nv)::value;
    ChannelSums<2>(
        rows, c,
        [&, d = dy](int64_t begin, int64_t end, const std::array<float*, 2>& part) {
          V16 sdh[kV] = {}, sd[kV] = {}, sh[kV], sc[kV];
          for (int v = 0; v < kV; ++v) sh[v] = Load16(shift.data() + 16 * v), sc[v] = Load16(inv.data() + 16 * v);
          for (int64_t r = begin; r < end; ++r) {
            for (int v = 0; v < kV; ++v) {
              V16 dr = Load16(d + r * c + 16 * v);
              if (relu) {
                dr = Load16(y + r * c + 16 * v) > V16{} ? dr : V16{};
                Store16(d + r * c + 16 * v, dr);
              }
              sdh[v] += dr * ((Load16(x + r * c + 16 * v) - sh[v]) * sc[v]);
              sd[v] += dr;
            }
          }
          for (int v = 0; v < kV; ++v) Store16(part[0] + 16 * v, sdh[v]), Store16(part[1] + 16 * v, sd[v]);
        },
        sums);
  });
  if (!vectors) {
    ChannelSums<2>(
        rows, c,
        [&, d = dy](int64_t begin, int64_t end, const std::array<float*, 2>& part) {
          for (int64_t r = begin; r < end; ++r) {
            float* __restrict dr = d + r * c;
            const float* __restrict xr = x + r * c;
            const float* __restrict sh = shift.data(), * __restrict sc = inv.data();
            float* __restrict sdh = part[0], * __restrict sd = part[1];
            if (relu) {
              const float* __restrict yr = y + r * c;
              for (int64_t ch = 0; ch < c; ++ch) dr[ch] = yr[ch] > 0 ? dr[ch] : 0.f;
            }
#pragma omp simd
            for (int64_t ch = 0; ch < c; ++ch) {
              sdh[ch] += dr[ch] * ((xr[ch] - sh[ch]) * sc[ch]);
              sd[ch] += dr[ch];
            }
          }
        },
        sums);
  }
  dgamma = Divided(sums[0], 1);
  dbeta = Divided(sums[1], 1);
}

void InputGradient(float* dy, const float* x, int64_t rows, int64_t c, const Array& gamma, const Array& mean_dxhat,
                   const Array& mean_dxhat_xhat, const Array& shift, const Array& inv) {
  // In place: each element of dx comes from the same element of dy and
  // x-hat, and per-channel constants.
  const float *__restrict gm = gamma.data(), *__restrict md = mean_dxhat.data(),
                       *__restrict mdh = mean_dxhat_xhat.data(), *__restrict iv = inv.data(),
                       *__restrict sh = shift.data();
  UseComputeThreadsHere();
  const bool vector_rows = WithVectorRows(c, [&](auto nv) {
    constexpr int kV = decltype(nv)::value;
    V16 vgm[kV], vmd[kV], vmdh[kV], vinv[kV], vsh[kV];
    for (int v = 0; v < kV; ++v) {
      vgm[v] = Load16(gm + 16 * v), vmd[v] = Load16(md + 16 * v), vmdh[v] = Load16(mdh + 16 * v);
      vinv[v] = Load16(iv + 16 * v), vsh[v] = Load16(sh + 16 * v);
    }
#pragma omp parallel for num_threads(ComputeThreads()) if (SplitAcrossThreads(rows, c))
    for (int64_t r = 0; r < rows; ++r) {
      for (int v = 0; v < kV; ++v) {
        float* dr = dy + r * c + 16 * v;
        const V16 xhat = (Load16(x + r * c + 16 * v) - vsh[v]) * vinv[v];
        Store16(dr, ((Load16(dr) * vgm[v] - vmd[v]) - xhat * vmdh[v]) * vinv[v]);
      }
    }
  });
  if (vector_rows) return;
#pragma omp parallel for num_threads(ComputeThreads()) if (SplitAcrossThreads(rows, c))
  for (int64_t r = 0; r < rows; ++r) {
    float* __restrict dr = dy + r * c;
    const float* __restrict xr = x + r * c;
#pragma omp simd
    for (int64_t ch = 0; ch < c; ++ch) {
      dr[ch] = ((dr[ch] * gm[ch] - md[ch]) - ((xr[ch] - sh[ch]) * iv[ch]) * mdh[ch]) * iv[ch];
    }
  }
}

}  // namespace tfjob::model::internal

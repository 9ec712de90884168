#include "services/tensor/conv2d_small.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "services/tensor/conv2d_small_internal.h"
#include "services/tensor/precision.h"
#include "services/tensor/threads.h"

namespace tfjob::small_conv {

using internal::Input;
using internal::InputElements;
using internal::kMaxTaps;
using internal::Prepare;
using internal::RoundedToBfloat16;
using internal::TapOffsets;
using internal::ThreadsFor;

namespace {

// Output pixels per forward step: P x filters/16 FMA chains, at most 16
// accumulators (with the filter vectors and a broadcast beside them).
constexpr int PixelsFor(int nv) { return nv <= 2 ? 8 : 4; }

// Rows of the output, [row_begin, row_end) over batch x out_h.
struct ForwardArgs {
  const Conv2DGeometry* g;
  Input in;
  const float* kernel;     // HWIO: one row of `filters` per tap
  const int64_t* offsets;  // each tap's input offset from its pixel's
  int64_t taps;
  const float* bias;
  bool relu;
  float* y;
  // The outputs rounded to bfloat16 (ForwardMaxPool in bfloat16: the
  // windows' maxima and winners are then those of the rounded outputs a
  // MaxPooling2D apart would see, ties included).
  bool round_bf16 = false;
};

// x rounded to the nearest bfloat16 (ties to even), as RoundTo does; NaN
// stays as it is.
__attribute__((target("avx512f"))) inline __m512 RoundBfloat16(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_and_si512(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))),
                                     _mm512_set1_epi32(static_cast<int>(0xffff0000u)));
  return _mm512_mask_mov_ps(_mm512_castsi512_ps(r), _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

// The bias of filters [16v, 16v + 16), or zeros.
__attribute__((target("avx512f"))) inline __m512 BiasVector(const ForwardArgs& a, int v) {
  return a.bias ? _mm512_loadu_ps(a.bias + 16 * v) : _mm512_setzero_ps();
}

// Tap t's filter row as NV vectors, kept in registers: folded into each FMA
// instead, its loads (one per pixel and vector) bound the loop on load
// ports, not FMAs (perf annotate).
template <int NV>
__attribute__((target("avx512f"))) inline void LoadFilters(const ForwardArgs& a, int64_t t, __m512 (&wv)[NV]) {
  const float* w = a.kernel + t * a.g->filters;
  for (int v = 0; v < NV; ++v) {
    wv[v] = _mm512_loadu_ps(w + 16 * v);
    __asm__("" : "+v"(wv[v]));
  }
}

// P output pixels of one row from `x` (the first pixel's input) into `out`.
template <int NV, int P>
__attribute__((target("avx512f"))) inline void ForwardPixels(const ForwardArgs& a, const float* x, float* out) {
  const int64_t f_n = a.g->filters, step = a.g->channels * a.g->stride_w;  // from one pixel's input to the next's
  __m512 acc[P][NV];
  for (int v = 0; v < NV; ++v) {
    const __m512 init = BiasVector(a, v);
    for (int p = 0; p < P; ++p) acc[p][v] = init;
  }
  for (int64_t t = 0; t < a.taps; ++t) {
    const float* xt = x + a.offsets[t];
    __m512 wv[NV];
    LoadFilters<NV>(a, t, wv);
    for (int p = 0; p < P; ++p) {
      const __m512 xb = _mm512_set1_ps(xt[p * step]);
      for (int v = 0; v < NV; ++v) acc[p][v] = _mm512_fmadd_ps(xb, wv[v], acc[p][v]);
    }
  }
  if (a.round_bf16) {
    for (int p = 0; p < P; ++p)
      for (int v = 0; v < NV; ++v) acc[p][v] = RoundBfloat16(acc[p][v]);
  }
  if (a.relu) {
    const __m512 zero = _mm512_setzero_ps();
    for (int p = 0; p < P; ++p)
      for (int v = 0; v < NV; ++v) acc[p][v] = _mm512_max_ps(acc[p][v], zero);
  }
  for (int p = 0; p < P; ++p)
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(out + p * f_n + 16 * v, acc[p][v]);
}

// The first `cols` pixels of output row `oy` of image `b` into `out`.
template <int NV>
__attribute__((target("avx512f"))) inline void ForwardRow(const ForwardArgs& a, int64_t b, int64_t oy, int64_t cols,
                                                          float* out) {
  const int64_t c_n = a.g->channels, f_n = a.g->filters, step = c_n * a.g->stride_w;
  const float* x = a.in.x + (b * a.in.height + oy * a.g->stride_h) * a.in.width * c_n;
  constexpr int P = PixelsFor(NV);
  int64_t ox = 0;
  for (; ox + P <= cols; ox += P) ForwardPixels<NV, P>(a, x + ox * step, out + ox * f_n);
  // The rest in as few steps as fit: a step of one pixel is a chain of
  // dependent FMAs (latency-bound).
  if (P > 4 && ox + 4 <= cols) ForwardPixels<NV, 4>(a, x + ox * step, out + ox * f_n), ox += 4;
  if (ox + 2 <= cols) ForwardPixels<NV, 2>(a, x + ox * step, out + ox * f_n), ox += 2;
  for (; ox < cols; ++ox) ForwardPixels<NV, 1>(a, x + ox * step, out + ox * f_n);
}

template <int NV>
__attribute__((target("avx512f"))) void ForwardRows(const ForwardArgs& a, int64_t row_begin, int64_t row_end) {
  const Conv2DGeometry& g = *a.g;
  for (int64_t r = row_begin; r < row_end; ++r) {
    ForwardRow<NV>(a, r / g.out_h, r % g.out_h, g.out_w, a.y + r * g.out_w * g.filters);
  }
}

// Pooled rows [row_begin, row_end) over batch x out_h / pool_h: each
// window's pool_h convolution rows go to `buf` (one thread's, pool_h x
// pooled columns x filters: it stays in L1/L2), then their maximum and
// its tap to the pooled output. Taps are taken in (ky, kx) order and only
// a strictly greater value replaces the best, so the first tap holding the
// maximum wins, as MaxPooling2D's gradient goes in TF.
struct PoolArgs {
  int64_t pool_h, pool_w;
  float* pooled;
  uint8_t* winners;
};

template <int NV>
__attribute__((target("avx512f"))) void ForwardPoolRows(const ForwardArgs& a, const PoolArgs& p, float* buf,
                                                        int64_t row_begin, int64_t row_end) {
  const Conv2DGeometry& g = *a.g;
  const int64_t f_n = g.filters, pooled_h = g.out_h / p.pool_h, pooled_w = g.out_w / p.pool_w;
  const int64_t cols = pooled_w * p.pool_w;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t b = r / pooled_h, py = r % pooled_h;
    for (int64_t ky = 0; ky < p.pool_h; ++ky) ForwardRow<NV>(a, b, py * p.pool_h + ky, cols, buf + ky * cols * f_n);
    float* out = p.pooled + r * pooled_w * f_n;
    uint8_t* win = p.winners + r * pooled_w * f_n;
    for (int64_t px = 0; px < pooled_w; ++px) {
      for (int v = 0; v < NV; ++v) {
        const float* first = buf + px * p.pool_w * f_n + 16 * v;
        __m512 best = _mm512_loadu_ps(first);
        __m512i tap = _mm512_setzero_si512();
        for (int64_t ky = 0; ky < p.pool_h; ++ky) {
          for (int64_t kx = ky == 0 ? 1 : 0; kx < p.pool_w; ++kx) {
            const __m512 value = _mm512_loadu_ps(first + (ky * cols + kx) * f_n);
            const __mmask16 greater = _mm512_cmp_ps_mask(value, best, _CMP_GT_OQ);
            best = _mm512_mask_mov_ps(best, greater, value);
            tap = _mm512_mask_mov_epi32(tap, greater, _mm512_set1_epi32(static_cast<int>(ky * p.pool_w + kx)));
          }
        }
        if (a.relu) {  // a maximum of 0: no tap's ReLU passes a gradient
          tap = _mm512_mask_mov_epi32(tap, _mm512_cmp_ps_mask(best, _mm512_setzero_ps(), _CMP_LE_OQ),
                                      _mm512_set1_epi32(small_conv::kNoWinner));
        }
        _mm512_storeu_ps(out + px * f_n + 16 * v, best);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(win + px * f_n + 16 * v), _mm512_cvtepi32_epi8(tap));
      }
    }
  }
}

// Keras' default pooling, 2 x 2: W windows side by side, their 2 x 2W
// convolution pixels in registers (2 x 2W x NV accumulators), then each
// window's maximum and winner straight from them: no row buffer, and a
// step's FMA chains span both rows of the windows.
template <int NV, int W>
__attribute__((target("avx512f"))) inline void ForwardWindows2x2(const ForwardArgs& a, const float* x, float* out,
                                                                 uint8_t* win) {
  constexpr int C = 2 * W;
  const int64_t c_n = a.g->channels, f_n = a.g->filters, below = a.in.width * c_n;
  __m512 acc[2][C][NV];
  for (int v = 0; v < NV; ++v) {
    const __m512 init = BiasVector(a, v);
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < C; ++c) acc[r][c][v] = init;
  }
  for (int64_t t = 0; t < a.taps; ++t) {
    const float* xt = x + a.offsets[t];
    __m512 wv[NV];
    LoadFilters<NV>(a, t, wv);
    for (int r = 0; r < 2; ++r) {
      for (int c = 0; c < C; ++c) {
        const __m512 xb = _mm512_set1_ps(xt[r * below + c * c_n]);
        for (int v = 0; v < NV; ++v) acc[r][c][v] = _mm512_fmadd_ps(xb, wv[v], acc[r][c][v]);
      }
    }
  }
  const __m512 zero = _mm512_setzero_ps();
  for (int k = 0; k < W; ++k) {
    for (int v = 0; v < NV; ++v) {
      // Taps in (ky, kx) order; only a strictly greater value wins.
      __m512 value[4] = {acc[0][2 * k][v], acc[0][2 * k + 1][v], acc[1][2 * k][v], acc[1][2 * k + 1][v]};
      if (a.round_bf16)
        for (__m512& e : value) e = RoundBfloat16(e);
      if (a.relu)
        for (__m512& e : value) e = _mm512_max_ps(e, zero);
      __m512 best = value[0];
      __m512i tap = _mm512_setzero_si512();
      for (int t = 1; t < 4; ++t) {
        const __mmask16 greater = _mm512_cmp_ps_mask(value[t], best, _CMP_GT_OQ);
        best = _mm512_mask_mov_ps(best, greater, value[t]);
        tap = _mm512_mask_mov_epi32(tap, greater, _mm512_set1_epi32(t));
      }
      if (a.relu) {
        tap = _mm512_mask_mov_epi32(tap, _mm512_cmp_ps_mask(best, zero, _CMP_LE_OQ),
                                    _mm512_set1_epi32(small_conv::kNoWinner));
      }
      _mm512_storeu_ps(out + k * f_n + 16 * v, best);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(win + k * f_n + 16 * v), _mm512_cvtepi32_epi8(tap));
    }
  }
}

// Windows per ForwardWindows2x2 step: 2 x 2W x NV accumulators, at most 16.
constexpr int WindowsFor(int nv) { return nv == 1 ? 4 : nv == 2 ? 2 : 1; }

template <int NV>
__attribute__((target("avx512f"))) void ForwardPoolRows2x2(const ForwardArgs& a, const PoolArgs& p, float*,
                                                           int64_t row_begin, int64_t row_end) {
  const Conv2DGeometry& g = *a.g;
  const int64_t c_n = g.channels, f_n = g.filters, pooled_h = g.out_h / 2, pooled_w = g.out_w / 2;
  constexpr int W = WindowsFor(NV);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t b = r / pooled_h, py = r % pooled_h;
    const float* x = a.in.x + (b * a.in.height + 2 * py) * a.in.width * c_n;
    float* out = p.pooled + r * pooled_w * f_n;
    uint8_t* win = p.winners + r * pooled_w * f_n;
    int64_t px = 0;
    for (; px + W <= pooled_w; px += W) ForwardWindows2x2<NV, W>(a, x + 2 * px * c_n, out + px * f_n, win + px * f_n);
    for (; px < pooled_w; ++px) ForwardWindows2x2<NV, 1>(a, x + 2 * px * c_n, out + px * f_n, win + px * f_n);
  }
}

// MaxPoolGradient's rows [row_begin, row_end) over batch x out_h: per
// position, the pooled gradient where the window's winner is this tap (and,
// with relu, its maximum is positive), else 0.
struct PoolGradientArgs {
  const Conv2DGeometry* g;
  int64_t pool_h, pool_w;
  const uint8_t* winners;
  const float* dpooled;
  float* dy;
};

template <int NV>
__attribute__((target("avx512f"))) void GradientRows(const PoolGradientArgs& a, int64_t row_begin, int64_t row_end) {
  const Conv2DGeometry& g = *a.g;
  const int64_t f_n = g.filters, pooled_h = g.out_h / a.pool_h, pooled_w = g.out_w / a.pool_w;
  const int64_t cols = pooled_w * a.pool_w;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t b = r / g.out_h, oy = r % g.out_h, py = oy / a.pool_h, ky = oy % a.pool_h;
    float* row = a.dy + r * g.out_w * f_n;
    if (py >= pooled_h) {  // below the last window: no gradient
      std::fill(row, row + g.out_w * f_n, 0.f);
      continue;
    }
    const int64_t at = (b * pooled_h + py) * pooled_w * f_n;
    for (int64_t px = 0; px < pooled_w; ++px) {
      __m512 grad[NV];
      __m512i win[NV];
      for (int v = 0; v < NV; ++v) {
        const int64_t i = at + px * f_n + 16 * v;
        grad[v] = _mm512_loadu_ps(a.dpooled + i);
        win[v] = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a.winners + i)));
      }
      for (int64_t kx = 0; kx < a.pool_w; ++kx) {
        const __m512i tap = _mm512_set1_epi32(static_cast<int>(ky * a.pool_w + kx));
        float* q = row + (px * a.pool_w + kx) * f_n;
        for (int v = 0; v < NV; ++v) {
          _mm512_storeu_ps(q + 16 * v, _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(win[v], tap), grad[v]));
        }
      }
    }
    std::fill(row + cols * f_n, row + g.out_w * f_n, 0.f);
  }
}

// f(thread, begin, end) on each of `threads` compute threads, [0, total)
// split evenly among those OpenMP gives.
template <typename F>
void SplitRows(int threads, int64_t total, F&& f) {
  UseComputeThreadsHere();
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int n = omp_get_num_threads(), i = omp_get_thread_num();
    f(i, total * i / n, total * (i + 1) / n);
  }
}

// The input rows and columns the outputs reach (from the first, padding
// included).
int64_t ReachH(const Conv2DGeometry& g) { return (g.out_h - 1) * g.stride_h + g.kernel_h; }
int64_t ReachW(const Conv2DGeometry& g) { return (g.out_w - 1) * g.stride_w + g.kernel_w; }

bool Padded(const Conv2DGeometry& g) {
  return g.pad_top != 0 || g.pad_left != 0 || ReachH(g) > g.height || ReachW(g) > g.width;
}

}  // namespace

namespace internal {

const float* RoundedToBfloat16(const float* from, int64_t n, float* to) {
  std::memcpy(to, from, static_cast<size_t>(n) * sizeof(float));
  RoundTo(Precision::kBfloat16, to, n);
  return to;
}

Input Prepare(const Conv2DGeometry& g, const float* x, bool round_bf16, float* buf) {
  if (!Padded(g) && !round_bf16) return {x, g.height, g.width};
  const int64_t hp = Padded(g) ? ReachH(g) : g.height;
  const int64_t wp = Padded(g) ? ReachW(g) : g.width;
  const int64_t c = g.channels;
  if (Padded(g)) {
    std::fill(buf, buf + g.batch * hp * wp * c, 0.f);
    for (int64_t b = 0; b < g.batch; ++b) {
      for (int64_t iy = 0; iy < g.height; ++iy) {
        const int64_t py = iy + g.pad_top;
        if (py >= hp) break;
        const int64_t cols = std::min(g.width, wp - g.pad_left);
        std::memcpy(buf + ((b * hp + py) * wp + g.pad_left) * c, x + (b * g.height + iy) * g.width * c,
                    static_cast<size_t>(cols * c) * sizeof(float));
      }
    }
  } else {
    std::memcpy(buf, x, static_cast<size_t>(g.batch * hp * wp * c) * sizeof(float));
  }
  if (round_bf16) RoundTo(Precision::kBfloat16, buf, g.batch * hp * wp * c);
  return {buf, hp, wp};
}

std::array<int64_t, kMaxTaps> TapOffsets(const Conv2DGeometry& g, const Input& in) {
  std::array<int64_t, kMaxTaps> offsets{};
  for (int64_t ky = 0, t = 0; ky < g.kernel_h; ++ky)
    for (int64_t kx = 0; kx < g.kernel_w; ++kx)
      for (int64_t c = 0; c < g.channels; ++c) offsets[t++] = (ky * in.width + kx) * g.channels + c;
  return offsets;
}

int64_t InputElements(const Conv2DGeometry& g) {
  return g.batch * std::max(ReachH(g), g.height) * std::max(ReachW(g), g.width) * g.channels;
}

int ThreadsFor(const Conv2DGeometry& g) {
  // Below about 2 MFLOP a thread's start costs more than it saves.
  const int64_t flops = 2 * g.batch * g.out_h * g.out_w * g.filters * g.kernel_h * g.kernel_w * g.channels;
  return flops >= (int64_t{1} << 21) ? std::max(1, ComputeThreads()) : 1;
}

}  // namespace internal

bool Applies(const Conv2DGeometry& g) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512 && g.stride_h >= 1 && g.stride_h <= 2 && g.stride_w >= 1 && g.stride_w <= 2 && g.filters % 16 == 0 &&
         g.filters >= 16 && g.filters <= 64 && g.kernel_h * g.kernel_w * g.channels <= kMaxTaps && g.batch > 0 &&
         g.out_h > 0 && g.out_w > 0;
}

void Forward(const Conv2DGeometry& g, const float* x, const float* kernel, const float* bias, bool relu,
             bool round_bf16, float* y, std::vector<float>& scratch) {
  const int64_t taps = g.kernel_h * g.kernel_w * g.channels;
  const int64_t in_n = Padded(g) || round_bf16 ? InputElements(g) : 0;  // a "valid" float32 input is read in place
  scratch.resize(static_cast<size_t>(in_n + (round_bf16 ? taps * g.filters : 0)));
  if (round_bf16) kernel = RoundedToBfloat16(kernel, taps * g.filters, scratch.data() + in_n);
  const Input in = Prepare(g, x, round_bf16, scratch.data());
  const std::array<int64_t, kMaxTaps> offsets = TapOffsets(g, in);
  const ForwardArgs a{&g, in, kernel, offsets.data(), taps, bias, relu, y};
  const int nv = static_cast<int>(g.filters / 16);
  const auto rows = nv == 1 ? &ForwardRows<1> : nv == 2 ? &ForwardRows<2> : nv == 3 ? &ForwardRows<3> : &ForwardRows<4>;
  const int64_t total = g.batch * g.out_h;
  const int threads = ThreadsFor(g);
  SplitRows(threads, total, [&](int, int64_t begin, int64_t end) { rows(a, begin, end); });
}

bool AppliesPooled(const Conv2DGeometry& g, int64_t pool_h, int64_t pool_w) {
  return Applies(g) && g.stride_h == 1 && g.stride_w == 1 && pool_h >= 1 && pool_w >= 1 &&
         pool_h * pool_w < kNoWinner && pool_h <= g.out_h && pool_w <= g.out_w;
}

void ForwardMaxPool(const Conv2DGeometry& g, const float* x, const float* kernel, const float* bias, bool relu,
                    bool round_bf16, int64_t pool_h, int64_t pool_w, float* pooled, uint8_t* winners,
                    std::vector<float>& scratch) {
  const int64_t taps = g.kernel_h * g.kernel_w * g.channels;
  const bool two = pool_h == 2 && pool_w == 2;  // in registers, no row buffer
  const int64_t pooled_h = g.out_h / pool_h, cols = g.out_w / pool_w * pool_w;
  const int64_t per_thread = two ? 0 : pool_h * cols * g.filters;
  const int threads = ThreadsFor(g);
  const int64_t in_n = Padded(g) || round_bf16 ? InputElements(g) : 0;
  const int64_t kernel_n = round_bf16 ? taps * g.filters : 0;
  scratch.resize(static_cast<size_t>(in_n + kernel_n + threads * per_thread));
  if (round_bf16) kernel = RoundedToBfloat16(kernel, kernel_n, scratch.data() + in_n);
  const Input in = Prepare(g, x, round_bf16, scratch.data());
  const std::array<int64_t, kMaxTaps> offsets = TapOffsets(g, in);
  const ForwardArgs a{&g, in, kernel, offsets.data(), taps, bias, relu, nullptr, round_bf16};
  const PoolArgs p{pool_h, pool_w, pooled, winners};
  const int nv = static_cast<int>(g.filters / 16);
  const auto rows = nv == 1   ? (two ? &ForwardPoolRows2x2<1> : &ForwardPoolRows<1>)
                    : nv == 2 ? (two ? &ForwardPoolRows2x2<2> : &ForwardPoolRows<2>)
                    : nv == 3 ? (two ? &ForwardPoolRows2x2<3> : &ForwardPoolRows<3>)
                              : (two ? &ForwardPoolRows2x2<4> : &ForwardPoolRows<4>);
  const int64_t total = g.batch * pooled_h;
  float* bufs = scratch.data() + in_n + kernel_n;
  SplitRows(threads, total, [&](int i, int64_t begin, int64_t end) { rows(a, p, bufs + i * per_thread, begin, end); });
}

void MaxPoolGradient(const Conv2DGeometry& g, int64_t pool_h, int64_t pool_w, const uint8_t* winners,
                     const float* dpooled, float* dy) {
  const int nv = static_cast<int>(g.filters / 16);
  const auto rows = nv == 1   ? &GradientRows<1>
                    : nv == 2 ? &GradientRows<2>
                    : nv == 3 ? &GradientRows<3>
                              : &GradientRows<4>;
  const PoolGradientArgs a{&g, pool_h, pool_w, winners, dpooled, dy};
  const int64_t total = g.batch * g.out_h;
  const int threads = ThreadsFor(g);
  SplitRows(threads, total, [&](int, int64_t begin, int64_t end) { rows(a, begin, end); });
}

}  // namespace tfjob::small_conv

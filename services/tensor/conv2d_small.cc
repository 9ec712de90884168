#include "services/tensor/conv2d_small.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "services/tensor/precision.h"
#include "services/tensor/threads.h"

namespace tfjob::small_conv {
namespace {

// The weight gradient keeps taps x filters/16 accumulators in registers
// (with dL/dy's vectors and a broadcast beside them, under AVX-512's 32):
// kernels with more taps take several passes over the pixels.
constexpr int kAccumulators = 20;
constexpr int64_t kMaxTaps = 32;
// Output pixels per forward step: P x filters/16 FMA chains, at most 16
// accumulators (with the filter vectors and a broadcast beside them).
constexpr int PixelsFor(int nv) { return nv <= 2 ? 8 : 4; }

// The (padded) input the kernels read: valid positions only.
struct Input {
  const float* x;
  int64_t height, width;  // of the (padded) input
};

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

// One pass of the weight gradient: taps [tap0, tap0 + G) (a tap is one
// (ky, kx, c)) over the images [b0, b1), written (not added) to dk (taps x
// filters) and, when db is set, the bias' gradient.
struct BackwardArgs {
  const Conv2DGeometry* g;
  Input in;
  const float* dy;
  const int64_t* offsets;  // each tap's input offset from its pixel's
  int64_t tap0;
  int64_t b0, b1;
  float* dk;
  float* db;
  // Pooled passes: dL/dy made per pixel from the pooled gradient and each
  // window's winner (ForwardMaxPool's), never stored.
  int64_t pool_h = 1, pool_w = 1;
  const uint8_t* winners = nullptr;
  const float* dpooled = nullptr;
};

template <int NV, int G, bool Pooled>
__attribute__((target("avx512f"))) void BackwardPass(const BackwardArgs& a) {
  const Conv2DGeometry& g = *a.g;
  const int64_t c_n = g.channels, f_n = g.filters;
  __m512 acc[G][NV], bias[NV];
  for (int v = 0; v < NV; ++v) {
    bias[v] = _mm512_setzero_ps();
    for (int t = 0; t < G; ++t) acc[t][v] = _mm512_setzero_ps();
  }
  int64_t off[G];
  for (int t = 0; t < G; ++t) off[t] = a.offsets[a.tap0 + t];
  // Pooled: only the rows and columns some window covers have a gradient.
  const int64_t pool_h = Pooled ? a.pool_h : 1, pool_w = Pooled ? a.pool_w : 1;
  const int64_t pooled_h = g.out_h / pool_h, pooled_w = g.out_w / pool_w;
  const int64_t rows = Pooled ? pooled_h * pool_h : g.out_h, cols = Pooled ? pooled_w * pool_w : g.out_w;
  for (int64_t b = a.b0; b < a.b1; ++b) {
    for (int64_t oy = 0; oy < rows; ++oy) {
      const float* xr = a.in.x + (b * a.in.height + oy * g.stride_h) * a.in.width * c_n;
      const float* d = a.dy + (b * g.out_h + oy) * g.out_w * f_n;
      const int64_t pooled_at = ((b * pooled_h + oy / pool_h) * pooled_w) * f_n;
      const int64_t ky = oy % pool_h;
      for (int64_t ox = 0; ox < cols; ++ox, xr += c_n * g.stride_w, d += f_n) {
        __m512 dv[NV];
        if constexpr (Pooled) {
          const int64_t at = pooled_at + (ox / pool_w) * f_n;
          const __m512i tap = _mm512_set1_epi32(static_cast<int>(ky * pool_w + ox % pool_w));
          for (int v = 0; v < NV; ++v) {
            const __m512i win =
                _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a.winners + at + 16 * v)));
            dv[v] = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(win, tap), _mm512_loadu_ps(a.dpooled + at + 16 * v));
          }
        } else {
          for (int v = 0; v < NV; ++v) dv[v] = _mm512_loadu_ps(d + 16 * v);
        }
        if (a.db) {
          for (int v = 0; v < NV; ++v) bias[v] = _mm512_add_ps(bias[v], dv[v]);
        }
        for (int t = 0; t < G; ++t) {
          const __m512 xb = _mm512_set1_ps(xr[off[t]]);
          for (int v = 0; v < NV; ++v) acc[t][v] = _mm512_fmadd_ps(xb, dv[v], acc[t][v]);
        }
      }
    }
  }
  for (int t = 0; t < G; ++t) {
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(a.dk + (a.tap0 + t) * f_n + 16 * v, acc[t][v]);
  }
  if (a.db) {
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(a.db + 16 * v, bias[v]);
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

using PassFn = void (*)(const BackwardArgs&);

constexpr int MaxGroup(int nv) { return kAccumulators / nv; }
// The pooled passes exist for 16 and 32 filters in groups of at most 10
// taps: each of these kernels is code in every binary (the GPU check's
// bundle has 62 MiB for all of them); wider layers store dL/dy instead.
constexpr int kPooledFilterVectors = 2;
constexpr int PooledGroup(int nv) { return std::min(MaxGroup(nv), 10); }

template <int NV, bool Pooled, int... G>
constexpr std::array<PassFn, sizeof...(G)> PassTable(std::integer_sequence<int, G...>) {
  return {&BackwardPass<NV, G + 1, Pooled>...};
}

// The pass for NV filter vectors and `taps` taps (1 <= taps <= MaxGroup(NV)).
PassFn PassFor(int nv, int64_t taps) {
  static constexpr auto t1 = PassTable<1, false>(std::make_integer_sequence<int, MaxGroup(1)>{});
  static constexpr auto t2 = PassTable<2, false>(std::make_integer_sequence<int, MaxGroup(2)>{});
  static constexpr auto t3 = PassTable<3, false>(std::make_integer_sequence<int, MaxGroup(3)>{});
  static constexpr auto t4 = PassTable<4, false>(std::make_integer_sequence<int, MaxGroup(4)>{});
  switch (nv) {
    case 1: return t1[taps - 1];
    case 2: return t2[taps - 1];
    case 3: return t3[taps - 1];
    default: return t4[taps - 1];
  }
}

// The same for the pooled passes (nv <= kPooledFilterVectors, taps <=
// PooledGroup(nv)).
PassFn PooledPassFor(int nv, int64_t taps) {
  static constexpr auto t1 = PassTable<1, true>(std::make_integer_sequence<int, PooledGroup(1)>{});
  static constexpr auto t2 = PassTable<2, true>(std::make_integer_sequence<int, PooledGroup(2)>{});
  return nv == 1 ? t1[taps - 1] : t2[taps - 1];
}

// The input rows and columns the outputs reach (from the first, padding
// included).
int64_t ReachH(const Conv2DGeometry& g) { return (g.out_h - 1) * g.stride_h + g.kernel_h; }
int64_t ReachW(const Conv2DGeometry& g) { return (g.out_w - 1) * g.stride_w + g.kernel_w; }

bool Padded(const Conv2DGeometry& g) {
  return g.pad_top != 0 || g.pad_left != 0 || ReachH(g) > g.height || ReachW(g) > g.width;
}

// The input as the kernels read it: x itself for "valid" float32, else a
// copy in `buf` (zero-padded for "same", rounded to bfloat16 when asked).
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

// Each tap's (ky, kx, c: HWIO's row order) input offset from its output
// pixel's first input.
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

}  // namespace

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
  float* kernel_copy = scratch.data() + in_n;
  if (round_bf16) {
    std::memcpy(kernel_copy, kernel, static_cast<size_t>(taps * g.filters) * sizeof(float));
    RoundTo(Precision::kBfloat16, kernel_copy, taps * g.filters);
    kernel = kernel_copy;
  }
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
  if (round_bf16) {
    float* kernel_copy = scratch.data() + in_n;
    std::memcpy(kernel_copy, kernel, static_cast<size_t>(kernel_n) * sizeof(float));
    RoundTo(Precision::kBfloat16, kernel_copy, kernel_n);
    kernel = kernel_copy;
  }
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

namespace {

// BackwardWeights' and BackwardWeightsPooled's passes: the batch split over
// the compute threads, each summing its images into its own partial
// dkernel and dbias, added up at the end.
struct PooledGradient {
  int64_t pool_h, pool_w;
  const uint8_t* winners;
  const float* dpooled;
};

void WeightGradient(const Conv2DGeometry& g, const Input& in, const float* dy, const PooledGradient* pool,
                    float* partial, int threads, float* dkernel, float* dbias) {
  const int64_t taps = g.kernel_h * g.kernel_w * g.channels;
  const int64_t per_thread = (taps + 1) * g.filters;
  const std::array<int64_t, kMaxTaps> offsets = TapOffsets(g, in);
  const int nv = static_cast<int>(g.filters / 16);
  const int64_t group = pool ? PooledGroup(nv) : MaxGroup(nv);
  UseComputeThreadsHere();
  int used = 1;  // OpenMP may give fewer threads than asked
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int n = omp_get_num_threads(), i = omp_get_thread_num();
    if (i == 0) used = n;
    float* dk = partial + i * per_thread;
    BackwardArgs a{&g, in, dy, offsets.data(), 0, g.batch * i / n, g.batch * (i + 1) / n, dk, dk + taps * g.filters};
    if (pool) a.pool_h = pool->pool_h, a.pool_w = pool->pool_w, a.winners = pool->winners, a.dpooled = pool->dpooled;
    for (a.tap0 = 0; a.tap0 < taps; a.tap0 += group) {
      const int64_t count = std::min(group, taps - a.tap0);
      (pool ? PooledPassFor(nv, count) : PassFor(nv, count))(a);
      a.db = nullptr;  // the first pass summed it
    }
  }
  std::memcpy(dkernel, partial, static_cast<size_t>(taps * g.filters) * sizeof(float));
  if (dbias) std::memcpy(dbias, partial + taps * g.filters, static_cast<size_t>(g.filters) * sizeof(float));
  for (int i = 1; i < used; ++i) {
    const float* p = partial + i * per_thread;
    for (int64_t j = 0; j < taps * g.filters; ++j) dkernel[j] += p[j];
    if (dbias)
      for (int64_t j = 0; j < g.filters; ++j) dbias[j] += p[taps * g.filters + j];
  }
}

}  // namespace

void BackwardWeights(const Conv2DGeometry& g, const float* x, const float* dy, bool round_bf16, float* dkernel,
                     float* dbias, std::vector<float>& scratch) {
  const int64_t taps = g.kernel_h * g.kernel_w * g.channels, dy_n = g.batch * g.out_h * g.out_w * g.filters;
  const int threads = ThreadsFor(g);
  const int64_t in_n = InputElements(g);
  scratch.resize(static_cast<size_t>(in_n + (round_bf16 ? dy_n : 0) + threads * (taps + 1) * g.filters));
  const Input in = Prepare(g, x, round_bf16, scratch.data());
  if (round_bf16) {
    float* d = scratch.data() + in_n;
    std::memcpy(d, dy, static_cast<size_t>(dy_n) * sizeof(float));
    RoundTo(Precision::kBfloat16, d, dy_n);
    dy = d;
  }
  WeightGradient(g, in, dy, nullptr, scratch.data() + in_n + (round_bf16 ? dy_n : 0), threads, dkernel, dbias);
}

bool AppliesPooledBackward(const Conv2DGeometry& g, int64_t pool_h, int64_t pool_w) {
  return AppliesPooled(g, pool_h, pool_w) && g.filters <= 16 * kPooledFilterVectors;
}

void BackwardWeightsPooled(const Conv2DGeometry& g, int64_t pool_h, int64_t pool_w, const float* x,
                           const uint8_t* winners, const float* dpooled, bool round_bf16, float* dkernel, float* dbias,
                           std::vector<float>& scratch) {
  const int64_t taps = g.kernel_h * g.kernel_w * g.channels;
  const int64_t dpooled_n = round_bf16 ? g.batch * (g.out_h / pool_h) * (g.out_w / pool_w) * g.filters : 0;
  const int threads = ThreadsFor(g);
  const int64_t in_n = InputElements(g);
  scratch.resize(static_cast<size_t>(in_n + dpooled_n + threads * (taps + 1) * g.filters));
  const Input in = Prepare(g, x, round_bf16, scratch.data());
  if (round_bf16) {
    float* d = scratch.data() + in_n;
    std::memcpy(d, dpooled, static_cast<size_t>(dpooled_n) * sizeof(float));
    RoundTo(Precision::kBfloat16, d, dpooled_n);
    dpooled = d;
  }
  const PooledGradient pool{pool_h, pool_w, winners, dpooled};
  WeightGradient(g, in, nullptr, &pool, scratch.data() + in_n + dpooled_n, threads, dkernel, dbias);
}

}  // namespace tfjob::small_conv

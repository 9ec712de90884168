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
constexpr int kPixels = 4;  // output pixels per forward step: 4 x filters/16 FMA chains

// The (padded) input the kernels read: valid positions only, stride 1.
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
};

// P output pixels of one row from `x` (the first pixel's input) into `out`.
template <int NV, int P>
__attribute__((target("avx512f"))) inline void ForwardPixels(const ForwardArgs& a, const float* x, float* out) {
  const int64_t c_n = a.g->channels, f_n = a.g->filters;
  __m512 acc[P][NV];
  for (int v = 0; v < NV; ++v) {
    const __m512 init = a.bias ? _mm512_loadu_ps(a.bias + 16 * v) : _mm512_setzero_ps();
    for (int p = 0; p < P; ++p) acc[p][v] = init;
  }
  for (int64_t t = 0; t < a.taps; ++t) {
    const float* w = a.kernel + t * f_n;
    const float* xt = x + a.offsets[t];
    __m512 wv[NV];
    for (int v = 0; v < NV; ++v) wv[v] = _mm512_loadu_ps(w + 16 * v);
    for (int p = 0; p < P; ++p) {
      const __m512 xb = _mm512_set1_ps(xt[p * c_n]);
      for (int v = 0; v < NV; ++v) acc[p][v] = _mm512_fmadd_ps(xb, wv[v], acc[p][v]);
    }
  }
  const __m512 zero = _mm512_setzero_ps();
  for (int p = 0; p < P; ++p) {
    for (int v = 0; v < NV; ++v) {
      _mm512_storeu_ps(out + p * f_n + 16 * v, a.relu ? _mm512_max_ps(acc[p][v], zero) : acc[p][v]);
    }
  }
}

template <int NV>
__attribute__((target("avx512f"))) void ForwardRows(const ForwardArgs& a, int64_t row_begin, int64_t row_end) {
  const Conv2DGeometry& g = *a.g;
  const int64_t c_n = g.channels, f_n = g.filters;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t b = r / g.out_h, oy = r % g.out_h;
    const float* x = a.in.x + (b * a.in.height + oy) * a.in.width * c_n;
    float* out = a.y + r * g.out_w * f_n;
    int64_t ox = 0;
    for (; ox + kPixels <= g.out_w; ox += kPixels) {
      ForwardPixels<NV, kPixels>(a, x + ox * c_n, out + ox * f_n);
    }
    for (; ox < g.out_w; ++ox) ForwardPixels<NV, 1>(a, x + ox * c_n, out + ox * f_n);
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
};

template <int NV, int G>
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
  for (int64_t b = a.b0; b < a.b1; ++b) {
    for (int64_t oy = 0; oy < g.out_h; ++oy) {
      const float* xr = a.in.x + (b * a.in.height + oy) * a.in.width * c_n;
      const float* d = a.dy + (b * g.out_h + oy) * g.out_w * f_n;
      for (int64_t ox = 0; ox < g.out_w; ++ox, xr += c_n, d += f_n) {
        __m512 dv[NV];
        for (int v = 0; v < NV; ++v) {
          dv[v] = _mm512_loadu_ps(d + 16 * v);
          if (a.db) bias[v] = _mm512_add_ps(bias[v], dv[v]);
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

using PassFn = void (*)(const BackwardArgs&);

constexpr int MaxGroup(int nv) { return kAccumulators / nv; }

template <int NV, int... G>
constexpr std::array<PassFn, sizeof...(G)> PassTable(std::integer_sequence<int, G...>) {
  return {&BackwardPass<NV, G + 1>...};
}

// The pass for NV filter vectors and `taps` taps (1 <= taps <= MaxGroup(NV)).
PassFn PassFor(int nv, int64_t taps) {
  static constexpr auto t1 = PassTable<1>(std::make_integer_sequence<int, MaxGroup(1)>{});
  static constexpr auto t2 = PassTable<2>(std::make_integer_sequence<int, MaxGroup(2)>{});
  static constexpr auto t3 = PassTable<3>(std::make_integer_sequence<int, MaxGroup(3)>{});
  static constexpr auto t4 = PassTable<4>(std::make_integer_sequence<int, MaxGroup(4)>{});
  switch (nv) {
    case 1: return t1[taps - 1];
    case 2: return t2[taps - 1];
    case 3: return t3[taps - 1];
    default: return t4[taps - 1];
  }
}

bool Padded(const Conv2DGeometry& g) {
  return g.pad_top != 0 || g.pad_left != 0 || g.out_h + g.kernel_h - 1 > g.height || g.out_w + g.kernel_w - 1 > g.width;
}

// The input as the kernels read it: x itself for "valid" float32, else a
// copy in `buf` (zero-padded for "same", rounded to bfloat16 when asked).
Input Prepare(const Conv2DGeometry& g, const float* x, bool round_bf16, float* buf) {
  if (!Padded(g) && !round_bf16) return {x, g.height, g.width};
  const int64_t hp = Padded(g) ? g.out_h + g.kernel_h - 1 : g.height;
  const int64_t wp = Padded(g) ? g.out_w + g.kernel_w - 1 : g.width;
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
  return g.batch * std::max(g.out_h + g.kernel_h - 1, g.height) * std::max(g.out_w + g.kernel_w - 1, g.width) *
         g.channels;
}

int ThreadsFor(const Conv2DGeometry& g) {
  // Below about 2 MFLOP a thread's start costs more than it saves.
  const int64_t flops = 2 * g.batch * g.out_h * g.out_w * g.filters * g.kernel_h * g.kernel_w * g.channels;
  return flops >= (int64_t{1} << 21) ? std::max(1, ComputeThreads()) : 1;
}

}  // namespace

bool Applies(const Conv2DGeometry& g) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512 && g.stride_h == 1 && g.stride_w == 1 && g.filters % 16 == 0 && g.filters >= 16 && g.filters <= 64 &&
         g.kernel_h * g.kernel_w * g.channels <= kMaxTaps && g.batch > 0 && g.out_h > 0 && g.out_w > 0;
}

void Forward(const Conv2DGeometry& g, const float* x, const float* kernel, const float* bias, bool relu,
             bool round_bf16, float* y, std::vector<float>& scratch) {
  const int64_t taps = g.kernel_h * g.kernel_w * g.channels;
  scratch.resize(static_cast<size_t>(InputElements(g) + taps * g.filters));
  float* kernel_copy = scratch.data() + InputElements(g);
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
  UseComputeThreadsHere();
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int n = omp_get_num_threads(), i = omp_get_thread_num();
    rows(a, total * i / n, total * (i + 1) / n);
  }
}

void BackwardWeights(const Conv2DGeometry& g, const float* x, const float* dy, bool round_bf16, float* dkernel,
                     float* dbias, std::vector<float>& scratch) {
  const int64_t taps = g.kernel_h * g.kernel_w * g.channels, dy_n = g.batch * g.out_h * g.out_w * g.filters;
  const int threads = ThreadsFor(g);
  const int64_t per_thread = (taps + 1) * g.filters;  // each thread's partial dkernel and dbias
  const int64_t in_n = InputElements(g);
  scratch.resize(static_cast<size_t>(in_n + (round_bf16 ? dy_n : 0) + threads * per_thread));
  const Input in = Prepare(g, x, round_bf16, scratch.data());
  if (round_bf16) {
    float* d = scratch.data() + in_n;
    std::memcpy(d, dy, static_cast<size_t>(dy_n) * sizeof(float));
    RoundTo(Precision::kBfloat16, d, dy_n);
    dy = d;
  }
  float* partial = scratch.data() + in_n + (round_bf16 ? dy_n : 0);
  const std::array<int64_t, kMaxTaps> offsets = TapOffsets(g, in);
  const int nv = static_cast<int>(g.filters / 16);
  const int64_t group = MaxGroup(nv);
  UseComputeThreadsHere();
  int used = 1;  // OpenMP may give fewer threads than asked
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int n = omp_get_num_threads(), i = omp_get_thread_num();
    if (i == 0) used = n;
    float* dk = partial + i * per_thread;
    BackwardArgs a{&g, in, dy, offsets.data(), 0, g.batch * i / n, g.batch * (i + 1) / n, dk, dk + taps * g.filters};
    for (a.tap0 = 0; a.tap0 < taps; a.tap0 += group) {
      PassFor(nv, std::min(group, taps - a.tap0))(a);
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

}  // namespace tfjob::small_conv

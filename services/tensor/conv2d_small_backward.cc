// The few-channel convolutions' weight gradient (conv2d_small.h): the
// kernel's and bias' gradients from the input and dL/dy, or from a fused
// max pooling's pooled gradient and winners.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "services/tensor/conv2d_small.h"
#include "services/tensor/conv2d_small_internal.h"
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

// The weight gradient keeps taps x filters/16 accumulators in registers
// (with dL/dy's vectors and a broadcast beside them, under AVX-512's 32):
// kernels with more taps take several passes over the pixels.
constexpr int kAccumulators = 20;

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
  if (round_bf16) dy = RoundedToBfloat16(dy, dy_n, scratch.data() + in_n);
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
  if (round_bf16) dpooled = RoundedToBfloat16(dpooled, dpooled_n, scratch.data() + in_n);
  const PooledGradient pool{pool_h, pool_w, winners, dpooled};
  WeightGradient(g, in, nullptr, &pool, scratch.data() + in_n + dpooled_n, threads, dkernel, dbias);
}

}  // namespace tfjob::small_conv

#include "services/tensor/conv2d_winograd.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "services/tensor/threads.h"

// Every function that touches the 16-float vectors is compiled for
// AVX-512F (Applies() checks the CPU), whatever the build's -march.
#define TFJOB_AVX512 __attribute__((target("avx512f")))

namespace tfjob::winograd {
namespace {

using V16 = float __attribute__((vector_size(64)));

// Tiles go through the transforms and products kChunk at a time; the
// forward's products keep kBlock tiles' outputs in registers.
constexpr int kChunk = 16;
constexpr int kBlock = 8;

std::atomic<int> g_tile{0};

TFJOB_AVX512 inline V16 Load(const float* p) {
  V16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
TFJOB_AVX512 inline void Store(float* p, V16 v) { std::memcpy(p, &v, sizeof v); }

// The one-dimensional transforms of F(kM, 3), each on vectors of 16
// channels or filters: Input = B^T d, Output = A^T m, Kernel = G g,
// Gradient = A e (the weight gradient's dL/dy), Weights = G^T m. The
// matrices are Lavin and Gray's (points 0, 1, -1 for F(2, 3); 0, +-1, +-2
// for F(4, 3)), written out so that no product by 0 or 1 is computed.
template <int kM>
struct F;

template <>
struct F<2> {
  static constexpr int kT = 4;
  TFJOB_AVX512 static void Input(const V16* d, V16* o) {
    o[0] = d[0] - d[2], o[1] = d[1] + d[2], o[2] = d[2] - d[1], o[3] = d[1] - d[3];
  }
  TFJOB_AVX512 static void Output(const V16* m, V16* o) { o[0] = m[0] + m[1] + m[2], o[1] = m[1] - m[2] - m[3]; }
  TFJOB_AVX512 static void Kernel(const V16* g, V16* o) {
    o[0] = g[0], o[1] = 0.5f * (g[0] + g[1] + g[2]), o[2] = 0.5f * (g[0] - g[1] + g[2]), o[3] = g[2];
  }
  TFJOB_AVX512 static void Gradient(const V16* e, V16* o) {
    o[0] = e[0], o[1] = e[0] + e[1], o[2] = e[0] - e[1], o[3] = -e[1];
  }
  TFJOB_AVX512 static void Weights(const V16* m, V16* o) {
    o[0] = m[0] + 0.5f * (m[1] + m[2]), o[1] = 0.5f * (m[1] - m[2]), o[2] = 0.5f * (m[1] + m[2]) + m[3];
  }
};

template <>
struct F<4> {
  static constexpr int kT = 6;
  TFJOB_AVX512 static void Input(const V16* d, V16* o) {
    const V16 t1 = d[4] - 4.f * d[2], t2 = d[3] - 4.f * d[1], t3 = d[4] - d[2], t4 = 2.f * (d[3] - d[1]);
    o[0] = 4.f * d[0] - 5.f * d[2] + d[4];
    o[1] = t1 + t2, o[2] = t1 - t2, o[3] = t3 + t4, o[4] = t3 - t4;
    o[5] = 4.f * d[1] - 5.f * d[3] + d[5];
  }
  TFJOB_AVX512 static void Output(const V16* m, V16* o) {
    const V16 s12 = m[1] + m[2], d12 = m[1] - m[2], s34 = m[3] + m[4], d34 = m[3] - m[4];
    o[0] = m[0] + s12 + s34, o[1] = d12 + 2.f * d34, o[2] = s12 + 4.f * s34, o[3] = d12 + 8.f * d34 + m[5];
  }
  TFJOB_AVX512 static void Kernel(const V16* g, V16* o) {
    o[0] = 0.25f * g[0];
    o[1] = (-1.f / 6) * (g[0] + g[1] + g[2]), o[2] = (-1.f / 6) * (g[0] - g[1] + g[2]);
    const V16 a = (1.f / 24) * g[0] + (1.f / 6) * g[2], b = (1.f / 12) * g[1];
    o[3] = a + b, o[4] = a - b, o[5] = g[2];
  }
  TFJOB_AVX512 static void Gradient(const V16* e, V16* o) {
    const V16 s02 = e[0] + e[2], s13 = e[1] + e[3], q02 = e[0] + 4.f * e[2], q13 = 2.f * e[1] + 8.f * e[3];
    o[0] = e[0], o[1] = s02 + s13, o[2] = s02 - s13, o[3] = q02 + q13, o[4] = q02 - q13, o[5] = e[3];
  }
  TFJOB_AVX512 static void Weights(const V16* m, V16* o) {
    const V16 s12 = m[1] + m[2], s34 = m[3] + m[4];
    o[0] = 0.25f * m[0] - (1.f / 6) * s12 + (1.f / 24) * s34;
    o[1] = (1.f / 6) * (m[2] - m[1]) + (1.f / 12) * (m[3] - m[4]);
    o[2] = (1.f / 6) * (s34 - s12) + m[5];
  }
};

// out = T x T^T for a one-dimensional transform T of kIn -> kOut: T on each
// row of x [kIn][kIn], then on each column.
template <int kIn, int kOut, void (*t)(const V16*, V16*)>
TFJOB_AVX512 inline void Both(const V16 (&x)[kIn][kIn], V16 (&out)[kOut][kOut]) {
  V16 r[kIn][kOut];
#pragma GCC unroll 8
  for (int i = 0; i < kIn; ++i) t(x[i], r[i]);
#pragma GCC unroll 8
  for (int j = 0; j < kOut; ++j) {
    V16 col[kIn], o[kOut];
#pragma GCC unroll 8
    for (int i = 0; i < kIn; ++i) col[i] = r[i][j];
    t(col, o);
#pragma GCC unroll 8
    for (int i = 0; i < kOut; ++i) out[i][j] = o[i];
  }
}

// A tile: image b, tile row ty, column tx (each tile kM x kM outputs; sizes
// that kM does not divide end in part-empty tiles); `valid` false for an
// empty slot.
struct Tile {
  int64_t b = 0, ty = 0, tx = 0;
  bool valid = false;
};

// A geometry's tiles, numbered image by image, row by row.
struct Tiles {
  int64_t m, h, w, th, tw, total;
  Tiles(const Conv2DGeometry& g, int64_t tile)
      : m(tile),
        h(g.height),
        w(g.width),
        th((g.height + tile - 1) / tile),
        tw((g.width + tile - 1) / tile),
        total(g.batch * th * tw) {}
  // The tiles [t0, t0 + N): n valid ones, then empty slots.
  template <int N>
  void Chunk(int64_t t0, int n, Tile (&out)[N]) const {
    const int64_t r = t0 % (th * tw);
    Tile t{t0 / (th * tw), r / tw, r % tw, true};
    for (int s = 0; s < N; ++s) {
      out[s] = s < n ? t : Tile{};
      if (++t.tx < tw) continue;
      t.tx = 0;
      if (++t.ty < th) continue;
      t.ty = 0;
      ++t.b;
    }
  }
};

// What a pixel past the image (the "same" padding) reads: zeros, as many
// as a pixel's channels.
alignas(64) constexpr float kZeros[32] = {};

// V[pos][slot][c] = (B^T d B)[pos] for the input tile of tile t (zeros past
// the image: the "same" padding), or zeros for an empty slot. A tile
// inside the image reads its rows in place; one at an edge picks each
// pixel's address first (kZeros outside), so the vector code never tests.
// (A zero-padded copy of the input instead cost more than these tests.)
template <int kM>
TFJOB_AVX512 void InputTransform(const Tiles& tl, const float* x, int64_t c, const Tile& t, int slot, float* v) {
  constexpr int kT = F<kM>::kT;
  const int64_t y0 = kM * t.ty - 1, x0 = kM * t.tx - 1;
  const bool inside = t.valid && y0 >= 0 && x0 >= 0 && y0 + kT <= tl.h && x0 + kT <= tl.w;
  const float* px[kT][kT];
  if (!inside) {
#pragma GCC unroll 8
    for (int i = 0; i < kT; ++i) {
      const bool row = t.valid && y0 + i >= 0 && y0 + i < tl.h;
#pragma GCC unroll 8
      for (int j = 0; j < kT; ++j) {
        px[i][j] = row && x0 + j >= 0 && x0 + j < tl.w ? x + ((t.b * tl.h + y0 + i) * tl.w + x0 + j) * c : kZeros;
      }
    }
  }
  const float* corner = inside ? x + ((t.b * tl.h + y0) * tl.w + x0) * c : nullptr;
  for (int64_t cv = 0; cv < c; cv += 16) {
    // Each row's transform (d B) as it is loaded, through L1 (kept in
    // registers, the kT x kT tile spilled at random), then the columns'.
    alignas(64) float r[kT][kT][16];
#pragma GCC unroll 8
    for (int i = 0; i < kT; ++i) {
      V16 d[kT], o[kT];
      if (inside) {
#pragma GCC unroll 8
        for (int j = 0; j < kT; ++j) d[j] = Load(corner + (i * tl.w + j) * c + cv);
      } else {
#pragma GCC unroll 8
        for (int j = 0; j < kT; ++j) d[j] = Load(px[i][j] + cv);  // kZeros + cv: still zeros (c <= 32)
      }
      F<kM>::Input(d, o);
#pragma GCC unroll 8
      for (int j = 0; j < kT; ++j) Store(r[i][j], o[j]);
    }
#pragma GCC unroll 8
    for (int j = 0; j < kT; ++j) {
      V16 col[kT], o[kT];
#pragma GCC unroll 8
      for (int i = 0; i < kT; ++i) col[i] = Load(r[i][j]);
      F<kM>::Input(col, o);
#pragma GCC unroll 8
      for (int i = 0; i < kT; ++i) Store(v + ((i * kT + j) * kChunk + slot) * c + cv, o[i]);
    }
  }
}

// U[pos][c][k] = (G g G^T)[pos] for an HWIO kernel of c channels, k filters.
template <int kM>
TFJOB_AVX512 void KernelTransform(const float* kernel, int64_t c, int64_t k, float* u) {
  constexpr int kT = F<kM>::kT;
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t kv = 0; kv < k; kv += 16) {
      V16 g[3][3], o[kT][kT];
#pragma GCC unroll 8
      for (int i = 0; i < 3; ++i)
#pragma GCC unroll 8
        for (int j = 0; j < 3; ++j) g[i][j] = Load(kernel + ((i * 3 + j) * c + ch) * k + kv);
      Both<3, kT, F<kM>::Kernel>(g, o);
#pragma GCC unroll 8
      for (int i = 0; i < kT; ++i)
#pragma GCC unroll 8
        for (int j = 0; j < kT; ++j) Store(u + ((i * kT + j) * c + ch) * k + kv, o[i][j]);
    }
  }
}

// M[pos][slot][k] = sum over channels of V[pos][slot][ch] U[pos][ch][k]:
// kBlock slots times KV filter vectors of sums in registers.
template <int kPos, int KV>
TFJOB_AVX512 void Products(const float* v, const float* u, int64_t c, float* m) {
  constexpr int64_t k = 16 * KV;
  for (int pos = 0; pos < kPos; ++pos) {
    const float* vp = v + pos * kChunk * c;
    const float* up = u + pos * c * k;
    float* mp = m + pos * kChunk * k;
    for (int tb = 0; tb < kChunk; tb += kBlock) {
      V16 acc[kBlock][KV] = {};
      for (int64_t ch = 0; ch < c; ++ch) {
        V16 w[KV];
#pragma GCC unroll 4
        for (int kv = 0; kv < KV; ++kv) w[kv] = Load(up + ch * k + 16 * kv);
#pragma GCC unroll 8
        for (int t = 0; t < kBlock; ++t) {
          const float s = vp[(tb + t) * c + ch];
#pragma GCC unroll 4
          for (int kv = 0; kv < KV; ++kv) acc[t][kv] += w[kv] * s;
        }
      }
      for (int t = 0; t < kBlock; ++t)
        for (int kv = 0; kv < KV; ++kv) Store(mp + (tb + t) * k + 16 * kv, acc[t][kv]);
    }
  }
}

// The kM x kM outputs of tile t from M: A^T M A, the bias, the ReLU.
template <int kM>
TFJOB_AVX512 void OutputTransform(const Tiles& tl, const float* m, int64_t k, const Tile& t, int slot,
                                  const float* bias, bool relu, float* y) {
  constexpr int kT = F<kM>::kT;
  for (int64_t kv = 0; kv < k; kv += 16) {
    V16 q[kT][kT], o[kM][kM];
#pragma GCC unroll 8
    for (int i = 0; i < kT; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < kT; ++j) q[i][j] = Load(m + ((i * kT + j) * kChunk + slot) * k + kv);
    Both<kT, kM, F<kM>::Output>(q, o);
    const V16 bv = bias ? Load(bias + kv) : V16{};
    for (int i = 0; i < kM && kM * t.ty + i < tl.h; ++i) {
      const int64_t oy = kM * t.ty + i;
      for (int j = 0; j < kM && kM * t.tx + j < tl.w; ++j) {
        V16 out = o[i][j] + bv;
        if (relu) out = out > V16{} ? out : V16{};
        Store(y + ((t.b * tl.h + oy) * tl.w + kM * t.tx + j) * k + kv, out);
      }
    }
  }
}

// D[pos][slot][k] = (A dy A^T)[pos] for tile t's kM x kM block of dL/dy
// (zeros past the image, or for an empty slot), and its sum into `dbias`.
template <int kM>
TFJOB_AVX512 void GradientTransform(const Tiles& tl, const float* dy, int64_t k, const Tile& t, int slot, float* d,
                                    float* dbias) {
  constexpr int kT = F<kM>::kT;
  const float* pe[kM][kM];
#pragma GCC unroll 8
  for (int i = 0; i < kM; ++i) {
    const int64_t oy = kM * t.ty + i;
#pragma GCC unroll 8
    for (int j = 0; j < kM; ++j) {
      const int64_t ox = kM * t.tx + j;
      pe[i][j] = t.valid && oy < tl.h && ox < tl.w ? dy + ((t.b * tl.h + oy) * tl.w + ox) * k : kZeros;
    }
  }
  for (int64_t kv = 0; kv < k; kv += 16) {
    V16 e[kM][kM], o[kT][kT], sum{};
#pragma GCC unroll 8
    for (int i = 0; i < kM; ++i) {
#pragma GCC unroll 8
      for (int j = 0; j < kM; ++j) {
        e[i][j] = Load(pe[i][j] + kv);
        sum += e[i][j];
      }
    }
    Store(dbias + kv, Load(dbias + kv) + sum);
    Both<kM, kT, F<kM>::Gradient>(e, o);
#pragma GCC unroll 8
    for (int i = 0; i < kT; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < kT; ++j) Store(d + ((i * kT + j) * kChunk + slot) * k + kv, o[i][j]);
  }
}

// acc[pos][ch][k] += sum over slots of V[pos][slot][ch] D[pos][slot][k]:
// kCb channels times KV filter vectors of sums in registers.
template <int kPos, int KV>
TFJOB_AVX512 void AccumulateProducts(const float* v, const float* d, int64_t c, float* acc) {
  constexpr int64_t k = 16 * KV;
  constexpr int kCb = 16 / KV;
  for (int pos = 0; pos < kPos; ++pos) {
    const float* vp = v + pos * kChunk * c;
    const float* dp = d + pos * kChunk * k;
    for (int64_t cb = 0; cb < c; cb += kCb) {
      float* ap = acc + (pos * c + cb) * k;
      V16 a[kCb][KV];
      for (int i = 0; i < kCb; ++i)
        for (int kv = 0; kv < KV; ++kv) a[i][kv] = Load(ap + i * k + 16 * kv);
      for (int slot = 0; slot < kChunk; ++slot) {
        V16 dv[KV];
#pragma GCC unroll 4
        for (int kv = 0; kv < KV; ++kv) dv[kv] = Load(dp + slot * k + 16 * kv);
#pragma GCC unroll 16
        for (int i = 0; i < kCb; ++i) {
          const float s = vp[slot * c + cb + i];
#pragma GCC unroll 4
          for (int kv = 0; kv < KV; ++kv) a[i][kv] += dv[kv] * s;
        }
      }
      for (int i = 0; i < kCb; ++i)
        for (int kv = 0; kv < KV; ++kv) Store(ap + i * k + 16 * kv, a[i][kv]);
    }
  }
}

// dkernel (HWIO) = G^T acc G per channel and filter.
template <int kM>
TFJOB_AVX512 void WeightTransform(const float* acc, int64_t c, int64_t k, float* dkernel) {
  constexpr int kT = F<kM>::kT;
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t kv = 0; kv < k; kv += 16) {
      V16 q[kT][kT], o[3][3];
#pragma GCC unroll 8
      for (int i = 0; i < kT; ++i)
#pragma GCC unroll 8
        for (int j = 0; j < kT; ++j) q[i][j] = Load(acc + ((i * kT + j) * c + ch) * k + kv);
      Both<kT, 3, F<kM>::Weights>(q, o);
#pragma GCC unroll 8
      for (int i = 0; i < 3; ++i)
#pragma GCC unroll 8
        for (int j = 0; j < 3; ++j) Store(dkernel + ((i * 3 + j) * c + ch) * k + kv, o[i][j]);
    }
  }
}

int ThreadsFor(const Tiles& tl, int64_t c, int64_t k) {
  // Below about 2 MFLOP of products a thread's start costs more than it saves.
  const int64_t t = tl.m + 2;
  return tl.total * t * t * c * k * 2 >= (int64_t{1} << 21) ? std::max(1, ComputeThreads()) : 1;
}

// Scratch floats rounded up to whole cache lines, so each thread's part
// starts on its own.
int64_t Lines(int64_t floats) { return (floats + 15) / 16 * 16; }

// F(4x4, 3x3) has fewer products per output than F(2x2, 3x3) but
// computes whole 4x4 blocks; it still won at 14x14 and 7x7 (blocks 31 %
// empty), measured (bench/conv.cc). Images under 4 pixels a side take 2x2.
int TileFor(const Conv2DGeometry& g) {
  const int forced = g_tile.load(std::memory_order_relaxed);
  if (forced) return forced;
  return g.height >= 4 && g.width >= 4 ? 4 : 2;
}

// The per-thread scratch of a forward: V and M.
int64_t ForwardScratch(int64_t c, int64_t k, int tile) {
  const int64_t pos = (tile + 2) * (tile + 2);
  return Lines(pos * kChunk * c) + Lines(pos * kChunk * k);
}

// The forward of a geometry whose kernel is already transformed (`u`).
template <int kM>
void ForwardTransformed(const Conv2DGeometry& g, const float* x, const float* u, const float* bias, bool relu, float* y,
                        float* scratch) {
  constexpr int kPos = F<kM>::kT * F<kM>::kT;
  const Tiles tl(g, kM);
  const int64_t c = g.channels, k = g.filters;
  const int64_t per_thread = ForwardScratch(c, k, kM);
  const int threads = ThreadsFor(tl, c, k);
  const auto products = k == 16 ? &Products<kPos, 1> : &Products<kPos, 2>;
  UseComputeThreadsHere();
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int n = omp_get_num_threads(), i = omp_get_thread_num();
    float* v = scratch + i * per_thread;
    float* m = v + Lines(kPos * kChunk * c);
    const int64_t end = tl.total * (i + 1) / n;
    for (int64_t t0 = tl.total * i / n; t0 < end; t0 += kChunk) {
      const int n_tiles = static_cast<int>(std::min<int64_t>(kChunk, end - t0));
      Tile tiles[kChunk];
      tl.Chunk(t0, n_tiles, tiles);
      for (int s = 0; s < kChunk; ++s) InputTransform<kM>(tl, x, c, tiles[s], s, v);
      products(v, u, c, m);
      for (int s = 0; s < n_tiles; ++s) OutputTransform<kM>(tl, m, k, tiles[s], s, bias, relu, y);
    }
  }
}

// The forward of `g` from x and a transformed kernel already at the start
// of `scratch` (`before` floats hold it and whatever precedes it).
template <int kM>
void ForwardFrom(const Conv2DGeometry& g, const float* x, int64_t u_at, int64_t before, const float* bias, bool relu,
                 float* y, std::vector<float>& scratch) {
  const Tiles tl(g, kM);
  scratch.resize(
      static_cast<size_t>(before + ThreadsFor(tl, g.channels, g.filters) * ForwardScratch(g.channels, g.filters, kM)));
  ForwardTransformed<kM>(g, x, scratch.data() + u_at, bias, relu, y, scratch.data() + before);
}

template <int kM>
void ForwardTile(const Conv2DGeometry& g, const float* x, const float* kernel, const float* bias, bool relu, float* y,
                 std::vector<float>& scratch) {
  constexpr int64_t kPos = F<kM>::kT * F<kM>::kT;
  const int64_t u_size = Lines(kPos * g.channels * g.filters);
  scratch.resize(static_cast<size_t>(u_size));
  KernelTransform<kM>(kernel, g.channels, g.filters, scratch.data());
  ForwardFrom<kM>(g, x, 0, u_size, bias, relu, y, scratch);
}

template <int kM>
void BackwardDataTile(const Conv2DGeometry& g, const float* dy, const float* kernel, float* dx,
                      std::vector<float>& scratch) {
  // dx = the "same" convolution of dy with w'[ky][kx][k][c] = w[2-ky][2-kx][c][k].
  constexpr int64_t kPos = F<kM>::kT * F<kM>::kT;
  Conv2DGeometry t = g;
  std::swap(t.channels, t.filters);
  const int64_t c = g.channels, k = g.filters;
  const int64_t flipped_size = Lines(9 * c * k), u_size = Lines(kPos * c * k);
  scratch.resize(static_cast<size_t>(flipped_size + u_size));
  float* flipped = scratch.data();
  for (int tap = 0; tap < 9; ++tap)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t f = 0; f < k; ++f) flipped[(tap * k + f) * c + ch] = kernel[((8 - tap) * c + ch) * k + f];
  KernelTransform<kM>(flipped, k, c, scratch.data() + flipped_size);
  ForwardFrom<kM>(t, dy, flipped_size, flipped_size + u_size, nullptr, false, dx, scratch);
}

template <int kM>
void BackwardWeightsTile(const Conv2DGeometry& g, const float* x, const float* dy, float* dkernel, float* dbias,
                         std::vector<float>& scratch) {
  constexpr int kPos = F<kM>::kT * F<kM>::kT;
  const Tiles tl(g, kM);
  const int64_t c = g.channels, k = g.filters;
  const int threads = ThreadsFor(tl, c, k);
  const int64_t v_size = Lines(kPos * kChunk * c), d_size = Lines(kPos * kChunk * k), acc_size = Lines(kPos * c * k),
                bias_size = Lines(k);
  const int64_t per_thread = v_size + d_size + acc_size + bias_size;
  scratch.resize(static_cast<size_t>(threads * per_thread));
  float* parts = scratch.data();
  const auto accumulate = k == 16 ? &AccumulateProducts<kPos, 1> : &AccumulateProducts<kPos, 2>;
  int used = 1;
  UseComputeThreadsHere();
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int n = omp_get_num_threads(), i = omp_get_thread_num();
    if (i == 0) used = n;
    float* v = parts + i * per_thread;
    float* d = v + v_size;
    float* acc = d + d_size;
    float* bias = acc + acc_size;
    std::fill(acc, acc + acc_size + bias_size, 0.f);
    const int64_t end = tl.total * (i + 1) / n;
    for (int64_t t0 = tl.total * i / n; t0 < end; t0 += kChunk) {
      const int n_tiles = static_cast<int>(std::min<int64_t>(kChunk, end - t0));
      Tile tiles[kChunk];
      tl.Chunk(t0, n_tiles, tiles);
      for (int s = 0; s < kChunk; ++s) {
        InputTransform<kM>(tl, x, c, tiles[s], s, v);
        GradientTransform<kM>(tl, dy, k, tiles[s], s, d, bias);
      }
      accumulate(v, d, c, acc);
    }
  }
  // The threads' sums, added in thread order.
  float* total = parts + v_size + d_size;
  for (int i = 1; i < used; ++i) {
    const float* part = total + i * per_thread;
    for (int64_t j = 0; j < acc_size + bias_size; ++j) total[j] += part[j];
  }
  WeightTransform<kM>(total, c, k, dkernel);
  if (dbias) std::memcpy(dbias, total + acc_size, static_cast<size_t>(k) * sizeof(float));
}

}  // namespace

bool Applies(const Conv2DGeometry& g) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512 && g.kernel_h == 3 && g.kernel_w == 3 && g.stride_h == 1 && g.stride_w == 1 && g.pad_top == 1 &&
         g.pad_left == 1 && g.out_h == g.height && g.out_w == g.width && (g.channels == 16 || g.channels == 32) &&
         (g.filters == 16 || g.filters == 32) && g.batch > 0 && g.height > 0 && g.width > 0;
}

int Tile(const Conv2DGeometry& g) { return TileFor(g); }

void UseTile(int m) { g_tile.store(m == 2 || m == 4 ? m : 0, std::memory_order_relaxed); }

void Forward(const Conv2DGeometry& g, const float* x, const float* kernel, const float* bias, bool relu, float* y,
             std::vector<float>& scratch) {
  if (TileFor(g) == 4) return ForwardTile<4>(g, x, kernel, bias, relu, y, scratch);
  ForwardTile<2>(g, x, kernel, bias, relu, y, scratch);
}

void BackwardData(const Conv2DGeometry& g, const float* dy, const float* kernel, float* dx,
                  std::vector<float>& scratch) {
  if (TileFor(g) == 4) return BackwardDataTile<4>(g, dy, kernel, dx, scratch);
  BackwardDataTile<2>(g, dy, kernel, dx, scratch);
}

void BackwardWeights(const Conv2DGeometry& g, const float* x, const float* dy, float* dkernel, float* dbias,
                     std::vector<float>& scratch) {
  if (TileFor(g) == 4) return BackwardWeightsTile<4>(g, x, dy, dkernel, dbias, scratch);
  BackwardWeightsTile<2>(g, x, dy, dkernel, dbias, scratch);
}

}  // namespace tfjob::winograd

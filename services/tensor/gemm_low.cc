// Products through oneDNN's matmul primitive: Gemm in the calling thread's
// low precision (precision.h): bfloat16 (bfloat16 operands, float32
// accumulation), float16 emulated, both rounding the result to the
// precision, as a layer computing in it returns; and the float32 products
// of a batch's rows that Gemm sends here (gemm.h).
#include <cassert>
#include <map>
#include <tuple>
#include <vector>

#include "services/tensor/gemm.h"
#include "services/tensor/precision.h"
#ifdef TFJOB_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

#include "services/tensor/threads.h"

namespace tfjob {
namespace {

// A stored operand (rows x cols with leading dimension ld) copied to a
// packed buffer.
// Large operands are converted on the compute threads too, so the
// conversion does not stay on one thread while the product uses them all.
template <typename T, typename Convert>
void Pack(const float* x, int64_t rows, int64_t cols, int64_t ld, std::vector<T>& out, Convert convert) {
  out.resize(static_cast<size_t>(rows * cols));
  T* dst = out.data();
#pragma omp parallel for num_threads(ComputeThreads()) if (rows * cols >= (1 << 18) && ComputeThreads() > 1)
  for (int64_t r = 0; r < rows; ++r) convert(x + r * ld, dst + r * cols, cols);
}

void RoundOutput(Precision p, int64_t m, int64_t n, float* c, int64_t ldc) {
  for (int64_t r = 0; r < m; ++r) RoundTo(p, c + r * ldc, n);
}

// float32 units on rounded operands: float16's numerics (and bfloat16's
// where oneDNN refuses a shape).
void EmulatedGemm(Precision p, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                  const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  thread_local std::vector<float> pa, pb;
  auto round = [p](const float* in, float* out, int64_t count) {
    for (int64_t i = 0; i < count; ++i) out[i] = RoundTo(p, in[i]);
  };
  const int64_t a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
  Pack(a, a_rows, a_cols, lda, pa, round);
  Pack(b, b_rows, b_cols, ldb, pb, round);
  {
    PrecisionScope f32(Precision::kFloat32);
    Gemm(ta, tb, m, n, k, pa.data(), a_cols, pb.data(), b_cols, beta, c, ldc);
  }
  RoundOutput(p, m, n, c, ldc);
}

#ifdef TFJOB_HAVE_DNNL
// oneDNN splits a primitive's work for the thread count it was made with;
// the operands' element type and strides are part of its descriptors.
using Key = std::tuple<bool, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int>;
// Shapes repeat every step; a model with many shapes (sequences of every
// length) starts the cache again rather than growing it without bound.
constexpr size_t kMaxPrimitives = 64;

struct Matmul {
  dnnl::memory::desc src, weights, dst;
  dnnl::matmul primitive;
};

struct MatmulState {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<Key, Matmul> cache;
  std::vector<uint16_t> pa, pb;
  std::vector<float> out;
};

MatmulState& State() {
  thread_local MatmulState s;
  return s;
}

// The primitive for C [m, n] (row stride ldc) = op(A) op(B), operands of
// type `dt` stored with leading dimensions lda and ldb.
Matmul& PrimitiveFor(MatmulState& s, dnnl::memory::data_type dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                     int64_t lda, int64_t ldb, int64_t ldc) {
  using dims = dnnl::memory::dims;
  const Key key{dt == dnnl::memory::data_type::bf16, ta, tb, m, n, k, lda, ldb, ldc, ComputeThreads()};
  auto it = s.cache.find(key);
  if (it != s.cache.end()) return it->second;
  if (s.cache.size() >= kMaxPrimitives) s.cache.clear();
  Matmul mm;
  // Logical [m, k] x [k, n]; transposes and leading dimensions by strides.
  mm.src = dnnl::memory::desc({m, k}, dt, ta ? dims{1, lda} : dims{lda, 1});
  mm.weights = dnnl::memory::desc({k, n}, dt, tb ? dims{1, ldb} : dims{ldb, 1});
  mm.dst = dnnl::memory::desc({m, n}, dnnl::memory::data_type::f32, dims{ldc, 1});
  mm.primitive = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(mm.src, mm.weights, mm.dst), s.engine));
  return s.cache.emplace(key, std::move(mm)).first->second;
}

void Run(MatmulState& s, Matmul& mm, const void* a, const void* b, float* c) {
  dnnl::memory src(mm.src, s.engine, const_cast<void*>(a)), wei(mm.weights, s.engine, const_cast<void*>(b)),
      out(mm.dst, s.engine, c);
  mm.primitive.execute(s.stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, out}});
  s.stream.wait();
}

bool BfloatGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                int64_t ldb, float beta, float* c, int64_t ldc) {
  MatmulState& s = State();
  try {
    const int64_t a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
    auto convert = [](const float* in, uint16_t* out, int64_t count) { ToBfloat16(in, out, count); };
    Pack(a, a_rows, a_cols, lda, s.pa, convert);
    Pack(b, b_rows, b_cols, ldb, s.pb, convert);
    // Straight into C when it is packed and not accumulated into.
    const bool direct = beta == 0.f && ldc == n;
    if (!direct) s.out.resize(static_cast<size_t>(m * n));
    float* dst = direct ? c : s.out.data();
    Run(s, PrimitiveFor(s, dnnl::memory::data_type::bf16, ta, tb, m, n, k, a_cols, b_cols, n), s.pa.data(), s.pb.data(),
        dst);
    if (!direct) {
      for (int64_t r = 0; r < m; ++r) {
        float* row = c + r * ldc;
        const float* res = dst + r * n;
        for (int64_t j = 0; j < n; ++j) row[j] = (beta == 0.f ? 0.f : beta * row[j]) + res[j];
      }
    }
    RoundOutput(Precision::kBfloat16, m, n, c, ldc);
    return true;
  } catch (const dnnl::error&) {
    return false;  // a shape oneDNN refuses: emulated
  }
}
#endif

}  // namespace

bool MatmulFloat32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                   int64_t ldb, float* c, int64_t ldc) {
#ifdef TFJOB_HAVE_DNNL
  MatmulState& s = State();
  try {
    Run(s, PrimitiveFor(s, dnnl::memory::data_type::f32, ta, tb, m, n, k, lda, ldb, ldc), a, b, c);
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
#else
  (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb, (void)c, (void)ldc;
  return false;
#endif
}

void LowPrecisionGemm(Precision p, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                      const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  assert(p != Precision::kFloat32);
#ifdef TFJOB_HAVE_DNNL
  if (p == Precision::kBfloat16 && k > 0 && UseOneDnn()) {
    UseComputeThreadsHere();
    if (BfloatGemm(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc)) return;
  }
#endif
  EmulatedGemm(p, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace tfjob

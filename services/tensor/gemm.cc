#include "services/tensor/gemm.h"

#include <Eigen/Core>
#include <atomic>
#include <cassert>
#include <cstdlib>
#include <string>
#ifdef TFJOB_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>

#include "services/tensor/onednn_library.h"
#endif

#include "services/tensor/threads.h"

namespace tfjob {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Stride = Eigen::OuterStride<>;
using ConstMap = Eigen::Map<const RowMatrix, 0, Stride>;
using Map = Eigen::Map<RowMatrix, 0, Stride>;

void EigenGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
               int64_t ldb, float beta, float* c, int64_t ldc) {
  ConstMap A(a, ta ? k : m, ta ? m : k, Stride(lda));
  ConstMap B(b, tb ? n : k, tb ? k : n, Stride(ldb));
  Map C(c, m, n, Stride(ldc));
  if (beta == 0.f) {
    if (!ta && !tb) C.noalias() = A * B;
    if (ta && !tb) C.noalias() = A.transpose() * B;
    if (!ta && tb) C.noalias() = A * B.transpose();
    if (ta && tb) C.noalias() = A.transpose() * B.transpose();
    return;
  }
  if (beta != 1.f) C *= beta;
  if (!ta && !tb) C.noalias() += A * B;
  if (ta && !tb) C.noalias() += A.transpose() * B;
  if (!ta && tb) C.noalias() += A * B.transpose();
  if (ta && tb) C.noalias() += A.transpose() * B.transpose();
}

}  // namespace

namespace {
std::atomic<bool> g_eigen_requested{false};
}  // namespace

void UseEigenKernels() { g_eigen_requested.store(true, std::memory_order_relaxed); }

bool UseOneDnn() {
#ifdef TFJOB_HAVE_DNNL
  // Decided once, at the first kernel: a benchmark compares the two paths in
  // one run by starting processes with and without TFJOB_CPU_KERNELS=eigen
  // (bench/roofline.sh).
  static const bool use = [] {
    if (g_eigen_requested.load(std::memory_order_relaxed)) return false;
    return LoadOneDnn().ok();  // no libdnnl on this machine: Eigen
  }();
  return use;
#else
  return false;
#endif
}

void Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  assert(m >= 0 && n >= 0 && k >= 0);
  if (m == 0 || n == 0) return;
  if (const Precision p = ComputePrecision(); p != Precision::kFloat32) {
    LowPrecisionGemm(p, transpose_a, transpose_b, m, n, k, a, lda, b, ldb, beta, c, ldc);
    return;
  }
#ifdef TFJOB_HAVE_DNNL
  UseComputeThreadsHere();
  // The products of a batch (a layer's forward pass and input gradient: at
  // most 64 rows; its weight gradient: an inner dimension of at most 64)
  // through the matmul primitive, measured faster there (gemm.h).
  if (k > 0 && UseOneDnn() && beta == 0.f && (transpose_a ? k <= 64 : m <= 64) &&
      MatmulFloat32(transpose_a, transpose_b, m, n, k, a, lda, b, ldb, c, ldc)) {
    return;
  }
  // oneDNN's sgemm is row-major, as the tensors are. It refuses only
  // arguments it cannot take (none the callers make); Eigen answers those.
  if (k > 0 && UseOneDnn() &&
      dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', m, n, k, 1.f, a, lda, b, ldb, beta, c, ldc) ==
          dnnl_success) {
    return;
  }
#endif
  EigenGemm(transpose_a, transpose_b, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

const char* GemmLibrary() {
  static const std::string name = [] {
    const std::string eigen = "Eigen " + std::to_string(EIGEN_WORLD_VERSION) + "." +
                              std::to_string(EIGEN_MAJOR_VERSION) + "." + std::to_string(EIGEN_MINOR_VERSION);
#ifdef TFJOB_HAVE_DNNL
    if (!UseOneDnn()) {
      return eigen +
             (g_eigen_requested.load(std::memory_order_relaxed) ? " (TFJOB_CPU_KERNELS=eigen)" : " (no libdnnl here)");
    }
    const dnnl_version_t* v = dnnl_version();
    return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
#else
    return eigen;
#endif
  }();
  return name.c_str();
}

}  // namespace tfjob

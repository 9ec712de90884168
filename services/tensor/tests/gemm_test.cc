#include "services/tensor/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "services/tensor/threads.h"
#ifdef TFJOB_TEST_EXPECT_DNNL
#include "services/tensor/onednn_library.h"
#endif

namespace tfjob {
namespace {

// C = op(A) op(B) + beta C, one element at a time in double: the definition
// Gemm must meet to float32 rounding.
std::vector<float> Reference(bool ta, bool tb, int m, int n, int k, const std::vector<float>& a, int lda,
                             const std::vector<float>& b, int ldb, float beta, std::vector<float> c, int ldc) {
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = 0;
      for (int p = 0; p < k; ++p) {
        const double av = ta ? a[p * lda + i] : a[i * lda + p];
        const double bv = tb ? b[j * ldb + p] : b[p * ldb + j];
        sum += av * bv;
      }
      c[i * ldc + j] = static_cast<float>(sum + (beta == 0.f ? 0.0 : beta * static_cast<double>(c[i * ldc + j])));
    }
  }
  return c;
}

std::vector<float> Random(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Every transpose, beta 0 / 1 / other, operands that are column blocks of
// wider matrices (leading dimensions larger than the width), sizes that are
// not multiples of any vector width, with one and two compute threads. In
// a oneDNN build beta 0 takes the matmul primitive (a batch-sized product,
// gemm.h) and the other betas sgemm, so both routes are checked.
TEST(GemmTest, MatchesTheDefinitionForEveryLayoutTheLayersUse) {
  std::mt19937 rng(7);
  for (int threads : {1, 2}) {
    SetComputeThreads(threads);
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (float beta : {0.f, 1.f, 0.5f}) {
          const int m = 37, n = 29, k = 53, pad = 5;
          const int a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
          const int lda = a_cols + pad, ldb = b_cols + pad, ldc = n + pad;
          auto a = Random(static_cast<size_t>(a_rows * lda), rng);
          auto b = Random(static_cast<size_t>(b_rows * ldb), rng);
          // NaN where beta == 0: C is written, never read, then.
          std::vector<float> c = beta == 0.f ? std::vector<float>(m * ldc, std::nanf("")) : Random(m * ldc, rng);
          const auto want = Reference(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
          Gemm(ta, tb, m, n, k, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
          const std::string what = std::string(GemmLibrary()) + " ta=" + std::to_string(ta) +
                                   " tb=" + std::to_string(tb) + " beta=" + std::to_string(beta) +
                                   " threads=" + std::to_string(threads);
          for (int i = 0; i < m; ++i) {
            for (int j = 0; j < n; ++j) {
              ASSERT_NEAR(c[i * ldc + j], want[i * ldc + j], 1e-4f) << what << " at " << i << "," << j;
            }
            for (int j = n; j < ldc; ++j) {  // the padding between rows is left alone
              if (beta == 0.f) {
                ASSERT_TRUE(std::isnan(c[i * ldc + j])) << what;
              } else {
                ASSERT_EQ(c[i * ldc + j], want[i * ldc + j]) << what;
              }
            }
          }
        }
      }
    }
  }
  SetComputeThreads(1);
}

TEST(GemmTest, AnEmptyInnerDimensionScalesCByBeta) {
  std::vector<float> c{1, 2, 3, 4};
  Gemm(false, false, 2, 2, 0, nullptr, 1, nullptr, 2, 0.5f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{0.5f, 1, 1.5f, 2}));
  Gemm(false, false, 2, 2, 0, nullptr, 1, nullptr, 2, 0.f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{0, 0, 0, 0}));
}

TEST(GemmTest, NamesTheLibraryTheBuildChose) {
#ifdef TFJOB_TEST_EXPECT_DNNL
  // libdnnl is opened, not linked: every function the build calls is there.
  Status loaded = LoadOneDnn();
  ASSERT_TRUE(loaded.ok()) << loaded;
  EXPECT_EQ(std::string(GemmLibrary()).rfind("oneDNN ", 0), 0u) << GemmLibrary();
#else
  EXPECT_EQ(std::string(GemmLibrary()).rfind("Eigen ", 0), 0u) << GemmLibrary();
#endif
}

}  // namespace
}  // namespace tfjob

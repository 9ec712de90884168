#include "services/tensor/precision.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "services/tensor/gemm.h"

namespace tfjob {
namespace {

TEST(PrecisionTest, BfloatRoundsToNearestEven) {
  EXPECT_EQ(ToBfloat16(1.f), 0x3f80);
  EXPECT_EQ(FromBfloat16(ToBfloat16(1.f + std::ldexp(1.f, -8))), 1.f);  // a tie: to the even 1.0
  EXPECT_EQ(FromBfloat16(ToBfloat16(1.f + 3 * std::ldexp(1.f, -8))), 1.f + std::ldexp(1.f, -6));  // tie: even
  EXPECT_EQ(FromBfloat16(ToBfloat16(1.f + 0.75f * std::ldexp(1.f, -7))), 1.f + std::ldexp(1.f, -7));
  EXPECT_TRUE(std::isnan(FromBfloat16(ToBfloat16(NAN))));
  EXPECT_TRUE(std::isinf(FromBfloat16(ToBfloat16(INFINITY))));
  // The largest float32 rounds up into infinity, as a bfloat16 cast does.
  EXPECT_TRUE(std::isinf(RoundTo(Precision::kBfloat16, 3.4028235e38f)));
  std::vector<float> v{1.f + std::ldexp(1.f, -8), -2.5f, NAN};
  RoundTo(Precision::kBfloat16, v.data(), 3);
  EXPECT_EQ(v[0], 1.f);
  EXPECT_EQ(v[1], -2.5f);
  EXPECT_TRUE(std::isnan(v[2]));
}

// The array conversions (16 at a time where the CPU has AVX512-BF16) agree
// with the one-value conversion on every value: ties, NaNs, infinities,
// the largest floats and the tails after the last whole vector.
TEST(PrecisionTest, ArrayConversionsAgreeWithTheScalarOne) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1e3f, 1e3f);
  std::vector<float> v(1000 + 7);
  for (float& x : v) x = u(rng);
  v[3] = NAN;
  v[17] = INFINITY;
  v[18] = -INFINITY;
  v[40] = 1.f + std::ldexp(1.f, -8);
  v[41] = 1.f + 3 * std::ldexp(1.f, -8);
  v[42] = 3.4028235e38f;
  v[1005] = 1.f + std::ldexp(1.f, -8);  // in the tail
  std::vector<uint16_t> b(v.size());
  ToBfloat16(v.data(), b.data(), static_cast<int64_t>(v.size()));
  std::vector<float> r = v;
  RoundTo(Precision::kBfloat16, r.data(), static_cast<int64_t>(r.size()));
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(v[i])) {
      EXPECT_TRUE(std::isnan(FromBfloat16(b[i])));
      EXPECT_TRUE(std::isnan(r[i]));
      continue;
    }
    EXPECT_EQ(b[i], ToBfloat16(v[i])) << i << ": " << v[i];
    EXPECT_EQ(r[i], FromBfloat16(ToBfloat16(v[i]))) << i << ": " << v[i];
  }
}

TEST(PrecisionTest, Float16RoundsLikeAHalfCast) {
  EXPECT_EQ(RoundTo(Precision::kFloat16, 65504.f), 65504.f);  // the largest float16
  EXPECT_EQ(RoundTo(Precision::kFloat16, 65519.f), 65504.f);
  EXPECT_TRUE(std::isinf(RoundTo(Precision::kFloat16, 65520.f)));  // overflow, as in float16
  EXPECT_TRUE(std::isinf(RoundTo(Precision::kFloat16, -1e6f)));
  EXPECT_EQ(RoundTo(Precision::kFloat16, 1.f + std::ldexp(1.f, -11)), 1.f);  // tie to even
  EXPECT_EQ(RoundTo(Precision::kFloat16, 1.f + 3 * std::ldexp(1.f, -11)), 1.f + std::ldexp(1.f, -9));
  EXPECT_EQ(RoundTo(Precision::kFloat16, std::ldexp(1.f, -24)), std::ldexp(1.f, -24));  // smallest subnormal
  EXPECT_EQ(RoundTo(Precision::kFloat16, std::ldexp(1.f, -25)), 0.f);                   // tie to even (zero)
  EXPECT_EQ(RoundTo(Precision::kFloat16, 3 * std::ldexp(1.f, -25)), std::ldexp(1.f, -23));
  EXPECT_EQ(RoundTo(Precision::kFloat16, 0.1f), 0.0999755859375f);
  EXPECT_EQ(RoundTo(Precision::kFloat32, 0.1f), 0.1f);
}

TEST(PrecisionTest, PolicyNamesParseAndPureLowPrecisionIsRefused) {
  EXPECT_EQ(*ParsePrecision("mixed_bfloat16"), Precision::kBfloat16);
  EXPECT_EQ(*ParsePrecision("mixed_float16"), Precision::kFloat16);
  EXPECT_EQ(*ParsePrecision("float32"), Precision::kFloat32);
  auto pure = ParsePrecision("bfloat16");
  ASSERT_FALSE(pure.ok());
  EXPECT_NE(pure.status().message().find("variables stay float32"), std::string::npos) << pure.status().message();
  EXPECT_FALSE(ParsePrecision("float64").ok());
}

TEST(PrecisionTest, ScopesNestAndRestore) {
  EXPECT_EQ(ComputePrecision(), Precision::kFloat32);
  {
    PrecisionScope a(Precision::kBfloat16);
    EXPECT_EQ(ComputePrecision(), Precision::kBfloat16);
    {
      PrecisionScope b(Precision::kFloat32);
      EXPECT_EQ(ComputePrecision(), Precision::kFloat32);
    }
    EXPECT_EQ(ComputePrecision(), Precision::kBfloat16);
  }
  EXPECT_EQ(ComputePrecision(), Precision::kFloat32);
}

TEST(PrecisionTest, PathsSayWhatIsMissing) {
  EXPECT_TRUE(CpuPathFor(Precision::kFloat32).ok());
  Status bf = BfloatPath();
  if (CpuHasBfloat16() && UseOneDnn()) {
    EXPECT_TRUE(bf.ok()) << bf.message();
  } else {
    EXPECT_EQ(bf.code(), Code::kFailedPrecondition);
    EXPECT_NE(bf.message().find("bfloat16"), std::string::npos) << bf.message();
  }
  if (!Float16Emulated()) {
    Status f16 = Float16Path();
    EXPECT_EQ(f16.code(), Code::kFailedPrecondition);
    EXPECT_NE(f16.message().find("float16"), std::string::npos) << f16.message();
  }
}

std::vector<float> Uniform(size_t n, std::mt19937& rng, float scale = 1.f) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// A low-precision product is the float32 product of the rounded operands,
// rounded: equal to within one unit of the low precision's last place
// (float32 accumulation orders differ).
void ExpectLowPrecisionProduct(Precision p, bool ta, bool tb, float beta) {
  std::mt19937 rng(7);
  const int m = 37, n = 29, k = 70, pad = 3;
  const int lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
  std::vector<float> a = Uniform(static_cast<size_t>((ta ? k : m) * lda), rng);
  std::vector<float> b = Uniform(static_cast<size_t>((tb ? n : k) * ldb), rng);
  std::vector<float> c0 = Uniform(static_cast<size_t>(m * ldc), rng);
  std::vector<float> ra = a, rb = b, want = c0, got = c0;
  RoundTo(p, ra.data(), static_cast<int64_t>(ra.size()));
  RoundTo(p, rb.data(), static_cast<int64_t>(rb.size()));
  Gemm(ta, tb, m, n, k, ra.data(), lda, rb.data(), ldb, beta, want.data(), ldc);
  {
    PrecisionScope scope(p);
    Gemm(ta, tb, m, n, k, a.data(), lda, b.data(), ldb, beta, got.data(), ldc);
  }
  const float ulp = p == Precision::kBfloat16 ? std::ldexp(1.f, -7) : std::ldexp(1.f, -10);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      const float w = want[static_cast<size_t>(i * ldc + j)], g = got[static_cast<size_t>(i * ldc + j)];
      EXPECT_EQ(RoundTo(p, g), g) << "not a value of the precision at " << i << "," << j;
      EXPECT_NEAR(g, w, ulp * std::fabs(w) + 1e-5f)
          << PrecisionName(p) << " ta=" << ta << " tb=" << tb << " at " << i << "," << j;
    }
    for (int j = n; j < ldc; ++j) {  // the padding is left alone
      EXPECT_EQ(got[static_cast<size_t>(i * ldc + j)], c0[static_cast<size_t>(i * ldc + j)]);
    }
  }
}

TEST(PrecisionTest, LowPrecisionProductsRoundOperandsAndResults) {
  for (Precision p : {Precision::kBfloat16, Precision::kFloat16}) {
    for (int t = 0; t < 4; ++t) {
      ExpectLowPrecisionProduct(p, t & 1, t & 2, 0.f);
      ExpectLowPrecisionProduct(p, t & 1, t & 2, 1.f);
    }
  }
}

TEST(PrecisionTest, Float16ProductsOverflowToInfinity) {
  const std::vector<float> a{300.f, 300.f}, b{200.f, 200.f};
  float c = 0;
  {
    PrecisionScope scope(Precision::kFloat16);
    Gemm(false, false, 1, 1, 2, a.data(), 2, b.data(), 1, 0.f, &c, 1);
  }
  EXPECT_TRUE(std::isinf(c)) << c;  // 120000 is beyond float16's 65504
  PrecisionScope scope(Precision::kBfloat16);
  Gemm(false, false, 1, 1, 2, a.data(), 2, b.data(), 1, 0.f, &c, 1);
  EXPECT_EQ(c, 119808.f);  // bfloat16 has float32's range: 120000 to 8 bits
}

}  // namespace
}  // namespace tfjob

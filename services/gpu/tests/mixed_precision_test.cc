// Mixed precision on the GPU (cuda_backend.cc's LowPrecisionMatMul): the
// product of a thread computing in bfloat16 / float16 against the host's
// product of the same rounded operands (float32 accumulation, so only the
// order of the additions differs), against the CPU's LowPrecisionGemm, and
// against the float32 product it must differ from. Tolerances, relative to
// sum |a||b| of each element:
//   rounded operands, host vs GPU: 3e-5 (accumulation order)
//   CPU LowPrecisionGemm vs GPU:   2^-8 bfloat16, 2^-11 float16 (the CPU
//                                  rounds its result to the precision;
//                                  the GPU keeps cuBLAS' float32 result)
// The capability rule and GpuPathFor's registration need no GPU and run
// everywhere; the products skip, saying why, without one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "services/gpu/gpu.h"
#include "services/gpu/tests/device_fixture.h"
#include "services/tensor/backend.h"
#include "services/tensor/gemm.h"
#include "services/tensor/precision.h"

namespace tfjob::gpu::mixed_precision_test {
namespace {

TEST(GpuMixedPrecisionTest, CapabilityRuleNamesTheDeviceAndItsCapability) {
  const DeviceInfo t4{0, "Tesla T4", 16ull << 30, 7, 5};
  const Status bf = MixedPrecisionSupport(Precision::kBfloat16, t4);
  EXPECT_EQ(bf.code(), Code::kFailedPrecondition);
  EXPECT_EQ(bf.message(), "bfloat16 on a GPU needs compute capability 8.0 or higher; Tesla T4 (cuda:0) has 7.5");
  EXPECT_TRUE(MixedPrecisionSupport(Precision::kFloat16, t4).ok());
  EXPECT_TRUE(MixedPrecisionSupport(Precision::kFloat32, t4).ok());

  const DeviceInfo p100{1, "Tesla P100", 16ull << 30, 6, 0};
  const Status f16 = MixedPrecisionSupport(Precision::kFloat16, p100);
  EXPECT_EQ(f16.code(), Code::kFailedPrecondition);
  EXPECT_EQ(f16.message(), "float16 on a GPU needs compute capability 7.0 or higher; Tesla P100 (cuda:1) has 6.0");

  const DeviceInfo v100{0, "Tesla V100", 16ull << 30, 7, 0}, a100{0, "A100", 40ull << 30, 8, 0};
  EXPECT_TRUE(MixedPrecisionSupport(Precision::kFloat16, v100).ok());
  EXPECT_FALSE(MixedPrecisionSupport(Precision::kBfloat16, v100).ok());
  EXPECT_TRUE(MixedPrecisionSupport(Precision::kBfloat16, a100).ok());
}

// RegisterBackend makes GpuPathFor ask the devices: without a GPU it names
// the missing device, with one it answers the capability rule for it.
TEST(GpuMixedPrecisionTest, GpuPathForAsksTheRegisteredBackend) {
  RegisterBackend();
  EXPECT_TRUE(GpuPathFor(Precision::kFloat32, 0).ok());
  auto devices = ListDevices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  const Status s = GpuPathFor(Precision::kBfloat16, 0);
  if (devices->empty()) {
    EXPECT_EQ(s.code(), Code::kFailedPrecondition);
    EXPECT_EQ(s.message(), "bfloat16 on a GPU: no visible device cuda:0");
  } else {
    const Status want = MixedPrecisionSupport(Precision::kBfloat16, devices->front());
    EXPECT_EQ(s.code(), want.code());
    EXPECT_EQ(s.message(), want.message());
  }
}

struct Product {
  std::vector<float> value, scale;  // per element: the result and sum |a||b|
};

// Row-major op(A) op(B) of host tensors, in double, from operands rounded
// to `p` first (float32: unrounded).
Product HostProduct(Precision p, const Tensor& a, bool ta, const Tensor& b, bool tb) {
  const int64_t m = ta ? a.dim(1) : a.dim(0), k = ta ? a.dim(0) : a.dim(1), n = tb ? b.dim(0) : b.dim(1);
  Product out{std::vector<float>(static_cast<size_t>(m * n)), std::vector<float>(static_cast<size_t>(m * n))};
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, mag = 0;
      for (int64_t q = 0; q < k; ++q) {
        const float x = RoundTo(p, a.data<float>()[ta ? q * a.dim(1) + i : i * a.dim(1) + q]);
        const float y = RoundTo(p, b.data<float>()[tb ? j * b.dim(1) + q : q * b.dim(1) + j]);
        sum += static_cast<double>(x) * y;
        mag += std::fabs(static_cast<double>(x) * y);
      }
      out.value[static_cast<size_t>(i * n + j)] = static_cast<float>(sum);
      out.scale[static_cast<size_t>(i * n + j)] = static_cast<float>(mag);
    }
  }
  return out;
}

class GpuMixedMatMulTest : public DeviceTest {
 protected:
  // The GPU's product under a PrecisionScope of `p`, downloaded.
  Tensor GpuProduct(Precision p, const Tensor& a, bool ta, const Tensor& b, bool tb) {
    const int64_t m = ta ? a.dim(1) : a.dim(0), n = tb ? b.dim(0) : b.dim(1);
    Tensor c = OnGpu(Tensor::Zeros(DType::kFloat32, {m, n}));
    const Tensor ga = OnGpu(a), gb = OnGpu(b);
    {
      PrecisionScope scope(p);
      const Status s = backend_->MatMul(ga, ta, gb, tb, c, 0.f);
      EXPECT_TRUE(s.ok()) << s;
    }
    return OnHost(c);
  }

  void CheckAllTransposes(Precision p, float cpu_rtol) {
    // Odd sizes: the operands' copies are not multiples of tensor cores'
    // tiles, and b's copy starts past an odd-sized a.
    const int64_t m = 37, k = 129, n = 45;
    for (int mode = 0; mode < 4; ++mode) {
      const bool ta = mode & 1, tb = mode & 2;
      const std::string what = std::string(PrecisionName(p)) + (ta ? " a^T" : " a") + (tb ? " b^T" : " b");
      const Tensor a = Random(ta ? Shape{k, m} : Shape{m, k}, -1, 1, 11 + mode);
      const Tensor b = Random(tb ? Shape{n, k} : Shape{k, n}, -1, 1, 21 + mode);
      const Tensor got = GpuProduct(p, a, ta, b, tb);
      const Product rounded = HostProduct(p, a, ta, b, tb), exact = HostProduct(Precision::kFloat32, a, ta, b, tb);
      std::vector<float> cpu(static_cast<size_t>(m * n));
      LowPrecisionGemm(p, ta, tb, m, n, k, a.data<float>(), a.dim(1), b.data<float>(), b.dim(1), 0.f, cpu.data(), n);
      double largest_f32_gap = 0;
      for (int64_t i = 0; i < m * n; ++i) {
        const size_t u = static_cast<size_t>(i);
        const float g = got.data<float>()[i], scale = rounded.scale[u];
        ASSERT_NEAR(g, rounded.value[u], 3e-5f * scale) << what << " element " << i << " vs rounded operands";
        ASSERT_NEAR(g, cpu[u], cpu_rtol * scale) << what << " element " << i << " vs the CPU's LowPrecisionGemm";
        largest_f32_gap = std::max(largest_f32_gap, std::fabs(static_cast<double>(g) - exact.value[u]) / scale);
      }
      // Rounded operands move some element by about a unit of the
      // precision over sqrt(k); a product that ignored the precision would
      // be float32's, within 1e-6.
      EXPECT_GT(largest_f32_gap, cpu_rtol / 64) << what << ": the product looks like float32's";
    }
  }
};

TEST_F(GpuMixedMatMulTest, Bfloat16ProductsAreTheRoundedOperandsProducts) {
  CheckAllTransposes(Precision::kBfloat16, 1.f / 256);
}

TEST_F(GpuMixedMatMulTest, Float16ProductsAreTheRoundedOperandsProducts) {
  CheckAllTransposes(Precision::kFloat16, 1.f / 2048);
}

// beta = 1 adds into the float32 result (a layer's gradient accumulating),
// and float32 threads keep full float32 products.
TEST_F(GpuMixedMatMulTest, AccumulatesIntoTheResultAndLeavesFloat32Alone) {
  const Tensor a = Random({16, 64}, -1, 1, 31), b = Random({64, 8}, -1, 1, 32), c0 = Random({16, 8}, -1, 1, 33);
  const Tensor ga = OnGpu(a), gb = OnGpu(b);
  Tensor gc = OnGpu(c0);
  {
    PrecisionScope scope(Precision::kBfloat16);
    ASSERT_TRUE(backend_->MatMul(ga, false, gb, false, gc, 1.f).ok());
  }
  const Tensor got = OnHost(gc);
  const Product rounded = HostProduct(Precision::kBfloat16, a, false, b, false);
  for (int64_t i = 0; i < got.size(); ++i) {
    const size_t u = static_cast<size_t>(i);
    EXPECT_NEAR(got.data<float>()[i], c0.data<float>()[i] + rounded.value[u], 3e-5f * (rounded.scale[u] + 1)) << i;
  }
  const Tensor f32 = GpuProduct(Precision::kFloat32, a, false, b, false);
  const Product exact = HostProduct(Precision::kFloat32, a, false, b, false);
  for (int64_t i = 0; i < f32.size(); ++i) {
    EXPECT_NEAR(f32.data<float>()[i], exact.value[static_cast<size_t>(i)], 1e-5f) << i;
  }
}

}  // namespace
}  // namespace tfjob::gpu::mixed_precision_test

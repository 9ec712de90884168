// The fixture the CPU-vs-GPU tests share: skips, saying why, where no GPU
// is visible; random host tensors; uploads, downloads and comparisons.
// Test-only; one fixture per test (not thread-safe).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "services/gpu/gpu.h"
#include "services/tensor/backend.h"
#include "services/tensor/tensor.h"

namespace tfjob::gpu {

inline const Device kGpu = Device::Cuda(0);

class DeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RegisterBackend();
    auto b = device::BackendFor(kGpu);
    if (!b.ok()) GTEST_SKIP() << "no GPU to compare with the CPU: " << b.status().message();
    backend_ = *b;
  }

  static Tensor Random(Shape shape, float lo = -1.f, float hi = 1.f, uint32_t seed = 7) {
    Tensor t = Tensor::Zeros(DType::kFloat32, std::move(shape));
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(lo, hi);
    for (float& v : t.flat<float>()) v = u(rng);
    return t;
  }
  static Tensor Ids(std::vector<int64_t> v) { return *Tensor::FromVector({static_cast<int64_t>(v.size())}, v); }
  static Tensor OnGpu(const Tensor& t) {
    auto d = t.ToDevice(kGpu);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? *d : Tensor();
  }
  static Tensor OnHost(const Tensor& t) {
    auto h = t.ToDevice(Device::Cpu());
    EXPECT_TRUE(h.ok()) << h.status();
    return h.ok() ? *h : Tensor();
  }
  // The device result, downloaded, against the host's.
  static void ExpectClose(const StatusOr<Tensor>& gpu, const StatusOr<Tensor>& cpu, float rtol,
                          const std::string& what) {
    ASSERT_TRUE(cpu.ok()) << what << ": " << cpu.status();
    ASSERT_TRUE(gpu.ok()) << what << ": " << gpu.status();
    EXPECT_EQ(gpu->device(), kGpu) << what;
    ExpectHostClose(OnHost(*gpu), *cpu, rtol, what);
  }
  static void ExpectHostClose(const Tensor& got, const Tensor& want, float rtol, const std::string& what) {
    ASSERT_EQ(got.shape(), want.shape()) << what;
    ASSERT_EQ(got.dtype(), want.dtype()) << what;
    if (got.dtype() == DType::kInt64) {
      EXPECT_TRUE(Equal(got, want)) << what;
      return;
    }
    for (int64_t i = 0; i < got.size(); ++i) {
      const float g = got.data<float>()[i], w = want.data<float>()[i];
      ASSERT_NEAR(g, w, 1e-6f + rtol * std::fabs(w)) << what << " element " << i;
    }
  }

  device::Backend* backend_ = nullptr;
};

}  // namespace tfjob::gpu

// Small helpers the tensor tests share: a tensor's values as a vector, and
// uniform random float32 values, a float32 tensor from a shape and values (a failure to build one fails the
// test that asked). Header-only, for tests.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "services/tensor/tensor.h"

namespace tfjob::testing {

inline std::vector<float> Floats(const Tensor& t) { return {t.flat<float>().begin(), t.flat<float>().end()}; }
inline std::vector<int64_t> Ints(const Tensor& t) { return {t.flat<int64_t>().begin(), t.flat<int64_t>().end()}; }

inline Tensor F(Shape s, std::vector<float> v) {
  auto t = Tensor::FromVector(std::move(s), std::move(v));
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

// Uniform values in [lo, hi) of the given shape.
inline Tensor RandomF(Shape s, std::mt19937_64& gen, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> d(lo, hi);
  Tensor t = Tensor::Zeros(DType::kFloat32, std::move(s));
  for (float& v : t.flat<float>()) v = d(gen);
  return t;
}

}  // namespace tfjob::testing

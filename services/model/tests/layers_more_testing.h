// Helpers of the layer tests (layers_test, layers_more_test,
// layers_more_conv_test, gradient_test): building a layer, and
// checking every gradient (input and each variable) of a freshly built
// layer against central finite differences of L = sum(w * y) for a fixed
// random w. Each evaluation builds a new layer, so a noise layer's draw (a
// function of its seed) is the same in every evaluation and in the
// analytic pass. Header-only, for tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "services/model/layers.h"
#include "services/tensor/tests/tensor_testing.h"

namespace tfjob::model::more_testing {

using Gen = std::mt19937_64;
using ::tfjob::testing::F;
using ::tfjob::testing::RandomF;

inline LayerSpec Spec(LayerType type, const std::string& name) {
  LayerSpec s;
  s.type = type;
  s.name = name;
  s.path = "model.layers[0]";
  return s;
}

inline std::unique_ptr<Layer> Built(const LayerSpec& spec, const Shape& in, DType dtype = DType::kFloat32) {
  auto layer = MakeLayer(spec);
  EXPECT_TRUE(layer.ok()) << layer.status();
  if (!layer.ok()) return nullptr;
  auto out = (*layer)->Build(in, dtype);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? std::move(*layer) : nullptr;
}

inline double WeightedSum(const Tensor& y, const Tensor& w) {
  EXPECT_EQ(y.shape(), w.shape());
  double acc = 0;
  for (int64_t i = 0; i < y.size(); ++i) acc += static_cast<double>(y.data<float>()[i]) * w.data<float>()[i];
  return acc;
}

// Central differences of f with respect to every element of x (x is left
// unchanged).
inline std::vector<double> NumericGrad(const Tensor& x, const std::function<double(const Tensor&)>& f, float eps) {
  std::vector<double> g(static_cast<size_t>(x.size()));
  for (int64_t i = 0; i < x.size(); ++i) {
    Tensor p = x.Clone(), m = x.Clone();
    p.data<float>()[i] += eps;
    m.data<float>()[i] -= eps;
    // The step actually taken in float, not the nominal one.
    const double h = static_cast<double>(p.data<float>()[i]) - m.data<float>()[i];
    g[static_cast<size_t>(i)] = (f(p) - f(m)) / h;
  }
  return g;
}

inline void ExpectGradNear(const Tensor& analytic, const std::vector<double>& numeric, const std::string& what) {
  ASSERT_EQ(static_cast<size_t>(analytic.size()), numeric.size()) << what;
  double largest = 0;
  for (size_t i = 0; i < numeric.size(); ++i) {
    const double a = analytic.data<float>()[i], n = numeric[i];
    largest = std::max(largest, std::fabs(n));
    EXPECT_LE(std::fabs(a - n), 2e-3 + 1e-2 * std::max(std::fabs(a), std::fabs(n)))
        << what << " element " << i << ": analytic " << a << ", numeric " << n;
  }
  EXPECT_GT(largest, 1e-2) << what << ": the numeric gradient is all zero, the check would be vacuous";
}

inline void ExpectValues(const Tensor& t, const std::vector<float>& want, float tol, const std::string& what) {
  ASSERT_EQ(t.size(), static_cast<int64_t>(want.size())) << what << ": " << t.DebugString();
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(t.data<float>()[i], want[i], tol) << what << " element " << i;
  }
}

// Forward of a fresh layer, then every gradient against finite
// differences; returns the output.
inline Tensor CheckGradients(const LayerSpec& spec, const Shape& in, const Tensor& x, const std::vector<Tensor>& params,
                             bool training = false, float eps = 1e-2f, uint64_t seed = 7) {
  SCOPED_TRACE(spec.name);
  auto layer = Built(spec, in);
  if (!layer) return Tensor();
  const auto vars = layer->Variables();
  EXPECT_EQ(vars.size(), params.size());
  auto y = layer->Forward(params, x, training);
  EXPECT_TRUE(y.ok()) << y.status();
  if (!y.ok()) return Tensor();
  Gen gen(seed);
  const Tensor w = RandomF(y->shape(), gen);
  std::vector<Gradient> grads(vars.size());
  auto dx = layer->Backward(params, w.Clone(), true, grads);
  EXPECT_TRUE(dx.ok()) << dx.status();
  if (!dx.ok()) return *y;
  auto loss = [&](const std::vector<Tensor>& p, const Tensor& xp) {
    auto fresh = Built(spec, in);
    return WeightedSum(fresh->Forward(p, xp, training).value(), w);
  };
  for (size_t v = 0; v < vars.size(); ++v) {
    EXPECT_EQ(grads[v].dense.shape(), vars[v].shape) << vars[v].name;
    std::vector<double> num = NumericGrad(
        params[v],
        [&](const Tensor& t) {
          std::vector<Tensor> p = params;
          p[v] = t;
          return loss(p, x);
        },
        eps);
    ExpectGradNear(grads[v].dense, num, vars[v].name);
  }
  EXPECT_EQ(dx->shape(), x.shape());
  ExpectGradNear(*dx,
                 NumericGrad(
                     x, [&](const Tensor& t) { return loss(params, t); }, eps),
                 "dx");
  return *y;
}

}  // namespace tfjob::model::more_testing

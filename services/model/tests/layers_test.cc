// The layers of conv.cc, pooling.cc, normalization.cc, reshaping.cc and
// preprocessing.cc: forward passes against naive loops, and every gradient
// (parameters and input) against central finite differences of
// L = sum(w * y) for a fixed random w. Each evaluation of L builds a fresh
// layer, so a Dropout's mask (a function of its seed) is the same in every
// evaluation and in the analytic pass.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <set>

#include "services/model/layers.h"
#include "services/model/model.h"
#include "services/model/optimizers.h"
#include "services/model/preprocessing.h"
#include "services/tensor/eigen.h"
#include "services/tensor/threads.h"
#include "tests/support/subprocess.h"
#include "services/model/tests/layers_more_testing.h"
#include "services/tensor/tests/tensor_testing.h"

namespace tfjob::model {
namespace {

using ::testing::HasSubstr;
using namespace more_testing;  // NOLINT(google-build-using-namespace): the test helpers

using ::tfjob::testing::RandomF;

// Distinct values at least `gap` apart in random order: max pooling's
// choice cannot flip under a finite-difference step smaller than gap / 2.
Tensor Spaced(Shape s, Gen& gen, float gap) {
  Tensor t = Tensor::Zeros(DType::kFloat32, std::move(s));
  std::vector<float> v(static_cast<size_t>(t.size()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = gap * static_cast<float>(i) - gap * static_cast<float>(v.size()) / 2;
  std::shuffle(v.begin(), v.end(), gen);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

// Checks Backward against finite differences for every trainable variable
// and the input. Returns the layer's output on x.
Tensor CheckTrainingGradients(const LayerSpec& spec, const Shape& in, const std::vector<Tensor>& params,
                              const Tensor& x, Gen& gen, float eps = 1e-2f) {
  auto layer = Built(spec, in);
  const auto vars = layer->Variables();
  auto y = layer->Forward(params, x, true);
  EXPECT_TRUE(y.ok()) << y.status();
  if (!y.ok()) return Tensor();
  const Tensor w = RandomF(y->shape(), gen);
  std::vector<Gradient> grads(vars.size());
  auto dx = layer->Backward(params, w.Clone(), true, grads);
  EXPECT_TRUE(dx.ok()) << dx.status();
  if (!dx.ok()) return Tensor();
  auto loss = [&](const std::vector<Tensor>& p, const Tensor& xp) {
    auto fresh = Built(spec, in);
    return WeightedSum(fresh->Forward(p, xp, true).value(), w);
  };
  for (size_t v = 0; v < vars.size(); ++v) {
    if (!vars[v].trainable) continue;
    EXPECT_FALSE(grads[v].delta) << vars[v].name;
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

std::vector<Tensor> RandomParams(const Layer& layer, Gen& gen) {
  std::vector<Tensor> p;
  for (const auto& v : layer.Variables()) p.push_back(RandomF(v.shape, gen, 0.5f, 1.5f));
  return p;
}

// ---------------------------------------------------------------- Conv2D

// y[b, oy, ox, f] = act(bias[f] + sum k[ky, kx, c, f] * x[b, oy*s - pad + ky, ...]).
std::vector<double> NaiveConv(const Tensor& x, const Tensor& k, const Tensor* bias, int64_t sh, int64_t sw, int64_t pt,
                              int64_t pl, int64_t oh, int64_t ow) {
  const int64_t n = x.dim(0), h = x.dim(1), w = x.dim(2), c = x.dim(3);
  const int64_t kh = k.dim(0), kw = k.dim(1), f = k.dim(3);
  std::vector<double> y;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox)
        for (int64_t o = 0; o < f; ++o) {
          double acc = bias ? bias->data<float>()[o] : 0.0;
          for (int64_t ky = 0; ky < kh; ++ky)
            for (int64_t kx = 0; kx < kw; ++kx) {
              const int64_t iy = oy * sh - pt + ky, ix = ox * sw - pl + kx;
              if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
              for (int64_t ch = 0; ch < c; ++ch) {
                acc += double(x.data<float>()[((b * h + iy) * w + ix) * c + ch]) *
                       k.data<float>()[((ky * kw + kx) * c + ch) * f + o];
              }
            }
          y.push_back(acc);
        }
  return y;
}

struct ConvCase {
  Shape in;  // [h, w, c]
  int64_t filters;
  std::array<int64_t, 2> kernel, strides;
  Padding padding;
  Shape want_out;
  int64_t pad_top, pad_left;
  bool bias;
};

TEST(Conv2DTest, ForwardMatchesNaiveAndGradientsMatchFiniteDifferences) {
  const ConvCase cases[] = {
      {{5, 5, 1}, 2, {3, 3}, {1, 1}, Padding::kValid, {3, 3, 2}, 0, 0, true},
      {{5, 6, 2}, 3, {3, 2}, {2, 1}, Padding::kValid, {2, 5, 3}, 0, 0, true},
      {{5, 5, 2}, 2, {3, 3}, {1, 1}, Padding::kSame, {5, 5, 2}, 1, 1, false},
      // "same" with stride 2 pads the shortfall, the smaller half first.
      {{6, 5, 1}, 2, {3, 2}, {2, 2}, Padding::kSame, {3, 3, 2}, 0, 0, true},
      {{4, 4, 3}, 2, {2, 2}, {2, 2}, Padding::kSame, {2, 2, 2}, 0, 0, true},
  };
  uint64_t seed = 10;
  for (const ConvCase& c : cases) {
    SCOPED_TRACE(ShapeString(c.in) + " kernel " + std::to_string(c.kernel[0]) + "x" + std::to_string(c.kernel[1]) +
                 (c.padding == Padding::kSame ? " same" : " valid"));
    Gen gen(seed++);
    LayerSpec s = Spec(LayerType::kConv2D, "conv2d");
    s.filters = c.filters;
    s.kernel_size = c.kernel;
    s.strides = c.strides;
    s.padding = c.padding;
    s.use_bias = c.bias;
    s.activation = Activation::kTanh;
    auto layer = Built(s, c.in);
    ASSERT_TRUE(layer);
    auto out = layer->Build(c.in, DType::kFloat32);
    EXPECT_EQ(*out, c.want_out);
    const auto vars = layer->Variables();
    ASSERT_EQ(vars.size(), c.bias ? 2u : 1u);
    EXPECT_EQ(vars[0].name, "conv2d/kernel");
    EXPECT_EQ(vars[0].shape, Shape({c.kernel[0], c.kernel[1], c.in[2], c.filters}));  // Keras' HWIO
    std::vector<Tensor> params = RandomParams(*layer, gen);
    for (auto& p : params) AsArray(p) -= 1.f;  // around zero: tanh away from saturation
    Shape xs{2};
    xs.insert(xs.end(), c.in.begin(), c.in.end());
    const Tensor x = RandomF(xs, gen);
    const Tensor y = CheckTrainingGradients(s, c.in, params, x, gen);
    std::vector<double> want = NaiveConv(x, params[0], c.bias ? &params[1] : nullptr, c.strides[0], c.strides[1],
                                         c.pad_top, c.pad_left, c.want_out[0], c.want_out[1]);
    ASSERT_EQ(static_cast<size_t>(y.size()), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(y.data<float>()[i], std::tanh(want[i]), 1e-5) << i;
  }
}

TEST(Conv2DTest, ShapesThatDoNotFitAreErrors) {
  LayerSpec s = Spec(LayerType::kConv2D, "conv");
  s.filters = 4;
  s.kernel_size = {5, 5};
  auto layer = MakeLayer(s).value();
  auto r = layer->Build({3, 3, 1}, DType::kFloat32);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "layer \"conv\": kernel 5x5 does not fit input 3x3 with padding \"valid\"");
  r = layer->Build({28, 28}, DType::kFloat32);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              HasSubstr("expects input [height, width, channels] per example (NHWC), got [28, 28]"));
  // "same" always fits.
  s.padding = Padding::kSame;
  EXPECT_EQ(*MakeLayer(s).value()->Build({3, 3, 1}, DType::kFloat32), Shape({3, 3, 4}));
  // A batch of the wrong shape is named.
  layer = MakeLayer(s).value();
  ASSERT_TRUE(layer->Build({3, 3, 1}, DType::kFloat32).ok());
  Gen gen(1);
  std::vector<Tensor> params = RandomParams(*layer, gen);
  auto f = layer->Forward(params, RandomF({2, 3, 3, 2}, gen), true);
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(f.status().message(), HasSubstr("expected input float32[-1, 3, 3, 1], got float32[2, 3, 3, 2]"));
}

// --------------------------------------------------------------- Pooling

TEST(PoolingTest, MaxAndAverageMatchNaiveAndFiniteDifferences) {
  struct Case {
    LayerType type;
    std::array<int64_t, 2> pool, strides;
    Padding padding;
    Shape in, want_out;
  };
  const Case cases[] = {
      {LayerType::kMaxPooling2D, {2, 2}, {2, 2}, Padding::kValid, {5, 4, 2}, {2, 2, 2}},
      {LayerType::kMaxPooling2D, {3, 3}, {1, 2}, Padding::kSame, {4, 5, 1}, {4, 3, 1}},
      {LayerType::kMaxPooling2D, {2, 3}, {2, 3}, Padding::kSame, {4, 6, 3}, {2, 2, 3}},
      {LayerType::kAveragePooling2D, {2, 2}, {2, 2}, Padding::kValid, {4, 4, 2}, {2, 2, 2}},
      {LayerType::kAveragePooling2D, {3, 2}, {2, 2}, Padding::kSame, {5, 5, 1}, {3, 3, 1}},
  };
  uint64_t seed = 40;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(LayerTypeName(c.type)) + " " + ShapeString(c.in) +
                 (c.padding == Padding::kSame ? " same" : " valid"));
    Gen gen(seed++);
    LayerSpec s = Spec(c.type, "pool");
    s.kernel_size = c.pool;
    s.strides = c.strides;
    s.padding = c.padding;
    auto layer = Built(s, c.in);
    EXPECT_EQ(*layer->Build(c.in, DType::kFloat32), c.want_out);
    Shape xs{2};
    xs.insert(xs.end(), c.in.begin(), c.in.end());
    const Tensor x = Spaced(xs, gen, 0.05f);
    const Tensor y = CheckTrainingGradients(s, c.in, {}, x, gen, 1e-2f);
    // Naive: over the window's real inputs only.
    const int64_t h = c.in[0], w = c.in[1], ch = c.in[2], oh = c.want_out[0], ow = c.want_out[1];
    const int64_t pt =
        c.padding == Padding::kSame ? std::max<int64_t>((oh - 1) * c.strides[0] + c.pool[0] - h, 0) / 2 : 0;
    const int64_t pl =
        c.padding == Padding::kSame ? std::max<int64_t>((ow - 1) * c.strides[1] + c.pool[1] - w, 0) / 2 : 0;
    int64_t i = 0;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox)
          for (int64_t k = 0; k < ch; ++k, ++i) {
            double best = -INFINITY, sum = 0;
            int64_t n = 0;
            for (int64_t py = 0; py < c.pool[0]; ++py)
              for (int64_t px = 0; px < c.pool[1]; ++px) {
                const int64_t iy = oy * c.strides[0] - pt + py, ix = ox * c.strides[1] - pl + px;
                if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                const double v = x.data<float>()[((b * h + iy) * w + ix) * ch + k];
                best = std::max(best, v);
                sum += v;
                ++n;
              }
            const double want = c.type == LayerType::kMaxPooling2D ? best : sum / n;
            EXPECT_NEAR(y.data<float>()[i], want, 1e-6) << i;
          }
  }
}

// Equal inputs in a window: the first (row-major) takes the whole gradient,
// as TF's max pooling gives it; windows that tile the input (Keras' default
// strides) and windows that overlap agree.
TEST(PoolingTest, MaxPoolingGivesATiesGradientToTheFirstTap) {
  for (int64_t stride : {2, 1}) {
    SCOPED_TRACE("strides " + std::to_string(stride));
    LayerSpec s = Spec(LayerType::kMaxPooling2D, "pool");
    s.kernel_size = {2, 2};
    s.strides = {stride, stride};
    auto layer = Built(s, {4, 4, 2});
    const Tensor x = *Tensor::FromVector({1, 4, 4, 2}, std::vector<float>(32, 1.f));
    auto y = layer->Forward({}, x, true);
    ASSERT_TRUE(y.ok()) << y.status();
    Tensor dy = *Tensor::FromVector(y->shape(), std::vector<float>(static_cast<size_t>(y->size()), 1.f));
    auto dx = layer->Backward({}, dy, true, {});
    ASSERT_TRUE(dx.ok()) << dx.status();
    const int64_t oh = y->dim(1);
    for (int64_t iy = 0; iy < 4; ++iy)
      for (int64_t ix = 0; ix < 4; ++ix)
        for (int64_t c = 0; c < 2; ++c) {
          // How many windows start here (each gives its 1 to its first tap).
          const bool starts = iy % stride == 0 && ix % stride == 0 && iy / stride < oh && ix / stride < oh;
          EXPECT_EQ(dx->data<float>()[(iy * 4 + ix) * 2 + c], starts ? 1.f : 0.f) << iy << "," << ix;
        }
  }
}

TEST(PoolingTest, GlobalAveragePooling) {
  for (bool keepdims : {false, true}) {
    Gen gen(keepdims ? 51 : 50);
    LayerSpec s = Spec(LayerType::kGlobalAveragePooling2D, "gap");
    s.keepdims = keepdims;
    auto layer = Built(s, {3, 2, 4});
    EXPECT_EQ(*layer->Build({3, 2, 4}, DType::kFloat32), keepdims ? Shape({1, 1, 4}) : Shape({4}));
    const Tensor x = RandomF({2, 3, 2, 4}, gen);
    const Tensor y = CheckTrainingGradients(s, {3, 2, 4}, {}, x, gen);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t c = 0; c < 4; ++c) {
        double sum = 0;
        for (int64_t p = 0; p < 6; ++p) sum += x.data<float>()[(b * 6 + p) * 4 + c];
        EXPECT_NEAR(y.data<float>()[b * 4 + c], sum / 6, 1e-6);
      }
  }
}

TEST(PoolingTest, PoolThatDoesNotFit) {
  LayerSpec s = Spec(LayerType::kMaxPooling2D, "pool");
  s.kernel_size = {3, 3};
  s.strides = {3, 3};
  auto r = MakeLayer(s).value()->Build({2, 5, 1}, DType::kFloat32);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "layer \"pool\": pool 3x3 does not fit input 2x5 with padding \"valid\"");
}

// --------------------------------------------------------------- Dropout

TEST(DropoutTest, InvertedSeededAndOffAtInference) {
  LayerSpec s = Spec(LayerType::kDropout, "dropout");
  s.rate = 0.25;
  s.seed = 7;
  Gen gen(60);
  const Tensor x = RandomF({64, 50}, gen, 0.5f, 1.5f);
  auto layer = Built(s, {50});
  auto y = layer->Forward({}, x, true).value();
  int64_t dropped = 0;
  for (int64_t i = 0; i < x.size(); ++i) {
    const float v = y.data<float>()[i];
    if (v == 0) {
      ++dropped;
    } else {
      EXPECT_NEAR(v, x.data<float>()[i] / 0.75f, 1e-6);
    }
  }
  // 3200 draws at p = 0.25: far inside 5 standard deviations (~24).
  EXPECT_NEAR(static_cast<double>(dropped), 800, 130);
  // The next step draws another mask; a layer with the same seed repeats the first.
  EXPECT_FALSE(Equal(layer->Forward({}, x, true).value(), y));
  EXPECT_TRUE(Equal(Built(s, {50})->Forward({}, x, true).value(), y));
  s.seed = 8;
  EXPECT_FALSE(Equal(Built(s, {50})->Forward({}, x, true).value(), y));
  // Inference: the identity.
  EXPECT_TRUE(Equal(layer->Forward({}, x, false).value(), x));
  s.seed = 7;
  CheckTrainingGradients(s, {50}, {}, RandomF({4, 50}, gen), gen);
  s.rate = 1.0;
  EXPECT_FALSE(MakeLayer(s).value()->Build({3}, DType::kFloat32).ok());
}

// ---------------------------------------------------- BatchNormalization

TEST(BatchNormalizationTest, TrainingGradientsMovingStatisticsAndInference) {
  for (bool affine : {true, false}) {
    SCOPED_TRACE(affine ? "center and scale" : "neither");
    Gen gen(affine ? 70 : 71);
    LayerSpec s = Spec(LayerType::kBatchNormalization, "batch_normalization");
    s.center = s.scale = affine;
    s.momentum = 0.9;
    s.epsilon = 1e-3;
    const Shape in{3, 4};
    auto layer = Built(s, in);
    const auto vars = layer->Variables();
    std::vector<std::string> names;
    for (const auto& v : vars) names.push_back(v.name);
    if (affine) {
      EXPECT_EQ(names,
                (std::vector<std::string>{"batch_normalization/gamma", "batch_normalization/beta",
                                          "batch_normalization/moving_mean", "batch_normalization/moving_variance"}));
    } else {
      EXPECT_EQ(names,
                (std::vector<std::string>{"batch_normalization/moving_mean", "batch_normalization/moving_variance"}));
    }
    EXPECT_FALSE(vars[vars.size() - 1].trainable);
    EXPECT_FALSE(vars[vars.size() - 2].trainable);
    std::vector<Tensor> params = RandomParams(*layer, gen);
    const Tensor x = RandomF({5, 3, 4}, gen, -2.f, 3.f);
    const Tensor y = CheckTrainingGradients(s, in, params, x, gen, 1e-2f);

    // Forward: per channel over 15 rows, biased variance.
    const size_t mm = params.size() - 2;
    std::vector<double> mean(4, 0), var(4, 0);
    for (int64_t r = 0; r < 15; ++r)
      for (int64_t c = 0; c < 4; ++c) mean[c] += x.data<float>()[r * 4 + c] / 15.0;
    for (int64_t r = 0; r < 15; ++r)
      for (int64_t c = 0; c < 4; ++c) var[c] += std::pow(x.data<float>()[r * 4 + c] - mean[c], 2) / 15.0;
    for (int64_t r = 0; r < 15; ++r)
      for (int64_t c = 0; c < 4; ++c) {
        double want = (x.data<float>()[r * 4 + c] - mean[c]) / std::sqrt(var[c] + 1e-3);
        if (affine) want = want * params[0].data<float>()[c] + params[1].data<float>()[c];
        EXPECT_NEAR(y.data<float>()[r * 4 + c], want, 1e-4);
      }
    // The moving statistics' update: a delta, (batch - moving) * (1 - momentum).
    ASSERT_TRUE(layer->Forward(params, x, true).ok());
    std::vector<Gradient> grads(vars.size());
    ASSERT_TRUE(layer->Backward(params, RandomF(x.shape(), gen), false, grads).ok());
    for (int64_t c = 0; c < 4; ++c) {
      EXPECT_TRUE(grads[mm].delta);
      EXPECT_NEAR(grads[mm].dense.data<float>()[c], (mean[c] - params[mm].data<float>()[c]) * 0.1, 1e-5);
      EXPECT_NEAR(grads[mm + 1].dense.data<float>()[c], (var[c] - params[mm + 1].data<float>()[c]) * 0.1, 1e-4);
    }
    // Adding the deltas is Keras' moving-average step.
    Tensor moving = params[mm].Clone();
    ASSERT_TRUE(AddDelta(moving, grads[mm].dense).ok());
    for (int64_t c = 0; c < 4; ++c) {
      EXPECT_NEAR(moving.data<float>()[c], params[mm].data<float>()[c] * 0.9 + mean[c] * 0.1, 1e-5);
    }
    // Inference uses the moving statistics.
    auto yi = layer->Forward(params, x, false).value();
    for (int64_t r = 0; r < 15; ++r)
      for (int64_t c = 0; c < 4; ++c) {
        double want = (x.data<float>()[r * 4 + c] - params[mm].data<float>()[c]) /
                      std::sqrt(params[mm + 1].data<float>()[c] + 1e-3);
        if (affine) want = want * params[0].data<float>()[c] + params[1].data<float>()[c];
        EXPECT_NEAR(yi.data<float>()[r * 4 + c], want, 1e-4);
      }
  }
}

// A batch large enough that the host passes split across threads (rows x
// channels >= 2^16): statistics, output and gradients against a double
// reference, and the same bits with one thread and with two.
TEST(BatchNormalizationTest, ALargeBatchMatchesADoubleReferenceWithAnyThreadCount) {
  constexpr int64_t kRows = 4100, kC = 24;  // not a multiple of the 64-row blocks
  Gen gen(72);
  LayerSpec s = Spec(LayerType::kBatchNormalization, "batch_normalization");
  s.epsilon = 1e-3;
  auto layer = Built(s, {kC});
  std::vector<Tensor> params = RandomParams(*layer, gen);
  // An offset far from zero: a one-pass E[x^2] - mean^2 would lose digits.
  const Tensor x = RandomF({kRows, kC}, gen, 97.f, 103.f);
  const Tensor dy = RandomF({kRows, kC}, gen, -1.f, 1.f);
  const float* xv = x.data<float>();
  const float* dv = dy.data<float>();
  const float* gamma = params[0].data<float>();
  const float* beta = params[1].data<float>();
  std::vector<double> mean(kC, 0), var(kC, 0), dgamma(kC, 0), dbeta(kC, 0);
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < kC; ++c) mean[c] += xv[r * kC + c] / double(kRows);
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < kC; ++c) var[c] += std::pow(xv[r * kC + c] - mean[c], 2) / double(kRows);
  auto xhat = [&](int64_t r, int64_t c) { return (xv[r * kC + c] - mean[c]) / std::sqrt(var[c] + 1e-3); };
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < kC; ++c) {
      dgamma[c] += dv[r * kC + c] * xhat(r, c);
      dbeta[c] += dv[r * kC + c];
    }
  std::vector<std::vector<float>> outputs;
  for (int threads : {1, 2}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    const int before = ComputeThreads();
    SetComputeThreads(threads);
    auto y = layer->Forward(params, x, true);
    ASSERT_TRUE(y.ok()) << y.status().message();
    std::vector<Gradient> grads(layer->Variables().size());
    auto dx = layer->Backward(params, dy.Clone(), true, grads);
    SetComputeThreads(before);
    ASSERT_TRUE(dx.ok()) << dx.status().message();
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t c = 0; c < kC; ++c) {
        ASSERT_NEAR(y->data<float>()[r * kC + c], xhat(r, c) * gamma[c] + beta[c], 2e-4) << r << "," << c;
      }
    for (int64_t c = 0; c < kC; ++c) {
      EXPECT_NEAR(grads[0].dense.data<float>()[c], dgamma[c], 1e-2 + 1e-4 * std::abs(dgamma[c])) << c;
      EXPECT_NEAR(grads[1].dense.data<float>()[c], dbeta[c], 1e-3 + 1e-5 * std::abs(dbeta[c])) << c;
      EXPECT_NEAR(grads[3].dense.data<float>()[c], (var[c] - params[3].data<float>()[c]) * 0.01,
                  1e-4 * std::max(1.0, var[c]))
          << c;
    }
    // dx = gamma / sigma * (dy - mean(dy) - xhat * mean(dy * xhat)).
    for (int64_t r = 0; r < kRows; r += 37)
      for (int64_t c = 0; c < kC; ++c) {
        const double want =
            gamma[c] / std::sqrt(var[c] + 1e-3) * (dv[r * kC + c] - dbeta[c] / kRows - xhat(r, c) * dgamma[c] / kRows);
        ASSERT_NEAR(dx->data<float>()[r * kC + c], want, 1e-3) << r << "," << c;
      }
    std::vector<float> all(y->data<float>(), y->data<float>() + y->size());
    all.insert(all.end(), dx->data<float>(), dx->data<float>() + dx->size());
    for (const Gradient& g : grads) all.insert(all.end(), g.dense.data<float>(), g.dense.data<float>() + kC);
    outputs.push_back(std::move(all));
  }
  EXPECT_TRUE(outputs[0] == outputs[1]) << "two threads changed the bits";
}

// ------------------------------------------------------------- Reshape

TEST(ReshapeTest, InfersOneDimensionAndRejectsWrongCounts) {
  LayerSpec s = Spec(LayerType::kReshape, "reshape");
  s.target_shape = {4, -1, 1};
  auto layer = Built(s, {2, 6});
  EXPECT_EQ(*layer->Build({2, 6}, DType::kFloat32), Shape({4, 3, 1}));
  Gen gen(80);
  CheckTrainingGradients(s, {2, 6}, {}, RandomF({3, 2, 6}, gen), gen);
  s.target_shape = {5, 5};
  auto r = MakeLayer(s).value()->Build({28, 28}, DType::kFloat32);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "layer \"reshape\": cannot reshape [28, 28] (784 values) to [5, 5] (25 values)");
  // ids keep their dtype through a Reshape.
  s.target_shape = {-1};
  auto ids = MakeLayer(s).value();
  ASSERT_TRUE(ids->Build({2, 3}, DType::kInt64).ok());
  EXPECT_EQ(ids->output_dtype(), DType::kInt64);
}

// -------------------------------------------------------- Normalization

TEST(NormalizationTest, GivenStatisticsInvertAndGradients) {
  LayerSpec s = Spec(LayerType::kNormalization, "normalization");
  s.mean = {1.0, -2.0, 0.5};
  s.variance = {4.0, 0.25, 1.0};
  auto layer = Built(s, {3});
  EXPECT_TRUE(layer->Variables().empty());
  Tensor x = Tensor::FromVector({1, 3}, std::vector<float>{3, -1, 0.5}).value();
  auto y = layer->Forward({}, x, false).value();
  EXPECT_FLOAT_EQ(y.data<float>()[0], 1.f);
  EXPECT_FLOAT_EQ(y.data<float>()[1], 2.f);
  EXPECT_FLOAT_EQ(y.data<float>()[2], 0.f);
  s.invert = true;
  auto back = Built(s, {3})->Forward({}, y, false).value();
  EXPECT_TRUE(AllClose(back, x));
  Gen gen(90);
  CheckTrainingGradients(s, {3}, {}, RandomF({4, 3}, gen), gen);
  s.invert = false;
  CheckTrainingGradients(s, {3}, {}, RandomF({4, 3}, gen), gen);
  // One scalar pair for every element (axis None).
  LayerSpec all = Spec(LayerType::kNormalization, "normalization");
  all.axis_none = true;
  all.mean = {2.0};
  all.variance = {4.0};
  auto yn =
      Built(all, {2, 2})->Forward({}, Tensor::FromVector({1, 2, 2}, std::vector<float>{2, 4, 0, 6}).value(), false);
  EXPECT_TRUE(AllClose(*yn, Tensor::FromVector({1, 2, 2}, std::vector<float>{0, 1, -1, 2}).value()));
  // A mean that fits no axis.
  s.mean = {1, 2};
  s.variance = {1, 1};
  auto r = MakeLayer(s).value()->Build({3}, DType::kFloat32);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("mean has 2 values; the input has 3 features"));
}

TEST(NormalizationTest, AdaptsToTheTrainingDataThroughTheModel) {
  ModelSpec m;
  m.input_shape = {2, 2};
  LayerSpec flat = Spec(LayerType::kFlatten, "flatten");
  LayerSpec norm = Spec(LayerType::kNormalization, "normalization");
  norm.path = "model.layers[1]";
  LayerSpec dense = Spec(LayerType::kDense, "dense");
  dense.units = 1;
  dense.path = "model.layers[2]";
  m.layers = {flat, norm, dense};
  auto model = Model::Create(m, {LossType::kMeanSquaredError, false}).value();
  ASSERT_EQ(model->variables().size(), 4u);
  EXPECT_EQ(model->variables()[0].name, "normalization/mean");
  EXPECT_FALSE(model->variables()[0].trainable);
  // Columns of the flattened input: [0, 2, 4], [1, 1, 1], [10, 20, 30], [-1, 1, -1].
  Tensor x = Tensor::FromVector({3, 2, 2}, std::vector<float>{0, 1, 10, -1, 2, 1, 20, 1, 4, 1, 30, -1}).value();
  ASSERT_TRUE(model->Adapt(x).ok());
  EXPECT_EQ(model->adapt_count(1), 3);
  auto init = model->InitialValues(1);
  EXPECT_TRUE(AllClose(init[0], Tensor::FromVector({4}, std::vector<float>{2, 1, 20, -1.f / 3}).value()));
  EXPECT_TRUE(AllClose(init[1], Tensor::FromVector({4}, std::vector<float>{8.f / 3, 0, 200.f / 3, 8.f / 9}).value()));
  // Training leaves the statistics alone: their delta is zero.
  auto out = model->ComputeGradients(init, x, Tensor::FromVector({3}, std::vector<float>{1, 2, 3}).value()).value();
  EXPECT_TRUE(out.grads[0].delta);
  EXPECT_TRUE(Equal(out.grads[0].dense, Tensor::Zeros(DType::kFloat32, {4})));
  // Behind a layer with weights, there is nothing to adapt to.
  m.layers = {flat, dense, norm};
  m.layers[1].units = 3;
  auto behind = Model::Create(m, {LossType::kMeanSquaredError, false}).value();
  Status st = behind->Adapt(x);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("reaches it only through layers with weights"));
}

// --------------------------------------------------------------- Lookups

TEST(LookupTest, KerasIndexLayout) {
  LookupSpec l;
  l.tokens = {"a", "b", "c"};
  auto t = Lookup::Create(l, true).value();
  // One OOV index (0), then the terms.
  EXPECT_EQ(t.vocabulary_size(), 4);
  EXPECT_EQ(*t.Index("a"), 1);
  EXPECT_EQ(*t.Index("c"), 3);
  EXPECT_EQ(*t.Index("zzz"), 0);
  // A mask token takes 0 and moves the rest up.
  l.has_mask = true;
  l.mask_token = "";
  t = Lookup::Create(l, true).value();
  EXPECT_EQ(*t.Index(""), 0);
  EXPECT_EQ(*t.Index("zzz"), 1);
  EXPECT_EQ(*t.Index("a"), 2);
  EXPECT_EQ(t.vocabulary_size(), 5);
  // Special tokens at the start of an inline vocabulary are skipped.
  l.tokens = {"", "[UNK]", "a", "b", "c"};
  EXPECT_EQ(*Lookup::Create(l, true).value().Index("a"), 2);
  // Several OOV indices: FarmHash64 buckets, stable per term.
  l.has_mask = false;
  l.tokens = {"a"};
  l.num_oov_indices = 3;
  t = Lookup::Create(l, true).value();
  std::set<int64_t> buckets;
  for (const char* w : {"x", "y", "z", "w", "v", "u", "q", "r"}) {
    const int64_t i = *t.Index(w);
    EXPECT_GE(i, 0);
    EXPECT_LT(i, 3);
    EXPECT_EQ(*t.Index(w), i);
    buckets.insert(i);
  }
  EXPECT_GT(buckets.size(), 1u);
  EXPECT_EQ(*t.Index("a"), 3);
  // No OOV index: an unknown term is an error naming it.
  l.num_oov_indices = 0;
  t = Lookup::Create(l, true).value();
  EXPECT_EQ(*t.Index("a"), 0);
  auto bad = t.Index("hulk");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("\"hulk\" is not in the vocabulary, and num_oov_indices is 0"));
  // Repeated terms and a mask token among the terms are errors.
  l.tokens = {"a", "b", "a"};
  EXPECT_THAT(Lookup::Create(l, true).status().message(), HasSubstr("repeats the term \"a\""));
  l.tokens = {"a", "", "b"};
  l.has_mask = true;
  EXPECT_THAT(Lookup::Create(l, true).status().message(), HasSubstr("the mask token \"\" is in the vocabulary"));
}

TEST(LookupTest, IntegerLookupFloormodAndInvert) {
  LookupSpec l;
  l.int_tokens = {12, 36, 1138, 42};
  l.num_oov_indices = 2;
  l.oov_token.clear();
  auto t = Lookup::Create(l, false).value();
  Tensor x = Tensor::FromVector({1, 4}, std::vector<int64_t>{12, 1000, 1001, 42}).value();
  auto y = t.LookupInts(x).value();
  EXPECT_EQ(std::vector<int64_t>(y.flat<int64_t>().begin(), y.flat<int64_t>().end()),
            (std::vector<int64_t>{2, 0, 1, 5}));  // floormod(1000, 2) = 0, floormod(1001, 2) = 1
  l.invert = true;
  auto inv = Lookup::Create(l, false).value();
  auto back = inv.LookupInts(y).value();
  EXPECT_EQ(std::vector<int64_t>(back.flat<int64_t>().begin(), back.flat<int64_t>().end()),
            (std::vector<int64_t>{12, -1, -1, 42}));
  LookupSpec s;
  s.tokens = {"yes", "no"};
  s.num_oov_indices = 0;
  s.invert = true;
  auto names =
      Lookup::Create(s, true).value().InvertToStrings(Tensor::FromVector({3}, std::vector<int64_t>{1, 0, 7}).value());
  EXPECT_EQ(names, (std::vector<std::string>{"no", "yes", "[UNK]"}));
}

TEST(LookupTest, VocabularyFiles) {
  const std::filesystem::path dir = ::tfjob::testing::MakeTempDir("lookup");
  std::ofstream(dir / "words.txt") << "avenger\nironman\nbatman\n";
  LookupSpec l;
  ASSERT_TRUE(ReadVocabularyFile((dir / "words.txt").string(), true, l).ok());
  EXPECT_EQ(l.tokens, (std::vector<std::string>{"avenger", "ironman", "batman"}));
  EXPECT_EQ(*Lookup::Create(l, true).value().Index("batman"), 3);
  Status missing = ReadVocabularyFile((dir / "nope.txt").string(), true, l);
  EXPECT_EQ(missing.code(), Code::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("nope.txt does not exist"));
  std::ofstream(dir / "ints.txt") << "3\n5\nseven\n";
  Status bad = ReadVocabularyFile((dir / "ints.txt").string(), false, l);
  EXPECT_EQ(bad.code(), Code::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("ints.txt:3: \"seven\" is not an integer"));
}

// ------------------------------------------------------------- Models

ModelSpec CnnSpec(bool batch_norm) {
  ModelSpec m;
  m.input_shape = {6, 6};
  auto add = [&](LayerSpec s) {
    s.path = "model.layers[" + std::to_string(m.layers.size()) + "]";
    m.layers.push_back(s);
  };
  LayerSpec reshape = Spec(LayerType::kReshape, "reshape");
  reshape.target_shape = {6, 6, 1};
  add(reshape);
  LayerSpec conv = Spec(LayerType::kConv2D, "conv2d");
  conv.filters = 3;
  conv.kernel_size = {3, 3};
  conv.activation = Activation::kTanh;
  add(conv);
  if (batch_norm) add(Spec(LayerType::kBatchNormalization, "batch_normalization"));
  LayerSpec pool = Spec(LayerType::kAveragePooling2D, "average_pooling2d");
  pool.kernel_size = pool.strides = {2, 2};
  add(pool);
  add(Spec(LayerType::kFlatten, "flatten"));
  LayerSpec dense = Spec(LayerType::kDense, "dense");
  dense.units = 3;
  dense.activation = Activation::kSoftmax;
  add(dense);
  return m;
}

TEST(ModelTest, CnnGradientsMatchFiniteDifferencesOfTheLoss) {
  for (bool bn : {false, true}) {
    SCOPED_TRACE(bn ? "with BatchNormalization" : "plain");
    auto m = Model::Create(CnnSpec(bn), {LossType::kSparseCategoricalCrossentropy, false}).value();
    Gen gen(bn ? 101 : 100);
    std::vector<Tensor> values = m->InitialValues(3);
    const Tensor x = RandomF({4, 6, 6}, gen);
    const Tensor y = Tensor::FromVector({4}, std::vector<int64_t>{0, 2, 1, 2}).value();
    auto out = m->ComputeGradients(values, x, y).value();
    for (size_t v = 0; v < values.size(); ++v) {
      const VariableSpec& spec = m->variables()[v];
      if (!spec.trainable) {
        EXPECT_TRUE(out.grads[v].delta) << spec.name;
        continue;
      }
      std::vector<double> num = NumericGrad(
          values[v],
          [&](const Tensor& t) {
            std::vector<Tensor> p = values;
            p[v] = t;
            return static_cast<double>(m->ComputeGradients(p, x, y).value().loss);
          },
          1e-2f);
      double largest = 0;
      for (size_t i = 0; i < num.size(); ++i) {
        const double a = out.grads[v].dense.data<float>()[i];
        largest = std::max(largest, std::fabs(num[i]));
        EXPECT_LE(std::fabs(a - num[i]), 2e-3 + 2e-2 * std::fabs(num[i])) << spec.name << " " << i;
      }
      EXPECT_GT(largest, 1e-3) << spec.name;
    }
  }
}

TEST(ModelTest, LookupsFeedAnEmbedding) {
  ModelSpec m;
  m.input_shape = {2};
  m.input_dtype = DType::kInt64;
  LayerSpec look = Spec(LayerType::kIntegerLookup, "integer_lookup");
  look.lookup.int_tokens = {100, 200, 300};
  look.lookup.oov_token.clear();
  LayerSpec emb = Spec(LayerType::kEmbedding, "embedding");
  emb.input_dim = 4;
  emb.output_dim = 2;
  emb.combiner = Combiner::kMean;
  emb.path = "model.layers[1]";
  LayerSpec dense = Spec(LayerType::kDense, "dense");
  dense.units = 1;
  dense.path = "model.layers[2]";
  m.layers = {look, emb, dense};
  auto model = Model::Create(m, {LossType::kMeanSquaredError, false}).value();
  auto values = model->InitialValues(1);
  Tensor x = Tensor::FromVector({2, 2}, std::vector<int64_t>{100, 300, 999, 200}).value();
  auto out = model->ComputeGradients(values, x, Tensor::FromVector({2}, std::vector<float>{1, 0}).value()).value();
  ASSERT_TRUE(out.grads[0].sparse);
  // Ids 1 and 3, then the OOV id 0 and 2.
  EXPECT_EQ(
      std::vector<int64_t>(out.grads[0].indices.flat<int64_t>().begin(), out.grads[0].indices.flat<int64_t>().end()),
      (std::vector<int64_t>{0, 1, 2, 3}));

  // Strings: looked up at the input by a first-layer StringLookup.
  ModelSpec sm;
  sm.input_shape = {2};
  sm.string_input = true;
  sm.input_dtype = DType::kInt64;
  LayerSpec words = Spec(LayerType::kStringLookup, "string_lookup");
  words.lookup.tokens = {"avenger", "ironman"};
  sm.layers = {words, emb, dense};
  auto smodel = Model::Create(sm, {LossType::kMeanSquaredError, false}).value();
  auto ids = smodel->LookupStrings({"ironman", "hulk", "avenger", "avenger"}, {2, 2}).value();
  EXPECT_EQ(std::vector<int64_t>(ids.flat<int64_t>().begin(), ids.flat<int64_t>().end()),
            (std::vector<int64_t>{2, 0, 1, 1}));
  EXPECT_TRUE(
      smodel->ComputeGradients(smodel->InitialValues(1), ids, Tensor::FromVector({2}, std::vector<float>{1, 0}).value())
          .ok());
  // Anywhere else a StringLookup has no strings to take.
  sm.layers = {emb, words, dense};
  sm.layers[1].path = "model.layers[1]";
  EXPECT_THAT(
      Model::Create(sm, {LossType::kMeanSquaredError, false}).status().message(),
      HasSubstr("needs a StringLookup (invert false) or a TextVectorization as the first layer, got Embedding"));
  sm.string_input = false;
  sm.layers = {dense, words};
  sm.input_dtype = DType::kFloat32;
  sm.layers[1].path = "model.layers[1]";
  EXPECT_THAT(Model::Create(sm, {LossType::kMeanSquaredError, false}).status().message(),
              HasSubstr("model.layers[1]: a StringLookup takes strings"));
}

}  // namespace
}  // namespace tfjob::model

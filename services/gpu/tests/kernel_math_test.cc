// The kernels' per-element arithmetic (kernel_math.h), compiled for the
// host, against the CPU implementations it mirrors. Runs on every machine,
// so the formulas the GPU uses are checked where no GPU is present; the
// device tests (device_test.cc) check the kernels themselves where one is.
#include "services/gpu/kernel_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include <random>
#include <vector>

#include "services/model/layers.h"
#include "services/model/layer_shapes.h"
#include "services/model/losses.h"
#include "services/model/optimizers.h"
#include "services/tensor/precision.h"

namespace tfjob::gpu {
namespace {

using model::OptimizerSpec;
using model::OptimizerType;

math::Opt ToOpt(const OptimizerSpec& s, float alpha) {
  math::Opt o{};
  o.rule = s.type == OptimizerType::kSGD       ? 0
           : s.type == OptimizerType::kAdagrad ? 1
           : s.type == OptimizerType::kRMSprop ? 2
                                               : 3;
  o.lr = static_cast<float>(s.learning_rate);
  o.momentum = static_cast<float>(s.momentum);
  o.rho = static_cast<float>(s.rho);
  o.beta_1 = static_cast<float>(s.beta_1);
  o.beta_2 = static_cast<float>(s.beta_2);
  o.epsilon = static_cast<float>(s.epsilon);
  o.alpha = alpha;
  o.nesterov = s.nesterov;
  o.centered = s.centered;
  o.amsgrad = s.amsgrad;
  return o;
}

OptimizerSpec Spec(OptimizerType t) {
  OptimizerSpec s;
  s.type = t;
  s.learning_rate = 0.05;
  return s;
}

// Four steps of every optimizer variant, element by element through
// math::Update, against model::Optimizer::ApplyDense on the same gradients.
TEST(KernelMathTest, OptimizerUpdatesMatchTheCpuOptimizer) {
  std::vector<OptimizerSpec> specs;
  specs.push_back(Spec(OptimizerType::kSGD));
  auto momentum = Spec(OptimizerType::kSGD);
  momentum.momentum = 0.9;
  specs.push_back(momentum);
  auto nesterov = momentum;
  nesterov.nesterov = true;
  specs.push_back(nesterov);
  auto adagrad = Spec(OptimizerType::kAdagrad);
  adagrad.initial_accumulator_value = 0.1;
  specs.push_back(adagrad);
  auto rms = Spec(OptimizerType::kRMSprop);
  specs.push_back(rms);
  auto rms_m = rms;
  rms_m.momentum = 0.5;
  specs.push_back(rms_m);
  auto rms_c = rms;
  rms_c.centered = true;
  specs.push_back(rms_c);
  auto rms_mc = rms_m;
  rms_mc.centered = true;
  specs.push_back(rms_mc);
  auto adam = Spec(OptimizerType::kAdam);
  specs.push_back(adam);
  auto ams = adam;
  ams.amsgrad = true;
  specs.push_back(ams);

  for (const OptimizerSpec& spec : specs) {
    model::Optimizer opt(spec);
    Tensor var = *Tensor::FromVector({5}, std::vector<float>{0.5f, -1.f, 2.f, 0.f, -0.25f});
    model::SlotState st = opt.CreateSlots(var);
    std::vector<float> w(var.flat<float>().begin(), var.flat<float>().end());
    std::vector<std::vector<float>> slots;
    for (const Tensor& s : st.slots) slots.emplace_back(s.flat<float>().begin(), s.flat<float>().end());
    for (int step = 1; step <= 4; ++step) {
      std::vector<float> g{0.1f * step, -0.3f, 0.7f / step, 0.f, 1.5f};
      ASSERT_TRUE(opt.ApplyDense(var, *Tensor::FromVector({5}, g), st).ok());
      // What the backend passes: Adam's alpha from the same iteration count.
      const double b1p = std::pow(spec.beta_1, step), b2p = std::pow(spec.beta_2, step);
      const float alpha = spec.type == OptimizerType::kAdam
                              ? static_cast<float>(spec.learning_rate * std::sqrt(1.0 - b2p) / (1.0 - b1p))
                              : static_cast<float>(spec.learning_rate);
      const math::Opt o = ToOpt(spec, alpha);
      for (size_t i = 0; i < w.size(); ++i) {
        float* s[3] = {nullptr, nullptr, nullptr};
        for (size_t k = 0; k < slots.size(); ++k) s[k] = &slots[k][i];
        math::Update(o, w[i], g[i], s[0], s[1], s[2]);
      }
      for (size_t i = 0; i < w.size(); ++i) {
        EXPECT_NEAR(w[i], var.flat<float>()[i], 1e-6f + 1e-5f * std::fabs(w[i]))
            << opt.name() << " momentum=" << spec.momentum << " nesterov=" << spec.nesterov
            << " centered=" << spec.centered << " amsgrad=" << spec.amsgrad << " step " << step << " element " << i;
      }
      for (size_t k = 0; k < slots.size(); ++k) {
        for (size_t i = 0; i < w.size(); ++i) {
          EXPECT_NEAR(slots[k][i], st.slots[k].flat<float>()[i], 1e-6f + 1e-5f * std::fabs(slots[k][i]))
              << opt.name() << " slot " << k << " step " << step;
        }
      }
    }
  }
}

// Binary cross-entropy and MSE terms, summed and divided as the kernel does,
// against model::ComputeLoss.
TEST(KernelMathTest, ElementLossesMatchTheCpuLosses) {
  const std::vector<float> logits{-3.f, -0.5f, 0.f, 0.25f, 4.f, 1e-9f};
  const std::vector<float> probs{1e-9f, 0.1f, 0.5f, 0.9f, 1.f, 0.3f};
  const std::vector<float> y{0.f, 1.f, 1.f, 0.f, 1.f, 0.5f};
  const float n = static_cast<float>(y.size());
  Tensor labels = *Tensor::FromVector({6, 1}, y);
  for (int kind = 0; kind < 3; ++kind) {
    const bool logit = kind == 1;
    const std::vector<float>& p = kind == 2 ? probs : (logit ? logits : probs);
    model::LossSpec spec;
    spec.type = kind == 2 ? model::LossType::kMeanSquaredError : model::LossType::kBinaryCrossentropy;
    spec.from_logits = logit;
    auto want = model::ComputeLoss(spec, *Tensor::FromVector({6, 1}, p), labels);
    ASSERT_TRUE(want.ok()) << want.status();
    float total = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      const math::LossTerm t = kind == 2 ? math::Mse(p[i], y[i]) : math::Bce(p[i], y[i], logit);
      total += t.loss;
      EXPECT_NEAR(t.grad / n, want->grad.flat<float>()[i], 1e-6f + 1e-5f * std::fabs(t.grad / n)) << kind << " " << i;
    }
    EXPECT_NEAR(total / n, want->loss, 1e-6f + 1e-5f * std::fabs(want->loss)) << kind;
  }
}

TEST(KernelMathTest, UnaryBinaryAndActivationGradients) {
  for (float x : {-2.f, -0.1f, 0.f, 0.3f, 5.f}) {
    EXPECT_FLOAT_EQ(math::Unary(0, x), x > 0 ? x : 0.f);
    EXPECT_NEAR(math::Unary(1, x), 1.f / (1.f + std::exp(-x)), 1e-7f);
    EXPECT_NEAR(math::Unary(2, x), std::tanh(x), 1e-7f);
    EXPECT_NEAR(math::Unary(3, x), std::exp(x), 1e-6f * std::exp(x));
    EXPECT_FLOAT_EQ(math::Unary(5, x), x * x);
    EXPECT_FLOAT_EQ(math::Binary(0, x, 2.f), x + 2.f);
    EXPECT_FLOAT_EQ(math::Binary(1, x, 2.f), x - 2.f);
    EXPECT_FLOAT_EQ(math::Binary(2, x, 2.f), x * 2.f);
    EXPECT_FLOAT_EQ(math::Binary(3, x, 2.f), x / 2.f);
  }
  EXPECT_FLOAT_EQ(math::Unary(4, 2.f), std::log(2.f));
  // Derivatives from the output y, as activation.cc's ActivationBackward.
  EXPECT_FLOAT_EQ(math::ActivationGrad(0, 0.f, 3.f), 0.f);
  EXPECT_FLOAT_EQ(math::ActivationGrad(0, 0.5f, 3.f), 3.f);
  EXPECT_FLOAT_EQ(math::ActivationGrad(1, 0.25f, 2.f), 2.f * 0.25f * 0.75f);
  EXPECT_FLOAT_EQ(math::ActivationGrad(2, 0.5f, 2.f), 2.f * (1.f - 0.25f));
}

// ---- Conv2D and pooling: the kernels' per-element functions, looped over
// every element on the host, against the CPU layers (services/model/conv.cc,
// pooling.cc) on the same input ----

Tensor RandomTensor(Shape shape, uint32_t seed) {
  Tensor t = Tensor::Zeros(DType::kFloat32, std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (float& v : t.flat<float>()) v = u(rng);
  return t;
}

struct WindowCase {
  int64_t h, w, c;
  int64_t kh, kw, sh, sw;
  model::Padding padding;
  std::string Name() const {
    return std::to_string(h) + "x" + std::to_string(w) + "x" + std::to_string(c) + " window " + std::to_string(kh) +
           "x" + std::to_string(kw) + " stride " + std::to_string(sh) + "x" + std::to_string(sw) +
           (padding == model::Padding::kSame ? " same" : " valid");
  }
};

// Windows that fit exactly, overlap (stride < window), skip inputs (stride >
// window), hang over "same" padding on one or both sides, and are not square.
const std::vector<WindowCase> kWindowCases = {
    {7, 6, 3, 3, 3, 1, 1, model::Padding::kValid}, {7, 6, 3, 3, 3, 2, 2, model::Padding::kSame},
    {5, 5, 2, 2, 2, 2, 2, model::Padding::kValid}, {6, 7, 2, 3, 2, 2, 1, model::Padding::kSame},
    {8, 8, 1, 3, 3, 1, 1, model::Padding::kSame},  {9, 5, 4, 2, 3, 3, 2, model::Padding::kValid},
    {4, 4, 3, 5, 5, 2, 2, model::Padding::kSame},
};

math::Window Geometry(const WindowCase& k, int64_t batch) {
  const auto gh = model::internal::Geometry(k.h, k.kh, k.sh, k.padding);
  const auto gw = model::internal::Geometry(k.w, k.kw, k.sw, k.padding);
  return math::Window{batch, k.h, k.w, k.c, k.kh, k.kw, k.sh, k.sw, gh.out, gw.out, gh.pad_before, gw.pad_before};
}

std::unique_ptr<model::Layer> BuiltLayer(model::LayerType type, const WindowCase& k, int64_t filters = 0) {
  model::LayerSpec spec;
  spec.type = type;
  spec.name = "layer";
  spec.kernel_size = {k.kh, k.kw};
  spec.strides = {k.sh, k.sw};
  spec.padding = k.padding;
  spec.filters = filters;
  auto layer = model::MakeLayer(spec);
  EXPECT_TRUE(layer.ok()) << layer.status();
  if (!layer.ok()) return nullptr;
  auto out = (*layer)->Build({k.h, k.w, k.c}, DType::kFloat32);
  EXPECT_TRUE(out.ok()) << k.Name() << ": " << out.status();
  return std::move(*layer);
}

TEST(KernelMathTest, Conv2DThroughIm2ColAndCol2ImMatchesTheCpuLayer) {
  for (const WindowCase& k : kWindowCases) {
    SCOPED_TRACE(k.Name());
    const int64_t batch = 2, filters = 4;
    auto layer = BuiltLayer(model::LayerType::kConv2D, k, filters);
    ASSERT_TRUE(layer);
    const math::Window g = Geometry(k, batch);
    const int64_t rows = batch * g.oh * g.ow, kk = g.kh * g.kw * g.c;
    const Tensor x = RandomTensor({batch, k.h, k.w, k.c}, 11);
    const Tensor kernel = RandomTensor({k.kh, k.kw, k.c, filters}, 12);
    const Tensor bias = RandomTensor({filters}, 13);
    const std::vector<Tensor> params{kernel, bias};
    auto y = layer->Forward(params, x, true);
    ASSERT_TRUE(y.ok()) << y.status();
    ASSERT_EQ(y->shape(), (Shape{batch, g.oh, g.ow, filters}));

    // Forward as the device does it: im2col element by element, then the
    // product (cuBLAS there) and the bias.
    std::vector<float> patches(static_cast<size_t>(rows * kk));
    for (int64_t i = 0; i < rows * kk; ++i) patches[static_cast<size_t>(i)] = math::Im2ColAt(g, x.data<float>(), i);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t f = 0; f < filters; ++f) {
        double acc = bias.data<float>()[f];
        for (int64_t j = 0; j < kk; ++j)
          acc += double{patches[static_cast<size_t>(r * kk + j)]} * kernel.data<float>()[j * filters + f];
        const float want = y->data<float>()[r * filters + f];
        ASSERT_NEAR(static_cast<float>(acc), want, 1e-5f + 1e-5f * std::fabs(want)) << "output " << r << "," << f;
      }
    }

    // Backward: dL/dpatches = dy * kernel^T, then col2im element by element.
    const Tensor dy = RandomTensor(y->shape(), 14);
    std::vector<model::Gradient> grads(2);
    auto dx = layer->Backward(params, dy, true, grads);
    ASSERT_TRUE(dx.ok()) << dx.status();
    std::vector<float> dp(static_cast<size_t>(rows * kk));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < kk; ++j) {
        double acc = 0;
        for (int64_t f = 0; f < filters; ++f)
          acc += double{dy.data<float>()[r * filters + f]} * kernel.data<float>()[j * filters + f];
        dp[static_cast<size_t>(r * kk + j)] = static_cast<float>(acc);
      }
    }
    ASSERT_EQ(dx->size(), batch * k.h * k.w * k.c);
    for (int64_t i = 0; i < dx->size(); ++i) {
      const float want = dx->data<float>()[i];
      ASSERT_NEAR(math::Col2ImAt(g, dp.data(), i), want, 1e-5f + 1e-5f * std::fabs(want)) << "dx element " << i;
    }

    // col2im is im2col's adjoint: <im2col(x), p> == <x, col2im(p)>.
    double lhs = 0, rhs = 0;
    for (int64_t i = 0; i < rows * kk; ++i) lhs += double{patches[static_cast<size_t>(i)]} * dp[static_cast<size_t>(i)];
    for (int64_t i = 0; i < x.size(); ++i) rhs += double{x.data<float>()[i]} * math::Col2ImAt(g, dp.data(), i);
    EXPECT_NEAR(lhs, rhs, 1e-4 * (1 + std::fabs(lhs)));
  }
}

TEST(KernelMathTest, PoolingForwardAndBackwardMatchTheCpuLayers) {
  for (model::LayerType type : {model::LayerType::kMaxPooling2D, model::LayerType::kAveragePooling2D}) {
    const bool max = type == model::LayerType::kMaxPooling2D;
    for (const WindowCase& k : kWindowCases) {
      // Random values, and all zeros: every window a tie, so the first
      // maximum must win on both sides.
      for (bool ties : {false, true}) {
        SCOPED_TRACE(std::string(max ? "max " : "average ") + k.Name() + (ties ? " ties" : ""));
        const int64_t batch = 2;
        auto layer = BuiltLayer(type, k);
        ASSERT_TRUE(layer);
        const math::Window g = Geometry(k, batch);
        const Tensor x =
            ties ? Tensor::Zeros(DType::kFloat32, {batch, k.h, k.w, k.c}) : RandomTensor({batch, k.h, k.w, k.c}, 21);
        auto y = layer->Forward({}, x, true);
        ASSERT_TRUE(y.ok()) << y.status();
        ASSERT_EQ(y->size(), batch * g.oh * g.ow * g.c);
        std::vector<int64_t> arg(static_cast<size_t>(y->size()), -1);
        for (int64_t i = 0; i < y->size(); ++i) {
          ASSERT_EQ(math::PoolAt(g, max, x.data<float>(), i, &arg[static_cast<size_t>(i)]), y->data<float>()[i])
              << "output " << i;
        }
        const Tensor dy = RandomTensor(y->shape(), 22);
        auto dx = layer->Backward({}, dy, true, {});
        ASSERT_TRUE(dx.ok()) << dx.status();
        for (int64_t i = 0; i < dx->size(); ++i) {
          const float got = math::PoolGradAt(g, max, dy.data<float>(), arg.data(), i), want = dx->data<float>()[i];
          if (max) {
            ASSERT_EQ(got, want) << "dx element " << i;
          } else {
            // Sums of products: a compiler may fuse them (FMA) on one side
            // and not the other, so the last bit may differ.
            ASSERT_NEAR(got, want, 1e-6f * (1.f + std::fabs(want))) << "dx element " << i;
          }
        }
      }
    }
  }
}

TEST(KernelMathTest, CoveringIsExactlyTheOutputsWhoseWindowHoldsTheInput) {
  for (int64_t pad : {0, 1, 2}) {
    for (int64_t window : {1, 2, 3, 5}) {
      if (pad >= window) continue;
      for (int64_t stride : {1, 2, 3}) {
        const int64_t in = 9, out = (in + 2 * pad - window) / stride + 1;
        for (int64_t v = 0; v < in; ++v) {
          int64_t lo, hi;
          math::Covering(v, pad, window, stride, out, lo, hi);
          for (int64_t o = 0; o < out; ++o) {
            const bool holds = o * stride - pad <= v && v < o * stride - pad + window;
            EXPECT_EQ(holds, o >= lo && o < hi)
                << "pad " << pad << " window " << window << " stride " << stride << " input " << v << " output " << o;
          }
        }
      }
    }
  }
}

// Mixed precision's bfloat16 operands on the GPU (kernels::ToLowPrecision)
// are the CPU's bit for bit: ties to even, carries into the exponent,
// infinities, NaNs kept NaNs, and a sweep of random values.
TEST(KernelMathTest, Bfloat16BitsAreTheCpusToBfloat16) {
  std::vector<float> xs = {
      0.f,    -0.f,     1.f,       -1.f, 1.00390625f, 1.01171875f,     3.3895314e38f,   65504.f,
      1e-40f, INFINITY, -INFINITY, NAN,  -NAN,        1.f + 1.f / 256, 1.f + 3.f / 512, 1.f + 1.f / 512};
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 100000; ++i) {
    const uint32_t u = bits(rng);
    float x;
    std::memcpy(&x, &u, sizeof x);
    xs.push_back(x);
  }
  for (float x : xs) ASSERT_EQ(math::Bfloat16Bits(x), ToBfloat16(x)) << x;
  // Halfway between 1 and the next bfloat16 rounds to the even one (1).
  EXPECT_EQ(math::Bfloat16Bits(1.f + 1.f / 256), 0x3f80);
  EXPECT_EQ(math::Bfloat16Bits(1.f + 3.f / 256), 0x3f82);
}

}  // namespace
}  // namespace tfjob::gpu

// The kernels' per-element arithmetic (kernel_math.h), compiled for the
// host, against the CPU implementations it mirrors. Runs on every machine,
// so the formulas the GPU uses are checked where no GPU is present; the
// device tests (device_test.cc) check the kernels themselves where one is.
#include "services/gpu/kernel_math.h"

#include <gtest/gtest.h>

#include <cmath>

#include "services/model/losses.h"
#include "services/model/optimizers.h"

namespace tfjob::gpu {
namespace {

using model::OptimizerSpec;
using model::OptimizerType;

math::Opt ToOpt(const OptimizerSpec& s, float alpha) {
  math::Opt o{};
  o.rule = s.type == OptimizerType::kSGD ? 0 : s.type == OptimizerType::kAdagrad ? 1 : s.type == OptimizerType::kRMSprop ? 2 : 3;
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

}  // namespace
}  // namespace tfjob::gpu

// Optimizer updates against a double-precision reference written from the
// Keras 3 formulas quoted in optimizers.h: sparse rows, duplicate indices,
// slot bookkeeping and errors. That the formulas are Keras's is checked
// independently, against PyTorch, in golden_test.cc.
#include "services/model/optimizers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "services/tensor/threads.h"

namespace tfjob::model {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Per-element optimizer state and rule, in double.
class RefOptimizer {
 public:
  RefOptimizer(const OptimizerSpec& s, size_t n)
      : s_(s), m_(n, 0.0), v_(n, 0.0), mg_(n, 0.0), vh_(n, 0.0), acc_(n, s.initial_accumulator_value) {}

  // One step over the listed elements with their (already summed) gradients.
  void Step(std::vector<double>& w, const std::vector<size_t>& elems, const std::vector<double>& grads) {
    t_ += 1;
    const double lr = s_.learning_rate, eps = s_.epsilon;
    for (size_t k = 0; k < elems.size(); ++k) {
      const size_t i = elems[k];
      const double g = grads[k];
      switch (s_.type) {
        case OptimizerType::kSGD:
          if (s_.momentum == 0) {
            w[i] -= lr * g;
          } else {
            m_[i] = s_.momentum * m_[i] - lr * g;
            w[i] += s_.nesterov ? s_.momentum * m_[i] - lr * g : m_[i];
          }
          break;
        case OptimizerType::kAdagrad:
          acc_[i] += g * g;
          w[i] -= lr * g / std::sqrt(acc_[i] + eps);
          break;
        case OptimizerType::kRMSprop: {
          v_[i] = s_.rho * v_[i] + (1 - s_.rho) * g * g;
          double den;
          if (s_.centered) {
            mg_[i] = s_.rho * mg_[i] + (1 - s_.rho) * g;
            den = v_[i] - mg_[i] * mg_[i] + eps;
          } else {
            den = v_[i] + eps;
          }
          const double inc = lr * g / std::sqrt(den);
          if (s_.momentum > 0) {
            m_[i] = s_.momentum * m_[i] + inc;
            w[i] -= m_[i];
          } else {
            w[i] -= inc;
          }
          break;
        }
        case OptimizerType::kAdam: {
          const double t = static_cast<double>(t_);
          const double alpha = lr * std::sqrt(1 - std::pow(s_.beta_2, t)) / (1 - std::pow(s_.beta_1, t));
          m_[i] += (g - m_[i]) * (1 - s_.beta_1);
          v_[i] += (g * g - v_[i]) * (1 - s_.beta_2);
          double v = v_[i];
          if (s_.amsgrad) {
            vh_[i] = std::max(vh_[i], v_[i]);
            v = vh_[i];
          }
          w[i] -= alpha * m_[i] / (std::sqrt(v) + eps);
          break;
        }
      }
    }
  }

  // Reference slot values by Keras slot name.
  std::map<std::string, std::vector<double>> Slots() const {
    switch (s_.type) {
      case OptimizerType::kSGD: return {{"momentum", m_}};
      case OptimizerType::kAdagrad: return {{"accumulator", acc_}};
      case OptimizerType::kRMSprop: return {{"velocity", v_}, {"momentum", m_}, {"average_gradient", mg_}};
      case OptimizerType::kAdam: return {{"momentum", m_}, {"velocity", v_}, {"velocity_hat", vh_}};
    }
    return {};
  }

 private:
  OptimizerSpec s_;
  std::vector<double> m_, v_, mg_, vh_, acc_;
  int64_t t_ = 0;
};

struct Config {
  std::string name;
  OptimizerSpec spec;
};

OptimizerSpec OptSpec(OptimizerType t, double lr) {
  OptimizerSpec s;
  s.type = t;
  s.learning_rate = lr;
  return s;
}

std::vector<Config> AllConfigs() {
  std::vector<Config> c;
  c.push_back({"sgd", OptSpec(OptimizerType::kSGD, 0.1)});
  c.push_back({"sgd_keras_defaults", OptimizerSpec{}});
  {
    auto s = OptSpec(OptimizerType::kSGD, 0.1);
    s.momentum = 0.9;
    c.push_back({"sgd_momentum", s});
    s.nesterov = true;
    c.push_back({"sgd_nesterov", s});
    s.momentum = 0.5;
    c.push_back({"sgd_nesterov_0.5", s});
  }
  c.push_back({"adagrad", OptSpec(OptimizerType::kAdagrad, 0.1)});
  {
    auto s = OptSpec(OptimizerType::kAdagrad, 0.05);
    s.initial_accumulator_value = 0.5;
    s.epsilon = 1e-3;
    c.push_back({"adagrad_custom", s});
  }
  c.push_back({"adagrad_keras_defaults", OptSpec(OptimizerType::kAdagrad, 0.001)});
  {
    auto s = OptSpec(OptimizerType::kRMSprop, 0.01);
    c.push_back({"rmsprop", s});
    s.rho = 0.8;
    s.epsilon = 1e-4;
    c.push_back({"rmsprop_rho", s});
    s.momentum = 0.5;
    c.push_back({"rmsprop_momentum", s});
    s.momentum = 0;
    s.centered = true;
    c.push_back({"rmsprop_centered", s});
    s.momentum = 0.7;
    c.push_back({"rmsprop_centered_momentum", s});
  }
  c.push_back({"rmsprop_keras_defaults", OptSpec(OptimizerType::kRMSprop, 0.001)});
  {
    auto s = OptSpec(OptimizerType::kAdam, 0.01);
    c.push_back({"adam", s});
    s.beta_1 = 0.8;
    s.beta_2 = 0.9;
    s.epsilon = 1e-3;
    c.push_back({"adam_custom", s});
    s.epsilon = 1e-7;
    s.amsgrad = true;
    c.push_back({"adam_amsgrad", s});
  }
  {
    auto s = OptSpec(OptimizerType::kAdam, 0.001);
    c.push_back({"adam_keras_defaults", s});
    s.amsgrad = true;
    c.push_back({"adam_amsgrad_keras_defaults", s});
  }
  return c;
}

Tensor FromDoubles(const Shape& shape, const std::vector<double>& v) {
  std::vector<float> f(v.begin(), v.end());
  return Tensor::FromVector(shape, f).value();
}

void ExpectMatches(const Tensor& got, const std::vector<double>& want, double tol, const std::string& what) {
  ASSERT_EQ(static_cast<size_t>(got.size()), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got.data<float>()[i], want[i], tol) << what << " element " << i;
  }
}

void ExpectSlotsMatch(const Optimizer& opt, const SlotState& st, const RefOptimizer& ref, const std::string& what) {
  auto names = opt.SlotNames();
  ASSERT_EQ(st.slots.size(), names.size()) << what;
  auto want = ref.Slots();
  for (size_t k = 0; k < names.size(); ++k) {
    ASSERT_TRUE(want.count(names[k])) << what << ": unexpected slot " << names[k];
    ExpectMatches(st.slots[k], want[names[k]], 1e-5, what + " slot " + names[k]);
  }
}

std::vector<double> RandomVec(size_t n, std::mt19937_64& gen, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = static_cast<float>(d(gen));  // representable in float
  return v;
}

TEST(OptimizerTest, KerasDefaultHyperparameters) {
  OptimizerSpec s;
  EXPECT_EQ(s.type, OptimizerType::kSGD);
  EXPECT_DOUBLE_EQ(s.learning_rate, 0.01);
  EXPECT_DOUBLE_EQ(s.momentum, 0.0);
  EXPECT_FALSE(s.nesterov);
  EXPECT_DOUBLE_EQ(s.rho, 0.9);
  EXPECT_FALSE(s.centered);
  EXPECT_DOUBLE_EQ(s.epsilon, 1e-7);
  EXPECT_DOUBLE_EQ(s.initial_accumulator_value, 0.1);
  EXPECT_DOUBLE_EQ(s.beta_1, 0.9);
  EXPECT_DOUBLE_EQ(s.beta_2, 0.999);
  EXPECT_FALSE(s.amsgrad);
}

TEST(OptimizerTest, NamesAndSlotNames) {
  EXPECT_EQ(OptimizerName(OptimizerType::kSGD), "SGD");
  EXPECT_EQ(OptimizerName(OptimizerType::kAdagrad), "Adagrad");
  EXPECT_EQ(OptimizerName(OptimizerType::kRMSprop), "RMSprop");
  EXPECT_EQ(OptimizerName(OptimizerType::kAdam), "Adam");
  OptimizerSpec s;
  EXPECT_EQ(Optimizer(s).name(), "SGD");
  EXPECT_THAT(Optimizer(s).SlotNames(), IsEmpty());
  s.momentum = 0.9;
  EXPECT_THAT(Optimizer(s).SlotNames(), ElementsAre("momentum"));
  s = OptSpec(OptimizerType::kAdagrad, 0.001);
  EXPECT_THAT(Optimizer(s).SlotNames(), ElementsAre("accumulator"));
  s = OptSpec(OptimizerType::kRMSprop, 0.001);
  EXPECT_THAT(Optimizer(s).SlotNames(), ElementsAre("velocity"));
  s.momentum = 0.5;
  EXPECT_THAT(Optimizer(s).SlotNames(), ElementsAre("velocity", "momentum"));
  s.centered = true;
  EXPECT_THAT(Optimizer(s).SlotNames(), ElementsAre("velocity", "momentum", "average_gradient"));
  s.momentum = 0;
  EXPECT_THAT(Optimizer(s).SlotNames(), ElementsAre("velocity", "average_gradient"));
  s = OptSpec(OptimizerType::kAdam, 0.001);
  EXPECT_EQ(Optimizer(s).name(), "Adam");
  EXPECT_THAT(Optimizer(s).SlotNames(), ElementsAre("momentum", "velocity"));
  s.amsgrad = true;
  EXPECT_THAT(Optimizer(s).SlotNames(), ElementsAre("momentum", "velocity", "velocity_hat"));
}

TEST(OptimizerTest, CreateSlotsAreZeroOrInitialAccumulator) {
  Tensor var = Tensor::FromVector({2, 2}, std::vector<float>{1, 2, 3, 4}).value();
  for (const Config& c : AllConfigs()) {
    Optimizer opt(c.spec);
    SlotState st = opt.CreateSlots(var);
    EXPECT_EQ(st.iterations, 0) << c.name;
    ASSERT_EQ(st.slots.size(), opt.SlotNames().size()) << c.name;
    const float init =
        c.spec.type == OptimizerType::kAdagrad ? static_cast<float>(c.spec.initial_accumulator_value) : 0.f;
    for (const Tensor& slot : st.slots) {
      EXPECT_EQ(slot.dtype(), DType::kFloat32) << c.name;
      EXPECT_EQ(slot.shape(), var.shape()) << c.name;
      EXPECT_FALSE(slot.SameBuffer(var)) << c.name;
      for (float v : slot.flat<float>()) EXPECT_EQ(v, init) << c.name;
    }
  }
}

TEST(OptimizerTest, DenseUpdatesMatchKerasFormulasOverSeveralSteps) {
  std::mt19937_64 gen(42);
  const Shape shape{2, 3};
  for (const Config& c : AllConfigs()) {
    SCOPED_TRACE(c.name);
    Optimizer opt(c.spec);
    std::vector<double> w = RandomVec(6, gen, -1, 1);
    Tensor var = FromDoubles(shape, w);
    SlotState st = opt.CreateSlots(var);
    RefOptimizer ref(c.spec, 6);
    // A large first gradient, then smaller ones of mixed sign (so Adam's v
    // decreases somewhere and amsgrad's max matters), then a larger one.
    std::vector<std::vector<double>> grads = {RandomVec(6, gen, -3, 3), RandomVec(6, gen, -0.3, 0.3),
                                              RandomVec(6, gen, -0.2, 0.2), RandomVec(6, gen, -1, 1)};
    std::vector<size_t> all{0, 1, 2, 3, 4, 5};
    const std::vector<double> w0 = w;
    for (size_t step = 0; step < grads.size(); ++step) {
      Tensor g = FromDoubles(shape, grads[step]);
      Tensor g0 = g.Clone();
      ASSERT_TRUE(opt.ApplyDense(var, g, st).ok()) << "step " << step;
      EXPECT_TRUE(Equal(g, g0)) << "the gradient was modified";
      ref.Step(w, all, grads[step]);
      EXPECT_EQ(st.iterations, static_cast<int64_t>(step + 1));
      ExpectMatches(var, w, 1e-5, "step " + std::to_string(step));
      ExpectSlotsMatch(opt, st, ref, "step " + std::to_string(step));
    }
    // The reference moved the weights by more than the tolerance.
    double moved = 0;
    for (size_t i = 0; i < 6; ++i) moved = std::max(moved, std::fabs(w[i] - w0[i]));
    EXPECT_GT(moved, 5e-4);
  }
}

// A large dense update is split over the compute threads (ApplyDense): at
// two threads every rule gives the bits it gives at one, and matches the
// reference; the split's last share (not a whole block) included.
TEST(OptimizerTest, ALargeDenseUpdateOverTwoThreadsIsBitForBitOneThreads) {
  std::mt19937_64 gen(43);
  const int64_t n = 3 * 65536 + 1000;
  const Shape shape{n};
  const std::vector<double> w0 = RandomVec(n, gen, -1, 1);
  const std::vector<std::vector<double>> grads = {RandomVec(n, gen, -3, 3), RandomVec(n, gen, -0.3, 0.3)};
  const int threads = ComputeThreads();
  for (const Config& c : AllConfigs()) {
    SCOPED_TRACE(c.name);
    Optimizer opt(c.spec, /*split_dense=*/true);
    std::vector<Tensor> results;
    for (int t : {1, 2}) {
      SetComputeThreads(t);
      Tensor var = FromDoubles(shape, w0);
      SlotState st = opt.CreateSlots(var);
      for (const auto& g : grads) ASSERT_TRUE(opt.ApplyDense(var, FromDoubles(shape, g), st).ok());
      results.push_back(std::move(var));
    }
    SetComputeThreads(threads);
    EXPECT_TRUE(Equal(results[0], results[1]));
    std::vector<double> w = w0;
    RefOptimizer ref(c.spec, static_cast<size_t>(n));
    std::vector<size_t> all(static_cast<size_t>(n));
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    for (const auto& g : grads) ref.Step(w, all, g);
    ExpectMatches(results[1], w, 1e-5, "two threads");
  }
}

TEST(OptimizerTest, VariantsDifferFromTheirBaseRule) {
  // Guards the reference itself: each option changes the result by far more
  // than the comparison tolerance for the gradients used above.
  std::mt19937_64 gen(43);
  std::vector<double> w0 = RandomVec(6, gen, -1, 1);
  std::vector<std::vector<double>> grads = {RandomVec(6, gen, -3, 3), RandomVec(6, gen, -0.3, 0.3),
                                            RandomVec(6, gen, -0.2, 0.2)};
  auto run = [&](const OptimizerSpec& s) {
    std::vector<double> w = w0;
    RefOptimizer ref(s, 6);
    for (const auto& g : grads) ref.Step(w, {0, 1, 2, 3, 4, 5}, g);
    return w;
  };
  auto differ = [](const std::vector<double>& a, const std::vector<double>& b) {
    double d = 0;
    for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
    return d;
  };
  auto base = OptSpec(OptimizerType::kAdam, 0.01);
  base.beta_2 = 0.9;
  auto ams = base;
  ams.amsgrad = true;
  EXPECT_GT(differ(run(base), run(ams)), 1e-4);
  auto rms = OptSpec(OptimizerType::kRMSprop, 0.01);
  auto centered = rms;
  centered.centered = true;
  EXPECT_GT(differ(run(rms), run(centered)), 1e-4);
  auto sgd = OptSpec(OptimizerType::kSGD, 0.1);
  sgd.momentum = 0.9;
  auto nesterov = sgd;
  nesterov.nesterov = true;
  EXPECT_GT(differ(run(sgd), run(nesterov)), 1e-3);
}

TEST(OptimizerTest, HandComputedFirstSteps) {
  // SGD: w = 1 - 0.1 * 2 = 0.8.
  {
    Optimizer opt(OptSpec(OptimizerType::kSGD, 0.1));
    Tensor w = Tensor::FromVector({1}, std::vector<float>{1}).value();
    SlotState st = opt.CreateSlots(w);
    ASSERT_TRUE(opt.ApplyDense(w, Tensor::FromVector({1}, std::vector<float>{2}).value(), st).ok());
    EXPECT_NEAR(w.data<float>()[0], 0.8, 1e-7);
  }
  // Adam's first step moves by lr * g / (|g| + eps) ~ lr whatever |g| is.
  {
    Optimizer opt(OptSpec(OptimizerType::kAdam, 0.001));
    Tensor w = Tensor::FromVector({2}, std::vector<float>{0, 0}).value();
    SlotState st = opt.CreateSlots(w);
    ASSERT_TRUE(opt.ApplyDense(w, Tensor::FromVector({2}, std::vector<float>{5, -0.01f}).value(), st).ok());
    EXPECT_NEAR(w.data<float>()[0], -0.001, 1e-6);
    EXPECT_NEAR(w.data<float>()[1], 0.001, 1e-6);
  }
  // Adagrad: a = 0.1 + 0.09 = 0.19, w = 1 - 0.1 * 0.3 / sqrt(0.19 + 1e-7).
  {
    Optimizer opt(OptSpec(OptimizerType::kAdagrad, 0.1));
    Tensor w = Tensor::FromVector({1}, std::vector<float>{1}).value();
    SlotState st = opt.CreateSlots(w);
    ASSERT_TRUE(opt.ApplyDense(w, Tensor::FromVector({1}, std::vector<float>{0.3f}).value(), st).ok());
    EXPECT_NEAR(w.data<float>()[0], 1 - 0.1 * 0.3 / std::sqrt(0.19 + 1e-7), 1e-6);
  }
}

// Rows of a [5, 2] variable; each step sends (row, gradient row) pairs, maybe repeated.
struct SparseStep {
  std::vector<int64_t> rows;
  std::vector<double> values;  // rows.size() x 2
};

TEST(OptimizerTest, SparseUpdatesTouchOnlySentRowsAndSumDuplicates) {
  std::mt19937_64 gen(44);
  const int64_t rows = 5, width = 2;
  for (const Config& c : AllConfigs()) {
    SCOPED_TRACE(c.name);
    Optimizer opt(c.spec);
    std::vector<double> w = RandomVec(rows * width, gen, -1, 1);
    Tensor var = FromDoubles({rows, width}, w);
    SlotState st = opt.CreateSlots(var);
    RefOptimizer ref(c.spec, rows * width);
    const std::vector<SparseStep> steps = {
        {{3, 1}, RandomVec(4, gen, -2, 2)},            // distinct, unsorted
        {{1, 4, 1}, RandomVec(6, gen, -1, 1)},         // row 1 repeated
        {{0, 3, 0, 0}, RandomVec(8, gen, -0.5, 0.5)},  // row 0 three times
        {{2}, RandomVec(2, gen, -1, 1)},
    };
    for (size_t k = 0; k < steps.size(); ++k) {
      const SparseStep& s = steps[k];
      const int64_t n = static_cast<int64_t>(s.rows.size());
      Tensor idx = Tensor::FromVector({n}, s.rows).value();
      Tensor vals = FromDoubles({n, width}, s.values);
      Tensor var_before = var.Clone();
      std::vector<Tensor> slots_before;
      for (const Tensor& t : st.slots) slots_before.push_back(t.Clone());

      Status applied =
          k % 2 == 0 ? opt.ApplySparse(var, idx, vals, st) : opt.Apply(var, Gradient{true, Tensor(), idx, vals}, st);
      ASSERT_TRUE(applied.ok()) << applied;
      EXPECT_EQ(st.iterations, static_cast<int64_t>(k + 1)) << "one iteration per call";

      // Reference: sum duplicates, then one rule application per element.
      std::map<int64_t, std::vector<double>> merged;
      for (int64_t i = 0; i < n; ++i) {
        auto& row = merged.try_emplace(s.rows[i], std::vector<double>(width, 0.0)).first->second;
        for (int64_t j = 0; j < width; ++j) row[j] += s.values[i * width + j];
      }
      std::vector<size_t> elems;
      std::vector<double> g;
      for (const auto& [r, row] : merged)
        for (int64_t j = 0; j < width; ++j) {
          elems.push_back(static_cast<size_t>(r * width + j));
          g.push_back(row[j]);
        }
      ref.Step(w, elems, g);
      ExpectMatches(var, w, 1e-5, "step " + std::to_string(k));
      ExpectSlotsMatch(opt, st, ref, "step " + std::to_string(k));

      // Rows not sent are bit-for-bit untouched, in the variable and every slot.
      for (int64_t r = 0; r < rows; ++r) {
        if (merged.count(r)) continue;
        for (int64_t j = 0; j < width; ++j) {
          EXPECT_EQ(var.data<float>()[r * width + j], var_before.data<float>()[r * width + j]) << "row " << r;
          for (size_t sl = 0; sl < st.slots.size(); ++sl) {
            EXPECT_EQ(st.slots[sl].data<float>()[r * width + j], slots_before[sl].data<float>()[r * width + j])
                << "slot " << sl << " row " << r;
          }
        }
      }
    }
  }
}

TEST(OptimizerTest, DuplicateIndicesEqualOneSummedRow) {
  for (const Config& c : AllConfigs()) {
    SCOPED_TRACE(c.name);
    Optimizer opt(c.spec);
    Tensor a = Tensor::FromVector({3, 1}, std::vector<float>{0.5f, -0.25f, 1}).value();
    Tensor b = a.Clone();
    SlotState sa = opt.CreateSlots(a), sb = opt.CreateSlots(b);
    ASSERT_TRUE(opt.ApplySparse(a, Tensor::FromVector({3}, std::vector<int64_t>{2, 2, 2}).value(),
                                Tensor::FromVector({3, 1}, std::vector<float>{0.5f, 0.25f, 1.25f}).value(), sa)
                    .ok());
    ASSERT_TRUE(opt.ApplySparse(b, Tensor::FromVector({1}, std::vector<int64_t>{2}).value(),
                                Tensor::FromVector({1, 1}, std::vector<float>{2.f}).value(), sb)
                    .ok());
    EXPECT_TRUE(Equal(a, b)) << a.data<float>()[2] << " vs " << b.data<float>()[2];
    EXPECT_EQ(sa.iterations, 1);
    EXPECT_NE(a.data<float>()[2], 1.f);
  }
}

// Every failing call must leave the variable, its slots and the step count alone.
class Untouched {
 public:
  Untouched(const Tensor& var, const SlotState& st) : var_(var.Clone()), iterations_(st.iterations) {
    for (const Tensor& t : st.slots) slots_.push_back(t.Clone());
  }
  void Check(const Tensor& var, const SlotState& st, const std::string& what) const {
    EXPECT_TRUE(Equal(var, var_)) << what << ": variable modified";
    EXPECT_EQ(st.iterations, iterations_) << what << ": iterations modified";
    ASSERT_EQ(st.slots.size(), slots_.size()) << what;
    for (size_t i = 0; i < slots_.size(); ++i) EXPECT_TRUE(Equal(st.slots[i], slots_[i])) << what << ": slot " << i;
  }

 private:
  Tensor var_;
  int64_t iterations_;
  std::vector<Tensor> slots_;
};

void ExpectInvalid(const Status& s, const std::string& what) {
  EXPECT_FALSE(s.ok()) << what;
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << what << ": " << s;
}

TEST(OptimizerTest, ShapeAndDtypeMismatchesLeaveEverythingUntouched) {
  for (const Config& c : AllConfigs()) {
    SCOPED_TRACE(c.name);
    Optimizer opt(c.spec);
    Tensor var = Tensor::FromVector({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6}).value();
    SlotState st = opt.CreateSlots(var);
    // One good step so slots hold non-trivial state.
    ASSERT_TRUE(
        opt.ApplyDense(var, Tensor::FromVector({2, 3}, std::vector<float>{1, -1, 1, -1, 1, -1}).value(), st).ok());
    Untouched before(var, st);
    auto g32 = Tensor::FromVector({3, 2}, std::vector<float>{1, 1, 1, 1, 1, 1}).value();
    Status s = opt.ApplyDense(var, g32, st);
    ExpectInvalid(s, "dense transposed shape");
    EXPECT_THAT(s.message(), HasSubstr("[3, 2]"));
    EXPECT_THAT(s.message(), HasSubstr("[2, 3]"));
    before.Check(var, st, "dense transposed shape");
    ExpectInvalid(opt.ApplyDense(var, Tensor::Zeros(DType::kFloat32, {6}), st), "dense flat");
    ExpectInvalid(opt.ApplyDense(var, Tensor::Zeros(DType::kInt64, {2, 3}), st), "dense int64");
    ExpectInvalid(opt.Apply(var, Gradient{false, Tensor::Zeros(DType::kFloat32, {2}), {}, {}}, st), "Apply dense");
    before.Check(var, st, "dense errors");

    auto ids = [](std::vector<int64_t> v) {
      const int64_t n = static_cast<int64_t>(v.size());
      return Tensor::FromVector({n}, std::move(v)).value();
    };
    ExpectInvalid(opt.ApplySparse(var, ids({0, 2}), Tensor::Zeros(DType::kFloat32, {2, 3}), st), "row 2 of 2");
    ExpectInvalid(opt.ApplySparse(var, ids({1, -1}), Tensor::Zeros(DType::kFloat32, {2, 3}), st), "row -1");
    ExpectInvalid(opt.ApplySparse(var, ids({1, 1, 7}), Tensor::Zeros(DType::kFloat32, {3, 3}), st), "dup + bad row");
    ExpectInvalid(opt.ApplySparse(var, ids({0, 1}), Tensor::Zeros(DType::kFloat32, {2, 2}), st), "row width");
    ExpectInvalid(opt.ApplySparse(var, ids({0, 1}), Tensor::Zeros(DType::kFloat32, {3, 3}), st), "values count");
    ExpectInvalid(opt.ApplySparse(var, ids({0}), Tensor::Zeros(DType::kInt64, {1, 3}), st), "int64 values");
    ExpectInvalid(opt.ApplySparse(var, Tensor::Zeros(DType::kFloat32, {1}), Tensor::Zeros(DType::kFloat32, {1, 3}), st),
                  "float indices");
    ExpectInvalid(
        opt.ApplySparse(var, Tensor::Zeros(DType::kInt64, {1, 1}), Tensor::Zeros(DType::kFloat32, {1, 3}), st),
        "rank-2 indices");
    before.Check(var, st, "sparse errors");

    // A slot state that belongs to another variable or optimizer.
    Tensor big = Tensor::Zeros(DType::kFloat32, {4, 3});
    SlotState foreign = opt.CreateSlots(var);
    SlotState small_state = opt.CreateSlots(Tensor::Zeros(DType::kFloat32, {1, 3}));
    if (!small_state.slots.empty()) {
      Untouched big_before(big, small_state);
      ExpectInvalid(opt.ApplyDense(big, Tensor::Zeros(DType::kFloat32, {4, 3}), small_state), "slots of a smaller var");
      ExpectInvalid(opt.ApplySparse(big, ids({3}), Tensor::Zeros(DType::kFloat32, {1, 3}), small_state),
                    "sparse, slots of a smaller var");
      big_before.Check(big, small_state, "slot shape mismatch");
    }
    foreign.slots.push_back(Tensor::Zeros(DType::kFloat32, {2, 3}));
    Untouched foreign_before(var, foreign);
    ExpectInvalid(opt.ApplyDense(var, Tensor::Zeros(DType::kFloat32, {2, 3}), foreign), "extra slot");
    ExpectInvalid(opt.ApplySparse(var, ids({0}), Tensor::Zeros(DType::kFloat32, {1, 3}), foreign), "extra slot sparse");
    foreign_before.Check(var, foreign, "extra slot");
    before.Check(var, st, "all errors");
  }
}

TEST(OptimizerTest, EmptySparseUpdateCountsAsAStep) {
  Optimizer opt(OptSpec(OptimizerType::kAdam, 0.001));
  Tensor var = Tensor::FromVector({2, 1}, std::vector<float>{1, 2}).value();
  SlotState st = opt.CreateSlots(var);
  ASSERT_TRUE(opt.ApplySparse(var, Tensor::Zeros(DType::kInt64, {0}), Tensor::Zeros(DType::kFloat32, {0, 1}), st).ok());
  EXPECT_EQ(st.iterations, 1);
  EXPECT_EQ(var.data<float>()[0], 1.f);
  EXPECT_EQ(var.data<float>()[1], 2.f);
}

}  // namespace
}  // namespace tfjob::model

#include "services/tensor/ops.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "services/tensor/tests/tensor_testing.h"

namespace tfjob::ops {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using ::tfjob::testing::F;
using ::tfjob::testing::Floats;
using ::tfjob::testing::Ints;
Tensor I(Shape s, std::vector<int64_t> v) {
  auto t = Tensor::FromVector(std::move(s), std::move(v));
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

Tensor Random(Shape s, std::mt19937_64& gen, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> d(lo, hi);
  Tensor t = Tensor::Zeros(DType::kFloat32, std::move(s));
  for (float& v : t.flat<float>()) v = d(gen);
  return t;
}

// Values of magnitude in [lo, hi] with a random sign (keeps divisors away from 0).
Tensor RandomAwayFromZero(Shape s, std::mt19937_64& gen, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::bernoulli_distribution sign(0.5);
  Tensor t = Tensor::Zeros(DType::kFloat32, std::move(s));
  for (float& v : t.flat<float>()) v = sign(gen) ? d(gen) : -d(gen);
  return t;
}

// Elementwise |a - b| <= atol + rtol * |b| against a double reference.
void ExpectNear(const Tensor& got, const Shape& shape, const std::vector<double>& want, double rtol, double atol,
                const std::string& what) {
  ASSERT_EQ(got.dtype(), DType::kFloat32) << what;
  ASSERT_EQ(got.shape(), shape) << what;
  ASSERT_EQ(static_cast<size_t>(got.size()), want.size()) << what;
  const float* g = got.data<float>();
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_LE(std::fabs(g[i] - want[i]), atol + rtol * std::fabs(want[i]))
        << what << " at " << i << ": got " << g[i] << ", want " << want[i];
  }
}

void ExpectInvalid(const Status& s, const std::string& what) {
  EXPECT_FALSE(s.ok()) << what;
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << what << ": " << s;
}

// ---------------------------------------------------------------- MatMul

TEST(MatMulTest, AllTransposeCombinationsMatchNaiveLoop) {
  std::mt19937_64 gen(1);
  const int64_t m = 5, k = 7, n = 3;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Tensor a = Random(ta ? Shape{k, m} : Shape{m, k}, gen);
      Tensor b = Random(tb ? Shape{n, k} : Shape{k, n}, gen);
      Tensor a0 = a.Clone(), b0 = b.Clone();
      auto A = [&](int64_t i, int64_t p) { return a.data<float>()[ta ? p * m + i : i * k + p]; };
      auto B = [&](int64_t p, int64_t j) { return b.data<float>()[tb ? j * k + p : p * n + j]; };
      std::vector<double> want(m * n);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double acc = 0;
          for (int64_t p = 0; p < k; ++p) acc += static_cast<double>(A(i, p)) * B(p, j);
          want[i * n + j] = acc;
        }
      auto c = MatMul(a, b, ta, tb);
      ASSERT_TRUE(c.ok()) << c.status();
      ExpectNear(*c, {m, n}, want, 1e-5, 1e-5, "MatMul ta=" + std::to_string(ta) + " tb=" + std::to_string(tb));
      EXPECT_TRUE(Equal(a, a0));
      EXPECT_TRUE(Equal(b, b0));
    }
  }
}

TEST(MatMulTest, HandComputed) {
  // [[1,2],[3,4]] x [[5,6],[7,8]] = [[19,22],[43,50]]
  auto c = MatMul(F({2, 2}, {1, 2, 3, 4}), F({2, 2}, {5, 6, 7, 8}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(Floats(*c), ElementsAre(19, 22, 43, 50));
  // A^T B: [[1,3],[2,4]] x [[5,6],[7,8]] = [[26,30],[38,44]]
  EXPECT_THAT(Floats(MatMul(F({2, 2}, {1, 2, 3, 4}), F({2, 2}, {5, 6, 7, 8}), true, false).value()),
              ElementsAre(26, 30, 38, 44));
}

TEST(MatMulTest, WorksOnRowSlices) {
  std::mt19937_64 gen(2);
  Tensor big = Random({5, 3}, gen);
  Tensor a = big.Rows(1, 4).value();  // offset view, 3 x 3
  Tensor b = Random({3, 2}, gen);
  std::vector<double> want(6);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j)
      for (int p = 0; p < 3; ++p)
        want[i * 2 + j] += double(big.data<float>()[(i + 1) * 3 + p]) * b.data<float>()[p * 2 + j];
  ExpectNear(MatMul(a, b).value(), {3, 2}, want, 1e-5, 1e-5, "slice");
}

TEST(MatMulTest, Errors) {
  Tensor a = Tensor::Zeros(DType::kFloat32, {2, 3});
  Tensor b = Tensor::Zeros(DType::kFloat32, {2, 3});
  auto s = MatMul(a, b).status();
  ExpectInvalid(s, "inner mismatch");
  EXPECT_THAT(s.message(), HasSubstr("[2, 3]"));
  EXPECT_TRUE(MatMul(a, b, false, true).ok());
  EXPECT_TRUE(MatMul(a, b, true, false).ok());
  ExpectInvalid(MatMul(a, b, true, true).status(), "inner mismatch TT");
  ExpectInvalid(MatMul(Tensor::Zeros(DType::kFloat32, {3}), b).status(), "rank 1");
  ExpectInvalid(MatMul(a, Tensor::Zeros(DType::kFloat32, {3, 2, 1})).status(), "rank 3");
  ExpectInvalid(MatMul(Tensor::Zeros(DType::kInt64, {2, 3}), Tensor::Zeros(DType::kFloat32, {3, 2})).status(),
                "int64 a");
  ExpectInvalid(MatMul(Tensor::Zeros(DType::kFloat32, {2, 3}), Tensor::Zeros(DType::kInt64, {3, 2})).status(),
                "int64 b");
}

TEST(TransposeTest, MatchesNaiveLoop) {
  std::mt19937_64 gen(3);
  Tensor a = Random({4, 6}, gen);
  std::vector<double> want(24);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 6; ++j) want[j * 4 + i] = a.data<float>()[i * 6 + j];
  ExpectNear(Transpose(a).value(), {6, 4}, want, 0, 0, "transpose");
  ExpectInvalid(Transpose(Tensor::Zeros(DType::kFloat32, {2, 2, 2})).status(), "rank 3");
  ExpectInvalid(Transpose(Tensor::Zeros(DType::kFloat32, {2})).status(), "rank 1");
  ExpectInvalid(Transpose(Tensor::Zeros(DType::kInt64, {2, 2})).status(), "int64");
}

// ------------------------------------------------------- Binary elementwise

using BinaryFn = StatusOr<Tensor> (*)(const Tensor&, const Tensor&);
struct BinaryCase {
  const char* name;
  BinaryFn fn;
  std::function<double(double, double)> ref;
};

std::vector<BinaryCase> BinaryCases() {
  return {{"Add", &Add, [](double x, double y) { return x + y; }},
          {"Sub", &Sub, [](double x, double y) { return x - y; }},
          {"Mul", &Mul, [](double x, double y) { return x * y; }},
          {"Div", &Div, [](double x, double y) { return x / y; }}};
}

TEST(BinaryOpsTest, BroadcastingMatchesNaiveLoop) {
  std::mt19937_64 gen(4);
  struct Shapes {
    Shape a, b;
  };
  // Same shape, scalars, one-element vectors, and suffixes.
  const std::vector<Shapes> shapes = {
      {{3, 4}, {3, 4}}, {{2, 3, 4}, {2, 3, 4}}, {{3, 4}, {}},        {{3, 4}, {1}}, {{5}, {}},
      {{3, 4}, {4}},    {{2, 3, 4}, {4}},       {{2, 3, 4}, {3, 4}}, {{}, {}},      {{6}, {1}}};
  for (const BinaryCase& op : BinaryCases()) {
    for (const Shapes& s : shapes) {
      Tensor a = RandomAwayFromZero(s.a, gen, 0.25f, 2.f);
      Tensor b = RandomAwayFromZero(s.b, gen, 0.25f, 2.f);
      Tensor a0 = a.Clone(), b0 = b.Clone();
      std::vector<double> want(a.size());
      for (int64_t i = 0; i < a.size(); ++i) {
        // Broadcasting over rows: b's element is the index modulo b's size.
        want[i] = op.ref(a.data<float>()[i], b.data<float>()[i % b.size()]);
      }
      auto out = op.fn(a, b);
      const std::string what = std::string(op.name) + " " + ShapeString(s.a) + " " + ShapeString(s.b);
      ASSERT_TRUE(out.ok()) << what << ": " << out.status();
      ExpectNear(*out, s.a, want, 1e-6, 1e-7, what);
      EXPECT_FALSE(out->SameBuffer(a)) << what;
      EXPECT_TRUE(Equal(a, a0)) << what;
      EXPECT_TRUE(Equal(b, b0)) << what;
    }
  }
}

TEST(BinaryOpsTest, HandComputedSuffixBroadcast) {
  Tensor a = F({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor bias = F({3}, {10, 20, 30});
  EXPECT_THAT(Floats(Add(a, bias).value()), ElementsAre(11, 22, 33, 14, 25, 36));
  EXPECT_THAT(Floats(Sub(a, bias).value()), ElementsAre(-9, -18, -27, -6, -15, -24));
  EXPECT_THAT(Floats(Mul(a, Tensor::Scalar(2)).value()), ElementsAre(2, 4, 6, 8, 10, 12));
  EXPECT_THAT(Floats(Div(a, F({3}, {1, 2, 4})).value()), ElementsAre(1, 1, 0.75f, 4, 2.5f, 1.5f));
}

TEST(BinaryOpsTest, IncompatibleShapesAreInvalidArgument) {
  const std::vector<std::pair<Shape, Shape>> bad = {
      {{2, 3}, {2}},                                  // prefix, not suffix
      {{2, 3}, {3, 2}},                               // same size, other shape
      {{2, 3}, {1, 3}},                               // same rank, not a suffix
      {{3}, {2, 3}},                                  // b larger than a
      {{}, {3}},                                      // a scalar, b vector
      {{2, 3, 4}, {2, 4}}, {{2, 3}, {0}}, {{}, {1}},  // b's rank exceeds a's
  };
  for (const BinaryCase& op : BinaryCases()) {
    for (const auto& [sa, sb] : bad) {
      auto out = op.fn(Tensor::Zeros(DType::kFloat32, sa), Tensor::Zeros(DType::kFloat32, sb));
      const std::string what = std::string(op.name) + " " + ShapeString(sa) + " " + ShapeString(sb);
      ExpectInvalid(out.status(), what);
      if (!out.ok()) {
        EXPECT_THAT(out.status().message(), HasSubstr(op.name)) << what;
        EXPECT_THAT(out.status().message(), HasSubstr(ShapeString(sa))) << what;
        EXPECT_THAT(out.status().message(), HasSubstr(ShapeString(sb))) << what;
      }
    }
    ExpectInvalid(op.fn(Tensor::Zeros(DType::kInt64, {2}), Tensor::Zeros(DType::kFloat32, {2})).status(), "int64 lhs");
    ExpectInvalid(op.fn(Tensor::Zeros(DType::kFloat32, {2}), Tensor::Zeros(DType::kInt64, {2})).status(), "int64 rhs");
    ExpectInvalid(op.fn(Tensor::Zeros(DType::kFloat32, {2}), Tensor::Zeros(DType::kInt64, {})).status(),
                  "int64 scalar");
  }
}

TEST(BinaryOpsTest, WorkOnRowSlices) {
  Tensor big = F({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  Tensor mid = big.Rows(1, 3).value();
  EXPECT_THAT(Floats(Add(mid, F({2}, {100, 200})).value()), ElementsAre(103, 204, 105, 206));
  EXPECT_THAT(Floats(Mul(mid, mid).value()), ElementsAre(9, 16, 25, 36));
}

TEST(ScaleTest, MatchesNaiveLoop) {
  std::mt19937_64 gen(5);
  Tensor a = Random({3, 5}, gen);
  std::vector<double> want(15);
  for (int i = 0; i < 15; ++i) want[i] = -2.5 * a.data<float>()[i];
  ExpectNear(Scale(a, -2.5f).value(), {3, 5}, want, 1e-6, 0, "scale");
  ExpectInvalid(Scale(Tensor::Zeros(DType::kInt64, {3}), 2.f).status(), "int64");
}

// -------------------------------------------------------- Unary elementwise

TEST(UnaryOpsTest, MatchNaiveLoop) {
  std::mt19937_64 gen(6);
  using UnaryFn = StatusOr<Tensor> (*)(const Tensor&);
  struct Case {
    const char* name;
    UnaryFn fn;
    double (*ref)(double);
    float lo, hi;
  };
  const std::vector<Case> cases = {
      {"Relu", &Relu, [](double x) { return x > 0 ? x : 0.0; }, -3, 3},
      {"Sigmoid", &Sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }, -8, 8},
      {"Tanh", &Tanh, [](double x) { return std::tanh(x); }, -4, 4},
      {"Exp", &Exp, [](double x) { return std::exp(x); }, -5, 5},
      {"Log", &Log, [](double x) { return std::log(x); }, 0.01f, 50},
      {"Square", &Square, [](double x) { return x * x; }, -10, 10},
  };
  for (const Case& c : cases) {
    for (const Shape& shape : {Shape{37}, Shape{3, 4, 5}, Shape{}, Shape{0, 3}}) {
      Tensor a = Random(shape, gen, c.lo, c.hi);
      Tensor a0 = a.Clone();
      std::vector<double> want(a.size());
      for (int64_t i = 0; i < a.size(); ++i) want[i] = c.ref(a.data<float>()[i]);
      auto out = c.fn(a);
      ASSERT_TRUE(out.ok()) << c.name << ": " << out.status();
      ExpectNear(*out, shape, want, 2e-6, 1e-7, std::string(c.name) + ShapeString(shape));
      EXPECT_TRUE(Equal(a, a0)) << c.name;
    }
    auto bad = c.fn(Tensor::Zeros(DType::kInt64, {3}));
    ExpectInvalid(bad.status(), c.name);
    if (!bad.ok()) {
      EXPECT_THAT(bad.status().message(), HasSubstr(c.name));
    }
  }
}

TEST(UnaryOpsTest, SigmoidSaturatesWithoutNaN) {
  auto s = Sigmoid(F({4}, {-1000, -100, 100, 1000})).value();
  EXPECT_NEAR(s.data<float>()[0], 0, 1e-30);
  EXPECT_NEAR(s.data<float>()[1], 0, 1e-30);
  EXPECT_EQ(s.data<float>()[2], 1);
  EXPECT_EQ(s.data<float>()[3], 1);
}

// ----------------------------------------------------------------- Reductions

enum class RK { kSum, kMean, kMax };

// Naive reduction in double over `axis` of a row-major tensor, or over all.
std::vector<double> NaiveReduce(const Tensor& a, int axis, RK kind, Shape* out_shape) {
  const float* x = a.data<float>();
  if (axis == kAllAxes) {
    *out_shape = {};
    double acc = kind == RK::kMax ? -INFINITY : 0;
    for (int64_t i = 0; i < a.size(); ++i) acc = kind == RK::kMax ? std::max(acc, double(x[i])) : acc + x[i];
    if (kind == RK::kMean) acc /= static_cast<double>(a.size());
    return {acc};
  }
  if (axis < 0) axis += a.rank();
  *out_shape = a.shape();
  out_shape->erase(out_shape->begin() + axis);
  const int64_t n_out = NumElements(*out_shape);
  std::vector<double> out(n_out, kind == RK::kMax ? -INFINITY : 0);
  // Walk every element; drop the reduced coordinate to find its output slot.
  std::vector<int64_t> idx(a.rank(), 0);
  for (int64_t flat = 0; flat < a.size(); ++flat) {
    int64_t rem = flat;
    for (int d = a.rank() - 1; d >= 0; --d) {
      idx[d] = rem % a.dim(d);
      rem /= a.dim(d);
    }
    int64_t o = 0;
    for (int d = 0; d < a.rank(); ++d) {
      if (d == axis) continue;
      o = o * a.dim(d) + idx[d];
    }
    out[o] = kind == RK::kMax ? std::max(out[o], double(x[flat])) : out[o] + x[flat];
  }
  if (kind == RK::kMean)
    for (double& v : out) v /= static_cast<double>(a.dim(axis));
  return out;
}

TEST(ReductionTest, EveryAxisAndAllMatchNaiveLoop) {
  std::mt19937_64 gen(7);
  Tensor a = Random({3, 4, 5}, gen, -10, 10);
  Tensor a0 = a.Clone();
  using ReduceFn = StatusOr<Tensor> (*)(const Tensor&, int);
  const std::vector<std::tuple<const char*, ReduceFn, RK>> kinds = {
      {"ReduceSum", &ReduceSum, RK::kSum}, {"ReduceMean", &ReduceMean, RK::kMean}, {"ReduceMax", &ReduceMax, RK::kMax}};
  for (const auto& [name, fn, kind] : kinds) {
    for (int axis : {0, 1, 2, -1, -2, -3, kAllAxes}) {
      Shape shape;
      std::vector<double> want = NaiveReduce(a, axis, kind, &shape);
      auto out = fn(a, axis);
      const std::string what = std::string(name) + " axis " + std::to_string(axis);
      ASSERT_TRUE(out.ok()) << what << ": " << out.status();
      ExpectNear(*out, shape, want, 1e-5, 1e-4, what);
    }
  }
  EXPECT_TRUE(Equal(a, a0));
  // The default axis reduces everything.
  Shape all;
  ExpectNear(ReduceSum(a).value(), {}, NaiveReduce(a, kAllAxes, RK::kSum, &all), 1e-5, 1e-4, "default sum");
  ExpectNear(ReduceMean(a).value(), {}, NaiveReduce(a, kAllAxes, RK::kMean, &all), 1e-5, 1e-4, "default mean");
  ExpectNear(ReduceMax(a).value(), {}, NaiveReduce(a, kAllAxes, RK::kMax, &all), 0, 0, "default max");
}

TEST(ReductionTest, HandComputed) {
  Tensor a = F({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_THAT(Floats(ReduceSum(a, 0).value()), ElementsAre(5, 7, 9));
  EXPECT_THAT(Floats(ReduceSum(a, 1).value()), ElementsAre(6, 15));
  EXPECT_THAT(Floats(ReduceMean(a, -1).value()), ElementsAre(2, 5));
  EXPECT_THAT(Floats(ReduceMax(a, 0).value()), ElementsAre(4, 5, 6));
  EXPECT_THAT(Floats(ReduceMean(a).value()), ElementsAre(3.5f));
  EXPECT_THAT(Floats(ReduceMax(F({3}, {-5, -2, -9})).value()), ElementsAre(-2));
  EXPECT_THAT(Floats(ReduceSum(Tensor::Scalar(4)).value()), ElementsAre(4));
}

TEST(ReductionTest, Errors) {
  Tensor a = Tensor::Zeros(DType::kFloat32, {2, 3});
  for (int axis : {2, -3, 100}) {
    ExpectInvalid(ReduceSum(a, axis).status(), "sum axis " + std::to_string(axis));
    ExpectInvalid(ReduceMean(a, axis).status(), "mean axis " + std::to_string(axis));
    ExpectInvalid(ReduceMax(a, axis).status(), "max axis " + std::to_string(axis));
  }
  ExpectInvalid(ReduceSum(Tensor::Scalar(1), 0).status(), "axis of scalar");
  ExpectInvalid(ReduceSum(Tensor::Zeros(DType::kInt64, {3})).status(), "int64 sum");
  ExpectInvalid(ReduceMean(Tensor::Zeros(DType::kInt64, {3}), 0).status(), "int64 mean");
  ExpectInvalid(ReduceMax(Tensor::Zeros(DType::kInt64, {3})).status(), "int64 max");
  ExpectInvalid(ReduceMax(Tensor::Zeros(DType::kFloat32, {0})).status(), "max of empty");
  ExpectInvalid(ReduceMax(Tensor::Zeros(DType::kFloat32, {2, 0}), 1).status(), "max of empty axis");
  // Sum of nothing is 0, as in numpy.
  EXPECT_THAT(Floats(ReduceSum(Tensor::Zeros(DType::kFloat32, {0})).value()), ElementsAre(0));
  EXPECT_THAT(Floats(ReduceSum(Tensor::Zeros(DType::kFloat32, {2, 0}), 1).value()), ElementsAre(0, 0));
}

// -------------------------------------------------------------------- ArgMax

TEST(ArgMaxTest, MatchesNaiveLoopAndPicksFirstTie) {
  std::mt19937_64 gen(8);
  // Few distinct values so ties are common.
  std::uniform_int_distribution<int> d(0, 3);
  Tensor a = Tensor::Zeros(DType::kFloat32, {4, 3, 6});
  for (float& v : a.flat<float>()) v = static_cast<float>(d(gen));
  auto out = ArgMax(a);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->dtype(), DType::kInt64);
  EXPECT_EQ(out->shape(), Shape({4, 3}));
  for (int64_t r = 0; r < 12; ++r) {
    const float* row = a.data<float>() + r * 6;
    int64_t best = 0;
    for (int64_t j = 0; j < 6; ++j)
      if (row[j] > row[best]) best = j;
    EXPECT_EQ(out->data<int64_t>()[r], best) << "row " << r;
  }
  EXPECT_THAT(Ints(ArgMax(F({3, 4}, {1, 3, 3, 0, 2, 2, 2, 2, -1, -5, 7, 7})).value()), ElementsAre(1, 0, 2));
  EXPECT_THAT(Ints(ArgMax(F({4}, {0, 0, 9, 9})).value()), ElementsAre(2));
  EXPECT_EQ(ArgMax(F({4}, {0, 0, 9, 9})).value().shape(), Shape{});
}

TEST(ArgMaxTest, Errors) {
  ExpectInvalid(ArgMax(Tensor::Scalar(1)).status(), "scalar");
  ExpectInvalid(ArgMax(Tensor::Zeros(DType::kFloat32, {3, 0})).status(), "empty last axis");
  ExpectInvalid(ArgMax(Tensor::Zeros(DType::kInt64, {3, 2})).status(), "int64");
}

// ------------------------------------------------------------------- Softmax

std::vector<double> NaiveSoftmax(const Tensor& a, bool log) {
  const int64_t n = a.dim(-1), rows = a.size() / n;
  std::vector<double> out(a.size());
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = a.data<float>() + r * n;
    double mx = -INFINITY;
    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, double(x[j]));
    double s = 0;
    for (int64_t j = 0; j < n; ++j) s += std::exp(double(x[j]) - mx);
    for (int64_t j = 0; j < n; ++j) {
      out[r * n + j] = log ? double(x[j]) - mx - std::log(s) : std::exp(double(x[j]) - mx) / s;
    }
  }
  return out;
}

TEST(SoftmaxTest, MatchesNaiveLoop) {
  std::mt19937_64 gen(9);
  for (const Shape& shape : {Shape{5}, Shape{4, 7}, Shape{2, 3, 4}}) {
    Tensor a = Random(shape, gen, -6, 6);
    Tensor a0 = a.Clone();
    ExpectNear(Softmax(a).value(), shape, NaiveSoftmax(a, false), 1e-5, 1e-7, "softmax " + ShapeString(shape));
    ExpectNear(LogSoftmax(a).value(), shape, NaiveSoftmax(a, true), 1e-5, 1e-5, "log_softmax " + ShapeString(shape));
    EXPECT_TRUE(Equal(a, a0));
  }
}

TEST(SoftmaxTest, StableForLargeValues) {
  // Shifting by 1000s must not overflow: softmax([1000, 1001, 1002]) == softmax([0, 1, 2]).
  Tensor big = F({3, 3}, {1000, 1001, 1002, -1000, -1001, -1002, 5000, 0, -5000});
  Tensor p = Softmax(big).value();
  Tensor lp = LogSoftmax(big).value();
  for (float v : p.flat<float>()) EXPECT_TRUE(std::isfinite(v));
  for (float v : lp.flat<float>()) EXPECT_TRUE(std::isfinite(v));
  const double e1 = std::exp(1.0), e2 = std::exp(2.0), z = 1 + e1 + e2;
  std::vector<double> want_p = {1 / z, e1 / z, e2 / z, e2 / z, e1 / z, 1 / z, 1, 0, 0};
  ExpectNear(p, {3, 3}, want_p, 1e-5, 1e-7, "softmax large");
  std::vector<double> want_lp = {-std::log(z) + 0,
                                 1 - std::log(z),
                                 2 - std::log(z),
                                 2 - std::log(z),
                                 1 - std::log(z),
                                 -std::log(z),
                                 0,
                                 -5000,
                                 -10000};
  ExpectNear(lp, {3, 3}, want_lp, 1e-5, 1e-5, "log_softmax large");
  for (int r = 0; r < 3; ++r) {
    double s = 0;
    for (int j = 0; j < 3; ++j) s += p.data<float>()[r * 3 + j];
    EXPECT_NEAR(s, 1.0, 1e-6);
  }
}

TEST(SoftmaxTest, Errors) {
  ExpectInvalid(Softmax(Tensor::Scalar(1)).status(), "softmax scalar");
  ExpectInvalid(LogSoftmax(Tensor::Scalar(1)).status(), "log_softmax scalar");
  ExpectInvalid(Softmax(Tensor::Zeros(DType::kInt64, {2, 2})).status(), "softmax int64");
  ExpectInvalid(LogSoftmax(Tensor::Zeros(DType::kInt64, {2, 2})).status(), "log_softmax int64");
  EXPECT_EQ(Softmax(Tensor::Zeros(DType::kFloat32, {0, 3})).value().shape(), Shape({0, 3}));
}

// ------------------------------------------------------------ Gather/Scatter

TEST(GatherTest, MatchesNaiveLoopWithRepeatedIndices) {
  std::mt19937_64 gen(10);
  Tensor params = Random({6, 4}, gen);
  Tensor idx = I({2, 3}, {5, 0, 5, 2, 2, 1});
  auto out = Gather(params, idx);
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<double> want;
  for (int64_t i : Ints(idx))
    for (int j = 0; j < 4; ++j) want.push_back(params.data<float>()[i * 4 + j]);
  ExpectNear(*out, {2, 3, 4}, want, 0, 0, "gather");

  // Scalar index drops the row axis; rank-1 params give scalars per index.
  EXPECT_EQ(Gather(params, Tensor::Zeros(DType::kInt64, {})).value().shape(), Shape({4}));
  EXPECT_THAT(Floats(Gather(F({4}, {10, 11, 12, 13}), I({3}, {3, 0, 3})).value()), ElementsAre(13, 10, 13));
  // int64 params too.
  EXPECT_THAT(Ints(Gather(I({3, 2}, {1, 2, 3, 4, 5, 6}), I({2}, {2, 0})).value()), ElementsAre(5, 6, 1, 2));
  // Empty index list.
  EXPECT_EQ(Gather(params, Tensor::Zeros(DType::kInt64, {0})).value().shape(), Shape({0, 4}));
}

TEST(GatherTest, Errors) {
  Tensor params = Tensor::Zeros(DType::kFloat32, {3, 2});
  for (int64_t bad : {int64_t{3}, int64_t{-1}, int64_t{1} << 40}) {
    auto out = Gather(params, I({2}, {0, bad}));
    ASSERT_FALSE(out.ok()) << bad;
    EXPECT_EQ(out.status().code(), Code::kOutOfRange) << bad;
    EXPECT_THAT(out.status().message(), HasSubstr(std::to_string(bad)));
  }
  ExpectInvalid(Gather(params, F({2}, {0, 1})).status(), "float indices");
  ExpectInvalid(Gather(Tensor::Scalar(1), I({1}, {0})).status(), "scalar params");
}

TEST(ScatterAddTest, AccumulatesRepeatedIndices) {
  std::mt19937_64 gen(11);
  Tensor ref = Random({5, 3}, gen);
  Tensor before = ref.Clone();
  Tensor idx = I({6}, {4, 1, 4, 0, 4, 1});
  Tensor upd = Random({6, 3}, gen);
  Tensor alias = ref;  // the update is in place on the shared buffer
  ASSERT_TRUE(ScatterAdd(ref, idx, upd).ok());
  std::vector<double> want(before.flat<float>().begin(), before.flat<float>().end());
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 3; ++j) want[idx.data<int64_t>()[i] * 3 + j] += upd.data<float>()[i * 3 + j];
  ExpectNear(ref, {5, 3}, want, 1e-6, 1e-6, "scatter");
  ExpectNear(alias, {5, 3}, want, 1e-6, 1e-6, "scatter alias");
  // Untouched rows keep their exact values.
  for (int64_t row : {2, 3})
    for (int j = 0; j < 3; ++j) EXPECT_EQ(ref.data<float>()[row * 3 + j], before.data<float>()[row * 3 + j]);

  // Rank-2 indices, updates shaped indices.shape + row shape.
  Tensor r2 = Tensor::Zeros(DType::kFloat32, {3, 2});
  ASSERT_TRUE(ScatterAdd(r2, I({2, 2}, {0, 2, 2, 2}), F({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8})).ok());
  EXPECT_THAT(Floats(r2), ElementsAre(1, 2, 0, 0, 15, 18));
}

TEST(ScatterAddTest, ErrorsLeaveRefUntouched) {
  Tensor ref = F({3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor before = ref.Clone();
  // The bad index comes after good ones: nothing may be applied.
  Status s = ScatterAdd(ref, I({3}, {0, 1, 3}), F({3, 2}, {1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(s.code(), Code::kOutOfRange) << s;
  EXPECT_TRUE(Equal(ref, before));
  s = ScatterAdd(ref, I({2}, {0, -1}), F({2, 2}, {1, 1, 1, 1}));
  EXPECT_EQ(s.code(), Code::kOutOfRange) << s;
  EXPECT_TRUE(Equal(ref, before));

  ExpectInvalid(ScatterAdd(ref, I({2}, {0, 1}), F({2, 3}, {1, 1, 1, 1, 1, 1})), "updates row shape");
  ExpectInvalid(ScatterAdd(ref, I({2}, {0, 1}), F({3, 2}, {1, 1, 1, 1, 1, 1})), "updates count");
  ExpectInvalid(ScatterAdd(ref, F({2}, {0, 1}), F({2, 2}, {1, 1, 1, 1})), "float indices");
  ExpectInvalid(ScatterAdd(ref, I({2}, {0, 1}), I({2, 2}, {1, 1, 1, 1})), "int64 updates");
  Tensor iref = I({3, 2}, {1, 2, 3, 4, 5, 6});
  ExpectInvalid(ScatterAdd(iref, I({1}, {0}), F({1, 2}, {1, 1})), "int64 ref");
  Tensor sref = Tensor::Scalar(1);
  ExpectInvalid(ScatterAdd(sref, I({1}, {0}), F({1}, {1})), "scalar ref");
  EXPECT_TRUE(Equal(ref, before));
}

// ------------------------------------------------------- Cast/Stack/Concat

TEST(CastTest, ConvertsBothWays) {
  auto i = Cast(F({6}, {2.7f, -2.7f, 0.f, -0.5f, 1e9f, -3.f}), DType::kInt64);
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_EQ(i->dtype(), DType::kInt64);
  EXPECT_THAT(Ints(*i), ElementsAre(2, -2, 0, 0, 1000000000, -3));  // truncation toward zero

  auto f = Cast(I({2, 2}, {-3, 0, 7, int64_t{1} << 24}), DType::kFloat32);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->shape(), Shape({2, 2}));
  EXPECT_THAT(Floats(*f), ElementsAre(-3, 0, 7, 16777216.f));

  // Same dtype: an independent copy.
  Tensor a = F({2}, {1, 2});
  Tensor c = Cast(a, DType::kFloat32).value();
  EXPECT_TRUE(Equal(a, c));
  EXPECT_FALSE(c.SameBuffer(a));
  c.data<float>()[0] = 9;
  EXPECT_EQ(a.data<float>()[0], 1);
}

TEST(CastTest, UnrepresentableFloatsAreInvalidArgument) {
  for (float bad : {std::nanf(""), INFINITY, -INFINITY, 1e19f, -1e19f}) {
    auto r = Cast(F({2}, {1, bad}), DType::kInt64);
    ExpectInvalid(r.status(), std::to_string(bad));
  }
}

TEST(StackTest, StacksAlongNewAxis) {
  auto s = Stack({F({2}, {1, 2}), F({2}, {3, 4}), F({2}, {5, 6})});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->shape(), Shape({3, 2}));
  EXPECT_THAT(Floats(*s), ElementsAre(1, 2, 3, 4, 5, 6));
  auto scalars = Stack({Tensor::Scalar(7), Tensor::Scalar(8)});
  ASSERT_TRUE(scalars.ok()) << scalars.status();
  EXPECT_EQ(scalars->shape(), Shape({2}));
  EXPECT_THAT(Floats(*scalars), ElementsAre(7, 8));
  auto ints = Stack({I({1, 2}, {1, 2}), I({1, 2}, {3, 4})});
  ASSERT_TRUE(ints.ok()) << ints.status();
  EXPECT_EQ(ints->shape(), Shape({2, 1, 2}));
  EXPECT_THAT(Ints(*ints), ElementsAre(1, 2, 3, 4));
}

TEST(StackTest, Errors) {
  ExpectInvalid(Stack({}).status(), "empty");
  auto s = Stack({F({2}, {1, 2}), F({3}, {1, 2, 3})});
  ExpectInvalid(s.status(), "shape");
  EXPECT_THAT(s.status().message(), HasSubstr("element 1"));
  ExpectInvalid(Stack({F({2}, {1, 2}), I({2}, {1, 2})}).status(), "dtype");
  ExpectInvalid(Stack({F({2}, {1, 2}), F({1, 2}, {1, 2})}).status(), "rank");
}

TEST(ConcatTest, ConcatenatesAlongAxis0) {
  auto c = Concat({F({2, 2}, {1, 2, 3, 4}), F({1, 2}, {5, 6}), F({0, 2}, {}), F({2, 2}, {7, 8, 9, 10})});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->shape(), Shape({5, 2}));
  EXPECT_THAT(Floats(*c), ElementsAre(1, 2, 3, 4, 5, 6, 7, 8, 9, 10));
  auto ints = Concat({I({1}, {1}), I({2}, {2, 3})});
  ASSERT_TRUE(ints.ok()) << ints.status();
  EXPECT_THAT(Ints(*ints), ElementsAre(1, 2, 3));
  // Slices concatenate by their own rows.
  Tensor big = F({3, 1}, {1, 2, 3});
  EXPECT_THAT(Floats(Concat({big.Rows(2, 3).value(), big.Rows(0, 1).value()}).value()), ElementsAre(3, 1));
}

TEST(ConcatTest, Errors) {
  ExpectInvalid(Concat({}).status(), "empty");
  ExpectInvalid(Concat({Tensor::Scalar(1), Tensor::Scalar(2)}).status(), "scalars");
  ExpectInvalid(Concat({F({1, 2}, {1, 2}), F({1, 3}, {1, 2, 3})}).status(), "trailing dims");
  ExpectInvalid(Concat({F({1, 2}, {1, 2}), F({2}, {1, 2})}).status(), "rank");
  ExpectInvalid(Concat({F({2}, {1, 2}), Tensor::Scalar(1)}).status(), "scalar later");
  ExpectInvalid(Concat({F({2}, {1, 2}), I({2}, {1, 2})}).status(), "dtype");
}

}  // namespace
}  // namespace tfjob::ops

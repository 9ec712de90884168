// Finite-difference checks of every layer's and every loss's gradients, and of
// a whole model's. The scalar checked for a layer is L = sum(w * y) for a fixed
// random w, so dL/dy = w is what Backward receives.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "services/model/layers.h"
#include "services/model/losses.h"
#include "services/model/model.h"
#include "services/model/tests/layers_more_testing.h"
#include "services/tensor/tests/tensor_testing.h"

namespace tfjob::model {
namespace {

using more_testing::NumericGrad;
using more_testing::WeightedSum;
using Gen = std::mt19937_64;

using ::tfjob::testing::RandomF;

Tensor RandomAwayFromZero(Shape s, Gen& gen, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::bernoulli_distribution sign(0.5);
  Tensor t = Tensor::Zeros(DType::kFloat32, std::move(s));
  for (float& v : t.flat<float>()) v = sign(gen) ? d(gen) : -d(gen);
  return t;
}

constexpr double kRtol = 1e-2;
constexpr double kAtol = 1e-3;

void ExpectGradWithin(const Tensor& analytic, const std::vector<double>& numeric, const std::string& what,
                      double rtol = kRtol, double atol = kAtol) {
  ASSERT_EQ(analytic.dtype(), DType::kFloat32) << what;
  ASSERT_EQ(static_cast<size_t>(analytic.size()), numeric.size()) << what;
  for (size_t i = 0; i < numeric.size(); ++i) {
    const double a = analytic.data<float>()[i], n = numeric[i];
    EXPECT_LE(std::fabs(a - n), atol + rtol * std::max(std::fabs(a), std::fabs(n)))
        << what << " element " << i << ": analytic " << a << ", numeric " << n;
  }
}

// Guards against a vacuous check: at least one gradient element must matter.
void ExpectNotAllZero(const std::vector<double>& g, const std::string& what) {
  double mx = 0;
  for (double v : g) mx = std::max(mx, std::fabs(v));
  EXPECT_GT(mx, 1e-2) << what << ": numeric gradient is all zero, the check would be vacuous";
}

double Act(Activation a, double z) {
  switch (a) {
    case Activation::kLinear: return z;
    case Activation::kRelu: return z > 0 ? z : 0;
    case Activation::kSigmoid: return 1 / (1 + std::exp(-z));
    case Activation::kTanh: return std::tanh(z);
    case Activation::kSoftmax: break;  // handled row-wise by the caller
    default: break;                    // the others: layers_more_test.cc
  }
  return z;
}

// Applies an activation row-wise along the last axis of a double buffer.
void ActRows(Activation a, std::vector<double>& v, int64_t n) {
  if (a != Activation::kSoftmax) {
    for (double& x : v) x = Act(a, x);
    return;
  }
  for (size_t r = 0; r < v.size() / n; ++r) {
    double mx = -INFINITY, s = 0;
    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, v[r * n + j]);
    for (int64_t j = 0; j < n; ++j) s += std::exp(v[r * n + j] - mx);
    for (int64_t j = 0; j < n; ++j) v[r * n + j] = std::exp(v[r * n + j] - mx) / s;
  }
}

const Activation kAllActivations[] = {Activation::kLinear, Activation::kRelu, Activation::kSigmoid, Activation::kTanh,
                                      Activation::kSoftmax};

// ------------------------------------------------------------------- Dense

struct DenseCase {
  Activation act;
  bool use_bias;
  Shape in_shape;  // per example
};

void CheckDense(const DenseCase& c, uint64_t seed) {
  const std::string what = "Dense(" + std::string(ActivationName(c.act)) + (c.use_bias ? ", bias" : ", no bias") +
                           ", in " + ShapeString(c.in_shape) + ")";
  SCOPED_TRACE(what);
  const int64_t units = 4, batch = 3;
  LayerSpec spec;
  spec.type = LayerType::kDense;
  spec.name = "dense";
  spec.units = units;
  spec.use_bias = c.use_bias;
  spec.activation = c.act;
  auto layer_or = MakeLayer(spec);
  ASSERT_TRUE(layer_or.ok()) << layer_or.status();
  auto layer = std::move(layer_or).value();
  auto out_shape = layer->Build(c.in_shape, DType::kFloat32);
  ASSERT_TRUE(out_shape.ok()) << out_shape.status();
  Shape want_out = c.in_shape;
  want_out.back() = units;
  EXPECT_EQ(*out_shape, want_out);

  const int64_t f = c.in_shape.back();
  auto vars = layer->Variables();
  ASSERT_EQ(vars.size(), c.use_bias ? 2u : 1u);
  EXPECT_EQ(vars[0].name, "dense/kernel");
  EXPECT_EQ(vars[0].shape, Shape({f, units}));
  EXPECT_FALSE(vars[0].sparse_grad);
  if (c.use_bias) {
    EXPECT_EQ(vars[1].name, "dense/bias");
    EXPECT_EQ(vars[1].shape, Shape({units}));
  }

  Shape x_shape{batch};
  x_shape.insert(x_shape.end(), c.in_shape.begin(), c.in_shape.end());
  const int64_t rows = NumElements(x_shape) / f;

  // Draw until every pre-activation is clear of relu's kink by more than any
  // finite-difference step can move it (|step effect| <= eps * 1).
  Gen gen(seed);
  std::vector<Tensor> params;
  Tensor x;
  std::vector<double> z;
  for (int attempt = 0; attempt < 1000; ++attempt) {
    params = {RandomF({f, units}, gen)};
    if (c.use_bias) params.push_back(RandomF({units}, gen));
    x = RandomF(x_shape, gen);
    z.assign(rows * units, 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t u = 0; u < units; ++u) {
        double acc = c.use_bias ? params[1].data<float>()[u] : 0.0;
        for (int64_t k = 0; k < f; ++k)
          acc += double(x.data<float>()[r * f + k]) * params[0].data<float>()[k * units + u];
        z[r * units + u] = acc;
      }
    double min_abs = INFINITY;
    for (double v : z) min_abs = std::min(min_abs, std::fabs(v));
    if (c.act != Activation::kRelu || min_abs > 0.1) break;
  }
  std::vector<double> want_y = z;
  ActRows(c.act, want_y, units);

  auto y = layer->Forward(params, x, true);
  ASSERT_TRUE(y.ok()) << y.status();
  Shape y_shape = x_shape;
  y_shape.back() = units;
  ASSERT_EQ(y->shape(), y_shape);
  for (int64_t i = 0; i < y->size(); ++i) EXPECT_NEAR(y->data<float>()[i], want_y[i], 1e-5) << "forward " << i;

  Tensor w = RandomF(y_shape, gen);
  std::vector<Gradient> grads(vars.size());
  auto dx = layer->Backward(params, w.Clone(), /*need_input_grad=*/true, grads);
  ASSERT_TRUE(dx.ok()) << dx.status();
  ASSERT_EQ(dx->shape(), x_shape);

  const float eps = 1e-2f;
  for (size_t v = 0; v < vars.size(); ++v) {
    auto loss = [&](const Tensor& pv) {
      std::vector<Tensor> p = params;
      p[v] = pv;
      return WeightedSum(layer->Forward(p, x, true).value(), w);
    };
    std::vector<double> num = NumericGrad(params[v], loss, eps);
    ASSERT_FALSE(grads[v].sparse);
    ASSERT_EQ(grads[v].dense.shape(), vars[v].shape);
    ExpectGradWithin(grads[v].dense, num, vars[v].name);
    ExpectNotAllZero(num, vars[v].name);
  }
  auto loss_x = [&](const Tensor& xp) { return WeightedSum(layer->Forward(params, xp, true).value(), w); };
  std::vector<double> num_x = NumericGrad(x, loss_x, eps);
  ExpectGradWithin(*dx, num_x, "dx");
  ExpectNotAllZero(num_x, "dx");

  // Without the input gradient, parameter gradients are unchanged.
  ASSERT_TRUE(layer->Forward(params, x, true).ok());
  std::vector<Gradient> grads2(vars.size());
  auto none = layer->Backward(params, w.Clone(), /*need_input_grad=*/false, grads2);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->size(), 0);
  for (size_t v = 0; v < vars.size(); ++v) EXPECT_TRUE(AllClose(grads2[v].dense, grads[v].dense));
}

TEST(DenseGradientTest, EveryActivationWithAndWithoutBias) {
  uint64_t seed = 100;
  for (Activation act : kAllActivations) {
    for (bool bias : {true, false}) CheckDense({act, bias, {5}}, seed++);
  }
}

TEST(DenseGradientTest, Rank3Input) {
  uint64_t seed = 200;
  for (Activation act : kAllActivations) CheckDense({act, true, {3, 5}}, seed++);
  CheckDense({Activation::kTanh, false, {2, 3}}, seed++);
}

TEST(DenseGradientTest, BackwardRejectsWrongGradientShape) {
  LayerSpec spec;
  spec.name = "d";
  spec.units = 2;
  auto layer = MakeLayer(spec).value();
  ASSERT_TRUE(layer->Build({3}, DType::kFloat32).ok());
  Gen gen(1);
  std::vector<Tensor> params = {RandomF({3, 2}, gen), RandomF({2}, gen)};
  ASSERT_TRUE(layer->Forward(params, RandomF({4, 3}, gen), true).ok());
  std::vector<Gradient> grads(2);
  auto r = layer->Backward(params, RandomF({4, 3}, gen), true, grads);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("\"d\""));
}

// --------------------------------------------------------------- Embedding

struct EmbeddingCase {
  Combiner combiner;
  Shape in_shape;  // {} (one id) or {bag}
  std::vector<int64_t> ids;
};

void CheckEmbedding(const EmbeddingCase& c, uint64_t seed) {
  const char* cname = c.combiner == Combiner::kNone ? "none" : c.combiner == Combiner::kSum ? "sum" : "mean";
  SCOPED_TRACE(std::string("Embedding(combiner=") + cname + ", in " + ShapeString(c.in_shape) + ")");
  const int64_t vocab = 8, dim = 3;
  const int64_t bag = c.in_shape.empty() ? 1 : c.in_shape[0];
  const int64_t batch = static_cast<int64_t>(c.ids.size()) / bag;
  LayerSpec spec;
  spec.type = LayerType::kEmbedding;
  spec.name = "emb";
  spec.input_dim = vocab;
  spec.output_dim = dim;
  spec.combiner = c.combiner;
  auto layer = MakeLayer(spec).value();
  auto out_shape = layer->Build(c.in_shape, DType::kInt64);
  ASSERT_TRUE(out_shape.ok()) << out_shape.status();
  const bool combined = c.combiner != Combiner::kNone;
  const Shape want_out = (combined || c.in_shape.empty()) ? Shape{dim} : Shape{bag, dim};
  EXPECT_EQ(*out_shape, want_out);
  auto vars = layer->Variables();
  ASSERT_EQ(vars.size(), 1u);
  EXPECT_EQ(vars[0].name, "emb/embeddings");
  EXPECT_EQ(vars[0].shape, Shape({vocab, dim}));
  EXPECT_TRUE(vars[0].sparse_grad);

  Gen gen(seed);
  std::vector<Tensor> params = {RandomF({vocab, dim}, gen)};
  Shape x_shape{batch};
  x_shape.insert(x_shape.end(), c.in_shape.begin(), c.in_shape.end());
  Tensor x = Tensor::FromVector(x_shape, c.ids).value();

  // Naive forward.
  const float* table = params[0].data<float>();
  std::vector<double> want;
  if (!combined) {
    for (int64_t id : c.ids)
      for (int64_t j = 0; j < dim; ++j) want.push_back(table[id * dim + j]);
  } else {
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t j = 0; j < dim; ++j) {
        double s = 0;
        for (int64_t k = 0; k < bag; ++k) s += table[c.ids[b * bag + k] * dim + j];
        want.push_back(c.combiner == Combiner::kMean ? s / bag : s);
      }
  }
  auto y = layer->Forward(params, x, true);
  ASSERT_TRUE(y.ok()) << y.status();
  Shape y_shape{batch};
  y_shape.insert(y_shape.end(), out_shape->begin(), out_shape->end());
  ASSERT_EQ(y->shape(), y_shape);
  for (int64_t i = 0; i < y->size(); ++i) EXPECT_NEAR(y->data<float>()[i], want[i], 1e-6) << "forward " << i;

  Tensor w = RandomF(y_shape, gen);
  std::vector<Gradient> grads(1);
  auto dx = layer->Backward(params, w.Clone(), /*need_input_grad=*/false, grads);
  ASSERT_TRUE(dx.ok()) << dx.status();
  const Gradient& g = grads[0];
  ASSERT_TRUE(g.sparse);
  ASSERT_EQ(g.indices.dtype(), DType::kInt64);
  ASSERT_EQ(g.indices.rank(), 1);
  // Indices: exactly the distinct ids, ascending.
  std::set<int64_t> distinct(c.ids.begin(), c.ids.end());
  std::vector<int64_t> got_idx(g.indices.flat<int64_t>().begin(), g.indices.flat<int64_t>().end());
  EXPECT_EQ(got_idx, std::vector<int64_t>(distinct.begin(), distinct.end()));
  ASSERT_EQ(g.values.shape(), Shape({static_cast<int64_t>(got_idx.size()), dim}));

  auto loss = [&](const Tensor& t) { return WeightedSum(layer->Forward({&t, 1}, x, true).value(), w); };
  std::vector<double> num = NumericGrad(params[0], loss, 1e-2f);
  ExpectNotAllZero(num, "embeddings");
  for (int64_t row = 0; row < vocab; ++row) {
    auto it = std::find(got_idx.begin(), got_idx.end(), row);
    for (int64_t j = 0; j < dim; ++j) {
      const double n = num[row * dim + j];
      if (it == got_idx.end()) {
        EXPECT_NEAR(n, 0.0, 1e-6) << "untouched row " << row << " has a nonzero numeric gradient";
      } else {
        const double a = g.values.data<float>()[(it - got_idx.begin()) * dim + j];
        EXPECT_LE(std::fabs(a - n), kAtol + kRtol * std::fabs(n))
            << "row " << row << " col " << j << ": analytic " << a << ", numeric " << n;
      }
    }
  }
}

TEST(EmbeddingGradientTest, EveryCombinerWithRepeatedIds) {
  // Row 7 (and others) are never used; ids repeat within and across bags.
  CheckEmbedding({Combiner::kNone, {}, {3, 1, 3, 0}}, 300);
  CheckEmbedding({Combiner::kNone, {3}, {1, 4, 1, 4, 4, 2}}, 301);
  CheckEmbedding({Combiner::kSum, {3}, {1, 4, 1, 4, 4, 2}}, 302);
  CheckEmbedding({Combiner::kMean, {3}, {1, 4, 1, 4, 4, 2}}, 303);
  CheckEmbedding({Combiner::kSum, {4}, {5, 5, 5, 5, 0, 2, 6, 2}}, 304);
  CheckEmbedding({Combiner::kMean, {4}, {5, 5, 5, 5, 0, 2, 6, 2}}, 305);
  CheckEmbedding({Combiner::kMean, {1}, {6, 6}}, 306);
}

TEST(EmbeddingGradientTest, HasNoInputGradientAndRejectsBadIds) {
  LayerSpec spec;
  spec.type = LayerType::kEmbedding;
  spec.name = "emb";
  spec.input_dim = 4;
  spec.output_dim = 2;
  auto layer = MakeLayer(spec).value();
  ASSERT_TRUE(layer->Build({2}, DType::kInt64).ok());
  Gen gen(2);
  std::vector<Tensor> params = {RandomF({4, 2}, gen)};
  Tensor x = Tensor::FromVector({1, 2}, std::vector<int64_t>{0, 3}).value();
  ASSERT_TRUE(layer->Forward(params, x, true).ok());
  std::vector<Gradient> grads(1);
  auto r = layer->Backward(params, RandomF({1, 2, 2}, gen), /*need_input_grad=*/true, grads);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);

  for (int64_t bad : {int64_t{4}, int64_t{-1}}) {
    auto f = layer->Forward(params, Tensor::FromVector({1, 2}, std::vector<int64_t>{0, bad}).value(), true);
    ASSERT_FALSE(f.ok()) << bad;
    EXPECT_EQ(f.status().code(), Code::kInvalidArgument);
    EXPECT_THAT(f.status().message(), ::testing::HasSubstr("\"emb\""));
    EXPECT_THAT(f.status().message(), ::testing::HasSubstr(std::to_string(bad)));
  }
  auto f = layer->Forward(params, Tensor::Zeros(DType::kFloat32, {1, 2}), true);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), Code::kInvalidArgument);
}

// ------------------------------------------------------ Activation, Flatten

TEST(ActivationLayerGradientTest, EveryActivation) {
  uint64_t seed = 400;
  for (Activation act : kAllActivations) {
    for (const Shape& in : {Shape{5}, Shape{2, 4}}) {
      SCOPED_TRACE(std::string(ActivationName(act)) + " " + ShapeString(in));
      LayerSpec spec;
      spec.type = LayerType::kActivation;
      spec.name = "act";
      spec.activation = act;
      auto layer = MakeLayer(spec).value();
      auto out = layer->Build(in, DType::kFloat32);
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_EQ(*out, in);
      EXPECT_TRUE(layer->Variables().empty());
      Gen gen(seed++);
      Shape xs{3};
      xs.insert(xs.end(), in.begin(), in.end());
      // Away from relu's kink at 0.
      Tensor x = RandomAwayFromZero(xs, gen, 0.1f, 2.f);
      Tensor x0 = x.Clone();
      auto y = layer->Forward({}, x, true);
      ASSERT_TRUE(y.ok()) << y.status();
      EXPECT_TRUE(Equal(x, x0)) << "Forward modified its input";
      std::vector<double> want(x.flat<float>().begin(), x.flat<float>().end());
      ActRows(act, want, in.back());
      for (int64_t i = 0; i < y->size(); ++i) EXPECT_NEAR(y->data<float>()[i], want[i], 1e-6) << "forward " << i;

      Tensor w = RandomF(xs, gen);
      std::vector<Gradient> none;
      auto dx = layer->Backward({}, w.Clone(), true, none);
      ASSERT_TRUE(dx.ok()) << dx.status();
      auto loss = [&](const Tensor& xp) { return WeightedSum(layer->Forward({}, xp, true).value(), w); };
      std::vector<double> num = NumericGrad(x, loss, 1e-2f);
      ExpectGradWithin(*dx, num, "dx");
      ExpectNotAllZero(num, "dx");
    }
  }
}

TEST(FlattenGradientTest, InputGradientIsReshapedOutputGradient) {
  LayerSpec spec;
  spec.type = LayerType::kFlatten;
  spec.name = "flatten";
  auto layer = MakeLayer(spec).value();
  auto out = layer->Build({2, 3}, DType::kFloat32);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, Shape({6}));
  EXPECT_TRUE(layer->Variables().empty());
  Gen gen(500);
  Tensor x = RandomF({4, 2, 3}, gen);
  auto y = layer->Forward({}, x, true);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), Shape({4, 6}));
  for (int64_t i = 0; i < x.size(); ++i) EXPECT_EQ(y->data<float>()[i], x.data<float>()[i]);
  Tensor w = RandomF({4, 6}, gen);
  std::vector<Gradient> none;
  auto dx = layer->Backward({}, w.Clone(), true, none);
  ASSERT_TRUE(dx.ok()) << dx.status();
  EXPECT_EQ(dx->shape(), Shape({4, 2, 3}));
  auto loss = [&](const Tensor& xp) { return WeightedSum(layer->Forward({}, xp, true).value(), w); };
  std::vector<double> num = NumericGrad(x, loss, 1e-2f);
  ExpectGradWithin(*dx, num, "dx");
  ExpectNotAllZero(num, "dx");

  ASSERT_TRUE(layer->Forward({}, x, true).ok());
  auto skipped = layer->Backward({}, w.Clone(), false, none);
  ASSERT_TRUE(skipped.ok());
  EXPECT_EQ(skipped->size(), 0);

  auto bad = layer->Forward({}, RandomF({4, 3, 2}, gen), true);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
}

// ------------------------------------------------------------------- Losses

// The clip bounds as float32 values, as Keras computes them in float32
// (1 - 1e-7 rounds to 1 - 2^-23).
const double kClipLo = static_cast<double>(1e-7f);
const double kClipHi = static_cast<double>(1.f - 1e-7f);
double Clip(double p) { return std::clamp(p, kClipLo, kClipHi); }

// Keras reference values (reduction: mean over the batch; for elementwise
// losses, mean over the last axis first, i.e. the mean over all elements).
double RefMse(const Tensor& p, const Tensor& y) {
  double s = 0;
  for (int64_t i = 0; i < p.size(); ++i) {
    const double d = double(p.data<float>()[i]) - y.data<float>()[i];
    s += d * d;
  }
  return s / p.size();
}

double RefBce(const Tensor& p, const Tensor& y, bool logits) {
  double s = 0;
  for (int64_t i = 0; i < p.size(); ++i) {
    const double t = y.data<float>()[i];
    double q = p.data<float>()[i];
    if (logits) q = 1 / (1 + std::exp(-q));
    q = Clip(q);
    s += -(t * std::log(q) + (1 - t) * std::log(1 - q));
  }
  return s / p.size();
}

// Rows of target distributions; probabilities are normalised then clipped.
double RefCce(const Tensor& p, const std::vector<double>& y, bool logits) {
  const int64_t b = p.dim(0), c = p.dim(1);
  double total = 0;
  for (int64_t r = 0; r < b; ++r) {
    const float* x = p.data<float>() + r * c;
    std::vector<double> logq(c);
    if (logits) {
      double mx = -INFINITY, s = 0;
      for (int64_t j = 0; j < c; ++j) mx = std::max(mx, double(x[j]));
      for (int64_t j = 0; j < c; ++j) s += std::exp(x[j] - mx);
      for (int64_t j = 0; j < c; ++j) logq[j] = x[j] - mx - std::log(s);
    } else {
      double s = 0;
      for (int64_t j = 0; j < c; ++j) s += x[j];
      for (int64_t j = 0; j < c; ++j) logq[j] = std::log(Clip(x[j] / s));
    }
    for (int64_t j = 0; j < c; ++j) total -= y[r * c + j] * logq[j];
  }
  return total / b;
}

std::vector<double> OneHot(const std::vector<int64_t>& ids, int64_t c) {
  std::vector<double> y(ids.size() * c, 0.0);
  for (size_t i = 0; i < ids.size(); ++i) y[i * c + ids[i]] = 1;
  return y;
}

void CheckLoss(const LossSpec& spec, const Tensor& pred, const Tensor& labels, double ref, float eps,
               const std::string& what) {
  SCOPED_TRACE(what);
  auto r = ComputeLoss(spec, pred, labels);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->loss, ref, 1e-5 * std::max(1.0, std::fabs(ref))) << "loss value";
  ASSERT_EQ(r->grad.shape(), pred.shape());
  auto loss = [&](const Tensor& p) { return static_cast<double>(ComputeLoss(spec, p, labels).value().loss); };
  std::vector<double> num = NumericGrad(pred, loss, eps);
  ExpectGradWithin(r->grad, num, "d loss / d prediction", 1e-2, 2e-4);
  ExpectNotAllZero(num, "d loss / d prediction");
}

TEST(LossGradientTest, MeanSquaredError) {
  Gen gen(600);
  LossSpec spec{LossType::kMeanSquaredError, false};
  Tensor pred = RandomF({4, 3}, gen, -2, 2);
  Tensor y = RandomF({4, 3}, gen, -2, 2);
  CheckLoss(spec, pred, y, RefMse(pred, y), 1e-2f, "mse float labels");
  // [B] labels for [B, 1] predictions, as int64.
  Tensor p1 = RandomF({5, 1}, gen, -2, 2);
  Tensor yi = Tensor::FromVector({5}, std::vector<int64_t>{0, 1, -1, 2, 0}).value();
  Tensor yf = Tensor::FromVector({5}, std::vector<float>{0, 1, -1, 2, 0}).value();
  CheckLoss(spec, p1, yi, RefMse(p1, yf), 1e-2f, "mse int64 labels");
  // Hand-computed: ((1-0)^2 + (2-4)^2) / 2 = 2.5.
  auto r = ComputeLoss(spec, Tensor::FromVector({2}, std::vector<float>{1, 2}).value(),
                       Tensor::FromVector({2}, std::vector<float>{0, 4}).value());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FLOAT_EQ(r->loss, 2.5f);
}

TEST(LossGradientTest, BinaryCrossentropy) {
  Gen gen(601);
  Tensor y = Tensor::FromVector({4, 2}, std::vector<float>{1, 0, 0, 1, 1, 1, 0.3f, 0}).value();  // incl. a soft label
  Tensor logits = RandomF({4, 2}, gen, -3, 3);
  CheckLoss({LossType::kBinaryCrossentropy, true}, logits, y, RefBce(logits, y, true), 1e-2f, "bce logits");
  Tensor probs = RandomF({4, 2}, gen, 0.1f, 0.9f);
  CheckLoss({LossType::kBinaryCrossentropy, false}, probs, y, RefBce(probs, y, false), 1e-3f, "bce probabilities");
  // int64 labels [B] for predictions [B, 1].
  Tensor p1 = RandomF({3, 1}, gen, 0.1f, 0.9f);
  Tensor yi = Tensor::FromVector({3}, std::vector<int64_t>{1, 0, 1}).value();
  Tensor yf = Tensor::FromVector({3, 1}, std::vector<float>{1, 0, 1}).value();
  CheckLoss({LossType::kBinaryCrossentropy, false}, p1, yi, RefBce(p1, yf, false), 1e-3f, "bce int64 labels");

  // Large logits stay finite and exact: softplus(-50) ~ 0, softplus(50) = 50.
  auto big =
      ComputeLoss({LossType::kBinaryCrossentropy, true}, Tensor::FromVector({2}, std::vector<float>{50, 50}).value(),
                  Tensor::FromVector({2}, std::vector<float>{1, 0}).value());
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_NEAR(big->loss, 25.0, 1e-4);
}

TEST(LossGradientTest, BinaryCrossentropyClipsProbabilities) {
  // p = 0 with label 1 costs -log(1e-7), p = 1 with label 0 costs
  // -log(1 - (1 - 1e-7)), p = 0 with label 0 costs -log(1 - 1e-7) ~ 1e-7.
  Tensor p = Tensor::FromVector({3}, std::vector<float>{0, 1, 0}).value();
  Tensor y = Tensor::FromVector({3}, std::vector<float>{1, 0, 0}).value();
  auto r = ComputeLoss({LossType::kBinaryCrossentropy, false}, p, y);
  ASSERT_TRUE(r.ok()) << r.status();
  const double want = (-std::log(kClipLo) - std::log(1 - kClipHi) - std::log(1 - kClipLo)) / 3;
  EXPECT_NEAR(r->loss, want, 1e-4);
  EXPECT_NEAR(r->loss, RefBce(p, y, false), 1e-4);
  for (float g : r->grad.flat<float>()) EXPECT_TRUE(std::isfinite(g));
}

TEST(LossGradientTest, SparseCategoricalCrossentropy) {
  Gen gen(602);
  const std::vector<int64_t> ids{2, 0, 3, 2, 1};
  Tensor yi = Tensor::FromVector({5}, ids).value();
  Tensor yf = Tensor::FromVector({5}, std::vector<float>{2, 0, 3, 2, 1}).value();
  Tensor logits = RandomF({5, 4}, gen, -3, 3);
  LossSpec from_logits{LossType::kSparseCategoricalCrossentropy, true};
  CheckLoss(from_logits, logits, yi, RefCce(logits, OneHot(ids, 4), true), 1e-2f, "scce logits int64");
  CheckLoss(from_logits, logits, yf, RefCce(logits, OneHot(ids, 4), true), 1e-2f, "scce logits float labels");
  // Probabilities that do not sum to one exercise the normalisation.
  Tensor probs = RandomF({5, 4}, gen, 0.1f, 0.6f);
  LossSpec from_probs{LossType::kSparseCategoricalCrossentropy, false};
  CheckLoss(from_probs, probs, yi, RefCce(probs, OneHot(ids, 4), false), 1e-3f, "scce probabilities");
  // [B, 1] labels are accepted too.
  Tensor y2 = Tensor::FromVector({5, 1}, ids).value();
  CheckLoss(from_probs, probs, y2, RefCce(probs, OneHot(ids, 4), false), 1e-3f, "scce [B,1] labels");
}

TEST(LossGradientTest, CategoricalCrossentropyWithSoftLabels) {
  Gen gen(603);
  // Row 0 one-hot, rows 1-2 soft, row 3 soft and not summing to one.
  std::vector<float> yv{0, 1, 0, 0.2f, 0.5f, 0.3f, 0.6f, 0.1f, 0.3f, 0.5f, 0.5f, 0.5f};
  Tensor y = Tensor::FromVector({4, 3}, yv).value();
  std::vector<double> yd(yv.begin(), yv.end());
  Tensor logits = RandomF({4, 3}, gen, -3, 3);
  CheckLoss({LossType::kCategoricalCrossentropy, true}, logits, y, RefCce(logits, yd, true), 1e-2f, "cce logits");
  Tensor probs = RandomF({4, 3}, gen, 0.1f, 0.9f);
  CheckLoss({LossType::kCategoricalCrossentropy, false}, probs, y, RefCce(probs, yd, false), 1e-3f,
            "cce probabilities");
}

TEST(LossGradientTest, SoftmaxCrossentropyIsStableForLargeLogits) {
  Tensor logits = Tensor::FromVector({1, 3}, std::vector<float>{1000, 1001, 1002}).value();
  auto r = ComputeLoss({LossType::kSparseCategoricalCrossentropy, true}, logits,
                       Tensor::FromVector({1}, std::vector<int64_t>{0}).value());
  ASSERT_TRUE(r.ok()) << r.status();
  const double z = 1 + std::exp(1.0) + std::exp(2.0);
  EXPECT_NEAR(r->loss, std::log(z), 1e-4);  // -log softmax([0,1,2])[0]
  for (float g : r->grad.flat<float>()) EXPECT_TRUE(std::isfinite(g));
}

TEST(LossTest, BadLabelsAreInvalidArgument) {
  Tensor p23 = Tensor::Zeros(DType::kFloat32, {2, 3});
  auto expect_invalid = [](const StatusOr<LossResult>& r, const std::string& what, const std::string& substr) {
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << what;
    EXPECT_THAT(r.status().message(), ::testing::HasSubstr(substr)) << what;
  };
  const LossSpec mse{LossType::kMeanSquaredError, false}, bce{LossType::kBinaryCrossentropy, false},
      scce{LossType::kSparseCategoricalCrossentropy, false}, cce{LossType::kCategoricalCrossentropy, false};
  expect_invalid(ComputeLoss(mse, p23, Tensor::Zeros(DType::kFloat32, {2, 2})), "mse count", "MeanSquaredError");
  expect_invalid(ComputeLoss(bce, p23, Tensor::Zeros(DType::kFloat32, {3, 2})), "bce batch", "BinaryCrossentropy");
  expect_invalid(ComputeLoss(scce, p23, Tensor::FromVector({2}, std::vector<int64_t>{0, 3}).value()), "scce range",
                 "outside [0, 3)");
  expect_invalid(ComputeLoss(scce, p23, Tensor::FromVector({2}, std::vector<int64_t>{-1, 0}).value()), "scce negative",
                 "-1");
  expect_invalid(ComputeLoss(scce, p23, Tensor::FromVector({2}, std::vector<float>{0, 1.5f}).value()),
                 "scce non-integer", "not a class id");
  expect_invalid(ComputeLoss(scce, p23, Tensor::Zeros(DType::kInt64, {3})), "scce count", "one class id");
  expect_invalid(ComputeLoss(scce, Tensor::Zeros(DType::kFloat32, {2, 3, 1}), Tensor::Zeros(DType::kInt64, {2})),
                 "scce rank 3", "[batch, classes]");
  expect_invalid(ComputeLoss(cce, p23, Tensor::Zeros(DType::kInt64, {2, 3})), "cce int64", "one-hot");
  expect_invalid(ComputeLoss(cce, p23, Tensor::Zeros(DType::kFloat32, {2})), "cce ids", "one-hot");
  expect_invalid(ComputeLoss(mse, Tensor::Zeros(DType::kInt64, {2, 3}), p23), "int64 predictions", "float32");
  expect_invalid(ComputeLoss(mse, Tensor::Zeros(DType::kFloat32, {0, 3}), Tensor::Zeros(DType::kFloat32, {0, 3})),
                 "empty batch", "empty batch");
  expect_invalid(ComputeLoss(mse, Tensor::Scalar(1), Tensor::Scalar(1)), "scalar prediction", "empty batch");
  // A scalar label against a one-element batch must be rejected, not read past its shape.
  expect_invalid(ComputeLoss(mse, Tensor::Zeros(DType::kFloat32, {1}), Tensor::Scalar(0)), "mse scalar label",
                 "MeanSquaredError");
  expect_invalid(ComputeLoss(bce, Tensor::Zeros(DType::kFloat32, {1, 1}), Tensor::Scalar(0)), "bce scalar label",
                 "BinaryCrossentropy");
  expect_invalid(ComputeLoss(scce, Tensor::Zeros(DType::kFloat32, {1, 3}), Tensor::Zeros(DType::kInt64, {})),
                 "scce scalar label", "one class id");

  // CheckLabels agrees with ComputeLoss.
  EXPECT_TRUE(CheckLabels(scce, {2, 3}, Tensor::FromVector({2}, std::vector<int64_t>{0, 2}).value()).ok());
  EXPECT_EQ(CheckLabels(scce, {2, 3}, Tensor::FromVector({2}, std::vector<int64_t>{0, 3}).value()).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(CheckLabels(cce, {2, 3}, Tensor::Zeros(DType::kFloat32, {2, 2})).code(), Code::kInvalidArgument);
  EXPECT_EQ(CheckLabels(mse, {2, 3}, Tensor::Scalar(0)).code(), Code::kInvalidArgument);
  EXPECT_TRUE(CheckLabels(bce, {4, 1}, Tensor::Zeros(DType::kInt64, {4})).ok());
}

// ------------------------------------------------------------- Whole model

LayerSpec DenseSpec(const std::string& name, int64_t units, Activation act, int index) {
  LayerSpec s;
  s.type = LayerType::kDense;
  s.name = name;
  s.units = units;
  s.activation = act;
  s.path = "model.layers[" + std::to_string(index) + "]";
  return s;
}

// FD over a few coordinates of every variable of the training loss.
void CheckModelGradients(Model& model, std::vector<Tensor> values, const Tensor& x, const Tensor& y, float eps) {
  auto out = model.ComputeGradients(values, x, y);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->grads.size(), values.size());
  for (size_t v = 0; v < values.size(); ++v) {
    SCOPED_TRACE(model.variables()[v].name);
    const Gradient& g = out->grads[v];
    // Dense view of the gradient (sparse rows scattered into zeros).
    Tensor dense = Tensor::Zeros(DType::kFloat32, values[v].shape());
    if (g.sparse) {
      const int64_t row = values[v].size() / values[v].dim(0);
      for (int64_t k = 0; k < g.indices.size(); ++k)
        for (int64_t j = 0; j < row; ++j)
          dense.data<float>()[g.indices.data<int64_t>()[k] * row + j] += g.values.data<float>()[k * row + j];
    } else {
      ASSERT_EQ(g.dense.shape(), values[v].shape());
      dense = g.dense;
    }
    const int64_t n = values[v].size();
    std::vector<int64_t> coords;
    for (int64_t i : {int64_t{0}, n / 3, n / 2, (2 * n) / 3, n - 1}) coords.push_back(i);
    coords.erase(std::unique(coords.begin(), coords.end()), coords.end());
    double max_abs = 0;
    for (int64_t i : coords) {
      auto eval = [&](float delta) {
        std::vector<Tensor> p = values;
        p[v] = values[v].Clone();
        p[v].data<float>()[i] += delta;
        return static_cast<double>(model.ComputeGradients(p, x, y).value().loss);
      };
      Tensor base = values[v];
      const double hp = double(base.data<float>()[i] + eps) - base.data<float>()[i];
      const double hm = double(base.data<float>()[i]) - double(base.data<float>()[i] - eps);
      const double num = (eval(eps) - eval(-eps)) / (hp + hm);
      const double a = dense.data<float>()[i];
      max_abs = std::max(max_abs, std::fabs(num));
      EXPECT_LE(std::fabs(a - num), 2e-4 + 1e-2 * std::max(std::fabs(a), std::fabs(num)))
          << "coordinate " << i << ": analytic " << a << ", numeric " << num;
    }
    EXPECT_GT(max_abs, 1e-4) << "all probed coordinates have zero gradient";
  }
}

TEST(ModelGradientTest, MlpWithSoftmaxAndSparseCategoricalCrossentropy) {
  ModelSpec spec;
  spec.input_shape = {4};
  spec.layers = {DenseSpec("h1", 6, Activation::kTanh, 0), DenseSpec("h2", 5, Activation::kSigmoid, 1),
                 DenseSpec("out", 3, Activation::kSoftmax, 2)};
  const LossSpec loss{LossType::kSparseCategoricalCrossentropy, false};
  auto model_or = Model::Create(spec, loss);
  ASSERT_TRUE(model_or.ok()) << model_or.status();
  Model& model = **model_or;
  // The softmax is fused into the loss.
  EXPECT_TRUE(model.training_loss().from_logits);
  ASSERT_EQ(model.variables().size(), 6u);

  Gen gen(700);
  std::vector<Tensor> values;
  for (const VariableSpec& v : model.variables()) values.push_back(RandomF(v.shape, gen));
  Tensor x = RandomF({8, 4}, gen, -2, 2);
  const std::vector<int64_t> ids{0, 2, 1, 1, 0, 2, 2, 1};
  Tensor y = Tensor::FromVector({8}, ids).value();

  // Same loss value as SCCE on the probabilities Predict returns.
  auto probs = model.Predict(values, x);
  ASSERT_TRUE(probs.ok()) << probs.status();
  ASSERT_EQ(probs->shape(), Shape({8, 3}));
  for (int64_t r = 0; r < 8; ++r) {
    double s = 0;
    for (int j = 0; j < 3; ++j) s += probs->data<float>()[r * 3 + j];
    EXPECT_NEAR(s, 1.0, 1e-5);
  }
  auto out = model.ComputeGradients(values, x, y);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_NEAR(out->loss, RefCce(*probs, OneHot(ids, 3), false), 1e-5);
  EXPECT_TRUE(out->logits);

  CheckModelGradients(model, values, x, y, 1e-2f);
}

TEST(ModelGradientTest, SigmoidBinaryCrossentropyAndRelu) {
  ModelSpec spec;
  spec.input_shape = {3};
  spec.layers = {DenseSpec("h", 4, Activation::kRelu, 0), DenseSpec("out", 1, Activation::kSigmoid, 1)};
  auto model_or = Model::Create(spec, {LossType::kBinaryCrossentropy, false});
  ASSERT_TRUE(model_or.ok()) << model_or.status();
  Model& model = **model_or;
  EXPECT_TRUE(model.training_loss().from_logits);
  Gen gen(701);
  std::vector<Tensor> values;
  for (const VariableSpec& v : model.variables()) values.push_back(RandomF(v.shape, gen));
  // Keep every hidden pre-activation clear of relu's kink: three units always
  // active, one always dead (|x.W| <= 3 here).
  values[1] = Tensor::FromVector({4}, std::vector<float>{4, 4, -4, 4}).value();
  Tensor x = RandomF({6, 3}, gen);
  Tensor y = Tensor::FromVector({6, 1}, std::vector<float>{1, 0, 0, 1, 1, 0}).value();
  auto probs = model.Predict(values, x).value();
  auto out = model.ComputeGradients(values, x, y);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_NEAR(out->loss, RefBce(probs, y, false), 1e-5);
  CheckModelGradients(model, values, x, y, 1e-2f);
}

TEST(ModelGradientTest, EmbeddingBagFlattenDense) {
  ModelSpec spec;
  spec.input_shape = {3};
  spec.input_dtype = DType::kInt64;
  LayerSpec emb;
  emb.type = LayerType::kEmbedding;
  emb.name = "emb";
  emb.input_dim = 10;
  emb.output_dim = 4;
  emb.path = "model.layers[0]";
  LayerSpec flat;
  flat.type = LayerType::kFlatten;
  flat.name = "flatten";
  flat.path = "model.layers[1]";
  spec.layers = {emb, flat, DenseSpec("out", 2, Activation::kSoftmax, 2)};
  auto model_or = Model::Create(spec, {LossType::kCategoricalCrossentropy, false});
  ASSERT_TRUE(model_or.ok()) << model_or.status();
  Model& model = **model_or;
  EXPECT_EQ(model.output_shape(), Shape({2}));
  Gen gen(702);
  std::vector<Tensor> values;
  for (const VariableSpec& v : model.variables()) values.push_back(RandomF(v.shape, gen));
  Tensor x = Tensor::FromVector({4, 3}, std::vector<int64_t>{0, 9, 0, 3, 3, 5, 9, 1, 0, 2, 2, 2}).value();
  Tensor y = Tensor::FromVector({4, 2}, std::vector<float>{1, 0, 0, 1, 0.3f, 0.7f, 1, 0}).value();
  auto out = model.ComputeGradients(values, x, y);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_TRUE(out->grads[0].sparse);
  std::vector<int64_t> idx(out->grads[0].indices.flat<int64_t>().begin(), out->grads[0].indices.flat<int64_t>().end());
  EXPECT_EQ(idx, std::vector<int64_t>({0, 1, 2, 3, 5, 9}));
  CheckModelGradients(model, values, x, y, 1e-2f);
}

}  // namespace
}  // namespace tfjob::model

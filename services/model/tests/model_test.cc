#include "services/model/model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "services/model/job_config.h"
#include "services/model/metrics.h"
#include "services/model/optimizers.h"
#include "services/tensor/conv2d.h"
#include "services/tensor/precision.h"
#include "tests/support/subprocess.h"

namespace tfjob::model {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

LayerSpec Dense(const std::string& name, int64_t units, Activation act, int index, bool use_bias = true) {
  LayerSpec s;
  s.type = LayerType::kDense;
  s.name = name;
  s.units = units;
  s.activation = act;
  s.use_bias = use_bias;
  s.path = "model.layers[" + std::to_string(index) + "]";
  return s;
}

LayerSpec Embedding(const std::string& name, int64_t input_dim, int64_t output_dim, Combiner c, int index) {
  LayerSpec s;
  s.type = LayerType::kEmbedding;
  s.name = name;
  s.input_dim = input_dim;
  s.output_dim = output_dim;
  s.combiner = c;
  s.path = "model.layers[" + std::to_string(index) + "]";
  return s;
}

LayerSpec Other(LayerType t, const std::string& name, int index, Activation act = Activation::kLinear) {
  LayerSpec s;
  s.type = t;
  s.name = name;
  s.activation = act;
  s.path = "model.layers[" + std::to_string(index) + "]";
  return s;
}

ModelSpec Mlp() {
  ModelSpec spec;
  spec.input_shape = {3};
  spec.layers = {Dense("h", 4, Activation::kRelu, 0), Dense("out", 2, Activation::kSoftmax, 1)};
  return spec;
}

const LossSpec kScce{LossType::kSparseCategoricalCrossentropy, false};

Status CreateError(const ModelSpec& spec, const LossSpec& loss = kScce) {
  auto m = Model::Create(spec, loss);
  EXPECT_FALSE(m.ok());
  return m.ok() ? Status::Ok() : m.status();
}

// ------------------------------------------------------------------ Create

TEST(ModelCreateTest, RejectsEmptyLayers) {
  ModelSpec spec;
  spec.input_shape = {3};
  Status s = CreateError(spec);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_THAT(s.message(), StartsWith("model.layers: "));
}

TEST(ModelCreateTest, RejectsBadInputShape) {
  for (const Shape& bad : {Shape{0}, Shape{-1}, Shape{3, 0}, Shape{4, -2}}) {
    ModelSpec spec = Mlp();
    spec.input_shape = bad;
    Status s = CreateError(spec);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << ShapeString(bad);
    EXPECT_THAT(s.message(), StartsWith("model.input_shape: ")) << ShapeString(bad);
    EXPECT_THAT(s.message(), HasSubstr(ShapeString(bad)));
  }
}

TEST(ModelCreateTest, RejectsEmbeddingFedFloat32) {
  ModelSpec spec;
  spec.input_shape = {3};
  spec.layers = {Embedding("emb", 10, 4, Combiner::kSum, 0)};
  Status s = CreateError(spec);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_THAT(s.message(), StartsWith("model.layers[0]: "));
  EXPECT_THAT(s.message(), HasSubstr("\"emb\""));
  EXPECT_THAT(s.message(), HasSubstr("int64"));
  EXPECT_THAT(s.message(), HasSubstr("float32"));

  // Behind another layer an Embedding sees float32 even with int64 input.
  spec.input_dtype = DType::kInt64;
  spec.layers = {Embedding("emb", 10, 4, Combiner::kSum, 0), Embedding("emb2", 10, 4, Combiner::kSum, 1)};
  s = CreateError(spec);
  EXPECT_THAT(s.message(), StartsWith("model.layers[1]: "));
  EXPECT_THAT(s.message(), HasSubstr("\"emb2\""));
}

TEST(ModelCreateTest, RejectsDuplicateLayerNames) {
  ModelSpec spec;
  spec.input_shape = {3};
  spec.layers = {Dense("d", 4, Activation::kRelu, 0), Dense("e", 4, Activation::kRelu, 1),
                 Dense("d", 2, Activation::kSoftmax, 2)};
  Status s = CreateError(spec);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "model.layers[2].name: duplicate layer name \"d\"");
}

TEST(ModelCreateTest, RejectsNonPositiveDenseUnits) {
  for (int64_t units : {0, -3}) {
    ModelSpec spec;
    spec.input_shape = {3};
    spec.layers = {Dense("dense", 4, Activation::kRelu, 0), Dense("dense_1", units, Activation::kLinear, 1)};
    Status s = CreateError(spec);
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_THAT(s.message(), StartsWith("model.layers[1]: "));
    EXPECT_THAT(s.message(), HasSubstr("\"dense_1\""));
    EXPECT_THAT(s.message(), HasSubstr("units"));
    EXPECT_THAT(s.message(), HasSubstr(std::to_string(units)));
  }
}

TEST(ModelCreateTest, OtherLayerBuildErrorsNameTheLayer) {
  ModelSpec spec;
  spec.input_shape = {2, 3};
  spec.input_dtype = DType::kInt64;
  spec.layers = {Embedding("bag", 10, 4, Combiner::kMean, 0)};  // ids must be [] or [n]
  Status s = CreateError(spec);
  EXPECT_THAT(s.message(), StartsWith("model.layers[0]: "));
  EXPECT_THAT(s.message(), HasSubstr("\"bag\""));

  spec.input_shape = {3};
  spec.layers = {Embedding("e0", 0, 4, Combiner::kNone, 0)};
  s = CreateError(spec);
  EXPECT_THAT(s.message(), HasSubstr("\"e0\""));
  EXPECT_THAT(s.message(), HasSubstr("input_dim"));

  ModelSpec dense_ids;
  dense_ids.input_shape = {3};
  dense_ids.input_dtype = DType::kInt64;
  dense_ids.layers = {Dense("d", 2, Activation::kLinear, 0)};
  s = CreateError(dense_ids);
  EXPECT_THAT(s.message(), StartsWith("model.layers[0]: "));
  EXPECT_THAT(s.message(), HasSubstr("\"d\""));
}

TEST(ModelCreateTest, VariablesShapesAndParameterCount) {
  ModelSpec spec;
  spec.input_shape = {2, 3};
  spec.layers = {Other(LayerType::kFlatten, "flatten", 0), Dense("h", 4, Activation::kTanh, 1),
                 Dense("nobias", 5, Activation::kLinear, 2, false),
                 Other(LayerType::kActivation, "act", 3, Activation::kRelu), Dense("out", 2, Activation::kSoftmax, 4)};
  auto m = Model::Create(spec, kScce);
  ASSERT_TRUE(m.ok()) << m.status();
  const auto& vars = (*m)->variables();
  ASSERT_EQ(vars.size(), 5u);
  EXPECT_EQ(vars[0].name, "h/kernel");
  EXPECT_EQ(vars[0].shape, Shape({6, 4}));
  EXPECT_EQ(vars[0].init, Initializer::kGlorotUniform);
  EXPECT_EQ(vars[1].name, "h/bias");
  EXPECT_EQ(vars[1].shape, Shape({4}));
  EXPECT_EQ(vars[1].init, Initializer::kZeros);
  EXPECT_EQ(vars[2].name, "nobias/kernel");
  EXPECT_EQ(vars[2].shape, Shape({4, 5}));
  EXPECT_EQ(vars[3].name, "out/kernel");
  EXPECT_EQ(vars[4].name, "out/bias");
  // 6*4+4 + 4*5 + 5*2+2
  EXPECT_EQ((*m)->ParameterCount(), 28 + 20 + 12);
  EXPECT_EQ((*m)->output_shape(), Shape({2}));
  EXPECT_EQ((*m)->input_shape(), Shape({2, 3}));
  EXPECT_EQ((*m)->input_dtype(), DType::kFloat32);
}

// ----------------------------------------------------------- Initial values

TEST(ModelInitTest, DeterministicPerSeedAndGlorotLimitsRespected) {
  ModelSpec spec;
  spec.input_shape = {50};
  spec.layers = {Dense("a", 30, Activation::kRelu, 0), Dense("b", 30, Activation::kRelu, 1),
                 Dense("c", 30, Activation::kLinear, 2)};
  auto m = Model::Create(spec, {LossType::kMeanSquaredError, false});
  ASSERT_TRUE(m.ok()) << m.status();
  auto v1 = (*m)->InitialValues(7);
  auto v1b = (*m)->InitialValues(7);
  auto v2 = (*m)->InitialValues(8);
  ASSERT_EQ(v1.size(), 6u);
  for (size_t i = 0; i < v1.size(); ++i) {
    EXPECT_EQ(v1[i].shape(), (*m)->variables()[i].shape);
    EXPECT_TRUE(Equal(v1[i], v1b[i])) << "seed 7 twice differs for " << (*m)->variables()[i].name;
  }
  EXPECT_FALSE(Equal(v1[0], v2[0])) << "seeds 7 and 8 give the same kernel";
  // Two kernels of the same shape do not repeat one stream.
  EXPECT_FALSE(Equal(v1[2], v1[4]));

  // Glorot uniform: U(-l, l), l = sqrt(6 / (fan_in + fan_out)).
  for (size_t k : {size_t{0}, size_t{2}, size_t{4}}) {
    const Shape& s = (*m)->variables()[k].shape;
    const double limit = std::sqrt(6.0 / static_cast<double>(s[0] + s[1]));
    double max_abs = 0, sum = 0, sum_abs = 0;
    for (float v : v1[k].flat<float>()) {
      EXPECT_LE(std::fabs(v), limit + 1e-7);
      max_abs = std::max(max_abs, double(std::fabs(v)));
      sum += v;
      sum_abs += std::fabs(v);
    }
    const double n = static_cast<double>(v1[k].size());
    // Spread over the whole interval: max near the limit, mean near 0, mean |v| near l/2.
    EXPECT_GT(max_abs, 0.98 * limit);
    EXPECT_NEAR(sum / n, 0.0, 0.05 * limit);
    EXPECT_NEAR(sum_abs / n, limit / 2, 0.05 * limit);
  }
  for (size_t b : {size_t{1}, size_t{3}, size_t{5}}) {
    for (float v : v1[b].flat<float>()) EXPECT_EQ(v, 0.f) << "biases start at zero";
  }
}

TEST(ModelInitTest, EmbeddingsUniformWithin005) {
  ModelSpec spec;
  spec.input_shape = {};
  spec.input_dtype = DType::kInt64;
  spec.layers = {Embedding("emb", 100, 8, Combiner::kNone, 0), Dense("out", 1, Activation::kLinear, 1)};
  auto m = Model::Create(spec, {LossType::kMeanSquaredError, false});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->variables()[0].init, Initializer::kUniform005);
  EXPECT_TRUE((*m)->variables()[0].sparse_grad);
  auto v = (*m)->InitialValues(1);
  double max_abs = 0;
  for (float x : v[0].flat<float>()) {
    EXPECT_LE(std::fabs(x), 0.05f);
    max_abs = std::max(max_abs, double(std::fabs(x)));
  }
  EXPECT_GT(max_abs, 0.049);
  // Dense kernel [8, 1]: limit sqrt(6/9).
  for (float x : v[1].flat<float>()) EXPECT_LE(std::fabs(x), std::sqrt(6.0 / 9.0));
}

// ------------------------------------------------------------- CheckInput

TEST(ModelInputTest, CheckInputNamesBothShapes) {
  auto m = Model::Create(Mlp(), kScce);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE((*m)->CheckInput(Tensor::Zeros(DType::kFloat32, {5, 3})).ok());
  EXPECT_TRUE((*m)->CheckInput(Tensor::Zeros(DType::kFloat32, {0, 3})).ok());
  Status s = (*m)->CheckInput(Tensor::Zeros(DType::kFloat32, {4, 2}));
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("float32[4, 2]"));
  EXPECT_THAT(s.message(), HasSubstr("float32[-1, 3]"));
  s = (*m)->CheckInput(Tensor::Zeros(DType::kInt64, {4, 3}));
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("int64[4, 3]"));
  EXPECT_THAT(s.message(), HasSubstr("float32[-1, 3]"));
  s = (*m)->CheckInput(Tensor::Zeros(DType::kFloat32, {3}));
  EXPECT_THAT(s.message(), HasSubstr("float32[3]"));
  s = (*m)->CheckInput(Tensor::Zeros(DType::kFloat32, {2, 1, 3}));
  EXPECT_THAT(s.message(), HasSubstr("[2, 1, 3]"));
}

TEST(ModelInputTest, BadValuesFeaturesAndLabelsAreInvalidArgument) {
  auto m_or = Model::Create(Mlp(), kScce);
  ASSERT_TRUE(m_or.ok()) << m_or.status();
  Model& m = **m_or;
  auto values = m.InitialValues(1);
  Tensor x = Tensor::Zeros(DType::kFloat32, {2, 3});
  Tensor y = Tensor::FromVector({2}, std::vector<int64_t>{0, 1}).value();
  ASSERT_TRUE(m.ComputeGradients(values, x, y).ok());

  auto expect_invalid = [](const Status& s, const std::string& substr, const std::string& what) {
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << what << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(substr)) << what;
  };
  std::vector<Tensor> fewer(values.begin(), values.end() - 1);
  expect_invalid(m.ComputeGradients(fewer, x, y).status(), "got 3 values", "value count");
  expect_invalid(m.Predict(fewer, x).status(), "got 3 values", "predict value count");
  std::vector<Tensor> wrong = values;
  wrong[2] = Tensor::Zeros(DType::kFloat32, {2, 4});
  expect_invalid(m.ComputeGradients(wrong, x, y).status(), "out/kernel", "value shape");
  expect_invalid(m.Evaluate(wrong, x, y).status(), "out/kernel", "evaluate value shape");
  expect_invalid(m.ComputeGradients(values, Tensor::Zeros(DType::kFloat32, {2, 4}), y).status(), "[-1, 3]",
                 "feature shape");
  expect_invalid(m.ComputeGradients(values, x, Tensor::FromVector({3}, std::vector<int64_t>{0, 1, 1}).value()).status(),
                 "labels", "label batch");
  expect_invalid(m.ComputeGradients(values, x, Tensor::FromVector({2}, std::vector<int64_t>{0, 2}).value()).status(),
                 "outside [0, 2)", "label range");
  expect_invalid(m.Evaluate(values, x, Tensor::Scalar(0)).status(), "labels", "scalar labels");
}

TEST(ModelInputTest, EmbeddingIdsOutOfRangeNameTheLayer) {
  ModelSpec spec;
  spec.input_shape = {2};
  spec.input_dtype = DType::kInt64;
  spec.layers = {Embedding("tokens", 5, 3, Combiner::kSum, 0), Dense("out", 2, Activation::kSoftmax, 1)};
  auto m = Model::Create(spec, kScce);
  ASSERT_TRUE(m.ok()) << m.status();
  auto values = (*m)->InitialValues(3);
  auto r = (*m)->ComputeGradients(values, Tensor::FromVector({1, 2}, std::vector<int64_t>{4, 5}).value(),
                                  Tensor::FromVector({1}, std::vector<int64_t>{1}).value());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("\"tokens\""));
  EXPECT_THAT(r.status().message(), HasSubstr("id 5"));
}

// ------------------------------------------------- Fusion, Predict, Evaluate

TEST(ModelFusionTest, SoftmaxIsFusedIntoCrossentropyOnProbabilities) {
  auto m_or = Model::Create(Mlp(), kScce);
  ASSERT_TRUE(m_or.ok()) << m_or.status();
  Model& m = **m_or;
  EXPECT_EQ(m.training_loss().type, LossType::kSparseCategoricalCrossentropy);
  EXPECT_TRUE(m.training_loss().from_logits);

  std::mt19937_64 gen(5);
  std::uniform_real_distribution<float> d(-1, 1);
  auto values = m.InitialValues(11);
  for (float& b : values[1].flat<float>()) b = 0.5f;
  Tensor x = Tensor::Zeros(DType::kFloat32, {4, 3});
  for (float& v : x.flat<float>()) v = d(gen);
  Tensor y = Tensor::FromVector({4}, std::vector<int64_t>{0, 1, 1, 0}).value();

  auto probs = m.Predict(values, x);
  ASSERT_TRUE(probs.ok()) << probs.status();
  auto ev = m.Evaluate(values, x, y);
  ASSERT_TRUE(ev.ok()) << ev.status();
  EXPECT_TRUE(ev->logits);
  EXPECT_TRUE(ev->grads.empty());
  // Evaluate's predictions are logits: their softmax is Predict's output.
  for (int64_t r = 0; r < 4; ++r) {
    const float* z = ev->predictions.data<float>() + r * 2;
    const double e0 = std::exp(double(z[0])), e1 = std::exp(double(z[1]));
    EXPECT_NEAR(probs->data<float>()[r * 2], e0 / (e0 + e1), 1e-6);
    EXPECT_NEAR(probs->data<float>()[r * 2 + 1], e1 / (e0 + e1), 1e-6);
  }
  // Loss: mean over the batch of -log p[label].
  double want = 0;
  for (int64_t r = 0; r < 4; ++r) want -= std::log(double(probs->data<float>()[r * 2 + y.data<int64_t>()[r]]));
  want /= 4;
  EXPECT_NEAR(ev->loss, want, 1e-5);
  auto tr = m.ComputeGradients(values, x, y);
  ASSERT_TRUE(tr.ok()) << tr.status();
  EXPECT_FLOAT_EQ(tr->loss, ev->loss);
  EXPECT_EQ(tr->grads.size(), 4u);
}

TEST(ModelFusionTest, NoFusionWhenLossTakesLogitsOrDoesNotMatch) {
  // from_logits: the model's last layer stays as written (linear here).
  ModelSpec spec = Mlp();
  spec.layers.back().activation = Activation::kLinear;
  auto logits_model = Model::Create(spec, {LossType::kSparseCategoricalCrossentropy, true});
  ASSERT_TRUE(logits_model.ok()) << logits_model.status();
  EXPECT_TRUE((*logits_model)->training_loss().from_logits);

  // MSE after a sigmoid: not fused, Predict and Evaluate agree.
  ModelSpec reg;
  reg.input_shape = {3};
  reg.layers = {Dense("out", 1, Activation::kSigmoid, 0)};
  auto m = Model::Create(reg, {LossType::kMeanSquaredError, false});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE((*m)->training_loss().from_logits);
  auto values = (*m)->InitialValues(2);
  Tensor x = Tensor::FromVector({2, 3}, std::vector<float>{1, 2, 3, -1, 0, 1}).value();
  Tensor y = Tensor::FromVector({2, 1}, std::vector<float>{0.2f, 0.9f}).value();
  auto p = (*m)->Predict(values, x).value();
  auto ev = (*m)->Evaluate(values, x, y).value();
  EXPECT_FALSE(ev.logits);
  EXPECT_TRUE(AllClose(ev.predictions, p));
  double want = 0;
  for (int i = 0; i < 2; ++i) {
    double z = 0;
    for (int k = 0; k < 3; ++k) z += double(x.data<float>()[i * 3 + k]) * values[0].data<float>()[k];
    const double s = 1 / (1 + std::exp(-z));
    EXPECT_NEAR(p.data<float>()[i], s, 1e-6);
    want += (s - y.data<float>()[i]) * (s - y.data<float>()[i]);
  }
  EXPECT_NEAR(ev.loss, want / 2, 1e-6);

  // Sigmoid + categorical crossentropy is not the softmax pairing: not fused.
  ModelSpec odd = Mlp();
  odd.layers.back().activation = Activation::kSigmoid;
  auto om = Model::Create(odd, kScce);
  ASSERT_TRUE(om.ok());
  EXPECT_FALSE((*om)->training_loss().from_logits);
}

// ------------------------------------------------------------ End to end

TEST(ModelTrainingTest, LogisticRegressionLearnsSeparableProblem) {
  // Labels from a fixed hyperplane, points within 0.1 of it dropped.
  std::mt19937_64 gen(2024);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> xs, ys;
  while (ys.size() < 400) {
    const float a = u(gen), b = u(gen);
    const float margin = 1.5f * a - b + 0.2f;
    if (std::fabs(margin) < 0.1f) continue;
    xs.push_back(a);
    xs.push_back(b);
    ys.push_back(margin > 0 ? 1.f : 0.f);
  }
  const int64_t n = static_cast<int64_t>(ys.size());
  Tensor x = Tensor::FromVector({n, 2}, xs).value();
  Tensor y = Tensor::FromVector({n, 1}, ys).value();

  ModelSpec spec;
  spec.input_shape = {2};
  spec.layers = {Dense("logreg", 1, Activation::kSigmoid, 0)};
  const LossSpec loss{LossType::kBinaryCrossentropy, false};
  auto m_or = Model::Create(spec, loss);
  ASSERT_TRUE(m_or.ok()) << m_or.status();
  Model& m = **m_or;
  OptimizerSpec os;  // SGD
  os.learning_rate = 0.5;
  Optimizer opt(os);
  auto values = m.InitialValues(9);
  std::vector<SlotState> slots;
  for (const Tensor& v : values) slots.push_back(opt.CreateSlots(v));

  const MetricType metric = AccuracyForLoss(loss.type);
  ASSERT_EQ(metric, MetricType::kBinaryAccuracy);
  auto accuracy = [&]() {
    auto ev = m.Evaluate(values, x, y);
    EXPECT_TRUE(ev.ok()) << ev.status();
    MetricState st;
    EXPECT_TRUE(UpdateMetric(metric, ev->predictions, y, ev->logits, st).ok());
    EXPECT_EQ(st.count, static_cast<double>(n));
    return std::make_pair(st.Result(), ev->loss);
  };
  const auto [acc0, loss0] = accuracy();

  const int64_t batch = 50;
  for (int step = 0; step < 300; ++step) {
    const int64_t b = (step * batch) % n;
    Tensor xb = x.Rows(b, b + batch).value(), yb = y.Rows(b, b + batch).value();
    auto out = m.ComputeGradients(values, xb, yb);
    ASSERT_TRUE(out.ok()) << out.status();
    for (size_t i = 0; i < values.size(); ++i) ASSERT_TRUE(opt.Apply(values[i], out->grads[i], slots[i]).ok());
  }
  const auto [acc, final_loss] = accuracy();
  EXPECT_GT(acc, 0.95) << "started at " << acc0;
  EXPECT_LT(final_loss, loss0);
  EXPECT_LT(final_loss, 0.3);
  EXPECT_EQ(slots[0].iterations, 300);

  // The probabilities Predict returns give the same accuracy at threshold 0.5.
  auto p = m.Predict(values, x);
  ASSERT_TRUE(p.ok()) << p.status();
  MetricState st;
  ASSERT_TRUE(UpdateMetric(metric, *p, y, false, st).ok());
  EXPECT_DOUBLE_EQ(st.Result(), acc);
  // The learned hyperplane points the way of the true one (1.5, -1).
  EXPECT_GT(values[0].data<float>()[0], 0.f);
  EXPECT_LT(values[0].data<float>()[1], 0.f);
}

// ----------------------------------------------------------------- Summary

TEST(ModelSummaryTest, PrintsLayersShapesAndParamCount) {
  ModelSpec spec;
  spec.input_shape = {2, 3};
  spec.layers = {Other(LayerType::kFlatten, "flatten", 0), Dense("hidden", 4, Activation::kRelu, 1),
                 Dense("out", 2, Activation::kSoftmax, 2)};
  auto m = Model::Create(spec, kScce);
  ASSERT_TRUE(m.ok()) << m.status();
  std::ostringstream os;
  (*m)->Summary(os);
  const std::string s = os.str();
  EXPECT_THAT(s, HasSubstr("flatten (Flatten)"));
  EXPECT_THAT(s, HasSubstr("hidden (Dense)"));
  EXPECT_THAT(s, HasSubstr("out (Dense)"));
  EXPECT_THAT(s, HasSubstr("[None, 6]"));
  EXPECT_THAT(s, HasSubstr("[None, 4]"));
  EXPECT_THAT(s, HasSubstr("[None, 2]"));
  // 6*4 + 4 = 28 and 4*2 + 2 = 10.
  EXPECT_THAT(s, HasSubstr("28\n"));
  EXPECT_THAT(s, HasSubstr("10\n"));
  EXPECT_THAT(s, HasSubstr("Total params: 38\n"));
  EXPECT_EQ((*m)->ParameterCount(), 38);
}

// ----------------------------------------------------------------- Metrics

Tensor F(Shape s, std::vector<float> v) { return Tensor::FromVector(std::move(s), std::move(v)).value(); }
Tensor I(Shape s, std::vector<int64_t> v) { return Tensor::FromVector(std::move(s), std::move(v)).value(); }

TEST(MetricsTest, NamesAndAccuracyPerLoss) {
  EXPECT_EQ(MetricName(MetricType::kAccuracy), "accuracy");
  EXPECT_EQ(MetricName(MetricType::kBinaryAccuracy), "binary_accuracy");
  EXPECT_EQ(MetricName(MetricType::kSparseCategoricalAccuracy), "sparse_categorical_accuracy");
  EXPECT_EQ(MetricName(MetricType::kCategoricalAccuracy), "categorical_accuracy");
  EXPECT_EQ(AccuracyForLoss(LossType::kMeanSquaredError), MetricType::kAccuracy);
  EXPECT_EQ(AccuracyForLoss(LossType::kBinaryCrossentropy), MetricType::kBinaryAccuracy);
  EXPECT_EQ(AccuracyForLoss(LossType::kSparseCategoricalCrossentropy), MetricType::kSparseCategoricalAccuracy);
  EXPECT_EQ(AccuracyForLoss(LossType::kCategoricalCrossentropy), MetricType::kCategoricalAccuracy);
}

TEST(MetricsTest, SparseCategoricalAccuracy) {
  // argmax rows: 2, 0, 1 (tie 1/1 at 1 and 2: first), 0
  Tensor p = F({4, 3}, {0.1f, 0.2f, 0.7f, 0.5f, 0.3f, 0.2f, 0.f, 0.5f, 0.5f, 0.4f, 0.3f, 0.3f});
  MetricState st;
  ASSERT_TRUE(UpdateMetric(MetricType::kSparseCategoricalAccuracy, p, I({4}, {2, 1, 1, 0}), false, st).ok());
  EXPECT_EQ(st.total, 3);
  EXPECT_EQ(st.count, 4);
  // Float labels and [B, 1] labels; a second batch accumulates.
  ASSERT_TRUE(UpdateMetric(MetricType::kSparseCategoricalAccuracy, p, F({4, 1}, {2, 0, 2, 1}), false, st).ok());
  EXPECT_EQ(st.total, 5);
  EXPECT_EQ(st.count, 8);
  EXPECT_DOUBLE_EQ(st.Result(), 5.0 / 8);
}

TEST(MetricsTest, CategoricalAccuracy) {
  Tensor p = F({3, 2}, {0.9f, 0.1f, 0.3f, 0.7f, 0.6f, 0.4f});
  Tensor y = F({3, 2}, {1, 0, 1, 0, 0.2f, 0.8f});  // soft label: argmax 1
  MetricState st;
  ASSERT_TRUE(UpdateMetric(MetricType::kCategoricalAccuracy, p, y, false, st).ok());
  EXPECT_EQ(st.total, 1);
  EXPECT_EQ(st.count, 3);
}

TEST(MetricsTest, BinaryAccuracyThresholdDependsOnLogits) {
  Tensor p = F({3, 1}, {0.3f, 0.4f, 0.2f});
  Tensor y = F({3, 1}, {1, 1, 0});
  MetricState probs, logits;
  // Probabilities: all predict 0 -> 1 of 3 right.
  ASSERT_TRUE(UpdateMetric(MetricType::kBinaryAccuracy, p, y, false, probs).ok());
  EXPECT_EQ(probs.total, 1);
  EXPECT_EQ(probs.count, 3);
  // Logits: all predict 1 -> 2 of 3 right.
  ASSERT_TRUE(UpdateMetric(MetricType::kBinaryAccuracy, p, y, true, logits).ok());
  EXPECT_EQ(logits.total, 2);
  // Boundary: exactly 0.5 (or 0 for logits) predicts 0; int64 [B] labels.
  MetricState edge;
  ASSERT_TRUE(UpdateMetric(MetricType::kBinaryAccuracy, F({2, 1}, {0.5f, 0.51f}), I({2}, {0, 1}), false, edge).ok());
  EXPECT_EQ(edge.total, 2);
  ASSERT_TRUE(UpdateMetric(MetricType::kBinaryAccuracy, F({2}, {0.f, -0.01f}), I({2}, {1, 0}), true, edge).ok());
  EXPECT_EQ(edge.total, 3);
  EXPECT_EQ(edge.count, 4);
}

TEST(MetricsTest, AccuracyIsExactEquality) {
  MetricState st;
  ASSERT_TRUE(UpdateMetric(MetricType::kAccuracy, F({3}, {1, 2, 3}), F({3}, {1, 2.5f, 3}), false, st).ok());
  EXPECT_EQ(st.total, 2);
  ASSERT_TRUE(UpdateMetric(MetricType::kAccuracy, F({2, 1}, {4, 5}), I({2}, {4, 4}), false, st).ok());
  EXPECT_EQ(st.total, 3);
  EXPECT_EQ(st.count, 5);
}

TEST(MetricsTest, MergeAndEmptyResult) {
  MetricState a{3, 4}, b{1, 6};
  a.Merge(b);
  EXPECT_EQ(a.total, 4);
  EXPECT_EQ(a.count, 10);
  EXPECT_DOUBLE_EQ(a.Result(), 0.4);
  EXPECT_EQ(MetricState{}.Result(), 0.0);
}

TEST(MetricsTest, MismatchesAreInvalidArgument) {
  MetricState st;
  auto invalid = [&](const Status& s, const std::string& what) {
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << what << ": " << s;
  };
  Tensor p = F({2, 3}, {1, 2, 3, 4, 5, 6});
  invalid(UpdateMetric(MetricType::kSparseCategoricalAccuracy, p, I({3}, {0, 1, 2}), false, st), "sparse count");
  invalid(UpdateMetric(MetricType::kCategoricalAccuracy, p, F({2, 2}, {1, 0, 0, 1}), false, st), "categorical shape");
  invalid(UpdateMetric(MetricType::kCategoricalAccuracy, p, I({2, 3}, {1, 0, 0, 0, 1, 0}), false, st),
          "categorical int64");
  invalid(UpdateMetric(MetricType::kBinaryAccuracy, p, F({2}, {1, 0}), false, st), "binary count");
  invalid(UpdateMetric(MetricType::kAccuracy, p, F({2}, {1, 0}), false, st), "accuracy count");
  invalid(UpdateMetric(MetricType::kAccuracy, I({2}, {1, 0}), I({2}, {1, 0}), false, st), "int64 predictions");
  invalid(UpdateMetric(MetricType::kBinaryAccuracy, Tensor::Scalar(1), F({1}, {1}), false, st), "scalar predictions");
  // Class scores need a class axis: [B] scores with B labels is not [B, C].
  invalid(
      UpdateMetric(MetricType::kSparseCategoricalAccuracy, F({3}, {0.1f, 0.8f, 0.1f}), I({3}, {1, 1, 1}), false, st),
      "sparse rank-1 predictions");
  invalid(UpdateMetric(MetricType::kCategoricalAccuracy, F({3}, {0.1f, 0.8f, 0.1f}), F({3}, {0, 1, 0}), false, st),
          "categorical rank-1 predictions");
  EXPECT_EQ(st.count, 0) << "failed updates must not count";
  EXPECT_EQ(st.total, 0);
}

// ------------------------------------------------------------ device support

// Which models may compute on a GPU decides --device gpu (an error) and
// --device auto (the CPU, saying why): every layer but Normalization and the
// lookups has device kernels.
TEST(ModelDeviceSupportTest, CnnLayersHaveGpuKernelsNormalizationDoesNot) {
  ModelSpec cnn;
  cnn.input_shape = {12, 12, 1};
  LayerSpec conv = Other(LayerType::kConv2D, "conv", 0, Activation::kRelu);
  conv.filters = 4;
  conv.kernel_size = {3, 3};
  LayerSpec bn = Other(LayerType::kBatchNormalization, "bn", 1);
  LayerSpec max = Other(LayerType::kMaxPooling2D, "max", 2);
  max.kernel_size = {2, 2};
  max.strides = {2, 2};
  LayerSpec avg = Other(LayerType::kAveragePooling2D, "avg", 3);
  avg.kernel_size = {2, 2};
  LayerSpec global = Other(LayerType::kGlobalAveragePooling2D, "global", 4);
  LayerSpec drop = Other(LayerType::kDropout, "drop", 5);
  drop.rate = 0.5;
  cnn.layers = {conv, bn, max, avg, global, drop, Dense("out", 3, Activation::kSoftmax, 6)};
  auto m = Model::Create(cnn, kScce);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE((*m)->CheckDeviceSupport().ok()) << (*m)->CheckDeviceSupport();

  ModelSpec normalized = Mlp();
  LayerSpec norm = Other(LayerType::kNormalization, "norm", 0);
  norm.mean = {0.5};
  norm.variance = {0.25};
  normalized.layers.insert(normalized.layers.begin(), norm);
  auto n = Model::Create(normalized, kScce);
  ASSERT_TRUE(n.ok()) << n.status();
  const Status s = (*n)->CheckDeviceSupport();
  EXPECT_EQ(s.code(), Code::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("layer \"norm\" (model.layers[0], Normalization) has no GPU kernel"));
}

// The roofline's FLOP count (Model::Flops), against the counts worked out by
// hand: 2 FLOPs per multiply-add of every kernel product; backward is the
// kernel's gradient plus its operand's where needed.
TEST(ModelFlopsTest, KernelProductsPerExampleAsARooflineCountsThem) {
  // examples/mnist/cnn.json: Conv2D 32 3x3 on 28x28x1 (26x26 positions),
  // pool to 13x13x32, Dense 5408->64, Dense 64->10.
  auto job = LoadJobConfig(tfjob::testing::SourceDir() + "/examples/mnist/cnn.json");
  ASSERT_TRUE(job.ok()) << job.status();
  auto cnn = Model::Create(job->model, job->loss);
  ASSERT_TRUE(cnn.ok()) << cnn.status();
  int64_t forward = 0, backward = 0;
  for (const auto& f : (*cnn)->Flops()) {
    if (f.type == "Conv2D") {
      EXPECT_EQ(f.forward, 2 * 9 * 32 * 26 * 26);
      EXPECT_EQ(f.backward, f.forward);  // reads the model's input: no input gradient
      EXPECT_EQ(f.input_channels, 1);
    } else {
      EXPECT_EQ(f.input_channels, 0) << f.type;
    }
    forward += f.forward;
    backward += f.backward;
  }
  EXPECT_EQ(forward, 2 * (9 * 32 * 26 * 26 + 5408 * 64 + 64 * 10));
  EXPECT_EQ(backward, forward + 2 * (5408 * 64 + 64 * 10));

  // LSTM of 4 units over 5 steps of 3 features: input kernel [3, 16] and
  // recurrent kernel [4, 16] at every step; the state's gradient always.
  ModelSpec rnn;
  rnn.input_shape = {5, 3};
  LayerSpec lstm = Other(LayerType::kLSTM, "lstm", 0);
  lstm.units = 4;
  rnn.layers = {lstm, Dense("out", 2, Activation::kSoftmax, 1)};
  auto r = Model::Create(rnn, kScce);
  ASSERT_TRUE(r.ok()) << r.status();
  auto rf = (*r)->Flops();
  ASSERT_EQ(rf.size(), 2u);
  EXPECT_EQ(rf[0].forward, 2 * (3 * 16 + 4 * 16) * 5);
  EXPECT_EQ(rf[0].backward, 2 * (3 * 16 + 2 * 4 * 16) * 5);
  EXPECT_EQ(rf[1].forward, 2 * 4 * 2);
  EXPECT_EQ(rf[1].backward, 2 * 2 * 4 * 2);

  // SeparableConv2D 4 filters 3x3 on 8x8x3 (6x6 positions): depthwise
  // [3,3,3,1] and pointwise [1,1,3,4], each at 36 positions; the pointwise
  // stage's operand (the depthwise output) needs its gradient.
  ModelSpec sep;
  sep.input_shape = {8, 8, 3};
  LayerSpec sc = Other(LayerType::kSeparableConv2D, "sep", 0);
  sc.filters = 4;
  sc.kernel_size = {3, 3};
  sep.layers = {sc};
  auto sm = Model::Create(sep, LossSpec{LossType::kMeanSquaredError, false});
  ASSERT_TRUE(sm.ok()) << sm.status();
  auto sf = (*sm)->Flops();
  ASSERT_EQ(sf.size(), 1u);
  EXPECT_EQ(sf[0].forward, 2 * (27 + 12) * 36);
  EXPECT_EQ(sf[0].backward, 2 * (27 + 2 * 12) * 36);
  EXPECT_EQ(sf[0].input_channels, 3);

  // Conv2D 4 filters 3x3 "same" on 5x5x2: along each axis the windows hold
  // 2, 3, 3, 3, 2 taps inside the input (13, not 5 x 3): the padding's zeros
  // are not work.
  ModelSpec same;
  same.input_shape = {5, 5, 2};
  LayerSpec conv = Other(LayerType::kConv2D, "conv", 0);
  conv.filters = 4;
  conv.kernel_size = {3, 3};
  conv.padding = Padding::kSame;
  same.layers = {conv};
  auto cm = Model::Create(same, LossSpec{LossType::kMeanSquaredError, false});
  ASSERT_TRUE(cm.ok()) << cm.status();
  auto cf = (*cm)->Flops();
  ASSERT_EQ(cf.size(), 1u);
  EXPECT_EQ(cf[0].forward, 2 * (2 * 4) * 13 * 13);
  EXPECT_EQ(cf[0].backward, cf[0].forward);  // reads the model's input
}

std::vector<float> AsFloats(const Tensor& t) {
  auto f = t.flat<float>();
  return std::vector<float>(f.begin(), f.end());
}

// Differentiates two models at the same values, input and upstream
// gradient, and expects exactly the same output and gradients, the input's
// included.
void ExpectSameDifferentiation(Model& a, Model& b, const std::vector<Tensor>& values, const Tensor& x,
                               const Tensor& dy) {
  auto ga = a.Differentiate(values, x, dy, true);
  auto gb = b.Differentiate(values, x, dy, true);
  ASSERT_TRUE(ga.ok() && gb.ok()) << ga.status() << gb.status();
  EXPECT_EQ(AsFloats(ga->output), AsFloats(gb->output));
  ASSERT_EQ(ga->grads.size(), gb->grads.size());
  for (size_t i = 0; i < ga->grads.size(); ++i)
    EXPECT_EQ(AsFloats(ga->grads[i].dense), AsFloats(gb->grads[i].dense)) << i;
  ASSERT_EQ(ga->input_grads.size(), 1u);
  EXPECT_EQ(AsFloats(ga->input_grads[0]), AsFloats(gb->input_grads[0]));
}

// A tiled MaxPooling2D after a Conv2D is fused into it (Model::FusePooling:
// the convolution's output is never stored). The same model with the ReLU
// as its own layer between them (nothing fused) gives exactly the same
// output and gradients, the input's included; so does a convolution
// without activation. In float32, and with every layer mixed_bfloat16 where
// this CPU has the bfloat16 path (the fused windows compare the rounded
// outputs, as the pooling layer apart does: the same winners, ties
// included).
TEST(ModelPoolFusionTest, AConvolutionWithItsMaxPoolingFusedComputesAsTheLayersApart) {
  auto conv = [](Activation act) {
    LayerSpec c = Other(LayerType::kConv2D, "conv", 0, act);
    c.filters = 16;
    c.kernel_size = {3, 3};
    return c;
  };
  LayerSpec pool = Other(LayerType::kMaxPooling2D, "pool", 2);
  pool.kernel_size = {2, 2};
  pool.strides = {2, 2};
  const LayerSpec relu = Other(LayerType::kActivation, "relu", 1, Activation::kRelu);
  const LayerSpec flat = Other(LayerType::kFlatten, "flat", 3);
  const LayerSpec out = Dense("out", 3, Activation::kLinear, 4);
  ModelSpec fused, apart, linear, linear_apart;
  fused.input_shape = apart.input_shape = linear.input_shape = linear_apart.input_shape = {9, 10, 1};
  fused.layers = {conv(Activation::kRelu), pool, flat, out};
  apart.layers = {conv(Activation::kLinear), relu, pool, flat, out};
  linear.layers = {conv(Activation::kLinear), pool, flat, out};
  const LayerSpec identity = Other(LayerType::kActivation, "identity", 1, Activation::kLinear);
  linear_apart.layers = {conv(Activation::kLinear), identity, pool, flat, out};
  const LossSpec mse{LossType::kMeanSquaredError, false};
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> xs(4 * 9 * 10), dys(4 * 3);
  for (float& v : xs) v = normal(rng);
  for (float& v : dys) v = normal(rng);
  std::fill(xs.begin(), xs.begin() + 90, 0.f);  // ties: one image's outputs all the bias
  const Tensor x = Tensor::FromVector({4, 9, 10, 1}, xs).value();
  std::vector<Precision> precisions = {Precision::kFloat32};
  if (CpuPathFor(Precision::kBfloat16).ok()) precisions.push_back(Precision::kBfloat16);
  auto in_precision = [](ModelSpec s, Precision p) {
    for (LayerSpec& l : s.layers) l.precision = p;
    return s;
  };
  for (const Precision p : precisions) {
    for (const auto& [a_mixed, b_mixed] : {std::pair{fused, apart}, std::pair{linear, linear_apart}}) {
      SCOPED_TRACE(std::string(PrecisionName(p)));
      const ModelSpec a_spec = in_precision(a_mixed, p), b_spec = in_precision(b_mixed, p);
      auto a = Model::Create(a_spec, mse);
      auto b = Model::Create(b_spec, mse);
      ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
      std::vector<Tensor> values = (*a)->InitialValues(3);
      values[1] = Tensor::FromVector({16}, std::vector<float>(16, 0.05f)).value();  // biases the zero image's outputs
      for (int step = 0; step < 2; ++step) {  // twice: the second reuses the first's buffers
        ExpectSameDifferentiation(**a, **b, values, x, Tensor::FromVector({4, 3}, dys).value());
      }
      // The summary's layer times say where the pooling's time went.
      const bool fusable = DirectConv2D::CanPool(Conv2DGeometry{.batch = 1,
                                                                .height = 9,
                                                                .width = 10,
                                                                .channels = 1,
                                                                .kernel_h = 3,
                                                                .kernel_w = 3,
                                                                .filters = 16,
                                                                .out_h = 7,
                                                                .out_w = 8},
                                                 2, 2);
      for (const auto& t : (*a)->LayerTimes()) EXPECT_EQ(t.fused_into, t.name == "pool" && fusable ? "conv" : "");
      for (const auto& t : (*b)->LayerTimes()) EXPECT_EQ(t.fused_into, "");
    }
  }
}

// A plain ReLU that alone reads a BatchNormalization's or an Add's output is
// fused into it (Model::FuseRelus: two passes over the activations fewer).
// The same Functional model with ReLUs that cannot fuse (a max_value far
// above any value: the same function) gives exactly the same output and
// gradients, the input's and the moving statistics' included, and the same
// predictions, with 16 channels (BatchNormalization's vector rows) and 5
// (its generic ones); the inputs are N(0, 1), so the ReLUs cut half.
TEST(ModelReluFusionTest, AReluFusedIntoBatchNormalizationOrAddComputesAsTheLayersApart) {
  for (int64_t channels : {16, 5}) {
    auto build = [&](bool plain) {
      LayerSpec bn = Other(LayerType::kBatchNormalization, "bn", 0);
      LayerSpec relu = Other(LayerType::kReLU, "relu", 1);
      const LayerSpec add = Other(LayerType::kAdd, "add", 2);
      LayerSpec relu2 = Other(LayerType::kReLU, "relu2", 3);
      if (!plain) relu.has_max_value = relu2.has_max_value = true, relu.max_value = relu2.max_value = 1e30;
      ModelSpec s;
      s.input_shape = {5, 6, channels};
      s.inputs = {InputSpec{"x", {5, 6, channels}}};
      s.layers = {bn, relu, add, relu2, Other(LayerType::kFlatten, "flat", 4), Dense("out", 3, Activation::kLinear, 5)};
      const TensorRef x{-1, 0};
      auto node = [](int64_t n) { return TensorRef{n, -1}; };
      auto call = [&](size_t layer, std::vector<TensorRef> inputs) {
        return NodeSpec{layer, std::move(inputs), "model.layers[" + std::to_string(layer) + "] call 0"};
      };
      s.nodes = {call(0, {x}),       call(1, {node(0)}), call(2, {node(1), x}),
                 call(3, {node(2)}), call(4, {node(3)}), call(5, {node(4)})};
      s.output = node(5);
      return Model::Create(s, LossSpec{LossType::kMeanSquaredError, false});
    };
    auto a = build(true);
    auto b = build(false);
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
    std::mt19937 rng(9);
    std::normal_distribution<float> normal;
    std::vector<float> xs(4 * 5 * 6 * channels), dys(4 * 3);
    for (float& v : xs) v = normal(rng);
    for (float& v : dys) v = normal(rng);
    const Tensor x = Tensor::FromVector({4, 5, 6, channels}, xs).value();
    std::vector<Tensor> values = (*a)->InitialValues(3);
    for (int step = 0; step < 2; ++step) {
      SCOPED_TRACE(channels);
      ExpectSameDifferentiation(**a, **b, values, x, Tensor::FromVector({4, 3}, dys).value());
      // Inference: BatchNormalization with its moving statistics.
      const auto pa = (*a)->Predict(values, x), pb = (*b)->Predict(values, x);
      ASSERT_TRUE(pa.ok() && pb.ok()) << pa.status() << pb.status();
      EXPECT_EQ(AsFloats(*pa), AsFloats(*pb));
    }
    for (const auto& t : (*a)->LayerTimes()) {
      EXPECT_EQ(t.fused_into, t.name == "relu" ? "bn" : t.name == "relu2" ? "add" : "") << t.name;
    }
    for (const auto& t : (*b)->LayerTimes()) EXPECT_EQ(t.fused_into, "");
  }
}

// A Conv2D of 32 channels and filters over 14x14 takes oneDNN's Winograd
// kernels (conv2d.h) and the summary's layer times name them; its output
// and gradients, the input's included, match the same model's with direct
// convolutions only within float32 rounding.
TEST(ModelWinogradTest, AWinogradConvolutionIsNamedAndMatchesTheDirectOne) {
  if (!DirectConv2D::Available()) GTEST_SKIP() << "no oneDNN in this build (or TFJOB_CPU_KERNELS=eigen)";
  LayerSpec conv = Other(LayerType::kConv2D, "conv", 0, Activation::kRelu);
  conv.filters = 32;
  conv.kernel_size = {3, 3};
  conv.padding = Padding::kSame;
  ModelSpec spec;
  spec.input_shape = {14, 14, 32};
  spec.layers = {conv, Other(LayerType::kFlatten, "flat", 1), Dense("out", 3, Activation::kLinear, 2)};
  const LossSpec mse{LossType::kMeanSquaredError, false};
  std::mt19937 rng(6);
  std::normal_distribution<float> normal;
  std::vector<float> xs(2 * 14 * 14 * 32), dys(2 * 3);
  for (float& v : xs) v = normal(rng);
  for (float& v : dys) v = normal(rng);
  const Tensor x = Tensor::FromVector({2, 14, 14, 32}, xs).value();
  const Tensor dy = Tensor::FromVector({2, 3}, dys).value();
  auto run = [&](bool direct_only, std::string& kernel) {
    UseDirectConvolutionsOnly(direct_only);
    auto m = Model::Create(spec, mse);
    EXPECT_TRUE(m.ok()) << m.status();
    auto g = (*m)->Differentiate((*m)->InitialValues(3), x, dy, true);
    EXPECT_TRUE(g.ok()) << g.status();
    kernel = (*m)->LayerTimes()[0].cpu_kernel;
    UseDirectConvolutionsOnly(false);
    return std::move(*g);
  };
  std::string wino_kernel, direct_kernel;
  const auto a = run(false, wino_kernel), b = run(true, direct_kernel);
  if (__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    EXPECT_THAT(wino_kernel, HasSubstr("wino"));
  }
  EXPECT_THAT(direct_kernel, ::testing::Not(HasSubstr("wino")));
  EXPECT_FALSE(direct_kernel.empty());
  auto expect_near = [](const Tensor& p, const Tensor& q, const std::string& what) {
    ASSERT_EQ(p.size(), q.size()) << what;
    auto f = p.flat<float>(), g = q.flat<float>();
    for (int64_t i = 0; i < p.size(); ++i) ASSERT_NEAR(f[i], g[i], 1e-4 * (1 + std::abs(g[i]))) << what << " " << i;
  };
  expect_near(a.output, b.output, "output");
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) expect_near(a.grads[i].dense, b.grads[i].dense, std::to_string(i));
  expect_near(a.input_grads[0], b.input_grads[0], "input gradient");
}

// Training's time per layer call (the summary's layer_seconds): forward and
// backward of training steps are counted; prediction is not.
TEST(ModelLayerTimesTest, TrainingStepsAreTimedPerLayerAndPredictionIsNot) {
  auto m_or = Model::Create(Mlp(), kScce);
  ASSERT_TRUE(m_or.ok()) << m_or.status();
  Model& m = **m_or;
  auto values = m.InitialValues(1);
  Tensor x = Tensor::Zeros(DType::kFloat32, {2, 3});
  Tensor y = Tensor::FromVector({2}, std::vector<int64_t>{0, 1}).value();
  for (const auto& t : m.LayerTimes()) EXPECT_EQ(t.steps, 0) << t.name;
  ASSERT_TRUE(m.ComputeGradients(values, x, y).ok());
  ASSERT_TRUE(m.ComputeGradients(values, x, y).ok());
  ASSERT_TRUE(m.Predict(values, x).ok());
  const auto times = m.LayerTimes();
  const auto flops = m.Flops();
  ASSERT_EQ(times.size(), flops.size());
  for (size_t i = 0; i < times.size(); ++i) {
    EXPECT_EQ(times[i].name, flops[i].name);
    EXPECT_EQ(times[i].steps, 2) << times[i].name;  // the prediction is not a step
    EXPECT_GT(times[i].forward, 0) << times[i].name;
    EXPECT_GT(times[i].backward, 0) << times[i].name;
  }
}

}  // namespace
}  // namespace tfjob::model

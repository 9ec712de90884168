// Functional models: both JSON forms, several inputs (packed), shared
// layers, merges, and the gradients through the graph (finite differences).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "common/json_reader.h"
#include "services/model/constraints.h"
#include "services/model/keras_model.h"
#include "services/model/model.h"
#include "services/model/random.h"

namespace tfjob::model {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

std::string Data(const std::string& name) {
  const char* d = std::getenv("TFJOB_SOURCE_DIR");
  return std::string(d ? d : ".") + "/services/model/tests/data/functional/" + name;
}

LossSpec Mse() { return LossSpec{LossType::kMeanSquaredError, false}; }

Tensor RandomTensor(DType dtype, const Shape& shape, uint64_t seed, int64_t ids = 0) {
  Tensor t = Tensor::Zeros(dtype, shape);
  Rng rng(seed);
  for (int64_t i = 0; i < t.size(); ++i) {
    if (dtype == DType::kFloat32)
      t.data<float>()[i] = rng.Uniform(-1.f, 1.f);
    else
      t.data<int64_t>()[i] = static_cast<int64_t>(rng.Next() % static_cast<uint64_t>(ids));
  }
  return t;
}

// L = sum(output * r), in double.
double Loss(Model& m, std::span<const Tensor> values, const Tensor& x, const Tensor& r) {
  auto y = m.Differentiate(values, x, r.Clone(), false);
  EXPECT_TRUE(y.ok()) << y.status().ToString();
  double l = 0;
  for (int64_t i = 0; i < r.size(); ++i) l += static_cast<double>(y->output.data<float>()[i]) * r.data<float>()[i];
  return l;
}

// Every variable's gradient against central differences.
void CheckGradients(Model& m, const Tensor& x, uint64_t seed) {
  std::vector<Tensor> values = m.InitialValues(seed);
  for (Tensor& v : values) {  // no all-zero biases: every path matters
    for (int64_t i = 0; i < v.size(); ++i) v.data<float>()[i] += 0.05f * static_cast<float>((i % 7) - 3);
  }
  Shape out{x.dim(0)};
  out.insert(out.end(), m.output_shape().begin(), m.output_shape().end());
  const Tensor r = RandomTensor(DType::kFloat32, out, seed + 1);
  auto b = m.Differentiate(values, x, r.Clone(), false);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  for (size_t k = 0; k < values.size(); ++k) {
    const Gradient& g = b->grads[k];
    Tensor dense = g.sparse ? Tensor::Zeros(DType::kFloat32, values[k].shape()) : g.dense;
    if (g.sparse) {
      const int64_t row = values[k].size() / values[k].dim(0);
      for (int64_t i = 0; i < g.indices.size(); ++i) {
        for (int64_t j = 0; j < row; ++j)
          dense.data<float>()[g.indices.data<int64_t>()[i] * row + j] += g.values.data<float>()[i * row + j];
      }
    }
    for (int64_t i = 0; i < values[k].size(); ++i) {
      const float keep = values[k].data<float>()[i];
      const float eps = 1e-2f;
      values[k].data<float>()[i] = keep + eps;
      const double up = Loss(m, values, x, r);
      values[k].data<float>()[i] = keep - eps;
      const double down = Loss(m, values, x, r);
      values[k].data<float>()[i] = keep;
      const double numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(dense.data<float>()[i], numeric, 2e-3 + 2e-2 * std::fabs(numeric))
          << m.variables()[k].name << "[" << i << "]";
    }
  }
}

TEST(FunctionalTest, TwoInputsASharedLayerAndMergesFromTfjs) {
  auto spec = LoadKerasModel(Data("two_inputs_shared.json"));
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_EQ(spec->inputs.size(), 2u);
  EXPECT_EQ(spec->inputs[0].name, "dense_in");
  EXPECT_EQ(spec->inputs[1].name, "ids");
  EXPECT_EQ(spec->inputs[1].dtype, DType::kInt64);
  EXPECT_EQ(spec->nodes.size(), 8u);  // the shared layer twice
  // TF.js' default kernel initializer: glorot_normal.
  EXPECT_EQ(spec->layers[0].kernel_initializer,
            Initializer::VarianceScaling(1, Initializer::Mode::kFanAvg, Initializer::Distribution::kTruncatedNormal));
  auto m = Model::Create(*spec, Mse());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  // The shared Dense has one kernel and one bias.
  int shared = 0;
  for (const VariableSpec& v : (*m)->variables()) shared += v.name.rfind("shared/", 0) == 0;
  EXPECT_EQ(shared, 2);
  EXPECT_TRUE((*m)->packed_input());
  EXPECT_EQ((*m)->input_shape(), Shape({7}));
  EXPECT_EQ((*m)->input_dtype(), DType::kInt64);  // float and ids, packed losslessly
  EXPECT_EQ((*m)->output_shape(), Shape({3}));

  const Tensor dense = RandomTensor(DType::kFloat32, {5, 4}, 3);
  const Tensor ids = RandomTensor(DType::kInt64, {5, 3}, 4, 10);
  std::vector<Tensor> parts{dense, ids};
  auto x = (*m)->PackInputs(parts);
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  auto back = (*m)->UnpackInputs(*x);
  ASSERT_TRUE(back.ok());
  for (int64_t i = 0; i < dense.size(); ++i) EXPECT_EQ((*back)[0].data<float>()[i], dense.data<float>()[i]);
  for (int64_t i = 0; i < ids.size(); ++i) EXPECT_EQ((*back)[1].data<int64_t>()[i], ids.data<int64_t>()[i]);
  CheckGradients(**m, *x, 11);

  // A missing input is named.
  std::vector<Tensor> one{dense};
  EXPECT_THAT((*m)->PackInputs(one).status().message(), HasSubstr("has 2 inputs, got 1"));
  std::vector<Tensor> swapped{ids, dense};
  EXPECT_THAT((*m)->PackInputs(swapped).status().message(), HasSubstr("input \"dense_in\""));
}

TEST(FunctionalTest, ElementwiseMergesHaveTheirGradients) {
  auto spec = LoadKerasModel(Data("merges.json"));
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto m = Model::Create(*spec, Mse());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_FALSE((*m)->packed_input());
  EXPECT_EQ(spec->layers.back().bias_initializer, Initializer::kOnes);
  CheckGradients(**m, RandomTensor(DType::kFloat32, {4, 6}, 5), 21);
}

TEST(FunctionalTest, SeveralOutputsAreOneClearError) {
  auto spec = LoadKerasModel(Data("two_outputs.json"));
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("the model has 2 outputs (o1, o2)"));
}

// Keras 3's form, written as keras.Model(...).to_json() writes it.
json Keras3Tensor(const std::string& layer, int node = 0) {
  return {{"class_name", "__keras_tensor__"},
          {"config", {{"shape", {nullptr, 3}}, {"dtype", "float32"}, {"keras_history", {layer, node, 0}}}}};
}

json Keras3Layer(const std::string& cls, json config, json inbound) {
  return {{"module", "keras.layers"},   {"class_name", cls},      {"config", config},
          {"registered_name", nullptr}, {"name", config["name"]}, {"inbound_nodes", inbound}};
}

TEST(FunctionalTest, ReadsKeras3FunctionalJson) {
  json dense = {{"name", "d"},
                {"trainable", true},
                {"dtype", {{"module", "keras"}, {"class_name", "DTypePolicy"}, {"config", {{"name", "float32"}}}}},
                {"units", 3},
                {"activation", "tanh"},
                {"use_bias", true},
                {"kernel_initializer",
                 {{"module", "keras.initializers"},
                  {"class_name", "HeUniform"},
                  {"config", {{"seed", nullptr}}},
                  {"registered_name", nullptr}}},
                {"bias_initializer",
                 {{"module", "keras.initializers"},
                  {"class_name", "Zeros"},
                  {"config", json::object()},
                  {"registered_name", nullptr}}},
                {"kernel_regularizer",
                 {{"module", "keras.regularizers"},
                  {"class_name", "L2"},
                  {"config", {{"l2", 0.01}}},
                  {"registered_name", nullptr}}},
                {"bias_regularizer", nullptr},
                {"kernel_constraint", nullptr},
                {"bias_constraint", nullptr}};
  json doc = {
      {"module", "keras"},
      {"class_name", "Functional"},
      {"config",
       {{"name", "k3"},
        {"trainable", true},
        {"layers",
         {Keras3Layer("InputLayer",
                      {{"batch_shape", {nullptr, 3}}, {"dtype", "float32"}, {"sparse", false}, {"name", "a"}},
                      json::array()),
          Keras3Layer("InputLayer",
                      {{"batch_shape", {nullptr, 3}}, {"dtype", "float32"}, {"sparse", false}, {"name", "b"}},
                      json::array()),
          Keras3Layer("Dense", dense,
                      {{{"args", {Keras3Tensor("a")}}, {"kwargs", json::object()}},
                       {{"args", {Keras3Tensor("b")}}, {"kwargs", json::object()}}}),
          Keras3Layer("Subtract", {{"name", "diff"}, {"trainable", true}, {"dtype", "float32"}},
                      {{{"args", {{Keras3Tensor("d", 0), Keras3Tensor("d", 1)}}}, {"kwargs", json::object()}}}),
          Keras3Layer("Concatenate", {{"name", "cat"}, {"trainable", true}, {"dtype", "float32"}, {"axis", -1}},
                      {{{"args", {{Keras3Tensor("diff"), Keras3Tensor("a")}}}, {"kwargs", json::object()}}}),
          Keras3Layer("Dot",
                      {{"name", "dot"}, {"trainable", true}, {"dtype", "float32"}, {"axes", 1}, {"normalize", true}},
                      {{{"args", {{Keras3Tensor("cat"), Keras3Tensor("cat")}}}, {"kwargs", json::object()}}})}},
        {"input_layers", {{"a", 0, 0}, {"b", 0, 0}}},
        {"output_layers", {"dot", 0, 0}}}}};
  auto spec = ParseKerasModel(doc, "k3.json");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->name, "k3");
  ASSERT_EQ(spec->nodes.size(), 5u);
  EXPECT_EQ(spec->layers[0].kernel_regularizer.l2, 0.01);
  auto m = Model::Create(*spec, Mse());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->input_dtype(), DType::kFloat32);  // two float inputs pack as float32
  EXPECT_EQ((*m)->output_shape(), Shape({1}));
  EXPECT_THAT((*m)->CheckDeviceSupport().message(), HasSubstr("regularizer"));
}

TEST(FunctionalTest, BadGraphsAreNamed) {
  json doc = json::parse(R"({"class_name": "Model", "config": {"name": "m", "layers": [
    {"name": "x", "class_name": "InputLayer", "config": {"batch_input_shape": [null, 2], "dtype": "float32", "name": "x"}, "inbound_nodes": []},
    {"name": "d", "class_name": "Dense", "config": {"units": 2, "name": "d"}, "inbound_nodes": [[["e", 0, 0, {}]]]},
    {"name": "e", "class_name": "Dense", "config": {"units": 2, "name": "e"}, "inbound_nodes": [[["d", 0, 0, {}]]]}],
    "input_layers": [["x", 0, 0]], "output_layers": [["e", 0, 0]]}})");
  auto cycle = ParseKerasModel(doc, "m.json");
  EXPECT_THAT(cycle.status().message(), HasSubstr("which no call makes"));
  doc["config"]["layers"][1]["inbound_nodes"] = json::parse(R"([[["nope", 0, 0, {}]]])");
  EXPECT_THAT(ParseKerasModel(doc, "m.json").status().message(), HasSubstr("no layer is named \"nope\""));
  doc["config"]["layers"][1]["inbound_nodes"] = json::parse(R"([[["x", 0, 0, {}]]])");
  doc["config"]["layers"][1]["config"]["kernel_initializer"] = "glorot_sideways";
  EXPECT_THAT(ParseKerasModel(doc, "m.json").status().message(),
              HasSubstr("argument kernel_initializer: initializer \"glorot_sideways\" is not supported"));
}

TEST(InitializerTest, DrawsKerasDistributions) {
  auto check = [](const char* json_text, const Shape& shape, double want_mean, double want_std) {
    auto init = ParseInitializer(json::parse(json_text));
    ASSERT_TRUE(init.ok()) << init.status().ToString();
    Tensor t = Tensor::Zeros(DType::kFloat32, shape);
    Rng rng(7);
    ASSERT_TRUE(FillInitializer(*init, t, rng).ok());
    double mean = 0, sq = 0;
    for (int64_t i = 0; i < t.size(); ++i) mean += t.data<float>()[i];
    mean /= static_cast<double>(t.size());
    for (int64_t i = 0; i < t.size(); ++i) sq += std::pow(t.data<float>()[i] - mean, 2);
    const double sd = std::sqrt(sq / static_cast<double>(t.size()));
    EXPECT_NEAR(mean, want_mean, 0.02 + 0.05 * want_std) << json_text;
    EXPECT_NEAR(sd, want_std, 0.05 * want_std + 1e-6) << json_text;
  };
  // fan_in 200, fan_out 100 (a [200, 100] kernel).
  check(R"({"class_name": "HeNormal", "config": {"seed": null}})", {200, 100}, 0, std::sqrt(2.0 / 200));
  check(R"({"class_name": "HeUniform", "config": {}})", {200, 100}, 0, std::sqrt(2.0 / 200));
  check(R"("lecun_normal")", {200, 100}, 0, std::sqrt(1.0 / 200));
  check(R"({"class_name": "VarianceScaling", "config": {"scale": 1, "mode": "fan_avg", "distribution": "normal"}})",
        {200, 100}, 0, std::sqrt(1.0 / 150));
  check(
      R"({"class_name": "VarianceScaling", "config": {"scale": 3, "mode": "fan_out", "distribution": "untruncated_normal"}})",
      {200, 100}, 0, std::sqrt(3.0 / 100));
  check(R"({"class_name": "RandomNormal", "config": {"mean": 1, "stddev": 0.5}})", {100, 100}, 1, 0.5);
  check(R"({"class_name": "RandomUniform", "config": {"minval": 0, "maxval": 2}})", {100, 100}, 1, 2 / std::sqrt(12.0));
  check(R"({"class_name": "Constant", "config": {"value": 0.25}})", {10, 10}, 0.25, 0);
  // Truncated at two standard deviations: its spread is 0.8796 of stddev.
  check(R"({"class_name": "TruncatedNormal", "config": {"mean": 0, "stddev": 1}})", {100, 100}, 0, 0.87962566);

  // Orthogonal: Q^T Q = gain^2 I.
  auto orth = ParseInitializer(json::parse(R"({"class_name": "Orthogonal", "config": {"gain": 2}})"));
  Tensor q = Tensor::Zeros(DType::kFloat32, {6, 4});
  Rng rng(3);
  ASSERT_TRUE(FillInitializer(*orth, q, rng).ok());
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
      double dot = 0;
      for (int k = 0; k < 6; ++k) dot += q.data<float>()[k * 4 + i] * q.data<float>()[k * 4 + j];
      EXPECT_NEAR(dot, i == j ? 4.0 : 0.0, 1e-4);
    }
  }
  auto eye = ParseInitializer(json::parse(R"({"class_name": "Identity", "config": {"gain": 3}})"));
  Tensor e = Tensor::Zeros(DType::kFloat32, {2, 3});
  ASSERT_TRUE(FillInitializer(*eye, e, rng).ok());
  EXPECT_EQ(e.data<float>()[0], 3.f);
  EXPECT_EQ(e.data<float>()[4], 3.f);
  EXPECT_EQ(e.data<float>()[1], 0.f);
  EXPECT_THAT(ParseInitializer(json::parse(R"({"class_name": "HeNormal", "config": {"scale": 2}})")).status().message(),
              HasSubstr("argument scale is not supported"));
}

TEST(InitializerTest, AWeightAnInitializerCannotFillIsRefused) {
  json doc = json::parse(R"({"class_name": "Sequential", "config": {"name": "s", "layers": [
    {"class_name": "Dense", "config": {"units": 2, "name": "d", "batch_input_shape": [null, 3],
      "bias_initializer": {"class_name": "Orthogonal", "config": {"gain": 1}}}}]}})");
  auto spec = ParseKerasModel(doc, "s.json");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto m = Model::Create(*spec, Mse());
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("initializer Orthogonal(gain=1) cannot fill weight d/bias of shape [2]"));
}

TEST(RegularizerTest, L1L2AddToTheLossAndItsGradient) {
  json doc = json::parse(R"({"class_name": "Sequential", "config": {"name": "s", "layers": [
    {"class_name": "Dense", "config": {"units": 2, "name": "d", "batch_input_shape": [null, 3],
      "kernel_regularizer": {"class_name": "L1L2", "config": {"l1": 0.1, "l2": 0.2}},
      "bias_regularizer": {"class_name": "L2", "config": {"l2": 0.5}}}}]}})");
  auto spec = ParseKerasModel(doc, "s.json");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto m = Model::Create(*spec, Mse());
  ASSERT_TRUE(m.ok());
  std::vector<Tensor> values = (*m)->InitialValues(1);
  values[1].data<float>()[0] = 0.5f;
  const Tensor x = RandomTensor(DType::kFloat32, {4, 3}, 2), y = RandomTensor(DType::kFloat32, {4, 2}, 3);
  auto with = (*m)->ComputeGradients(values, x, y);
  ASSERT_TRUE(with.ok());
  spec->layers[0].kernel_regularizer = {};
  spec->layers[0].bias_regularizer = {};
  auto plain_model = Model::Create(*spec, Mse());
  auto plain = (*plain_model)->ComputeGradients(values, x, y);
  ASSERT_TRUE(plain.ok());
  double penalty = 0.5 * 0.5 * 0.5;
  for (int64_t i = 0; i < values[0].size(); ++i) {
    const float w = values[0].data<float>()[i];
    penalty += 0.1 * std::fabs(w) + 0.2 * w * w;
    EXPECT_NEAR(with->grads[0].dense.data<float>()[i] - plain->grads[0].dense.data<float>()[i],
                0.1 * (w > 0 ? 1 : -1) + 0.4 * w, 1e-5);
  }
  EXPECT_NEAR(with->loss - plain->loss, penalty, 1e-5);
  EXPECT_NEAR(with->grads[1].dense.data<float>()[0] - plain->grads[1].dense.data<float>()[0], 0.5, 1e-5);
}

TEST(ConstraintTest, AsKerasAppliesThem) {
  // A [2, 3] kernel: axis 0 norms are per column.
  auto kernel = [] { return Tensor::FromVector({2, 3}, std::vector<float>{3, 0.1f, -1, 4, 0.1f, 0}).value(); };
  Constraint max_norm;
  max_norm.kind = Constraint::Kind::kMaxNorm;
  max_norm.max_value = 2;
  Tensor w = kernel();
  ASSERT_TRUE(ApplyConstraint(max_norm, w).ok());
  // Column 0 has norm 5: scaled to 2. The others are under 2: unchanged.
  EXPECT_NEAR(w.data<float>()[0], 3 * 2 / 5.0, 1e-6);
  EXPECT_NEAR(w.data<float>()[3], 4 * 2 / 5.0, 1e-6);
  EXPECT_NEAR(w.data<float>()[1], 0.1, 1e-6);
  EXPECT_NEAR(w.data<float>()[2], -1, 1e-6);
  Constraint unit;
  unit.kind = Constraint::Kind::kUnitNorm;
  unit.axis = {1};
  w = kernel();
  ASSERT_TRUE(ApplyConstraint(unit, w).ok());
  const double n0 = std::sqrt(9 + 0.01 + 1);
  EXPECT_NEAR(w.data<float>()[0], 3 / n0, 1e-6);
  Constraint nonneg;
  nonneg.kind = Constraint::Kind::kNonNeg;
  w = kernel();
  ASSERT_TRUE(ApplyConstraint(nonneg, w).ok());
  EXPECT_EQ(w.data<float>()[2], 0.f);
  EXPECT_EQ(w.data<float>()[0], 3.f);
  Constraint minmax;
  minmax.kind = Constraint::Kind::kMinMaxNorm;
  minmax.min_value = 1;
  minmax.max_value = 2;
  minmax.rate = 0.5;
  w = kernel();
  ASSERT_TRUE(ApplyConstraint(minmax, w).ok());
  // Column 1: norm 0.1414, desired 0.5 * 1 + 0.5 * 0.1414.
  const double n1 = std::sqrt(0.02);
  EXPECT_NEAR(w.data<float>()[1], 0.1 * (0.5 + 0.5 * n1) / n1, 1e-5);
  Constraint bad = max_norm;
  bad.axis = {2};
  EXPECT_THAT(ApplyConstraint(bad, w).message(), HasSubstr("axis 2 is outside a weight of shape"));

  // Parsed from Keras JSON into the variables.
  json doc = json::parse(R"({"class_name": "Sequential", "config": {"name": "s", "layers": [
    {"class_name": "Dense", "config": {"units": 2, "name": "d", "batch_input_shape": [null, 3],
      "kernel_constraint": {"class_name": "MaxNorm", "config": {"max_value": 1.5, "axis": 0}},
      "bias_constraint": {"class_name": "NonNeg", "config": {}}}}]}})");
  auto spec = ParseKerasModel(doc, "s.json");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto m = Model::Create(*spec, Mse());
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->variables()[0].constraint.kind, Constraint::Kind::kMaxNorm);
  EXPECT_EQ((*m)->variables()[0].constraint.max_value, 1.5);
  EXPECT_EQ((*m)->variables()[1].constraint.kind, Constraint::Kind::kNonNeg);
  EXPECT_THAT((*m)->CheckDeviceSupport().message(), HasSubstr("weight constraint"));
  doc["config"]["layers"][0]["config"]["kernel_constraint"] = {{"class_name", "RadialConstraint"}};
  EXPECT_THAT(ParseKerasModel(doc, "s.json").status().message(),
              HasSubstr("argument kernel_constraint={\"class_name\":\"RadialConstraint\"}: only MaxNorm"));
}

}  // namespace
}  // namespace tfjob::model

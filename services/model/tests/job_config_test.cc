#include "services/model/job_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "common/json_reader.h"

namespace tfjob::model {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using json = nlohmann::json;

// A small valid job; tests break one field at a time.
json Base() {
  return json::parse(R"({
    "name": "unit",
    "seed": 3,
    "model": {"input_shape": [4], "layers": [
      {"type": "Dense", "units": 8, "activation": "relu"},
      {"type": "Dense", "units": 3, "activation": "softmax"}]},
    "loss": "sparse_categorical_crossentropy",
    "optimizer": {"type": "Adam", "learning_rate": 0.01},
    "metrics": ["accuracy"],
    "data": {"train": {"source": "synthetic", "num_examples": 100, "feature_shape": [4], "num_classes": 3}},
    "batch_size": 16,
    "epochs": 2
  })");
}

JobConfig ParseOk(const json& doc) {
  auto c = ParseJobConfig(doc, "job.json");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : JobConfig{};
}

// The error for `doc`, which must be INVALID_ARGUMENT and start with
// "job.json: <field>: " followed by `detail`.
void ExpectError(const json& doc, const std::string& field, const std::string& detail) {
  auto c = ParseJobConfig(doc, "job.json");
  ASSERT_FALSE(c.ok()) << "accepted: " << doc.dump();
  EXPECT_EQ(c.status().code(), Code::kInvalidArgument) << c.status();
  EXPECT_THAT(c.status().message(), StartsWith("job.json: " + field + ": " + detail)) << doc.dump();
}

// ------------------------------------------------------------- Valid docs

TEST(JobConfigTest, ParsesFullDocument) {
  JobConfig c = ParseOk(Base());
  EXPECT_EQ(c.source, "job.json");
  EXPECT_EQ(c.name, "unit");
  EXPECT_EQ(c.seed, 3);
  EXPECT_EQ(c.model.input_shape, Shape({4}));
  EXPECT_EQ(c.model.input_dtype, DType::kFloat32);
  ASSERT_EQ(c.model.layers.size(), 2u);
  const LayerSpec& l0 = c.model.layers[0];
  EXPECT_EQ(l0.type, LayerType::kDense);
  EXPECT_EQ(l0.name, "dense");
  EXPECT_EQ(l0.units, 8);
  EXPECT_EQ(l0.activation, Activation::kRelu);
  EXPECT_TRUE(l0.use_bias);
  EXPECT_EQ(l0.path, "model.layers[0]");
  const LayerSpec& l1 = c.model.layers[1];
  EXPECT_EQ(l1.name, "dense_1");
  EXPECT_EQ(l1.units, 3);
  EXPECT_EQ(l1.activation, Activation::kSoftmax);
  EXPECT_EQ(l1.path, "model.layers[1]");
  EXPECT_EQ(c.loss.type, LossType::kSparseCategoricalCrossentropy);
  EXPECT_FALSE(c.loss.from_logits);
  EXPECT_EQ(c.optimizer.type, OptimizerType::kAdam);
  EXPECT_DOUBLE_EQ(c.optimizer.learning_rate, 0.01);
  EXPECT_DOUBLE_EQ(c.optimizer.beta_1, 0.9);
  EXPECT_DOUBLE_EQ(c.optimizer.beta_2, 0.999);
  EXPECT_DOUBLE_EQ(c.optimizer.epsilon, 1e-7);
  EXPECT_FALSE(c.optimizer.amsgrad);
  EXPECT_THAT(c.metrics, ElementsAre(MetricType::kSparseCategoricalAccuracy));
  EXPECT_THAT(c.metric_names, ElementsAre("accuracy"));
  EXPECT_EQ(c.data.train.kind, DataSourceKind::kSynthetic);
  EXPECT_EQ(c.data.train.field, "data.train");
  EXPECT_EQ(c.data.train.num_examples, 100);
  EXPECT_EQ(c.data.train.feature_shape, Shape({4}));
  EXPECT_EQ(c.data.train.num_classes, 3);
  EXPECT_FALSE(c.data.eval.has_value());
  EXPECT_TRUE(c.data.shuffle);
  EXPECT_EQ(c.data.shuffle_buffer, 0);
  EXPECT_EQ(c.batch_size, 16);
  EXPECT_EQ(c.epochs, 2);
  EXPECT_EQ(c.steps_per_epoch, -1);
}

TEST(JobConfigTest, DefaultsForOptionalTopLevelFields) {
  json doc = Base();
  for (const char* k : {"name", "seed", "optimizer", "metrics", "batch_size", "epochs"}) doc.erase(k);
  JobConfig c = ParseOk(doc);
  EXPECT_EQ(c.name, "job");
  EXPECT_EQ(c.seed, 0);
  EXPECT_EQ(c.optimizer.type, OptimizerType::kSGD);
  EXPECT_DOUBLE_EQ(c.optimizer.learning_rate, 0.01);
  EXPECT_TRUE(c.metrics.empty());
  EXPECT_EQ(c.batch_size, 32);
  EXPECT_EQ(c.epochs, 1);
}

TEST(JobConfigTest, DefaultLayerNamesCountPerType) {
  json doc = Base();
  doc["model"]["input_shape"] = {2, 2};
  doc["model"]["layers"] = json::parse(R"([
    {"type": "Flatten"},
    {"type": "Dense", "units": 4},
    {"type": "Dense", "units": 4, "use_bias": false},
    {"type": "Activation", "activation": "tanh"},
    {"type": "Dense", "units": 4, "name": "head"},
    {"type": "Dense", "units": 3},
    {"type": "Activation", "activation": "softmax"}])");
  JobConfig c = ParseOk(doc);
  ASSERT_EQ(c.model.layers.size(), 7u);
  std::vector<std::string> names;
  for (const LayerSpec& l : c.model.layers) names.push_back(l.name);
  EXPECT_THAT(names, ElementsAre("flatten", "dense", "dense_1", "activation", "head", "dense_2", "activation_1"));
  EXPECT_EQ(c.model.layers[0].type, LayerType::kFlatten);
  EXPECT_EQ(c.model.layers[1].activation, Activation::kLinear);
  EXPECT_FALSE(c.model.layers[2].use_bias);
  EXPECT_EQ(c.model.layers[3].type, LayerType::kActivation);
  EXPECT_EQ(c.model.layers[3].activation, Activation::kTanh);
  EXPECT_EQ(c.model.layers[6].path, "model.layers[6]");
}

TEST(JobConfigTest, EmbeddingLayer) {
  json doc = Base();
  doc["model"] = json::parse(R"({"input_shape": [5], "input_dtype": "int64", "layers": [
    {"type": "Embedding", "input_dim": 1000, "output_dim": 16, "combiner": "mean"},
    {"type": "Embedding", "input_dim": 10, "output_dim": 2, "name": "e2"},
    {"type": "Embedding", "input_dim": 10, "output_dim": 2, "combiner": "sum"},
    {"type": "Dense", "units": 3}]})");
  JobConfig c = ParseOk(doc);
  EXPECT_EQ(c.model.input_dtype, DType::kInt64);
  const LayerSpec& e = c.model.layers[0];
  EXPECT_EQ(e.type, LayerType::kEmbedding);
  EXPECT_EQ(e.name, "embedding");
  EXPECT_EQ(e.input_dim, 1000);
  EXPECT_EQ(e.output_dim, 16);
  EXPECT_EQ(e.combiner, Combiner::kMean);
  EXPECT_EQ(c.model.layers[1].combiner, Combiner::kNone);
  EXPECT_EQ(c.model.layers[2].name, "embedding_1");
  EXPECT_EQ(c.model.layers[2].combiner, Combiner::kSum);
}

TEST(JobConfigTest, LossStringAndObjectForms) {
  const std::vector<std::pair<const char*, LossType>> names = {
      {"mse", LossType::kMeanSquaredError},
      {"MeanSquaredError", LossType::kMeanSquaredError},
      {"mean_squared_error", LossType::kMeanSquaredError},
      {"binary_crossentropy", LossType::kBinaryCrossentropy},
      {"BinaryCrossentropy", LossType::kBinaryCrossentropy},
      {"sparse_categorical_crossentropy", LossType::kSparseCategoricalCrossentropy},
      {"SparseCategoricalCrossentropy", LossType::kSparseCategoricalCrossentropy},
      {"categorical_crossentropy", LossType::kCategoricalCrossentropy},
      {"CategoricalCrossentropy", LossType::kCategoricalCrossentropy},
  };
  for (const auto& [name, type] : names) {
    json doc = Base();
    doc["loss"] = name;
    JobConfig c = ParseOk(doc);
    EXPECT_EQ(c.loss.type, type) << name;
    EXPECT_FALSE(c.loss.from_logits) << name;
    doc["loss"] = {{"type", name}};
    c = ParseOk(doc);
    EXPECT_EQ(c.loss.type, type) << name;
    EXPECT_FALSE(c.loss.from_logits) << name;
  }
  json doc = Base();
  doc["loss"] = json::parse(R"({"type": "BinaryCrossentropy", "from_logits": true})");
  JobConfig c = ParseOk(doc);
  EXPECT_EQ(c.loss.type, LossType::kBinaryCrossentropy);
  EXPECT_TRUE(c.loss.from_logits);
  doc["loss"] = json::parse(R"({"type": "categorical_crossentropy", "from_logits": false})");
  c = ParseOk(doc);
  EXPECT_EQ(c.loss.type, LossType::kCategoricalCrossentropy);
  EXPECT_FALSE(c.loss.from_logits);
}

TEST(JobConfigTest, OptimizerStringFormsUseKerasDefaultLearningRates) {
  const std::vector<std::tuple<const char*, OptimizerType, double>> cases = {
      {"SGD", OptimizerType::kSGD, 0.01},          {"sgd", OptimizerType::kSGD, 0.01},
      {"Adagrad", OptimizerType::kAdagrad, 0.001}, {"adagrad", OptimizerType::kAdagrad, 0.001},
      {"RMSprop", OptimizerType::kRMSprop, 0.001}, {"rmsprop", OptimizerType::kRMSprop, 0.001},
      {"Adam", OptimizerType::kAdam, 0.001},       {"adam", OptimizerType::kAdam, 0.001},
  };
  for (const auto& [name, type, lr] : cases) {
    json doc = Base();
    doc["optimizer"] = name;
    JobConfig c = ParseOk(doc);
    EXPECT_EQ(c.optimizer.type, type) << name;
    EXPECT_DOUBLE_EQ(c.optimizer.learning_rate, lr) << name;
    // The object form without a learning rate gets the same default.
    doc["optimizer"] = {{"type", name}};
    c = ParseOk(doc);
    EXPECT_EQ(c.optimizer.type, type) << name;
    EXPECT_DOUBLE_EQ(c.optimizer.learning_rate, lr) << name;
    // Other hyperparameters keep Keras' defaults.
    EXPECT_DOUBLE_EQ(c.optimizer.momentum, 0.0);
    EXPECT_DOUBLE_EQ(c.optimizer.rho, 0.9);
    EXPECT_DOUBLE_EQ(c.optimizer.epsilon, 1e-7);
    EXPECT_DOUBLE_EQ(c.optimizer.initial_accumulator_value, 0.1);
    EXPECT_DOUBLE_EQ(c.optimizer.beta_1, 0.9);
    EXPECT_DOUBLE_EQ(c.optimizer.beta_2, 0.999);
  }
}

// Keras' LossScaleOptimizer arguments, for float16 layers: 2^15 and 2000
// unless the job says.
TEST(JobConfigTest, LossScaleArgumentsAreRead) {
  json doc = Base();
  JobConfig c = ParseOk(doc);
  EXPECT_DOUBLE_EQ(c.optimizer.initial_scale, 32768);
  EXPECT_EQ(c.optimizer.dynamic_growth_steps, 2000);
  doc["optimizer"] =
      json::parse(R"({"type": "Adam", "loss_scale": {"initial_scale": 1024, "dynamic_growth_steps": 50}})");
  c = ParseOk(doc);
  EXPECT_DOUBLE_EQ(c.optimizer.initial_scale, 1024);
  EXPECT_EQ(c.optimizer.dynamic_growth_steps, 50);
  doc["optimizer"] = json::parse(R"({"type": "Adam", "loss_scale": {"initial_scale": 0.5}})");
  ExpectError(doc, "optimizer.loss_scale.initial_scale", "");
  doc["optimizer"] = json::parse(R"({"type": "Adam", "loss_scale": {"dynamic_growth_steps": 0}})");
  ExpectError(doc, "optimizer.loss_scale.dynamic_growth_steps", "must be >= 1");
  doc["optimizer"] = json::parse(R"({"type": "Adam", "loss_scale": {"initial": 2}})");
  ExpectError(doc, "optimizer.loss_scale.initial", "unknown field");
}

TEST(JobConfigTest, OptimizerObjectFormsReadEveryHyperparameter) {
  json doc = Base();
  doc["optimizer"] = json::parse(R"({"type": "SGD", "learning_rate": 0.2, "momentum": 0.8, "nesterov": true})");
  JobConfig c = ParseOk(doc);
  EXPECT_EQ(c.optimizer.type, OptimizerType::kSGD);
  EXPECT_DOUBLE_EQ(c.optimizer.learning_rate, 0.2);
  EXPECT_DOUBLE_EQ(c.optimizer.momentum, 0.8);
  EXPECT_TRUE(c.optimizer.nesterov);

  doc["optimizer"] = json::parse(R"({"type": "Adagrad", "initial_accumulator_value": 0.5, "epsilon": 1e-5})");
  c = ParseOk(doc);
  EXPECT_DOUBLE_EQ(c.optimizer.learning_rate, 0.001);
  EXPECT_DOUBLE_EQ(c.optimizer.initial_accumulator_value, 0.5);
  EXPECT_DOUBLE_EQ(c.optimizer.epsilon, 1e-5);

  doc["optimizer"] =
      json::parse(R"({"type": "RMSprop", "rho": 0.5, "momentum": 0.25, "epsilon": 1e-6, "centered": true})");
  c = ParseOk(doc);
  EXPECT_DOUBLE_EQ(c.optimizer.rho, 0.5);
  EXPECT_DOUBLE_EQ(c.optimizer.momentum, 0.25);
  EXPECT_DOUBLE_EQ(c.optimizer.epsilon, 1e-6);
  EXPECT_TRUE(c.optimizer.centered);

  doc["optimizer"] = json::parse(
      R"({"type": "Adam", "learning_rate": 3e-4, "beta_1": 0.8, "beta_2": 0.99, "epsilon": 1e-8, "amsgrad": true})");
  c = ParseOk(doc);
  EXPECT_DOUBLE_EQ(c.optimizer.learning_rate, 3e-4);
  EXPECT_DOUBLE_EQ(c.optimizer.beta_1, 0.8);
  EXPECT_DOUBLE_EQ(c.optimizer.beta_2, 0.99);
  EXPECT_DOUBLE_EQ(c.optimizer.epsilon, 1e-8);
  EXPECT_TRUE(c.optimizer.amsgrad);
}

TEST(JobConfigTest, AccuracyResolvesPerLoss) {
  const std::vector<std::pair<const char*, MetricType>> cases = {
      {"mse", MetricType::kAccuracy},
      {"binary_crossentropy", MetricType::kBinaryAccuracy},
      {"sparse_categorical_crossentropy", MetricType::kSparseCategoricalAccuracy},
      {"categorical_crossentropy", MetricType::kCategoricalAccuracy},
  };
  for (const auto& [loss, metric] : cases) {
    json doc = Base();
    doc["loss"] = loss;
    doc["metrics"] = {"accuracy", "acc"};
    JobConfig c = ParseOk(doc);
    EXPECT_THAT(c.metrics, ElementsAre(metric, metric)) << loss;
    EXPECT_THAT(c.metric_names, ElementsAre("accuracy", "acc")) << loss;
  }
  json doc = Base();
  doc["metrics"] = {"binary_accuracy", "SparseCategoricalAccuracy", "categorical_accuracy"};
  JobConfig c = ParseOk(doc);
  EXPECT_THAT(c.metrics, ElementsAre(MetricType::kBinaryAccuracy, MetricType::kSparseCategoricalAccuracy,
                                     MetricType::kCategoricalAccuracy));
  doc["metrics"] = json::array();
  EXPECT_TRUE(ParseOk(doc).metrics.empty());
}

TEST(JobConfigTest, DataSources) {
  json doc = Base();
  doc["data"] = json::parse(R"({
    "train": {"source": "mnist", "images": "train-images.gz", "labels": "train-labels.gz", "begin": 10, "end": 500},
    "eval": {"source": "csv", "path": "eval.csv", "delimiter": ";", "header": false, "label_column": 0},
    "shuffle": false, "shuffle_buffer": 64})");
  JobConfig c = ParseOk(doc);
  EXPECT_EQ(c.data.train.kind, DataSourceKind::kMnist);
  EXPECT_EQ(c.data.train.images, "train-images.gz");
  EXPECT_EQ(c.data.train.labels, "train-labels.gz");
  EXPECT_EQ(c.data.train.begin, 10);
  EXPECT_EQ(c.data.train.end, 500);
  ASSERT_TRUE(c.data.eval.has_value());
  EXPECT_EQ(c.data.eval->kind, DataSourceKind::kCsv);
  EXPECT_EQ(c.data.eval->field, "data.eval");
  EXPECT_EQ(c.data.eval->path, "eval.csv");
  EXPECT_EQ(c.data.eval->delimiter, ";");
  EXPECT_FALSE(c.data.eval->header);
  EXPECT_EQ(c.data.eval->label_column, 0);
  EXPECT_EQ(c.data.eval->begin, 0);
  EXPECT_EQ(c.data.eval->end, -1);
  EXPECT_FALSE(c.data.shuffle);
  EXPECT_EQ(c.data.shuffle_buffer, 64);

  doc["data"] = json::parse(R"({"train": {"source": "synthetic", "num_examples": 50, "feature_shape": [2, 3],
                                          "num_classes": 4, "seed": 9, "noise": 1.5, "begin": 5, "end": 40}})");
  c = ParseOk(doc);
  EXPECT_EQ(c.data.train.feature_shape, Shape({2, 3}));
  EXPECT_EQ(c.data.train.num_classes, 4);
  EXPECT_EQ(c.data.train.seed, 9);
  EXPECT_DOUBLE_EQ(c.data.train.noise, 1.5);
  EXPECT_EQ(c.data.train.begin, 5);
  EXPECT_EQ(c.data.train.end, 40);
}

TEST(JobConfigTest, StepsPerEpoch) {
  json doc = Base();
  doc["steps_per_epoch"] = 7;
  EXPECT_EQ(ParseOk(doc).steps_per_epoch, 7);
  doc["steps_per_epoch"] = -1;
  EXPECT_EQ(ParseOk(doc).steps_per_epoch, -1);
}

// ----------------------------------------------------------------- Errors

TEST(JobConfigErrorTest, MalformedJson) {
  auto r = ParseJson("{\"model\": {\"input_shape\": [4],}", "job.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(r.status().message(), StartsWith("job.json: malformed JSON at byte "));
  auto empty = ParseJson("", "job.json");
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.status().message(), StartsWith("job.json: malformed JSON"));
}

TEST(JobConfigErrorTest, DocumentMustBeAnObject) {
  ExpectError(json::array({1, 2}), "document", "expected an object, got array");
  ExpectError(json("job"), "document", "expected an object, got string");
}

TEST(JobConfigErrorTest, UnknownFields) {
  json doc = Base();
  doc["epoch"] = 3;
  ExpectError(doc, "epoch", "unknown field");

  doc = Base();
  doc["optimizer"]["learning_rat"] = 0.1;
  auto c = ParseJobConfig(doc, "job.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "job.json: optimizer.learning_rat: unknown field");

  doc = Base();
  doc["optimizer"] = json::parse(R"({"type": "SGD", "beta_1": 0.9})");  // an Adam field
  ExpectError(doc, "optimizer.beta_1", "unknown field");

  doc = Base();
  doc["model"]["layers"][1]["activaton"] = "relu";
  ExpectError(doc, "model.layers[1].activaton", "unknown field");

  doc = Base();
  doc["model"]["layers"][0]["combiner"] = "sum";  // an Embedding field on a Dense
  ExpectError(doc, "model.layers[0].combiner", "unknown field");

  doc = Base();
  doc["model"]["input_shap"] = {4};
  ExpectError(doc, "model.input_shap", "unknown field");

  doc = Base();
  doc["loss"] = json::parse(R"({"type": "mse", "from_logits": true})");  // MSE has no logits
  ExpectError(doc, "loss.from_logits", "unknown field");

  doc = Base();
  doc["data"]["train"]["num_exampels"] = 10;
  ExpectError(doc, "data.train.num_exampels", "unknown field");

  doc = Base();
  doc["data"]["train"]["images"] = "x.gz";  // an mnist field on a synthetic source
  ExpectError(doc, "data.train.images", "unknown field");

  doc = Base();
  doc["data"]["valid"] = doc["data"]["train"];
  ExpectError(doc, "data.valid", "unknown field");
}

TEST(JobConfigErrorTest, UnknownNames) {
  json doc = Base();
  doc["model"]["layers"][0]["type"] = "Conv3D";
  ExpectError(doc, "model.layers[0].type", "unknown layer type \"Conv3D\"");

  doc = Base();
  doc["optimizer"] = json::parse(R"({"type": "AdamW"})");
  ExpectError(doc, "optimizer.type", "unknown optimizer \"AdamW\"");
  doc["optimizer"] = "Nadam";
  ExpectError(doc, "optimizer", "unknown optimizer \"Nadam\"");

  doc = Base();
  doc["model"]["layers"][1]["activation"] = "celu";
  ExpectError(doc, "model.layers[1].activation", "unknown activation \"celu\"");
  doc = Base();
  doc["model"]["layers"][1] = json::parse(R"({"type": "Activation", "activation": "glu"})");
  ExpectError(doc, "model.layers[1].activation", "unknown activation \"glu\"");

  doc = Base();
  doc["loss"] = "hinge";
  ExpectError(doc, "loss", "unknown loss \"hinge\"");
  doc["loss"] = {{"type", "huber"}};
  ExpectError(doc, "loss.type", "unknown loss \"huber\"");

  doc = Base();
  doc["metrics"] = {"accuracy", "auc"};
  ExpectError(doc, "metrics[1]", "unknown metric \"auc\"");

  doc = Base();
  doc["model"]["input_dtype"] = "float64";
  ExpectError(doc, "model.input_dtype", "unknown dtype \"float64\"");

  doc = Base();
  doc["model"]["layers"][0] =
      json::parse(R"({"type": "Embedding", "input_dim": 5, "output_dim": 2, "combiner": "max"})");
  ExpectError(doc, "model.layers[0].combiner", "unknown combiner \"max\"");

  doc = Base();
  doc["data"]["train"]["source"] = "parquet";
  ExpectError(doc, "data.train.source", "unknown data source \"parquet\"");
}

TEST(JobConfigErrorTest, WrongTypes) {
  struct Case {
    std::string pointer;  // JSON pointer of the field to replace
    json value;
    std::string field, detail;
  };
  const std::vector<Case> cases = {
      {"/model/layers/0/units", "8", "model.layers[0].units", "expected an integer, got \"8\""},
      {"/model/layers/0/units", 8.5, "model.layers[0].units", "expected an integer, got 8.5"},
      {"/model/layers/0/use_bias", 1, "model.layers[0].use_bias", "expected a boolean, got 1"},
      {"/model/layers/0/activation", 3, "model.layers[0].activation", "expected a string, got 3"},
      {"/model/layers/0", "Dense", "model.layers[0]", "expected an object, got string"},
      {"/model/layers", json::object(), "model.layers", "expected a non-empty array"},
      {"/model/layers", json::array(), "model.layers", "expected a non-empty array"},
      {"/model/input_shape", "4", "model.input_shape", "expected an array of integers"},
      {"/model/input_shape", json::array({4, "x"}), "model.input_shape", "expected an array of integers"},
      {"/model", json::array(), "model", "expected an object, got array"},
      {"/optimizer/learning_rate", "fast", "optimizer.learning_rate", "expected a number, got \"fast\""},
      {"/optimizer/amsgrad", "yes", "optimizer.amsgrad", "expected a boolean"},
      {"/optimizer/type", 1, "optimizer.type", "expected a string, got 1"},
      {"/optimizer", 5, "optimizer", "expected an object, got number"},
      {"/loss", json::array({"mse"}), "loss", "expected an object, got array"},
      {"/metrics", "accuracy", "metrics", "expected an array of metric names"},
      {"/metrics", json::array({1}), "metrics[0]", "expected a metric name"},
      {"/name", 5, "name", "expected a string, got 5"},
      {"/seed", "1", "seed", "expected an integer"},
      {"/batch_size", 1.5, "batch_size", "expected an integer, got 1.5"},
      {"/epochs", true, "epochs", "expected an integer, got true"},
      {"/data/train/num_examples", "100", "data.train.num_examples", "expected an integer"},
      {"/data/train/noise", "high", "data.train.noise", "expected a number"},
      {"/data/shuffle", "no", "data.shuffle", "expected a boolean"},
      {"/data/train", 1, "data.train", "expected an object, got number"},
      {"/data", "mnist", "data", "expected an object, got string"},
  };
  for (const Case& c : cases) {
    json doc = Base();
    doc[json::json_pointer(c.pointer)] = c.value;
    SCOPED_TRACE(c.pointer);
    ExpectError(doc, c.field, c.detail);
  }
  // Whole-number floats are accepted where integers are expected.
  json doc = Base();
  doc["batch_size"] = 8.0;
  EXPECT_EQ(ParseOk(doc).batch_size, 8);
}

TEST(JobConfigErrorTest, MissingRequiredFields) {
  for (const char* k : {"model", "loss", "data"}) {
    json doc = Base();
    doc.erase(k);
    ExpectError(doc, k, "required field is missing");
  }
  json doc = Base();
  doc["model"].erase("input_shape");
  ExpectError(doc, "model.input_shape", "required field is missing");
  doc = Base();
  doc["model"].erase("layers");
  ExpectError(doc, "model.layers", "required field is missing");
  doc = Base();
  doc["model"]["layers"][1].erase("type");
  ExpectError(doc, "model.layers[1].type", "required field is missing");
  doc = Base();
  doc["model"]["layers"][1].erase("units");
  ExpectError(doc, "model.layers[1].units", "required field is missing");
  doc = Base();
  doc["model"]["layers"][1]["units"] = nullptr;
  ExpectError(doc, "model.layers[1].units", "required field is missing");
  doc = Base();
  doc["model"]["layers"][1] = {{"type", "Activation"}};
  ExpectError(doc, "model.layers[1].activation", "required field is missing");
  doc = Base();
  doc["model"]["layers"][0] = json::parse(R"({"type": "Embedding", "output_dim": 2})");
  ExpectError(doc, "model.layers[0].input_dim", "required field is missing");
  doc["model"]["layers"][0] = json::parse(R"({"type": "Embedding", "input_dim": 2})");
  ExpectError(doc, "model.layers[0].output_dim", "required field is missing");
  doc = Base();
  doc["loss"] = {{"from_logits", true}};
  ExpectError(doc, "loss.type", "required field is missing");
  doc = Base();
  doc["optimizer"] = {{"learning_rate", 0.1}};
  ExpectError(doc, "optimizer.type", "required field is missing");
  doc = Base();
  doc["data"] = {{"eval", Base()["data"]["train"]}};
  ExpectError(doc, "data.train", "required field is missing");
  doc = Base();
  doc["data"]["train"] = {{"num_examples", 10}};
  ExpectError(doc, "data.train.source", "required field is missing");
  doc["data"]["train"] = {{"source", "mnist"}, {"images", "a.gz"}};
  ExpectError(doc, "data.train.labels", "required field is missing");
  doc["data"]["train"] = {{"source", "csv"}};
  ExpectError(doc, "data.train.path", "required field is missing");
}

TEST(JobConfigErrorTest, OutOfRangeValues) {
  struct Case {
    std::string pointer;
    json value;
    std::string field, detail;
  };
  const std::vector<Case> cases = {
      {"/optimizer/learning_rate", 0, "optimizer.learning_rate", "must be > 0"},
      {"/optimizer/learning_rate", -0.1, "optimizer.learning_rate", "must be > 0"},
      {"/optimizer/beta_1", 1.0, "optimizer.beta_1", "must be in [0"},
      {"/optimizer/beta_1", -0.5, "optimizer.beta_1", "must be in [0"},
      {"/optimizer/beta_2", 1.5, "optimizer.beta_2", "must be in [0"},
      {"/optimizer/epsilon", -1e-7, "optimizer.epsilon", "must be in [0"},
      {"/model/layers/0/units", 0, "model.layers[0].units", "must be > 0, got 0"},
      {"/model/layers/1/units", -2, "model.layers[1].units", "must be > 0, got -2"},
      {"/model/input_shape", json::array({0}), "model.input_shape", "dimensions must be > 0"},
      {"/model/input_shape", json::array({4, -1}), "model.input_shape", "dimensions must be > 0"},
      {"/batch_size", 0, "batch_size", "must be > 0, got 0"},
      {"/epochs", -1, "epochs", "must be > 0, got -1"},
      {"/steps_per_epoch", 0, "steps_per_epoch", "must be > 0, or -1"},
      {"/steps_per_epoch", -2, "steps_per_epoch", "must be > 0, or -1"},
      {"/data/train/num_examples", 0, "data.train.num_examples", "must be > 0"},
      {"/data/train/num_classes", 1, "data.train.num_classes", "must be >= 2"},
      {"/data/train/begin", -1, "data.train.begin", "must be >= 0"},
      {"/data/train/end", 0, "data.train.end", "must be > begin, or -1"},
      {"/data/shuffle_buffer", -1, "data.shuffle_buffer", "must be >= 0"},
      {"/data/train/feature_shape", json::array(), "data.train.feature_shape", "must not be empty"},
      {"/data/train/feature_shape", json::array({2, 0}), "data.train.feature_shape", "dimensions must be > 0"},
      {"/data/train/feature_shape", json::array({-3}), "data.train.feature_shape", "dimensions must be > 0"},
      // 100 examples of 2^62 floats: the element count overflows int64.
      {"/data/train/feature_shape", json::array({int64_t{1} << 31, int64_t{1} << 31}), "data.train.num_examples",
       "100 examples of shape [2147483648, 2147483648] is too many values"},
  };
  for (const Case& c : cases) {
    json doc = Base();
    doc[json::json_pointer(c.pointer)] = c.value;
    SCOPED_TRACE(c.pointer);
    ExpectError(doc, c.field, c.detail);
  }
  // Per-optimizer ranges.
  const std::vector<std::tuple<const char*, const char*, double>> opt_cases = {
      {"SGD", "momentum", 1.0},      {"SGD", "momentum", -0.1},  {"RMSprop", "rho", 1.0},
      {"RMSprop", "momentum", 1.5},  {"RMSprop", "epsilon", -1}, {"Adagrad", "initial_accumulator_value", -0.1},
      {"Adagrad", "epsilon", -1e-3},
  };
  for (const auto& [type, key, value] : opt_cases) {
    json doc = Base();
    doc["optimizer"] = {{"type", type}, {key, value}};
    SCOPED_TRACE(std::string(type) + "." + key);
    ExpectError(doc, std::string("optimizer.") + key, "must be in [0");
  }
  json doc = Base();
  doc["model"]["layers"][0] = json::parse(R"({"type": "Embedding", "input_dim": 0, "output_dim": 2})");
  ExpectError(doc, "model.layers[0].input_dim", "must be > 0, got 0");
  doc["model"]["layers"][0] = json::parse(R"({"type": "Embedding", "input_dim": 3, "output_dim": -4})");
  ExpectError(doc, "model.layers[0].output_dim", "must be > 0, got -4");
  doc = Base();
  doc["data"]["train"] = json::parse(R"({"source": "csv", "path": "a.csv", "delimiter": ";;"})");
  ExpectError(doc, "data.train.delimiter", "must be one character");
  doc["data"]["train"] = json::parse(R"({"source": "mnist", "images": "a", "labels": "b", "begin": 5, "end": 5})");
  ExpectError(doc, "data.train.end", "must be > begin, or -1");
  // Boundaries that are allowed.
  doc = Base();
  doc["optimizer"] = json::parse(R"({"type": "SGD", "momentum": 0.0})");
  EXPECT_TRUE(ParseJobConfig(doc, "job.json").ok());
  doc["optimizer"] = json::parse(R"({"type": "Adagrad", "initial_accumulator_value": 0.0, "epsilon": 0.0})");
  EXPECT_TRUE(ParseJobConfig(doc, "job.json").ok());
}

TEST(JobConfigErrorTest, ErrorsNameTheSourceGiven) {
  json doc = Base();
  doc["optimizer"]["learning_rat"] = 0.1;
  auto c = ParseJobConfig(doc, "configs/mlp.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "configs/mlp.json: optimizer.learning_rat: unknown field");
}

// ------------------------------------------------------------ LoadJobConfig

std::string TempPath(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return ::testing::TempDir() + "tfjob_job_" + info->name() + "_" + name;
}

void WriteText(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
}

TEST(LoadJobConfigTest, MissingFileIsNotFoundNamingThePath) {
  const std::string path = TempPath("does_not_exist.json");
  std::remove(path.c_str());
  auto c = LoadJobConfig(path);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr(path));
}

TEST(LoadJobConfigTest, LoadsFileAndNamesItInErrors) {
  const std::string path = TempPath("job.json");
  WriteText(path, Base().dump(2));
  auto c = LoadJobConfig(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->source, path);
  EXPECT_EQ(c->model.layers.size(), 2u);

  json doc = Base();
  doc["optimizer"]["learning_rat"] = 0.1;
  WriteText(path, doc.dump());
  auto bad = LoadJobConfig(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), path + ": optimizer.learning_rat: unknown field");

  WriteText(path, "{\"name\": ");
  auto malformed = LoadJobConfig(path);
  ASSERT_FALSE(malformed.ok());
  EXPECT_EQ(malformed.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(malformed.status().message(), StartsWith(path + ": malformed JSON"));
  std::remove(path.c_str());
}

}  // namespace
}  // namespace tfjob::model

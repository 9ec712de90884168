// The job JSON of the new layers and sources, and Keras model JSON (both
// forms, every argument checked).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/json_reader.h"
#include "services/model/job_config.h"
#include "services/model/keras_model.h"
#include "services/model/model.h"
#include "tests/support/subprocess.h"

namespace tfjob::model {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

std::string SourceDir() {
  const char* d = std::getenv("TFJOB_SOURCE_DIR");
  return d ? d : ".";
}

json Job(json layers, json model_extra = json::object()) {
  json model = {{"input_shape", {28, 28}}, {"layers", std::move(layers)}};
  model.update(model_extra);
  return {
      {"model", model}, {"loss", "sparse_categorical_crossentropy"}, {"data", {{"train", {{"source", "synthetic"}}}}}};
}

Status ParseError(const json& doc) {
  auto c = ParseJobConfig(doc, "job.json");
  return c.ok() ? Status::Ok() : c.status();
}

TEST(LayerConfigTest, ParsesEveryNewLayer) {
  const json layers = json::parse(R"([
    {"type": "Reshape", "target_shape": [28, 28, 1]},
    {"type": "Conv2D", "filters": 8, "kernel_size": [3, 5], "strides": 2, "padding": "same", "activation": "relu",
     "use_bias": false},
    {"type": "BatchNormalization", "momentum": 0.9, "epsilon": 0.01, "center": false},
    {"type": "MaxPooling2D"},
    {"type": "AveragePooling2D", "pool_size": 3, "strides": [1, 2]},
    {"type": "Dropout", "rate": 0.5, "seed": 9},
    {"type": "GlobalAveragePooling2D", "keepdims": true},
    {"type": "Flatten"},
    {"type": "Normalization", "axis": null, "mean": 1.5, "variance": 4},
    {"type": "Dense", "units": 10}])");
  auto c = ParseJobConfig(Job(layers), "job.json").value();
  const auto& l = c.model.layers;
  ASSERT_EQ(l.size(), 10u);
  EXPECT_EQ(l[0].target_shape, Shape({28, 28, 1}));
  EXPECT_EQ(l[1].type, LayerType::kConv2D);
  EXPECT_EQ(l[1].name, "conv2d");
  EXPECT_EQ(l[1].kernel_size, (std::array<int64_t, 2>{3, 5}));
  EXPECT_EQ(l[1].strides, (std::array<int64_t, 2>{2, 2}));
  EXPECT_EQ(l[1].padding, Padding::kSame);
  EXPECT_EQ(l[1].activation, Activation::kRelu);
  EXPECT_FALSE(l[1].use_bias);
  EXPECT_EQ(l[2].momentum, 0.9);
  EXPECT_FALSE(l[2].center);
  EXPECT_TRUE(l[2].scale);
  // Pool strides default to the pool size, as in Keras.
  EXPECT_EQ(l[3].kernel_size, (std::array<int64_t, 2>{2, 2}));
  EXPECT_EQ(l[3].strides, (std::array<int64_t, 2>{2, 2}));
  EXPECT_EQ(l[4].strides, (std::array<int64_t, 2>{1, 2}));
  EXPECT_EQ(l[5].seed, 9);
  EXPECT_TRUE(l[6].keepdims);
  EXPECT_TRUE(l[8].axis_none);
  EXPECT_EQ(l[8].mean, std::vector<double>{1.5});
  // The whole model builds: 28x28x1 -> 14x12x8 -> ... -> 10.
  EXPECT_TRUE(Model::Create(c.model, c.loss).ok());
}

TEST(LayerConfigTest, LookupsWithVocabularyFilesBesideTheJob) {
  const std::filesystem::path dir = ::tfjob::testing::MakeTempDir("layer-config");
  std::ofstream(dir / "words.txt") << "avenger\nironman\n";
  json job = Job(json::parse(R"([{"type": "StringLookup", "vocabulary": "words.txt", "mask_token": ""},
                                 {"type": "Embedding", "input_dim": 4, "output_dim": 2}])"),
                 {{"input_shape", {3}}, {"input_dtype", "string"}});
  job["data"]["train"] = json::parse(R"({"source": "csv", "path": "x.csv", "feature_columns": ["a", 2],
      "label_column": "y", "label_lookup": {"type": "IntegerLookup", "vocabulary": [3, 7], "num_oov_indices": 0}})");
  auto c = ParseJobConfig(job, (dir / "job.json").string()).value();
  EXPECT_TRUE(c.model.string_input);
  EXPECT_EQ(c.model.layers[0].lookup.tokens, (std::vector<std::string>{"avenger", "ironman"}));
  EXPECT_TRUE(c.model.layers[0].lookup.has_mask);
  EXPECT_EQ(c.data.train.feature_columns, (std::vector<std::string>{"a", "2"}));
  EXPECT_EQ(c.data.train.label_name, "y");
  ASSERT_TRUE(c.data.train.label_lookup);
  EXPECT_EQ(c.data.train.label_lookup->lookup.int_tokens, (std::vector<int64_t>{3, 7}));
  auto m = Model::Create(c.model, c.loss).value();
  EXPECT_EQ(*m->LookupStrings({"ironman", "", "thor"}, {1, 3}).value().data<int64_t>(), 3);
  // A missing vocabulary file names the field and the file.
  job["model"]["layers"][0]["vocabulary"] = "gone.txt";
  Status s = ParseJobConfig(job, (dir / "job.json").string()).status();
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("model.layers[0].vocabulary: vocabulary file " + (dir / "gone.txt").string()));
  // A repeated term, where the job says it.
  job["model"]["layers"][0]["vocabulary"] = {"a", "b", "a"};
  EXPECT_THAT(ParseError(job).message(),
              HasSubstr("model.layers[0].vocabulary: the vocabulary repeats the term \"a\""));
}

TEST(LayerConfigTest, TfRecordSources) {
  json job = Job(json::parse(R"([{"type": "Flatten"}])"));
  job["data"]["train"] = json::parse(R"({"source": "tfrecord", "files": ["a.tfrecord", "b.tfrecord"],
      "compression": "GZIP", "auto_shard_policy": "FILE",
      "features": [{"name": "image", "dtype": "float32", "shape": [28, 28]},
                   {"name": "tags", "dtype": "string", "var_len": true, "max_length": 4, "default_value": "?"}],
      "label": {"name": "label", "dtype": "int64", "default_value": 0}})");
  auto c = ParseJobConfig(job, "job.json").value();
  const DataSourceSpec& s = c.data.train;
  EXPECT_EQ(s.kind, DataSourceKind::kTfRecord);
  EXPECT_EQ(s.files.size(), 2u);
  EXPECT_EQ(s.compression, "GZIP");
  EXPECT_EQ(s.auto_shard_policy, "FILE");
  ASSERT_EQ(s.features.size(), 2u);
  EXPECT_EQ(s.features[1].max_length, 4);
  EXPECT_EQ(s.features[1].default_string, "?");
  EXPECT_TRUE(s.label.has_default);
  auto bad = [&](const char* key, json value, const std::string& want) {
    json j = job;
    j["data"]["train"][key] = value;
    EXPECT_THAT(ParseError(j).message(), HasSubstr(want)) << key;
  };
  bad("compression", "LZ4", "data.train.compression: unknown compression \"LZ4\"");
  bad("auto_shard_policy", "HINT", "data.train.auto_shard_policy: unknown policy \"HINT\"");
  bad("features", json::array({{{"name", "x"}, {"dtype", "float64"}}}), "data.train.features[0].dtype: unknown dtype");
  bad("label", {{"name", "l"}, {"dtype", "int64"}, {"var_len", true}},
      "data.train.label: the label must have a fixed length");
  bad("features", json::array({{{"name", "x"}, {"dtype", "int64"}, {"default_value", "zero"}}}),
      "data.train.features[0].default_value: expected a int64 value");
}

TEST(LayerConfigTest, ErrorsNameTheField) {
  auto err = [](json layer) { return ParseError(Job(json::array({layer}))).message(); };
  EXPECT_THAT(err({{"type", "Conv2D"}, {"kernel_size", 3}}),
              HasSubstr("model.layers[0].filters: required field is missing"));
  EXPECT_THAT(err({{"type", "Conv2D"}, {"filters", 3}, {"kernel_size", {3, 0}}}),
              HasSubstr("model.layers[0].kernel_size: expected a positive integer or two of them"));
  EXPECT_THAT(err({{"type", "Conv2D"}, {"filters", 3}, {"kernel_size", 3}, {"padding", "causal"}}),
              HasSubstr("model.layers[0].padding: unknown padding \"causal\""));
  EXPECT_THAT(err({{"type", "Dropout"}, {"rate", 1.0}}), HasSubstr("model.layers[0].rate: must be in [0, 1)"));
  EXPECT_THAT(err({{"type", "Normalization"}, {"mean", {1, 2}}}),
              HasSubstr("mean and variance must be given together"));
  EXPECT_THAT(err({{"type", "StringLookup"}}), HasSubstr("model.layers[0].vocabulary: required field is missing"));
  EXPECT_THAT(err({{"type", "MaxPooling2D"}, {"dilation", 2}}), HasSubstr("model.layers[0].dilation: unknown field"));
}

// --------------------------------------------------------------- Keras

TEST(KerasModelTest, ParsesTheShippedExamples) {
  auto k3 = LoadKerasModel(SourceDir() + "/examples/keras/mnist_cnn.keras3.json");
  ASSERT_TRUE(k3.ok()) << k3.status();
  EXPECT_EQ(k3->input_shape, Shape({28, 28, 1}));
  ASSERT_EQ(k3->layers.size(), 5u);
  EXPECT_EQ(k3->layers[0].type, LayerType::kConv2D);
  EXPECT_EQ(k3->layers[0].filters, 32);
  EXPECT_EQ(k3->layers[1].type, LayerType::kMaxPooling2D);
  EXPECT_EQ(k3->layers[4].name, "dense_1");
  EXPECT_EQ(k3->layers[4].activation, Activation::kLinear);
  auto k2 = LoadKerasModel(SourceDir() + "/examples/keras/mnist_cnn.keras2.json");
  ASSERT_TRUE(k2.ok()) << k2.status();
  EXPECT_EQ(k2->input_shape, Shape({28, 28}));
  EXPECT_EQ(k2->layers[0].type, LayerType::kReshape);
  EXPECT_EQ(k2->layers[3].units, 128);
  for (const auto* m : {&*k3, &*k2}) {
    EXPECT_TRUE(Model::Create(*m, {LossType::kSparseCategoricalCrossentropy, true}).ok());
  }
}

TEST(KerasModelTest, OlderKeras2FormsAndLookups) {
  // Keras 2.2: config is the list of layers, the first one carries the input;
  // glorot_uniform written out as VarianceScaling.
  json doc = json::parse(R"({"class_name": "Sequential", "config": [
    {"class_name": "Embedding", "config": {"name": "embedding_1", "trainable": true, "batch_input_shape": [null, 4],
      "dtype": "float32", "input_dim": 10, "output_dim": 3,
      "embeddings_initializer": {"class_name": "RandomUniform", "config": {"minval": -0.05, "maxval": 0.05, "seed": null}},
      "embeddings_regularizer": null, "activity_regularizer": null, "embeddings_constraint": null, "mask_zero": false,
      "input_length": 4}},
    {"class_name": "Flatten", "config": {"name": "flatten_1", "trainable": true, "data_format": "channels_last"}},
    {"class_name": "Dense", "config": {"name": "dense_1", "trainable": true, "units": 1, "activation": "sigmoid",
      "use_bias": true, "kernel_initializer": {"class_name": "VarianceScaling",
      "config": {"scale": 1.0, "mode": "fan_avg", "distribution": "uniform", "seed": null}},
      "bias_initializer": {"class_name": "Zeros", "config": {}}, "kernel_regularizer": null, "bias_regularizer": null,
      "activity_regularizer": null, "kernel_constraint": null, "bias_constraint": null}}],
    "keras_version": "2.2.4", "backend": "tensorflow"})");
  auto m = ParseKerasModel(doc, "old.json");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->input_shape, Shape({4}));
  EXPECT_EQ(m->input_dtype, DType::kInt64);
  EXPECT_TRUE(Model::Create(*m, {LossType::kBinaryCrossentropy, false}).ok());

  // Keras 3 with strings: StringLookup first, its vocabulary in the config.
  json k3 = json::parse(R"({"module": "keras", "class_name": "Sequential", "config": {"name": "s", "layers": [
    {"module": "keras.layers", "class_name": "InputLayer", "config": {"batch_shape": [null, 3], "dtype": "string",
      "sparse": false, "ragged": false, "name": "words"}, "registered_name": null},
    {"module": "keras.layers", "class_name": "StringLookup", "config": {"name": "string_lookup", "trainable": true,
      "dtype": {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "int64"}, "registered_name": null},
      "invert": false, "max_tokens": null, "num_oov_indices": 1, "oov_token": "[UNK]", "mask_token": null,
      "output_mode": "int", "sparse": false, "pad_to_max_tokens": false, "vocabulary_dtype": "string",
      "idf_weights": null, "vocabulary": ["a", "b"], "vocabulary_size": 3, "encoding": "utf-8"},
      "registered_name": null}]}})");
  auto s = ParseKerasModel(k3, "strings.json");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->string_input);
  EXPECT_EQ(s->layers[0].lookup.tokens, (std::vector<std::string>{"a", "b"}));
}

TEST(KerasModelTest, UnsupportedLayersAndArgumentsAreNamed) {
  const json base = json::parse(std::ifstream(SourceDir() + "/examples/keras/mnist_cnn.keras3.json"));
  auto err = [&](const std::function<void(json&)>& edit) {
    json doc = base;
    edit(doc);
    auto m = ParseKerasModel(doc, "m.json");
    return m.ok() ? std::string("accepted") : m.status().message();
  };
  EXPECT_THAT(err([](json& d) { d["class_name"] = "Functional"; }),
              HasSubstr("m.json: config.input_layers is missing"));
  EXPECT_THAT(err([](json& d) { d["class_name"] = "Graph"; }),
              HasSubstr("m.json: class_name \"Graph\": not a Keras model (Sequential, Functional or Model)"));
  EXPECT_THAT(err([](json& d) { d["config"]["layers"][3]["class_name"] = "ConvLSTM2D"; }),
              HasSubstr("m.json: layers[3] (ConvLSTM2D \"flatten\"): unsupported layer ConvLSTM2D"));
  EXPECT_THAT(
      err([](json& d) { d["config"]["layers"][1]["config"]["kernel_regularizer"] = "l3"; }),
      HasSubstr(
          "layers[1] (Conv2D \"conv2d\"): argument kernel_regularizer=\"l3\": only L1, L2 and L1L2 are supported"));
  EXPECT_THAT(
      err([](json& d) { d["config"]["layers"][1]["config"]["kernel_initializer"]["class_name"] = "HeSideways"; }),
      HasSubstr("argument kernel_initializer: initializer"));
  EXPECT_THAT(
      err([](json& d) { d["config"]["layers"][4]["config"]["trainable"] = false; }),
      HasSubstr("layers[4] (Dense \"dense\"): argument trainable=false is not supported (layers cannot be frozen)"));
  // Mixed policies are read (mixed_precision_test.cc); variables in float16 are not.
  EXPECT_THAT(err([](json& d) { d["config"]["layers"][4]["config"]["dtype"]["config"]["name"] = "float16"; }),
              HasSubstr("argument dtype="));
  EXPECT_THAT(err([](json& d) { d["config"]["layers"][2]["config"]["data_format"] = "channels_first"; }),
              HasSubstr("argument data_format=\"channels_first\" is not supported (only channels_last (NHWC))"));
  EXPECT_THAT(err([](json& d) { d["config"]["layers"][4]["config"]["units_per_head"] = 3; }),
              HasSubstr("layers[4] (Dense \"dense\"): argument units_per_head is not supported"));
  EXPECT_THAT(err([](json& d) {
                d["config"]["layers"][0]["config"]["batch_shape"] = {nullptr, nullptr, 28, 1};
              }),
              HasSubstr("is not a known size"));
}

// A value of another kind where a string or number belongs is an error or
// ignored, never an exception out of the parser (the fuzzer found a layer
// whose "name" was null).
TEST(KerasModelTest, ValuesOfTheWrongKindAreErrorsNotExceptions) {
  const json base = json::parse(std::ifstream(SourceDir() + "/examples/keras/mnist_cnn.keras3.json"));
  auto parse = [&](const std::function<void(json&)>& edit) {
    json doc = base;
    edit(doc);
    return ParseKerasModel(doc, "m.json");
  };
  auto name_null = parse([](json& d) { d["config"]["layers"][1]["config"]["name"] = nullptr; });
  EXPECT_TRUE(name_null.ok() || name_null.status().code() == Code::kInvalidArgument) << name_null.status().ToString();
  auto name_number = parse([](json& d) { d["config"]["layers"][4]["config"]["name"] = 7; });
  EXPECT_TRUE(name_number.ok() || name_number.status().code() == Code::kInvalidArgument)
      << name_number.status().ToString();
  auto cls = parse([](json& d) { d["class_name"] = 5; });
  ASSERT_FALSE(cls.ok());
  EXPECT_THAT(cls.status().message(), HasSubstr("not a Keras model"));
  auto dtype = parse([](json& d) { d["config"]["layers"][0]["config"]["dtype"] = {{"config", {{"name", 3}}}}; });
  ASSERT_FALSE(dtype.ok());
  EXPECT_THAT(dtype.status().message(), HasSubstr("input dtype"));
}

TEST(KerasModelTest, SnakeCaseAsKeras) {
  EXPECT_EQ(KerasSnakeCase("Conv2D"), "conv2d");
  EXPECT_EQ(KerasSnakeCase("MaxPooling2D"), "max_pooling2d");
  EXPECT_EQ(KerasSnakeCase("GlobalAveragePooling2D"), "global_average_pooling2d");
  EXPECT_EQ(KerasSnakeCase("BatchNormalization"), "batch_normalization");
  EXPECT_EQ(KerasSnakeCase("StringLookup"), "string_lookup");
  EXPECT_EQ(KerasSnakeCase("Dense"), "dense");
}

}  // namespace
}  // namespace tfjob::model

// Trained models out to TensorFlow.js and back in, through the real binary
// and @tensorflow/tfjs 4.22 under node (tools/tfjs): models trained here and
// written with --export-tfjs load in tf.loadLayersModel
// (tools/tfjs/predict.js) and predict what the runtime predicts
// (--predict-out) to 1e-5 (an MLP from a job's own model, a Functional
// residual CNN with BatchNormalization given as TF.js' Keras 2 JSON, a
// Keras 3 CNN); a model trained in TF.js (tools/tfjs/train.js) continues
// training here from --initial-weights near where TF.js left it; an export
// read back with --initial-weights is the same model; and weights that do
// not fit, or a model TF.js cannot express, are one line and exit 2.
//
// The node tests are skipped, saying why, without node or
// tools/tfjs/node_modules (scripts/setup.sh installs both, as CI does).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/subprocess.h"
#include "services/runtime/tests/bad_input.h"

namespace tfjob {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using json = nlohmann::json;
namespace t = ::tfjob::testing;
using t::ReadText;

std::string Source(const std::string& rel) { return t::SourceDir() + "/" + rel; }

std::string WriteJson(const std::string& path, const json& j) {
  std::ofstream(path, std::ios::binary) << j.dump(1);
  return path;
}

t::RunResult Fit(const std::vector<std::string>& args) {
  std::vector<std::string> argv{t::RuntimeBinary(), "fit", "--data-dir", t::MnistDir()};
  argv.insert(argv.end(), args.begin(), args.end());
  return t::Run(argv);
}

// node, or "" with the reason in `why`.
std::string Node(std::string& why) {
  auto r = t::Run({"/bin/sh", "-c", "command -v node"});
  std::string node = r.out.substr(0, r.out.find('\n'));
  if (r.exit_code != 0 || node.empty()) {
    why = "node (Node.js) is not installed: run scripts/setup.sh";
    return "";
  }
  if (!std::filesystem::exists(Source("tools/tfjs/node_modules/@tensorflow/tfjs/package.json"))) {
    why = "tools/tfjs/node_modules has no @tensorflow/tfjs: run scripts/setup.sh (or: cd tools/tfjs && npm ci)";
    return "";
  }
  return node;
}

#define NODE_OR_SKIP(node)             \
  std::string why_;                    \
  const std::string node = Node(why_); \
  if (node.empty()) GTEST_SKIP() << "skipped: " << why_

// examples/mnist/mlp.json on fewer examples: `train` rows from the start,
// evaluated on 8000..8500.
json MlpJob(int64_t begin, int64_t end) {
  json job = t::ReadJsonFile(Source("examples/mnist/mlp.json"));
  job["data"]["train"]["begin"] = begin;
  job["data"]["train"]["end"] = end;
  job["data"]["eval"]["end"] = 8500;
  job["epochs"] = 1;
  return job;
}

// The rest of a job for a --keras-model of MNIST images with `loss`.
json KerasJob(const json& loss) {
  json job = MlpJob(0, 512);
  job.erase("model");
  job["loss"] = loss;
  return job;
}

// Trains `args`, exports to DIR/tfjs with the first 16 eval examples'
// predictions, has TF.js predict them from the export, and compares.
void ExpectTfjsPredictsTheSame(const std::string& node, const std::string& dir, std::vector<std::string> args) {
  args.insert(args.end(), {"--export-tfjs", dir + "/tfjs", "--predict-out", dir + "/runtime.json"});
  auto r = Fit(args);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("fit: wrote the TF.js model to " + dir + "/tfjs/model.json"));
  auto p = t::Run({node, Source("tools/tfjs/predict.js"), "--model", dir + "/tfjs", "--inputs", dir + "/runtime.json",
                   "--out", dir + "/tfjs.json"});
  ASSERT_EQ(p.exit_code, 0) << p.out << p.err;
  const json want = t::ReadJsonFile(dir + "/runtime.json")["predictions"];
  const json got = t::ReadJsonFile(dir + "/tfjs.json");
  ASSERT_EQ(got["shape"], want["shape"]);
  ASSERT_EQ(got["shape"][0], 16);
  const auto& a = got["values"];
  const auto& b = want["values"];
  ASSERT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a[i].get<double>(), y = b[i].get<double>();
    worst = std::max(worst, std::abs(x - y) / std::max(1.0, std::abs(y)));
  }
  EXPECT_LE(worst, 1e-5) << "largest difference between TF.js' and the runtime's predictions";
}

TEST(TfjsExportTest, MlpFromAJobsModelLoadsInTfjsAndPredictsTheSame) {
  NODE_OR_SKIP(node);
  const std::string dir = t::MakeTempDir("tfjs-mlp");
  ExpectTfjsPredictsTheSame(node, dir, {"--config", WriteJson(dir + "/job.json", MlpJob(0, 2000))});
  const json doc = t::ReadJsonFile(dir + "/tfjs/model.json");
  EXPECT_EQ(doc["format"], "layers-model");
  EXPECT_THAT(doc["generatedBy"].get<std::string>(), StartsWith("tfjob-runtime "));
  EXPECT_TRUE(doc["convertedBy"].is_null());
  EXPECT_EQ(doc["modelTopology"]["class_name"], "Sequential");
  const json& group = doc["weightsManifest"][0];
  EXPECT_EQ(group["paths"], json::array({"group1-shard1of1.bin"}));
  std::vector<std::string> names;
  for (const json& w : group["weights"]) names.push_back(w["name"]);
  EXPECT_THAT(names, ::testing::ElementsAre("dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"));
  EXPECT_EQ(std::filesystem::file_size(dir + "/tfjs/group1-shard1of1.bin"), 4u * (784 * 128 + 128 + 128 * 10 + 10));
}

// A Functional model as TF.js writes it (Keras 2 form, written as given),
// with BatchNormalization's moving statistics among the weights (momentum
// 0.5, so that a few steps move them and the predictions depend on them).
TEST(TfjsExportTest, FunctionalResidualCnnWithBatchNormalization) {
  NODE_OR_SKIP(node);
  const std::string dir = t::MakeTempDir("tfjs-residual");
  json model = t::ReadJsonFile(Source("services/model/tests/data/tfjs/models/residual_cnn.json"));
  for (json& l : model["config"]["layers"]) {
    if (l["class_name"] == "BatchNormalization") l["config"]["momentum"] = 0.5;
  }
  ExpectTfjsPredictsTheSame(node, dir,
                            {"--config", WriteJson(dir + "/job.json", KerasJob("sparse_categorical_crossentropy")),
                             "--keras-model", WriteJson(dir + "/residual_cnn.json", model)});
  const json doc = t::ReadJsonFile(dir + "/tfjs/model.json");
  EXPECT_EQ(doc["modelTopology"], model);
  EXPECT_THAT(doc.dump(), HasSubstr("\"stem_bn/moving_variance\""));
}

// Keras 3 JSON: the topology is generated from the model (Sequential).
TEST(TfjsExportTest, Keras3CnnGetsAKeras2Topology) {
  NODE_OR_SKIP(node);
  const std::string dir = t::MakeTempDir("tfjs-keras3");
  const json loss = {{"type", "SparseCategoricalCrossentropy"}, {"from_logits", true}};
  ExpectTfjsPredictsTheSame(node, dir,
                            {"--config", WriteJson(dir + "/job.json", KerasJob(loss)), "--keras-model",
                             Source("examples/keras/mnist_cnn.keras3.json")});
  const json topology = t::ReadJsonFile(dir + "/tfjs/model.json")["modelTopology"];
  EXPECT_EQ(topology["class_name"], "Sequential");
  EXPECT_EQ(topology.dump().find("\"module\""), std::string::npos) << topology.dump();
}

// A Keras 3 Functional model with a layer called twice: the generated
// topology calls it twice too (node indices 0 and 1), sharing its weights.
TEST(TfjsExportTest, Keras3FunctionalWithASharedLayerGetsAKeras2Topology) {
  NODE_OR_SKIP(node);
  const std::string dir = t::MakeTempDir("tfjs-shared");
  auto tensor = [](const char* layer, int node) {
    return json{{"class_name", "__keras_tensor__"},
                {"config", {{"shape", nullptr}, {"dtype", "float32"}, {"keras_history", {layer, node, 0}}}}};
  };
  auto layer = [](const char* cls, const char* name, json config, const std::vector<json>& calls) {
    config["name"] = name;
    json inbound = json::array();
    for (const json& a : calls) inbound.push_back({{"args", json::array({a})}, {"kwargs", json::object()}});
    return json{{"module", "keras.layers"},   {"class_name", cls}, {"config", config},
                {"registered_name", nullptr}, {"name", name},      {"inbound_nodes", inbound}};
  };
  const json input = {{"module", "keras.layers"},
                      {"class_name", "InputLayer"},
                      {"config", {{"batch_shape", {nullptr, 28, 28}}, {"dtype", "float32"}, {"name", "pixels"}}},
                      {"registered_name", nullptr},
                      {"name", "pixels"},
                      {"inbound_nodes", json::array()}};
  const json layers = {
      input,
      layer("Flatten", "flat", json::object(), {tensor("pixels", 0)}),
      layer("Dense", "hidden", {{"units", 64}, {"activation", "relu"}}, {tensor("flat", 0)}),
      layer("Dense", "shared", {{"units", 64}, {"activation", "tanh"}}, {tensor("hidden", 0), tensor("shared", 0)}),
      layer("Add", "skip", json::object(), {json::array({tensor("hidden", 0), tensor("shared", 1)})}),
      layer("Dense", "logits", {{"units", 10}}, {tensor("skip", 0)})};
  const json model = {{"module", "keras.src.models.functional"},
                      {"class_name", "Functional"},
                      {"config",
                       {{"name", "shared_mlp"},
                        {"layers", layers},
                        {"input_layers", {{"pixels", 0, 0}}},
                        {"output_layers", {{"logits", 0, 0}}}}},
                      {"registered_name", "Functional"}};
  const json loss = {{"type", "SparseCategoricalCrossentropy"}, {"from_logits", true}};
  ExpectTfjsPredictsTheSame(node, dir,
                            {"--config", WriteJson(dir + "/job.json", KerasJob(loss)), "--keras-model",
                             WriteJson(dir + "/shared.json", model)});
  const json topology = t::ReadJsonFile(dir + "/tfjs/model.json")["modelTopology"];
  EXPECT_EQ(topology["class_name"], "Model");
  EXPECT_EQ(topology["config"]["layers"][3]["inbound_nodes"],
            json::parse(R"([[["hidden", 0, 0, {}]], [["shared", 0, 0, {}]]])"));
  EXPECT_EQ(topology["config"]["layers"][4]["inbound_nodes"],
            json::parse(R"([[["hidden", 0, 0, {}], ["shared", 1, 0, {}]]])"));
}

// A model trained in TF.js continues here: its first epoch's loss is near
// TF.js' last (a model from the job's seed starts near chance, ln 10).
TEST(TfjsImportTest, ModelTrainedInTfjsContinuesTraining) {
  NODE_OR_SKIP(node);
  const std::string dir = t::MakeTempDir("tfjs-warm");
  auto js = t::Run({node, Source("tools/tfjs/train.js"), "--data", t::MnistDir(), "--out", dir + "/js", "--begin", "0",
                    "--end", "2000", "--epochs", "3", "--summary", dir + "/js.json"});
  ASSERT_EQ(js.exit_code, 0) << js.out << js.err;
  const double tfjs_loss = t::ReadJsonFile(dir + "/js.json")["loss"].get<double>();
  // New examples, 10 steps: too few to get far from where training starts.
  const std::string job = WriteJson(dir + "/job.json", MlpJob(2000, 2640));
  auto warm = Fit({"--config", job, "--initial-weights", dir + "/js", "--summary-json", dir + "/warm.json"});
  ASSERT_EQ(warm.exit_code, 0) << warm.out << warm.err;
  auto cold = Fit({"--config", job, "--summary-json", dir + "/cold.json"});
  ASSERT_EQ(cold.exit_code, 0) << cold.out << cold.err;
  const double warm_loss = t::ReadJsonFile(dir + "/warm.json")["history"][0]["loss"].get<double>();
  const double cold_loss = t::ReadJsonFile(dir + "/cold.json")["history"][0]["loss"].get<double>();
  std::cout << "first-epoch loss: TF.js ended at " << tfjs_loss << ", from it " << warm_loss << ", from the seed "
            << cold_loss << std::endl;
  EXPECT_LT(tfjs_loss, 0.6);
  EXPECT_NEAR(warm_loss, tfjs_loss, 0.25) << "TF.js ended at " << tfjs_loss;
  EXPECT_GT(cold_loss, 1.2) << "from the seed";
  EXPECT_GT(t::ReadJsonFile(dir + "/warm.json")["eval_accuracy"].get<double>(), 0.85);
}

// ---------------------------------------------------------------- no node

// An export read back is the same model: with a step too small to move
// any weight, the second run writes the first's weights byte for byte.
TEST(TfjsImportTest, ExportReadBackIsTheSameModel) {
  const std::string dir = t::MakeTempDir("tfjs-same");
  json job = MlpJob(0, 640);
  auto first = Fit({"--config", WriteJson(dir + "/job.json", job), "--export-tfjs", dir + "/a"});
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  job["optimizer"] = {{"type", "SGD"}, {"learning_rate", 1e-30}};
  auto second = Fit(
      {"--config", WriteJson(dir + "/still.json", job), "--initial-weights", dir + "/a", "--export-tfjs", dir + "/b"});
  ASSERT_EQ(second.exit_code, 0) << second.out << second.err;
  EXPECT_EQ(ReadText(dir + "/b/group1-shard1of1.bin"), ReadText(dir + "/a/group1-shard1of1.bin"));
  EXPECT_EQ(t::ReadJsonFile(dir + "/b/model.json"), t::ReadJsonFile(dir + "/a/model.json"));
}

TEST(TfjsImportTest, WeightsThatDoNotFitAreOneLineAndExit2) {
  const std::string dir = t::MakeTempDir("tfjs-bad");
  const json job = MlpJob(0, 640);
  const std::string config = WriteJson(dir + "/job.json", job);
  ASSERT_EQ(Fit({"--config", config, "--export-tfjs", dir + "/good"}).exit_code, 0);
  const json good = t::ReadJsonFile(dir + "/good/model.json");
  const std::string shard = dir + "/good/group1-shard1of1.bin";
  // A variant of the good export: its manifest edited by `edit`.
  auto variant = [&](const std::string& name, auto edit) {
    const std::string d = dir + "/" + name;
    std::filesystem::create_directories(d);
    std::filesystem::copy_file(shard, d + "/group1-shard1of1.bin");
    json doc = good;
    edit(doc["weightsManifest"][0]["weights"]);
    WriteJson(d + "/model.json", doc);
    return d;
  };
  const std::string missing = variant("missing", [](json& w) { w[1]["name"] = "dense/offset"; });
  ExpectBadInput(Fit({"--config", config, "--initial-weights", missing}),
                 "flag --initial-weights: " + missing +
                     "/model.json: weight \"dense/bias\" (float32[128]) of the "
                     "model is missing");
  // Another model: 64 hidden units where the file has 128.
  json narrow = job;
  narrow["model"]["layers"][1]["units"] = 64;
  ExpectBadInput(Fit({"--config", WriteJson(dir + "/narrow.json", narrow), "--initial-weights", dir + "/good"}),
                 "weight \"dense/kernel\" is float32[784, 128], the model's is float32[784, 64]");
  // One weight more than the model has (the shard one value longer).
  const std::string extra = variant("extra", [](json& w) {
    w.push_back({{"name", "dense_2/bias"}, {"shape", {1}}, {"dtype", "float32"}});
  });
  std::ofstream(extra + "/group1-shard1of1.bin", std::ios::app | std::ios::binary) << std::string(4, '\0');
  ExpectBadInput(Fit({"--config", config, "--initial-weights", extra}),
                 "weight \"dense_2/bias\" is not a variable of the model");
  // A shard shorter than its manifest says.
  const std::string shorter = variant("short", [](json& w) { w[3]["shape"] = {11}; });
  ExpectBadInput(Fit({"--config", config, "--initial-weights", shorter}), "the shards hold 407080 bytes");
  ExpectBadInput(Fit({"--config", config, "--initial-weights", dir + "/none"}), dir + "/none/model.json");
}

TEST(TfjsExportTest, ModelTfjsCannotExpressIsOneLineAndExit2) {
  const std::string dir = t::MakeTempDir("tfjs-inexpressible");
  json job = MlpJob(0, 640);
  job["model"]["layers"].insert(job["model"]["layers"].begin() + 1, json::object({{"type", "Normalization"}}));
  auto r = Fit({"--config", WriteJson(dir + "/job.json", job), "--export-tfjs", dir + "/out"});
  ExpectBadInput(r, "--export-tfjs: layer \"normalization\" (Normalization): TF.js 4.22 has no such layer");
  EXPECT_FALSE(std::filesystem::exists(dir + "/out"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("Epoch 1/1"))) << "refused before training";
}

}  // namespace
}  // namespace tfjob

// The 35 Keras models TensorFlow.js' toJSON() wrote
// (services/model/tests/data/tfjs/models, tools/tfjs/gen_goldens.js) load
// and train one epoch in every strategy through the real binary: one
// device, mirrored (2 replicas), multi-worker mirrored (2 workers) and
// parameter servers (1 PS, 2 workers). Issue 43's first acceptance point;
// ctest label tfjs_models.
//
// Each model gets a small deterministic TFRecord data set written here: its
// features are named after the model's inputs and shaped as they are (read
// from the JSON: input_layers, each InputLayer's batch_input_shape and
// dtype, or a Sequential model's first layer); float32 inputs take values in
// [-1, 1] ([0, 1] for images), integer inputs ids below what the layers that
// take them accept (Embedding input_dim, CategoryEncoding num_tokens). The
// labels follow kModels below, one row per file, read off each model's
// output layer by hand (the shapes are models_goldens.json's outputs);
// AllModelsOfTheFolderAreInTheTable keeps a new model from being skipped.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "services/data/example.h"
#include "services/data/tfrecord.h"
#include "tests/support/fit_output.h"
#include "tests/support/subprocess.h"

namespace tfjob {
namespace {

using json = nlohmann::json;
namespace t = ::tfjob::testing;

const char kModelsDir[] = "services/model/tests/data/tfjs/models";

std::string Source(const std::string& rel) { return t::SourceDir() + "/" + rel; }
json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}
std::string WriteJson(const std::string& path, const json& j) {
  std::ofstream(path) << j.dump(1);
  return path;
}

// What a model's output asks of its labels.
enum class Label {
  kClassId,  // softmax over `classes` units: int64 ids, sparse_categorical_crossentropy
  kBinary,   // sigmoid on one unit: float32 0 / 1, binary_crossentropy
  kReal,     // anything else: float32 in [0, 1] of `shape`, mean_squared_error
};

struct ModelCase {
  const char* name;  // <name>.json in kModelsDir
  Label label;
  int64_t classes;  // kClassId
  Shape shape;      // kReal: the output's shape without the batch
};

// Each model's output layer, by hand: the activation of the layer that
// output_layers (a Sequential model: its last layer) names, and its shape.
const ModelCase kModels[] = {
    {"attention_pooling", Label::kReal, 0, {3}},        // Dense(3, linear)
    {"bidi_merges_dropout", Label::kClassId, 2, {}},    // Dense(2, softmax)
    {"bidi_split", Label::kClassId, 3, {}},             // Dense(3, softmax)
    {"category_features", Label::kReal, 0, {1}},        // Dense(1, linear)
    {"conv1d_timeseries", Label::kReal, 0, {1}},        // Dense(1, linear) forecast
    {"dense_autoencoder", Label::kReal, 0, {4, 6}},     // Reshape([4, 6])
    {"embedding_bag", Label::kClassId, 4, {}},          // Dense(4, softmax)
    {"gated_merge", Label::kReal, 0, {2}},              // Dense(2, linear)
    {"image_tabular", Label::kClassId, 3, {}},          // Dense(3, softmax)
    {"lstm_states", Label::kClassId, 2, {}},            // Dense(2, softmax)
    {"mlp_batchnorm_dropout", Label::kClassId, 4, {}},  // Dense(4, softmax)
    {"masked_text_lstm", Label::kBinary, 0, {}},        // Dense(1, sigmoid)
    {"mnist_cnn", Label::kClassId, 10, {}},             // Dense(10, softmax)
    {"mnist_lstm", Label::kClassId, 10, {}},            // Dense(10, softmax)
    {"mnist_mlp", Label::kClassId, 10, {}},             // Dense(10, softmax)
    {"mobilenet_block", Label::kClassId, 5, {}},        // Dense(5, softmax)
    {"noisy_activations", Label::kReal, 0, {3}},        // Dense(3, linear)
    {"padded_sessions", Label::kClassId, 2, {}},        // Dense(2, softmax)
    {"rescaling_mlp", Label::kClassId, 3, {}},          // Dense(3, softmax)
    {"residual_cnn", Label::kClassId, 10, {}},          // Dense(10, softmax)
    {"separable_upsampling", Label::kReal, 0, {162}},   // Conv2D(2, softplus) 9x9 -> Flatten
    {"sequence_tagger", Label::kReal, 0, {10, 2}},      // TimeDistributed(Dense(2, sigmoid))
    {"sequential_input_layer", Label::kReal, 0, {3}},   // Dense(3, hard_sigmoid)
    {"shared_text_encoder", Label::kBinary, 0, {}},     // Dot -> Activation(sigmoid), 1 unit
    {"shared_tower", Label::kReal, 0, {2}},             // Dense(2, linear)
    {"siamese_conv", Label::kBinary, 0, {}},            // Dense(1, sigmoid)
    {"siamese_dot", Label::kBinary, 0, {}},             // Dense(1, sigmoid)
    {"stacked_forecast", Label::kReal, 0, {1}},         // Dense(1, linear)
    {"state_encoders", Label::kReal, 0, {1}},           // Dense(1, linear) forecast
    {"text_bigru", Label::kBinary, 0, {}},              // Dense(1, sigmoid)
    {"text_conv1d", Label::kBinary, 0, {}},             // Dense(1, sigmoid)
    {"transformer_ffn", Label::kClassId, 2, {}},        // Dense(2, softmax)
    {"unet_like", Label::kReal, 0, {16, 16, 1}},        // Conv2D(1, sigmoid) mask, image-shaped
    {"vgg_small", Label::kClassId, 4, {}},              // Dense(4, softmax)
    {"wide_deep", Label::kBinary, 0, {}},               // Add -> Activation(sigmoid), 1 unit
};

// Models the runtime refuses yet, for a Keras feature it does not have: the
// run must still end in exit 2 and one line holding `refusal` (then the
// instance is skipped, saying why); a model on this list that trains fails
// the test until its row is removed. Nothing else may be listed here: a
// model that fails for any other reason is a failure.
struct NotYetSupported {
  const char* refusal;  // part of the runtime's one-line error
  const char* reason;
};
const std::map<std::string, NotYetSupported> kNotYetSupported = {
    // {"model", {"part of the one-line error", "what Keras feature is missing"}},
};

struct Strategy {
  const char* name;
  std::vector<std::string> prefix, suffix;
};
const Strategy kStrategies[] = {
    {"one_device", {"fit"}, {}},
    {"mirrored", {"fit"}, {"--strategy", "mirrored", "--replicas", "2"}},
    {"multi_worker_mirrored", {"local", "--workers", "2", "--", "fit"}, {}},
    {"parameter_server", {"local", "--ps", "1", "--workers", "2", "--", "fit"}, {}},
};

constexpr int64_t kTrainExamples = 64, kEvalExamples = 32, kBatchSize = 16;
constexpr int64_t kStepsPerEpoch = kTrainExamples / kBatchSize;  // one pass on one device

// One input of a model, as its JSON declares it.
struct Input {
  std::string name;
  bool is_int = false;
  Shape shape;        // without the batch
  int64_t limit = 0;  // integer inputs: ids in [0, limit)
};

const json& LayerConfig(const json& layer) { return layer.at("config"); }
std::string LayerName(const json& layer) {
  return layer.contains("name") ? layer["name"].get<std::string>() : LayerConfig(layer).at("name").get<std::string>();
}

Shape BatchInputShape(const json& config) {
  const json& s = config.contains("batch_input_shape") ? config["batch_input_shape"] : config.at("batch_shape");
  Shape out;
  for (size_t i = 1; i < s.size(); ++i) out.push_back(s[i].get<int64_t>());
  return out;
}

bool IsIntDtype(const json& config) {
  if (!config.contains("dtype") || !config["dtype"].is_string()) return false;
  const std::string d = config["dtype"].get<std::string>();
  return d.rfind("int", 0) == 0;
}

// The largest id a layer taking integer input accepts, plus one; 0 for
// layers without such a bound.
int64_t IdLimit(const json& layer) {
  const std::string cls = layer.at("class_name").get<std::string>();
  const json& c = LayerConfig(layer);
  if (cls == "Embedding") return c.at("input_dim").get<int64_t>();
  if (cls == "CategoryEncoding") return c.at("num_tokens").get<int64_t>();
  return 0;
}

std::vector<Input> ModelInputs(const json& model) {
  const json& config = model.at("config");
  const json& layers = config.is_array() ? config : config.at("layers");
  const std::string cls = model.at("class_name").get<std::string>();
  std::vector<Input> inputs;
  // The tightest bound of the layers taking an integer input; 10 when none
  // has one.
  auto tighten = [](Input& in, const json& consumer) {
    const int64_t limit = IdLimit(consumer);
    if (limit > 0) in.limit = in.limit == 0 ? limit : std::min(in.limit, limit);
  };
  auto finish = [](Input& in) {
    if (in.is_int && in.limit == 0) in.limit = 10;
  };
  if (cls == "Sequential") {
    const json& first = layers.at(0);
    Input in;
    in.name = first.at("class_name") == "InputLayer" ? LayerName(first) : "x";  // one input: any name
    in.shape = BatchInputShape(LayerConfig(first));
    in.is_int = IsIntDtype(LayerConfig(first));
    if (in.is_int) tighten(in, first.at("class_name") == "InputLayer" ? layers.at(1) : first);
    finish(in);
    inputs.push_back(in);
    return inputs;
  }
  for (const json& ref : config.at("input_layers")) {
    const std::string name = ref.at(0).get<std::string>();
    auto it = std::find_if(layers.begin(), layers.end(), [&](const json& l) { return LayerName(l) == name; });
    EXPECT_NE(it, layers.end()) << "input layer " << name;
    if (it == layers.end()) continue;
    Input in;
    in.name = name;
    in.shape = BatchInputShape(LayerConfig(*it));
    in.is_int = IsIntDtype(LayerConfig(*it));
    if (in.is_int) {
      // Every call whose arguments include this input (Keras 2's nested
      // inbound_nodes, as TF.js writes them).
      for (const json& l : layers) {
        if (!l.contains("inbound_nodes")) continue;
        for (const json& node : l["inbound_nodes"]) {
          for (const json& arg : node) {
            if (arg.is_array() && !arg.empty() && arg[0].is_string() && arg[0].get<std::string>() == name) {
              tighten(in, l);
            }
          }
        }
      }
    }
    finish(in);
    inputs.push_back(in);
  }
  return inputs;
}

int64_t Elements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// A 32-bit LCG: the same data on every machine.
class Rng {
 public:
  explicit Rng(const std::string& seed) {
    for (char c : seed) s_ = (s_ ^ static_cast<uint8_t>(c)) * 16777619u;  // FNV-1a
  }
  uint32_t Next() {
    s_ = s_ * 1664525u + 1013904223u;
    return s_ >> 8;
  }
  float Uniform(float lo, float hi) { return lo + (hi - lo) * static_cast<float>(Next()) / 16777216.0f; }
  int64_t Below(int64_t n) { return static_cast<int64_t>(Next() % static_cast<uint32_t>(n)); }

 private:
  uint32_t s_ = 2166136261u;
};

// Writes `rows` tf.Examples for the model's inputs and labels to `path`.
void WriteData(const std::string& path, const std::vector<Input>& inputs, const ModelCase& m, int64_t rows, Rng& rng) {
  std::vector<std::string> records;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<std::pair<std::string, data::Column>> features;
    for (const Input& in : inputs) {
      data::Column c;
      const int64_t n = Elements(in.shape);
      if (in.is_int) {
        c.type = data::FeatureType::kInt64;
        for (int64_t i = 0; i < n; ++i) c.ints.push_back(rng.Below(in.limit));
      } else {
        c.type = data::FeatureType::kFloat32;
        const float lo = in.shape.size() == 3 ? 0.0f : -1.0f;  // images in [0, 1]
        for (int64_t i = 0; i < n; ++i) c.floats.push_back(rng.Uniform(lo, 1.0f));
      }
      features.emplace_back(in.name, std::move(c));
    }
    data::Column label;
    switch (m.label) {
      case Label::kClassId:
        label.type = data::FeatureType::kInt64;
        label.ints = {rng.Below(m.classes)};
        break;
      case Label::kBinary:
        label.type = data::FeatureType::kFloat32;
        label.floats = {static_cast<float>(rng.Below(2))};
        break;
      case Label::kReal:
        label.type = data::FeatureType::kFloat32;
        for (int64_t i = 0; i < Elements(m.shape); ++i) label.floats.push_back(rng.Uniform(0.0f, 1.0f));
        break;
    }
    features.emplace_back("label", std::move(label));
    records.push_back(data::EncodeExample(features));
  }
  const Status s = data::WriteTfRecords(path, records);
  ASSERT_TRUE(s.ok()) << s;
}

json TfRecordSource(const std::string& file, const std::vector<Input>& inputs, const ModelCase& m) {
  json features = json::array();
  for (const Input& in : inputs) {
    features.push_back({{"name", in.name}, {"dtype", in.is_int ? "int64" : "float32"}, {"shape", in.shape}});
  }
  json label = {{"name", "label"}, {"dtype", m.label == Label::kClassId ? "int64" : "float32"}};
  if (m.label == Label::kReal) label["shape"] = m.shape;
  return {{"source", "tfrecord"}, {"files", {file}}, {"features", features}, {"label", label}};
}

json Job(const std::vector<Input>& inputs, const ModelCase& m) {
  json job = {
      {"name", std::string("tfjs-") + m.name},
      {"seed", 1},
      {"optimizer", {{"type", "Adam"}, {"learning_rate", 0.001}}},
      {"data",
       {{"train", TfRecordSource("train.tfrecord", inputs, m)}, {"eval", TfRecordSource("eval.tfrecord", inputs, m)}}},
      {"batch_size", kBatchSize},
      {"epochs", 1},
      {"steps_per_epoch", kStepsPerEpoch}};
  switch (m.label) {
    case Label::kClassId:
      job["loss"] = "sparse_categorical_crossentropy";
      job["metrics"] = {"accuracy"};
      break;
    case Label::kBinary:
      job["loss"] = "binary_crossentropy";
      job["metrics"] = {"accuracy"};
      break;
    case Label::kReal: job["loss"] = "mean_squared_error"; break;
  }
  return job;
}

// The evaluation loss the (chief's) output reports; NaN when there is none.
double EvalLoss(const std::string& out) {
  const t::Evaluation e = t::ParseEvaluation(out);
  return e.loss < 0 ? std::nan("") : e.loss;
}

// Names instead of bytes in gtest's messages.
void PrintTo(const ModelCase& m, std::ostream* os) { *os << m.name; }
void PrintTo(const Strategy& s, std::ostream* os) { *os << s.name; }

using Param = std::tuple<ModelCase, Strategy>;

class TfjsModelFitTest : public ::testing::TestWithParam<Param> {};

TEST_P(TfjsModelFitTest, TrainsOneEpoch) {
  const ModelCase& m = std::get<0>(GetParam());
  const Strategy& s = std::get<1>(GetParam());
  const std::string model_path = Source(std::string(kModelsDir) + "/" + m.name + ".json");
  const json model = ReadJson(model_path);
  const std::vector<Input> inputs = ModelInputs(model);
  ASSERT_FALSE(inputs.empty());

  const std::string dir = t::MakeTempDir(std::string("tfjs-") + m.name);
  Rng rng(m.name);
  ASSERT_NO_FATAL_FAILURE(WriteData(dir + "/train.tfrecord", inputs, m, kTrainExamples, rng));
  ASSERT_NO_FATAL_FAILURE(WriteData(dir + "/eval.tfrecord", inputs, m, kEvalExamples, rng));
  const std::string job = WriteJson(dir + "/job.json", Job(inputs, m));

  std::vector<std::string> args{t::RuntimeBinary()};
  args.insert(args.end(), s.prefix.begin(), s.prefix.end());
  for (const std::string& a :
       {std::string("--config"), job, std::string("--keras-model"), model_path, std::string("--data-dir"), dir}) {
    args.push_back(a);
  }
  args.insert(args.end(), s.suffix.begin(), s.suffix.end());
  std::string command;
  for (const std::string& a : args) command += (command.empty() ? "" : " ") + a;

  const auto start = std::chrono::steady_clock::now();
  const t::RunResult r = t::Run(args);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RecordProperty("wall_s", std::to_string(wall));
  std::cout << m.name << " / " << s.name << ": exit " << r.exit_code << " in " << wall << " s\n";

  if (auto it = kNotYetSupported.find(m.name); it != kNotYetSupported.end()) {
    ASSERT_NE(r.exit_code, 0) << m.name << " trains now: remove it from kNotYetSupported\n" << command;
    ASSERT_EQ(r.exit_code, 2) << command << "\n" << r.out << r.err;
    ASSERT_THAT(r.err, ::testing::HasSubstr(it->second.refusal)) << command;
    ASSERT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << command << "\n" << r.err;
    GTEST_SKIP() << it->second.reason << ": " << r.err;
  }
  ASSERT_EQ(r.exit_code, 0) << command << "\n" << r.out << r.err;
  const double loss = EvalLoss(r.out);
  EXPECT_TRUE(std::isfinite(loss)) << "no finite evaluation loss\n" << command << "\n" << r.out << r.err;
}

std::string CaseName(const ::testing::TestParamInfo<Param>& info) {
  return std::string(std::get<0>(info.param).name) + "_" + std::get<1>(info.param).name;
}

INSTANTIATE_TEST_SUITE_P(AllModels, TfjsModelFitTest,
                         ::testing::Combine(::testing::ValuesIn(kModels), ::testing::ValuesIn(kStrategies)), CaseName);

// Every model of the folder has its row, and every row its model: a model
// added to the generator is trained here, or this fails.
TEST(TfjsModelsTest, AllModelsOfTheFolderAreInTheTable) {
  std::set<std::string> files, rows;
  for (const auto& e : std::filesystem::directory_iterator(Source(kModelsDir))) {
    if (e.path().extension() == ".json") files.insert(e.path().stem().string());
  }
  for (const ModelCase& m : kModels) EXPECT_TRUE(rows.insert(m.name).second) << "two rows for " << m.name;
  EXPECT_EQ(files, rows);
}

// What the acceptance point asks of the set: at least 20 models, Sequential
// and Functional, several with shared layers and two inputs, and every layer
// class that the per-layer goldens (layers.json) exercise used by a model.
TEST(TfjsModelsTest, TheSetCoversEveryLayerBothKindsSharedLayersAndTwoInputs) {
  std::set<std::string> used;
  int sequential = 0, functional = 0, shared_two_inputs = 0;
  for (const ModelCase& m : kModels) {
    const json model = ReadJson(Source(std::string(kModelsDir) + "/" + m.name + ".json"));
    const json& config = model.at("config");
    const json& layers = config.is_array() ? config : config.at("layers");
    bool shared = false;
    for (const json& l : layers) {
      used.insert(l.at("class_name").get<std::string>());
      if (l.contains("inbound_nodes") && l["inbound_nodes"].size() > 1) shared = true;
    }
    if (model.at("class_name") == "Sequential") {
      ++sequential;
    } else {
      ++functional;
      if (shared && config.at("input_layers").size() == 2) ++shared_two_inputs;
    }
  }
  EXPECT_GE(std::size(kModels), 20u);
  EXPECT_GE(sequential, 1);
  EXPECT_GE(functional, 1);
  EXPECT_GE(shared_two_inputs, 2);
  const json goldens = ReadJson(Source("services/model/tests/data/tfjs/layers.json"));
  for (const json& c : goldens.at("cases")) {
    for (const json& cls : c.at("layers")) {
      EXPECT_TRUE(used.count(cls.get<std::string>()))
          << cls << " (layers.json case " << c.at("name") << ") is in no model";
    }
  }
}

}  // namespace
}  // namespace tfjob

// Keras Functional models end to end through the real binary: a model of two
// named inputs fed from CSV columns by name, in every strategy, and its bad
// inputs as one line. (The TF.js-written models, the residual CNN among
// them, train in every strategy in tfjs_models_fit_test.cc.)
#include <filesystem>
#include <fstream>
#include <regex>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/fit_output.h"
#include "tests/support/subprocess.h"

namespace tfjob {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using json = nlohmann::json;
namespace t = ::tfjob::testing;

std::string Source(const std::string& rel) { return t::SourceDir() + "/" + rel; }
json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}
std::string WriteJson(const std::string& path, const json& j) {
  std::ofstream(path) << j.dump(1);
  return path;
}

t::RunResult Runtime(std::vector<std::string> args) {
  args.insert(args.begin(), t::RuntimeBinary());
  return t::Run(args);
}

// The same fit as one process and in every distributed form.
struct Form {
  const char* name;
  std::vector<std::string> prefix, suffix;
};
const Form kForms[] = {
    {"one device", {"fit"}, {}},
    {"mirrored", {"fit"}, {"--strategy", "mirrored", "--replicas", "2"}},
    {"central storage", {"fit"}, {"--strategy", "central_storage", "--replicas", "2"}},
    {"multi-worker mirrored", {"local", "--workers", "2", "--", "fit"}, {}},
    {"parameter servers", {"local", "--ps", "1", "--workers", "2", "--", "fit"}, {}},
};

// age and score decide the label; noise does not.
std::string WriteCsv(const std::string& path, int rows, uint32_t seed) {
  std::ofstream out(path);
  out << "age,noise,score,label\n";
  uint32_t s = seed;
  auto next = [&s] {
    s = s * 1664525u + 1013904223u;
    return static_cast<double>(s >> 8) / 16777216.0 * 2 - 1;
  };
  for (int i = 0; i < rows; ++i) {
    const double age = next(), noise = next(), score = next();
    out << age << "," << noise << "," << score << "," << (age + 2 * score > 0 ? 1 : 0) << "\n";
  }
  return path;
}

// A Functional model of two inputs, named after CSV columns, in Keras 2's
// form (as TF.js writes it); the inputs in another order than the columns.
json TwoInputModel(const std::string& first, const std::string& second) {
  auto input = [](const std::string& name) {
    return json{
        {"name", name},
        {"class_name", "InputLayer"},
        {"config", {{"batch_input_shape", {nullptr, 1}}, {"dtype", "float32"}, {"sparse", false}, {"name", name}}},
        {"inbound_nodes", json::array()}};
  };
  auto layer = [](const std::string& cls, json config, json inbound) {
    return json{{"name", config["name"]}, {"class_name", cls}, {"config", config}, {"inbound_nodes", {inbound}}};
  };
  return {
      {"class_name", "Model"},
      {"config",
       {{"name", "two_inputs"},
        {"layers",
         {input(first), input(second),
          layer("Concatenate", {{"name", "both"}, {"axis", -1}},
                {{first, 0, 0, json::object()}, {second, 0, 0, json::object()}}),
          layer("Dense", {{"name", "hidden"}, {"units", 16}, {"activation", "relu"}}, {{"both", 0, 0, json::object()}}),
          layer("Dense", {{"name", "out"}, {"units", 2}, {"activation", "softmax"}},
                {{"hidden", 0, 0, json::object()}})}},
        {"input_layers", {{first, 0, 0}, {second, 0, 0}}},
        {"output_layers", {{"out", 0, 0}}}}},
      {"keras_version", "tfjs-layers 4.22.0"}};
}

json CsvJob(const std::string& dir) {
  const json train = {{"source", "csv"}, {"path", WriteCsv(dir + "/train.csv", 1200, 1)}, {"label_column", "label"}};
  const json eval = {{"source", "csv"}, {"path", WriteCsv(dir + "/eval.csv", 400, 2)}, {"label_column", "label"}};
  return {{"name", "two-inputs"},
          {"seed", 3},
          {"loss", "sparse_categorical_crossentropy"},
          {"optimizer", {{"type", "Adam"}, {"learning_rate", 0.01}}},
          {"metrics", {"accuracy"}},
          {"data", {{"train", train}, {"eval", eval}}},
          {"batch_size", 32},
          {"epochs", 6}};
}

double EvalAccuracy(const std::string& out) { return t::ParseEvaluation(out).accuracy; }

// A CI log (2 December): worker 1's last line came between the chief's
// "Evaluation" and its result, and the old pattern, which wanted them
// adjacent, read no evaluation at all.
TEST(FitOutputTest, TheEvaluationIsReadPastOtherProcessesLines) {
  const t::Evaluation e = t::ParseEvaluation(
      "38/38 - 0s - loss: 0.0495 - accuracy: 0.9933\nEvaluation\n"
      "[worker:1] fit: worker:1 done at step 228 (generation 1)\n"
      "[worker:1] 13/13 - 0s - loss: 9.9 - accuracy: 0.1\n"
      "13/13 - 0s - loss: 0.0412 - accuracy: 0.9975\n");
  EXPECT_EQ(e.loss, 0.0412);
  EXPECT_EQ(e.accuracy, 0.9975);
  // A process behind a prefix (tfjob run): its own line, not another's.
  const t::Evaluation c = t::ParseEvaluation(
      "[job-chief-0] Evaluation\n[job-worker-0] 4/4 - 0s - loss: 7 - accuracy: 0.5\n"
      "[job-chief-0] 40/40 - 0s - loss: 0.3457 - accuracy: 0.8434\n");
  EXPECT_EQ(c.loss, 0.3457);
  EXPECT_EQ(c.accuracy, 0.8434);
  // A loss alone (a regression), and no evaluation at all.
  EXPECT_EQ(t::ParseEvaluation("Evaluation\n2/2 - 0s - loss: 0.5\n").accuracy, -1);
  EXPECT_EQ(t::ParseEvaluation("Evaluation\n2/2 - 0s - loss: 0.5\n").loss, 0.5);
  EXPECT_EQ(t::ParseEvaluation("Epoch 1/1\n2/2 - 0s - loss: 0.5\n").loss, -1);
}

TEST(NamedInputsTest, CsvColumnsFeedTheInputsOfTheirNamesInEveryStrategy) {
  const std::string dir = t::MakeTempDir("named-inputs");
  const std::string job = WriteJson(dir + "/job.json", CsvJob(dir));
  const std::string model = WriteJson(dir + "/model.json", TwoInputModel("score", "age"));
  for (const Form& f : kForms) {
    std::vector<std::string> args = f.prefix;
    for (const std::string& a : {std::string("--config"), job, std::string("--keras-model"), model}) args.push_back(a);
    args.insert(args.end(), f.suffix.begin(), f.suffix.end());
    auto r = Runtime(args);
    ASSERT_EQ(r.exit_code, 0) << f.name << "\n" << r.out << r.err;
    // Only the named columns decide the label: learnt well past chance.
    EXPECT_GE(EvalAccuracy(r.out), 0.9) << f.name << "\n" << r.out;
  }
}

TEST(NamedInputsTest, AMissingFeatureIsOneLineNamingInputAndColumns) {
  const std::string dir = t::MakeTempDir("named-inputs-bad");
  const std::string job = WriteJson(dir + "/job.json", CsvJob(dir));
  auto r = Runtime(
      {"fit", "--config", job, "--keras-model", WriteJson(dir + "/model.json", TwoInputModel("score", "points"))});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, StartsWith("tfjob-runtime: error: "));
  EXPECT_THAT(r.err,
              HasSubstr("input \"points\" has no column of that name; the columns are age, noise, score, label"));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  // Several outputs: one line naming them.
  json two = ReadJson(Source("services/model/tests/data/functional/two_outputs.json"));
  r = Runtime({"fit", "--config", job, "--keras-model", WriteJson(dir + "/two.json", two)});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("the model has 2 outputs (o1, o2)"));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

}  // namespace
}  // namespace tfjob

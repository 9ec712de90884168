#include "services/strategy/fit.h"

#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/files.h"
#include "services/strategy/input.h"
#include "services/strategy/progress.h"
#include "tests/support/subprocess.h"

namespace tfjob::strategy {
namespace {

using ::testing::HasSubstr;

model::JobConfig Job(const std::string& text) {
  auto j = model::ParseJobConfig(nlohmann::json::parse(text), "job.json");
  EXPECT_TRUE(j.ok()) << j.status();
  return *j;
}

// The small synthetic job the runtime tests share (tests/support/data).
std::string Synthetic() {
  auto text = ReadFile(::tfjob::testing::SourceDir() + "/tests/support/data/synthetic-small.json");
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : std::string("{}");
}

TEST(ProgressTest, KerasFormat) {
  EXPECT_EQ(FormatProgress(125, 125, 1.2, {{"loss", 0.31024}, {"accuracy", 0.912}}),
            "125/125 - 1s - loss: 0.3102 - accuracy: 0.9120");
  EXPECT_EQ(FormatValue(0.00012345), "1.2345e-04");
  EXPECT_EQ(FormatProgress(3, -2, 0.4, {}), "3/Unknown - 0s");
}

TEST(FitTest, LearnsSyntheticProblemAndReportsKerasLines) {
  std::ostringstream out;
  FitContext ctx;
  ctx.out = &out;
  auto s = Fit(Job(Synthetic()), {}, ctx);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->history.size(), 4u);
  EXPECT_EQ(s->steps, 4 * 20);
  EXPECT_EQ(s->examples, 4 * 1000);
  EXPECT_LT(s->history.back().values[0].second, s->history.front().values[0].second);  // loss falls
  ASSERT_TRUE(s->eval.has_value());
  nlohmann::json j = s->ToJson();
  EXPECT_GT(j["eval_accuracy"].get<double>(), 0.9);
  EXPECT_GT(j["examples_per_second"].get<double>(), 0);
  EXPECT_THAT(out.str(), HasSubstr("Epoch 1/4\n20/20 - "));
  EXPECT_THAT(out.str(), HasSubstr(" - loss: "));
  EXPECT_THAT(out.str(), HasSubstr(" - accuracy: "));
}

TEST(FitTest, DeterministicForASeed) {
  auto a = Fit(Job(Synthetic()), {});
  auto b = Fit(Job(Synthetic()), {});
  ASSERT_TRUE(a.ok() && b.ok());
  for (size_t e = 0; e < a->history.size(); ++e) {
    EXPECT_EQ(a->history[e].values[0].second, b->history[e].values[0].second) << "epoch " << e;
  }
}

TEST(FitTest, StepsPerEpochContinuesAcrossEpochs) {
  model::JobConfig job = Job(Synthetic());
  job.steps_per_epoch = 7;
  job.epochs = 3;
  auto s = Fit(job, {});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->steps, 21);
  EXPECT_EQ(s->examples, 21 * 50);
}

TEST(FitTest, DataModelShapeMismatchNamesFieldAndShapes) {
  model::JobConfig job = Job(Synthetic());
  job.model.input_shape = {9};
  auto s = Fit(job, {});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(s.status().message(),
            "job.json: data.train: examples have features float32[8] but model.input_shape is float32[9]");
}

TEST(FitTest, LabelsOutsideTheModelsClassesAreRejected) {
  model::JobConfig job = Job(Synthetic());
  job.model.layers.back().units = 2;  // data has 3 classes
  auto s = Fit(job, {});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("is outside [0, 2)"));
}

TEST(InputTest, EmbeddingIdsFromFloatSources) {
  model::DataSourceSpec spec;
  spec.kind = model::DataSourceKind::kSynthetic;
  spec.field = "data.train";
  spec.num_examples = 10;
  spec.feature_shape = {2};
  auto ex = LoadExamples(spec, "", DType::kInt64);
  ASSERT_FALSE(ex.ok());  // Gaussian features are not integral ids
  EXPECT_THAT(ex.status().message(), HasSubstr("data.train: features hold non-integer value"));
}

TEST(InputTest, RowRangeOutsideSourceIsOutOfRange) {
  model::DataSourceSpec spec;
  spec.kind = model::DataSourceKind::kSynthetic;
  spec.field = "data.eval";
  spec.num_examples = 10;
  spec.begin = 5;
  spec.end = 20;
  auto ex = LoadExamples(spec, "", DType::kFloat32);
  ASSERT_FALSE(ex.ok());
  EXPECT_EQ(ex.status().code(), Code::kOutOfRange);
  EXPECT_EQ(ex.status().message(), "data.eval: rows [5, 20) are outside the 10 examples of the source");
}

}  // namespace
}  // namespace tfjob::strategy

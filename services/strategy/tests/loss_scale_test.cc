// Keras' dynamic loss scaling: the rule (loss_scale.h), and float16 layers
// trained by the synchronous strategies with an overflow forced by too
// large an initial scale: the overflowing steps are skipped and halve the
// scale, and training goes on to learn.
#include "services/strategy/loss_scale.h"

#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "common/files.h"
#include "services/strategy/fit.h"
#include "services/strategy/sync.h"
#include "services/collective/tests/local_members.h"
#include "tests/support/subprocess.h"

namespace tfjob::strategy {
namespace {

TEST(DynamicLossScaleTest, HalvesOnOverflowDoublesAfterGoodStepsNeverBelowOne) {
  DynamicLossScale s;
  EXPECT_EQ(s.scale(), 32768.f);  // Keras' 2^15
  s.Update(false);
  EXPECT_EQ(s.scale(), 16384.f);
  EXPECT_EQ(s.skipped_steps(), 1);
  for (int i = 0; i < 1999; ++i) s.Update(true);
  EXPECT_EQ(s.scale(), 16384.f);
  s.Update(true);  // the 2000th good step in a row
  EXPECT_EQ(s.scale(), 32768.f);
  // An overflow restarts the count of good steps.
  for (int i = 0; i < 1000; ++i) s.Update(true);
  s.Update(false);
  for (int i = 0; i < 1999; ++i) s.Update(true);
  EXPECT_EQ(s.scale(), 16384.f);
  DynamicLossScale small({.initial = 2, .growth_steps = 10});
  for (int i = 0; i < 5; ++i) small.Update(false);
  EXPECT_EQ(small.scale(), 1.f);
  EXPECT_EQ(small.skipped_steps(), 5);
}

model::JobConfig Float16Job(int epochs, DynamicLossScale::Options ls) {
  auto text = ReadFile(::tfjob::testing::SourceDir() + "/tests/support/data/synthetic-small.json");
  EXPECT_TRUE(text.ok());
  auto job = model::ParseJobConfig(nlohmann::json::parse(*text), "synthetic-small.json");
  EXPECT_TRUE(job.ok()) << job.status();
  job->epochs = epochs;
  // As the job's "optimizer": {"loss_scale": {...}} sets them.
  job->optimizer.initial_scale = ls.initial;
  job->optimizer.dynamic_growth_steps = ls.growth_steps;
  model::SetPrecision(job->model, Precision::kFloat16);
  return *job;
}

struct Float16Run {
  FitSummary summary;
  nlohmann::json strategy;
};

Float16Run TrainFloat16(StrategyKind kind, int replicas, DynamicLossScale::Options ls, int epochs,
                        collective::Group* group = nullptr) {
  const model::JobConfig job = Float16Job(epochs, ls);
  auto m = model::Model::Create(job.model, job.loss);
  EXPECT_TRUE(m.ok()) << m.status();
  auto data = LoadJobData(job, "", **m);
  EXPECT_TRUE(data.ok()) << data.status();
  SyncOptions o;
  o.kind = kind;
  o.replicas = replicas;
  o.group = group;
  auto s = MakeSyncStrategy(job, data->train, o);
  EXPECT_TRUE(s.ok()) << s.status();
  LoopOptions lo;
  lo.epochs = job.epochs;
  lo.steps_per_epoch = StepsPerEpoch(job, data->train.size());
  lo.metric_names = job.metric_names;
  auto summary = RunTrainingLoop(**s, lo);
  EXPECT_TRUE(summary.ok()) << summary.status();
  Float16Run r;
  if (summary.ok()) r.summary = *summary;
  r.strategy = (*s)->SummaryJson();
  return r;
}

// 2^30 times a gradient of order 1/50 is far past float16's 65504: the
// first steps overflow, each skipped with the scale halved, until the
// scaled gradients fit; then the model learns as usual. With no growth in
// the run, the scale left says how many steps were skipped.
TEST(LossScaleTrainingTest, OverflowingStepsAreSkippedAndHalveTheScale) {
  for (auto [kind, replicas] : {std::pair{StrategyKind::kOneDevice, 1}, std::pair{StrategyKind::kMirrored, 2},
                                std::pair{StrategyKind::kCentralStorage, 2}}) {
    SCOPED_TRACE(std::string(StrategyName(kind)));
    const Float16Run r = TrainFloat16(kind, replicas, {.initial = std::ldexp(1.0, 30), .growth_steps = 1000000}, 3);
    ASSERT_TRUE(r.strategy.contains("loss_scale")) << r.strategy.dump();
    const double scale = r.strategy["loss_scale"].get<double>();
    const int64_t skipped = r.strategy["skipped_steps"].get<int64_t>();
    EXPECT_GE(skipped, 5);
    EXPECT_LT(skipped, 60);  // 3 epochs of 20 steps: some were applied
    EXPECT_EQ(scale, std::ldexp(1.0, 30 - static_cast<int>(skipped)));
    ASSERT_FALSE(r.summary.history.empty());
    double accuracy = 0;
    for (const auto& [name, value] : r.summary.history.back().values) {
      if (name == "accuracy") accuracy = value;
    }
    EXPECT_GE(accuracy, 0.8) << r.strategy.dump();
  }
}

// A scale that never overflows doubles after every growth_steps steps.
TEST(LossScaleTrainingTest, TheScaleGrowsAfterGoodSteps) {
  const Float16Run r = TrainFloat16(StrategyKind::kOneDevice, 1, {.initial = 256, .growth_steps = 4}, 1);
  EXPECT_EQ(r.strategy["skipped_steps"].get<int64_t>(), 0) << r.strategy.dump();
  EXPECT_EQ(r.strategy["loss_scale"].get<double>(), 256.0 * 32);  // 20 steps: 5 doublings
}

// Multi-worker mirrored: each member decides on the all-reduced gradients,
// so both skip the same steps and end with the same scale.
TEST(LossScaleTrainingTest, GroupMembersSkipTheSameSteps) {
  auto local = collective::testing::ListenLocally(2);
  ASSERT_TRUE(local.ok()) << local.status();
  collective::Options co;
  co.timeout = std::chrono::milliseconds(20000);
  co.rendezvous_timeout = std::chrono::milliseconds(20000);
  std::vector<Float16Run> runs(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto g = collective::Group::Create(local->members, r, co, std::move(local->listeners[static_cast<size_t>(r)]));
      ASSERT_TRUE(g.ok()) << g.status();
      runs[static_cast<size_t>(r)] =
          TrainFloat16(StrategyKind::kMultiWorkerMirrored, 1, {.initial = std::ldexp(1.0, 30), .growth_steps = 1000000},
                       2, g->get());
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(runs[0].strategy.contains("skipped_steps")) << runs[0].strategy.dump();
  EXPECT_GE(runs[0].strategy["skipped_steps"].get<int64_t>(), 5);
  EXPECT_EQ(runs[0].strategy["skipped_steps"], runs[1].strategy["skipped_steps"]);
  EXPECT_EQ(runs[0].strategy["loss_scale"], runs[1].strategy["loss_scale"]);
}

}  // namespace
}  // namespace tfjob::strategy

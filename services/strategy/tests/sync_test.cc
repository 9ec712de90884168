// Synchronous training with N replicas and global batch B is the same
// computation as one device with batch B: the variables after K steps agree
// to 2e-5 (relative: float32 sums in another order), with SGD and with Adam,
// for mirrored and central storage in this process and for multi-worker
// mirrored groups of 2 and 3 members (threads here, each with its own group
// and sockets; the multi-process version is services/runtime/tests/
// collective_fit_test.cc).
#include <cmath>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/files.h"
#include "services/strategy/fit.h"
#include "services/strategy/sync.h"
#include "tests/support/subprocess.h"
#include "services/collective/tests/local_members.h"

namespace tfjob::strategy {
namespace {

using ::testing::HasSubstr;

model::JobConfig SyncJob(const std::string& optimizer, const std::string& layers = "") {
  auto text = ReadFile(::tfjob::testing::SourceDir() + "/tests/support/data/synthetic-small.json");
  EXPECT_TRUE(text.ok());
  nlohmann::json j = nlohmann::json::parse(*text);
  j["optimizer"] = nlohmann::json::parse(optimizer);
  if (!layers.empty()) j["model"]["layers"] = nlohmann::json::parse(layers);
  j["epochs"] = 1;  // 20 steps of 50
  auto job = model::ParseJobConfig(j, "synthetic-small.json");
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

struct Trained {
  std::vector<Tensor> values;
  FitSummary summary;
  nlohmann::json strategy;
};

StatusOr<Trained> Train(const model::JobConfig& job, SyncOptions o) {
  ASSIGN_OR_RETURN(auto m, model::Model::Create(job.model, job.loss));
  ASSIGN_OR_RETURN(JobData data, LoadJobData(job, "", *m));
  ASSIGN_OR_RETURN(auto s, MakeSyncStrategy(job, data.train, o));
  LoopOptions lo;
  lo.epochs = job.epochs;
  lo.steps_per_epoch = StepsPerEpoch(job, data.train.size());
  lo.metric_names = job.metric_names;
  Trained t;
  ASSIGN_OR_RETURN(t.summary, RunTrainingLoop(*s, lo));
  ASSIGN_OR_RETURN(t.values, s->Values());
  t.strategy = s->SummaryJson();
  return t;
}

// Every member of a multi-worker group of n, each on its own thread.
StatusOr<std::vector<Trained>> TrainGroup(const model::JobConfig& job, int n) {
  ASSIGN_OR_RETURN(collective::testing::LocalMembers local, collective::testing::ListenLocally(n));
  std::vector<collective::Peer>& members = local.members;
  std::vector<net::Listener>& listeners = local.listeners;
  collective::Options co;
  co.timeout = std::chrono::milliseconds(20000);
  co.rendezvous_timeout = std::chrono::milliseconds(20000);
  std::vector<StatusOr<Trained>> out(static_cast<size_t>(n), Internal("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto g = collective::Group::Create(members, r, co, std::move(listeners[static_cast<size_t>(r)]));
      if (!g.ok()) {
        out[static_cast<size_t>(r)] = g.status();
        return;
      }
      SyncOptions o;
      o.kind = StrategyKind::kMultiWorkerMirrored;
      o.group = g->get();
      out[static_cast<size_t>(r)] = Train(job, o);
    });
  }
  for (auto& t : threads) t.join();
  std::vector<Trained> result;
  for (auto& o : out) {
    RETURN_IF_ERROR(o.status());
    result.push_back(std::move(o).value());
  }
  return result;
}

// Largest |a - b| / (|b| + 1e-3) over every element of every variable: a
// relative error that does not blow up on weights that happen to be ~0.
// Replicas sum partial batches' gradients, whose products oneDNN's sgemm
// blocks differently from the whole batch's (services/tensor/gemm.h): over
// 20 momentum steps that is measured at 1.2e-5 here, Eigen's at under 1e-5.
constexpr double kReplicatedTolerance = 2e-5;

double MaxRelativeDifference(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double worst = 0;
  EXPECT_EQ(a.size(), b.size());
  for (size_t v = 0; v < a.size() && v < b.size(); ++v) {
    EXPECT_EQ(a[v].shape(), b[v].shape());
    for (int64_t i = 0; i < a[v].size(); ++i) {
      const double x = a[v].data<float>()[i], y = b[v].data<float>()[i];
      worst = std::max(worst, std::abs(x - y) / (std::abs(y) + 1e-3));
    }
  }
  return worst;
}

class EquivalenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(EquivalenceTest, ReplicatedTrainingMatchesOneDevice) {
  const model::JobConfig job = SyncJob(GetParam());
  SyncOptions one;
  auto base = Train(job, one);
  ASSERT_TRUE(base.ok()) << base.status();
  ASSERT_EQ(base->summary.steps, 20);

  for (auto [kind, replicas] : {std::pair{StrategyKind::kMirrored, 2}, std::pair{StrategyKind::kMirrored, 3},
                                std::pair{StrategyKind::kCentralStorage, 2}}) {
    SyncOptions o;
    o.kind = kind;
    o.replicas = replicas;
    auto t = Train(job, o);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->strategy["num_replicas_in_sync"], replicas);
    EXPECT_LE(MaxRelativeDifference(t->values, base->values), kReplicatedTolerance)
        << StrategyName(kind) << " x" << replicas;
    // The progress the replicas report is the one device's too.
    EXPECT_NEAR(t->summary.history[0].values[0].second, base->summary.history[0].values[0].second, 1e-5);
  }
  for (int n : {2, 3}) {
    auto group = TrainGroup(job, n);
    ASSERT_TRUE(group.ok()) << group.status();
    for (int r = 0; r < n; ++r) {
      const Trained& t = (*group)[static_cast<size_t>(r)];
      EXPECT_LE(MaxRelativeDifference(t.values, base->values), kReplicatedTolerance)
          << "multi_worker_mirrored x" << n << " rank " << r;
      // Every member holds exactly the same variables.
      for (size_t v = 0; v < t.values.size(); ++v) EXPECT_TRUE(Equal(t.values[v], (*group)[0].values[v]));
      EXPECT_EQ(t.summary.steps, 20);
      EXPECT_NEAR(t.summary.history[0].values[1].second, base->summary.history[0].values[1].second, 1e-6)
          << "accuracy over the epoch";
    }
    EXPECT_EQ((*group)[0].strategy["num_replicas_in_sync"], n);
    EXPECT_EQ((*group)[0].strategy["communication"], "ring");
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, EquivalenceTest,
                         ::testing::Values(R"({"type": "SGD", "learning_rate": 0.1})",
                                           R"({"type": "SGD", "learning_rate": 0.05, "momentum": 0.9})",
                                           R"({"type": "Adam", "learning_rate": 0.01})"));

TEST(SyncStrategyTest, ReplicatedStrategiesLearn) {
  model::JobConfig job = SyncJob(R"({"type": "Adam", "learning_rate": 0.01})");
  job.epochs = 4;
  FitOptions o;
  o.strategy = "mirrored";
  o.replicas = 2;
  nlohmann::json sj;
  auto s = Fit(job, o, {}, &sj);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE(s->eval.has_value());
  EXPECT_GT(s->eval->at(1).second, 0.9);
  EXPECT_EQ(sj["strategy"], "mirrored");
  EXPECT_EQ(sj["replicas"], 2);
}

// The small job's training examples.
Examples TrainingExamples(const model::JobConfig& job) {
  auto m = model::Model::Create(job.model, job.loss);
  EXPECT_TRUE(m.ok());
  auto data = LoadJobData(job, "", **m);
  EXPECT_TRUE(data.ok()) << data.status();
  return data.ok() ? data->train : Examples{};
}

TEST(SyncStrategyTest, BadOptionsAreRejected) {
  const model::JobConfig job = SyncJob(R"({"type": "SGD", "learning_rate": 0.1})");
  const Examples train = TrainingExamples(job);
  SyncOptions o;
  o.kind = StrategyKind::kMultiWorkerMirrored;
  EXPECT_EQ(MakeSyncStrategy(job, train, o).status().code(), Code::kInvalidArgument);
  o.kind = StrategyKind::kMirrored;
  o.replicas = 0;
  EXPECT_THAT(MakeSyncStrategy(job, train, o).status().message(), HasSubstr("--replicas"));
  o.kind = StrategyKind::kParameterServer;
  EXPECT_EQ(MakeSyncStrategy(job, train, o).status().code(), Code::kInvalidArgument);
}

TEST(GlobalBatchesTest, AnyStepCanBeReachedDirectly) {
  const model::JobConfig job = SyncJob(R"({"type": "SGD", "learning_rate": 0.1})");
  const Examples train = TrainingExamples(job);
  GlobalBatches seq(train, job), jump(train, job);
  std::vector<data::Element> all;
  for (int64_t s = 0; s < 45; ++s) {
    auto e = seq.Get(s);
    ASSERT_TRUE(e.ok());
    all.push_back(*e);
  }
  // A member that joins at step 37 (pass 1, batch 17) sees what the others saw.
  for (int64_t s : {37, 38, 3, 20, 44}) {
    auto e = jump.Get(s);
    ASSERT_TRUE(e.ok());
    EXPECT_TRUE(Equal((*e)[0], all[static_cast<size_t>(s)][0])) << "step " << s;
    EXPECT_TRUE(Equal((*e)[1], all[static_cast<size_t>(s)][1])) << "step " << s;
  }
  // Passes are shuffled differently.
  EXPECT_FALSE(Equal(all[0][0], all[20][0]));
}

}  // namespace
}  // namespace tfjob::strategy

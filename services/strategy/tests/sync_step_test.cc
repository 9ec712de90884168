// One step of the synchronous strategies (sync_step.h), below the strategy
// and the loop: two replicas in this process, each over its rows of one
// global batch, apply the update one replica applies over the whole batch,
// and that update is the variables' value minus the learning rate times the
// gradient of the whole batch (so the replicas' gradients are weighted by
// their rows, not averaged per replica). TraitsOf is checked for every kind.
#include "services/strategy/sync_step.h"

#include <algorithm>
#include <cmath>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/files.h"
#include "tests/support/subprocess.h"

namespace tfjob::strategy {
namespace {

using ::testing::HasSubstr;

constexpr float kLearningRate = 0.5f;

// The runtime tests' small synthetic problem (8 features, 3 classes), with
// plain SGD so an update is exactly -lr * gradient, and a global batch of
// `batch` rows.
model::JobConfig SgdJob(int64_t batch) {
  auto text = ReadFile(::tfjob::testing::SourceDir() + "/tests/support/data/synthetic-small.json");
  EXPECT_TRUE(text.ok()) << text.status();
  nlohmann::json j = nlohmann::json::parse(text.ok() ? *text : std::string("{}"));
  j["optimizer"] = {{"type", "SGD"}, {"learning_rate", kLearningRate}};
  j["batch_size"] = batch;
  auto job = model::ParseJobConfig(j, "synthetic-small.json");
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

Examples TrainExamples(const model::JobConfig& job) {
  auto m = model::Model::Create(job.model, job.loss);
  EXPECT_TRUE(m.ok()) << m.status();
  auto data = LoadJobData(job, "", **m);
  EXPECT_TRUE(data.ok()) << data.status();
  return data->train;
}

// What one step leaves behind: every copy's values and the step's progress.
struct Stepped {
  std::vector<std::vector<Tensor>> copies;
  StepProgress progress;
  int local_replicas = 0;
  int64_t replicas_in_sync = 0;
};

// One step of a SyncStep of `kind` with `replicas` local replicas over the
// global batch (x, y).
StatusOr<Stepped> OneStep(const model::JobConfig& job, const Examples& ex, StrategyKind kind, int replicas,
                          const Tensor& x, const Tensor& y) {
  SyncOptions o;
  o.kind = kind;
  o.replicas = replicas;
  GlobalBatches input(ex, job);
  ASSIGN_OR_RETURN(std::unique_ptr<SyncStep> s, SyncStep::Create(job, o, input));
  RETURN_IF_ERROR(s->ComputeReplicas(x, y));
  Stopwatch w;
  StepSeconds t;
  Stepped out;
  ASSIGN_OR_RETURN(out.progress, s->ReduceAndApply(x.dim(0), GroupReducer{}, w, t));
  for (const VariableCopy& c : s->copies()) {
    std::vector<Tensor> values;
    for (const Tensor& v : c.values) values.push_back(v.Clone());
    out.copies.push_back(std::move(values));
  }
  out.local_replicas = s->local_replicas();
  out.replicas_in_sync = s->replicas_in_sync();
  return out;
}

// The largest |a - b| over every element of every variable, relative to
// max(1, |b|).
double MaxRelDiff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t v = 0; v < std::min(a.size(), b.size()); ++v) {
    EXPECT_EQ(a[v].shape(), b[v].shape()) << "variable " << v;
    if (a[v].shape() != b[v].shape()) return 1e9;
    const float* pa = a[v].data<float>();
    const float* pb = b[v].data<float>();
    for (int64_t i = 0; i < a[v].size(); ++i) {
      worst = std::max(worst, std::abs(double{pa[i]} - pb[i]) / std::max(1.0, std::abs(double{pb[i]})));
    }
  }
  return worst;
}

// init - lr * grad, variable by variable (dense gradients).
std::vector<Tensor> SgdUpdate(const std::vector<Tensor>& init, const std::vector<model::Gradient>& grads) {
  std::vector<Tensor> out;
  for (size_t v = 0; v < init.size(); ++v) {
    Tensor t = init[v].Clone();
    const float* g = grads[v].dense.data<float>();
    for (int64_t i = 0; i < t.size(); ++i) t.data<float>()[i] -= kLearningRate * g[i];
    out.push_back(std::move(t));
  }
  return out;
}

class TwoReplicasTest : public ::testing::TestWithParam<StrategyKind> {};

// 7 rows over 2 replicas: 3 and 4 rows. The reduced gradient is the whole
// batch's mean gradient (each replica's mean weighted by its rows), so the
// update equals one replica's over the same 7 rows, and init - lr * g.
TEST_P(TwoReplicasTest, UpdateEqualsOneReplicaOverTheWholeBatch) {
  const model::JobConfig job = SgdJob(7);
  const Examples ex = TrainExamples(job);
  GlobalBatches batches(ex, job);
  auto batch = batches.Get(0);
  ASSERT_TRUE(batch.ok()) << batch.status();
  const Tensor& x = (*batch)[0];
  const Tensor& y = (*batch)[1];
  ASSERT_EQ(x.dim(0), 7);

  auto one = OneStep(job, ex, StrategyKind::kOneDevice, 1, x, y);
  ASSERT_TRUE(one.ok()) << one.status();
  auto two = OneStep(job, ex, GetParam(), 2, x, y);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->local_replicas, 2);
  EXPECT_EQ(two->replicas_in_sync, 2);
  ASSERT_EQ(two->copies.size(), GetParam() == StrategyKind::kMirrored ? 2u : 1u);

  // By hand: the model's gradient over the whole batch at the initial values.
  auto m = model::Model::Create(job.model, job.loss);
  ASSERT_TRUE(m.ok());
  const std::vector<Tensor> init = (*m)->InitialValues(static_cast<uint64_t>(job.seed));
  auto whole = (*m)->ComputeGradients(init, x, y);
  ASSERT_TRUE(whole.ok()) << whole.status();
  const std::vector<Tensor> expected = SgdUpdate(init, whole->grads);
  ASSERT_GT(MaxRelDiff(expected, init), 1e-3) << "the step should move the variables";

  EXPECT_LT(MaxRelDiff(one->copies[0], expected), 1e-5);
  for (size_t c = 0; c < two->copies.size(); ++c) {
    EXPECT_LT(MaxRelDiff(two->copies[c], expected), 2e-5) << "copy " << c;
    EXPECT_LT(MaxRelDiff(two->copies[c], one->copies[0]), 2e-5) << "copy " << c;
  }

  // The plain mean of the two replicas' mean gradients (3 and 4 rows) is
  // another update: the comparison above tells the two apart.
  auto first = (*m)->ComputeGradients(init, *x.Rows(0, 3), *y.Rows(0, 3));
  auto second = (*m)->ComputeGradients(init, *x.Rows(3, 7), *y.Rows(3, 7));
  ASSERT_TRUE(first.ok() && second.ok());
  std::vector<model::Gradient> unweighted = first->grads;
  for (size_t v = 0; v < unweighted.size(); ++v) {
    Tensor g = first->grads[v].dense.Clone();
    for (int64_t i = 0; i < g.size(); ++i) {
      g.data<float>()[i] = 0.5f * (g.data<float>()[i] + second->grads[v].dense.data<float>()[i]);
    }
    unweighted[v].dense = g;
  }
  EXPECT_GT(MaxRelDiff(SgdUpdate(init, unweighted), expected), 1e-4);

  // The step's loss is the whole batch's, over its 7 rows.
  EXPECT_EQ(two->progress.examples, 7);
  EXPECT_DOUBLE_EQ(two->progress.stats.loss.count, 7);
  EXPECT_NEAR(two->progress.stats.loss.Result(), whole->loss, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(InProcess, TwoReplicasTest,
                         ::testing::Values(StrategyKind::kMirrored, StrategyKind::kCentralStorage),
                         [](const auto& info) {
                           return std::string(StrategyName(info.param)) == "mirrored" ? std::string("Mirrored")
                                                                                      : std::string("CentralStorage");
                         });

// How many replicas and copies each kind makes of --replicas 3 in one
// process, and what a device list must match.
TEST(SyncStepTest, ReplicasAndCopiesFollowTheKind) {
  const model::JobConfig job = SgdJob(6);
  const Examples ex = TrainExamples(job);
  struct Case {
    StrategyKind kind;
    int local;
    size_t copies;
    std::string communication;
  };
  for (const Case& c : {Case{StrategyKind::kOneDevice, 1, 1, ""}, Case{StrategyKind::kMirrored, 3, 3, "local"},
                        Case{StrategyKind::kCentralStorage, 3, 1, ""}}) {
    SyncOptions o;
    o.kind = c.kind;
    o.replicas = 3;
    GlobalBatches input(ex, job);
    auto s = SyncStep::Create(job, o, input);
    ASSERT_TRUE(s.ok()) << StrategyName(c.kind) << ": " << s.status();
    EXPECT_EQ((*s)->local_replicas(), c.local) << StrategyName(c.kind);
    EXPECT_EQ((*s)->replicas_in_sync(), c.local) << StrategyName(c.kind);
    EXPECT_EQ((*s)->copies().size(), c.copies) << StrategyName(c.kind);
    EXPECT_EQ((*s)->devices().size(), static_cast<size_t>(c.local)) << StrategyName(c.kind);
    EXPECT_EQ((*s)->in_process_communication(), c.communication) << StrategyName(c.kind);
  }
  SyncOptions o;
  o.kind = StrategyKind::kMirrored;
  o.replicas = 3;
  o.devices = {Device::Cpu(), Device::Cpu()};
  GlobalBatches input(ex, job);
  auto s = SyncStep::Create(job, o, input);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("2 devices for 3 local replicas"));
}

TEST(TraitsOfTest, EveryKind) {
  const KindTraits one = TraitsOf(StrategyKind::kOneDevice);
  EXPECT_TRUE(one.synchronous);
  EXPECT_FALSE(one.in_group || one.replicas_in_process || one.copy_per_replica || one.sum_to_one_copy);
  EXPECT_EQ(one.placement, DevicePlacement::kOneDevice);

  const KindTraits mirrored = TraitsOf(StrategyKind::kMirrored);
  EXPECT_TRUE(mirrored.synchronous && mirrored.replicas_in_process && mirrored.copy_per_replica);
  EXPECT_FALSE(mirrored.in_group || mirrored.sum_to_one_copy);
  EXPECT_EQ(mirrored.placement, DevicePlacement::kPerGpu);

  const KindTraits central = TraitsOf(StrategyKind::kCentralStorage);
  EXPECT_TRUE(central.synchronous && central.replicas_in_process && central.sum_to_one_copy);
  EXPECT_FALSE(central.in_group || central.copy_per_replica);
  EXPECT_EQ(central.placement, DevicePlacement::kPerGpu);

  const KindTraits group = TraitsOf(StrategyKind::kMultiWorkerMirrored);
  EXPECT_TRUE(group.synchronous && group.in_group);
  EXPECT_FALSE(group.replicas_in_process || group.copy_per_replica || group.sum_to_one_copy);
  EXPECT_EQ(group.placement, DevicePlacement::kByRank);

  const KindTraits ps = TraitsOf(StrategyKind::kParameterServer);
  EXPECT_FALSE(ps.synchronous || ps.in_group || ps.replicas_in_process || ps.copy_per_replica || ps.sum_to_one_copy);
  EXPECT_EQ(ps.placement, DevicePlacement::kOnWorkers);
}

}  // namespace
}  // namespace tfjob::strategy

// The parameter-server strategy's worker side (ps_closures.h), its registered
// functions called as the worker's service calls them, against real
// parameter servers on loopback ports in this process: the dataset function
// gives each worker every training example once an epoch in its own order,
// and the closure pulls, computes and pushes, so that after one step under
// SGD every PS holds value - lr * gradient of the batch, each step of a
// closure lands once, a re-run closure (same id) is not applied twice, and
// a PS's error is the closure's result.
#include "services/strategy/ps_closures.h"

#include <algorithm>
#include <cmath>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/files.h"
#include "services/ps/ps_client.h"
#include "services/ps/ps_service.h"
#include "services/strategy/input.h"
#include "services/strategy/ps_common.h"
#include "services/strategy/stats.h"
#include "services/strategy/variable_store.h"
#include "tests/support/subprocess.h"

namespace tfjob::strategy::ps_closures_testing {
namespace {

using ::testing::HasSubstr;
using namespace ps_detail;  // NOLINT: the strategy's shared pieces under test

constexpr float kLr = 0.5f;
constexpr int64_t kExamples = 40;  // training rows of the job below

// The runtime tests' synthetic problem (8 features, 3 classes) cut to 40
// training rows, with plain SGD so an update is exactly -lr * gradient.
nlohmann::json SmallJob(int64_t batch) {
  auto text = ReadFile(::tfjob::testing::SourceDir() + "/tests/support/data/synthetic-small.json");
  EXPECT_TRUE(text.ok()) << text.status();
  nlohmann::json j = nlohmann::json::parse(text.ok() ? *text : std::string("{}"));
  j["optimizer"] = {{"type", "SGD"}, {"learning_rate", kLr}};
  j["data"]["train"]["end"] = kExamples;
  j["batch_size"] = batch;
  return j;
}

model::JobConfig Parse(const nlohmann::json& j) {
  auto job = model::ParseJobConfig(j, "job.json");
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

// What the chief sends the dataset function (parameter_server.cc, Start).
nlohmann::json DatasetArgs(const nlohmann::json& config, int64_t num_ps, int64_t num_workers) {
  return {{"config", config},         {"keras_model", nullptr},   {"source", "job.json"},       {"data_dir", ""},
          {"partitioner", "fixed:2"}, {"num_ps", num_ps},         {"num_workers", num_workers}, {"threads", 1},
          {"prefetch", true},         {"closures_per_worker", 2}, {"pull_rows", true},          {"device", "cpu"},
          {"text", nullptr}};
}

// The largest |a - b| over every element of every variable, relative to
// max(1, |b|).
double MaxRelDiff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t v = 0; v < std::min(a.size(), b.size()); ++v) {
    if (a[v].shape() != b[v].shape()) return 1e9;
    const float* pa = a[v].data<float>();
    const float* pb = b[v].data<float>();
    for (int64_t i = 0; i < a[v].size(); ++i) {
      worst = std::max(worst, std::abs(double{pa[i]} - pb[i]) / std::max(1.0, std::abs(double{pb[i]})));
    }
  }
  return worst;
}

// Rows of (features..., label) of one batch, for comparing what a worker
// read with the training set whatever the order.
using Rows = std::vector<std::vector<float>>;
void AppendRows(const Tensor& x, const Tensor& y, Rows& out) {
  const int64_t width = x.size() / x.dim(0);
  for (int64_t r = 0; r < x.dim(0); ++r) {
    std::vector<float> row(x.data<float>() + r * width, x.data<float>() + (r + 1) * width);
    row.push_back(y.dtype() == DType::kInt64 ? static_cast<float>(y.data<int64_t>()[r]) : y.data<float>()[r]);
    out.push_back(std::move(row));
  }
}

// Two parameter servers on loopback ports, the job's variables on them as
// the chief creates them, and workers whose functions come from
// RegisterParameterServerClosures (one registry per worker: it holds the
// worker's state).
class PsWorkerTest : public ::testing::Test {
 protected:
  static constexpr int kNumPs = 2;

  void SetUp() override {
    for (int i = 0; i < kNumPs; ++i) {
      auto s = ps::PsServer::Start("127.0.0.1:0");
      ASSERT_TRUE(s.ok()) << s.status();
      addresses_.push_back("127.0.0.1:" + std::to_string((*s)->port()));
      clients_.push_back(std::make_shared<ps::PsClient>(addresses_.back()));
      servers_.push_back(std::move(s).value());
    }
  }

  // The job's model and its variables' placement, as the workers compute it.
  void PlaceJob(const model::JobConfig& job) {
    auto m = model::Model::Create(job.model, job.loss);
    ASSERT_TRUE(m.ok()) << m.status();
    m_ = std::move(m).value();
    auto placement = PlaceModel(*m_, kNumPs, Partitioner::FixedShards(2));
    ASSERT_TRUE(placement.ok()) << placement.status();
    shards_ = 0;
    for (const PlacedVariable& v : placement->variables()) shards_ += static_cast<int64_t>(v.shards.size());
    store_ = std::make_unique<VariableStore>(*placement, clients_);
    names_ = VariableNames(*m_);
    init_ = m_->InitialValues(static_cast<uint64_t>(job.seed));
  }

  // Creates every variable on the PS tasks with the job's optimizer.
  void CreateVariables(const model::JobConfig& job) {
    for (size_t i = 0; i < names_.size(); ++i) ASSERT_TRUE(store_->Create(names_[i], init_[i], job.optimizer).ok());
  }

  // Worker `index`'s state (as its service holds it) and registry.
  struct Worker {
    worker::Registry registry;
    std::unique_ptr<worker::WorkerState> state;
  };
  std::unique_ptr<Worker> MakeWorker(int64_t index, ps::ClientOptions o = {}) {
    auto w = std::make_unique<Worker>();
    EXPECT_TRUE(RegisterParameterServerClosures(w->registry).ok());
    worker::WorkerEnv env;
    env.worker_index = index;
    env.ps_addresses = addresses_;
    env.ps_options = o;
    w->state = std::make_unique<worker::WorkerState>(env);
    return w;
  }

  // The worker's training dataset, built as CreateResources builds it.
  static Status BuildDataset(Worker& w, const nlohmann::json& args) {
    const worker::DatasetFn* fn = w.registry.FindDataset(kTrainDataset);
    if (!fn) return NotFound("no dataset function");
    ASSIGN_OR_RETURN(data::Dataset ds, (*fn)(w.state->env(), args));
    ASSIGN_OR_RETURN(auto it, ds.MakeIterator());
    w.state->SetResource(kTrainDataset, std::move(it));
    return Status::Ok();
  }

  static StatusOr<worker::ClosureResult> RunClosure(Worker& w, uint64_t closure_id, int64_t steps) {
    const worker::ClosureFn* fn = w.registry.FindClosure(kTrainClosure);
    if (!fn) return NotFound("no closure");
    worker::ClosureContext ctx(closure_id, 0, *w.state);
    return (*fn)(ctx, {{"steps", steps}}, {});
  }

  int64_t AppliedUpdates() {
    int64_t n = 0;
    for (const auto& c : clients_) {
      auto s = c->GetStatus();
      EXPECT_TRUE(s.ok()) << s.status();
      if (s.ok()) n += s->applied_updates;
    }
    return n;
  }

  std::vector<Tensor> PsValues() {
    auto v = store_->Pull(names_);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : std::vector<Tensor>{};
  }

  std::vector<std::unique_ptr<ps::PsServer>> servers_;
  std::vector<std::string> addresses_;
  std::vector<std::shared_ptr<ps::PsClient>> clients_;
  std::unique_ptr<model::Model> m_;
  std::unique_ptr<VariableStore> store_;
  std::vector<std::string> names_;
  std::vector<Tensor> init_;
  int64_t shards_ = 0;  // every variable's shards, over the PS tasks
};

constexpr uint64_t kClosure = (uint64_t{7} << 32) | 1;

// One closure of one step over a batch of the whole training set: every
// shard, on either PS, holds init - lr * (the batch's mean gradient), and
// the closure reports the batch's loss and size.
TEST_F(PsWorkerTest, OneStepLeavesValueMinusLearningRateTimesGradientOnThePs) {
  const nlohmann::json config = SmallJob(kExamples);
  const model::JobConfig job = Parse(config);
  ASSERT_NO_FATAL_FAILURE(PlaceJob(job));
  ASSERT_NO_FATAL_FAILURE(CreateVariables(job));
  ASSERT_GT(shards_, static_cast<int64_t>(names_.size()));  // split over both PS tasks
  auto w = MakeWorker(0);
  ASSERT_TRUE(BuildDataset(*w, DatasetArgs(config, kNumPs, 1)).ok());

  auto r = RunClosure(*w, kClosure, 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->json["steps"].get<int64_t>(), 1);
  EXPECT_EQ(r->json["examples"].get<int64_t>(), kExamples);

  // By hand: the gradient over the 40 rows (the worker's order is its own;
  // the mean is the same).
  auto data = LoadJobData(job, "", *m_);
  ASSERT_TRUE(data.ok()) << data.status();
  auto whole = m_->ComputeGradients(init_, data->train.features, data->train.labels);
  ASSERT_TRUE(whole.ok()) << whole.status();
  std::vector<Tensor> expected;
  for (size_t v = 0; v < init_.size(); ++v) {
    Tensor t = init_[v].Clone();
    for (int64_t i = 0; i < t.size(); ++i) t.data<float>()[i] -= kLr * whole->grads[v].dense.data<float>()[i];
    expected.push_back(std::move(t));
  }
  ASSERT_GT(MaxRelDiff(expected, init_), 1e-3);
  EXPECT_LT(MaxRelDiff(PsValues(), expected), 1e-5);
  EXPECT_EQ(AppliedUpdates(), shards_);  // one update of every shard

  auto stats = BatchStats::FromJson(r->json);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_DOUBLE_EQ(stats->loss.count, kExamples);
  EXPECT_NEAR(stats->loss.Result(), whole->loss, 1e-5);
}

// Each step of a closure is pushed under its own sequence number (all
// land), and a closure run again with the same id (re-run after its worker
// was lost) changes nothing; a new id does.
TEST_F(PsWorkerTest, EveryStepLandsOnceAndAReRunClosureIsNotAppliedAgain) {
  const nlohmann::json config = SmallJob(10);
  const model::JobConfig job = Parse(config);
  ASSERT_NO_FATAL_FAILURE(PlaceJob(job));
  ASSERT_NO_FATAL_FAILURE(CreateVariables(job));
  auto w = MakeWorker(0);
  ASSERT_TRUE(BuildDataset(*w, DatasetArgs(config, kNumPs, 1)).ok());

  auto first = RunClosure(*w, kClosure, 3);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->json["steps"].get<int64_t>(), 3);
  EXPECT_EQ(first->json["examples"].get<int64_t>(), 30);
  EXPECT_EQ(AppliedUpdates(), 3 * shards_);
  const std::vector<Tensor> after_first = PsValues();
  EXPECT_GT(MaxRelDiff(after_first, init_), 1e-3);

  auto again = RunClosure(*w, kClosure, 3);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(AppliedUpdates(), 3 * shards_);
  EXPECT_EQ(MaxRelDiff(PsValues(), after_first), 0);

  auto next = RunClosure(*w, kClosure + 1, 1);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(AppliedUpdates(), 4 * shards_);
  EXPECT_GT(MaxRelDiff(PsValues(), after_first), 1e-4);
}

// Every worker reads every training row once an epoch (a source that is
// one file is not split), in batches of the job's size, each worker in its
// own order; the dataset repeats, so closures never meet its end.
TEST_F(PsWorkerTest, EachWorkersDatasetIsEveryRowOnceAnEpochInItsOwnOrder) {
  const nlohmann::json config = SmallJob(10);
  const model::JobConfig job = Parse(config);
  ASSERT_NO_FATAL_FAILURE(PlaceJob(job));
  auto data = LoadJobData(job, "", *m_);
  ASSERT_TRUE(data.ok()) << data.status();
  Rows all;
  AppendRows(data->train.features, data->train.labels, all);
  std::sort(all.begin(), all.end());

  std::vector<Rows> read(2);
  for (int64_t index = 0; index < 2; ++index) {
    auto w = MakeWorker(index);
    const worker::DatasetFn* fn = w->registry.FindDataset(kTrainDataset);
    ASSERT_NE(fn, nullptr);
    auto ds = (*fn)(w->state->env(), DatasetArgs(config, kNumPs, 2));
    ASSERT_TRUE(ds.ok()) << ds.status();
    auto it = ds->MakeIterator();
    ASSERT_TRUE(it.ok()) << it.status();
    for (int b = 0; b < kExamples / 10 + 1; ++b) {  // an epoch and one batch of the next
      auto e = (*it)->Next();
      ASSERT_TRUE(e.ok()) << e.status();
      ASSERT_TRUE(e->has_value()) << "worker " << index << ": the dataset ended after " << b << " batches";
      const data::Element& batch = **e;
      EXPECT_EQ(batch[0].shape(), (Shape{10, 8}));
      if (b < kExamples / 10) AppendRows(batch[0], batch[1], read[static_cast<size_t>(index)]);
    }
  }
  EXPECT_FALSE(read[0] == read[1]) << "both workers read the rows in the same order";
  for (Rows& r : read) {
    std::sort(r.begin(), r.end());
    EXPECT_TRUE(r == all) << "a worker's epoch is not every training row once";
  }
}

// What fails at the PS, or before any dataset, is the closure's error
// (which the coordinator re-runs or fails the job with), and the worker
// goes on serving.
TEST_F(PsWorkerTest, ErrorsComeBackAsTheClosuresResult) {
  const nlohmann::json config = SmallJob(10);
  const model::JobConfig job = Parse(config);
  ASSERT_NO_FATAL_FAILURE(PlaceJob(job));
  ps::ClientOptions quick;
  quick.timeout = std::chrono::milliseconds(2000);
  quick.retry.max_attempts = 1;
  auto w = MakeWorker(0, quick);

  auto before = RunClosure(*w, kClosure, 1);
  ASSERT_FALSE(before.ok());
  EXPECT_EQ(before.status().code(), Code::kFailedPrecondition);
  EXPECT_THAT(before.status().message(), HasSubstr("no training dataset yet"));

  // The chief has not created the variables: the pull fails naming one.
  ASSERT_TRUE(BuildDataset(*w, DatasetArgs(config, kNumPs, 1)).ok());
  auto missing = RunClosure(*w, kClosure, 1);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound) << missing.status();
  EXPECT_THAT(missing.status().message(), HasSubstr(names_[0]));

  // Created now: the same worker trains.
  ASSERT_NO_FATAL_FAILURE(CreateVariables(job));
  auto ok = RunClosure(*w, kClosure, 1);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(AppliedUpdates(), shards_);

  // A PS gone: the closure fails naming it.
  servers_[1]->Stop(std::chrono::milliseconds(0));
  auto lost = RunClosure(*w, kClosure + 1, 1);
  ASSERT_FALSE(lost.ok());
  EXPECT_EQ(lost.status().code(), Code::kUnavailable) << lost.status();
  EXPECT_THAT(lost.status().message(), HasSubstr(addresses_[1]));
}

}  // namespace
}  // namespace tfjob::strategy::ps_closures_testing

// The parameter-server strategy's chief side (parameter_server.h) driven by
// the training loop against parameter servers and workers (each with the
// functions of ps_closures.h) on loopback ports in this process: training
// moves the variables on the PS tasks and lowers the loss, every step lands
// exactly once (also when a worker is lost holding a closure whose pushes
// had landed, and the closure re-runs on the other worker), and Values()
// and a restarted chief read what the checkpoints hold, also after a PS
// restarted empty.
#include "services/strategy/parameter_server.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/files.h"
#include "services/ps/ps_service.h"
#include "services/rpc/rpc.h"
#include "services/strategy/loop.h"
#include "services/strategy/ps_common.h"
#include "services/strategy/ps_closures.h"
#include "services/strategy/variable_store.h"
#include "services/worker/worker.h"
#include "tests/support/subprocess.h"
#include "tests/support/wait.h"

namespace tfjob::strategy::ps_strategy_testing {
namespace {

using ::testing::HasSubstr;
using namespace ps_detail;  // NOLINT: the strategy's shared pieces under test
namespace t = ::tfjob::testing;

// Holds the first training closure a worker finishes (its pushes landed)
// until released, so the test can lose the worker before it answers.
class Gate {
 public:
  // True for the first caller only.
  bool TakeFirst() { return !taken_.exchange(true); }
  void Hold() {
    std::unique_lock l(mu_);
    held_ = true;
    cv_.wait(l, [&] { return released_; });
  }
  bool held() {
    std::lock_guard l(mu_);
    return held_;
  }
  void Release() {
    {
      std::lock_guard l(mu_);
      released_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::atomic<bool> taken_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false, released_ = false;
};

class PsStrategyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = t::MakeTempDir("ps-strategy-test");
    auto text = ReadFile(t::SourceDir() + "/tests/support/data/synthetic-small.json");
    ASSERT_TRUE(text.ok()) << text.status();
    // 1000 training rows in batches of 50 (20 steps an epoch), Adam.
    nlohmann::json j = nlohmann::json::parse(*text);
    const std::string path = dir_ + "/job.json";
    t::WriteText(path, j.dump());
    auto job = model::ParseJobConfig(j, path);
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = *job;
    auto m = model::Model::Create(job_.model, job_.loss);
    ASSERT_TRUE(m.ok()) << m.status();
    m_ = std::move(m).value();
    options_.partitioner = Partitioner::FixedShards(2);
    options_.device = DeviceChoice::kCpu;
  }
  void TearDown() override {
    gate_.Release();  // a held closure must end before its worker can stop
  }

  // `num_ps` parameter servers (checkpointing into dir_ when `checkpoints`)
  // and `num_workers` workers; worker 1 holds its first closure at gate_
  // when `hold_on_worker_1`.
  void StartCluster(int num_ps, int num_workers, bool checkpoints = false, bool hold_on_worker_1 = false) {
    for (int i = 0; i < num_ps; ++i) {
      ps::PsOptions o;
      if (checkpoints) o.checkpoint_dir = dir_ + "/ckpt";
      o.checkpoint_file = "ps-" + std::to_string(i) + ".ckpt";
      ps_options_.push_back(o);
      auto s = ps::PsServer::Start("127.0.0.1:0", o);
      ASSERT_TRUE(s.ok()) << s.status();
      ps_addresses_.push_back("127.0.0.1:" + std::to_string((*s)->port()));
      ps_.push_back(std::move(s).value());
    }
    for (int i = 0; i < num_workers; ++i) {
      registries_.push_back(std::make_unique<worker::Registry>());
      worker::Registry& r = *registries_.back();
      if (hold_on_worker_1 && i == 1) {
        worker::Registry inner;
        ASSERT_TRUE(RegisterParameterServerClosures(inner).ok());
        ASSERT_TRUE(r.AddDataset(kTrainDataset, *inner.FindDataset(kTrainDataset)).ok());
        worker::ClosureFn train = *inner.FindClosure(kTrainClosure);
        ASSERT_TRUE(r.AddClosure(kTrainClosure,
                                 [train, this](worker::ClosureContext& ctx, const nlohmann::json& a,
                                               const std::vector<Tensor>& in) -> StatusOr<worker::ClosureResult> {
                                   auto result = train(ctx, a, in);
                                   if (result.ok() && gate_.TakeFirst()) gate_.Hold();
                                   return result;
                                 })
                        .ok());
      } else {
        ASSERT_TRUE(RegisterParameterServerClosures(r).ok());
      }
      auto w = worker::WorkerServer::Start("127.0.0.1:0", r, {i, ps_addresses_, {}});
      ASSERT_TRUE(w.ok()) << w.status();
      worker_addresses_.push_back("127.0.0.1:" + std::to_string((*w)->port()));
      workers_.push_back(std::move(w).value());
    }
  }

  // The claimed cluster as fit_ps.cc hands it over (a chief generation of
  // its own each time).
  PsCluster Cluster() {
    PsCluster c;
    c.ps_addresses = ps_addresses_;
    c.worker_addresses = worker_addresses_;
    ps::ClientOptions o;
    o.timeout = std::chrono::milliseconds(10000);
    for (const std::string& a : ps_addresses_) c.clients.push_back(std::make_shared<ps::PsClient>(a, o));
    c.claim.generation = coordinator::NewGeneration();
    c.claim.closure_namespace = 4242;
    c.coordinator.generation = c.claim.generation;
    c.coordinator.closure_namespace = c.claim.closure_namespace;
    c.coordinator.inflight_per_worker = 2;
    c.ps_timeout = std::chrono::milliseconds(10000);
    c.out = &out_;
    return c;
  }

  StatusOr<std::unique_ptr<Strategy>> Make() { return MakeParameterServerStrategy(job_, options_, {}, Cluster(), *m_); }

  LoopOptions Loop(int64_t epochs, const Strategy& s) const {
    LoopOptions lo;
    lo.epochs = epochs;
    lo.steps_per_epoch = 20;
    lo.metric_names = job_.metric_names;
    lo.min_chunk_steps = s.min_chunk_steps();
    lo.checkpoints = options_.checkpoints;
    return lo;
  }

  // Shard updates one step makes: every variable's shards.
  int64_t ShardsPerStep() const {
    auto p = PlaceModel(*m_, static_cast<int64_t>(ps_addresses_.size()), options_.partitioner);
    EXPECT_TRUE(p.ok()) << p.status();
    int64_t n = 0;
    for (const PlacedVariable& v : p->variables()) n += static_cast<int64_t>(v.shards.size());
    return n;
  }

  // What the PS tasks hold now, read with clients of the test's own.
  std::vector<Tensor> PsValues() {
    auto p = PlaceModel(*m_, static_cast<int64_t>(ps_addresses_.size()), options_.partitioner);
    EXPECT_TRUE(p.ok()) << p.status();
    std::vector<std::shared_ptr<ps::PsClient>> clients;
    for (const std::string& a : ps_addresses_) clients.push_back(std::make_shared<ps::PsClient>(a));
    VariableStore store(*p, clients);
    auto v = store.Pull(VariableNames(*m_));
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : std::vector<Tensor>{};
  }

  double EvalLoss(const std::vector<Tensor>& values) {
    auto data = LoadJobData(job_, "", *m_);
    EXPECT_TRUE(data.ok() && data->eval) << data.status();
    auto e = Evaluate(*m_, job_, *data->eval, values);
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? e->second[0].second : 0;
  }

  static bool Equal(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
    if (a.size() != b.size()) return false;
    for (size_t v = 0; v < a.size(); ++v) {
      if (a[v].shape() != b[v].shape()) return false;
      for (int64_t i = 0; i < a[v].size(); ++i) {
        if (a[v].data<float>()[i] != b[v].data<float>()[i]) return false;
      }
    }
    return true;
  }

  std::string dir_;
  model::JobConfig job_;
  std::unique_ptr<model::Model> m_;
  FitOptions options_;
  std::ostringstream out_;
  Gate gate_;
  std::vector<ps::PsOptions> ps_options_;
  std::vector<std::string> ps_addresses_, worker_addresses_;
  std::vector<std::unique_ptr<ps::PsServer>> ps_;
  // Declared before the servers: a registry outlives its worker.
  std::vector<std::unique_ptr<worker::Registry>> registries_;
  std::vector<std::unique_ptr<worker::WorkerServer>> workers_;
};

// 2 PS tasks (every variable in 2 shards) and 2 workers, closures of 2
// steps, 3 epochs: the variables on the PS tasks move and are what Values()
// returns, the loss falls, and every step updated every shard once.
// --ps-closures-per-worker auto: three closures of one step running in the
// whole cluster (two of several steps), spread over the workers, at least
// one each: from two workers on, TensorFlow's one per worker.
TEST(PsClosuresPerWorkerTest, ABudgetForTheClusterSpreadOverItsWorkers) {
  EXPECT_EQ(PsClosuresPerWorker(1, 1), 3);
  EXPECT_EQ(PsClosuresPerWorker(1, 2), 1);
  EXPECT_EQ(PsClosuresPerWorker(1, 3), 1);
  EXPECT_EQ(PsClosuresPerWorker(1, 64), 1);
  EXPECT_EQ(PsClosuresPerWorker(4, 1), 2);
  EXPECT_EQ(PsClosuresPerWorker(4, 2), 1);
  EXPECT_EQ(PsClosuresPerWorker(8, 5), 1);
  EXPECT_EQ(PsClosuresPerWorker(1, 0), 3);  // no worker listed: what one would get
}

TEST_F(PsStrategyTest, TrainsOnTheParameterServersAndEveryStepLandsOnce) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(2, 2));
  options_.steps_per_execution = 2;
  auto s = Make();
  ASSERT_TRUE(s.ok()) << s.status();
  auto summary = RunTrainingLoop(**s, Loop(3, **s));
  ASSERT_TRUE(summary.ok()) << summary.status() << "\n" << out_.str();
  EXPECT_EQ(summary->steps, 60);
  EXPECT_EQ(summary->examples, 60 * 50);
  ASSERT_EQ(summary->history.size(), 3u);
  EXPECT_LT(summary->history.back().values[0].second, summary->history.front().values[0].second);

  auto values = (*s)->Values();
  ASSERT_TRUE(values.ok()) << values.status();
  const std::vector<Tensor> init = m_->InitialValues(static_cast<uint64_t>(job_.seed));
  EXPECT_FALSE(Equal(*values, init));
  EXPECT_TRUE(Equal(*values, PsValues()));
  EXPECT_LT(EvalLoss(*values), EvalLoss(init));

  const nlohmann::json j = (*s)->SummaryJson();
  EXPECT_EQ(j["strategy"], "parameter_server");
  EXPECT_EQ(j["num_ps"], 2);
  EXPECT_EQ(j["num_workers"], 2);
  EXPECT_EQ(j["ps_applied_updates"].get<int64_t>(), 60 * ShardsPerStep());
  EXPECT_EQ(j["closures"]["completed"].get<int64_t>(), 30);
  EXPECT_EQ(j["closures"]["retried"].get<int64_t>(), 0);
  EXPECT_EQ(j["worker_step_seconds"]["steps"].get<int64_t>(), 60);
  EXPECT_THAT(out_.str(), HasSubstr("on 2 parameter servers, 2 workers, partitioner fixed:2"));
}

// Worker 1 finishes a closure (its pushes landed) and is lost before it
// answers: the closure runs again on worker 0 with the same id, the PS
// tasks skip its pushes, and training ends with every step applied once.
TEST_F(PsStrategyTest, AClosureOfALostWorkerRunsElsewhereAndIsAppliedOnce) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 2, false, true));
  auto s = Make();
  ASSERT_TRUE(s.ok()) << s.status();
  StatusOr<FitSummary> summary = Internal("not run");
  std::thread chief([&] { summary = RunTrainingLoop(**s, Loop(1, **s)); });
  const bool held = t::WaitUntil([&] { return gate_.held(); });
  // Stop returns once the held closure does, after the release below.
  std::thread killer([&] {
    if (held) workers_[1]->Stop(std::chrono::milliseconds(0));
  });
  // The worker is gone (its calls cancelled) once it refuses a new one.
  auto stub = proto::Worker::NewStub(rpc::MakeChannel(worker_addresses_[1]));
  const bool gone = held && t::WaitUntil([&] {
                      auto ctx = rpc::Context(std::chrono::milliseconds(500), {});
                      proto::WorkerStatusResponse resp;
                      return !stub->GetStatus(ctx.get(), {}, &resp).ok();
                    });
  gate_.Release();
  killer.join();
  chief.join();
  ASSERT_TRUE(held) << "worker 1 finished no closure";
  ASSERT_TRUE(gone) << "worker 1 kept answering";
  ASSERT_TRUE(summary.ok()) << summary.status() << "\n" << out_.str();
  EXPECT_EQ(summary->steps, 20);
  const nlohmann::json j = (*s)->SummaryJson();
  EXPECT_GE(j["closures"]["worker_failures"].get<int64_t>(), 1);
  EXPECT_GE(j["closures"]["retried"].get<int64_t>(), 1);
  EXPECT_EQ(j["ps_applied_updates"].get<int64_t>(), 20 * ShardsPerStep());
}

// With checkpoints: Values() after a PS restarted empty is what the final
// checkpoint holds (restored onto every PS), and a new chief resumes at the
// checkpointed step with those values.
TEST_F(PsStrategyTest, CheckpointsRestoreARestartedPsAndANewChief) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(2, 1, true));
  options_.checkpoints.dir = dir_ + "/ckpt";
  options_.checkpoints.every_steps = 10;
  auto s = Make();
  ASSERT_TRUE(s.ok()) << s.status();
  auto summary = RunTrainingLoop(**s, Loop(1, **s));
  ASSERT_TRUE(summary.ok()) << summary.status() << "\n" << out_.str();
  auto trained = (*s)->Values();
  ASSERT_TRUE(trained.ok()) << trained.status();
  EXPECT_FALSE(Equal(*trained, m_->InitialValues(static_cast<uint64_t>(job_.seed))));
  EXPECT_THAT(out_.str(), HasSubstr("(step 20, final,"));

  // PS 1 comes back as a new, empty process on its port.
  const int port = ps_[1]->port();
  ps_[1]->Stop(std::chrono::milliseconds(0));
  ps_[1].reset();
  auto again = ps::PsServer::Start("127.0.0.1:" + std::to_string(port), ps_options_[1]);
  ASSERT_TRUE(again.ok()) << again.status();
  ps_[1] = std::move(again).value();

  auto restored = (*s)->Values();
  ASSERT_TRUE(restored.ok()) << restored.status() << "\n" << out_.str();
  EXPECT_TRUE(Equal(*restored, *trained));
  EXPECT_TRUE(Equal(PsValues(), *trained));
  EXPECT_EQ((*s)->SummaryJson()["recovery"]["ps_restarts"].get<int64_t>(), 1);
  EXPECT_THAT(out_.str(), HasSubstr("parameter server 1 restarted"));

  // A new chief on the same cluster starts from the final checkpoint.
  auto next = Make();
  ASSERT_TRUE(next.ok()) << next.status();
  TrainState st;
  ASSERT_TRUE((*next)->Start(st).ok()) << out_.str();
  EXPECT_EQ(st.step, 20);
  auto resumed = (*next)->Values();
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_TRUE(Equal(*resumed, *trained));
}

}  // namespace
}  // namespace tfjob::strategy::ps_strategy_testing

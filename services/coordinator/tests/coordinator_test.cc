// The coordinator against real gRPC workers (and a parameter server) on
// loopback ports, in this process.
#include "services/coordinator/coordinator.h"

#include <array>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "services/ps/ps_client.h"
#include "services/ps/ps_service.h"
#include "services/rpc/rpc.h"
#include "services/worker/worker.h"
#include "tests/support/wait.h"

namespace tfjob::coordinator {
namespace {

using ::testing::HasSubstr;
using worker::ClosureContext;
using worker::ClosureResult;
namespace t = ::tfjob::testing;

struct Probe {
  std::atomic<int> running{0};
  std::atomic<int> max_running{0};
  std::atomic<int> slow_started{0};
  // Ids of the "hold_and_record" closures, in the order they ended.
  std::mutex order_mu;
  std::vector<uint64_t> order;
  // Per-worker datasets built, by worker index.
  std::array<std::atomic<int>, 4> datasets_built{};

  // Closures asked to "hold" wait here until the test releases them.
  void WaitForRelease() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return released; });
  }
  void Release() {
    {
      std::lock_guard g(mu);
      released = true;
    }
    cv.notify_all();
  }

 private:
  std::mutex mu;
  std::condition_variable cv;
  bool released = false;
};

worker::Registry MakeRegistry(Probe& probe) {
  worker::Registry r;
  (void)r.AddClosure(
      "add", [](ClosureContext&, const nlohmann::json& a, const std::vector<Tensor>&) -> StatusOr<ClosureResult> {
        return ClosureResult{a["a"].get<int>() + a["b"].get<int>(), {}};
      });
  (void)r.AddClosure("fail",
                     [](ClosureContext&, const nlohmann::json&, const std::vector<Tensor>&) -> StatusOr<ClosureResult> {
                       return InvalidArgument("bad step");
                     });
  (void)r.AddClosure(
      "slow",
      [&probe](ClosureContext& ctx, const nlohmann::json& a, const std::vector<Tensor>&) -> StatusOr<ClosureResult> {
        int now = ++probe.running;
        int seen = probe.max_running.load();
        while (now > seen && !probe.max_running.compare_exchange_weak(seen, now)) {
        }
        ++probe.slow_started;
        // Taking time is what this closure is for: the sleep is the work.
        std::this_thread::sleep_for(std::chrono::milliseconds(a.value("ms", 50)));
        --probe.running;
        return ClosureResult{ctx.worker_index(), {}};
      });
  // Adds its argument to PS variable "c", then holds until the test releases
  // it, so a test can kill the worker after the update landed but before the
  // reply.
  (void)r.AddClosure(
      "add_to_ps",
      [&probe](ClosureContext& ctx, const nlohmann::json& a, const std::vector<Tensor>&) -> StatusOr<ClosureResult> {
        Tensor v = *Tensor::FromVector({}, std::vector<float>{a["x"].get<float>()});
        ASSIGN_OR_RETURN(int dup, ctx.ps()[0]->Push(ctx.closure_id(), 0, {{"c", ps::Update::Kind::kAssignAdd, v, {}}},
                                                    ctx.generation()));
        if (a.value("hold", false)) probe.WaitForRelease();
        return ClosureResult{{{"worker", ctx.worker_index()}, {"duplicate", dup}}, {}};
      });
  // Holds until the test releases it (a closure that will not end by itself).
  (void)r.AddClosure(
      "hold", [&probe](ClosureContext&, const nlohmann::json&, const std::vector<Tensor>&) -> StatusOr<ClosureResult> {
        ++probe.slow_started;
        probe.WaitForRelease();
        return ClosureResult{nullptr, {}};
      });
  (void)r.AddClosure(
      "hold_and_record",
      [&probe](ClosureContext& ctx, const nlohmann::json&, const std::vector<Tensor>&) -> StatusOr<ClosureResult> {
        ++probe.slow_started;
        probe.WaitForRelease();
        std::lock_guard g(probe.order_mu);
        probe.order.push_back(ctx.closure_id());
        return ClosureResult{nullptr, {}};
      });
  (void)r.AddDataset("unbuildable", [](const worker::WorkerEnv&, const nlohmann::json&) -> StatusOr<data::Dataset> {
    return InvalidArgument("flag --device gpu: no CUDA device is visible");
  });
  (void)r.AddDataset("range",
                     [&probe](const worker::WorkerEnv& env, const nlohmann::json& a) -> StatusOr<data::Dataset> {
                       ++probe.datasets_built.at(static_cast<size_t>(env.worker_index));
                       std::vector<int64_t> v;
                       for (int64_t i = 0; i < a["n"].get<int64_t>(); ++i) v.push_back(env.worker_index * 1000 + i);
                       return data::Dataset::FromTensors({*Tensor::FromVector({static_cast<int64_t>(v.size())}, v)});
                     });
  (void)r.AddClosure(
      "next", [](ClosureContext& ctx, const nlohmann::json&, const std::vector<Tensor>&) -> StatusOr<ClosureResult> {
        ASSIGN_OR_RETURN(auto e, ctx.Next("ds"));
        if (!e) return OutOfRange("dataset exhausted");
        return ClosureResult{(*e)[0].data<int64_t>()[0], {}};
      });
  return r;
}

class CoordinatorTest : public ::testing::Test {
 protected:
  // Held closures must finish before their workers can stop.
  void TearDown() override { probe_.Release(); }
  void StartWorkers(int n, std::vector<std::string> ps = {}) {
    registry_ = MakeRegistry(probe_);
    ps_ = ps;
    for (int i = 0; i < n; ++i) {
      auto w = worker::WorkerServer::Start("127.0.0.1:0", registry_, {i, ps, {}});
      ASSERT_TRUE(w.ok()) << w.status();
      ports_.push_back((*w)->port());
      addresses_.push_back("127.0.0.1:" + std::to_string((*w)->port()));
      workers_.push_back(std::move(w).value());
    }
  }
  // One PS holding the scalar variable "c" = 0, and a client of it.
  void StartPsWithCounter() {
    auto ps = ps::PsServer::Start("127.0.0.1:0");
    ASSERT_TRUE(ps.ok()) << ps.status();
    ps_server_ = std::move(ps).value();
    ps_address_ = "127.0.0.1:" + std::to_string(ps_server_->port());
    ps_client_ = std::make_unique<ps::PsClient>(ps_address_);
    ASSERT_TRUE(ps_client_->CreateVariable("c", *Tensor::FromVector({}, std::vector<float>{0}), std::nullopt).ok());
  }
  void RestartWorker(int i) {
    auto w = worker::WorkerServer::Start("127.0.0.1:" + std::to_string(ports_[i]), registry_, {i, ps_, {}});
    ASSERT_TRUE(w.ok()) << w.status();
    workers_[i] = std::move(w).value();
  }
  Probe probe_;
  std::unique_ptr<ps::PsServer> ps_server_;
  std::string ps_address_;
  std::unique_ptr<ps::PsClient> ps_client_;
  worker::Registry registry_;
  std::vector<std::string> ps_;
  std::vector<int> ports_;
  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<worker::WorkerServer>> workers_;
};

TEST_F(CoordinatorTest, ScheduleFetchJoinDone) {
  StartWorkers(2);
  ClusterCoordinator c(addresses_);
  std::vector<RemoteValue> values;
  for (int i = 0; i < 100; ++i) values.push_back(c.Schedule("add", {{"a", i}, {"b", 1000}}));
  ASSERT_TRUE(c.Join().ok());
  EXPECT_TRUE(c.Done());
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(values[i].ready());
    EXPECT_EQ(values[i].Fetch()->json.get<int>(), i + 1000);
  }
  EXPECT_EQ(c.stats().completed, 100);
}

TEST_F(CoordinatorTest, SeveralClosuresInFlightPerWorker) {
  StartWorkers(2);
  Options o;
  o.inflight_per_worker = 3;
  ClusterCoordinator c(addresses_, o);
  for (int i = 0; i < 24; ++i) c.Schedule("slow", {{"ms", 100}});
  ASSERT_TRUE(c.Join().ok());
  EXPECT_GT(probe_.max_running.load(), 2);  // TF would allow at most 2 (one per worker)
  EXPECT_LE(probe_.max_running.load(), 6);
}

// What a worker says of its closures: running, and sent but waiting.
proto::WorkerStatusResponse WorkerStatus(const std::string& address) {
  auto stub = proto::Worker::NewStub(rpc::MakeChannel(address));
  auto ctx = rpc::Context(std::chrono::seconds(10), {});
  proto::WorkerStatusResponse resp;
  EXPECT_TRUE(stub->GetStatus(ctx.get(), {}, &resp).ok());
  return resp;
}

// The chief sends a worker one closure more than it may run at once: that
// one waits on the worker, and starts when a running one ends.
TEST_F(CoordinatorTest, AWorkerRunsAtMostTheChiefsLimitAndTheClosureSentAheadWaitsThere) {
  StartWorkers(1);
  Options o;
  o.inflight_per_worker = 2;
  o.queued_per_worker = 1;
  ClusterCoordinator c(addresses_, o);
  for (int i = 0; i < 5; ++i) c.Schedule("hold");
  ASSERT_TRUE(t::WaitUntil([&] {
    const auto s = WorkerStatus(addresses_[0]);
    return s.closures_running() == 2 && s.closures_waiting() == 1;
  }));
  EXPECT_EQ(probe_.slow_started.load(), 2);
  probe_.Release();
  ASSERT_TRUE(c.Join().ok());
  EXPECT_EQ(probe_.slow_started.load(), 5);
  const auto s = WorkerStatus(addresses_[0]);
  EXPECT_EQ(s.closures_running(), 0);
  EXPECT_EQ(s.closures_waiting(), 0);
  EXPECT_EQ(s.closures_run(), 5);
  EXPECT_GE(c.stats().sent_ahead, 1);
}

// Closures waiting on a worker start in the order of their ids (the order
// the chief scheduled them), not the order their calls arrived in.
TEST_F(CoordinatorTest, ClosuresWaitingOnAWorkerStartInTheirChiefsOrder) {
  StartWorkers(1);
  auto stub = proto::Worker::NewStub(rpc::MakeChannel(addresses_[0]));
  auto call = [&](uint64_t id) {
    return std::thread([&stub, id] {
      proto::RunClosureRequest req;
      req.set_closure_id(id);
      req.set_function("hold_and_record");
      req.set_max_running(1);
      proto::RunClosureResponse resp;
      auto ctx = rpc::Context(std::chrono::seconds(60), {});
      EXPECT_TRUE(stub->RunClosure(ctx.get(), req, &resp).ok());
      EXPECT_EQ(resp.error_code(), 0) << resp.error_message();
    });
  };
  std::thread first = call(10);
  ASSERT_TRUE(t::WaitUntil([&] { return probe_.slow_started >= 1; }));
  std::thread later = call(30);
  ASSERT_TRUE(t::WaitUntil([&] { return WorkerStatus(addresses_[0]).closures_waiting() == 1; }));
  std::thread earlier = call(20);
  ASSERT_TRUE(t::WaitUntil([&] { return WorkerStatus(addresses_[0]).closures_waiting() == 2; }));
  probe_.Release();
  first.join();
  later.join();
  earlier.join();
  std::lock_guard g(probe_.order_mu);
  EXPECT_EQ(probe_.order, (std::vector<uint64_t>{10, 20, 30}));
}

// Two calls sent back to back to an idle worker can reach its threads in
// either order: the second names the first (queued_behind), and does not
// start until the first has arrived, so the worker takes its batches in the
// chief's order. A predecessor that never comes (cancelled) holds it only
// for a bounded wait.
TEST_F(CoordinatorTest, AClosureSentBehindAnotherWaitsForItToArrive) {
  StartWorkers(1);
  probe_.Release();  // nothing holds: the order they start in is the order they end in
  auto stub = proto::Worker::NewStub(rpc::MakeChannel(addresses_[0]));
  auto call = [&](uint64_t id, uint64_t behind) {
    return std::thread([&stub, id, behind] {
      proto::RunClosureRequest req;
      req.set_closure_id(id);
      req.set_function("hold_and_record");
      req.set_max_running(1);
      req.set_queued_behind(behind);
      proto::RunClosureResponse resp;
      auto ctx = rpc::Context(std::chrono::seconds(60), {});
      EXPECT_TRUE(stub->RunClosure(ctx.get(), req, &resp).ok());
      EXPECT_EQ(resp.error_code(), 0) << resp.error_message();
    });
  };
  std::thread second = call(21, 20);
  ASSERT_TRUE(t::WaitUntil([&] { return WorkerStatus(addresses_[0]).closures_waiting() == 1; }));
  EXPECT_EQ(probe_.slow_started.load(), 0);
  std::thread first = call(20, 0);
  first.join();
  second.join();
  {
    std::lock_guard g(probe_.order_mu);
    EXPECT_EQ(probe_.order, (std::vector<uint64_t>{20, 21}));
  }
  // Behind a closure that never arrives: it still runs, after the wait.
  std::thread orphan = call(23, 22);
  orphan.join();
  std::lock_guard g(probe_.order_mu);
  EXPECT_EQ(probe_.order, (std::vector<uint64_t>{20, 21, 23}));
}

// A closure goes ahead to a busy worker only when no worker could start it
// now: with one of two workers busy, the next goes to the other.
TEST_F(CoordinatorTest, AClosureGoesToAnIdleWorkerBeforeAheadToABusyOne) {
  StartWorkers(2);
  Options o;
  o.inflight_per_worker = 1;
  o.queued_per_worker = 1;
  ClusterCoordinator c(addresses_, o);
  RemoteValue first = c.Schedule("hold");
  RemoteValue second = c.Schedule("hold");
  // Each worker runs one (the second waits for worker 1 to connect rather
  // than behind the first on worker 0).
  ASSERT_TRUE(t::WaitUntil([&] { return probe_.slow_started >= 2; }));
  EXPECT_EQ(WorkerStatus(addresses_[0]).closures_running(), 1);
  EXPECT_EQ(WorkerStatus(addresses_[1]).closures_running(), 1);
  // Both busy: the third goes ahead to one of them, and waits there.
  RemoteValue third = c.Schedule("hold");
  ASSERT_TRUE(t::WaitUntil([&] {
    return WorkerStatus(addresses_[0]).closures_waiting() + WorkerStatus(addresses_[1]).closures_waiting() == 1;
  }));
  EXPECT_EQ(c.stats().sent_ahead, 1);
  probe_.Release();
  ASSERT_TRUE(c.Join().ok());
}

// A closure sent ahead waits on the worker, and its deadline counts the
// wait: once a call took over a quarter of the deadline, the next closures
// go only as running ones end, and none runs out of time waiting.
TEST_F(CoordinatorTest, NoClosureIsSentAheadOnceACallTookAQuarterOfTheDeadline) {
  StartWorkers(1);
  Options o;
  o.rpc_timeout = std::chrono::milliseconds(2000);
  o.inflight_per_worker = 1;
  o.queued_per_worker = 1;
  ClusterCoordinator c(addresses_, o);
  ASSERT_TRUE(c.Schedule("slow", {{"ms", 600}}).Wait().ok());
  EXPECT_EQ(c.stats().sent_ahead, 0);  // nothing else was queued
  for (int i = 0; i < 3; ++i) c.Schedule("slow", {{"ms", 600}});
  ASSERT_TRUE(c.Join().ok());
  EXPECT_EQ(c.stats().sent_ahead, 0);
  EXPECT_EQ(c.stats().retried, 0);
  EXPECT_EQ(probe_.max_running.load(), 1);
}

// A closure still waiting on the worker when its chief aborts never starts:
// after Join, no closure of the chief's runs that was not running already.
TEST_F(CoordinatorTest, AClosureWaitingOnAWorkerWhenTheChiefAbortsNeverStarts) {
  StartWorkers(1);
  Options o;
  o.inflight_per_worker = 1;
  o.queued_per_worker = 1;
  ClusterCoordinator c(addresses_, o);
  RemoteValue running = c.Schedule("hold");
  RemoteValue waiting = c.Schedule("hold");
  ASSERT_TRUE(t::WaitUntil([&] {
    const auto s = WorkerStatus(addresses_[0]);
    return s.closures_running() == 1 && s.closures_waiting() == 1;
  }));
  c.Abort(Aborted("the job is over"));
  EXPECT_EQ(c.Join().code(), Code::kAborted);
  EXPECT_EQ(waiting.Wait().code(), Code::kAborted);
  ASSERT_TRUE(t::WaitUntil([&] { return WorkerStatus(addresses_[0]).closures_waiting() == 0; }));
  probe_.Release();
  ASSERT_TRUE(t::WaitUntil([&] { return WorkerStatus(addresses_[0]).closures_running() == 0; }));
  EXPECT_EQ(probe_.slow_started.load(), 1);
  EXPECT_EQ(WorkerStatus(addresses_[0]).closures_run(), 1);
}

TEST_F(CoordinatorTest, FirstErrorIsRaisedOnceAndQueuedClosuresAreCancelled) {
  StartWorkers(1);
  Options o;
  o.inflight_per_worker = 1;
  ClusterCoordinator c(addresses_, o);
  // The worker holds its first closure until all are queued, so the error
  // comes while most still wait (a scheduling thread slower than the
  // failure's round trip would otherwise queue them after it).
  c.Schedule("hold");
  RemoteValue bad = c.Schedule("fail");
  std::vector<RemoteValue> later;
  for (int i = 0; i < 20; ++i) later.push_back(c.Schedule("slow", {{"ms", 20}}));
  probe_.Release();
  Status s = c.Join();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("closure fail on worker"));
  EXPECT_THAT(s.message(), HasSubstr("bad step"));
  EXPECT_EQ(bad.Wait().code(), Code::kInvalidArgument);
  int cancelled = 0;
  for (auto& v : later) cancelled += v.Wait().code() == Code::kCancelled;
  EXPECT_GT(cancelled, 0);
  EXPECT_TRUE(c.Done());       // nothing still running after the error
  EXPECT_TRUE(c.Join().ok());  // raised once
  EXPECT_EQ(c.Schedule("add", {{"a", 1}, {"b", 2}}).Fetch()->json.get<int>(), 3);  // usable again
}

// Join(values) returns once those closures are done, while a closure
// scheduled after them still holds its worker; a later Join(values) of that
// one, or Join(), waits for it.
TEST_F(CoordinatorTest, JoinOfSomeValuesLeavesTheOthersRunning) {
  StartWorkers(1);
  ClusterCoordinator c(addresses_);
  std::vector<RemoteValue> first;
  for (int i = 0; i < 4; ++i) first.push_back(c.Schedule("add", {{"a", i}, {"b", 10}}));
  RemoteValue held = c.Schedule("hold");
  ASSERT_TRUE(c.Join(first).ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(first[i].Fetch()->json.get<int>(), i + 10);
  EXPECT_FALSE(held.ready());
  EXPECT_FALSE(c.Done());
  probe_.Release();
  ASSERT_TRUE(c.Join({held}).ok());
  EXPECT_TRUE(held.ready());
  EXPECT_TRUE(c.Join().ok());
  EXPECT_TRUE(c.Done());
}

// A summary written right after Join(values) counts every closure joined
// (a fit's summary once read 20 of its 21).
TEST_F(CoordinatorTest, JoinOfSomeValuesSeesThemInTheStats) {
  StartWorkers(2);
  ClusterCoordinator c(addresses_);
  for (int i = 0; i < 300; ++i) {
    RemoteValue v = c.Schedule("add", {{"a", i}, {"b", 1}});
    ASSERT_TRUE(c.Join({v}).ok());
    ASSERT_EQ(c.stats().completed, i + 1) << "closure " << i;
  }
}

// When a closure fails, Join(values) is Join: the first error once, every
// closure ended (those not asked for too), the queue cancelled.
TEST_F(CoordinatorTest, JoinOfSomeValuesRaisesAnyFailureLikeJoin) {
  StartWorkers(1);
  Options o;
  o.inflight_per_worker = 1;
  ClusterCoordinator c(addresses_, o);
  c.Schedule("hold");  // until all are queued, as in the test above
  RemoteValue ok = c.Schedule("add", {{"a", 1}, {"b", 2}});
  RemoteValue bad = c.Schedule("fail");
  std::vector<RemoteValue> later;
  for (int i = 0; i < 10; ++i) later.push_back(c.Schedule("slow", {{"ms", 20}}));
  probe_.Release();
  Status s = c.Join({ok, bad});
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("bad step"));
  EXPECT_TRUE(c.Done());
  int cancelled = 0;
  for (auto& v : later) cancelled += v.Wait().code() == Code::kCancelled;
  EXPECT_GT(cancelled, 0);
  EXPECT_TRUE(c.Join().ok());  // raised once
}

// A closure longer than the RPC deadline is retried as a new attempt, on a
// worker that is not counted as failed (it still answers its probe), and
// fails the job after the attempt cap with the deadline as its error.
TEST_F(CoordinatorTest, AClosurePastItsDeadlineIsCappedNotRequeuedForever) {
  StartWorkers(1);
  Options o;
  o.rpc_timeout = std::chrono::milliseconds(100);
  o.max_attempts = 3;
  // A worker runs an attempt the chief gave up on to its end: room for all
  // three at once, and none sent ahead to wait there (it could meet its
  // deadline waiting, and never start).
  o.inflight_per_worker = 3;
  o.queued_per_worker = 0;
  ClusterCoordinator c(addresses_, o);
  RemoteValue v = c.Schedule("slow", {{"ms", 400}});
  Status s = c.Join();
  EXPECT_EQ(s.code(), Code::kDeadlineExceeded) << s;
  EXPECT_THAT(s.message(), HasSubstr("failed 3 attempts; the limit is 3"));
  EXPECT_EQ(v.Fetch().status().code(), Code::kDeadlineExceeded);
  EXPECT_EQ(c.stats().worker_failures, 0);
  EXPECT_EQ(c.stats().retried, 2);
  EXPECT_EQ(probe_.slow_started.load(), 3);
}

TEST_F(CoordinatorTest, UnknownClosureIsAnError) {
  StartWorkers(1);
  ClusterCoordinator c(addresses_);
  auto v = c.Schedule("nope");
  EXPECT_EQ(v.Wait().code(), Code::kNotFound);
  EXPECT_EQ(c.Join().code(), Code::kNotFound);
}

TEST_F(CoordinatorTest, PerWorkerDatasets) {
  StartWorkers(2);
  ClusterCoordinator c(addresses_);
  ASSERT_TRUE(c.CreatePerWorkerDataset("range", {{"n", 50}}, "ds").ok());
  std::vector<RemoteValue> v;
  for (int i = 0; i < 40; ++i) v.push_back(c.Schedule("next"));
  ASSERT_TRUE(c.Join().ok());
  std::set<int64_t> seen;
  for (auto& r : v) EXPECT_TRUE(seen.insert(r.Fetch()->json.get<int64_t>()).second);  // each element once
}

TEST_F(CoordinatorTest, FailedWorkersClosuresRunElsewhereAndItsDatasetIsRebuilt) {
  StartWorkers(2);
  Options o;
  o.inflight_per_worker = 2;
  ClusterCoordinator c(addresses_, o);
  ASSERT_TRUE(c.CreatePerWorkerDataset("range", {{"n", 1000}}, "ds").ok());
  std::vector<RemoteValue> v;
  for (int i = 0; i < 40; ++i) v.push_back(c.Schedule("slow", {{"ms", 30}}));
  ASSERT_TRUE(t::WaitUntil([&] { return probe_.slow_started >= 6; })) << "closures did not start";
  workers_[1]->Stop(std::chrono::milliseconds(0));  // a crash: in-flight closures fail over
  ASSERT_TRUE(c.Join().ok());
  for (auto& r : v) EXPECT_TRUE(r.Wait().ok());
  EXPECT_GE(c.stats().worker_failures, 1);
  // The worker comes back as a new process: the coordinator reconnects and
  // rebuilds its dataset before giving it work.
  const int built = probe_.datasets_built[1];
  ASSERT_GE(built, 1);
  RestartWorker(1);
  ASSERT_TRUE(t::WaitUntil([&] { return probe_.datasets_built[1] > built; })) << "worker 1's dataset was not rebuilt";
  std::set<int64_t> from;
  for (int round = 0; round < 100 && from.size() < 2; ++round) {
    std::vector<RemoteValue> n;
    for (int i = 0; i < 8; ++i) n.push_back(c.Schedule("next"));
    ASSERT_TRUE(c.Join().ok());
    for (auto& r : n) from.insert(r.Fetch()->json.get<int64_t>() / 1000);
  }
  EXPECT_EQ(from, (std::set<int64_t>{0, 1}));
}

TEST_F(CoordinatorTest, ReRunClosureIsAppliedExactlyOnceOnThePs) {
  ASSERT_NO_FATAL_FAILURE(StartPsWithCounter());
  ps::PsClient& pc = *ps_client_;
  StartWorkers(2, {ps_address_});
  Options o;
  o.inflight_per_worker = 1;
  ClusterCoordinator c(addresses_, o);
  // Both workers take one closure each; worker 1's update lands, then the
  // worker dies before replying, so the closure re-runs on worker 0.
  RemoteValue a = c.Schedule("add_to_ps", {{"x", 1.0}, {"hold", true}});
  RemoteValue b = c.Schedule("add_to_ps", {{"x", 10.0}, {"hold", true}});
  const bool landed = t::WaitUntil([&] {
    auto s = pc.GetStatus();
    return s.ok() && s->applied_updates >= 2;
  });
  // Stop returns once the held closure does, after the release below.
  std::thread killer([&] { workers_[1]->Stop(std::chrono::milliseconds(0)); });
  const bool requeued = landed && t::WaitUntil([&] { return c.stats().retried >= 1; });
  probe_.Release();
  killer.join();
  ASSERT_TRUE(landed) << "both closures' updates should land before the kill";
  ASSERT_TRUE(requeued) << "the killed worker's closure was not put back on the queue";
  ASSERT_TRUE(c.Join().ok());
  EXPECT_FLOAT_EQ((*pc.Pull({"c"}))[0].data<float>()[0], 11.f);  // not 12 or 21
  EXPECT_EQ(c.stats().retried, 1) << "one closure lost its worker, once";
  int duplicates = a.Fetch()->json["duplicate"].get<int>() + b.Fetch()->json["duplicate"].get<int>();
  EXPECT_EQ(duplicates, 1);  // the re-run's push was recognised and skipped
}

// SIGTERM (Options::stop) drains: the queue is cancelled, the closures in
// flight finish whole, and Join says the run was stopped. Every closure
// either ran completely or not at all, so a checkpoint afterwards is exact.
TEST_F(CoordinatorTest, AStopDrainsClosuresInFlightWholeAndCancelsTheQueue) {
  StartWorkers(1);
  std::atomic<bool> stop{false};
  Options o;
  o.inflight_per_worker = 2;
  o.stop = &stop;
  ClusterCoordinator c(addresses_, o);
  std::vector<RemoteValue> v;
  for (int i = 0; i < 20; ++i) v.push_back(c.Schedule("slow", {{"ms", 150}}));
  ASSERT_TRUE(t::WaitUntil([&] { return probe_.slow_started >= 2; }));
  stop = true;
  Status s = c.Join();
  EXPECT_EQ(s.code(), Code::kCancelled) << s;
  EXPECT_THAT(s.message(), HasSubstr("stopped by a signal"));
  int finished = 0, cancelled = 0;
  for (auto& r : v) {
    const Status w = r.Wait();
    finished += w.ok();
    cancelled += w.code() == Code::kCancelled;
  }
  EXPECT_EQ(finished + cancelled, 20);
  EXPECT_EQ(finished, probe_.slow_started.load()) << "a closure that started was cut off";
  EXPECT_GT(cancelled, 0);
  // No more work after a stop.
  EXPECT_EQ(c.Schedule("add", {{"a", 1}, {"b", 2}}).Wait().code(), Code::kCancelled);
}

// A worker that comes up only after the dataset was asked for, and cannot
// build it: the error comes back from CreatePerWorkerDataset at once (it is
// the job's, not a lost worker's), instead of a wait for the connect timeout.
TEST_F(CoordinatorTest, AWorkerThatCannotBuildItsDatasetFailsTheRequestWhenItConnects) {
  StartWorkers(1);
  workers_[0]->Stop(std::chrono::milliseconds(0));  // not up yet
  Options o;
  o.connect_timeout = std::chrono::seconds(120);
  ClusterCoordinator c(addresses_, o);
  Status created = Internal("not returned");
  std::thread asking([&] { created = c.CreatePerWorkerDataset("unbuildable", {}, "ds"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the request waits for the worker
  RestartWorker(0);
  asking.join();
  EXPECT_EQ(created.code(), Code::kInvalidArgument) << created;
  EXPECT_THAT(created.message(), HasSubstr("no CUDA device is visible"));
  EXPECT_EQ(c.Join().code(), Code::kInvalidArgument);
}

// Abort does not wait for closures in flight: their calls are cancelled.
TEST_F(CoordinatorTest, AbortCancelsCallsInFlight) {
  StartWorkers(1);
  ClusterCoordinator c(addresses_);
  RemoteValue held = c.Schedule("hold");
  ASSERT_TRUE(t::WaitUntil([&] { return probe_.slow_started >= 1; }));
  c.Abort(Aborted("the job is over"));
  EXPECT_EQ(c.Join().code(), Code::kAborted);
  EXPECT_EQ(held.Wait().code(), Code::kAborted);
}

// A restarted chief with the job's closure namespace re-issues the same ids
// for the same closures: what its predecessor applied is not applied again.
// The predecessor's requests are refused by the worker once the new chief
// has spoken to it.
TEST_F(CoordinatorTest, ARestartedChiefReissuesTheSameIdsAndIsAppliedOnce) {
  ASSERT_NO_FATAL_FAILURE(StartPsWithCounter());
  ps::PsClient& pc = *ps_client_;
  StartWorkers(2, {ps_address_});
  Options first;
  first.generation = 1000;
  first.closure_namespace = 77;
  ClusterCoordinator old_chief(addresses_, first);
  ASSERT_TRUE(pc.Fence(1000, 77).ok());
  for (double x : {1.0, 2.0, 3.0}) old_chief.Schedule("add_to_ps", {{"x", x}});
  ASSERT_TRUE(old_chief.Join().ok());

  Options second = first;
  second.generation = 2000;
  ASSERT_EQ(pc.Fence(2000, 99)->closure_namespace, 77u);  // the job's namespace
  ClusterCoordinator new_chief(addresses_, second);
  std::vector<RemoteValue> again;
  for (double x : {1.0, 2.0, 3.0}) again.push_back(new_chief.Schedule("add_to_ps", {{"x", x}}));
  ASSERT_TRUE(new_chief.Join().ok());
  EXPECT_FLOAT_EQ((*pc.Pull({"c"}))[0].data<float>()[0], 6.f);
  int duplicates = 0;
  for (auto& r : again) duplicates += r.Fetch()->json["duplicate"].get<int>();
  EXPECT_EQ(duplicates, 3);
  // The old chief is fenced off at the workers as well, once the new one has
  // reached each of them: building its per-worker datasets does, as fit's
  // parameter-server strategy does at its start (the three closures above
  // may all have gone to one worker, the other not reached yet).
  ASSERT_TRUE(new_chief.CreatePerWorkerDataset("range", {{"n", 10}}, "ds").ok());
  old_chief.Schedule("add", {{"a", 1}, {"b", 2}});
  Status refused = old_chief.Join();
  EXPECT_EQ(refused.code(), Code::kFailedPrecondition) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("has been replaced by generation 2000"));
}

}  // namespace
}  // namespace tfjob::coordinator

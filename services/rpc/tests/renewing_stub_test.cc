// rpc::RenewingStub: which failures make a new channel, and how often.
// Real channels where it matters: a listener that never answers, a slow
// server.
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "proto/worker.grpc.pb.h"
#include "services/rpc/rpc.h"
#include "tests/support/silent_listener.h"

namespace tfjob::rpc {
namespace {

using WorkerStub = RenewingStub<proto::Worker>;
constexpr std::chrono::milliseconds kNoWait{0};
constexpr std::chrono::hours kNever{1};

const grpc::Status kUnavailable(grpc::StatusCode::UNAVAILABLE, "DNS resolution failed");

TEST(RenewingStubTest, AnUnavailableCallMakesANewChannel) {
  WorkerStub stub("no-such-task.invalid:2222", {}, kNoWait);
  const auto first = stub.Get();
  EXPECT_EQ(stub.Get(), first);  // the same until a call fails
  stub.Observe(first, kUnavailable);
  const auto second = stub.Get();
  EXPECT_NE(second, first);
}

TEST(RenewingStubTest, OtherOutcomesKeepTheChannel) {
  WorkerStub stub("no-such-task.invalid:2222", {}, kNoWait);
  const auto first = stub.Get();
  for (auto code : {grpc::StatusCode::OK, grpc::StatusCode::CANCELLED, grpc::StatusCode::FAILED_PRECONDITION,
                    grpc::StatusCode::UNAUTHENTICATED}) {
    EXPECT_FALSE(stub.Observe(first, grpc::Status(code, "")));
    EXPECT_EQ(stub.Get(), first) << "code " << code;
  }
}

grpc::Status GetStatusWithin(const std::shared_ptr<WorkerStub::Stub>& stub, std::chrono::milliseconds timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  proto::WorkerStatusRequest req;
  proto::WorkerStatusResponse resp;
  return stub->GetStatus(&ctx, req, &resp);
}

TEST(RenewingStubTest, ADeadlineBeforeTheChannelConnectedMakesANewOne) {
  testing::SilentListener silent;
  WorkerStub stub(silent.address(), {}, kNoWait);
  const auto first = stub.Get();
  const grpc::Status st = GetStatusWithin(first, std::chrono::milliseconds(300));
  ASSERT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << st.error_message();
  EXPECT_TRUE(stub.Observe(first, st));  // never reached the task
  EXPECT_NE(stub.Get(), first);
}

TEST(RenewingStubTest, ADeadlineBeforeTheChannelConnectedRenewsAtMostEveryFiveIntervals) {
  testing::SilentListener silent;
  WorkerStub stub(silent.address(), {}, std::chrono::milliseconds(400));
  const auto first = stub.Get();
  const grpc::Status st = GetStatusWithin(first, std::chrono::milliseconds(500));
  ASSERT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << st.error_message();
  EXPECT_TRUE(stub.Observe(first, st));
  EXPECT_EQ(stub.Get(), first);  // made 0.5 s ago, less than 5 x 0.4 s: a slow connection gets its time
}

// A server that answers GetStatus only after `delay`: its channel connects,
// and a call that runs out of time there keeps it.
class SlowWorker final : public proto::Worker::Service {
 public:
  explicit SlowWorker(std::chrono::milliseconds delay) : delay_(delay) {}
  grpc::Status GetStatus(grpc::ServerContext*, const proto::WorkerStatusRequest*,
                         proto::WorkerStatusResponse*) override {
    std::this_thread::sleep_for(delay_);
    return grpc::Status::OK;
  }

 private:
  std::chrono::milliseconds delay_;
};

TEST(RenewingStubTest, ADeadlineOnAConnectedChannelKeepsIt) {
  SlowWorker slow(std::chrono::milliseconds(1500));
  int port = 0;
  auto server = StartServer("127.0.0.1:0", {&slow}, &port);
  ASSERT_TRUE(server.ok()) << server.status();
  WorkerStub stub("127.0.0.1:" + std::to_string(port), {}, kNoWait);
  const auto first = stub.Get();
  const grpc::Status st = GetStatusWithin(first, std::chrono::milliseconds(500));
  ASSERT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << st.error_message();
  EXPECT_FALSE(stub.Observe(first, st));  // it reached the server, which is slow
  EXPECT_EQ(stub.Get(), first);
  (*server)->Shutdown(std::chrono::system_clock::now());
}

TEST(RenewingStubTest, ConcurrentFailuresOfOneChannelRenewItOnce) {
  WorkerStub stub("no-such-task.invalid:2222", {}, kNoWait);
  const auto first = stub.Get();
  stub.Observe(first, kUnavailable);
  const auto second = stub.Get();
  stub.Observe(first, kUnavailable);  // a caller that still held the first one
  EXPECT_EQ(stub.Get(), second);
}

TEST(RenewingStubTest, RenewalsWaitTheMinimumInterval) {
  WorkerStub stub("no-such-task.invalid:2222", {}, kNever);
  const auto first = stub.Get();
  stub.Observe(first, kUnavailable);
  EXPECT_EQ(stub.Get(), first);  // made less than an hour ago
}

}  // namespace
}  // namespace tfjob::rpc

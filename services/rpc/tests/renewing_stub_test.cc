// rpc::RenewingStub: which failures make a new channel, and how often.
#include <chrono>
#include <memory>

#include <gtest/gtest.h>

#include "proto/worker.grpc.pb.h"
#include "services/rpc/rpc.h"

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
  for (auto code : {grpc::StatusCode::OK, grpc::StatusCode::DEADLINE_EXCEEDED, grpc::StatusCode::CANCELLED,
                    grpc::StatusCode::FAILED_PRECONDITION, grpc::StatusCode::UNAUTHENTICATED}) {
    stub.Observe(first, grpc::Status(code, ""));
    EXPECT_EQ(stub.Get(), first) << "code " << code;
  }
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

// rpc::StartServer on a listening socket handed over as "fd:N" (what a task
// gets from `tfjob-runtime local` or `tfjob run`): calls arrive through the
// accept loop, many at once and from several channels; shutting down stops
// accepting; a descriptor that is not a listening socket is refused.
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "proto/worker.grpc.pb.h"
#include "services/base/ports.h"
#include "services/rpc/rpc.h"
#include "services/worker/worker.h"

namespace tfjob::rpc {
namespace {

using ::testing::HasSubstr;

grpc::Status GetStatus(const std::string& address, proto::WorkerStatusResponse* resp) {
  auto stub = proto::Worker::NewStub(MakeChannel(address));
  auto ctx = Context(std::chrono::milliseconds(10000), {});
  return stub->GetStatus(ctx.get(), proto::WorkerStatusRequest(), resp);
}

TEST(ServerOnInheritedSocket, ServesCallsFromManyChannelsThenStops) {
  auto socket = base::ListeningSocket::Listen("127.0.0.1", 0);
  ASSERT_TRUE(socket.ok()) << socket.status();
  const int port = socket->port();
  const std::string address = "127.0.0.1:" + std::to_string(port);
  worker::Registry registry;
  auto server = worker::WorkerServer::Start("fd:" + std::to_string(socket->Release()), registry, {});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->port(), port);

  // Calls from eight threads at once, each on its own stub: the connections
  // come through the accept loop.
  std::atomic<int> ok{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 8; ++c) {
    callers.emplace_back([&] {
      for (int i = 0; i < 5; ++i) {
        proto::WorkerStatusResponse resp;
        if (GetStatus(address, &resp).ok() && resp.incarnation() != 0) ++ok;
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(ok.load(), 40);

  // Stopped: the socket is closed, so a new connection is refused.
  (*server)->Stop(std::chrono::milliseconds(0));
  proto::WorkerStatusResponse resp;
  auto stub = proto::Worker::NewStub(MakeChannel(address));
  auto ctx = Context(std::chrono::milliseconds(500), {});
  EXPECT_FALSE(stub->GetStatus(ctx.get(), proto::WorkerStatusRequest(), &resp).ok());
}

TEST(ServerOnInheritedSocket, WhatIsNotAListeningSocketIsRefused) {
  worker::Registry registry;
  for (const std::string bad : {"fd:", "fd:x", "fd:-1", "fd:99999"}) {
    auto s = worker::WorkerServer::Start(bad, registry, {});
    EXPECT_EQ(s.status().code(), Code::kInvalidArgument) << bad;
    EXPECT_THAT(s.status().message(), HasSubstr("is not a listening socket")) << bad;
  }
  // A socket that is bound but not listening.
  const int unlistened = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  auto s = worker::WorkerServer::Start("fd:" + std::to_string(unlistened), registry, {});
  EXPECT_EQ(s.status().code(), Code::kInvalidArgument);
  close(unlistened);
}

}  // namespace
}  // namespace tfjob::rpc

// Task-to-task authentication: every runtime RPC, called without the job's
// token and with a wrong one, is UNAUTHENTICATED and changes nothing; with
// the token it works. The collective group refuses a member without it. And
// the real binary, started with a token, refuses a caller without one while
// a job run by the launcher (which makes a token per run) trains.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "proto/ps.grpc.pb.h"
#include "proto/worker.grpc.pb.h"
#include "services/collective/group.h"
#include "services/ps/ps_client.h"
#include "services/ps/ps_service.h"
#include "services/rpc/auth.h"
#include "services/rpc/rpc.h"
#include "services/worker/worker.h"
#include "services/runtime/tests/auth_support.h"
#include "tests/support/subprocess.h"
#include "services/collective/tests/local_members.h"

namespace tfjob {
namespace {

namespace t = ::tfjob::testing;
using ::testing::HasSubstr;

const std::string& kToken = t::kJobToken;

// Calls as an outsider would: no token, or a wrong one.
std::vector<rpc::Credentials> Intruders() {
  return {rpc::Credentials{}, rpc::Credentials{"fedcba9876543210fedcba9876543210", nullptr}};
}

template <typename Stub, typename Req, typename Resp>
grpc::Status Call(Stub& stub, grpc::Status (Stub::*method)(grpc::ClientContext*, const Req&, Resp*), const Req& req,
                  const rpc::Credentials& creds) {
  auto ctx = rpc::Context(std::chrono::milliseconds(5000), creds);
  Resp resp;
  return (stub.*method)(ctx.get(), req, &resp);
}

TEST(AuthTest, EveryParameterServerRpcNeedsTheToken) {
  const std::string dir = t::MakeTempDir("auth-ps");
  ps::PsOptions o;
  o.credentials.token = kToken;
  o.checkpoint_dir = dir;
  auto server = ps::PsServer::Start("127.0.0.1:0", o);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = "127.0.0.1:" + std::to_string((*server)->port());
  ps::ClientOptions good;
  good.credentials.token = kToken;
  ps::PsClient owner(address, good);
  ASSERT_TRUE(owner.CreateVariable("w", *Tensor::FromVector({2}, std::vector<float>{1, 2}), std::nullopt).ok());
  ASSERT_TRUE(owner.Fence(t::kJobFence).ok());
  const auto before = owner.GetStatus();
  ASSERT_TRUE(before.ok());

  auto stub = proto::ParameterServer::NewStub(rpc::MakeChannel(address));
  proto::SaveRequest save;
  save.set_step(1);
  proto::RestoreRequest restore;
  restore.set_step(1);
  proto::FenceRequest fence;
  fence.set_coordinator_incarnation(0x3333333300000000ULL);
  using S = proto::ParameterServer::Stub;
  for (const rpc::Credentials& who : Intruders()) {
    std::vector<grpc::Status> got = {Call(*stub, &S::Save, save, who), Call(*stub, &S::Restore, restore, who),
                                     Call(*stub, &S::GetStatus, proto::StatusRequest(), who),
                                     Call(*stub, &S::Fence, fence, who),
                                     Call(*stub, &S::Shutdown, proto::ShutdownRequest(), who)};
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].error_code(), grpc::StatusCode::UNAUTHENTICATED)
          << "RPC " << i << ": " << got[i].error_message();
    }
    // The data plane (CreateVariable, Pull, Push) refuses the connection's
    // hello before any request is read.
    ps::ClientOptions o;
    o.credentials = who;
    ps::PsClient intruder(address, o);
    std::vector<Status> data = {
        intruder.CreateVariable("x", *Tensor::FromVector({1}, std::vector<float>{5}), std::nullopt).status(),
        intruder.Pull({"w"}).status(), intruder.PullRows("w", {0}).status(),
        intruder
            .Push(0x1111111100000001ULL, 0,
                  {{"w", ps::Update::Kind::kAssign, *Tensor::FromVector({2}, std::vector<float>{9, 9}), {}}})
            .status()};
    for (size_t i = 0; i < data.size(); ++i) {
      EXPECT_EQ(data[i].code(), Code::kUnauthenticated) << "data-plane call " << i << ": " << data[i];
      EXPECT_THAT(data[i].message(), HasSubstr("missing or wrong task token"));
    }
  }
  // Nothing changed: no variable created or overwritten, no checkpoint
  // written, the fence held, the server still up.
  t::ExpectPsUnchanged(owner, *before, dir);
}

TEST(AuthTest, EveryWorkerRpcNeedsTheToken) {
  std::atomic<int> ran{0};
  const worker::Registry registry = t::CountingRegistry(ran);
  worker::WorkerEnv env;
  env.ps_options.credentials.token = kToken;
  auto server = worker::WorkerServer::Start("127.0.0.1:0", registry, env);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = proto::Worker::NewStub(rpc::MakeChannel("127.0.0.1:" + std::to_string((*server)->port())));
  proto::RunClosureRequest run;
  run.set_closure_id(1);
  run.set_function("count");
  proto::CreateResourcesRequest create;
  create.set_dataset_fn("none");
  using S = proto::Worker::Stub;
  for (const rpc::Credentials& who : Intruders()) {
    for (const grpc::Status& s : {Call(*stub, &S::RunClosure, run, who), Call(*stub, &S::CreateResources, create, who),
                                  Call(*stub, &S::GetStatus, proto::WorkerStatusRequest(), who),
                                  Call(*stub, &S::Shutdown, proto::WorkerShutdownRequest(), who)}) {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
    }
  }
  EXPECT_EQ(ran.load(), 0);
  // With the token: the closure runs, and the worker was never shut down.
  EXPECT_TRUE(Call(*stub, &S::RunClosure, run, rpc::Credentials{kToken, nullptr}).ok());
  EXPECT_EQ(ran.load(), 1);
}

TEST(AuthTest, TheGroupRefusesAMemberWithoutTheToken) {
  collective::Options o;
  o.token = kToken;
  o.rendezvous_timeout = std::chrono::milliseconds(2000);
  auto local = collective::testing::ListenLocally(2);
  ASSERT_TRUE(local.ok()) << local.status();
  std::vector<collective::Peer>& members = local->members;
  std::vector<net::Listener>& listeners = local->listeners;
  auto leader = collective::Group::Create(members, 0, o, std::move(listeners[0]));
  collective::Options wrong = o;
  wrong.token = "fedcba9876543210fedcba9876543210";
  auto intruder = collective::Group::Create(members, 1, wrong, std::move(listeners[1]));
  ASSERT_TRUE(leader.ok() && intruder.ok());
  Status s1;
  std::thread t([&] { s1 = (*intruder)->Form(0).status(); });
  Status s0 = (*leader)->Form(0).status();
  t.join();
  EXPECT_EQ(s1.code(), Code::kUnauthenticated) << s1;
  EXPECT_THAT(s1.message(), HasSubstr("missing or wrong task token"));
  EXPECT_EQ(s0.code(), Code::kDeadlineExceeded) << s0;  // the leader never saw a member join
}

TEST(AuthTest, TokensComeFromTheEnvironmentOrAFile) {
  const std::string dir = t::MakeTempDir("auth-env");
  auto env = [](std::map<std::string, std::string> m) {
    return [m](const std::string& k) -> std::optional<std::string> {
      auto it = m.find(k);
      return it == m.end() ? std::nullopt : std::optional<std::string>(it->second);
    };
  };
  EXPECT_FALSE(rpc::CredentialsFromEnv(env({}))->enabled());
  EXPECT_EQ(rpc::CredentialsFromEnv(env({{"TFJOB_AUTH_TOKEN", kToken}}))->token, kToken);
  std::ofstream(dir + "/token") << kToken << "\n";  // a mounted Secret key ends with a newline or not
  EXPECT_EQ(rpc::CredentialsFromEnv(env({{"TFJOB_AUTH_TOKEN_FILE", dir + "/token"}}))->token, kToken);
  EXPECT_EQ(rpc::CredentialsFromEnv(env({{"TFJOB_AUTH_TOKEN", "short"}})).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(rpc::CredentialsFromEnv(env({{"TFJOB_AUTH_TOKEN_FILE", dir + "/none"}})).status().code(),
            Code::kInvalidArgument);
  EXPECT_NE(rpc::NewToken(), rpc::NewToken());
  EXPECT_EQ(rpc::NewToken().size(), 64u);
  EXPECT_TRUE(rpc::TokenMatches(kToken, kToken));
  EXPECT_FALSE(rpc::TokenMatches(kToken.substr(0, 31), kToken));
  EXPECT_FALSE(rpc::TokenMatches(kToken + "0", kToken));
}

}  // namespace
}  // namespace tfjob

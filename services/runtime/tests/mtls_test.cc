// Mutual TLS between a job's tasks (TFJOB_TLS_DIR): a parameter server and
// a worker started with the job's certificate serve only callers that
// present one from the same CA, on gRPC and on the PS data plane, and change
// nothing for anyone else, even a caller with the right token; and jobs run
// by `tfjob-runtime local --tls` train with every connection over TLS.
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/pki.h"
#include "proto/ps.grpc.pb.h"
#include "proto/worker.grpc.pb.h"
#include "services/ps/ps_client.h"
#include "services/ps/ps_service.h"
#include "services/rpc/auth.h"
#include "services/rpc/rpc.h"
#include "services/worker/worker.h"
#include "services/runtime/tests/auth_support.h"
#include "tests/support/subprocess.h"

namespace tfjob {
namespace {

namespace t = ::tfjob::testing;
using ::testing::HasSubstr;

std::shared_ptr<const tls::Config> NewJobTls(const std::string& job) {
  auto pem = pki::NewJobPki(job);
  EXPECT_TRUE(pem.ok()) << pem.status();
  auto c = tls::Config::FromPem(*pem);
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

struct Caller {
  std::string who;
  rpc::Credentials credentials;
};

// A task of another job that trusts this job's CA: the server is the one
// to refuse (TLS 1.3 tells the client on its first read).
std::shared_ptr<const tls::Config> TrustingWithAnotherCertificate(const tls::Config& job) {
  auto other = pki::NewJobPki("job");
  EXPECT_TRUE(other.ok());
  auto c = tls::Config::FromPem({job.pem().ca_pem, other->cert_pem, other->key_pem});
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

// Everyone but the job: the right token without TLS, with a certificate
// from another job's CA (same job name), and with such a certificate while
// trusting the job's CA.
std::vector<Caller> Outsiders(const tls::Config& job) {
  return {{"no TLS", rpc::Credentials{t::kJobToken, nullptr}},
          {"another CA", rpc::Credentials{t::kJobToken, NewJobTls("job")}},
          {"another CA's certificate, trusting the job's",
           rpc::Credentials{t::kJobToken, TrustingWithAnotherCertificate(job)}}};
}

ps::ClientOptions Quick(const rpc::Credentials& c) {
  ps::ClientOptions o;
  o.credentials = c;
  o.timeout = std::chrono::milliseconds(3000);
  o.retry.max_attempts = 1;
  return o;
}

TEST(MtlsTest, AParameterServerServesOnlyTheJobsCertificate) {
  const std::string dir = t::MakeTempDir("mtls-ps");
  const rpc::Credentials job{t::kJobToken, NewJobTls("job")};
  ps::PsOptions o;
  o.credentials = job;
  o.checkpoint_dir = dir;
  auto server = ps::PsServer::Start("127.0.0.1:0", o);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = "127.0.0.1:" + std::to_string((*server)->port());
  // The job: data plane and gRPC both work over TLS.
  ps::PsClient owner(address, Quick(job));
  ASSERT_TRUE(owner.CreateVariable("w", *Tensor::FromVector({2}, std::vector<float>{1, 2}), std::nullopt).ok());
  ASSERT_TRUE(owner.Fence(t::kJobFence).ok());
  const auto before = owner.GetStatus();
  ASSERT_TRUE(before.ok()) << before.status();

  for (const Caller& c : Outsiders(*job.tls)) {
    SCOPED_TRACE(c.who);
    ps::PsClient outsider(address, Quick(c.credentials));
    const std::vector<Status> calls = {
        outsider.CreateVariable("x", *Tensor::FromVector({1}, std::vector<float>{5}), std::nullopt).status(),
        outsider.Pull({"w"}).status(),
        outsider
            .Push(0x1111111100000001ULL, 0,
                  {{"w", ps::Update::Kind::kAssign, *Tensor::FromVector({2}, std::vector<float>{9, 9}), {}}})
            .status(),
        outsider.GetStatus().status(),
        outsider.Fence(0x3333333300000000ULL).status(),
        outsider.Save(1).status(),
        outsider.Shutdown()};
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_FALSE(calls[i].ok()) << "call " << i;
      EXPECT_TRUE(calls[i].code() == Code::kUnavailable || calls[i].code() == Code::kUnauthenticated)
          << "call " << i << ": " << calls[i];
    }
    // On the data plane each is told why.
    EXPECT_EQ(calls[0].code(), Code::kUnauthenticated) << calls[0];
    if (!c.credentials.tls) {
      EXPECT_THAT(calls[0].message(), HasSubstr("accepts only TLS connections")) << calls[0];
    } else if (c.credentials.tls->pem().ca_pem == job.tls->pem().ca_pem) {
      EXPECT_THAT(calls[0].message(), HasSubstr("refused this task's TLS certificate")) << calls[0];
    } else {
      EXPECT_THAT(calls[0].message(), HasSubstr("has no certificate from this job's CA")) << calls[0];
    }
  }
  // Nothing changed, and the server still serves the job.
  t::ExpectPsUnchanged(owner, *before, dir);
}

TEST(MtlsTest, AWorkerServesOnlyTheJobsCertificate) {
  std::atomic<int> ran{0};
  const worker::Registry registry = t::CountingRegistry(ran);
  worker::WorkerEnv env;
  env.ps_options.credentials = rpc::Credentials{t::kJobToken, NewJobTls("job")};
  const rpc::Credentials job = env.ps_options.credentials;
  auto server = worker::WorkerServer::Start("127.0.0.1:0", registry, env);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = "127.0.0.1:" + std::to_string((*server)->port());
  proto::RunClosureRequest run;
  run.set_closure_id(1);
  run.set_function("count");
  for (const Caller& c : Outsiders(*job.tls)) {
    auto stub = proto::Worker::NewStub(rpc::MakeChannel(address, c.credentials));
    auto ctx = rpc::Context(std::chrono::milliseconds(3000), c.credentials);
    proto::RunClosureResponse resp;
    const grpc::Status s = stub->RunClosure(ctx.get(), run, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << c.who << ": " << s.error_message();
  }
  EXPECT_EQ(ran.load(), 0);
  auto stub = proto::Worker::NewStub(rpc::MakeChannel(address, job));
  auto ctx = rpc::Context(std::chrono::milliseconds(5000), job);
  proto::RunClosureResponse resp;
  const grpc::Status s = stub->RunClosure(ctx.get(), run, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(ran.load(), 1);
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(MtlsTest, JobsRunByLocalWithTlsTrain) {
  const std::string dir = t::MakeTempDir("mtls-local");
  const std::string job = t::SourceDir() + "/tests/support/data/synthetic-small.json";
  const std::string tls_note = "connections are mutual TLS with the job's certificate";
  // Parameter servers: gRPC to PS and workers, the data plane to the PS.
  auto r = t::Run({t::RuntimeBinary(), "local", "--tls", "--ps", "1", "--workers", "2", "--", "fit", "--config", job,
                   "--summary-json", dir + "/ps.json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(Count(r.out, tls_note), 4) << r.out;  // chief, PS, two workers
  std::ifstream ps_summary(dir + "/ps.json");
  const auto s = nlohmann::json::parse(ps_summary, nullptr, false);
  EXPECT_EQ(s.value("strategy", ""), "parameter_server") << s.dump();
  // Multi-worker mirrored: the group's joins and the ring.
  r = t::Run({t::RuntimeBinary(), "local", "--tls", "--workers", "2", "--", "fit", "--config", job, "--summary-json",
              dir + "/mwms.json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(Count(r.out, tls_note), 2) << r.out;
  std::ifstream mwms_summary(dir + "/mwms.json");
  const auto m = nlohmann::json::parse(mwms_summary, nullptr, false);
  EXPECT_EQ(m.value("strategy", ""), "multi_worker_mirrored") << m.dump();
  EXPECT_EQ(m.value("num_replicas_in_sync", 0), 2) << m.dump();
  // Without --tls nobody says so.
  r = t::Run({t::RuntimeBinary(), "local", "--workers", "2", "--", "fit", "--config", job});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(Count(r.out, tls_note), 0) << r.out;
}

TEST(MtlsTest, TlsFilesThatAreMissingOrDoNotBelongTogetherAreOneLine) {
  const std::string dir = t::MakeTempDir("mtls-bad");
  const std::string tf_config =
      R"({"cluster":{"ps":["127.0.0.1:1"],"worker":["127.0.0.1:2"]},"task":{"type":"ps","index":0}})";
  auto r = t::Run({t::RuntimeBinary(), "counter"}, {{"TF_CONFIG", tf_config}, {"TFJOB_TLS_DIR", dir + "/none"}});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr(dir + "/none/ca.crt"));
  EXPECT_EQ(Count(r.err, "\n"), 1) << r.err;
  auto a = pki::NewJobPki("a"), b = pki::NewJobPki("b");
  ASSERT_TRUE(a.ok() && b.ok());
  a->key_pem = b->key_pem;
  ASSERT_TRUE(pki::WriteTlsDir(dir, *a).ok());
  r = t::Run({t::RuntimeBinary(), "counter"}, {{"TF_CONFIG", tf_config}, {"TFJOB_TLS_DIR", dir}});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("tls.key does not belong to tls.crt"));
}

}  // namespace
}  // namespace tfjob

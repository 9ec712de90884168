// The tfjob-operator binary against the API-server double over real HTTP:
// submit TFJobs from examples/, check the pods and services it creates
// (names, labels, TF_CONFIG, ownerReferences), drive pod phases and exit
// codes by hand, and check status, events and metrics; inject faults.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/files.h"
#include "operator/api/codec.h"
#include "operator/tests/envtest_support.h"
#include "tests/support/apiserver/apiserver_double.h"
#include "tests/support/apiserver/resources.h"
#include "tests/support/process.h"
#include "tests/support/subprocess.h"

namespace tfjob::op {
namespace {

using json = nlohmann::json;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;
namespace t = ::tfjob::testing;
using ::tfjob::testing::ApiServerDouble;

class OperatorE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = ApiServerDouble::Start();
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(s).value();
    dir_ =
        t::MakeTempDir("operator-e2e-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    ASSERT_TRUE(server_->WriteKubeconfig(dir_ + "/kubeconfig").ok());
    StartOperator();
  }
  void TearDown() override {
    if (op_) {
      const int rc = op_->Stop(SIGTERM);
      EXPECT_EQ(rc, 0) << op_->output();  // clean shutdown on SIGTERM
    }
  }
  // Its endpoints on ports it binds itself (port 0): StartOperator reads
  // which from its start-up line.
  std::unique_ptr<t::Process> Operator(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv{
        t::BinDir() + "/tfjob-operator", "--kubeconfig", dir_ + "/kubeconfig",          "--namespace", "default",
        "--metrics-bind-address",        "127.0.0.1:0",  "--health-probe-bind-address", "127.0.0.1:0"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<t::Process>(argv, op_env_);
  }
  void StartOperator(const std::vector<std::string>& extra = {}) {
    op_ = Operator(extra);
    // "tfjob-operator: metrics on :P, health probes on :Q"
    const auto ports = op_->WaitForLine("tfjob-operator: metrics on :");
    ASSERT_TRUE(ports) << op_->output();
    ASSERT_EQ(std::sscanf(ports->c_str(), "%d, health probes on :%d", &metrics_port_, &health_port_), 2) << *ports;
  }
  json Manifest(const std::string& example) {
    auto text = ReadFile(t::SourceDir() + "/" + example);
    EXPECT_TRUE(text.ok()) << text.status();
    auto doc = api::YamlToJson(*text, example);
    EXPECT_TRUE(doc.ok()) << doc.status();
    return *doc;
  }
  json Submit(json job) {
    auto r = server_->Create("tfjobs", "default", std::move(job));
    EXPECT_TRUE(r.ok()) << r.status();
    return *r;
  }
  std::vector<json> Pods(const std::string& job) {
    return server_->List("pods", "default", "training.kubeflow.org/job-name=" + job).value();
  }
  std::vector<json> Services(const std::string& job) {
    return server_->List("services", "default", "training.kubeflow.org/job-name=" + job).value();
  }
  json Job(const std::string& name) { return server_->Get("tfjobs", "default", name).value(); }
  bool HasCondition(const std::string& name, const std::string& type) {
    auto j = server_->Get("tfjobs", "default", name);
    if (!j.ok() || !(*j).contains("status")) return false;
    for (const auto& c : (*j)["status"].value("conditions", json::array())) {
      if (c.value("type", "") == type && c.value("status", "") == "True") return true;
    }
    return false;
  }
  // Moves a pod to `phase` as a kubelet would, with the tensorflow container's exit code.
  void SetPhase(const std::string& pod, const std::string& phase, std::optional<int> exit_code = std::nullopt) {
    for (int attempt = 0; attempt < 10; ++attempt) {
      auto p = server_->Get("pods", "default", pod);
      ASSERT_TRUE(p.ok()) << p.status();
      json obj = *p;
      obj["status"]["phase"] = phase;
      if (exit_code) {
        obj["status"]["containerStatuses"] = json::array(
            {{{"name", "tensorflow"}, {"restartCount", 0}, {"state", {{"terminated", {{"exitCode", *exit_code}}}}}}});
      }
      if (server_->UpdateStatus("pods", "default", obj).ok()) return;
    }
    FAIL() << "could not update pod " << pod;
  }
  bool Eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout = 20s) {
    return server_->WaitFor(pred, timeout);
  }
  std::string Metrics(int port = 0) {
    auto r = t::Run({"curl", "-s", "http://127.0.0.1:" + std::to_string(port ? port : metrics_port_) + "/metrics"});
    return r.out;
  }
  // The metrics port an operator started with Operator() bound; 0 if it
  // never said.
  static int MetricsPort(t::Process& op) {
    const auto line = op.WaitForLine("tfjob-operator: metrics on :");
    int port = 0;
    return line && std::sscanf(line->c_str(), "%d", &port) == 1 ? port : 0;
  }

  std::unique_ptr<ApiServerDouble> server_;
  std::unique_ptr<t::Process> op_;
  std::string dir_;
  int metrics_port_ = 0, health_port_ = 0;
  std::map<std::string, std::string> op_env_;  // the operator's extra environment
};

using envtest::Env;

TEST_F(OperatorE2E, CounterExampleRunsToSuccess) {
  json created = Submit(Manifest("examples/counter/tfjob.yaml"));
  ASSERT_TRUE(Eventually([&] { return Pods("counter").size() == 5 && Services("counter").size() == 5; }))
      << op_->output();
  // Names, labels, TF_CONFIG and ownerReferences, as literal strings.
  auto pod = server_->Get("pods", "default", "counter-worker-2").value();
  EXPECT_EQ(pod["metadata"]["labels"]["training.kubeflow.org/job-name"], "counter");
  EXPECT_EQ(pod["metadata"]["labels"]["training.kubeflow.org/replica-type"], "worker");
  EXPECT_EQ(pod["metadata"]["labels"]["training.kubeflow.org/replica-index"], "2");
  EXPECT_EQ(pod["metadata"]["labels"]["training.kubeflow.org/operator-name"], "tfjob-controller");
  EXPECT_EQ(
      Env(pod, "TF_CONFIG"),
      R"({"cluster":{"chief":["counter-chief-0.default.svc:2222"],"ps":["counter-ps-0.default.svc:2222"],)"
      R"("worker":["counter-worker-0.default.svc:2222","counter-worker-1.default.svc:2222","counter-worker-2.default.svc:2222"]},)"
      R"("task":{"type":"worker","index":2},"environment":"cloud"})");
  EXPECT_EQ(pod["metadata"]["ownerReferences"][0]["uid"], created["metadata"]["uid"]);
  EXPECT_EQ(pod["metadata"]["ownerReferences"][0]["controller"], true);
  EXPECT_EQ(pod["spec"]["restartPolicy"], "OnFailure");
  auto chief = server_->Get("pods", "default", "counter-chief-0").value();
  EXPECT_EQ(chief["metadata"]["labels"]["training.kubeflow.org/job-role"], "master");
  // The task token: a Secret owned by the job, holding a random token the
  // pods read by reference (TF_CONFIG itself is untouched, above).
  auto secret = server_->Get("secrets", "default", "counter-tfjob-auth");
  ASSERT_TRUE(secret.ok()) << secret.status();
  EXPECT_EQ((*secret)["metadata"]["ownerReferences"][0]["uid"], created["metadata"]["uid"]);
  EXPECT_EQ((*secret)["stringData"].value("token", "").size(), 64u);
  json token_env;
  for (const auto& e : pod["spec"]["containers"][0]["env"]) {
    if (e.value("name", "") == "TFJOB_AUTH_TOKEN") token_env = e;
  }
  EXPECT_EQ(token_env["valueFrom"]["secretKeyRef"], json({{"name", "counter-tfjob-auth"}, {"key", "token"}}));
  auto svc = server_->Get("services", "default", "counter-ps-0").value();
  EXPECT_EQ(svc["spec"]["clusterIP"], "None");
  EXPECT_EQ(svc["spec"]["selector"]["training.kubeflow.org/replica-type"], "ps");

  for (const auto& p : Pods("counter")) SetPhase(p["metadata"]["name"], "Running");
  ASSERT_TRUE(Eventually([&] { return HasCondition("counter", "Running"); })) << op_->output();
  SetPhase("counter-chief-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return HasCondition("counter", "Succeeded"); })) << op_->output();
  // cleanPodPolicy Running: the still-running PS and workers go, the chief stays.
  ASSERT_TRUE(Eventually([&] { return Pods("counter").size() == 1; }));
  EXPECT_EQ(Pods("counter")[0]["metadata"]["name"], "counter-chief-0");
  json job = Job("counter");
  EXPECT_FALSE(job["status"].value("startTime", "").empty());
  EXPECT_FALSE(job["status"].value("completionTime", "").empty());
  EXPECT_EQ(job["status"]["replicaStatuses"]["Chief"]["succeeded"], 1);
  EXPECT_TRUE(Eventually([&] {
    const std::vector<json> events = server_->List("events", "default").value();
    for (const auto& e : events) {
      if (e.value("reason", "") == "TFJobSucceeded" && e["involvedObject"].value("name", "") == "counter") return true;
    }
    return false;
  }));
  const std::string m = Metrics();
  EXPECT_THAT(m,
              HasSubstr("training_operator_jobs_created_total{framework=\"tensorflow\",job_namespace=\"default\"} 1"));
  EXPECT_THAT(
      m, HasSubstr("training_operator_jobs_successful_total{framework=\"tensorflow\",job_namespace=\"default\"} 1"));
  auto ready = t::Run({"curl", "-s", "http://127.0.0.1:" + std::to_string(health_port_) + "/readyz"});
  EXPECT_EQ(ready.out, "ok\n");
}

json SmallJob(const std::string& name, const std::string& policy, int workers = 2) {
  json container{{"name", "tensorflow"}, {"image", "tfjob/runtime-cpu:0.1.0"}};
  return {{"apiVersion", "kubeflow.org/v1"},
          {"kind", "TFJob"},
          {"metadata", {{"name", name}, {"namespace", "default"}}},
          {"spec",
           {{"tfReplicaSpecs",
             {{"Worker",
               {{"replicas", workers},
                {"restartPolicy", policy},
                {"template", {{"spec", {{"containers", json::array({container})}}}}}}}}}}}};
}

// ---- --task-tls ---------------------------------------------------------------

const char* const kTlsKeys[] = {"ca.crt", "tls.crt", "tls.key"};

// The Secret's text for `key`: stringData as written (the double keeps it;
// the API server would turn it into data).
std::string SecretText(const json& secret, const std::string& key) {
  const json& sd = secret.value("stringData", json::object());
  return sd.contains(key) && sd[key].is_string() ? sd[key].get<std::string>() : "";
}

void ExpectPkiIn(const json& secret) {
  EXPECT_THAT(SecretText(secret, "ca.crt"), ::testing::StartsWith("-----BEGIN CERTIFICATE-----"));
  EXPECT_THAT(SecretText(secret, "tls.crt"), ::testing::StartsWith("-----BEGIN CERTIFICATE-----"));
  EXPECT_THAT(SecretText(secret, "tls.key"), ::testing::StartsWith("-----BEGIN PRIVATE KEY-----"));
  EXPECT_NE(SecretText(secret, "ca.crt"), SecretText(secret, "tls.crt"));
}

// With --task-tls the job's Secret holds the token and the job's CA
// certificate, task certificate and key (never the CA's key: exactly those
// four entries), and every pod mounts the three TLS files and is told where.
TEST_F(OperatorE2E, TaskTlsPutsTheJobsPkiInItsSecretAndMountsIt) {
  op_->Stop(SIGTERM);
  StartOperator({"--task-tls=true"});
  json created = Submit(SmallJob("tls", "Never", 2));
  ASSERT_TRUE(Eventually([&] { return Pods("tls").size() == 2; })) << op_->output();
  auto secret = server_->Get("secrets", "default", "tls-tfjob-auth");
  ASSERT_TRUE(secret.ok()) << secret.status();
  EXPECT_EQ((*secret)["metadata"]["ownerReferences"][0]["uid"], created["metadata"]["uid"]);
  std::set<std::string> keys;
  for (const auto& [k, v] : (*secret)["stringData"].items()) keys.insert(k);
  EXPECT_EQ(keys, (std::set<std::string>{"token", "ca.crt", "tls.crt", "tls.key"}));
  EXPECT_EQ(SecretText(*secret, "token").size(), 64u);
  ExpectPkiIn(*secret);
  for (const auto& pod : Pods("tls")) {
    SCOPED_TRACE(pod["metadata"]["name"].get<std::string>());
    EXPECT_EQ(Env(pod, "TFJOB_TLS_DIR"), "/etc/tfjob/tls");
    EXPECT_EQ(pod["spec"]["volumes"][0]["secret"]["secretName"], "tls-tfjob-auth");
    EXPECT_EQ(pod["spec"]["containers"][0]["volumeMounts"][0],
              json({{"name", "tfjob-tls"}, {"mountPath", "/etc/tfjob/tls"}, {"readOnly", true}}));
  }
  // A second job gets a CA of its own.
  Submit(SmallJob("tls2", "Never", 2));
  ASSERT_TRUE(Eventually([&] { return Pods("tls2").size() == 2; })) << op_->output();
  auto other = server_->Get("secrets", "default", "tls2-tfjob-auth");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(SecretText(*other, "ca.crt"), SecretText(*secret, "ca.crt"));
}

// A Secret made before --task-tls was turned on has a token and no TLS
// keys; pods mounting it would wait forever. The operator adds the keys
// (after a conflicting write, on the retry) and keeps the token the
// running pods already hold.
TEST_F(OperatorE2E, TaskTlsAddsTheKeysToASecretMadeWithoutThem) {
  op_->Stop(SIGTERM);
  const std::string token(64, 'a');
  ASSERT_TRUE(server_
                  ->Create("secrets", "default",
                           {{"apiVersion", "v1"},
                            {"kind", "Secret"},
                            {"type", "Opaque"},
                            {"metadata", {{"name", "old-tfjob-auth"}, {"namespace", "default"}}},
                            {"stringData", {{"token", token}}}})
                  .ok());
  ASSERT_TRUE(server_->InjectFault({"PUT", ".*/secrets/old-tfjob-auth", 409, 1}).ok());
  StartOperator({"--task-tls=true"});
  Submit(SmallJob("old", "ExitCode", 2));
  ASSERT_TRUE(Eventually([&] { return Pods("old").size() == 2; })) << op_->output();
  auto secret = server_->Get("secrets", "default", "old-tfjob-auth");
  ASSERT_TRUE(secret.ok()) << secret.status();
  EXPECT_EQ(SecretText(*secret, "token"), token);
  ExpectPkiIn(*secret);
  // No pod was created before the keys were there: the first pod comes
  // after the successful update.
  std::optional<size_t> updated, first_pod;
  const auto requests = server_->Requests();
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    if (!updated && r.method == "PUT" && r.path.find("/secrets/old-tfjob-auth") != std::string::npos && r.code == 200) {
      updated = i;
    }
    if (!first_pod && r.method == "POST" && r.path.ends_with("/pods")) first_pod = i;
  }
  ASSERT_TRUE(updated && first_pod);
  EXPECT_LT(*updated, *first_pod);
  // Keys already there are left alone on later passes: a retryable
  // failure recreates a pod, which asks for the Secret again.
  const std::string ca = SecretText(*secret, "ca.crt");
  const std::string uid = server_->Get("pods", "default", "old-worker-1").value()["metadata"]["uid"];
  SetPhase("old-worker-1", "Failed", 137);
  ASSERT_TRUE(Eventually([&] {
    auto p = server_->Get("pods", "default", "old-worker-1");
    return p.ok() && (*p)["metadata"]["uid"] != uid;
  })) << op_->output();
  EXPECT_EQ(SecretText(server_->Get("secrets", "default", "old-tfjob-auth").value(), "ca.crt"), ca);
  int puts = 0;
  for (const auto& r : server_->Requests()) {
    puts += r.method == "PUT" && r.path.find("/secrets/") != std::string::npos && r.code == 200;
  }
  EXPECT_EQ(puts, 1);
}

// The Secret cannot be written: the error is reported (and retried) and
// no pod is created until it is.
TEST_F(OperatorE2E, TaskTlsNoPodBeforeItsSecret) {
  op_->Stop(SIGTERM);
  ASSERT_TRUE(server_->InjectFault({"POST", ".*/secrets", 500, 2}).ok());
  StartOperator({"--task-tls=true"});
  Submit(SmallJob("late", "Never", 2));
  ASSERT_TRUE(Eventually([&] { return Pods("late").size() == 2; })) << op_->output();
  EXPECT_THAT(op_->output(), HasSubstr("reconcile default/late: "));
  std::optional<size_t> created, first_pod;
  const auto requests = server_->Requests();
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    if (!created && r.method == "POST" && r.path.ends_with("/secrets") && r.code == 201) created = i;
    if (!first_pod && r.method == "POST" && r.path.ends_with("/pods")) first_pod = i;
  }
  ASSERT_TRUE(created && first_pod);
  EXPECT_LT(*created, *first_pod);
  ExpectPkiIn(server_->Get("secrets", "default", "late-tfjob-auth").value());
}

// TLS material without a token is not offered: one line, exit 2.
TEST_F(OperatorE2E, TaskTlsWithoutTaskAuthIsAClearError) {
  auto r = t::Run({t::BinDir() + "/tfjob-operator", "--kubeconfig", dir_ + "/kubeconfig", "--task-tls=true",
                   "--task-auth=false", "--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address",
                   "127.0.0.1:0"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(r.err,
            "tfjob-operator: error: flag --task-tls=true needs --task-auth=true (the job's TLS material is kept "
            "in its task-auth Secret)\n");
}

TEST_F(OperatorE2E, ExitCodePolicyRecreatesOnSignalsAndFailsOnErrors) {
  Submit(SmallJob("ec", "ExitCode"));
  ASSERT_TRUE(Eventually([&] { return Pods("ec").size() == 2; })) << op_->output();
  const std::string uid = server_->Get("pods", "default", "ec-worker-1").value()["metadata"]["uid"];
  SetPhase("ec-worker-1", "Failed", 137);  // SIGKILL / OOM: retryable
  ASSERT_TRUE(Eventually([&] {
    auto p = server_->Get("pods", "default", "ec-worker-1");
    return p.ok() && (*p)["metadata"]["uid"] != uid;
  })) << op_->output();
  ASSERT_TRUE(Eventually([&] { return Job("ec")["status"]["replicaStatuses"]["Worker"].value("restarts", 0) == 1; }))
      << Job("ec")["status"].dump() << "\n"
      << op_->output();
  SetPhase("ec-worker-0", "Failed", 1);  // an application error: permanent
  ASSERT_TRUE(Eventually([&] { return HasCondition("ec", "Failed"); })) << op_->output();
  EXPECT_THAT(Metrics(),
              HasSubstr("training_operator_jobs_failed_total{framework=\"tensorflow\",job_namespace=\"default\"} 1"));
}

TEST_F(OperatorE2E, InvalidJobFailsNamingTheField) {
  json job = SmallJob("bad", "Never", 1);
  job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "main";
  Submit(job);
  ASSERT_TRUE(Eventually([&] { return HasCondition("bad", "Failed"); })) << op_->output();
  bool named = false;
  const json bad = Job("bad");
  for (const auto& c : bad["status"]["conditions"]) {
    named |= c.value("message", "").find("tensorflow") != std::string::npos;
  }
  EXPECT_TRUE(named) << Job("bad")["status"].dump();
  EXPECT_TRUE(Pods("bad").empty());
}

// Past the schema, a job the operator cannot even decode (no status yet):
// it is marked Failed with the reason and the operator stays up.
TEST_F(OperatorE2E, UndecodableJobFailsAndTheOperatorStaysUp) {
  json job = SmallJob("undecodable", "Never", 1);
  job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = "two";
  job.erase("status");
  Submit(job);
  ASSERT_TRUE(Eventually([&] { return HasCondition("undecodable", "Failed"); })) << op_->output();
  EXPECT_THAT(Job("undecodable")["status"]["conditions"][0].value("message", ""), HasSubstr("replicas"));
  Submit(SmallJob("after", "Never", 1));
  EXPECT_TRUE(Eventually([&] { return Pods("after").size() == 1; })) << op_->output();
}

TEST_F(OperatorE2E, SuspendCreatesNothingUntilResumed) {
  json job = SmallJob("sus", "Never", 1);
  job["spec"]["runPolicy"]["suspend"] = true;
  Submit(job);
  ASSERT_TRUE(Eventually([&] { return HasCondition("sus", "Suspended"); })) << op_->output();
  EXPECT_TRUE(Pods("sus").empty());
  ASSERT_TRUE(
      server_->MergePatch("tfjobs", "default", "sus", json{{"spec", {{"runPolicy", {{"suspend", false}}}}}}).ok());
  ASSERT_TRUE(Eventually([&] { return Pods("sus").size() == 1; })) << op_->output();
  EXPECT_TRUE(Eventually([&] { return !HasCondition("sus", "Suspended"); }));
}

TEST_F(OperatorE2E, FaultsAndARestartLeaveNoDuplicatesOrOrphans) {
  // Conflicts on status writes, server errors on creates, dropped watches,
  // and the operator killed mid-reconcile and started again.
  ASSERT_TRUE(server_->InjectFault({"PUT", ".*/tfjobs/.*/status", 409, 3}).ok());
  ASSERT_TRUE(server_->InjectFault({"POST", ".*/pods", 500, 2}).ok());
  Submit(SmallJob("ft", "OnFailure", 3));
  ASSERT_TRUE(Eventually([&] { return Pods("ft").size() == 3; })) << op_->output();
  server_->DropWatches();
  op_->Stop(SIGKILL);
  Submit(SmallJob("ft2", "OnFailure", 2));
  StartOperator();
  ASSERT_TRUE(Eventually([&] { return Pods("ft2").size() == 2 && HasCondition("ft", "Created"); }))
      << op_->output() << "\nft2 pods: " << Pods("ft2").size() << "\nft: " << Job("ft").dump();
  // Every index exactly once; every pod owned by its job.
  std::set<std::string> names;
  for (const auto& p : Pods("ft")) names.insert(p["metadata"]["name"]);
  EXPECT_EQ(names, (std::set<std::string>{"ft-worker-0", "ft-worker-1", "ft-worker-2"}));
  EXPECT_EQ(Services("ft").size(), 3u);
  // Deleting the job takes its pods with it (ownerReferences).
  ASSERT_TRUE(server_->Delete("tfjobs", "default", "ft").ok());
  ASSERT_TRUE(Eventually([&] { return Pods("ft").empty() && Services("ft").empty(); }));
}

TEST_F(OperatorE2E, LeaderElectionOneActiveReplicaAndFailover) {
  op_->Stop(SIGTERM);
  op_.reset();
  const std::vector<std::string> le{"--leader-elect", "--leader-election-lease-duration", "2"};
  auto a = Operator(le);
  ASSERT_TRUE(Eventually([&] { return server_->Get("leases", "default", "tfjob-operator-leader").ok(); }))
      << a->output();
  auto b = Operator(le);
  Submit(SmallJob("le", "Never", 2));
  ASSERT_TRUE(Eventually([&] { return Pods("le").size() == 2; })) << a->output() << b->output();
  // client-go's leader_election_master_status{name} (v1.9.0's series) and
  // this operator's tfjob_operator_leader: 1 on the leader, 0 on the standby.
  const int a_port = MetricsPort(*a), b_port = MetricsPort(*b);
  ASSERT_NE(a_port, 0) << a->output();
  ASSERT_NE(b_port, 0) << b->output();
  const std::string master = "leader_election_master_status{name=\"tfjob-operator-leader\"} ";
  EXPECT_THAT(Metrics(a_port), AllOf(HasSubstr(master + "1\n"), HasSubstr("\ntfjob_operator_leader 1\n")));
  EXPECT_THAT(Metrics(b_port), AllOf(HasSubstr(master + "0\n"), HasSubstr("\ntfjob_operator_leader 0\n")));
  // Identities end in "_<pid>" (appended: GCC 12 misreports "_" + string).
  const std::string a_id = std::string("_").append(std::to_string(a->pid()));
  const std::string b_id = std::string("_").append(std::to_string(b->pid()));
  const std::string first =
      server_->Get("leases", "default", "tfjob-operator-leader").value()["spec"]["holderIdentity"];
  EXPECT_THAT(first, HasSubstr(a_id));
  EXPECT_THAT(b->output(), ::testing::Not(HasSubstr("watching")));  // the standby does not reconcile
  // The leader dies without releasing the lease; the standby takes over once
  // it expires and carries on with the job.
  a->Stop(SIGKILL);
  ASSERT_TRUE(Eventually([&] {
    auto l = server_->Get("leases", "default", "tfjob-operator-leader");
    return l.ok() && (*l)["spec"].value("holderIdentity", "").find(b_id) != std::string::npos;
  })) << b->output();
  EXPECT_TRUE(Eventually([&] {
    const std::string m = Metrics(b_port);
    return m.find(master + "1\n") != std::string::npos && m.find("\ntfjob_operator_leader 1\n") != std::string::npos;
  })) << Metrics(b_port);
  SetPhase("le-worker-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return HasCondition("le", "Succeeded"); })) << b->output();
  EXPECT_EQ(b->Stop(SIGTERM), 0) << b->output();
  // A clean shutdown hands the lease back.
  EXPECT_EQ(server_->Get("leases", "default", "tfjob-operator-leader").value()["spec"].value("holderIdentity", "x"),
            "");
}

// The manifests in examples/operator, each driven through its policy.

TEST_F(OperatorE2E, ExamplePsWorkersSucceedsOnWorkerZero) {
  Submit(Manifest("examples/operator/ps-workers.yaml"));
  ASSERT_TRUE(Eventually([&] { return Pods("ps-workers").size() == 5; })) << op_->output();
  for (const auto& p : Pods("ps-workers")) SetPhase(p["metadata"]["name"], "Running");
  ASSERT_TRUE(Eventually([&] { return HasCondition("ps-workers", "Running"); }));
  SetPhase("ps-workers-worker-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return HasCondition("ps-workers", "Succeeded"); })) << op_->output();
  EXPECT_EQ(Pods("ps-workers").size(), 5u);  // cleanPodPolicy defaults to None
  EXPECT_EQ(server_->Get("pods", "default", "ps-workers-worker-0")
                .value()["metadata"]["labels"]["training.kubeflow.org/job-role"],
            "master");
}

// Kubeflow's TF_CONFIG (v1.9.0): every type in "cluster", the evaluator
// included; each task its own "task".
TEST_F(OperatorE2E, ExampleChiefPsWorkersEvaluator) {
  Submit(Manifest("examples/operator/chief-ps-workers-evaluator.yaml"));
  ASSERT_TRUE(Eventually([&] { return Pods("full").size() == 5 && Services("full").size() == 5; })) << op_->output();
  const std::string cluster =
      R"({"cluster":{"chief":["full-chief-0.default.svc:2222"],"evaluator":["full-evaluator-0.default.svc:2222"],)"
      R"("ps":["full-ps-0.default.svc:2222"],)"
      R"("worker":["full-worker-0.default.svc:2222","full-worker-1.default.svc:2222"]},)";
  EXPECT_EQ(Env(server_->Get("pods", "default", "full-evaluator-0").value(), "TF_CONFIG"),
            cluster + R"("task":{"type":"evaluator","index":0},"environment":"cloud"})");
  EXPECT_EQ(Env(server_->Get("pods", "default", "full-chief-0").value(), "TF_CONFIG"),
            cluster + R"("task":{"type":"chief","index":0},"environment":"cloud"})");
  EXPECT_EQ(Env(server_->Get("pods", "default", "full-worker-1").value(), "TF_CONFIG"),
            cluster + R"("task":{"type":"worker","index":1},"environment":"cloud"})");
  SetPhase("full-chief-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return HasCondition("full", "Succeeded"); })) << op_->output();
}

// CUSTOM_CLUSTER_DOMAIN in the operator's environment, as Kubeflow reads it,
// and enableDynamicWorker's sparse form.
TEST_F(OperatorE2E, CustomClusterDomainAndDynamicWorkers) {
  op_->Stop(SIGTERM);  // it may not have set up its signal handling yet
  op_env_ = {{"CUSTOM_CLUSTER_DOMAIN", "cluster.local"}};
  op_ = Operator();
  json job = Manifest("examples/operator/chief-ps-workers-evaluator.yaml");
  Submit(job);
  job["metadata"]["name"] = "sparse";
  job["spec"]["enableDynamicWorker"] = true;
  Submit(job);
  ASSERT_TRUE(Eventually([&] { return Pods("full").size() == 5 && Pods("sparse").size() == 5; })) << op_->output();
  EXPECT_EQ(
      Env(server_->Get("pods", "default", "full-evaluator-0").value(), "TF_CONFIG"),
      R"({"cluster":{"chief":["full-chief-0.default.svc.cluster.local:2222"],)"
      R"("evaluator":["full-evaluator-0.default.svc.cluster.local:2222"],)"
      R"("ps":["full-ps-0.default.svc.cluster.local:2222"],)"
      R"("worker":["full-worker-0.default.svc.cluster.local:2222","full-worker-1.default.svc.cluster.local:2222"]},)"
      R"("task":{"type":"evaluator","index":0},"environment":"cloud"})");
  EXPECT_EQ(Env(server_->Get("pods", "default", "sparse-worker-1").value(), "TF_CONFIG"),
            R"({"cluster":{"worker":{"1":"sparse-worker-1.default.svc.cluster.local:2222"},)"
            R"("ps":["sparse-ps-0.default.svc.cluster.local:2222"]},"task":{"type":"worker","index":1}})");
  EXPECT_EQ(Env(server_->Get("pods", "default", "sparse-evaluator-0").value(), "TF_CONFIG"),
            R"({"cluster":{"worker":{},"ps":[]},"task":{"type":"evaluator","index":0}})");
}

// Gang scheduling with Volcano: the PodGroup comes first, owned by the job;
// pods wait until Volcano admits the gang (phase Inqueue); an edited
// PodGroup is put back; a finished job's PodGroup is deleted.
TEST_F(OperatorE2E, GangSchedulingWithVolcano) {
  op_->Stop(SIGTERM);  // it may not have set up its signal handling yet
  for (const json& crd : {t::apiserver::VolcanoPodGroupCrd(), t::apiserver::SchedulerPluginsPodGroupCrd()}) {
    ASSERT_TRUE(server_->Create("customresourcedefinitions", "", crd).ok());
  }
  op_ = Operator({"--gang-scheduler-name", "volcano"});
  const json job = Submit(Manifest("examples/operator/gang-scheduled.yaml"));
  ASSERT_TRUE(Eventually([&] { return server_->Get("podgroups.scheduling.volcano.sh", "default", "gang").ok(); }))
      << op_->output();
  json pg = server_->Get("podgroups.scheduling.volcano.sh", "default", "gang").value();
  EXPECT_EQ(pg["spec"], json({{"minMember", 4}, {"queue", "research"}}));
  EXPECT_EQ(pg["metadata"]["ownerReferences"][0]["uid"], job["metadata"]["uid"]);
  EXPECT_EQ(pg["metadata"]["ownerReferences"][0]["controller"], true);
  EXPECT_TRUE(Pods("gang").empty());
  // Volcano says Pending, then admits the gang.
  pg["status"] = {{"phase", "Pending"}};
  ASSERT_TRUE(server_->UpdateStatus("podgroups.scheduling.volcano.sh", "default", pg).ok());
  EXPECT_TRUE(Pods("gang").empty());
  pg = server_->Get("podgroups.scheduling.volcano.sh", "default", "gang").value();
  pg["status"] = {{"phase", "Inqueue"}};
  ASSERT_TRUE(server_->UpdateStatus("podgroups.scheduling.volcano.sh", "default", pg).ok());
  ASSERT_TRUE(Eventually([&] { return Pods("gang").size() == 4; })) << op_->output();
  const json pod = server_->Get("pods", "default", "gang-worker-1").value();
  EXPECT_EQ(pod["spec"]["schedulerName"], "volcano");
  EXPECT_EQ(pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"], "gang");
  EXPECT_EQ(pod["metadata"]["annotations"]["volcano.sh/task-spec"], "worker");
  // Someone edits the PodGroup: the operator restores the job's spec.
  ASSERT_TRUE(
      server_->MergePatch("podgroups.scheduling.volcano.sh", "default", "gang", {{"spec", {{"minMember", 1}}}}).ok());
  ASSERT_TRUE(Eventually([&] {
    return server_->Get("podgroups.scheduling.volcano.sh", "default", "gang").value()["spec"]["minMember"] == 4;
  })) << op_->output();
  for (const auto& p : Pods("gang")) SetPhase(p["metadata"]["name"], "Running");
  SetPhase("gang-worker-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return HasCondition("gang", "Succeeded"); })) << op_->output();
  ASSERT_TRUE(Eventually([&] { return !server_->Get("podgroups.scheduling.volcano.sh", "default", "gang").ok(); }))
      << op_->output();
}

// scheduler-plugins: its PodGroup kind, and pods at once with the pod-group label.
TEST_F(OperatorE2E, GangSchedulingWithSchedulerPlugins) {
  op_->Stop(SIGTERM);
  ASSERT_TRUE(server_->Create("customresourcedefinitions", "", t::apiserver::SchedulerPluginsPodGroupCrd()).ok());
  op_ = Operator({"--gang-scheduler-name", "scheduler-plugins"});
  const json job = Submit(Manifest("examples/operator/gang-scheduled.yaml"));
  ASSERT_TRUE(Eventually([&] {
    return server_->Get("podgroups.scheduling.x-k8s.io", "default", "gang").ok() && Pods("gang").size() == 4;
  })) << op_->output();
  const json pg = server_->Get("podgroups.scheduling.x-k8s.io", "default", "gang").value();
  EXPECT_EQ(pg["spec"], json({{"minMember", 4}, {"scheduleTimeoutSeconds", 300}}));
  EXPECT_EQ(pg["metadata"]["ownerReferences"][0]["uid"], job["metadata"]["uid"]);
  const json pod = server_->Get("pods", "default", "gang-ps-0").value();
  EXPECT_EQ(pod["spec"]["schedulerName"], "scheduler-plugins");
  EXPECT_EQ(pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"], "gang");
  // Deleting the job takes its PodGroup with it (ownerReference).
  ASSERT_TRUE(server_->Delete("tfjobs", "default", "gang").ok());
  EXPECT_FALSE(server_->Get("podgroups.scheduling.x-k8s.io", "default", "gang").ok());
}

TEST(OperatorCli, HelpAndVersionExitZero) {
  for (const char* flag : {"--help", "-h"}) {
    auto r = t::Run({t::BinDir() + "/tfjob-operator", flag});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("usage: tfjob-operator [flags]"));
    EXPECT_THAT(r.out, HasSubstr("--gang-scheduler-name"));
    EXPECT_THAT(r.out, HasSubstr("--leader-election-renew-deadline"));
    EXPECT_EQ(r.err, "");
    // The defaults docs/kubeflow-compatibility.md states: controller-
    // runtime's two addresses and all namespaces as in v1.9.0, and this
    // operator's own --workers, --qps and --burst. The usage prints the
    // values the flags are declared with, the ones a run without them uses.
    for (const char* line : {"--metrics-bind-address VALUE\taddress for /metrics (default :8080)\n",
                             "--health-probe-bind-address VALUE\taddress for /healthz and /readyz (default :8081)\n",
                             "--namespace VALUE\twatch only this namespace (default: all)\n",
                             "--workers VALUE\tconcurrent reconciles (default 2)\n",
                             "--qps VALUE\tAPI requests per second (docs/operations.md) (default 100)\n",
                             "--burst VALUE\tAPI request burst (default 200)\n"}) {
      EXPECT_THAT(r.out, HasSubstr(line));
    }
    EXPECT_THAT(r.out, Not(HasSubstr("--controller-threads")));
  }
  auto v = t::Run({t::BinDir() + "/tfjob-operator", "--version"});
  EXPECT_EQ(v.exit_code, 0) << v.err;
  EXPECT_THAT(v.out, ::testing::MatchesRegex("tfjob-operator [0-9]+\\.[0-9]+\\.[0-9]+\n"));
  // A bad flag is still an error: usage on stderr, exit 2.
  auto bad = t::Run({t::BinDir() + "/tfjob-operator", "--no-such-flag"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("usage: tfjob-operator"));
}

// Asked for a gang scheduler whose CRD is not installed: one line, exit 2.
TEST_F(OperatorE2E, GangSchedulerWithoutItsCrdIsAClearError) {
  auto r = t::Run({t::BinDir() + "/tfjob-operator", "--kubeconfig", dir_ + "/kubeconfig", "--gang-scheduler-name",
                   "volcano", "--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "127.0.0.1:0"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("flag --gang-scheduler-name volcano: the API server does not serve "
                               "scheduling.volcano.sh/v1beta1 podgroups; install the scheduler's CRDs"));
}

TEST_F(OperatorE2E, ExampleExitCodeCountsRestartsAgainstBackoffLimit) {
  Submit(Manifest("examples/operator/exitcode.yaml"));
  ASSERT_TRUE(Eventually([&] { return Pods("exitcode").size() == 2; })) << op_->output();
  for (int round = 1; round <= 3; ++round) {
    const std::string uid = server_->Get("pods", "default", "exitcode-worker-1").value()["metadata"]["uid"];
    SetPhase("exitcode-worker-1", "Failed", 143);
    if (round < 3) {
      ASSERT_TRUE(Eventually([&] {
        auto p = server_->Get("pods", "default", "exitcode-worker-1");
        return p.ok() && (*p)["metadata"]["uid"] != uid;
      })) << "round "
          << round << "\n"
          << op_->output();
    }
  }
  // The third restart reaches backoffLimit 3: the job fails and stops.
  ASSERT_TRUE(Eventually([&] { return HasCondition("exitcode", "Failed"); })) << op_->output();
  bool backoff = false;
  const json job = Job("exitcode");
  for (const auto& c : job["status"]["conditions"]) {
    backoff |= c.value("message", "").find("backoff limit") != std::string::npos;
  }
  EXPECT_TRUE(backoff) << job["status"].dump();
  EXPECT_EQ(job["status"]["replicaStatuses"]["Worker"]["restarts"], 3);
}

TEST_F(OperatorE2E, ExampleCleanPodPolicyAll) {
  Submit(Manifest("examples/operator/cleanpod-all.yaml"));
  ASSERT_TRUE(Eventually([&] { return Pods("cleanpod-all").size() == 3; })) << op_->output();
  SetPhase("cleanpod-all-worker-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return HasCondition("cleanpod-all", "Succeeded"); })) << op_->output();
  ASSERT_TRUE(Eventually([&] { return Pods("cleanpod-all").empty() && Services("cleanpod-all").empty(); }));
}

TEST_F(OperatorE2E, ExampleTtlDeletesTheFinishedJob) {
  Submit(Manifest("examples/operator/ttl.yaml"));
  ASSERT_TRUE(Eventually([&] { return Pods("ttl").size() == 1; })) << op_->output();
  SetPhase("ttl-worker-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return HasCondition("ttl", "Succeeded"); })) << op_->output();
  // Deleted by the timed requeue two seconds later, pods with it.
  ASSERT_TRUE(Eventually([&] { return !server_->Get("tfjobs", "default", "ttl").ok(); })) << op_->output();
  EXPECT_TRUE(Pods("ttl").empty());
}

TEST_F(OperatorE2E, ExampleSuspend) {
  Submit(Manifest("examples/operator/suspend.yaml"));
  ASSERT_TRUE(Eventually([&] { return HasCondition("suspended", "Suspended"); })) << op_->output();
  EXPECT_TRUE(Pods("suspended").empty());
  ASSERT_TRUE(
      server_->MergePatch("tfjobs", "default", "suspended", json{{"spec", {{"runPolicy", {{"suspend", false}}}}}})
          .ok());
  ASSERT_TRUE(Eventually([&] { return Pods("suspended").size() == 2; })) << op_->output();
}

}  // namespace
}  // namespace tfjob::op

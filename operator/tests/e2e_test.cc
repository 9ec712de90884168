// The tfjob-operator binary end to end against the real API server
// (e2e_support.h): submit TFJobs from examples/, check the pods and services
// it creates (names, labels, TF_CONFIG, ownerReferences), drive pod phases
// and exit codes as the kubelet would (the status subresource), and check
// status, events and Kubeflow's metric names. The scenarios with injected
// faults and the gang schedulers are in e2e_faults_test.cc, jobs the CRD's
// schema would refuse in e2e_lax_crd_test.cc.
#include <chrono>
#include <csignal>
#include <set>

#include "operator/tests/e2e_support.h"

namespace tfjob::op::envtest {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
namespace t = ::tfjob::testing;

TEST_F(OperatorE2E, CounterExampleRunsToSuccess) {
  StartOperator();
  json created = Submit(Manifest("examples/counter/tfjob.yaml"));
  ASSERT_TRUE(Eventually([&] { return Pods("counter").size() == 5 && Services("counter").size() == 5; }))
      << op_->output();
  // Names, labels, TF_CONFIG and ownerReferences, as literal strings.
  auto pod = Get("pod", "counter-worker-2");
  EXPECT_EQ(pod["metadata"]["labels"]["training.kubeflow.org/job-name"], "counter");
  EXPECT_EQ(pod["metadata"]["labels"]["training.kubeflow.org/replica-type"], "worker");
  EXPECT_EQ(pod["metadata"]["labels"]["training.kubeflow.org/replica-index"], "2");
  EXPECT_EQ(pod["metadata"]["labels"]["training.kubeflow.org/operator-name"], "tfjob-controller");
  const std::string s = "." + ns_ + ".svc:2222";
  EXPECT_EQ(Env(pod, "TF_CONFIG"), R"({"cluster":{"chief":["counter-chief-0)" + s + R"("],"ps":["counter-ps-0)" + s +
                                       R"("],"worker":["counter-worker-0)" + s + R"(","counter-worker-1)" + s +
                                       R"(","counter-worker-2)" + s +
                                       R"("]},"task":{"type":"worker","index":2},"environment":"cloud"})");
  EXPECT_EQ(pod["metadata"]["ownerReferences"][0]["uid"], created["metadata"]["uid"]);
  EXPECT_EQ(pod["metadata"]["ownerReferences"][0]["controller"], true);
  EXPECT_EQ(pod["spec"]["restartPolicy"], "OnFailure");
  auto chief = Get("pod", "counter-chief-0");
  EXPECT_EQ(chief["metadata"]["labels"]["training.kubeflow.org/job-role"], "master");
  // The task token: a Secret owned by the job, holding a random token the
  // pods read by reference (TF_CONFIG itself is untouched, above).
  auto secret = TryGet("secret", "counter-tfjob-auth");
  ASSERT_TRUE(secret);
  EXPECT_EQ((*secret)["metadata"]["ownerReferences"][0]["uid"], created["metadata"]["uid"]);
  EXPECT_EQ(SecretText(*secret, "token").size(), 64u);
  json token_env;
  for (const auto& e : pod["spec"]["containers"][0]["env"]) {
    if (e.value("name", "") == "TFJOB_AUTH_TOKEN") token_env = e;
  }
  EXPECT_EQ(token_env["valueFrom"]["secretKeyRef"], json({{"name", "counter-tfjob-auth"}, {"key", "token"}}));
  auto svc = Get("service", "counter-ps-0");
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
    for (const auto& e : Events("counter")) {
      if (e.value("reason", "") == "TFJobSucceeded") return true;
    }
    return false;
  }));
  const std::string m = Metrics();
  const std::string labels = "{framework=\"tensorflow\",job_namespace=\"" + ns_ + "\"} 1";
  EXPECT_THAT(m, HasSubstr("training_operator_jobs_created_total" + labels));
  EXPECT_THAT(m, HasSubstr("training_operator_jobs_successful_total" + labels));
  auto ready = t::Run({"curl", "-s", "http://127.0.0.1:" + std::to_string(health_port_) + "/readyz"});
  EXPECT_EQ(ready.out, "ok\n");
}

// TLS material without a token is not offered: one line, exit 2.
TEST_F(OperatorE2E, TaskTlsWithoutTaskAuthIsAClearError) {
  auto r = t::Run({t::BinDir() + "/tfjob-operator", "--kubeconfig", cp_->admin_kubeconfig(), "--task-tls=true",
                   "--task-auth=false", "--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address",
                   "127.0.0.1:0"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(r.err,
            "tfjob-operator: error: flag --task-tls=true needs --task-auth=true (the job's TLS material is kept "
            "in its task-auth Secret)\n");
}

TEST_F(OperatorE2E, ExitCodePolicyRecreatesOnSignalsAndFailsOnErrors) {
  StartOperator();
  Submit(SmallJob("ec", "ExitCode"));
  ASSERT_TRUE(Eventually([&] { return Pods("ec").size() == 2; })) << op_->output();
  const std::string uid = Get("pod", "ec-worker-1")["metadata"]["uid"];
  SetPhase("ec-worker-1", "Failed", 137);  // SIGKILL / OOM: retryable
  ASSERT_TRUE(Eventually([&] {
    auto p = TryGet("pod", "ec-worker-1");
    return p && (*p)["metadata"]["uid"] != uid;
  })) << op_->output();
  ASSERT_TRUE(Eventually([&] { return Job("ec")["status"]["replicaStatuses"]["Worker"].value("restarts", 0) == 1; }))
      << Job("ec")["status"].dump() << "\n"
      << op_->output();
  SetPhase("ec-worker-0", "Failed", 1);  // an application error: permanent
  ASSERT_TRUE(Eventually([&] { return HasCondition("ec", "Failed"); })) << op_->output();
  EXPECT_THAT(Metrics(), HasSubstr("training_operator_jobs_failed_total{framework=\"tensorflow\",job_namespace=\"" +
                                   ns_ + "\"} 1"));
}

TEST_F(OperatorE2E, SuspendCreatesNothingUntilResumed) {
  StartOperator();
  json job = SmallJob("sus", "Never", 1);
  job["spec"]["runPolicy"]["suspend"] = true;
  Submit(job);
  ASSERT_TRUE(Eventually([&] { return HasCondition("sus", "Suspended"); })) << op_->output();
  EXPECT_TRUE(Pods("sus").empty());
  Kubectl({"patch", "-n", ns_, "tfjob", "sus", "--type=merge", "-p", R"({"spec":{"runPolicy":{"suspend":false}}})"});
  ASSERT_TRUE(Eventually([&] { return Pods("sus").size() == 1; })) << op_->output();
  EXPECT_TRUE(Eventually([&] { return !HasCondition("sus", "Suspended"); }));
}

TEST_F(OperatorE2E, LeaderElectionOneActiveReplicaAndFailover) {
  const std::vector<std::string> le{"--leader-elect", "--leader-election-lease-duration", "2"};
  auto a = OperatorProcess(le);
  ASSERT_TRUE(Eventually([&] { return TryGet("lease", "tfjob-operator-leader").has_value(); })) << a->output();
  auto b = OperatorProcess(le);
  Submit(SmallJob("le", "Never", 2));
  ASSERT_TRUE(Eventually([&] { return Pods("le").size() == 2; })) << a->output() << b->output();
  // client-go's leader_election_master_status{name} (v1.9.0's series) and
  // this operator's tfjob_operator_leader: 1 on the leader, 0 on the standby.
  const int a_port = MetricsPort(*a), b_port = MetricsPort(*b);
  ASSERT_NE(a_port, 0) << a->output();
  ASSERT_NE(b_port, 0) << b->output();
  const std::string master = "leader_election_master_status{name=\"tfjob-operator-leader\"} ";
  EXPECT_THAT(MetricsAt(a_port), AllOf(HasSubstr(master + "1\n"), HasSubstr("\ntfjob_operator_leader 1\n")));
  EXPECT_THAT(MetricsAt(b_port), AllOf(HasSubstr(master + "0\n"), HasSubstr("\ntfjob_operator_leader 0\n")));
  // Identities end in "_<pid>" (appended: GCC 12 misreports "_" + string).
  const std::string a_id = std::string("_").append(std::to_string(a->pid()));
  const std::string b_id = std::string("_").append(std::to_string(b->pid()));
  auto holder = [&] {
    auto l = TryGet("lease", "tfjob-operator-leader");
    return l ? (*l)["spec"].value("holderIdentity", "") : std::string("<none>");
  };
  EXPECT_THAT(holder(), HasSubstr(a_id));
  EXPECT_THAT(b->output(), Not(HasSubstr("watching")));  // the standby does not reconcile
  // The leader dies without releasing the lease; the standby takes over once
  // it expires and carries on with the job.
  a->Stop(SIGKILL);
  ASSERT_TRUE(Eventually([&] { return holder().find(b_id) != std::string::npos; })) << b->output();
  EXPECT_TRUE(Eventually([&] {
    const std::string m = MetricsAt(b_port);
    return m.find(master + "1\n") != std::string::npos && m.find("\ntfjob_operator_leader 1\n") != std::string::npos;
  })) << MetricsAt(b_port);
  SetPhase("le-worker-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return HasCondition("le", "Succeeded"); })) << b->output();
  EXPECT_EQ(b->Stop(SIGTERM), 0) << b->output();
  // A clean shutdown hands the lease back.
  EXPECT_EQ(holder(), "");
}

// The manifests in examples/operator, each driven through its policy.

TEST_F(OperatorE2E, ExamplePsWorkersSucceedsOnWorkerZero) {
  StartOperator();
  Submit(Manifest("examples/operator/ps-workers.yaml"));
  ASSERT_TRUE(Eventually([&] { return Pods("ps-workers").size() == 5; })) << op_->output();
  for (const auto& p : Pods("ps-workers")) SetPhase(p["metadata"]["name"], "Running");
  ASSERT_TRUE(Eventually([&] { return HasCondition("ps-workers", "Running"); }));
  SetPhase("ps-workers-worker-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return HasCondition("ps-workers", "Succeeded"); })) << op_->output();
  EXPECT_EQ(Pods("ps-workers").size(), 5u);  // cleanPodPolicy defaults to None
  EXPECT_EQ(Get("pod", "ps-workers-worker-0")["metadata"]["labels"]["training.kubeflow.org/job-role"], "master");
}

// Kubeflow's TF_CONFIG (v1.9.0): every type in "cluster", the evaluator
// included; each task its own "task".
TEST_F(OperatorE2E, ExampleChiefPsWorkersEvaluator) {
  StartOperator();
  Submit(Manifest("examples/operator/chief-ps-workers-evaluator.yaml"));
  ASSERT_TRUE(Eventually([&] { return Pods("full").size() == 5 && Services("full").size() == 5; })) << op_->output();
  const std::string s = "." + ns_ + ".svc:2222";
  const std::string cluster = R"({"cluster":{"chief":["full-chief-0)" + s + R"("],"evaluator":["full-evaluator-0)" + s +
                              R"("],"ps":["full-ps-0)" + s + R"("],"worker":["full-worker-0)" + s +
                              R"(","full-worker-1)" + s + R"("]},)";
  EXPECT_EQ(Env(Get("pod", "full-evaluator-0"), "TF_CONFIG"),
            cluster + R"("task":{"type":"evaluator","index":0},"environment":"cloud"})");
  EXPECT_EQ(Env(Get("pod", "full-chief-0"), "TF_CONFIG"),
            cluster + R"("task":{"type":"chief","index":0},"environment":"cloud"})");
  EXPECT_EQ(Env(Get("pod", "full-worker-1"), "TF_CONFIG"),
            cluster + R"("task":{"type":"worker","index":1},"environment":"cloud"})");
  SetPhase("full-chief-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return HasCondition("full", "Succeeded"); })) << op_->output();
}

// CUSTOM_CLUSTER_DOMAIN in the operator's environment, as Kubeflow reads it,
// and enableDynamicWorker's sparse form.
TEST_F(OperatorE2E, CustomClusterDomainAndDynamicWorkers) {
  op_env_ = {{"CUSTOM_CLUSTER_DOMAIN", "cluster.local"}};
  StartOperator();
  json job = Manifest("examples/operator/chief-ps-workers-evaluator.yaml");
  Submit(job);
  job["metadata"]["name"] = "sparse";
  job["spec"]["enableDynamicWorker"] = true;
  Submit(job);
  ASSERT_TRUE(Eventually([&] { return Pods("full").size() == 5 && Pods("sparse").size() == 5; })) << op_->output();
  const std::string s = "." + ns_ + ".svc.cluster.local:2222";
  EXPECT_EQ(Env(Get("pod", "full-evaluator-0"), "TF_CONFIG"),
            R"({"cluster":{"chief":["full-chief-0)" + s + R"("],"evaluator":["full-evaluator-0)" + s +
                R"("],"ps":["full-ps-0)" + s + R"("],"worker":["full-worker-0)" + s + R"(","full-worker-1)" + s +
                R"("]},"task":{"type":"evaluator","index":0},"environment":"cloud"})");
  EXPECT_EQ(Env(Get("pod", "sparse-worker-1"), "TF_CONFIG"), R"({"cluster":{"worker":{"1":"sparse-worker-1)" + s +
                                                                 R"("},"ps":["sparse-ps-0)" + s +
                                                                 R"("]},"task":{"type":"worker","index":1}})");
  EXPECT_EQ(Env(Get("pod", "sparse-evaluator-0"), "TF_CONFIG"),
            R"({"cluster":{"worker":{},"ps":[]},"task":{"type":"evaluator","index":0}})");
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
// (No test of this executable installs a PodGroup CRD; e2e_faults_test.cc,
// with a control plane of its own, does.)
TEST_F(OperatorE2E, GangSchedulerWithoutItsCrdIsAClearError) {
  auto r = t::Run({t::BinDir() + "/tfjob-operator", "--kubeconfig", cp_->admin_kubeconfig(), "--gang-scheduler-name",
                   "volcano", "--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "127.0.0.1:0"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("flag --gang-scheduler-name volcano: the API server does not serve "
                               "scheduling.volcano.sh/v1beta1 podgroups; install the scheduler's CRDs"));
}

TEST_F(OperatorE2E, ExampleExitCodeCountsRestartsAgainstBackoffLimit) {
  StartOperator();
  Submit(Manifest("examples/operator/exitcode.yaml"));
  ASSERT_TRUE(Eventually([&] { return Pods("exitcode").size() == 2; })) << op_->output();
  for (int round = 1; round <= 3; ++round) {
    const std::string uid = Get("pod", "exitcode-worker-1")["metadata"]["uid"];
    SetPhase("exitcode-worker-1", "Failed", 143);
    if (round < 3) {
      ASSERT_TRUE(Eventually([&] {
        auto p = TryGet("pod", "exitcode-worker-1");
        return p && (*p)["metadata"]["uid"] != uid;
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
  StartOperator();
  Submit(Manifest("examples/operator/cleanpod-all.yaml"));
  ASSERT_TRUE(Eventually([&] { return Pods("cleanpod-all").size() == 3; })) << op_->output();
  SetPhase("cleanpod-all-worker-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return HasCondition("cleanpod-all", "Succeeded"); })) << op_->output();
  ASSERT_TRUE(Eventually([&] { return Pods("cleanpod-all").empty() && Services("cleanpod-all").empty(); }));
}

TEST_F(OperatorE2E, ExampleTtlDeletesTheFinishedJob) {
  StartOperator();
  Submit(Manifest("examples/operator/ttl.yaml"));
  ASSERT_TRUE(Eventually([&] { return Pods("ttl").size() == 1; })) << op_->output();
  SetPhase("ttl-worker-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return HasCondition("ttl", "Succeeded"); })) << op_->output();
  // Deleted by the timed requeue two seconds later; its pods go with it,
  // deleted by the real garbage collector (ownerReferences), which may
  // first have to discover the TFJob resource.
  ASSERT_TRUE(Eventually([&] { return !TryGet("tfjob", "ttl"); })) << op_->output();
  EXPECT_TRUE(Eventually([&] { return Pods("ttl").empty(); }, kGarbageCollectorTimeout));
}

TEST_F(OperatorE2E, ExampleSuspend) {
  StartOperator();
  Submit(Manifest("examples/operator/suspend.yaml"));
  ASSERT_TRUE(Eventually([&] { return HasCondition("suspended", "Suspended"); })) << op_->output();
  EXPECT_TRUE(Pods("suspended").empty());
  Kubectl(
      {"patch", "-n", ns_, "tfjob", "suspended", "--type=merge", "-p", R"({"spec":{"runPolicy":{"suspend":false}}})"});
  ASSERT_TRUE(Eventually([&] { return Pods("suspended").size() == 2; })) << op_->output();
}

}  // namespace
}  // namespace tfjob::op::envtest

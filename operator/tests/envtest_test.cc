// The tfjob-operator binary against a real Kubernetes API server
// (tests/support/envtest.h): the CRD's own validation and defaulting, the
// status subresource, RBAC, watches and the garbage collector are the real
// ones. The kubelet's part is played by writing pod status.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "operator/tests/envtest_support.h"
#include "tests/support/subprocess.h"

namespace tfjob::op::envtest {
namespace {

using ::testing::HasSubstr;

class EnvtestOperator : public RealApiServerTest {};

// Names, labels, ownerReferences and services of a Chief + PS x2 +
// Worker x2 + Evaluator job, and TF_CONFIG read back from the stored pods,
// byte for byte as training-operator v1.9 writes it: every replica type in
// "cluster", the evaluator included.
TEST_F(EnvtestOperator, CreatesPodsAndServicesWithKubeflowsNamesLabelsAndTfConfig) {
  StartOperator();
  Apply(JobYaml("dist", Replica("Chief", 1) + Replica("PS", 2) + Replica("Worker", 2) + Replica("Evaluator", 1)));
  ASSERT_TRUE(Eventually([&] { return Pods("dist").size() == 6 && Services("dist").size() == 6; })) << op_->output();
  const json pod = Get("pod", "dist-worker-1");
  const std::string s = "." + ns_ + ".svc:2222";
  EXPECT_EQ(Env(pod, "TF_CONFIG"),
            R"({"cluster":{"chief":["dist-chief-0)" + s + R"("],"evaluator":["dist-evaluator-0)" + s +
                R"("],"ps":["dist-ps-0)" + s + R"(","dist-ps-1)" + s + R"("],"worker":["dist-worker-0)" + s +
                R"(","dist-worker-1)" + s + R"("]},"task":{"type":"worker","index":1},"environment":"cloud"})");
  const auto& labels = pod["metadata"]["labels"];
  EXPECT_EQ(labels["training.kubeflow.org/job-name"], "dist");
  EXPECT_EQ(labels["training.kubeflow.org/replica-type"], "worker");
  EXPECT_EQ(labels["training.kubeflow.org/replica-index"], "1");
  EXPECT_EQ(labels["training.kubeflow.org/operator-name"], "tfjob-controller");
  EXPECT_FALSE(labels.contains("training.kubeflow.org/job-role"));
  EXPECT_EQ(Get("pod", "dist-chief-0")["metadata"]["labels"]["training.kubeflow.org/job-role"], "master");
  const json job = Get("tfjob", "dist");
  const auto& owner = pod["metadata"]["ownerReferences"][0];
  EXPECT_EQ(owner["kind"], "TFJob");
  EXPECT_EQ(owner["uid"], job["metadata"]["uid"]);
  EXPECT_EQ(owner["controller"], true);
  EXPECT_EQ(owner["blockOwnerDeletion"], true);
}

// The series operator dashboards and alerts are built on: Kubeflow's job
// counters, controller-runtime's and client-go's (reconcile, work queue,
// REST client, process) and this operator's own, in a format promtool
// accepts.
TEST_F(EnvtestOperator, MetricsHaveKubeflowsAndControllerRuntimesSeries) {
  StartOperator();
  Apply(JobYaml("metered", Replica("Worker", 2)));
  ASSERT_TRUE(Eventually([&] { return Pods("metered").size() == 2; })) << op_->output();
  ASSERT_TRUE(Eventually([&] {
    return Metrics().find(R"(controller_runtime_reconcile_total{controller="tfjob-controller",result="success"} 0)") ==
           std::string::npos;
  }));
  const std::string m = Metrics();
  for (const std::string& series :
       {"training_operator_jobs_created_total{framework=\"tensorflow\",job_namespace=\"" + ns_ + "\"} 1",
        std::string("controller_runtime_reconcile_total{controller=\"tfjob-controller\",result=\"success\"}"),
        std::string("controller_runtime_reconcile_errors_total{controller=\"tfjob-controller\"}"),
        std::string("controller_runtime_reconcile_time_seconds_count{controller=\"tfjob-controller\"}"),
        // --workers' default, 2 (v1.9.0's --controller-threads is 1).
        std::string("controller_runtime_max_concurrent_reconciles{controller=\"tfjob-controller\"} 2\n"),
        std::string("controller_runtime_active_workers{controller=\"tfjob-controller\"}"),
        std::string("controller_runtime_terminal_reconcile_errors_total{controller=\"tfjob-controller\"} 0"),
        std::string("controller_runtime_reconcile_panics_total{controller=\"tfjob-controller\"} 0"),
        std::string("workqueue_depth{controller=\"tfjob-controller\",name=\"tfjob-controller\"}"),
        std::string("workqueue_adds_total{controller=\"tfjob-controller\",name=\"tfjob-controller\"}"),
        std::string(
            "workqueue_queue_duration_seconds_count{controller=\"tfjob-controller\",name=\"tfjob-controller\"}"),
        std::string("workqueue_work_duration_seconds_count{controller=\"tfjob-controller\",name=\"tfjob-controller\"}"),
        std::string("workqueue_retries_total{controller=\"tfjob-controller\",name=\"tfjob-controller\"}"),
        std::string("workqueue_unfinished_work_seconds{controller=\"tfjob-controller\",name=\"tfjob-controller\"}"),
        std::string(
            "workqueue_longest_running_processor_seconds{controller=\"tfjob-controller\",name=\"tfjob-controller\"}"),
        std::string("rest_client_requests_total{code=\"201\",host=\"") + cp_->server().substr(8) +
            "\",method=\"POST\"}",
        std::string("process_cpu_seconds_total"), std::string("process_resident_memory_bytes"),
        std::string("process_open_fds"), std::string("process_start_time_seconds"),
        // This operator's additions (docs/monitoring.md).
        std::string("tfjob_operator_reconcile_duration_seconds_count "),
        std::string("tfjob_operator_reconcile_errors_total "), std::string("tfjob_operator_workqueue_depth "),
        std::string("tfjob_operator_api_requests "), std::string("\ntfjob_operator_leader 1\n")}) {
    EXPECT_THAT(m, HasSubstr(series)) << series;
  }
  // API requests sent: at least the pods and services created, and the
  // job's status.
  const size_t at = m.find("\ntfjob_operator_api_requests ");
  ASSERT_NE(at, std::string::npos);
  EXPECT_GE(std::stod(m.substr(at + 29)), 5) << m.substr(at, 60);
  const std::string file = dir_ + "/metrics.txt";
  std::ofstream(file) << m;
  auto check = ::tfjob::testing::Run({"/bin/sh", "-c", "promtool check metrics < '" + file + "'"});
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
}

// Leader election as controller-runtime does it: the Lease in the
// operator's own namespace unless told, and a candidate that may not use
// its Lease says why on every attempt instead of waiting in silence.
TEST_F(EnvtestOperator, LeaderElectionSaysWhyItCannotAcquire) {
  // An identity with no rights at all: every Lease request is forbidden.
  Kubectl({"create", "serviceaccount", "nobody", "-n", ns_});
  auto token = Kubectl({"create", "token", "nobody", "-n", ns_});
  std::string t = token.out;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
  const std::string kubeconfig = dir_ + "/nobody.kubeconfig";
  const json admin = json::parse(Kubectl({"config", "view", "--raw", "--minify", "-o", "json"}).out);
  json cfg = admin;
  cfg["users"] = json::array({{{"name", "nobody"}, {"user", {{"token", t}}}}});
  cfg["contexts"][0]["context"]["user"] = "nobody";
  std::ofstream(kubeconfig) << cfg.dump();
  // Without rights on nodes, the node-failure handling (on by default)
  // says at start-up what to grant or turn off, and exits 2.
  {
    auto refused = OperatorProcess({"--leader-elect", "--leader-election-lease-duration", "2"}, kubeconfig);
    ASSERT_TRUE(refused->WaitForLine("flag --node-unreachable-grace-seconds=60: the operator may not list nodes",
                                     std::chrono::seconds(30)))
        << refused->output();
    ASSERT_TRUE(Eventually([&] { return !refused->running(); })) << refused->output();
    EXPECT_EQ(refused->Stop(), 2) << refused->output();
    EXPECT_THAT(refused->output(), HasSubstr("grant list and watch on nodes"));
  }
  op_ = OperatorProcess(
      {"--leader-elect", "--leader-election-lease-duration", "2", "--node-unreachable-grace-seconds=0"}, kubeconfig);
  ASSERT_TRUE(op_->WaitForLine("leader election: cannot acquire Lease " + ns_ + "/tfjob-operator-leader",
                               std::chrono::seconds(30)))
      << op_->output();
  EXPECT_THAT(op_->output(), HasSubstr("forbidden"));
  StopOperator();
}

}  // namespace
}  // namespace tfjob::op::envtest

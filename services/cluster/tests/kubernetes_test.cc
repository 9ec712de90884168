#include "services/cluster/kubernetes.h"

#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kube/rest_client.h"
#include "tests/support/apiserver/apiserver_double.h"
#include "tests/support/wait.h"

namespace tfjob::cluster::kubernetes {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

json Pod(const std::string& job, const std::string& type, int index, const std::string& ip, const std::string& phase) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", job + "-" + type + "-" + std::to_string(index)},
            {"namespace", "default"},
            {"labels",
             {{"training.kubeflow.org/job-name", job},
              {"training.kubeflow.org/replica-type", type},
              {"training.kubeflow.org/replica-index", std::to_string(index)}}}}},
          {"spec", {{"containers", json::array({{{"name", "tensorflow"}, {"image", "i"}}})}}},
          {"status", {{"phase", phase}, {"podIP", ip}}}};
}

class ResolverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = *testing::ApiServerDouble::Start();
    kube::ClusterConfig c;
    c.server = server_->url();
    client_ = *kube::RestClient::Create(c);
  }
  std::unique_ptr<testing::ApiServerDouble> server_;
  std::unique_ptr<kube::RestClient> client_;
};

TEST_F(ResolverTest, PodIpsInNumericReplicaIndexOrder) {
  // Twelve workers: by name, worker-10 and worker-11 would sort before worker-2.
  for (int i = 11; i >= 0; --i) {
    ASSERT_TRUE(
        server_->Put("pods", "default", Pod("j", "worker", i, "10.0.0." + std::to_string(i + 1), "Running")).ok());
  }
  ASSERT_TRUE(server_->Put("pods", "default", Pod("j", "ps", 0, "10.0.1.1", "Running")).ok());
  ASSERT_TRUE(server_->Put("pods", "default", Pod("other", "worker", 0, "10.9.9.9", "Running")).ok());
  ResolverOptions o;
  o.job_selectors = TfJobSelectors("j", {"ps", "worker"});
  o.port = 2222;
  auto spec = ResolveCluster(*client_, o);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->NumTasks("worker"), 12);
  EXPECT_EQ(*spec->Address("worker", 2), "10.0.0.3:2222");
  EXPECT_EQ(*spec->Address("worker", 10), "10.0.0.11:2222");
  EXPECT_EQ(*spec->Address("ps", 0), "10.0.1.1:2222");
  EXPECT_FALSE(spec->HasJob("chief"));
}

TEST_F(ResolverTest, WaitsForRunningAndNamesWhatIsNotReady) {
  ASSERT_TRUE(server_->Put("pods", "default", Pod("j", "worker", 0, "10.0.0.1", "Running")).ok());
  ASSERT_TRUE(server_->Put("pods", "default", Pod("j", "worker", 1, "", "Pending")).ok());
  ResolverOptions o;
  o.job_selectors = TfJobSelectors("j", {"worker"});
  o.poll_interval = 20ms;
  o.wait_timeout = 200ms;
  auto late = ResolveCluster(*client_, o);
  EXPECT_EQ(late.status().code(), Code::kDeadlineExceeded);
  EXPECT_THAT(late.status().message(), HasSubstr("j-worker-1"));
  // The pod starts while the resolver waits: once it has listed the pods and
  // found this one pending.
  o.wait_timeout = 20s;
  server_->ClearRequests();
  std::thread kubelet([&] {
    (void)testing::WaitUntil([&] {
      for (const auto& r : server_->Requests()) {
        if (r.method == "GET" && r.path.find("/pods") != std::string::npos && r.code == 200) return true;
      }
      return false;
    });
    (void)server_->Put("pods", "default", Pod("j", "worker", 1, "10.0.0.2", "Running"));
  });
  auto spec = ResolveCluster(*client_, o);
  kubelet.join();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(*spec->Address("worker", 1), "10.0.0.2:2222");
}

TEST_F(ResolverTest, ExpectedTasksWaitForEveryIndexAndPortsComeFromThePodSpec) {
  // Worker 1 not created yet, worker 2 left over from a larger job: neither
  // may end up in a two-worker cluster.
  json w0 = Pod("j", "worker", 0, "10.0.0.1", "Running");
  w0["spec"]["containers"][0]["ports"] = json::array({{{"name", "tfjob-port"}, {"containerPort", 3333}}});
  ASSERT_TRUE(server_->Put("pods", "default", w0).ok());
  ASSERT_TRUE(server_->Put("pods", "default", Pod("j", "worker", 2, "10.0.0.3", "Running")).ok());
  ResolverOptions o;
  o.job_selectors = TfJobSelectors("j", {"worker"});
  o.expected_tasks = {{"worker", 2}};
  o.poll_interval = 20ms;
  o.wait_timeout = 200ms;
  auto early = ResolveCluster(*client_, o);
  EXPECT_EQ(early.status().code(), Code::kDeadlineExceeded);
  EXPECT_THAT(early.status().message(), HasSubstr("worker 1 (no pod yet)"));
  ASSERT_TRUE(server_->Put("pods", "default", Pod("j", "worker", 1, "fd00::2", "Running")).ok());
  auto spec = ResolveCluster(*client_, o);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->NumTasks("worker"), 2);
  EXPECT_EQ(*spec->Address("worker", 0), "10.0.0.1:3333");   // its tfjob-port
  EXPECT_EQ(*spec->Address("worker", 1), "[fd00::2]:2222");  // none declared: the default
}

TEST(TfJobTaskCountsTest, KubeflowKeysLowerCasedReplicasDefaultToOneEvaluatorLeftOut) {
  const json job = {{"metadata", {{"name", "j"}}},
                    {"spec",
                     {{"tfReplicaSpecs",
                       {{"Chief", json::object()},
                        {"PS", {{"replicas", 2}}},
                        {"Worker", {{"replicas", 3}}},
                        {"Evaluator", {{"replicas", 1}}}}}}}};
  auto counts = TfJobTaskCounts(job);
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_EQ(*counts, (std::map<std::string, int64_t>{{"chief", 1}, {"ps", 2}, {"worker", 3}}));
  EXPECT_EQ(TfJobTaskCounts({{"metadata", {{"name", "j"}}}}).status().code(), Code::kInvalidArgument);
  auto bad = TfJobTaskCounts(
      {{"metadata", {{"name", "j"}}}, {"spec", {{"tfReplicaSpecs", {{"Worker", {{"replicas", "two"}}}}}}}});
  EXPECT_THAT(bad.status().message(), HasSubstr("spec.tfReplicaSpecs[Worker].replicas is not a non-negative integer"));
}

}  // namespace
}  // namespace tfjob::cluster::kubernetes

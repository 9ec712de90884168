// The Kubernetes cluster resolver against the real API server
// (services/cluster/tests/envtest_fixture.h): pods found by the operator's
// labels, with the test playing the kubelet through their status
// subresource. The FaultProxy is in front only where a test needs the log
// of what the resolver requested.
#include "services/cluster/kubernetes.h"

#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kube/rest_client.h"
#include "services/cluster/tests/envtest_fixture.h"
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

class ResolverTest : public testing::EnvtestTest {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(SetUpNamespace("c")); }
  // The resolver's options, in the test's namespace.
  ResolverOptions Options(const std::vector<std::string>& types) const {
    ResolverOptions o;
    o.ns = ns_;
    o.job_selectors = TfJobSelectors("j", types);
    return o;
  }
};

TEST_F(ResolverTest, PodIpsInNumericReplicaIndexOrder) {
  // Twelve workers: by name, worker-10 and worker-11 would sort before worker-2.
  for (int i = 11; i >= 0; --i) {
    ASSERT_NO_FATAL_FAILURE(PutPod(Pod("j", "worker", i, "10.0.0." + std::to_string(i + 1), "Running")));
  }
  ASSERT_NO_FATAL_FAILURE(PutPod(Pod("j", "ps", 0, "10.0.1.1", "Running")));
  ASSERT_NO_FATAL_FAILURE(PutPod(Pod("other", "worker", 0, "10.9.9.9", "Running")));
  ResolverOptions o = Options({"ps", "worker"});
  o.port = 2222;
  auto spec = ResolveCluster(Admin(), o);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->NumTasks("worker"), 12);
  EXPECT_EQ(*spec->Address("worker", 2), "10.0.0.3:2222");
  EXPECT_EQ(*spec->Address("worker", 10), "10.0.0.11:2222");
  EXPECT_EQ(*spec->Address("ps", 0), "10.0.1.1:2222");
  EXPECT_FALSE(spec->HasJob("chief"));
}

TEST_F(ResolverTest, WaitsForRunningAndNamesWhatIsNotReady) {
  ASSERT_NO_FATAL_FAILURE(PutPod(Pod("j", "worker", 0, "10.0.0.1", "Running")));
  ASSERT_NO_FATAL_FAILURE(PutPod(Pod("j", "worker", 1, "", "Pending")));
  ResolverOptions o = Options({"worker"});
  o.poll_interval = 20ms;
  o.wait_timeout = 200ms;
  ASSERT_NO_FATAL_FAILURE(StartProxy());
  kube::ClusterConfig c;
  c.server = proxy_->url();
  auto client = kube::RestClient::Create(c);
  ASSERT_TRUE(client.ok()) << client.status().message();
  auto late = ResolveCluster(**client, o);
  EXPECT_EQ(late.status().code(), Code::kDeadlineExceeded);
  EXPECT_THAT(late.status().message(), HasSubstr("j-worker-1"));
  // The pod starts while the resolver waits: once it has listed the pods and
  // found this one pending.
  o.wait_timeout = 20s;
  proxy_->ClearRequests();
  std::thread kubelet([&] {
    (void)tfjob::testing::WaitUntil([&] {
      for (const auto& r : proxy_->Requests()) {
        if (r.method == "GET" && r.path.find("/pods") != std::string::npos && r.code == 200) return true;
      }
      return false;
    });
    // Straight to the server: the pod exists, only its status changes.
    (void)Admin().MergePatch(kube::kPods, ns_, "j-worker-1",
                             {{"status", {{"phase", "Running"}, {"podIP", "10.0.0.2"}}}}, /*status=*/true);
  });
  auto spec = ResolveCluster(**client, o);
  kubelet.join();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(*spec->Address("worker", 1), "10.0.0.2:2222");
}

TEST_F(ResolverTest, ExpectedTasksWaitForEveryIndexAndPortsComeFromThePodSpec) {
  // Worker 1 not created yet, worker 2 left over from a larger job: neither
  // may end up in a two-worker cluster.
  json w0 = Pod("j", "worker", 0, "10.0.0.1", "Running");
  w0["spec"]["containers"][0]["ports"] = json::array({{{"name", "tfjob-port"}, {"containerPort", 3333}}});
  ASSERT_NO_FATAL_FAILURE(PutPod(w0));
  ASSERT_NO_FATAL_FAILURE(PutPod(Pod("j", "worker", 2, "10.0.0.3", "Running")));
  ResolverOptions o = Options({"worker"});
  o.expected_tasks = {{"worker", 2}};
  o.poll_interval = 20ms;
  o.wait_timeout = 200ms;
  auto early = ResolveCluster(Admin(), o);
  EXPECT_EQ(early.status().code(), Code::kDeadlineExceeded);
  EXPECT_THAT(early.status().message(), HasSubstr("worker 1 (no pod yet)"));
  ASSERT_NO_FATAL_FAILURE(PutPod(Pod("j", "worker", 1, "fd00::2", "Running")));
  auto spec = ResolveCluster(Admin(), o);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->NumTasks("worker"), 2);
  EXPECT_EQ(*spec->Address("worker", 0), "10.0.0.1:3333");   // its tfjob-port
  EXPECT_EQ(*spec->Address("worker", 1), "[fd00::2]:2222");  // none declared: the default
}

}  // namespace
}  // namespace tfjob::cluster::kubernetes

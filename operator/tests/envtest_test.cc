// The tfjob-operator binary against a real Kubernetes API server
// (tests/support/envtest.h): the CRD's own validation and defaulting, the
// status subresource, RBAC, watches and the garbage collector are the real
// ones. The kubelet's part is played by writing pod status.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "operator/tests/envtest_support.h"

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

}  // namespace
}  // namespace tfjob::op::envtest

// The operator's own defences against TFJobs the project's CRD would refuse
// at admission (a CEL rule wants a "tensorflow" container, the schema an
// integer replica count): on a cluster whose TFJob CRD does not validate
// (an older or hand-made one), such jobs reach the operator. This
// executable's control plane (one per executable) installs such a CRD:
// kubeflow.org/v1 TFJob with a status subresource and a schema that keeps
// any field. The admission side, with the project's CRD, is
// envtest_crd_test.cc's.
#include <fstream>

#include "operator/tests/e2e_support.h"

namespace tfjob::op::envtest {
namespace {

using ::testing::HasSubstr;
namespace t = ::tfjob::testing;

class OperatorE2ELaxCrd : public OperatorE2E {
 protected:
  std::string CrdPath() override {
    const json crd{
        {"apiVersion", "apiextensions.k8s.io/v1"},
        {"kind", "CustomResourceDefinition"},
        {"metadata", {{"name", "tfjobs.kubeflow.org"}}},
        {"spec",
         {{"group", "kubeflow.org"},
          {"names", {{"kind", "TFJob"}, {"listKind", "TFJobList"}, {"plural", "tfjobs"}, {"singular", "tfjob"}}},
          {"scope", "Namespaced"},
          {"versions",
           json::array({{{"name", "v1"},
                         {"served", true},
                         {"storage", true},
                         {"schema",
                          {{"openAPIV3Schema", {{"type", "object"}, {"x-kubernetes-preserve-unknown-fields", true}}}}},
                         {"subresources", {{"status", json::object()}}}}})}}}};
    const std::string path = t::MakeTempDir("lax-crd") + "/tfjobs.json";
    std::ofstream(path) << crd.dump();
    return path;
  }
};

TEST_F(OperatorE2ELaxCrd, InvalidJobFailsNamingTheField) {
  StartOperator();
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
TEST_F(OperatorE2ELaxCrd, UndecodableJobFailsAndTheOperatorStaysUp) {
  StartOperator();
  json job = SmallJob("undecodable", "Never", 1);
  job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = "two";
  job.erase("status");
  Submit(job);
  ASSERT_TRUE(Eventually([&] { return HasCondition("undecodable", "Failed"); })) << op_->output();
  EXPECT_THAT(Job("undecodable")["status"]["conditions"][0].value("message", ""), HasSubstr("replicas"));
  Submit(SmallJob("after", "Never", 1));
  EXPECT_TRUE(Eventually([&] { return Pods("after").size() == 1; })) << op_->output();
}

}  // namespace
}  // namespace tfjob::op::envtest

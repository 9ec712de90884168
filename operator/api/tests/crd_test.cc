// The CRD in crds/kubeflow.org_tfjobs.yaml: parsed with yaml-cpp and checked
// against the names, schema and rules the C++ API relies on.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "common/files.h"

#include "operator/api/codec.h"
#include "operator/api/types.h"
#include "tests/support/subprocess.h"

namespace tfjob::op::api {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

class CrdTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = new std::string(tfjob::testing::SourceDir() + "/crds/kubeflow.org_tfjobs.yaml");
    crd_ = new YAML::Node(YAML::LoadFile(*path_));
  }
  static void TearDownTestSuite() {
    delete crd_;
    delete path_;
  }

  static YAML::Node Version() { return (*crd_)["spec"]["versions"][0]; }
  static YAML::Node Schema() { return Version()["schema"]["openAPIV3Schema"]; }

  // The schema node at a path of property names; "*" steps into
  // additionalProperties, "[]" into items.
  static YAML::Node At(const std::vector<std::string>& path) {
    // Node::operator= would write through to the document; reset() rebinds.
    YAML::Node n = Schema();
    for (const std::string& p : path) {
      if (p == "*") {
        n.reset(n["additionalProperties"]);
      } else if (p == "[]") {
        n.reset(n["items"]);
      } else {
        n.reset(n["properties"][p]);
      }
      if (!n.IsDefined() || n.IsNull()) {
        ADD_FAILURE() << "schema has no " << p;
        return YAML::Node();
      }
    }
    return n;
  }

  static std::vector<std::string> Messages(const YAML::Node& node) {
    std::vector<std::string> out;
    for (const auto& rule : node["x-kubernetes-validations"]) out.push_back(rule["message"].as<std::string>());
    return out;
  }
  static std::vector<std::string> Rules(const YAML::Node& node) {
    std::vector<std::string> out;
    for (const auto& rule : node["x-kubernetes-validations"]) out.push_back(rule["rule"].as<std::string>());
    return out;
  }
  static std::set<std::string> Enum(const YAML::Node& node) {
    std::set<std::string> out;
    for (const auto& v : node["enum"]) out.insert(v.as<std::string>());
    return out;
  }

  static std::string* path_;
  static YAML::Node* crd_;
};

std::string* CrdTest::path_ = nullptr;
YAML::Node* CrdTest::crd_ = nullptr;

TEST_F(CrdTest, NamesAndVersion) {
  const YAML::Node& crd = *crd_;
  EXPECT_EQ(crd["apiVersion"].as<std::string>(), "apiextensions.k8s.io/v1");
  EXPECT_EQ(crd["kind"].as<std::string>(), "CustomResourceDefinition");
  EXPECT_EQ(crd["metadata"]["name"].as<std::string>(), std::string(kPlural) + "." + std::string(kGroup));
  EXPECT_EQ(crd["spec"]["group"].as<std::string>(), kGroup);
  EXPECT_EQ(crd["spec"]["scope"].as<std::string>(), "Namespaced");
  const YAML::Node names = crd["spec"]["names"];
  EXPECT_EQ(names["kind"].as<std::string>(), kKind);
  EXPECT_EQ(names["listKind"].as<std::string>(), kListKind);
  EXPECT_EQ(names["plural"].as<std::string>(), kPlural);
  EXPECT_EQ(names["singular"].as<std::string>(), kSingular);
  ASSERT_EQ(crd["spec"]["versions"].size(), 1u);
  EXPECT_EQ(Version()["name"].as<std::string>(), kVersion);
  EXPECT_TRUE(Version()["served"].as<bool>());
  EXPECT_TRUE(Version()["storage"].as<bool>());
  ASSERT_TRUE(Version()["subresources"]["status"].IsMap());
  EXPECT_EQ(Version()["subresources"]["status"].size(), 0u);
}

TEST_F(CrdTest, PrinterColumns) {
  const YAML::Node cols = Version()["additionalPrinterColumns"];
  ASSERT_EQ(cols.size(), 2u);
  EXPECT_EQ(cols[0]["name"].as<std::string>(), "State");
  EXPECT_EQ(cols[0]["type"].as<std::string>(), "string");
  EXPECT_EQ(cols[0]["jsonPath"].as<std::string>(), ".status.conditions[-1:].type");
  EXPECT_EQ(cols[1]["name"].as<std::string>(), "Age");
  EXPECT_EQ(cols[1]["type"].as<std::string>(), "date");
  EXPECT_EQ(cols[1]["jsonPath"].as<std::string>(), ".metadata.creationTimestamp");
}

TEST_F(CrdTest, EveryModelledFieldIsInTheSchema) {
  struct Field {
    std::vector<std::string> path;
    std::string type;
  };
  const std::vector<Field> fields = {
      {{"apiVersion"}, "string"},
      {{"kind"}, "string"},
      {{"metadata"}, "object"},
      {{"spec"}, "object"},
      {{"spec", "enableDynamicWorker"}, "boolean"},
      {{"spec", "successPolicy"}, "string"},
      {{"spec", "runPolicy"}, "object"},
      {{"spec", "runPolicy", "cleanPodPolicy"}, "string"},
      {{"spec", "runPolicy", "ttlSecondsAfterFinished"}, "integer"},
      {{"spec", "runPolicy", "activeDeadlineSeconds"}, "integer"},
      {{"spec", "runPolicy", "backoffLimit"}, "integer"},
      {{"spec", "runPolicy", "schedulingPolicy"}, "object"},
      {{"spec", "runPolicy", "schedulingPolicy", "minAvailable"}, "integer"},
      {{"spec", "runPolicy", "schedulingPolicy", "queue"}, "string"},
      {{"spec", "runPolicy", "schedulingPolicy", "minResources"}, "object"},
      {{"spec", "runPolicy", "schedulingPolicy", "priorityClass"}, "string"},
      {{"spec", "runPolicy", "schedulingPolicy", "scheduleTimeoutSeconds"}, "integer"},
      {{"spec", "runPolicy", "suspend"}, "boolean"},
      {{"spec", "runPolicy", "managedBy"}, "string"},
      {{"spec", "tfReplicaSpecs"}, "object"},
      {{"spec", "tfReplicaSpecs", "*"}, "object"},
      {{"spec", "tfReplicaSpecs", "*", "replicas"}, "integer"},
      {{"spec", "tfReplicaSpecs", "*", "restartPolicy"}, "string"},
      {{"spec", "tfReplicaSpecs", "*", "template"}, "object"},
      {{"spec", "tfReplicaSpecs", "*", "template", "spec", "containers"}, "array"},
      {{"spec", "tfReplicaSpecs", "*", "template", "spec", "containers", "[]", "name"}, "string"},
      {{"spec", "tfReplicaSpecs", "*", "template", "spec", "containers", "[]", "image"}, "string"},
      {{"status"}, "object"},
      {{"status", "conditions"}, "array"},
      {{"status", "conditions", "[]", "type"}, "string"},
      {{"status", "conditions", "[]", "status"}, "string"},
      {{"status", "conditions", "[]", "reason"}, "string"},
      {{"status", "conditions", "[]", "message"}, "string"},
      {{"status", "conditions", "[]", "lastUpdateTime"}, "string"},
      {{"status", "conditions", "[]", "lastTransitionTime"}, "string"},
      {{"status", "replicaStatuses"}, "object"},
      {{"status", "replicaStatuses", "*", "active"}, "integer"},
      {{"status", "replicaStatuses", "*", "succeeded"}, "integer"},
      {{"status", "replicaStatuses", "*", "failed"}, "integer"},
      {{"status", "replicaStatuses", "*", "selector"}, "string"},
      {{"status", "replicaStatuses", "*", "labelSelector"}, "object"},
      {{"status", "startTime"}, "string"},
      {{"status", "completionTime"}, "string"},
      {{"status", "lastReconcileTime"}, "string"},
  };
  for (const Field& f : fields) {
    std::string name;
    for (const std::string& p : f.path) name += "/" + p;
    SCOPED_TRACE(name);
    YAML::Node n = At(f.path);
    ASSERT_TRUE(n.IsMap());
    EXPECT_EQ(n["type"].as<std::string>(), f.type);
  }
  EXPECT_EQ(At({"spec", "tfReplicaSpecs", "*", "replicas"})["format"].as<std::string>(), "int32");
  EXPECT_EQ(At({"spec", "runPolicy", "activeDeadlineSeconds"})["format"].as<std::string>(), "int64");
}

// The pod template has Kubernetes' PodTemplateSpec schema, generated by
// tools/gen_crd_schema.py (tools/crd/regen_test.sh keeps it current): typed
// all the way down, so nothing a pod would not have is kept.
TEST_F(CrdTest, PodTemplateHasThePodSchema) {
  const std::vector<std::string> containers = {"spec", "tfReplicaSpecs", "*", "template", "spec", "containers"};
  for (const std::vector<std::string>& p :
       std::vector<std::vector<std::string>>{{"spec", "tfReplicaSpecs", "*", "template"},
                                             {"spec", "tfReplicaSpecs", "*", "template", "metadata"},
                                             {"spec", "tfReplicaSpecs", "*", "template", "spec"},
                                             {"spec", "tfReplicaSpecs", "*", "template", "spec", "containers", "[]"}}) {
    EXPECT_FALSE(At(p)["x-kubernetes-preserve-unknown-fields"].IsDefined()) << p.back();
  }
  std::vector<std::string> port = containers;
  port.insert(port.end(), {"[]", "ports", "[]", "containerPort"});
  EXPECT_EQ(At(port)["type"].as<std::string>(), "integer");
  // Server-side apply merges containers by name, as for pods.
  EXPECT_EQ(At(containers)["x-kubernetes-list-type"].as<std::string>(), "map");
  EXPECT_EQ(At(containers)["x-kubernetes-list-map-keys"][0].as<std::string>(), "name");
}

TEST_F(CrdTest, EnumsMatchTheApi) {
  EXPECT_EQ(Enum(At({"spec", "tfReplicaSpecs", "*", "restartPolicy"})),
            (std::set<std::string>{"", std::string(kRestartPolicyAlways), std::string(kRestartPolicyOnFailure),
                                   std::string(kRestartPolicyNever), std::string(kRestartPolicyExitCode)}));
  EXPECT_EQ(Enum(At({"spec", "runPolicy", "cleanPodPolicy"})),
            (std::set<std::string>{"", std::string(kCleanPodPolicyAll), std::string(kCleanPodPolicyRunning),
                                   std::string(kCleanPodPolicyNone)}));
  EXPECT_EQ(Enum(At({"spec", "successPolicy"})),
            (std::set<std::string>{std::string(kSuccessPolicyDefault), std::string(kSuccessPolicyAllWorkers)}));
  EXPECT_EQ(Enum(At({"spec", "runPolicy", "managedBy"})),
            (std::set<std::string>{std::string(kManagedByKubeflow), std::string(kManagedByMultiKueue)}));
  for (const std::vector<std::string>& p :
       std::vector<std::vector<std::string>>{{"spec", "tfReplicaSpecs", "*", "replicas"},
                                             {"spec", "runPolicy", "ttlSecondsAfterFinished"},
                                             {"spec", "runPolicy", "activeDeadlineSeconds"},
                                             {"spec", "runPolicy", "backoffLimit"}}) {
    EXPECT_EQ(At(p)["minimum"].as<int>(), 0) << p.back();
  }
}

TEST_F(CrdTest, CelRules) {
  EXPECT_THAT(Messages(Schema()), Contains(HasSubstr("metadata.name must be a DNS-1035 label")));
  EXPECT_THAT(Rules(Schema()), Contains(HasSubstr("self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')")));
  EXPECT_THAT(Rules(Schema()), Contains(HasSubstr("size(self.spec.tfReplicaSpecs) > 0")));
  EXPECT_THAT(Messages(At({"spec", "tfReplicaSpecs"})),
              UnorderedElementsAre("must not have more than 1 Chief or Master role"));
  EXPECT_THAT(Messages(At({"spec", "tfReplicaSpecs", "*"})),
              UnorderedElementsAre("template.spec.containers must be specified"));
  EXPECT_THAT(Messages(At({"spec", "tfReplicaSpecs", "*", "template", "spec", "containers"})),
              UnorderedElementsAre("must have at least one container with name tensorflow"));
  EXPECT_THAT(Rules(At({"spec", "tfReplicaSpecs", "*", "template", "spec", "containers"})),
              UnorderedElementsAre(HasSubstr("c.name == 'tensorflow'")));
  EXPECT_THAT(Messages(At({"spec", "tfReplicaSpecs", "*", "template", "spec", "containers", "[]"})),
              UnorderedElementsAre("image must be specified"));
  EXPECT_THAT(Messages(At({"spec", "runPolicy", "managedBy"})), UnorderedElementsAre("field is immutable"));
  // Everything CEL iterates over is bounded, so the rule cost is bounded.
  EXPECT_GT(At({"spec", "tfReplicaSpecs"})["maxProperties"].as<int>(), 0);
  EXPECT_GT(At({"spec", "tfReplicaSpecs", "*", "template", "spec", "containers"})["maxItems"].as<int>(), 0);
  EXPECT_EQ(At({"spec", "tfReplicaSpecs", "*", "template", "spec", "containers", "[]", "name"})["maxLength"].as<int>(),
            63);
}

TEST_F(CrdTest, ReadsAsOneDocumentWithOurYamlReader) {
  auto text = ReadFile(*path_);
  ASSERT_TRUE(text.ok());
  auto docs = YamlDocumentsToJson(*text, *path_);
  ASSERT_TRUE(docs.ok()) << docs.status();
  ASSERT_EQ(docs->size(), 1u);
  EXPECT_EQ((*docs)[0]["spec"]["names"]["kind"], "TFJob");
}

}  // namespace
}  // namespace tfjob::op::api

#include "operator/api/defaults.h"

#include <gtest/gtest.h>

#include "operator/api/codec.h"
#include "operator/api/tests/test_util.h"

namespace tfjob::op::api {
namespace {

using testing::LoadJob;
using testing::LoadJson;
using json = nlohmann::json;

TEST(DefaultsTest, SingleWorkerEncodesToKubeflowsDefaultedObject) {
  TFJob job = LoadJob("single_worker.yaml");
  SetDefaults(job);
  EXPECT_EQ(Encode(job), json::parse(R"({
    "apiVersion": "kubeflow.org/v1",
    "kind": "TFJob",
    "metadata": {"name": "single"},
    "spec": {
      "runPolicy": {"cleanPodPolicy": "None"},
      "successPolicy": "",
      "tfReplicaSpecs": {
        "Worker": {
          "replicas": 1,
          "restartPolicy": "Never",
          "template": {"spec": {"containers": [{
            "name": "tensorflow",
            "image": "registry.example.com/trainer:latest",
            "ports": [{"name": "tfjob-port", "containerPort": 2222}]}]}}}}}})"));
}

TEST(DefaultsTest, ExplicitValuesAreKept) {
  TFJob job = LoadJob("clean_pod_all_ttl.yaml");
  SetDefaults(job);
  EXPECT_EQ(job.spec.run_policy.clean_pod_policy, "All");
  EXPECT_EQ(job.spec.success_policy, "AllWorkers");
  EXPECT_EQ(job.spec.run_policy.ttl_seconds_after_finished, 600);

  job = LoadJob("ps_workers.yaml");
  SetDefaults(job);
  EXPECT_EQ(job.Find(ReplicaType::kPS)->replicas, 2);
  EXPECT_EQ(job.Find(ReplicaType::kWorker)->restart_policy, "OnFailure");

  job = LoadJob("chief_ps_worker_evaluator.yaml");
  SetDefaults(job);
  EXPECT_EQ(job.Find(ReplicaType::kChief)->restart_policy, "ExitCode");
  EXPECT_EQ(job.Find(ReplicaType::kPS)->restart_policy, "Never");
  EXPECT_EQ(job.spec.run_policy.clean_pod_policy, "None");
}

TEST(DefaultsTest, PortOnlyOnTheTensorflowContainerAndOnlyWhenAbsent) {
  TFJob job = LoadJob("chief_ps_worker_evaluator.yaml");
  const json before = Encode(job);
  SetDefaults(job);
  const json after = Encode(job);
  // PS already has tfjob-port (2223): unchanged.
  EXPECT_EQ(after["spec"]["tfReplicaSpecs"]["PS"]["template"], before["spec"]["tfReplicaSpecs"]["PS"]["template"]);
  // Worker: the tensorflow container gains the port, the side-car does not.
  const json& containers = after["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"];
  EXPECT_EQ(containers[0]["ports"], json::parse(R"([{"name":"tfjob-port","containerPort":2222}])"));
  EXPECT_FALSE(containers[1].contains("ports"));
  const json& old_containers = before["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"];
  EXPECT_EQ(containers[0]["env"], old_containers[0]["env"]);

  // A port list without tfjob-port is appended to.
  json doc = LoadJson("single_worker.yaml");
  doc["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["ports"] =
      json::parse(R"([{"name":"metrics","containerPort":9090}])");
  job = Decode(doc).value();
  SetDefaults(job);
  EXPECT_EQ(Encode(job)["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["ports"],
            json::parse(R"([{"name":"metrics","containerPort":9090},{"name":"tfjob-port","containerPort":2222}])"));

  // No container named tensorflow: nothing is added anywhere.
  job = LoadJob("invalid_no_tensorflow_container.yaml");
  const json t = job.spec.replica_specs[0].template_json;
  SetDefaults(job);
  EXPECT_EQ(job.spec.replica_specs[0].template_json, t);
}

TEST(DefaultsTest, KeysBecomeCanonicalAndKeepTheirFields) {
  TFJob job = LoadJob("lowercase_keys.yaml");
  const json before = Encode(job);
  SetDefaults(job);
  const json after = Encode(job);
  const json& specs = after["spec"]["tfReplicaSpecs"];
  EXPECT_EQ(specs.size(), 3u);
  ASSERT_TRUE(specs.contains("Chief"));
  ASSERT_TRUE(specs.contains("PS"));
  ASSERT_TRUE(specs.contains("Worker"));
  EXPECT_EQ(specs["Chief"]["replicas"], 1);
  EXPECT_EQ(specs["Worker"]["replicas"], 2);
  EXPECT_EQ(specs["Worker"]["template"]["spec"]["containers"][0]["image"],
            before["spec"]["tfReplicaSpecs"]["WORKER"]["template"]["spec"]["containers"][0]["image"]);
  // Re-decoding the defaulted document and defaulting again changes nothing.
  TFJob again = Decode(after).value();
  SetDefaults(again);
  EXPECT_EQ(Encode(again), after);
}

TEST(DefaultsTest, MasterStaysMaster) {
  TFJob job = LoadJob("master_alias.yaml");
  SetDefaults(job);
  const ReplicaSpec* chief = job.Find(ReplicaType::kChief);
  ASSERT_NE(chief, nullptr);
  EXPECT_EQ(chief->key, "Master");
  EXPECT_TRUE(chief->master_alias);

  json doc = LoadJson("master_alias.yaml");
  doc["spec"]["tfReplicaSpecs"]["master"] = doc["spec"]["tfReplicaSpecs"]["Master"];
  doc["spec"]["tfReplicaSpecs"].erase("Master");
  job = Decode(doc).value();
  SetDefaults(job);
  EXPECT_TRUE(Encode(job)["spec"]["tfReplicaSpecs"].contains("Master"));
}

TEST(DefaultsTest, DuplicateKeysAreNotMerged) {
  TFJob job = LoadJob("invalid_duplicate_keys.yaml");
  SetDefaults(job);
  const json specs = Encode(job)["spec"]["tfReplicaSpecs"];
  EXPECT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs["Worker"]["replicas"], 2);
  EXPECT_EQ(specs["worker"]["replicas"], 1);
}

// Kubeflow's SetDefaults_TFJob replaces only a nil policy: "" stays "".
TEST(DefaultsTest, AnEmptyCleanPodPolicyIsKeptAsKubeflowKeepsIt) {
  json doc = LoadJson("single_worker.yaml");
  doc["spec"]["runPolicy"] = json::parse(R"({"cleanPodPolicy": ""})");
  TFJob job = Decode(doc).value();
  SetDefaults(job);
  EXPECT_EQ(job.spec.run_policy.clean_pod_policy, "");
}

TEST(DefaultsTest, IdempotentAndLeavesUnknownFieldsAlone) {
  for (const std::string& f : testing::ValidManifests()) {
    SCOPED_TRACE(f);
    TFJob job = LoadJob(f);
    SetDefaults(job);
    const json once = Encode(job);
    SetDefaults(job);
    EXPECT_EQ(Encode(job), once);
  }
  TFJob job = LoadJob("full_object.json");
  const json before = Encode(job);
  SetDefaults(job);
  EXPECT_EQ(Encode(job), before);  // already defaulted by a server
}

TEST(DefaultsTest, JobBuiltInCodeWithOddTemplates) {
  TFJob job;
  for (const char* t : {"null", "5", R"({"spec": 3})", R"({"spec": {"containers": {}}})",
                        R"({"spec": {"containers": [1, {"name": "tensorflow", "ports": "x"}]}})"}) {
    ReplicaSpec s;
    s.key = "Worker";
    s.type = ReplicaType::kWorker;
    s.template_json = json::parse(t);
    job.spec.replica_specs.push_back(s);
  }
  SetDefaults(job);  // must not throw or crash
  for (const ReplicaSpec& s : job.spec.replica_specs) {
    EXPECT_EQ(s.replicas, 1);
    EXPECT_EQ(s.restart_policy, "Never");
  }
  EXPECT_EQ(job.spec.replica_specs[0].key, "Worker");
}

}  // namespace
}  // namespace tfjob::op::api

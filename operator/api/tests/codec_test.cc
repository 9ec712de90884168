#include "operator/api/codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "operator/api/defaults.h"
#include "operator/api/tests/test_util.h"

namespace tfjob::op::api {
namespace {

using ::testing::ElementsAre;
using testing::LoadJob;
using testing::LoadJson;
using ::testing::Pair;
using json = nlohmann::json;

std::string Diff(const json& a, const json& b) { return json::diff(a, b).dump(); }

TEST(DecodeTest, PsWorkers) {
  TFJob job = LoadJob("ps_workers.yaml");
  EXPECT_EQ(job.api_version, "kubeflow.org/v1");
  EXPECT_EQ(job.kind, "TFJob");
  EXPECT_EQ(job.metadata.name, "dist-mnist");
  EXPECT_EQ(job.metadata.namespace_, "training");
  EXPECT_TRUE(job.spec.has_replica_specs);
  ASSERT_EQ(job.spec.replica_specs.size(), 2u);
  const ReplicaSpec* ps = job.Find(ReplicaType::kPS);
  const ReplicaSpec* worker = job.Find(ReplicaType::kWorker);
  ASSERT_NE(ps, nullptr);
  ASSERT_NE(worker, nullptr);
  EXPECT_EQ(ps->key, "PS");
  EXPECT_EQ(ps->source_key, "PS");
  EXPECT_EQ(ps->replicas, 2);
  EXPECT_EQ(ps->restart_policy, "Never");
  EXPECT_FALSE(ps->master_alias);
  EXPECT_EQ(worker->replicas, 4);
  EXPECT_EQ(worker->restart_policy, "OnFailure");
  EXPECT_EQ(worker->template_json["metadata"]["labels"]["team"], "vision");
  EXPECT_EQ(worker->template_json["spec"]["containers"][0]["resources"]["limits"]["cpu"], "2");
  EXPECT_FALSE(job.spec.run_policy.clean_pod_policy.has_value());
  EXPECT_FALSE(job.spec.success_policy.has_value());
  EXPECT_FALSE(job.spec.enable_dynamic_worker.has_value());
  EXPECT_EQ(job.Find(ReplicaType::kChief), nullptr);
}

TEST(DecodeTest, RunPolicyAndOtherSpecFields) {
  TFJob job = LoadJob("suspend.yaml");
  const RunPolicy& rp = job.spec.run_policy;
  EXPECT_EQ(rp.suspend, true);
  EXPECT_EQ(rp.clean_pod_policy, "Running");
  EXPECT_EQ(rp.scheduling_policy, json::parse(R"({"queue":"research","minAvailable":3,"priorityClass":"high"})"));

  job = LoadJob("clean_pod_all_ttl.yaml");
  EXPECT_EQ(job.spec.run_policy.clean_pod_policy, "All");
  EXPECT_EQ(job.spec.run_policy.ttl_seconds_after_finished, 600);
  EXPECT_EQ(job.spec.success_policy, "AllWorkers");

  job = LoadJob("chief_ps_worker_evaluator.yaml");
  EXPECT_EQ(job.spec.run_policy.backoff_limit, 3);
  EXPECT_EQ(job.spec.run_policy.active_deadline_seconds, 7200);
  EXPECT_THAT(job.metadata.labels, ElementsAre(Pair("app", "ctr")));
  EXPECT_THAT(job.metadata.annotations, ElementsAre(Pair("example.com/owner", "ranking-team")));
  EXPECT_EQ(job.Find(ReplicaType::kChief)->restart_policy, "ExitCode");
  EXPECT_EQ(job.Find(ReplicaType::kEvaluator)->replicas, 1);

  job = LoadJob("dynamic_worker.yaml");
  EXPECT_EQ(job.spec.enable_dynamic_worker, true);
}

TEST(DecodeTest, ReplicaKeysAreCaseInsensitiveAndMasterIsChief) {
  TFJob job = LoadJob("lowercase_keys.yaml");
  ASSERT_NE(job.Find(ReplicaType::kChief), nullptr);
  EXPECT_EQ(job.Find(ReplicaType::kChief)->key, "chief");
  EXPECT_FALSE(job.Find(ReplicaType::kChief)->replicas.has_value());
  EXPECT_EQ(job.Find(ReplicaType::kPS)->key, "ps");
  EXPECT_EQ(job.Find(ReplicaType::kWorker)->key, "WORKER");

  job = LoadJob("master_alias.yaml");
  const ReplicaSpec* chief = job.Find(ReplicaType::kChief);
  ASSERT_NE(chief, nullptr);
  EXPECT_EQ(chief->key, "Master");
  EXPECT_TRUE(chief->master_alias);

  bool master = false;
  EXPECT_EQ(ParseReplicaType("mAsTeR", &master), ReplicaType::kChief);
  EXPECT_TRUE(master);
  EXPECT_EQ(ParseReplicaType("evaluator", &master), ReplicaType::kEvaluator);
  EXPECT_FALSE(master);
  EXPECT_EQ(ParseReplicaType("Eval"), std::nullopt);
  EXPECT_EQ(ParseReplicaType(""), std::nullopt);
}

TEST(DecodeTest, FullServerObject) {
  TFJob job = LoadJob("full_object.json");
  const ObjectMeta& m = job.metadata;
  EXPECT_EQ(m.name, "mnist");
  EXPECT_EQ(m.namespace_, "kubeflow");
  EXPECT_EQ(m.uid, "5b0b7f4e-3f41-4a8e-9d4f-1c2a3b4c5d6e");
  EXPECT_EQ(m.resource_version, "48213");
  EXPECT_EQ(m.generation, 2);
  EXPECT_EQ(m.creation_timestamp, "2024-05-01T10:00:00Z");
  EXPECT_EQ(m.deletion_timestamp, "");
  ASSERT_EQ(m.owner_references.size(), 1u);
  EXPECT_EQ(m.owner_references[0].kind, "Experiment");
  EXPECT_EQ(m.owner_references[0].controller, false);
  EXPECT_EQ(m.owner_references[0].block_owner_deletion, std::nullopt);

  // A whole-number float is an integer.
  EXPECT_EQ(job.Find(ReplicaType::kWorker)->replicas, 2);
  EXPECT_EQ(job.spec.success_policy, "");

  const JobStatus& s = job.status;
  ASSERT_EQ(s.conditions.size(), 2u);
  EXPECT_EQ(s.conditions[0].type, "Created");
  EXPECT_EQ(s.conditions[0].status, "True");
  EXPECT_EQ(s.conditions[0].reason, "TFJobCreated");
  EXPECT_EQ(s.conditions[1].message, "TFJob kubeflow/mnist is running.");
  EXPECT_EQ(s.conditions[1].last_transition_time, "2024-05-01T10:00:05Z");
  ASSERT_EQ(s.replica_statuses.size(), 2u);
  EXPECT_EQ(s.replica_statuses.at("PS").active, 1);
  EXPECT_EQ(s.replica_statuses.at("PS").selector,
            "training.kubeflow.org/job-name=mnist,training.kubeflow.org/replica-type=ps");
  EXPECT_EQ(s.replica_statuses.at("Worker").active, 2);
  EXPECT_EQ(s.replica_statuses.at("Worker").label_selector["matchLabels"]["training.kubeflow.org/job-name"], "mnist");
  EXPECT_EQ(s.start_time, "2024-05-01T10:00:01Z");
  EXPECT_EQ(s.completion_time, "");
  EXPECT_EQ(s.last_reconcile_time, "2024-05-01T10:00:06Z");
}

TEST(DecodeTest, NullIsAbsent) {
  json doc = LoadJson("ps_workers.yaml");
  doc["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = nullptr;
  doc["spec"]["runPolicy"] = nullptr;
  doc["status"] = nullptr;
  doc["metadata"]["labels"] = nullptr;
  auto job = Decode(doc);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_FALSE(job->Find(ReplicaType::kWorker)->replicas.has_value());
  EXPECT_EQ(Encode(*job), doc);

  doc["spec"]["tfReplicaSpecs"]["Worker"] = nullptr;
  job = Decode(doc);
  ASSERT_TRUE(job.ok()) << job.status();
  const ReplicaSpec* w = job->Find(ReplicaType::kWorker);
  ASSERT_NE(w, nullptr);
  EXPECT_TRUE(w->template_json.is_null());
  EXPECT_EQ(Encode(*job), doc);

  doc["spec"]["tfReplicaSpecs"] = nullptr;
  job = Decode(doc);
  ASSERT_TRUE(job.ok());
  EXPECT_FALSE(job->spec.has_replica_specs);
  EXPECT_EQ(Encode(*job), doc);
}

TEST(DecodeTest, TypeMetaMayBeAbsentButNotForeign) {
  json doc = LoadJson("single_worker.yaml");
  doc.erase("apiVersion");
  doc.erase("kind");
  auto job = Decode(doc);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->api_version, "");
  EXPECT_EQ(Encode(*job), doc);
}

struct DecodeErrorCase {
  std::string pointer;  // JSON pointer into single_worker.yaml; "" replaces the document
  json value;
  std::string message;
};

void PrintTo(const DecodeErrorCase& c, std::ostream* os) { *os << (c.pointer.empty() ? "/" : c.pointer); }

class DecodeErrorTest : public ::testing::TestWithParam<DecodeErrorCase> {};

TEST_P(DecodeErrorTest, NamesTheField) {
  const DecodeErrorCase& c = GetParam();
  json doc = LoadJson("single_worker.yaml");
  if (c.pointer.empty()) {
    doc = c.value;
  } else {
    doc[json::json_pointer(c.pointer)] = c.value;
  }
  auto job = Decode(doc);
  ASSERT_FALSE(job.ok()) << doc.dump();
  EXPECT_EQ(job.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(job.status().message(), c.message);
}

const std::string kWorker = "/spec/tfReplicaSpecs/Worker";
const std::string kContainer = kWorker + "/template/spec/containers/0";

INSTANTIATE_TEST_SUITE_P(
    Fields, DecodeErrorTest,
    ::testing::Values(
        DecodeErrorCase{kWorker + "/replicas", "2", "spec.tfReplicaSpecs.Worker.replicas: expected an integer"},
        DecodeErrorCase{kWorker + "/replicas", 2.5, "spec.tfReplicaSpecs.Worker.replicas: expected an integer"},
        DecodeErrorCase{kWorker + "/replicas", true, "spec.tfReplicaSpecs.Worker.replicas: expected an integer"},
        DecodeErrorCase{kWorker + "/replicas", json::array({1}),
                        "spec.tfReplicaSpecs.Worker.replicas: expected an integer"},
        DecodeErrorCase{kWorker + "/replicas", int64_t{4294967296},
                        "spec.tfReplicaSpecs.Worker.replicas: 4294967296 is out of range for a 32-bit integer"},
        DecodeErrorCase{kWorker + "/replicas", int64_t{-2147483649},
                        "spec.tfReplicaSpecs.Worker.replicas: -2147483649 is out of range for a 32-bit integer"},
        DecodeErrorCase{kWorker + "/replicas", 1e300,
                        "spec.tfReplicaSpecs.Worker.replicas: 1e+300 is out of range for a 32-bit integer"},
        DecodeErrorCase{kWorker + "/replicas", std::numeric_limits<double>::infinity(),
                        "spec.tfReplicaSpecs.Worker.replicas: expected an integer"},
        DecodeErrorCase{kWorker + "/restartPolicy", 1, "spec.tfReplicaSpecs.Worker.restartPolicy: expected a string"},
        DecodeErrorCase{kWorker, 5, "spec.tfReplicaSpecs.Worker: expected an object"},
        DecodeErrorCase{kWorker + "/template", "pod", "spec.tfReplicaSpecs.Worker.template: expected an object"},
        DecodeErrorCase{kWorker + "/template/spec", json::array(),
                        "spec.tfReplicaSpecs.Worker.template.spec: expected an object"},
        DecodeErrorCase{kWorker + "/template/metadata/labels/a", 1,
                        "spec.tfReplicaSpecs.Worker.template.metadata.labels.a: expected a string"},
        DecodeErrorCase{kWorker + "/template/spec/containers", json::object(),
                        "spec.tfReplicaSpecs.Worker.template.spec.containers: expected an array"},
        DecodeErrorCase{kWorker + "/template/spec/containers/0", "tensorflow",
                        "spec.tfReplicaSpecs.Worker.template.spec.containers[0]: expected an object"},
        DecodeErrorCase{kContainer + "/image", 5,
                        "spec.tfReplicaSpecs.Worker.template.spec.containers[0].image: expected a string"},
        DecodeErrorCase{kContainer + "/name", false,
                        "spec.tfReplicaSpecs.Worker.template.spec.containers[0].name: expected a string"},
        DecodeErrorCase{kContainer + "/ports", json::array({json::object({{"containerPort", "2222"}})}),
                        "spec.tfReplicaSpecs.Worker.template.spec.containers[0].ports[0].containerPort: expected an "
                        "integer"},
        DecodeErrorCase{kContainer + "/env", json::array({json::object({{"name", 1}})}),
                        "spec.tfReplicaSpecs.Worker.template.spec.containers[0].env[0].name: expected a string"},
        DecodeErrorCase{"/spec/tfReplicaSpecs", json::array(), "spec.tfReplicaSpecs: expected an object"},
        DecodeErrorCase{"/spec", json::array(), "spec: expected an object"},
        DecodeErrorCase{"/spec/runPolicy", "All", "spec.runPolicy: expected an object"},
        DecodeErrorCase{"/spec/runPolicy/suspend", "true", "spec.runPolicy.suspend: expected a boolean"},
        DecodeErrorCase{"/spec/runPolicy/cleanPodPolicy", json::object(),
                        "spec.runPolicy.cleanPodPolicy: expected a string"},
        DecodeErrorCase{"/spec/runPolicy/schedulingPolicy", 3, "spec.runPolicy.schedulingPolicy: expected an object"},
        DecodeErrorCase{"/spec/runPolicy/activeDeadlineSeconds", uint64_t{9223372036854775808ULL},
                        "spec.runPolicy.activeDeadlineSeconds: 9223372036854775808 is out of range for a 64-bit "
                        "integer"},
        DecodeErrorCase{"/spec/runPolicy/activeDeadlineSeconds", 9.3e18,
                        "spec.runPolicy.activeDeadlineSeconds: 9.3e+18 is out of range for a 64-bit integer"},
        DecodeErrorCase{"/spec/successPolicy", 0, "spec.successPolicy: expected a string"},
        DecodeErrorCase{"/spec/enableDynamicWorker", "yes", "spec.enableDynamicWorker: expected a boolean"},
        DecodeErrorCase{"/metadata", "x", "metadata: expected an object"},
        DecodeErrorCase{"/metadata/name", 7, "metadata.name: expected a string"},
        DecodeErrorCase{"/metadata/labels", json::array(), "metadata.labels: expected an object"},
        DecodeErrorCase{"/metadata/labels/app", 3, "metadata.labels.app: expected a string"},
        DecodeErrorCase{"/metadata/generation", "1", "metadata.generation: expected an integer"},
        DecodeErrorCase{"/metadata/ownerReferences", json::object(), "metadata.ownerReferences: expected an array"},
        DecodeErrorCase{"/metadata/ownerReferences", json::array({json::object({{"controller", "yes"}})}),
                        "metadata.ownerReferences[0].controller: expected a boolean"},
        DecodeErrorCase{"/status", 1, "status: expected an object"},
        DecodeErrorCase{"/status/conditions", json::object(), "status.conditions: expected an array"},
        DecodeErrorCase{"/status/conditions", json::array({1}), "status.conditions[0]: expected an object"},
        DecodeErrorCase{"/status/conditions", json::array({json::object({{"type", 1}})}),
                        "status.conditions[0].type: expected a string"},
        DecodeErrorCase{"/status/replicaStatuses/Worker/active", "1",
                        "status.replicaStatuses.Worker.active: expected an integer"},
        DecodeErrorCase{"/status/startTime", 0, "status.startTime: expected a string"},
        DecodeErrorCase{"/kind", "Pod", "kind: expected TFJob, got \"Pod\""},
        DecodeErrorCase{"/apiVersion", "kubeflow.org/v1beta2",
                        "apiVersion: expected kubeflow.org/v1, got \"kubeflow.org/v1beta2\""},
        DecodeErrorCase{"/apiVersion", 1, "apiVersion: expected a string"},
        DecodeErrorCase{"", json::array(), "expected a TFJob object"},
        DecodeErrorCase{"", nullptr, "expected a TFJob object"},
        DecodeErrorCase{"", "TFJob", "expected a TFJob object"}),
    [](const ::testing::TestParamInfo<DecodeErrorCase>& info) {
      return std::to_string(info.index) + "_" + testing::ParamName(info.param.pointer);
    });

// ------------------------------------------------------------ Round trips

TEST(RoundTripTest, EncodeOfDecodeIsTheDocumentForEveryManifest) {
  std::vector<std::string> files = testing::ValidManifests();
  for (const std::string& f : testing::InvalidManifests()) files.push_back(f);
  for (const std::string& f : files) {
    SCOPED_TRACE(f);
    const json doc = LoadJson(f);
    auto job = Decode(doc);
    ASSERT_TRUE(job.ok()) << job.status();
    const json out = Encode(*job);
    EXPECT_EQ(out, doc) << Diff(doc, out);
  }
}

TEST(RoundTripTest, UnknownFieldsEverywhereSurvive) {
  const json doc = LoadJson("full_object.json");
  TFJob job = Decode(doc).value();
  job.status.conditions[1].status = "False";
  job.status.last_reconcile_time = "2024-05-01T11:00:00Z";
  SetDefaults(job);
  const json out = Encode(job);
  EXPECT_EQ(out["metadata"]["managedFields"], doc["metadata"]["managedFields"]);
  EXPECT_EQ(out["metadata"]["finalizers"], doc["metadata"]["finalizers"]);
  EXPECT_EQ(out["metadata"]["ownerReferences"][0]["extraOwnerField"], 7);
  EXPECT_EQ(out["spec"]["foo"], doc["spec"]["foo"]);
  EXPECT_EQ(out["spec"]["runPolicy"]["futureField"], "kept");
  EXPECT_EQ(out["spec"]["tfReplicaSpecs"]["PS"]["unknownReplicaField"], json::parse(R"({"x":1})"));
  EXPECT_EQ(out["spec"]["tfReplicaSpecs"]["PS"]["template"], doc["spec"]["tfReplicaSpecs"]["PS"]["template"]);
  EXPECT_EQ(out["status"]["bar"], "status field from a newer operator");
  EXPECT_EQ(out["status"]["conditions"][0]["observedGeneration"], 2);
  EXPECT_EQ(out["status"]["conditions"][1]["status"], "False");
  EXPECT_EQ(out["status"]["replicaStatuses"]["Worker"]["extra"], json::array({1}));
  EXPECT_EQ(out["status"]["lastReconcileTime"], "2024-05-01T11:00:00Z");

  // Exactly the two status fields changed: defaults had nothing to add to
  // this (already defaulted) object, and 2.0 stays 2.0.
  json expected = doc;
  expected["status"]["conditions"][1]["status"] = "False";
  expected["status"]["lastReconcileTime"] = "2024-05-01T11:00:00Z";
  EXPECT_EQ(out, expected) << Diff(expected, out);
  EXPECT_TRUE(out["spec"]["tfReplicaSpecs"]["Worker"]["replicas"].is_number_float());
}

TEST(EncodeTest, ChangedConditionsKeepUnknownFieldsByType) {
  TFJob job = Decode(LoadJson("full_object.json")).value();
  // Insert a condition before the existing ones and drop "Running".
  job.status.conditions.erase(job.status.conditions.begin() + 1);
  job.status.conditions.insert(job.status.conditions.begin(),
                               JobCondition{"Succeeded", "True", "TFJobSucceeded", "done", "t1", "t1"});
  const json out = Encode(job);
  ASSERT_EQ(out["status"]["conditions"].size(), 2u);
  EXPECT_EQ(out["status"]["conditions"][0],
            json::parse(R"({"type":"Succeeded","status":"True","reason":"TFJobSucceeded","message":"done",
                            "lastUpdateTime":"t1","lastTransitionTime":"t1"})"));
  EXPECT_EQ(out["status"]["conditions"][1]["type"], "Created");
  EXPECT_EQ(out["status"]["conditions"][1]["observedGeneration"], 2);
}

TEST(EncodeTest, ReplicaStatusesOmitZeroCountsAndKeepExtras) {
  TFJob job = Decode(LoadJson("full_object.json")).value();
  ReplicaStatus& w = job.status.replica_statuses["Worker"];
  w.active = 0;
  w.succeeded = 2;
  job.status.replica_statuses.erase("PS");
  job.status.replica_statuses["Evaluator"].failed = 1;
  const json out = Encode(job);
  EXPECT_EQ(out["status"]["replicaStatuses"], json::parse(R"({
              "Worker": {"succeeded": 2, "extra": [1],
                         "labelSelector": {"matchLabels": {"training.kubeflow.org/job-name": "mnist"}}},
              "Evaluator": {"failed": 1}})"));
}

TEST(EncodeTest, OwnerReferencesMatchedByUid) {
  TFJob job = Decode(LoadJson("full_object.json")).value();
  job.metadata.owner_references.insert(job.metadata.owner_references.begin(),
                                       OwnerReference{"v1", "ConfigMap", "cm", "u2", true, true});
  const json out = Encode(job);
  EXPECT_EQ(out["metadata"]["ownerReferences"], json::parse(R"([
              {"apiVersion":"v1","kind":"ConfigMap","name":"cm","uid":"u2","controller":true,"blockOwnerDeletion":true},
              {"apiVersion":"example.com/v1","kind":"Experiment","name":"exp-1","uid":"0000-1111","controller":false,
               "extraOwnerField":7}])"));
}

TEST(EncodeTest, MetadataEdits) {
  TFJob job = Decode(LoadJson("full_object.json")).value();
  job.metadata.labels["new"] = "label";
  job.metadata.labels.erase("app");
  job.metadata.annotations.clear();
  job.metadata.generation = std::nullopt;
  job.metadata.deletion_timestamp = "2024-05-02T00:00:00Z";
  const json out = Encode(job);
  EXPECT_EQ(out["metadata"]["labels"], json::parse(R"({"new":"label"})"));
  EXPECT_FALSE(out["metadata"].contains("annotations"));
  EXPECT_FALSE(out["metadata"].contains("generation"));
  EXPECT_EQ(out["metadata"]["deletionTimestamp"], "2024-05-02T00:00:00Z");
  EXPECT_EQ(out["metadata"]["uid"], "5b0b7f4e-3f41-4a8e-9d4f-1c2a3b4c5d6e");
}

TEST(EncodeTest, ReplicaSpecsAddedRemovedAndRenamed) {
  TFJob job = Decode(LoadJson("full_object.json")).value();
  // Drop PS, rename Worker's key, add an Evaluator built in code.
  job.spec.replica_specs.erase(job.spec.replica_specs.begin());
  ASSERT_EQ(job.spec.replica_specs[0].key, "Worker");
  job.spec.replica_specs[0].key = "worker";
  ReplicaSpec eval;
  eval.key = "Evaluator";
  eval.type = ReplicaType::kEvaluator;
  eval.replicas = 1;
  job.spec.replica_specs.push_back(eval);
  const json out = Encode(job);
  const json& specs = out["spec"]["tfReplicaSpecs"];
  EXPECT_EQ(specs.size(), 2u);
  EXPECT_FALSE(specs.contains("PS"));
  EXPECT_FALSE(specs.contains("Worker"));
  EXPECT_EQ(specs["worker"], LoadJson("full_object.json")["spec"]["tfReplicaSpecs"]["Worker"]);
  EXPECT_EQ(specs["Evaluator"], json::parse(R"({"replicas":1})"));
}

TEST(EncodeTest, JobBuiltInCode) {
  TFJob job;
  job.metadata.name = "j";
  job.metadata.namespace_ = "ns";
  job.spec.has_replica_specs = true;
  ReplicaSpec w;
  w.key = "Worker";
  w.type = ReplicaType::kWorker;
  w.replicas = 2;
  w.template_json = json::parse(R"({"spec":{"containers":[{"name":"tensorflow","image":"img"}]}})");
  job.spec.replica_specs.push_back(w);
  job.status.conditions.push_back({"Created", "True", "TFJobCreated", "TFJob j is created.", "", ""});
  EXPECT_EQ(Encode(job), json::parse(R"({
    "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
    "metadata": {"name": "j", "namespace": "ns"},
    "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 2,
             "template": {"spec": {"containers": [{"name": "tensorflow", "image": "img"}]}}}}},
    "status": {"conditions": [{"type": "Created", "status": "True", "reason": "TFJobCreated",
                               "message": "TFJob j is created."}]}})"));
  // And it decodes back to the same typed values.
  TFJob back = Decode(Encode(job)).value();
  EXPECT_EQ(back.metadata, job.metadata);
  EXPECT_EQ(back.status, job.status);
  ASSERT_EQ(back.spec.replica_specs.size(), 1u);
  EXPECT_EQ(back.spec.replica_specs[0].template_json, w.template_json);
  EXPECT_EQ(back.spec.replica_specs[0].replicas, 2);

  // An empty job encodes to just its type meta.
  EXPECT_EQ(Encode(TFJob{}), json::parse(R"({"apiVersion":"kubeflow.org/v1","kind":"TFJob"})"));
}

TEST(EncodeTest, ClearingFieldsRemovesThem) {
  TFJob job = LoadJob("chief_ps_worker_evaluator.yaml");
  job.spec.run_policy = RunPolicy{};
  job.spec.replica_specs.clear();
  job.spec.has_replica_specs = false;
  const json out = Encode(job);
  EXPECT_EQ(out["spec"], json::object({{"runPolicy", json::object()}}));
}

}  // namespace
}  // namespace tfjob::op::api

#include "operator/api/names.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "contract/tf_config.h"
#include "operator/api/codec.h"
#include "operator/api/defaults.h"
#include "operator/api/tests/test_util.h"

namespace tfjob::op::api {
namespace {

using json = nlohmann::json;
using Map = std::map<std::string, std::string>;

TFJob Defaulted(const std::string& file) {
  TFJob job = testing::LoadJob(file);
  SetDefaults(job);
  return job;
}

std::string Config(const TFJob& job, const std::string& ns, ReplicaType type, int index,
                   const TfConfigOptions& options = {}) {
  auto c = TfConfig(job, ns, type, index, options);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : "";
}

// The DESIGN.md example: job j in namespace ns with one chief, two PS, two
// workers and one evaluator.
TFJob DesignExample() {
  TFJob job;
  job.metadata.name = "j";
  job.metadata.namespace_ = "ns";
  job.spec.has_replica_specs = true;
  for (auto [type, n] : {std::pair{ReplicaType::kChief, 1}, std::pair{ReplicaType::kPS, 2},
                         std::pair{ReplicaType::kWorker, 2}, std::pair{ReplicaType::kEvaluator, 1}}) {
    ReplicaSpec s;
    s.key = std::string(CanonicalName(type));
    s.type = type;
    s.replicas = n;
    s.template_json = json::parse(R"({"spec":{"containers":[{"name":"tensorflow","image":"img"}]}})");
    job.spec.replica_specs.push_back(s);
  }
  SetDefaults(job);
  return job;
}

TEST(NamesTest, PodAndServiceNames) {
  EXPECT_EQ(PodName("j", "worker", 1), "j-worker-1");
  EXPECT_EQ(ServiceName("j", "chief", 0), "j-chief-0");
  EXPECT_EQ(PodName("dist-mnist", "ps", 10), "dist-mnist-ps-10");

  TFJob job = Defaulted("master_alias.yaml");
  EXPECT_EQ(TypeLabel(*job.Find(ReplicaType::kChief)), "master");
  EXPECT_EQ(TypeLabel(*job.Find(ReplicaType::kWorker)), "worker");
  job = Defaulted("chief_ps_worker_evaluator.yaml");
  EXPECT_EQ(TypeLabel(*job.Find(ReplicaType::kChief)), "chief");
  EXPECT_EQ(TypeLabel(*job.Find(ReplicaType::kPS)), "ps");
  EXPECT_EQ(TypeLabel(*job.Find(ReplicaType::kEvaluator)), "evaluator");
  ReplicaSpec unknown;
  unknown.key = "Launcher";
  EXPECT_EQ(TypeLabel(unknown), "launcher");
}

TEST(NamesTest, Labels) {
  EXPECT_EQ(Labels("j", "chief", 0, true), (Map{{"training.kubeflow.org/job-name", "j"},
                                                {"training.kubeflow.org/operator-name", "tfjob-controller"},
                                                {"training.kubeflow.org/replica-type", "chief"},
                                                {"training.kubeflow.org/replica-index", "0"},
                                                {"training.kubeflow.org/job-role", "master"}}));
  EXPECT_EQ(Labels("j", "worker", 3, false), (Map{{"training.kubeflow.org/job-name", "j"},
                                                  {"training.kubeflow.org/operator-name", "tfjob-controller"},
                                                  {"training.kubeflow.org/replica-type", "worker"},
                                                  {"training.kubeflow.org/replica-index", "3"}}));
  EXPECT_EQ(JobLabels("j"), (Map{{"training.kubeflow.org/job-name", "j"},
                                 {"training.kubeflow.org/operator-name", "tfjob-controller"}}));
  EXPECT_EQ(Selector("J", "worker"), "training.kubeflow.org/job-name=J,training.kubeflow.org/replica-type=worker");
}

TEST(NamesTest, MasterRoleIsTheChiefElseWorkerZero) {
  TFJob job = Defaulted("chief_ps_worker_evaluator.yaml");
  EXPECT_TRUE(IsMasterRole(job, *job.Find(ReplicaType::kChief), 0));
  EXPECT_FALSE(IsMasterRole(job, *job.Find(ReplicaType::kWorker), 0));
  EXPECT_FALSE(IsMasterRole(job, *job.Find(ReplicaType::kPS), 0));
  EXPECT_FALSE(IsMasterRole(job, *job.Find(ReplicaType::kEvaluator), 0));

  job = Defaulted("ps_workers.yaml");
  EXPECT_TRUE(IsMasterRole(job, *job.Find(ReplicaType::kWorker), 0));
  EXPECT_FALSE(IsMasterRole(job, *job.Find(ReplicaType::kWorker), 1));
  EXPECT_FALSE(IsMasterRole(job, *job.Find(ReplicaType::kPS), 0));

  job = Defaulted("master_alias.yaml");
  EXPECT_TRUE(IsMasterRole(job, *job.Find(ReplicaType::kChief), 0));
  EXPECT_FALSE(IsMasterRole(job, *job.Find(ReplicaType::kWorker), 0));
}

TEST(NamesTest, NeedsTfConfigWithMoreThanOneReplica) {
  EXPECT_FALSE(NeedsTfConfig(Defaulted("single_worker.yaml")));
  EXPECT_FALSE(NeedsTfConfig(testing::LoadJob("single_worker.yaml")));  // unset replicas count as 1
  EXPECT_TRUE(NeedsTfConfig(Defaulted("exit_code.yaml")));
  EXPECT_TRUE(NeedsTfConfig(Defaulted("ps_workers.yaml")));

  TFJob job = Defaulted("single_worker.yaml");
  job.Find(ReplicaType::kWorker)->replicas = 0;
  EXPECT_FALSE(NeedsTfConfig(job));
  ReplicaSpec eval;
  eval.key = "Evaluator";
  eval.type = ReplicaType::kEvaluator;
  job.spec.replica_specs.push_back(eval);
  job.Find(ReplicaType::kWorker)->replicas = 1;
  EXPECT_TRUE(NeedsTfConfig(job));  // the evaluator counts, as in Kubeflow
}

TEST(NamesTest, TfPortFromTheTensorflowContainer) {
  TFJob job = Defaulted("chief_ps_worker_evaluator.yaml");
  EXPECT_EQ(TfPort(*job.Find(ReplicaType::kPS)), 2223);
  EXPECT_EQ(TfPort(*job.Find(ReplicaType::kWorker)), 2222);
  EXPECT_EQ(TfPort(*testing::LoadJob("ps_workers.yaml").Find(ReplicaType::kPS)), 2222);  // before defaults
  EXPECT_EQ(TfPort(ReplicaSpec{}), 2222);
}

// training-operator v1.9.0's genClusterSpec lists every replica type in
// "cluster", the evaluator included (its pod_test.go expects it there);
// every task gets its own "task".
TEST(TfConfigTest, DesignExampleInKubeflowsForm) {
  const TFJob job = DesignExample();
  const std::string cluster =
      R"({"cluster":{"chief":["j-chief-0.ns.svc:2222"],"evaluator":["j-evaluator-0.ns.svc:2222"],)"
      R"("ps":["j-ps-0.ns.svc:2222","j-ps-1.ns.svc:2222"],)"
      R"("worker":["j-worker-0.ns.svc:2222","j-worker-1.ns.svc:2222"]},)";
  EXPECT_EQ(Config(job, "ns", ReplicaType::kWorker, 1),
            cluster + R"("task":{"type":"worker","index":1},"environment":"cloud"})");
  EXPECT_EQ(Config(job, "ns", ReplicaType::kChief, 0),
            cluster + R"("task":{"type":"chief","index":0},"environment":"cloud"})");
  EXPECT_EQ(Config(job, "ns", ReplicaType::kPS, 1),
            cluster + R"("task":{"type":"ps","index":1},"environment":"cloud"})");
  EXPECT_EQ(Config(job, "ns", ReplicaType::kEvaluator, 0),
            cluster + R"("task":{"type":"evaluator","index":0},"environment":"cloud"})");
}

// The two halves share one reader and one writer (contract/tf_config.h):
// what the runtime parses from the operator's TF_CONFIG, written again,
// is the operator's string byte for byte.
TEST(TfConfigTest, TheRuntimesReaderAndWriterGiveTheOperatorsBytesBack) {
  for (const char* file : {"chief_ps_worker_evaluator.yaml", "master_alias.yaml", "ps_workers.yaml"}) {
    const TFJob job = Defaulted(file);
    for (const ReplicaSpec& spec : job.spec.replica_specs) {
      if (!spec.type) continue;
      SCOPED_TRACE(std::string(file) + " " + TypeLabel(spec));
      const std::string text = Config(job, "ns", *spec.type, 0);
      auto parsed = contract::ParseTfConfig(text);
      ASSERT_TRUE(parsed.ok()) << parsed.status();
      EXPECT_EQ(contract::ToTfConfigJson(*parsed), text);
    }
  }
}

TEST(TfConfigTest, EvaluatorWithOneWorker) {
  // Two replicas in all, so TF_CONFIG is injected.
  TFJob job = DesignExample();
  std::erase_if(job.spec.replica_specs,
                [](const ReplicaSpec& s) { return s.type == ReplicaType::kChief || s.type == ReplicaType::kPS; });
  job.Find(ReplicaType::kWorker)->replicas = 1;
  ASSERT_TRUE(NeedsTfConfig(job));
  const std::string cluster =
      R"({"cluster":{"evaluator":["j-evaluator-0.ns.svc:2222"],"worker":["j-worker-0.ns.svc:2222"]},)";
  EXPECT_EQ(Config(job, "ns", ReplicaType::kWorker, 0),
            cluster + R"("task":{"type":"worker","index":0},"environment":"cloud"})");
  EXPECT_EQ(Config(job, "ns", ReplicaType::kEvaluator, 0),
            cluster + R"("task":{"type":"evaluator","index":0},"environment":"cloud"})");
}

TEST(TfConfigTest, PortsPerReplicaTypeAndNamespaceArgument) {
  const TFJob job = Defaulted("chief_ps_worker_evaluator.yaml");
  EXPECT_EQ(
      Config(job, "ml", ReplicaType::kWorker, 2),
      R"({"cluster":{"chief":["ctr-model-chief-0.ml.svc:2222"],"evaluator":["ctr-model-evaluator-0.ml.svc:2222"],)"
      R"("ps":["ctr-model-ps-0.ml.svc:2223","ctr-model-ps-1.ml.svc:2223"],)"
      R"("worker":["ctr-model-worker-0.ml.svc:2222","ctr-model-worker-1.ml.svc:2222",)"
      R"("ctr-model-worker-2.ml.svc:2222"]},)"
      R"("task":{"type":"worker","index":2},"environment":"cloud"})");
}

TEST(TfConfigTest, MasterKeepsItsName) {
  const TFJob job = Defaulted("master_alias.yaml");
  EXPECT_EQ(Config(job, "default", ReplicaType::kChief, 0),
            R"({"cluster":{"master":["legacy-estimator-master-0.default.svc:2222"],)"
            R"("worker":["legacy-estimator-worker-0.default.svc:2222","legacy-estimator-worker-1.default.svc:2222"]},)"
            R"("task":{"type":"master","index":0},"environment":"cloud"})");
}

TEST(TfConfigTest, ClusterDomainAndAddressOverride) {
  const TFJob job = Defaulted("exit_code.yaml");
  TfConfigOptions domain;
  domain.cluster_domain = "cluster.local";
  EXPECT_EQ(Config(job, "default", ReplicaType::kWorker, 0, domain),
            R"({"cluster":{"worker":["exit-code-job-worker-0.default.svc.cluster.local:2222",)"
            R"("exit-code-job-worker-1.default.svc.cluster.local:2222"]},)"
            R"("task":{"type":"worker","index":0},"environment":"cloud"})");

  // With an evaluator: the domain on every address, the evaluator's too.
  EXPECT_EQ(
      Config(DesignExample(), "ns", ReplicaType::kEvaluator, 0, domain),
      R"({"cluster":{"chief":["j-chief-0.ns.svc.cluster.local:2222"],"evaluator":["j-evaluator-0.ns.svc.cluster.local:2222"],)"
      R"("ps":["j-ps-0.ns.svc.cluster.local:2222","j-ps-1.ns.svc.cluster.local:2222"],)"
      R"("worker":["j-worker-0.ns.svc.cluster.local:2222","j-worker-1.ns.svc.cluster.local:2222"]},)"
      R"("task":{"type":"evaluator","index":0},"environment":"cloud"})");

  TfConfigOptions local;
  local.address = [](const ReplicaSpec& spec, int index) {
    return "127.0.0.1:" + std::to_string(20000 + 100 * static_cast<int>(*spec.type) + index);
  };
  EXPECT_EQ(Config(job, "", ReplicaType::kWorker, 1, local),
            R"({"cluster":{"worker":["127.0.0.1:20200","127.0.0.1:20201"]},)"
            R"("task":{"type":"worker","index":1},"environment":"cloud"})");
}

TEST(TfConfigTest, SparseClusterWithDynamicWorkers) {
  const TFJob job = Defaulted("dynamic_worker.yaml");
  EXPECT_EQ(Config(job, "ns", ReplicaType::kWorker, 1),
            R"({"cluster":{"worker":{"1":"elastic-worker-1.ns.svc:2222"},)"
            R"("ps":["elastic-ps-0.ns.svc:2222","elastic-ps-1.ns.svc:2222"]},"task":{"type":"worker","index":1}})");
  EXPECT_EQ(Config(job, "ns", ReplicaType::kPS, 1),
            R"({"cluster":{"worker":{},"ps":["elastic-ps-1.ns.svc:2222"]},"task":{"type":"ps","index":1}})");

  TFJob no_ps = Defaulted("exit_code.yaml");
  no_ps.spec.enable_dynamic_worker = true;
  EXPECT_EQ(Config(no_ps, "d", ReplicaType::kWorker, 0),
            R"({"cluster":{"worker":{"0":"exit-code-job-worker-0.d.svc:2222"},"ps":null},)"
            R"("task":{"type":"worker","index":0}})");

  TFJob with_chief = DesignExample();
  with_chief.spec.enable_dynamic_worker = true;
  EXPECT_EQ(Config(with_chief, "ns", ReplicaType::kChief, 0),
            R"({"cluster":{"worker":{},"ps":[]},"task":{"type":"chief","index":0}})");
  EXPECT_EQ(Config(with_chief, "ns", ReplicaType::kEvaluator, 0),
            R"({"cluster":{"worker":{},"ps":[]},"task":{"type":"evaluator","index":0}})");
  EXPECT_EQ(Config(with_chief, "ns", ReplicaType::kWorker, 0),
            R"({"cluster":{"worker":{"0":"j-worker-0.ns.svc:2222"},)"
            R"("ps":["j-ps-0.ns.svc:2222","j-ps-1.ns.svc:2222"]},"task":{"type":"worker","index":0}})");
}

TEST(TfConfigTest, Errors) {
  const TFJob job = Defaulted("ps_workers.yaml");
  auto missing = TfConfig(job, "ns", ReplicaType::kChief, 0);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(missing.status().message(), "TFJob has no Chief replicas");
  auto out_of_range = TfConfig(job, "ns", ReplicaType::kWorker, 4);
  ASSERT_FALSE(out_of_range.ok());
  EXPECT_EQ(out_of_range.status().message(), "Worker index 4 out of range [0, 4)");
  EXPECT_FALSE(TfConfig(job, "ns", ReplicaType::kWorker, -1).ok());

  TFJob huge = job;
  huge.Find(ReplicaType::kWorker)->replicas = 2000000000;
  auto too_big = TfConfig(huge, "ns", ReplicaType::kWorker, 0);
  ASSERT_FALSE(too_big.ok());
  EXPECT_THAT(too_big.status().message(), ::testing::HasSubstr("would exceed 1048576 bytes"));
}

TEST(TfConfigTest, ParsesAsJson) {
  for (const std::string& f : testing::ValidManifests()) {
    SCOPED_TRACE(f);
    const TFJob job = Defaulted(f);
    for (const ReplicaSpec& s : job.spec.replica_specs) {
      for (int i = 0; i < ReplicasOrDefault(s); ++i) {
        auto c = TfConfig(job, "default", *s.type, i);
        ASSERT_TRUE(c.ok()) << c.status();
        const json parsed = json::parse(*c);
        EXPECT_EQ(parsed["task"]["index"], i);
        EXPECT_EQ(parsed["task"]["type"], TypeLabel(s));
      }
    }
  }
}

}  // namespace
}  // namespace tfjob::op::api

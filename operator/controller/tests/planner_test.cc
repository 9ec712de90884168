// Table tests of the pure planner: every policy, no client.
#include "operator/api/names.h"
#include "operator/controller/planner.h"

#include <functional>
#include <random>
#include <tuple>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/time.h"
#include "operator/api/codec.h"
#include "operator/controller/tests/planner_fixtures.h"

namespace tfjob::op::controller {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

using fixtures::kNow;

json Container() { return fixtures::TensorflowContainer({{"command", {"tfjob-runtime", "counter"}}}); }

json Replica(int n, const std::string& policy = "") {
  json r{{"replicas", n}, {"template", {{"spec", {{"containers", json::array({Container()})}}}}}};
  if (!policy.empty()) r["restartPolicy"] = policy;
  return r;
}

api::TFJob Job(json specs, json run_policy = json::object(), json extra_spec = json::object()) {
  return fixtures::DecodeJob(specs, run_policy, json::object(), extra_spec);
}

PodView Pod(const std::string& type, int index, const std::string& phase, std::optional<int> exit = std::nullopt,
            int restarts = 0) {
  PodView p = fixtures::OwnedPod(type, index, phase, exit);
  p.restart_count = restarts;
  return p;
}

ServiceView Svc(const std::string& type, int index) { return fixtures::OwnedService(type, index); }

std::vector<std::string> Names(const Plan& p, Action::Kind kind) {
  std::vector<std::string> out;
  for (const auto& a : p.actions) {
    if (a.kind == kind) out.push_back(a.name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

const api::JobCondition* Cond(const api::JobStatus& s, const std::string& type) {
  for (const auto& c : s.conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

bool True(const api::JobStatus& s, const std::string& type) {
  auto c = Cond(s, type);
  return c && c->status == "True";
}

// Feeds a plan's status back, as the reconciler's next pass would see it.
api::TFJob After(api::TFJob job, const Plan& p) {
  job.status = p.status;
  return job;
}

const Action* Find(const Plan& p, const std::string& name, Action::Kind kind) {
  for (const auto& a : p.actions) {
    if (a.name == name && a.kind == kind) return &a;
  }
  return nullptr;
}

TEST(PlannerTest, NewJobCreatesPodsAndServicesWithTheContract) {
  auto job = Job({{"PS", Replica(2)}, {"Worker", Replica(2)}});
  Plan p = PlanJob(job, {}, {}, kNow);
  EXPECT_EQ(Names(p, Action::Kind::kCreatePod),
            (std::vector<std::string>{"j-ps-0", "j-ps-1", "j-worker-0", "j-worker-1"}));
  EXPECT_EQ(Names(p, Action::Kind::kCreateService), Names(p, Action::Kind::kCreatePod));
  const Action* w1 = Find(p, "j-worker-1", Action::Kind::kCreatePod);
  ASSERT_NE(w1, nullptr);
  const json& pod = w1->object;
  EXPECT_EQ(pod["metadata"]["labels"], json({{"training.kubeflow.org/job-name", "j"},
                                             {"training.kubeflow.org/replica-type", "worker"},
                                             {"training.kubeflow.org/replica-index", "1"},
                                             {"training.kubeflow.org/operator-name", "tfjob-controller"}}));
  EXPECT_EQ(pod["metadata"]["ownerReferences"][0], json({{"apiVersion", "kubeflow.org/v1"},
                                                         {"kind", "TFJob"},
                                                         {"name", "j"},
                                                         {"uid", "uid-1"},
                                                         {"controller", true},
                                                         {"blockOwnerDeletion", true}}));
  EXPECT_EQ(pod["spec"]["restartPolicy"], "Never");
  const json& c = pod["spec"]["containers"][0];
  EXPECT_EQ(c["ports"][0], json({{"name", "tfjob-port"}, {"containerPort", 2222}}));
  ASSERT_EQ(c["env"].size(), 3u);
  EXPECT_EQ(c["env"][0]["name"], "TF_CONFIG");
  // When the pod was made (ms): its chief's generations lie in its range.
  EXPECT_EQ(
      c["env"][1],
      json({{"name", "TFJOB_POD_CREATED_MS"},
            {"value",
             std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(kNow.time_since_epoch()).count())}}));
  // The task token comes from the job's Secret, never from the pod spec.
  EXPECT_EQ(c["env"][2], json({{"name", "TFJOB_AUTH_TOKEN"},
                               {"valueFrom", {{"secretKeyRef", {{"name", "j-tfjob-auth"}, {"key", "token"}}}}}}));
  EXPECT_EQ(
      c["env"][0]["value"],
      R"({"cluster":{"ps":["j-ps-0.ns.svc:2222","j-ps-1.ns.svc:2222"],"worker":["j-worker-0.ns.svc:2222","j-worker-1.ns.svc:2222"]},"task":{"type":"worker","index":1},"environment":"cloud"})");
  // Worker 0 is the master role when there is no chief.
  EXPECT_EQ(
      Find(p, "j-worker-0", Action::Kind::kCreatePod)->object["metadata"]["labels"]["training.kubeflow.org/job-role"],
      "master");
  const json& svc = Find(p, "j-ps-1", Action::Kind::kCreateService)->object;
  EXPECT_EQ(svc["spec"]["clusterIP"], "None");
  EXPECT_EQ(svc["spec"]["selector"]["training.kubeflow.org/replica-index"], "1");
  EXPECT_EQ(svc["spec"]["ports"][0]["port"], 2222);
  EXPECT_TRUE(True(p.status, "Created"));
  EXPECT_EQ(p.status.start_time, "2026-11-21T12:00:00Z");
  EXPECT_TRUE(p.status_changed);
}

// Kubeflow's service: labels and selector are operator-name, job-name,
// replica-type and replica-index (never job-role), and every port of the
// tensorflow container, by name, with no targetPort.
TEST(PlannerTest, ServicesExposeEveryNamedPortAndSelectLikeKubeflows) {
  json worker = Replica(1);
  worker["template"]["spec"]["containers"][0]["ports"] =
      json::array({{{"name", "metrics"}, {"containerPort", 9100}}, {{"name", "tfjob-port"}, {"containerPort", 2300}}});
  auto job = Job({{"Worker", worker}, {"Chief", Replica(1)}});
  Plan p = PlanJob(job, {}, {}, kNow);
  const json& svc = Find(p, "j-worker-0", Action::Kind::kCreateService)->object;
  const json labels{{"training.kubeflow.org/job-name", "j"},
                    {"training.kubeflow.org/operator-name", "tfjob-controller"},
                    {"training.kubeflow.org/replica-type", "worker"},
                    {"training.kubeflow.org/replica-index", "0"}};
  EXPECT_EQ(svc["metadata"]["labels"], labels);
  EXPECT_EQ(svc["spec"]["selector"], labels);
  EXPECT_EQ(svc["spec"]["ports"],
            json::array({{{"name", "metrics"}, {"port", 9100}}, {{"name", "tfjob-port"}, {"port", 2300}}}));
  // The chief's pod carries job-role; its service does not.
  EXPECT_FALSE(Find(p, "j-chief-0", Action::Kind::kCreateService)
                   ->object["metadata"]["labels"]
                   .contains("training.kubeflow.org/job-role"));
}

// Pods and services with the job's labels and no controller (left by
// `kubectl delete tfjob --cascade=orphan`) are adopted, not re-created; one
// owned by someone else is left alone.
TEST(PlannerTest, LabelledOrphansAreAdoptedAndCountAsTheJobs) {
  auto job = Job({{"Worker", Replica(2)}});
  PodView orphan = Pod("worker", 0, "Running");
  orphan.controller_uid = "";
  orphan.labels["training.kubeflow.org/operator-name"] = "tfjob-controller";
  PodView foreign = Pod("worker", 1, "Running");
  foreign.controller_uid = "someone-else";
  foreign.labels["training.kubeflow.org/operator-name"] = "tfjob-controller";
  ServiceView orphan_svc = Svc("worker", 0);
  orphan_svc.controller_uid = "";
  orphan_svc.uid = "svc-uid";
  orphan_svc.labels["training.kubeflow.org/job-name"] = "j";
  orphan_svc.labels["training.kubeflow.org/operator-name"] = "tfjob-controller";
  Plan p = PlanJob(job, {orphan, foreign}, {orphan_svc}, kNow);
  EXPECT_EQ(Names(p, Action::Kind::kAdoptPod), std::vector<std::string>{"j-worker-0"});
  EXPECT_EQ(Names(p, Action::Kind::kAdoptService), std::vector<std::string>{"j-worker-0"});
  const json& patch = Find(p, "j-worker-0", Action::Kind::kAdoptPod)->object;
  EXPECT_EQ(patch["metadata"]["uid"], "pod-j-worker-0");  // a precondition: that very pod
  EXPECT_EQ(patch["metadata"]["ownerReferences"][0]["uid"], "uid-1");
  // Index 0 is filled by the orphan; index 1 (the foreign pod is not ours) gets a pod.
  EXPECT_EQ(Names(p, Action::Kind::kCreatePod), std::vector<std::string>{"j-worker-1"});
  EXPECT_EQ(p.status.replica_statuses.at("Worker").active, 1);
}

// Kubeflow's rules that look odd but are the contract: a job with no
// workers (and no chief) has nothing left to wait for and succeeds; an
// explicit cleanPodPolicy "" cleans like All; after success what was
// still active is counted as succeeded.
TEST(PlannerTest, KubeflowsEdgeRulesForSuccessAndCleanUp) {
  Plan none = PlanJob(Job({{"Worker", Replica(0)}, {"PS", Replica(1)}}), {}, {}, kNow);
  EXPECT_TRUE(True(none.status, "Succeeded"));

  auto job = Job({{"Chief", Replica(1)}, {"PS", Replica(1)}}, {{"cleanPodPolicy", ""}});
  std::vector<ServiceView> svcs{Svc("chief", 0), Svc("ps", 0)};
  Plan done = PlanJob(job, {Pod("chief", 0, "Succeeded", 0), Pod("ps", 0, "Running")}, svcs, kNow);
  ASSERT_TRUE(True(done.status, "Succeeded"));
  EXPECT_EQ(done.status.replica_statuses.at("PS").active, 1);
  Plan after = PlanJob(After(job, done), {Pod("chief", 0, "Succeeded", 0), Pod("ps", 0, "Running")}, svcs, kNow);
  EXPECT_EQ(Names(after, Action::Kind::kDeletePod), (std::vector<std::string>{"j-chief-0", "j-ps-0"}));  // All
  EXPECT_EQ(after.status.replica_statuses.at("PS").active, 0);
  EXPECT_EQ(after.status.replica_statuses.at("PS").succeeded, 1);
}

// enableDynamicWorker: failed workers do not fail the job (Kubeflow's
// "continues regardless"); a failed PS does.
TEST(PlannerTest, DynamicWorkersMayFailWithoutFailingTheJob) {
  auto job = Job({{"PS", Replica(1)}, {"Worker", Replica(2)}}, json::object(), {{"enableDynamicWorker", true}});
  std::vector<ServiceView> svcs{Svc("ps", 0), Svc("worker", 0), Svc("worker", 1)};
  Plan p =
      PlanJob(job, {Pod("ps", 0, "Running"), Pod("worker", 0, "Running"), Pod("worker", 1, "Failed", 1)}, svcs, kNow);
  EXPECT_FALSE(True(p.status, "Failed"));
  EXPECT_EQ(p.status.replica_statuses.at("Worker").failed, 1);
  Plan ps =
      PlanJob(job, {Pod("ps", 0, "Failed", 1), Pod("worker", 0, "Running"), Pod("worker", 1, "Running")}, svcs, kNow);
  EXPECT_TRUE(True(ps.status, "Failed"));
}

// Kubeflow's events about pods: ExitedWithCode for a terminated container,
// a Warning for a pod stuck on its image (the container's own reason), and
// SetPodTemplateRestartPolicy when a template sets the restart policy.
TEST(PlannerTest, PodEventsAsKubeflowRecordsThem) {
  json worker = Replica(2, "OnFailure");
  worker["template"]["spec"]["restartPolicy"] = "Always";
  auto job = Job({{"Worker", worker}});
  PodView done = Pod("worker", 0, "Failed", 137);
  done.terminated_code = 137;
  json stuck_pod{
      {"metadata", {{"name", "j-worker-1"}}},
      {"status",
       {{"phase", "Pending"},
        {"containerStatuses",
         json::array(
             {{{"name", "tensorflow"},
               {"state",
                {{"waiting", {{"reason", "ImagePullBackOff"}, {"message", "Back-off pulling image \"x\""}}}}}}})}}}};
  PodView stuck = ViewPod(stuck_pod);
  stuck.labels = Pod("worker", 1, "Pending").labels;
  stuck.controller_uid = "uid-1";
  Plan p = PlanJob(job, {done, stuck}, {Svc("worker", 0), Svc("worker", 1)}, kNow);
  auto has = [&](const std::string& type, const std::string& reason, const std::string& message) {
    for (const auto& e : p.events) {
      if (e.type == type && e.reason == reason && e.message == message) return true;
    }
    return false;
  };
  EXPECT_TRUE(has("Normal", "ExitedWithCode", "Pod: ns.j-worker-0 exited with code 137"));
  EXPECT_TRUE(has("Warning", "ImagePullBackOff",
                  "Error pod j-worker-1 container tensorflow waiting message: Back-off pulling image \"x\""));
  EXPECT_TRUE(has("Warning", "TFJobRestarting", "job j is restarting because Worker replica(s) failed."));
  Plan fresh = PlanJob(job, {}, {}, kNow);
  bool warned = false;
  for (const auto& e : fresh.events) {
    warned |= e.reason == "SetPodTemplateRestartPolicy" &&
              e.message == "Restart policy in pod template will be overwritten by restart policy in replica spec";
  }
  EXPECT_TRUE(warned);
}

TEST(PlannerTest, ChiefIsTheMasterAndSingleReplicaGetsNoTfConfig) {
  auto job = Job({{"Chief", Replica(1)}, {"Worker", Replica(1)}});
  Plan p = PlanJob(job, {}, {}, kNow);
  EXPECT_EQ(
      Find(p, "j-chief-0", Action::Kind::kCreatePod)->object["metadata"]["labels"]["training.kubeflow.org/job-role"],
      "master");
  EXPECT_FALSE(Find(p, "j-worker-0", Action::Kind::kCreatePod)
                   ->object["metadata"]["labels"]
                   .contains("training.kubeflow.org/job-role"));
  auto single = Job({{"Worker", Replica(1)}});
  Plan q = PlanJob(single, {}, {}, kNow);
  EXPECT_FALSE(Find(q, "j-worker-0", Action::Kind::kCreatePod)->object["spec"]["containers"][0].contains("env"));
}

std::string TfConfigOf(const Plan& p, const std::string& pod) {
  const Action* a = Find(p, pod, Action::Kind::kCreatePod);
  if (!a) return "<no pod " + pod + ">";
  for (const auto& e : a->object["spec"]["containers"][0].value("env", json::array())) {
    if (e.value("name", "") == "TF_CONFIG") return e.value("value", "");
  }
  return "<no TF_CONFIG>";
}

// TF_CONFIG in the pods the planner creates, byte for byte as Kubeflow's
// training-operator v1.9.0 writes it: every type in "cluster", the evaluator
// included, the sparse form (keyed "cluster") with enableDynamicWorker, and the
// cluster domain (CUSTOM_CLUSTER_DOMAIN) on every address.
TEST(PlannerTest, TfConfigIsKubeflowsByteForByte) {
  const json with_eval{{"Chief", Replica(1)}, {"PS", Replica(1)}, {"Worker", Replica(2)}, {"Evaluator", Replica(1)}};
  const std::string no_eval_cluster = R"({"cluster":{"chief":["j-chief-0.ns.svc:2222"],"ps":["j-ps-0.ns.svc:2222"],)"
                                      R"("worker":["j-worker-0.ns.svc:2222","j-worker-1.ns.svc:2222"]},)";
  const std::string cluster =
      R"({"cluster":{"chief":["j-chief-0.ns.svc:2222"],"evaluator":["j-evaluator-0.ns.svc:2222"],"ps":["j-ps-0.ns.svc:2222"],)"
      R"("worker":["j-worker-0.ns.svc:2222","j-worker-1.ns.svc:2222"]},)";
  const std::string domain_cluster =
      R"({"cluster":{"chief":["j-chief-0.ns.svc.corp.example:2222"],"evaluator":["j-evaluator-0.ns.svc.corp.example:2222"],)"
      R"("ps":["j-ps-0.ns.svc.corp.example:2222"],)"
      R"("worker":["j-worker-0.ns.svc.corp.example:2222","j-worker-1.ns.svc.corp.example:2222"]},)";
  struct Case {
    std::string name;
    json specs;
    json extra_spec;
    std::string domain;
    std::string pod;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"evaluator", with_eval, json::object(), "", "j-evaluator-0",
       cluster + R"("task":{"type":"evaluator","index":0},"environment":"cloud"})"},
      {"chief beside an evaluator", with_eval, json::object(), "", "j-chief-0",
       cluster + R"("task":{"type":"chief","index":0},"environment":"cloud"})"},
      {"worker beside an evaluator", with_eval, json::object(), "", "j-worker-1",
       cluster + R"("task":{"type":"worker","index":1},"environment":"cloud"})"},
      {"no evaluator",
       {{"Chief", Replica(1)}, {"PS", Replica(1)}, {"Worker", Replica(2)}},
       json::object(),
       "",
       "j-ps-0",
       no_eval_cluster + R"("task":{"type":"ps","index":0},"environment":"cloud"})"},
      {"cluster domain", with_eval, json::object(), "corp.example", "j-evaluator-0",
       domain_cluster + R"("task":{"type":"evaluator","index":0},"environment":"cloud"})"},
      {"dynamic worker",
       with_eval,
       {{"enableDynamicWorker", true}},
       "",
       "j-worker-1",
       R"({"cluster":{"worker":{"1":"j-worker-1.ns.svc:2222"},"ps":["j-ps-0.ns.svc:2222"]},)"
       R"("task":{"type":"worker","index":1}})"},
      {"dynamic ps",
       with_eval,
       {{"enableDynamicWorker", true}},
       "",
       "j-ps-0",
       R"({"cluster":{"worker":{},"ps":["j-ps-0.ns.svc:2222"]},"task":{"type":"ps","index":0}})"},
      {"dynamic evaluator",
       with_eval,
       {{"enableDynamicWorker", true}},
       "",
       "j-evaluator-0",
       R"({"cluster":{"worker":{},"ps":[]},"task":{"type":"evaluator","index":0}})"},
      {"dynamic worker, cluster domain",
       with_eval,
       {{"enableDynamicWorker", true}},
       "corp.example",
       "j-worker-0",
       R"({"cluster":{"worker":{"0":"j-worker-0.ns.svc.corp.example:2222"},)"
       R"("ps":["j-ps-0.ns.svc.corp.example:2222"]},"task":{"type":"worker","index":0}})"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    PlannerOptions o;
    o.cluster_domain = c.domain;
    Plan p = PlanJob(Job(c.specs, json::object(), c.extra_spec), {}, {}, kNow, o);
    EXPECT_EQ(TfConfigOf(p, c.pod), c.want);
  }
}

// The job's Secret comes before its first pod, owned by the job, with no
// token in it (the reconciler makes one); the NetworkPolicy only on request.
TEST(PlannerTest, TaskTokenSecretAndNetworkPolicyComeFirst) {
  auto job = Job({{"PS", Replica(1)}, {"Worker", Replica(2)}});
  json tmpl = job.spec.replica_specs[1].template_json;
  tmpl["spec"]["containers"][0]["ports"].push_back({{"name", "metrics"}, {"containerPort", 9100}});
  job.spec.replica_specs[1].template_json = tmpl;
  PlannerOptions o;
  o.network_policy = true;
  Plan p = PlanJob(job, {}, {}, kNow, o);
  ASSERT_GE(p.actions.size(), 2u);
  EXPECT_EQ(p.actions[0].kind, Action::Kind::kCreateSecret);
  EXPECT_EQ(p.actions[0].name, "j-tfjob-auth");
  EXPECT_EQ(p.actions[0].object["metadata"]["ownerReferences"][0]["uid"], "uid-1");
  EXPECT_FALSE(p.actions[0].object.contains("data"));
  EXPECT_FALSE(p.actions[0].object.contains("stringData"));
  EXPECT_EQ(p.actions[1].kind, Action::Kind::kCreateNetworkPolicy);
  const json& np = p.actions[1].object["spec"];
  EXPECT_EQ(np["podSelector"]["matchLabels"]["training.kubeflow.org/job-name"], "j");
  EXPECT_EQ(np["ingress"][0]["from"][0]["podSelector"]["matchLabels"]["training.kubeflow.org/job-name"], "j");
  // From elsewhere: the metrics port only, never tfjob-port.
  EXPECT_EQ(np["ingress"][1]["ports"], json::array({{{"protocol", "TCP"}, {"port", 9100}}}));
  // Off: neither; and a job of one replica needs no token.
  o.task_auth = false;
  o.network_policy = false;
  EXPECT_EQ(Find(PlanJob(job, {}, {}, kNow, o), "j-tfjob-auth", Action::Kind::kCreateSecret), nullptr);
  EXPECT_EQ(Find(PlanJob(Job({{"Worker", Replica(1)}}), {}, {}, kNow), "j-tfjob-auth", Action::Kind::kCreateSecret),
            nullptr);
  // Once the pods exist nothing is asked again.
  std::vector<PodView> pods{Pod("ps", 0, "Running"), Pod("worker", 0, "Running"), Pod("worker", 1, "Running")};
  std::vector<ServiceView> services;
  for (const auto& a : p.actions) {
    if (a.kind == Action::Kind::kCreateService) services.push_back(ViewService(a.object));
  }
  EXPECT_EQ(Find(PlanJob(job, pods, services, kNow), "j-tfjob-auth", Action::Kind::kCreateSecret), nullptr);
}

// A job whose pods training-operator made (no token) before the cluster
// moved to this operator: a pod re-created for it comes without the token
// too (one task with a token would refuse the others' calls), and no
// Secret is made; a job of this operator's pods keeps the token.
TEST(PlannerTest, PodsMadeWithoutTheTokenKeepTheirJobWithoutIt) {
  auto job = Job({{"PS", Replica(1)}, {"Worker", Replica(2)}});
  std::vector<ServiceView> svcs{Svc("ps", 0), Svc("worker", 0), Svc("worker", 1)};
  std::vector<PodView> kubeflows{Pod("ps", 0, "Running"), Pod("worker", 0, "Running")};
  for (auto& p : kubeflows) p.task_token = false;
  PlannerOptions o;
  o.task_tls = true;
  Plan p = PlanJob(job, kubeflows, svcs, kNow, o);
  const Action* created = Find(p, "j-worker-1", Action::Kind::kCreatePod);
  ASSERT_NE(created, nullptr);
  EXPECT_FALSE(ViewPod(created->object).task_token);
  EXPECT_FALSE(created->object["spec"].contains("volumes")) << created->object.dump();
  EXPECT_EQ(Find(p, "j-tfjob-auth", Action::Kind::kCreateSecret), nullptr);

  Plan ours = PlanJob(job, {Pod("ps", 0, "Running"), Pod("worker", 0, "Running")}, svcs, kNow, o);
  created = Find(ours, "j-worker-1", Action::Kind::kCreatePod);
  ASSERT_NE(created, nullptr);
  EXPECT_TRUE(ViewPod(created->object).task_token);
  EXPECT_NE(Find(ours, "j-tfjob-auth", Action::Kind::kCreateSecret), nullptr);
}

// A pod made again (its node lost, the old one force-deleted) carries the
// later time, which is what lets its chief outrank any restart of the old
// one (TFJOB_POD_CREATED_MS, docs/fault-tolerance.md).
TEST(PlannerTest, APodMadeLaterCarriesTheLaterCreationTime) {
  auto job = Job({{"Chief", Replica(1)}, {"PS", Replica(1)}, {"Worker", Replica(1)}});
  auto stamp = [&](Time now) {
    Plan p = PlanJob(job, {}, {}, now);
    const Action* chief = Find(p, "j-chief-0", Action::Kind::kCreatePod);
    EXPECT_NE(chief, nullptr);
    for (const auto& e : chief->object["spec"]["containers"][0]["env"])
      if (e["name"] == "TFJOB_POD_CREATED_MS") return e["value"].get<std::string>();
    return std::string("(none)");
  };
  EXPECT_EQ(stamp(kNow), "1795262400000");
  EXPECT_EQ(stamp(kNow + std::chrono::milliseconds(98123)), "1795262498123");
}

// --task-tls: the tensorflow container mounts the job's TLS material from
// its Secret and TFJOB_TLS_DIR names the mount; TF_CONFIG, the token and
// the Secret action are as without it. Literal JSON: this is what the
// runtime (TFJOB_TLS_DIR, common/pki.h file names) and the kubelet see.
TEST(PlannerTest, TaskTlsMountsTheJobsSecretAndNamesItInTheEnvironment) {
  auto job = Job({{"PS", Replica(1)}, {"Worker", Replica(2)}});
  PlannerOptions o;
  o.task_tls = true;
  Plan p = PlanJob(job, {}, {}, kNow, o);
  ASSERT_FALSE(p.actions.empty());
  EXPECT_EQ(p.actions[0].kind, Action::Kind::kCreateSecret);
  EXPECT_EQ(p.actions[0].object, PlanJob(job, {}, {}, kNow).actions[0].object);  // the reconciler adds the keys
  const json& pod = Find(p, "j-worker-1", Action::Kind::kCreatePod)->object;
  EXPECT_EQ(pod["spec"]["volumes"], json::parse(R"([{"name":"tfjob-tls","secret":{"secretName":"j-tfjob-auth",
      "items":[{"key":"ca.crt","path":"ca.crt"},{"key":"tls.crt","path":"tls.crt"},{"key":"tls.key","path":"tls.key"}],
      "defaultMode":292}}])"));
  const json& c = pod["spec"]["containers"][0];
  EXPECT_EQ(c["volumeMounts"], json::parse(R"([{"name":"tfjob-tls","mountPath":"/etc/tfjob/tls","readOnly":true}])"));
  EXPECT_EQ(c["env"], json::parse(R"([
      {"name":"TF_CONFIG","value":"{\"cluster\":{\"ps\":[\"j-ps-0.ns.svc:2222\"],\"worker\":[\"j-worker-0.ns.svc:2222\",\"j-worker-1.ns.svc:2222\"]},\"task\":{\"type\":\"worker\",\"index\":1},\"environment\":\"cloud\"}"},
      {"name":"TFJOB_POD_CREATED_MS","value":"1795262400000"},
      {"name":"TFJOB_AUTH_TOKEN","valueFrom":{"secretKeyRef":{"name":"j-tfjob-auth","key":"token"}}},
      {"name":"TFJOB_TLS_DIR","value":"/etc/tfjob/tls"}])"));
  // Apart from the volume, mount and variable, the pod is the one without TLS.
  json plain = Find(PlanJob(job, {}, {}, kNow), "j-worker-1", Action::Kind::kCreatePod)->object;
  json stripped = pod;
  stripped["spec"].erase("volumes");
  stripped["spec"]["containers"][0].erase("volumeMounts");
  stripped["spec"]["containers"][0]["env"].erase(3);
  EXPECT_EQ(stripped, plain);
  // Every replica type gets it, the PS included.
  EXPECT_EQ(Find(p, "j-ps-0", Action::Kind::kCreatePod)->object["spec"]["volumes"], pod["spec"]["volumes"]);
}

// Where the token is not given, neither is TLS: without task_auth (the
// operator refuses that combination; the planner stays safe) and for a job
// of one replica.
TEST(PlannerTest, TaskTlsFollowsTheToken) {
  PlannerOptions o;
  o.task_tls = true;
  for (const auto& [name, job, opt_auth] :
       std::vector<std::tuple<std::string, api::TFJob, bool>>{{"no task_auth", Job({{"Worker", Replica(2)}}), false},
                                                              {"one replica", Job({{"Worker", Replica(1)}}), true}}) {
    SCOPED_TRACE(name);
    o.task_auth = opt_auth;
    Plan p = PlanJob(job, {}, {}, kNow, o);
    const json& pod = Find(p, "j-worker-0", Action::Kind::kCreatePod)->object;
    EXPECT_FALSE(pod["spec"].contains("volumes"));
    EXPECT_FALSE(pod["spec"]["containers"][0].contains("volumeMounts"));
    EXPECT_THAT(pod.dump(), ::testing::Not(HasSubstr("TFJOB_TLS_DIR")));
  }
}

// The template's own volume, mount or variable of that name (or a mount at
// that path) is replaced, the user's others are kept, and planning the
// resulting pod's template again gives the same pod.
TEST(PlannerTest, TaskTlsReplacesTheTemplatesVolumeOfThatNameIdempotently) {
  json tmpl = Replica(2);
  json& spec = tmpl["template"]["spec"];
  spec["volumes"] = json::parse(R"([{"name":"data","emptyDir":{}},{"name":"tfjob-tls","emptyDir":{}},
                                     {"name":"old-certs","secret":{"secretName":"mine"}}])");
  spec["containers"][0]["volumeMounts"] = json::parse(R"([{"name":"data","mountPath":"/data"},
      {"name":"tfjob-tls","mountPath":"/somewhere"},{"name":"old-certs","mountPath":"/etc/tfjob/tls"}])");
  spec["containers"][0]["env"] =
      json::parse(R"([{"name":"TFJOB_TLS_DIR","value":"/somewhere"},{"name":"A","value":"1"}])");
  spec["containers"].push_back({{"name", "sidecar"}, {"image", "x"}});
  PlannerOptions o;
  o.task_tls = true;
  auto job = Job({{"Worker", tmpl}});
  const json pod = Find(PlanJob(job, {}, {}, kNow, o), "j-worker-0", Action::Kind::kCreatePod)->object;
  const json ours = json::parse(R"({"name":"tfjob-tls","secret":{"secretName":"j-tfjob-auth",
      "items":[{"key":"ca.crt","path":"ca.crt"},{"key":"tls.crt","path":"tls.crt"},{"key":"tls.key","path":"tls.key"}],
      "defaultMode":292}})");
  EXPECT_EQ(pod["spec"]["volumes"],
            json::array({json::parse(R"({"name":"data","emptyDir":{}})"),
                         json::parse(R"({"name":"old-certs","secret":{"secretName":"mine"}})"), ours}));
  const json& c = pod["spec"]["containers"][0];
  EXPECT_EQ(c["volumeMounts"], json::parse(R"([{"name":"data","mountPath":"/data"},
      {"name":"tfjob-tls","mountPath":"/etc/tfjob/tls","readOnly":true}])"));
  int tls_dirs = 0;
  for (const auto& e : c["env"]) {
    if (e["name"] == "TFJOB_TLS_DIR") {
      ++tls_dirs;
      EXPECT_EQ(e["value"], "/etc/tfjob/tls");
    }
  }
  EXPECT_EQ(tls_dirs, 1);
  EXPECT_EQ(pod["spec"]["containers"][1],
            json({{"name", "sidecar"}, {"image", "x"}}));  // only the tensorflow container
  // Planning from the planned pod's spec changes nothing.
  json again_tmpl = Replica(2);
  again_tmpl["template"]["spec"] = pod["spec"];
  const json again =
      Find(PlanJob(Job({{"Worker", again_tmpl}}), {}, {}, kNow, o), "j-worker-0", Action::Kind::kCreatePod)->object;
  EXPECT_EQ(again["spec"], pod["spec"]);
}

TEST(PlannerTest, IdempotentOnceEverythingExists) {
  auto job = Job({{"PS", Replica(1)}, {"Worker", Replica(2)}});
  Plan first = PlanJob(job, {}, {}, kNow);
  std::vector<PodView> pods{Pod("ps", 0, "Pending"), Pod("worker", 0, "Pending"), Pod("worker", 1, "Pending")};
  std::vector<ServiceView> svcs{Svc("ps", 0), Svc("worker", 0), Svc("worker", 1)};
  Plan second = PlanJob(After(job, first), pods, svcs, kNow + std::chrono::seconds(1));
  EXPECT_TRUE(second.actions.empty());
  Plan third = PlanJob(After(job, second), pods, svcs, kNow + std::chrono::seconds(2));
  EXPECT_TRUE(third.actions.empty());
  EXPECT_FALSE(third.status_changed);  // nothing new: no status write
}

TEST(PlannerTest, NoDuplicatePodWhileOneIsBeingDeleted) {
  auto job = Job({{"Worker", Replica(1, "ExitCode")}});
  PodView going = Pod("worker", 0, "Failed", 137);
  going.deleting = true;
  Plan p = PlanJob(job, {going}, {Svc("worker", 0)}, kNow);
  EXPECT_TRUE(Names(p, Action::Kind::kCreatePod).empty());
  EXPECT_TRUE(Names(p, Action::Kind::kDeletePod).empty());  // already going
}

TEST(PlannerTest, OtherOwnersPodsAreIgnored) {
  auto job = Job({{"Worker", Replica(1)}});
  PodView foreign = Pod("worker", 0, "Running");
  foreign.controller_uid = "someone-else";
  Plan p = PlanJob(job, {foreign}, {}, kNow);
  EXPECT_EQ(Names(p, Action::Kind::kCreatePod), std::vector<std::string>{"j-worker-0"});
}

TEST(PlannerTest, RunningFollowsWorkerZeroWithoutChief) {
  auto job = Job({{"PS", Replica(1)}, {"Worker", Replica(2)}});
  Plan p = PlanJob(job, {Pod("ps", 0, "Running"), Pod("worker", 0, "Running"), Pod("worker", 1, "Pending")},
                   {Svc("ps", 0), Svc("worker", 0), Svc("worker", 1)}, kNow);
  EXPECT_TRUE(True(p.status, "Running"));
  EXPECT_EQ(p.status.replica_statuses.at("Worker").active, 1);
  EXPECT_EQ(p.status.replica_statuses.at("Worker").selector,
            "training.kubeflow.org/job-name=j,training.kubeflow.org/replica-type=worker");
}

TEST(PlannerTest, SuccessWithoutChiefIsWorkerZeroAndCleansRunningPods) {
  auto job = Job({{"PS", Replica(1)}, {"Worker", Replica(2)}}, {{"cleanPodPolicy", "Running"}});
  std::vector<PodView> pods{Pod("ps", 0, "Running"), Pod("worker", 0, "Succeeded", 0), Pod("worker", 1, "Running")};
  std::vector<ServiceView> svcs{Svc("ps", 0), Svc("worker", 0), Svc("worker", 1)};
  Plan p = PlanJob(job, pods, svcs, kNow);
  EXPECT_TRUE(True(p.status, "Succeeded"));
  EXPECT_EQ(Cond(p.status, "Succeeded")->message, "TFJob ns/j successfully completed.");
  EXPECT_EQ(p.status.completion_time, "2026-11-21T12:00:00Z");
  EXPECT_EQ(Names(p, Action::Kind::kDeletePod), (std::vector<std::string>{"j-ps-0", "j-worker-1"}));
  EXPECT_EQ(Names(p, Action::Kind::kDeleteService), (std::vector<std::string>{"j-ps-0", "j-worker-1"}));
  // cleanPodPolicy None (the default) leaves them.
  auto keep = Job({{"PS", Replica(1)}, {"Worker", Replica(2)}});
  EXPECT_TRUE(Names(PlanJob(keep, pods, svcs, kNow), Action::Kind::kDeletePod).empty());
  // All removes the finished pod too.
  auto all = Job({{"PS", Replica(1)}, {"Worker", Replica(2)}}, {{"cleanPodPolicy", "All"}});
  EXPECT_EQ(Names(PlanJob(all, pods, svcs, kNow), Action::Kind::kDeletePod).size(), 3u);
}

// The watch may not have delivered a service yet when its job finishes:
// clean-up deletes it by name all the same (as Kubeflow's does), or it would
// outlive its pod for good. One the cache shows going is left alone.
TEST(PlannerTest, CleanupDeletesServicesTheCacheHasNotSeenYet) {
  auto job = Job({{"PS", Replica(1)}, {"Worker", Replica(2)}}, {{"cleanPodPolicy", "All"}});
  std::vector<PodView> pods{Pod("ps", 0, "Running"), Pod("worker", 0, "Succeeded", 0), Pod("worker", 1, "Running")};
  ServiceView going = Svc("ps", 0);
  going.deleting = true;
  Plan p = PlanJob(job, pods, {going}, kNow);
  EXPECT_TRUE(True(p.status, "Succeeded"));
  EXPECT_EQ(Names(p, Action::Kind::kDeletePod).size(), 3u);
  EXPECT_EQ(Names(p, Action::Kind::kDeleteService), (std::vector<std::string>{"j-worker-0", "j-worker-1"}));
}

TEST(PlannerTest, AllWorkersSuccessPolicy) {
  auto job = Job({{"Worker", Replica(2)}}, json::object(), {{"successPolicy", "AllWorkers"}});
  std::vector<ServiceView> svcs{Svc("worker", 0), Svc("worker", 1)};
  Plan p = PlanJob(job, {Pod("worker", 0, "Succeeded", 0), Pod("worker", 1, "Running")}, svcs, kNow);
  EXPECT_FALSE(True(p.status, "Succeeded"));
  Plan q = PlanJob(job, {Pod("worker", 0, "Succeeded", 0), Pod("worker", 1, "Succeeded", 0)}, svcs, kNow);
  EXPECT_TRUE(True(q.status, "Succeeded"));
}

TEST(PlannerTest, ChiefSuccessEndsTheJob) {
  auto job = Job({{"Chief", Replica(1)}, {"PS", Replica(1)}, {"Worker", Replica(1)}, {"Evaluator", Replica(1)}});
  Plan p = PlanJob(job,
                   {Pod("chief", 0, "Succeeded", 0), Pod("ps", 0, "Running"), Pod("worker", 0, "Running"),
                    Pod("evaluator", 0, "Running")},
                   {Svc("chief", 0), Svc("ps", 0), Svc("worker", 0), Svc("evaluator", 0)}, kNow);
  EXPECT_TRUE(True(p.status, "Succeeded"));
  EXPECT_FALSE(True(p.status, "Running"));
}

TEST(PlannerTest, ExitCodeRetryableRestartsPermanentFails) {
  auto job = Job({{"Worker", Replica(2, "ExitCode")}});
  std::vector<ServiceView> svcs{Svc("worker", 0), Svc("worker", 1)};
  Plan p = PlanJob(job, {Pod("worker", 0, "Running"), Pod("worker", 1, "Failed", 137)}, svcs, kNow);
  EXPECT_EQ(Names(p, Action::Kind::kDeletePod), std::vector<std::string>{"j-worker-1"});
  EXPECT_TRUE(True(p.status, "Restarting"));
  EXPECT_EQ(Cond(p.status, "Restarting")->message, "job j is restarting because Worker replica(s) failed.");
  EXPECT_EQ(p.status.replica_statuses.at("Worker").restarts, 1);
  EXPECT_FALSE(True(p.status, "Failed"));
  // The count goes on the job itself first (Kubeflow's CRD prunes the status field).
  ASSERT_EQ(Names(p, Action::Kind::kPatchJob), std::vector<std::string>{"j"});
  EXPECT_EQ(
      Find(p, "j", Action::Kind::kPatchJob)->object["metadata"]["annotations"][std::string(api::kRestartsAnnotation)],
      R"({"Worker":1})");
  // Once the old pod is gone, a new one is created.
  Plan again = PlanJob(After(job, p), {Pod("worker", 0, "Running")}, svcs, kNow + std::chrono::seconds(1));
  EXPECT_EQ(Names(again, Action::Kind::kCreatePod), std::vector<std::string>{"j-worker-1"});
  EXPECT_EQ(again.status.replica_statuses.at("Worker").restarts, 1);  // remembered in status
  // Exit code 1 is permanent.
  Plan q = PlanJob(job, {Pod("worker", 0, "Running"), Pod("worker", 1, "Failed", 1)}, svcs, kNow);
  EXPECT_TRUE(True(q.status, "Failed"));
  EXPECT_EQ(Cond(q.status, "Failed")->message, R"(job "j" is failing because "Worker" replica(s) failed.)");
  EXPECT_TRUE(Names(q, Action::Kind::kDeletePod).empty());
}

// With the status field pruned (Kubeflow's CRD), the count kept on the job
// still reaches backoffLimit.
TEST(PlannerTest, RestartsKeptOnTheJobSurviveAPrunedStatus) {
  auto job = Job({{"Worker", Replica(1, "ExitCode")}}, {{"backoffLimit", 2}});
  job.metadata.annotations[std::string(api::kRestartsAnnotation)] = R"({"Worker":1})";
  Plan p = PlanJob(job, {Pod("worker", 0, "Failed", 137)}, {Svc("worker", 0)}, kNow);
  EXPECT_EQ(p.status.replica_statuses.at("Worker").restarts, 2);
  EXPECT_EQ(
      Find(p, "j", Action::Kind::kPatchJob)->object["metadata"]["annotations"][std::string(api::kRestartsAnnotation)],
      R"({"Worker":2})");
  api::TFJob next = After(job, p);
  next.metadata.annotations[std::string(api::kRestartsAnnotation)] = R"({"Worker":2})";
  next.status.replica_statuses["Worker"].restarts = 0;  // pruned
  Plan q = PlanJob(next, {}, {Svc("worker", 0)}, kNow);
  EXPECT_TRUE(True(q.status, "Failed"));
  EXPECT_EQ(Cond(q.status, "Failed")->message, "Job j has failed because it has reached the specified backoff limit");
}

TEST(PlannerTest, NeverFailsOnAnyFailure) {
  auto job = Job({{"Worker", Replica(1, "Never")}});
  Plan p = PlanJob(job, {Pod("worker", 0, "Failed", 137)}, {Svc("worker", 0)}, kNow);
  EXPECT_TRUE(True(p.status, "Failed"));
  // Two types failed: as in Kubeflow, the condition names the first in its
  // order, and each gets its event.
  auto two = Job({{"PS", Replica(1, "Never")}, {"Worker", Replica(2, "Never")}});
  Plan q = PlanJob(two, {Pod("ps", 0, "Failed", 1), Pod("worker", 0, "Failed", 1), Pod("worker", 1, "Failed", 1)},
                   {Svc("ps", 0), Svc("worker", 0), Svc("worker", 1)}, kNow);
  EXPECT_EQ(Cond(q.status, "Failed")->message, "TFJob ns/j has failed because 1 PS replica(s) failed.");
  std::vector<std::string> failed_events;
  for (const auto& e : q.events) {
    if (e.reason == "TFJobFailed") failed_events.push_back(e.message);
  }
  EXPECT_EQ(failed_events, (std::vector<std::string>{"TFJob ns/j has failed because 1 PS replica(s) failed.",
                                                     "TFJob ns/j has failed because 2 Worker replica(s) failed."}));
}

TEST(PlannerTest, OnFailurePodSpecLetsTheKubeletRestart) {
  auto job = Job({{"Worker", Replica(1, "OnFailure")}});
  Plan p = PlanJob(job, {}, {}, kNow);
  EXPECT_EQ(Find(p, "j-worker-0", Action::Kind::kCreatePod)->object["spec"]["restartPolicy"], "OnFailure");
}

TEST(PlannerTest, BackoffLimitCountsKubeletAndExitCodeRestarts) {
  // Kubelet restarts of an OnFailure pod.
  auto onfail = Job({{"Worker", Replica(1, "OnFailure")}}, {{"backoffLimit", 3}});
  Plan p = PlanJob(onfail, {Pod("worker", 0, "Running", std::nullopt, 3)}, {Svc("worker", 0)}, kNow);
  EXPECT_TRUE(True(p.status, "Failed"));
  EXPECT_THAT(Cond(p.status, "Failed")->message, HasSubstr("reached the specified backoff limit"));
  EXPECT_EQ(Names(p, Action::Kind::kDeletePod), std::vector<std::string>{"j-worker-0"});  // the work stops
  // ExitCode re-creations count too (Kubeflow forgets them).
  auto exitcode = Job({{"Worker", Replica(1, "ExitCode")}}, {{"backoffLimit", 2}});
  Plan r1 = PlanJob(exitcode, {Pod("worker", 0, "Failed", 143)}, {Svc("worker", 0)}, kNow);
  Plan r2 = PlanJob(After(exitcode, r1), {Pod("worker", 0, "Failed", 137)}, {Svc("worker", 0)}, kNow);
  EXPECT_FALSE(True(r2.status, "Failed"));
  EXPECT_EQ(r2.status.replica_statuses.at("Worker").restarts, 2);
  Plan r3 = PlanJob(After(exitcode, r2), {}, {Svc("worker", 0)}, kNow);
  EXPECT_TRUE(True(r3.status, "Failed"));
  EXPECT_TRUE(Names(r3, Action::Kind::kCreatePod).empty());
}

TEST(PlannerTest, ActiveDeadlineByTimedRequeue) {
  auto job = Job({{"Worker", Replica(1)}}, {{"activeDeadlineSeconds", 30}});
  Plan p = PlanJob(job, {}, {}, kNow);
  ASSERT_TRUE(p.requeue_after.has_value());
  EXPECT_EQ(p.requeue_after->count(), 30);
  Plan later =
      PlanJob(After(job, p), {Pod("worker", 0, "Running")}, {Svc("worker", 0)}, kNow + std::chrono::seconds(12));
  EXPECT_EQ(later.requeue_after->count(), 18);
  Plan past =
      PlanJob(After(job, later), {Pod("worker", 0, "Running")}, {Svc("worker", 0)}, kNow + std::chrono::seconds(30));
  EXPECT_TRUE(True(past.status, "Failed"));
  EXPECT_THAT(Cond(past.status, "Failed")->message, HasSubstr("active longer than specified deadline"));
  EXPECT_EQ(Names(past, Action::Kind::kDeletePod), std::vector<std::string>{"j-worker-0"});
}

TEST(PlannerTest, TtlAfterFinishedDeletesTheJob) {
  auto job = Job({{"Worker", Replica(1)}}, {{"ttlSecondsAfterFinished", 10}});
  Plan done = PlanJob(job, {Pod("worker", 0, "Succeeded", 0)}, {Svc("worker", 0)}, kNow);
  ASSERT_TRUE(True(done.status, "Succeeded"));
  EXPECT_EQ(done.requeue_after->count(), 10);
  Plan wait = PlanJob(After(job, done), {}, {}, kNow + std::chrono::seconds(4));
  EXPECT_EQ(wait.requeue_after->count(), 6);
  EXPECT_TRUE(Names(wait, Action::Kind::kDeleteJob).empty());
  Plan gone = PlanJob(After(job, done), {}, {}, kNow + std::chrono::seconds(10));
  EXPECT_EQ(Names(gone, Action::Kind::kDeleteJob), std::vector<std::string>{"j"});
}

TEST(PlannerTest, SuspendAndResume) {
  auto job = Job({{"Worker", Replica(1)}}, {{"suspend", true}});
  Plan running = PlanJob(Job({{"Worker", Replica(1)}}), {Pod("worker", 0, "Running")}, {Svc("worker", 0)}, kNow);
  job.status = running.status;
  Plan s = PlanJob(job, {Pod("worker", 0, "Running")}, {Svc("worker", 0)}, kNow + std::chrono::seconds(5));
  EXPECT_EQ(Names(s, Action::Kind::kDeletePod), std::vector<std::string>{"j-worker-0"});
  EXPECT_EQ(Names(s, Action::Kind::kDeleteService), std::vector<std::string>{"j-worker-0"});
  EXPECT_TRUE(True(s.status, "Suspended"));
  EXPECT_FALSE(True(s.status, "Running"));
  EXPECT_TRUE(Names(s, Action::Kind::kCreatePod).empty());
  auto resumed = Job({{"Worker", Replica(1)}}, {{"suspend", false}});
  resumed.status = s.status;
  Plan r = PlanJob(resumed, {}, {}, kNow + std::chrono::seconds(60));
  EXPECT_FALSE(True(r.status, "Suspended"));
  EXPECT_EQ(Cond(r.status, "Suspended")->reason, "TFJobResumed");
  EXPECT_EQ(r.status.start_time, "2026-11-21T12:01:00Z");
  EXPECT_EQ(Names(r, Action::Kind::kCreatePod), std::vector<std::string>{"j-worker-0"});
}

TEST(PlannerTest, ManagedByAnotherControllerIsLeftAlone) {
  auto job = Job({{"Worker", Replica(1)}}, {{"managedBy", "kueue.x-k8s.io/multikueue"}});
  Plan p = PlanJob(job, {}, {}, kNow);
  EXPECT_TRUE(p.skipped);
  EXPECT_TRUE(p.actions.empty());
  EXPECT_FALSE(p.status_changed);
}

TEST(PlannerTest, InvalidJobFailsNamingTheField) {
  json r = Replica(1);
  r["template"]["spec"]["containers"][0]["name"] = "main";
  auto job = Job({{"Worker", r}});
  Plan p = PlanJob(job, {}, {}, kNow);
  EXPECT_TRUE(p.actions.empty());
  ASSERT_TRUE(True(p.status, "Failed"));
  EXPECT_EQ(Cond(p.status, "Failed")->reason, "TFJobFailedValidation");
  EXPECT_THAT(Cond(p.status, "Failed")->message, HasSubstr("spec.tfReplicaSpecs"));
  EXPECT_THAT(Cond(p.status, "Failed")->message, HasSubstr("tensorflow"));
}

TEST(PlannerTest, ScaleDownRemovesHighIndices) {
  auto job = Job({{"Worker", Replica(2)}});
  Plan p = PlanJob(job, {Pod("worker", 0, "Running"), Pod("worker", 1, "Running"), Pod("worker", 2, "Running")},
                   {Svc("worker", 0), Svc("worker", 1), Svc("worker", 2)}, kNow);
  EXPECT_EQ(Names(p, Action::Kind::kDeletePod), std::vector<std::string>{"j-worker-2"});
  EXPECT_EQ(Names(p, Action::Kind::kDeleteService), std::vector<std::string>{"j-worker-2"});
}

TEST(PlannerTest, MasterAliasKeepsItsNames) {
  auto job = Job({{"Master", Replica(1)}, {"Worker", Replica(1)}});
  Plan p = PlanJob(job, {}, {}, kNow);
  const Action* m = Find(p, "j-master-0", Action::Kind::kCreatePod);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->object["metadata"]["labels"]["training.kubeflow.org/replica-type"], "master");
  EXPECT_EQ(m->object["metadata"]["labels"]["training.kubeflow.org/job-role"], "master");
}

TEST(PlannerTest, BeingDeletedIsSkipped) {
  auto job = Job({{"Worker", Replica(1)}});
  job.metadata.deletion_timestamp = "2026-11-21T11:00:00Z";
  EXPECT_TRUE(PlanJob(job, {}, {}, kNow).skipped);
}

// Whatever a TFJob or pod object holds, planning it never crashes: seeded
// random mutations of a full job, planned against pods in every phase.
TEST(PlannerTest, MutatedObjectsNeverCrashThePlanner) {
  std::mt19937 rng(7);
  const json base = [] {
    json r = Replica(2, "ExitCode");
    r["template"]["spec"]["containers"][0]["ports"] = json::array({{{"name", "tfjob-port"}, {"containerPort", 2300}}});
    // What --task-tls merges into (mutated too).
    r["template"]["spec"]["volumes"] = json::array({{{"name", "tfjob-tls"}, {"emptyDir", json::object()}}});
    r["template"]["spec"]["containers"][0]["volumeMounts"] =
        json::array({{{"name", "data"}, {"mountPath", "/etc/tfjob/tls"}}});
    return json{{"apiVersion", "kubeflow.org/v1"},
                {"kind", "TFJob"},
                {"metadata", {{"name", "j"}, {"namespace", "ns"}, {"uid", "uid-1"}}},
                {"spec",
                 {{"tfReplicaSpecs", {{"Chief", Replica(1)}, {"PS", Replica(1)}, {"Worker", r}}},
                  {"runPolicy",
                   {{"backoffLimit", 2},
                    {"activeDeadlineSeconds", 5},
                    {"ttlSecondsAfterFinished", 1},
                    {"cleanPodPolicy", "All"}}}}},
                {"status",
                 {{"startTime", "2026-11-21T11:59:58Z"},
                  {"replicaStatuses", {{"Worker", {{"restarts", 1}}}}},
                  {"conditions", json::array({{{"type", "Created"}, {"status", "True"}}})}}}};
  }();
  const std::vector<json> garbage{nullptr, -1, 3.5, "x", json::array(), json::object(), true, 2147483648LL};
  std::vector<json::json_pointer> paths;
  std::function<void(const json&, const json::json_pointer&)> collect = [&](const json& j,
                                                                            const json::json_pointer& p) {
    paths.push_back(p);
    if (j.is_object())
      for (auto it = j.begin(); it != j.end(); ++it) collect(*it, p / it.key());
    if (j.is_array())
      for (size_t i = 0; i < j.size(); ++i) collect(j[i], p / i);
  };
  collect(base, json::json_pointer());
  int planned = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    json doc = base;
    for (int m = 0; m < 1 + static_cast<int>(rng() % 3); ++m) {
      const auto& p = paths[rng() % paths.size()];
      if (p.empty() || !doc.contains(p)) continue;
      json& parent = doc[p.parent_pointer()];
      if (rng() % 3 == 0 && parent.is_object())
        parent.erase(p.back());
      else
        doc[p] = garbage[rng() % garbage.size()];
    }
    auto job = api::Decode(doc);
    if (!job.ok()) continue;
    std::vector<PodView> pods;
    for (const char* phase : {"Pending", "Running", "Succeeded", "Failed", "", "Unknown"}) {
      PodView p = Pod(rng() % 2 ? "worker" : "chief", static_cast<int>(rng() % 4), phase, static_cast<int>(rng() % 256),
                      static_cast<int>(rng() % 3));
      if (rng() % 5 == 0) p.labels["training.kubeflow.org/replica-index"] = "not-a-number";
      pods.push_back(p);
    }
    PlannerOptions o;
    o.task_tls = iter % 2 == 0;
    Plan plan = PlanJob(*job, pods, {Svc("worker", 0)}, kNow + std::chrono::seconds(rng() % 10), o);
    (void)api::Encode([&] {
      api::TFJob j = *job;
      j.status = plan.status;
      return j;
    }());
    ++planned;
  }
  EXPECT_GT(planned, 500);  // most mutations still decode, so the planner was really exercised
}

TEST(PodViewTest, ReadsPhaseExitCodeAndRestarts) {
  json pod = json::parse(R"({"metadata": {"name": "j-worker-0", "uid": "u", "labels": {"a": "b"},
      "ownerReferences": [{"uid": "x", "controller": false}, {"uid": "uid-1", "controller": true}]},
    "status": {"phase": "Failed", "containerStatuses": [
      {"name": "sidecar", "restartCount": 1, "state": {"terminated": {"exitCode": 2}}},
      {"name": "tensorflow", "restartCount": 2, "state": {"terminated": {"exitCode": 137}}}]}})");
  PodView v = ViewPod(pod);
  EXPECT_EQ(v.phase, "Failed");
  EXPECT_EQ(v.exit_code, 137);
  EXPECT_EQ(v.restart_count, 3);
  EXPECT_EQ(v.controller_uid, "uid-1");
  // Garbage never crashes.
  for (const char* text : {"null", "[]", "{\"metadata\": 3}", "{\"status\": {\"containerStatuses\": {}}}"}) {
    PodView g = ViewPod(json::parse(text));
    EXPECT_EQ(g.name, "");
  }
}

}  // namespace
}  // namespace tfjob::op::controller

namespace tfjob::op::controller {
namespace {

// ---- Gang scheduling ----------------------------------------------------------

PlannerOptions Gang(const std::string& scheduler) {
  PlannerOptions o;
  o.gang_scheduler = scheduler;
  return o;
}

PodGroupView Group(json spec, const std::string& phase, const std::string& owner = "uid-1") {
  json obj{{"apiVersion", "scheduling.volcano.sh/v1beta1"},
           {"kind", "PodGroup"},
           {"metadata",
            {{"name", "j"},
             {"namespace", "ns"},
             {"resourceVersion", "42"},
             {"ownerReferences", json::array({{{"kind", "TFJob"}, {"uid", owner}, {"controller", true}}})}}},
           {"spec", std::move(spec)}};
  if (!phase.empty()) obj["status"] = {{"phase", phase}};
  return ViewPodGroup(obj);
}

std::vector<Action::Kind> Kinds(const Plan& p) {
  std::vector<Action::Kind> out;
  for (const auto& a : p.actions) out.push_back(a.kind);
  return out;
}

const json kOwner = {
    {"apiVersion", "kubeflow.org/v1"}, {"kind", "TFJob"}, {"name", "j"}, {"uid", "uid-1"}, {"controller", true},
    {"blockOwnerDeletion", true}};

// Volcano: a PodGroup per job (minMember the sum of replicas, the evaluator
// included; queue "default"), and no pod or service until Volcano has
// admitted the gang.
TEST(GangPlannerTest, VolcanoPodGroupFirstAndPodsOnlyOnceAdmitted) {
  auto job = Job({{"Chief", Replica(1)}, {"PS", Replica(1)}, {"Worker", Replica(3)}, {"Evaluator", Replica(1)}});
  Plan p = PlanJob(job, {}, {}, kNow, Gang("volcano"));
  ASSERT_EQ(Kinds(p), std::vector<Action::Kind>{Action::Kind::kCreatePodGroup});
  EXPECT_EQ(
      p.actions[0].object,
      json({{"apiVersion", "scheduling.volcano.sh/v1beta1"},
            {"kind", "PodGroup"},
            {"metadata",
             {{"name", "j"},
              {"namespace", "ns"},
              {"labels",
               {{"training.kubeflow.org/job-name", "j"}, {"training.kubeflow.org/operator-name", "tfjob-controller"}}},
              {"ownerReferences", json::array({kOwner})}}},
            {"spec", {{"minMember", 6}, {"queue", "default"}}}}));
  EXPECT_TRUE(True(p.status, "Created"));

  const json spec{{"minMember", 6}, {"queue", "default"}};
  for (const std::string phase : {"", "Pending"}) {
    SCOPED_TRACE("phase " + phase);
    Plan waiting = PlanJob(After(job, p), {}, {}, kNow, Gang("volcano"), Group(spec, phase));
    EXPECT_TRUE(waiting.actions.empty()) << ::testing::PrintToString(Kinds(waiting));
  }
  Plan admitted = PlanJob(After(job, p), {}, {}, kNow, Gang("volcano"), Group(spec, "Inqueue"));
  EXPECT_EQ(Names(admitted, Action::Kind::kCreatePod).size(), 6u);
  EXPECT_EQ(Names(admitted, Action::Kind::kCreateService).size(), 6u);
  EXPECT_TRUE(Find(admitted, "j-tfjob-auth", Action::Kind::kCreateSecret));
  EXPECT_EQ(Names(admitted, Action::Kind::kCreatePodGroup).size(), 0u);
  EXPECT_EQ(Names(admitted, Action::Kind::kUpdatePodGroup).size(), 0u);
  const json& pod = Find(admitted, "j-worker-2", Action::Kind::kCreatePod)->object;
  EXPECT_EQ(pod["spec"]["schedulerName"], "volcano");
  EXPECT_EQ(pod["metadata"]["annotations"],
            json({{"scheduling.k8s.io/group-name", "j"}, {"volcano.sh/task-spec", "worker"}}));
  EXPECT_EQ(Find(admitted, "j-evaluator-0", Action::Kind::kCreatePod)
                ->object["metadata"]["annotations"]["volcano.sh/task-spec"],
            "evaluator");
}

// schedulingPolicy sets minAvailable, queue, priorityClass and minResources
// for Volcano; scheduler-plugins takes minAvailable, scheduleTimeoutSeconds
// and minResources, and its pods are created at once (its coscheduling
// plugin holds them at Permit).
TEST(GangPlannerTest, SchedulingPolicyPerScheduler) {
  const json policy{{"schedulingPolicy",
                     {{"minAvailable", 3},
                      {"queue", "research"},
                      {"priorityClass", "high-priority"},
                      {"scheduleTimeoutSeconds", 120},
                      {"minResources", {{"cpu", "8"}, {"memory", "16Gi"}}}}}};
  auto job = Job({{"PS", Replica(1)}, {"Worker", Replica(4)}}, policy);
  job.metadata.annotations = {{"team", "ml"}};
  Plan v = PlanJob(job, {}, {}, kNow, Gang("volcano"));
  ASSERT_EQ(Kinds(v), std::vector<Action::Kind>{Action::Kind::kCreatePodGroup});
  EXPECT_EQ(v.actions[0].object["spec"], json({{"minMember", 3},
                                               {"queue", "research"},
                                               {"priorityClassName", "high-priority"},
                                               {"minResources", {{"cpu", "8"}, {"memory", "16Gi"}}}}));
  EXPECT_EQ(v.actions[0].object["metadata"]["annotations"], json({{"team", "ml"}}));

  Plan s = PlanJob(job, {}, {}, kNow, Gang("scheduler-plugins"));
  ASSERT_FALSE(s.actions.empty());
  EXPECT_EQ(s.actions[0].kind, Action::Kind::kCreatePodGroup);  // before any pod
  EXPECT_EQ(s.actions[0].object["apiVersion"], "scheduling.x-k8s.io/v1alpha1");
  EXPECT_EQ(
      s.actions[0].object["spec"],
      json({{"minMember", 3}, {"scheduleTimeoutSeconds", 120}, {"minResources", {{"cpu", "8"}, {"memory", "16Gi"}}}}));
  EXPECT_EQ(Names(s, Action::Kind::kCreatePod).size(), 5u);
  const json& pod = Find(s, "j-ps-0", Action::Kind::kCreatePod)->object;
  EXPECT_EQ(pod["spec"]["schedulerName"], "scheduler-plugins");
  EXPECT_EQ(pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"], "j");
  EXPECT_FALSE(pod["metadata"].contains("annotations"));

  // Any other name is a scheduler-plugins scheduler, as in Kubeflow.
  Plan named = PlanJob(job, {}, {}, kNow, Gang("coscheduler"));
  EXPECT_EQ(named.actions[0].object["apiVersion"], "scheduling.x-k8s.io/v1alpha1");
  EXPECT_EQ(Find(named, "j-ps-0", Action::Kind::kCreatePod)->object["spec"]["schedulerName"], "coscheduler");
}

// The PodGroup is kept at the job's spec: a change (scaled replicas, an edit)
// is written back over the observed object, keeping Volcano's queue once set.
TEST(GangPlannerTest, PodGroupIsKeptAtTheSpec) {
  auto job = Job({{"Worker", Replica(4)}});
  Plan same = PlanJob(job, {}, {}, kNow, Gang("volcano"), Group({{"minMember", 4}, {"queue", "default"}}, "Inqueue"));
  EXPECT_TRUE(Names(same, Action::Kind::kUpdatePodGroup).empty());
  Plan p = PlanJob(job, {}, {}, kNow, Gang("volcano"),
                   Group({{"minMember", 2}, {"queue", "team-q"}, {"minTaskMember", {{"w", 1}}}}, "Inqueue"));
  ASSERT_EQ(Kinds(p)[0], Action::Kind::kUpdatePodGroup);
  const json& updated = p.actions[0].object;
  EXPECT_EQ(updated["spec"], json({{"minMember", 4}, {"queue", "team-q"}}));
  EXPECT_EQ(updated["metadata"]["resourceVersion"], "42");  // optimistic concurrency
  EXPECT_EQ(updated["status"]["phase"], "Inqueue");
}

TEST(GangPlannerTest, FinishedOrSuspendedJobsLoseTheirPodGroup) {
  auto job = Job({{"Worker", Replica(2)}});
  const PodGroupView group = Group({{"minMember", 2}, {"queue", "default"}}, "Running");
  Plan running = PlanJob(job, {Pod("worker", 0, "Running"), Pod("worker", 1, "Running")},
                         {Svc("worker", 0), Svc("worker", 1)}, kNow, Gang("volcano"), group);
  EXPECT_TRUE(running.actions.empty());
  Plan done = PlanJob(After(job, running), {Pod("worker", 0, "Succeeded", 0), Pod("worker", 1, "Running")},
                      {Svc("worker", 0), Svc("worker", 1)}, kNow, Gang("volcano"), group);
  ASSERT_TRUE(True(done.status, "Succeeded"));
  EXPECT_EQ(Kinds(done), std::vector<Action::Kind>{Action::Kind::kDeletePodGroup});
  Plan again = PlanJob(After(job, done), {}, {}, kNow, Gang("volcano"), group);  // still there on the next pass
  EXPECT_EQ(Kinds(again), std::vector<Action::Kind>{Action::Kind::kDeletePodGroup});
  Plan gone = PlanJob(After(job, done), {}, {}, kNow, Gang("volcano"));
  EXPECT_TRUE(gone.actions.empty());

  auto suspended = Job({{"Worker", Replica(2)}}, {{"suspend", true}});
  Plan s = PlanJob(suspended, {}, {}, kNow, Gang("scheduler-plugins"), group);
  EXPECT_EQ(Kinds(s), std::vector<Action::Kind>{Action::Kind::kDeletePodGroup});
}

// Kubeflow's PodGroup minResources when the policy gives none: the
// requests of the first minMember pods (limits where a container has no
// requests), in Go's canonical quantities.
TEST(GangPlannerTest, MinResourcesSumTheRequestsOfTheFirstMinMemberPods) {
  json ps = Replica(1);
  ps["template"]["spec"]["containers"][0]["resources"] = {{"limits", {{"cpu", "1"}, {"memory", "512Mi"}}}};
  json worker = Replica(3);
  worker["template"]["spec"]["containers"][0]["resources"] = {{"requests", {{"cpu", "500m"}, {"memory", "1Gi"}}},
                                                              {"limits", {{"cpu", "4"}}}};
  auto job = Job({{"PS", ps}, {"Worker", worker}}, {{"schedulingPolicy", {{"minAvailable", 3}}}});
  Plan p = PlanJob(job, {}, {}, kNow, Gang("volcano"));
  const json& spec = Find(p, "j", Action::Kind::kCreatePodGroup)->object["spec"];
  // PS (limits: 1 cpu, 512Mi) and two workers (requests: 500m, 1Gi each).
  EXPECT_EQ(spec["minResources"], json({{"cpu", "2"}, {"memory", "2560Mi"}}));
  auto given = Job({{"Worker", worker}}, {{"schedulingPolicy", {{"minResources", {{"cpu", "7"}}}}}});
  EXPECT_EQ(Find(PlanJob(given, {}, {}, kNow, Gang("volcano")), "j", Action::Kind::kCreatePodGroup)
                ->object["spec"]["minResources"],
            json({{"cpu", "7"}}));
}

// With Volcano, the job's clock (startTime, and so activeDeadlineSeconds)
// starts when the gang is admitted, not when the job is created.
TEST(GangPlannerTest, TheDeadlineClockStartsWhenVolcanoAdmitsTheGang) {
  auto job = Job({{"Worker", Replica(2)}}, {{"activeDeadlineSeconds", 10}});
  Plan queued = PlanJob(job, {}, {}, kNow, Gang("volcano"), Group({{"minMember", 2}, {"queue", "default"}}, "Pending"));
  EXPECT_EQ(queued.status.start_time, "");
  Plan later = PlanJob(After(job, queued), {}, {}, kNow + std::chrono::seconds(60), Gang("volcano"),
                       Group({{"minMember", 2}, {"queue", "default"}}, "Pending"));
  EXPECT_FALSE(True(later.status, "Failed"));  // an hour in the queue costs no deadline
  Plan admitted = PlanJob(After(job, later), {}, {}, kNow + std::chrono::seconds(61), Gang("volcano"),
                          Group({{"minMember", 2}, {"queue", "default"}}, "Inqueue"));
  EXPECT_EQ(admitted.status.start_time, "2026-11-21T12:01:01Z");
}

TEST(GangPlannerTest, TemplatesNamingTheirSchedulerAreKeptWithAWarning) {
  auto job = Job({{"Worker", Replica(2)}});
  json tmpl = job.spec.replica_specs[0].template_json;
  tmpl["spec"]["schedulerName"] = "my-scheduler";
  job.spec.replica_specs[0].template_json = tmpl;
  Plan p = PlanJob(job, {}, {}, kNow, Gang("scheduler-plugins"));
  EXPECT_EQ(Find(p, "j-worker-1", Action::Kind::kCreatePod)->object["spec"]["schedulerName"], "my-scheduler");
  int warnings = 0;
  for (const auto& e : p.events) warnings += e.reason == "SetPodTemplateSchedulerName";
  EXPECT_EQ(warnings, 1);
}

// Without a gang scheduler nothing is made; a job asking for one is told so
// once, when it is first seen. A PodGroup owned by another job is not ours.
TEST(GangPlannerTest, WithoutAGangSchedulerThePolicyIsReportedOnce) {
  auto job = Job({{"Worker", Replica(2)}}, {{"schedulingPolicy", {{"minAvailable", 2}}}});
  Plan p = PlanJob(job, {}, {}, kNow);
  EXPECT_TRUE(Names(p, Action::Kind::kCreatePodGroup).empty());
  EXPECT_EQ(Find(p, "j-worker-0", Action::Kind::kCreatePod)->object["spec"].count("schedulerName"), 0u);
  ASSERT_EQ(p.events.size(), 1u);  // Kubeflow records no event for Created
  EXPECT_EQ(p.events[0].type, "Warning");
  EXPECT_EQ(p.events[0].reason, "SchedulingPolicyIgnored");
  Plan next = PlanJob(After(job, p), {}, {}, kNow);
  for (const auto& e : next.events) EXPECT_NE(e.reason, "SchedulingPolicyIgnored");

  Plan foreign = PlanJob(Job({{"Worker", Replica(2)}}), {}, {}, kNow, Gang("volcano"),
                         Group({{"minMember", 2}, {"queue", "default"}}, "Inqueue", "someone-else"));
  EXPECT_EQ(Kinds(foreign), std::vector<Action::Kind>{Action::Kind::kCreatePodGroup});
}

TEST(GangPlannerTest, MistypedSchedulingPolicyFailsValidation) {
  auto job = Job({{"Worker", Replica(2)}}, {{"schedulingPolicy", {{"minAvailable", "two"}, {"queue", 7}}}});
  Plan p = PlanJob(job, {}, {}, kNow, Gang("volcano"));
  ASSERT_TRUE(True(p.status, "Failed"));
  EXPECT_THAT(
      Cond(p.status, "Failed")->message,
      HasSubstr("spec.runPolicy.schedulingPolicy.minAvailable: Invalid value: \"two\": must be a 32-bit integer"));
  EXPECT_THAT(Cond(p.status, "Failed")->message, HasSubstr("spec.runPolicy.schedulingPolicy.queue: Invalid value: 7"));
  EXPECT_TRUE(Names(p, Action::Kind::kCreatePodGroup).empty());
}

}  // namespace
}  // namespace tfjob::op::controller

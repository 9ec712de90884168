// Table tests of what Kueue's built-in TFJob integration (Kueue v0.19.2,
// kubernetes-sigs/kueue at tag v0.19.2) reads from the planner's plans: the
// pods built from the replica templates as Kueue rewrote them, the labels it
// selects on, replicaStatuses' active counts after a suspend, the
// conditions, and schedulingPolicy.priorityClass. Pure: no client. The same
// scenarios against a real API server, with Kueue's CRDs and the test playing
// Kueue: operator/tests/envtest_kueue_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/time.h"
#include "operator/api/codec.h"
#include "operator/controller/planner.h"
#include "operator/controller/tests/planner_fixtures.h"

// Its own namespace: the unity build compiles this file with planner_test.cc,
// whose file-local helpers have the same names.
namespace tfjob::op::controller::kueue_planner_test {
namespace {

using json = nlohmann::json;

using fixtures::kNow;

json Replica(int n, json template_spec = json::object(), json template_meta = json::object()) {
  template_spec["containers"] = json::array({fixtures::TensorflowContainer()});
  json t{{"spec", template_spec}};
  if (!template_meta.empty()) t["metadata"] = template_meta;
  return {{"replicas", n}, {"template", t}};
}

api::TFJob Job(json specs, json run_policy = json::object()) { return fixtures::DecodeJob(specs, run_policy); }

// Succeeded and Failed pods exited 0 and 1.
PodView Pod(const std::string& type, int index, const std::string& phase) {
  std::optional<int> exit;
  if (phase == "Succeeded") exit = 0;
  if (phase == "Failed") exit = 1;
  return fixtures::OwnedPod(type, index, phase, exit);
}

std::vector<json> Created(const Plan& p) {
  std::vector<json> out;
  for (const auto& a : p.actions) {
    if (a.kind == Action::Kind::kCreatePod) out.push_back(a.object);
  }
  return out;
}

int Count(const Plan& p, Action::Kind kind) {
  int n = 0;
  for (const auto& a : p.actions) n += a.kind == kind;
  return n;
}

// What Kueue reads of the status, written as Kueue v0.19.2 reads it
// (kubeflowjob_controller.go): IsActive, PodsReady, Finished.
bool IsActive(const api::JobStatus& s) {
  for (const auto& [type, rs] : s.replica_statuses) {
    if (rs.active != 0) return true;
  }
  return false;
}
bool PodsReady(const api::JobStatus& s) {
  for (const auto& c : s.conditions) {
    if (c.type == "Running" && c.status == "True") return true;
  }
  return false;
}
struct Finish {
  std::string message;
  bool success = false, finished = false;
};
Finish Finished(const api::JobStatus& s) {
  for (const auto& c : s.conditions) {
    if ((c.type == "Succeeded" || c.type == "Failed") && c.status == "True")
      return {c.message, c.type != "Failed", true};
  }
  return {"", true, false};
}

// Kueue's RunWithPodSetsInfo (kubeflowjob_controller.go) merges each pod
// set's node selector, tolerations, labels and annotations (and, under
// topology-aware scheduling, a scheduling gate) into the replica's template
// (pkg/podset/podset.go, Merge). Every such field reaches the replica's pods
// as written.
TEST(KueuePlannerTest, PodsCarryTheTemplatesAsKueueRewroteThem) {
  struct Case {
    const char* what;
    json spec, meta;
  };
  const std::vector<Case> cases = {
      {"nodeSelector", {{"nodeSelector", {{"cloud.example/flavor", "spot"}}}}, json::object()},
      {"tolerations",
       {{"tolerations", json::array({{{"key", "spot"}, {"operator", "Exists"}, {"effect", "NoSchedule"}}})}},
       json::object()},
      {"labels", json::object(), {{"labels", {{"kueue.x-k8s.io/podset", "worker"}}}}},
      {"annotations", json::object(), {{"annotations", {{"kueue.x-k8s.io/workload", "tfjob-j-1a2b3"}}}}},
      {"schedulingGates", {{"schedulingGates", json::array({{{"name", "kueue.x-k8s.io/topology"}}})}}, json::object()},
      {"priorityClassName", {{"priorityClassName", "high"}}, json::object()},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Plan p = PlanJob(Job({{"Worker", Replica(2, c.spec, c.meta)}}), {}, {}, kNow);
    const std::vector<json> pods = Created(p);
    ASSERT_EQ(pods.size(), 2u);
    for (const json& pod : pods) {
      for (auto it = c.spec.begin(); it != c.spec.end(); ++it) EXPECT_EQ(pod["spec"][it.key()], it.value());
      for (auto it = c.meta.begin(); it != c.meta.end(); ++it) {
        for (auto kv = it->begin(); kv != it->end(); ++kv) EXPECT_EQ(pod["metadata"][it.key()][kv.key()], kv.value());
      }
    }
  }
}

// kueuectl lists a TFJob's pods by its PodLabelSelector (tfjob_controller.go,
// JobControl.PodLabelSelector: job-name and operator-name=tfjob-controller);
// topology-aware scheduling ranks them by training.kubeflow.org/replica-index
// (kubeflowjob_controller.go, PodSets), which must read as an unsigned
// integer below the pod set's count (pkg/util/pod/pod.go,
// ReadUIntFromLabelBelowBound). Kubeflow's labels win over a template's.
TEST(KueuePlannerTest, PodsCarryTheLabelsKueueSelectsOn) {
  const json stale{{"labels", {{"training.kubeflow.org/replica-index", "7"}}}};
  Plan p = PlanJob(Job({{"Chief", Replica(1)}, {"PS", Replica(1)}, {"Worker", Replica(3, json::object(), stale)}}), {},
                   {}, kNow);
  const std::vector<json> pods = Created(p);
  ASSERT_EQ(pods.size(), 5u);
  std::map<std::string, std::set<int>> indices;
  for (const json& pod : pods) {
    const json& l = pod["metadata"]["labels"];
    EXPECT_EQ(l["training.kubeflow.org/job-name"], "j");
    EXPECT_EQ(l["training.kubeflow.org/operator-name"], "tfjob-controller");
    const std::string type = l["training.kubeflow.org/replica-type"];
    const std::string index = l["training.kubeflow.org/replica-index"];
    ASSERT_FALSE(index.empty());
    EXPECT_EQ(index.find_first_not_of("0123456789"), std::string::npos) << index;
    EXPECT_EQ(pod["metadata"]["name"], "j-" + type + "-" + index);
    indices[type].insert(std::stoi(index));
  }
  EXPECT_EQ(indices, (std::map<std::string, std::set<int>>{{"chief", {0}}, {"ps", {0}}, {"worker", {0, 1, 2}}}));
}

// Kueue's stopJob (pkg/controller/jobframework/reconciler.go) suspends the
// job and restores its templates in one write, then clears the Workload's
// admission only once IsActive is false. Each row: the pods observed while
// suspended; every active count must read 0, the pods go and none is made.
TEST(KueuePlannerTest, ASuspendedJobIsInactiveAndMakesNoPods) {
  auto running = Job({{"Chief", Replica(1)}, {"Worker", Replica(2)}});
  const std::vector<PodView> up = {Pod("chief", 0, "Running"), Pod("worker", 0, "Running"),
                                   Pod("worker", 1, "Running")};
  Plan before = PlanJob(running, up, {}, kNow);
  ASSERT_TRUE(IsActive(before.status));
  ASSERT_TRUE(PodsReady(before.status));
  struct Case {
    const char* what;
    std::vector<PodView> pods;
    int deletes;
  };
  std::vector<PodView> pending = up;
  for (auto& pod : pending) pod.phase = "Pending";
  const std::vector<Case> cases = {{"running pods", up, 3}, {"pending pods", pending, 3}, {"pods already gone", {}, 0}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto suspended = Job({{"Chief", Replica(1)}, {"Worker", Replica(2)}}, {{"suspend", true}});
    suspended.status = before.status;
    Plan s = PlanJob(suspended, c.pods, {}, kNow + std::chrono::seconds(5));
    EXPECT_FALSE(IsActive(s.status));
    EXPECT_FALSE(PodsReady(s.status));
    EXPECT_FALSE(Finished(s.status).finished);
    EXPECT_EQ(Count(s, Action::Kind::kDeletePod), c.deletes);
    EXPECT_EQ(Count(s, Action::Kind::kCreatePod), 0);
    EXPECT_EQ(Count(s, Action::Kind::kCreateService), 0);
  }
}

// Resumed with the templates Kueue restored and then rewrote for another
// flavor, the job's pods are built from the templates as they now stand.
TEST(KueuePlannerTest, ResumedPodsFollowTheRewrittenTemplates) {
  auto suspended = Job({{"Worker", Replica(2, {{"nodeSelector", {{"flavor", "a"}}}})}}, {{"suspend", true}});
  Plan s = PlanJob(suspended, {}, {}, kNow);
  EXPECT_EQ(Count(s, Action::Kind::kCreatePod), 0);
  auto resumed = Job({{"Worker", Replica(2, {{"nodeSelector", {{"flavor", "b"}}}})}}, {{"suspend", false}});
  resumed.status = s.status;
  Plan r = PlanJob(resumed, {}, {}, kNow + std::chrono::seconds(5));
  ASSERT_EQ(Created(r).size(), 2u);
  for (const json& pod : Created(r)) EXPECT_EQ(pod["spec"]["nodeSelector"], json({{"flavor", "b"}}));
}

// Kueue's PodsReady reads Running=True; Finished reads Succeeded or Failed
// True, with its message. Running follows the chief (or, without one, any
// running worker), as in training-operator v1.9.0's UpdateJobStatus.
TEST(KueuePlannerTest, ConditionsAreWhatPodsReadyAndFinishedRead) {
  struct Case {
    const char* what;
    std::vector<PodView> pods;
    bool ready, finished, success;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"pods pending", {Pod("chief", 0, "Pending"), Pod("worker", 0, "Pending")}, false, false, true, ""},
      {"workers running, chief pending",
       {Pod("chief", 0, "Pending"), Pod("worker", 0, "Running")},
       false,
       false,
       true,
       ""},
      {"chief running", {Pod("chief", 0, "Running"), Pod("worker", 0, "Pending")}, true, false, true, ""},
      {"chief succeeded",
       {Pod("chief", 0, "Succeeded"), Pod("worker", 0, "Running")},
       false,
       true,
       true,
       "TFJob ns/j successfully completed."},
      {"worker failed",
       {Pod("chief", 0, "Running"), Pod("worker", 0, "Failed")},
       false,
       true,
       false,
       "TFJob ns/j has failed because 1 Worker replica(s) failed."},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Plan p = PlanJob(Job({{"Chief", Replica(1)}, {"Worker", Replica(1)}}), c.pods, {}, kNow);
    EXPECT_EQ(PodsReady(p.status), c.ready);
    const Finish f = Finished(p.status);
    EXPECT_EQ(f.finished, c.finished);
    EXPECT_EQ(f.success, c.success);
    EXPECT_EQ(f.message, c.message);
  }
}

// Kueue takes runPolicy.schedulingPolicy.priorityClass, else the first
// template's priorityClassName in Chief, Master, PS, Worker, Evaluator
// order, as the Workload's priority (kubeflowjob_controller.go,
// KubeflowJob.PriorityClass). Pods keep their template's priorityClassName
// and get none from the policy: training-operator v1.9.0 gives the policy's
// only to a Volcano PodGroup (pkg/controller.v1/common/job.go, ReconcileJobs;
// pod.go, createNewPod copies the template). A policy naming only a
// priority class is not reported as ignored; one with gang fields is.
TEST(KueuePlannerTest, SchedulingPolicyPriorityClassIsLeftToKueue) {
  struct Case {
    const char* what;
    json policy, template_spec;
    json pod_priority_class;  // null: none
    bool warned;
  };
  const std::vector<Case> cases = {
      {"policy only", {{"priorityClass", "high"}}, json::object(), nullptr, false},
      {"template only", nullptr, {{"priorityClassName", "low"}}, "low", false},
      {"both", {{"priorityClass", "high"}}, {{"priorityClassName", "low"}}, "low", false},
      {"with gang fields", {{"priorityClass", "high"}, {"minAvailable", 1}}, json::object(), nullptr, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    json run_policy = json::object();
    if (!c.policy.is_null()) run_policy["schedulingPolicy"] = c.policy;
    Plan p = PlanJob(Job({{"Worker", Replica(1, c.template_spec)}}, run_policy), {}, {}, kNow);
    const std::vector<json> pods = Created(p);
    ASSERT_EQ(pods.size(), 1u);
    EXPECT_EQ(pods[0]["spec"].value("priorityClassName", json()), c.pod_priority_class);
    bool warned = false;
    for (const auto& e : p.events) warned |= e.reason == "SchedulingPolicyIgnored";
    EXPECT_EQ(warned, c.warned);
  }
}

}  // namespace
}  // namespace tfjob::op::controller::kueue_planner_test

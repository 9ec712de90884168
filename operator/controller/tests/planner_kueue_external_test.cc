// Table tests of the operator as Kueue's external integration for TFJob
// (--kueue=external, kueue_workload.h): what Kueue v0.19.2's job framework
// (pkg/controller/jobframework/reconciler.go, ReconcileGenericJob) would do
// for the job, planned from the job, its pods and the observed Workload and
// ResourceFlavors. Pure: no client. The same run against a real API server:
// operator/tests/envtest_kueue_external_test.cc.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/time.h"
#include "operator/api/codec.h"
#include "operator/controller/kueue_workload.h"
#include "operator/controller/planner.h"
#include "operator/controller/tests/planner_fixtures.h"

// Its own namespace: the unity build compiles this file with the other
// planner tests, whose file-local helpers have the same names.
namespace tfjob::op::controller::kueue_external_test {
namespace {

using json = nlohmann::json;

using fixtures::kNow;

json Replica(int n, json template_spec = json::object()) {
  template_spec["containers"] =
      json::array({fixtures::TensorflowContainer({{"resources", {{"requests", {{"cpu", "1"}}}}}})});
  return {{"replicas", n}, {"restartPolicy", "Never"}, {"template", {{"spec", template_spec}}}};
}

json Specs() { return {{"Worker", Replica(2)}, {"PS", Replica(1)}, {"Chief", Replica(1)}}; }

api::TFJob Job(json specs = Specs(), bool suspend = false, json run_policy = json::object(), bool labelled = true) {
  run_policy["suspend"] = suspend;
  json meta = json::object();
  if (labelled) meta["labels"] = {{"kueue.x-k8s.io/queue-name", "user-queue"}};
  return fixtures::DecodeJob(specs, run_policy, meta);
}

PodView Pod(const std::string& type, int index, const std::string& phase) {
  return fixtures::OwnedPod(type, index, phase);
}

std::vector<PodView> AllPods(const std::string& phase) {
  return {Pod("chief", 0, phase), Pod("ps", 0, phase), Pod("worker", 0, phase), Pod("worker", 1, phase)};
}

json Condition(const std::string& type, const std::string& status, const std::string& reason,
               const std::string& message = "m") {
  return {{"type", type},
          {"status", status},
          {"reason", reason},
          {"message", message},
          {"lastTransitionTime", "2026-11-21T11:00:00Z"}};
}

// The Workload the operator made for `job`, as the cache shows it, with
// Kueue's status.
WorkloadView Workload(const api::TFJob& job, json conditions = json::array(), json admission = nullptr) {
  json wl = internal::BuildWorkload(job);
  wl["metadata"]["uid"] = "wl-uid";
  wl["metadata"]["resourceVersion"] = "42";
  wl["status"]["conditions"] = conditions;
  if (!admission.is_null()) wl["status"]["admission"] = admission;
  return ViewWorkload(wl);
}

json Admission(const std::string& flavor = "on-demand") {
  json assignments = json::array();
  for (const char* name : {"chief", "ps", "worker"}) {
    assignments.push_back({{"name", name}, {"flavors", {{"cpu", flavor}}}, {"count", 1}});
  }
  return {{"clusterQueue", "cluster-queue"}, {"podSetAssignments", assignments}};
}

json Admitted() {
  return json::array({Condition("QuotaReserved", "True", "QuotaReserved"), Condition("Admitted", "True", "Admitted")});
}

ObservedKueue Observed(std::optional<WorkloadView> wl) {
  ObservedKueue k;
  k.workload = std::move(wl);
  k.flavors["on-demand"] = {
      {"nodeLabels", {{"instance-type", "on-demand"}}},
      {"tolerations", json::array({{{"key", "spot"}, {"operator", "Exists"}, {"effect", "NoSchedule"}}})}};
  return k;
}

PlannerOptions External() {
  PlannerOptions o;
  o.kueue = std::string(kKueueExternal);
  return o;
}

Plan PlanIt(const api::TFJob& job, const std::vector<PodView>& pods, const ObservedKueue& kueue,
            PlannerOptions options = External()) {
  return PlanJob(job, pods, {}, kNow, options, std::nullopt, kueue);
}

std::vector<const Action*> Of(const Plan& p, Action::Kind kind) {
  std::vector<const Action*> out;
  for (const auto& a : p.actions) {
    if (a.kind == kind) out.push_back(&a);
  }
  return out;
}

bool HasEvent(const Plan& p, const std::string& reason, const std::string& message) {
  for (const auto& e : p.events) {
    if (e.reason == reason && e.message == message) return true;
  }
  return false;
}

// The conditions a status patch writes, by type.
json PatchedCondition(const Plan& p, const std::string& type) {
  for (const auto* a : Of(p, Action::Kind::kPatchWorkloadStatus)) {
    for (const auto& c : a->object["status"]["conditions"]) {
      if (c["type"] == type) return c;
    }
  }
  return nullptr;
}

TEST(KueueExternalTest, WorkloadNameIsKueues) {
  // sha1("TFJob\nkubeflow.org\nj\nuid-1") starts 73d93.
  EXPECT_EQ(WorkloadName(Job()), "tfjob-j-73d93");
  api::TFJob long_name = Job();
  long_name.metadata.name = std::string(300, 'a');
  EXPECT_EQ(WorkloadName(long_name).size(), 253u);
}

TEST(KueueExternalTest, FirstSightSuspendsAndCreatesTheWorkload) {
  api::TFJob job = Job({{"Worker", Replica(2)}, {"PS", Replica(1)}, {"Chief", Replica(1)}}, false,
                       {{"schedulingPolicy", {{"priorityClass", "high"}}}});
  job.metadata.annotations["provreq.kueue.x-k8s.io/maxRunDurationSeconds"] = "60";
  job.metadata.annotations["other"] = "x";
  const Plan p = PlanIt(job, {}, Observed(std::nullopt));
  EXPECT_TRUE(Of(p, Action::Kind::kCreatePod).empty());
  EXPECT_TRUE(Of(p, Action::Kind::kCreateService).empty());
  ASSERT_EQ(Of(p, Action::Kind::kPatchJobSpec).size(), 1u);
  EXPECT_EQ(Of(p, Action::Kind::kPatchJobSpec)[0]->object, json::parse(R"({"spec":{"runPolicy":{"suspend":true}}})"));
  ASSERT_EQ(Of(p, Action::Kind::kCreateWorkload).size(), 1u);
  const json& wl = Of(p, Action::Kind::kCreateWorkload)[0]->object;
  EXPECT_EQ(wl["apiVersion"], "kueue.x-k8s.io/v1beta1");
  EXPECT_EQ(wl["metadata"]["name"], "tfjob-j-73d93");
  EXPECT_EQ(wl["metadata"]["labels"]["kueue.x-k8s.io/job-uid"], "uid-1");
  EXPECT_EQ(wl["metadata"]["labels"]["training.kubeflow.org/job-name"], "j");
  EXPECT_EQ(wl["metadata"]["annotations"], json::parse(R"({"provreq.kueue.x-k8s.io/maxRunDurationSeconds":"60"})"));
  EXPECT_EQ(wl["metadata"]["ownerReferences"][0]["uid"], "uid-1");
  EXPECT_EQ(wl["metadata"]["ownerReferences"][0]["kind"], "TFJob");
  EXPECT_EQ(wl["metadata"]["ownerReferences"][0]["controller"], true);
  EXPECT_EQ(wl["spec"]["queueName"], "user-queue");
  EXPECT_EQ(wl["spec"]["priorityClassName"], "high");
  EXPECT_EQ(wl["spec"]["priorityClassSource"], "scheduling.k8s.io/priorityclass");
  ASSERT_EQ(wl["spec"]["podSets"].size(), 3u);
  EXPECT_EQ(wl["spec"]["podSets"][0]["name"], "chief");
  EXPECT_EQ(wl["spec"]["podSets"][1]["name"], "ps");
  EXPECT_EQ(wl["spec"]["podSets"][2]["name"], "worker");
  EXPECT_EQ(wl["spec"]["podSets"][2]["count"], 2);
  EXPECT_EQ(wl["spec"]["podSets"][2]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"], "1");
  // The pass already keeps the pods away, as a suspended job's.
  bool suspended = false;
  for (const auto& c : p.status.conditions) suspended |= c.type == "Suspended" && c.status == "True";
  EXPECT_TRUE(suspended);
}

TEST(KueueExternalTest, PriorityFromTheFirstTemplateInKueuesOrder) {
  json specs = {{"Worker", Replica(1, {{"priorityClassName", "low"}})},
                {"PS", Replica(1, {{"priorityClassName", "mid"}})}};
  const json wl = internal::BuildWorkload(Job(specs));
  EXPECT_EQ(wl["spec"]["priorityClassName"], "mid");
  EXPECT_EQ(internal::BuildWorkload(Job())["spec"]["priority"], 0);
  EXPECT_FALSE(internal::BuildWorkload(Job())["spec"].contains("priorityClassName"));
}

TEST(KueueExternalTest, NoWorkloadWhilePodsRemain) {
  const Plan p = PlanIt(Job(Specs(), true), AllPods("Running"), Observed(std::nullopt));
  EXPECT_TRUE(Of(p, Action::Kind::kCreateWorkload).empty());
  EXPECT_EQ(Of(p, Action::Kind::kDeletePod).size(), 4u);
}

TEST(KueueExternalTest, UnlabelledJobsAndModeOffRunAsBefore) {
  const Plan unlabelled = PlanIt(Job(Specs(), false, json::object(), false), {}, Observed(std::nullopt));
  EXPECT_EQ(Of(unlabelled, Action::Kind::kCreatePod).size(), 4u);
  EXPECT_TRUE(Of(unlabelled, Action::Kind::kCreateWorkload).empty());
  const Plan off = PlanIt(Job(), {}, Observed(std::nullopt), PlannerOptions{});
  EXPECT_EQ(Of(off, Action::Kind::kCreatePod).size(), 4u);
  EXPECT_TRUE(Of(off, Action::Kind::kCreateWorkload).empty());
  EXPECT_TRUE(Of(off, Action::Kind::kPatchJobSpec).empty());
}

TEST(KueueExternalTest, QueuedJobWaits) {
  const api::TFJob job = Job(Specs(), true);
  const Plan p = PlanIt(job, {}, Observed(Workload(job)));
  EXPECT_TRUE(Of(p, Action::Kind::kCreatePod).empty());
  EXPECT_TRUE(Of(p, Action::Kind::kPatchJobSpec).empty());
  EXPECT_TRUE(Of(p, Action::Kind::kCreateWorkload).empty());
  EXPECT_EQ(PatchedCondition(p, "PodsReady")["reason"], "WaitForStart");
}

TEST(KueueExternalTest, AdmissionResumesTheJob) {
  const api::TFJob job = Job(Specs(), true);
  const Plan p = PlanIt(job, {}, Observed(Workload(job, Admitted(), Admission())));
  ASSERT_EQ(Of(p, Action::Kind::kPatchJobSpec).size(), 1u);
  EXPECT_EQ(Of(p, Action::Kind::kPatchJobSpec)[0]->object["spec"]["runPolicy"]["suspend"], false);
  EXPECT_TRUE(HasEvent(p, "Started", "Admitted by clusterQueue cluster-queue"));
  EXPECT_TRUE(Of(p, Action::Kind::kCreatePod).empty());
}

TEST(KueueExternalTest, AdmittedPodsGetTheFlavors) {
  const api::TFJob job =
      Job({{"Worker", Replica(2, {{"nodeSelector", {{"disk", "ssd"}}}})}, {"PS", Replica(1)}, {"Chief", Replica(1)}});
  WorkloadView wl = Workload(job, Admitted(), Admission());
  wl.object["status"]["admissionChecks"] =
      json::array({{{"name", "prov"},
                    {"state", "Ready"},
                    {"podSetUpdates", json::array({{{"name", "worker"}, {"annotations", {{"consume", "req-1"}}}}})}}});
  const Plan p = PlanIt(job, {}, Observed(wl));
  const auto creates = Of(p, Action::Kind::kCreatePod);
  ASSERT_EQ(creates.size(), 4u);
  for (const auto* a : creates) {
    const json& pod = a->object;
    EXPECT_EQ(pod["spec"]["nodeSelector"]["instance-type"], "on-demand") << a->name;
    EXPECT_EQ(pod["spec"]["tolerations"][0]["key"], "spot") << a->name;
    const std::string type = pod["metadata"]["labels"]["training.kubeflow.org/replica-type"];
    EXPECT_EQ(pod["metadata"]["labels"]["kueue.x-k8s.io/podset"], type) << a->name;
    if (type == "worker") {
      EXPECT_EQ(pod["spec"]["nodeSelector"]["disk"], "ssd");
      EXPECT_EQ(pod["metadata"]["annotations"]["consume"], "req-1");
    } else {
      EXPECT_FALSE(pod["metadata"].contains("annotations") && pod["metadata"]["annotations"].contains("consume"));
    }
  }
  EXPECT_TRUE(Of(p, Action::Kind::kPatchJobSpec).empty());
}

TEST(KueueExternalTest, MissingFlavorHoldsThePods) {
  const api::TFJob job = Job();
  const Plan p = PlanIt(job, {}, Observed(Workload(job, Admitted(), Admission("spot"))));
  EXPECT_TRUE(Of(p, Action::Kind::kCreatePod).empty());
  EXPECT_TRUE(Of(p, Action::Kind::kPatchJobSpec).empty());
  ASSERT_TRUE(p.requeue_after.has_value());
}

TEST(KueueExternalTest, UnsuspendedButNotAdmittedIsStopped) {
  const api::TFJob job = Job();
  const Plan p = PlanIt(job, AllPods("Running"), Observed(Workload(job)));
  ASSERT_EQ(Of(p, Action::Kind::kPatchJobSpec).size(), 1u);
  EXPECT_EQ(Of(p, Action::Kind::kPatchJobSpec)[0]->object["spec"]["runPolicy"]["suspend"], true);
  EXPECT_TRUE(HasEvent(p, "Stopped", "Not admitted by cluster queue"));
  EXPECT_EQ(Of(p, Action::Kind::kDeletePod).size(), 4u);
}

TEST(KueueExternalTest, RunningJobReportsPodsReady) {
  api::TFJob job = Job();
  const Plan p = PlanIt(job, AllPods("Running"), Observed(Workload(job, Admitted(), Admission())));
  const json ready = PatchedCondition(p, "PodsReady");
  EXPECT_EQ(ready["status"], "True");
  EXPECT_EQ(ready["reason"], "Started");
  EXPECT_EQ(ready["message"], "All pods reached readiness and the workload is running");
  ASSERT_EQ(Of(p, Action::Kind::kPatchWorkloadStatus).size(), 1u);
  EXPECT_EQ(Of(p, Action::Kind::kPatchWorkloadStatus)[0]->object["metadata"]["resourceVersion"], "42");
  // Written once: the next pass finds it there.
  json conditions = Admitted();
  conditions.push_back(ready);
  const Plan again = PlanIt(job, AllPods("Running"), Observed(Workload(job, conditions, Admission())));
  EXPECT_TRUE(Of(again, Action::Kind::kPatchWorkloadStatus).empty());
}

TEST(KueueExternalTest, EvictionStopsThenClearsTheAdmission) {
  json conditions = Admitted();
  conditions.push_back(Condition("Evicted", "True", "Preempted", "Preempted to accommodate a workload"));
  const api::TFJob running = Job();
  const Plan stop = PlanIt(running, AllPods("Running"), Observed(Workload(running, conditions, Admission())));
  ASSERT_EQ(Of(stop, Action::Kind::kPatchJobSpec).size(), 1u);
  EXPECT_EQ(Of(stop, Action::Kind::kPatchJobSpec)[0]->object["spec"]["runPolicy"]["suspend"], true);
  EXPECT_TRUE(HasEvent(stop, "Stopped", "Preempted to accommodate a workload"));
  EXPECT_EQ(Of(stop, Action::Kind::kDeletePod).size(), 4u);
  EXPECT_TRUE(PatchedCondition(stop, "Requeued").is_null());  // not while pods remain

  const api::TFJob suspended = Job(Specs(), true);
  const Plan handled = PlanIt(suspended, {}, Observed(Workload(suspended, conditions, Admission())));
  ASSERT_EQ(Of(handled, Action::Kind::kPatchWorkloadStatus).size(), 1u);
  const json& patch = Of(handled, Action::Kind::kPatchWorkloadStatus)[0]->object;
  EXPECT_TRUE(patch["status"].contains("admission"));
  EXPECT_TRUE(patch["status"]["admission"].is_null());
  EXPECT_EQ(PatchedCondition(handled, "Requeued")["status"], "True");
  EXPECT_EQ(PatchedCondition(handled, "Requeued")["reason"], "Preempted");
  EXPECT_EQ(PatchedCondition(handled, "QuotaReserved")["status"], "False");
  EXPECT_EQ(PatchedCondition(handled, "QuotaReserved")["reason"], "Pending");
  EXPECT_EQ(PatchedCondition(handled, "QuotaReserved")["message"], "Preempted to accommodate a workload");
  EXPECT_EQ(PatchedCondition(handled, "Admitted")["status"], "False");
  EXPECT_EQ(PatchedCondition(handled, "Admitted")["reason"], "NoReservation");
  EXPECT_TRUE(Of(handled, Action::Kind::kPatchJobSpec).empty());
}

TEST(KueueExternalTest, DeactivatedWorkloadStopsTheJob) {
  const api::TFJob job = Job();
  WorkloadView wl = Workload(job, Admitted(), Admission());
  wl.object["spec"]["active"] = false;
  const Plan p = PlanIt(job, AllPods("Running"), Observed(wl));
  ASSERT_EQ(Of(p, Action::Kind::kPatchJobSpec).size(), 1u);
  EXPECT_EQ(Of(p, Action::Kind::kDeletePod).size(), 4u);
}

TEST(KueueExternalTest, FinishedJobFinishesTheWorkload) {
  api::TFJob job = Job();
  std::vector<PodView> pods = AllPods("Running");
  pods[0].phase = "Succeeded";
  pods[0].exit_code = 0;
  const Plan p = PlanIt(job, pods, Observed(Workload(job, Admitted(), Admission())));
  const json finished = PatchedCondition(p, "Finished");
  EXPECT_EQ(finished["status"], "True");
  EXPECT_EQ(finished["reason"], "Succeeded");
  EXPECT_EQ(finished["message"], "TFJob ns/j successfully completed.");
  EXPECT_TRUE(HasEvent(p, "FinishedWorkload", "Workload 'ns/tfjob-j-73d93' is declared finished"));
}

TEST(KueueExternalTest, PodSetChangeWhileQueuedRecreates) {
  const api::TFJob before = Job(Specs(), true);
  const api::TFJob after = Job({{"Worker", Replica(3)}, {"PS", Replica(1)}, {"Chief", Replica(1)}}, true);
  const Plan p = PlanIt(after, {}, Observed(Workload(before)));
  ASSERT_EQ(Of(p, Action::Kind::kDeleteWorkload).size(), 1u);
  EXPECT_EQ(Of(p, Action::Kind::kDeleteWorkload)[0]->name, "tfjob-j-73d93");
  EXPECT_TRUE(Of(p, Action::Kind::kPatchWorkloadStatus).empty());
  // Holding quota, it is kept.
  const Plan reserved = PlanIt(after, {}, Observed(Workload(before, Admitted(), Admission())));
  EXPECT_TRUE(Of(reserved, Action::Kind::kDeleteWorkload).empty());
  // Unchanged, it is kept.
  EXPECT_TRUE(Of(PlanIt(before, {}, Observed(Workload(before))), Action::Kind::kDeleteWorkload).empty());
}

TEST(KueueExternalTest, AnotherOwnersWorkloadIsNotTheJobs) {
  const api::TFJob job = Job(Specs(), true);
  WorkloadView wl = Workload(job, Admitted(), Admission());
  wl.controller_uid = "someone-else";
  const Plan p = PlanIt(job, {}, Observed(wl));
  EXPECT_EQ(Of(p, Action::Kind::kCreateWorkload).size(), 1u);
  EXPECT_TRUE(Of(p, Action::Kind::kPatchJobSpec).empty());
}

}  // namespace
}  // namespace tfjob::op::controller::kueue_external_test

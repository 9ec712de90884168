// Table tests of pods that stay Pending (PlannerOptions::pending_timeout,
// planner_pending.cc; issue 49 item 5): the PodsPending condition and its
// Warning event naming the pod and why it waits, kept before the newest
// condition; the requeue at the timeout; the opt-in re-creation, once per
// index. Pure: no client. On the real API server:
// operator/tests/envtest_policies_test.cc (PendingPastTheTimeout...).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "operator/controller/planner.h"
#include "operator/controller/tests/planner_fixtures.h"

// Its own namespace: the unity build compiles this file with the other
// planner tests, whose file-local helpers have the same names.
namespace tfjob::op::controller::pending_test {
namespace {

using fixtures::kNow;
using json = nlohmann::json;
using std::chrono::seconds;

json Replica(int n) {
  return {{"replicas", n},
          {"restartPolicy", "Never"},
          {"template", {{"spec", {{"containers", json::array({fixtures::TensorflowContainer()})}}}}}};
}

api::TFJob Job(json annotations = json::object()) {
  json meta = json::object();
  if (!annotations.empty()) meta["annotations"] = annotations;
  return fixtures::DecodeJob({{"Worker", Replica(2)}}, json::object(), meta);
}

PlannerOptions Timeout(int s, bool recreate = false) {
  PlannerOptions o;
  o.pending_timeout = seconds(s);
  o.recreate_pending = recreate;
  return o;
}

// Worker 0 Running; worker 1 Pending for `age`, unschedulable.
std::vector<PodView> Pods(seconds age) {
  PodView running = fixtures::OwnedPod("worker", 0, "Running");
  running.created = kNow - seconds(3600);
  PodView pending = fixtures::OwnedPod("worker", 1, "Pending");
  pending.created = kNow - age;
  pending.pending_reason = "Unschedulable";
  pending.pending_message = "0/2 nodes are available: 2 Insufficient cpu.";
  return {running, pending};
}

std::vector<ServiceView> Services() {
  return {fixtures::OwnedService("worker", 0), fixtures::OwnedService("worker", 1)};
}

const api::JobCondition* Cond(const api::JobStatus& s, const std::string& type) {
  for (const auto& c : s.conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

int Count(const Plan& p, Action::Kind kind) {
  int n = 0;
  for (const auto& a : p.actions) n += a.kind == kind;
  return n;
}

int Warnings(const Plan& p, const std::string& reason) {
  int n = 0;
  for (const auto& e : p.events) n += e.type == "Warning" && e.reason == reason;
  return n;
}

TEST(PendingTest, BeforeTheTimeoutNothingIsSaidAndTheJobIsPlannedAgainAtIt) {
  const Plan p = PlanJob(Job(), Pods(seconds(590)), Services(), kNow, Timeout(600));
  EXPECT_EQ(Cond(p.status, "PodsPending"), nullptr);
  EXPECT_EQ(Warnings(p, "PodPendingTimeout"), 0);
  ASSERT_TRUE(p.requeue_after);
  EXPECT_EQ(*p.requeue_after, seconds(10));
}

TEST(PendingTest, PastTheTimeoutTheConditionAndAWarningNameThePodAndTheSchedulersReason) {
  const Plan p = PlanJob(Job(), Pods(seconds(600)), Services(), kNow, Timeout(600));
  const auto* c = Cond(p.status, "PodsPending");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->status, "True");
  EXPECT_EQ(c->reason, "PodPendingTimeout");
  EXPECT_EQ(c->message,
            "Pod j-worker-1 has been Pending longer than 600 s: Unschedulable: 0/2 nodes are available: 2 "
            "Insufficient cpu.");
  EXPECT_EQ(Warnings(p, "PodPendingTimeout"), 1);
  // The STATE column (the newest condition) still reads Kubeflow's.
  EXPECT_EQ(p.status.conditions.back().type, "Running");
  EXPECT_EQ(Count(p, Action::Kind::kDeletePod), 0);  // not without the opt-in
  EXPECT_FALSE(p.requeue_after);                     // nothing left to time
}

TEST(PendingTest, TheSameWaitIsReportedOnce) {
  api::TFJob job = Job();
  job.status = PlanJob(job, Pods(seconds(700)), Services(), kNow, Timeout(600)).status;
  const Plan again = PlanJob(job, Pods(seconds(760)), Services(), kNow + seconds(60), Timeout(600));
  EXPECT_EQ(Warnings(again, "PodPendingTimeout"), 0);
  EXPECT_FALSE(again.status_changed);
}

TEST(PendingTest, TheConditionTurnsFalseOnceThePodRuns) {
  api::TFJob job = Job();
  job.status = PlanJob(job, Pods(seconds(700)), Services(), kNow, Timeout(600)).status;
  std::vector<PodView> pods = Pods(seconds(700));
  pods[1].phase = "Running";
  const Plan p = PlanJob(job, pods, Services(), kNow + seconds(5), Timeout(600));
  const auto* c = Cond(p.status, "PodsPending");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->status, "False");
  EXPECT_EQ(c->reason, "PodsNoLongerPending");
  EXPECT_EQ(p.status.conditions.back().type, "Running");
}

TEST(PendingTest, ASuspendedJobHasNoPodPending) {
  api::TFJob job = Job();
  job.status = PlanJob(job, Pods(seconds(700)), Services(), kNow, Timeout(600)).status;
  job.spec.run_policy.suspend = true;
  const Plan p = PlanJob(job, Pods(seconds(700)), Services(), kNow + seconds(5), Timeout(600));
  const auto* c = Cond(p.status, "PodsPending");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->status, "False");
  EXPECT_NE(p.status.conditions.back().type, "PodsPending");
}

TEST(PendingTest, AMissingImageIsTheKubeletsReason) {
  std::vector<PodView> pods = Pods(seconds(900));
  pods[1].pending_reason = "ErrImageNeverPull";
  pods[1].pending_message = "Container image \"tfjob/runtime-cpu:9\" is not present with pull policy of Never";
  const Plan p = PlanJob(Job(), pods, Services(), kNow, Timeout(600));
  const auto* c = Cond(p.status, "PodsPending");
  ASSERT_NE(c, nullptr);
  EXPECT_NE(c->message.find("j-worker-1"), std::string::npos) << c->message;
  EXPECT_NE(c->message.find("ErrImageNeverPull: Container image"), std::string::npos) << c->message;
}

TEST(PendingTest, OptedInThePodIsRecreatedOncePerIndex) {
  const Plan p = PlanJob(Job(), Pods(seconds(600)), Services(), kNow, Timeout(600, true));
  ASSERT_EQ(Count(p, Action::Kind::kDeletePod), 1);
  const Action* patch = nullptr;
  for (const auto& a : p.actions) {
    if (a.kind == Action::Kind::kDeletePod) {
      EXPECT_EQ(a.name, "j-worker-1");
    }
    if (a.kind == Action::Kind::kPatchJob) patch = &a;
  }
  ASSERT_NE(patch, nullptr);
  EXPECT_EQ(patch->object["metadata"]["annotations"]["tfjob-operator.kubeflow.org/pending-recreated"],
            R"({"Worker":[1]})");
  EXPECT_EQ(Warnings(p, "PodPendingTimeout"), 2);  // the re-creation and the condition's

  // Recorded: the replacement that stays Pending is reported, not re-created.
  const Plan later = PlanJob(Job({{"tfjob-operator.kubeflow.org/pending-recreated", R"({"Worker":[1]})"}}),
                             Pods(seconds(600)), Services(), kNow, Timeout(600, true));
  EXPECT_EQ(Count(later, Action::Kind::kDeletePod), 0);
  EXPECT_EQ(Count(later, Action::Kind::kPatchJob), 0);
  ASSERT_NE(Cond(later.status, "PodsPending"), nullptr);
}

TEST(PendingTest, OffAtZero) {
  const Plan p = PlanJob(Job(), Pods(seconds(100000)), Services(), kNow, Timeout(0, true));
  EXPECT_EQ(Cond(p.status, "PodsPending"), nullptr);
  EXPECT_EQ(Count(p, Action::Kind::kDeletePod), 0);
  EXPECT_FALSE(p.requeue_after);
}

TEST(PendingTest, ViewPodReadsTheWaitFromThePod) {
  const json pod = {
      {"metadata", {{"name", "j-worker-1"}, {"creationTimestamp", "2026-11-21T11:50:00Z"}}},
      {"status",
       {{"phase", "Pending"},
        {"conditions",
         json::array(
             {{{"type", "PodScheduled"},
               {"status", "False"},
               {"reason", "Unschedulable"},
               {"message", "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."}}})}}}};
  const PodView v = ViewPod(pod);
  ASSERT_TRUE(v.created);
  EXPECT_EQ(kNow - *v.created, seconds(600));
  EXPECT_EQ(v.pending_reason, "Unschedulable");
  EXPECT_EQ(v.pending_message, "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.");

  const json scheduled = {
      {"metadata", {{"name", "j-worker-1"}}},
      {"status",
       {{"phase", "Pending"},
        {"containerStatuses",
         json::array({{{"name", "tensorflow"},
                       {"state", {{"waiting", {{"reason", "ErrImageNeverPull"}, {"message", "not present"}}}}}}})}}}};
  const PodView w = ViewPod(scheduled);
  EXPECT_FALSE(w.created);
  EXPECT_EQ(w.pending_reason, "ErrImageNeverPull");
  EXPECT_EQ(w.pending_message, "not present");
}

}  // namespace
}  // namespace tfjob::op::controller::pending_test

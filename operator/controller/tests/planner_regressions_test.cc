// Table tests of training-operator's open bugs that its users hit, as the
// planner answers them (Issue 47 item 4): a succeeded replica whose pod is
// removed stays succeeded (kubeflow/trainer #1186, #1997), `replicas: 0`
// makes and deletes nothing (#1709), ExitCode's Restarting gives way to
// Running, Succeeded or Failed (#2044), and worker 0 Succeeded without an
// exit code is not complete, as in v1.9.0's IsWorker0Completed. The same
// scenarios against a real API server: operator/tests/envtest_regressions_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/time.h"
#include "operator/api/codec.h"
#include "operator/controller/planner.h"
#include "operator/controller/tests/planner_fixtures.h"

// Its own namespace: the unity build compiles this file with planner_test.cc,
// whose file-local helpers have the same names.
namespace tfjob::op::controller::regressions_planner_test {
namespace {

using json = nlohmann::json;

using fixtures::kNow;
constexpr const char* kSucceededAnnotation = "tfjob-operator.kubeflow.org/succeeded-replicas";

json Replica(int n, const std::string& policy = "Never") {
  return {{"replicas", n},
          {"restartPolicy", policy},
          {"template", {{"spec", {{"containers", json::array({fixtures::TensorflowContainer()})}}}}}};
}

api::TFJob Job(json specs, json run_policy = json::object()) { return fixtures::DecodeJob(specs, run_policy); }

// `exit` is the current state's code too (Kubeflow's ExitedWithCode event).
PodView Pod(const std::string& type, int index, const std::string& phase, std::optional<int> exit = std::nullopt) {
  PodView p = fixtures::OwnedPod(type, index, phase, exit);
  p.terminated_code = exit;
  return p;
}

ServiceView Svc(const std::string& type, int index) { return fixtures::OwnedService(type, index); }

std::vector<ServiceView> Svcs(const std::map<std::string, int>& counts) {
  std::vector<ServiceView> out;
  for (const auto& [type, n] : counts) {
    for (int i = 0; i < n; ++i) out.push_back(Svc(type, i));
  }
  return out;
}

std::vector<std::string> Names(const Plan& p, Action::Kind kind) {
  std::vector<std::string> out;
  for (const auto& a : p.actions) {
    if (a.kind == kind) out.push_back(a.name);
  }
  return out;
}

bool True(const api::JobStatus& s, const std::string& type) {
  for (const auto& c : s.conditions) {
    if (c.type == type) return c.status == "True";
  }
  return false;
}

// The job as the executor leaves it: the plan's status, and its metadata
// patches merged into the annotations (null removes one).
api::TFJob After(api::TFJob job, const Plan& p) {
  job.status = p.status;
  for (const auto& a : p.actions) {
    if (a.kind != Action::Kind::kPatchJob) continue;
    const json& annotations = a.object["metadata"]["annotations"];
    for (auto it = annotations.begin(); it != annotations.end(); ++it) {
      if (it->is_null()) {
        job.metadata.annotations.erase(it.key());
      } else {
        job.metadata.annotations[it.key()] = it->get<std::string>();
      }
    }
  }
  return job;
}

std::string Recorded(const api::TFJob& job) {
  auto it = job.metadata.annotations.find(kSucceededAnnotation);
  return it == job.metadata.annotations.end() ? "" : it->second;
}

// #1186 and #1997: under every restart policy, a worker that succeeded while
// the chief runs on is recorded on the job; once its pod is removed (the
// pod garbage collector, `kubectl delete`, a drained node) it stays
// succeeded and gets neither a pod nor a service again. v1.9.0's
// ReconcilePods creates a pod for any index without one.
TEST(RegressionsPlannerTest, ASucceededReplicaWhosePodIsRemovedStaysSucceeded) {
  for (const char* policy : {"Never", "OnFailure", "Always", "ExitCode"}) {
    SCOPED_TRACE(policy);
    api::TFJob job = Job({{"Chief", Replica(1, policy)}, {"Worker", Replica(3, policy)}});
    const auto svcs = Svcs({{"chief", 1}, {"worker", 3}});
    Plan first = PlanJob(job,
                         {Pod("chief", 0, "Running"), Pod("worker", 0, "Running"), Pod("worker", 1, "Succeeded", 0),
                          Pod("worker", 2, "Running")},
                         svcs, kNow);
    EXPECT_TRUE(Names(first, Action::Kind::kCreatePod).empty());
    EXPECT_TRUE(Names(first, Action::Kind::kDeletePod).empty());
    EXPECT_EQ(Names(first, Action::Kind::kPatchJob), std::vector<std::string>{"j"});
    job = After(job, first);
    EXPECT_EQ(Recorded(job), R"({"Worker":[1]})");

    // Removed outright, or still being deleted: either way, no new pod.
    PodView deleting = Pod("worker", 1, "Succeeded", 0);
    deleting.deleting = true;
    for (const std::vector<PodView>& pods :
         {std::vector<PodView>{Pod("chief", 0, "Running"), Pod("worker", 0, "Running"), Pod("worker", 2, "Running")},
          std::vector<PodView>{Pod("chief", 0, "Running"), Pod("worker", 0, "Running"), deleting,
                               Pod("worker", 2, "Running")}}) {
      std::vector<ServiceView> without_its_service = svcs;
      std::erase_if(without_its_service, [](const ServiceView& s) { return s.name == "j-worker-1"; });
      Plan later = PlanJob(job, pods, without_its_service, kNow);
      EXPECT_TRUE(later.actions.empty()) << later.actions.front().name;
      EXPECT_EQ(later.status.replica_statuses.at("Worker").succeeded, 1);
      EXPECT_EQ(later.status.replica_statuses.at("Worker").active, 2);
      EXPECT_EQ(later.status.replica_statuses.at("Worker").restarts, 0);
      EXPECT_TRUE(True(later.status, "Running"));
      EXPECT_FALSE(later.status_changed);
    }
  }
}

// An index that never succeeded is still re-created when its pod goes (the
// record is of successes only), and the record grows one index at a time.
TEST(RegressionsPlannerTest, ARemovedPodThatNeverSucceededIsRecreated) {
  api::TFJob job = Job({{"Chief", Replica(1)}, {"Worker", Replica(3)}});
  const auto svcs = Svcs({{"chief", 1}, {"worker", 3}});
  job = After(job, PlanJob(job, {Pod("chief", 0, "Running"), Pod("worker", 0, "Succeeded", 0)}, svcs, kNow));
  EXPECT_EQ(Recorded(job), R"({"Worker":[0]})");
  Plan p = PlanJob(job, {Pod("chief", 0, "Running"), Pod("worker", 2, "Succeeded", 0)}, svcs, kNow);
  EXPECT_EQ(Names(p, Action::Kind::kCreatePod), std::vector<std::string>{"j-worker-1"});
  job = After(job, p);
  EXPECT_EQ(Recorded(job), R"({"Worker":[0,2]})");
}

// A job that finishes in this pass writes no record (nothing reads it once
// a job has finished: no extra write for an ordinary job), and a finished
// job gets no pod for a pod removed afterwards.
TEST(RegressionsPlannerTest, AFinishedJobGetsNoPodForARemovedOne) {
  api::TFJob job = Job({{"Worker", Replica(2, "OnFailure")}});
  const auto svcs = Svcs({{"worker", 2}});
  Plan done = PlanJob(job, {Pod("worker", 0, "Succeeded", 0), Pod("worker", 1, "Running")}, svcs, kNow);
  ASSERT_TRUE(True(done.status, "Succeeded"));
  EXPECT_TRUE(Names(done, Action::Kind::kPatchJob).empty());
  job = After(job, done);
  Plan later = PlanJob(job, {}, {}, kNow);
  EXPECT_TRUE(later.actions.empty());
  EXPECT_TRUE(True(later.status, "Succeeded"));
}

// Suspending deletes every pod and, as in Kubeflow, a resumed job runs them
// all again: the record is dropped with the pods.
TEST(RegressionsPlannerTest, SuspendingDropsTheRecordSoAResumedJobRunsEveryReplica) {
  api::TFJob job = Job({{"Chief", Replica(1)}, {"Worker", Replica(2)}});
  job = After(job, PlanJob(job, {Pod("chief", 0, "Running"), Pod("worker", 0, "Succeeded", 0)},
                           Svcs({{"chief", 1}, {"worker", 2}}), kNow));
  ASSERT_FALSE(Recorded(job).empty());
  job.spec.run_policy.suspend = true;
  Plan suspended = PlanJob(job, {Pod("chief", 0, "Running"), Pod("worker", 0, "Succeeded", 0)}, {}, kNow);
  job = After(job, suspended);
  EXPECT_EQ(Recorded(job), "");
  job.spec.run_policy.suspend = false;
  Plan resumed = PlanJob(job, {}, {}, kNow);
  EXPECT_EQ(Names(resumed, Action::Kind::kCreatePod),
            (std::vector<std::string>{"j-chief-0", "j-worker-0", "j-worker-1"}));
}

// #1709: `replicas: 0` for a type means no pod and no service for it, ever,
// and a job that settles: v1.9.0's GetPodSlices (pkg/core/pod.go,
// CalculatePodSliceSize) makes room for index 0 whatever the count, so
// ReconcilePods creates worker 0 and deletes it, pass after pass.
TEST(RegressionsPlannerTest, ReplicasZeroCreatesAndDeletesNothing) {
  api::TFJob job = Job({{"Chief", Replica(1)}, {"PS", Replica(1)}, {"Worker", Replica(0)}});
  Plan first = PlanJob(job, {}, {}, kNow);
  EXPECT_EQ(Names(first, Action::Kind::kCreatePod), (std::vector<std::string>{"j-chief-0", "j-ps-0"}));
  EXPECT_EQ(Names(first, Action::Kind::kCreateService), (std::vector<std::string>{"j-chief-0", "j-ps-0"}));
  // TF_CONFIG lists the empty type, as v1.9.0's genClusterSpec does.
  for (const auto& a : first.actions) {
    if (a.kind != Action::Kind::kCreatePod) continue;
    for (const auto& e : a.object["spec"]["containers"][0]["env"]) {
      if (e["name"] != "TF_CONFIG") continue;
      EXPECT_EQ(json::parse(e["value"].get<std::string>())["cluster"]["worker"], json::array());
    }
  }
  job = After(job, first);
  const std::vector<PodView> pods{Pod("chief", 0, "Running"), Pod("ps", 0, "Running")};
  const auto svcs = Svcs({{"chief", 1}, {"ps", 1}});
  Plan running = PlanJob(job, pods, svcs, kNow);
  EXPECT_TRUE(running.actions.empty());
  ASSERT_TRUE(True(running.status, "Running"));
  job = After(job, running);
  Plan steady = PlanJob(job, pods, svcs, kNow);
  EXPECT_TRUE(steady.actions.empty());
  EXPECT_TRUE(steady.events.empty());
  EXPECT_FALSE(steady.status_changed);
  EXPECT_EQ(steady.status.replica_statuses.at("Worker").active, 0);
  EXPECT_EQ(steady.status.replica_statuses.at("Worker").succeeded, 0);
  Plan done = PlanJob(job, {Pod("chief", 0, "Succeeded", 0), Pod("ps", 0, "Running")}, svcs, kNow);
  EXPECT_TRUE(True(done.status, "Succeeded"));
}

// #1997: a worker that exited 0 is never deleted for a restart, under any
// policy that restarts failed ones, and the job does not show Restarting.
TEST(RegressionsPlannerTest, ACompletedWorkerIsNeverRestarted) {
  for (const char* policy : {"OnFailure", "Always", "ExitCode"}) {
    SCOPED_TRACE(policy);
    api::TFJob job = Job({{"Chief", Replica(1, policy)}, {"Worker", Replica(2, policy)}});
    Plan p = PlanJob(job, {Pod("chief", 0, "Running"), Pod("worker", 0, "Succeeded", 0), Pod("worker", 1, "Running")},
                     Svcs({{"chief", 1}, {"worker", 2}}), kNow);
    EXPECT_TRUE(Names(p, Action::Kind::kDeletePod).empty());
    EXPECT_TRUE(Names(p, Action::Kind::kCreatePod).empty());
    EXPECT_FALSE(True(p.status, "Restarting"));
    EXPECT_TRUE(True(p.status, "Running"));
    EXPECT_EQ(p.status.replica_statuses.at("Worker").restarts, 0);
  }
}

// #2044: under ExitCode a retryable exit shows Restarting only until the
// job runs again; it then succeeds, or fails on a permanent exit code
// (1..127), never left Restarting.
TEST(RegressionsPlannerTest, ExitCodeRestartingGivesWayToRunningSucceededOrFailed) {
  for (const bool permanent_failure : {false, true}) {
    SCOPED_TRACE(permanent_failure ? "then exit 1" : "then success");
    api::TFJob job =
        Job({{"Chief", Replica(1, "ExitCode")}, {"Worker", Replica(2, "ExitCode")}}, {{"backoffLimit", 5}});
    const auto svcs = Svcs({{"chief", 1}, {"worker", 2}});
    Plan failed = PlanJob(
        job, {Pod("chief", 0, "Running"), Pod("worker", 0, "Running"), Pod("worker", 1, "Failed", 137)}, svcs, kNow);
    EXPECT_EQ(Names(failed, Action::Kind::kDeletePod), std::vector<std::string>{"j-worker-1"});
    ASSERT_TRUE(True(failed.status, "Restarting"));
    job = After(job, failed);
    Plan recreated = PlanJob(job, {Pod("chief", 0, "Running"), Pod("worker", 0, "Running")}, svcs, kNow);
    EXPECT_EQ(Names(recreated, Action::Kind::kCreatePod), std::vector<std::string>{"j-worker-1"});
    job = After(job, recreated);
    Plan running = PlanJob(job, {Pod("chief", 0, "Running"), Pod("worker", 0, "Running"), Pod("worker", 1, "Running")},
                           svcs, kNow);
    EXPECT_TRUE(True(running.status, "Running"));
    EXPECT_FALSE(True(running.status, "Restarting"));
    job = After(job, running);
    Plan end =
        permanent_failure
            ? PlanJob(job, {Pod("chief", 0, "Running"), Pod("worker", 0, "Running"), Pod("worker", 1, "Failed", 1)},
                      svcs, kNow)
            : PlanJob(job, {Pod("chief", 0, "Succeeded", 0), Pod("worker", 0, "Running"), Pod("worker", 1, "Running")},
                      svcs, kNow);
    EXPECT_TRUE(True(end.status, permanent_failure ? "Failed" : "Succeeded"));
    EXPECT_FALSE(True(end.status, "Restarting"));
    EXPECT_FALSE(True(end.status, "Running"));
    EXPECT_EQ(end.status.conditions.back().type, permanent_failure ? "Failed" : "Succeeded");
  }
}

// #2044, what v1.9.0 still gets wrong: a replica failing for good while
// another is being restarted. v1.9.0's UpdateJobStatus sets Restarting
// again after Failed, so the job shows Restarting; here it shows Failed and
// Restarting turns False.
TEST(RegressionsPlannerTest, APermanentFailureWhileRestartingShowsFailed) {
  api::TFJob job = Job({{"Chief", Replica(1, "ExitCode")}, {"Worker", Replica(1, "ExitCode")}}, {{"backoffLimit", 5}});
  const auto svcs = Svcs({{"chief", 1}, {"worker", 1}});
  Plan restarting = PlanJob(job, {Pod("chief", 0, "Pending"), Pod("worker", 0, "Failed", 137)}, svcs, kNow);
  ASSERT_TRUE(True(restarting.status, "Restarting"));
  job = After(job, restarting);
  Plan failed = PlanJob(job, {Pod("chief", 0, "Failed", 1)}, svcs, kNow);
  EXPECT_TRUE(True(failed.status, "Failed"));
  EXPECT_FALSE(True(failed.status, "Restarting"));
  EXPECT_EQ(failed.status.conditions.back().type, "Failed");
}

// v1.9.0's IsWorker0Completed (pkg/controller.v1/tensorflow/tfjob_controller.go)
// reads a Succeeded worker 0 without a terminated container state as exit
// code 0xbeef: not complete, so a job without a chief keeps running until
// every worker has succeeded.
TEST(RegressionsPlannerTest, Worker0SucceededWithoutAnExitCodeKeepsTheJobRunning) {
  api::TFJob job = Job({{"Worker", Replica(2)}});
  const auto svcs = Svcs({{"worker", 2}});
  Plan p = PlanJob(job, {Pod("worker", 0, "Succeeded"), Pod("worker", 1, "Running")}, svcs, kNow);
  EXPECT_FALSE(True(p.status, "Succeeded"));
  EXPECT_TRUE(True(p.status, "Running"));
  EXPECT_TRUE(Names(p, Action::Kind::kCreatePod).empty());
  Plan exit_zero = PlanJob(job, {Pod("worker", 0, "Succeeded", 0), Pod("worker", 1, "Running")}, svcs, kNow);
  EXPECT_TRUE(True(exit_zero.status, "Succeeded"));
  // Every worker succeeded: done, exit codes or not (v1.9.0: expected == 0).
  Plan all = PlanJob(After(job, p), {Pod("worker", 0, "Succeeded"), Pod("worker", 1, "Succeeded")}, svcs, kNow);
  EXPECT_TRUE(True(all.status, "Succeeded"));
}

}  // namespace
}  // namespace tfjob::op::controller::regressions_planner_test

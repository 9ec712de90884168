// training-operator's open bugs that its users hit (Issue 47 item 4), each
// run by the tfjob-operator binary against a real API server and behaving as
// its reporters asked: a succeeded pod removed afterwards is not re-created
// (kubeflow/trainer #1186), `replicas: 0` makes and deletes nothing (#1709),
// a completed worker is never restarted (#1997), ExitCode never leaves a job
// Restarting (#2044); and worker 0 Succeeded without an exit code keeps the
// job running, as v1.9.0 does. The kubelet's part is played by writing pod
// status; the pod garbage collector's by `kubectl delete pod`. The planner's
// table tests of the same: operator/controller/tests/planner_regressions_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "operator/tests/envtest_support.h"

// Its own namespace: the unity build compiles this file with
// envtest_policies_test.cc.
namespace tfjob::op::envtest::regressions_test {
namespace {

constexpr const char* kSucceededAnnotation = "tfjob-operator.kubeflow.org/succeeded-replicas";

class EnvtestRegressions : public RealApiServerTest {
 protected:
  void SetUp() override {
    RealApiServerTest::SetUp();
    if (!HasFailure()) StartOperator();
  }
  json ReplicaStatus(const std::string& job, const std::string& key) {
    auto j = TryGet("tfjob", job);
    if (!j) return json::object();
    return (*j)["status"].value("replicaStatuses", json::object()).value(key, json::object());
  }
  std::string Annotation(const std::string& job, const std::string& name) {
    auto j = TryGet("tfjob", job);
    if (!j) return "";
    return (*j)["metadata"].value("annotations", json::object()).value(name, "");
  }
  // What `kubectl get tfjob` shows as the job's state: its newest condition.
  std::string State(const std::string& job) {
    auto j = TryGet("tfjob", job);
    if (!j) return "";
    const json conditions = (*j)["status"].value("conditions", json::array());
    return conditions.empty() ? "" : conditions.back().value("type", "");
  }
  int CountEvents(const std::string& job, const std::string& reason, const std::string& message_part) {
    int n = 0;
    for (const auto& e : Events(job)) {
      if (e.value("reason", "") == reason && e.value("message", "").find(message_part) != std::string::npos) {
        n += e.contains("count") && e["count"].is_number_integer() ? e["count"].get<int>() : 1;
      }
    }
    return n;
  }
  // Returns once the operator has planned `job` after everything the test
  // did to its pods so far: a pod with the job's labels and no owner is
  // created, and the operator adopts it (or deletes it: its index is past
  // any count) in a pass that has seen every earlier pod event, since one
  // watch delivers them in order. No guessed sleep.
  void Planned(const std::string& job) {
    static int n = 0;
    const std::string name = job + "-planned-" + std::to_string(n++);
    Apply("apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
          "\n  labels:\n    training.kubeflow.org/job-name: " + job +
          "\n    training.kubeflow.org/operator-name: tfjob-controller\n"
          "    training.kubeflow.org/replica-type: worker\n    training.kubeflow.org/replica-index: \"99\"\n"
          "spec:\n  containers:\n    - name: tensorflow\n      image: tfjob/runtime-cpu:0.1.0\n");
    ASSERT_TRUE(Eventually([&] {
      auto p = TryGet("pod", name);
      return !p || (*p)["metadata"].contains("ownerReferences");
    })) << "the operator did not plan "
        << job << "\n"
        << op_->output();
    Kubectl({"delete", "-n", ns_, "pod", name, "--ignore-not-found"});
  }
};

// #1186, a finished job: its succeeded pod removed afterwards (by the pod
// garbage collector; here `kubectl delete`) gets no new pod, and the job
// stays Succeeded. v1.9.0 does the same: ReconcileJobs returns early for a
// finished job.
TEST_F(EnvtestRegressions, ASucceededPodDeletedAfterTheJobFinishedIsNotRecreated) {
  Apply(JobYaml("finished", Replica("Worker", 2, "OnFailure")));
  ASSERT_TRUE(Eventually([&] { return Pods("finished").size() == 2; })) << op_->output();
  AllRunning("finished");
  SetPhase("finished-worker-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return HasCondition("finished", "Succeeded"); })) << op_->output();
  Kubectl({"delete", "-n", ns_, "pod", "finished-worker-0"});
  Planned("finished");
  EXPECT_FALSE(TryGet("pod", "finished-worker-0")) << "a finished job's deleted pod was re-created";
  EXPECT_TRUE(HasCondition("finished", "Succeeded"));
  EXPECT_EQ(CountEvents("finished", "SuccessfulCreatePod", "finished-worker-0"), 1);
}

// #1186, a running job: a worker that succeeded while the chief runs on, its
// pod then removed, stays succeeded (status.replicaStatuses.Worker.succeeded,
// and the operator's record on the job) and gets no new pod; the job runs on
// and finishes with it. v1.9.0's ReconcilePods re-creates it and the worker
// runs again.
TEST_F(EnvtestRegressions, ASucceededWorkerDeletedWhileTheJobRunsIsNotRecreated) {
  Apply(JobYaml("running", Replica("Chief", 1) + Replica("Worker", 2)));
  ASSERT_TRUE(Eventually([&] { return Pods("running").size() == 3; })) << op_->output();
  AllRunning("running");
  ASSERT_TRUE(Eventually([&] { return HasCondition("running", "Running"); })) << op_->output();
  SetPhase("running-worker-1", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return Annotation("running", kSucceededAnnotation) == R"({"Worker":[1]})"; }))
      << op_->output();
  EXPECT_EQ(ReplicaStatus("running", "Worker").value("succeeded", 0), 1);
  Kubectl({"delete", "-n", ns_, "pod", "running-worker-1"});
  Planned("running");
  EXPECT_FALSE(TryGet("pod", "running-worker-1")) << "a succeeded worker's deleted pod was re-created";
  EXPECT_EQ(ReplicaStatus("running", "Worker").value("succeeded", 0), 1);
  EXPECT_EQ(ReplicaStatus("running", "Worker").value("active", 0), 1);
  EXPECT_TRUE(HasCondition("running", "Running"));
  SetPhase("running-chief-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return HasCondition("running", "Succeeded"); })) << op_->output();
  EXPECT_FALSE(TryGet("pod", "running-worker-1"));
  EXPECT_EQ(CountEvents("running", "SuccessfulCreatePod", "running-worker-1"), 1);
}

// #1997: under OnFailure, Always and ExitCode alike, a worker that exited 0
// while the others keep running is never deleted and re-created, whether
// its pod stays or is removed; the job never shows Restarting.
TEST_F(EnvtestRegressions, ACompletedWorkerIsNeverRestartedWhileTheOthersRun) {
  const std::vector<std::pair<std::string, std::string>> jobs = {
      {"onfailure", "OnFailure"}, {"always", "Always"}, {"exitcode", "ExitCode"}};
  for (const auto& [job, policy] : jobs)
    Apply(JobYaml(job, Replica("Chief", 1, policy) + Replica("Worker", 2, policy)));
  for (const auto& [job, policy] : jobs) {
    SCOPED_TRACE(job);
    ASSERT_TRUE(Eventually([&, job = job] { return Pods(job).size() == 3; })) << op_->output();
    AllRunning(job);
    ASSERT_TRUE(Eventually([&, job = job] { return HasCondition(job, "Running"); })) << op_->output();
    const std::string first = Uid(job + "-worker-1");
    SetPhase(job + "-worker-1", "Succeeded", 0);
    ASSERT_TRUE(Eventually([&, job = job] { return ReplicaStatus(job, "Worker").value("succeeded", 0) == 1; }))
        << op_->output();
    Planned(job);
    EXPECT_EQ(Uid(job + "-worker-1"), first) << "a completed worker was restarted";
    EXPECT_EQ(CountEvents(job, "SuccessfulDeletePod", job + "-worker-1"), 0);
    EXPECT_FALSE(HasCondition(job, "Restarting"));
    Kubectl({"delete", "-n", ns_, "pod", job + "-worker-1"});
    Planned(job);
    EXPECT_FALSE(TryGet("pod", job + "-worker-1")) << "a completed worker's removed pod was re-created";
    EXPECT_EQ(ReplicaStatus(job, "Worker").value("succeeded", 0), 1);
    EXPECT_TRUE(HasCondition(job, "Running"));
    EXPECT_FALSE(HasCondition(job, "Restarting"));
  }
}

// #1709: `replicas: 0` for Worker beside a Chief: no worker pod and no
// worker service, ever, no event about one, and a status that settles (the
// TFJob is not rewritten on further passes); the job runs and finishes on
// the chief. v1.9.0 (pkg/core/pod.go, CalculatePodSliceSize) creates worker
// 0 and deletes it, over and over.
TEST_F(EnvtestRegressions, ReplicasZeroCreatesNoPodNoServiceAndSettles) {
  Apply(JobYaml("zero", Replica("Chief", 1) + Replica("Worker", 0)));
  ASSERT_TRUE(Eventually([&] { return Pods("zero").size() == 1 && Services("zero").size() == 1; })) << op_->output();
  AllRunning("zero");
  ASSERT_TRUE(Eventually([&] { return HasCondition("zero", "Running"); })) << op_->output();
  Planned("zero");
  const std::string version = Get("tfjob", "zero")["metadata"].value("resourceVersion", "");
  Planned("zero");
  EXPECT_EQ(Get("tfjob", "zero")["metadata"].value("resourceVersion", ""), version) << "the status keeps changing";
  EXPECT_TRUE(List("pods", "training.kubeflow.org/job-name=zero,training.kubeflow.org/replica-type=worker").empty());
  EXPECT_TRUE(
      List("services", "training.kubeflow.org/job-name=zero,training.kubeflow.org/replica-type=worker").empty());
  for (const auto& e : Events("zero"))
    EXPECT_THAT(e.value("message", ""), ::testing::Not(::testing::HasSubstr("zero-worker")));
  EXPECT_EQ(ReplicaStatus("zero", "Worker").value("active", 0), 0);
  SetPhase("zero-chief-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return HasCondition("zero", "Succeeded"); })) << op_->output();
}

// #2044: under ExitCode a retryable exit (137) restarts the worker and the
// job shows Restarting only until it runs again; it then succeeds, or, on
// a permanent exit code (1), fails; `kubectl get tfjob` never stays at
// Restarting. (v1.9.0 fixed the reporter's case, a permanent exit code, in
// ReconcilePods, pkg/controller.v1/common/pod.go.)
TEST_F(EnvtestRegressions, ExitCodeRestartingGoesBackToRunningThenSucceedsOrFails) {
  for (const std::string job : {"retried", "permanent"}) {
    Apply(JobYaml(job, Replica("Chief", 1, "ExitCode") + Replica("Worker", 1, "ExitCode"),
                  "  runPolicy: {backoffLimit: 5}\n"));
  }
  for (const std::string job : {"retried", "permanent"}) {
    SCOPED_TRACE(job);
    ASSERT_TRUE(Eventually([&] { return Pods(job).size() == 2; })) << op_->output();
    AllRunning(job);
    ASSERT_TRUE(Eventually([&] { return HasCondition(job, "Running"); })) << op_->output();
    const std::string first = Uid(job + "-worker-0");
    SetPhase(job + "-worker-0", "Failed", 137);
    ASSERT_TRUE(Eventually([&] {
      const std::string now = Uid(job + "-worker-0");
      return !now.empty() && now != first;
    })) << op_->output();
    EXPECT_TRUE(Eventually([&] { return CountEvents(job, "TFJobRestarting", "is restarting") > 0; }));
    SetPhase(job + "-worker-0", "Running");
    ASSERT_TRUE(Eventually([&] { return HasCondition(job, "Running") && State(job) == "Running"; }))
        << "the job stayed " << State(job) << "\n"
        << op_->output();
    EXPECT_FALSE(HasCondition(job, "Restarting"));
  }
  SetPhase("retried-chief-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return HasCondition("retried", "Succeeded"); })) << op_->output();
  EXPECT_EQ(State("retried"), "Succeeded");
  SetPhase("permanent-worker-0", "Failed", 1);
  ASSERT_TRUE(Eventually([&] { return HasCondition("permanent", "Failed"); })) << op_->output();
  EXPECT_EQ(State("permanent"), "Failed");
  EXPECT_FALSE(HasCondition("permanent", "Restarting"));
}

// #2044, what v1.9.0 still gets wrong: the chief fails for good (exit 1)
// while a worker is being restarted. v1.9.0 sets Restarting again after
// Failed (tfjob_controller.go, UpdateJobStatus), so `kubectl get tfjob`
// shows the failed job as Restarting; here it shows Failed.
TEST_F(EnvtestRegressions, APermanentFailureWhileAWorkerRestartsShowsFailed) {
  Apply(JobYaml("stuck", Replica("Chief", 1, "ExitCode") + Replica("Worker", 1, "ExitCode"),
                "  runPolicy: {backoffLimit: 5}\n"));
  ASSERT_TRUE(Eventually([&] { return Pods("stuck").size() == 2; })) << op_->output();
  SetPhase("stuck-worker-0", "Running");
  const std::string first = Uid("stuck-worker-0");
  SetPhase("stuck-worker-0", "Failed", 137);
  ASSERT_TRUE(Eventually([&] { return HasCondition("stuck", "Restarting"); })) << op_->output();
  ASSERT_TRUE(Eventually([&] {
    const std::string now = Uid("stuck-worker-0");
    return !now.empty() && now != first;
  })) << op_->output();
  SetPhase("stuck-chief-0", "Failed", 1);
  ASSERT_TRUE(Eventually([&] { return HasCondition("stuck", "Failed"); })) << op_->output();
  EXPECT_EQ(State("stuck"), "Failed");
  EXPECT_FALSE(HasCondition("stuck", "Restarting"));
}

// Worker 0 Succeeded whose container status has no terminated state (the
// kubelet's status lost it): v1.9.0's IsWorker0Completed reads exit code
// 0xbeef and does not count it complete, so a job without a chief stays
// Running until every worker has succeeded. The same here.
TEST_F(EnvtestRegressions, Worker0SucceededWithoutAnExitCodeKeepsTheJobRunning) {
  Apply(JobYaml("beef", Replica("Worker", 2)));
  ASSERT_TRUE(Eventually([&] { return Pods("beef").size() == 2; })) << op_->output();
  AllRunning("beef");
  ASSERT_TRUE(Eventually([&] { return HasCondition("beef", "Running"); })) << op_->output();
  SetPodStatus("beef-worker-0", {{"phase", "Succeeded"}, {"containerStatuses", json::array()}});
  ASSERT_TRUE(Eventually([&] { return ReplicaStatus("beef", "Worker").value("succeeded", 0) == 1; })) << op_->output();
  Planned("beef");
  EXPECT_FALSE(HasCondition("beef", "Succeeded")) << "worker 0 without an exit code counted as complete";
  EXPECT_TRUE(HasCondition("beef", "Running"));
  SetPhase("beef-worker-1", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return HasCondition("beef", "Succeeded"); })) << op_->output();
}

}  // namespace
}  // namespace tfjob::op::envtest::regressions_test

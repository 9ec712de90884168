// What happens around a TFJob on a real API server, beyond its policies:
// events as `kubectl describe tfjob` shows them (quota and pod-validation
// denials included), orphans adopted after `--cascade=orphan`, cascade
// deletion by the real garbage collector, the operator and the API server
// restarted mid-job, two operators under leader election with one killed,
// Volcano's and scheduler-plugins' PodGroups, and the ExitCode restart count
// under a CRD with Kubeflow's own status schema.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>
#include <functional>
#include <map>
#include <thread>
#include <fstream>
#include <set>
#include <sstream>

#include "operator/api/codec.h"
#include "operator/tests/envtest_support.h"

namespace tfjob::op::envtest {
namespace {

namespace t = ::tfjob::testing;
using ::testing::HasSubstr;
using ::testing::Not;

class EnvtestLifecycle : public RealApiServerTest {
 protected:
  // "reason: message" of each event on `object`, for matching and messages.
  std::vector<std::string> EventLines(const std::string& object, const std::string& type = "") {
    std::vector<std::string> out;
    for (const auto& e : Events(object)) {
      if (!type.empty() && e.value("type", "") != type) continue;
      out.push_back(e.value("reason", "") + ": " + e.value("message", ""));
    }
    return out;
  }
  bool HasEvent(const std::string& object, const std::string& type, const std::string& reason,
                const std::string& message_part = "") {
    for (const auto& e : Events(object)) {
      if (e.value("type", "") == type && e.value("reason", "") == reason &&
          e.value("message", "").find(message_part) != std::string::npos) {
        return true;
      }
    }
    return false;
  }
  std::string Describe(const std::string& job) { return Kubectl({"describe", "tfjob", "-n", ns_, job}).out; }
};

// What the operator did, as Kubeflow records it, in `kubectl describe
// tfjob`: each pod and service created, the exit code of a pod that
// stopped, the warning for a template restartPolicy the replica's
// overrides, and an abnormal pod (ImagePullBackOff) with its kubelet message.
TEST_F(EnvtestLifecycle, EventsTellWhatTheOperatorDidInDescribe) {
  StartOperator();
  Apply(JobYaml("told", Replica("Worker", 2, "ExitCode"), "  runPolicy: {backoffLimit: 3}\n"));
  ASSERT_TRUE(Eventually([&] { return Pods("told").size() == 2 && Services("told").size() == 2; })) << op_->output();
  Apply(JobYaml("overridden",
                "    Worker:\n      replicas: 1\n      restartPolicy: Never\n      template:\n"
                "        spec:\n          restartPolicy: Always\n          containers:\n"
                "            - name: tensorflow\n              image: tfjob/runtime-cpu:0.1.0\n"));
  ASSERT_TRUE(Eventually([&] {
    return HasEvent("told", "Normal", "SuccessfulCreatePod", "Created pod: told-worker-1") &&
           HasEvent("told", "Normal", "SuccessfulCreateService", "Created service: told-worker-1");
  })) << ::testing::PrintToString(EventLines("told"));
  SetPhase("told-worker-1", "Failed", 137);
  ASSERT_TRUE(Eventually([&] {
    return HasEvent("told", "Normal", "ExitedWithCode", "Pod: " + ns_ + ".told-worker-1 exited with code 137") &&
           HasEvent("told", "Normal", "SuccessfulDeletePod", "Deleted pod: told-worker-1") &&
           HasEvent("told", "Warning", "TFJobRestarting", "job told is restarting because Worker replica(s) failed.");
  })) << ::testing::PrintToString(EventLines("told"));
  SetPodStatus("told-worker-0",
               {{"phase", "Pending"},
                {"containerStatuses",
                 json::array({{{"name", "tensorflow"},
                               {"image", "tfjob/runtime-cpu:0.1.0"},
                               {"imageID", ""},
                               {"ready", false},
                               {"restartCount", 0},
                               {"state",
                                {{"waiting",
                                  {{"reason", "ImagePullBackOff"},
                                   {"message", "Back-off pulling image \"tfjob/runtime-cpu:0.1.0\""}}}}}}})}});
  ASSERT_TRUE(Eventually([&] {
    return HasEvent("told", "Warning", "ImagePullBackOff",
                    "Error pod told-worker-0 container tensorflow waiting message: Back-off pulling image");
  })) << ::testing::PrintToString(EventLines("told"));
  ASSERT_TRUE(Eventually([&] {
    return HasEvent("overridden", "Warning", "SetPodTemplateRestartPolicy",
                    "Restart policy in pod template will be overwritten by restart policy in replica spec");
  })) << ::testing::PrintToString(EventLines("overridden"));
  EXPECT_EQ(Get("pod", "overridden-worker-0")["spec"]["restartPolicy"], "Never");
  SetPhase("told-worker-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] {
    return HasEvent("told", "Normal", "TFJobSucceeded", "TFJob " + ns_ + "/told successfully completed.");
  })) << ::testing::PrintToString(EventLines("told"));

  const std::string described = Describe("told");
  for (const char* reason : {"SuccessfulCreatePod", "SuccessfulCreateService", "ExitedWithCode", "SuccessfulDeletePod",
                             "TFJobRestarting", "ImagePullBackOff", "TFJobSucceeded"}) {
    EXPECT_THAT(described, HasSubstr(reason)) << described;
  }
  // As in Kubeflow, none for the Created or Running conditions.
  for (const auto& e : Events("told")) {
    EXPECT_NE(e.value("reason", ""), "TFJobCreated");
    EXPECT_NE(e.value("reason", ""), "TFJobRunning");
  }
  // Each event once per job, however often the job is reconciled.
  std::multiset<std::string> lines;
  for (const auto& e : Events("told")) lines.insert(e.value("reason", "") + e.value("message", ""));
  for (const auto& l : lines) EXPECT_EQ(lines.count(l), 1u) << l;
}

// A pod the API server refuses, for a ResourceQuota or a template that
// passes the CRD's schema but not pod validation, is a FailedCreatePod
// warning on the job (Kubeflow's), visible in `kubectl describe tfjob`;
// the operator keeps trying, so raising the quota lets the job go on.
TEST_F(EnvtestLifecycle, APodTheServerRefusesIsAFailedCreatePodWarningInDescribe) {
  Kubectl({"create", "quota", "two-pods", "-n", ns_, "--hard=pods=1"});
  // Quota admission refuses everything until the quota controller has
  // filled in the quota's status.
  ASSERT_TRUE(Eventually([&] { return Get("resourcequota", "two-pods")["status"].contains("hard"); }));
  StartOperator();
  Apply(JobYaml("quota", Replica("Worker", 2)));
  ASSERT_TRUE(Eventually([&] { return HasEvent("quota", "Warning", "FailedCreatePod", "exceeded quota"); }))
      << op_->output() << ::testing::PrintToString(EventLines("quota"));
  EXPECT_EQ(Pods("quota").size(), 1u);
  EXPECT_FALSE(HasCondition("quota", "Failed"));
  std::string described = Describe("quota");
  EXPECT_THAT(described, HasSubstr("FailedCreatePod"));
  EXPECT_THAT(described, HasSubstr("exceeded quota: two-pods"));

  Kubectl({"patch", "-n", ns_, "resourcequota", "two-pods", "--type=merge", "-p", R"({"spec":{"hard":{"pods":"2"}}})"});
  ASSERT_TRUE(Eventually([&] { return Pods("quota").size() == 2; }, std::chrono::seconds(60)))
      << "the refused pod was not created once the quota allowed it\n"
      << op_->output();

  // Requests above limits: valid for the CRD's schema, invalid for a pod.
  Apply(JobYaml("invalid", Replica("Worker", 1, "Never",
                                   "              resources: {requests: {cpu: \"2\"}, limits: {cpu: \"1\"}}\n")));
  Kubectl({"delete", "quota", "two-pods", "-n", ns_});
  ASSERT_TRUE(Eventually([&] {
    return HasEvent("invalid", "Warning", "FailedCreatePod", "must be less than or equal to cpu limit");
  })) << op_->output()
      << ::testing::PrintToString(EventLines("invalid"));
  described = Describe("invalid");
  EXPECT_THAT(described, HasSubstr("FailedCreatePod"));
  EXPECT_THAT(described, HasSubstr("must be less than or equal to cpu limit"));
  EXPECT_TRUE(Pods("invalid").empty());
}

// `kubectl delete tfjob --cascade=orphan` leaves the pods and services,
// their ownerReferences removed by the garbage collector; the same job
// applied again adopts them (same objects, new owner) instead of counting
// the taken names as created and leaving those indexes without an owner.
TEST_F(EnvtestLifecycle, OrphansLeftByCascadeOrphanAreAdoptedByTheRecreatedJob) {
  StartOperator();
  const std::string job = JobYaml("adopt", Replica("Chief", 1) + Replica("Worker", 2));
  Apply(job);
  ASSERT_TRUE(Eventually([&] { return Pods("adopt").size() == 3 && Services("adopt").size() == 3; })) << op_->output();
  AllRunning("adopt");
  std::map<std::string, std::string> uids;
  for (const auto& o : Pods("adopt")) uids[o["metadata"]["name"]] = o["metadata"]["uid"];
  for (const auto& o : Services("adopt"))
    uids["svc/" + o["metadata"]["name"].get<std::string>()] = o["metadata"]["uid"];
  const std::string old_owner = Uid("tfjob", "adopt");

  Kubectl({"delete", "tfjob", "adopt", "-n", ns_, "--cascade=orphan"});
  ASSERT_TRUE(Eventually(
      [&] {
        if (TryGet("tfjob", "adopt")) return false;
        for (const auto& o : Pods("adopt")) {
          if (o["metadata"].contains("ownerReferences")) return false;
        }
        for (const auto& o : Services("adopt")) {
          if (o["metadata"].contains("ownerReferences")) return false;
        }
        return true;
      },
      kGarbageCollectorTimeout))
      << "the garbage collector did not orphan the job's pods and services";

  Apply(job);
  ASSERT_TRUE(Eventually([&] {
    const std::string owner = Uid("tfjob", "adopt");
    if (owner.empty() || owner == old_owner) return false;
    std::vector<json> all = Pods("adopt");
    for (const auto& s : Services("adopt")) all.push_back(s);
    for (const auto& o : all) {
      const auto refs = o["metadata"].value("ownerReferences", json::array());
      if (refs.size() != 1 || refs[0].value("uid", "") != owner || !refs[0].value("controller", false)) return false;
    }
    return all.size() == 6;
  })) << op_->output();
  for (const auto& o : Pods("adopt")) EXPECT_EQ(uids[o["metadata"]["name"]], o["metadata"]["uid"]);
  for (const auto& o : Services("adopt")) {
    EXPECT_EQ(uids["svc/" + o["metadata"]["name"].get<std::string>()], o["metadata"]["uid"]);
  }
  EXPECT_FALSE(HasEvent("adopt", "Warning", "FailedCreatePod"));
  // The adopted pods carry the job on: the chief's success ends it.
  SetPhase("adopt-chief-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return HasCondition("adopt", "Succeeded"); })) << op_->output();
}

// Deleting a job, in the background or in the foreground, takes its pods
// and services with it: the real garbage collector follows the
// ownerReferences (blocking the owner's deletion, so a foreground deletion
// waits for them while the operator, seeing the job being deleted, leaves it).
TEST_F(EnvtestLifecycle, DeletingTheJobLetsTheGarbageCollectorDeleteItsPodsAndServices) {
  StartOperator();
  Apply(JobYaml("background", Replica("PS", 1) + Replica("Worker", 2)));
  Apply(JobYaml("foreground", Replica("PS", 1) + Replica("Worker", 2)));
  ASSERT_TRUE(Eventually([&] {
    return Pods("background").size() == 3 && Services("background").size() == 3 && Pods("foreground").size() == 3 &&
           Services("foreground").size() == 3;
  })) << op_->output();
  for (const auto& o : Pods("foreground")) {
    EXPECT_TRUE(o["metadata"]["ownerReferences"][0].value("blockOwnerDeletion", false)) << o["metadata"]["name"];
  }
  Kubectl({"delete", "tfjob", "background", "-n", ns_, "--wait=false"});
  Kubectl({"delete", "tfjob", "foreground", "-n", ns_, "--cascade=foreground", "--wait=false"});
  ASSERT_TRUE(Eventually(
      [&] {
        return Pods("background").empty() && Services("background").empty() && Pods("foreground").empty() &&
               Services("foreground").empty() && !TryGet("tfjob", "background") && !TryGet("tfjob", "foreground");
      },
      kGarbageCollectorTimeout))
      << op_->output();
}

// The operator killed mid-job and started again: what happened while it
// was down (a pod killed by a signal) is acted on, nothing is created twice
// and the job finishes.
TEST_F(EnvtestLifecycle, TheOperatorRestartedMidJobCarriesOnWithoutDuplicates) {
  StartOperator();
  Apply(JobYaml("survive", Replica("Chief", 1, "ExitCode") + Replica("Worker", 2, "ExitCode")));
  ASSERT_TRUE(Eventually([&] { return Pods("survive").size() == 3; })) << op_->output();
  AllRunning("survive");
  ASSERT_TRUE(Eventually([&] { return HasCondition("survive", "Running"); })) << op_->output();
  const std::string chief = Uid("pod", "survive-chief-0"), w0 = Uid("pod", "survive-worker-0"),
                    w1 = Uid("pod", "survive-worker-1");
  EXPECT_EQ(op_->Stop(SIGKILL), 128 + SIGKILL);
  op_.reset();

  SetPhase("survive-worker-1", "Failed", 137);
  StartOperator();
  ASSERT_TRUE(Eventually([&] {
    const std::string now = Uid("pod", "survive-worker-1");
    return !now.empty() && now != w1;
  })) << "the pod that failed while the operator was down was not re-created\n"
      << op_->output();
  EXPECT_EQ(Uid("pod", "survive-chief-0"), chief);
  EXPECT_EQ(Uid("pod", "survive-worker-0"), w0);
  EXPECT_EQ(Pods("survive").size(), 3u);
  EXPECT_EQ(Services("survive").size(), 3u);
  SetPhase("survive-worker-1", "Running");
  SetPhase("survive-chief-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return HasCondition("survive", "Succeeded"); })) << op_->output();
}

// The API server (with etcd and the controller manager) stopped and
// started mid-job: the operator stays up, re-lists, re-watches, and both
// the running job and a job submitted afterwards go on.
TEST_F(EnvtestLifecycle, TheApiServerRestartedMidJob) {
  StartOperator();
  Apply(JobYaml("before", Replica("Worker", 2)));
  ASSERT_TRUE(Eventually([&] { return Pods("before").size() == 2; })) << op_->output();
  AllRunning("before");
  ASSERT_TRUE(Eventually([&] { return HasCondition("before", "Running"); })) << op_->output();
  std::string why;
  ASSERT_TRUE(cp_->Restart(&why)) << why;
  EXPECT_TRUE(op_->running()) << op_->output();
  Apply(JobYaml("after", Replica("Worker", 1)));
  ASSERT_TRUE(Eventually([&] { return Pods("after").size() == 1; }, std::chrono::seconds(60)))
      << "no pod for a job submitted after the restart\n"
      << op_->output();
  SetPhase("before-worker-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return HasCondition("before", "Succeeded"); }, std::chrono::seconds(60)))
      << op_->output();
  EXPECT_EQ(Pods("before").size(), 2u);
  EXPECT_TRUE(op_->running()) << op_->output();
}

// Two operators with leader election: one reconciles, the other waits; the
// leader killed without releasing its Lease, the standby takes over once
// the Lease expires and finishes the job; a clean stop releases the Lease.
TEST_F(EnvtestLifecycle, TwoOperatorsElectOneLeaderAndTheStandbyTakesOverWhenItIsKilled) {
  const std::vector<std::string> le{"--leader-elect", "--leader-election-lease-duration", "2"};
  auto holder = [&] {
    auto l = TryGet("lease", "tfjob-operator-leader");
    return l ? (*l)["spec"].value("holderIdentity", "") : std::string("<none>");
  };
  auto a = OperatorProcess(le);
  ASSERT_TRUE(Eventually([&] { return holder().find("_" + std::to_string(a->pid())) != std::string::npos; }))
      << a->output();
  auto b = OperatorProcess(le);
  Apply(JobYaml("elect", Replica("Worker", 2)));
  ASSERT_TRUE(Eventually([&] { return Pods("elect").size() == 2; })) << a->output() << b->output();
  EXPECT_THAT(b->output(), Not(HasSubstr("watching")));  // the standby does not reconcile
  EXPECT_EQ(a->Stop(SIGKILL), 128 + SIGKILL);
  ASSERT_TRUE(Eventually([&] { return holder().find("_" + std::to_string(b->pid())) != std::string::npos; }))
      << holder() << "\n"
      << b->output();
  SetPhase("elect-worker-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return HasCondition("elect", "Succeeded"); })) << b->output();
  EXPECT_EQ(Pods("elect").size(), 2u);
  EXPECT_EQ(b->Stop(SIGTERM), 0) << b->output();
  EXPECT_EQ(holder(), "");
}

// Volcano: the PodGroup (owned by the job, minResources the summed requests
// of its minMember pods) comes first; pods wait until Volcano admits the
// gang (Inqueue), and so does the job's startTime, the clock of
// activeDeadlineSeconds; a finished job's PodGroup is deleted.
TEST_F(EnvtestLifecycle, VolcanoAdmitsTheGangBeforePodsAndTheClockStart) {
  InstallCrd(VolcanoPodGroupCrd());
  StartOperator({"--gang-scheduler-name", "volcano"});
  const std::string ps = "              resources: {requests: {cpu: \"2\", memory: 1Gi}}\n";
  const std::string worker = "              resources: {requests: {cpu: 500m, memory: 512Mi}}\n";
  Apply(JobYaml("gang", Replica("PS", 1, "OnFailure", ps) + Replica("Worker", 3, "OnFailure", worker),
                "  runPolicy:\n    schedulingPolicy: {minAvailable: 3, queue: research}\n"));
  const std::string pg = "podgroups.scheduling.volcano.sh";
  ASSERT_TRUE(Eventually([&] { return TryGet(pg, "gang").has_value(); })) << op_->output();
  json group = Get(pg, "gang");
  EXPECT_EQ(group["spec"]["minMember"], 3);
  EXPECT_EQ(group["spec"]["queue"], "research");
  // The PS's and two workers' requests (the job's replica order; Kubeflow's
  // is Go's map order).
  EXPECT_EQ(group["spec"]["minResources"], json({{"cpu", "3"}, {"memory", "2Gi"}}));
  EXPECT_EQ(group["metadata"]["ownerReferences"][0]["uid"], Uid("tfjob", "gang"));
  Kubectl({"patch", "-n", ns_, pg, "gang", "--subresource=status", "--type=merge", "-p",
           R"({"status":{"phase":"Pending"}})"});
  std::this_thread::sleep_for(std::chrono::seconds(1));  // time to act, were it going to
  EXPECT_TRUE(Pods("gang").empty());
  EXPECT_FALSE(Get("tfjob", "gang").value("status", json::object()).contains("startTime"));

  Kubectl({"patch", "-n", ns_, pg, "gang", "--subresource=status", "--type=merge", "-p",
           R"({"status":{"phase":"Inqueue"}})"});
  ASSERT_TRUE(Eventually([&] { return Pods("gang").size() == 4; })) << op_->output();
  EXPECT_TRUE(Eventually([&] { return Get("tfjob", "gang").value("status", json::object()).contains("startTime"); }));
  const json pod = Get("pod", "gang-worker-1");
  EXPECT_EQ(pod["spec"]["schedulerName"], "volcano");
  EXPECT_EQ(pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"], "gang");
  EXPECT_EQ(pod["metadata"]["annotations"]["volcano.sh/task-spec"], "worker");
  AllRunning("gang");
  SetPhase("gang-worker-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return HasCondition("gang", "Succeeded"); })) << op_->output();
  ASSERT_TRUE(Eventually([&] { return !TryGet(pg, "gang"); })) << op_->output();
  EXPECT_TRUE(Eventually([&] { return HasEvent("gang", "Normal", "SuccessfulDeletePodGroup"); }))
      << ::testing::PrintToString(EventLines("gang"));
}

// scheduler-plugins: its PodGroup kind, pods at once with its label, and
// the real garbage collector deletes the PodGroup with the job.
TEST_F(EnvtestLifecycle, SchedulerPluginsPodGroupIsOwnedByTheJob) {
  InstallCrd(SchedulerPluginsPodGroupCrd());
  StartOperator({"--gang-scheduler-name", "scheduler-plugins"});
  const std::string requests = "              resources: {requests: {cpu: \"1\"}}\n";
  Apply(JobYaml("coscheduled", Replica("PS", 1, "OnFailure", requests) + Replica("Worker", 3, "OnFailure", requests),
                "  runPolicy:\n    schedulingPolicy: {minAvailable: 4, scheduleTimeoutSeconds: 300}\n"));
  const std::string pg = "podgroups.scheduling.x-k8s.io";
  ASSERT_TRUE(Eventually([&] { return TryGet(pg, "coscheduled").has_value() && Pods("coscheduled").size() == 4; }))
      << op_->output();
  const json group = Get(pg, "coscheduled");
  EXPECT_EQ(group["spec"], json({{"minMember", 4}, {"scheduleTimeoutSeconds", 300}, {"minResources", {{"cpu", "4"}}}}));
  const json pod = Get("pod", "coscheduled-ps-0");
  EXPECT_EQ(pod["spec"]["schedulerName"], "scheduler-plugins");
  EXPECT_EQ(pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"], "coscheduled");
  Kubectl({"delete", "tfjob", "coscheduled", "-n", ns_});
  ASSERT_TRUE(
      Eventually([&] { return !TryGet(pg, "coscheduled") && Pods("coscheduled").empty(); }, kGarbageCollectorTimeout));
}

// Kubeflow's CRD knows no `restarts` in replicaStatuses and prunes it; the
// operator also keeps the count on the job, so with that CRD installed
// backoffLimit is still reached. The CRD here is this project's with its
// status cut down to Kubeflow's JobStatus and ReplicaStatus fields.
TEST_F(EnvtestLifecycle, ExitCodeRestartsAreCountedUnderKubeflowsStatusSchema) {
  std::ifstream in(t::SourceDir() + "/crds/kubeflow.org_tfjobs.yaml");
  std::stringstream text;
  text << in.rdbuf();
  auto docs = api::YamlDocumentsToJson(text.str(), "crds/kubeflow.org_tfjobs.yaml");
  ASSERT_TRUE(docs.ok()) << docs.status();
  const json ours = (*docs)[0];
  json kubeflows = ours;
  json& replica_status = kubeflows["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
                                  ["properties"]["replicaStatuses"]["additionalProperties"]["properties"];
  ASSERT_EQ(replica_status.erase("restarts"), 1u);
  EXPECT_EQ(replica_status.size(), 5u) << replica_status.dump();  // active, succeeded, failed, labelSelector, selector

  // Whether the API server's handler for tfjobs keeps a status `restarts`
  // (the CRD is stored at once, served a moment later).
  auto keeps_restarts = [&] {
    Kubectl({"patch", "-n", ns_, "tfjob", "probe", "--subresource=status", "--type=merge", "-p",
             R"({"status":{"replicaStatuses":{"Worker":{"restarts":1}}}})"});
    return Get("tfjob", "probe")["status"]["replicaStatuses"]["Worker"].contains("restarts");
  };
  bool restored = false;
  auto restore = [&] {
    if (!restored) cp_->Apply(ours.dump(), /*server_side=*/true);
    restored = true;
  };
  struct Guard {
    std::function<void()> f;
    ~Guard() { f(); }
  } guard{restore};  // whatever fails below, the next test gets this project's CRD
  Apply(JobYaml("probe", Replica("Worker", 1), "  runPolicy: {managedBy: kueue.x-k8s.io/multikueue}\n"));
  InstallCrd(kubeflows);
  ASSERT_TRUE(Eventually([&] { return !keeps_restarts(); })) << "Kubeflow's status schema never took effect";

  StartOperator();
  Apply(JobYaml("counted", Replica("Worker", 1, "ExitCode"), "  runPolicy: {backoffLimit: 2}\n"));
  ASSERT_TRUE(Eventually([&] { return Pods("counted").size() == 1; })) << op_->output();
  const std::string first = Uid("pod", "counted-worker-0");
  SetPhase("counted-worker-0", "Failed", 143);
  ASSERT_TRUE(Eventually([&] {
    const std::string now = Uid("pod", "counted-worker-0");
    return !now.empty() && now != first;
  })) << op_->output();
  SetPhase("counted-worker-0", "Running");
  ASSERT_TRUE(Eventually([&] {
    const json s = Get("tfjob", "counted").value("status", json::object());
    return s.contains("replicaStatuses") && s["replicaStatuses"]["Worker"].value("active", 0) == 1;
  }));
  EXPECT_FALSE(Get("tfjob", "counted")["status"]["replicaStatuses"]["Worker"].contains("restarts"));
  EXPECT_FALSE(HasCondition("counted", "Failed"));
  SetPhase("counted-worker-0", "Failed", 143);
  ASSERT_TRUE(Eventually([&] { return HasCondition("counted", "Failed"); }))
      << "the second re-creation did not reach backoffLimit 2 under Kubeflow's CRD\n"
      << op_->output();
  StopOperator();

  restore();
  ASSERT_TRUE(Eventually([&] { return keeps_restarts(); })) << "this project's CRD never came back";
}

// Moving a cluster from training-operator: a job it started (its pods,
// services and status exactly as it writes them, no task token) is taken
// over as it is: nothing is created again, the status goes on, a pod that
// fails is re-created as training-operator would (without a token, like its
// peers), and the job finishes.
TEST_F(EnvtestLifecycle, AJobTrainingOperatorStartedCarriesOnUnderThisOperator) {
  Apply(JobYaml("inflight", Replica("Chief", 1, "ExitCode") + Replica("Worker", 2, "ExitCode")));
  const std::string uid = Uid("tfjob", "inflight");
  ASSERT_FALSE(uid.empty());
  const json owner = {
      {"apiVersion", "kubeflow.org/v1"}, {"kind", "TFJob"}, {"name", "inflight"}, {"uid", uid}, {"controller", true},
      {"blockOwnerDeletion", true}};
  const std::string s = "." + ns_ + ".svc:2222";
  const std::string cluster = R"({"cluster":{"chief":["inflight-chief-0)" + s + R"("],"worker":["inflight-worker-0)" +
                              s + R"(","inflight-worker-1)" + s + R"("]},)";
  std::map<std::string, std::string> uids;
  for (const auto& [type, index] :
       std::vector<std::pair<std::string, int>>{{"chief", 0}, {"worker", 0}, {"worker", 1}}) {
    const std::string name = "inflight-" + type + "-" + std::to_string(index);
    json labels = {{"training.kubeflow.org/operator-name", "tfjob-controller"},
                   {"training.kubeflow.org/job-name", "inflight"},
                   {"training.kubeflow.org/replica-type", type},
                   {"training.kubeflow.org/replica-index", std::to_string(index)}};
    json pod_labels = labels;
    if (type == "chief") pod_labels["training.kubeflow.org/job-role"] = "master";
    const std::string tf_config = cluster + R"("task":{"type":")" + type + R"(","index":)" + std::to_string(index) +
                                  R"(},"environment":"cloud"})";
    const json pod = {
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata", {{"name", name}, {"labels", pod_labels}, {"ownerReferences", json::array({owner})}}},
        {"spec",
         {{"restartPolicy", "Never"},
          {"containers", json::array({{{"name", "tensorflow"},
                                       {"image", "tfjob/runtime-cpu:0.1.0"},
                                       {"ports", json::array({{{"name", "tfjob-port"}, {"containerPort", 2222}}})},
                                       {"env", json::array({{{"name", "TF_CONFIG"}, {"value", tf_config}}})}}})}}}};
    const json svc = {{"apiVersion", "v1"},
                      {"kind", "Service"},
                      {"metadata", {{"name", name}, {"labels", labels}, {"ownerReferences", json::array({owner})}}},
                      {"spec",
                       {{"clusterIP", "None"},
                        {"selector", labels},
                        {"ports", json::array({{{"name", "tfjob-port"}, {"port", 2222}}})}}}};
    ASSERT_EQ(Apply(pod.dump()).exit_code, 0);
    ASSERT_EQ(Apply(svc.dump()).exit_code, 0);
    SetPhase(name, "Running");
    uids[name] = Uid("pod", name);
  }
  Kubectl({"patch", "-n", ns_, "tfjob", "inflight", "--subresource=status", "--type=merge", "-p",
           json{{"status",
                 {{"conditions", json::array({{{"type", "Created"},
                                               {"status", "True"},
                                               {"reason", "TFJobCreated"},
                                               {"message", "TFJob inflight is created."}},
                                              {{"type", "Running"},
                                               {"status", "True"},
                                               {"reason", "TFJobRunning"},
                                               {"message", "TFJob " + ns_ + "/inflight is running."}}})},
                  {"replicaStatuses", {{"Chief", {{"active", 1}}}, {"Worker", {{"active", 2}}}}}}}}
               .dump()});

  StartOperator();
  ASSERT_TRUE(Eventually([&] { return op_->output().find("watching") != std::string::npos; })) << op_->output();
  SetPhase("inflight-worker-1", "Failed", 137);
  ASSERT_TRUE(Eventually([&] {
    const std::string now = Uid("pod", "inflight-worker-1");
    return !now.empty() && now != uids["inflight-worker-1"];
  })) << op_->output();
  EXPECT_EQ(Uid("pod", "inflight-chief-0"), uids["inflight-chief-0"]);
  EXPECT_EQ(Uid("pod", "inflight-worker-0"), uids["inflight-worker-0"]);
  EXPECT_EQ(Pods("inflight").size(), 3u);
  EXPECT_EQ(Services("inflight").size(), 3u);
  const json recreated = Get("pod", "inflight-worker-1");
  EXPECT_EQ(Env(recreated, "TF_CONFIG"), cluster + R"("task":{"type":"worker","index":1},"environment":"cloud"})");
  EXPECT_EQ(Env(recreated, "TFJOB_AUTH_TOKEN"), "");
  for (const auto& e : recreated["spec"]["containers"][0]["env"]) EXPECT_NE(e["name"], "TFJOB_AUTH_TOKEN");
  EXPECT_FALSE(TryGet("secret", "inflight-tfjob-auth").has_value());
  SetPhase("inflight-worker-1", "Running");
  SetPhase("inflight-chief-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return HasCondition("inflight", "Succeeded"); })) << op_->output();
}

// Step 2 of docs/kubeflow-compatibility.md's move, its commands as written
// there: training-operator's webhook configuration, with TFJob disabled,
// refuses every TFJob (nothing serves its path); removing just the tfjob
// entry lets TFJobs in and leaves the other kinds' entries.
TEST_F(EnvtestLifecycle, TheMoveFromTrainingOperatorRemovesOnlyItsTfJobWebhook) {
  auto entry = [](const std::string& kind) {
    return json{
        {"admissionReviewVersions", {"v1"}},
        {"clientConfig",
         {{"service",
           {{"name", "training-operator"}, {"namespace", "kubeflow"}, {"path", "/validate-kubeflow-org-v1-" + kind}}}}},
        {"failurePolicy", "Fail"},
        {"name", "validator." + kind + ".training-operator.kubeflow.org"},
        {"rules", json::array({{{"apiGroups", {"kubeflow.org"}},
                                {"apiVersions", {"v1"}},
                                {"operations", {"CREATE", "UPDATE"}},
                                {"resources", {kind + "s"}}}})},
        {"sideEffects", "None"}};
  };
  const json config = {{"apiVersion", "admissionregistration.k8s.io/v1"},
                       {"kind", "ValidatingWebhookConfiguration"},
                       {"metadata", {{"name", "validator.training-operator.kubeflow.org"}}},
                       {"webhooks", json::array({entry("pytorchjob"), entry("tfjob"), entry("xgboostjob")})}};
  struct Guard {
    t::ControlPlane* cp;
    ~Guard() {
      cp->Kubectl({"delete", "validatingwebhookconfiguration", "validator.training-operator.kubeflow.org",
                   "--ignore-not-found"});
    }
  } guard{cp_};
  ASSERT_EQ(cp_->Apply(config.dump()).exit_code, 0);
  const std::string job = JobYaml("moved", Replica("Worker", 1));
  ASSERT_TRUE(Eventually([&] {
    const auto r = Apply(job, /*may_fail=*/true);
    return r.exit_code != 0 && r.err.find("validator.tfjob.training-operator.kubeflow.org") != std::string::npos;
  })) << "the webhook entry did not refuse TFJobs";

  const std::string kubectl = t::ToolPath("kubectl");
  ASSERT_FALSE(kubectl.empty()) << "no official kubectl in .tools/bin: run scripts/setup.sh";
  const std::string script =
      "set -euo pipefail\n"
      "i=$(kubectl get validatingwebhookconfiguration validator.training-operator.kubeflow.org \\\n"
      "      -o jsonpath='{range .webhooks[*]}{.name}{\"\\n\"}{end}' |\n"
      "    grep -n '^validator.tfjob.training-operator.kubeflow.org$' | cut -d: -f1)\n"
      "kubectl patch validatingwebhookconfiguration validator.training-operator.kubeflow.org \\\n"
      "  --type=json -p \"[{\\\"op\\\":\\\"remove\\\",\\\"path\\\":\\\"/webhooks/$((i-1))\\\"}]\"\n";
  const std::string path = dir_ + "/step2.sh";
  std::ofstream(path) << script;
  const auto r = t::Run({"/bin/bash", path}, {{"KUBECONFIG", cp_->admin_kubeconfig()},
                                              {"PATH", kubectl.substr(0, kubectl.rfind('/')) + ":/usr/bin:/bin"}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_TRUE(Eventually([&] { return Apply(job, /*may_fail=*/true).exit_code == 0; }))
      << "TFJobs still refused after step 2";
  const json left = json::parse(
      Kubectl({"get", "validatingwebhookconfiguration", "validator.training-operator.kubeflow.org", "-o", "json"}).out);
  std::vector<std::string> names;
  for (const auto& w : left["webhooks"]) names.push_back(w["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"validator.pytorchjob.training-operator.kubeflow.org",
                                             "validator.xgboostjob.training-operator.kubeflow.org"}));
}

// Kubeflow's edge rules on a real server: a job whose only workers number
// zero (and has no chief) succeeds; after success, what was active counts
// as succeeded; enableDynamicWorker lets a worker fail without failing the
// job.
TEST_F(EnvtestLifecycle, KubeflowsSuccessRulesForNoWorkersActiveAndDynamicWorkers) {
  StartOperator();
  Apply(JobYaml("noworkers", Replica("PS", 1) + Replica("Worker", 0)));
  ASSERT_TRUE(Eventually([&] { return HasCondition("noworkers", "Succeeded"); })) << op_->output();

  Apply(JobYaml("folded", Replica("Chief", 1) + Replica("PS", 2)));
  ASSERT_TRUE(Eventually([&] { return Pods("folded").size() == 3; })) << op_->output();
  AllRunning("folded");
  SetPhase("folded-chief-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] {
    const json s = Get("tfjob", "folded").value("status", json::object());
    return HasCondition("folded", "Succeeded") && s.contains("replicaStatuses") &&
           s["replicaStatuses"]["PS"].value("succeeded", 0) == 2 && s["replicaStatuses"]["PS"].value("active", 0) == 0;
  })) << Get("tfjob", "folded").dump();

  Apply(JobYaml("dynamic", Replica("PS", 1) + Replica("Worker", 2), "  enableDynamicWorker: true\n"));
  ASSERT_TRUE(Eventually([&] { return Pods("dynamic").size() == 3; })) << op_->output();
  AllRunning("dynamic");
  SetPhase("dynamic-worker-1", "Failed", 1);
  ASSERT_TRUE(Eventually([&] {
    const json s = Get("tfjob", "dynamic").value("status", json::object());
    return s.contains("replicaStatuses") && s["replicaStatuses"]["Worker"].value("failed", 0) == 1;
  })) << op_->output();
  EXPECT_FALSE(HasCondition("dynamic", "Failed"));
  SetPhase("dynamic-ps-0", "Failed", 1);
  ASSERT_TRUE(Eventually([&] { return HasCondition("dynamic", "Failed"); })) << op_->output();
}

}  // namespace
}  // namespace tfjob::op::envtest

// The operator under Kueue's built-in TFJob integration (Kueue v0.19.2,
// kubernetes-sigs/kueue at tag v0.19.2, framework "kubeflow.org/tfjob"), on
// a real API server with Kueue's own CRDs (../shared/kueue/crds). Kueue's
// controller cannot be built here, so the test plays it, step for step as
// its source does (kueue_player.h: the webhook's suspended job, the
// Workload, admission, start, eviction), and checks what Kueue reads back
// from the job: KubeflowJob's IsActive, PodsReady, Finished, PriorityClass
// and PodLabelSelector (pkg/controller/jobs/kubeflow/kubeflowjob/
// kubeflowjob_controller.go, pkg/controller/jobs/kubeflow/jobs/tfjob/
// tfjob_controller.go). The kubelet's part is played by writing pod status.
// The planner's side of the same rules: operator/controller/tests/
// planner_kueue_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "operator/tests/kueue_player.h"

namespace tfjob::op::envtest {
namespace {

class EnvtestKueue : public KueuePlayer {
 protected:
  void SetUp() override {
    KueuePlayer::SetUp();
    if (!HasFailure()) StartOperator();
  }
  // The pods that are not being deleted.
  std::vector<json> LivePods(const std::string& job) {
    std::vector<json> out;
    for (auto& p : Pods(job)) {
      if (!p["metadata"].contains("deletionTimestamp")) out.push_back(p);
    }
    return out;
  }
  void Hold(const std::string& pod) {
    Kubectl(
        {"patch", "-n", ns_, "pod", pod, "--type=merge", "-p", R"({"metadata":{"finalizers":["tfjob.test/held"]}})"});
  }
  void Release(const std::string& pod) {
    Kubectl({"patch", "-n", ns_, "pod", pod, "--type=merge", "-p", R"({"metadata":{"finalizers":null}})"});
  }
  // replicaStatuses[type].active, 0 when not written yet.
  int Active(const std::string& job, const std::string& type) {
    json j = Get("tfjob", job, /*may_fail=*/true);
    const json& rs = j["status"]["replicaStatuses"][type];
    return rs.is_object() ? rs.value("active", 0) : 0;
  }
  bool HasToleration(const json& pod, const json& toleration) {
    for (const auto& t : pod["spec"].value("tolerations", json::array())) {
      if (t == toleration) return true;
    }
    return false;
  }
  const json kTolerationA = {{"key", "pool"}, {"operator", "Equal"}, {"value", "a"}, {"effect", "NoSchedule"}};
  const json kTolerationB = {{"key", "pool"}, {"operator", "Equal"}, {"value", "b"}, {"effect", "NoSchedule"}};
};

// Kueue's webhook creates the job suspended (jobframework/defaults.go,
// ApplyDefaultForSuspend): no pods, no services. Admitted, the job reconciler
// writes suspend=false and the templates merged with the flavor's node
// labels and tolerations, the kueue.x-k8s.io/podset label and an admission
// check's annotations in one update (reconciler.go, startJob;
// kubeflowjob_controller.go, RunWithPodSetsInfo; podset.go, Merge): the pods
// are made from the templates as rewritten, the template's own fields kept.
// They carry the labels of tfjob_controller.go's PodLabelSelector and a
// replica-index that topology-aware scheduling can rank by
// (topology_ungater.go, readRanksForLabels; pod.go,
// ReadUIntFromLabelBelowBound: an unsigned integer below the pod set's count).
TEST_F(EnvtestKueue, AdmissionStartsPodsFromTheTemplatesAsKueueRewroteThem) {
  CreateFlavor(ns_ + "-a", {{"cloud.example/pool", "a"}}, json::array({kTolerationA}));
  const json own_meta{{"labels", {{"team", "ml"}}}};
  const json own_spec{{"nodeSelector", {{"kubernetes.io/arch", "amd64"}}}};
  SubmitJob("train", {{"Chief", KueueReplica(1, own_spec, own_meta)}, {"Worker", KueueReplica(2, own_spec, own_meta)}});
  ASSERT_TRUE(Eventually([&] { return HasCondition("train", "Suspended"); })) << op_->output();
  EXPECT_TRUE(Pods("train").empty());
  EXPECT_TRUE(Services("train").empty());
  EXPECT_FALSE(IsActive(Get("tfjob", "train")));

  const std::string wl = CreateWorkload("train");
  Admit(wl, ns_ + "-a");
  StartJob("train", wl);
  ASSERT_TRUE(Eventually([&] { return Pods("train").size() == 3 && Services("train").size() == 3; })) << op_->output();

  const json workload = Get("workloads.kueue.x-k8s.io", wl);
  std::map<std::string, int> counts;  // the Workload's pod sets
  for (const auto& ps : workload["spec"]["podSets"]) counts[ps["name"]] = ps["count"];
  EXPECT_EQ(counts, (std::map<std::string, int>{{"chief", 1}, {"worker", 2}}));
  std::map<std::string, std::set<int>> ranks;
  for (json pod : Pods("train")) {
    SCOPED_TRACE(pod["metadata"]["name"].get<std::string>());
    EXPECT_EQ(pod["spec"]["nodeSelector"], json({{"kubernetes.io/arch", "amd64"}, {"cloud.example/pool", "a"}}));
    EXPECT_TRUE(HasToleration(pod, kTolerationA)) << pod["spec"]["tolerations"];
    const json& labels = pod["metadata"]["labels"];
    EXPECT_EQ(labels.value("team", ""), "ml");
    const std::string pod_set = labels.value(kPodSetLabel, "");
    EXPECT_EQ(pod_set, labels.value("training.kubeflow.org/replica-type", "-"));
    EXPECT_EQ(pod["metadata"]["annotations"][kConsumesAnnotation], wl + "-" + ns_ + "-a");
    const std::string index = labels.value("training.kubeflow.org/replica-index", "");
    ASSERT_FALSE(index.empty());
    ASSERT_EQ(index.find_first_not_of("0123456789"), std::string::npos) << index;
    EXPECT_LT(std::stoi(index), counts[pod_set]);
    ranks[pod_set].insert(std::stoi(index));
  }
  EXPECT_EQ(ranks, (std::map<std::string, std::set<int>>{{"chief", {0}}, {"worker", {0, 1}}}));
  EXPECT_EQ(List("pods", PodLabelSelector("train")).size(), 3u);

  AllRunning("train");
  ASSERT_TRUE(Eventually([&] { return PodsReady(Get("tfjob", "train")); })) << op_->output();
  EXPECT_TRUE(IsActive(Get("tfjob", "train")));
  EXPECT_FALSE(Finished(Get("tfjob", "train")).finished);
}

// Preemption: Kueue evicts the Workload, and stopJob suspends the job and
// restores its templates from the Workload's pod sets in one update
// (reconciler.go, stopJob; kubeflowjob_controller.go, RestorePodSetsInfo;
// podset.go, RestorePodSpec); it clears the admission only once IsActive
// reads false (reconciler.go, ReconcileGenericJob, "handle eviction"). The
// pods go (one held in its grace period by a finalizer, as a kubelet holds
// a stopping pod), every active count reads 0 at once, none is made while
// suspended, and the next admission, to another flavor, gets pods from the
// restored templates rewritten for that flavor: the held pod's index only
// once the old pod is gone.
TEST_F(EnvtestKueue, PreemptionDeletesThePodsAndTheNextAdmissionUsesTheRestoredTemplates) {
  CreateFlavor(ns_ + "-a", {{"cloud.example/pool", "a"}}, json::array({kTolerationA}));
  CreateFlavor(ns_ + "-b", {{"cloud.example/pool", "b"}}, json::array({kTolerationB}));
  const json own_meta{{"annotations", {{"team.example/owner", "ml"}}}};
  SubmitJob("preempted", {{"Worker", KueueReplica(2, json::object(), own_meta)}});
  ASSERT_TRUE(Eventually([&] { return HasCondition("preempted", "Suspended"); })) << op_->output();
  const json submitted = Get("tfjob", "preempted")["spec"]["tfReplicaSpecs"]["Worker"]["template"];
  const std::string wl = CreateWorkload("preempted");
  Admit(wl, ns_ + "-a");
  StartJob("preempted", wl);
  ASSERT_TRUE(Eventually([&] { return Pods("preempted").size() == 2; })) << op_->output();
  AllRunning("preempted");
  ASSERT_TRUE(Eventually([&] { return PodsReady(Get("tfjob", "preempted")) && Active("preempted", "Worker") == 2; }))
      << op_->output();
  const std::string held_uid = Get("pod", "preempted-worker-0")["metadata"]["uid"];
  Hold("preempted-worker-0");

  Evict(wl);
  StopJob("preempted", wl);
  const json restored = Get("tfjob", "preempted")["spec"]["tfReplicaSpecs"]["Worker"]["template"];
  for (const char* field : {"labels", "annotations"}) {
    EXPECT_EQ(restored["metadata"].value(field, json()), submitted["metadata"].value(field, json())) << field;
  }
  for (const char* field : {"nodeSelector", "tolerations"}) {
    EXPECT_EQ(restored["spec"].value(field, json()), submitted["spec"].value(field, json())) << field;
  }
  ASSERT_TRUE(Eventually([&] {
    const json job = Get("tfjob", "preempted");
    return !IsActive(job) && !PodsReady(job) && HasCondition("preempted", "Suspended");
  })) << op_->output();
  ASSERT_TRUE(Eventually([&] {
    return LivePods("preempted").empty() && Services("preempted").empty() &&
           !TryGet("pod", "preempted-worker-1").has_value();
  })) << op_->output();
  EXPECT_EQ(Get("pod", "preempted-worker-0")["metadata"]["uid"], held_uid);  // still in its grace period

  ClearAdmission(wl);
  Admit(wl, ns_ + "-b");
  StartJob("preempted", wl);
  ASSERT_TRUE(Eventually([&] { return TryGet("pod", "preempted-worker-1").has_value(); })) << op_->output();
  EXPECT_EQ(Get("pod", "preempted-worker-0")["metadata"]["uid"], held_uid);  // no second pod for index 0
  Release("preempted-worker-0");
  ASSERT_TRUE(Eventually([&] {
    auto p = TryGet("pod", "preempted-worker-0");
    return p && (*p)["metadata"]["uid"] != held_uid;
  })) << op_->output();
  ASSERT_EQ(Pods("preempted").size(), 2u);
  for (json pod : Pods("preempted")) {
    SCOPED_TRACE(pod["metadata"]["name"].get<std::string>());
    EXPECT_EQ(pod["spec"]["nodeSelector"], json({{"cloud.example/pool", "b"}}));
    EXPECT_TRUE(HasToleration(pod, kTolerationB));
    EXPECT_FALSE(HasToleration(pod, kTolerationA));
    EXPECT_EQ(pod["metadata"]["annotations"]["team.example/owner"], "ml");
    EXPECT_EQ(pod["metadata"]["annotations"][kConsumesAnnotation], wl + "-" + ns_ + "-b");
  }
  EXPECT_FALSE(HasCondition("preempted", "Suspended"));
  AllRunning("preempted");
  ASSERT_TRUE(Eventually([&] { return PodsReady(Get("tfjob", "preempted")); })) << op_->output();
}

// PodsReady reads Running=True (kubeflowjob_controller.go, PodsReady), which
// follows the chief as in training-operator v1.9.0; Finished reads Succeeded
// or Failed True and takes its message (Finished), which reconciler.go's
// ReconcileGenericJob writes onto the Workload as it finishes it.
TEST_F(EnvtestKueue, RunningSucceededAndFailedAreWhatKueueReads) {
  CreateFlavor(ns_ + "-a", {{"cloud.example/pool", "a"}}, json::array());
  SubmitJob("done", {{"Chief", KueueReplica(1)}, {"Worker", KueueReplica(1)}});
  SubmitJob("broken", {{"Worker", KueueReplica(2)}});
  for (const std::string job : {"done", "broken"}) {
    ASSERT_TRUE(Eventually([&] { return HasCondition(job, "Suspended"); })) << op_->output();
    const std::string wl = CreateWorkload(job);
    Admit(wl, ns_ + "-a");
    StartJob(job, wl);
  }
  ASSERT_TRUE(Eventually([&] { return Pods("done").size() == 2 && Pods("broken").size() == 2; })) << op_->output();

  // A running worker beside a pending chief: active, not ready.
  SetPhase("done-worker-0", "Running");
  ASSERT_TRUE(Eventually([&] { return Active("done", "Worker") == 1; })) << op_->output();
  EXPECT_TRUE(IsActive(Get("tfjob", "done")));
  EXPECT_FALSE(PodsReady(Get("tfjob", "done")));
  SetPhase("done-chief-0", "Running");
  ASSERT_TRUE(Eventually([&] { return PodsReady(Get("tfjob", "done")); })) << op_->output();
  SetPhase("done-chief-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return Finished(Get("tfjob", "done")).finished; })) << op_->output();
  const Finish done = Finished(Get("tfjob", "done"));
  EXPECT_TRUE(done.success);
  EXPECT_EQ(done.message, "TFJob " + ns_ + "/done successfully completed.");
  EXPECT_FALSE(PodsReady(Get("tfjob", "done")));

  AllRunning("broken");
  ASSERT_TRUE(Eventually([&] { return PodsReady(Get("tfjob", "broken")); })) << op_->output();
  SetPhase("broken-worker-1", "Failed", 1);
  ASSERT_TRUE(Eventually([&] { return Finished(Get("tfjob", "broken")).finished; })) << op_->output();
  const Finish broken = Finished(Get("tfjob", "broken"));
  EXPECT_FALSE(broken.success);
  EXPECT_EQ(broken.message, "TFJob " + ns_ + "/broken has failed because 1 Worker replica(s) failed.");
}

// Kueue takes the Workload's priority from runPolicy.schedulingPolicy
// .priorityClass, else the templates' priorityClassName
// (kubeflowjob_controller.go, PriorityClass; reconciler.go, ExtractPriority
// looks the PriorityClass up). The policy stays on the stored job for Kueue
// to read, draws no SchedulingPolicyIgnored warning, and the pods keep their
// template's priorityClassName (the API server resolves its value): as in
// training-operator v1.9.0, whose createNewPod copies the template and
// gives the policy's class only to a Volcano PodGroup.
TEST_F(EnvtestKueue, PriorityClassIsLeftWhereKueueReadsIt) {
  const std::string high = ns_ + "-high", low = ns_ + "-low";
  Apply(json{{"apiVersion", "scheduling.k8s.io/v1"},
             {"kind", "PriorityClass"},
             {"metadata", {{"name", high}}},
             {"value", 1000}}
            .dump());
  Apply(json{
      {"apiVersion", "scheduling.k8s.io/v1"}, {"kind", "PriorityClass"}, {"metadata", {{"name", low}}}, {"value", 10}}
            .dump());
  CreateFlavor(ns_ + "-a", {{"cloud.example/pool", "a"}}, json::array());
  SubmitJob("ranked", {{"Worker", KueueReplica(2, {{"priorityClassName", low}})}},
            {{"schedulingPolicy", {{"priorityClass", high}}}});
  ASSERT_TRUE(Eventually([&] { return HasCondition("ranked", "Suspended"); })) << op_->output();
  const json job = Get("tfjob", "ranked");
  EXPECT_EQ(KueuePriorityClass(job), high);  // read after the operator's status write
  const std::string wl = CreateWorkload("ranked");
  EXPECT_EQ(Get("workloads.kueue.x-k8s.io", wl)["spec"].value("priority", 0), 1000);
  Admit(wl, ns_ + "-a");
  StartJob("ranked", wl);
  ASSERT_TRUE(Eventually([&] { return Pods("ranked").size() == 2; })) << op_->output();
  for (json pod : Pods("ranked")) {
    EXPECT_EQ(pod["spec"].value("priorityClassName", ""), low);
    EXPECT_EQ(pod["spec"].value("priority", 0), 10);
  }
  // The event sink writes in order, and the warning would come from the
  // first pass, long before the pods.
  ASSERT_TRUE(Eventually([&] {
    for (const auto& e : Events("ranked")) {
      if (e.value("reason", "") == "SuccessfulCreatePod") return true;
    }
    return false;
  }));
  for (const auto& e : Events("ranked")) EXPECT_NE(e.value("reason", ""), "SchedulingPolicyIgnored");
}

// MultiKueue: the manager cluster's job has managedBy
// kueue.x-k8s.io/multikueue and is left to Kueue, which copies the worker
// cluster's status onto it (kubeflowjob_multikueue_adapter.go, SyncJob;
// tfjob_multikueue_adapter.go, copyJobStatus). The worker's copy, made
// without managedBy and with the MultiKueue labels (SyncJob,
// SetMultiKueueMeta), is this operator's to run. One API server plays both
// clusters here, so the copies have different names.
TEST_F(EnvtestKueue, MultiKueueLeavesTheManagersCopyToKueue) {
  const json replicas{{"Chief", KueueReplica(1)}, {"Worker", KueueReplica(1)}};
  SubmitJob("manager", replicas, {{"managedBy", "kueue.x-k8s.io/multikueue"}, {"suspend", false}});
  SubmitJob("remote", replicas, {{"suspend", false}},
            {{kPrebuiltWorkloadLabel, "tfjob-manager"}, {kMultiKueueOriginLabel, "manager-cluster"}});
  ASSERT_TRUE(Eventually([&] { return Pods("remote").size() == 2; })) << op_->output();
  AllRunning("remote");
  ASSERT_TRUE(Eventually([&] { return PodsReady(Get("tfjob", "remote")); })) << op_->output();
  const json copied = Get("tfjob", "remote")["status"];
  Kubectl({"patch", "-n", ns_, "tfjob", "manager", "--subresource=status", "--type=merge", "-p",
           json{{"status", copied}}.dump()});
  // A job submitted after the copy: once it has pods, the operator has seen
  // the manager's copy since the status was written.
  Apply(JobYaml("later", Replica("Worker", 1)));
  ASSERT_TRUE(Eventually([&] { return Pods("later").size() == 1; })) << op_->output();
  EXPECT_TRUE(Pods("manager").empty());
  EXPECT_TRUE(Services("manager").empty());
  EXPECT_EQ(Get("tfjob", "manager")["status"], copied);
  EXPECT_TRUE(PodsReady(Get("tfjob", "manager")));
}

}  // namespace
}  // namespace tfjob::op::envtest

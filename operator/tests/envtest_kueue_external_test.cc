// The operator as Kueue's external integration for TFJob (--kueue=external,
// docs/kueue.md), on a real API server with Kueue v0.19.2's CRDs: the
// operator makes and keeps the Workload (kueue.x-k8s.io/v1beta1) as Kueue's
// job framework would (pkg/controller/jobframework/reconciler.go), and the
// test plays Kueue's scheduler only, writing the Workload's status as it
// does (kueue_player.h: admission, eviction). The kubelet's part is played
// by writing pod status. The planner's side: operator/controller/tests/
// planner_kueue_external_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "operator/tests/kueue_player.h"
#include "tests/support/subprocess.h"

namespace tfjob::op::envtest::kueue_external_test {
namespace {

// The version the operator writes and reads (the CRD's v1beta2 is its
// storage; without a conversion webhook the fields read the same).
constexpr const char* kWorkloadsV1beta1 = "workloads.v1beta1.kueue.x-k8s.io";

class EnvtestKueueExternal : public KueuePlayer {
 protected:
  void SetUp() override {
    KueuePlayer::SetUp();
    if (!HasFailure()) StartOperator({"--kueue=external"});
  }
  // The job's Workloads, found as the operator finds them (job-name label).
  std::vector<json> Workloads(const std::string& job) {
    return List(kWorkloadsV1beta1, "training.kubeflow.org/job-name=" + job);
  }
  json Workload(const std::string& job) {
    auto all = Workloads(job);
    return all.size() == 1 ? all[0] : json();
  }
  static json WlCondition(const json& wl, const std::string& type) {
    if (!wl.is_object() || !wl.contains("status")) return json();
    for (const auto& c : wl["status"].value("conditions", json::array())) {
      if (c.value("type", "") == type) return c;
    }
    return json();
  }
  static bool WlTrue(const json& wl, const std::string& type) {
    const json c = WlCondition(wl, type);
    return c.is_object() && c.value("status", "") == "True";
  }
  bool Suspended(const std::string& job) {
    auto j = TryGet("tfjob", job);
    if (!j) return false;
    const json& policy = (*j)["spec"]["runPolicy"];
    return policy.is_object() && policy.value("suspend", false);
  }
  std::vector<json> LivePods(const std::string& job) {
    std::vector<json> out;
    for (auto& p : Pods(job)) {
      if (!p["metadata"].contains("deletionTimestamp")) out.push_back(p);
    }
    return out;
  }
  bool HasEvent(const std::string& object, const std::string& reason) {
    for (const auto& e : Events(object)) {
      if (e.value("reason", "") == reason) return true;
    }
    return false;
  }
  void ExpectPlaced(const std::string& job, const std::string& wl) {
    for (json pod : Pods(job)) {
      SCOPED_TRACE(pod["metadata"]["name"].get<std::string>());
      EXPECT_EQ(pod["spec"]["nodeSelector"], json({{"cloud.example/pool", "a"}}));
      // (The API server's DefaultTolerationSeconds adds its own.)
      const json tolerations = pod["spec"].value("tolerations", json::array());
      EXPECT_NE(std::find(tolerations.begin(), tolerations.end(), kToleration), tolerations.end()) << tolerations;
      const json& labels = pod["metadata"]["labels"];
      EXPECT_EQ(labels.value(kPodSetLabel, ""), labels.value("training.kubeflow.org/replica-type", "-"));
      EXPECT_EQ(pod["metadata"]["annotations"][kConsumesAnnotation], wl + "-" + ns_ + "-a");
    }
  }
  static json Requests(int n) {
    json replica = KueueReplica(n);
    replica["template"]["spec"]["containers"][0]["resources"] = {{"requests", {{"cpu", "500m"}}}};
    return replica;
  }
  const json kToleration = {{"key", "pool"}, {"operator", "Equal"}, {"value", "a"}, {"effect", "NoSchedule"}};
};

// A run: the job is suspended on first sight and gets no pod while queued;
// its Workload has Kueue's pod sets, owner, queue and priority; admission
// resumes it with the flavor's placement; Running is PodsReady; eviction
// stops the pods and suspends the job, and the operator clears the
// admission as Kueue's reconciler does; re-admission brings pods back; the
// end of the job finishes the Workload; deleting the job deletes it.
TEST_F(EnvtestKueueExternal, AWorkloadFollowsTheJobThroughARun) {
  const std::string priority_class = ns_ + "-high";
  Kubectl({"create", "priorityclass", priority_class, "--value=1000"});
  CreateFlavor(ns_ + "-a", {{"cloud.example/pool", "a"}}, json::array({kToleration}));
  SubmitJob("train", {{"Chief", Requests(1)}, {"Worker", Requests(2)}},
            {{"suspend", false}, {"schedulingPolicy", {{"priorityClass", priority_class}}}});

  ASSERT_TRUE(Eventually([&] { return Suspended("train") && Workload("train").is_object(); })) << op_->output();
  ASSERT_TRUE(Eventually([&] { return HasCondition("train", "Suspended"); })) << op_->output();
  const json job = Get("tfjob", "train");
  json wl = Workload("train");
  const std::string name = wl["metadata"]["name"];
  EXPECT_EQ(name.rfind("tfjob-train-", 0), 0u) << name;
  EXPECT_EQ(name.size(), std::string("tfjob-train-").size() + 5);
  EXPECT_EQ(wl["metadata"]["ownerReferences"], json::array({{{"apiVersion", "kubeflow.org/v1"},
                                                             {"kind", "TFJob"},
                                                             {"name", "train"},
                                                             {"uid", job["metadata"]["uid"]},
                                                             {"controller", true},
                                                             {"blockOwnerDeletion", true}}}));
  EXPECT_EQ(wl["metadata"]["labels"][kJobUidLabel], job["metadata"]["uid"]);
  EXPECT_EQ(wl["spec"]["queueName"], "user-queue");
  // The class's name is written too (priorityClassName), but v1beta1's
  // field has no place in the v1beta2 storage without Kueue's conversion
  // webhook, which this control plane lacks: its value is what is kept.
  EXPECT_EQ(wl["spec"]["priority"], 1000);
  ASSERT_EQ(wl["spec"]["podSets"].size(), 2u);
  EXPECT_EQ(wl["spec"]["podSets"][0]["name"], "chief");
  EXPECT_EQ(wl["spec"]["podSets"][0]["count"], 1);
  EXPECT_EQ(wl["spec"]["podSets"][1]["name"], "worker");
  EXPECT_EQ(wl["spec"]["podSets"][1]["count"], 2);
  EXPECT_EQ(wl["spec"]["podSets"][1]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"], "500m");
  // Events are written after the object they tell of (and by the operator's
  // event sink, off the reconcile thread): wait for them, as for the rest.
  EXPECT_TRUE(Eventually([&] { return HasEvent("train", "CreatedWorkload"); })) << op_->output();
  EXPECT_TRUE(Pods("train").empty());
  EXPECT_TRUE(Services("train").empty());
  EXPECT_FALSE(HasEvent("train", "SuccessfulCreatePod"));

  Admit(name, ns_ + "-a");
  ASSERT_TRUE(Eventually([&] { return !Suspended("train") && Pods("train").size() == 3; })) << op_->output();
  ExpectPlaced("train", name);
  EXPECT_TRUE(Eventually([&] { return HasEvent("train", "Started"); })) << op_->output();
  for (const auto& p : Pods("train")) SetPhase(p["metadata"]["name"], "Running");
  ASSERT_TRUE(Eventually([&] { return WlTrue(Workload("train"), "PodsReady"); })) << op_->output();
  EXPECT_EQ(WlCondition(Workload("train"), "PodsReady")["reason"], "Started");

  Evict(name);
  ASSERT_TRUE(Eventually([&] {
    const json w = Workload("train");
    return Suspended("train") && LivePods("train").empty() && w.is_object() && !w["status"].contains("admission") &&
           WlTrue(w, "Requeued") && !WlTrue(w, "QuotaReserved");
  })) << op_->output();
  wl = Workload("train");
  EXPECT_EQ(WlCondition(wl, "QuotaReserved")["reason"], "Pending");
  EXPECT_EQ(WlCondition(wl, "Requeued")["reason"], "Preempted");
  EXPECT_EQ(WlCondition(wl, "Admitted")["status"], "False");
  EXPECT_TRUE(Eventually([&] { return HasEvent("train", "Stopped"); })) << op_->output();

  Admit(name, ns_ + "-a");
  ASSERT_TRUE(Eventually([&] { return !Suspended("train") && LivePods("train").size() == 3; })) << op_->output();
  ExpectPlaced("train", name);
  SetPhase("train-chief-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return WlTrue(Workload("train"), "Finished"); })) << op_->output();
  EXPECT_EQ(WlCondition(Workload("train"), "Finished")["reason"], "Succeeded");
  EXPECT_EQ(WlCondition(Workload("train"), "Finished")["message"], "TFJob " + ns_ + "/train successfully completed.");

  EXPECT_FALSE(HasEvent("train", "DeletedWorkload"));  // one Workload all along: the pod sets matched
  Kubectl({"delete", "-n", ns_, "tfjob", "train"});
  EXPECT_TRUE(Eventually([&] { return Workloads("train").empty(); }, kGarbageCollectorTimeout)) << op_->output();
}

// A change of the pod sets while queued re-creates the Workload (Kueue's
// ensureOneWorkload); a PriorityClass that does not exist is an event and a
// retry, not a Workload without its priority.
TEST_F(EnvtestKueueExternal, PodSetChangeWhileQueuedRecreatesTheWorkload) {
  const std::string priority_class = ns_ + "-later";
  SubmitJob("queued", {{"Worker", Requests(2)}},
            {{"suspend", false}, {"schedulingPolicy", {{"priorityClass", priority_class}}}});
  ASSERT_TRUE(Eventually([&] { return HasEvent("queued", "ErrWorkloadCompose"); })) << op_->output();
  EXPECT_TRUE(Workloads("queued").empty());
  Kubectl({"create", "priorityclass", priority_class, "--value=7"});
  ASSERT_TRUE(Eventually([&] { return Workload("queued").is_object(); })) << op_->output();
  const json before = Workload("queued");
  EXPECT_EQ(before["spec"]["priority"], 7);

  UpdateJob("queued", [](json& job) { job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 3; });
  ASSERT_TRUE(Eventually([&] {
    const json w = Workload("queued");
    return w.is_object() && w["metadata"]["uid"] != before["metadata"]["uid"];
  })) << op_->output();
  const json after = Workload("queued");
  EXPECT_EQ(after["metadata"]["name"], before["metadata"]["name"]);
  EXPECT_EQ(after["spec"]["podSets"][0]["count"], 3);
  EXPECT_TRUE(Pods("queued").empty());
}

// A job without the queue label runs as before under --kueue=external;
// without --kueue a labelled job is not the operator's to queue. A mode
// other than "external" is a one-line error, exit 2.
TEST_F(EnvtestKueueExternal, UnqueuedJobsAndModeOffRunAsBefore) {
  const auto bad = ::tfjob::testing::Run({::tfjob::testing::BinDir() + "/tfjob-operator", "--kueue=builtin"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_EQ(bad.err, "tfjob-operator: error: flag --kueue: \"builtin\" is not \"external\" or empty\n");

  Apply(json{{"apiVersion", "kubeflow.org/v1"},
             {"kind", "TFJob"},
             {"metadata", {{"name", "plain"}}},
             {"spec", {{"tfReplicaSpecs", {{"Worker", KueueReplica(2)}}}}}}
            .dump());
  ASSERT_TRUE(Eventually([&] { return Pods("plain").size() == 2; })) << op_->output();
  EXPECT_TRUE(Workloads("plain").empty());
  EXPECT_FALSE(Suspended("plain"));

  StopOperator();
  StartOperator();
  SubmitJob("labelled", {{"Worker", KueueReplica(2)}}, {{"suspend", false}});
  ASSERT_TRUE(Eventually([&] { return Pods("labelled").size() == 2; })) << op_->output();
  EXPECT_TRUE(Workloads("labelled").empty());
  EXPECT_FALSE(Suspended("labelled"));
}

}  // namespace
}  // namespace tfjob::op::envtest::kueue_external_test

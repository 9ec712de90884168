// The test Kueue (tests/support/kueue_admitter.h) on a real API server with
// Kueue v0.19.2's CRDs: Workloads written by hand (kueue.x-k8s.io/v1beta1)
// get the admission, conditions and messages Kueue's scheduler, workload
// controller and preemption write; and, with the operator under Kueue's
// built-in TFJob integration (the job reconciler's steps played by
// kueue_player.h), the issue's scenario: two TFJobs in one LocalQueue whose
// ClusterQueue fits one run one after the other. Its rules alone:
// tests/support/tests/kueue_admitter_unit_test.cc.
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kube/config.h"
#include "kube/rest_client.h"
#include "operator/tests/kueue_player.h"
#include "tests/support/kueue_admitter.h"

namespace tfjob::op::envtest::kueue_admitter_test {
namespace {

namespace t = ::tfjob::testing;
using namespace std::chrono_literals;

constexpr const char* kWorkloads = "workloads.v1beta1.kueue.x-k8s.io";

class EnvtestTestKueue : public KueuePlayer {
 protected:
  void SetUp() override {
    KueuePlayer::SetUp();
    if (HasFailure()) return;
    auto config = kube::LoadKubeconfig(cp_->admin_kubeconfig());
    ASSERT_TRUE(config.ok()) << config.status();
    auto client = kube::RestClient::Create(*config);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(client).value();
    kueue_ = std::make_unique<t::TestKueue>(*client_, t::TestKueue::Options{ns_, 100ms, &std::cerr});
  }
  void TearDown() override {
    if (kueue_) kueue_->Stop();
    KueuePlayer::TearDown();
  }

  // ResourceFlavors NS-a and NS-b (cluster-scoped, so named after the
  // namespace), a ClusterQueue NS-cq over cpu with `quota` per flavor, in
  // that order, and the LocalQueue user-queue pointing at it.
  void Queues(const std::vector<std::pair<std::string, std::string>>& quota) {
    json flavors = json::array();
    for (const auto& [flavor, cpu] : quota) {
      Apply(json{{"apiVersion", "kueue.x-k8s.io/v1beta1"},
                 {"kind", "ResourceFlavor"},
                 {"metadata", {{"name", ns_ + "-" + flavor}}}}
                .dump());
      flavors.push_back({{"name", ns_ + "-" + flavor}, {"resources", {{{"name", "cpu"}, {"nominalQuota", cpu}}}}});
    }
    Apply(json{{"apiVersion", "kueue.x-k8s.io/v1beta1"},
               {"kind", "ClusterQueue"},
               {"metadata", {{"name", ns_ + "-cq"}}},
               {"spec",
                {{"namespaceSelector", json::object()},
                 {"resourceGroups", {{{"coveredResources", {"cpu"}}, {"flavors", flavors}}}}}}}
              .dump());
    Apply(json{{"apiVersion", "kueue.x-k8s.io/v1beta1"},
               {"kind", "LocalQueue"},
               {"metadata", {{"name", "user-queue"}, {"namespace", ns_}}},
               {"spec", {{"clusterQueue", ns_ + "-cq"}}}}
              .dump());
  }
  // A Workload as a job integration would make it: one pod set of `count`
  // pods requesting `cpu` each.
  void CreateHandWorkload(const std::string& name, int count, const std::string& cpu,
                          const std::string& queue = "user-queue") {
    const json container{{"name", "c"}, {"image", "busybox"}, {"resources", {{"requests", {{"cpu", cpu}}}}}};
    Apply(json{{"apiVersion", "kueue.x-k8s.io/v1beta1"},
               {"kind", "Workload"},
               {"metadata", {{"name", name}, {"namespace", ns_}}},
               {"spec",
                {{"queueName", queue},
                 {"podSets",
                  {{{"name", "worker"},
                    {"count", count},
                    {"template", {{"spec", {{"containers", {container}}, {"restartPolicy", "Never"}}}}}}}}}}}
              .dump());
  }
  json Wl(const std::string& name) { return Get(kWorkloads, name); }
  json Cond(const std::string& wl, const std::string& type) {
    json c = t::kueue::FindCondition(Get(kWorkloads, wl, /*may_fail=*/true), type);
    if (!c.is_object()) return json::object();  // not written yet
    c.erase("lastTransitionTime");
    c.erase("observedGeneration");
    return c;
  }
  static json Want(const std::string& type, const std::string& status, const std::string& reason,
                   const std::string& message) {
    return {{"type", type}, {"status", status}, {"reason", reason}, {"message", message}};
  }
  bool Reserved(const std::string& wl) {
    return t::kueue::ConditionIs(Get(kWorkloads, wl, /*may_fail=*/true), "QuotaReserved", "True");
  }
  // Lets the loop make `n` more passes: what it has not written by then it
  // does not write.
  void Passes(int n) {
    const int64_t until = kueue_->passes() + n;
    ASSERT_TRUE(Eventually([&] { return kueue_->passes() >= until; }));
  }
  // Kueue's job reconciler finishing a Workload (reconciler.go,
  // ReconcileGenericJob: workloadfinish.Finish with the job's message).
  void Finish(const std::string& wl, const std::string& message) {
    json conditions = Wl(wl)["status"]["conditions"];
    t::kueue::SetCondition(conditions, "Finished", "True", "Succeeded", message, 1, std::chrono::system_clock::now());
    PatchWorkloadStatus(wl, {{"conditions", conditions}});
  }
  t::RunResult EvictCommand(const std::string& wl) {
    return t::Run(
        {t::BinDir() + "/tfjob-test-kueue", "evict", ns_ + "/" + wl, "--kubeconfig", cp_->admin_kubeconfig()});
  }

  std::unique_ptr<kube::RestClient> client_;
  std::unique_ptr<t::TestKueue> kueue_;
};

// Kueue's scheduler (scheduler.go, admit; workload.go, SetQuotaReservation;
// admissionchecks.go, SyncAdmittedCondition) admits what fits the nominal
// quota, writing the admission and QuotaReserved and Admitted; the next
// stays QuotaReserved=False with the flavor assigner's message
// (requeueAndUpdate) until the first is Finished and its quota released.
TEST_F(EnvtestTestKueue, AdmitsWhatFitsAndHoldsTheNextUntilTheFirstFinishes) {
  Queues({{"a", "2"}});
  kueue_->Start();
  CreateHandWorkload("first", 2, "1");
  ASSERT_TRUE(Eventually([&] { return Reserved("first"); }));
  const json first = Wl("first");
  EXPECT_EQ(first["status"]["admission"], json({{"clusterQueue", ns_ + "-cq"},
                                                {"podSetAssignments",
                                                 {{{"name", "worker"},
                                                   {"flavors", {{"cpu", ns_ + "-a"}}},
                                                   {"resourceUsage", {{"cpu", "2"}}},
                                                   {"count", 2}}}}}));
  EXPECT_EQ(Cond("first", "QuotaReserved"),
            Want("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue " + ns_ + "-cq"));
  EXPECT_EQ(Cond("first", "Admitted"), Want("Admitted", "True", "Admitted", "The workload is admitted"));

  CreateHandWorkload("second", 1, "500m");
  const json pending = Want("QuotaReserved", "False", "Pending",
                            "couldn't assign flavors to pod set worker: insufficient unused quota for cpu in flavor " +
                                ns_ + "-a, 500m more needed");
  ASSERT_TRUE(Eventually([&] { return Cond("second", "QuotaReserved") == pending; })) << Wl("second");
  Passes(3);
  EXPECT_FALSE(Reserved("second"));
  EXPECT_FALSE(Wl("second")["status"].contains("admission"));

  Finish("first", "done");
  ASSERT_TRUE(Eventually([&] { return Reserved("second"); }));
  EXPECT_EQ(Wl("second")["status"]["admission"]["podSetAssignments"][0]["resourceUsage"], json({{"cpu", "500m"}}));
  EXPECT_EQ(Cond("first", "QuotaReserved")["status"], "True");  // finished, not unreserved
}

// The first flavor of the resource group that fits takes the workload
// (flavorassigner.go, findFlavorForPodSets).
TEST_F(EnvtestTestKueue, FallsBackToTheSecondFlavor) {
  Queues({{"a", "2"}, {"b", "4"}});
  kueue_->Start();
  CreateHandWorkload("wide", 3, "1");
  ASSERT_TRUE(Eventually([&] { return Reserved("wide"); }));
  EXPECT_EQ(Wl("wide")["status"]["admission"]["podSetAssignments"][0]["flavors"], json({{"cpu", ns_ + "-b"}}));
  CreateHandWorkload("narrow", 2, "1");
  ASSERT_TRUE(Eventually([&] { return Reserved("narrow"); }));
  EXPECT_EQ(Wl("narrow")["status"]["admission"]["podSetAssignments"][0]["flavors"], json({{"cpu", ns_ + "-a"}}));
}

// Eviction (evict.go, Evict, as preemption.go's IssuePreemptions calls it,
// here from a shell with tfjob-test-kueue evict) writes Evicted and
// Preempted and keeps the admission and the quota: nothing else is written
// until the job's side clears the admission (reconciler.go, "handle
// eviction"); then the workload is admitted again and Evicted turns False
// (SetQuotaReservation's resetActiveCondition).
TEST_F(EnvtestTestKueue, EvictionWritesEvictedAndNothingElseUntilTheAdmissionIsCleared) {
  Queues({{"a", "2"}});
  kueue_->Start();
  CreateHandWorkload("victim", 2, "1");
  ASSERT_TRUE(Eventually([&] { return Reserved("victim"); }));
  const json admission = Wl("victim")["status"]["admission"];

  const auto evict = EvictCommand("victim");
  ASSERT_EQ(evict.exit_code, 0) << evict.out << evict.err;
  const std::string message =
      "Preempted to accommodate a workload (UID: UNKNOWN, JobUID: UNKNOWN) due to "
      "prioritization in the ClusterQueue; preemptor path: /" +
      ns_ + "-cq; preemptee path: /" + ns_ + "-cq";
  EXPECT_EQ(Cond("victim", "Evicted"), Want("Evicted", "True", "Preempted", message));
  EXPECT_EQ(Cond("victim", "Preempted"), Want("Preempted", "True", "InClusterQueue", message));
  const std::string version = Wl("victim")["metadata"]["resourceVersion"];
  CreateHandWorkload("waiting", 1, "1");  // the evicted one still holds the quota
  ASSERT_TRUE(Eventually([&] { return Cond("waiting", "QuotaReserved")["reason"] == "Pending"; }));
  Passes(3);
  EXPECT_EQ(Wl("victim")["metadata"]["resourceVersion"], version);
  EXPECT_EQ(Wl("victim")["status"]["admission"], admission);

  ClearAdmission("victim");
  ASSERT_TRUE(Eventually([&] { return Reserved("victim") || Reserved("waiting"); }));
  // Both want the quota; the older one is taken first.
  EXPECT_TRUE(Reserved("victim"));
  EXPECT_EQ(Cond("victim", "Evicted"), Want("Evicted", "False", "QuotaReserved", "Previously: " + message));
  EXPECT_EQ(Cond("victim", "Preempted"), Want("Preempted", "False", "QuotaReserved", "Previously: " + message));
  EXPECT_EQ(Wl("victim")["status"]["admission"], admission);
}

// spec.active=false: the workload controller evicts with reason
// Deactivated (workload_controller.go, Reconcile), keeping the admission
// for the job's side to clear.
TEST_F(EnvtestTestKueue, DeactivationEvictsWithReasonDeactivated) {
  Queues({{"a", "2"}});
  kueue_->Start();
  CreateHandWorkload("idle", 1, "1");
  ASSERT_TRUE(Eventually([&] { return Reserved("idle"); }));
  Kubectl({"patch", "-n", ns_, kWorkloads, "idle", "--type=merge", "-p", R"({"spec":{"active":false}})"});
  ASSERT_TRUE(Eventually([&] { return Cond("idle", "Evicted")["status"] == "True"; }));
  EXPECT_EQ(Cond("idle", "Evicted"), Want("Evicted", "True", "Deactivated", "The workload is deactivated"));
  EXPECT_TRUE(Reserved("idle"));
}

// A workload whose LocalQueue does not exist is Inadmissible
// (workload_controller.go, reconcileOnLocalQueueActiveState) and stays so;
// there is nothing to evict.
TEST_F(EnvtestTestKueue, AWorkloadNamingAMissingLocalQueueStaysPending) {
  Queues({{"a", "2"}});
  kueue_->Start();
  CreateHandWorkload("lost", 1, "1", "nowhere");
  const json inadmissible =
      Want("QuotaReserved", "False", "Inadmissible", "LocalQueue nowhere is terminating or missing");
  ASSERT_TRUE(Eventually([&] { return Cond("lost", "QuotaReserved") == inadmissible; })) << Wl("lost");
  Passes(3);
  EXPECT_FALSE(Reserved("lost"));
  const auto evict = EvictCommand("lost");
  EXPECT_EQ(evict.exit_code, 1);
  EXPECT_NE(evict.err.find("has no quota reserved"), std::string::npos) << evict.err;
}

// A quantity the API server's pattern lets through but Kubernetes cannot
// parse: that workload is skipped, the loop goes on and admits the others.
TEST_F(EnvtestTestKueue, GarbageDoesNotStopTheLoop) {
  Queues({{"a", "2"}});
  CreateHandWorkload("garbage", 1, "1e3.5");
  kueue_->Start();
  Passes(2);
  CreateHandWorkload("fine", 1, "1");
  ASSERT_TRUE(Eventually([&] { return Reserved("fine"); }));
  EXPECT_FALSE(Wl("garbage").contains("status") && Wl("garbage")["status"].contains("conditions"));
}

// The issue's scenario, with the operator under Kueue's built-in TFJob
// integration and the test playing Kueue's job reconciler (kueue_player.h)
// and the kubelet: two TFJobs in one LocalQueue whose ClusterQueue fits one.
// The second has no pods until the first finishes; then it is admitted,
// runs and succeeds. The test Kueue runs as the program e2e.sh starts.
TEST_F(EnvtestTestKueue, TwoJobsInAQueueThatFitsOneRunOneAfterTheOther) {
  Queues({{"a", "2"}});
  StartOperator();
  t::Process admitter({t::BinDir() + "/tfjob-test-kueue", "--kubeconfig", cp_->admin_kubeconfig(), "--namespace", ns_,
                       "--interval-ms", "100"});
  ASSERT_TRUE(admitter.WaitForLine("admitting Workloads")) << admitter.output();
  json worker = KueueReplica(2);
  worker["template"]["spec"]["containers"][0]["resources"] = {{"requests", {{"cpu", "1"}}}};
  std::map<std::string, std::string> workloads;
  for (const std::string job : {"first", "second"}) {
    SubmitJob(job, {{"Worker", worker}});
    ASSERT_TRUE(Eventually([&] { return HasCondition(job, "Suspended"); })) << op_->output();
    workloads[job] = CreateWorkload(job);
    if (job == "first") {
      ASSERT_TRUE(Eventually([&] { return Reserved(workloads[job]); })) << admitter.output();
      StartJob(job, workloads[job]);
    }
  }
  ASSERT_TRUE(Eventually([&] { return Pods("first").size() == 2; })) << op_->output();
  for (const auto& p : Pods("first")) SetPhase(p["metadata"]["name"], "Running");
  ASSERT_TRUE(Eventually([&] { return Cond(workloads["second"], "QuotaReserved")["reason"] == "Pending"; }))
      << admitter.output();
  EXPECT_TRUE(Pods("second").empty());
  EXPECT_TRUE(HasCondition("second", "Suspended"));

  for (const auto& p : Pods("first")) SetPhase(p["metadata"]["name"], "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return Finished(Get("tfjob", "first")).finished; })) << op_->output();
  EXPECT_TRUE(Pods("second").empty());
  Finish(workloads["first"], Finished(Get("tfjob", "first")).message);

  ASSERT_TRUE(Eventually([&] { return Reserved(workloads["second"]); })) << admitter.output();
  StartJob("second", workloads["second"]);
  ASSERT_TRUE(Eventually([&] { return Pods("second").size() == 2; })) << op_->output();
  for (const auto& p : Pods("second")) SetPhase(p["metadata"]["name"], "Running");
  for (const auto& p : Pods("second")) SetPhase(p["metadata"]["name"], "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return Finished(Get("tfjob", "second")).finished; })) << op_->output();
  EXPECT_TRUE(Finished(Get("tfjob", "second")).success);
  EXPECT_EQ(admitter.Stop(), 0) << admitter.output();
}

}  // namespace
}  // namespace tfjob::op::envtest::kueue_admitter_test

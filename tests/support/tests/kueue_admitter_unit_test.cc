// The test Kueue's rules without an API server (tests/support/kueue_admitter_plan.h):
// Kubernetes quantities as Kueue reads and writes them, and the status one
// pass writes on Workloads, against Kueue v0.19.2's texts.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/kueue_admitter_plan.h"

namespace tfjob::testing::kueue_admitter_unit_test {
namespace {

using json = nlohmann::json;
namespace k = ::tfjob::testing::kueue;

const SystemTime kNow = *ParseRfc3339("2026-01-01T10:00:00Z");
const std::string kNowText = "2026-01-01T10:00:00Z";

json Flavor(const std::string& name) { return {{"metadata", {{"name", name}}}}; }

// A ClusterQueue with one resource group covering cpu: `flavors` are
// name -> cpu quota, in order.
json ClusterQueue(const std::string& name, const std::vector<std::pair<std::string, std::string>>& flavors,
                  const std::string& strategy = "BestEffortFIFO") {
  json fl = json::array();
  for (const auto& [f, cpu] : flavors)
    fl.push_back({{"name", f}, {"resources", {{{"name", "cpu"}, {"nominalQuota", cpu}}}}});
  return {{"metadata", {{"name", name}}},
          {"spec",
           {{"queueingStrategy", strategy}, {"resourceGroups", {{{"coveredResources", {"cpu"}}, {"flavors", fl}}}}}}};
}

json LocalQueue(const std::string& name, const std::string& cq) {
  return {{"metadata", {{"namespace", "ns"}, {"name", name}}}, {"spec", {{"clusterQueue", cq}}}};
}

json PodSet(const std::string& name, int count, const json& requests) {
  return {{"name", name},
          {"count", count},
          {"template", {{"spec", {{"containers", {{{"name", "c"}, {"resources", {{"requests", requests}}}}}}}}}}};
}

json Workload(const std::string& name, const std::string& created, json pod_sets, int priority = 0) {
  return {{"metadata", {{"namespace", "ns"}, {"name", name}, {"generation", 1}, {"creationTimestamp", created}}},
          {"spec", {{"queueName", "lq"}, {"priority", priority}, {"podSets", std::move(pod_sets)}}}};
}

k::Observed Cluster(std::vector<json> workloads, json cq = ClusterQueue("cq", {{"a", "2"}, {"b", "4"}})) {
  return {{Flavor("a"), Flavor("b")}, {std::move(cq)}, {LocalQueue("lq", "cq")}, std::move(workloads)};
}

// The status each write gives, by workload name.
std::map<std::string, json> Written(const k::Plan& plan) {
  std::map<std::string, json> out;
  for (const auto& w : plan.writes) out[w.workload["metadata"]["name"]] = w.workload["status"];
  return out;
}

json Cond(const std::string& type, const std::string& status, const std::string& reason, const std::string& message) {
  return {{"type", type},       {"status", status},        {"reason", reason},
          {"message", message}, {"observedGeneration", 1}, {"lastTransitionTime", kNowText}};
}

TEST(KueueQuantity, ParsesAsKueueComparesThem) {
  struct Case {
    const char* resource;
    const char* text;
    int64_t want;
  };
  for (const auto& c : std::vector<Case>{{"cpu", "500m", 500},
                                         {"cpu", "2", 2000},
                                         {"cpu", "0.5", 500},
                                         {"cpu", "1.0001", 1001},  // MilliValue rounds up
                                         {"cpu", "100u", 1},
                                         {"cpu", "+1k", 1000000},
                                         {"memory", "1Gi", 1073741824},
                                         {"memory", "1G", 1000000000},
                                         {"memory", "1.5Ki", 1536},
                                         {"memory", "1e3", 1000},
                                         {"memory", "2E", 2000000000000000000},
                                         {"memory", "0.1", 1},
                                         {"pods", "3", 3},
                                         {"pods", "-0", 0},
                                         {"pods", ".5", 1},
                                         {"pods", "2.", 2}}) {
    auto got = k::ParseQuantity(c.resource, c.text);
    ASSERT_TRUE(got.ok()) << c.resource << " " << c.text << ": " << got.status();
    EXPECT_EQ(*got, c.want) << c.resource << " " << c.text;
  }
  EXPECT_EQ(*k::QuantityOf("cpu", json(2)), 2000);
  EXPECT_EQ(*k::QuantityOf("cpu", json(0.25)), 250);
}

TEST(KueueQuantity, RefusesWhatIsNotAQuantity) {
  for (const char* text : {"", "abc", "1x", "-1", "1.2.3", "Ki", "1 Gi", "1e", "10E", "1e3.5", "."}) {
    auto got = k::ParseQuantity("memory", text);
    EXPECT_EQ(got.status().code(), Code::kInvalidArgument) << text;
  }
  EXPECT_FALSE(k::ParseQuantity("cpu", "10E").ok());  // past int64 in millicores
  EXPECT_FALSE(k::QuantityOf("cpu", json::array()).ok());
  EXPECT_NE(k::ParseQuantity("cpu", "two").status().message().find("\"two\" of cpu"), std::string::npos);
}

TEST(KueueQuantity, FormatsAsKueueWritesAdmissions) {
  EXPECT_EQ(k::FormatQuantity("cpu", 2000), "2");
  EXPECT_EQ(k::FormatQuantity("cpu", 500), "500m");
  EXPECT_EQ(k::FormatQuantity("cpu", 1500), "1500m");
  EXPECT_EQ(k::FormatQuantity("cpu", 0), "0");
  EXPECT_EQ(k::FormatQuantity("cpu", 3000000), "3k");
  EXPECT_EQ(k::FormatQuantity("memory", 1073741824), "1Gi");
  EXPECT_EQ(k::FormatQuantity("memory", 1536), "1536");
  EXPECT_EQ(k::FormatQuantity("memory", 1000000000), "1G");
  EXPECT_EQ(k::FormatQuantity("memory", 512), "512");
  EXPECT_EQ(k::FormatQuantity("hugepages-2Mi", 4194304), "4Mi");
  EXPECT_EQ(k::FormatQuantity("pods", 2000), "2k");
  EXPECT_EQ(k::FormatQuantity("nvidia.com/gpu", 3), "3");
}

TEST(KueuePlan, AdmitsWhatFitsWithTheAdmissionAndConditionsKueueWrites) {
  json wl = Workload("one", "2026-01-01T09:00:00Z", {PodSet("worker", 2, {{"cpu", "500m"}, {"memory", "1Gi"}})});
  json cq = ClusterQueue("cq", {{"a", "2"}});
  cq["spec"]["resourceGroups"].push_back(
      {{"coveredResources", {"memory"}},
       {"flavors", {{{"name", "b"}, {"resources", {{{"name", "memory"}, {"nominalQuota", "4Gi"}}}}}}}});
  const auto plan = k::PlanPass(Cluster({wl}, cq), kNow);
  ASSERT_EQ(plan.writes.size(), 1u);
  EXPECT_TRUE(plan.skipped.empty());
  const json status = Written(plan)["one"];
  EXPECT_EQ(status["admission"], json({{"clusterQueue", "cq"},
                                       {"podSetAssignments",
                                        {{{"name", "worker"},
                                          {"flavors", {{"cpu", "a"}, {"memory", "b"}}},
                                          {"resourceUsage", {{"cpu", "1"}, {"memory", "2Gi"}}},
                                          {"count", 2}}}}}));
  EXPECT_EQ(status["conditions"],
            json({Cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq"),
                  Cond("Admitted", "True", "Admitted", "The workload is admitted")}));
}

TEST(KueuePlan, WhatDoesNotFitStaysPendingWithKueuesMessageUntilQuotaIsReleased) {
  json first = Workload("first", "2026-01-01T09:00:00Z", {PodSet("worker", 2, {{"cpu", "1"}})});
  json second = Workload("second", "2026-01-01T09:00:01Z", {PodSet("worker", 2, {{"cpu", "1"}})});
  const json cq = ClusterQueue("cq", {{"a", "2"}});
  auto plan = k::PlanPass(Cluster({first, second}, cq), kNow);
  auto written = Written(plan);
  ASSERT_EQ(written.size(), 2u);
  EXPECT_TRUE(written["first"].contains("admission"));
  EXPECT_FALSE(written["second"].contains("admission"));
  EXPECT_EQ(written["second"]["conditions"],
            json({Cond("QuotaReserved", "False", "Pending",
                       "couldn't assign flavors to pod set worker: insufficient unused quota for cpu in flavor a, 2 "
                       "more needed")}));

  // The next pass, with both written: nothing changes.
  first["status"] = written["first"];
  second["status"] = written["second"];
  EXPECT_TRUE(k::PlanPass(Cluster({first, second}, cq), kNow).writes.empty());

  // The first finishes: its quota goes to the second.
  first["status"]["conditions"].push_back(Cond("Finished", "True", "Succeeded", "done"));
  written = Written(k::PlanPass(Cluster({first, second}, cq), kNow));
  ASSERT_EQ(written.size(), 1u);
  EXPECT_EQ(written["second"]["admission"]["podSetAssignments"][0]["flavors"], json({{"cpu", "a"}}));
}

TEST(KueuePlan, FallsBackToTheNextFlavorAndSaysWhyNoneFits) {
  const json needs3 = Workload("three", "2026-01-01T09:00:00Z", {PodSet("worker", 3, {{"cpu", "1"}})});
  auto written = Written(k::PlanPass(Cluster({needs3}), kNow));
  EXPECT_EQ(written["three"]["admission"]["podSetAssignments"][0]["flavors"], json({{"cpu", "b"}}));
  EXPECT_EQ(written["three"]["admission"]["podSetAssignments"][0]["resourceUsage"], json({{"cpu", "3"}}));

  const json needs5 = Workload("five", "2026-01-01T09:00:00Z", {PodSet("worker", 5, {{"cpu", "1"}})});
  written = Written(k::PlanPass(Cluster({needs5}), kNow));
  EXPECT_EQ(written["five"]["conditions"][0]["message"],
            "couldn't assign flavors to pod set worker: insufficient quota for cpu in flavor a, previously considered "
            "podsets requests (0) + current podset request (5) > maximum capacity (2), insufficient quota for cpu in "
            "flavor b, previously considered podsets requests (0) + current podset request (5) > maximum capacity (4)");

  const json gpu = Workload("gpu", "2026-01-01T09:00:00Z", {PodSet("worker", 1, {{"nvidia.com/gpu", "1"}})});
  written = Written(k::PlanPass(Cluster({gpu}), kNow));
  EXPECT_EQ(written["gpu"]["conditions"][0]["message"],
            "couldn't assign flavors to pod set worker: resource nvidia.com/gpu unavailable in ClusterQueue");
}

TEST(KueuePlan, TakesWorkloadsByPriorityThenAgeAndStrictFifoBlocksBehindTheHead) {
  const json old_big = Workload("old-big", "2026-01-01T08:00:00Z", {PodSet("w", 3, {{"cpu", "1"}})});
  const json young_small = Workload("young-small", "2026-01-01T09:00:00Z", {PodSet("w", 1, {{"cpu", "1"}})});
  const json urgent = Workload("urgent", "2026-01-01T09:30:00Z", {PodSet("w", 1, {{"cpu", "1"}})}, 100);
  // Best effort: the old big one does not fit a 2-cpu queue, the small one
  // behind it does, after the urgent one.
  auto written = Written(k::PlanPass(Cluster({old_big, young_small, urgent}, ClusterQueue("cq", {{"a", "2"}})), kNow));
  EXPECT_TRUE(written["urgent"].contains("admission"));
  EXPECT_TRUE(written["young-small"].contains("admission"));
  EXPECT_FALSE(written["old-big"].contains("admission"));
  // Strict FIFO: nothing passes the head that does not fit.
  written = Written(
      k::PlanPass(Cluster({old_big, young_small, urgent}, ClusterQueue("cq", {{"a", "2"}}, "StrictFIFO")), kNow));
  EXPECT_TRUE(written["urgent"].contains("admission"));
  EXPECT_FALSE(written["old-big"].contains("admission"));
  EXPECT_EQ(written.count("young-small"), 0u);
}

TEST(KueuePlan, AMissingLocalQueueOrFlavorKeepsTheWorkloadOut) {
  json lost = Workload("lost", "2026-01-01T09:00:00Z", {PodSet("w", 1, {{"cpu", "1"}})});
  lost["spec"]["queueName"] = "nowhere";
  auto written = Written(k::PlanPass(Cluster({lost}), kNow));
  EXPECT_EQ(written["lost"]["conditions"],
            json({Cond("QuotaReserved", "False", "Inadmissible", "LocalQueue nowhere is terminating or missing")}));

  const json fine = Workload("fine", "2026-01-01T09:00:00Z", {PodSet("w", 1, {{"cpu", "1"}})});
  k::Observed no_flavor = Cluster({fine});
  no_flavor.flavors = {Flavor("b")};
  written = Written(k::PlanPass(no_flavor, kNow));
  EXPECT_EQ(written["fine"]["conditions"][0]["message"], "ClusterQueue cq is inactive");
}

TEST(KueuePlan, GarbageIsSkippedAndTheRestStillAdmitted) {
  const json garbage = Workload("garbage", "2026-01-01T08:00:00Z", {PodSet("w", 1, {{"cpu", "lots"}})});
  json odd = Workload("odd", "2026-01-01T08:00:00Z", {PodSet("w", 1, {{"cpu", "1"}})});
  odd["spec"]["priority"] = "high";  // not an integer: read as 0
  odd["status"] = {{"conditions", "none"}};
  const json fine = Workload("fine", "2026-01-01T09:00:00Z", {PodSet("w", 1, {{"cpu", "1"}})});
  const auto plan = k::PlanPass(Cluster({garbage, odd, fine}), kNow);
  auto written = Written(plan);
  EXPECT_EQ(written.count("garbage"), 0u);
  EXPECT_TRUE(written["fine"].contains("admission"));
  EXPECT_TRUE(written["odd"].contains("admission"));
  ASSERT_EQ(plan.skipped.size(), 1u);
  EXPECT_NE(plan.skipped[0].find("ns/garbage"), std::string::npos) << plan.skipped[0];
  EXPECT_NE(plan.skipped[0].find("\"lots\" of cpu"), std::string::npos) << plan.skipped[0];
}

TEST(KueuePlan, EvictionOnRequestAndOnDeactivationKeepTheAdmission) {
  json wl = Workload("one", "2026-01-01T09:00:00Z", {PodSet("worker", 1, {{"cpu", "1"}})});
  EXPECT_EQ(k::EvictedWorkload(wl, "Preempted", kNow).status().code(), Code::kFailedPrecondition);
  wl["status"] = Written(k::PlanPass(Cluster({wl}), kNow))["one"];
  auto evicted = k::EvictedWorkload(wl, "Preempted", kNow);
  ASSERT_TRUE(evicted.ok()) << evicted.status();
  const std::string message =
      "Preempted to accommodate a workload (UID: UNKNOWN, JobUID: UNKNOWN) due to prioritization in the "
      "ClusterQueue; preemptor path: /cq; preemptee path: /cq";
  json preempted = Cond("Preempted", "True", "InClusterQueue", message);
  preempted.erase("observedGeneration");  // SetPreemptedCondition sets none
  EXPECT_EQ((*evicted)["status"]["conditions"], json({wl["status"]["conditions"][0], wl["status"]["conditions"][1],
                                                      preempted, Cond("Evicted", "True", "Preempted", message)}));
  EXPECT_EQ((*evicted)["status"]["admission"], wl["status"]["admission"]);
  EXPECT_EQ(*k::EvictedWorkload(*evicted, "Preempted", kNow), *evicted);  // once

  // Nothing more until the job's side clears the admission; then it is
  // admitted again, and the eviction turns False.
  EXPECT_TRUE(k::PlanPass(Cluster({*evicted}), kNow).writes.empty());
  json cleared = *evicted;
  cleared["status"].erase("admission");
  k::SetCondition(cleared["status"]["conditions"], "QuotaReserved", "False", "Pending", message, 1, kNow);
  const json again = Written(k::PlanPass(Cluster({cleared}), kNow))["one"];
  EXPECT_TRUE(again.contains("admission"));
  json probe{{"status", again}};
  EXPECT_EQ(k::FindCondition(probe, "Evicted"), Cond("Evicted", "False", "QuotaReserved", "Previously: " + message));

  json off = wl;
  off["spec"]["active"] = false;
  const json deactivated = Written(k::PlanPass(Cluster({off}), kNow))["one"];
  EXPECT_EQ(deactivated["conditions"].back(), Cond("Evicted", "True", "Deactivated", "The workload is deactivated"));
  EXPECT_EQ(deactivated["admission"], wl["status"]["admission"]);
}

}  // namespace
}  // namespace tfjob::testing::kueue_admitter_unit_test

// Table tests of pods on a node that stays unreachable (PlannerOptions::
// node_unreachable_grace, planner_nodes.cc; issue 49 item 4): past the
// grace they are deleted with no grace period (Terminating ones too) and
// created again on the next pass, without counting as restarts; before it,
// a requeue at the grace. Pure: no client. On the real API server:
// operator/tests/envtest_policies_test.cc (APodOnANodeThatStaysUnreachable...).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "operator/controller/cache.h"
#include "operator/controller/planner.h"
#include "operator/controller/tests/planner_fixtures.h"

// Its own namespace: the unity build compiles this file with the other
// planner tests, whose file-local helpers have the same names.
namespace tfjob::op::controller::nodes_test {
namespace {

using fixtures::kNow;
using json = nlohmann::json;
using std::chrono::seconds;

api::TFJob Job() {
  const json replica = {{"replicas", 2},
                        {"restartPolicy", "OnFailure"},
                        {"template", {{"spec", {{"containers", json::array({fixtures::TensorflowContainer()})}}}}}};
  return fixtures::DecodeJob({{"Worker", replica}});
}

PodView On(const std::string& node, int index, const std::string& phase = "Running") {
  PodView p = fixtures::OwnedPod("worker", index, phase);
  p.node_name = node;
  return p;
}

std::vector<ServiceView> Services() {
  return {fixtures::OwnedService("worker", 0), fixtures::OwnedService("worker", 1)};
}

ObservedNodes Nodes(const std::string& ready_b, seconds for_how_long) {
  ObservedNodes n;
  n["node-a"] = {"node-a", "True", kNow - seconds(3600)};
  n["node-b"] = {"node-b", ready_b, kNow - for_how_long};
  return n;
}

PlannerOptions Grace(int s) {
  PlannerOptions o;
  o.node_unreachable_grace = seconds(s);
  return o;
}

std::vector<std::string> Named(const Plan& p, Action::Kind kind) {
  std::vector<std::string> out;
  for (const auto& a : p.actions) {
    if (a.kind == kind) out.push_back(a.name);
  }
  return out;
}

Plan PlanWith(const std::vector<PodView>& pods, const ObservedNodes& nodes, int grace = 60) {
  return PlanJob(Job(), pods, Services(), kNow, Grace(grace), std::nullopt, ObservedKueue{}, nodes);
}

TEST(NodesTest, ANodeThatIsReadyChangesNothing) {
  const Plan p = PlanWith({On("node-a", 0), On("node-b", 1)}, Nodes("True", seconds(10)));
  EXPECT_TRUE(Named(p, Action::Kind::kForceDeletePod).empty());
  EXPECT_FALSE(p.requeue_after);
}

TEST(NodesTest, BeforeTheGraceTheJobIsPlannedAgainAtIt) {
  const Plan p = PlanWith({On("node-a", 0), On("node-b", 1)}, Nodes("Unknown", seconds(20)));
  EXPECT_TRUE(Named(p, Action::Kind::kForceDeletePod).empty());
  ASSERT_TRUE(p.requeue_after);
  EXPECT_EQ(*p.requeue_after, seconds(40));
}

TEST(NodesTest, PastTheGraceItsPodsAreDeletedWithNoGracePeriodAndSaidWhy) {
  const Plan p = PlanWith({On("node-a", 0), On("node-b", 1)}, Nodes("Unknown", seconds(75)));
  EXPECT_EQ(Named(p, Action::Kind::kForceDeletePod), std::vector<std::string>{"j-worker-1"});
  EXPECT_TRUE(Named(p, Action::Kind::kDeletePod).empty());
  bool said = false;
  for (const auto& e : p.events) {
    said |= e.type == "Warning" && e.reason == "NodeUnreachable" &&
            e.message ==
                "Pod j-worker-1 is on node node-b, whose Ready condition has been Unknown since 2026-11-21T11:58:45Z, "
                "longer than 60 s: deleted with no grace period, to be created again on a node that is Ready";
  }
  EXPECT_TRUE(said);
  // Not a failure of the job, nor a restart.
  EXPECT_EQ(p.status.replica_statuses.at("Worker").restarts, 0);
  for (const auto& c : p.status.conditions) EXPECT_NE(c.type, "Restarting");
}

TEST(NodesTest, ATerminatingPodIsForceDeletedTooAndANotReadyNodeCounts) {
  PodView stuck = On("node-b", 1);
  stuck.deleting = true;  // evicted by the taint manager, waiting for a kubelet that is gone
  const Plan p = PlanWith({On("node-a", 0), stuck}, Nodes("False", seconds(61)));
  EXPECT_EQ(Named(p, Action::Kind::kForceDeletePod), std::vector<std::string>{"j-worker-1"});
}

TEST(NodesTest, FinishedPodsAndPodsOnUnknownNodesAreLeftAlone) {
  ObservedNodes only_a;
  only_a["node-a"] = {"node-a", "True", kNow - seconds(3600)};
  EXPECT_TRUE(Named(PlanWith({On("node-a", 0), On("node-b", 1)}, only_a), Action::Kind::kForceDeletePod).empty());
  EXPECT_TRUE(Named(PlanWith({On("node-a", 0), On("node-b", 1, "Succeeded")}, Nodes("Unknown", seconds(600))),
                    Action::Kind::kForceDeletePod)
                  .empty());
}

TEST(NodesTest, OnceGoneThePodIsCreatedAgain) {
  const Plan p = PlanWith({On("node-a", 0)}, Nodes("Unknown", seconds(600)));
  EXPECT_EQ(Named(p, Action::Kind::kCreatePod), std::vector<std::string>{"j-worker-1"});
  EXPECT_EQ(p.status.replica_statuses.at("Worker").restarts, 0);
}

TEST(NodesTest, OffAtZero) {
  const Plan p = PlanWith({On("node-a", 0), On("node-b", 1)}, Nodes("Unknown", seconds(100000)), 0);
  EXPECT_TRUE(Named(p, Action::Kind::kForceDeletePod).empty());
  EXPECT_FALSE(p.requeue_after);
}

TEST(NodesTest, TheCacheKeepsWhatViewNodeReads) {
  const json node = json::parse(R"({
    "metadata": {"name": "node-b", "resourceVersion": "7", "labels": {"kubernetes.io/hostname": "node-b"}},
    "spec": {"podCIDR": "10.244.1.0/24", "taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]},
    "status": {"conditions": [
      {"type": "MemoryPressure", "status": "Unknown", "lastTransitionTime": "2026-11-21T11:58:00Z"},
      {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
       "lastHeartbeatTime": "2026-11-21T11:57:00Z", "lastTransitionTime": "2026-11-21T11:58:00Z"}],
      "images": [{"names": ["a"], "sizeBytes": 1}]}})");
  const json cached = CachedNode(node);
  EXPECT_EQ(cached, json::parse(R"({"metadata": {"name": "node-b", "resourceVersion": "7"},
    "status": {"conditions": [{"type": "Ready", "status": "Unknown", "lastTransitionTime": "2026-11-21T11:58:00Z"}]}})"));
  const NodeView v = ViewNode(cached);
  EXPECT_EQ(v.name, "node-b");
  EXPECT_EQ(v.ready, "Unknown");
  ASSERT_TRUE(v.ready_since);
  EXPECT_EQ(kNow - *v.ready_since, seconds(120));
  // A pod's node survives the pod cache.
  json pod = {{"metadata", {{"name", "j-worker-1"}}}, {"spec", {{"nodeName", "node-b"}}}};
  EXPECT_EQ(ViewPod(CachedPod(pod)).node_name, "node-b");
}

}  // namespace
}  // namespace tfjob::op::controller::nodes_test

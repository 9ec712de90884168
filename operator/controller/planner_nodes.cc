// Pods on a node that stays unreachable (PlannerOptions::
// node_unreachable_grace). When a node loses power or its network,
// Kubernetes marks it NotReady (Ready Unknown after the node monitor's
// grace), taints it, and later evicts its pods; but a pod's deletion waits
// for its kubelet to confirm, so the pods stay Terminating (or Unknown) for
// as long as the node is gone, and a TFJob that waits for them hangs
// (kubeflow/trainer #720, #956, #2072; training-operator never acted on
// it). Here, past the grace, the job's pods on such a node are deleted with
// no grace period; the planner then creates them again, and the scheduler
// places them on a node that is Ready. A node that comes back finds its
// pods gone and stops their containers; a stale chief that still runs
// meanwhile is fenced (docs/fault-tolerance.md).
#include <string>

#include "common/time.h"
#include "operator/controller/planner_pass.h"

namespace tfjob::op::controller::internal {

void PlanUnreachableNodes(Pass& p, const ObservedNodes& nodes) {
  const auto grace = p.options.node_unreachable_grace;
  if (grace.count() <= 0) return;
  std::optional<Time> next;
  for (const PodView& pod : p.pods) {
    if (pod.node_name.empty() || pod.phase == "Succeeded" || pod.phase == "Failed") continue;
    const auto it = nodes.find(pod.node_name);
    if (it == nodes.end() || it->second.ready == "True" || !it->second.ready_since) continue;
    const NodeView& node = it->second;
    const Time due = *node.ready_since + grace;
    if (p.now_tp < due) {
      if (!next || due < *next) next = due;
      continue;
    }
    p.b.ForceDeletePod(pod);
    // The same words every pass until the pod is gone: events are recorded
    // once per job and message.
    p.b.Event("Warning", "NodeUnreachable",
              "Pod " + pod.name + " is on node " + node.name + ", whose Ready condition has been " +
                  (node.ready.empty() ? std::string("absent") : node.ready) + " since " +
                  FormatRfc3339(*node.ready_since) + ", longer than " + std::to_string(grace.count()) +
                  " s: deleted with no grace period, to be created again on a node that is Ready");
  }
  if (next) {
    p.b.RequeueIn(std::chrono::ceil<std::chrono::seconds>(*next - p.now_tp));
  }
}

}  // namespace tfjob::op::controller::internal

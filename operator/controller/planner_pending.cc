// Pods that stay Pending (PlannerOptions::pending_timeout): a replica that
// cannot be scheduled, or whose image is missing, stalls the whole job with
// no signal in training-operator (kubeflow/trainer #1282). Here the job says
// so: a PodsPending condition and a Warning event naming the pod and the
// scheduler's (or the kubelet's) reason, and, opted in, the pod re-created
// once per index.
#include <algorithm>
#include <string>

#include "operator/api/names.h"
#include "operator/controller/conditions.h"
#include "operator/controller/planner_pass.h"

namespace tfjob::op::controller::internal {

std::map<std::string, std::set<int>> RecordedIndices(const api::TFJob& job, std::string_view annotation) {
  std::map<std::string, std::set<int>> out;
  auto it = job.metadata.annotations.find(std::string(annotation));
  if (it == job.metadata.annotations.end()) return out;
  const auto j = nlohmann::json::parse(it->second, nullptr, false);
  if (!j.is_object()) return out;
  for (auto e = j.begin(); e != j.end(); ++e) {
    if (!e->is_array()) continue;
    for (const auto& i : *e) {
      if (i.is_number_integer() && i.get<int64_t>() >= 0 && i.get<int64_t>() <= INT32_MAX) {
        out[e.key()].insert(i.get<int>());
      }
    }
  }
  return out;
}

void ObservePending(Pass& p, Outcome& out, const std::string& key, int index, const PodView& pod) {
  const auto timeout = p.options.pending_timeout;
  if (timeout.count() <= 0 || pod.deleting || pod.phase != "Pending" || !pod.created) return;
  const Time due = *pod.created + timeout;
  if (p.now_tp >= due) {
    out.pending.push_back({key, index, &pod});
  } else if (!out.next_pending_timeout || due < *out.next_pending_timeout) {
    out.next_pending_timeout = due;
  }
}

namespace {

// The condition is not Kubeflow's: it never becomes the newest, so the
// STATE column shows Kubeflow's conditions only.
void KeepBeforeNewest(api::JobStatus& st) {
  auto& c = st.conditions;
  if (c.size() >= 2 && c.back().type == api::kConditionPodsPending) std::swap(c[c.size() - 1], c[c.size() - 2]);
}

std::string Why(const PodView& pod) {
  if (pod.pending_reason.empty() && pod.pending_message.empty()) return "no reason given by the scheduler or kubelet";
  if (pod.pending_message.empty()) return pod.pending_reason;
  if (pod.pending_reason.empty()) return pod.pending_message;
  return pod.pending_reason + ": " + pod.pending_message;
}

}  // namespace

void ConcludePending(Pass& p, const Outcome& out) {
  const bool finished = IsTrue(p.st, api::kConditionSucceeded) || IsTrue(p.st, api::kConditionFailed);
  const api::JobCondition* had = FindCondition(p.st, api::kConditionPodsPending);
  if (finished || out.pending.empty()) {
    if (had && had->status == api::kConditionTrue) {
      SetCondition(p.st, api::kConditionPodsPending, api::kConditionFalse, api::kReasonPodsNoLongerPending,
                   "No pod of TFJob " + p.qualified + " is Pending past the timeout.", p.now);
      KeepBeforeNewest(p.st);
    }
  } else {
    const long timeout_s = static_cast<long>(p.options.pending_timeout.count());
    std::map<std::string, std::set<int>> recreated = RecordedIndices(p.job, api::kPendingRecreatedAnnotation);
    bool grew = false;
    for (const auto& e : out.pending) {
      if (!p.options.recreate_pending || !recreated[e.key].insert(e.index).second) continue;
      grew = true;
      p.b.DeletePod(*e.pod);
      p.b.Event("Warning", api::kReasonPodPendingTimeout,
                "Pod " + e.pod->name + " was Pending longer than " + std::to_string(timeout_s) +
                    " s and is re-created (once): " + Why(*e.pod));
    }
    if (grew) {
      nlohmann::json j = nlohmann::json::object();
      for (const auto& [key, indices] : recreated) {
        if (!indices.empty()) j[key] = indices;
      }
      p.b.plan.actions.push_back(
          {Action::Kind::kPatchJob,
           p.name,
           {{"metadata", {{"annotations", {{std::string(api::kPendingRecreatedAnnotation), j.dump()}}}}}}});
    }
    const PodView& first = *out.pending.front().pod;
    std::string msg =
        "Pod " + first.name + " has been Pending longer than " + std::to_string(timeout_s) + " s: " + Why(first);
    if (msg.back() != '.') msg += '.';
    if (out.pending.size() > 1) msg += " " + std::to_string(out.pending.size() - 1) + " more pod(s) too.";
    if (!had || had->status != api::kConditionTrue || had->message != msg) {
      p.b.Event("Warning", api::kReasonPodPendingTimeout, "TFJob " + p.qualified + ": " + msg);
      SetCondition(p.st, api::kConditionPodsPending, api::kConditionTrue, api::kReasonPodPendingTimeout, msg, p.now);
      KeepBeforeNewest(p.st);
    }
  }
  if (!finished && out.next_pending_timeout) {
    p.b.RequeueIn(std::chrono::ceil<std::chrono::seconds>(*out.next_pending_timeout - p.now_tp));
  }
}

}  // namespace tfjob::op::controller::internal

// The job's conditions, as Kubeflow keeps them.
#include <string>
#include <vector>

#include "operator/api/names.h"
#include "operator/controller/conditions.h"

namespace tfjob::op::controller::internal {

using api::JobCondition;
using api::JobStatus;

const JobCondition* FindCondition(const JobStatus& s, std::string_view type) {
  for (const auto& c : s.conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

bool IsTrue(const JobStatus& s, std::string_view type) {
  const JobCondition* c = FindCondition(s, type);
  return c && c->status == api::kConditionTrue;
}

// Kubeflow's updateJobConditions: Running and Restarting replace each other,
// a finished job's Running turns False, and an unchanged condition keeps its
// transition time.
void SetCondition(JobStatus& s, std::string_view type, std::string_view status, std::string_view reason,
                  const std::string& message, const std::string& now) {
  const JobCondition* existing = FindCondition(s, type);
  if (existing && existing->status == status && existing->reason == reason && existing->message == message) return;
  JobCondition c{std::string(type), std::string(status), std::string(reason), message, now, now};
  if (existing && existing->status == status) c.last_transition_time = existing->last_transition_time;
  std::vector<JobCondition> kept;
  for (auto old : s.conditions) {
    if (old.type == type) continue;
    if ((type == api::kConditionRestarting && old.type == api::kConditionRunning) ||
        (type == api::kConditionRunning && old.type == api::kConditionRestarting)) {
      continue;
    }
    if ((type == api::kConditionFailed || type == api::kConditionSucceeded) && old.type == api::kConditionRunning &&
        old.status == api::kConditionTrue) {
      old.status = api::kConditionFalse;
      old.last_transition_time = now;
      old.last_update_time = now;
    }
    kept.push_back(std::move(old));
  }
  kept.push_back(std::move(c));
  s.conditions = std::move(kept);
}

bool SameIgnoringReconcileTime(JobStatus a, JobStatus b) {
  a.last_reconcile_time.clear();
  b.last_reconcile_time.clear();
  return a == b;
}

}  // namespace tfjob::op::controller::internal

// The job's phase over one pass of PlanJob (planner_pass.h): a finished
// or suspended job, the restart counts and their limits (backoffLimit,
// activeDeadlineSeconds), clean-up and TTL, and the conditions a pass ends
// with; planner.cc does the replicas.
#include <algorithm>
#include <chrono>
#include <climits>

#include "common/time.h"
#include "operator/api/names.h"
#include "operator/controller/builders.h"
#include "operator/controller/conditions.h"
#include "operator/controller/planner_pass.h"

namespace tfjob::op::controller::internal {

using api::ReplicaSpec;
using api::TFJob;

namespace {

// Kubeflow defaults only an unset policy to None; one written as "" is
// none of None and Running, so its clean-up deletes every pod (All).
api::CleanPodPolicy CleanPolicy(const TFJob& job) {
  const std::string& written = job.spec.run_policy.clean_pod_policy.value_or(std::string(api::kCleanPodPolicyNone));
  if (written.empty()) return api::CleanPodPolicy::kAll;
  return api::ParseCleanPodPolicy(written).value_or(api::CleanPodPolicy::kNone);
}

// Requeues (or deletes the job) for ttlSecondsAfterFinished.
void ApplyTtl(Builder& b, const TFJob& job, Time now) {
  const auto& ttl = job.spec.run_policy.ttl_seconds_after_finished;
  if (!ttl) return;
  auto done = ParseRfc3339(b.plan.status.completion_time);
  if (!done) return;
  const Time expire = *done + std::chrono::seconds(*ttl);
  if (now >= expire) {
    b.plan.actions.push_back({Action::Kind::kDeleteJob, job.metadata.name, nullptr});
  } else {
    b.plan.requeue_after = std::chrono::ceil<std::chrono::seconds>(expire - now);
  }
}

// A finished job is not restarting: its Restarting condition turns False,
// as Running does. v1.9.0 leaves it True and, when a replica fails for good
// while another is being restarted, sets it again after Failed
// (tfjob_controller.go, UpdateJobStatus: existingRestartingCondition), so
// `kubectl get tfjob`, which shows the newest condition, says a failed job
// is Restarting (kubeflow/trainer #2044).
void EndRestarting(Pass& p) {
  for (auto& c : p.st.conditions) {
    if (c.type != api::kConditionRestarting || c.status != api::kConditionTrue) continue;
    c.status = api::kConditionFalse;
    c.last_transition_time = p.now;
    c.last_update_time = p.now;
  }
}

}  // namespace

// The restart counts kept on the job (kRestartsAnnotation), by replica key.
std::map<std::string, int32_t> AnnotatedRestarts(const TFJob& job) {
  std::map<std::string, int32_t> out;
  auto it = job.metadata.annotations.find(std::string(api::kRestartsAnnotation));
  if (it == job.metadata.annotations.end()) return out;
  const auto j = nlohmann::json::parse(it->second, nullptr, false);
  if (!j.is_object()) return out;
  for (auto e = j.begin(); e != j.end(); ++e) {
    if (e->is_number_integer() && e->get<int64_t>() >= 0 && e->get<int64_t>() <= INT32_MAX)
      out[e.key()] = e->get<int32_t>();
  }
  return out;
}

// A finished job: clean-up and TTL only. Kubeflow: once a job has
// succeeded, what was still active counts as succeeded (a failed job's
// counts stay as they were).
void PlanFinished(Pass& p) {
  p.b.Cleanup(CleanPolicy(p.job));
  if (IsTrue(p.st, api::kConditionSucceeded)) {
    for (auto& [key, rs] : p.st.replica_statuses) {
      rs.succeeded += rs.active;
      rs.active = 0;
    }
  }
  ApplyTtl(p.b, p.job, p.now_tp);
}

// Suspended: every pod and service goes. Returns false when the job is not
// suspended (after noting a resume, which restarts the deadline's clock).
// A job Kueue holds back (kueue_workload.h: not admitted, or evicted and
// being suspended) is suspended already in this pass.
bool PlanSuspended(Pass& p) {
  if (p.job.spec.run_policy.suspend.value_or(false) || p.kueue_hold) {
    p.b.DeleteAll();
    for (auto& [k, rs] : p.st.replica_statuses) rs.active = 0;
    const std::string msg = "TFJob " + p.name + " is suspended.";
    if (IsTrue(p.st, api::kConditionRunning)) {
      SetCondition(p.st, api::kConditionRunning, api::kConditionFalse, api::kReasonSuspended, msg, p.now);
    }
    if (!IsTrue(p.st, api::kConditionSuspended)) {
      SetCondition(p.st, api::kConditionSuspended, api::kConditionTrue, api::kReasonSuspended, msg, p.now);
      p.b.Event("Normal", api::kReasonSuspended, msg);
    }
    return true;
  }
  if (IsTrue(p.st, api::kConditionSuspended)) {
    const std::string msg = "TFJob " + p.name + " is resumed.";
    SetCondition(p.st, api::kConditionSuspended, api::kConditionFalse, api::kReasonResumed, msg, p.now);
    p.st.start_time = p.now;  // the deadline counts from the resume
    p.b.Event("Normal", api::kReasonResumed, msg);
  }
  return false;
}

// Restarts so far: kubelet restarts of OnFailure/Always pods plus the
// operator's own ExitCode re-creations, kept in status and on the job
// (kRestartsAnnotation: Kubeflow's CRD prunes the status field). Folds the
// annotation into the status as it goes.
int64_t CountRestarts(Pass& p, const std::map<std::string, int32_t>& annotated) {
  for (auto& [key, rs] : p.st.replica_statuses) {
    if (auto it = annotated.find(key); it != annotated.end()) rs.restarts = std::max(rs.restarts, it->second);
  }
  for (const auto& [key, count] : annotated) {
    if (!p.st.replica_statuses.count(key)) p.st.replica_statuses[key].restarts = count;
  }
  int64_t restarts = 0;
  for (const auto& [key, rs] : p.st.replica_statuses) restarts += rs.restarts;
  for (const ReplicaSpec& spec : p.job.spec.replica_specs) {
    const auto policy = api::ParseRestartPolicy(spec.restart_policy).value_or(api::RestartPolicy::kNever);
    if (policy != api::RestartPolicy::kOnFailure && policy != api::RestartPolicy::kAlways) continue;
    const std::string type = api::TypeLabel(spec);
    for (const auto& pod : p.pods) {
      if (LabelOf(pod.labels, api::kReplicaTypeLabel) == type) restarts += pod.restart_count;
    }
  }
  return restarts;
}

// backoffLimit and activeDeadlineSeconds. True when the job failed on one
// of them (a deadline or backoff failure stops the work whatever
// cleanPodPolicy says, as Kubeflow's does).
bool PlanLimits(Pass& p, int64_t restarts) {
  const auto& limit = p.job.spec.run_policy.backoff_limit;
  const bool past_backoff = limit && (*limit == 0 ? restarts > 0 : restarts >= *limit);
  const auto& deadline = p.job.spec.run_policy.active_deadline_seconds;
  std::optional<Time> start = ParseRfc3339(p.st.start_time);
  const bool past_deadline = deadline && start && p.now_tp - *start >= std::chrono::seconds(*deadline);
  if (!past_backoff && !past_deadline) return false;
  // Kubeflow's words (JobFailed for the backoff limit and the deadline).
  const std::string msg = past_backoff
                              ? "Job " + p.name + " has failed because it has reached the specified backoff limit"
                              : "Job " + p.name + " has failed because it was active longer than specified deadline";
  p.b.KillActive();
  p.b.Cleanup(CleanPolicy(p.job));
  SetCondition(p.st, api::kConditionFailed, api::kConditionTrue, api::kReasonFailed, msg, p.now);
  EndRestarting(p);
  p.st.completion_time = p.now;
  p.b.Event("Normal", api::kReasonFailed, msg);
  ApplyTtl(p.b, p.job, p.now_tp);
  return true;
}

// Record, then act: the restart counts go on the job before any pod is
// deleted for a restart (kPatchJob runs first; the pass stops if it fails).
void RecordRestarts(Pass& p, const std::map<std::string, int32_t>& annotated, const Outcome& out) {
  std::map<std::string, int32_t> counted = annotated;
  bool grew = false;
  for (const auto& [key, count] : out.restart_counts) {
    if (count > counted[key]) {
      counted[key] = count;
      grew = true;
    }
  }
  if (!grew) return;
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [key, count] : counted) {
    if (count > 0) j[key] = count;
  }
  p.b.plan.actions.insert(p.b.plan.actions.begin(),
                          {Action::Kind::kPatchJob,
                           p.name,
                           {{"metadata", {{"annotations", {{std::string(api::kRestartsAnnotation), j.dump()}}}}}}});
}

// The job's conditions from its replicas: Failed (Kubeflow's
// UpdateJobStatus: an event for each failed type, in its order - Chief,
// Evaluator, Master, PS, Worker: the job's replica order here - and the
// condition from the first, since Failed is final), Succeeded (this pass's
// creates dropped: a finished job starts nothing new), Restarting or
// Running; a requeue for the deadline.
void Conclude(Pass& p, const Outcome& out) {
  if (!out.failed_msgs.empty()) {
    const std::string msg = "TFJob " + p.qualified + " has failed because " + out.failed_msgs.front();
    if (!out.exit_code_failure.empty()) {
      // Kubeflow fails an ExitCode job with this message first; its general
      // one follows as an event.
      p.b.Event("Warning", api::kReasonFailed, out.exit_code_failure);
    }
    SetCondition(p.st, api::kConditionFailed, api::kConditionTrue, api::kReasonFailed,
                 out.exit_code_failure.empty() ? msg : out.exit_code_failure, p.now);
    EndRestarting(p);
    p.st.completion_time = p.now;
    for (const auto& m : out.failed_msgs) {
      p.b.Event("Normal", api::kReasonFailed, "TFJob " + p.qualified + " has failed because " + m);
    }
    p.b.Cleanup(CleanPolicy(p.job));
    ApplyTtl(p.b, p.job, p.now_tp);
    return;
  }
  if (out.succeeded) {
    const std::string msg = "TFJob " + p.qualified + " successfully completed.";
    SetCondition(p.st, api::kConditionSucceeded, api::kConditionTrue, api::kReasonSucceeded, msg, p.now);
    EndRestarting(p);
    p.st.completion_time = p.now;
    p.b.Event("Normal", api::kReasonSucceeded, msg);
    std::erase_if(p.b.plan.actions, [](const Action& a) {
      return a.kind == Action::Kind::kCreatePod || a.kind == Action::Kind::kCreateService;
    });
    p.b.Cleanup(CleanPolicy(p.job));
    ApplyTtl(p.b, p.job, p.now_tp);
    return;
  }
  if (!out.restarting_msg.empty()) {
    SetCondition(p.st, api::kConditionRestarting, api::kConditionTrue, api::kReasonRestarting, out.restarting_msg,
                 p.now);
  } else if (out.running) {
    SetCondition(p.st, api::kConditionRunning, api::kConditionTrue, api::kReasonRunning,
                 "TFJob " + p.qualified + " is running.", p.now);
  }
  const auto& deadline = p.job.spec.run_policy.active_deadline_seconds;
  std::optional<Time> start = ParseRfc3339(p.st.start_time);
  if (deadline && start) {
    const Time end = *start + std::chrono::seconds(*deadline);
    p.b.RequeueIn(std::chrono::ceil<std::chrono::seconds>(end - p.now_tp));
  }
}

}  // namespace tfjob::op::controller::internal

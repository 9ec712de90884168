// The planner's working state over one pass of PlanJob, shared by
// planner.cc (the replicas: pods and services observed, created, deleted)
// and planner_status.cc (the job's phase: finished, suspended, its restart
// and deadline limits, and its conditions at the end of the pass). Not for
// use outside operator/controller.
//
// Ownership: a Pass owns the defaulted job and the Plan being built; its
// Builder holds references into the Pass (the job, the selected pods and
// services), so a Pass is never copied or moved. Thread-compatible: one
// pass is one call of PlanJob. Nothing here fails or throws on any job or
// JSON it is given; a job the planner cannot carry out ends in a Failed
// condition in the plan.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/time.h"
#include "operator/api/defaults.h"
#include "operator/api/types.h"
#include "operator/controller/planner.h"

namespace tfjob::op::controller::internal {

// The plan being built: its actions (a pod or service deleted once a pass
// at most), its events, and the job's status.
struct Builder {
  const api::TFJob& job;
  const std::vector<PodView>& pods;
  const std::vector<ServiceView>& services;
  Plan plan;
  std::set<std::string> deleted;

  void DeletePod(const PodView& p) {
    if (p.deleting || !deleted.insert("pod/" + p.name).second) return;
    plan.actions.push_back({Action::Kind::kDeletePod, p.name, nullptr});
  }
  // Also a pod already Terminating: its graceful delete is what hangs.
  void ForceDeletePod(const PodView& p) {
    if (!deleted.insert("force/" + p.name).second) return;
    deleted.insert("pod/" + p.name);
    plan.actions.push_back({Action::Kind::kForceDeletePod, p.name, nullptr});
  }
  void DeleteService(const ServiceView& s) {
    if (s.deleting || !deleted.insert("svc/" + s.name).second) return;
    plan.actions.push_back({Action::Kind::kDeleteService, s.name, nullptr});
  }
  // By name, as Kubeflow's clean-up does, whether or not the cache has seen
  // the service yet: a service created just before its pod finished would
  // otherwise outlive the pod and, once the pod is gone, never be deleted.
  // (Not found is success for the executor.)
  void DeleteServiceNamed(const std::string& name) {
    for (const auto& s : services) {
      if (s.name == name && s.deleting) return;
    }
    if (deleted.insert("svc/" + name).second) plan.actions.push_back({Action::Kind::kDeleteService, name, nullptr});
  }
  // cleanPodPolicy: All removes every pod, Running the running and pending
  // ones; services go with their pods.
  void Cleanup(api::CleanPodPolicy policy) {
    if (policy == api::CleanPodPolicy::kNone) return;
    for (const auto& p : pods) {
      if (policy == api::CleanPodPolicy::kRunning && p.phase != "Running" && p.phase != "Pending") continue;
      DeletePod(p);
      DeleteServiceNamed(p.name);
    }
  }
  void KillActive() {
    for (const auto& p : pods) {
      if (p.phase == "Running" || p.phase == "Pending" || p.phase.empty() || p.phase == "Unknown") {
        DeletePod(p);
        DeleteServiceNamed(p.name);
      }
    }
  }
  void DeleteAll() {
    for (const auto& p : pods) DeletePod(p);
    for (const auto& s : services) DeleteService(s);
  }
  // A timed requeue: the soonest of those asked for in a pass.
  void RequeueIn(std::chrono::seconds in) {
    if (!plan.requeue_after || in < *plan.requeue_after) plan.requeue_after = in;
  }
  void Event(const char* type, std::string_view reason, std::string message) {
    plan.events.push_back({type, std::string(reason), std::move(message)});
  }
};

// One pass of PlanJob: what it works from and what it builds up. Builder
// holds references to job, pods and services, so a Pass is never copied or
// moved.
struct Pass {
  Pass(const api::TFJob& original, Time now_tp)
      : original(original),
        job(Defaulted(original)),
        now_tp(now_tp),
        now(FormatRfc3339(now_tp)),
        name(job.metadata.name),
        qualified(job.metadata.namespace_.empty() ? name : job.metadata.namespace_ + "/" + name) {}
  Pass(const Pass&) = delete;
  Pass& operator=(const Pass&) = delete;

  static api::TFJob Defaulted(api::TFJob job) {
    api::SetDefaults(job);
    return job;
  }

  const api::TFJob& original;
  const api::TFJob job;
  const Time now_tp;
  const std::string now, name, qualified;
  PlannerOptions options;
  std::optional<PodGroupView> pod_group;
  // --kueue=external (kueue_workload.h): what was observed; whether this
  // pass keeps the job's pods away as a suspended job's (not admitted,
  // evicted, being suspended); each pod set's placement, by its name; the
  // Workload's conditions as this pass leaves them, and whether they (or
  // the admission, cleared) changed.
  ObservedKueue kueue;
  bool kueue_hold = false;
  std::map<std::string, nlohmann::json> kueue_placement;
  nlohmann::json wl_conditions;
  bool wl_dirty = false, wl_clear_admission = false;
  std::vector<Action> adoptions;  // go first: adopted objects count as the job's in this very plan
  std::vector<PodView> pods;
  std::vector<ServiceView> services;
  Builder b{job, pods, services, {}, {}};
  api::JobStatus& st = b.plan.status;
};

// What the replicas add up to over one pass.
struct Outcome {
  bool has_chief = false;
  std::vector<std::string> failed_msgs;
  std::string restarting_msg;     // Kubeflow's, for the first replica type restarting
  std::string exit_code_failure;  // Kubeflow's, for an ExitCode pod that failed for good
  bool warned_scheduler = false, warned_restart_policy = false;
  bool running = false, succeeded = false;
  std::map<std::string, api::ReplicaStatus> statuses;
  std::map<std::string, int32_t> restart_counts;  // by key, after this pass
  bool cannot_build = false;                      // a pod could not be built: the job has failed
  // Pods Pending past PlannerOptions::pending_timeout, in replica order.
  struct Pending {
    std::string key;  // replica key
    int index = 0;
    const PodView* pod = nullptr;
  };
  std::vector<Pending> pending;
  std::optional<Time> next_pending_timeout;  // the soonest a pending pod reaches it
};

// ---- the job's phase (planner_status.cc) ----

// The restart counts kept on the job (kRestartsAnnotation), by replica key.
std::map<std::string, int32_t> AnnotatedRestarts(const api::TFJob& job);
// A finished job: clean-up and TTL only.
void PlanFinished(Pass& p);
// True when the job is suspended (its pods and services go).
bool PlanSuspended(Pass& p);
// Restarts so far, the annotation folded into the status.
int64_t CountRestarts(Pass& p, const std::map<std::string, int32_t>& annotated);
// True when the job failed on its backoffLimit or activeDeadlineSeconds.
bool PlanLimits(Pass& p, int64_t restarts);
// The restart-count patch, first in the plan, when a count grew.
void RecordRestarts(Pass& p, const std::map<std::string, int32_t>& annotated, const Outcome& out);
// The job's conditions from its replicas, at the end of a pass.
void Conclude(Pass& p, const Outcome& out);

// ---- pods on nodes that stay unreachable (planner_nodes.cc) ----

// The job's pods (running, pending, or already Terminating) on a node whose
// Ready condition has not been True for options.node_unreachable_grace are
// deleted with no grace period, with a Warning event each; a node not yet
// past it moves the next requeue.
void PlanUnreachableNodes(Pass& p, const ObservedNodes& nodes);

// ---- pods that stay Pending (planner_pending.cc) ----

// Replica indices per replica key, as the JSON annotation `annotation` on
// the job holds them ({"Worker":[0,2]}); what does not parse is ignored.
std::map<std::string, std::set<int>> RecordedIndices(const api::TFJob& job, std::string_view annotation);

// A Pending pod past the timeout is noted in `out`; one not yet past it
// moves the next requeue.
void ObservePending(Pass& p, Outcome& out, const std::string& key, int index, const PodView& pod);
// The PodsPending condition and its event, the opt-in re-creations (their
// record first), and the requeue for the next pod to reach the timeout.
void ConcludePending(Pass& p, const Outcome& out);

}  // namespace tfjob::op::controller::internal

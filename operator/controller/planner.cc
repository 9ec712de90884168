#include "operator/controller/planner.h"

#include <algorithm>
#include <climits>
#include <set>

#include "common/time.h"
#include "operator/api/defaults.h"
#include "operator/api/names.h"
#include "operator/api/validation.h"
#include "operator/controller/planner_internal.h"

namespace tfjob::op::controller {

using api::JobCondition;
using api::JobStatus;
using api::ReplicaSpec;
using api::ReplicaType;
using api::TFJob;
using namespace internal;  // NOLINT: the planner's own helpers

namespace {

// Kubeflow's exit code for a failed pod whose container has no terminated
// state (pkg/controller.v1/common/pod.go: "magic number").
constexpr int kNoExitCode = 0xbeef;

struct Builder {
  const TFJob& job;
  const std::vector<PodView>& pods;
  const std::vector<ServiceView>& services;
  Plan plan;
  std::set<std::string> deleted;

  void DeletePod(const PodView& p) {
    if (p.deleting || !deleted.insert("pod/" + p.name).second) return;
    plan.actions.push_back({Action::Kind::kDeletePod, p.name, nullptr});
  }
  void DeleteService(const ServiceView& s) {
    if (s.deleting || !deleted.insert("svc/" + s.name).second) return;
    plan.actions.push_back({Action::Kind::kDeleteService, s.name, nullptr});
  }
  void DeleteServiceNamed(const std::string& name) {
    for (const auto& s : services) {
      if (s.name == name) DeleteService(s);
    }
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
  void Event(const char* type, std::string_view reason, std::string message) {
    plan.events.push_back({type, std::string(reason), std::move(message)});
  }
};

// Kubeflow defaults only an unset policy to None; one written as "" is
// none of None and Running, so its clean-up deletes every pod (All).
api::CleanPodPolicy CleanPolicy(const TFJob& job) {
  const std::string& written = job.spec.run_policy.clean_pod_policy.value_or(std::string(api::kCleanPodPolicyNone));
  if (written.empty()) return api::CleanPodPolicy::kAll;
  return api::ParseCleanPodPolicy(written).value_or(api::CleanPodPolicy::kNone);
}

// The restart counts kept on the job (kRestartsAnnotation), by replica key.
std::map<std::string, int32_t> AnnotatedRestarts(const TFJob& job) {
  std::map<std::string, int32_t> out;
  auto it = job.metadata.annotations.find(std::string(api::kRestartsAnnotation));
  if (it == job.metadata.annotations.end()) return out;
  const auto j = nlohmann::json::parse(it->second, nullptr, false);
  if (!j.is_object()) return out;
  for (auto e = j.begin(); e != j.end(); ++e) {
    if (e->is_number_integer() && e->get<int64_t>() >= 0 && e->get<int64_t>() <= INT32_MAX) out[e.key()] = e->get<int32_t>();
  }
  return out;
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

// One pass of PlanJob: what it works from and what it builds up. Builder
// holds references to job, pods and services, so a Pass is never copied or
// moved.
struct Pass {
  Pass(const TFJob& original, Time now_tp)
      : original(original), job(Defaulted(original)), now_tp(now_tp), now(FormatRfc3339(now_tp)),
        name(job.metadata.name),
        qualified(job.metadata.namespace_.empty() ? name : job.metadata.namespace_ + "/" + name) {}
  Pass(const Pass&) = delete;
  Pass& operator=(const Pass&) = delete;

  static TFJob Defaulted(TFJob job) {
    api::SetDefaults(job);
    return job;
  }

  const TFJob& original;
  const TFJob job;
  const Time now_tp;
  const std::string now, name, qualified;
  PlannerOptions options;
  std::optional<PodGroupView> pod_group;
  std::vector<Action> adoptions;  // go first: adopted objects count as the job's in this very plan
  std::vector<PodView> pods;
  std::vector<ServiceView> services;
  Builder b{job, pods, services, {}, {}};
  JobStatus& st = b.plan.status;
};

// Only what this job controls, and the orphans it adopts: objects with its
// labels (Kubeflow's selector: job-name and operator-name) and no
// controller, as `kubectl delete tfjob --cascade=orphan` leaves them.
// Kubeflow v1.9.0 adopts orphan services only (and, without RBAC for the
// patch, not even those); an orphan pod then blocks its index forever.
void SelectOwned(Pass& p, const std::vector<PodView>& all_pods, const std::vector<ServiceView>& all_services) {
  const TFJob& job = p.job;
  auto orphan_of_this_job = [&](const std::string& controller_uid, const std::map<std::string, std::string>& labels,
                                bool deleting) {
    return !job.metadata.uid.empty() && controller_uid.empty() && !deleting &&
           LabelOf(labels, api::kJobNameLabel) == job.metadata.name &&
           LabelOf(labels, api::kOperatorNameLabel) == api::kOperatorName;
  };
  auto adopt = [&](Action::Kind kind, const std::string& object_name, const std::string& uid) {
    p.adoptions.push_back({kind, object_name,
                           {{"metadata", {{"uid", uid}, {"ownerReferences", nlohmann::json::array({OwnerRef(job)})}}}}});
  };
  // Pods and services alike: the job's own, and its orphans, adopted.
  auto select = [&](const auto& all, auto& kept, Action::Kind adoption) {
    for (const auto& o : all) {
      if (job.metadata.uid.empty() || o.controller_uid == job.metadata.uid) {
        kept.push_back(o);
      } else if (orphan_of_this_job(o.controller_uid, o.labels, o.deleting)) {
        adopt(adoption, o.name, o.uid);
        kept.push_back(o);
        kept.back().controller_uid = job.metadata.uid;
      }
    }
  };
  select(all_pods, p.pods, Action::Kind::kAdoptPod);
  select(all_services, p.services, Action::Kind::kAdoptService);
}

// A job whose pods were made without the task token (by training-operator
// before the cluster moved to this operator, or under --task-auth=false)
// keeps getting pods without it: a task holding a token refuses calls from
// tasks without one, so a re-created pod would split the job.
PlannerOptions OptionsFor(const PlannerOptions& given, const std::vector<PodView>& pods) {
  PlannerOptions options = given;
  if (options.task_auth && !pods.empty() &&
      std::none_of(pods.begin(), pods.end(), [](const PodView& p) { return p.task_token; })) {
    options.task_auth = false;
    options.task_tls = false;
  }
  return options;
}

bool Admitted(const Pass& p) {
  return p.pod_group && !p.pod_group->deleting && !p.pod_group->phase.empty() && p.pod_group->phase != "Pending";
}

// The PodGroup's actions, first in the plan: Kubeflow deletes a finished
// or suspended job's; otherwise created or brought to the desired spec.
// Volcano admits a gang as a whole: until it has (phase past Pending),
// creating pods would only park them, so this pass creates none.
void PlanPodGroup(Pass& p) {
  Plan& plan = p.b.plan;
  const bool done = IsTrue(plan.status, api::kConditionSucceeded) || IsTrue(plan.status, api::kConditionFailed) ||
                    p.job.spec.run_policy.suspend.value_or(false);
  std::vector<Action> group;
  if (done) {
    if (p.pod_group && !p.pod_group->deleting) group.push_back({Action::Kind::kDeletePodGroup, p.name, nullptr});
  } else {
    nlohmann::json desired = DesiredPodGroup(p.job, p.options, p.pod_group);
    if (!p.pod_group) {
      group.push_back({Action::Kind::kCreatePodGroup, p.name, desired});
    } else if (!p.pod_group->deleting && Field(p.pod_group->object, "spec") != desired["spec"]) {
      nlohmann::json updated = p.pod_group->object;
      updated["spec"] = desired["spec"];
      group.push_back({Action::Kind::kUpdatePodGroup, p.name, std::move(updated)});
    }
    if (IsVolcano(p.options) && !Admitted(p)) {
      std::erase_if(plan.actions, [](const Action& a) {
        return a.kind == Action::Kind::kCreatePod || a.kind == Action::Kind::kCreateService ||
               a.kind == Action::Kind::kCreateSecret || a.kind == Action::Kind::kCreateNetworkPolicy;
      });
    }
  }
  plan.actions.insert(plan.actions.begin(), group.begin(), group.end());
}

// Every pass ends here: adoptions first; the job's Secret (and
// NetworkPolicy) before any pod that needs them (creating one that exists
// is a no-op, so every pass that creates pods asks again: a deleted Secret
// comes back before new pods); the PodGroup; whether the status changed.
Plan Finish(Pass& p) {
  Plan& plan = p.b.plan;
  plan.actions.insert(plan.actions.begin(), p.adoptions.begin(), p.adoptions.end());
  const bool creates_pods = std::any_of(plan.actions.begin(), plan.actions.end(),
                                        [](const Action& a) { return a.kind == Action::Kind::kCreatePod; });
  if (creates_pods) {
    std::vector<Action> first;
    if (p.options.task_auth && api::NeedsTfConfig(p.job)) {
      first.push_back({Action::Kind::kCreateSecret, api::AuthSecretName(p.name), BuildAuthSecret(p.job)});
    }
    if (p.options.network_policy) {
      first.push_back({Action::Kind::kCreateNetworkPolicy, api::NetworkPolicyName(p.name), BuildNetworkPolicy(p.job)});
    }
    plan.actions.insert(plan.actions.begin(), first.begin(), first.end());
  }
  if (!p.options.gang_scheduler.empty()) PlanPodGroup(p);
  plan.status_changed = !SameIgnoringReconcileTime(plan.status, p.original.status);
  if (plan.status_changed) plan.status.last_reconcile_time = p.now;
  return std::move(plan);
}

// Kubeflow records no event for Created: the condition says it. Said once,
// when the job is first seen: without a gang scheduler a scheduling policy
// has nothing to act on (Kubeflow ignores it silently).
void NoteCreated(Pass& p) {
  if (FindCondition(p.st, api::kConditionCreated)) return;
  SetCondition(p.st, api::kConditionCreated, api::kConditionTrue, api::kReasonCreated, "TFJob " + p.name + " is created.",
               p.now);
  if (p.options.gang_scheduler.empty() && p.job.spec.run_policy.scheduling_policy.is_object()) {
    p.b.Event("Warning", "SchedulingPolicyIgnored",
              "TFJob " + p.name + " has runPolicy.schedulingPolicy, but the operator runs without "
              "--gang-scheduler-name: no PodGroup is created");
  }
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
bool PlanSuspended(Pass& p) {
  if (p.job.spec.run_policy.suspend.value_or(false)) {
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
  const std::string msg = past_backoff ? "Job " + p.name + " has failed because it has reached the specified backoff limit"
                                       : "Job " + p.name + " has failed because it was active longer than specified deadline";
  p.b.KillActive();
  p.b.Cleanup(CleanPolicy(p.job));
  SetCondition(p.st, api::kConditionFailed, api::kConditionTrue, api::kReasonFailed, msg, p.now);
  p.st.completion_time = p.now;
  p.b.Event("Normal", api::kReasonFailed, msg);
  ApplyTtl(p.b, p.job, p.now_tp);
  return true;
}

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
  bool cannot_build = false;  // a pod could not be built: the job has failed
};

// One replica type's observed pods by index, and the indices that have a
// service; pods and services past the replica count (scaled down, or not
// ours to keep) are deleted.
struct Observed {
  std::map<int, std::vector<const PodView*>> by_index;
  std::set<int> have_service;
};
Observed ObserveReplica(Pass& p, const std::string& type, int n) {
  Observed o;
  for (const auto& pod : p.pods) {
    if (LabelOf(pod.labels, api::kReplicaTypeLabel) != type) continue;
    auto idx = IndexOf(pod.labels);
    if (!idx || *idx >= n) {
      p.b.DeletePod(pod);
      p.b.DeleteServiceNamed(pod.name);
      continue;
    }
    o.by_index[*idx].push_back(&pod);
  }
  for (const auto& sv : p.services) {
    if (LabelOf(sv.labels, api::kReplicaTypeLabel) != type) continue;
    auto idx = IndexOf(sv.labels);
    if (!idx || *idx >= n) {
      p.b.DeleteService(sv);
      continue;
    }
    o.have_service.insert(*idx);
  }
  return o;
}

// Creates the missing pod of `spec` number `index`, with Kubeflow's
// warnings when a template sets what the replica spec (or the gang
// scheduler) decides (once a pass each). False: it cannot be built, and the
// job has failed.
bool CreatePod(Pass& p, Outcome& out, const ReplicaSpec& spec, const std::string& type, int index) {
  auto pod = BuildPod(p.job, spec, index, p.options);
  if (!pod.ok()) {
    SetCondition(p.st, api::kConditionFailed, api::kConditionTrue, api::kReasonFailed,
                 "TFJob " + p.qualified + " cannot build pod " + api::PodName(p.name, type, index) + ": " +
                     pod.status().message(),
                 p.now);
    p.st.completion_time = p.now;
    return false;
  }
  const std::string scheduler = Str((*pod)["spec"], "schedulerName");
  if (!p.options.gang_scheduler.empty() && scheduler != p.options.gang_scheduler && !out.warned_scheduler) {
    out.warned_scheduler = true;
    p.b.Event("Warning", "SetPodTemplateSchedulerName",
              "Another scheduler is specified when gang-scheduling is enabled and it will not be overwritten");
  }
  if (!Str(Field(spec.template_json, "spec"), "restartPolicy").empty() && !out.warned_restart_policy) {
    out.warned_restart_policy = true;
    p.b.Event("Warning", "SetPodTemplateRestartPolicy",
              "Restart policy in pod template will be overwritten by restart policy in replica spec");
  }
  p.b.plan.actions.push_back({Action::Kind::kCreatePod, api::PodName(p.name, type, index), std::move(pod).value()});
  return true;
}

// Per replica type, how its pods stand this pass.
struct ReplicaCounts {
  int failed = 0, restarting = 0, succeeded = 0, running = 0;
  bool worker0_succeeded = false;
};

// An existing pod of a replica: counted by phase; a failed one restarted
// (deleted, re-created next pass) when its policy retries it. More than one
// pod for an index (a stale cache raced a create): the first is the
// picture, never another create.
void ObservePod(Pass& p, Outcome& out, const std::string& key, api::RestartPolicy policy, int index, const PodView& pod,
                api::ReplicaStatus& rs, ReplicaCounts& c) {
  if (pod.deleting) return;
  if (pod.terminated_code) {
    p.b.Event("Normal", "ExitedWithCode",
              "Pod: " + p.job.metadata.namespace_ + "." + pod.name + " exited with code " +
                  std::to_string(*pod.terminated_code));
  }
  if (pod.phase != "Succeeded" && pod.phase != "Failed" && !pod.abnormal_message.empty()) {
    p.b.Event("Warning", pod.abnormal_reason, pod.abnormal_message);
  }
  if (pod.phase == "Running") {
    ++rs.active;
    ++c.running;
  } else if (pod.phase == "Succeeded") {
    ++rs.succeeded;
    ++c.succeeded;
    if (index == 0 && pod.exit_code.value_or(0) == 0) c.worker0_succeeded = true;
  } else if (pod.phase == "Failed") {
    // A failed pod whose tensorflow container never terminated (evicted
    // before it started, refused by the kubelet's admission, a node
    // shutdown) counts as exit code 0xbeef under ExitCode, as in Kubeflow:
    // >= 128, retryable.
    const bool retryable = policy == api::RestartPolicy::kExitCode
                               ? pod.exit_code.value_or(kNoExitCode) >= 128
                               : policy == api::RestartPolicy::kOnFailure || policy == api::RestartPolicy::kAlways;
    if (retryable) {
      p.b.DeletePod(pod);
      ++rs.restarts;
      ++c.restarting;
    } else {
      ++rs.failed;
      ++c.failed;
      if (policy == api::RestartPolicy::kExitCode && out.exit_code_failure.empty()) {
        out.exit_code_failure = "job \"" + p.name + "\" is failing because \"" + key + "\" replica(s) failed.";
      }
    }
  }
}

// One replica type: services and pods created where missing, existing pods
// counted, and what that means for the job. False: a pod could not be built.
bool PlanReplica(Pass& p, Outcome& out, const ReplicaSpec& spec) {
  const std::string type = api::TypeLabel(spec);
  const std::string key = api::CanonicalKey(spec);
  const int n = api::ReplicasOrDefault(spec);
  const auto policy = api::ParseRestartPolicy(spec.restart_policy).value_or(api::RestartPolicy::kNever);
  api::ReplicaStatus rs;
  if (auto it = p.st.replica_statuses.find(key); it != p.st.replica_statuses.end()) rs = it->second;
  rs.active = rs.succeeded = rs.failed = 0;
  rs.selector = api::Selector(p.name, type);

  const Observed o = ObserveReplica(p, type, n);
  ReplicaCounts c;
  for (int i = 0; i < n; ++i) {
    if (!o.have_service.count(i)) {
      p.b.plan.actions.push_back({Action::Kind::kCreateService, api::ServiceName(p.name, type, i), BuildService(p.job, spec, i)});
    }
    auto it = o.by_index.find(i);
    if (it == o.by_index.end()) {
      if (!CreatePod(p, out, spec, type, i)) return false;
      continue;
    }
    ObservePod(p, out, key, policy, i, *it->second.front(), rs, c);
  }
  out.restart_counts[key] = rs.restarts;
  out.statuses[key] = rs;
  if (c.restarting > 0) {
    const std::string msg = "job " + p.name + " is restarting because " + key + " replica(s) failed.";
    p.b.Event("Warning", api::kReasonRestarting, msg);
    if (out.restarting_msg.empty()) out.restarting_msg = msg;
  }
  // Kubeflow's enableDynamicWorker: failed workers do not fail the job (an
  // ExitCode failure for good still does).
  const bool dynamic_workers = p.job.spec.enable_dynamic_worker.value_or(false);
  if (c.failed > 0 && !(dynamic_workers && spec.type == ReplicaType::kWorker && out.exit_code_failure.empty())) {
    out.failed_msgs.push_back(std::to_string(c.failed) + " " + key + " replica(s) failed.");
  }
  // Success and Running follow the chief, or worker(s) without one
  // (Kubeflow: nothing left expected, or worker 0 done).
  if (spec.type == ReplicaType::kChief) {
    if (c.succeeded == n) out.succeeded = true;
    if (c.running > 0) out.running = true;
  } else if (!out.has_chief && spec.type == ReplicaType::kWorker) {
    const bool all = p.job.spec.success_policy.value_or("") == api::kSuccessPolicyAllWorkers;
    if (c.succeeded == n || (!all && c.worker0_succeeded)) out.succeeded = true;
    if (c.running > 0) out.running = true;
  }
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
                          {Action::Kind::kPatchJob, p.name,
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
    SetCondition(p.st, api::kConditionRestarting, api::kConditionTrue, api::kReasonRestarting, out.restarting_msg, p.now);
  } else if (out.running) {
    SetCondition(p.st, api::kConditionRunning, api::kConditionTrue, api::kReasonRunning,
                 "TFJob " + p.qualified + " is running.", p.now);
  }
  const auto& deadline = p.job.spec.run_policy.active_deadline_seconds;
  std::optional<Time> start = ParseRfc3339(p.st.start_time);
  if (deadline && start) {
    const Time end = *start + std::chrono::seconds(*deadline);
    p.b.plan.requeue_after = std::chrono::ceil<std::chrono::seconds>(end - p.now_tp);
  }
}

}  // namespace

Plan PlanJob(const TFJob& original, const std::vector<PodView>& all_pods, const std::vector<ServiceView>& all_services,
             Time now_tp, const PlannerOptions& given_options, const std::optional<PodGroupView>& observed_pod_group) {
  Plan skipped;
  skipped.status = original.status;
  skipped.skipped = true;
  if (!original.metadata.deletion_timestamp.empty()) return skipped;
  if (original.spec.run_policy.managed_by && !original.spec.run_policy.managed_by->empty() &&
      *original.spec.run_policy.managed_by != api::kManagedByKubeflow) {
    return skipped;
  }

  Pass p(original, now_tp);
  SelectOwned(p, all_pods, all_services);
  p.options = OptionsFor(given_options, p.pods);
  if (observed_pod_group && (p.job.metadata.uid.empty() || observed_pod_group->controller_uid == p.job.metadata.uid)) {
    p.pod_group = observed_pod_group;
  }
  p.b.plan.status = p.job.status;

  NoteCreated(p);
  // What the CRD schema cannot express, checked here: the job fails, naming the field.
  if (auto errors = api::Validate(p.job); !errors.empty()) {
    if (!IsTrue(p.st, api::kConditionFailed)) {
      const std::string msg = "TFJob " + p.qualified + " is invalid: " + api::ToMessage(errors);
      SetCondition(p.st, api::kConditionFailed, api::kConditionTrue, api::kReasonFailedValidation, msg, p.now);
      if (p.st.completion_time.empty()) p.st.completion_time = p.now;
      p.b.Event("Warning", api::kReasonFailedValidation, msg);
    }
    return Finish(p);
  }
  if (IsTrue(p.st, api::kConditionSucceeded) || IsTrue(p.st, api::kConditionFailed)) {
    PlanFinished(p);
    return Finish(p);
  }
  if (PlanSuspended(p)) return Finish(p);
  // Kubeflow starts the clock (startTime, so activeDeadlineSeconds) when it
  // first creates pods: with Volcano, once the PodGroup is admitted.
  if (p.st.start_time.empty() && (!IsVolcano(p.options) || Admitted(p))) p.st.start_time = p.now;

  const std::map<std::string, int32_t> annotated = AnnotatedRestarts(p.job);
  if (PlanLimits(p, CountRestarts(p, annotated))) return Finish(p);

  Outcome out;
  for (const auto& spec : p.job.spec.replica_specs) out.has_chief |= spec.type == ReplicaType::kChief;
  for (const ReplicaSpec& spec : p.job.spec.replica_specs) {
    if (spec.type && !PlanReplica(p, out, spec)) return Finish(p);
  }
  p.st.replica_statuses = out.statuses;
  RecordRestarts(p, annotated, out);
  Conclude(p, out);
  return Finish(p);
}

}  // namespace tfjob::op::controller

#include "operator/controller/planner.h"

#include <algorithm>
#include <climits>
#include <set>

#include "common/time.h"
#include "contract/exit_codes.h"
#include "operator/api/defaults.h"
#include "operator/api/names.h"
#include "operator/api/validation.h"
#include "operator/controller/builders.h"
#include "operator/controller/conditions.h"
#include "operator/controller/kueue_workload.h"
#include "operator/controller/planner_pass.h"
#include "operator/controller/pod_group.h"
#include "operator/controller/views.h"

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
    p.adoptions.push_back(
        {kind,
         object_name,
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
  if (KueueManaged(p)) FinishKueue(p);
  plan.status_changed = !SameIgnoringReconcileTime(plan.status, p.original.status);
  if (plan.status_changed) plan.status.last_reconcile_time = p.now;
  return std::move(plan);
}

// A scheduling policy with a field only a gang scheduler reads. Not
// priorityClass alone: Kueue takes it as the job's priority (Kueue v0.19.2,
// pkg/controller/jobs/kubeflow/kubeflowjob/kubeflowjob_controller.go,
// KubeflowJob.PriorityClass), with or without a gang scheduler.
bool HasGangOnlyFields(const nlohmann::json& policy) {
  if (!policy.is_object()) return false;
  for (auto it = policy.begin(); it != policy.end(); ++it) {
    if (it.key() != "priorityClass") return true;
  }
  return false;
}

// Kubeflow records no event for Created: the condition says it. Said once,
// when the job is first seen: without a gang scheduler a scheduling policy
// has nothing to act on (Kubeflow ignores it silently).
void NoteCreated(Pass& p) {
  if (FindCondition(p.st, api::kConditionCreated)) return;
  SetCondition(p.st, api::kConditionCreated, api::kConditionTrue, api::kReasonCreated,
               "TFJob " + p.name + " is created.", p.now);
  if (p.options.gang_scheduler.empty() && HasGangOnlyFields(p.job.spec.run_policy.scheduling_policy)) {
    p.b.Event("Warning", "SchedulingPolicyIgnored",
              "TFJob " + p.name +
                  " has runPolicy.schedulingPolicy, but the operator runs without "
                  "--gang-scheduler-name: no PodGroup is created");
  }
}

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
  auto pod = BuildPod(p.job, spec, index, p.options, p.now_tp);
  if (!pod.ok()) {
    SetCondition(p.st, api::kConditionFailed, api::kConditionTrue, api::kReasonFailed,
                 "TFJob " + p.qualified + " cannot build pod " + api::PodName(p.name, type, index) + ": " +
                     pod.status().message(),
                 p.now);
    p.st.completion_time = p.now;
    return false;
  }
  // Kueue's admission: the pod set's flavors and the admission checks' updates.
  if (auto placed = p.kueue_placement.find(type); placed != p.kueue_placement.end()) {
    ApplyPlacement(*pod, placed->second);
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
    // training-operator v1.9.0's IsWorker0Completed
    // (pkg/controller.v1/tensorflow/tfjob_controller.go, with
    // getContainerExitCode in tensorflow/util.go): a Succeeded pod whose
    // container has no terminated state reads as exit code 0xbeef and is not
    // complete. (Its lastState is read too, as for every exit code here; a
    // Succeeded pod's containers have all terminated, so both say the same.)
    if (index == 0 && pod.exit_code.value_or(kNoExitCode) == 0) c.worker0_succeeded = true;
  } else if (pod.phase == "Failed") {
    // A failed pod whose tensorflow container never terminated (evicted
    // before it started, refused by the kubelet's admission, a node
    // shutdown) counts as exit code 0xbeef under ExitCode, as in Kubeflow:
    // >= 128, retryable.
    const bool retryable = policy == api::RestartPolicy::kExitCode
                               ? contract::IsRetryableExitCode(pod.exit_code.value_or(kNoExitCode))
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

// The succeeded indices (api::kSucceededAnnotation), like the restart
// counts: a succeeded pod removed afterwards (the pod garbage collector,
// `kubectl delete`, a drained node) leaves its index succeeded, with no new
// pod. training-operator v1.9.0 keeps no such record: its ReconcilePods
// (pkg/controller.v1/common/pod.go) creates a pod for every index that has
// none, so the replica runs again (kubeflow/trainer #1186, #1997).
using api::kSucceededAnnotation;

std::map<std::string, std::set<int>> RecordedSucceeded(const TFJob& job) {
  return RecordedIndices(job, kSucceededAnnotation);
}

// Adds this pass's succeeded pods to the record (a kPatchJob, carried out
// before the pass's other actions; the pass stops if it fails). Not once
// the job has finished: a finished job starts nothing, so nothing reads it.
void RecordSucceeded(Pass& p) {
  if (IsTrue(p.st, api::kConditionSucceeded) || IsTrue(p.st, api::kConditionFailed)) return;
  std::map<std::string, std::set<int>> record = RecordedSucceeded(p.job);
  bool grew = false;
  for (const ReplicaSpec& spec : p.job.spec.replica_specs) {
    if (!spec.type) continue;
    const std::string type = api::TypeLabel(spec);
    for (const auto& pod : p.pods) {
      if (pod.phase != "Succeeded" || LabelOf(pod.labels, api::kReplicaTypeLabel) != type) continue;
      const auto idx = IndexOf(pod.labels);
      if (idx && *idx < api::ReplicasOrDefault(spec)) grew |= record[api::CanonicalKey(spec)].insert(*idx).second;
    }
  }
  if (!grew) return;
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [key, indices] : record) j[key] = indices;
  p.b.plan.actions.push_back({Action::Kind::kPatchJob,
                              p.name,
                              {{"metadata", {{"annotations", {{std::string(kSucceededAnnotation), j.dump()}}}}}}});
}

// A suspended job's pods are all deleted and, as in Kubeflow, all run again
// on resume: the record goes with them.
void ForgetSucceeded(Pass& p) {
  if (!p.job.metadata.annotations.count(std::string(kSucceededAnnotation))) return;
  p.b.plan.actions.push_back({Action::Kind::kPatchJob,
                              p.name,
                              {{"metadata", {{"annotations", {{std::string(kSucceededAnnotation), nullptr}}}}}}});
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
  const std::set<int> recorded = RecordedSucceeded(p.job)[key];
  ReplicaCounts c;
  for (int i = 0; i < n; ++i) {
    auto it = o.by_index.find(i);
    if (recorded.count(i) && (it == o.by_index.end() || it->second.front()->deleting)) {
      // Succeeded, its pod since removed: it stays succeeded (not worker 0's
      // completion, which v1.9.0 reads from the pod itself).
      ++rs.succeeded;
      ++c.succeeded;
      continue;
    }
    if (!o.have_service.count(i)) {
      p.b.plan.actions.push_back(
          {Action::Kind::kCreateService, api::ServiceName(p.name, type, i), BuildService(p.job, spec, i)});
    }
    if (it == o.by_index.end()) {
      if (!CreatePod(p, out, spec, type, i)) return false;
      continue;
    }
    ObservePod(p, out, key, policy, i, *it->second.front(), rs, c);
    ObservePending(p, out, key, i, *it->second.front());
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

}  // namespace

Plan PlanJob(const TFJob& original, const std::vector<PodView>& all_pods, const std::vector<ServiceView>& all_services,
             Time now_tp, const PlannerOptions& given_options, const std::optional<PodGroupView>& observed_pod_group,
             const ObservedKueue& observed_kueue, const ObservedNodes& nodes) {
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
  p.kueue.flavors = observed_kueue.flavors;
  if (observed_kueue.workload &&
      (p.job.metadata.uid.empty() || observed_kueue.workload->controller_uid == p.job.metadata.uid)) {
    p.kueue.workload = observed_kueue.workload;
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
  if (KueueManaged(p)) PlanKueue(p);
  if (PlanSuspended(p)) {
    ForgetSucceeded(p);
    ConcludePending(p, Outcome{});  // its pods are gone: none waits
    return Finish(p);
  }
  // Kubeflow starts the clock (startTime, so activeDeadlineSeconds) when it
  // first creates pods: with Volcano, once the PodGroup is admitted.
  if (p.st.start_time.empty() && (!IsVolcano(p.options) || Admitted(p))) p.st.start_time = p.now;

  const std::map<std::string, int32_t> annotated = AnnotatedRestarts(p.job);
  if (PlanLimits(p, CountRestarts(p, annotated))) {
    ConcludePending(p, Outcome{});
    return Finish(p);
  }

  PlanUnreachableNodes(p, nodes);
  Outcome out;
  for (const auto& spec : p.job.spec.replica_specs) out.has_chief |= spec.type == ReplicaType::kChief;
  for (const ReplicaSpec& spec : p.job.spec.replica_specs) {
    if (spec.type && !PlanReplica(p, out, spec)) return Finish(p);
  }
  p.st.replica_statuses = out.statuses;
  RecordRestarts(p, annotated, out);
  Conclude(p, out);
  ConcludePending(p, out);
  RecordSucceeded(p);
  return Finish(p);
}

}  // namespace tfjob::op::controller

// The reconcile planner: a pure function from (TFJob, observed pods and
// services, now) to the actions that move the world toward the job's spec
// and the status the job should then have. No client, no clock, no I/O: the
// reconciler (and `tfjob run`'s process backend) executes the actions, and
// table tests check every policy without either.
//
// Semantics follow Kubeflow's training-operator for TFJob, closing its known
// gaps (DESIGN.md section 2):
//   - restartPolicy Always / OnFailure are kubelet restarts in place (the pod
//     spec carries the policy); ExitCode deletes a failed pod whose exit code
//     is >= 128 (signals, OOM, preemption) so it is recreated, and fails the
//     job on 1..127; Never fails the job on any failed replica.
//   - backoffLimit counts every restart: container restarts of OnFailure /
//     Always pods AND the operator's ExitCode re-creations, which Kubeflow
//     forgets; those are kept in status.replicaStatuses[type].restarts.
//   - activeDeadlineSeconds is enforced by a timed requeue
//     (Plan::requeue_after), not on the next unrelated event.
//   - success: every chief replica succeeded; without a chief, worker 0
//     (or every worker with successPolicy AllWorkers).
//   - finished jobs: cleanPodPolicy All / Running / None, then
//     ttlSecondsAfterFinished deletes the TFJob (again by timed requeue).
//   - suspend deletes pods and services and sets Suspended; resume restarts
//     the clock (startTime) as Kubeflow does.
//   - managedBy other than Kubeflow's controller: hands off entirely.
//   - never a duplicate pod: an index with any pod (even one being deleted)
//     gets no new pod until that pod is gone.
//   - a succeeded replica stays succeeded: its index is recorded on the job
//     (api::kSucceededAnnotation), and a succeeded pod deleted later (pod
//     GC, a drained node) is not re-created while the job runs; suspending
//     forgets the record (everything runs again on resume, as in Kubeflow).
//   - gang scheduling (PlannerOptions::gang_scheduler, Kubeflow's
//     --gang-scheduler-name): a PodGroup named after the job, owned by it,
//     kept at Kubeflow's spec (minMember: the sum of replicas unless
//     schedulingPolicy.minAvailable says otherwise; Volcano: queue, default
//     "default" and never changed once set, and priorityClassName;
//     scheduler-plugins: scheduleTimeoutSeconds; both: minResources when
//     schedulingPolicy gives it), deleted when the job finishes or is
//     suspended. Pods get the scheduler's schedulerName unless their template
//     names one (a Warning event says it is kept), and Volcano's group-name
//     and task-spec annotations or scheduler-plugins' pod-group label. With
//     Volcano no pod or service is created until the PodGroup's phase is
//     past Pending (Volcano has admitted the whole gang).
//   - Kueue's external integration (PlannerOptions::kueue, kueue_workload.h):
//     a job labelled kueue.x-k8s.io/queue-name gets its Workload and no pod
//     until the Workload is admitted; eviction suspends it.
// Thread-safety: pure; reentrant.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/api/types.h"

namespace tfjob::op::controller {

using Time = std::chrono::system_clock::time_point;

// What the planner needs of a pod (the reconciler extracts it from JSON).
struct PodView {
  std::string name;
  std::string uid;
  std::map<std::string, std::string> labels;
  std::string phase;  // Pending, Running, Succeeded, Failed, Unknown
  // The "tensorflow" container's last termination exit code, if terminated.
  std::optional<int> exit_code;
  // Its current state's exit code only (not lastState): what Kubeflow's
  // ExitedWithCode event reports.
  std::optional<int> terminated_code;
  int32_t restart_count = 0;  // sum over the pod's containers
  // Kubeflow's RecordAbnormalPods: why this pod looks stuck or broken (a
  // container that terminated with an error or waits with a message, e.g.
  // ImagePullBackOff; else its newest condition that is not True), as an
  // event's reason and message. Empty when nothing is wrong.
  std::string abnormal_reason, abnormal_message;
  bool deleting = false;       // metadata.deletionTimestamp set
  std::string controller_uid;  // ownerReference with controller=true
  std::string node_name;       // spec.nodeName: "" until the scheduler binds it
  // metadata.creationTimestamp: a Pending pod's wait is counted from it.
  std::optional<Time> created;
  // Why a Pending pod waits, in its own words: the scheduler's
  // (PodScheduled False, e.g. Unschedulable "0/2 nodes are available: ...")
  // or else a waiting container's (ErrImageNeverPull, ImagePullBackOff).
  std::string pending_reason, pending_message;
  // The tensorflow container has the task token variable: false for pods
  // made by training-operator (or with --task-auth off).
  bool task_token = false;
};

struct ServiceView {
  std::string name;
  std::string uid;
  std::map<std::string, std::string> labels;
  bool deleting = false;
  std::string controller_uid;
};

PodView ViewPod(const nlohmann::json& pod);

// A node as the planner sees it: its Ready condition (status "True",
// "False" or "Unknown"; "" when it has none) and since when it says so.
struct NodeView {
  std::string name;
  std::string ready;
  std::optional<Time> ready_since;
};
NodeView ViewNode(const nlohmann::json& node);
// The nodes the job's pods are bound to, by name (the others need not be
// there); a pod whose node is absent is left to Kubernetes' pod garbage
// collector, which deletes pods bound to nodes that no longer exist.
using ObservedNodes = std::map<std::string, NodeView>;
ServiceView ViewService(const nlohmann::json& service);

// The job's PodGroup as observed (named after the job).
struct PodGroupView {
  std::string controller_uid;
  bool deleting = false;
  std::string phase;      // status.phase: "" until the scheduler sees it, Pending, Inqueue, Running, ...
  nlohmann::json object;  // the whole object (an update starts from it)
};
PodGroupView ViewPodGroup(const nlohmann::json& pod_group);

// The job's Kueue Workload as observed (kueue.x-k8s.io/v1beta1; --kueue=external).
struct WorkloadView {
  std::string name;
  std::string controller_uid;
  bool deleting = false;
  nlohmann::json object;  // the whole object: spec, status, resourceVersion
};
WorkloadView ViewWorkload(const nlohmann::json& workload);

// What the planner sees of Kueue in external mode: the job's Workload (the
// one the job controls; none when it has none) and every ResourceFlavor's
// spec by name (their nodeLabels and tolerations place admitted pods).
struct ObservedKueue {
  std::optional<WorkloadView> workload;
  std::map<std::string, nlohmann::json> flavors;
};

// Kubeflow's gang schedulers: "volcano", or any other scheduler name for
// the scheduler-plugins' coscheduling (e.g. "scheduler-plugins").
inline constexpr std::string_view kGangSchedulerVolcano = "volcano";
// The PodGroup resource for a --gang-scheduler-name ("" for none).
struct PodGroupResource {
  std::string group, version, kind;
};
PodGroupResource PodGroupResourceFor(const std::string& gang_scheduler);

// A pod or service with Kubeflow's labels for the job but no controller:
// left by `kubectl delete tfjob --cascade=orphan`, or made by hand.
// kAdoptPod / kAdoptService patch it to be owned by the job.
struct Action {
  // kCreateSecret: the job's task-token Secret; the executor fills in a
  // random token (the planner has no randomness), and one that exists
  // already is kept; with PlannerOptions::task_tls also the job's TLS
  // material, added to an existing Secret that lacks it. The executor
  // creates none of the plan's pods when this action fails.
  // kCreateNetworkPolicy: the job's NetworkPolicy.
  // kCreatePodGroup / kUpdatePodGroup / kDeletePodGroup: the job's PodGroup
  // (the update carries the observed resourceVersion: a 409 requeues).
  enum class Kind {
    kCreatePod,
    kCreateService,
    kDeletePod,
    // A delete with no grace period (gracePeriodSeconds 0): a pod bound to
    // a node that stays unreachable (PlannerOptions::node_unreachable_grace),
    // which a graceful delete would leave Terminating for good.
    kForceDeletePod,
    kDeleteService,
    kDeleteJob,
    kCreateSecret,
    kCreateNetworkPolicy,
    kCreatePodGroup,
    kUpdatePodGroup,
    kDeletePodGroup,
    // A merge patch of the pod's or service's metadata: the job's
    // controller reference (and the object's uid, a precondition).
    kAdoptPod,
    kAdoptService,
    // A merge patch of the TFJob's own metadata (the ExitCode restart
    // counts, kRestartsAnnotation; the succeeded indices,
    // kSucceededAnnotation): carried out before any other action,
    // and the pass stops when it fails, so a restart is never carried out
    // uncounted.
    kPatchJob,
    // --kueue=external (kueue_workload.h): the job's Workload created (the
    // executor fills spec.priority from spec.priorityClassName's
    // PriorityClass), deleted, or its status merge-patched (the patch
    // carries the observed resourceVersion: a 409 requeues); and a merge
    // patch of the TFJob's spec (runPolicy.suspend).
    kCreateWorkload,
    kDeleteWorkload,
    kPatchWorkloadStatus,
    kPatchJobSpec
  };
  Kind kind;
  std::string name;       // object to create or delete
  nlohmann::json object;  // for creates: the full object
};

struct Event {
  std::string type;  // Normal | Warning
  std::string reason;
  std::string message;
};

struct PlannerOptions {
  std::string cluster_domain;  // "" -> "{pod}.{ns}.svc"
  // Overrides every task's "host:port" in TF_CONFIG (`tfjob run` uses
  // 127.0.0.1 and a port per replica).
  std::function<std::string(const api::ReplicaSpec& spec, int index)> address;
  // Task-to-task authentication (services/rpc/auth.h): before pods are
  // created, a Secret "{job}-tfjob-auth" owned by the job holds a random
  // token, and every tensorflow container gets TFJOB_AUTH_TOKEN from it
  // (jobs of more than one replica: one alone has no peers).
  bool task_auth = true;
  // Mutual TLS between the job's tasks, on top of the token (needs
  // task_auth: the material lives in the same Secret, so it is off without
  // it). The executor puts the job's CA certificate, task certificate and
  // key (common/pki.h) into the Secret as ca.crt, tls.crt and tls.key; every
  // tensorflow container mounts them read-only from a Secret volume
  // "tfjob-tls" at /etc/tfjob/tls and gets TFJOB_TLS_DIR=/etc/tfjob/tls
  // (a template's volume or mount of that name or path is replaced).
  // Same jobs as the token; TF_CONFIG is unchanged.
  bool task_tls = false;
  // A NetworkPolicy owned by the job: its pods accept connections from the
  // job's own pods, and from anywhere only on their other declared ports
  // (metrics), never on tfjob-port.
  bool network_policy = false;
  // Gang scheduling: "" off, "volcano", or a scheduler-plugins scheduler name.
  std::string gang_scheduler;
  // Kueue: "" (a queued job is Kueue's built-in integration's business) or
  // kKueueExternal: the operator manages the Workloads of jobs labelled
  // kueue.x-k8s.io/queue-name itself (kueue_workload.h, docs/kueue.md).
  std::string kueue;
  // A pod Pending this long after its creation (unschedulable, its image
  // missing): a Warning event PodPendingTimeout and the job's PodsPending
  // condition name it and why it waits, and the job is planned again when a
  // pending pod reaches the timeout. Zero: off. (--pending-timeout-seconds)
  std::chrono::seconds pending_timeout{0};
  // Such a pod is deleted so that the next pass creates it again, once per
  // replica index over the job's life (api::kPendingRecreatedAnnotation).
  // (--recreate-pending-pods)
  bool recreate_pending = false;
  // A pod bound to a node whose Ready condition has not been True for this
  // long is deleted with no grace period, so that the next pass creates it
  // again (elsewhere: the node's NoExecute taint keeps the scheduler away).
  // Kubernetes itself only marks such pods Terminating, where they stay
  // until the kubelet returns (kubeflow/trainer #720, #956, #2072). Zero:
  // off. (--node-unreachable-grace-seconds)
  std::chrono::seconds node_unreachable_grace{0};
};
inline constexpr std::string_view kKueueExternal = "external";

struct Plan {
  std::vector<Action> actions;
  std::vector<Event> events;
  api::JobStatus status;        // the status the job should have
  bool status_changed = false;  // differs from the observed one (ignoring lastReconcileTime)
  std::optional<std::chrono::seconds> requeue_after;
  bool skipped = false;  // managed by another controller, or being deleted
};

// `pod_group`: the job's PodGroup when gang scheduling is on and it exists.
// `kueue`: the job's Workload and the ResourceFlavors with --kueue=external.
// `nodes`: the nodes the job's pods are bound to, when
// options.node_unreachable_grace is on.
Plan PlanJob(const api::TFJob& job, const std::vector<PodView>& pods, const std::vector<ServiceView>& services,
             Time now, const PlannerOptions& options = {}, const std::optional<PodGroupView>& pod_group = std::nullopt,
             const ObservedKueue& kueue = ObservedKueue{}, const ObservedNodes& nodes = ObservedNodes{});

}  // namespace tfjob::op::controller

// The TFJob resource (kubeflow.org/v1, kind TFJob) as the operator and the
// local runner see it.
//
// The model is deliberately a *view* over the original JSON document: `raw`
// keeps everything the API server sent, including fields this model does not
// know (managedFields, new upstream fields, the whole pod template). Decode
// fills the typed fields from `raw`; Encode writes the typed fields back over
// a copy of `raw` (see codec.h). Nothing is lost on a read-modify-write.
//
// Policy-like fields (restartPolicy, cleanPodPolicy, successPolicy, condition
// types) are kept as the strings the user wrote, as in Kubeflow's Go types,
// so that a value outside the known set survives decoding and Validate can
// name it. Code that runs after Validate compares them against the constants
// below or uses the Parse* helpers.
//
// Thread-safety: plain values; const access from many threads is safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace tfjob::op::api {

inline constexpr std::string_view kGroup = "kubeflow.org";
inline constexpr std::string_view kVersion = "v1";
inline constexpr std::string_view kApiVersion = "kubeflow.org/v1";
inline constexpr std::string_view kKind = "TFJob";
inline constexpr std::string_view kPlural = "tfjobs";
inline constexpr std::string_view kSingular = "tfjob";
inline constexpr std::string_view kListKind = "TFJobList";

// The container that runs TensorFlow, and its port (Kubeflow's constants).
inline constexpr std::string_view kDefaultContainerName = "tensorflow";
inline constexpr std::string_view kDefaultPortName = "tfjob-port";
inline constexpr int32_t kDefaultPort = 2222;

// ---------------------------------------------------------------- Replica types

// "Master" is not a separate type: it is an alias of Chief that Kubeflow still
// accepts. ReplicaSpec::master_alias remembers it (see names.h for how it is
// named on the wire).
enum class ReplicaType { kChief, kPS, kWorker, kEvaluator };

// The order every helper uses: TF_CONFIG's cluster, validation, planning.
inline constexpr ReplicaType kReplicaTypes[] = {ReplicaType::kChief, ReplicaType::kPS, ReplicaType::kWorker,
                                                ReplicaType::kEvaluator};

// "Chief", "PS", "Worker", "Evaluator".
std::string_view CanonicalName(ReplicaType type);
// "chief", "ps", "worker", "evaluator": label values, pod names, TF_CONFIG.
std::string_view LowerName(ReplicaType type);

// A tfReplicaSpecs key, matched case-insensitively. "master" (any case) gives
// kChief with *is_master = true. nullopt for anything else.
std::optional<ReplicaType> ParseReplicaType(std::string_view key, bool* is_master = nullptr);

// ------------------------------------------------------------ Policy strings

inline constexpr std::string_view kRestartPolicyAlways = "Always";
inline constexpr std::string_view kRestartPolicyOnFailure = "OnFailure";
inline constexpr std::string_view kRestartPolicyNever = "Never";
// Exit codes 1..127 are permanent failures, >= 128 retryable.
inline constexpr std::string_view kRestartPolicyExitCode = "ExitCode";
enum class RestartPolicy { kAlways, kOnFailure, kNever, kExitCode };
std::optional<RestartPolicy> ParseRestartPolicy(std::string_view s);  // exact, case-sensitive
std::string_view ToString(RestartPolicy p);

inline constexpr std::string_view kCleanPodPolicyAll = "All";
inline constexpr std::string_view kCleanPodPolicyRunning = "Running";
inline constexpr std::string_view kCleanPodPolicyNone = "None";
enum class CleanPodPolicy { kAll, kRunning, kNone };
std::optional<CleanPodPolicy> ParseCleanPodPolicy(std::string_view s);
std::string_view ToString(CleanPodPolicy p);

inline constexpr std::string_view kSuccessPolicyDefault = "";
inline constexpr std::string_view kSuccessPolicyAllWorkers = "AllWorkers";

// spec.runPolicy.managedBy values Kubeflow accepts; absent means the former.
inline constexpr std::string_view kManagedByKubeflow = "kubeflow.org/training-operator";
inline constexpr std::string_view kManagedByMultiKueue = "kueue.x-k8s.io/multikueue";

// --------------------------------------------------------------- Conditions

inline constexpr std::string_view kConditionCreated = "Created";
inline constexpr std::string_view kConditionRunning = "Running";
inline constexpr std::string_view kConditionRestarting = "Restarting";
inline constexpr std::string_view kConditionSucceeded = "Succeeded";
inline constexpr std::string_view kConditionFailed = "Failed";
inline constexpr std::string_view kConditionSuspended = "Suspended";
// Not Kubeflow's (--pending-timeout-seconds, docs/operations.md): True while
// a pod of the job has been Pending past the timeout, naming it and why it
// waits. Kept before the newest condition, so that the STATE column
// (.status.conditions[-1:].type) reads as Kubeflow's.
inline constexpr std::string_view kConditionPodsPending = "PodsPending";

// Kubeflow builds reasons as kind + reason ("TFJob" + "Created").
inline constexpr std::string_view kReasonCreated = "TFJobCreated";
inline constexpr std::string_view kReasonRunning = "TFJobRunning";
inline constexpr std::string_view kReasonRestarting = "TFJobRestarting";
inline constexpr std::string_view kReasonSucceeded = "TFJobSucceeded";
inline constexpr std::string_view kReasonFailed = "TFJobFailed";
inline constexpr std::string_view kReasonFailedValidation = "TFJobFailedValidation";
inline constexpr std::string_view kReasonSuspended = "TFJobSuspended";
inline constexpr std::string_view kReasonResumed = "TFJobResumed";
inline constexpr std::string_view kReasonPodPendingTimeout = "PodPendingTimeout";
inline constexpr std::string_view kReasonPodsNoLongerPending = "PodsNoLongerPending";

inline constexpr std::string_view kConditionTrue = "True";
inline constexpr std::string_view kConditionFalse = "False";

// ------------------------------------------------------------------- Types

struct OwnerReference {
  std::string api_version;
  std::string kind;
  std::string name;
  std::string uid;
  std::optional<bool> controller;
  std::optional<bool> block_owner_deletion;

  bool operator==(const OwnerReference&) const = default;
};

// The subset of metav1.ObjectMeta the operator reads or writes. Strings are
// "" when absent; timestamps are RFC 3339 text exactly as the server sent it.
struct ObjectMeta {
  std::string name;
  std::string namespace_;
  std::string uid;
  std::string resource_version;
  std::optional<int64_t> generation;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  std::string creation_timestamp;
  std::string deletion_timestamp;
  std::vector<OwnerReference> owner_references;

  bool operator==(const ObjectMeta&) const = default;
};

struct ReplicaSpec {
  // The key Encode writes under spec.tfReplicaSpecs. Decode sets it to the
  // key as written ("worker", "MASTER"); SetDefaults canonicalises it.
  std::string key;
  // The key this spec was decoded from, so Encode can find its original
  // document (and the fields it does not model). nullopt for a spec built in
  // code ("" is a key like any other).
  std::optional<std::string> source_key;
  // nullopt when `key` names no TFJob replica type (Validate rejects it).
  std::optional<ReplicaType> type;
  // The key was "Master" (any case): type is kChief.
  bool master_alias = false;
  std::optional<int32_t> replicas;  // unset means 1
  std::string restart_policy;       // "" means unset (Never)
  nlohmann::json template_json;     // the pod template, whole; null when absent

  bool operator==(const ReplicaSpec&) const = default;
};

struct RunPolicy {
  std::optional<std::string> clean_pod_policy;  // unset means None; "" (Kubeflow's quirk) cleans like All
  std::optional<int32_t> ttl_seconds_after_finished;
  std::optional<int64_t> active_deadline_seconds;
  std::optional<int32_t> backoff_limit;
  nlohmann::json scheduling_policy;  // object, passed through; null when absent
  std::optional<bool> suspend;
  std::optional<std::string> managed_by;

  bool operator==(const RunPolicy&) const = default;
};

struct TFJobSpec {
  RunPolicy run_policy;
  std::optional<std::string> success_policy;  // unset or "" is the default rule
  // In key order after Decode. Two entries may name the same type
  // ("worker" and "Worker"); Validate rejects that.
  std::vector<ReplicaSpec> replica_specs;
  // False when the document has no tfReplicaSpecs (or null), which Validate
  // rejects; an empty map is present-but-empty.
  bool has_replica_specs = false;
  std::optional<bool> enable_dynamic_worker;

  bool operator==(const TFJobSpec&) const = default;
};

struct JobCondition {
  std::string type;    // kCondition*
  std::string status;  // "True" | "False" | "Unknown"
  std::string reason;
  std::string message;
  std::string last_update_time;
  std::string last_transition_time;

  bool operator==(const JobCondition&) const = default;
};

struct ReplicaStatus {
  int32_t active = 0;
  int32_t succeeded = 0;
  int32_t failed = 0;
  // Extension (not in Kubeflow): pods the operator re-created for this
  // replica type (ExitCode restarts), so backoffLimit can count them.
  int32_t restarts = 0;
  std::string selector;           // "k=v,k=v" (names.h Selector)
  nlohmann::json label_selector;  // deprecated upstream; passed through; null when absent

  bool operator==(const ReplicaStatus&) const = default;
};

struct JobStatus {
  std::vector<JobCondition> conditions;
  // Keyed by the replica key as Kubeflow writes it ("Worker", "Master").
  std::map<std::string, ReplicaStatus> replica_statuses;
  std::string start_time;
  std::string completion_time;
  std::string last_reconcile_time;

  bool operator==(const JobStatus&) const = default;
};

struct TFJob {
  std::string api_version = std::string(kApiVersion);
  std::string kind = std::string(kKind);
  ObjectMeta metadata;
  TFJobSpec spec;
  JobStatus status;
  // The document Decode read (null for a job built in code). Encode starts
  // from it, so unknown fields anywhere are preserved.
  nlohmann::json raw;

  // The spec of `type`, or nullptr; with duplicates, the first.
  const ReplicaSpec* Find(ReplicaType type) const;
  ReplicaSpec* Find(ReplicaType type);
};

// replicas, or 1 when unset (Kubeflow's default), never negative.
int32_t ReplicasOrDefault(const ReplicaSpec& spec);

}  // namespace tfjob::op::api

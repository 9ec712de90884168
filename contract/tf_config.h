// TF_CONFIG, the one reader and the one writer (issue 46: both halves use
// them). The training cluster as TensorFlow describes it: jobs ("chief",
// "ps", "worker", ...) each holding tasks at integer indices with
// "host:port" addresses, plus this process's own task. The operator writes
// it into every pod (byte for byte as Kubeflow's training-operator v1.9.0
// does), the local launchers into every process; the runtime parses it
// once, at start-up, into a ClusterConfig and passes it down.
//
// Ownership: every type here is a plain value; copies are independent.
// Thread-safety: const access from many threads is safe; mutation needs
// external synchronisation.
// Failure: parsing and building return INVALID_ARGUMENT naming the job, task
// and text at fault (one line, TF_CONFIG errors prefixed "TF_CONFIG: ");
// lookups of absent jobs/tasks return NOT_FOUND. Nothing throws.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tfjob::contract {

// The environment variable every task finds its TF_CONFIG in.
inline constexpr const char* kTfConfigEnv = "TF_CONFIG";

// Task types the runtime can play. TensorFlow keeps "master" as a job name of
// its own (Estimator / AI Platform clusters use it for the chief), so it is
// not renamed; IsChief() treats both as the coordinator.
inline constexpr const char* kChief = "chief";
inline constexpr const char* kMaster = "master";
inline constexpr const char* kPs = "ps";
inline constexpr const char* kWorker = "worker";
inline constexpr const char* kEvaluator = "evaluator";

bool IsChief(const std::string& type);
// chief, master, ps, worker or evaluator.
bool IsKnownTaskType(const std::string& type);

struct TaskId {
  std::string type;
  int64_t index = 0;

  bool operator==(const TaskId&) const = default;
};
std::ostream& operator<<(std::ostream& os, const TaskId& t);  // "worker:1"

// OK for "host:port" (host a DNS name or IPv4 literal, or a bracketed IPv6
// literal such as "[::1]:2222"; port 1..65535); otherwise INVALID_ARGUMENT
// 'invalid address "<text>": <reason>'.
Status ValidateAddress(const std::string& address);
// OK for a TensorFlow job name: a letter, then letters, digits or '_'
// (what TF accepts in "/job:<name>" device names).
Status ValidateJobName(const std::string& job);

// Job name -> (task index -> address). A job may be sparse ({"1": addr}),
// as TF's ClusterSpec allows, or empty. Every stored name, index and address
// has been validated, so a ClusterSpec is always well formed.
class ClusterSpec {
 public:
  ClusterSpec() = default;

  // Dense jobs (tasks 0..n-1) from lists; any invalid entry fails the whole.
  static StatusOr<ClusterSpec> FromLists(const std::map<std::string, std::vector<std::string>>& jobs);

  // Adds task `index` of `job`, creating the job. ALREADY_EXISTS when that
  // task is already defined; INVALID_ARGUMENT for a bad name, index or
  // address ('job "worker" task 1: invalid address ...').
  Status AddTask(const std::string& job, int64_t index, const std::string& address);
  // Adds a dense job; ALREADY_EXISTS if the job exists. An empty list defines
  // a job with no tasks, as TF permits.
  Status AddJob(const std::string& job, const std::vector<std::string>& addresses);

  // Canonical order: chief, master, ps, worker, evaluator, then the rest
  // alphabetically. The serialiser writes jobs in this order.
  std::vector<std::string> JobNames() const;
  bool HasJob(const std::string& job) const;
  // 0 for an absent job.
  int64_t NumTasks(const std::string& job) const;
  // Ascending; empty for an absent job.
  std::vector<int64_t> TaskIndices(const std::string& job) const;
  // True when the job's indices are exactly 0..n-1 (also for an empty job).
  bool IsDense(const std::string& job) const;
  // NOT_FOUND naming the job or the task.
  StatusOr<std::string> Address(const std::string& job, int64_t index) const;

  // A copy without `job`. The coordinator uses WithoutJob("evaluator"): the
  // evaluator is a side-car and never part of the training cluster.
  ClusterSpec WithoutJob(const std::string& job) const;

  bool empty() const { return jobs_.empty(); }
  bool operator==(const ClusterSpec&) const = default;

 private:
  std::map<std::string, std::map<int64_t, std::string>> jobs_;
};

// TensorFlow's limits on the roles: at most one chief, one master and one
// evaluator task, and not both a chief and a master job (two coordinators).
// INVALID_ARGUMENT 'job "chief" has 2 tasks; at most one is allowed'.
Status ValidateRoleCounts(const ClusterSpec& cluster);
// Every task has its own host:port: two tasks at one address would each
// reach the other's service (INVALID_ARGUMENT naming both).
Status ValidateDistinctAddresses(const ClusterSpec& cluster);

struct ClusterConfig {
  ClusterSpec cluster;
  std::optional<TaskId> task;
  std::string environment;  // TF_CONFIG "environment", e.g. "cloud"; "" when absent
  std::string rpc_layer;    // e.g. "grpc"; "" when absent

  bool operator==(const ClusterConfig&) const = default;
};

enum class TaskRequirement { kRequired, kOptional };

// Parses TF_CONFIG exactly as TensorFlow documents it:
//   {"cluster": {"worker": ["h0:2222", "h1:2222"], "ps": {"0": "h2:2222"}},
//    "task": {"type": "worker", "index": 1},
//    "environment": "cloud", "rpc_layer": "grpc"}
// Accepted like TF: sparse jobs, a numeric-string index ("1"), unknown
// top-level keys and unknown task fields (AI Platform adds "job", "trial",
// "cloud"), job names other than the five roles, and an "evaluator" task
// whose job is absent from the cluster (Estimator's convention).
// Rejected (INVALID_ARGUMENT, one line starting "TF_CONFIG: "): malformed
// JSON (with the byte offset); a missing or non-object "cluster"; a job that
// is not a list or {index: address} object of strings; a bad job name or
// address; more than one chief, master or evaluator task, or both a chief
// and a master job; a non-string "environment"/"rpc_layer"; with
// TaskRequirement::kRequired a missing "task"; a task type that is missing,
// not one of the five roles, or (evaluator apart) not in the cluster; an
// index that is missing, not an integer, negative or not a task of the job.
StatusOr<ClusterConfig> ParseTfConfig(const std::string& json, TaskRequirement task = TaskRequirement::kRequired);

// TF_CONFIG's bytes as Kubeflow's training-operator writes them (Go's
// encoding/json: compact; the cluster's jobs in byte order of their names,
// as Go marshals a map): keys cluster, task, environment, rpc_layer (the
// last three only when set), dense jobs as lists, sparse jobs as
// {"<index>": address} in ascending index order. Nothing is validated here:
// the operator writes whatever its TFJob names, as Kubeflow does.
struct TfConfigDoc {
  std::map<std::string, std::map<int64_t, std::string>> cluster;  // job -> index -> address
  std::optional<TaskId> task;
  std::string environment;
  std::string rpc_layer;
};
std::string WriteTfConfig(const TfConfigDoc& doc);
// Kubeflow's sparse form (spec.enableDynamicWorker, SparseTFConfig):
//   {"cluster":{"worker":{"1":"h:2222"},"ps":["p:2222"]},"task":{"type":"worker","index":1}}
// "worker" then "ps" (the struct's field order); `ps` unset is Go's nil
// slice, written null.
std::string WriteSparseTfConfig(const std::map<int64_t, std::string>& workers,
                                const std::optional<std::vector<std::string>>& ps, const TaskId& task);
// WriteTfConfig of a parsed or built config.
std::string ToTfConfigJson(const ClusterConfig& config);

}  // namespace tfjob::contract

// Chooses where a runtime process learns its cluster and its role, once, at
// start-up. TFJOB_CLUSTER_RESOLVER selects the resolver:
//   - unset, "" or "tf_config": TF_CONFIG (TensorFlow's format), as set by the
//     operator, `tfjob run` and `tfjob-runtime local`;
//   - "slurm": the Slurm step this process belongs to (TensorFlow's
//     SlurmClusterResolver semantics, services/cluster/slurm.h), laid out by
//       TFJOB_SLURM_JOBS            required, e.g. "chief:1,ps:1,worker:2": the
//                                   tasks of each job; Slurm ranks are dealt to
//                                   the jobs in job-name order
//       TFJOB_SLURM_PORT_BASE       task k on a node listens on BASE + k (8888)
//       TFJOB_SLURM_GPUS_PER_TASK   GPUs per task (default: the node's GPUs
//                                   shared by its tasks)
//       TFJOB_SLURM_GPUS_PER_NODE   default: the entries of CUDA_VISIBLE_DEVICES
//       TFJOB_SLURM_TASKS_PER_NODE  overrides SLURM_STEP_TASKS_PER_NODE
//     TF_CONFIG is ignored under Slurm: the resolver was chosen explicitly.
//   - "kubernetes": the pods of this process's TFJob, from the Kubernetes API
//     (services/cluster/kubernetes.h): this pod's own labels give the job
//     (training.kubeflow.org/job-name) and the task (replica-type,
//     replica-index); every other task is the pod that label selectors on
//     those labels find, at its pod IP and tfjob-port, in numeric replica
//     order, once all of them are Running. The evaluator is not part of the
//     cluster (as in Kubeflow's TF_CONFIG). Read from
//       KUBECONFIG                   a kubeconfig file; unset: in-cluster
//                                    credentials (the pod's service-account
//                                    token and CA, KUBERNETES_SERVICE_HOST/_PORT)
//       POD_NAME, POD_NAMESPACE      this pod (downward API); default $HOSTNAME
//                                    and the service account's namespace
//       TFJOB_KUBERNETES_JOBS        optional, e.g. "chief:1,ps:1,worker:2";
//                                    unset: the replicas of the TFJob named by
//                                    the job-name label
//       TFJOB_KUBERNETES_WAIT_SECONDS how long to wait for the pods (300)
//     The job's service account needs get and list on pods, and get on
//     tfjobs unless TFJOB_KUBERNETES_JOBS is set (docs/kubernetes-resolver.md).
//
// Ownership: plain values. Thread-safety: pure apart from the Env accessor
// (and ResolveCluster's API calls).
// Failure: NOT_FOUND only when the TF_CONFIG resolver finds no TF_CONFIG (the
// caller then runs on this machine alone). The Kubernetes resolver's API
// errors keep their codes (PERMISSION_DENIED when the RBAC is missing,
// UNAVAILABLE when the API server cannot be reached), with the request and a
// pointer to the RBAC it needs; pods that never become ready are
// DEADLINE_EXCEEDED naming them. Everything else that is wrong --
// an unknown resolver, a malformed TFJOB_SLURM_* value, a layout the runtime
// cannot run, missing or malformed SLURM_* variables -- is INVALID_ARGUMENT
// with one line naming the variable and quoting its text, so a task started
// outside a Slurm step fails instead of silently training alone.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "common/status.h"
#include "services/cluster/cluster.h"
#include "services/cluster/slurm.h"
#include "kube/config.h"

namespace tfjob::cluster {

struct ResolvedCluster {
  cluster::ClusterConfig config;  // task is always set
  // Set by the Slurm resolver when tasks get GPUs: the caller exports it as
  // CUDA_VISIBLE_DEVICES before anything touches CUDA.
  std::optional<std::string> cuda_visible_devices;
};

// What the Kubernetes resolver needs, read from the environment (and the
// kubeconfig or service account files) at start-up; ResolveCluster then
// asks the API server.
struct KubernetesSettings {
  kube::ClusterConfig api;
  std::string pod_name;
  std::string ns;
  std::chrono::milliseconds wait{300000};
  // TFJOB_KUBERNETES_JOBS; nullopt: the TFJob's replicas.
  std::optional<std::map<std::string, int64_t>> jobs;
};

// The resolver's part of the runtime's configuration, read once. TF_CONFIG
// and Slurm need no I/O, so they are resolved as they are read; the
// Kubernetes resolver's pods are found by ResolveCluster. Neither set:
// no TF_CONFIG, the process runs alone.
struct ResolverConfig {
  std::optional<ResolvedCluster> resolved;
  std::optional<KubernetesSettings> kubernetes;
};

// Parses the TFJOB_SLURM_* variables. Beyond what ResolveSlurm checks, the
// layout must be one the runtime can run: only its task types (chief, master,
// ps, worker, evaluator), one coordinator (chief or master), at least one ps
// and one worker, each listed once with a count of at least 1.
StatusOr<cluster::SlurmOptions> SlurmOptionsFromEnv(const cluster::Env& env);

// Reads every variable the selected resolver needs (see above) and
// validates them; never NOT_FOUND.
StatusOr<ResolverConfig> ReadResolverConfig(const cluster::Env& env);

// The cluster `config` describes, asking the API server for the Kubernetes
// resolver; NOT_FOUND when there is no TF_CONFIG.
StatusOr<ResolvedCluster> ResolveCluster(const ResolverConfig& config);

// ReadResolverConfig, then ResolveCluster.
StatusOr<ResolvedCluster> ResolveCluster(const cluster::Env& env);

}  // namespace tfjob::cluster

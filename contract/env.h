// Every environment variable tfjob-runtime reads, by name, with what it
// means. The runtime reads them once, at start-up (services/runtime/
// config.h), and nowhere else; the operator, `tfjob run` and `tfjob-runtime
// local` set the ones they pass down by these names. docs/design.md lists
// them for users; contract_test checks that every TFJOB_* name the runtime's
// sources mention is in kRuntimeEnv, so the table cannot fall behind.
//
// Pure constants; thread-safe.
#pragma once

#include <string_view>

#include "common/pki.h"
#include "common/token.h"
#include "contract/tf_config.h"

namespace tfjob::contract {

// Where the task learns its cluster.
inline constexpr const char* kClusterResolverEnv = "TFJOB_CLUSTER_RESOLVER";
inline constexpr const char* kSlurmJobsEnv = "TFJOB_SLURM_JOBS";
inline constexpr const char* kSlurmPortBaseEnv = "TFJOB_SLURM_PORT_BASE";
inline constexpr const char* kSlurmGpusPerTaskEnv = "TFJOB_SLURM_GPUS_PER_TASK";
inline constexpr const char* kSlurmGpusPerNodeEnv = "TFJOB_SLURM_GPUS_PER_NODE";
inline constexpr const char* kSlurmTasksPerNodeEnv = "TFJOB_SLURM_TASKS_PER_NODE";
inline constexpr const char* kKubernetesJobsEnv = "TFJOB_KUBERNETES_JOBS";
inline constexpr const char* kKubernetesWaitEnv = "TFJOB_KUBERNETES_WAIT_SECONDS";
// How long the chief waits.
inline constexpr const char* kConnectTimeoutEnv = "TFJOB_CONNECT_TIMEOUT_SECONDS";
inline constexpr const char* kPsTimeoutEnv = "TFJOB_PS_TIMEOUT_SECONDS";
// When the operator created this pod (ms since the epoch): a chief's
// generation lies in its pod's range, so the container of a replaced pod that
// its kubelet starts again can never outrank the replacement.
inline constexpr const char* kPodCreatedEnv = "TFJOB_POD_CREATED_MS";
// The parameter servers' data plane.
inline constexpr const char* kPsMaxTensorBytesEnv = "TFJOB_PS_MAX_TENSOR_BYTES";
inline constexpr const char* kPsSharedMemoryEnv = "TFJOB_PS_SHM";
// Task-to-task security (names shared with common/, which both halves use).
inline constexpr const char* kAuthTokenEnv = ::tfjob::kTokenEnv;
inline constexpr const char* kAuthTokenFileEnv = ::tfjob::kTokenFileEnv;
inline constexpr const char* kTlsDirEnv = ::tfjob::pki::kTlsDirEnv;
// Metrics.
inline constexpr const char* kMetricsPortEnv = "TFJOB_METRICS_PORT";
inline constexpr const char* kJobNameEnv = "TFJOB_JOB_NAME";
// A listening socket a launcher opened for the task.
inline constexpr const char* kListenFdEnv = "TFJOB_LISTEN_FD";
// Compute switches.
inline constexpr const char* kCpuKernelsEnv = "TFJOB_CPU_KERNELS";
inline constexpr const char* kFloat16EmulationEnv = "TFJOB_FLOAT16_EMULATION";
inline constexpr const char* kRuntimeSelfEnv = "TFJOB_RUNTIME_SELF";

struct EnvVar {
  std::string_view name;
  std::string_view meaning;
};

// Every variable the runtime reads, TensorFlow's, Kubernetes' and Slurm's
// included, in the order docs/design.md gives them.
inline constexpr EnvVar kRuntimeEnv[] = {
    {kTfConfigEnv, "the cluster and this task, in TensorFlow's format (Kubeflow writes it into every pod)"},
    {kClusterResolverEnv, "tf_config (default), slurm or kubernetes: where the cluster comes from"},
    {kSlurmJobsEnv, "slurm: the tasks of each job, e.g. chief:1,ps:1,worker:2"},
    {kSlurmPortBaseEnv, "slurm: task k on a node listens on BASE + k (8888)"},
    {kSlurmGpusPerTaskEnv, "slurm: GPUs per task (default: the node's GPUs shared by its tasks)"},
    {kSlurmGpusPerNodeEnv, "slurm: GPUs per node (default: the entries of CUDA_VISIBLE_DEVICES)"},
    {kSlurmTasksPerNodeEnv, "slurm: overrides SLURM_STEP_TASKS_PER_NODE"},
    {"SLURM_PROCID", "slurm: this task's rank"},
    {"SLURM_STEP_NUM_TASKS", "slurm: the step's tasks (else SLURM_NTASKS)"},
    {"SLURM_NTASKS", "slurm: fallback for SLURM_STEP_NUM_TASKS"},
    {"SLURM_STEP_NODELIST", "slurm: the step's nodes (else SLURM_JOB_NODELIST)"},
    {"SLURM_JOB_NODELIST", "slurm: fallback for SLURM_STEP_NODELIST"},
    {"SLURM_STEP_TASKS_PER_NODE", "slurm: tasks on each node (else SLURM_TASKS_PER_NODE)"},
    {"SLURM_TASKS_PER_NODE", "slurm: fallback for SLURM_STEP_TASKS_PER_NODE"},
    {"CUDA_VISIBLE_DEVICES", "slurm: the GPUs this step may use; the task's share is exported back"},
    {kKubernetesJobsEnv, "kubernetes: the job's layout (default: read from the TFJob)"},
    {kKubernetesWaitEnv, "kubernetes: how long to wait for the job's pods (300)"},
    {"KUBECONFIG", "kubernetes: a kubeconfig file (default: the pod's service account)"},
    {"KUBERNETES_SERVICE_HOST", "kubernetes: the API server, in a pod"},
    {"KUBERNETES_SERVICE_PORT", "kubernetes: the API server's port, in a pod"},
    {"POD_NAME", "kubernetes: this pod (default: HOSTNAME)"},
    {"HOSTNAME", "kubernetes: this pod, when POD_NAME is unset"},
    {"POD_NAMESPACE", "kubernetes: this pod's namespace (default: the service account's)"},
    {kConnectTimeoutEnv, "seconds the chief waits for peers that do not answer yet (300)"},
    {kPsTimeoutEnv, "seconds the chief waits for a parameter server that stopped answering (30)"},
    {kPodCreatedEnv, "set by the operator: when it created the pod (ms); orders a chief's generation by pod"},
    {kPsMaxTensorBytesEnv, "the most one tensor (and one request) may carry to a parameter server (16 GiB)"},
    {kPsSharedMemoryEnv, "0: parameter-server payloads inline even on one host"},
    {kAuthTokenEnv, "the job's task token, which every task-to-task call carries"},
    {kAuthTokenFileEnv, "a file holding the task token (when TFJOB_AUTH_TOKEN is unset)"},
    {kTlsDirEnv, "a directory with the job's CA, certificate and key: task-to-task mutual TLS"},
    {kMetricsPortEnv, "serve Prometheus /metrics, /healthz and /readyz on this port (0 picks one)"},
    {kJobNameEnv, "the job_name label of the metrics (default: local)"},
    {kListenFdEnv, "a listening socket the launcher opened at this task's port"},
    {kCpuKernelsEnv, "eigen: Eigen's products and convolutions instead of oneDNN's"},
    {kFloat16EmulationEnv, "1: float16 layers computed in float32 and rounded"},
    {kRuntimeSelfEnv, "what `tfjob-runtime local` starts for each task (default: itself)"},
};

}  // namespace tfjob::contract

// A KubernetesClusterResolver in the spirit of TensorFlow's: each job of the
// cluster is the set of pods a label selector finds (the labels the operator
// puts on its pods, e.g. "training.kubeflow.org/job-name=J,
// training.kubeflow.org/replica-type=worker"), addressed by pod IP and the
// port of the pod's "tensorflow" container named "tfjob-port" (Kubeflow's
// TF_CONFIG port; `port` when a pod declares none).
// Better than TF's where it is weak: tasks are ordered by the numeric
// training.kubeflow.org/replica-index label (TF sorts by name, so pod 10
// comes before pod 2); it waits for pods to be Running with an IP instead of
// failing on the first pending one; and, given how many tasks a job has, it
// waits for every index 0..n-1 rather than returning a cluster that is
// missing the pods not created yet.
// Thread-safety: reentrant. Failure: a timeout (DEADLINE_EXCEEDED) names the
// pods not ready and the indices without a pod; API errors keep their code,
// with the request that failed.
#pragma once

#include <chrono>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "kube/client.h"
#include "services/cluster/cluster.h"

namespace tfjob::cluster::kubernetes {

struct ResolverOptions {
  std::string ns = "default";
  // TF job name ("worker", "ps", "chief") -> label selector.
  std::map<std::string, std::string> job_selectors;
  // TF job name -> how many tasks it has. A job listed here resolves once
  // pods with indices 0..n-1 are all ready (pods with a higher index are
  // not part of it); a job not listed takes every pod its selector finds.
  std::map<std::string, int64_t> expected_tasks;
  int port = 2222;  // for pods that declare no tfjob-port
  std::chrono::milliseconds wait_timeout{300000};
  std::chrono::milliseconds poll_interval{500};
};

// Selectors for an operator-managed TFJob: {"chief", "ps", "worker"} ->
// "training.kubeflow.org/job-name=J,training.kubeflow.org/replica-type=T".
std::map<std::string, std::string> TfJobSelectors(const std::string& job, const std::vector<std::string>& types);

// The task counts of a TFJob object, as its pods' replica-type labels name
// them: spec.tfReplicaSpecs keys lower-cased (Chief -> chief, PS -> ps),
// replicas defaulting to 1 as Kubeflow's do. The evaluator is left out: it
// is not part of the training cluster (Kubeflow's TF_CONFIG leaves it out
// too). INVALID_ARGUMENT for a TFJob without tfReplicaSpecs or with a
// replica count that is not a non-negative integer.
StatusOr<std::map<std::string, int64_t>> TfJobTaskCounts(const nlohmann::json& tfjob);

StatusOr<ClusterSpec> ResolveCluster(kube::Client& client, const ResolverOptions& options);

}  // namespace tfjob::cluster::kubernetes

// Kubeflow's labels on a TFJob's pods and services, as training-operator
// v1.9.0 writes them: the contract between the operator, which sets them,
// and the runtime's Kubernetes cluster resolver, which selects on them (and
// any tool written for Kubeflow's pods). Both halves use these constants;
// the strings exist nowhere else.
//
// Pure constants and one pure function; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace tfjob::contract {

inline constexpr std::string_view kJobNameLabel = "training.kubeflow.org/job-name";
inline constexpr std::string_view kReplicaTypeLabel = "training.kubeflow.org/replica-type";
inline constexpr std::string_view kReplicaIndexLabel = "training.kubeflow.org/replica-index";
inline constexpr std::string_view kOperatorNameLabel = "training.kubeflow.org/operator-name";
inline constexpr std::string_view kJobRoleLabel = "training.kubeflow.org/job-role";
// Kubeflow's TFJob controller labels its pods with its controller name.
inline constexpr std::string_view kOperatorName = "tfjob-controller";
// job-role's value on the chief (or master, or worker 0 of a job without
// either), and the wire name of a spec keyed Master.
inline constexpr std::string_view kJobRoleMaster = "master";

// "training.kubeflow.org/job-name={job},training.kubeflow.org/replica-type={type_label}":
// one replica type's pods (replicaStatuses[].selector; what the runtime's
// Kubernetes resolver lists). `type_label` is the lower-case wire name.
inline std::string Selector(std::string_view job, std::string_view type_label) {
  std::string s(kJobNameLabel);
  s += '=';
  s += job;
  s += ',';
  s += kReplicaTypeLabel;
  s += '=';
  s += type_label;
  return s;
}

}  // namespace tfjob::contract

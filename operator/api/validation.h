// TFJob validation: what Kubeflow's admission webhook rejects, plus the rules
// it leaves to failures at run time (see "Beyond Kubeflow" below). Used both
// by the operator (the job is marked Failed with ToMessage(...)) and by the
// local runner `tfjob run`, so both report the same text.
//
// Validate runs on a decoded job *before* SetDefaults, like the webhook: field
// paths name the keys as the user wrote them (spec.tfReplicaSpecs[worker]).
// Running it after SetDefaults is also fine (defaults never make a valid job
// invalid).
//
// Errors are formatted like Kubernetes' field.Error ("<path>: <Type>[:
// <value>][: <detail>]"), e.g.
//   spec.tfReplicaSpecs[Worker].template.spec.containers[0].image: Required value: must be required
//   spec.runPolicy.cleanPodPolicy: Unsupported value: "Sometimes": supported values: "All", "Running", "None"
// and ToMessage joins several like an aggregate error: "[e1, e2]".
//
// Kubeflow's rules: metadata.name a DNS-1035 label; tfReplicaSpecs present;
// every replica has containers, every container an image, some container
// named "tensorflow"; at most one of Chief/Master; managedBy one of the two
// supported controllers.
// Beyond Kubeflow (Kubeflow accepts these and then misbehaves or fails at run
// time): empty tfReplicaSpecs; unknown or duplicate replica keys
// ("Launcher"; "worker" next to "Worker"); negative replicas; more than one
// Chief/Master replica (TensorFlow allows one chief); restartPolicy,
// cleanPodPolicy, successPolicy outside their enums; negative
// ttlSecondsAfterFinished / activeDeadlineSeconds / backoffLimit;
// schedulingPolicy fields of the wrong type (the CRD's schema types them;
// this holds where no schema ran).
//
// Pure; reentrant; never fails (an invalid job yields errors, not a Status).
#pragma once

#include <string>
#include <vector>

#include "operator/api/types.h"

namespace tfjob::op::api {

enum class ErrorType { kRequired, kInvalid, kNotSupported, kForbidden, kDuplicate };

struct FieldError {
  ErrorType type = ErrorType::kInvalid;
  std::string field;      // Kubernetes path syntax: spec.tfReplicaSpecs[Worker].replicas
  std::string bad_value;  // rendered as Kubernetes does ("\"Foo\"", "-1"); unused for Required/Forbidden
  std::string detail;

  // "<field>: <Type>[: <value>][: <detail>]".
  std::string ToString() const;
  bool operator==(const FieldError&) const = default;
};

// Every problem found, in a stable order: metadata, runPolicy, successPolicy,
// tfReplicaSpecs (per spec in key order, then cross-spec rules). Empty when
// the job is valid.
std::vector<FieldError> Validate(const TFJob& job);

// "" for no errors, the error itself for one, "[e1, e2, ...]" for several
// (duplicates removed), as Kubernetes' aggregate error prints.
std::string ToMessage(const std::vector<FieldError>& errors);

// The DNS-1035 label check applied to metadata.name, exposed for callers that
// build names (empty when valid).
std::vector<std::string> Dns1035LabelErrors(const std::string& value);

}  // namespace tfjob::op::api

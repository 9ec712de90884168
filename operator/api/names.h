// The names, labels and TF_CONFIG the operator gives a TFJob's pods and
// services: the compatibility contract with Kubeflow (DESIGN.md section 2),
// so that tools selecting Kubeflow's pods, and programs reading Kubeflow's
// TF_CONFIG, work unchanged.
//
// "type label" below is a replica type as it appears on the wire: lower case
// ("chief", "ps", "worker", "evaluator"), and "master" for a spec keyed
// Master. Kubeflow keeps Master as its own wire name (pods j-master-0, label
// replica-type=master, TF_CONFIG {"master": [...]}, task type "master"), so
// we do too; in meaning it is the chief (job-role=master, success rules).
// The runtime must therefore accept "master" wherever it accepts "chief".
//
// Pure; reentrant. Failure: TfConfig returns INVALID_ARGUMENT for a replica
// the job does not have, or a cluster too large for an environment variable.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "common/status.h"
#include "contract/env.h"
#include "contract/labels.h"
#include "contract/tf_config.h"
#include "operator/api/types.h"

namespace tfjob::op::api {

// Kubeflow's labels (contract/labels.h, shared with the runtime's
// Kubernetes resolver).
using contract::kJobNameLabel;
using contract::kJobRoleLabel;
using contract::kJobRoleMaster;
using contract::kOperatorName;
using contract::kOperatorNameLabel;
using contract::kReplicaIndexLabel;
using contract::kReplicaTypeLabel;
inline constexpr std::string_view kTfConfigEnv = contract::kTfConfigEnv;
// The ExitCode re-creations counted so far, per replica key, as JSON
// ({"Worker":2}) on the TFJob itself: status.replicaStatuses[].restarts holds
// them too, but Kubeflow's own CRD prunes that field, and annotations
// survive any CRD. backoffLimit reads the larger of the two.
inline constexpr std::string_view kRestartsAnnotation = "tfjob-operator.kubeflow.org/exit-code-restarts";
// The replica indices whose pod has succeeded, per replica key, as JSON
// ({"Worker":[0,2]}) on the TFJob: a succeeded pod removed afterwards keeps
// its index succeeded, with no new pod (kubeflow/trainer #1186, #1997;
// training-operator v1.9.0 keeps no such record).
inline constexpr std::string_view kSucceededAnnotation = "tfjob-operator.kubeflow.org/succeeded-replicas";
// The replica indices whose pod was re-created for staying Pending past the
// timeout (--recreate-pending-pods), per replica key, as JSON
// ({"Worker":[3]}): each index is re-created once over the job's life.
inline constexpr std::string_view kPendingRecreatedAnnotation = "tfjob-operator.kubeflow.org/pending-recreated";

// LowerName(type), "master" for the alias, the lower-cased key for a key that
// names no type (such jobs fail validation; this keeps names total).
std::string TypeLabel(const ReplicaSpec& spec);

// "{job}-{type_label}-{index}"; pods and their headless services share it.
std::string PodName(std::string_view job, std::string_view type_label, int index);
// The job's task-token Secret and NetworkPolicy: "{job}-tfjob-auth", "{job}-tfjob".
std::string AuthSecretName(std::string_view job);
std::string NetworkPolicyName(std::string_view job);
// The key of the token in that Secret.
inline constexpr std::string_view kAuthSecretKey = "token";
// The tensorflow container's variable holding the token (from the Secret).
inline constexpr std::string_view kAuthTokenEnv = "TFJOB_AUTH_TOKEN";
// When the operator created the pod, in ms since the epoch (contract/env.h):
// the runtime's chief claims a generation inside its pod's range, so a
// replaced pod's container that its kubelet starts again never outranks the
// replacement.
inline constexpr std::string_view kPodCreatedEnv = contract::kPodCreatedEnv;
// With --task-tls the same Secret also holds the job's TLS material (keys
// pki::kCaFile, kCertFile, kKeyFile), mounted into every tensorflow
// container as this volume at this path (what TFJOB_TLS_DIR names).
inline constexpr std::string_view kTlsVolumeName = "tfjob-tls";
inline constexpr std::string_view kTlsMountPath = "/etc/tfjob/tls";
std::string ServiceName(std::string_view job, std::string_view type_label, int index);

// job-name and operator-name: what selects every pod and service of a job.
std::map<std::string, std::string> JobLabels(std::string_view job);
// JobLabels plus replica-type, replica-index, and job-role=master when
// `is_master`.
std::map<std::string, std::string> Labels(std::string_view job, std::string_view type_label, int index, bool is_master);
// The selector a KubernetesClusterResolver uses, and
// replicaStatuses[].selector (contract/labels.h).
using contract::Selector;

// The chief (or master) when the job has one; otherwise worker 0.
bool IsMasterRole(const TFJob& job, const ReplicaSpec& spec, int index);

// True when the job has more than one replica in total (unset replicas count
// as 1), the condition for injecting TF_CONFIG. Kubeflow tests "!= 1"; the
// two differ only for a job with no replicas at all, which has no pods.
bool NeedsTfConfig(const TFJob& job);

// containerPort of the port named tfjob-port of the container named
// tensorflow in the spec's template; 2222 when there is none.
int32_t TfPort(const ReplicaSpec& spec);

struct TfConfigOptions {
  // Appended to hosts as "{pod}.{ns}.svc.{cluster_domain}" when not empty
  // (Kubeflow reads it from $CUSTOM_CLUSTER_DOMAIN; read it once at startup).
  std::string cluster_domain;
  // Overrides "{host}:{port}" for every task, e.g. "127.0.0.1:{port}" in the
  // local runner. Called with the spec and the task index.
  std::function<std::string(const ReplicaSpec& spec, int index)> address;
};

// TF_CONFIG for task (type, index) of a defaulted job, byte for byte as
// Kubeflow's training-operator builds it (genTFConfigJSONStr; Go's json also
// escapes <, > and &, which valid names never contain):
//   {"cluster":{"chief":["j-chief-0.ns.svc:2222"],"ps":[...],"worker":[...]},
//    "task":{"type":"worker","index":1},"environment":"cloud"}
// "cluster" holds every replica type, the evaluator included (v1.9.0's
// genClusterSpec; runtimes keep the evaluator out of the training cluster
// themselves). Keys are sorted, as Go marshals a map; each type lists all
// its replicas, ports from TfPort.
// With spec.enableDynamicWorker, Kubeflow's sparse form instead, whose key
// is "cluster" too (SparseTFConfig's JSON tag):
//   {"cluster":{"worker":{"1":"j-worker-1.ns.svc:2222"},"ps":[...]},
//    "task":{"type":"worker","index":1}}
// where a worker sees itself and all PS, a PS only itself, other types
// neither (and "ps" is null for a worker of a job without PS, as in Go).
StatusOr<std::string> TfConfig(const TFJob& job, std::string_view ns, ReplicaType type, int index,
                               const TfConfigOptions& options = {});

}  // namespace tfjob::op::api

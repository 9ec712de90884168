// Kueue's part in the real-API-server tests, played as Kueue v0.19.2
// (kubernetes-sigs/kueue at tag v0.19.2) plays it for a TFJob when its
// built-in "kubeflow.org/tfjob" integration is on: Kueue's CRDs
// (../shared/kueue/crds) installed once per process, the webhook's
// suspended job, the Workload the job reconciler makes, the scheduler's
// admission and eviction, and the job reconciler's start and stop writes to
// the TFJob; and what Kueue reads back from the job (KubeflowJob in
// pkg/controller/jobs/kubeflow/kubeflowjob/kubeflowjob_controller.go). Each
// step names the Kueue function it follows. Kueue's controller itself cannot
// be built here (its Go modules cannot be fetched).
//
// Thread-compatible, like the fixture it extends. Failures are gtest
// failures of the running test.
#pragma once

#include <functional>
#include <string>

#include "operator/tests/envtest_support.h"

namespace tfjob::op::envtest {

// Kueue v0.19.2's names: pkg/controller/constants/constants.go (QueueLabel,
// PrebuiltWorkloadLabel, JobUIDLabel), pkg/constants/constants.go
// (PodSetLabel), apis/kueue/v1beta2/multikueue_types.go.
inline constexpr const char* kQueueLabel = "kueue.x-k8s.io/queue-name";
inline constexpr const char* kPodSetLabel = "kueue.x-k8s.io/podset";
inline constexpr const char* kJobUidLabel = "kueue.x-k8s.io/job-uid";
inline constexpr const char* kPrebuiltWorkloadLabel = "kueue.x-k8s.io/prebuilt-workload-name";
inline constexpr const char* kMultiKueueOriginLabel = "kueue.x-k8s.io/multikueue-origin";
// What a ProvisioningRequest admission check adds to every pod set
// (pkg/controller/admissionchecks/provisioning/controller.go, podSetUpdates,
// with cluster-autoscaler's key): annotations reach the templates this way.
inline constexpr const char* kConsumesAnnotation = "autoscaling.x-k8s.io/consume-provisioning-request";

// What Kueue reads of a TFJob (kubeflowjob_controller.go).
// IsActive: some replicaStatuses[*].active is not 0.
bool IsActive(const json& job);
// PodsReady: the Running condition is True.
bool PodsReady(const json& job);
// Finished: the first of Succeeded or Failed that is True, and its message.
struct Finish {
  std::string message;
  bool success = true, finished = false;
};
Finish Finished(const json& job);
// PriorityClass: schedulingPolicy.priorityClass, else the first template's
// priorityClassName in Chief, Master, PS, Worker, Evaluator order.
std::string KueuePriorityClass(const json& job);
// tfjob_controller.go, JobControl.PodLabelSelector (kueuectl lists a job's
// pods with it).
std::string PodLabelSelector(const std::string& job);

class KueuePlayer : public RealApiServerTest {
 protected:
  // The namespace, and Kueue's CRDs (once per process).
  void SetUp() override;

  // A replica spec: `n` replicas, the tensorflow container, and the
  // template's own spec fields and metadata.
  static json KueueReplica(int n, json spec = json::object(), json metadata = json::object());
  // A TFJob as Kueue's webhook lets it in (BaseWebhook.Default in
  // jobframework/base_webhook.go; ApplyDefaultForSuspend in
  // jobframework/defaults.go): labelled with its LocalQueue and suspended,
  // unless `run_policy` says otherwise.
  void SubmitJob(const std::string& name, const json& replica_specs, json run_policy = json::object(),
                 const json& labels = json::object());
  // A ResourceFlavor (cluster-scoped: name it after the namespace).
  void CreateFlavor(const std::string& name, const json& node_labels, const json& tolerations);
  // The job reconciler's ConstructWorkload (jobframework/reconciler.go):
  // KubeflowJob.PodSets' pod sets, the queue, the priority ExtractPriority
  // finds, owned by the job. Returns the Workload's name.
  std::string CreateWorkload(const std::string& job);
  // The scheduler's quota reservation and admission to `flavor`, with a
  // ProvisioningRequest admission check's pod-set updates.
  void Admit(const std::string& workload, const std::string& flavor);
  // The job reconciler's startJob: the pod sets' info from the admission,
  // then RunWithPodSetsInfo's one write to the TFJob.
  void StartJob(const std::string& job, const std::string& workload);
  // Preemption: the Workload's Evicted condition.
  void Evict(const std::string& workload);
  // The job reconciler's stopJob: Suspend and RestorePodSetsInfo in one write.
  void StopJob(const std::string& job, const std::string& workload);
  // What Kueue does once IsActive reads false after an eviction: the
  // admission cleared, the Workload requeued.
  void ClearAdmission(const std::string& workload);

  // Reads, changes and replaces the TFJob's spec and metadata, again on a
  // conflict (the operator writes the status meanwhile): one write, as
  // Kueue's clientutil.Patch makes one.
  void UpdateJob(const std::string& job, const std::function<void(json&)>& change);
  void PatchWorkloadStatus(const std::string& workload, const json& status);
  json Condition(const std::string& type, const std::string& status, const std::string& reason) const;
};

}  // namespace tfjob::op::envtest

// The operator as Kueue's external integration for TFJob
// (PlannerOptions::kueue == kKueueExternal; docs/kueue.md): for a TFJob
// labelled kueue.x-k8s.io/queue-name it does what Kueue v0.19.2's job
// framework does for its built-in integrations
// (pkg/controller/jobframework/reconciler.go, ReconcileGenericJob): one
// Workload (kueue.x-k8s.io/v1beta1) owned by the job, the job suspended
// until the Workload is admitted, pods placed on the admitted flavors, the
// eviction handled, PodsReady and Finished reported.
//
// The planner's part (kueue_workload.cc) is pure like the rest of the
// planner: it reads the observed Workload and ResourceFlavors (ObservedKueue,
// planner.h) and adds actions to the pass. Not for use outside
// operator/controller, except the names and WorkloadName (the controller and
// the tests find the Workload by them).
// Thread-safety: pure functions of their arguments, thread-compatible.
// Failure: none; nothing here throws on any job or Workload JSON it is given
// (a Workload of another shape reads as "not admitted", and a flavor the
// cache lacks holds the pods back and requeues).
#pragma once

#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "operator/api/types.h"
#include "operator/controller/planner.h"

namespace tfjob::op::controller {

// Kueue's names (pkg/controller/constants/constants.go: QueueLabel,
// JobUIDLabel; pkg/constants/constants.go: PodSetLabel).
inline constexpr std::string_view kKueueQueueLabel = "kueue.x-k8s.io/queue-name";
inline constexpr std::string_view kKueueJobUidLabel = "kueue.x-k8s.io/job-uid";
inline constexpr std::string_view kKueuePodSetLabel = "kueue.x-k8s.io/podset";
// Kueue's provisioning-request annotations, which NewWorkload copies from
// the job to the Workload (admissioncheck.FilterProvReqAnnotations).
inline constexpr std::string_view kKueueProvReqAnnotationPrefix = "provreq.kueue.x-k8s.io/";
inline constexpr std::string_view kKueueGroup = "kueue.x-k8s.io";
inline constexpr std::string_view kKueueWorkloadVersion = "v1beta1";

// Kueue's jobframework.GetWorkloadNameForOwnerWithGVK for a TFJob:
// "tfjob-{name}" cut to 247 characters, "-", and the first 5 hex digits of
// the SHA-1 of "TFJob\nkubeflow.org\n{name}\n{uid}" (workload_names.go).
std::string WorkloadName(const api::TFJob& job);

namespace internal {

struct Pass;

// The job is Kueue's to queue here: external mode and a queue label.
bool KueueManaged(const Pass& p);
// The Workload the job should have (Kueue's ConstructWorkload with
// KubeflowJob.PodSets and PriorityClass): pod sets in Kueue's order (Chief,
// Master, PS, Worker, Evaluator), lower-cased names, counts and templates;
// the queue, the priority class (spec.priority is the executor's: it looks
// the class up), the job-uid and job-name labels, owned by the job.
nlohmann::json BuildWorkload(const api::TFJob& job);
// Before the job's phase is planned (the job not finished): creates,
// re-creates or reads the Workload, suspends or resumes the job, handles an
// eviction; sets p.kueue_hold (the pass keeps the job's pods away, as a
// suspended job's) and p.kueue_placement (what each pod set's pods get).
void PlanKueue(Pass& p);
// At the end of every pass: the Workload's PodsReady and Finished
// conditions from the job's status after the pass, and the one status
// patch the pass writes.
void FinishKueue(Pass& p);
// Merges a pod set's placement (labels, annotations, nodeSelector,
// tolerations, as Kueue's podset.Merge) into a pod built for it.
void ApplyPlacement(nlohmann::json& pod, const nlohmann::json& placement);

}  // namespace internal
}  // namespace tfjob::op::controller

// What the planner's files share (views.cc, conditions.cc, builders.cc,
// pod_group.cc, planner.cc, planner_status.cc, and the reconciler's adoption
// patch); not for use outside operator/controller. Pure functions of their
// arguments: thread-compatible, and they never throw on any JSON they are
// given.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "operator/api/types.h"
#include "operator/controller/planner.h"

namespace tfjob::op::controller::internal {

// ---- reading JSON of any shape (views.cc): a missing key, or a value of
// another type, reads as null, "" or empty ----
const nlohmann::json& Field(const nlohmann::json& j, const char* key);
std::string Str(const nlohmann::json& j, const char* key);
std::map<std::string, std::string> StringMap(const nlohmann::json& j);
// The uid of the ownerReference with controller: true, or "".
std::string ControllerUid(const nlohmann::json& meta);

// ---- the job's conditions (conditions.cc) ----
const api::JobCondition* FindCondition(const api::JobStatus& s, std::string_view type);
bool IsTrue(const api::JobStatus& s, std::string_view type);
// Kubeflow's updateJobConditions (see conditions.cc).
void SetCondition(api::JobStatus& s, std::string_view type, std::string_view status, std::string_view reason,
                  const std::string& message, const std::string& now);
bool SameIgnoringReconcileTime(api::JobStatus a, api::JobStatus b);

// ---- the objects a job owns (builders.cc) ----
// The replica-index label as a number (nullopt: absent or not a small
// non-negative integer).
std::optional<int> IndexOf(const std::map<std::string, std::string>& labels);
std::string LabelOf(const std::map<std::string, std::string>& labels, std::string_view key);
// The controller ownerReference every owned object carries.
nlohmann::json OwnerRef(const api::TFJob& job);
nlohmann::json LabelsJson(const std::map<std::string, std::string>& labels);
nlohmann::json BuildAuthSecret(const api::TFJob& job);
nlohmann::json BuildNetworkPolicy(const api::TFJob& job);
// The pod of replica `spec` number `index` (an error: TF_CONFIG or the
// template cannot be built).
StatusOr<nlohmann::json> BuildPod(const api::TFJob& job, const api::ReplicaSpec& spec, int index,
                                  const PlannerOptions& opt);
nlohmann::json BuildService(const api::TFJob& job, const api::ReplicaSpec& spec, int index);

// ---- gang scheduling (pod_group.cc) ----
bool IsVolcano(const PlannerOptions& o);
nlohmann::json DesiredPodGroup(const api::TFJob& job, const PlannerOptions& opt,
                               const std::optional<PodGroupView>& existing);

}  // namespace tfjob::op::controller::internal

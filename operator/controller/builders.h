// The objects a job owns (builders.cc): its pods (with TF_CONFIG), headless
// services, task-auth Secret and NetworkPolicy, the ownerReference and labels
// they all carry, and reading a replica's labels back. Not for use outside
// operator/controller.
// Thread-safety: pure functions of their arguments, thread-compatible.
// Failure: BuildPod returns an error (TF_CONFIG or the template cannot be
// built); nothing here throws on any job it is given.
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

// The replica-index label as a number (nullopt: absent or not a small
// non-negative integer).
std::optional<int> IndexOf(const std::map<std::string, std::string>& labels);
// labels[key], or "".
std::string LabelOf(const std::map<std::string, std::string>& labels, std::string_view key);
// The controller ownerReference every owned object carries.
nlohmann::json OwnerRef(const api::TFJob& job);
nlohmann::json LabelsJson(const std::map<std::string, std::string>& labels);
nlohmann::json BuildAuthSecret(const api::TFJob& job);
nlohmann::json BuildNetworkPolicy(const api::TFJob& job);
// The pod of replica `spec` number `index`, created at `now` (an error:
// TF_CONFIG or the template cannot be built).
StatusOr<nlohmann::json> BuildPod(const api::TFJob& job, const api::ReplicaSpec& spec, int index,
                                  const PlannerOptions& opt, Time now);
nlohmann::json BuildService(const api::TFJob& job, const api::ReplicaSpec& spec, int index);

}  // namespace tfjob::op::controller::internal

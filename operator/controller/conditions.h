// The job's conditions, as Kubeflow keeps them (conditions.cc): finding,
// testing and setting one. Not for use outside operator/controller.
// Thread-safety: pure functions of their arguments (SetCondition changes only
// the status it is given), thread-compatible.
// Failure: none; they never throw.
#pragma once

#include <string>
#include <string_view>

#include "operator/api/types.h"

namespace tfjob::op::controller::internal {

// The condition of that type, or nullptr.
const api::JobCondition* FindCondition(const api::JobStatus& s, std::string_view type);
// The condition of that type is there with status "True".
bool IsTrue(const api::JobStatus& s, std::string_view type);
// Kubeflow's updateJobConditions (see conditions.cc).
void SetCondition(api::JobStatus& s, std::string_view type, std::string_view status, std::string_view reason,
                  const std::string& message, const std::string& now);
// a and b are equal but for lastReconcileTime.
bool SameIgnoringReconcileTime(api::JobStatus a, api::JobStatus b);

}  // namespace tfjob::op::controller::internal

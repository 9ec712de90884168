// Gang scheduling (pod_group.cc): the PodGroup a job should have, Volcano's
// or the scheduler-plugins', with Kubeflow's minMember and minResources.
// (pod_group.cc also defines PodGroupResourceFor, declared in planner.h.)
// Not for use outside operator/controller.
// Thread-safety: pure functions of their arguments, thread-compatible.
// Failure: none; they never throw on any job or PodGroup JSON they are given
// (a resource quantity that does not parse is left out of minResources).
#pragma once

#include <optional>

#include <nlohmann/json.hpp>

#include "operator/api/types.h"
#include "operator/controller/planner.h"

namespace tfjob::op::controller::internal {

// The gang scheduler is Volcano (else the scheduler-plugins' coscheduling).
bool IsVolcano(const PlannerOptions& o);
// The PodGroup the job should have (Kubeflow's ReconcileJobs; an existing
// Volcano PodGroup's queue is kept).
nlohmann::json DesiredPodGroup(const api::TFJob& job, const PlannerOptions& opt,
                               const std::optional<PodGroupView>& existing);

}  // namespace tfjob::op::controller::internal

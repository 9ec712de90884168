// The test Kueue's decisions (kueue_admitter.h), as pure functions: what
// Kueue v0.19.2's scheduler, workload controller and preemption write on a
// Workload (kueue.x-k8s.io/v1beta1) in the simple case, computed from the
// objects one pass observed and the time. No client and no clock here, so
// the rules are table-tested without an API server
// (tests/support/tests/kueue_admitter_unit_test.cc).
//
// The simple case: ClusterQueues without cohorts (no borrowing, no
// lending), no preemption by the admitter itself, no admission checks,
// topology-aware scheduling, partial admission, LimitRanges, namespace
// selectors or fair sharing; requests are the pod templates' (Kueue's
// resourcehelpers.PodRequests: containers summed, each init container as a
// floor, the pod overhead added; a container's limit stands in for a missing
// request). Feature gates at v0.19.2's defaults (UnadmittedWorkloadsObservability
// off: the Pending reason, no Admitted condition before the first admission).
//
// Thread-safety: pure functions, reentrant. Failure: bad input is a Status
// (quantities) or a line in Plan::skipped naming the object (planning); no
// exception escapes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "common/time.h"

namespace tfjob::testing::kueue {

using json = nlohmann::json;

// A Kubernetes quantity ("500m", "1Gi", "2", "1e3", a JSON number) as the
// integer Kueue compares (pkg/resources/requests.go, ResourceValue): cpu in
// millicores, everything else in units, rounded up as Quantity.MilliValue /
// Value round. INVALID_ARGUMENT for text that is not a quantity, a negative
// one, or one past int64.
StatusOr<int64_t> ParseQuantity(std::string_view resource, std::string_view text);
StatusOr<int64_t> QuantityOf(std::string_view resource, const json& value);
// The inverse, as Kueue writes a quantity into an admission
// (pkg/resources/resource_formatter.go, ResourceQuantity, then
// Quantity.String): cpu as a DecimalSI milli-quantity ("2", "500m"), memory,
// ephemeral-storage and hugepages-* in canonical BinarySI ("1Gi", "1536"),
// other resources DecimalSI ("3", "2k").
std::string FormatQuantity(std::string_view resource, int64_t value);

// apimeta.SetStatusCondition on a conditions array: the condition of that
// type replaced (its lastTransitionTime kept unless the status changes) or
// appended. `generation` 0 leaves observedGeneration out. True when
// anything changed.
bool SetCondition(json& conditions, const std::string& type, const std::string& status, const std::string& reason,
                  const std::string& message, int64_t generation, SystemTime now);
// The condition of that type, or null.
const json& FindCondition(const json& workload, const std::string& type);
bool ConditionIs(const json& workload, const std::string& type, const std::string& status);

// What one pass read: the items of each list.
struct Observed {
  std::vector<json> flavors;         // kueue.x-k8s.io/v1beta1 ResourceFlavors
  std::vector<json> cluster_queues;  // ClusterQueues
  std::vector<json> local_queues;    // LocalQueues
  std::vector<json> workloads;       // Workloads
};

// One status write: the whole Workload as read, with its new status (the
// resourceVersion it was read at, so a concurrent write is a conflict).
struct StatusWrite {
  json workload;
  std::string what;  // for the log: "admitted to cq (cpu: a)", "pending: ..."
};

struct Plan {
  std::vector<StatusWrite> writes;
  std::vector<std::string> skipped;  // one line per object that could not be read
};

// One pass of the admitter over `observed`, at `now`: Deactivated
// evictions, reactivations, Inadmissible and Pending conditions, and the
// admissions that fit the quota left by the admitted, unfinished workloads,
// pending workloads taken per ClusterQueue by priority, then creation time.
// Only workloads whose status changes are written.
Plan PlanPass(const Observed& observed, SystemTime now);

// The status Kueue's preemption writes when it evicts `workload`
// (pkg/scheduler/preemption/preemption.go, IssuePreemptions; evict.go,
// prepareForEviction): Evicted=True with `reason` and, for "Preempted", the
// Preempted condition and preemptionMessage's text. FAILED_PRECONDITION for
// a workload without a quota reservation; an already evicted workload comes
// back unchanged.
StatusOr<json> EvictedWorkload(const json& workload, const std::string& reason, SystemTime now);

}  // namespace tfjob::testing::kueue

// Creates in slow-start batches, as Kubernetes' Job and ReplicaSet
// controllers create pods (slowStartBatch).
// Thread-safety: `work` runs on up to kMaxBatch threads at once and must be
// safe for that; SlowStartBatch itself keeps no state between calls.
#pragma once

#include <cstddef>
#include <functional>

namespace tfjob::op::controller {

inline constexpr size_t kMaxBatch = 16;

// Runs work(0..n-1) in batches of 1, 2, 4, ... (at most kMaxBatch), each
// batch's calls concurrently and each batch only after the previous one
// succeeded whole (every call returned true). So a job's pods go out in a
// few round trips, while a create that fails (a quota, a webhook) is not
// repeated for every replica; what was not tried is created on the requeue.
// An exception from `work` (a bug: a malformed answer read without a check)
// never escapes a helper thread, which would end the process: the first is
// rethrown here, on the caller's thread, after every thread of its batch has
// finished, where the worker counts it as a reconcile panic.
void SlowStartBatch(size_t n, const std::function<bool(size_t)>& work);

}  // namespace tfjob::op::controller

// A test Kueue: the admission part of Kueue v0.19.2's scheduler and
// workload controller, for the simple case, over a real API server that has
// Kueue's CRDs (../shared/kueue/crds) but not Kueue's controller (its Go
// modules cannot be fetched here). It reads ResourceFlavors, ClusterQueues
// (nominal quota per flavor), LocalQueues and Workloads
// (kueue.x-k8s.io/v1beta1 throughout) and writes Workload status as Kueue
// does: the admission and QuotaReserved / Admitted when the requests fit,
// QuotaReserved=False (Pending, Inadmissible) when not, Evicted on
// deactivation and on request (Evict). The rules are the pure functions of
// kueue_admitter_plan.h; what is left out is listed there.
//
// It does not play Kueue's job reconciler: starting and stopping the job,
// clearing the admission of an evicted workload once the job has stopped
// (jobframework/reconciler.go, "handle eviction"), and marking a workload
// Finished are the job integration's part (the test's, with
// operator/tests/kueue_player.h, or the operator's with --kueue=external).
// Once cleared, the workload is pending again and is admitted when it fits;
// a Finished workload releases its quota.
//
// The loop polls: every pass lists the four kinds whole and plans from that
// one snapshot, so each pass is level-based, idempotent and needs no cache to
// keep consistent; a test cluster holds a handful of these objects, and a
// pass every `interval` costs four small lists. A status write carries the
// resourceVersion it was read at; a conflict (or any error) is one log line
// and the next pass plans again from fresh reads.
//
// Ownership: borrows the Client, which must outlive the TestKueue; owns its
// thread between Start and Stop (the destructor stops it). Thread-safety:
// Start, Stop, RunOnce and Evict may be called from any thread; passes are
// serialised. Failure: Status values; the loop never throws and never dies
// on a bad object (one log line naming it, then it is skipped).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <ostream>
#include <set>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "common/status.h"
#include "kube/client.h"
#include "tests/support/kueue_admitter_plan.h"

namespace tfjob::testing {

inline const kube::Resource kKueueWorkloads{"kueue.x-k8s.io", "v1beta1", "workloads"};
inline const kube::Resource kKueueClusterQueues{"kueue.x-k8s.io", "v1beta1", "clusterqueues"};
inline const kube::Resource kKueueLocalQueues{"kueue.x-k8s.io", "v1beta1", "localqueues"};
inline const kube::Resource kKueueResourceFlavors{"kueue.x-k8s.io", "v1beta1", "resourceflavors"};

class TestKueue {
 public:
  struct Options {
    // Workloads and LocalQueues of this namespace only ("": all). Quota is
    // then counted over this namespace's workloads alone, so tests in
    // namespaces of their own, with ClusterQueues of their own, do not meet.
    std::string ns;
    std::chrono::milliseconds interval{200};
    // Where the one-line reports go (writes, skipped objects, errors); null
    // for none. Written from the loop's thread.
    std::ostream* log = nullptr;
  };

  TestKueue(kube::Client& client, Options options);
  ~TestKueue();
  TestKueue(const TestKueue&) = delete;
  TestKueue& operator=(const TestKueue&) = delete;

  void Start();
  void Stop();

  // One pass (what the loop does each interval): observe, plan, write. The
  // first error of a list stops the pass; a failed write is logged and the
  // others still go. Returns the writes made.
  StatusOr<int> RunOnce();

  // Kueue's preemption of an admitted workload (evict.go, Evict, as
  // IssuePreemptions calls it): Evicted=True with `reason` ("Preempted":
  // also the Preempted condition and preemptionMessage's text). Retries a
  // conflict a few times. NOT_FOUND, FAILED_PRECONDITION (no quota
  // reserved), or the write's error; an evicted workload is left as it is.
  Status Evict(const std::string& ns, const std::string& name, const std::string& reason = "Preempted");

  int64_t passes() const { return passes_.load(); }

 private:
  StatusOr<kueue::Observed> Observe();
  void Log(const std::string& line);
  void Loop();

  kube::Client& client_;
  const Options options_;
  // One pass or eviction at a time, held across their API calls: each plans
  // from its own reads, and the other's write would only make it conflict.
  // Nothing else takes it; Stop waits for the pass in flight.
  Mutex pass_mu_;
  std::set<std::string> reported_ TFJOB_GUARDED_BY(pass_mu_);  // the last pass's skipped objects
  Mutex mu_;
  CondVar wake_;
  bool stopping_ TFJOB_GUARDED_BY(mu_) = false;
  std::thread thread_;
  std::atomic<int64_t> passes_{0};
};

}  // namespace tfjob::testing

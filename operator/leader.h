// Leader election on a coordination.k8s.io/v1 Lease with client-go's
// semantics (k8s.io/client-go/tools/leaderelection):
//   - lease duration: how long a candidate waits, after it last saw the
//     lease record change, before it may take the lease over;
//   - renew deadline: how long the leader keeps retrying a renewal before it
//     gives leadership up (shorter than the lease duration, so the leader
//     has stopped before anyone can take over);
//   - retry period: the pause between attempts.
// Expiry is judged by this candidate's own clock, from the moment it
// observed the record change (holder, renewTime, ...): the holder's
// renewTime, written with the holder's clock, is never compared with ours,
// so candidates whose wall clocks disagree by any amount still see one
// leader at a time. The timestamps written (acquireTime, renewTime) are for
// people reading the Lease.
// Validity, as client-go: lease duration > renew deadline > 1.2 x retry period.
//
// Thread-safety: Acquire, Hold and Release on one thread; IsLeader from any.
// Failure: API errors make an attempt fail and are retried; nothing throws.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "kube/client.h"

namespace tfjob::op {

// Time for the elector. Tests inject one to skew the wall clock or to run
// candidates in virtual time.
class LeaderClock {
 public:
  virtual ~LeaderClock() = default;
  // For the timestamps written into the Lease.
  virtual std::chrono::system_clock::time_point Wall() = 0;
  // For observed times and deadlines (monotonic).
  virtual std::chrono::steady_clock::time_point Now() = 0;
  // Sleeps for `d`, or less once `stop` is set.
  virtual void SleepFor(std::chrono::nanoseconds d, const std::atomic<bool>& stop) = 0;
};
std::shared_ptr<LeaderClock> RealLeaderClock();

struct LeaderOptions {
  std::string ns = "default";
  std::string name = "tfjob-operator-leader";
  std::string identity;
  std::chrono::milliseconds lease_duration{15000};
  std::chrono::milliseconds renew_deadline{10000};
  std::chrono::milliseconds retry_period{2000};
  std::shared_ptr<LeaderClock> clock;  // default: RealLeaderClock()
  // Between two attempts to acquire, a candidate waits retry_period x
  // (1 + jitter_factor x U[0,1)), client-go's wait.JitterUntil with its
  // JitterFactor, so candidates that start together do not keep colliding.
  // Renewals are not jittered (nor are they in client-go).
  double jitter_factor = 1.2;
  // U[0,1) for that jitter; default: a generator seeded from std::random_device.
  std::function<double()> uniform;
  // Called on the electing thread when leadership is won and when it ends
  // (lost or released).
  std::function<void()> on_started_leading, on_stopped_leading;
  // Where failed attempts are said (nullptr: nowhere): every API error (a
  // 403 from RBAC, an unreachable server), and who holds the Lease each
  // time that changes, so a candidate never waits in silence.
  std::ostream* log = nullptr;
};

// INVALID_ARGUMENT unless lease duration > renew deadline > 1.2 x retry period > 0.
Status ValidateLeaderOptions(const LeaderOptions& o);

class LeaderElector {
 public:
  // `client` must outlive the elector; `options` must be valid.
  LeaderElector(kube::Client& client, LeaderOptions options);
  // Blocks until leadership is won (returns true) or `stop` (false).
  bool Acquire(const std::atomic<bool>& stop);
  // Renews every retry period until `stop` (returns true) or until a
  // renewal has not succeeded within the renew deadline (false: leadership
  // is lost and the caller must stop acting as leader).
  bool Hold(const std::atomic<bool>& stop);
  // Hands the lease back (empty holder) so a successor need not wait for it
  // to expire.
  void Release();
  bool IsLeader() const { return leader_.load(); }

  // One attempt, as client-go's tryAcquireOrRenew: OK when this candidate
  // holds the lease afterwards; FAILED_PRECONDITION while another holds a
  // lease that has not expired in our observation; API errors as they come.
  Status TryAcquireOrRenew();

 private:
  void SetLeader(bool leader);

  kube::Client& client_;
  const LeaderOptions options_;
  std::atomic<bool> leader_{false};
  // The last record seen (the Lease's spec) and when we saw it change.
  nlohmann::json observed_ = nullptr;
  std::chrono::steady_clock::time_point observed_at_{};
};

}  // namespace tfjob::op

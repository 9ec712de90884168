// A rate-limited work queue with client-go's guarantees: a key is queued at
// most once, is never processed by two workers at the same time (a key added
// while it is processed is queued again when Done is called), can be
// re-added after a delay (timed requeue), and backs off exponentially per key
// on repeated failures until Forget. Its metrics are client-go's workqueue
// metrics (WorkQueueMetrics, when given).
// Thread-safety: every method may be called from any thread; the metrics
// observer is called under the queue's lock and must not call back.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "common/mutex.h"

namespace tfjob::kube {

// What client-go's workqueue reports (workqueue_* series): called by the
// queue as things happen.
class WorkQueueMetrics {
 public:
  virtual ~WorkQueueMetrics() = default;
  virtual void Added() = 0;                 // a key queued that was not queued yet
  virtual void Depth(size_t depth) = 0;     // keys waiting
  virtual void Queued(double seconds) = 0;  // from its first add to its Get
  virtual void Worked(double seconds) = 0;  // from its Get to its Done
  virtual void Retried() = 0;               // an AddRateLimited
};

class WorkQueue {
 public:
  WorkQueue(std::chrono::milliseconds base_backoff = std::chrono::milliseconds(5),
            std::chrono::milliseconds max_backoff = std::chrono::seconds(300),
            std::shared_ptr<WorkQueueMetrics> metrics = nullptr);
  ~WorkQueue();

  void Add(const std::string& key);
  void AddAfter(const std::string& key, std::chrono::milliseconds delay);
  // Re-adds `key` after its backoff: base * 2^(failures so far), at most
  // max. Returns that delay.
  std::chrono::milliseconds AddRateLimited(const std::string& key);
  void Forget(const std::string& key);
  int Retries(const std::string& key) const;

  // Blocks for the next key; std::nullopt after ShutDown.
  std::optional<std::string> Get();
  void Done(const std::string& key);
  void ShutDown();

  size_t Depth() const;
  // Keys being processed: the seconds they have taken so far, summed, and
  // the longest (client-go's unfinished_work_seconds and
  // longest_running_processor_seconds).
  std::pair<double, double> InFlight() const;

 private:
  using Clock = std::chrono::steady_clock;
  // Under mu_: a key becomes waiting (queue_ gets it).
  void EnqueueLocked(const std::string& key) TFJOB_REQUIRES(mu_);
  void TimerLoop();

  const std::chrono::milliseconds base_, max_;
  mutable Mutex mu_;
  CondVar cv_, timer_cv_;
  std::deque<std::string> queue_ TFJOB_GUARDED_BY(mu_);
  std::set<std::string> dirty_ TFJOB_GUARDED_BY(mu_), processing_ TFJOB_GUARDED_BY(mu_);
  std::shared_ptr<WorkQueueMetrics> metrics_;
  std::map<std::string, Clock::time_point> added_at_ TFJOB_GUARDED_BY(mu_);    // dirty keys: when first added
  std::map<std::string, Clock::time_point> started_at_ TFJOB_GUARDED_BY(mu_);  // processing keys: when taken
  std::map<std::string, int> failures_ TFJOB_GUARDED_BY(mu_);
  std::multimap<std::chrono::steady_clock::time_point, std::string> delayed_ TFJOB_GUARDED_BY(mu_);
  bool shutdown_ TFJOB_GUARDED_BY(mu_) = false;
  std::thread timer_;
};

}  // namespace tfjob::kube

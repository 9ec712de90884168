// A rate-limited work queue with client-go's guarantees: a key is queued at
// most once, is never processed by two workers at the same time (a key added
// while it is processed is queued again when Done is called), can be
// re-added after a delay (timed requeue), and backs off exponentially per key
// on repeated failures until Forget.
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

namespace tfjob::op::kube {

class WorkQueue {
 public:
  WorkQueue(std::chrono::milliseconds base_backoff = std::chrono::milliseconds(5),
            std::chrono::milliseconds max_backoff = std::chrono::seconds(300));
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

 private:
  void TimerLoop();

  const std::chrono::milliseconds base_, max_;
  mutable std::mutex mu_;
  std::condition_variable cv_, timer_cv_;
  std::deque<std::string> queue_;
  std::set<std::string> dirty_, processing_;
  std::map<std::string, int> failures_;
  std::multimap<std::chrono::steady_clock::time_point, std::string> delayed_;
  bool shutdown_ = false;
  std::thread timer_;
};

}  // namespace tfjob::op::kube

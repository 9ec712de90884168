// Writes Events off the reconcile path, as client-go's EventBroadcaster
// does: Record() queues the event and returns at once; one thread creates
// the queued events, in order, through a Client of its own.
// controller-runtime gives its event recorder its own clientset, and so its
// own rate limiter: events never spend the reconciles' request budget, and a
// reconcile never waits on one. Without this, a job's ten creation events
// took the client's token bucket from its pods and services (measured:
// bench/operator_scale.sh, docs/operations.md).
//
// Events are best effort, as in client-go: one that fails is dropped, said
// on the log stream once per kind of error (status code) in a row; when the queue is full (1,000,
// the broadcaster's channel) new events are dropped and counted.
//
// Ownership: borrows the Client, which must outlive the sink; owns its
// thread. Thread-safety: Record and the counters from any thread.
// Destruction writes what is still queued for at most `drain` (5 s), then
// stops.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/mutex.h"
#include "kube/client.h"

namespace tfjob::kube {

class EventSink {
 public:
  explicit EventSink(Client& client, std::ostream* log = nullptr, size_t capacity = 1000,
                     std::chrono::milliseconds drain = std::chrono::seconds(5));
  ~EventSink();
  EventSink(const EventSink&) = delete;
  EventSink& operator=(const EventSink&) = delete;

  // Queues a core/v1 Event for namespace `ns`.
  void Record(const std::string& ns, nlohmann::json event);
  // Blocks until everything queued so far has been written (or dropped), or
  // `timeout` passed; true when the queue is empty.
  bool Flush(std::chrono::milliseconds timeout);

  int64_t written() const { return written_.load(); }
  int64_t dropped() const { return dropped_.load(); }

 private:
  void Run();

  Client& client_;
  std::ostream* log_;
  const size_t capacity_;
  const std::chrono::milliseconds drain_;
  Mutex mu_;
  CondVar cv_, idle_;
  std::deque<std::pair<std::string, nlohmann::json>> queue_ TFJOB_GUARDED_BY(mu_);
  bool busy_ TFJOB_GUARDED_BY(mu_) = false, stopping_ TFJOB_GUARDED_BY(mu_) = false;
  std::string last_error_ TFJOB_GUARDED_BY(mu_);
  std::atomic<int64_t> written_{0}, dropped_{0};
  std::thread thread_;
};

}  // namespace tfjob::kube

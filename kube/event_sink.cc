#include "kube/event_sink.h"
#include "common/mutex.h"

namespace tfjob::kube {

namespace {
const Resource kEventResource{"", "v1", "events"};
}  // namespace

EventSink::EventSink(Client& client, std::ostream* log, size_t capacity, std::chrono::milliseconds drain)
    : client_(client), log_(log), capacity_(capacity), drain_(drain), thread_([this] { Run(); }) {}

EventSink::~EventSink() {
  Flush(drain_);
  {
    MutexLock l(mu_);
    stopping_ = true;
  }
  cv_.NotifyAll();
  thread_.join();
  dropped_ += static_cast<int64_t>(queue_.size());
}

void EventSink::Record(const std::string& ns, nlohmann::json event) {
  {
    MutexLock l(mu_);
    if (stopping_ || queue_.size() >= capacity_) {
      if (dropped_++ == 0 && log_ && !stopping_) {
        *log_ << "tfjob-operator: the event queue is full (" << capacity_
              << "): dropping events until it drains, as client-go's broadcaster does" << std::endl;
      }
      return;
    }
    queue_.emplace_back(ns, std::move(event));
  }
  cv_.NotifyOne();
}

bool EventSink::Flush(std::chrono::milliseconds timeout) {
  MutexLock l(mu_);
  return idle_.WaitFor(l, timeout, [this]() TFJOB_REQUIRES(mu_) { return queue_.empty() && !busy_; });
}

void EventSink::Run() {
  MutexLock l(mu_);
  for (;;) {
    cv_.Wait(l, [this]() TFJOB_REQUIRES(mu_) { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    auto [ns, event] = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    l.Unlock();
    const Status s = client_.Create(kEventResource, ns, event).status();
    l.Lock();
    busy_ = false;
    if (s.ok()) {
      ++written_;
    } else {
      ++dropped_;
      // Once per kind of failure (the message names each event).
      const std::string kind = std::to_string(static_cast<int>(s.code()));
      if (log_ && kind != last_error_) {
        *log_ << "tfjob-operator: event not recorded (events are best effort; said once per kind of error): "
              << s.message() << std::endl;
      }
      last_error_ = kind;
    }
    if (queue_.empty()) idle_.NotifyAll();
  }
}

}  // namespace tfjob::kube

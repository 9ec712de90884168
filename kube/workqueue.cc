#include "kube/workqueue.h"
#include "common/mutex.h"

#include <algorithm>
#include <cmath>

namespace tfjob::kube {

WorkQueue::WorkQueue(std::chrono::milliseconds base, std::chrono::milliseconds max,
                     std::shared_ptr<WorkQueueMetrics> metrics)
    : base_(base), max_(max), metrics_(std::move(metrics)), timer_([this] { TimerLoop(); }) {}

WorkQueue::~WorkQueue() {
  ShutDown();
  timer_.join();
}

void WorkQueue::EnqueueLocked(const std::string& key) {
  queue_.push_back(key);
  if (metrics_) metrics_->Depth(queue_.size());
  cv_.NotifyOne();
}

void WorkQueue::Add(const std::string& key) {
  MutexLock g(mu_);
  if (shutdown_ || dirty_.count(key)) return;
  dirty_.insert(key);
  added_at_.emplace(key, Clock::now());
  if (metrics_) metrics_->Added();
  if (processing_.count(key)) return;  // re-queued by Done
  EnqueueLocked(key);
}

void WorkQueue::AddAfter(const std::string& key, std::chrono::milliseconds delay) {
  if (delay.count() <= 0) {
    Add(key);
    return;
  }
  MutexLock g(mu_);
  if (shutdown_) return;
  delayed_.emplace(std::chrono::steady_clock::now() + delay, key);
  timer_cv_.NotifyOne();
}

std::chrono::milliseconds WorkQueue::AddRateLimited(const std::string& key) {
  std::chrono::milliseconds delay;
  {
    MutexLock g(mu_);
    if (metrics_) metrics_->Retried();
    const int n = failures_[key]++;
    const double ms = static_cast<double>(base_.count()) * std::pow(2.0, std::min(n, 30));
    delay = std::min(max_, std::chrono::milliseconds(static_cast<int64_t>(ms)));
  }
  AddAfter(key, delay);
  return delay;
}

void WorkQueue::Forget(const std::string& key) {
  MutexLock g(mu_);
  failures_.erase(key);
}

int WorkQueue::Retries(const std::string& key) const {
  MutexLock g(mu_);
  auto it = failures_.find(key);
  return it == failures_.end() ? 0 : it->second;
}

std::optional<std::string> WorkQueue::Get() {
  MutexLock lock(mu_);
  cv_.Wait(lock, [&]() TFJOB_REQUIRES(mu_) { return shutdown_ || !queue_.empty(); });
  if (queue_.empty()) return std::nullopt;
  std::string key = queue_.front();
  queue_.pop_front();
  processing_.insert(key);
  dirty_.erase(key);
  const auto now = Clock::now();
  started_at_[key] = now;
  if (auto it = added_at_.find(key); it != added_at_.end()) {
    if (metrics_) metrics_->Queued(std::chrono::duration<double>(now - it->second).count());
    added_at_.erase(it);
  }
  if (metrics_) metrics_->Depth(queue_.size());
  return key;
}

void WorkQueue::Done(const std::string& key) {
  MutexLock g(mu_);
  processing_.erase(key);
  if (auto it = started_at_.find(key); it != started_at_.end()) {
    if (metrics_) metrics_->Worked(std::chrono::duration<double>(Clock::now() - it->second).count());
    started_at_.erase(it);
  }
  if (dirty_.count(key) && !shutdown_) EnqueueLocked(key);
}

std::pair<double, double> WorkQueue::InFlight() const {
  MutexLock g(mu_);
  const auto now = Clock::now();
  double total = 0, longest = 0;
  for (const auto& [key, since] : started_at_) {
    const double s = std::chrono::duration<double>(now - since).count();
    total += s;
    longest = std::max(longest, s);
  }
  return {total, longest};
}

void WorkQueue::ShutDown() {
  MutexLock g(mu_);
  shutdown_ = true;
  cv_.NotifyAll();
  timer_cv_.NotifyAll();
}

size_t WorkQueue::Depth() const {
  MutexLock g(mu_);
  return queue_.size();
}

void WorkQueue::TimerLoop() {
  MutexLock lock(mu_);
  while (!shutdown_) {
    if (delayed_.empty()) {
      timer_cv_.Wait(lock);
      continue;
    }
    const auto first = delayed_.begin()->first;
    if (std::chrono::steady_clock::now() < first) {
      timer_cv_.WaitUntil(lock, first);
      continue;
    }
    std::string key = delayed_.begin()->second;
    delayed_.erase(delayed_.begin());
    if (!dirty_.count(key)) {
      dirty_.insert(key);
      added_at_.emplace(key, Clock::now());
      if (metrics_) metrics_->Added();
      if (!processing_.count(key)) EnqueueLocked(key);
    }
  }
}

}  // namespace tfjob::kube

#include "operator/kube/workqueue.h"

#include <algorithm>
#include <cmath>

namespace tfjob::op::kube {

WorkQueue::WorkQueue(std::chrono::milliseconds base, std::chrono::milliseconds max)
    : base_(base), max_(max), timer_([this] { TimerLoop(); }) {}

WorkQueue::~WorkQueue() {
  ShutDown();
  timer_.join();
}

void WorkQueue::Add(const std::string& key) {
  std::lock_guard g(mu_);
  if (shutdown_ || dirty_.count(key)) return;
  dirty_.insert(key);
  if (processing_.count(key)) return;  // re-queued by Done
  queue_.push_back(key);
  cv_.notify_one();
}

void WorkQueue::AddAfter(const std::string& key, std::chrono::milliseconds delay) {
  if (delay.count() <= 0) {
    Add(key);
    return;
  }
  std::lock_guard g(mu_);
  if (shutdown_) return;
  delayed_.emplace(std::chrono::steady_clock::now() + delay, key);
  timer_cv_.notify_one();
}

std::chrono::milliseconds WorkQueue::AddRateLimited(const std::string& key) {
  std::chrono::milliseconds delay;
  {
    std::lock_guard g(mu_);
    const int n = failures_[key]++;
    const double ms = static_cast<double>(base_.count()) * std::pow(2.0, std::min(n, 30));
    delay = std::min(max_, std::chrono::milliseconds(static_cast<int64_t>(ms)));
  }
  AddAfter(key, delay);
  return delay;
}

void WorkQueue::Forget(const std::string& key) {
  std::lock_guard g(mu_);
  failures_.erase(key);
}

int WorkQueue::Retries(const std::string& key) const {
  std::lock_guard g(mu_);
  auto it = failures_.find(key);
  return it == failures_.end() ? 0 : it->second;
}

std::optional<std::string> WorkQueue::Get() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return shutdown_ || !queue_.empty(); });
  if (queue_.empty()) return std::nullopt;
  std::string key = queue_.front();
  queue_.pop_front();
  processing_.insert(key);
  dirty_.erase(key);
  return key;
}

void WorkQueue::Done(const std::string& key) {
  std::lock_guard g(mu_);
  processing_.erase(key);
  if (dirty_.count(key) && !shutdown_) {
    queue_.push_back(key);
    cv_.notify_one();
  }
}

void WorkQueue::ShutDown() {
  std::lock_guard g(mu_);
  shutdown_ = true;
  cv_.notify_all();
  timer_cv_.notify_all();
}

size_t WorkQueue::Depth() const {
  std::lock_guard g(mu_);
  return queue_.size();
}

void WorkQueue::TimerLoop() {
  std::unique_lock lock(mu_);
  while (!shutdown_) {
    if (delayed_.empty()) {
      timer_cv_.wait(lock);
      continue;
    }
    const auto first = delayed_.begin()->first;
    if (std::chrono::steady_clock::now() < first) {
      timer_cv_.wait_until(lock, first);
      continue;
    }
    std::string key = delayed_.begin()->second;
    delayed_.erase(delayed_.begin());
    if (!dirty_.count(key)) {
      dirty_.insert(key);
      if (!processing_.count(key)) {
        queue_.push_back(key);
        cv_.notify_one();
      }
    }
  }
}

}  // namespace tfjob::op::kube

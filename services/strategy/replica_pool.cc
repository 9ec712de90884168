#include "services/strategy/replica_pool.h"

#include <algorithm>

namespace tfjob::strategy {

ReplicaPool::ReplicaPool(int replicas) : size_(std::max(1, replicas)) {
  for (int i = 1; i < size_; ++i) {
    threads_.emplace_back([this, i] {
      uint64_t seen = 0;
      while (true) {
        const std::function<void(int)>* fn;
        {
          std::unique_lock lk(mu_);
          start_cv_.wait(lk, [&] { return stop_ || generation_ != seen; });
          if (stop_) return;
          seen = generation_;
          fn = fn_;
        }
        (*fn)(i);
        {
          std::lock_guard g(mu_);
          if (--running_ == 0) done_cv_.notify_all();
        }
      }
    });
  }
}

ReplicaPool::~ReplicaPool() {
  {
    std::lock_guard g(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ReplicaPool::Run(const std::function<void(int)>& fn) {
  if (size_ == 1) {
    fn(0);
    return;
  }
  {
    std::lock_guard g(mu_);
    fn_ = &fn;
    running_ = size_ - 1;
    ++generation_;
  }
  start_cv_.notify_all();
  fn(0);
  std::unique_lock lk(mu_);
  done_cv_.wait(lk, [&] { return running_ == 0; });
}

}  // namespace tfjob::strategy

#include "services/strategy/replica_pool.h"

#include <algorithm>

namespace tfjob::strategy {

ReplicaPool::ReplicaPool(int replicas) : size_(std::max(1, replicas)) {
  for (int i = 1; i < size_; ++i) threads_.emplace_back([this, i] { Worker(i); });
}

void ReplicaPool::Worker(int replica) {
  uint64_t seen = 0;
  while (true) {
    const std::function<void(int)>* fn;
    {
      MutexLock l(mu_);
      start_cv_.Wait(l, [&]() TFJOB_REQUIRES(mu_) { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      fn = fn_;
    }
    (*fn)(replica);
    {
      MutexLock l(mu_);
      if (--running_ == 0) done_cv_.NotifyAll();
    }
  }
}

ReplicaPool::~ReplicaPool() {
  {
    MutexLock l(mu_);
    stop_ = true;
  }
  start_cv_.NotifyAll();
  for (auto& t : threads_) t.join();
}

void ReplicaPool::Run(const std::function<void(int)>& fn) {
  if (size_ == 1) {
    fn(0);
    return;
  }
  {
    MutexLock l(mu_);
    fn_ = &fn;
    running_ = size_ - 1;
    ++generation_;
  }
  start_cv_.NotifyAll();
  fn(0);
  MutexLock l(mu_);
  done_cv_.Wait(l, [&]() TFJOB_REQUIRES(mu_) { return running_ == 0; });
}

}  // namespace tfjob::strategy

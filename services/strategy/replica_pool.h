// Runs one function per local replica on its own thread and waits for all:
// the replicas of mirrored and central-storage strategies. Replica 0 runs on
// the calling thread; the others on threads kept for the pool's lifetime, so
// a step costs no thread creation.
//
// Ownership: owns its threads. Thread-safety: Run from one thread at a time;
// the pool's shared state is behind mu_. Failure: none here; the function
// reports its own errors.
#pragma once

#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace tfjob::strategy {

class ReplicaPool {
 public:
  explicit ReplicaPool(int replicas);
  ~ReplicaPool();
  ReplicaPool(const ReplicaPool&) = delete;
  ReplicaPool& operator=(const ReplicaPool&) = delete;

  int size() const { return size_; }
  // fn(0) .. fn(size-1), concurrently; returns when every call has returned.
  void Run(const std::function<void(int)>& fn) TFJOB_EXCLUDES(mu_);

 private:
  void Worker(int replica) TFJOB_EXCLUDES(mu_);

  const int size_;
  Mutex mu_;
  CondVar start_cv_, done_cv_;
  const std::function<void(int)>* fn_ TFJOB_GUARDED_BY(mu_) = nullptr;
  uint64_t generation_ TFJOB_GUARDED_BY(mu_) = 0;  // bumped by each Run
  int running_ TFJOB_GUARDED_BY(mu_) = 0;          // threads still running this Run's fn
  bool stop_ TFJOB_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // set up in the constructor, joined in the destructor
};

}  // namespace tfjob::strategy

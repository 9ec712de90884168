// Runs one function per local replica on its own thread and waits for all:
// the replicas of mirrored and central-storage strategies. Replica 0 runs on
// the calling thread; the others on threads kept for the pool's lifetime, so
// a step costs no thread creation.
//
// Ownership: owns its threads. Thread-safety: Run from one thread at a time.
// Failure: none here; the function reports its own errors.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tfjob::strategy {

class ReplicaPool {
 public:
  explicit ReplicaPool(int replicas);
  ~ReplicaPool();
  ReplicaPool(const ReplicaPool&) = delete;
  ReplicaPool& operator=(const ReplicaPool&) = delete;

  int size() const { return size_; }
  // fn(0) .. fn(size-1), concurrently; returns when every call has returned.
  void Run(const std::function<void(int)>& fn);

 private:
  const int size_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(int)>* fn_ = nullptr;
  uint64_t generation_ = 0;
  int running_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace tfjob::strategy

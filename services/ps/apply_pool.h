// A small fixed pool of threads that runs the n independent pieces of one
// job (the updates of one push, each to its own shard) and waits for them.
// The calling thread works too, so a pool of zero threads runs everything
// inline.
//
// Ownership: owns its threads; the destructor joins them (no job may be
// running). Thread-safety: Run may be called from many threads at once;
// their pieces share the pool.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace tfjob::ps {

class ApplyPool {
 public:
  explicit ApplyPool(int threads);
  ~ApplyPool();
  ApplyPool(const ApplyPool&) = delete;
  ApplyPool& operator=(const ApplyPool&) = delete;

  int threads() const { return static_cast<int>(threads_.size()); }
  // Calls fn(0) .. fn(n-1), spread over the pool and the caller; returns
  // when all have returned.
  void Run(size_t n, const std::function<void(size_t)>& fn);

 private:
  struct Job;
  void Loop();

  Mutex mu_;
  CondVar cv_;
  std::deque<Job*> jobs_ TFJOB_GUARDED_BY(mu_);  // jobs with pieces not yet taken
  bool stop_ TFJOB_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace tfjob::ps

#include "services/ps/apply_pool.h"
#include "common/mutex.h"

namespace tfjob::ps {

struct ApplyPool::Job {
  const std::function<void(size_t)>* fn = nullptr;
  size_t n = 0;
  size_t next = 0;      // the next piece to hand out (under mu_)
  size_t finished = 0;  // pieces done (under mu_)
  CondVar done;
};

ApplyPool::ApplyPool(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

ApplyPool::~ApplyPool() {
  {
    MutexLock g(mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  for (auto& t : threads_) t.join();
}

void ApplyPool::Run(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  if (n == 1 || threads_.empty()) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  Job job;
  job.fn = &fn;
  job.n = n;
  MutexLock lock(mu_);
  jobs_.push_back(&job);
  cv_.NotifyAll();
  // The caller takes pieces too, then waits for the ones the pool took.
  while (job.next < job.n) {
    const size_t i = job.next++;
    if (job.next == job.n) std::erase(jobs_, &job);
    lock.Unlock();
    fn(i);
    lock.Lock();
    ++job.finished;
  }
  job.done.Wait(lock, [&] { return job.finished == job.n; });
}

void ApplyPool::Loop() {
  MutexLock lock(mu_);
  while (true) {
    cv_.Wait(lock, [&]() TFJOB_REQUIRES(mu_) { return stop_ || !jobs_.empty(); });
    if (stop_) return;
    Job* job = jobs_.front();
    const size_t i = job->next++;
    if (job->next == job->n) jobs_.pop_front();
    lock.Unlock();
    (*job->fn)(i);
    lock.Lock();
    if (++job->finished == job->n) job->done.NotifyAll();
  }
}

}  // namespace tfjob::ps

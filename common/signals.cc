#include "common/signals.h"
#include "common/mutex.h"

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>

namespace tfjob {

SignalWatcher::SignalWatcher() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  thread_ = std::thread([this, set] {
    // A timed wait, so the destructor can end the thread.
    const timespec tick{0, 200 * 1000 * 1000};
    while (!quit_) {
      if (sigtimedwait(&set, nullptr, &tick) < 0) continue;
      std::vector<std::function<void()>> run;
      {
        MutexLock g(mu_);
        if (stop_) continue;
        stop_ = true;
        run.swap(callbacks_);
      }
      StartGraceTimer();
      for (auto& fn : run) fn();
    }
  });
}

SignalWatcher::~SignalWatcher() {
  {
    // Disarmed first: the role ended on its own, and the thread may take a
    // tick to notice quit_.
    MutexLock g(grace_->mu);
    grace_->period.reset();
    ++grace_->epoch;
  }
  quit_ = true;
  if (thread_.joinable()) thread_.join();
}

void SignalWatcher::OnStop(std::function<void()> fn) {
  {
    MutexLock g(mu_);
    if (!stop_) {
      callbacks_.push_back(std::move(fn));
      return;
    }
  }
  fn();
}

void SignalWatcher::ExitAfter(std::chrono::milliseconds grace) {
  {
    MutexLock g(grace_->mu);
    grace_->period = grace;
  }
  if (stop_) StartGraceTimer();
}

void SignalWatcher::StartGraceTimer() {
  std::chrono::milliseconds period;
  uint64_t epoch;
  {
    MutexLock g(grace_->mu);
    if (!grace_->period) return;
    period = *grace_->period;
    epoch = ++grace_->epoch;
  }
  // Detached: it must be able to end the process whatever the other
  // threads are stuck in.
  std::thread([grace = grace_, period, epoch] {
    std::this_thread::sleep_for(period);
    {
      MutexLock g(grace->mu);
      if (epoch != grace->epoch) return;
    }
    std::fprintf(stderr, "stopping: the shutdown grace period ended; exiting now (exit code %d)\n", kExitStopped);
    std::_Exit(kExitStopped);
  }).detach();
}

}  // namespace tfjob

#include "common/signals.h"

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
        std::lock_guard g(mu_);
        if (stop_) continue;
        stop_ = true;
        run.swap(callbacks_);
      }
      for (auto& fn : run) fn();
    }
  });
}

SignalWatcher::~SignalWatcher() {
  quit_ = true;
  if (thread_.joinable()) thread_.join();
}

void SignalWatcher::OnStop(std::function<void()> fn) {
  {
    std::lock_guard g(mu_);
    if (!stop_) {
      callbacks_.push_back(std::move(fn));
      return;
    }
  }
  fn();
}

void SignalWatcher::ExitAfter(std::chrono::milliseconds grace) {
  OnStop([grace] {
    std::thread([grace] {
      std::this_thread::sleep_for(grace);
      std::fprintf(stderr, "stopping: the shutdown grace period ended; exiting now\n");
      std::_Exit(0);
    }).detach();
  });
}

}  // namespace tfjob

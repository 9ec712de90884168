// SIGTERM and SIGINT as a request to stop, for every role: Kubernetes sends
// SIGTERM on every pod deletion (drain, preemption, eviction), and a task
// must then finish or abandon what it is doing cleanly. A task stopped that
// way has not finished its work, so it exits kExitStopped (143, as if the
// signal had killed it): the code Kubernetes' ExitCode policy and this
// project's retry rules treat as retryable. Only a task whose part of
// training is complete exits 0.
//
// The watcher blocks both signals in the calling thread before any other
// thread exists, so every thread created afterwards inherits the mask and
// only the watcher's own thread ever takes them (a signal arriving while,
// say, gRPC starts its threads can no longer kill the process).
//
// Ownership: owns its thread. Thread-safety: stop(), OnStop and ExitAfter may
// be used from any thread. Failure: none.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace tfjob {

// The exit code of a task a signal stopped before its work was done.
inline constexpr int kExitStopped = 143;

class SignalWatcher {
 public:
  // Must be created before the process starts other threads.
  SignalWatcher();
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  // True once SIGTERM or SIGINT arrived.
  const std::atomic<bool>& stop() const { return stop_; }
  // Runs `fn` on the watcher's thread when a signal arrives (at once if one
  // already has). Functions must not block for long.
  void OnStop(std::function<void()> fn);
  // Once a signal has arrived, ends the process with kExitStopped after
  // `grace` if it has not ended by then: a bound on an orderly shutdown. The
  // last call's grace counts; a call after the signal restarts the clock.
  // Destroying the watcher disarms it.
  void ExitAfter(std::chrono::milliseconds grace);

 private:
  // The grace timer's state, shared with its detached thread.
  struct Grace {
    Mutex mu;
    std::optional<std::chrono::milliseconds> period TFJOB_GUARDED_BY(mu);
    uint64_t epoch TFJOB_GUARDED_BY(mu) = 0;  // only the timer started last (and not disarmed) fires
  };
  void StartGraceTimer();

  std::atomic<bool> stop_{false};
  std::atomic<bool> quit_{false};
  Mutex mu_;
  std::vector<std::function<void()>> callbacks_ TFJOB_GUARDED_BY(mu_);
  std::shared_ptr<Grace> grace_ = std::make_shared<Grace>();
  std::thread thread_;
};

}  // namespace tfjob

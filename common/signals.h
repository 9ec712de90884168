// SIGTERM and SIGINT as a request to stop, for every role: Kubernetes sends
// SIGTERM on every pod deletion, and a task must then finish or abandon what
// it is doing and exit 0, not die with 143 mid-write.
//
// The watcher blocks both signals in the calling thread before any other
// thread exists, so every thread created afterwards inherits the mask and
// only the watcher's own thread ever takes them (a signal arriving while,
// say, gRPC starts its threads can no longer kill the process).
//
// Ownership: owns its thread. Thread-safety: stop() and OnStop may be used
// from any thread. Failure: none.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tfjob {

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
  // Once a signal has arrived, ends the process with exit code 0 after
  // `grace` if it has not ended by then: a bound on an orderly shutdown.
  void ExitAfter(std::chrono::milliseconds grace);

 private:
  std::atomic<bool> stop_{false};
  std::atomic<bool> quit_{false};
  std::mutex mu_;
  std::vector<std::function<void()>> callbacks_;
  std::thread thread_;
};

}  // namespace tfjob

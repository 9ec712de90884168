// Waiting in tests for the thing itself (a condition, a log line, a thread
// that has blocked) with a generous deadline, instead of sleeping for a time
// that is too short on a loaded machine and too long on an idle one.
// Header-only. Thread-safety: reentrant. Failure: false when the deadline
// passes; the caller turns that into a test failure naming what it waited for.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

namespace tfjob::testing {

// Generous: a deadline only bounds how long a broken test hangs.
inline constexpr std::chrono::milliseconds kWaitPatience{30000};

// Re-evaluates `pred` every `poll` until it holds or `timeout` passes.
inline bool WaitUntil(const std::function<bool()>& pred, std::chrono::milliseconds timeout = kWaitPatience,
                      std::chrono::milliseconds poll = std::chrono::milliseconds(1)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return pred();
    std::this_thread::sleep_for(poll);
  }
  return true;
}

// Whether thread `tid` of this process is asleep in the kernel (state S or D
// in /proc/self/task/TID/stat): blocked on a condition variable, a lock or a
// read. Linux only; false when the thread does not exist.
inline bool ThreadIsBlocked(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return false;
  // "TID (COMM) STATE ...": COMM may hold spaces and parentheses.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return false;
  const char state = stat[close + 2];
  return state == 'S' || state == 'D';
}

// Waits until thread `tid` has blocked, e.g. inside a call that should wait,
// so the test then exercises the wake-up rather than a call that never slept.
inline bool WaitUntilBlocked(pid_t tid, std::chrono::milliseconds timeout = kWaitPatience) {
  return WaitUntil([tid] { return ThreadIsBlocked(tid); }, timeout);
}

}  // namespace tfjob::testing

#include "common/signals.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

namespace tfjob {
namespace {

// Runs `body` in a child process and returns how it ended: its exit code,
// or 128 + the signal that killed it.
template <typename Fn>
int InChild(Fn body) {
  const pid_t pid = fork();
  if (pid == 0) {
    body();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(SignalWatcherTest, SigtermSetsStopAndRunsTheCallbacks) {
  const int rc = InChild([] {
    SignalWatcher w;
    std::atomic<int> called{0};
    w.OnStop([&] { ++called; });
    kill(getpid(), SIGTERM);
    for (int i = 0; i < 500 && !w.stop(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    for (int i = 0; i < 500 && called == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    _exit(w.stop() && called == 1 ? 0 : 1);
  });
  EXPECT_EQ(rc, 0);
}

// A stop that takes longer than the grace period ends the process with
// 143, as if SIGTERM had killed it: not 0, the task did not finish.
TEST(SignalWatcherTest, AStopPastTheGracePeriodExits143) {
  const int rc = InChild([] {
    SignalWatcher w;
    w.ExitAfter(std::chrono::milliseconds(5000));
    w.ExitAfter(std::chrono::milliseconds(50));  // the last call counts
    kill(getpid(), SIGTERM);
    std::this_thread::sleep_for(std::chrono::seconds(30));  // stuck
    _exit(0);
  });
  EXPECT_EQ(rc, kExitStopped);
}

// A watcher that is gone (the role ended by itself) never fires.
TEST(SignalWatcherTest, ADestroyedWatcherIsDisarmed) {
  const int rc = InChild([] {
    {
      SignalWatcher w;
      w.ExitAfter(std::chrono::milliseconds(1000));
      kill(getpid(), SIGTERM);
      for (int i = 0; i < 500 && !w.stop(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    _exit(7);
  });
  EXPECT_EQ(rc, 7);
}

}  // namespace
}  // namespace tfjob

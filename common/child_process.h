// Starting a child process, written once: `tfjob run`'s replicas, the
// runtime's `local` tasks, the kubeconfig exec plugin, the tests' and the
// benchmarks' children all come through SpawnChild.
//
// Everything the child needs (argv, its whole environment, the descriptor
// moves) is built before fork, so between fork and exec the child makes only
// async-signal-safe calls: the parent may be running gRPC's or cpprestsdk's
// threads, and a child that called malloc (setenv does) could deadlock on a
// lock one of them held. A child that cannot exec reports its errno through
// a close-on-exec pipe, so SpawnChild fails with the reason instead of the
// caller finding an exit code 127 later.
//
// Ownership: the caller owns the returned pid (reap it: WaitForExit) and
// descriptors (close them). Thread-safety: reentrant. Failure: a Status
// naming argv[0]: FAILED_PRECONDITION for an empty argv, NOT_FOUND when the
// program does not exist, PERMISSION_DENIED when it cannot be executed,
// INTERNAL for a failed pipe or fork.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tfjob {

struct ChildOptions {
  // argv[0] without a '/' is looked up on PATH.
  std::vector<std::string> argv;
  // The child's environment is the parent's, less `unset_env`, with `env`
  // set over it.
  std::map<std::string, std::string> env;
  std::vector<std::string> unset_env;

  enum class Output {
    kInherit,   // stdout and stderr are the parent's
    kStdout,    // stdout through a pipe (out_fd), stderr the parent's
    kMerged,    // stdout and stderr through one pipe (out_fd)
    kSeparate,  // stdout through out_fd, stderr through err_fd
  };
  Output output = Output::kMerged;
  bool null_stdin = false;
  std::string cwd;  // empty: the parent's
  // Descriptors the child keeps: {descriptor here, its number in the child}
  // (the same number: kept where it is). Close-on-exec is cleared on them.
  std::vector<std::pair<int, int>> pass_fds;

  // The child is SIGKILLed when the thread that spawned it exits (Linux's
  // PR_SET_PDEATHSIG: spawn from a thread that lives as long as the child
  // should), and exits 127 at once if the parent is already gone.
  bool die_with_parent = true;
  // Its own process group (pgid = pid), so a signal to the group reaches
  // the child's own children too.
  bool own_process_group = false;
  // A new session (setsid): the child outlives a terminal's or a test
  // runner's kill of this process group. Implies die_with_parent = false.
  bool new_session = false;
  // Every signal unblocked and SIGTERM, SIGINT, SIGPIPE, SIGCHLD at their
  // defaults: a parent that blocks signals in every thread (SignalWatcher)
  // would otherwise pass the mask on across exec.
  bool default_signals = false;
};

struct SpawnedChild {
  pid_t pid = -1;
  int out_fd = -1;  // kStdout, kMerged, kSeparate
  int err_fd = -1;  // kSeparate
};

StatusOr<SpawnedChild> SpawnChild(const ChildOptions& options);

// Waits for `pid` (retrying on EINTR) and returns its exit code, or 128 + the
// signal that ended it, as a shell reports it. -1 if it cannot be waited for.
int WaitForExit(pid_t pid);

// Reads `fd` to its end (retrying EINTR) and calls `line` with each line,
// without its '\n'; a last line without one is passed too. Does not close
// `fd`. For the threads that copy a child's output somewhere.
void ForEachLine(int fd, const std::function<void(const std::string&)>& line);

// The exit code in a waitpid status: WEXITSTATUS, or 128 + the signal.
int ExitCodeOf(int wait_status);

}  // namespace tfjob

// A child process for the benchmarks (a PS, a worker, a raw TCP server):
// started with extra environment, its stdout read line by line (it prints
// its port or address first), and ended when the object goes away. It dies
// with the benchmark even if the benchmark is killed (PR_SET_PDEATHSIG).
// Thread-safety: one owner.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/child_process.h"
#include "common/status.h"

namespace tfjob::bench {

inline std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

inline std::string SelfExe() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "/proc/self/exe";
  buf[n] = '\0';
  return buf;
}

// A child process whose stdout we read line by line; killed (by its pid) if
// still running when this object goes away.
class Child {
 public:
  static StatusOr<std::unique_ptr<Child>> Spawn(const std::vector<std::string>& argv,
                                                const std::vector<std::string>& env_extra) {
    ChildOptions o;
    o.argv = argv;
    for (const auto& kv : env_extra) {
      const size_t eq = kv.find('=');
      o.env[kv.substr(0, eq)] = eq == std::string::npos ? "" : kv.substr(eq + 1);
    }
    // Dies with this process, even if it is killed (e.g. by timeout(1)).
    o.die_with_parent = true;
    o.output = ChildOptions::Output::kStdout;
    ASSIGN_OR_RETURN(SpawnedChild spawned, SpawnChild(o));
    auto c = std::unique_ptr<Child>(new Child());
    c->pid_ = spawned.pid;
    c->fd_ = spawned.out_fd;
    c->name_ = argv[0];
    return c;
  }

  ~Child() {
    if (fd_ >= 0) close(fd_);
    Reap(std::chrono::milliseconds(3000));
  }

  // The next stdout line, waiting at most `timeout`.
  StatusOr<std::string> ReadLine(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      const auto nl = buf_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
      if (left <= 0)
        return DeadlineExceeded(name_ + ": no output line within " + std::to_string(timeout.count()) + " ms");
      pollfd p{fd_, POLLIN, 0};
      const int r = poll(&p, 1, static_cast<int>(left));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return Internal(Errno("poll"));
      if (r == 0) continue;
      char tmp[4096];
      const ssize_t n = read(fd_, tmp, sizeof tmp);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Unavailable(name_ + " exited before printing its address");
      buf_.append(tmp, static_cast<size_t>(n));
    }
  }

  // Waits up to `grace` for the child to exit by itself, then ends it.
  void Reap(std::chrono::milliseconds grace) {
    if (pid_ <= 0) return;
    const auto deadline = std::chrono::steady_clock::now() + grace;
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pid_ = -1;
  }

  void Terminate() {
    if (pid_ > 0) kill(pid_, SIGTERM);
  }

 private:
  Child() = default;
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string name_;
  std::string buf_;
};

}  // namespace tfjob::bench

#include "tests/support/process.h"

#include "common/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

namespace tfjob::testing {

Process::Process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env, int fd3) {
  ChildOptions c;
  c.argv = argv;
  c.env = env;  // never outlives the test: die_with_parent
  if (fd3 >= 0) c.pass_fds.emplace_back(fd3, 3);
  auto spawned = SpawnChild(c);
  if (!spawned.ok()) {
    // As a shell reports a program it cannot run: exit code 127, the reason
    // in the output.
    output_ = spawned.status().message() + "\n";
    status_ = W_EXITCODE(127, 0);
    reaped_ = true;
    ended_ = true;
    return;
  }
  pid_ = spawned->pid;
  fd_ = spawned->out_fd;
  reader_ = std::thread([this] {
    char buf[4096];
    ssize_t n;
    while ((n = read(fd_, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
      if (n > 0) {
        std::lock_guard g(mu_);
        output_.append(buf, static_cast<size_t>(n));
        grew_.notify_all();
      }
    }
    std::lock_guard g(mu_);
    ended_ = true;
    grew_.notify_all();
  });
}

Process::~Process() {
  if (!reaped_ && pid_ > 0) Stop(SIGKILL);
  if (reader_.joinable()) reader_.join();
  if (fd_ >= 0) close(fd_);
}

bool Process::running() {
  if (reaped_ || pid_ <= 0) return false;
  if (waitpid(pid_, &status_, WNOHANG) == pid_) reaped_ = true;
  return !reaped_;
}

int Process::Stop(int sig) {
  if (!reaped_ && pid_ > 0) {
    kill(pid_, sig);
    while (waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
  }
  if (reader_.joinable()) reader_.join();
  return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
}

std::string Process::output() const {
  std::lock_guard g(mu_);
  return output_;
}

std::optional<std::string> Process::WaitForLine(const std::string& marker, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock lock(mu_);
  size_t line_start = 0;  // lines before it have been looked at
  while (true) {
    size_t nl;
    while ((nl = output_.find('\n', line_start)) != std::string::npos) {
      const std::string line = output_.substr(line_start, nl - line_start);
      line_start = nl + 1;
      if (const auto at = line.find(marker); at != std::string::npos) return line.substr(at + marker.size());
    }
    if (ended_) return std::nullopt;
    if (grew_.wait_until(lock, deadline) == std::cv_status::timeout) return std::nullopt;
  }
}

}  // namespace tfjob::testing

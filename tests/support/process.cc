#include "tests/support/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

namespace tfjob::testing {

Process::Process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env, int fd3) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return;
  pid_ = fork();
  if (pid_ == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    if (fd3 == 3) {
      fcntl(3, F_SETFD, 0);  // dup2 onto itself would keep close-on-exec
    } else if (fd3 >= 0) {
      dup2(fd3, 3);
    }
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  fd_ = fds[0];
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

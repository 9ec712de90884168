#include "common/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <utility>

extern char** environ;

namespace tfjob {
namespace {

// Both ends close-on-exec; -1s until made.
struct Pipe {
  int fd[2] = {-1, -1};
  bool Open() { return pipe2(fd, O_CLOEXEC) == 0; }
  void Close() {
    for (int& f : fd) {
      if (f >= 0) close(f);
      f = -1;
    }
  }
};

std::vector<std::string> ChildEnvironment(const ChildOptions& o) {
  std::set<std::string> replaced(o.unset_env.begin(), o.unset_env.end());
  for (const auto& [k, v] : o.env) replaced.insert(k);
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv = *e;
    if (!replaced.count(kv.substr(0, kv.find('=')))) env.push_back(kv);
  }
  for (const auto& [k, v] : o.env) env.push_back(k + "=" + v);
  return env;
}

// In the child, after fork: async-signal-safe calls only. Never returns.
[[noreturn]] void BecomeChild(const ChildOptions& o, pid_t parent, int out_w, int err_w, int status_w,
                              char* const* argv, char* const* envp) {
  if (o.die_with_parent && !o.new_session) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the parent died before prctl
  }
  if (o.new_session) {
    setsid();
  } else if (o.own_process_group) {
    setpgid(0, 0);
  }
  if (o.default_signals) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig : {SIGTERM, SIGINT, SIGPIPE, SIGCHLD}) signal(sig, SIG_DFL);
  }
  // The status pipe must survive the descriptor moves below: one onto its
  // number would close it, and an exec failure would go unreported.
  bool moved = status_w <= 2;
  for (const auto& fds : o.pass_fds) moved |= status_w == fds.second;
  if (moved) status_w = fcntl(status_w, F_DUPFD_CLOEXEC, 64);
  auto fail = [&](int err) {
    (void)!write(status_w, &err, sizeof err);
    _exit(127);
  };
  if (o.null_stdin) {
    const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd < 0 || dup2(null_fd, 0) < 0) fail(errno);
  }
  if (out_w >= 0 && dup2(out_w, 1) < 0) fail(errno);
  if (err_w >= 0 && dup2(err_w, 2) < 0) fail(errno);
  if (o.output == ChildOptions::Output::kMerged && dup2(out_w, 2) < 0) fail(errno);
  for (const auto& [from, to] : o.pass_fds) {
    // dup2 onto itself would keep close-on-exec: clear it instead.
    if (from == to ? fcntl(to, F_SETFD, 0) != 0 : dup2(from, to) < 0) fail(errno);
  }
  if (!o.cwd.empty() && chdir(o.cwd.c_str()) != 0) fail(errno);
  execvpe(argv[0], argv, envp);
  fail(errno);
  _exit(127);  // not reached: fail exits
}

}  // namespace

StatusOr<SpawnedChild> SpawnChild(const ChildOptions& o) {
  if (o.argv.empty() || o.argv[0].empty()) return FailedPrecondition("no program to run: the command is empty");
  const std::string& program = o.argv[0];
  std::vector<std::string> env = ChildEnvironment(o);
  std::vector<char*> argv, envp;
  for (const auto& a : o.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  using Output = ChildOptions::Output;
  Pipe out, err, status;
  const bool want_out = o.output != Output::kInherit, want_err = o.output == Output::kSeparate;
  if ((want_out && !out.Open()) || (want_err && !err.Open()) || !status.Open()) {
    const int e = errno;
    out.Close();
    err.Close();
    status.Close();
    return Internal("starting " + program + ": pipe: " + std::strerror(e));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int e = errno;
    out.Close();
    err.Close();
    status.Close();
    return Internal("starting " + program + ": fork: " + std::strerror(e));
  }
  if (pid == 0) BecomeChild(o, parent, out.fd[1], err.fd[1], status.fd[1], argv.data(), envp.data());

  if (out.fd[1] >= 0) close(out.fd[1]);
  if (err.fd[1] >= 0) close(err.fd[1]);
  close(status.fd[1]);
  // The status pipe closes on a successful exec; an errno arrives otherwise.
  int child_errno = 0;
  ssize_t n;
  while ((n = read(status.fd[0], &child_errno, sizeof child_errno)) < 0 && errno == EINTR) {
  }
  close(status.fd[0]);
  if (n == static_cast<ssize_t>(sizeof child_errno)) {
    WaitForExit(pid);
    if (out.fd[0] >= 0) close(out.fd[0]);
    if (err.fd[0] >= 0) close(err.fd[0]);
    const std::string why = "cannot execute \"" + program + "\": " + std::strerror(child_errno);
    if (child_errno == ENOENT) return NotFound(why);
    if (child_errno == EACCES || child_errno == EPERM) return Status(Code::kPermissionDenied, why);
    return Internal(why);
  }
  return SpawnedChild{pid, out.fd[0], err.fd[0]};
}

void ForEachLine(int fd, const std::function<void(const std::string&)>& line) {
  std::string pending;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
    if (n < 0) continue;
    pending.append(buf, static_cast<size_t>(n));
    size_t start = 0, nl;
    while ((nl = pending.find('\n', start)) != std::string::npos) {
      line(pending.substr(start, nl - start));
      start = nl + 1;
    }
    pending.erase(0, start);
  }
  if (!pending.empty()) line(pending);
}

int ExitCodeOf(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return -1;
}

int WaitForExit(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return ExitCodeOf(status);
}

}  // namespace tfjob

#include "tests/support/subprocess.h"

#include "common/child_process.h"

#include <fstream>

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <vector>

#include <gtest/gtest.h>

namespace tfjob::testing {

RunResult Run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
              const std::string& cwd, const std::vector<int>& inherit) {
  RunResult r;
  ChildOptions c;
  c.argv = argv;
  c.env = env;
  c.cwd = cwd;
  c.output = ChildOptions::Output::kSeparate;
  c.die_with_parent = false;  // as before: a command a test runs may outlive its thread
  for (int fd : inherit) c.pass_fds.emplace_back(fd, fd);
  auto spawned = SpawnChild(c);
  if (!spawned.ok()) {
    // As a shell reports a program it cannot run.
    r.exit_code = 127;
    r.err = "exec " + (argv.empty() ? std::string() : argv[0]) + ": " + spawned.status().message() + "\n";
    return r;
  }
  const pid_t pid = spawned->pid;
  int out_pipe[2] = {spawned->out_fd, -1}, err_pipe[2] = {spawned->err_fd, -1};
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  r.exit_code = WaitForExit(pid);
  return r;
}

// The environment wins, so a test binary can be pointed at another tree.
static std::string Env(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

std::string SourceDir() { return Env("TFJOB_SOURCE_DIR", TFJOB_DEFAULT_SOURCE_DIR); }
std::string BinDir() { return Env("TFJOB_BIN_DIR", TFJOB_DEFAULT_BIN_DIR); }
std::string MnistDir() { return SourceDir() + "/../shared/data/mnist"; }

namespace {

// Every directory MakeTempDir made, removed when the test process exits, so
// a test run leaves nothing in /tmp. TFJOB_KEEP_TEST_TMP=1 keeps them (to
// look at after a failure). Only the process that made them removes them: a
// forked child that exits normally must not.
class TempDirs {
 public:
  void Add(const std::filesystem::path& p) {
    std::lock_guard g(mu_);
    dirs_.push_back(p);
  }
  ~TempDirs() {
    if (getpid() != owner_) return;
    const char* keep = std::getenv("TFJOB_KEEP_TEST_TMP");
    if (keep && *keep && std::string(keep) != "0") return;
    std::lock_guard g(mu_);
    for (const auto& p : dirs_) {
      std::error_code ec;
      std::filesystem::remove_all(p, ec);
    }
  }

 private:
  const pid_t owner_ = getpid();
  std::mutex mu_;
  std::vector<std::filesystem::path> dirs_;
};

TempDirs& CreatedDirs() {
  static TempDirs dirs;
  return dirs;
}

}  // namespace

void RemoveAtExit(const std::string& path) { CreatedDirs().Add(path); }

std::string MakeTempDir(const std::string& name) {
  std::filesystem::path p =
      std::filesystem::path(::testing::TempDir()) / ("tfjob-" + name + "-" + std::to_string(getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  CreatedDirs().Add(p);
  return p.string();
}

std::string RuntimeBinary() { return BinDir() + "/tfjob-runtime"; }

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteText(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

nlohmann::json ReadJsonFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return nlohmann::json(nlohmann::json::value_t::discarded);
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

}  // namespace tfjob::testing

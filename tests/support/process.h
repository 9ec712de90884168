// A child process running in the background for tests (an operator, a
// server), with its output collected. The destructor terminates it.
// Thread-safety: one owner.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace tfjob::testing {

class Process {
 public:
  // `fd3`, when >= 0, becomes the child's descriptor 3 (e.g. a listening
  // socket handed to a server with TFJOB_LISTEN_FD=3 in `env`).
  Process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {}, int fd3 = -1);
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  bool running();
  // Sends `sig`, waits, returns the exit code (128 + signal when killed).
  int Stop(int sig = 15);
  // stdout and stderr so far, interleaved.
  std::string output() const;
  // Waits until a whole output line contains `marker`, and returns what
  // follows the marker on that line; nullopt when `timeout` passes or the
  // output ends first. What servers that bind port 0 print is read this
  // way ("metrics on :PORT").
  std::optional<std::string> WaitForLine(const std::string& marker,
                                         std::chrono::milliseconds timeout = std::chrono::seconds(60));

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  int status_ = 0;
  bool reaped_ = false;
  mutable std::mutex mu_;
  std::condition_variable grew_;  // output_ grew, or the output ended
  bool ended_ = false;
  std::string output_;
  std::thread reader_;
};

}  // namespace tfjob::testing

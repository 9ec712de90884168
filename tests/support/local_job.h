// A TFJob run by `tfjob run` in the background, for tests that act on its
// replicas as Kubernetes would (signals to single pods) and read what
// happened from the runner's output. Replicas are found by the runner's
// <pod>.pid files.
//
// Ownership: owns the runner process; the destructor kills it and any
// replica still running. Thread-safety: one owner. Failure: the waits
// return a "not found" value (npos, 0, -1) when the job ended or patience
// ran out first; tests assert on that with the output attached.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <regex>
#include <string>
#include <vector>

#include "tests/support/process.h"

namespace tfjob::testing {

class LocalJob {
 public:
  // `env` is added to the runner's environment (and so its replicas').
  LocalJob(const std::string& manifest, const std::string& state_dir,
           const std::map<std::string, std::string>& env = {});
  ~LocalJob();
  LocalJob(const LocalJob&) = delete;
  LocalJob& operator=(const LocalJob&) = delete;

  // The pid in <state>/<pod>.pid, 0 when there is none.
  pid_t Pid(const std::string& pod) const;
  // The live pid of `pod` other than `old` (a restarted replica); 0 when
  // none came within the patience.
  pid_t WaitForPid(const std::string& pod, pid_t old = 0);
  // Waits until the output after byte `from` matches `re`; returns the end
  // of the match, std::string::npos when the job ended or patience ran out.
  size_t WaitForOutput(const std::regex& re, size_t from, std::smatch* m = nullptr);
  // Sends `sig` to `pod` and waits for the runner to say how it ended;
  // returns its exit code (128 + signal when killed), -1 when it did not.
  int SignalAndAwaitExit(const std::string& pod, int sig);
  // Sends `sig` to `pod` and waits for the runner to start it again;
  // returns the new pid (0: it was not restarted).
  pid_t SignalAndAwaitRestart(const std::string& pod, int sig);
  pid_t KillAndAwaitRestart(const std::string& pod) { return SignalAndAwaitRestart(pod, 9); }
  // Waits for the runner to end (at most `limit`) and returns its exit code.
  int Wait(std::chrono::seconds limit = std::chrono::seconds(300));
  std::string output() const { return run_.output(); }
  Process& process() { return run_; }
  const std::string& state_dir() const { return dir_; }

 private:
  std::string dir_;
  Process run_;
};

// One replica type of a manifest: `command` is a YAML flow list.
struct Replica {
  std::string type;  // Chief, PS, Worker, Evaluator
  int replicas = 1;
  std::string restart_policy = "OnFailure";
  std::string command;
};
// A TFJob manifest with `run_policy` (YAML flow mapping, "" for none).
std::string TfJobYaml(const std::string& name, const std::vector<Replica>& replicas,
                      const std::string& run_policy = "");
// A YAML flow list of quoted strings, e.g. for Replica::command.
std::string YamlList(const std::vector<std::string>& items);

// Whether `pid` is a live process (a zombie is not).
bool Alive(pid_t pid);

}  // namespace tfjob::testing

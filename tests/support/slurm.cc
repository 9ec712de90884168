#include "tests/support/slurm.h"

#include "common/child_process.h"

#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "tests/support/wait.h"

namespace tfjob::testing {
namespace {

namespace fs = std::filesystem;

bool OnPath(const std::string& program) { return Run({"/bin/sh", "-c", "command -v \"$0\"", program}).exit_code == 0; }

// "Key=Value Key=Value ..." as `scontrol -o` prints it. A value may hold
// spaces (Command=script args): a word without '=' belongs to the value
// before it.
std::map<std::string, std::string> ParseFields(const std::string& line) {
  std::map<std::string, std::string> fields;
  std::istringstream words(line);
  std::string word, last;
  while (words >> word) {
    const size_t eq = word.find('=');
    if (eq == std::string::npos || eq == 0) {
      if (!last.empty()) fields[last] += " " + word;
      continue;
    }
    last = word.substr(0, eq);
    fields[last] = word.substr(eq + 1);
  }
  return fields;
}

std::string Trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

std::string SlurmJob::Field(const std::string& name) const {
  auto it = fields.find(name);
  return it == fields.end() ? "" : it->second;
}

bool SlurmJob::finished() const {
  const std::string s = state();
  for (const char* final_state : {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                                  "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}) {
    if (s == final_state) return true;
  }
  return false;
}

std::string SlurmCluster::Missing() {
  for (const char* program : {"slurmctld", "slurmd", "sbatch", "srun", "scontrol"}) {
    if (!OnPath(program)) {
      return std::string(program) + " not found: install Slurm with 'apt-get install slurm-wlm munge' (bash " +
             "scripts/setup.sh does)";
    }
  }
  if (!OnPath("munged") && access("/usr/sbin/munged", X_OK) != 0) {
    return "munged not found: install it with 'apt-get install munge' (bash scripts/setup.sh does)";
  }
  if (geteuid() != 0)
    return "slurmd runs job steps as their user, so it needs root (this is uid " + std::to_string(geteuid()) + ")";
  return "";
}

SlurmCluster* SlurmCluster::Shared(int nodes, std::string* why) {
  static std::mutex mu;
  static std::unique_ptr<SlurmCluster> shared;
  static std::string failed;
  std::lock_guard g(mu);
  if (shared) {
    if (shared->node_count_ == nodes) return shared.get();
    *why = "this process's Slurm has " + std::to_string(shared->node_count_) + " nodes, not " + std::to_string(nodes);
    return nullptr;
  }
  if (!failed.empty()) {
    *why = failed;
    return nullptr;
  }
  if (std::string missing = Missing(); !missing.empty()) {
    failed = missing;
    *why = failed;
    return nullptr;
  }
  auto slurm = std::unique_ptr<SlurmCluster>(new SlurmCluster());
  slurm->kit_ = SourceDir() + "/tests/support/slurm";
  slurm->node_count_ = nodes;
  // Not a MakeTempDir: that one may be removed at exit before this is stopped.
  slurm->dir_ = (fs::path(::testing::TempDir()) / ("tfjob-slurm-" + std::to_string(getpid()))).string();
  // The daemons' ports are ones nothing answered on, but one can still be
  // taken before its daemon binds it (these run beside other tests): start
  // again on new ports, from an empty folder, a few times before calling it
  // a failure.
  bool started = false;
  for (int attempt = 1; attempt <= 3 && !started; ++attempt) {
    fs::remove_all(slurm->dir_);
    fs::create_directories(slurm->dir_);
    std::string why_not;
    started = slurm->Start(nodes, &why_not);
    if (!started) {
      Run({slurm->kit_ + "/stop-slurm.sh", slurm->dir_});
      failed = why_not + " (" + std::to_string(attempt) + " attempts)";
      std::cout << "slurm: attempt " << attempt << " failed: " << why_not << std::endl;
    }
  }
  if (!started) {
    *why = failed;
    return nullptr;
  }
  failed.clear();
  // If this process dies without its destructors, a watchdog stops Slurm
  // once the process is gone (setsid: it outlives us).
  const std::string watchdog = "while kill -0 " + std::to_string(getpid()) + " 2>/dev/null; do sleep 1; done; \"" +
                               slurm->kit_ + "/stop-slurm.sh\" \"" + slurm->dir_ + "\" >/dev/null 2>&1";
  ChildOptions w;
  w.argv = {"/bin/bash", "-c", watchdog};
  w.output = ChildOptions::Output::kInherit;
  w.new_session = true;
  if (auto spawned = SpawnChild(w); !spawned.ok()) {
    ADD_FAILURE() << "slurm: the watchdog: " << spawned.status();
  }
  shared = std::move(slurm);
  return shared.get();
}

bool SlurmCluster::Start(int nodes, std::string* why) {
  RunResult r = Run({kit_ + "/start-slurm.sh", dir_, "--nodes", std::to_string(nodes)});
  std::cout << r.out << std::flush;  // the log shows Slurm starting
  if (r.exit_code != 0) {
    const size_t error = r.err.find("start-slurm: error:");
    *why = "Slurm did not start: " + Trimmed(error == std::string::npos ? r.err : r.err.substr(error));
    return false;
  }
  RunResult names = Client({"sinfo", "-h", "-N", "-o", "%N"});
  std::istringstream lines(names.out);
  nodes_.clear();
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) nodes_.push_back(line);
  }
  if (static_cast<int>(nodes_.size()) != nodes) {
    *why = "sinfo shows nodes [" + Trimmed(names.out) + "], not " + std::to_string(nodes) + ": " + names.err;
    return false;
  }
  return true;
}

SlurmCluster::~SlurmCluster() {
  if (dir_.empty()) return;
  RunResult r = Run({kit_ + "/stop-slurm.sh", dir_});
  std::cout << "slurm: stopped\n" << r.out << r.err << std::flush;
  const char* keep = std::getenv("TFJOB_KEEP_TEST_TMP");
  if (!(keep && *keep && std::string(keep) != "0")) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

RunResult SlurmCluster::Client(const std::vector<std::string>& argv) const { return Run(argv, env()); }

std::string SlurmCluster::Submit(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                                 const std::string& cwd, std::string* failure) const {
  std::vector<std::string> argv = {"sbatch", "--parsable"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::map<std::string, std::string> all = env;
  for (const auto& [k, v] : this->env()) all[k] = v;
  RunResult r = Run(argv, all, cwd);
  // --parsable: "ID" or "ID;CLUSTER".
  const std::string id = Trimmed(r.out.substr(0, r.out.find(';')));
  if (r.exit_code != 0 || id.empty() || id.find_first_not_of("0123456789") != std::string::npos) {
    *failure = "sbatch exited " + std::to_string(r.exit_code) + ": " + r.out + r.err;
    return "";
  }
  std::cout << "slurm: sbatch submitted job " << id << std::endl;
  return id;
}

SlurmJob SlurmCluster::Show(const std::string& id) const {
  SlurmJob job;
  job.id = id;
  RunResult r = Client({"scontrol", "-o", "show", "job", id});
  if (r.exit_code == 0) job.fields = ParseFields(r.out);
  return job;
}

SlurmJob SlurmCluster::WaitForEnd(const std::string& id, std::chrono::milliseconds patience) const {
  SlurmJob job;
  WaitUntil(
      [&] {
        job = Show(id);
        return job.finished();
      },
      patience, std::chrono::milliseconds(100));
  std::cout << "slurm: job " << id << " (" << job.Field("JobName") << ") "
            << (job.finished() ? "ended " : "still not ended: ") << job.state() << ", exit code " << job.exit_code()
            << ", on " << job.Field("NodeList") << std::endl;
  return job;
}

std::vector<SlurmTask> SlurmCluster::StepTasks(const std::string& step, const std::string& node) const {
  // PID JOBID STEPID LOCALID GLOBALID, after a header line.
  RunResult r = Client({"scontrol", "listpids", step, node});
  std::vector<SlurmTask> tasks;
  std::istringstream lines(r.out);
  std::string line;
  std::getline(lines, line);
  while (std::getline(lines, line)) {
    std::istringstream cols(line);
    std::string pid, job, step_id, local, global;
    if (!(cols >> pid >> job >> step_id >> local >> global)) continue;
    if (global.find_first_not_of("0123456789") != std::string::npos || global.empty()) continue;
    tasks.push_back({std::stoi(pid), std::stoi(global)});
  }
  return tasks;
}

}  // namespace tfjob::testing

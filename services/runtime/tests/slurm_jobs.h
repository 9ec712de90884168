// What the real-Slurm tests (slurm_cluster_test.cc, slurm_two_nodes_test.cc)
// share: a test fixture holding the process's Slurm, the environment a job
// is submitted with, the examples' scripts, and reading a job's output.
// Header-only; test code.
#pragma once

#include <signal.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/slurm.h"
#include "tests/support/subprocess.h"

namespace tfjob::runtime::slurm_jobs {

namespace t = ::tfjob::testing;

// How long a job may take before the test calls it hung: a bound on a
// broken test, not a timing assertion (the jobs take seconds).
inline constexpr std::chrono::milliseconds kJobPatience{180000};

// The fixture: the process's Slurm with kNodes nodes, started by the first
// test. Without Slurm on this machine the tests are skipped, saying why,
// unless TFJOB_REQUIRE_SLURM=1 (CI) makes that a failure; a Slurm that is
// installed but does not start is always a failure.
template <int kNodes>
class RealSlurmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    slurm_ = t::SlurmCluster::Shared(kNodes, &why);
    if (slurm_ != nullptr) return;
    const char* require = std::getenv("TFJOB_REQUIRE_SLURM");
    if (!t::SlurmCluster::Missing().empty() && !(require && std::string(require) == "1")) {
      GTEST_SKIP() << "Slurm tests skipped: " << why;
    }
    FAIL() << "no Slurm: " << why;
  }

  // sbatch ARGS from a fresh folder, with `env` over the test's own
  // environment; the job's id, or "" after a test failure.
  std::string Submit(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                     const std::string& cwd) {
    std::string failure;
    std::string id = slurm_->Submit(args, env, cwd, &failure);
    if (id.empty()) ADD_FAILURE() << failure;
    return id;
  }

  t::SlurmCluster* slurm_ = nullptr;
};

inline std::string Example(const std::string& script) { return t::SourceDir() + "/examples/slurm/" + script; }

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The last `lines` lines of a job's output, for a failure message (a job
// that trained too long printed thousands).
inline std::string Tail(const std::string& output, int lines = 40) {
  size_t at = output.size();
  for (int n = 0; n <= lines && at != std::string::npos && at > 0; ++n) at = output.rfind('\n', at - 1);
  return at == std::string::npos || at == 0 ? output : "...\n" + output.substr(at + 1);
}

// What the job's tasks printed, in order, without srun's "RANK: " label
// (--label), for one rank.
inline std::vector<std::string> TaskLines(const std::string& output, int rank) {
  const std::string label = std::to_string(rank) + ": ";
  std::vector<std::string> lines;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(label, 0) == 0) lines.push_back(line.substr(label.size()));
  }
  return lines;
}

// The environment the examples read: the binary as the nodes see it, and a
// chief that gives up on a peer within 20 s instead of 300.
inline std::map<std::string, std::string> JobEnv() {
  return {{"TFJOB_RUNTIME", t::RuntimeBinary()}, {"TFJOB_CONNECT_TIMEOUT_SECONDS", "20"}};
}

// examples/slurm/tfjob.sbatch with MNIST in place of the counter, written
// into `dir`: the one edit docs/slurm.md's "MNIST" section asks for.
// "" after a test failure when the script no longer has that program.
inline std::string MnistPsScript(const std::string& dir) {
  std::string script = ReadFile(Example("tfjob.sbatch"));
  const std::string counter = "counter --increments 1,2,3,4,5";
  const size_t at = script.find(counter);
  if (at == std::string::npos || script.find(counter, at + 1) != std::string::npos) {
    ADD_FAILURE() << "examples/slurm/tfjob.sbatch does not run '" << counter << "' once:\n" << script;
    return "";
  }
  script.replace(at, counter.size(),
                 "fit --config " + t::SourceDir() + "/examples/mnist/mlp.json --data-dir " + t::MnistDir());
  const std::string path = dir + "/mnist-ps.sbatch";
  std::ofstream(path) << script;
  return path;
}

// Once the chief has finished an epoch (every task is up and training is
// under way), SIGKILLs the task with `rank` of step 0 on `node`, as an
// out-of-memory killer or a crash would. False, after a test failure, when
// it could not.
inline bool KillTaskMidJob(const t::SlurmCluster& slurm, const std::string& job_id, const std::string& node, int rank) {
  bool training = false;
  std::string output;
  for (auto deadline = std::chrono::steady_clock::now() + kJobPatience;
       !training && std::chrono::steady_clock::now() < deadline;) {
    const t::SlurmJob job = slurm.Show(job_id);
    if (job.finished()) break;
    output = ReadFile(job.Field("StdOut"));
    training = output.find("0: Epoch 2/") != std::string::npos;
    if (!training) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!training) {
    ADD_FAILURE() << "job " << job_id << " never got to its second epoch:\n" << output;
    return false;
  }
  for (const t::SlurmTask& task : slurm.StepTasks(job_id + ".0", node)) {
    if (task.global_id != rank) continue;
    const std::string cmdline = ReadFile("/proc/" + std::to_string(task.pid) + "/cmdline");
    if (cmdline.find("tfjob-runtime") == std::string::npos) {
      ADD_FAILURE() << "task " << rank << " (pid " << task.pid << ") is not tfjob-runtime: " << cmdline;
      return false;
    }
    if (kill(task.pid, SIGKILL) != 0) {
      ADD_FAILURE() << "kill " << task.pid << ": " << strerror(errno);
      return false;
    }
    std::cout << "slurm: killed task " << rank << " of job " << job_id << " (pid " << task.pid << " on " << node << ")"
              << std::endl;
    return true;
  }
  ADD_FAILURE() << "scontrol listpids " << job_id << ".0 " << node << " shows no task " << rank;
  return false;
}

}  // namespace tfjob::runtime::slurm_jobs

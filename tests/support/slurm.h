// A real Slurm for tests: munged, slurmctld and slurmd from Debian's munge
// and slurm-wlm, started by tests/support/slurm/start-slurm.sh with their
// own ports, munge socket, state and logs under a temporary folder, and
// stopped by process id (stop-slurm.sh) when the test process exits. Jobs
// go through the real sbatch, srun and scontrol.
//
// One Slurm per test process, started on first use: one node (this host)
// or, with nodes >= 2, that many nodes in network namespaces of their own
// (start-slurm.sh says how). A watchdog stops it too if the process dies
// first. Thread-safety: Shared() may be called from any thread; the
// object's methods are const and reentrant. Failure: Shared() returns
// nullptr with one line saying why; Missing() says, before anything is
// started, whether this machine cannot run one at all (Slurm or munge not
// installed, not root), which tests report as a skip.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"

namespace tfjob::testing {

// A job as `scontrol show job` last showed it.
struct SlurmJob {
  std::string id;
  std::map<std::string, std::string> fields;  // JobState, ExitCode, NodeList, StdOut, ...
  std::string Field(const std::string& name) const;
  std::string state() const { return Field("JobState"); }
  std::string exit_code() const { return Field("ExitCode"); }  // "2:0": the batch script's code, and its signal
  bool finished() const;  // a final state: COMPLETED, FAILED, CANCELLED, TIMEOUT, ...
};

// A task of a job step, as `scontrol listpids` shows it.
struct SlurmTask {
  int pid = 0;
  int global_id = -1;  // SLURM_PROCID
};

class SlurmCluster {
 public:
  // Why Slurm cannot run here at all ("" when it can): a missing program, or
  // not running as root.
  static std::string Missing();
  // The process's Slurm, started on the first call. Every call must ask for
  // the same number of nodes.
  static SlurmCluster* Shared(int nodes, std::string* why);

  const std::string& dir() const { return dir_; }
  const std::vector<std::string>& nodes() const { return nodes_; }
  // SLURM_CONF, which points sbatch, srun and scontrol at this Slurm.
  std::map<std::string, std::string> env() const { return {{"SLURM_CONF", dir_ + "/slurm.conf"}}; }

  // `sbatch ARGS` from `cwd` with the test's environment plus `env` (sbatch
  // passes it on to the job). Returns the job id, or "" with sbatch's output
  // in *failure.
  std::string Submit(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                     const std::string& cwd, std::string* failure) const;
  // The job as scontrol shows it now (fields empty when it does not know it).
  SlurmJob Show(const std::string& id) const;
  // Waits until the job has finished, or `patience` has passed, and prints
  // its id, name, final state, exit code and nodes (the test log's record).
  SlurmJob WaitForEnd(const std::string& id, std::chrono::milliseconds patience) const;
  // The tasks of step `step` (job "ID.STEP") on `node`.
  std::vector<SlurmTask> StepTasks(const std::string& step, const std::string& node) const;

  ~SlurmCluster();

 private:
  SlurmCluster() = default;
  bool Start(int nodes, std::string* why);
  RunResult Client(const std::vector<std::string>& argv) const;
  std::string dir_, kit_;
  int node_count_ = 0;
  std::vector<std::string> nodes_;
};

}  // namespace tfjob::testing

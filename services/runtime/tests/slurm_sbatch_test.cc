// examples/slurm/tfjob.sbatch end to end under a simulated Slurm allocation:
// the batch script runs as sbatch would run it (job-level SLURM_* variables,
// one node "localhost"), and tests/support/slurm/srun, first on PATH, starts
// the step's tasks here. Also the binary's answer to bad Slurm input.
#include <cstdlib>
#include <fstream>
#include <random>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "services/base/ports.h"
#include "tests/support/subprocess.h"

namespace tfjob::runtime {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
namespace t = ::tfjob::testing;

constexpr int kTasks = 4;  // chief, ps, worker, worker

// kTasks consecutive ports below the kernel's ephemeral range, at a random
// place so concurrent test runs do not collide, bound and kept here: the
// step's tasks inherit the sockets through the simulated srun
// (TFJOB_SRUN_LISTEN_FDS), so no other process can take a port before its
// task serves on it. Empty when no free run of ports was found.
struct StepPorts {
  int base = 0;
  std::vector<base::ListeningSocket> sockets;
  std::vector<int> fds() const {
    std::vector<int> out;
    for (const auto& s : sockets) out.push_back(s.fd());
    return out;
  }
  std::string fd_list() const {
    std::string out;
    for (const auto& s : sockets) {
      if (!out.empty()) out += ',';
      out += std::to_string(s.fd());
    }
    return out;
  }
};

StepPorts BindStepPorts() {
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> pick(20000, 30000);
  for (int attempt = 0; attempt < 100; ++attempt) {
    StepPorts p;
    p.base = pick(rng);
    for (int k = 0; k < kTasks; ++k) {
      // Every interface, as the tasks would listen themselves.
      auto s = base::ListeningSocket::Listen("", p.base + k);
      if (!s.ok()) break;
      p.sockets.push_back(std::move(s).value());
    }
    if (static_cast<int>(p.sockets.size()) == kTasks) return p;
  }
  ADD_FAILURE() << "no " << kTasks << " consecutive free ports found";
  return {};
}

// The environment sbatch gives a batch script for a one-node allocation of
// kTasks tasks, plus PATH with the simulated srun and tfjob-runtime first.
std::map<std::string, std::string> Allocation(int port_base) {
  const char* path = std::getenv("PATH");
  return {
      {"PATH", t::SourceDir() + "/tests/support/slurm:" + t::BinDir() + ":" + (path ? path : "/usr/bin:/bin")},
      {"SLURM_JOB_ID", "4242"},
      {"SLURM_JOB_NAME", "tfjob-counter"},
      {"SLURM_JOB_NODELIST", "localhost"},
      {"SLURM_JOB_NUM_NODES", "1"},
      {"SLURM_NNODES", "1"},
      {"SLURM_NTASKS", std::to_string(kTasks)},
      {"SLURM_TASKS_PER_NODE", std::to_string(kTasks)},
      {"SLURM_JOB_CPUS_PER_NODE", std::to_string(kTasks)},
      {"TFJOB_SLURM_PORT_BASE", std::to_string(port_base)},
      // Peers that never come up fail the chief quickly instead of hanging.
      {"TFJOB_CONNECT_TIMEOUT_SECONDS", "20"},
  };
}

// `timeout` signals its whole process group, so a hung step cannot outlive
// the test. `ports`, when given, are handed to the step's tasks.
t::RunResult RunBatchScript(std::map<std::string, std::string> env, const std::vector<std::string>& args,
                            const std::string& script = "tfjob.sbatch", const StepPorts* ports = nullptr) {
  std::vector<std::string> argv = {"timeout", "-k", "5", "60", "bash", t::SourceDir() + "/examples/slurm/" + script};
  argv.insert(argv.end(), args.begin(), args.end());
  if (ports) env["TFJOB_SRUN_LISTEN_FDS"] = ports->fd_list();
  return t::Run(argv, env, t::MakeTempDir("slurm-cwd"), ports ? ports->fds() : std::vector<int>{});
}

TEST(SlurmSbatchTest, CounterRunsAcrossTheStepAndEveryTaskExitsZero) {
  const StepPorts ports = BindStepPorts();
  ASSERT_NE(ports.base, 0);
  const int base = ports.base;
  const std::string summary = t::MakeTempDir("slurm-counter") + "/out.json";
  auto r = RunBatchScript(Allocation(base), {"--summary-json", summary}, "tfjob.sbatch", &ports);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;

  // The chief (rank 0) added every increment exactly once.
  std::ifstream in(summary);
  ASSERT_TRUE(in) << "no summary at " << summary << "\n" << r.out << r.err;
  EXPECT_EQ(nlohmann::json::parse(in)["value"].get<double>(), 15.0);
  EXPECT_THAT(r.out, HasSubstr("0: counter: value 15 after 5 closures"));
  // Ranks 1..3 served as ps:0, worker:0 and worker:1 on the ports the layout
  // gives them, and the chief shut them down rather than srun killing them.
  EXPECT_THAT(r.out, HasSubstr("1: ps 0: serving on [::]:" + std::to_string(base + 1)));
  EXPECT_THAT(r.out, HasSubstr("2: worker 0: serving on [::]:" + std::to_string(base + 2)));
  EXPECT_THAT(r.out, HasSubstr("3: worker 1: serving on [::]:" + std::to_string(base + 3)));
  EXPECT_THAT(r.out, HasSubstr("1: ps 0: shut down"));
  EXPECT_THAT(r.out, HasSubstr("2: worker 0: shut down"));
  EXPECT_THAT(r.out, HasSubstr("3: worker 1: shut down"));
  for (int rank = 0; rank < kTasks; ++rank) {
    EXPECT_THAT(r.err, HasSubstr("srun: task " + std::to_string(rank) + ": exit code 0\n"));
  }
}

// examples/slurm/mwms.sbatch: every task a worker of one multi-worker
// mirrored group (the script's 2 nodes x 2 tasks, simulated as 4 tasks here).
TEST(SlurmSbatchTest, MultiWorkerMirroredOverFourTasks) {
  const StepPorts ports = BindStepPorts();
  ASSERT_NE(ports.base, 0);
  const int base = ports.base;
  const std::string summary = t::MakeTempDir("slurm-mwms") + "/out.json";
  auto env = Allocation(base);
  env["SLURM_JOB_NAME"] = "tfjob-mwms";
  env["TFJOB_JOB"] = t::SourceDir() + "/examples/mnist/mlp.json";
  env["TFJOB_DATA_DIR"] = t::MnistDir();
  auto r = RunBatchScript(env, {"--summary-json", summary}, "mwms.sbatch", &ports);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::ifstream in(summary);
  ASSERT_TRUE(in) << "no summary at " << summary << "\n" << r.out << r.err;
  const nlohmann::json s = nlohmann::json::parse(in);
  EXPECT_EQ(s["strategy"], "multi_worker_mirrored");
  EXPECT_EQ(s["num_replicas_in_sync"], 4);
  EXPECT_GE(s["eval_accuracy"].get<double>(), 0.92) << s.dump();
  for (int rank = 0; rank < kTasks; ++rank) {
    EXPECT_THAT(r.out, HasSubstr(std::to_string(rank) + ": fit: multi_worker_mirrored, worker:" + std::to_string(rank) +
                                 " is rank " + std::to_string(rank) + " of 4, listening on port " +
                                 std::to_string(base + rank)));
    EXPECT_THAT(r.err, HasSubstr("srun: task " + std::to_string(rank) + ": exit code 0\n"));
  }
}

TEST(SlurmSbatchTest, LayoutThatDoesNotFitTheStepFailsTheStep) {
  // Every task stops at the layout check, before anything listens.
  auto env = Allocation(20000);
  env["TFJOB_SLURM_JOBS"] = "chief:1,ps:1,worker:3";
  auto r = RunBatchScript(env, {});
  // Every task finds the mismatch and exits 2, unless --kill-on-bad-exit has
  // already stopped it (SIGTERM: 143) because another task got there first.
  EXPECT_THAT(r.exit_code, ::testing::AnyOf(2, 143)) << r.out << r.err;
  EXPECT_THAT(r.out, ::testing::ContainsRegex(
                         "[0-3]: tfjob-runtime: error: Slurm: the jobs \\(chief: 1, ps: 1, worker: 3\\) have 5 tasks "
                         "but the Slurm step has 4; the counts must match\n"));
  EXPECT_THAT(r.err, HasSubstr(": exit code 2\n"));
  for (int rank = 0; rank < kTasks; ++rank) {
    EXPECT_THAT(r.err, ::testing::ContainsRegex("srun: task " + std::to_string(rank) + ": exit code (2|143)\n"));
  }
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("serving on")));
}

// Bad Slurm input from the binary: one line, exit 2, never a silent
// single-process run.
void ExpectOneLineExitTwo(const std::map<std::string, std::string>& env, const std::string& want) {
  auto r = t::Run({t::RuntimeBinary(), "counter"}, env);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, StartsWith("tfjob-runtime: error: " + want));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(SlurmRuntimeTest, BadSlurmInputIsOneLineAndExitTwo) {
  ExpectOneLineExitTwo({{"TFJOB_CLUSTER_RESOLVER", "slurm"}, {"TFJOB_SLURM_JOBS", "chief:1,ps:1,worker:1"}},
                       "Slurm: SLURM_PROCID is not set; not running inside a Slurm step?");
  ExpectOneLineExitTwo({{"TFJOB_CLUSTER_RESOLVER", "slurm"}, {"SLURM_PROCID", "0"}}, "TFJOB_SLURM_JOBS is not set");
  ExpectOneLineExitTwo({{"TFJOB_CLUSTER_RESOLVER", "slurm"},
                        {"TFJOB_SLURM_JOBS", "chief:1,ps:1,worker:1"},
                        {"TFJOB_SLURM_PORT_BASE", "http"}},
                       "TFJOB_SLURM_PORT_BASE: \"http\" is not a non-negative integer");
  ExpectOneLineExitTwo({{"TFJOB_CLUSTER_RESOLVER", "mpi"}},
                       "TFJOB_CLUSTER_RESOLVER: \"mpi\" is not tf_config, slurm or kubernetes");
}

// The local launcher gives its children TF_CONFIG; a resolver selected in the
// launcher's own environment must not make them look for a Slurm step.
TEST(SlurmRuntimeTest, LocalLauncherChildrenUseTheirTfConfig) {
  auto r = t::Run({t::RuntimeBinary(), "local", "--ps", "1", "--workers", "1", "--", "counter", "--increments", "1,2"},
                  {{"TFJOB_CLUSTER_RESOLVER", "slurm"}});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("counter: value 3 after 2 closures"));
}

}  // namespace
}  // namespace tfjob::runtime

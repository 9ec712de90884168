// The sbatch examples under a real Slurm on one node: munged, slurmctld and
// slurmd on this host (tests/support/slurm.h, the single-node Slurm of
// docs/slurm.md's recipe), one Slurm for this whole executable. Each job
// asks for one node with 4 tasks instead of the scripts' 2 nodes x 2 tasks;
// nothing else in the scripts changes. The log shows each job's id and
// final state.
#include <random>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "services/base/ports.h"
#include "services/runtime/tests/slurm_jobs.h"

namespace tfjob::runtime {
namespace {

using ::testing::AnyOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
namespace t = ::tfjob::testing;
using namespace slurm_jobs;

constexpr int kTasks = 4;  // chief, ps, worker, worker; or 4 mirrored workers

// The step's tasks share this host, so TFJOB_SLURM_PORT_BASE..+3 must be
// free here. A real srun cannot hand its tasks sockets bound in advance (as
// tests/support/subprocess.h's children get), so the tasks bind them
// themselves: a run of ports below the kernel's ephemeral range (32768 and
// up), where no port-0 bind lands, at a random place, each seen free.
int FreePortBase() {
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> pick(20000, 30000);
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int base = pick(rng);
    bool all_free = true;
    for (int k = 0; k < kTasks && all_free; ++k) all_free = base::ListeningSocket::Listen("", base + k).ok();
    if (all_free) return base;
  }
  ADD_FAILURE() << "no " << kTasks << " consecutive free ports found";
  return 0;
}

class SlurmClusterTest : public RealSlurmTest<1> {
 protected:
  // sbatch OPTIONS SCRIPT ARGS on one node with 4 tasks from `cwd`, and the
  // job once it has ended.
  t::SlurmJob RunOnOneNode(const std::string& script, const std::vector<std::string>& args,
                           std::map<std::string, std::string> env, const std::string& cwd,
                           const std::vector<std::string>& options = {}) {
    env["TFJOB_SLURM_PORT_BASE"] = std::to_string(port_base_);
    std::vector<std::string> sbatch = {"--nodes=1", "--ntasks-per-node=" + std::to_string(kTasks)};
    sbatch.insert(sbatch.end(), options.begin(), options.end());
    sbatch.push_back(script);
    sbatch.insert(sbatch.end(), args.begin(), args.end());
    const std::string id = Submit(sbatch, env, cwd);
    if (id.empty()) return {};
    return slurm_->WaitForEnd(id, kJobPatience);
  }

  const int port_base_ = FreePortBase();
};

TEST_F(SlurmClusterTest, CounterJobAddsEveryIncrementOnceAndCompletes) {
  const std::string cwd = t::MakeTempDir("slurm-counter");
  const t::SlurmJob job = RunOnOneNode(Example("tfjob.sbatch"), {"--summary-json", cwd + "/out.json"}, JobEnv(), cwd);
  const std::string out = ReadFile(job.Field("StdOut"));
  ASSERT_EQ(job.state(), "COMPLETED") << Tail(out);
  EXPECT_EQ(job.exit_code(), "0:0");
  EXPECT_EQ(job.Field("NodeList"), slurm_->nodes()[0]);
  EXPECT_EQ(job.Field("NumTasks"), std::to_string(kTasks));

  // The chief (rank 0) added every increment exactly once.
  EXPECT_EQ(t::ReadJsonFile(cwd + "/out.json")["value"], 15.0) << Tail(out);
  EXPECT_THAT(TaskLines(out, 0), ::testing::Contains(HasSubstr("counter: value 15 after 5 closures")));
  // Ranks 1..3 served as ps:0, worker:0 and worker:1 on the ports the layout
  // gives them, and the chief shut them down rather than Slurm killing them.
  EXPECT_THAT(TaskLines(out, 1), ElementsAre("ps 0: serving on [::]:" + std::to_string(port_base_ + 1),
                                             "ps 0: shut down, training is complete"));
  EXPECT_THAT(TaskLines(out, 2), ElementsAre("worker 0: serving on [::]:" + std::to_string(port_base_ + 2),
                                             "worker 0: shut down, training is complete"));
  EXPECT_THAT(TaskLines(out, 3), ElementsAre("worker 1: serving on [::]:" + std::to_string(port_base_ + 3),
                                             "worker 1: shut down, training is complete"));
}

// docs/slurm.md's MNIST: tfjob.sbatch with fit in place of the counter.
TEST_F(SlurmClusterTest, MnistParameterServerJobTrainsToTheAccuracyBar) {
  const std::string cwd = t::MakeTempDir("slurm-mnist-ps");
  const std::string script = MnistPsScript(cwd);
  ASSERT_FALSE(script.empty());
  const t::SlurmJob job =
      RunOnOneNode(script, {"--summary-json", cwd + "/out.json"}, JobEnv(), cwd, {"--job-name=tfjob-mnist-ps"});
  const std::string out = ReadFile(job.Field("StdOut"));
  ASSERT_EQ(job.state(), "COMPLETED") << Tail(out);
  EXPECT_EQ(job.exit_code(), "0:0");
  const nlohmann::json s = t::ReadJsonFile(cwd + "/out.json");
  EXPECT_EQ(s["strategy"], "parameter_server") << s.dump();
  EXPECT_EQ(s["num_ps"], 1) << s.dump();
  EXPECT_EQ(s["steps"], 5 * 125) << s.dump();
  // Asynchronous training: the bar of the local launcher's MNIST PS test,
  // with one closure running per worker (auto, two workers).
  EXPECT_GE(s["eval_accuracy"].get<double>(), 0.90) << s.dump();
  EXPECT_EQ(s["ps_closures_per_worker"], 1) << s.dump();
  EXPECT_THAT(TaskLines(out, 0), ::testing::Contains("Epoch 5/5"));
  EXPECT_THAT(TaskLines(out, 1), ::testing::Contains("ps 0: shut down, training is complete"));
}

// examples/slurm/mwms.sbatch: every task a worker of one multi-worker
// mirrored group. --gres=none: this machine has no GPUs for the script's
// --gres=gpu:2 to ask for.
TEST_F(SlurmClusterTest, MultiWorkerMirroredJobTrainsToTheAccuracyBar) {
  const std::string cwd = t::MakeTempDir("slurm-mwms");
  auto env = JobEnv();
  env["TFJOB_JOB"] = t::SourceDir() + "/examples/mnist/mlp.json";
  env["TFJOB_DATA_DIR"] = t::MnistDir();
  const t::SlurmJob job =
      RunOnOneNode(Example("mwms.sbatch"), {"--summary-json", cwd + "/out.json"}, env, cwd, {"--gres=none"});
  const std::string out = ReadFile(job.Field("StdOut"));
  ASSERT_EQ(job.state(), "COMPLETED") << Tail(out);
  EXPECT_EQ(job.exit_code(), "0:0");
  const nlohmann::json s = t::ReadJsonFile(cwd + "/out.json");
  EXPECT_EQ(s["strategy"], "multi_worker_mirrored") << s.dump();
  EXPECT_EQ(s["num_replicas_in_sync"], kTasks) << s.dump();
  EXPECT_GE(s["eval_accuracy"].get<double>(), 0.92) << s.dump();
  for (int rank = 0; rank < kTasks; ++rank) {
    EXPECT_THAT(
        TaskLines(out, rank),
        ::testing::Contains("fit: multi_worker_mirrored, worker:" + std::to_string(rank) + " is rank " +
                            std::to_string(rank) + " of 4, listening on port " + std::to_string(port_base_ + rank)));
  }
}

// docs/slurm.md: "if any task fails, Slurm stops the rest of the step
// instead of leaving servers waiting" (the scripts' --kill-on-bad-exit=1).
// A worker killed mid-training: without that, the chief would carry on with
// the other worker for all of the 100000 epochs asked for.
TEST_F(SlurmClusterTest, ATaskKilledMidJobStopsTheRestOfTheStep) {
  const std::string cwd = t::MakeTempDir("slurm-kill");
  const std::string script = MnistPsScript(cwd);
  ASSERT_FALSE(script.empty());
  auto env = JobEnv();
  env["TFJOB_SLURM_PORT_BASE"] = std::to_string(port_base_);
  const std::string id =
      Submit({"--nodes=1", "--ntasks-per-node=4", "--job-name=tfjob-mnist-ps", script, "--epochs", "100000"}, env, cwd);
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(KillTaskMidJob(*slurm_, id, slurm_->nodes()[0], /*rank=*/2));  // worker:0

  const t::SlurmJob job = slurm_->WaitForEnd(id, kJobPatience);
  const std::string out = ReadFile(job.Field("StdOut"));
  ASSERT_EQ(job.state(), "FAILED") << Tail(out);
  EXPECT_THAT(out, HasSubstr("srun: error: " + slurm_->nodes()[0] + ": task 2: Killed\n"));
  // Slurm stopped the others (SIGTERM): each says so as it exits.
  EXPECT_THAT(TaskLines(out, 0), ::testing::Contains(HasSubstr("stopped by a signal before training was complete")))
      << Tail(out, 80);
  EXPECT_THAT(TaskLines(out, 1),
              ::testing::Contains("ps 0: stopped by a signal before training was complete; exiting 143"));
  EXPECT_THAT(TaskLines(out, 3),
              ::testing::Contains("worker 1: stopped by a signal before training was complete; exiting 143"));
  EXPECT_THAT(out, Not(HasSubstr("0: Evaluation")));
}

// TFJOB_SLURM_JOBS names 5 tasks for a step of 4: every task stops at the
// layout check with one line, before anything listens, and the job fails.
TEST_F(SlurmClusterTest, LayoutThatDoesNotMatchTheTasksFailsWithOneLine) {
  const std::string cwd = t::MakeTempDir("slurm-layout");
  auto env = JobEnv();
  env["TFJOB_SLURM_JOBS"] = "chief:1,ps:1,worker:3";
  const t::SlurmJob job = RunOnOneNode(Example("tfjob.sbatch"), {}, env, cwd);
  const std::string out = ReadFile(job.Field("StdOut"));
  ASSERT_EQ(job.state(), "FAILED") << Tail(out);
  // The tasks' exit code 2, unless --kill-on-bad-exit's SIGTERM (143)
  // reached a task before it got to the check.
  EXPECT_THAT(job.exit_code(), AnyOf("2:0", "143:0")) << Tail(out);
  const std::string error =
      "tfjob-runtime: error: Slurm: the jobs (chief: 1, ps: 1, worker: 3) have 5 tasks but the Slurm step has 4; "
      "the counts must match";
  int told = 0;
  for (int rank = 0; rank < kTasks; ++rank) {
    std::vector<std::string> lines = TaskLines(out, rank);
    // Slurm's own note on the cancelled step is not the task's.
    std::erase_if(lines, [](const std::string& l) { return l.rfind("slurmstepd", 0) == 0; });
    EXPECT_THAT(lines, AnyOf(ElementsAre(error), ElementsAre())) << "rank " << rank << ":\n" << Tail(out);
    told += lines.size() == 1;
  }
  EXPECT_GE(told, 1) << Tail(out);
  EXPECT_THAT(out, HasSubstr("Exited with exit code 2\n"));
  EXPECT_THAT(out, Not(HasSubstr("serving on")));
}

}  // namespace
}  // namespace tfjob::runtime

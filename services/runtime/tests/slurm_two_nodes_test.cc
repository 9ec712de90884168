// The sbatch examples as written, 2 nodes x 2 tasks, under a real Slurm
// with two slurmd: nodes tfjob-node1 and tfjob-node2, each in a network
// namespace of its own (tests/support/slurm/start-slurm.sh --nodes 2), so
// each has every port to itself, as separate machines would, and finds the
// other by name. One Slurm for this whole executable; the log shows each
// job's id and final state.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "services/runtime/tests/slurm_jobs.h"

namespace tfjob::runtime {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
namespace t = ::tfjob::testing;
using namespace slurm_jobs;

class SlurmTwoNodesTest : public RealSlurmTest<2> {
 protected:
  // sbatch OPTIONS SCRIPT ARGS from `cwd`, and the job once it has ended.
  t::SlurmJob RunJob(const std::vector<std::string>& options, const std::string& script,
                     const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                     const std::string& cwd) {
    std::vector<std::string> sbatch = options;
    sbatch.push_back(script);
    sbatch.insert(sbatch.end(), args.begin(), args.end());
    const std::string id = Submit(sbatch, env, cwd);
    if (id.empty()) return {};
    return slurm_->WaitForEnd(id, kJobPatience);
  }
};

// Nothing overridden: the script's 2 nodes, 2 tasks each, 2 CPUs a task,
// and its default port base 8888.
TEST_F(SlurmTwoNodesTest, CounterExampleRunsAsWrittenAcrossTwoNodes) {
  const std::string cwd = t::MakeTempDir("slurm2-counter");
  const t::SlurmJob job = RunJob({}, Example("tfjob.sbatch"), {"--summary-json", cwd + "/out.json"}, JobEnv(), cwd);
  const std::string out = ReadFile(job.Field("StdOut"));
  ASSERT_EQ(job.state(), "COMPLETED") << Tail(out);
  EXPECT_EQ(job.exit_code(), "0:0");
  EXPECT_EQ(job.Field("NodeList"), "tfjob-node[1-2]");
  EXPECT_EQ(job.Field("NumNodes"), "2");
  EXPECT_EQ(job.Field("NumTasks"), "4");

  EXPECT_EQ(t::ReadJsonFile(cwd + "/out.json")["value"], 15.0) << Tail(out);
  EXPECT_THAT(TaskLines(out, 0), Contains(HasSubstr("counter: value 15 after 5 closures")));
  // docs/slurm.md's layout table: ps:0 is node 0's second task, the workers
  // node 1's first and second, each on PORT_BASE + its local task.
  EXPECT_THAT(TaskLines(out, 1), ElementsAre("ps 0: serving on [::]:8889", "ps 0: shut down, training is complete"));
  EXPECT_THAT(TaskLines(out, 2),
              ElementsAre("worker 0: serving on [::]:8888", "worker 0: shut down, training is complete"));
  EXPECT_THAT(TaskLines(out, 3),
              ElementsAre("worker 1: serving on [::]:8889", "worker 1: shut down, training is complete"));
}

// mwms.sbatch as written but for --gres=none: this machine has no GPUs for
// its --gres=gpu:2 to ask for. The ring runs between the two nodes.
TEST_F(SlurmTwoNodesTest, MultiWorkerMirroredExampleTrainsAcrossTwoNodes) {
  const std::string cwd = t::MakeTempDir("slurm2-mwms");
  auto env = JobEnv();
  env["TFJOB_JOB"] = t::SourceDir() + "/examples/mnist/mlp.json";
  env["TFJOB_DATA_DIR"] = t::MnistDir();
  const t::SlurmJob job =
      RunJob({"--gres=none"}, Example("mwms.sbatch"), {"--summary-json", cwd + "/out.json"}, env, cwd);
  const std::string out = ReadFile(job.Field("StdOut"));
  ASSERT_EQ(job.state(), "COMPLETED") << Tail(out);
  EXPECT_EQ(job.exit_code(), "0:0");
  EXPECT_EQ(job.Field("NodeList"), "tfjob-node[1-2]");
  const nlohmann::json s = t::ReadJsonFile(cwd + "/out.json");
  EXPECT_EQ(s["strategy"], "multi_worker_mirrored") << s.dump();
  EXPECT_EQ(s["num_replicas_in_sync"], 4) << s.dump();
  EXPECT_GE(s["eval_accuracy"].get<double>(), 0.92) << s.dump();
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_THAT(TaskLines(out, rank),
                Contains("fit: multi_worker_mirrored, worker:" + std::to_string(rank) + " is rank " +
                         std::to_string(rank) + " of 4, listening on port " + std::to_string(8888 + rank % 2)));
  }
}

// A worker on the second node killed mid-training: --kill-on-bad-exit=1
// stops the tasks on the first node too.
TEST_F(SlurmTwoNodesTest, ATaskKilledOnOneNodeStopsTheStepOnBoth) {
  const std::string cwd = t::MakeTempDir("slurm2-kill");
  const std::string script = MnistPsScript(cwd);
  ASSERT_FALSE(script.empty());
  const std::string id = Submit({"--job-name=tfjob-mnist-ps", script, "--epochs", "100000"}, JobEnv(), cwd);
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(KillTaskMidJob(*slurm_, id, "tfjob-node2", /*rank=*/2));  // worker:0

  const t::SlurmJob job = slurm_->WaitForEnd(id, kJobPatience);
  const std::string out = ReadFile(job.Field("StdOut"));
  ASSERT_EQ(job.state(), "FAILED") << Tail(out);
  EXPECT_THAT(out, HasSubstr("srun: error: tfjob-node2: task 2: Killed\n"));
  EXPECT_THAT(TaskLines(out, 0), Contains(HasSubstr("stopped by a signal before training was complete")));
  EXPECT_THAT(TaskLines(out, 1), Contains("ps 0: stopped by a signal before training was complete; exiting 143"));
  EXPECT_THAT(TaskLines(out, 3), Contains("worker 1: stopped by a signal before training was complete; exiting 143"));
  EXPECT_THAT(out, Not(HasSubstr("0: Evaluation")));
}

}  // namespace
}  // namespace tfjob::runtime

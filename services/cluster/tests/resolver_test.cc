// Resolver selection (TFJOB_CLUSTER_RESOLVER) and the TFJOB_SLURM_* options,
// against fixed environments; nothing here touches the process environment.
#include "services/cluster/resolver.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "services/cluster/tests/test_util.h"

namespace tfjob::cluster {
namespace {

using testing_util::Spec;
using testing_util::With;
using testing_util::Without;

using cluster::FixedEnv;
using cluster::TaskId;
using ::testing::HasSubstr;

// A four-task step on two nodes, two tasks each.
std::map<std::string, std::string> SlurmStep(int procid) {
  return {{"TFJOB_CLUSTER_RESOLVER", "slurm"},      {"TFJOB_SLURM_JOBS", "chief:1,ps:1,worker:2"},
          {"SLURM_PROCID", std::to_string(procid)}, {"SLURM_STEP_NUM_TASKS", "4"},
          {"SLURM_STEP_NODELIST", "node[1-2]"},     {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"}};
}

TEST(ResolveClusterTest, DefaultsToTfConfig) {
  const std::string tf_config =
      R"({"cluster": {"chief": ["c:1"], "ps": ["p:1"], "worker": ["w:1"]}, "task": {"type": "ps", "index": 0}})";
  for (const std::string resolver : {"", "tf_config"}) {
    std::map<std::string, std::string> vars = {{"TF_CONFIG", tf_config}};
    if (!resolver.empty()) vars["TFJOB_CLUSTER_RESOLVER"] = resolver;
    auto r = ResolveCluster(FixedEnv(vars));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->config, *cluster::ParseTfConfig(tf_config));
    EXPECT_FALSE(r->cuda_visible_devices);
  }
}

TEST(ResolveClusterTest, NoTfConfigIsNotFoundSoTheCallerRunsAlone) {
  auto r = ResolveCluster(FixedEnv({}));
  EXPECT_EQ(r.status().code(), Code::kNotFound);
}

TEST(ResolveClusterTest, UnknownResolverIsInvalid) {
  auto r = ResolveCluster(FixedEnv({{"TFJOB_CLUSTER_RESOLVER", "mpi"}}));
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "TFJOB_CLUSTER_RESOLVER: \"mpi\" is not tf_config, slurm or kubernetes");
}

TEST(ResolveClusterTest, SlurmRanksGoToJobsInNameOrder) {
  // Ranks 0, 1 on node1 and 2, 3 on node2; jobs sorted: chief, ps, worker.
  const std::vector<TaskId> want = {{"chief", 0}, {"ps", 0}, {"worker", 0}, {"worker", 1}};
  for (int rank = 0; rank < 4; ++rank) {
    auto r = ResolveCluster(FixedEnv(SlurmStep(rank)));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->config.task, want[rank]);
    EXPECT_EQ(*r->config.cluster.Address("chief", 0), "node1:8888");
    EXPECT_EQ(*r->config.cluster.Address("ps", 0), "node1:8889");
    EXPECT_EQ(*r->config.cluster.Address("worker", 0), "node2:8888");
    EXPECT_EQ(*r->config.cluster.Address("worker", 1), "node2:8889");
    EXPECT_EQ(r->config.rpc_layer, "grpc");
    EXPECT_FALSE(r->cuda_visible_devices);  // no GPUs visible, none assigned
  }
}

TEST(ResolveClusterTest, SlurmIgnoresTfConfig) {
  auto r = ResolveCluster(FixedEnv(With(SlurmStep(1), "TF_CONFIG", "{not json")));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->config.task, (TaskId{"ps", 0}));
}

TEST(ResolveClusterTest, SlurmPortBaseAndGpus) {
  auto vars = With(With(SlurmStep(3), "TFJOB_SLURM_PORT_BASE", "20000"), "TFJOB_SLURM_GPUS_PER_TASK", "2");
  vars["CUDA_VISIBLE_DEVICES"] = "4,5,6,7";
  auto r = ResolveCluster(FixedEnv(vars));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->config.task, (TaskId{"worker", 1}));
  EXPECT_EQ(*r->config.cluster.Address("worker", 1), "node2:20001");
  // Second task on its node: the node's visible devices 2 and 3.
  EXPECT_EQ(r->cuda_visible_devices, "6,7");
}

TEST(ResolveClusterTest, SlurmGpusDefaultToAShareOfTheNode) {
  auto r = ResolveCluster(FixedEnv(With(SlurmStep(0), "CUDA_VISIBLE_DEVICES", "0,1,2,3")));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->cuda_visible_devices, "0,1");
}

TEST(ResolveClusterTest, SlurmTasksPerNodeOverride) {
  auto vars = Without(SlurmStep(2), "SLURM_STEP_TASKS_PER_NODE");
  vars["TFJOB_SLURM_TASKS_PER_NODE"] = "2";
  auto r = ResolveCluster(FixedEnv(vars));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->config.task, (TaskId{"worker", 0}));
}

TEST(ResolveClusterTest, EvaluatorAndMasterLayouts) {
  auto r = ResolveCluster(FixedEnv(With(SlurmStep(1), "TFJOB_SLURM_JOBS", "worker:1,ps:1,evaluator:1,master:1")));
  ASSERT_TRUE(r.ok()) << r.status();
  // Name order: evaluator, master, ps, worker.
  EXPECT_EQ(r->config.task, (TaskId{"master", 0}));
  EXPECT_EQ(*r->config.cluster.Address("evaluator", 0), "node1:8888");
}

// One line naming the variable, INVALID_ARGUMENT (exit 2 in the binary).
void ExpectInvalid(const std::map<std::string, std::string>& vars, const std::string& want) {
  auto r = ResolveCluster(FixedEnv(vars));
  ASSERT_FALSE(r.ok()) << want;
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr(want));
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << r.status();
}

TEST(ResolveClusterTest, BadSlurmOptions) {
  const auto step = SlurmStep(0);
  ExpectInvalid(Without(step, "TFJOB_SLURM_JOBS"), "TFJOB_SLURM_JOBS is not set");
  ExpectInvalid(With(step, "TFJOB_SLURM_JOBS", "chief:1,ps:1,worker"),
                "TFJOB_SLURM_JOBS: \"chief:1,ps:1,worker\" has entry \"worker\", expected JOB:COUNT");
  ExpectInvalid(With(step, "TFJOB_SLURM_JOBS", "chief:1,ps:1,worker:two"), "gives job \"worker\" a count");
  ExpectInvalid(With(step, "TFJOB_SLURM_JOBS", "chief:1,ps:0,worker:3"), "gives job \"ps\" a count");
  ExpectInvalid(With(step, "TFJOB_SLURM_JOBS", "chief:1,ps:1,worker:1,janitor:1"), "names job \"janitor\"");
  ExpectInvalid(With(step, "TFJOB_SLURM_JOBS", "chief:1,ps:1,ps:1,worker:1"), "lists job \"ps\" twice");
  ExpectInvalid(With(step, "TFJOB_SLURM_JOBS", "ps:2,worker:2"), "has ps but no chief");
  ExpectInvalid(With(step, "TFJOB_SLURM_JOBS", "chief:1,evaluator:1"), "has no worker");
  ExpectInvalid(With(step, "TFJOB_SLURM_JOBS", "chief:1,ps:3"), "has no worker");
  ExpectInvalid(With(step, "TFJOB_SLURM_JOBS", "chief:2,ps:1,worker:1"), "job \"chief\" has 2 tasks");
  ExpectInvalid(With(step, "TFJOB_SLURM_PORT_BASE", "80a"), "TFJOB_SLURM_PORT_BASE: \"80a\" is not a non-negative");
  ExpectInvalid(With(step, "TFJOB_SLURM_PORT_BASE", "70000"), "TFJOB_SLURM_PORT_BASE: 70000 is not a port");
  ExpectInvalid(With(step, "TFJOB_SLURM_GPUS_PER_TASK", "-1"), "TFJOB_SLURM_GPUS_PER_TASK: \"-1\"");
  ExpectInvalid(With(step, "TFJOB_SLURM_GPUS_PER_NODE", "x"), "TFJOB_SLURM_GPUS_PER_NODE: \"x\"");
  ExpectInvalid(With(step, "TFJOB_SLURM_TASKS_PER_NODE", "0"), "tasks_per_node 0");
}

// Without parameter servers every task is a member of one synchronous group.
TEST(ResolveClusterTest, SlurmLayoutsWithoutParameterServers) {
  for (const std::string jobs : {"worker:4", "chief:1,worker:3"}) {
    auto r = ResolveCluster(FixedEnv(With(SlurmStep(0), "TFJOB_SLURM_JOBS", jobs)));
    ASSERT_TRUE(r.ok()) << jobs << ": " << r.status();
    EXPECT_FALSE(r->config.cluster.HasJob("ps"));
    EXPECT_EQ(r->config.cluster.NumTasks("worker"), jobs == "worker:4" ? 4 : 3);
  }
}

TEST(ResolveClusterTest, BadSlurmStep) {
  const auto step = SlurmStep(0);
  // Outside a Slurm step: an error, never a silent single-process run.
  ExpectInvalid(Without(step, "SLURM_PROCID"), "Slurm: SLURM_PROCID is not set");
  ExpectInvalid(Without(step, "SLURM_STEP_NODELIST"), "neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set");
  ExpectInvalid(With(step, "SLURM_PROCID", "4"), "SLURM_PROCID 4 is out of range");
  ExpectInvalid(With(step, "SLURM_STEP_NODELIST", "node[2-1]"), "descending");
  ExpectInvalid(With(step, "TFJOB_SLURM_JOBS", "chief:1,ps:1,worker:3"), "have 5 tasks but the Slurm step has 4");
}

}  // namespace
}  // namespace tfjob::cluster

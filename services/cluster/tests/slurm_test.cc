#include "services/cluster/slurm.h"

#include <map>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "services/cluster/tests/test_util.h"

namespace tfjob::cluster {
namespace {

using testing_util::Spec;
using testing_util::With;
using testing_util::Without;

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

std::vector<std::string> Hosts(const std::string& text) {
  StatusOr<std::vector<std::string>> h = ExpandHostlist(text);
  EXPECT_TRUE(h.ok()) << h.status();
  return h.ok() ? *h : std::vector<std::string>{};
}

std::vector<int64_t> PerNode(const std::string& text) {
  StatusOr<std::vector<int64_t>> t = ExpandTasksPerNode(text);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : std::vector<int64_t>{};
}

SlurmResolution MustResolve(const SlurmOptions& options, std::map<std::string, std::string> vars) {
  StatusOr<SlurmResolution> r = ResolveSlurm(options, FixedEnv(std::move(vars)));
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : SlurmResolution{};
}

Status ResolveError(const SlurmOptions& options, std::map<std::string, std::string> vars) {
  StatusOr<SlurmResolution> r = ResolveSlurm(options, FixedEnv(std::move(vars)));
  EXPECT_FALSE(r.ok());
  return r.status();
}

// --- Hostlists -----------------------------------------------------------------

TEST(ExpandHostlist, TensorFlowCases) {
  EXPECT_THAT(Hosts("n1"), ElementsAre("n1"));
  EXPECT_THAT(Hosts("n[1,3]"), ElementsAre("n1", "n3"));
  EXPECT_THAT(Hosts("n[1-3]"), ElementsAre("n1", "n2", "n3"));
  EXPECT_THAT(Hosts("n[1-2],m5,o[3-4,6,7-9]"), ElementsAre("n1", "n2", "m5", "o3", "o4", "o6", "o7", "o8", "o9"));
  EXPECT_THAT(Hosts("n[0001-0003],m5,o[009-011]"),
              ElementsAre("n0001", "n0002", "n0003", "m5", "o009", "o010", "o011"));
}

TEST(ExpandHostlist, PaddingFollowsTheLowerBound) {
  EXPECT_THAT(Hosts("node[01-03,7],gpu-a[1-2],login"),
              ElementsAre("node01", "node02", "node03", "node7", "gpu-a1", "gpu-a2", "login"));
  EXPECT_THAT(Hosts("n[8-10]"), ElementsAre("n8", "n9", "n10"));
  EXPECT_THAT(Hosts("n[08-10]"), ElementsAre("n08", "n09", "n10"));
  EXPECT_THAT(Hosts("n[098-101]"), ElementsAre("n098", "n099", "n100", "n101"));
}

TEST(ExpandHostlist, SuffixesAndSeveralGroups) {
  EXPECT_THAT(Hosts("i01r07c03s[10-12,14]opa"),
              ElementsAre("i01r07c03s10opa", "i01r07c03s11opa", "i01r07c03s12opa", "i01r07c03s14opa"));
  EXPECT_THAT(Hosts("rack[1-2]-n[01-02]"), ElementsAre("rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"));
  EXPECT_THAT(Hosts("[1-2]"), ElementsAre("1", "2"));
  EXPECT_THAT(Hosts("a[3]b"), ElementsAre("a3b"));
}

TEST(ExpandHostlist, KeepsOrderAndDoesNotSort) {
  EXPECT_THAT(Hosts("z1,a[2-1000000]"), ::testing::SizeIs(1000000));
  EXPECT_THAT(Hosts("zeta,alpha,n[3,1]"), ElementsAre("zeta", "alpha", "n3", "n1"));
}

TEST(ExpandHostlist, Errors) {
  auto msg = [](const std::string& t) {
    StatusOr<std::vector<std::string>> h = ExpandHostlist(t);
    EXPECT_EQ(h.status().code(), Code::kInvalidArgument) << t;
    return h.status().message();
  };
  EXPECT_EQ(msg(""), "invalid hostlist \"\": it is empty");
  EXPECT_EQ(msg("n[1-3"), "invalid hostlist \"n[1-3\": unclosed '['");
  EXPECT_EQ(msg("n1-3]"), "invalid hostlist \"n1-3]\": unmatched ']'");
  EXPECT_EQ(msg("n[[1]]"), "invalid hostlist \"n[[1]]\": nested '['");
  EXPECT_EQ(msg("a,,b"), "invalid hostlist \"a,,b\": empty host name");
  EXPECT_EQ(msg(",a"), "invalid hostlist \",a\": empty host name");
  EXPECT_EQ(msg("a,"), "invalid hostlist \"a,\": empty host name");
  EXPECT_EQ(msg("n[]"), "invalid hostlist \"n[]\": empty brackets");
  EXPECT_EQ(msg("n[a-b]"), "invalid hostlist \"n[a-b]\": range \"a-b\" is not N or N-M");
  EXPECT_EQ(msg("n[1-2-3]"), "invalid hostlist \"n[1-2-3]\": range \"1-2-3\" is not N or N-M");
  EXPECT_EQ(msg("n[1,]"), "invalid hostlist \"n[1,]\": range \"\" is not N or N-M");
  EXPECT_EQ(msg("n[ 1]"), "invalid hostlist \"n[ 1]\": range \" 1\" is not N or N-M");
  EXPECT_EQ(msg("n[3-1]"), "invalid hostlist \"n[3-1]\": range \"3-1\" is descending");
  EXPECT_EQ(msg("n[0-999999999999]"), "invalid hostlist \"n[0-999999999999]\": expands to more than 1000000 hosts");
  EXPECT_EQ(msg("a[1-1000]b[1-1001]"), "invalid hostlist \"a[1-1000]b[1-1001]\": expands to more than 1000000 hosts");
  EXPECT_EQ(msg("n[1234567890123456789]"),
            "invalid hostlist \"n[1234567890123456789]\": range \"1234567890123456789\" is not N or N-M");
}

// --- Tasks per node --------------------------------------------------------------

TEST(ExpandTasksPerNode, TensorFlowCases) {
  EXPECT_THAT(PerNode("2"), ElementsAre(2));
  EXPECT_THAT(PerNode("2,1,3"), ElementsAre(2, 1, 3));
  EXPECT_THAT(PerNode("3(x2),2,1"), ElementsAre(3, 3, 2, 1));
  EXPECT_THAT(PerNode("3(x2),2,11(x4)"), ElementsAre(3, 3, 2, 11, 11, 11, 11));
  EXPECT_THAT(PerNode("13(x10)"), ElementsAreArray(std::vector<int64_t>(10, 13)));
  EXPECT_THAT(PerNode("2(x3),1"), ElementsAre(2, 2, 2, 1));
}

TEST(ExpandTasksPerNode, Errors) {
  auto msg = [](const std::string& t) {
    StatusOr<std::vector<int64_t>> r = ExpandTasksPerNode(t);
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << t;
    return r.status().message();
  };
  EXPECT_EQ(msg(""), "invalid tasks-per-node list \"\": it is empty");
  EXPECT_EQ(msg("2,"), "invalid tasks-per-node list \"2,\": empty entry");
  EXPECT_EQ(msg("x"), "invalid tasks-per-node list \"x\": entry \"x\" is not N or N(xM)");
  EXPECT_EQ(msg("-1"), "invalid tasks-per-node list \"-1\": entry \"-1\" is not N or N(xM)");
  EXPECT_EQ(msg("2 "), "invalid tasks-per-node list \"2 \": entry \"2 \" is not N or N(xM)");
  EXPECT_EQ(msg("2(x)"), "invalid tasks-per-node list \"2(x)\": entry \"2(x)\" is not N or N(xM)");
  EXPECT_EQ(msg("2(3)"), "invalid tasks-per-node list \"2(3)\": entry \"2(3)\" is not N or N(xM)");
  EXPECT_EQ(msg("2(x3"), "invalid tasks-per-node list \"2(x3\": entry \"2(x3\" is not N or N(xM)");
  EXPECT_EQ(msg("(x3)"), "invalid tasks-per-node list \"(x3)\": entry \"(x3)\" is not N or N(xM)");
  EXPECT_EQ(msg("2(x0)"), "invalid tasks-per-node list \"2(x0)\": entry \"2(x0)\" repeats zero times");
  EXPECT_EQ(msg("2000000"), "invalid tasks-per-node list \"2000000\": entry \"2000000\" has more than 1000000 tasks");
  EXPECT_EQ(msg("1(x600000),1(x600000)"),
            "invalid tasks-per-node list \"1(x600000),1(x600000)\": describes more than 1000000 nodes");
}

// --- Resolution: TensorFlow's own test scenarios -----------------------------------

TEST(ResolveSlurm, TfSimpleRetrievalFromEnv) {
  SlurmResolution r = MustResolve({}, {{"SLURM_PROCID", "0"},
                                       {"SLURM_STEP_NUM_TASKS", "3"},
                                       {"SLURM_STEP_TASKS_PER_NODE", "1(x3)"},
                                       {"SLURM_STEP_NODELIST", "t02n13,t02n41,t02n43"},
                                       {"CUDA_VISIBLE_DEVICES", "0"}});
  EXPECT_EQ(r.config.cluster, Spec({{"worker", {"t02n13:8888", "t02n41:8888", "t02n43:8888"}}}));
  EXPECT_EQ(r.config.task, (TaskId{"worker", 0}));
  EXPECT_EQ(r.config.rpc_layer, "grpc");
  EXPECT_EQ(r.config.environment, "");
  EXPECT_EQ(r.cuda_visible_devices, "0");
}

TEST(ResolveSlurm, TfSimpleSuccessfulRetrieval) {
  SlurmOptions o;
  o.jobs = {{"ps", 1}, {"worker", 2}};
  o.tasks_per_node = 1;
  o.gpus_per_node = 1;
  o.gpus_per_task = 1;
  SlurmResolution r = MustResolve(
      o, {{"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", "3"}, {"SLURM_STEP_NODELIST", "t02n13,t02n41,t02n43"}});
  EXPECT_EQ(r.config.cluster, Spec({{"ps", {"t02n13:8888"}}, {"worker", {"t02n41:8888", "t02n43:8888"}}}));
  EXPECT_EQ(r.config.task, (TaskId{"ps", 0}));
  EXPECT_EQ(r.cuda_visible_devices, "0");
}

TEST(ResolveSlurm, TfMultiTaskPerNode) {
  SlurmOptions o;
  o.jobs = {{"ps", 1}, {"worker", 4}};
  o.gpus_per_node = 2;
  o.gpus_per_task = 1;
  SlurmResolution r = MustResolve(o, {{"SLURM_PROCID", "1"},
                                      {"SLURM_STEP_NUM_TASKS", "5"},
                                      {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"},
                                      {"SLURM_STEP_NODELIST", "t02n13,t02n41,t02n43"},
                                      {"CUDA_VISIBLE_DEVICES", ""}});
  EXPECT_EQ(r.config.cluster,
            Spec({{"ps", {"t02n13:8888"}}, {"worker", {"t02n13:8889", "t02n41:8888", "t02n41:8889", "t02n43:8888"}}}));
  EXPECT_EQ(r.config.task, (TaskId{"worker", 0}));
  EXPECT_EQ(r.cuda_visible_devices, "1");
}

TEST(ResolveSlurm, TfMultipleGpusPerTask) {
  SlurmOptions o;
  o.jobs = {{"ps", 1}, {"worker", 4}};
  o.gpus_per_node = 4;
  o.gpus_per_task = 2;
  SlurmResolution r = MustResolve(o, {{"SLURM_PROCID", "1"},
                                      {"SLURM_STEP_NUM_TASKS", "5"},
                                      {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"},
                                      {"SLURM_STEP_NODELIST", "t02n13,t02n41,t02n43"},
                                      {"CUDA_VISIBLE_DEVICES", ""}});
  EXPECT_EQ(r.config.task, (TaskId{"worker", 0}));
  EXPECT_EQ(r.cuda_visible_devices, "2,3");
}

// --- Resolution: hand-derived layouts ------------------------------------------------

// node01 runs ranks 0-2 (ports 8888-8890), node02 ranks 3-4, node03 ranks 5-6.
// Jobs in name order: chief = rank 0, ps = ranks 1-2, worker = ranks 3-6.
std::map<std::string, std::string> SevenTasks(const std::string& procid) {
  return {{"SLURM_PROCID", procid}, {"SLURM_STEP_NODELIST", "node[01-03]"}, {"SLURM_STEP_TASKS_PER_NODE", "3,2(x2)"}};
}

SlurmOptions SevenTaskJobs() {
  SlurmOptions o;
  o.jobs = {{"worker", 4}, {"ps", 2}, {"chief", 1}};  // order given does not matter
  return o;
}

TEST(ResolveSlurm, UnevenNodesEveryRank) {
  const ClusterSpec expected = Spec({{"chief", {"node01:8888"}},
                                     {"ps", {"node01:8889", "node01:8890"}},
                                     {"worker", {"node02:8888", "node02:8889", "node03:8888", "node03:8889"}}});
  const std::vector<TaskId> tasks = {{"chief", 0},  {"ps", 0},     {"ps", 1},    {"worker", 0},
                                     {"worker", 1}, {"worker", 2}, {"worker", 3}};
  for (size_t rank = 0; rank < tasks.size(); ++rank) {
    SCOPED_TRACE(rank);
    SlurmResolution r = MustResolve(SevenTaskJobs(), SevenTasks(std::to_string(rank)));
    EXPECT_EQ(r.config.cluster, expected);
    EXPECT_EQ(r.config.task, tasks[rank]);
    EXPECT_EQ(r.cuda_visible_devices, std::nullopt);  // no GPUs known
  }
}

TEST(ResolveSlurm, GpusByLocalRank) {
  SlurmOptions o = SevenTaskJobs();
  o.gpus_per_node = 6;  // 3 tasks on the fullest node: 2 GPUs each
  EXPECT_EQ(MustResolve(o, SevenTasks("0")).cuda_visible_devices, "0,1");
  EXPECT_EQ(MustResolve(o, SevenTasks("2")).cuda_visible_devices, "4,5");
  EXPECT_EQ(MustResolve(o, SevenTasks("4")).cuda_visible_devices, "2,3");
  EXPECT_EQ(MustResolve(o, SevenTasks("5")).cuda_visible_devices, "0,1");
  o.gpus_per_task = 1;
  EXPECT_EQ(MustResolve(o, SevenTasks("2")).cuda_visible_devices, "2");
  o.gpus_per_task = 0;  // explicitly none: leave the environment alone
  EXPECT_EQ(MustResolve(o, SevenTasks("2")).cuda_visible_devices, std::nullopt);
}

TEST(ResolveSlurm, GpusFromVisibleDevicesKeepTheAllocation) {
  std::map<std::string, std::string> vars = SevenTasks("1");
  vars["CUDA_VISIBLE_DEVICES"] = "4,5,6,7,8,9";
  // 6 visible GPUs, at most 3 tasks per node -> 2 each; local rank 1 gets the
  // 3rd and 4th visible devices.
  EXPECT_EQ(MustResolve(SevenTaskJobs(), vars).cuda_visible_devices, "6,7");
  SlurmOptions o = SevenTaskJobs();
  o.gpus_per_node = 3;  // use only the first 3 visible devices, 1 per task
  EXPECT_EQ(MustResolve(o, vars).cuda_visible_devices, "5");
  vars["CUDA_VISIBLE_DEVICES"] = "GPU-aaaa,GPU-bbbb,GPU-cccc";
  EXPECT_EQ(MustResolve(SevenTaskJobs(), vars).cuda_visible_devices, "GPU-bbbb");
  // Fewer GPUs than tasks on a node: nothing to share out.
  vars["CUDA_VISIBLE_DEVICES"] = "0,1";
  EXPECT_EQ(MustResolve(SevenTaskJobs(), vars).cuda_visible_devices, std::nullopt);
}

TEST(ResolveSlurm, RanksFollowNodelistOrderNotStringOrder) {
  SlurmResolution r = MustResolve({}, {{"SLURM_PROCID", "0"},
                                       {"SLURM_STEP_NUM_TASKS", "2"},
                                       {"SLURM_STEP_NODELIST", "n[9-10]"},
                                       {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"}});
  EXPECT_EQ(r.config.cluster, Spec({{"worker", {"n9:8888", "n10:8888"}}}));
  EXPECT_EQ(r.config.task, (TaskId{"worker", 0}));
}

TEST(ResolveSlurm, JobLevelFallbacks) {
  SlurmResolution r = MustResolve({}, {{"SLURM_PROCID", "3"},
                                       {"SLURM_NTASKS", "4"},
                                       {"SLURM_JOB_NODELIST", "gpu-a[1-2]"},
                                       {"SLURM_TASKS_PER_NODE", "2(x2)"}});
  EXPECT_EQ(r.config.cluster, Spec({{"worker", {"gpu-a1:8888", "gpu-a1:8889", "gpu-a2:8888", "gpu-a2:8889"}}}));
  EXPECT_EQ(r.config.task, (TaskId{"worker", 3}));
}

TEST(ResolveSlurm, StepVariablesWinOverJobVariables) {
  SlurmResolution r = MustResolve({}, {{"SLURM_PROCID", "1"},
                                       {"SLURM_STEP_NUM_TASKS", "2"},
                                       {"SLURM_NTASKS", "8"},
                                       {"SLURM_STEP_NODELIST", "s[1-2]"},
                                       {"SLURM_JOB_NODELIST", "j[1-4]"},
                                       {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
                                       {"SLURM_TASKS_PER_NODE", "2(x4)"}});
  EXPECT_EQ(r.config.cluster, Spec({{"worker", {"s1:8888", "s2:8888"}}}));
  EXPECT_EQ(r.config.task, (TaskId{"worker", 1}));
}

TEST(ResolveSlurm, OptionsShapeTheResult) {
  SlurmOptions o;
  o.jobs = {{"worker", 3}, {"evaluator", 1}, {"chief", 1}, {"ps", 1}};
  o.port_base = 2222;
  o.tasks_per_node = 2;
  o.rpc_layer = "grpc+verbs";
  SlurmResolution r = MustResolve(o, {{"SLURM_PROCID", "1"}, {"SLURM_STEP_NODELIST", "r[1-3]n1"}});
  // Name order: chief, evaluator, ps, worker.
  EXPECT_EQ(r.config.cluster, Spec({{"chief", {"r1n1:2222"}},
                                    {"evaluator", {"r1n1:2223"}},
                                    {"ps", {"r2n1:2222"}},
                                    {"worker", {"r2n1:2223", "r3n1:2222", "r3n1:2223"}}}));
  EXPECT_EQ(r.config.task, (TaskId{"evaluator", 0}));
  EXPECT_EQ(
      ToTfConfigJson(r.config),
      R"({"cluster":{"chief":["r1n1:2222"],"evaluator":["r1n1:2223"],"ps":["r2n1:2222"],)"
      R"("worker":["r2n1:2223","r3n1:2222","r3n1:2223"]},"task":{"type":"evaluator","index":0},"rpc_layer":"grpc+verbs"})");
}

TEST(ResolveSlurm, EmptyJobIsKept) {
  SlurmOptions o;
  o.jobs = {{"ps", 0}, {"worker", 2}};
  SlurmResolution r =
      MustResolve(o, {{"SLURM_PROCID", "1"}, {"SLURM_STEP_NODELIST", "a,b"}, {"SLURM_STEP_TASKS_PER_NODE", "1,1"}});
  EXPECT_TRUE(r.config.cluster.HasJob("ps"));
  EXPECT_EQ(r.config.cluster.NumTasks("ps"), 0);
  EXPECT_EQ(r.config.task, (TaskId{"worker", 1}));
}

// --- Resolution errors --------------------------------------------------------------

std::map<std::string, std::string> Basic() {
  return {{"SLURM_PROCID", "0"},
          {"SLURM_STEP_NUM_TASKS", "3"},
          {"SLURM_STEP_NODELIST", "n[1-3]"},
          {"SLURM_STEP_TASKS_PER_NODE", "1(x3)"}};
}

TEST(ResolveSlurmError, MissingVariablesAreNamed) {
  EXPECT_EQ(ResolveError({}, Without(Basic(), "SLURM_PROCID")),
            Status(Code::kNotFound, "Slurm: SLURM_PROCID is not set; not running inside a Slurm step?"));
  EXPECT_EQ(ResolveError({}, Without(Basic(), "SLURM_STEP_NUM_TASKS")),
            Status(Code::kNotFound,
                   "Slurm: neither SLURM_STEP_NUM_TASKS nor SLURM_NTASKS is set; not running inside a Slurm step?"));
  EXPECT_EQ(ResolveError({}, Without(Basic(), "SLURM_STEP_NODELIST")),
            Status(Code::kNotFound,
                   "Slurm: neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set; not running inside a Slurm "
                   "step?"));
  EXPECT_EQ(ResolveError({}, Without(Basic(), "SLURM_STEP_TASKS_PER_NODE")),
            Status(Code::kNotFound,
                   "Slurm: neither SLURM_STEP_TASKS_PER_NODE nor SLURM_TASKS_PER_NODE is set; not running inside a "
                   "Slurm step?"));
}

TEST(ResolveSlurmError, VariablesNotNeededAreNotRead) {
  SlurmOptions o;
  o.jobs = {{"worker", 3}};
  o.tasks_per_node = 1;
  EXPECT_TRUE(ResolveSlurm(o, FixedEnv({{"SLURM_PROCID", "2"}, {"SLURM_STEP_NODELIST", "n[1-3]"}})).ok());
}

TEST(ResolveSlurmError, MalformedValuesAreQuoted) {
  EXPECT_EQ(ResolveError({}, With(Basic(), "SLURM_PROCID", "one")),
            Status(Code::kInvalidArgument, "Slurm: SLURM_PROCID \"one\" is not a non-negative integer"));
  EXPECT_EQ(ResolveError({}, With(Basic(), "SLURM_PROCID", "-1")),
            Status(Code::kInvalidArgument, "Slurm: SLURM_PROCID \"-1\" is not a non-negative integer"));
  EXPECT_EQ(ResolveError({}, With(Without(Basic(), "SLURM_STEP_NUM_TASKS"), "SLURM_NTASKS", "")),
            Status(Code::kInvalidArgument, "Slurm: SLURM_NTASKS \"\" is not a non-negative integer"));
  EXPECT_EQ(ResolveError({}, With(Basic(), "SLURM_STEP_NODELIST", "n[1-3")),
            Status(Code::kInvalidArgument, "Slurm: SLURM_STEP_NODELIST: invalid hostlist \"n[1-3\": unclosed '['"));
  EXPECT_EQ(ResolveError({}, With(Basic(), "SLURM_STEP_TASKS_PER_NODE", "1(x3")),
            Status(Code::kInvalidArgument,
                   "Slurm: SLURM_STEP_TASKS_PER_NODE: invalid tasks-per-node list \"1(x3\": entry \"1(x3\" is not N "
                   "or N(xM)"));
  EXPECT_EQ(
      ResolveError({}, With(Basic(), "SLURM_STEP_NODELIST", "n1,n[1-2]")),
      Status(Code::kInvalidArgument, "Slurm: SLURM_STEP_NODELIST \"n1,n[1-2]\" lists host \"n1\" more than once"));
  EXPECT_EQ(ResolveError({}, With(Basic(), "SLURM_STEP_TASKS_PER_NODE", "1(x2)")),
            Status(Code::kInvalidArgument,
                   "Slurm: SLURM_STEP_TASKS_PER_NODE \"1(x2)\" describes 2 nodes but SLURM_STEP_NODELIST \"n[1-3]\" "
                   "lists 3"));
  EXPECT_EQ(ResolveError({}, With(Basic(), "SLURM_STEP_NODELIST", "n 1,n2,n3")),
            Status(Code::kInvalidArgument,
                   "Slurm: job \"worker\" task 0: invalid address \"n 1:8888\": host contains invalid character "
                   "\" \""));
  EXPECT_EQ(ResolveError({}, With(Basic(), "CUDA_VISIBLE_DEVICES", "0,,1")),
            Status(Code::kInvalidArgument, "Slurm: CUDA_VISIBLE_DEVICES \"0,,1\" has an empty entry"));
}

TEST(ResolveSlurmError, JobsMustMatchTheStep) {
  SlurmOptions o;
  o.jobs = {{"ps", 1}, {"worker", 4}};
  EXPECT_EQ(ResolveError(o, Basic()),
            Status(Code::kInvalidArgument,
                   "Slurm: the jobs (ps: 1, worker: 4) have 5 tasks but the Slurm step has 3; the counts must match"));
  o.jobs = {{"worker", 2}};
  EXPECT_EQ(ResolveError(o, Basic()),
            Status(Code::kInvalidArgument,
                   "Slurm: the jobs (worker: 2) have 2 tasks but the Slurm step has 3; the counts must match"));
  // The default single job takes SLURM_STEP_NUM_TASKS, which must agree too.
  EXPECT_EQ(ResolveError({}, With(Basic(), "SLURM_STEP_NUM_TASKS", "4")),
            Status(Code::kInvalidArgument,
                   "Slurm: the jobs (worker: 4) have 4 tasks but the Slurm step has 3; the counts must match"));
}

TEST(ResolveSlurmError, RankOutOfRange) {
  EXPECT_EQ(ResolveError({}, With(Basic(), "SLURM_PROCID", "3")),
            Status(Code::kInvalidArgument, "Slurm: SLURM_PROCID 3 is out of range for a step with 3 tasks"));
}

TEST(ResolveSlurmError, TooFewGpus) {
  SlurmOptions o;
  o.gpus_per_node = 2;
  o.gpus_per_task = 1;
  EXPECT_EQ(
      ResolveError(o, With(Basic(), "SLURM_STEP_TASKS_PER_NODE", "3,0,0")),
      Status(Code::kInvalidArgument, "Slurm: a node runs up to 3 tasks taking 1 GPU(s) each, but gpus_per_node is 2"));
  o.gpus_per_node = 4;
  o.gpus_per_task = std::nullopt;
  EXPECT_EQ(ResolveError(o, With(Basic(), "CUDA_VISIBLE_DEVICES", "0,1")),
            Status(Code::kInvalidArgument, "Slurm: gpus_per_node is 4 but CUDA_VISIBLE_DEVICES \"0,1\" lists 2"));
}

TEST(ResolveSlurmError, PortsRunOut) {
  SlurmOptions o;
  o.port_base = 65535;
  EXPECT_EQ(ResolveError(o, With(Basic(), "SLURM_STEP_TASKS_PER_NODE", "1,2,0")),
            Status(Code::kInvalidArgument, "Slurm: host \"n2\" runs 2 tasks from port_base 65535, past port 65535"));
}

TEST(ResolveSlurmError, RoleCountsAsInTfConfig) {
  SlurmOptions o;
  o.jobs = {{"chief", 2}, {"worker", 1}};
  EXPECT_EQ(ResolveError(o, Basic()),
            Status(Code::kInvalidArgument, "Slurm: job \"chief\" has 2 tasks; at most one is allowed"));
  o.jobs = {{"chief", 1}, {"master", 1}, {"worker", 1}};
  EXPECT_EQ(ResolveError(o, Basic()),
            Status(Code::kInvalidArgument,
                   "Slurm: the cluster has both \"chief\" and \"master\" jobs; only one coordinator is allowed"));
}

TEST(ResolveSlurmError, BadOptions) {
  SlurmOptions o;
  o.port_base = 0;
  EXPECT_EQ(ResolveError(o, Basic()),
            Status(Code::kInvalidArgument, "Slurm: port_base 0 is not a port from 1 to 65535"));
  o = {};
  o.tasks_per_node = 0;
  EXPECT_EQ(ResolveError(o, Basic()),
            Status(Code::kInvalidArgument, "Slurm: tasks_per_node 0 is not from 1 to 1000000"));
  o = {};
  o.gpus_per_node = -1;
  EXPECT_EQ(ResolveError(o, Basic()), Status(Code::kInvalidArgument, "Slurm: gpus_per_node -1 is not from 0 to 4096"));
  o = {};
  o.gpus_per_task = -2;
  EXPECT_EQ(ResolveError(o, Basic()), Status(Code::kInvalidArgument, "Slurm: gpus_per_task -2 is not from 0 to 4096"));
  o.gpus_per_task = 1'000'000'000'000;
  EXPECT_EQ(ResolveError(o, Basic()),
            Status(Code::kInvalidArgument, "Slurm: gpus_per_task 1000000000000 is not from 0 to 4096"));
  o = {};
  o.jobs = {{"my-job", 3}};
  EXPECT_EQ(ResolveError(o, Basic()),
            Status(Code::kInvalidArgument,
                   "Slurm: invalid job name \"my-job\"; expected a letter followed by letters, digits or '_'"));
  o.jobs = {{"worker", -1}};
  EXPECT_EQ(ResolveError(o, Basic()),
            Status(Code::kInvalidArgument, "Slurm: job \"worker\" has task count -1, expected 0 to 1000000"));
}

}  // namespace
}  // namespace tfjob::cluster

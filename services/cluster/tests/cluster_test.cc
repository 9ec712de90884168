#include "services/cluster/cluster.h"

#include <cstdlib>
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
using ::testing::StartsWith;

ClusterConfig MustParse(const std::string& text, TaskRequirement req = TaskRequirement::kRequired) {
  StatusOr<ClusterConfig> c = ParseTfConfig(text, req);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : ClusterConfig();
}

// --- TensorFlow's documented examples ---------------------------------------

TEST(ParseTfConfig, ResolverDocExample) {
  // tf.distribute.cluster_resolver.TFConfigClusterResolver docstring.
  ClusterConfig c = MustParse(
      R"({"cluster": {"worker": ["localhost:12345", "localhost:23456"]}, "task": {"type": "worker", "index": 0}})");
  EXPECT_EQ(c.cluster, Spec({{"worker", {"localhost:12345", "localhost:23456"}}}));
  EXPECT_EQ(c.task, (TaskId{"worker", 0}));
  EXPECT_EQ(c.environment, "");
  EXPECT_EQ(c.rpc_layer, "");
}

TEST(ParseTfConfig, StandardServerDocExample) {
  // tf.distribute.run_standard_tensorflow_server docstring, with rpc_layer.
  ClusterConfig c = MustParse(R"({ "cluster": { "worker": ["host1:2222", "host2:2222", "host3:2222"],
                                              "ps": ["host4:2222", "host5:2222"] },
                                   "task": {"type": "worker", "index": 1}, "rpc_layer": "grpc" })");
  EXPECT_EQ(c.cluster.NumTasks("worker"), 3);
  EXPECT_EQ(c.cluster.NumTasks("ps"), 2);
  EXPECT_EQ(c.cluster.Address("ps", 1).value(), "host5:2222");
  EXPECT_EQ(c.task, (TaskId{"worker", 1}));
  EXPECT_EQ(c.rpc_layer, "grpc");
}

TEST(ParseTfConfig, EvaluatorOutsideClusterAsInTrainAndEvaluateDocs) {
  // tf.estimator.train_and_evaluate: the evaluator is not in "cluster".
  ClusterConfig c = MustParse(R"({"cluster": {"chief": ["host0:2222"],
      "worker": ["host1:2222", "host2:2222", "host3:2222"], "ps": ["host4:2222", "host5:2222"]},
      "task": {"type": "evaluator", "index": 0}})");
  EXPECT_FALSE(c.cluster.HasJob("evaluator"));
  EXPECT_EQ(c.task, (TaskId{"evaluator", 0}));
}

TEST(ParseTfConfig, SparseJobAsInClusterSpecDocs) {
  // tf.train.ClusterSpec: {"worker": {1: "worker1.example.com:2222"}, ...}.
  ClusterConfig c = MustParse(R"({"cluster": {"worker": {"1": "worker1.example.com:2222"},
      "ps": ["ps0.example.com:2222", "ps1.example.com:2222"]}, "task": {"type": "worker", "index": 1}})");
  EXPECT_EQ(c.cluster.NumTasks("worker"), 1);
  EXPECT_THAT(c.cluster.TaskIndices("worker"), ElementsAre(1));
  EXPECT_FALSE(c.cluster.IsDense("worker"));
  EXPECT_TRUE(c.cluster.IsDense("ps"));
  EXPECT_EQ(c.cluster.Address("worker", 1).value(), "worker1.example.com:2222");
  EXPECT_EQ(c.task, (TaskId{"worker", 1}));
}

TEST(ParseTfConfig, AiPlatformExtrasAreIgnoredAndMasterIsKept) {
  ClusterConfig c = MustParse(R"({"cluster": {"master": ["m0:2222"], "worker": ["w0:2222"], "ps": ["p0:2222"]},
      "task": {"type": "master", "index": 0, "trial": "3", "cloud": "abc"},
      "job": {"args": ["--x"], "scale_tier": "CUSTOM"}, "environment": "cloud"})");
  EXPECT_THAT(c.cluster.JobNames(), ElementsAre("master", "ps", "worker"));
  EXPECT_EQ(c.task, (TaskId{"master", 0}));
  EXPECT_TRUE(IsChief(c.task->type));
  EXPECT_EQ(c.environment, "cloud");
}

// What the operator writes, as Kubeflow does: the evaluator is never in
// "cluster", and the evaluator task still has its own "task".
TEST(ParseTfConfig, OperatorLiterals) {
  const std::string cluster =
      R"({"cluster":{"chief":["j-chief-0.ns.svc:2222"],"ps":["j-ps-0.ns.svc:2222"],"worker":["j-worker-0.ns.svc:2222","j-worker-1.ns.svc:2222"]},)";
  ClusterConfig c = MustParse(cluster + R"("task":{"type":"worker","index":1},"environment":"cloud"})");
  EXPECT_THAT(c.cluster.JobNames(), ElementsAre("chief", "ps", "worker"));
  EXPECT_EQ(c.cluster.Address("worker", 1).value(), "j-worker-1.ns.svc:2222");
  EXPECT_EQ(c.task, (TaskId{"worker", 1}));
  EXPECT_EQ(c.environment, "cloud");
  ClusterConfig e = MustParse(cluster + R"("task":{"type":"evaluator","index":0},"environment":"cloud"})");
  EXPECT_EQ(e.cluster, c.cluster);
  EXPECT_EQ(e.task, (TaskId{"evaluator", 0}));
}

// TensorFlow's own form with the evaluator listed is accepted too.
TEST(ParseTfConfig, EvaluatorListedInTheCluster) {
  ClusterConfig c = MustParse(
      R"({"cluster":{"chief":["j-chief-0.ns.svc:2222"],"ps":["j-ps-0.ns.svc:2222"],"worker":["j-worker-0.ns.svc:2222","j-worker-1.ns.svc:2222"],"evaluator":["j-evaluator-0.ns.svc:2222"]},"task":{"type":"worker","index":1},"environment":"cloud"})");
  EXPECT_THAT(c.cluster.JobNames(), ElementsAre("chief", "ps", "worker", "evaluator"));
  EXPECT_EQ(c.task, (TaskId{"worker", 1}));
}

TEST(ParseTfConfig, IndexFormsTfAccepts) {
  for (auto [index, expected] : std::vector<std::pair<std::string, int64_t>>{
           {"2", 2}, {"\"1\"", 1}, {"\" 2 \"", 2}, {"\"+0\"", 0}, {"1.0", 1}, {"\"02\"", 2}}) {
    SCOPED_TRACE(index);
    std::string text =
        R"({"cluster": {"worker": ["a:1", "b:2", "c:3"]}, "task": {"type": "worker", "index": )" + index + "}}";
    EXPECT_EQ(MustParse(text).task, (TaskId{"worker", expected}));
  }
}

TEST(ParseTfConfig, TaskOptionalWhenAllowed) {
  ClusterConfig c = MustParse(R"({"cluster": {"worker": ["a:1"]}})", TaskRequirement::kOptional);
  EXPECT_FALSE(c.task.has_value());
  EXPECT_EQ(c.cluster.NumTasks("worker"), 1);
  // A null task is the same as none.
  EXPECT_FALSE(MustParse(R"({"cluster": {"worker": ["a:1"]}, "task": null})", TaskRequirement::kOptional).task);
}

TEST(ParseTfConfig, OtherJobNamesAndEmptyJobsAreTolerated) {
  ClusterConfig c = MustParse(R"({"cluster": {"worker": ["a:1"], "data_service": ["d:5050"], "ps": []},
                                  "task": {"type": "worker", "index": 0}})");
  EXPECT_THAT(c.cluster.JobNames(), ElementsAre("ps", "worker", "data_service"));
  EXPECT_TRUE(c.cluster.HasJob("ps"));
  EXPECT_EQ(c.cluster.NumTasks("ps"), 0);
}

TEST(ParseTfConfig, EvaluatorInsideClusterIsIndexChecked) {
  ClusterConfig c = MustParse(R"({"cluster": {"worker": ["a:1"], "evaluator": ["e:1"]},
                                  "task": {"type": "evaluator", "index": 0}})");
  EXPECT_EQ(c.task, (TaskId{"evaluator", 0}));
}

// --- Errors: one line each, exact text ----------------------------------------

struct ErrorCase {
  const char* name;
  std::string json;
  std::string message;
};

void PrintTo(const ErrorCase& c, std::ostream* os) { *os << c.name; }

class ParseTfConfigError : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(ParseTfConfigError, ExactMessage) {
  StatusOr<ClusterConfig> c = ParseTfConfig(GetParam().json);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status(), Status(Code::kInvalidArgument, GetParam().message));
  EXPECT_EQ(c.status().message().find('\n'), std::string::npos);
}

// Wraps a cluster and task into a document.
std::string Doc(const std::string& cluster, const std::string& task = R"({"type": "worker", "index": 0})") {
  return R"({"cluster": )" + cluster + R"(, "task": )" + task + "}";
}

INSTANTIATE_TEST_SUITE_P(
    Table, ParseTfConfigError,
    ::testing::Values(
        ErrorCase{"NotAnObject", "[1]", "TF_CONFIG: expected a JSON object, got array"},
        ErrorCase{"ClusterMissing", R"({"task": {"type": "worker", "index": 0}})", "TF_CONFIG: \"cluster\" is missing"},
        ErrorCase{"ClusterNull", R"({"cluster": null})", "TF_CONFIG: \"cluster\" is missing"},
        ErrorCase{"ClusterNotObject", R"({"cluster": ["a:1"]})",
                  "TF_CONFIG: \"cluster\" must be an object mapping job names to addresses, got array"},
        ErrorCase{"JobIsString", Doc(R"({"worker": "a:1"})"),
                  "TF_CONFIG: job \"worker\" must be a list of addresses or an object mapping task indices to "
                  "addresses, got string"},
        ErrorCase{"JobIsNumber", Doc(R"({"worker": 3})"),
                  "TF_CONFIG: job \"worker\" must be a list of addresses or an object mapping task indices to "
                  "addresses, got number"},
        ErrorCase{"ListEntryNotString", Doc(R"({"worker": ["a:1", 7]})"),
                  "TF_CONFIG: job \"worker\" task 1: address must be a string, got 7"},
        ErrorCase{"DictValueNotString", Doc(R"({"worker": {"0": ["a:1"]}})"),
                  "TF_CONFIG: job \"worker\" task 0: address must be a string, got [\"a:1\"]"},
        ErrorCase{"DictKeyNotIndex", Doc(R"({"worker": {"one": "a:1"}})"),
                  "TF_CONFIG: job \"worker\" has task index \"one\"; expected a non-negative integer"},
        ErrorCase{"DictKeyNegative", Doc(R"({"worker": {"-1": "a:1"}})"),
                  "TF_CONFIG: job \"worker\" has task index \"-1\"; expected a non-negative integer"},
        ErrorCase{"DictKeyTwice", Doc(R"({"worker": {"1": "a:1", "01": "b:1"}})", R"({"type": "worker", "index": 1})"),
                  "TF_CONFIG: job \"worker\" defines task 1 more than once"},
        ErrorCase{"BadJobName", Doc(R"({"worker": ["a:1"], "my-job": ["b:1"]})"),
                  "TF_CONFIG: invalid job name \"my-job\"; expected a letter followed by letters, digits or '_'"},
        ErrorCase{"AddressNoPort", Doc(R"({"worker": ["a:1", "host"]})"),
                  "TF_CONFIG: job \"worker\" task 1: invalid address \"host\": expected host:port"},
        ErrorCase{"AddressPortWord", Doc(R"({"worker": ["host1:port"]})"),
                  "TF_CONFIG: job \"worker\" task 0: invalid address \"host1:port\": port \"port\" is not a number "
                  "from 1 to 65535"},
        ErrorCase{"AddressPortZero", Doc(R"({"worker": ["h:0"]})"),
                  "TF_CONFIG: job \"worker\" task 0: invalid address \"h:0\": port \"0\" is not a number from 1 to "
                  "65535"},
        ErrorCase{"AddressPortTooBig", Doc(R"({"worker": {"3": "h:65536"}})", R"({"type": "worker", "index": 3})"),
                  "TF_CONFIG: job \"worker\" task 3: invalid address \"h:65536\": port \"65536\" is not a number "
                  "from 1 to 65535"},
        ErrorCase{"AddressEmptyHost", Doc(R"({"worker": [":2222"]})"),
                  "TF_CONFIG: job \"worker\" task 0: invalid address \":2222\": empty host"},
        ErrorCase{"AddressBareIpv6", Doc(R"({"worker": ["::1:2222"]})"),
                  "TF_CONFIG: job \"worker\" task 0: invalid address \"::1:2222\": an IPv6 host must be bracketed, "
                  "as in [::1]:2222"},
        ErrorCase{"AddressSpace", Doc(R"({"worker": ["a b:1"]})"),
                  "TF_CONFIG: job \"worker\" task 0: invalid address \"a b:1\": host contains invalid character "
                  "\" \""},
        ErrorCase{"AddressNewlineStaysOnOneLine", Doc(R"({"worker": ["a\nb:1"]})"),
                  "TF_CONFIG: job \"worker\" task 0: invalid address \"a\\nb:1\": host contains invalid character "
                  "\"\\n\""},
        ErrorCase{"ChiefTwice", Doc(R"({"chief": ["c0:1", "c1:1"], "worker": ["a:1"]})"),
                  "TF_CONFIG: job \"chief\" has 2 tasks; at most one is allowed"},
        ErrorCase{"MasterTwice", Doc(R"({"master": ["c0:1", "c1:1"], "worker": ["a:1"]})"),
                  "TF_CONFIG: job \"master\" has 2 tasks; at most one is allowed"},
        ErrorCase{"EvaluatorTwice", Doc(R"({"evaluator": ["e0:1", "e1:1"], "worker": ["a:1"]})"),
                  "TF_CONFIG: job \"evaluator\" has 2 tasks; at most one is allowed"},
        ErrorCase{"ChiefAndMaster", Doc(R"({"chief": ["c0:1"], "master": ["m0:1"], "worker": ["a:1"]})"),
                  "TF_CONFIG: the cluster has both \"chief\" and \"master\" jobs; only one coordinator is allowed"},
        ErrorCase{"TwoTasksOneAddress", Doc(R"({"chief": ["h:2222"], "ps": ["h:2222"], "worker": ["w:1"]})"),
                  "TF_CONFIG: chief:0 and ps:0 have the same address \"h:2222\"; every task needs its own host:port"},
        ErrorCase{"TwoWorkersOneAddress", Doc(R"({"worker": ["w:1", "v:1", "w:1"]})"),
                  "TF_CONFIG: worker:0 and worker:2 have the same address \"w:1\"; every task needs its own host:port"},
        ErrorCase{"EnvironmentNotString", R"({"cluster": {"worker": ["a:1"]}, "environment": 5})",
                  "TF_CONFIG: \"environment\" must be a string, got 5"},
        ErrorCase{"RpcLayerNotString", R"({"cluster": {"worker": ["a:1"]}, "rpc_layer": ["grpc"]})",
                  "TF_CONFIG: \"rpc_layer\" must be a string, got [\"grpc\"]"},
        ErrorCase{"TaskMissing", R"({"cluster": {"worker": ["a:1"]}})", "TF_CONFIG: \"task\" is missing"},
        ErrorCase{"TaskNotObject", Doc(R"({"worker": ["a:1"]})", R"("worker")"),
                  "TF_CONFIG: \"task\" must be an object with \"type\" and \"index\", got string"},
        ErrorCase{"TypeMissing", Doc(R"({"worker": ["a:1"]})", R"({"index": 0})"), "TF_CONFIG: task.type is missing"},
        ErrorCase{"TypeNotString", Doc(R"({"worker": ["a:1"]})", R"({"type": 1, "index": 0})"),
                  "TF_CONFIG: task.type must be a string, got 1"},
        ErrorCase{"TypeEmpty", Doc(R"({"worker": ["a:1"]})", R"({"type": "", "index": 0})"),
                  "TF_CONFIG: task.type is empty"},
        ErrorCase{"TypeUnknown", Doc(R"({"worker": ["a:1"]})", R"({"type": "trainer", "index": 0})"),
                  "TF_CONFIG: unknown task type \"trainer\"; expected chief, master, ps, worker or evaluator"},
        ErrorCase{"TypeUnknownEvenWhenInCluster", Doc(R"({"trainer": ["a:1"]})", R"({"type": "trainer", "index": 0})"),
                  "TF_CONFIG: unknown task type \"trainer\"; expected chief, master, ps, worker or evaluator"},
        ErrorCase{"TypeNotInCluster", Doc(R"({"ps": ["p:1"], "chief": ["c:1"]})"),
                  "TF_CONFIG: task type \"worker\" is not a job in the cluster (jobs: chief, ps)"},
        ErrorCase{"TypeNotInEmptyCluster", Doc("{}"),
                  "TF_CONFIG: task type \"worker\" is not a job in the cluster (the cluster has no jobs)"},
        ErrorCase{"IndexMissing", Doc(R"({"worker": ["a:1"]})", R"({"type": "worker"})"),
                  "TF_CONFIG: task.index is missing"},
        ErrorCase{"IndexBool", Doc(R"({"worker": ["a:1"]})", R"({"type": "worker", "index": true})"),
                  "TF_CONFIG: task.index must be an integer or a numeric string, got true"},
        ErrorCase{"IndexWord", Doc(R"({"worker": ["a:1"]})", R"({"type": "worker", "index": "one"})"),
                  "TF_CONFIG: task.index must be an integer or a numeric string, got \"one\""},
        ErrorCase{"IndexFraction", Doc(R"({"worker": ["a:1"]})", R"({"type": "worker", "index": 0.5})"),
                  "TF_CONFIG: task.index must be an integer or a numeric string, got 0.5"},
        ErrorCase{"IndexHuge", Doc(R"({"worker": ["a:1"]})", R"({"type": "worker", "index": 18446744073709551615})"),
                  "TF_CONFIG: task.index must be an integer or a numeric string, got 18446744073709551615"},
        ErrorCase{"IndexNegative", Doc(R"({"worker": ["a:1"]})", R"({"type": "worker", "index": -1})"),
                  "TF_CONFIG: task index -1 is negative"},
        ErrorCase{"IndexNegativeString", Doc(R"({"worker": ["a:1"]})", R"({"type": "worker", "index": "-2"})"),
                  "TF_CONFIG: task index -2 is negative"},
        ErrorCase{"EvaluatorIndexNegative", Doc(R"({"worker": ["a:1"]})", R"({"type": "evaluator", "index": -1})"),
                  "TF_CONFIG: task index -1 is negative"},
        ErrorCase{"IndexOutOfRange", Doc(R"({"worker": ["a:1", "b:1", "c:1"]})", R"({"type": "worker", "index": 3})"),
                  "TF_CONFIG: task index 3 is out of range for job \"worker\" with 3 tasks"},
        ErrorCase{"IndexOutOfRangeOneTask", Doc(R"({"chief": ["c:1"]})", R"({"type": "chief", "index": 1})"),
                  "TF_CONFIG: task index 1 is out of range for job \"chief\" with 1 task"},
        ErrorCase{"IndexOutOfRangeEmptyJob", Doc(R"({"ps": []})", R"({"type": "ps", "index": 0})"),
                  "TF_CONFIG: task index 0 is out of range for job \"ps\" with 0 tasks"},
        ErrorCase{"EvaluatorInClusterOutOfRange",
                  Doc(R"({"evaluator": ["e:1"]})", R"({"type": "evaluator", "index": 1})"),
                  "TF_CONFIG: task index 1 is out of range for job \"evaluator\" with 1 task"},
        ErrorCase{"IndexNotInSparseJob",
                  Doc(R"({"worker": {"1": "a:1", "3": "b:1"}})", R"({"type": "worker", "index": 2})"),
                  "TF_CONFIG: task index 2 is not defined in sparse job \"worker\" (indices 1, 3)"}),
    [](const ::testing::TestParamInfo<ErrorCase>& info) { return std::string(info.param.name); });

// A huge bad value is echoed cut, with its length: one line stays a line.
TEST(ParseTfConfig, AHugeBadAddressIsEchoedCut) {
  const std::string huge(120 * 1024, 'x');
  StatusOr<ClusterConfig> c = ParseTfConfig(Doc(R"({"worker": [")" + huge + R"("]})"));
  ASSERT_FALSE(c.ok());
  EXPECT_LT(c.status().message().size(), 600u) << c.status().message().size();
  EXPECT_THAT(c.status().message(), ::testing::HasSubstr("... (122880 bytes)\": expected host:port"));
}

TEST(ParseTfConfig, MalformedJsonNamesTheByteOffset) {
  // The parser stops at the '}' that should have been a value: byte 13.
  StatusOr<ClusterConfig> c = ParseTfConfig(R"({"cluster": })");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(c.status().message(), StartsWith("TF_CONFIG: malformed JSON at byte 13: "));
  EXPECT_EQ(c.status().message().find('\n'), std::string::npos);

  StatusOr<ClusterConfig> empty = ParseTfConfig("");
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.status().message(), StartsWith("TF_CONFIG: malformed JSON at byte 1: "));
}

// --- Serialiser --------------------------------------------------------------

ClusterConfig OperatorConfig() {
  ClusterConfig c;
  c.cluster = Spec({{"worker", {"j-worker-0.ns.svc:2222", "j-worker-1.ns.svc:2222"}},
                    {"evaluator", {"j-evaluator-0.ns.svc:2222"}},
                    {"ps", {"j-ps-0.ns.svc:2222", "j-ps-1.ns.svc:2222"}},
                    {"chief", {"j-chief-0.ns.svc:2222"}}});
  c.task = TaskId{"worker", 1};
  c.environment = "cloud";
  return c;
}

// The bytes training-operator v1.9.0 writes for this job (the operator's
// names_test pins the same string from a TFJob).
TEST(ToTfConfigJson, MatchesTheOperatorFormatByteForByte) {
  EXPECT_EQ(
      ToTfConfigJson(OperatorConfig()),
      R"({"cluster":{"chief":["j-chief-0.ns.svc:2222"],"evaluator":["j-evaluator-0.ns.svc:2222"],)"
      R"("ps":["j-ps-0.ns.svc:2222","j-ps-1.ns.svc:2222"],"worker":["j-worker-0.ns.svc:2222","j-worker-1.ns.svc:2222"]},)"
      R"("task":{"type":"worker","index":1},"environment":"cloud"})");
}

// Jobs in byte order of their names, as Go marshals Kubeflow's map.
TEST(ToTfConfigJson, JobsInNameOrderAsGoMarshalsAMap) {
  ClusterConfig c;
  c.cluster = Spec({{"zeta", {"z:1"}},
                    {"evaluator", {"e:1"}},
                    {"alpha", {"a:1"}},
                    {"worker", {"w:1"}},
                    {"ps", {"p:1"}},
                    {"master", {"m:1"}}});
  EXPECT_EQ(ToTfConfigJson(c), R"({"cluster":{"alpha":["a:1"],"evaluator":["e:1"],"master":["m:1"],"ps":["p:1"],)"
                               R"("worker":["w:1"],"zeta":["z:1"]}})");
}

TEST(ToTfConfigJson, RpcLayerAfterEnvironmentAndOnlyWhenSet) {
  ClusterConfig c;
  c.cluster = Spec({{"worker", {"w:1"}}});
  c.task = TaskId{"worker", 0};
  c.rpc_layer = "grpc";
  EXPECT_EQ(ToTfConfigJson(c),
            R"({"cluster":{"worker":["w:1"]},"task":{"type":"worker","index":0},"rpc_layer":"grpc"})");
  c.environment = "cloud";
  EXPECT_EQ(
      ToTfConfigJson(c),
      R"({"cluster":{"worker":["w:1"]},"task":{"type":"worker","index":0},"environment":"cloud","rpc_layer":"grpc"})");
}

TEST(ToTfConfigJson, SparseAndEmptyJobs) {
  ClusterConfig c;
  ASSERT_TRUE(c.cluster.AddTask("worker", 3, "w3:1").ok());
  ASSERT_TRUE(c.cluster.AddTask("worker", 1, "w1:1").ok());
  ASSERT_TRUE(c.cluster.AddJob("ps", {}).ok());
  EXPECT_EQ(ToTfConfigJson(c), R"({"cluster":{"ps":[],"worker":{"1":"w1:1","3":"w3:1"}}})");
}

TEST(ToTfConfigJson, EscapesStrings) {
  ClusterConfig c;
  c.cluster = Spec({{"worker", {"w:1"}}});
  c.environment = "say \"hi\"\n";
  EXPECT_EQ(ToTfConfigJson(c), R"({"cluster":{"worker":["w:1"]},"environment":"say \"hi\"\n"})");
}

// --- Round trips ---------------------------------------------------------------

TEST(RoundTrip, ParseOfSerialisedEqualsOriginal) {
  std::vector<ClusterConfig> configs;
  configs.push_back(OperatorConfig());

  ClusterConfig sparse;
  ASSERT_TRUE(sparse.cluster.AddTask("worker", 2, "[::1]:2224").ok());
  ASSERT_TRUE(sparse.cluster.AddJob("ps", {"10.0.0.1:2222"}).ok());
  sparse.task = TaskId{"worker", 2};
  sparse.rpc_layer = "grpc+verbs";
  configs.push_back(sparse);

  ClusterConfig evaluator;
  evaluator.cluster = Spec({{"chief", {"c:1"}}, {"worker", {"w:1"}}, {"ps", {"p:1"}}});
  evaluator.task = TaskId{"evaluator", 0};
  configs.push_back(evaluator);

  for (const ClusterConfig& c : configs) {
    SCOPED_TRACE(ToTfConfigJson(c));
    StatusOr<ClusterConfig> back = ParseTfConfig(ToTfConfigJson(c));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, c);
  }

  ClusterConfig no_task;
  no_task.cluster = Spec({{"worker", {"w:1"}}});
  StatusOr<ClusterConfig> back = ParseTfConfig(ToTfConfigJson(no_task), TaskRequirement::kOptional);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, no_task);
}

TEST(RoundTrip, CanonicalTextSurvivesParseAndSerialise) {
  for (
      std::string text : {
          std::string(
              R"({"cluster":{"chief":["c:1"],"ps":["p:1"],"worker":["w0:1","w1:1"]},"task":{"type":"ps","index":0},"environment":"cloud"})"),
          std::string(R"({"cluster":{"worker":{"1":"w1:1"}},"task":{"type":"worker","index":1},"rpc_layer":"grpc"})"),
      }) {
    EXPECT_EQ(ToTfConfigJson(MustParse(text)), text);
  }
}

// --- ClusterSpec -----------------------------------------------------------------

TEST(ClusterSpec, Queries) {
  ClusterSpec s = Spec({{"worker", {"w0:1", "w1:1"}}, {"ps", {"p0:1"}}});
  EXPECT_TRUE(s.HasJob("worker"));
  EXPECT_FALSE(s.HasJob("chief"));
  EXPECT_EQ(s.NumTasks("worker"), 2);
  EXPECT_EQ(s.NumTasks("chief"), 0);
  EXPECT_THAT(s.TaskIndices("worker"), ElementsAre(0, 1));
  EXPECT_TRUE(s.TaskIndices("chief").empty());
  EXPECT_EQ(s.Address("worker", 1).value(), "w1:1");
  EXPECT_EQ(s.Address("worker", 2).status(), Status(Code::kNotFound, "job \"worker\" has no task 2"));
  EXPECT_EQ(s.Address("chief", 0).status(), Status(Code::kNotFound, "no job \"chief\" in the cluster"));
}

TEST(ClusterSpec, BuildErrors) {
  ClusterSpec s;
  ASSERT_TRUE(s.AddTask("worker", 0, "w:1").ok());
  EXPECT_EQ(s.AddTask("worker", 0, "x:1"), Status(Code::kAlreadyExists, "job \"worker\" task 0 is already defined"));
  EXPECT_EQ(s.AddTask("worker", -1, "x:1"),
            Status(Code::kInvalidArgument, "job \"worker\" task -1: index must be non-negative"));
  EXPECT_EQ(s.AddJob("worker", {"x:1"}), Status(Code::kAlreadyExists, "job \"worker\" is already defined"));
  EXPECT_EQ(s.AddJob("ps", {"p:1", "p"}),
            Status(Code::kInvalidArgument, "job \"ps\" task 1: invalid address \"p\": expected host:port"));
  EXPECT_FALSE(s.HasJob("ps"));  // a failed AddJob leaves nothing behind
  EXPECT_EQ(s.AddJob("", {}), Status(Code::kInvalidArgument,
                                     "invalid job name \"\"; expected a letter followed by letters, digits or '_'"));
  EXPECT_EQ(s.AddTask("1st", 0, "a:1").code(), Code::kInvalidArgument);
}

TEST(ClusterSpec, WithoutEvaluatorIsTheTrainingCluster) {
  ClusterSpec full = OperatorConfig().cluster;
  ClusterSpec training = full.WithoutJob("evaluator");
  EXPECT_FALSE(training.HasJob("evaluator"));
  EXPECT_THAT(training.JobNames(), ElementsAre("chief", "ps", "worker"));
  EXPECT_EQ(training.NumTasks("worker"), 2);
  EXPECT_TRUE(full.HasJob("evaluator"));  // the original is untouched
  EXPECT_EQ(training.WithoutJob("evaluator"), training);
  EXPECT_NE(training, full);
}

TEST(ValidateAddress, Accepts) {
  for (const char* a : {"localhost:1", "10.0.0.1:65535", "j-chief-0.ns.svc:2222", "a_b:8888", "[::1]:2222",
                        "[fe80::1%eth0]:2222", "[::ffff:10.0.0.1]:80", "h:02222"}) {
    EXPECT_TRUE(ValidateAddress(a).ok()) << a << ": " << ValidateAddress(a);
  }
}

TEST(ValidateAddress, Rejects) {
  auto msg = [](const std::string& a) { return ValidateAddress(a).message(); };
  EXPECT_EQ(msg(""), "invalid address \"\": expected host:port");
  EXPECT_EQ(msg("h:"), "invalid address \"h:\": port \"\" is not a number from 1 to 65535");
  EXPECT_EQ(msg("h:-1"), "invalid address \"h:-1\": port \"-1\" is not a number from 1 to 65535");
  EXPECT_EQ(msg("h:100000"), "invalid address \"h:100000\": port \"100000\" is not a number from 1 to 65535");
  EXPECT_EQ(msg("[::1]"), "invalid address \"[::1]\": expected [ipv6]:port");
  EXPECT_EQ(msg("[::1]2222"), "invalid address \"[::1]2222\": expected [ipv6]:port");
  EXPECT_EQ(msg("[::1:2222"), "invalid address \"[::1:2222\": unterminated '[' in IPv6 host");
  EXPECT_EQ(msg("[]:1"), "invalid address \"[]:1\": empty host");
  EXPECT_EQ(msg("[host]:1"), "invalid address \"[host]:1\": bracketed host is not an IPv6 literal");
  EXPECT_EQ(msg("[::g]:1"), "invalid address \"[::g]:1\": IPv6 host contains invalid character \"g\"");
  EXPECT_EQ(msg("[::1%]:1"), "invalid address \"[::1%]:1\": invalid IPv6 zone \"\"");
  EXPECT_EQ(msg("grpc://h:1"), "invalid address \"grpc://h:1\": expected host:port without a URL scheme");
  EXPECT_EQ(msg("h:1:2"), "invalid address \"h:1:2\": an IPv6 host must be bracketed, as in [::1]:2222");
  EXPECT_EQ(msg("h/x:1"), "invalid address \"h/x:1\": host contains invalid character \"/\"");
  EXPECT_EQ(ValidateAddress("h").code(), Code::kInvalidArgument);
}

TEST(TaskTypes, ChiefAndKnown) {
  EXPECT_TRUE(IsChief("chief"));
  EXPECT_TRUE(IsChief("master"));
  EXPECT_FALSE(IsChief("worker"));
  EXPECT_FALSE(IsChief("Chief"));
  for (const char* t : {"chief", "master", "ps", "worker", "evaluator"}) EXPECT_TRUE(IsKnownTaskType(t)) << t;
  EXPECT_FALSE(IsKnownTaskType("trainer"));
  EXPECT_FALSE(IsKnownTaskType(""));
}

// --- Environment -----------------------------------------------------------------

TEST(FromEnv, UnsetOrEmptyIsNotFound) {
  EXPECT_EQ(FromEnv(FixedEnv({})).status(), Status(Code::kNotFound, "TF_CONFIG is not set"));
  EXPECT_EQ(FromEnv(FixedEnv({{"TF_CONFIG", ""}})).status(), Status(Code::kNotFound, "TF_CONFIG is not set"));
  EXPECT_EQ(FromEnv(FixedEnv({{"TF_CONFIG", "  \n"}})).status(), Status(Code::kNotFound, "TF_CONFIG is not set"));
}

TEST(FromEnv, ParsesTheVariable) {
  StatusOr<ClusterConfig> c = FromEnv(FixedEnv({{"TF_CONFIG", ToTfConfigJson(OperatorConfig())}}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c, OperatorConfig());
}

TEST(FromEnv, ReportsParseErrorsAndHonoursTheRequirement) {
  Env env = FixedEnv({{"TF_CONFIG", R"({"cluster": {"worker": ["w:1"]}})"}});
  EXPECT_EQ(FromEnv(env).status(), Status(Code::kInvalidArgument, "TF_CONFIG: \"task\" is missing"));
  EXPECT_TRUE(FromEnv(env, TaskRequirement::kOptional).ok());
}

}  // namespace
}  // namespace tfjob::cluster

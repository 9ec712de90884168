// The real kubectl against the API server double: what an end-to-end test
// (or a human) does with it. The official kubectl scripts/setup.sh installs
// (.tools/bin), else one on PATH; skipped when there is neither.
//
// kubectl needs no special flags: the double serves discovery, OpenAPI v3
// (so client-side validation is not needed) and Tables. The tests pass
// --cache-dir so a stale discovery cache from another run on the same
// ephemeral port can never be used.
#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/apiserver/apiserver_double.h"
#include "tests/support/envtest.h"
#include "tests/support/subprocess.h"

namespace tfjob::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

// setup.sh's kubectl, else the first on PATH; "" when there is none.
std::string FindKubectl() {
  if (std::string tool = ToolPath("kubectl"); !tool.empty()) return tool;
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (!dir.empty() && access((dir + "/kubectl").c_str(), X_OK) == 0) return dir + "/kubectl";
  }
  return "";
}

class KubectlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    kubectl_ = FindKubectl();
    if (kubectl_.empty()) GTEST_SKIP() << "no kubectl in .tools/bin (bash scripts/setup.sh) or on PATH";
    dir_ = MakeTempDir("kubectl");
  }

  void StartServer(ApiServerDouble::Options options) {
    auto s = ApiServerDouble::Start(options);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(s).value();
    ASSERT_TRUE(server_->WriteKubeconfig(dir_ + "/kubeconfig").ok());
  }

  RunResult Kubectl(std::vector<std::string> args) {
    std::vector<std::string> argv = {
        kubectl_, "--kubeconfig", dir_ + "/kubeconfig", "--cache-dir", dir_ + "/cache", "--request-timeout", "30s"};
    argv.insert(argv.end(), args.begin(), args.end());
    return tfjob::testing::Run(argv, {{"HOME", dir_}});
  }

  std::string Testdata(const std::string& name) const {
    return SourceDir() + "/tests/support/apiserver/tests/testdata/" + name;
  }

  std::string dir_, kubectl_;
  std::unique_ptr<ApiServerDouble> server_;
};

TEST_F(KubectlTest, CreateAndGetTfJobs) {
  StartServer({});
  RunResult created = Kubectl({"create", "-f", Testdata("tfjob.yaml")});
  ASSERT_EQ(created.exit_code, 0) << created.out << created.err;
  EXPECT_THAT(created.out, HasSubstr("tfjob.kubeflow.org/mnist created"));

  auto job = server_->Get("tfjobs", "default", "mnist");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ((*job)["spec"]["tfReplicaSpecs"]["Worker"]["replicas"], 2);
  EXPECT_EQ((*job)["metadata"]["labels"]["app"], "mnist");

  // What the operator would write.
  ASSERT_TRUE(
      server_
          ->MergePatch("tfjobs", "default", "mnist",
                       {{"status",
                         {{"conditions",
                           {{{"type", "Created"}, {"status", "True"}}, {{"type", "Running"}, {"status", "True"}}}}}}},
                       true)
          .ok());
  RunResult table = Kubectl({"get", "tfjobs"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, ::testing::ContainsRegex("NAME +STATE +AGE"));
  EXPECT_THAT(table.out, ::testing::ContainsRegex("mnist +Running +[0-9]+[smhd]"));

  RunResult as_json = Kubectl({"get", "tfjob", "mnist", "-o", "json"});
  ASSERT_EQ(as_json.exit_code, 0) << as_json.err;
  json parsed = json::parse(as_json.out, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded()) << as_json.out;
  EXPECT_EQ(parsed["metadata"]["uid"], (*job)["metadata"]["uid"]);

  RunResult again = Kubectl({"create", "-f", Testdata("tfjob.yaml")});
  EXPECT_NE(again.exit_code, 0);
  EXPECT_THAT(again.err, HasSubstr("AlreadyExists"));

  RunResult none = Kubectl({"get", "pods"});
  EXPECT_EQ(none.exit_code, 0) << none.err;
  EXPECT_THAT(none.err, HasSubstr("No resources found"));

  RunResult deleted = Kubectl({"delete", "tfjob", "mnist", "--wait=true", "--timeout=30s"});
  ASSERT_EQ(deleted.exit_code, 0) << deleted.err;
  EXPECT_EQ(server_->Get("tfjobs", "default", "mnist").status().code(), Code::kNotFound);
}

TEST_F(KubectlTest, ApplyTheProjectCrdThenAJob) {
  ApiServerDouble::Options o;
  o.register_tfjob_crd = false;
  StartServer(o);
  RunResult unknown = Kubectl({"get", "tfjobs"});
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_THAT(unknown.err, HasSubstr("doesn't have a resource type"));

  RunResult crd = Kubectl({"apply", "-f", SourceDir() + "/crds/kubeflow.org_tfjobs.yaml"});
  ASSERT_EQ(crd.exit_code, 0) << crd.out << crd.err;
  RunResult established = Kubectl({"wait", "--for=condition=established", "crd/tfjobs.kubeflow.org", "--timeout=30s"});
  ASSERT_EQ(established.exit_code, 0) << established.err;

  RunResult applied = Kubectl({"apply", "-f", Testdata("tfjob.yaml")});
  ASSERT_EQ(applied.exit_code, 0) << applied.out << applied.err;
  ASSERT_TRUE(server_->Get("tfjobs", "default", "mnist").ok());

  // Re-apply with a change: a merge patch, a new generation.
  RunResult scaled = Kubectl(
      {"patch", "tfjob", "mnist", "--type=merge", "-p", R"({"spec":{"tfReplicaSpecs":{"Worker":{"replicas":4}}}})"});
  ASSERT_EQ(scaled.exit_code, 0) << scaled.err;
  auto job = server_->Get("tfjobs", "default", "mnist");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ((*job)["spec"]["tfReplicaSpecs"]["Worker"]["replicas"], 4);
  EXPECT_EQ((*job)["metadata"]["generation"], 2);

  RunResult selected = Kubectl({"get", "tfjobs", "-l", "app=mnist", "-o", "name"});
  ASSERT_EQ(selected.exit_code, 0) << selected.err;
  EXPECT_EQ(selected.out, "tfjob.kubeflow.org/mnist\n");
}

}  // namespace
}  // namespace tfjob::testing

// The contract's values as training-operator v1.9.0 has them
// (pkg/apis/kubeflow.org/v1 common types and pkg/util/train): a change here
// breaks every tool that selects Kubeflow's pods or reads its exit codes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "contract/env.h"
#include "contract/exit_codes.h"
#include "contract/labels.h"

namespace tfjob::contract {
namespace {

TEST(LabelsTest, AreKubeflowsKeysAndValues) {
  EXPECT_EQ(kJobNameLabel, "training.kubeflow.org/job-name");
  EXPECT_EQ(kReplicaTypeLabel, "training.kubeflow.org/replica-type");
  EXPECT_EQ(kReplicaIndexLabel, "training.kubeflow.org/replica-index");
  EXPECT_EQ(kOperatorNameLabel, "training.kubeflow.org/operator-name");
  EXPECT_EQ(kJobRoleLabel, "training.kubeflow.org/job-role");
  EXPECT_EQ(kOperatorName, "tfjob-controller");
  EXPECT_EQ(kJobRoleMaster, "master");
}

TEST(LabelsTest, SelectorIsJobNameThenReplicaType) {
  EXPECT_EQ(Selector("mnist", "worker"),
            "training.kubeflow.org/job-name=mnist,training.kubeflow.org/replica-type=worker");
  EXPECT_EQ(Selector("j", "ps"), "training.kubeflow.org/job-name=j,training.kubeflow.org/replica-type=ps");
}

TEST(ExitCodesTest, AreTheRuntimesAndKubeflowsRetryRule) {
  EXPECT_EQ(kExitSuccess, 0);
  EXPECT_EQ(kExitFailure, 1);
  EXPECT_EQ(kExitBadInput, 2);
  EXPECT_EQ(kExitStopped, 143);
  // Codes below 128 are permanent failures, 128 and above retryable
  // (IsRetryableExitCode: exitCode >= 128), 0xbeef included.
  EXPECT_FALSE(IsRetryableExitCode(kExitFailure));
  EXPECT_FALSE(IsRetryableExitCode(kExitBadInput));
  EXPECT_FALSE(IsRetryableExitCode(127));
  EXPECT_TRUE(IsRetryableExitCode(128));
  EXPECT_TRUE(IsRetryableExitCode(kExitStopped));
  EXPECT_TRUE(IsRetryableExitCode(137));
  EXPECT_TRUE(IsRetryableExitCode(0xbeef));
}

std::set<std::string> TableNames() {
  std::set<std::string> names;
  for (const EnvVar& v : kRuntimeEnv) {
    EXPECT_TRUE(names.insert(std::string(v.name)).second) << v.name << " is listed twice";
    EXPECT_FALSE(v.meaning.empty()) << v.name;
  }
  return names;
}

std::string ReadAll(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every TFJOB_* name the runtime's sources quote (outside tests) is a
// variable the table explains: a new variable cannot be added unlisted.
TEST(EnvTest, TheTableListsEveryVariableTheRuntimeNames) {
  const std::set<std::string> table = TableNames();
  const std::filesystem::path root = TFJOB_SOURCE_ROOT;
  const std::regex quoted("\"(TFJOB_[A-Z0-9_]+)");
  std::set<std::string> seen;
  for (const char* dir : {"services", "common", "kube", "contract"}) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(root / dir)) {
      const std::string path = e.path().string();
      if (!e.is_regular_file() || path.find("/tests/") != std::string::npos) continue;
      if (e.path().extension() != ".cc" && e.path().extension() != ".h") continue;
      const std::string text = ReadAll(e.path());
      for (std::sregex_iterator it(text.begin(), text.end(), quoted), end; it != end; ++it) {
        const std::string name = (*it)[1];
        seen.insert(name);
        EXPECT_TRUE(table.contains(name)) << name << " (" << path << ") is not in contract/env.h's kRuntimeEnv";
      }
    }
  }
  EXPECT_GE(seen.size(), 15u) << "the scan found too few names: is TFJOB_SOURCE_ROOT right?";
}

// docs/design.md gives users the same list.
TEST(EnvTest, TheDesignDocumentNamesEveryVariable) {
  const std::string doc = ReadAll(std::filesystem::path(TFJOB_SOURCE_ROOT) / "docs" / "design.md");
  ASSERT_FALSE(doc.empty());
  for (const std::string& name : TableNames()) {
    EXPECT_NE(doc.find("`" + name + "`"), std::string::npos) << name << " is not in docs/design.md";
  }
}

}  // namespace
}  // namespace tfjob::contract

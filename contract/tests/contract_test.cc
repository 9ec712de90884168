// The contract's values as training-operator v1.9.0 has them
// (pkg/apis/kubeflow.org/v1 common types and pkg/util/train): a change here
// breaks every tool that selects Kubeflow's pods or reads its exit codes.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tfjob::contract

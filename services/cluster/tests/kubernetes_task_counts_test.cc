// TfJobTaskCounts: the task counts a TFJob's replica specs give, without an
// API server (the resolver's tests against the real one are in
// kubernetes_test.cc, cluster_envtest_test).
#include <map>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "services/cluster/kubernetes.h"

namespace tfjob::cluster::kubernetes {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

TEST(TfJobTaskCountsTest, KubeflowKeysLowerCasedReplicasDefaultToOneEvaluatorLeftOut) {
  const json job = {{"metadata", {{"name", "j"}}},
                    {"spec",
                     {{"tfReplicaSpecs",
                       {{"Chief", json::object()},
                        {"PS", {{"replicas", 2}}},
                        {"Worker", {{"replicas", 3}}},
                        {"Evaluator", {{"replicas", 1}}}}}}}};
  auto counts = TfJobTaskCounts(job);
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_EQ(*counts, (std::map<std::string, int64_t>{{"chief", 1}, {"ps", 2}, {"worker", 3}}));
  EXPECT_EQ(TfJobTaskCounts({{"metadata", {{"name", "j"}}}}).status().code(), Code::kInvalidArgument);
  auto bad = TfJobTaskCounts(
      {{"metadata", {{"name", "j"}}}, {"spec", {{"tfReplicaSpecs", {{"Worker", {{"replicas", "two"}}}}}}}});
  EXPECT_THAT(bad.status().message(), HasSubstr("spec.tfReplicaSpecs[Worker].replicas is not a non-negative integer"));
}

}  // namespace
}  // namespace tfjob::cluster::kubernetes

// Helpers the cluster tests share (one definition, so a unity build that
// puts the test files into one translation unit sees each once).
#pragma once

#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "services/cluster/cluster.h"

namespace tfjob::cluster::testing_util {

// A cluster spec the test states literally; a spec FromLists refuses fails
// the test.
inline ClusterSpec Spec(const std::map<std::string, std::vector<std::string>>& jobs) {
  StatusOr<ClusterSpec> spec = ClusterSpec::FromLists(jobs);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : ClusterSpec();
}

// An environment with one variable set, or removed.
inline std::map<std::string, std::string> With(std::map<std::string, std::string> vars, const std::string& name,
                                               const std::string& value) {
  vars[name] = value;
  return vars;
}

inline std::map<std::string, std::string> Without(std::map<std::string, std::string> vars, const std::string& name) {
  vars.erase(name);
  return vars;
}

}  // namespace tfjob::cluster::testing_util

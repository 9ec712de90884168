// What the chart tests share: the official Helm (scripts/setup.sh puts helm
// v3.17 in .tools/bin) run with a private home, `helm template` of the chart
// parsed document by document, and the operator container's args.
// chart_test (lint, rendering, the Deployment) and chart_rbac_test (the
// rendered RBAC against the requests the operator makes to a real API
// server) link it. Failure: helm's errors and unparsable documents are
// test failures (gtest EXPECTs) in the calling test.
#pragma once

#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/subprocess.h"

namespace tfjob::charts {

inline constexpr const char* kReleaseNamespace = "tfjob-system";

std::string ChartDir();

struct Doc {
  std::string source;  // "# Source:" template
  nlohmann::json obj;
};

struct Rendered {
  std::vector<Doc> docs;
  std::vector<const Doc*> Kind(const std::string& kind) const;
  // The one document of `kind`; throws when there are none or several.
  const nlohmann::json& One(const std::string& kind) const;
};

// The official helm, or "" (HelmTest fails the test then).
const std::string& Helm();

// helm with its cache, config and data in a directory of this process, so
// that neither the user's repositories nor plugins change what it does.
::tfjob::testing::RunResult RunHelm(const std::vector<std::string>& args);

// "--set", s for each s.
std::vector<std::string> SetFlags(const std::vector<std::string>& sets);

// `helm template tfjob <chart> --namespace <ns> --set ... <extra>`.
::tfjob::testing::RunResult RunRender(const std::vector<std::string>& sets, const std::vector<std::string>& extra = {},
                                      const std::string& release_namespace = kReleaseNamespace);

// Renders and parses every document; failures are test failures.
Rendered Render(const std::vector<std::string>& sets, const std::vector<std::string>& extra = {},
                const std::string& release_namespace = kReleaseNamespace);

// The operator container's args.
std::vector<std::string> Args(const nlohmann::json& dep);

// Every test here needs helm: without it, one line says how to get it.
class HelmTest : public ::testing::Test {
 protected:
  void SetUp() override;
};

}  // namespace tfjob::charts

// The runtime's contract for bad input (docs/manual.md, "Exit codes"), as
// its test files check it: exit code 2 and exactly one line on stderr,
// "tfjob-runtime: error: ...", containing what the test expects. Found by
// argument-dependent lookup from a RunResult.
#pragma once

#include <algorithm>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/subprocess.h"

namespace tfjob::testing {

inline void ExpectBadInput(const RunResult& r, const std::string& want) {
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, ::testing::StartsWith("tfjob-runtime: error: "));
  EXPECT_THAT(r.err, ::testing::HasSubstr(want));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

}  // namespace tfjob::testing

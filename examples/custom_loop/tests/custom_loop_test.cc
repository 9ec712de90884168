// The custom-training-loop binary, run as one process per task.
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/subprocess.h"

namespace tfjob {
namespace {

using ::testing::HasSubstr;
namespace t = ::tfjob::testing;

// The binary is the runtime's entry point plus its own program: --help lists
// the program, --version names this binary.
TEST(CustomLoopTest, HelpListsTheProgramAndVersionNamesTheBinary) {
  auto h = t::Run({t::BinDir() + "/custom_training_loop", "--help"});
  EXPECT_EQ(h.exit_code, 0) << h.err;
  EXPECT_THAT(h.out, HasSubstr("custom_loop"));
  auto v = t::Run({t::BinDir() + "/custom_training_loop", "--version"});
  EXPECT_EQ(v.exit_code, 0) << v.err;
  EXPECT_THAT(v.out, ::testing::MatchesRegex("custom_training_loop [0-9]+\\.[0-9]+\\.[0-9]+\n"));
}

TEST(CustomLoopTest, ShardedEmbeddingTrainsToFullAccuracy) {
  const std::string summary = t::MakeTempDir("custom-loop") + "/out.json";
  auto r = t::Run({t::BinDir() + "/custom_training_loop", "local", "--ps", "2", "--workers", "2", "--", "custom_loop",
                   "--epochs", "6", "--summary-json", summary});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("embedding shard embedding/embeddings/part_0 on ps 0: shape (5, 20)"));
  EXPECT_THAT(r.out, HasSubstr("embedding shard embedding/embeddings/part_1 on ps 1: shape (4, 20)"));
  EXPECT_THAT(r.out, HasSubstr("Finished epoch 5, accuracy is "));
  std::ifstream in(summary);
  auto s = nlohmann::json::parse(in);
  EXPECT_EQ(s["accuracy"].get<double>(), 1.0);
  EXPECT_EQ(s["embedding_shards"][0]["shape"], nlohmann::json({5, 20}));
  EXPECT_EQ(s["embedding_shards"][1]["ps"].get<int>(), 1);
}

TEST(CustomLoopTest, BuiltinProgramsAreStillServed) {
  const std::string summary = t::MakeTempDir("custom-loop-counter") + "/out.json";
  auto r = t::Run({t::BinDir() + "/custom_training_loop", "local", "--ps", "1", "--workers", "2", "--", "counter",
                   "--increments", "2,3", "--summary-json", summary});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::ifstream in(summary);
  EXPECT_EQ(nlohmann::json::parse(in)["value"].get<double>(), 5.0);
}

}  // namespace
}  // namespace tfjob

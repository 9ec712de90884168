// Bad input that used to get through: tasks sharing an address, a checkpoint
// directory that cannot be written, every checkpoint damaged, a huge value
// echoed whole. Each is one line and exit code 2, before any work.
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/subprocess.h"
#include "services/runtime/tests/bad_input.h"

namespace tfjob {
namespace {

namespace fs = std::filesystem;
namespace t = ::tfjob::testing;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// A small job that trains in a second: synthetic data, a few steps.
std::string SmallJob(const std::string& dir) {
  std::ifstream in(t::SourceDir() + "/tests/support/data/synthetic-small.json");
  nlohmann::json job = nlohmann::json::parse(in);
  job["epochs"] = 2;
  const std::string path = dir + "/job.json";
  std::ofstream(path) << job.dump();
  return path;
}

TEST(BadInputTest, TasksSharingAnAddressAreRefused) {
  for (const std::string type : {"chief", "ps", "worker"}) {
    auto r = t::Run(
        {t::RuntimeBinary(), "counter"},
        {{"TF_CONFIG", R"({"cluster":{"chief":["127.0.0.1:4701"],"ps":["127.0.0.1:4701"],"worker":["127.0.0.1:4701"]},)"
                       R"("task":{"type":")" +
                           type + R"(","index":0}})"}});
    ExpectBadInput(r, "TF_CONFIG: chief:0 and ps:0 have the same address \"127.0.0.1:4701\"");
  }
}

TEST(BadInputTest, AHugeAddressIsEchoedCut) {
  const std::string huge(120 * 1024, 'h');
  auto r = t::Run({t::RuntimeBinary(), "counter"},
                  {{"TF_CONFIG", R"({"cluster":{"worker":[")" + huge + R"("]},"task":{"type":"worker","index":0}})"}});
  ExpectBadInput(r, "... (122880 bytes)");
  EXPECT_LT(r.err.size(), 600u);
}

// Found before training, not after it: no epoch starts. (Root may write
// anywhere, so the directory is one that cannot exist: under a file.)
TEST(BadInputTest, AnUnwritableCheckpointDirectoryIsRefusedBeforeTraining) {
  const std::string dir = t::MakeTempDir("unwritable");
  std::ofstream(dir + "/file") << "x";
  const std::string ckpt = dir + "/file/ckpt";
  auto single = t::Run({t::RuntimeBinary(), "fit", "--config", SmallJob(dir), "--checkpoint-dir", ckpt});
  ExpectBadInput(single, "--checkpoint-dir " + ckpt + " cannot be created");
  EXPECT_THAT(single.out, Not(HasSubstr("Epoch 1/")));
  // A parameter server, which writes its own files there, says so too.
  auto ps = t::Run(
      {t::RuntimeBinary(), "fit", "--config", SmallJob(dir), "--checkpoint-dir", ckpt},
      {{"TF_CONFIG", R"({"cluster":{"chief":["127.0.0.1:4702"],"ps":["127.0.0.1:4703"],"worker":["127.0.0.1:4704"]},)"
                     R"("task":{"type":"ps","index":0}})"}});
  ExpectBadInput(ps, "--checkpoint-dir " + ckpt + " cannot be created");
}

// Every checkpoint damaged: an error naming them, not a silent start from
// step 0; --ignore-damaged-checkpoints is the way to start over.
TEST(BadInputTest, EveryCheckpointDamagedIsAnErrorUnlessToldToStartFresh) {
  const std::string dir = t::MakeTempDir("damaged");
  const std::string ckpt = dir + "/ckpt";
  const std::string job = SmallJob(dir);
  auto first =
      t::Run({t::RuntimeBinary(), "fit", "--config", job, "--checkpoint-dir", ckpt, "--checkpoint-every-steps", "10"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  int damaged = 0;
  for (const auto& e : fs::directory_iterator(ckpt)) {
    if (!fs::exists(e.path() / "meta.json")) continue;
    const fs::path f = e.path() / "variables.ckpt";
    ASSERT_TRUE(fs::exists(f)) << f;
    std::string bytes;
    {
      std::ifstream in(f, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    bytes[bytes.size() / 2] ^= 0x20;
    std::ofstream(f, std::ios::binary | std::ios::trunc) << bytes;
    ++damaged;
  }
  ASSERT_GT(damaged, 0);
  auto refused = t::Run({t::RuntimeBinary(), "fit", "--config", job, "--checkpoint-dir", ckpt});
  ExpectBadInput(refused, "every checkpoint in " + ckpt + " is damaged: ckpt-");
  EXPECT_THAT(refused.err, HasSubstr("--ignore-damaged-checkpoints"));
  EXPECT_THAT(refused.out, Not(HasSubstr("Epoch 1/")));
  auto fresh =
      t::Run({t::RuntimeBinary(), "fit", "--config", job, "--checkpoint-dir", ckpt, "--ignore-damaged-checkpoints"});
  EXPECT_EQ(fresh.exit_code, 0) << fresh.err;
  EXPECT_THAT(fresh.out, HasSubstr("Epoch 1/2"));
}

}  // namespace
}  // namespace tfjob

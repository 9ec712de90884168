// fit --mixed-precision through the real binary: the MNIST MLP and CNN
// reach their float32 accuracy bars in bfloat16 (and the MLP in float16's
// emulated numerics with loss scaling), checkpoints cross between
// precisions both ways, and what this machine cannot do is one line, exit
// code 2.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "services/tensor/precision.h"
#include "tests/support/subprocess.h"

namespace tfjob {
namespace {

using ::testing::HasSubstr;
namespace t = ::tfjob::testing;

t::RunResult MixedFit(const std::string& example, const std::vector<std::string>& extra,
                      const std::map<std::string, std::string>& env = {}) {
  std::vector<std::string> argv{t::RuntimeBinary(), "fit",        "--config", t::SourceDir() + "/examples/" + example,
                                "--data-dir",       t::MnistDir()};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return t::Run(argv, env);
}

nlohmann::json Summary(const std::string& path) { return nlohmann::json::parse(t::ReadText(path)); }

void ExpectOneLine(const t::RunResult& r, const std::string& part) {
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr(part));
}

// Whether bfloat16 has its path here (AVX512-BF16 or AMX, and oneDNN);
// where not, the flag must say so in one line.
bool BfloatHere(const std::string& example) {
  if (BfloatPath().ok()) return true;
  ExpectOneLine(MixedFit(example, {"--mixed-precision", "bfloat16"}), "bfloat16 ");
  return false;
}

TEST(MixedPrecisionFitTest, MlpAndCnnReachTheirBarsInBfloat16) {
  if (!BfloatHere("mnist/mlp.json")) GTEST_SKIP() << BfloatPath().message();
  const std::string dir = t::MakeTempDir("mixed-bf16");
  auto mlp = MixedFit("mnist/mlp.json", {"--mixed-precision", "bfloat16", "--summary-json", dir + "/mlp.json"});
  ASSERT_EQ(mlp.exit_code, 0) << mlp.err;
  EXPECT_GE(Summary(dir + "/mlp.json")["eval_accuracy"].get<double>(), 0.925);  // FitAcceptanceTest's bar
  EXPECT_FALSE(Summary(dir + "/mlp.json").contains("loss_scale"));              // bfloat16 needs none
  auto cnn = MixedFit("mnist/cnn.json", {"--mixed-precision", "bfloat16", "--summary-json", dir + "/cnn.json"});
  ASSERT_EQ(cnn.exit_code, 0) << cnn.err;
  EXPECT_GE(Summary(dir + "/cnn.json")["eval_accuracy"].get<double>(), 0.97);  // docs/gpu.md's CNN bar
}

TEST(MixedPrecisionFitTest, Float16IsRefusedInOneLineUnlessEmulated) {
  ExpectOneLine(MixedFit("mnist/mlp.json", {"--mixed-precision", "float16"}), "float16 needs a float16 matrix path");
  ExpectOneLine(MixedFit("mnist/mlp.json", {"--mixed-precision", "float8"}), "flag --mixed-precision: \"float8\"");
  const std::string dir = t::MakeTempDir("mixed-f16");
  auto r = MixedFit("mnist/mlp.json", {"--mixed-precision", "float16", "--summary-json", dir + "/s.json"},
                    {{"TFJOB_FLOAT16_EMULATION", "1"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json s = Summary(dir + "/s.json");
  EXPECT_GE(s["eval_accuracy"].get<double>(), 0.925) << s.dump();
  // Keras' dynamic loss scale was in use: from 2^15, halved on overflow,
  // doubled after 2000 good steps (625 steps here).
  ASSERT_TRUE(s.contains("loss_scale")) << s.dump();
  EXPECT_GE(s["loss_scale"].get<double>(), 1.0);
  EXPECT_LE(s["loss_scale"].get<double>(), 32768.0);
}

// Variables and optimizer state are float32 in every precision, so a
// checkpoint of either kind resumes in the other.
TEST(MixedPrecisionFitTest, CheckpointsCrossBetweenPrecisions) {
  if (!BfloatHere("mnist/mlp.json")) GTEST_SKIP() << BfloatPath().message();
  for (bool mixed_first : {true, false}) {
    SCOPED_TRACE(mixed_first ? "bfloat16, then float32" : "float32, then bfloat16");
    const std::string dir = t::MakeTempDir("mixed-ckpt");
    const std::vector<std::string> mixed{"--mixed-precision", "bfloat16"};
    std::vector<std::string> first{"--epochs", "2", "--checkpoint-dir", dir + "/ckpt"};
    std::vector<std::string> second{"--epochs",     "4", "--checkpoint-dir", dir + "/ckpt", "--summary-json",
                                    dir + "/s.json"};
    (mixed_first ? first : second).insert((mixed_first ? first : second).end(), mixed.begin(), mixed.end());
    auto a = MixedFit("mnist/mlp.json", first);
    ASSERT_EQ(a.exit_code, 0) << a.err;
    auto b = MixedFit("mnist/mlp.json", second);
    ASSERT_EQ(b.exit_code, 0) << b.err;
    EXPECT_THAT(b.out, HasSubstr("fit: restored checkpoint " + dir + "/ckpt/ckpt-250 at step 250"));
    EXPECT_THAT(b.out, HasSubstr("Epoch 3/4"));
    EXPECT_THAT(b.out, ::testing::Not(HasSubstr("Epoch 1/4")));
    const nlohmann::json s = Summary(dir + "/s.json");
    EXPECT_GE(s["eval_accuracy"].get<double>(), 0.925) << s.dump();
  }
}

}  // namespace
}  // namespace tfjob

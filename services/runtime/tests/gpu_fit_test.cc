// fit on GPUs, through the real binary: MNIST MLP on one GPU, mirrored over
// every visible GPU, two worker processes all-reducing with NCCL (two GPUs)
// and with the ring (any GPU count), each to the CPU's accuracy bar. Tests
// that need a GPU skip, saying why, where none is visible; what a process
// without a GPU answers to --device gpu is checked everywhere.
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/subprocess.h"
#ifdef TFJOB_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace tfjob {
namespace {

using ::testing::HasSubstr;
namespace t = ::tfjob::testing;

std::string Mlp() { return t::SourceDir() + "/examples/mnist/mlp.json"; }
std::string Cnn() { return t::SourceDir() + "/examples/mnist/cnn.json"; }

// What the CUDA backend counts (services/gpu: cudaGetDeviceCount, no driver
// or no device being 0), asked of the CUDA runtime directly.
int VisibleGpus() {
#ifdef TFJOB_HAVE_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    n = 0;
  }
  return n;
#else
  return 0;
#endif
}

class GpuFitTest : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef TFJOB_HAVE_CUDA
    GTEST_SKIP() << "this build has no CUDA support";
#endif
    gpus_ = VisibleGpus();
    if (gpus_ == 0) GTEST_SKIP() << "no CUDA device is visible on this machine";
  }
  int gpus_ = 0;
};

TEST_F(GpuFitTest, MnistMlpOnOneGpuReachesTheBar) {
  const std::string dir = t::MakeTempDir("gpu-mlp");
  auto r = t::Run({t::RuntimeBinary(), "fit", "--config", Mlp(), "--data-dir", t::MnistDir(), "--device", "gpu",
                   "--summary-json", dir + "/out.json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("fit: replica on "));
  const auto s = t::ReadJsonFile(dir + "/out.json");
  EXPECT_EQ(s["devices"], nlohmann::json::array({"cuda:0"})) << s.dump();
  EXPECT_GE(s["eval_accuracy"].get<double>(), 0.925) << s.dump();
  EXPECT_EQ(s["steps"].get<int>(), 5 * 125);
}

// The MNIST CNN (Conv2D, max pooling, Flatten, Dense) on one GPU, to the
// CPU's bar.
TEST_F(GpuFitTest, MnistCnnOnOneGpuReachesTheBar) {
  const std::string dir = t::MakeTempDir("gpu-cnn");
  auto r = t::Run({t::RuntimeBinary(), "fit", "--config", Cnn(), "--data-dir", t::MnistDir(), "--device", "gpu",
                   "--summary-json", dir + "/out.json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto s = t::ReadJsonFile(dir + "/out.json");
  EXPECT_EQ(s["devices"], nlohmann::json::array({"cuda:0"})) << s.dump();
  EXPECT_GE(s["eval_accuracy"].get<double>(), 0.97) << s.dump();
}

TEST_F(GpuFitTest, MirroredRunsOneReplicaPerGpu) {
  const std::string dir = t::MakeTempDir("gpu-mirrored");
  auto r = t::Run({t::RuntimeBinary(), "fit", "--config", Mlp(), "--data-dir", t::MnistDir(), "--device", "gpu",
                   "--strategy", "mirrored", "--summary-json", dir + "/out.json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto s = t::ReadJsonFile(dir + "/out.json");
  EXPECT_EQ(s["num_replicas_in_sync"].get<int>(), gpus_) << s.dump();
  EXPECT_EQ(s["devices"].size(), static_cast<size_t>(gpus_)) << s.dump();
  EXPECT_GE(s["eval_accuracy"].get<double>(), 0.925) << s.dump();
  // More replicas than GPUs cannot each have one.
  auto bad = t::Run({t::RuntimeBinary(), "fit", "--config", Mlp(), "--data-dir", t::MnistDir(), "--device", "gpu",
                     "--strategy", "mirrored", "--replicas", std::to_string(gpus_ + 1)});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_THAT(bad.err, HasSubstr("--device gpu runs one replica per GPU"));
}

TEST_F(GpuFitTest, TwoWorkerProcessesWithNccl) {
  // NCCL does not put two ranks on one GPU.
  if (gpus_ < 2) GTEST_SKIP() << "NCCL needs a GPU per worker process: " << gpus_ << " visible, 2 needed";
  const std::string dir = t::MakeTempDir("gpu-nccl");
  auto r = t::Run({t::RuntimeBinary(), "local", "--workers", "2", "--", "fit", "--config", Mlp(), "--data-dir",
                   t::MnistDir(), "--device", "gpu", "--communication", "nccl", "--summary-json", dir + "/out.json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto s = t::ReadJsonFile(dir + "/out.json");
  EXPECT_EQ(s["communication"], "nccl") << s.dump();
  EXPECT_EQ(s["num_replicas_in_sync"].get<int>(), 2);
  EXPECT_GE(s["eval_accuracy"].get<double>(), 0.925) << s.dump();
}

TEST_F(GpuFitTest, TwoWorkerProcessesSharingAGpuWithTheRing) {
  const std::string dir = t::MakeTempDir("gpu-ring");
  auto r = t::Run({t::RuntimeBinary(), "local", "--workers", "2", "--", "fit", "--config", Mlp(), "--data-dir",
                   t::MnistDir(), "--device", "gpu", "--communication", "ring", "--summary-json", dir + "/out.json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto s = t::ReadJsonFile(dir + "/out.json");
  EXPECT_EQ(s["communication"], "ring") << s.dump();
  EXPECT_GE(s["eval_accuracy"].get<double>(), 0.925) << s.dump();
}

TEST_F(GpuFitTest, ParameterServerWorkersComputeOnTheGpu) {
  const std::string dir = t::MakeTempDir("gpu-ps");
  auto r = t::Run({t::RuntimeBinary(), "local", "--ps", "1", "--workers", "2", "--", "fit", "--config", Mlp(),
                   "--data-dir", t::MnistDir(), "--device", "gpu", "--summary-json", dir + "/out.json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto s = t::ReadJsonFile(dir + "/out.json");
  EXPECT_EQ(s["strategy"], "parameter_server");
  EXPECT_GE(s["eval_accuracy"].get<double>(), 0.92) << s.dump();
}

// Mixed precision on the GPU (services/gpu: cublasGemmEx on tensor cores,
// float32 accumulation): the MLP to the float32 run's bar in bfloat16
// (compute capability 8.0 and up). A GPU below it is refused in one line
// naming it and its capability.
TEST_F(GpuFitTest, MnistMlpInBfloat16OnOneGpuReachesTheBar) {
  const std::string dir = t::MakeTempDir("gpu-mlp-bf16");
  auto r = t::Run({t::RuntimeBinary(), "fit", "--config", Mlp(), "--data-dir", t::MnistDir(), "--device", "gpu",
                   "--mixed-precision", "bfloat16", "--summary-json", dir + "/out.json"});
  if (r.exit_code == 2 && r.err.find("needs compute capability 8.0") != std::string::npos) {
    GTEST_SKIP() << "this GPU has no bfloat16 tensor cores: " << r.err;
  }
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto s = t::ReadJsonFile(dir + "/out.json");
  EXPECT_EQ(s["devices"], nlohmann::json::array({"cuda:0"})) << s.dump();
  EXPECT_EQ(s["dtype_policy"], "mixed_bfloat16") << s.dump();
  EXPECT_GE(s["eval_accuracy"].get<double>(), 0.925) << s.dump();
}

// float16 trains with Keras' dynamic loss scaling, which the GPU training
// path does not apply yet: refused in one line rather than trained unscaled.
TEST_F(GpuFitTest, Float16OnAGpuIsRefusedUntilLossScalingRunsThere) {
  auto r = t::Run({t::RuntimeBinary(), "fit", "--config", Mlp(), "--data-dir", t::MnistDir(), "--device", "gpu",
                   "--mixed-precision", "float16"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, ::testing::MatchesRegex("tfjob-runtime: error: flag --mixed-precision: float16 on a GPU: Keras' "
                                             "dynamic loss scaling is not applied[^\n]*\n"));
}

// Where the job computes decides which path is asked (fit_flags.cc:
// CheckPrecisionPath): --device gpu with no GPU visible is the device's
// refusal, not the CPU's float16 one; on the host float16 needs the CPU's.
TEST(NoGpuFitTest, MixedPrecisionAsksThePathOfTheDeviceItRunsOn) {
  const std::map<std::string, std::string> hide{{"CUDA_VISIBLE_DEVICES", ""}};
  auto gpu = t::Run({t::RuntimeBinary(), "fit", "--config", Mlp(), "--data-dir", t::MnistDir(), "--device", "gpu",
                     "--mixed-precision", "float16"},
                    hide);
  EXPECT_EQ(gpu.exit_code, 2) << gpu.out << gpu.err;
  EXPECT_THAT(gpu.err, ::testing::MatchesRegex(
                           "tfjob-runtime: error: flag --device gpu: (this build has no CUDA support|no CUDA device is "
                           "visible)[^\n]*\n"));
  auto cpu = t::Run({t::RuntimeBinary(), "fit", "--config", Mlp(), "--data-dir", t::MnistDir(), "--device", "cpu",
                     "--mixed-precision", "float16"},
                    {{"TFJOB_FLOAT16_EMULATION", "0"}});
  EXPECT_EQ(cpu.exit_code, 2) << cpu.out << cpu.err;
  EXPECT_THAT(cpu.err,
              ::testing::MatchesRegex(
                  "tfjob-runtime: error: flag --mixed-precision: float16 needs a float16 matrix path[^\n]*\n"));
}

// Everywhere: with no GPU visible (none on the machine, or
// CUDA_VISIBLE_DEVICES hiding them), --device gpu is one line and exit 2,
// and --device auto trains on the CPU.
TEST(NoGpuFitTest, DeviceGpuWithoutAVisibleGpuIsOneLineAndExitTwo) {
  const std::map<std::string, std::string> hide{{"CUDA_VISIBLE_DEVICES", ""}};
  auto r = t::Run({t::RuntimeBinary(), "fit", "--config", Mlp(), "--data-dir", t::MnistDir(), "--device", "gpu"}, hide);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, ::testing::MatchesRegex(
                         "tfjob-runtime: error: flag --device gpu: (this build has no CUDA support|no CUDA device is "
                         "visible)[^\n]*\n"));
  const std::string dir = t::MakeTempDir("no-gpu-auto");
  auto a = t::Run({t::RuntimeBinary(), "fit", "--config", Mlp(), "--data-dir", t::MnistDir(), "--epochs", "1",
                   "--summary-json", dir + "/out.json"},
                  hide);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(t::ReadJsonFile(dir + "/out.json")["devices"], nlohmann::json::array({"cpu"}));
  // A build with CUDA says why it trains on the CPU; one without has nothing
  // else to choose, and says nothing.
#ifdef TFJOB_HAVE_CUDA
  EXPECT_THAT(a.out, HasSubstr("fit: --device auto: training on the CPU: no CUDA device is visible")) << a.out;
#else
  EXPECT_THAT(a.out, ::testing::Not(HasSubstr("--device auto"))) << a.out;
#endif
  // Parameter-server workers plan their device too: the job fails with
  // their reason, exit 2.
  auto ps = t::Run({t::RuntimeBinary(), "local", "--ps", "1", "--workers", "1", "--", "fit", "--config", Mlp(),
                    "--data-dir", t::MnistDir(), "--device", "gpu"},
                   hide);
  EXPECT_EQ(ps.exit_code, 2) << ps.out << ps.err;
  EXPECT_THAT(ps.out + ps.err, ::testing::ContainsRegex(
                                   "flag --device gpu: (this build has no CUDA support|no CUDA device is visible)"));
  auto bad = t::Run({t::RuntimeBinary(), "fit", "--config", Mlp(), "--device", "tpu"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("flag --device: expected cpu, gpu or auto, got \"tpu\""));
}

// The CNN where this process sees no GPU at all (CUDA_VISIBLE_DEVICES is
// not used here, so that what the bundle's run.sh reports on a machine
// without a GPU is this very case): one line on stderr, exit 2, whether the
// reason is the missing GPU or a layer without a GPU kernel.
TEST(NoGpuFitTest, CnnWithDeviceGpuWithoutAGpuIsOneLineAndExitTwo) {
  if (VisibleGpus() > 0) GTEST_SKIP() << "a CUDA device is visible here; this case is for machines without one";
  auto r = t::Run({t::RuntimeBinary(), "fit", "--config", Cnn(), "--data-dir", t::MnistDir(), "--device", "gpu"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, ::testing::MatchesRegex("tfjob-runtime: error: [^\n]*\n")) << r.err;
}

}  // namespace
}  // namespace tfjob

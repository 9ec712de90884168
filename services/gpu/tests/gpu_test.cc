#include "services/gpu/gpu.h"

#include "services/gpu/cublas_library.h"
#ifdef TFJOB_HAVE_NCCL
#include <nccl.h>

#include "services/collective/nccl_library.h"
#endif

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tfjob::gpu {
namespace {

// Runs on a GPU when there is one; skips (not passes) when there is none.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = ListDevices();
    ASSERT_TRUE(d.ok()) << d.status();
    if (d->empty()) GTEST_SKIP() << "no CUDA device on this machine";
    devices_ = *d;
  }
  std::vector<DeviceInfo> devices_;
};

// The GPUs the NVIDIA kernel driver reports in /proc/driver/nvidia/gpus: one
// directory per GPU whose "information" file names its model. Empty without
// the driver. Independent of the CUDA runtime that ListDevices asks.
std::vector<std::string> DriverGpuModels() {
  std::vector<std::string> models;
  std::error_code ec;
  for (const auto& gpu : std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
    std::ifstream in(gpu.path() / "information");
    std::string line, model = "?";
    while (std::getline(in, line)) {
      if (line.rfind("Model:", 0) != 0) continue;
      const size_t b = line.find_first_not_of(" \t", 6);
      model = b == std::string::npos ? "" : line.substr(b);
      break;
    }
    models.push_back(model);
  }
  std::sort(models.begin(), models.end());
  return models;
}

// Device nodes /dev/nvidiaN: one per GPU given to this container or machine,
// for when /proc/driver/nvidia is not visible.
size_t GpuDeviceNodes() {
  size_t n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev", ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > 6 && name.rfind("nvidia", 0) == 0 &&
        name.find_first_not_of("0123456789", 6) == std::string::npos) {
      ++n;
    }
  }
  return n;
}

// Without a GPU (CI): an empty list, not an error. With one: the driver's GPUs
// (all of them unless CUDA_VISIBLE_DEVICES narrows the view), by model name
// (or by count where only /dev/nvidiaN shows them), with indices in order and
// plausible properties.
TEST(GpuProbeTest, ListedDevicesAreTheDriversGpus) {
  auto d = ListDevices();
  ASSERT_TRUE(d.ok()) << d.status();
  const std::vector<std::string> driver = DriverGpuModels();
  const size_t nodes = GpuDeviceNodes();
  if (driver.empty() && nodes == 0) {
    EXPECT_TRUE(d->empty()) << d->size() << " devices listed where the driver reports none";
    return;
  }
  const bool narrowed = std::getenv("CUDA_VISIBLE_DEVICES") != nullptr;
  std::vector<std::string> names;
  for (size_t i = 0; i < d->size(); ++i) {
    const DeviceInfo& info = (*d)[i];
    EXPECT_EQ(info.index, static_cast<int>(i));
    EXPECT_GT(info.memory_bytes, size_t{1} << 30) << info.name;
    EXPECT_GE(info.compute_major, 3) << info.name;  // filled in, not a zeroed struct
    names.push_back(info.name);
  }
  std::sort(names.begin(), names.end());
  if (driver.empty()) {  // device nodes only: no model names to compare
    if (narrowed)
      EXPECT_LE(names.size(), nodes);
    else
      EXPECT_EQ(names.size(), nodes);
  } else if (!narrowed) {
    EXPECT_EQ(names, driver);
  } else {
    EXPECT_LE(names.size(), driver.size());
    for (const std::string& n : names) EXPECT_NE(std::find(driver.begin(), driver.end(), n), driver.end()) << n;
  }
}

TEST_F(GpuTest, AxpyMatchesHost) {
  std::vector<float> x(1000), y(1000), want(1000);
  for (int i = 0; i < 1000; ++i) {
    x[i] = static_cast<float>(i) * 0.5f;
    y[i] = 1.0f - static_cast<float>(i);
    want[i] = y[i] + 2.0f * x[i];
  }
  ASSERT_TRUE(Axpy(devices_[0].index, 2.0f, x, y).ok());
  for (int i = 0; i < 1000; ++i) EXPECT_FLOAT_EQ(y[i], want[i]) << i;
}

TEST(GpuProbeTest, SizeMismatchIsAnErrorWithOrWithoutDevice) {
  std::vector<float> x(3), y(4);
  EXPECT_EQ(Axpy(0, 1.0f, x, y).code(), Code::kInvalidArgument);
}

TEST(GpuProbeTest, NoDeviceIsUnavailableNotACrash) {
  auto d = ListDevices();
  ASSERT_TRUE(d.ok());
  if (!d->empty()) GTEST_SKIP() << "a device is present";
  std::vector<float> x(3), y(3);
  EXPECT_NE(Axpy(0, 1.0f, x, y).code(), Code::kOk);
}

// cuBLAS and NCCL are opened when a device is first used, not linked
// (cublas_library.h): every function this build calls must be found in the
// libraries the toolkit ships, which needs no GPU to check.
TEST(CudaLibrariesTest, CublasAndNcclOpenWithEveryFunctionThisBuildCalls) {
  Status cublas = LoadCublas();
  EXPECT_TRUE(cublas.ok()) << cublas;
#ifdef TFJOB_HAVE_NCCL
  Status nccl = collective::LoadNccl();
  EXPECT_TRUE(nccl.ok()) << nccl;
  EXPECT_EQ(NcclVersion() / 10000, NCCL_MAJOR);  // the library answers through the forwarders
#endif
}

}  // namespace
}  // namespace tfjob::gpu

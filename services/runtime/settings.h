// The process-wide switches tfjob-runtime takes from its environment, read
// once at start-up (RunMain), validated, and handed to what they switch:
// nothing below the runtime's entry point reads these variables.
//
// Pure values; ReadProcessSettings is reentrant. ApplyProcessSettings sets
// process-wide state in the tensor and PS libraries: call it once, before
// any kernel runs or client is made. Failure: INVALID_ARGUMENT naming the
// variable and its value (the runtime exits 2 with that line).
#pragma once

#include <string>

#include "common/status.h"
#include "services/cluster/cluster.h"

namespace tfjob::runtime {

struct ProcessSettings {
  // TFJOB_CPU_KERNELS=eigen: Eigen's products and the im2col convolution
  // instead of oneDNN's (bench/roofline.sh compares the two).
  bool eigen_kernels = false;
  // TFJOB_FLOAT16_EMULATION=1: float16 layers computed in float32 and rounded
  // (services/tensor/precision.h), where no float16 path is built.
  bool float16_emulation = false;
  // TFJOB_PS_SHM=0: parameter-server payloads inline even on one host
  // (services/ps/shm.h).
  bool ps_shared_memory = true;
  // TFJOB_RUNTIME_SELF: what `tfjob-runtime local` starts for each task when
  // not /proc/self/exe (the GPU bundle's wrapper, scripts/gpu-bundle.sh);
  // "" for /proc/self/exe.
  std::string self_exe;
};

StatusOr<ProcessSettings> ReadProcessSettings(const cluster::Env& env);
void ApplyProcessSettings(const ProcessSettings& settings);

}  // namespace tfjob::runtime

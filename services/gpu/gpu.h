// GPU support, present only in builds with the CUDA toolkit
// (TFJOB_HAVE_CUDA): the CUDA device backend that tensors on a GPU compute
// with (services/tensor/backend.h; cuda_backend.cc: cuBLAS and the kernels
// of kernels.cu), and device listing. Everything returns a Status: no
// device, a driver that is missing or too old, or a failed launch is
// UNAVAILABLE / INTERNAL with the CUDA error string, never a crash, so
// CPU-only machines run the same binary.
// Thread-safety: functions are reentrant.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "services/tensor/precision.h"

namespace tfjob::gpu {

struct DeviceInfo {
  int index = 0;
  std::string name;
  size_t memory_bytes = 0;
  int compute_major = 0, compute_minor = 0;
};

// Devices visible to this process; an empty list (not an error) when the
// driver reports none.
StatusOr<std::vector<DeviceInfo>> ListDevices();

// Whether a GPU computes `p`'s products on tensor cores (cuda_backend.cc's
// MatMul: cublasGemmEx, float32 accumulation): bfloat16 from compute
// capability 8.0 (Ampere), float16 from 7.0 (Volta), float32 always.
// FAILED_PRECONDITION naming the device, its capability and the one needed
// otherwise. Pure: no device is touched.
Status MixedPrecisionSupport(Precision p, const DeviceInfo& device);
// The same for visible device `index` (its properties read from the
// driver); what RegisterBackend registers as GpuPathFor's answer.
Status MixedPrecisionSupport(Precision p, int index);

// y += alpha * x on device `device`, round-tripping through device memory:
// the primitive an SGD update on a GPU is made of. Sizes must match.
Status Axpy(int device, float alpha, const std::vector<float>& x, std::vector<float>& y);

// Registers the CUDA backend with the tensor library, and NCCL with the
// collectives where this build has it (services/collective/nccl.h;
// idempotent). Cheap: the driver is first touched when a device tensor is
// first made, so a process that never asks for a GPU never initialises CUDA
// (and may fork freely).
void RegisterBackend();

// NCCL's version when linked against it, else 0.
int NcclVersion();

}  // namespace tfjob::gpu

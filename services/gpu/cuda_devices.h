// The CUDA backend's per-device state (internal to services/gpu): for each
// device a compute stream (every kernel, cuBLAS call, allocation and free is
// ordered on it), a copy stream for uploads, a cuBLAS handle bound to the
// compute stream, a vector of ones for column sums, and a pool of pinned host
// blocks that uploads stage through. Device memory comes from CUDA's
// stream-ordered allocator (cudaMallocAsync) with the pool's release
// threshold raised, so a training step's temporaries are recycled instead of
// going back to the driver, and allocating never waits for the device.
// CudaDevices also does the transfers between host and device, which are
// what the copy stream and the pinned blocks exist for; cuda_backend.cc
// queues the operations on the compute stream.
//
// Ownership: CudaDevices owns every device's streams, handle, pinned blocks
// and ones vector for the life of the process (the backend is never
// destroyed). Thread-safety: Count, Get and the transfers may be called from
// any thread; a device is initialised once, by its first Get; PerDevice::mu
// guards the pinned blocks and the ones vector. Failure behaviour: a CUDA or
// cuBLAS failure is FAILED_PRECONDITION with the error string (Cuda, Blas);
// a tensor on the wrong device or of the wrong size is INVALID_ARGUMENT; a
// device that failed to initialise keeps returning that failure.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "services/tensor/tensor.h"

namespace tfjob::gpu::internal {

// A CUDA runtime result as a Status: OK, or FAILED_PRECONDITION naming `what`.
Status Cuda(cudaError_t e, const std::string& what);
// A kernel launch's result (kernels.h returns the cudaError_t as an int).
Status Launch(int e, const char* what);
Status Blas(cublasStatus_t s, const char* what);
// INVALID_ARGUMENT unless a and b have the same dtype and element count.
Status SameSize(const Tensor& a, const Tensor& b, const char* op);

// Restores the caller's current device: deleters run on whatever thread
// drops the last handle.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    cudaGetDevice(&saved_);
    if (saved_ != device) cudaSetDevice(device);
    device_ = device;
  }
  ~DeviceGuard() {
    if (saved_ != device_) cudaSetDevice(saved_);
  }

 private:
  int saved_ = 0, device_ = 0;
};

struct PinnedBlock {
  std::byte* host = nullptr;
  size_t bytes = 0;
  cudaEvent_t done = nullptr;  // the copy that last read it
};

struct PerDevice {
  std::once_flag init;
  Status init_status;
  cudaStream_t compute = nullptr;
  cudaStream_t copy = nullptr;
  cublasHandle_t blas = nullptr;
  Mutex mu;  // guards the fields below (uploads may come from any thread)
  std::vector<PinnedBlock> pinned TFJOB_GUARDED_BY(mu);
  float* ones TFJOB_GUARDED_BY(mu) = nullptr;
  int64_t ones_size TFJOB_GUARDED_BY(mu) = 0;
};

class CudaDevices {
 public:
  // Devices visible to the process; 0 without a driver or a device.
  int Count();
  std::string Description(int index);

  // The device's state, initialised on first use; FAILED_PRECONDITION for a
  // device that is not visible or failed to initialise.
  StatusOr<PerDevice*> Get(int device);
  // The state of the device `t` lives on; INVALID_ARGUMENT for a host tensor.
  StatusOr<PerDevice*> Get(const Tensor& t);

  // `bytes` of device memory, allocated in order on `stream` and freed in
  // order on the compute stream when the last handle goes.
  StatusOr<std::shared_ptr<std::byte[]>> Allocate(int device, PerDevice* d, cudaStream_t stream, size_t bytes);

  // The transfers of device::Backend (services/tensor/backend.h).
  StatusOr<Tensor> UploadNew(const Tensor& host, int device);
  Status Upload(const Tensor& host, Tensor& dst);
  Status Download(const Tensor& src, Tensor& host);
  Status CopyOnDevice(const Tensor& src, Tensor& dst);
  Status Synchronize(int device);

  // At least n ones on the device, valid for work queued on its compute
  // stream after this call (the vector only grows; it is never shrunk).
  StatusOr<const float*> Ones(int device, PerDevice* d, int64_t n);

 private:
  static Status Init(int device, PerDevice* d);
  Status Stage(int device, PerDevice* d, const Tensor& host, Tensor& dst);
  static StatusOr<PinnedBlock*> AcquirePinned(PerDevice* d, size_t bytes) TFJOB_REQUIRES(d->mu);
  static Status NewPinned(size_t bytes, PinnedBlock& b);

  std::once_flag count_once_;
  int count_ = 0;
  std::unique_ptr<PerDevice[]> devices_;
};

}  // namespace tfjob::gpu::internal

#include "services/gpu/gpu.h"
#include "services/gpu/kernels.h"

#include <cuda_runtime.h>
#ifdef TFJOB_HAVE_NCCL
#include <nccl.h>
#endif

namespace tfjob::gpu {
namespace {

Status FromCuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  const Code code = (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) ? Code::kUnavailable : Code::kInternal;
  return Status(code, std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace

StatusOr<std::vector<DeviceInfo>> ListDevices() {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
    cudaGetLastError();  // clear the sticky error
    return std::vector<DeviceInfo>{};
  }
  RETURN_IF_ERROR(FromCuda(e, "cudaGetDeviceCount"));
  std::vector<DeviceInfo> out;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    RETURN_IF_ERROR(FromCuda(cudaGetDeviceProperties(&p, i), "cudaGetDeviceProperties"));
    out.push_back({i, p.name, p.totalGlobalMem, p.major, p.minor});
  }
  return out;
}

Status Axpy(int device, float alpha, const std::vector<float>& x, std::vector<float>& y) {
  if (x.size() != y.size()) {
    return InvalidArgument("Axpy: x has " + std::to_string(x.size()) + " elements, y " + std::to_string(y.size()));
  }
  RETURN_IF_ERROR(FromCuda(cudaSetDevice(device), "cudaSetDevice"));
  const size_t bytes = x.size() * sizeof(float);
  float *dx = nullptr, *dy = nullptr;
  Status s = FromCuda(cudaMalloc(&dx, bytes), "cudaMalloc");
  if (s.ok()) s = FromCuda(cudaMalloc(&dy, bytes), "cudaMalloc");
  if (s.ok()) s = FromCuda(cudaMemcpy(dx, x.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  if (s.ok()) s = FromCuda(cudaMemcpy(dy, y.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  if (s.ok()) {
    s = FromCuda(static_cast<cudaError_t>(kernels::Axpy(static_cast<int64_t>(x.size()), alpha, dx, dy, nullptr)),
                 "Axpy launch");
  }
  if (s.ok()) s = FromCuda(cudaMemcpy(y.data(), dy, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
  cudaFree(dx);
  cudaFree(dy);
  return s;
}

int NcclVersion() {
#ifdef TFJOB_HAVE_NCCL
  int v = 0;
  if (ncclGetVersion(&v) == ncclSuccess) return v;
#endif
  return 0;
}

}  // namespace tfjob::gpu

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

Status MixedPrecisionSupport(Precision p, const DeviceInfo& device) {
  // Tensor cores' bfloat16 came with sm_80, float16 with sm_70 (cuBLAS'
  // cublasGemmEx table: CUDA_R_16BF inputs need compute capability 8.0).
  const int need = p == Precision::kBfloat16 ? 80 : (p == Precision::kFloat16 ? 70 : 0);
  const int have = device.compute_major * 10 + device.compute_minor;
  if (have >= need) return Status::Ok();
  return FailedPrecondition(std::string(PrecisionName(p)) + " on a GPU needs compute capability " +
                            std::to_string(need / 10) + "." + std::to_string(need % 10) + " or higher; " + device.name +
                            " (cuda:" + std::to_string(device.index) + ") has " + std::to_string(device.compute_major) +
                            "." + std::to_string(device.compute_minor));
}

Status MixedPrecisionSupport(Precision p, int index) {
  if (p == Precision::kFloat32) return Status::Ok();
  ASSIGN_OR_RETURN(std::vector<DeviceInfo> devices, ListDevices());
  if (index < 0 || index >= static_cast<int>(devices.size())) {
    return FailedPrecondition(std::string(PrecisionName(p)) +
                              " on a GPU: no visible device cuda:" + std::to_string(index));
  }
  return MixedPrecisionSupport(p, devices[static_cast<size_t>(index)]);
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

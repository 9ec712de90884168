#include "services/tensor/backend.h"

#include <atomic>

namespace tfjob::device {
namespace {

std::atomic<Backend*> g_cuda{nullptr};

}  // namespace

Backend* CudaBackend() { return g_cuda.load(std::memory_order_acquire); }

void RegisterCudaBackend(Backend* backend) { g_cuda.store(backend, std::memory_order_release); }

StatusOr<Backend*> BackendFor(const Device& device) {
  if (device.is_cpu()) return FailedPrecondition("the host has no device backend");
  Backend* b = CudaBackend();
  if (!b)
    return FailedPrecondition("this build has no CUDA support (built without the CUDA toolkit or -DTFJOB_CUDA=OFF)");
  const int n = b->DeviceCount();
  if (n == 0) return FailedPrecondition("no CUDA device is visible (CUDA_VISIBLE_DEVICES, driver, or no GPU)");
  if (device.index < 0 || device.index >= n) {
    return FailedPrecondition(device.ToString() + " is not visible: this process sees " + std::to_string(n) +
                              " CUDA device" + (n == 1 ? "" : "s"));
  }
  return b;
}

Status CheckSameDevice(std::string_view op, std::initializer_list<const Tensor*> tensors) {
  if (tensors.size() == 0) return Status::Ok();
  const Device d = (*tensors.begin())->device();
  for (const Tensor* t : tensors) {
    if (t->device() != d) {
      return InvalidArgument(std::string(op) + ": tensors on different devices (" + d.ToString() + " and " +
                             t->DebugString() + ")");
    }
  }
  return Status::Ok();
}

}  // namespace tfjob::device

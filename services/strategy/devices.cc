#include "services/strategy/devices.h"

#include "services/tensor/backend.h"

namespace tfjob::strategy {
namespace {

int VisibleGpus() {
  device::Backend* b = device::CudaBackend();
  return b ? b->DeviceCount() : 0;
}

}  // namespace

StatusOr<DeviceChoice> ParseDeviceChoice(std::string_view s) {
  if (s == "auto") return DeviceChoice::kAuto;
  if (s == "cpu") return DeviceChoice::kCpu;
  if (s == "gpu") return DeviceChoice::kGpu;
  return InvalidArgument("flag --device: expected cpu, gpu or auto, got \"" + std::string(s) + "\"");
}

std::string_view DeviceChoiceName(DeviceChoice c) {
  switch (c) {
    case DeviceChoice::kAuto: return "auto";
    case DeviceChoice::kCpu: return "cpu";
    case DeviceChoice::kGpu: return "gpu";
  }
  return "auto";
}

std::string WhyNoGpu() {
  if (!device::CudaBackend())
    return "this build has no CUDA support (built without the CUDA toolkit or with -DTFJOB_CUDA=OFF)";
  if (VisibleGpus() == 0) return "no CUDA device is visible (no GPU, no driver, or CUDA_VISIBLE_DEVICES hides them)";
  return "";
}

StatusOr<DevicePlan> PlanDevices(DeviceChoice choice, DevicePlacement placement, int replicas, bool replicas_given,
                                 int rank, const Status& model_support) {
  DevicePlan plan;
  plan.replicas = replicas;
  if (choice == DeviceChoice::kCpu || placement == DevicePlacement::kOnWorkers) return plan;
  const int visible = VisibleGpus();
  if (visible == 0) {
    if (choice == DeviceChoice::kGpu) return InvalidArgument("flag --device gpu: " + WhyNoGpu());
    // A build with CUDA that finds no GPU says why it trains on the CPU (a
    // GPU image on a node without one, or without the driver); a build
    // without CUDA has only the CPU, and says nothing.
    if (device::CudaBackend()) plan.note = "fit: --device auto: training on the CPU: " + WhyNoGpu();
    return plan;
  }
  if (!model_support.ok()) {
    if (choice == DeviceChoice::kGpu) return InvalidArgument("flag --device gpu: " + model_support.message());
    plan.note = "fit: --device auto: training on the CPU: " + model_support.message();
    return plan;
  }
  switch (placement) {
    case DevicePlacement::kOneDevice:
      plan.devices = {Device::Cuda(0)};
      plan.replicas = 1;
      return plan;
    case DevicePlacement::kPerGpu: {
      const int n = replicas_given ? replicas : visible;
      if (n > visible) {
        if (choice == DeviceChoice::kGpu) {
          return InvalidArgument("flag --replicas " + std::to_string(n) + ": " + std::to_string(visible) + " GPU" +
                                 (visible == 1 ? " is" : "s are") +
                                 " visible, and --device gpu runs one replica per GPU");
        }
        plan.note = "fit: --device auto: " + std::to_string(n) + " replicas but " + std::to_string(visible) + " GPU" +
                    (visible == 1 ? "" : "s") + " visible; the replicas run on the CPU";
        return plan;
      }
      plan.replicas = n;
      for (int i = 0; i < n; ++i) plan.devices.push_back(Device::Cuda(i));
      return plan;
    }
    case DevicePlacement::kByRank:
      plan.devices = {Device::Cuda((rank < 0 ? 0 : rank) % visible)};
      plan.replicas = 1;
      return plan;
    case DevicePlacement::kOnWorkers: break;
  }
  return plan;
}

}  // namespace tfjob::strategy

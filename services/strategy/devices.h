// Which devices a process trains on, as TensorFlow's users expect:
// --device gpu (fail where none is visible), cpu, or auto (a GPU when one is
// visible). CUDA_VISIBLE_DEVICES decides what "visible" means (the CUDA
// runtime applies it; the Slurm resolver sets it per task). Each strategy
// says how its replicas are placed (registry.h's StrategyEntry):
//
//   kOneDevice      cuda:0 (one_device)
//   kPerGpu         one replica per visible GPU (mirrored, central_storage;
//                   --replicas, when given, picks the first N and may not
//                   exceed them)
//   kByRank         one GPU per process: cuda:(rank % visible), so processes
//                   sharing a machine spread over its GPUs
//                   (multi_worker_mirrored; a parameter-server worker by its
//                   index)
//   kOnWorkers      nothing in this process (the parameter-server chief: its
//                   workers place themselves, kByRank)
//
// Thread-safety: reentrant. Failure: INVALID_ARGUMENT naming the flag, e.g.
// --device gpu without a visible GPU (saying why none is), or more replicas
// than GPUs.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "services/tensor/tensor.h"

namespace tfjob::strategy {

enum class DeviceChoice { kAuto, kCpu, kGpu };

// "auto", "cpu" or "gpu"; INVALID_ARGUMENT otherwise.
StatusOr<DeviceChoice> ParseDeviceChoice(std::string_view s);
// What ParseDeviceChoice reads back.
std::string_view DeviceChoiceName(DeviceChoice c);

enum class DevicePlacement { kOneDevice, kPerGpu, kByRank, kOnWorkers };

struct DevicePlan {
  // One per local replica; empty: the host.
  std::vector<Device> devices;
  // Replicas in this process (mirrored and central_storage may grow to the
  // number of GPUs); 1 otherwise.
  int replicas = 1;
  // Why auto stayed on the host: a GPU is visible but cannot serve, or a
  // build with CUDA sees none ("" otherwise, and in a build without CUDA).
  std::string note;
};

// `replicas_given`: --replicas was on the command line. `rank`: this
// process's rank in its group, or its worker index. `model_support`: why the
// model cannot compute on a GPU (Model::CheckDeviceSupport), which makes
// --device gpu an error and --device auto stay on the host.
StatusOr<DevicePlan> PlanDevices(DeviceChoice choice, DevicePlacement placement, int replicas, bool replicas_given,
                                 int rank, const Status& model_support = Status::Ok());

// Why no GPU can serve ("" when one can): no CUDA in this build, or no
// visible device.
std::string WhyNoGpu();

}  // namespace tfjob::strategy

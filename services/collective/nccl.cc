// nccl.h's functions: they forward to the implementation a binary that
// carries CUDA registered (nccl_cuda.cc), and otherwise say there is none.
#include "services/collective/nccl.h"

#include <atomic>

namespace tfjob::collective {
namespace {

std::atomic<const NcclImplementation*> g_nccl{nullptr};

const NcclImplementation* Registered() { return g_nccl.load(std::memory_order_acquire); }

Status NoNccl() {
  return FailedPrecondition(
      "this binary has no NCCL (built without the CUDA toolkit and NCCL, or linked without them, as "
      "tfjob-runtime-cpu and custom_training_loop are)");
}

}  // namespace

void RegisterNcclImplementation(const NcclImplementation* nccl) { g_nccl.store(nccl, std::memory_order_release); }

Status NcclAvailable() {
  const NcclImplementation* n = Registered();
  return n ? n->available() : NoNccl();
}

StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(Communicator& control, int device, Options options) {
  const NcclImplementation* n = Registered();
  if (!n) return NoNccl();
  return n->make_communicator(control, device, options);
}

StatusOr<std::vector<std::unique_ptr<Communicator>>> MakeNcclLocalGroup(const std::vector<int>& devices,
                                                                        Options options) {
  const NcclImplementation* n = Registered();
  if (!n) return NoNccl();
  return n->make_local_group(devices, options);
}

}  // namespace tfjob::collective

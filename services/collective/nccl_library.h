// NCCL, opened on first use (common/shared_library.h): nccl_library.cc
// defines the NCCL functions nccl_cuda.cc calls, each forwarding to libnccl
// once it is open, so that a task of the GPU build that never reduces over
// NCCL never loads it. Thread-safety: any thread. Failure: LoadNccl says
// why the library cannot serve; a forwarded function returns
// ncclSystemError then.
#pragma once

#include "common/status.h"

namespace tfjob::collective {

// OK once NCCL is open and has every function this build calls.
Status LoadNccl();

}  // namespace tfjob::collective

// The NCCL implementation of Communicator, for members with a GPU each:
// NCCL moves the data between the GPUs (NVLink, PCIe or the network) and the
// group's ring (group.h) carries its control messages: rank 0 creates the
// NCCL unique id and broadcasts it over the ring, then every member joins
// the NCCL communicator on its device. Built when CUDA and NCCL are found
// (TFJOB_HAVE_NCCL); elsewhere NcclAvailable() says why not and nothing else
// is offered.
//
// Tensors on the member's GPU (a worker training with --device gpu) are
// reduced in place on the device, after the work already queued there;
// host tensors are staged through pinned host memory and one device buffer:
// copy in, reduce on the device, copy out, all on one stream.
//
// Where it is: the implementation (nccl_cuda.cc, library
// tfjob_collective_nccl, built where CUDA and NCCL were found) is linked
// only into binaries that carry CUDA, which register it at start-up
// (gpu::RegisterBackend calls RegisterNccl); they open libnccl itself only
// when a task first asks for NCCL (nccl_library.h). In every other binary (a build without NCCL, and
// tfjob-runtime-cpu and custom_training_loop, which a CPU image carries)
// the functions below say there is no NCCL.
//
// Ownership: a NcclCommunicator owns its NCCL communicator, stream and
// buffers. Thread-safety: one operation at a time. Failure: NCCL's
// asynchronous errors and a peer that stops answering are detected by
// polling with Options::timeout; the communicator is then aborted
// (ncclCommAbort) and every call returns UNAVAILABLE or DEADLINE_EXCEEDED,
// so the strategy re-forms the group as it does for the ring.
#pragma once

#include <memory>
#include <vector>

#include "common/status.h"
#include "services/collective/communicator.h"

namespace tfjob::collective {

// OK when this build has NCCL and a GPU is visible; otherwise
// FAILED_PRECONDITION saying which is missing.
Status NcclAvailable();

// Joins the NCCL communicator of `control`'s group (same ranks) on CUDA
// device `device`, exchanging the unique id through `control`. With
// device -1, member r uses visible device r % count: one GPU per member
// whether the members share a machine or each sees only its own GPU.
StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(Communicator& control, int device, Options options);

// The GPUs of one process reducing among themselves (MirroredStrategy): one
// communicator per device, rank i on devices[i], each to be driven by its
// own thread, every operation on device tensors (on that member's GPU) in
// place. A replica that does not join an operation makes the others'
// DEADLINE_EXCEEDED after options.timeout.
StatusOr<std::vector<std::unique_ptr<Communicator>>> MakeNcclLocalGroup(const std::vector<int>& devices,
                                                                        Options options);

// What the three functions above forward to once registered.
struct NcclImplementation {
  Status (*available)();
  StatusOr<std::unique_ptr<Communicator>> (*make_communicator)(Communicator& control, int device, Options options);
  StatusOr<std::vector<std::unique_ptr<Communicator>>> (*make_local_group)(const std::vector<int>& devices,
                                                                           Options options);
};

// `nccl` must live for the process. Called at start-up, before any thread
// asks for NCCL (later calls are safe, but a caller may already have been
// told there is none).
void RegisterNcclImplementation(const NcclImplementation* nccl);

// Registers the implementation in tfjob_collective_nccl (idempotent).
// Defined only in that library: call it only where it is linked
// (TFJOB_HAVE_NCCL, which the library gives its users).
void RegisterNccl();

}  // namespace tfjob::collective

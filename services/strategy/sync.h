// The synchronous strategies: one_device, mirrored, central_storage and
// multi_worker_mirrored, as one strategy parameterised by where the
// variables live and how gradients are combined. Its parts: the step
// (sync_step.h), the gradient reduction (gradient_reduction.h), the
// group's recovery (group_recovery.h) and the variable copies
// (sync_variables.h); sync.cc puts them together with input and checkpoints.
//
// Each step takes the global batch of that step (GlobalBatches, so every
// replica of every process agrees on it) and gives replica g of R rows
// [g*B/R, (g+1)*B/R). Each replica computes the mean gradient over its rows
// and scales it by rows/B, so that the sum over replicas is exactly the
// gradient one device computes over the whole batch. Then:
//
//   one_device             applies it (sparse gradients stay sparse)
//   mirrored               all-reduces it across the local replicas
//                          (collective::LocalGroup); each replica applies it
//                          to its own copy of the variables
//   central_storage        sums the replicas' gradients in replica order and
//                          applies them once to the one copy
//   multi_worker_mirrored  all-reduces it (and the step's loss and metric
//                          sums) across the processes of a collective::Group,
//                          ring; every process applies the same update
//
// Sparse (embedding) gradients of replicated strategies are reduced as dense
// tensors plus a mask of the rows any replica touched, and applied to those
// rows only, so optimizers with per-row state (lazy Adam) behave as on one
// device.
//
// Failures under multi_worker_mirrored: when a member dies or hangs, the
// step's all-reduce fails on every member; Recover re-forms the group (the
// restarted member rejoins), and the member with the newest state (the most
// steps done) broadcasts its variables, optimizer state and training
// progress to the others, so no completed step is lost. A member that fails
// on its own input aborts the group with its error, so every member stops
// with it. Rank 0 writes checkpoints; every member restores the newest one it
// can read at start, and the group then takes the newest state among them.
//
// Devices: with SyncOptions::devices naming CUDA devices, replica i
// computes on devices[i] with its variables there (central_storage keeps its
// one copy on devices[0]); forward, backward, loss, metrics and updates are
// queued device work, input batches are uploaded through pinned memory
// while the previous step computes, and the step's loss and metric sums
// accumulate on the device until the chunk ends (Run's last step), the only
// point where the host waits for the device. Collectives reduce device
// tensors in place with NCCL (multi_worker_mirrored with NCCL, mirrored
// replicas on several GPUs) or stage them through host memory (the ring, and
// mirrored replicas where NCCL cannot serve).
// Checkpoints, the group's state broadcast and Values() go through host
// copies.
//
// Ownership: the strategy owns its models, variables and threads, and
// borrows the Group. Thread-safety: driven by one thread. Failure: Status
// values; bad data is INVALID_ARGUMENT naming the field.
#pragma once

#include <atomic>
#include <iosfwd>
#include <memory>

#include "common/status.h"
#include "services/collective/communicator.h"
#include "services/collective/group.h"
#include "services/model/job_config.h"
#include "services/strategy/input.h"
#include "services/strategy/strategy.h"

namespace tfjob::strategy {

struct SyncOptions {
  StrategyKind kind = StrategyKind::kOneDevice;
  // Replicas in this process (mirrored, central_storage).
  int replicas = 1;
  // multi_worker_mirrored: the group of this process and its peers, and
  // what reduces the gradients (RING over the group's own connections, or
  // NCCL joined through them; AUTO is NCCL when every member trains on a GPU
  // and can join NCCL, which the members agree on by a vote, else RING).
  collective::Group* group = nullptr;
  collective::Implementation communication = collective::Implementation::kAuto;
  // Where each local replica computes: empty for the host; otherwise one
  // device per local replica (replicas, or 1 for one_device and
  // multi_worker_mirrored).
  std::vector<Device> devices;
  // Timeouts of the in-process group of mirrored replicas.
  collective::Options collective;
  CheckpointPolicy checkpoints;
  // Checkpoint, restore and recovery lines; nullptr for silence.
  std::ostream* log = nullptr;
  // SIGTERM: Run returns CANCELLED at the next step boundary.
  const std::atomic<bool>* stop = nullptr;
  // multi_worker_mirrored over a sharded source: `train` is this member's
  // shard, and each step takes this member's part of the global batch from
  // it (batch * (rank + 1) / n - batch * rank / n rows) instead of slicing
  // a global batch every member reads.
  bool sharded_input = false;
  // Every variable's first value (the model's order); empty: from the job's
  // seed.
  std::vector<Tensor> initial_values;
};

// `train` holds the whole training set; INVALID_ARGUMENT for a kind that is
// not synchronous, replicas < 1, or multi_worker_mirrored without a group.
StatusOr<std::unique_ptr<Strategy>> MakeSyncStrategy(const model::JobConfig& job, Examples train, SyncOptions options);

}  // namespace tfjob::strategy

// The step of the synchronous strategies (sync.h): every local replica's
// forward and backward pass over its rows of the step's global batch, the
// reduction its strategy kind asks for (gradient_reduction.h, and the
// communicators), and the update of the variables. What differs between
// the kinds is decided once, when the step is created (KindTraits,
// Reduction).
//
// Ownership: owns the replicas' models, the variable copies, the replica
// threads and the in-process communicators of mirrored replicas; borrows the
// group's reducer for one call. Thread-safety: driven by one thread;
// ComputeReplicas runs replica i on ReplicaPool's thread i, touching only
// replica i's model, output and copy (mirrored) or reading the shared copy.
// Failure: Status values; a replica that fails aborts the in-process groups
// so no other replica waits for it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "services/collective/local.h"
#include "services/model/job_config.h"
#include "services/model/model.h"
#include "services/model/optimizers.h"
#include "services/strategy/devices.h"
#include "services/strategy/gradient_reduction.h"
#include "services/strategy/group_recovery.h"
#include "services/strategy/input.h"
#include "services/strategy/loss_scale.h"
#include "services/strategy/replica_pool.h"
#include "services/strategy/stats.h"
#include "services/strategy/sync.h"
#include "services/strategy/sync_variables.h"

namespace tfjob::strategy {

// Everything a strategy kind decides: the one place StrategyKind is
// switched on (TraitsOf).
struct KindTraits {
  bool synchronous = false;          // every built-in kind but parameter_server
  bool in_group = false;             // multi_worker_mirrored: a collective::Group of processes
  bool replicas_in_process = false;  // mirrored, central_storage: SyncOptions::replicas here; others one
  bool copy_per_replica = false;     // mirrored: each replica updates a copy of its own
  bool sum_to_one_copy = false;      // central_storage: summed here in replica order, applied once
  DevicePlacement placement = DevicePlacement::kOnWorkers;  // devices.h
};
KindTraits TraitsOf(StrategyKind kind);

// How a step's gradients are combined, chosen once from the kind and the
// number of replicas in sync.
enum class Reduction {
  kNone,          // one replica in all: its gradients are applied as computed
  kInReplicas,    // mirrored: the replicas all-reduce in process, each updating its own copy
  kSumToOneCopy,  // central_storage
  kAcrossGroup,   // the group's members all-reduce; every member applies the same update
};

// Where this process's step time went (seconds over the run).
struct StepSeconds {
  double input = 0, compute = 0, all_reduce = 0, apply = 0;
};

// What one step adds to the training progress.
struct StepProgress {
  BatchStats stats;
  int64_t examples = 0;
};

class SyncStep {
 public:
  // Models (adapted on `input`'s examples), variables (initial values from
  // the job's seed) and in-process groups for `o`; probes on `input`'s first
  // row which variables get sparse gradients when replicas reduce.
  // INVALID_ARGUMENT when o.devices does not name one device per local
  // replica.
  static StatusOr<std::unique_ptr<SyncStep>> Create(const model::JobConfig& job, const SyncOptions& o,
                                                    GlobalBatches& input);

  const KindTraits& traits() const { return traits_; }
  int local_replicas() const { return local_replicas_; }
  int64_t replicas_in_sync() const { return replicas_in_sync_; }
  bool on_device() const { return on_device_; }
  // One per local replica.
  const std::vector<Device>& devices() const { return devices_; }
  std::span<const VariableInfo> variables() const { return vars_; }
  // The first local replica's model (its per-layer times: Model::LayerTimes).
  const model::Model& first_model() const { return *models_[0]; }
  // One copy, or one per mirrored replica. Copy 0 is what checkpoints, the
  // group's state broadcast and Values() use.
  std::span<VariableCopy> copies() { return copies_; }
  // The float16 loss scale (a model with float16 layers on the host), or
  // nullptr.
  const DynamicLossScale* loss_scale() const { return loss_scale_ ? &*loss_scale_ : nullptr; }
  // How mirrored replicas reduce in process: "local", "nccl", or "" when
  // they do not.
  std::string_view in_process_communication() const;

  // Every local replica's forward and backward pass over its rows of the
  // global batch (x, y); mirrored replicas then all-reduce and update their
  // copies. The first failing replica's error.
  Status ComputeReplicas(const Tensor& x, const Tensor& y);
  // The rest of the step after ComputeReplicas: the reduction and the
  // update. `group` reduces kAcrossGroup; the all-reduce's time goes to
  // `t.all_reduce` through `w`.
  StatusOr<StepProgress> ReduceAndApply(int64_t batch_rows, const GroupReducer& group, Stopwatch& w, StepSeconds& t);
  // On a device: folds the loss and metric sums accumulated there into the
  // host's progress and starts new sums. A loss that is not finite stops
  // training (INVALID_ARGUMENT), as on the host, one chunk later.
  Status ResolveStats(TrainState& st);
  // Host values and optimizer state into every copy.
  Status AssignAll(const VariableCopy& host);

 private:
  struct ReplicaOutput {
    Status status;
    BatchStats stats;
    std::vector<model::Gradient> raw;  // kNone: applied as computed
    ReplicaGradients grads;            // otherwise: scaled, dense, reducible
    bool finite = true;                // the applied gradients were finite (else the update was skipped)
  };
  // Replica i's rows [begin, end) of the global batch and the batch size
  // its share is of.
  struct ReplicaRows {
    int64_t begin = 0, end = 0, batch = 0;
  };

  SyncStep(const model::JobConfig& job, const SyncOptions& o);
  Status CreateModels(GlobalBatches& input);
  // From `given` (the model's order) or, when empty, the job's seed.
  Status CreateVariables(const std::vector<Tensor>& given);
  Status ProbeSparse(GlobalBatches& input);
  Status MoveToDevices();
  void JoinNcclLocal();

  ReplicaRows RowsOf(int i, int64_t batch) const;
  VariableCopy& CopyOf(int replica);
  BatchStats NewStats() const;
  StatusOr<std::vector<Tensor>> ReplicaValues(int i);
  Status ReplicaStep(int i, const Tensor& x, const Tensor& y);
  Status DeviceReplicaStep(int i, const Tensor& x, const Tensor& y);
  Status ReduceInProcess(int i, ReplicaGradients& grads);
  // With loss scaling, non-finite gradients update nothing trainable and
  // set `finite` false (Keras skips the step).
  Status ApplyReduced(VariableCopy& copy, const ReplicaGradients& g, bool& finite);
  Status ApplyAsComputed();
  Status SumAndApply();
  Status AllReduceOnDevice(const GroupReducer& group, Stopwatch& w, StepSeconds& t);
  StatusOr<StepProgress> AllReduceOnHost(StepProgress p, const GroupReducer& group, Stopwatch& w, StepSeconds& t);

  const model::JobConfig job_;
  const KindTraits traits_;
  const bool in_group_;
  const bool sharded_input_;
  const collective::Options collective_;
  std::ostream* const log_;
  int local_replicas_ = 1;
  int64_t replicas_in_sync_ = 1;
  int64_t first_replica_ = 0;  // the global index of local replica 0
  Reduction reduction_ = Reduction::kNone;
  std::vector<Device> devices_;  // per local replica
  bool on_device_ = false;
  model::Optimizer optimizer_;
  std::vector<std::unique_ptr<model::Model>> models_;  // per local replica
  std::vector<VariableInfo> vars_;                     // per variable
  std::vector<VariableCopy> copies_;                   // one, or one per mirrored replica
  std::vector<ReplicaOutput> outputs_;                 // per local replica
  std::vector<Tensor> chunk_stats_;  // per local replica, on its device: loss and metric sums of the chunk
  Tensor step_stats_;                // in a group on a device: this step's sums, all-reduced
  std::unique_ptr<ReplicaPool> pool_;
  std::optional<DynamicLossScale> loss_scale_;
  std::unique_ptr<collective::LocalGroup> local_group_;                // mirrored, several replicas
  std::vector<std::unique_ptr<collective::Communicator>> nccl_local_;  // mirrored over GPUs
};

}  // namespace tfjob::strategy

// How the synchronous strategies (sync.h) combine their replicas' gradients,
// as pure functions over tensors: what each replica contributes to a step's
// sum, the in-process sum of central_storage, the step's loss and metric
// sums that travel with the gradients, and reading the summed sparse rows
// back. The all-reduces themselves (in process, ring, NCCL) belong to the
// communicators; they sum exactly the tensors ReductionTensors lists, which
// is why every replica of every member lists the same ones in the same
// order, a replica without rows included (ZeroGradients).
//
// Averaging: a replica's gradient is the mean over its rows scaled by
// rows/B (ReplicaShare), so the plain sum over replicas is the gradient one
// device computes over the whole global batch B. Non-trainable deltas
// (Normalization's state) are weighted the same way, so their sum is the
// replicas' mean.
//
// Sparse (embedding) gradients are reduced as a dense tensor plus a mask of
// the rows any replica touched: every communicator can sum equal-shaped
// dense tensors, and the mask keeps the update to those rows, so optimizers
// with per-row state (lazy Adam) behave as on one device.
//
// Ownership: results own their tensors or share the inputs' buffers where a
// tensor is only read. Thread-safety: no state; callable from any thread.
// Failure: INTERNAL when a variable's gradient is sparse in one step and
// dense in another (the replicas would send different tensors);
// INVALID_ARGUMENT for inputs that do not fit together; otherwise the
// tensor ops' own errors.
#pragma once

#include "services/model/spec.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "services/model/layers.h"
#include "services/strategy/stats.h"
#include "services/tensor/tensor.h"

namespace tfjob::strategy {

// What every copy of one variable shares, fixed when the strategy starts.
struct VariableInfo {
  std::string name;
  Shape shape;
  bool trainable = true;
  // Gets sparse gradients. Probed once before the first step, and only when
  // replicas reduce: one replica applies its gradients as computed.
  bool sparse = false;
  // Keras' kernel/bias constraint, applied after each update.
  model::Constraint constraint{};
};

// One variable's gradient in a form replicas can add up.
struct ReducibleGradient {
  Tensor dense;  // float32, the variable's shape
  Tensor mask;   // float32 [rows], sparse variables only: > 0 where a replica touched the row
};

// One replica's gradients, one per variable in the model's order.
using ReplicaGradients = std::vector<ReducibleGradient>;

// The weight of a replica's mean gradient over `rows` of a global batch of
// `batch` rows.
float ReplicaShare(int64_t rows, int64_t batch);

// `grads` (one per variable, as the model computed them) scaled by `scale`,
// dense, with masks for sparse variables, on `device`.
StatusOr<ReplicaGradients> ToReducible(std::span<const model::Gradient> grads, std::span<const VariableInfo> vars,
                                       float scale, Device device);

// What a replica without rows in this step contributes: zeros of the same
// tensors ToReducible gives.
StatusOr<ReplicaGradients> ZeroGradients(std::span<const VariableInfo> vars, Device device);

// The tensors an all-reduce sums in place, in their fixed order: each
// variable's dense gradient, followed by its mask for sparse variables.
std::vector<Tensor*> ReductionTensors(ReplicaGradients& grads);

// central_storage: the replicas' gradients summed in replica order (one
// fixed order, so the rounding is the same every run), on the devices of
// replica 0's tensors.
StatusOr<ReplicaGradients> SumInReplicaOrder(std::span<const ReplicaGradients> per_replica);

// The rows a summed mask (host, float32 [rows]) marks, ascending.
std::vector<int64_t> TouchedRows(const Tensor& mask);

// multi_worker_mirrored over host memory: a step's loss and metric sums and
// its rows travel with the gradients as one float32 tensor
// [loss total, loss count, rows, (metric total, metric count)...], so every
// member records the same progress.
StatusOr<Tensor> PackStepSums(const BatchStats& stats, int64_t rows);

// The sums PackStepSums packed, after the all-reduce. `metrics` is how many
// metrics were packed; INVALID_ARGUMENT when the tensor is not that size.
struct StepSums {
  BatchStats stats;
  int64_t rows = 0;
};
StatusOr<StepSums> UnpackStepSums(const Tensor& sums, size_t metrics);

}  // namespace tfjob::strategy

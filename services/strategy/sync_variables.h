// The variables of the synchronous strategies (sync.h): a copy of every
// variable with its optimizer state, on the device of the replicas that use
// it, and moving copies between the host and the devices, including through
// the collectives that work on host memory.
//
// Ownership: a VariableCopy owns its tensors' handles (tensors share
// buffers as tensor.h says). Thread-safety: none; a copy is used by one
// thread at a time (its replica's, or the strategy's between steps).
// Failure: Status values from the device transfers and the collectives.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "common/status.h"
#include "services/model/optimizers.h"
#include "services/strategy/gradient_reduction.h"
#include "services/tensor/tensor.h"

namespace tfjob::strategy {

// One copy of the model's variables (the one copy, or a mirrored replica's)
// and their optimizer state, both in the model's variable order. Values stay
// one vector, parallel to `slots`, because the model computes with them as
// one span and checkpoints read and write them so; what a variable is
// (name, shape, sparse) is its VariableInfo, shared by every copy.
struct VariableCopy {
  Device device;
  std::vector<Tensor> values;
  std::vector<model::SlotState> slots;  // empty slots for non-trainable state
};

// The names of `vars`, in order, as checkpoints take them.
std::vector<std::string> VariableNames(std::span<const VariableInfo> vars);

// Host copies of tensors (device ones downloaded; host ones shared).
StatusOr<std::vector<Tensor>> ToHost(const std::vector<Tensor>& ts);

// `copy`'s values and optimizer state on the host.
StatusOr<VariableCopy> ToHost(const VariableCopy& copy);

// Host values and optimizer state into `copy`, on its device.
Status Assign(const VariableCopy& host, VariableCopy& copy);

// Every tensor of `copy` in a fixed order (the values, then each variable's
// slots), for a broadcast of the whole state.
std::vector<Tensor*> StateTensors(VariableCopy& copy);

// A collective over tensors some of which may be on a device, through a
// communicator that works on host memory (the ring, the in-process group):
// copies out, runs `op`, copies back. Host-only tensors go straight to `op`.
Status Staged(std::span<Tensor* const> tensors, const std::function<Status(std::span<Tensor* const>)>& op);

}  // namespace tfjob::strategy

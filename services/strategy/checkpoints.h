// How the strategies lay out their variables in a checkpoint directory
// (services/checkpoint/manager.h), and how the evaluator reads them back:
//
//   synchronous strategies   ckpt-<step>/variables.ckpt: every variable
//                            whole (value, then optimizer slots), written by
//                            the chief (rank 0); state "num_ps": 0
//   parameter servers        ckpt-<step>/ps-<i>.ckpt: each PS's shards,
//                            written by that PS; state "num_ps" and
//                            "partitioner" say how variables were split
//
// Thread-safety: reentrant. Failure: DATA_LOSS / FAILED_PRECONDITION naming
// the checkpoint directory and the variable at fault.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "services/checkpoint/manager.h"
#include "services/model/model.h"
#include "services/model/optimizers.h"

namespace tfjob::strategy {

inline constexpr const char* kVariablesFile = "variables.ckpt";

// Writes and commits a synchronous strategy's checkpoint at `step`; `state`
// gets "num_ps": 0 added. Returns the bytes of tensors written.
StatusOr<int64_t> WriteVariables(const checkpoint::Manager& mgr, int64_t step, bool final, nlohmann::json state,
                                 const std::vector<std::string>& names, const std::vector<Tensor>& values,
                                 const std::vector<model::SlotState>& slots);

// Loads a synchronous strategy's checkpoint into `values` and `slots`
// (shapes must match). FAILED_PRECONDITION for a parameter-server checkpoint.
Status ReadVariables(const checkpoint::Committed& c, const std::vector<std::string>& names, std::vector<Tensor>& values,
                     std::vector<model::SlotState>& slots);

// The model's variable values from a checkpoint of either layout (sharded
// variables concatenated back), in `m`'s variable order.
StatusOr<std::vector<Tensor>> ValuesFromCheckpoint(const checkpoint::Committed& c, const model::Model& m);

}  // namespace tfjob::strategy

// What the parameter-server strategy's two sides (parameter_server.h, the
// chief's; ps_closures.h, the workers') share: the dataset and closure the
// chief schedules, how a model's variables are placed on the PS tasks, and
// the row plan for a first-layer Embedding. Pure functions; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "services/model/job_config.h"
#include "services/model/model.h"
#include "services/strategy/sharding.h"
#include "services/strategy/stats.h"

namespace tfjob::strategy::ps_detail {

inline constexpr const char* kTrainDataset = "fit/train";
inline constexpr const char* kTrainClosure = "fit/train_steps";

StatusOr<Placement> PlaceModel(const model::Model& m, int64_t num_ps, const Partitioner& part);
std::vector<std::string> VariableNames(const model::Model& m);
// A closure's result: its batch statistics, steps and examples.
nlohmann::json StatsToJson(const BatchStats& s, int64_t steps, int64_t examples);

// Where a PS worker's closure time went, summed over its steps: reading the
// batch and issuing the pulls (input), waiting for pulled values
// (pull_wait), the forward and backward pass (compute), handing gradients to
// the push (push: the whole push when not prefetching), the metrics
// (record), waiting at the closure's end for the pushes in flight
// (push_wait), and the closure's whole time on the worker (closure). The
// chief sums them over closures into its summary's worker_step_seconds.
struct PsStepSeconds {
  double input = 0, pull_wait = 0, compute = 0, push = 0, record = 0, push_wait = 0, closure = 0;

  nlohmann::json ToJson() const;
  // Adds a closure's (ToJson's) figures; fields it lacks count as 0.
  void Add(const nlohmann::json& j);
};

// Row pulls for a model whose ids reach an Embedding straight from the input
// (a Sequential model's first layer, or a Functional model's Embedding that
// alone takes one of its inputs): each step pulls only the rows its batch
// uses. The worker computes with a copy of the model
// whose table has `capacity` rows (the most one batch can use): the batch's
// distinct ids, ascending, become rows 0..u-1, the ids are renumbered to
// match, and the gradient's rows are renumbered back before the push.
struct RowPlan {
  size_t var = 0;          // the table's index among the model's variables
  std::string name;        // the table variable
  std::string layer;       // the Embedding layer
  size_t layer_index = 0;  // its index in the model spec's layers
  // Where each example's ids sit in the model's (packed) input: elements
  // [id_offset, id_offset + id_count) of each row of width `width`.
  int64_t id_offset = 0, id_count = 0, width = 0;
  int64_t input_dim = 0;  // rows of the real table
  int64_t capacity = 0;   // rows of the worker's compact table
};

// The plan for `job` when row pulls are on and pay: nullopt for models
// without such an Embedding, or whose table is no bigger than a batch. A
// Functional model with several such tables plans the biggest.
std::optional<RowPlan> PlanRows(const model::JobConfig& job, const model::Model& m, bool pull_rows);

}  // namespace tfjob::strategy::ps_detail

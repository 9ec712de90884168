// What a training run measures and remembers, whatever the strategy: loss
// and metric accumulators (mergeable, so replicas' and workers' partial
// results combine exactly), per-epoch results, the run's progress as
// checkpoints and state broadcasts carry it, and the summary `fit` writes.
//
// Thread-safety: plain values. Failure: FromJson returns DATA_LOSS for JSON
// that is not a TrainState (a damaged or foreign checkpoint).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "services/model/metrics.h"
#include "services/model/model.h"
#include "services/strategy/progress.h"

namespace tfjob::strategy {

struct BatchStats {
  model::MetricState loss;
  std::vector<model::MetricState> metrics;  // one per JobConfig::metrics entry
  void Merge(const BatchStats& o);
  // [("loss", x), ("accuracy", y), ...] in Keras order.
  NamedValues Values(const std::vector<std::string>& names) const;
  // {"loss": [total, count], "metrics": [[total, count], ...]}
  nlohmann::json ToJson() const;
  static StatusOr<BatchStats> FromJson(const nlohmann::json& j);
};

// Updates `stats` with one batch's loss and metrics, weighted by its size.
Status RecordBatch(const model::Model::Output& out, const Tensor& labels, const std::vector<model::MetricType>& types,
                   BatchStats& stats);

struct EpochResult {
  int64_t epoch = 0;
  int64_t steps = 0;
  double seconds = 0;
  NamedValues values;  // loss first
};

// A run's progress: what a checkpoint restores and what a re-formed group
// takes from its newest member.
struct TrainState {
  int64_t step = 0;                  // training steps completed
  std::vector<EpochResult> history;  // finished epochs
  BatchStats partial;                // the epoch in progress
  int64_t partial_steps = 0;
  double partial_seconds = 0;
  int64_t examples = 0;
  double train_seconds = 0;

  // Adds `steps` completed steps that saw `examples` examples.
  void Record(const BatchStats& stats, int64_t steps, int64_t examples);
  nlohmann::json ToJson() const;
  static StatusOr<TrainState> FromJson(const nlohmann::json& j);
};

struct FitSummary {
  std::string name;
  std::vector<EpochResult> history;
  int64_t steps = 0;
  int64_t examples = 0;
  double train_seconds = 0;
  std::optional<NamedValues> eval;  // loss first
  nlohmann::json ToJson() const;
};

// Adds the time since the previous lap (or its creation) to one of a step's
// time fields: where a step's seconds went, for the summary JSON.
class Stopwatch {
 public:
  void Lap(double& into) {
    const auto now = std::chrono::steady_clock::now();
    into += std::chrono::duration<double>(now - t0_).count();
    t0_ = now;
  }

 private:
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

}  // namespace tfjob::strategy

// Keras' model.fit then model.evaluate for a job description, with any
// registered strategy (registry.h), built the same way for every one:
// FitRun::Prepare checks everything about the input (the strategy's name,
// the model, --initial-weights, the checkpoint directory, the devices, the
// data) before any work; FitRun::Train builds the strategy (the
// parameter-server chief claims its cluster only now), drives it through
// the training loop (loop.h), evaluates on the chief and exports there.
// FitAndEvaluate is the loop plus evaluation, for a strategy built by hand.
//
// Ownership: a FitRun borrows the job, options and context it was prepared
// with (they must outlive it) and owns the model, the data and the
// strategy. Thread-safety: one thread. Failure: every error is a Status;
// bad configuration or data is INVALID_ARGUMENT / NOT_FOUND / DATA_LOSS
// naming the job file and field, or the flag.
#pragma once

#include <iosfwd>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "services/model/job_config.h"
#include "services/strategy/input.h"
#include "services/strategy/loop.h"
#include "services/strategy/fit_options.h"
#include "services/strategy/registry.h"
#include "services/strategy/strategy.h"

namespace tfjob::strategy {

// Trains `strategy` on `data` per `loop` and evaluates on the chief. The
// summary carries the strategy's own fields (SummaryJson) in `extra`.
StatusOr<FitSummary> FitAndEvaluate(Strategy& strategy, const model::JobConfig& job, const JobData& data,
                                    const LoopOptions& loop, std::ostream* out);

class FitRun {
 public:
  // Finds options.strategy ("" for one_device) in the registry, creates the
  // model, reads --initial-weights, checks that the checkpoint directory is
  // writable (where this process writes it), plans the devices, loads the
  // data (this member's shard under multi_worker_mirrored over a sharded
  // source) and adapts the model on it. No cluster is touched.
  static StatusOr<std::unique_ptr<FitRun>> Prepare(const model::JobConfig& job, const FitOptions& options,
                                                   const FitContext& context);

  // Builds the strategy, trains, evaluates on the chief, and there writes
  // options.export_weights and calls context.after_fit. `strategy_json`
  // (optional) receives the strategy's summary fields when training
  // succeeded (a failed or stopped run leaves it untouched: asking a cluster
  // that may be gone would hold up the exit). Call once.
  StatusOr<FitSummary> Train(nlohmann::json* strategy_json = nullptr);

  const StrategyEntry& entry() const { return entry_; }

 private:
  FitRun(const model::JobConfig& job, const FitOptions& options, const FitContext& context)
      : job_(job), o_(options), ctx_(context) {}
  Status Load();

  const model::JobConfig& job_;
  const FitOptions& o_;
  const FitContext& ctx_;
  StrategyEntry entry_;
  std::unique_ptr<model::Model> model_;
  std::vector<Tensor> initial_values_;
  DevicePlan devices_;
  JobData data_;
  bool sharded_ = false;
};

// Prepare and Train in one call.
StatusOr<FitSummary> Fit(const model::JobConfig& job, const FitOptions& options, const FitContext& context = {},
                         nlohmann::json* strategy_json = nullptr);

}  // namespace tfjob::strategy

// Keras' model.fit then model.evaluate for a job description, with any
// strategy: FitAndEvaluate drives a Strategy through the training loop and
// evaluates the result on the chief; Fit builds a synchronous strategy
// (one_device, mirrored, central_storage, or multi_worker_mirrored over a
// given group) for this process and does the same end to end. The
// parameter-server strategy (parameter_server.h, built by the chief once it
// has claimed its cluster) goes through FitAndEvaluate too.
//
// Thread-safety: one thread. Failure: every error is a Status; bad
// configuration or data is INVALID_ARGUMENT / NOT_FOUND / DATA_LOSS naming
// the job file and field.
#pragma once

#include <atomic>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "services/collective/group.h"
#include "services/metrics/runtime_metrics.h"
#include "services/model/job_config.h"
#include "services/strategy/input.h"
#include "services/strategy/loop.h"
#include "services/strategy/strategy.h"

namespace tfjob::strategy {

struct FitOptions {
  std::string data_dir;         // where relative data paths resolve
  std::ostream* out = nullptr;  // progress lines; nullptr for silence
  int64_t epochs = 0;           // > 0 overrides the job's epochs
  StrategyKind strategy = StrategyKind::kOneDevice;
  int replicas = 1;                    // mirrored, central_storage
  std::vector<Device> devices;         // per local replica; empty: the host (devices.h)
  collective::Group* group = nullptr;  // multi_worker_mirrored
  collective::Implementation communication = collective::Implementation::kAuto;
  collective::Options collective;  // mirrored replicas' timeouts
  CheckpointPolicy checkpoints;
  runtime_metrics::RuntimeMetrics* metrics = nullptr;
  const std::atomic<bool>* stop = nullptr;  // see LoopOptions
  std::string export_weights;               // the chief writes Keras .weights.h5 here after training
  // Every variable's first value (the model's order), instead of the job's
  // seed's (fit --initial-weights); empty: from the seed. A checkpoint to
  // restore still wins.
  std::vector<Tensor> initial_values;
  // Called on the chief after training and evaluation with the model
  // (adapted), the trained values on the host and the data: exporters
  // (fit --export-tfjs, --predict-out). Its error is the run's.
  std::function<Status(model::Model&, const std::vector<Tensor>&, const JobData&)> after_fit;
};

// Trains `strategy` on `data` per `loop` and evaluates on the chief. The
// summary carries the strategy's own fields (SummaryJson) in `extra`.
StatusOr<FitSummary> FitAndEvaluate(Strategy& strategy, const model::JobConfig& job, const JobData& data,
                                    const LoopOptions& loop, std::ostream* out);

// Loads the job's data, builds the synchronous strategy `options` names and
// fits. `strategy_json` (optional) receives the strategy's summary fields.
StatusOr<FitSummary> Fit(const model::JobConfig& job, const FitOptions& options,
                         nlohmann::json* strategy_json = nullptr);

}  // namespace tfjob::strategy

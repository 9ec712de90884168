// The training loop of `fit`, written once against the Strategy interface
// (Keras' model.fit): epochs of steps with Keras-style progress lines,
// checkpoints at their cadence, recovery when the strategy can recover, and
// evaluation of the trained values.
//
// Training runs in chunks that end at epoch and checkpoint boundaries, so a
// checkpoint is a consistent cut at a known step, and after a failure the
// strategy decides where training continues (a checkpoint, or a re-formed
// group's newest state).
//
// Thread-safety: one thread drives a loop. Failure: the strategy's errors,
// with at most the steps since the last checkpoint lost where a strategy
// recovers from checkpoints.
#pragma once

#include <atomic>
#include <cstdint>
#include <iosfwd>
#include <utility>
#include <vector>

#include "common/status.h"
#include "services/monitoring/runtime_metrics.h"
#include "services/model/job_config.h"
#include "services/model/model.h"
#include "services/strategy/input.h"
#include "services/strategy/strategy.h"

namespace tfjob::strategy {

struct LoopOptions {
  int64_t epochs = 1;
  int64_t steps_per_epoch = 1;
  CheckpointPolicy checkpoints;
  // With only a time-based cadence, chunks are this many steps at least
  // (a closure's worth under parameter servers).
  int64_t min_chunk_steps = 1;
  std::vector<std::string> metric_names;  // the job's, for progress lines
  std::ostream* out = nullptr;            // progress lines; nullptr for silence
  runtime_metrics::RuntimeMetrics* metrics = nullptr;
  // When it becomes true (SIGTERM), training stops at the next step or
  // chunk boundary, a checkpoint is written where the strategy writes them,
  // and the loop returns CANCELLED.
  const std::atomic<bool>* stop = nullptr;
};

// Trains with `strategy` to epochs * steps_per_epoch steps. The summary has
// no evaluation yet.
StatusOr<FitSummary> RunTrainingLoop(Strategy& strategy, const LoopOptions& options);

// Steps per epoch for a job: its steps_per_epoch, or one pass over the data.
int64_t StepsPerEpoch(const model::JobConfig& job, int64_t train_examples);

// Evaluates `values` (on the host) on `eval`: (steps, [loss, metrics...]),
// computing on `device` (the values and each batch are copied there; the
// loss and metric sums stay there until the end).
StatusOr<std::pair<int64_t, NamedValues>> Evaluate(model::Model& m, const model::JobConfig& job, const Examples& eval,
                                                   const std::vector<Tensor>& values, Device device = Device::Cpu());

}  // namespace tfjob::strategy

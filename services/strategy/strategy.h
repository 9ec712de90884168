// TensorFlow's distribution strategies as one interface, so that `fit`'s
// training loop (loop.h) is written once. The built-in ones (registry.h
// maps each name to its construction):
//
//   one_device             variables on this process's one device
//   mirrored               a copy per replica (CPU thread groups), gradients
//                          all-reduced in process, every copy updated alike
//   multi_worker_mirrored  a copy per replica in every worker process,
//                          gradients all-reduced across processes (ring)
//   central_storage        one copy on the host, compute replicated, the
//                          replicas' gradients summed before one update
//   parameter_server       variables sharded over PS tasks; the chief
//                          schedules closures on workers (parameter_server.h)
//
// The batch size in a job is the global batch; each of N replicas computes
// its slice, so synchronous training is the same computation as one device
// with the whole batch.
//
// Ownership: a Strategy owns its variables (or the handles to where they
// live) and whatever threads or connections it needs. Thread-safety: driven
// by one thread. Failure: methods return Status; Run leaves `state` at the
// last step every replica completed, and Recover says whether training can
// go on (after re-forming a group, or restoring PS tasks from a checkpoint).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "services/strategy/stats.h"
#include "services/tensor/tensor.h"

namespace tfjob::strategy {

// The built-in strategies. What tells the synchronous ones apart is decided
// in one place, TraitsOf (sync_step.h); everything else goes by a
// strategy's registry entry (registry.h).
enum class StrategyKind { kOneDevice, kMirrored, kMultiWorkerMirrored, kCentralStorage, kParameterServer };

// "one_device", "mirrored", ... (what --strategy says).
std::string_view StrategyName(StrategyKind k);

struct CheckpointPolicy {
  std::string dir;  // "" -> no checkpoints
  int64_t every_steps = 0;
  double every_seconds = 0;
  int64_t keep = 3;
  // When every committed checkpoint in `dir` is damaged: false fails with
  // an error naming them; true trains from step 0 instead.
  bool ignore_damaged = false;
  bool enabled() const { return !dir.empty(); }
};

class Strategy {
 public:
  virtual ~Strategy() = default;

  // Its registered name (registry.h), as the summary reports it.
  virtual std::string_view name() const = 0;
  // Replicas whose gradients make up one step (TF's num_replicas_in_sync).
  virtual int64_t num_replicas_in_sync() const = 0;
  // With only a time-based checkpoint cadence, the loop's chunks are at
  // least this many steps (a closure's worth under parameter servers).
  virtual int64_t min_chunk_steps() const { return 1; }
  // This process prints progress, writes checkpoints and evaluates (the
  // chief, or rank 0 of a multi-worker group).
  virtual bool is_chief() const { return true; }

  // Creates the variables or restores them (into `state` too) from the
  // newest checkpoint or, in a group, from the member with the newest state.
  virtual Status Start(TrainState& state) = 0;
  // Trains until state.step == end (never past an epoch boundary).
  virtual Status Run(TrainState& state, int64_t end) = 0;
  // Said before a Run: the chunk after it trains to `next_end` at once,
  // with no checkpoint between them, so a strategy may start that chunk's
  // first work before this Run returns (and must count it in the next
  // Run). Holds for the next Run only.
  virtual void Ahead(int64_t /*next_end*/) {}
  // After Run, Checkpoint or Finish failed with `cause`: OK when training
  // can continue from `state` (which may have moved back to a checkpoint or
  // forward to a group's newest state), else the error to stop with.
  virtual Status Recover(const Status& cause, TrainState& state) = 0;
  // Writes a checkpoint of `state` and the variables when this process is
  // the one that writes them; OK and nothing written otherwise.
  virtual Status Checkpoint(const TrainState& state, bool final) = 0;
  // Training is over: every replica has reached the last step.
  virtual Status Finish(TrainState&) { return Status::Ok(); }
  // The trained values, in the model's variable order.
  virtual StatusOr<std::vector<Tensor>> Values() = 0;
  // Where the chief evaluates the trained values (the device it trained on).
  virtual Device eval_device() const { return Device::Cpu(); }
  // Strategy-specific summary fields (replicas, closures, recovery, ...).
  virtual nlohmann::json SummaryJson() const = 0;
};

}  // namespace tfjob::strategy

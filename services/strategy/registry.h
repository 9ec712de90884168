// The strategies `fit` can train with, by name: each is one StrategyEntry
// (what cluster it needs, where its replicas compute, how it is built), and
// fit (fit.h) builds every one the same way, from the options parsed once
// (FitOptions) and what the process's role lends it (FitContext).
//
// The built-in strategies are added by AddBuiltinStrategies (registry.cc,
// one line each) when the registry is first used. A strategy linked into a
// binary of its own (a test, a program built on the runtime) registers
// itself with one line at namespace scope:
//
//   const tfjob::strategy::StrategyRegistrar kNoop({.name = "noop", .make = MakeNoop});
//
// (a registrar inside a static library is dropped by the linker when
// nothing else in its object file is referenced, hence the explicit list
// for the built-in ones). docs/contributing.md, "Adding a strategy", walks
// through one.
//
// Ownership: the registry owns its entries; Global() lives for the process.
// Thread-safety: Add, Find and Names may run concurrently (one mutex).
// Failure: Add says ALREADY_EXISTS for a name taken; Find says
// INVALID_ARGUMENT in one line listing the registered names; a registrar
// whose Add fails ends the process with that line (a program error found at
// start-up).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "services/model/job_config.h"
#include "services/model/model.h"
#include "services/strategy/devices.h"
#include "services/strategy/fit_options.h"
#include "services/strategy/input.h"
#include "services/strategy/strategy.h"

namespace tfjob::strategy {

// The cluster a strategy trains in.
enum class Topology {
  kOneProcess,        // this process alone (no TF_CONFIG)
  kGroup,             // every chief and worker task trains (a group of one without a cluster)
  kParameterServers,  // the chief of a cluster with "ps" tasks schedules the workers
};

// What a factory builds from; every reference outlives the call only.
struct StrategyArgs {
  const model::JobConfig& job;
  const FitOptions& options;
  const FitContext& context;
  // Where this process's replicas compute (PlanDevices with the entry's
  // placement; the host for DevicePlacement::kOnWorkers).
  const DevicePlan& devices;
  // This process's training examples: the whole set, or this member's shard
  // when `sharded_input` (multi_worker_mirrored over a sharded source).
  const Examples& train;
  bool sharded_input = false;
  // The job's model, adapted on `train` (Normalization's statistics).
  const model::Model& model;
  // Every variable's first value (the model's order); empty: from the seed.
  const std::vector<Tensor>& initial_values;
};

using StrategyFactory = std::function<StatusOr<std::unique_ptr<Strategy>>(const StrategyArgs&)>;

struct StrategyEntry {
  std::string name;  // what --strategy says
  Topology topology = Topology::kOneProcess;
  DevicePlacement placement = DevicePlacement::kOneDevice;
  // --replicas N runs N replicas in this process.
  bool replicas_in_process = false;
  StrategyFactory make;
};

class StrategyRegistry {
 public:
  // The process's registry, the built-in strategies already in it.
  static StrategyRegistry& Global();

  // ALREADY_EXISTS for a name taken; INVALID_ARGUMENT for an empty name or
  // no factory.
  Status Add(StrategyEntry entry) TFJOB_EXCLUDES(mu_);
  // A copy of the entry; INVALID_ARGUMENT "flag --strategy: "x" is not one
  // of one_device, mirrored, ..." (every registered name, in the order they
  // were added) otherwise.
  StatusOr<StrategyEntry> Find(std::string_view name) const TFJOB_EXCLUDES(mu_);
  std::vector<std::string> Names() const TFJOB_EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  std::vector<StrategyEntry> entries_ TFJOB_GUARDED_BY(mu_);
};

// Adds `entry` to the global registry when constructed (at static
// initialization for a namespace-scope object).
class StrategyRegistrar {
 public:
  explicit StrategyRegistrar(StrategyEntry entry);
};

// The built-in entries, each defined beside its strategy (sync.cc,
// parameter_server.cc).
StrategyEntry SyncEntry(StrategyKind kind);
StrategyEntry ParameterServerEntry();

}  // namespace tfjob::strategy

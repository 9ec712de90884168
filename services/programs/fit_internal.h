// What the files of the `fit` program share: its flags, parsed once into a
// typed struct, and the pieces each role uses (fit.cc dispatches, and hands
// the parameter-server strategy, services/strategy/parameter_server.h, its
// part of the flags in fit_ps.cc; fit_evaluator.cc is the side-car
// evaluator).
// Thread-safety: plain values and free functions. Failure: Status values.
#pragma once

#include <chrono>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/flags.h"
#include "common/status.h"
#include "services/collective/communicator.h"
#include "services/model/job_config.h"
#include "services/programs/program.h"
#include "services/strategy/devices.h"
#include "services/strategy/input.h"
#include "services/strategy/sharding.h"
#include "services/strategy/strategy.h"
#include "services/strategy/variable_store.h"
#include "services/worker/worker.h"

namespace tfjob::programs::fit {

struct Parsed {
  Flags flags;
  model::JobConfig job;
  int64_t steps_per_execution = 1;
  std::chrono::milliseconds closure_timeout{300000};
  int closure_max_attempts = 5;
  strategy::Partitioner partitioner;
  // Parameter-server workers: pull the next step's variables while this
  // step computes and push without waiting (bounded staleness of one).
  bool ps_prefetch = true;
  // Parameter-server workers: closures running at once on each (0: auto,
  // PsClosuresPerWorker).
  int ps_closures_per_worker = 0;
  // Parameter-server workers: with a first-layer Embedding, pull only the
  // rows each batch uses (false: the whole table every step).
  bool ps_pull_rows = true;
  strategy::CheckpointPolicy checkpoints;
  std::optional<strategy::StrategyKind> strategy;  // --strategy, when given
  collective::Implementation communication = collective::Implementation::kAuto;
  int replicas = 1;
  bool replicas_given = false;
  strategy::DeviceChoice device = strategy::DeviceChoice::kAuto;
  collective::Options collective;
  bool rejoin_timeout_given = false;
  double eval_poll_seconds = 0.5;
  double eval_timeout_seconds = 0;
  std::chrono::milliseconds shutdown_grace{25000};
};

Flags FitFlags();
StatusOr<Parsed> Parse(const std::vector<std::string>& args);
std::string Usage();
Status WriteSummary(const Flags& flags, const nlohmann::json& j);

// --communication nccl: OK only for multi_worker_mirrored where NCCL can
// serve (built with it, a GPU visible); otherwise an error saying why.
Status CheckCommunication(collective::Implementation impl, strategy::StrategyKind kind);

// The parameter-server strategy (services/strategy/parameter_server.h) over
// the chief's context: claims the cluster (waiting for every PS, fencing
// off an earlier chief), then hands the strategy its part of the flags.
StatusOr<std::unique_ptr<strategy::Strategy>> MakePsStrategy(const Parsed& p, const ChiefContext& ctx,
                                                             const model::Model& m,
                                                             std::vector<Tensor> initial_values = {});

// --export-tfjs and --predict-out: what the chief does with the trained
// model, checked before training (a model TF.js cannot express is bad
// input); an empty function when neither flag is given. It refers to `p`
// and `out`, which must outlive it.
using AfterFitFn = std::function<Status(model::Model&, const std::vector<Tensor>&, const strategy::JobData&)>;
StatusOr<AfterFitFn> AfterFit(const Parsed& p, std::ostream& out);
// --initial-weights: every variable's first value from a TF.js layers model
// directory (one line naming the weight that is missing, extra or of
// another shape); empty without the flag.
StatusOr<std::vector<Tensor>> InitialWeights(const Parsed& p, const model::Model& m);

// The side-car evaluator (fit_evaluator.cc).
int RunEvaluator(const Parsed& p, const EvaluatorContext& ctx);

}  // namespace tfjob::programs::fit

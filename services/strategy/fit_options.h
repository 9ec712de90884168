// What `fit` trains with, in two values: FitOptions, fit's flags parsed once
// (services/programs/fit.cc fills it; the strategies and the loop read it
// as it is), and FitContext, what the process's role lends the run (its
// output, metrics, stop flag, collective group, or the parameter servers'
// cluster).
//
// Ownership: FitOptions is a plain value. FitContext borrows everything it
// points to; the caller keeps it alive for the whole fit. Thread-safety:
// plain values, read by the one thread that drives a fit. Failure: none
// here; the strategies report bad values as INVALID_ARGUMENT naming the flag.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "common/status.h"
#include "services/collective/communicator.h"
#include "services/collective/group.h"
#include "services/monitoring/runtime_metrics.h"
#include "services/model/model.h"
#include "services/strategy/devices.h"
#include "services/strategy/input.h"
#include "services/strategy/ps_cluster.h"
#include "services/strategy/sharding.h"
#include "services/strategy/strategy.h"

namespace tfjob::strategy {

// fit's flags, parsed once. The defaults are what a test's FitOptions{}
// needs (one_device on the host); fit's flags have their own defaults.
struct FitOptions {
  // --strategy: a registered name (registry.h); "" for the role's default
  // (Fit: one_device).
  std::string strategy;
  std::string data_dir;     // --data-dir: where relative data paths resolve
  std::string keras_model;  // --keras-model ("" when the job holds the model)
  int threads = 1;          // --threads: compute threads (parameter-server workers get it too)

  // Where replicas compute (devices.h). The flag's default is auto; the
  // struct's is the host.
  DeviceChoice device = DeviceChoice::kCpu;
  int replicas = 1;             // --replicas: mirrored, central_storage
  bool replicas_given = false;  // --replicas was on the command line

  // Synchronous strategies.
  collective::Implementation communication = collective::Implementation::kAuto;
  collective::Options collective;     // the groups' timeouts and bucket size
  bool rejoin_timeout_given = false;  // --rejoin-timeout-seconds (else the role's connect timeout)

  CheckpointPolicy checkpoints;

  // Parameter-server strategy (parameter_server.h).
  int64_t steps_per_execution = 1;  // training steps per scheduled closure
  std::chrono::milliseconds closure_timeout{300000};
  int closure_max_attempts = 5;
  Partitioner partitioner;
  // Workers pull the next step's variables while this step computes and
  // push without waiting (bounded staleness of one).
  bool ps_prefetch = true;
  // Closures running at once on each worker (0: auto, PsClosuresPerWorker).
  int ps_closures_per_worker = 0;
  // With a first-layer Embedding, pull only the rows each batch uses.
  bool ps_pull_rows = true;

  // After training, on the chief: write the variables as Keras 3 weights
  // here ("" for none).
  std::string export_weights;
  // Every variable's first value from this TF.js layers model directory
  // ("" for the job's seed); a checkpoint to restore still wins.
  std::string initial_weights;

  // The side-car evaluator (services/programs/fit_evaluator.cc).
  double eval_poll_seconds = 0.5;
  double eval_timeout_seconds = 0;
  // After SIGTERM/SIGINT, how long the process may take to stop.
  std::chrono::milliseconds shutdown_grace{25000};
};

// What the chief does with the trained model after training and
// evaluation: the model (adapted), the trained values on the host, the data
// (fit --export-tfjs, --predict-out). Its error is the run's.
using AfterFitFn = std::function<Status(model::Model&, const std::vector<Tensor>&, const JobData&)>;

// What the process's role lends a fit. Every pointer is borrowed and may be
// null unless a strategy says it needs it.
struct FitContext {
  std::ostream* out = nullptr;  // progress lines; nullptr for silence
  runtime_metrics::RuntimeMetrics* metrics = nullptr;
  // When it becomes true (SIGTERM), training stops at the next step or
  // chunk boundary, after a checkpoint (LoopOptions::stop).
  const std::atomic<bool>* stop = nullptr;
  // multi_worker_mirrored: this process's group (a group of one without a
  // cluster).
  collective::Group* group = nullptr;
  // parameter_server (the chief of a cluster with "ps" tasks): claims the
  // cluster (waits for every PS, fences off an earlier chief). Called once,
  // after every input check, by the strategy that needs it.
  std::function<StatusOr<PsCluster>()> claim_ps_cluster;
  // Called on the chief after training and evaluation; empty for nothing.
  AfterFitFn after_fit;
};

}  // namespace tfjob::strategy

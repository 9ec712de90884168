// TensorFlow's ParameterServerStrategy (asynchronous), the chief's side:
// variables live on PS tasks, each scheduled closure runs
// steps_per_execution steps on one worker (ps_worker.h: pull, gradients,
// push with the closure id), and the chief merges the closures' loss and
// metrics. The training loop itself is loop.h; this is the Strategy it
// drives.
//
// How the chief survives the loss of any task:
//  - a worker: the coordinator re-queues its closures (exactly once per shard);
//  - a parameter server: its restart (new incarnation) fails the closures
//    that touch it; Join reports that, and the chief claims the PS again,
//    restores every PS from the latest good checkpoint and carries on;
//  - the chief: the restarted chief fences the previous one off (a newer
//    generation), restores the latest checkpoint and continues to the
//    requested length; the PS tasks and workers it finds kept running.
// A PS that stops answering is waited for at most ps_timeout, saying which;
// then the chief restores it or fails naming it.
// The loop's chunks end at checkpoint boundaries and each is joined before a
// checkpoint, so a checkpoint is a consistent cut at a known step and at
// most one checkpoint interval of progress is ever lost. Without
// checkpoints (Strategy::Ahead) the next chunk's first closures are queued
// behind a chunk's, and Run waits only for its own, so workers do not idle
// while the chief reports an epoch.
//
// Ownership: the strategy owns its options, clients and coordinator; `out`,
// `signals` and `metrics` are borrowed and must outlive it. Thread-safety:
// driven by one thread (Strategy's contract). Failure: Status values.
#pragma once

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "common/signals.h"
#include "common/status.h"
#include "services/coordinator/coordinator.h"
#include "services/metrics/runtime_metrics.h"
#include "services/model/job_config.h"
#include "services/model/model.h"
#include "services/ps/ps_client.h"
#include "services/rpc/auth.h"
#include "services/strategy/sharding.h"
#include "services/strategy/strategy.h"

namespace tfjob::strategy {

// What the strategy is asked to train (fit's flags, parsed).
struct PsOptions {
  model::JobConfig job;         // job.source is read again to send the workers the job
  std::string data_dir;         // where the workers find the job's data
  int threads = 1;              // compute threads per worker
  std::string device = "auto";  // the workers' --device
  std::string keras_model;      // a Keras model JSON file ("": the job holds the model)
  Partitioner partitioner;
  bool ps_prefetch = true;   // workers pull the next step while this one computes
  bool ps_pull_rows = true;  // a first-layer Embedding pulls only the batch's rows
  int64_t steps_per_execution = 1;
  CheckpointPolicy checkpoints;
  // Every variable's first value (the model's order); empty: from the job's
  // seed.
  std::vector<Tensor> initial_values;
};

// The chief's claim on the parameter servers (fencing off earlier chiefs).
struct PsClaim {
  uint64_t generation = 0;
  uint32_t closure_namespace = 0;
  uint64_t previous = 0;  // the generation fenced off; 0 for the job's first chief
};

// The cluster it trains on, already claimed.
struct PsCluster {
  std::vector<std::string> ps_addresses;               // by PS index
  std::vector<std::string> worker_addresses;           // by worker index
  std::vector<std::shared_ptr<ps::PsClient>> clients;  // by PS index, patient for ps_timeout
  PsClaim claim;
  coordinator::Options coordinator;  // with the claim's generation and namespace
  rpc::Credentials credentials;      // the job's task token
  std::chrono::milliseconds ps_timeout{30000};
  std::ostream* out = nullptr;                         // progress lines (required)
  SignalWatcher* signals = nullptr;                    // a stop drains and checkpoints; may be null
  runtime_metrics::RuntimeMetrics* metrics = nullptr;  // may be null
};

StatusOr<std::unique_ptr<Strategy>> MakeParameterServerStrategy(PsOptions options, PsCluster cluster,
                                                                const model::Model& m);

// Closures running at once on each worker (coordinator::Options::
// inflight_per_worker) unless fit's --ps-closures-per-worker says: 3 for
// closures of one step, 2 for longer ones. A closure of one step ends by
// waiting for its push to land (and the next step's pull with it), a round
// trip to the PS its own compute cannot overlap, so a third step loop keeps
// the worker's cores busy meanwhile. A longer closure overlaps each step's
// exchange with the next step's compute (prefetching), and there a third
// loop only adds staleness: with 2 workers at steps/exec 4 every one of 15
// runs had an epoch whose accuracy fell by over 0.02, against 8 of 15 with
// 2 (docs/parameter-server.md, "A third closure at steps/exec 1").
int PsClosuresPerWorker(int64_t steps_per_execution);

}  // namespace tfjob::strategy

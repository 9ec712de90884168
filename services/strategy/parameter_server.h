// TensorFlow's ParameterServerStrategy (asynchronous), the chief's side:
// variables live on PS tasks, each scheduled closure runs
// steps_per_execution steps on one worker (ps_closures.h: pull, gradients,
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

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "services/model/job_config.h"
#include "services/model/model.h"
#include "services/strategy/fit_options.h"
#include "services/strategy/ps_cluster.h"
#include "services/strategy/sharding.h"
#include "services/strategy/strategy.h"

namespace tfjob::strategy {

// The strategy for `job` under fit's options (the parameter-server ones,
// checkpoints, and what the workers are sent: data_dir, threads, device,
// keras_model) on a cluster already claimed; `m` is the model, adapted on
// the training data. `initial_values` (the model's order): every
// variable's first value; empty: from the job's seed.
StatusOr<std::unique_ptr<Strategy>> MakeParameterServerStrategy(const model::JobConfig& job, const FitOptions& options,
                                                                std::vector<Tensor> initial_values, PsCluster cluster,
                                                                const model::Model& m);

// Closures running at once on each worker (coordinator::Options::
// inflight_per_worker) unless fit's --ps-closures-per-worker says: three in
// the whole cluster for closures of one step, two for longer ones, spread
// over the `workers`, at least one each (TensorFlow's one per worker from
// two workers on). A closure of one step ends by waiting for its push to
// land (and the next step's pull with it), a round trip to the PS its own
// compute cannot overlap, so with one worker a third step loop keeps its
// cores busy meanwhile. Every loop running anywhere is also an update that
// a step's pulled values miss, and with Adam the final model's accuracy
// spreads with that count: MNIST's MLP, 2 workers at steps/exec 1, three
// running on each: 0.919 to 0.954 over 100 runs (CI once saw 0.8815); one
// each: 0.941 to 0.9505 over 50, at 4 % fewer examples/s
// (docs/parameter-server.md, "Closures running per worker").
int PsClosuresPerWorker(int64_t steps_per_execution, size_t workers);

}  // namespace tfjob::strategy

// ParameterServerStrategy, the workers' side: the training dataset (each
// worker its shard of the input, shuffled its own way, as per-worker
// datasets are in TensorFlow) and the closure the chief schedules: pull the
// variables (only the batch's rows of a first-layer Embedding), compute the
// gradients (on the worker's device), push them with the closure's id, a
// few steps per closure. With prefetching, the next step's pull (with the
// last step's push) is sent before this step computes and its answer read
// after, by the closure's own thread (staleness of one update of this
// worker). The dataset function also makes what the first closures would:
// a model per closure in flight, value buffers, and connections to every
// PS (best effort).
//
// Thread-safety: the registered functions run concurrently; their shared
// state is behind one mutex. Failure: a closure's error is its result (the
// coordinator re-runs it elsewhere or fails the job); every push of a
// closure has landed before it reports success, so a worker killed at any
// point loses no update.
#pragma once

#include "common/status.h"
#include "services/worker/worker.h"

namespace tfjob::strategy {

Status RegisterParameterServerClosures(worker::Registry& r);

}  // namespace tfjob::strategy

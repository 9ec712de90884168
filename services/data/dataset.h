// tf.data-style input pipelines: a Dataset is an immutable description of a
// sequence of elements; an Iterator walks one pass over it.
//
// Ownership: a Dataset is a value handle sharing an immutable node graph
// (shared_ptr), so copies are cheap and a transformation never changes its
// input. An Iterator owns its own cursor state and keeps the nodes it reads
// alive, so it may outlive every Dataset handle it came from. Elements share
// tensor buffers with their source where possible (FromTensors slices are
// views); callers that write into an element's tensors must Clone() first.
//
// Thread-safety: a Dataset may be shared and used from any number of threads;
// each thread makes its own Iterator. An Iterator is single-consumer and not
// thread-safe. Functions passed to Map run on whichever thread calls Next()
// (the background thread under Prefetch), concurrently when several iterators
// are live, so they must be thread-safe and must not throw (a thrown exception
// is caught and reported as INTERNAL).
//
// Failure behaviour: transformations never fail eagerly. An invalid argument
// yields a Dataset whose status() is the error; every further transformation
// propagates it and MakeIterator() returns it. Errors met while iterating
// (a Map function failing, a ragged Batch) are returned by Next(); like
// tf.data, such an error consumes the element that caused it and the iterator
// may be called again to continue with the following elements. Take and Shard
// count an error as occupying that element's position (so Shard delivers it
// only to the shard owning that position).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "common/status.h"
#include "services/tensor/tensor.h"

namespace tfjob::data {

using Element = std::vector<Tensor>;  // e.g. {features, label}

inline constexpr int64_t kInfiniteCardinality = -1;
inline constexpr int64_t kUnknownCardinality = -2;

class Iterator {
 public:
  virtual ~Iterator() = default;
  // The next element, std::nullopt at end of sequence (and on every later
  // call), or an error (bad data, a failing Map function).
  virtual StatusOr<std::optional<Element>> Next() = 0;
};

class DatasetImpl;

class Dataset {
 public:
  // Slices every component along axis 0; all components need rank >= 1 and
  // the same dim 0. Element i holds views of row i (no copy).
  static Dataset FromTensors(std::vector<Tensor> components);
  // A dataset that is only an error; `s` must not be OK (an OK status becomes
  // INTERNAL, since it signals a caller bug).
  static Dataset FromError(Status s);

  const Status& status() const { return status_; }
  StatusOr<std::unique_ptr<Iterator>> MakeIterator() const;
  // Number of elements if known statically; kInfiniteCardinality or
  // kUnknownCardinality otherwise (also kUnknownCardinality for an error).
  int64_t Cardinality() const;

  // Applies `fn` to every element; an error from `fn` is returned by Next().
  Dataset Map(std::function<StatusOr<Element>(Element)> fn) const;
  // tf.data's shuffle: keeps a buffer of `buffer_size` (>= 1) elements and
  // emits a random one of them. The order is a function of `seed` alone; with
  // reshuffle_each_iteration the k-th iterator made from this dataset (the
  // k-th epoch, also under Repeat) uses seed combined with k, otherwise every
  // iterator repeats the first order.
  Dataset Shuffle(int64_t buffer_size, uint64_t seed, bool reshuffle_each_iteration = true) const;
  // Stacks `batch_size` (>= 1) consecutive elements component-wise into a new
  // leading axis. The final short batch is kept unless drop_remainder.
  // Elements of one batch must agree in component count, dtypes and shapes.
  Dataset Batch(int64_t batch_size, bool drop_remainder = false) const;
  // Repeats the input `count` (>= 0) times, or forever for -1; each pass uses
  // a fresh inner iterator. Forever over an empty input ends immediately.
  Dataset Repeat(int64_t count = -1) const;
  // The first `count` (>= 0) elements, or all of them for -1.
  Dataset Take(int64_t count) const;
  // A background thread keeps up to `buffer_size` (>= 1) elements ready.
  // Destroying the iterator stops and joins that thread (after the upstream
  // Next() call in progress, if any, returns). Upstream errors are delivered
  // in order, interleaved with elements as they occurred.
  Dataset Prefetch(int64_t buffer_size) const;
  // Elements whose position k satisfies k % num_shards == index (tf.data's
  // shard); requires num_shards >= 1 and 0 <= index < num_shards.
  Dataset Shard(int64_t num_shards, int64_t index) const;

 private:
  explicit Dataset(std::shared_ptr<const DatasetImpl> impl);
  explicit Dataset(Status error);
  // Shared by transformations: propagate our error, else build the node
  // over this one with `make` (a factory of services/data/dataset_node.h).
  template <typename... Params, typename... Args>
  Dataset Derive(StatusOr<std::shared_ptr<const DatasetImpl>> (*make)(std::shared_ptr<const DatasetImpl>, Params...),
                 Args&&... args) const;

  std::shared_ptr<const DatasetImpl> impl_;  // null iff !status_.ok()
  Status status_;
};

}  // namespace tfjob::data

// The dataset graph's node contract, shared by the files that implement
// nodes (internal to services/data; dataset.h is the public interface):
// dataset.cc (the FromTensors source and the Dataset handle),
// transformations.cc (Map, Shuffle, Batch, Repeat, Take, Shard) and
// prefetch.cc (the background-thread iterator).
//
// Ownership: nodes are shared (NodePtr) between Dataset handles and the
// iterators made from them. Thread-safety: a node is immutable once built,
// so any thread may make iterators from it. Failure behaviour: each Make*
// factory returns INVALID_ARGUMENT for an argument dataset.h rules out and
// never fails otherwise.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "services/data/dataset.h"

namespace tfjob::data {

// A node of the dataset graph. Nodes are immutable once built (the shuffle
// epoch counter is the one deliberate exception and is atomic), which is what
// makes a Dataset safe to share between threads.
class DatasetImpl : public std::enable_shared_from_this<DatasetImpl> {
 public:
  virtual ~DatasetImpl() = default;
  virtual StatusOr<std::unique_ptr<Iterator>> MakeIterator() const = 0;
  virtual int64_t Cardinality() const = 0;
};

namespace internal {

using NodePtr = std::shared_ptr<const DatasetImpl>;
using NextResult = StatusOr<std::optional<Element>>;
using MapFn = std::function<StatusOr<Element>(Element)>;

inline std::string Str(int64_t v) { return std::to_string(v); }

// Iterators hold their node by shared_ptr so they stay valid after every
// Dataset handle is gone.
template <typename Node>
std::shared_ptr<const Node> Self(const Node* node) {
  return std::static_pointer_cast<const Node>(node->shared_from_this());
}

// An iterator whose elements are rows of fixed tensors: FromTensors, and
// Shuffle over it, which only choose rows. Batch asks such an input for row
// numbers and copies each row straight into the batch (when every component
// is on the host), so no element is built per row, and gives exactly the
// batch that stacking the elements would.
class RowIterator : public Iterator {
 public:
  // The tensors every element is row i of.
  virtual const std::vector<Tensor>& components() const = 0;
  // The next element's row, std::nullopt at the end (and after it).
  virtual std::optional<int64_t> NextRow() = 0;
  // The element of NextRow's row: views of that row of each component.
  NextResult Next() final;
};

// The transformations' nodes over `input`, with the arguments of the
// Dataset method of the same name (dataset.h says what each accepts).
StatusOr<NodePtr> MakeMapNode(NodePtr input, MapFn fn);
StatusOr<NodePtr> MakeShuffleNode(NodePtr input, int64_t buffer_size, uint64_t seed, bool reshuffle);
StatusOr<NodePtr> MakeBatchNode(NodePtr input, int64_t batch_size, bool drop_remainder);
StatusOr<NodePtr> MakeRepeatNode(NodePtr input, int64_t count);
StatusOr<NodePtr> MakeTakeNode(NodePtr input, int64_t count);
StatusOr<NodePtr> MakeShardNode(NodePtr input, int64_t num_shards, int64_t index);
StatusOr<NodePtr> MakePrefetchNode(NodePtr input, int64_t buffer_size);

}  // namespace internal
}  // namespace tfjob::data

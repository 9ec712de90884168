// The Dataset handle (dataset.h) and its one in-memory source, FromTensors;
// the transformations' nodes live in transformations.cc and prefetch.cc.
#include "services/data/dataset.h"

#include <string>
#include <utility>

#include "services/data/dataset_node.h"

namespace tfjob::data {

using internal::NextResult;
using internal::NodePtr;
using internal::RowIterator;
using internal::Self;
using internal::Str;

namespace {

// ---------------------------------------------------------------- FromTensors

class FromTensorsNode final : public DatasetImpl {
 public:
  explicit FromTensorsNode(std::vector<Tensor> components)
      : components_(std::move(components)), rows_(components_.front().dim(0)) {}

  static StatusOr<NodePtr> Make(std::vector<Tensor> components) {
    if (components.empty()) return InvalidArgument("FromTensors: no components");
    for (size_t i = 0; i < components.size(); ++i) {
      const Tensor& c = components[i];
      if (c.rank() < 1) {
        return InvalidArgument("FromTensors: component " + std::to_string(i) + " is a scalar (" + c.DebugString() +
                               "); components need rank >= 1");
      }
      if (c.dim(0) != components[0].dim(0)) {
        return InvalidArgument("FromTensors: component " + std::to_string(i) + " has " + Str(c.dim(0)) + " rows (" +
                               c.DebugString() + "), component 0 has " + Str(components[0].dim(0)) + " (" +
                               components[0].DebugString() + ")");
      }
    }
    return NodePtr(std::make_shared<FromTensorsNode>(std::move(components)));
  }

  StatusOr<std::unique_ptr<Iterator>> MakeIterator() const override;
  int64_t Cardinality() const override { return rows_; }

  const std::vector<Tensor>& components() const { return components_; }
  int64_t rows() const { return rows_; }

 private:
  std::vector<Tensor> components_;
  int64_t rows_;
};

class FromTensorsIterator final : public RowIterator {
 public:
  explicit FromTensorsIterator(std::shared_ptr<const FromTensorsNode> node) : node_(std::move(node)) {}

  const std::vector<Tensor>& components() const override { return node_->components(); }
  std::optional<int64_t> NextRow() override {
    if (next_ >= node_->rows()) return std::nullopt;
    return next_++;
  }

 private:
  std::shared_ptr<const FromTensorsNode> node_;
  int64_t next_ = 0;
};

StatusOr<std::unique_ptr<Iterator>> FromTensorsNode::MakeIterator() const {
  return std::unique_ptr<Iterator>(std::make_unique<FromTensorsIterator>(Self(this)));
}

}  // namespace

NextResult internal::RowIterator::Next() {
  const std::optional<int64_t> row = NextRow();
  if (!row) return std::nullopt;
  Element e;
  e.reserve(components().size());
  for (const Tensor& c : components()) {
    // Rows + Reshape are views, so an element never copies its source.
    ASSIGN_OR_RETURN(Tensor r, c.Rows(*row, *row + 1));
    ASSIGN_OR_RETURN(Tensor item, r.Reshape(Shape(c.shape().begin() + 1, c.shape().end())));
    e.push_back(std::move(item));
  }
  return e;
}

// -------------------------------------------------------------------- Dataset

Dataset::Dataset(std::shared_ptr<const DatasetImpl> impl) : impl_(std::move(impl)) {}

Dataset::Dataset(Status error) : status_(std::move(error)) {
  if (status_.ok()) status_ = Internal("Dataset::FromError called with an OK status");
}

template <typename... Params, typename... Args>
Dataset Dataset::Derive(StatusOr<std::shared_ptr<const DatasetImpl>> (*make)(std::shared_ptr<const DatasetImpl>,
                                                                             Params...),
                        Args&&... args) const {
  if (!status_.ok()) return *this;
  StatusOr<NodePtr> node = make(impl_, std::forward<Args>(args)...);
  if (!node.ok()) return Dataset(node.status());
  return Dataset(std::move(node).value());
}

Dataset Dataset::FromTensors(std::vector<Tensor> components) {
  StatusOr<NodePtr> node = FromTensorsNode::Make(std::move(components));
  if (!node.ok()) return Dataset(node.status());
  return Dataset(std::move(node).value());
}

Dataset Dataset::FromError(Status s) { return Dataset(std::move(s)); }

StatusOr<std::unique_ptr<Iterator>> Dataset::MakeIterator() const {
  if (!status_.ok()) return status_;
  return impl_->MakeIterator();
}

int64_t Dataset::Cardinality() const { return status_.ok() ? impl_->Cardinality() : kUnknownCardinality; }

Dataset Dataset::Map(std::function<StatusOr<Element>(Element)> fn) const {
  return Derive(internal::MakeMapNode, std::move(fn));
}

Dataset Dataset::Shuffle(int64_t buffer_size, uint64_t seed, bool reshuffle_each_iteration) const {
  return Derive(internal::MakeShuffleNode, buffer_size, seed, reshuffle_each_iteration);
}

Dataset Dataset::Batch(int64_t batch_size, bool drop_remainder) const {
  return Derive(internal::MakeBatchNode, batch_size, drop_remainder);
}

Dataset Dataset::Repeat(int64_t count) const { return Derive(internal::MakeRepeatNode, count); }

Dataset Dataset::Take(int64_t count) const { return Derive(internal::MakeTakeNode, count); }

Dataset Dataset::Prefetch(int64_t buffer_size) const { return Derive(internal::MakePrefetchNode, buffer_size); }

Dataset Dataset::Shard(int64_t num_shards, int64_t index) const {
  return Derive(internal::MakeShardNode, num_shards, index);
}

}  // namespace tfjob::data

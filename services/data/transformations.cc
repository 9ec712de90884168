// The synchronous transformations of the dataset graph (dataset.h documents
// their semantics): each node and the iterator that walks it. They run on the
// thread that calls Next(); prefetch.cc holds the one that does not.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <limits>
#include <random>
#include <string>
#include <utility>

#include "services/data/dataset_node.h"
#include "services/tensor/ops.h"

namespace tfjob::data::internal {
namespace {

// ------------------------------------------------------------------------ Map

class MapNode final : public DatasetImpl {
 public:
  MapNode(NodePtr input, MapFn fn) : input_(std::move(input)), fn_(std::move(fn)) {}

  static StatusOr<NodePtr> Make(NodePtr input, MapFn fn) {
    if (!fn) return InvalidArgument("map: the function is empty");
    return NodePtr(std::make_shared<MapNode>(std::move(input), std::move(fn)));
  }

  StatusOr<std::unique_ptr<Iterator>> MakeIterator() const override;
  int64_t Cardinality() const override { return input_->Cardinality(); }

  const MapFn& fn() const { return fn_; }
  const NodePtr& input() const { return input_; }

 private:
  NodePtr input_;
  MapFn fn_;
};

class MapIterator final : public Iterator {
 public:
  MapIterator(std::shared_ptr<const MapNode> node, std::unique_ptr<Iterator> input)
      : node_(std::move(node)), input_(std::move(input)) {}

  NextResult Next() override {
    ASSIGN_OR_RETURN(std::optional<Element> in, input_->Next());
    if (!in) return std::nullopt;
    // User code must not unwind through the pipeline (it may be running on a
    // prefetch thread, where an exception would terminate the process).
    try {
      StatusOr<Element> out = node_->fn()(std::move(*in));
      if (!out.ok()) return out.status();
      return std::move(out).value();
    } catch (const std::exception& ex) {
      return Internal(std::string("map: the function threw: ") + ex.what());
    } catch (...) {
      return Internal("map: the function threw a non-standard exception");
    }
  }

 private:
  std::shared_ptr<const MapNode> node_;
  std::unique_ptr<Iterator> input_;
};

StatusOr<std::unique_ptr<Iterator>> MapNode::MakeIterator() const {
  ASSIGN_OR_RETURN(std::unique_ptr<Iterator> in, input_->MakeIterator());
  return std::unique_ptr<Iterator>(std::make_unique<MapIterator>(Self(this), std::move(in)));
}

// -------------------------------------------------------------------- Shuffle

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

class ShuffleNode final : public DatasetImpl {
 public:
  ShuffleNode(NodePtr input, int64_t buffer_size, uint64_t seed, bool reshuffle)
      : input_(std::move(input)), buffer_size_(buffer_size), seed_(seed), reshuffle_(reshuffle) {}

  static StatusOr<NodePtr> Make(NodePtr input, int64_t buffer_size, uint64_t seed, bool reshuffle) {
    if (buffer_size < 1) return InvalidArgument("shuffle: buffer_size " + Str(buffer_size) + " must be >= 1");
    return NodePtr(std::make_shared<ShuffleNode>(std::move(input), buffer_size, seed, reshuffle));
  }

  StatusOr<std::unique_ptr<Iterator>> MakeIterator() const override;
  int64_t Cardinality() const override { return input_->Cardinality(); }

 private:
  NodePtr input_;
  int64_t buffer_size_;
  uint64_t seed_;
  bool reshuffle_;
  // Counts iterators so each epoch gets its own order; the only mutable
  // state in a node, hence atomic.
  mutable std::atomic<uint64_t> epochs_{0};
};

// tf.data's shuffle buffer over items of type T (elements, or row numbers
// of a RowIterator): filled in input order up to its size, then each draw
// takes a uniformly random item and refills from the input. Both kinds draw
// the same sequence from the same seed, so a row-number shuffle gives the
// elements' shuffle exactly.
template <typename T>
class ShuffleBuffer {
 public:
  ShuffleBuffer(int64_t size, uint64_t rng_seed) : size_(size), rng_(rng_seed) {}

  // `pull` returns the input's next item, std::nullopt at its end.
  template <typename Pull>
  StatusOr<std::optional<T>> Draw(Pull&& pull) {
    while (!input_done_ && static_cast<int64_t>(buffer_.size()) < size_) {
      ASSIGN_OR_RETURN(std::optional<T> item, pull());
      if (!item) {
        input_done_ = true;
        break;
      }
      buffer_.push_back(std::move(*item));
    }
    if (buffer_.empty()) return std::optional<T>();
    // mt19937_64 is specified bit-for-bit by the standard, unlike the
    // distributions, so the order is the same with every standard library.
    // The modulo bias of a 64-bit draw is negligible for any buffer size.
    size_t i = static_cast<size_t>(rng_() % buffer_.size());
    T out = std::move(buffer_[i]);
    if (i + 1 != buffer_.size()) buffer_[i] = std::move(buffer_.back());
    buffer_.pop_back();
    return std::optional<T>(std::move(out));
  }
  bool input_done() const { return input_done_; }

 private:
  int64_t size_;
  std::mt19937_64 rng_;
  std::vector<T> buffer_;
  bool input_done_ = false;
};

class ShuffleIterator final : public Iterator {
 public:
  ShuffleIterator(std::unique_ptr<Iterator> input, int64_t buffer_size, uint64_t rng_seed)
      : input_(std::move(input)), buffer_(buffer_size, rng_seed) {}

  NextResult Next() override {
    NextResult drawn = buffer_.Draw([this] { return input_->Next(); });
    // Releases upstream resources (e.g. prefetch threads) early.
    if (buffer_.input_done()) input_.reset();
    return drawn;
  }

 private:
  std::unique_ptr<Iterator> input_;
  ShuffleBuffer<Element> buffer_;
};

// Shuffle over a RowIterator: shuffles row numbers, and is one itself.
class RowShuffleIterator final : public RowIterator {
 public:
  RowShuffleIterator(std::unique_ptr<RowIterator> input, int64_t buffer_size, uint64_t rng_seed)
      : input_(std::move(input)), buffer_(buffer_size, rng_seed) {}

  const std::vector<Tensor>& components() const override { return input_->components(); }
  std::optional<int64_t> NextRow() override {
    // Drawing rows cannot fail: the pull never returns an error.
    auto drawn = buffer_.Draw([this]() -> StatusOr<std::optional<int64_t>> { return input_->NextRow(); });
    return drawn.ok() ? *drawn : std::nullopt;
  }

 private:
  std::unique_ptr<RowIterator> input_;
  ShuffleBuffer<int64_t> buffer_;
};

StatusOr<std::unique_ptr<Iterator>> ShuffleNode::MakeIterator() const {
  uint64_t epoch = reshuffle_ ? epochs_.fetch_add(1, std::memory_order_relaxed) : 0;
  ASSIGN_OR_RETURN(std::unique_ptr<Iterator> in, input_->MakeIterator());
  uint64_t rng_seed = SplitMix64(seed_ ^ SplitMix64(epoch));
  if (auto* rows = dynamic_cast<RowIterator*>(in.get())) {
    in.release();
    return std::unique_ptr<Iterator>(
        std::make_unique<RowShuffleIterator>(std::unique_ptr<RowIterator>(rows), buffer_size_, rng_seed));
  }
  return std::unique_ptr<Iterator>(std::make_unique<ShuffleIterator>(std::move(in), buffer_size_, rng_seed));
}

// ---------------------------------------------------------------------- Batch

class BatchNode final : public DatasetImpl {
 public:
  BatchNode(NodePtr input, int64_t batch_size, bool drop_remainder)
      : input_(std::move(input)), batch_size_(batch_size), drop_remainder_(drop_remainder) {}

  static StatusOr<NodePtr> Make(NodePtr input, int64_t batch_size, bool drop_remainder) {
    if (batch_size < 1) return InvalidArgument("batch: batch_size " + Str(batch_size) + " must be >= 1");
    return NodePtr(std::make_shared<BatchNode>(std::move(input), batch_size, drop_remainder));
  }

  StatusOr<std::unique_ptr<Iterator>> MakeIterator() const override;

  int64_t Cardinality() const override {
    int64_t n = input_->Cardinality();
    if (n < 0) return n;
    return drop_remainder_ ? n / batch_size_ : n / batch_size_ + (n % batch_size_ != 0 ? 1 : 0);
  }

 private:
  NodePtr input_;
  int64_t batch_size_;
  bool drop_remainder_;
};

class BatchIterator final : public Iterator {
 public:
  BatchIterator(std::unique_ptr<Iterator> input, int64_t batch_size, bool drop_remainder)
      : input_(std::move(input)), batch_size_(batch_size), drop_remainder_(drop_remainder) {
    rows_ = dynamic_cast<RowIterator*>(input_.get());
    if (rows_) {
      for (const Tensor& c : rows_->components()) {
        if (!c.on_cpu()) rows_ = nullptr;
      }
    }
  }

  NextResult Next() override {
    if (input_done_) return std::nullopt;
    if (rows_) return NextOfRows();
    std::vector<Element> parts;
    while (static_cast<int64_t>(parts.size()) < batch_size_) {
      // On an upstream error the partial batch is dropped, as tf.data does:
      // a batch mixing elements from before and after the error has no
      // meaningful position.
      ASSIGN_OR_RETURN(std::optional<Element> e, input_->Next());
      if (!e) {
        input_done_ = true;
        input_.reset();
        break;
      }
      parts.push_back(std::move(*e));
    }
    if (parts.empty()) return std::nullopt;
    if (drop_remainder_ && static_cast<int64_t>(parts.size()) < batch_size_) return std::nullopt;
    return Stack(parts);
  }

 private:
  static NextResult Stack(const std::vector<Element>& parts) {
    const Element& first = parts.front();
    for (size_t i = 1; i < parts.size(); ++i) {
      if (parts[i].size() != first.size()) {
        return InvalidArgument("batch: element " + std::to_string(i) + " of the batch has " +
                               std::to_string(parts[i].size()) + " components, element 0 has " +
                               std::to_string(first.size()));
      }
      for (size_t c = 0; c < first.size(); ++c) {
        const Tensor& t = parts[i][c];
        if (t.dtype() != first[c].dtype() || t.shape() != first[c].shape()) {
          return InvalidArgument("batch: component " + std::to_string(c) + " of element " + std::to_string(i) +
                                 " of the batch is " + t.DebugString() + ", element 0 has " + first[c].DebugString());
        }
      }
    }
    Element out;
    out.reserve(first.size());
    std::vector<Tensor> column(parts.size());
    for (size_t c = 0; c < first.size(); ++c) {
      for (size_t i = 0; i < parts.size(); ++i) column[i] = parts[i][c];
      StatusOr<Tensor> stacked = ops::Stack(column);
      if (!stacked.ok()) return stacked.status().WithContext("batch: component " + std::to_string(c));
      out.push_back(std::move(stacked).value());
    }
    return out;
  }

  // The batch of the next rows, each copied from its component straight
  // into the batch's tensors: what stacking their elements gives.
  NextResult NextOfRows() {
    std::vector<int64_t> picked;
    picked.reserve(static_cast<size_t>(batch_size_));
    while (static_cast<int64_t>(picked.size()) < batch_size_) {
      const std::optional<int64_t> row = rows_->NextRow();
      if (!row) {
        input_done_ = true;
        break;
      }
      picked.push_back(*row);
    }
    if (picked.empty()) return std::nullopt;
    if (drop_remainder_ && static_cast<int64_t>(picked.size()) < batch_size_) return std::nullopt;
    Element out;
    out.reserve(rows_->components().size());
    for (const Tensor& c : rows_->components()) {
      Shape shape = c.shape();
      shape[0] = static_cast<int64_t>(picked.size());
      ASSIGN_OR_RETURN(Tensor batch, Tensor::CreateUninitialized(c.dtype(), shape));
      const size_t row_bytes = c.dim(0) == 0 ? 0 : c.bytes() / static_cast<size_t>(c.dim(0));
      // The rows are scattered through a table larger than the caches: each
      // row's lines are requested a few rows ahead of its copy, so the
      // loads of several rows are in flight at once rather than one row's
      // latency after another's.
      constexpr size_t kAhead = 4, kLine = 64;
      auto prefetch_row = [&](size_t i) {
        const char* from = reinterpret_cast<const char*>(c.raw()) + static_cast<size_t>(picked[i]) * row_bytes;
        for (size_t b = 0; b < row_bytes; b += kLine) __builtin_prefetch(from + b);
      };
      for (size_t i = 0; i < std::min(kAhead, picked.size()); ++i) prefetch_row(i);
      for (size_t i = 0; i < picked.size(); ++i) {
        if (i + kAhead < picked.size()) prefetch_row(i + kAhead);
        std::memcpy(batch.raw() + i * row_bytes, c.raw() + static_cast<size_t>(picked[i]) * row_bytes, row_bytes);
      }
      out.push_back(std::move(batch));
    }
    if (input_done_) {
      rows_ = nullptr;
      input_.reset();
    }
    return out;
  }

  std::unique_ptr<Iterator> input_;
  RowIterator* rows_ = nullptr;  // input_, when it is one whose rows are on the host
  int64_t batch_size_;
  bool drop_remainder_;
  bool input_done_ = false;
};

StatusOr<std::unique_ptr<Iterator>> BatchNode::MakeIterator() const {
  ASSIGN_OR_RETURN(std::unique_ptr<Iterator> in, input_->MakeIterator());
  return std::unique_ptr<Iterator>(std::make_unique<BatchIterator>(std::move(in), batch_size_, drop_remainder_));
}

// --------------------------------------------------------------------- Repeat

class RepeatNode final : public DatasetImpl {
 public:
  RepeatNode(NodePtr input, int64_t count) : input_(std::move(input)), count_(count) {}

  static StatusOr<NodePtr> Make(NodePtr input, int64_t count) {
    if (count < -1) return InvalidArgument("repeat: count " + Str(count) + " must be >= 0, or -1 for forever");
    return NodePtr(std::make_shared<RepeatNode>(std::move(input), count));
  }

  StatusOr<std::unique_ptr<Iterator>> MakeIterator() const override;

  int64_t Cardinality() const override {
    if (count_ == 0) return 0;
    int64_t n = input_->Cardinality();
    if (n == 0) return 0;
    if (n < 0) return n;
    if (count_ == -1) return kInfiniteCardinality;
    if (n > std::numeric_limits<int64_t>::max() / count_) return kUnknownCardinality;
    return n * count_;
  }

  const NodePtr& input() const { return input_; }
  int64_t count() const { return count_; }

 private:
  NodePtr input_;
  int64_t count_;
};

class RepeatIterator final : public Iterator {
 public:
  explicit RepeatIterator(std::shared_ptr<const RepeatNode> node) : node_(std::move(node)) {}

  NextResult Next() override {
    while (!done_) {
      if (!inner_) {
        if (node_->count() >= 0 && pass_ >= node_->count()) break;
        ASSIGN_OR_RETURN(inner_, node_->input()->MakeIterator());
        pass_active_ = false;
      }
      NextResult r = inner_->Next();
      if (!r.ok() || r->has_value()) {
        pass_active_ = true;
        return r;
      }
      inner_.reset();
      ++pass_;
      // A pass that yielded nothing will yield nothing again; repeating it
      // forever would spin without producing anything.
      if (!pass_active_ && node_->count() < 0) break;
    }
    done_ = true;
    return std::nullopt;
  }

 private:
  std::shared_ptr<const RepeatNode> node_;
  std::unique_ptr<Iterator> inner_;
  int64_t pass_ = 0;
  bool pass_active_ = false;
  bool done_ = false;
};

StatusOr<std::unique_ptr<Iterator>> RepeatNode::MakeIterator() const {
  return std::unique_ptr<Iterator>(std::make_unique<RepeatIterator>(Self(this)));
}

// ----------------------------------------------------------------------- Take

class TakeNode final : public DatasetImpl {
 public:
  TakeNode(NodePtr input, int64_t count) : input_(std::move(input)), count_(count) {}

  static StatusOr<NodePtr> Make(NodePtr input, int64_t count) {
    if (count < -1) return InvalidArgument("take: count " + Str(count) + " must be >= 0, or -1 for all");
    return NodePtr(std::make_shared<TakeNode>(std::move(input), count));
  }

  StatusOr<std::unique_ptr<Iterator>> MakeIterator() const override;

  int64_t Cardinality() const override {
    int64_t n = input_->Cardinality();
    if (count_ == -1) return n;
    if (n == kUnknownCardinality) return n;
    if (n == kInfiniteCardinality) return count_;
    return std::min(n, count_);
  }

 private:
  NodePtr input_;
  int64_t count_;
};

class TakeIterator final : public Iterator {
 public:
  TakeIterator(std::unique_ptr<Iterator> input, int64_t count) : input_(std::move(input)), count_(count) {}

  NextResult Next() override {
    if (!input_) return std::nullopt;
    if (count_ >= 0 && taken_ >= count_) {
      input_.reset();  // stops upstream work (e.g. a prefetch thread) we no longer need
      return std::nullopt;
    }
    NextResult r = input_->Next();
    if (r.ok() && !r->has_value()) {
      input_.reset();
      return r;
    }
    // An error stands in for the element it replaced, so it uses up a slot.
    ++taken_;
    return r;
  }

 private:
  std::unique_ptr<Iterator> input_;
  int64_t count_;
  int64_t taken_ = 0;
};

StatusOr<std::unique_ptr<Iterator>> TakeNode::MakeIterator() const {
  if (count_ == 0) return std::unique_ptr<Iterator>(std::make_unique<TakeIterator>(nullptr, 0));
  ASSIGN_OR_RETURN(std::unique_ptr<Iterator> in, input_->MakeIterator());
  return std::unique_ptr<Iterator>(std::make_unique<TakeIterator>(std::move(in), count_));
}

// ---------------------------------------------------------------------- Shard

class ShardNode final : public DatasetImpl {
 public:
  ShardNode(NodePtr input, int64_t num_shards, int64_t index)
      : input_(std::move(input)), num_shards_(num_shards), index_(index) {}

  static StatusOr<NodePtr> Make(NodePtr input, int64_t num_shards, int64_t index) {
    if (num_shards < 1) return InvalidArgument("shard: num_shards " + Str(num_shards) + " must be >= 1");
    if (index < 0 || index >= num_shards) {
      return InvalidArgument("shard: index " + Str(index) + " is outside [0, " + Str(num_shards) + ")");
    }
    return NodePtr(std::make_shared<ShardNode>(std::move(input), num_shards, index));
  }

  StatusOr<std::unique_ptr<Iterator>> MakeIterator() const override;

  int64_t Cardinality() const override {
    int64_t n = input_->Cardinality();
    if (n < 0) return n;
    return n / num_shards_ + (index_ < n % num_shards_ ? 1 : 0);
  }

 private:
  NodePtr input_;
  int64_t num_shards_;
  int64_t index_;
};

class ShardIterator final : public Iterator {
 public:
  ShardIterator(std::unique_ptr<Iterator> input, int64_t num_shards, int64_t index)
      : input_(std::move(input)), num_shards_(num_shards), index_(index) {}

  NextResult Next() override {
    while (input_) {
      // An error keeps the position of the element it replaced, so every
      // shard sees the same numbering whatever fails upstream and the error
      // surfaces in exactly one shard (as the element would have).
      bool wanted = position_ % num_shards_ == index_;
      NextResult r = input_->Next();
      if (r.ok() && !r->has_value()) {
        input_.reset();
        break;
      }
      ++position_;
      if (wanted) return r;
    }
    return std::nullopt;
  }

 private:
  std::unique_ptr<Iterator> input_;
  int64_t num_shards_;
  int64_t index_;
  int64_t position_ = 0;
};

StatusOr<std::unique_ptr<Iterator>> ShardNode::MakeIterator() const {
  ASSIGN_OR_RETURN(std::unique_ptr<Iterator> in, input_->MakeIterator());
  return std::unique_ptr<Iterator>(std::make_unique<ShardIterator>(std::move(in), num_shards_, index_));
}

}  // namespace

StatusOr<NodePtr> MakeMapNode(NodePtr input, MapFn fn) { return MapNode::Make(std::move(input), std::move(fn)); }

StatusOr<NodePtr> MakeShuffleNode(NodePtr input, int64_t buffer_size, uint64_t seed, bool reshuffle) {
  return ShuffleNode::Make(std::move(input), buffer_size, seed, reshuffle);
}

StatusOr<NodePtr> MakeBatchNode(NodePtr input, int64_t batch_size, bool drop_remainder) {
  return BatchNode::Make(std::move(input), batch_size, drop_remainder);
}

StatusOr<NodePtr> MakeRepeatNode(NodePtr input, int64_t count) { return RepeatNode::Make(std::move(input), count); }

StatusOr<NodePtr> MakeTakeNode(NodePtr input, int64_t count) { return TakeNode::Make(std::move(input), count); }

StatusOr<NodePtr> MakeShardNode(NodePtr input, int64_t num_shards, int64_t index) {
  return ShardNode::Make(std::move(input), num_shards, index);
}

}  // namespace tfjob::data::internal

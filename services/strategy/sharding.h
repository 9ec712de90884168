// Variable placement for parameter-server training, as TensorFlow's
// ParameterServerStrategy does it: variables go to PS tasks round-robin in
// creation order; a partitioner may split a variable along axis 0 into
// shards, laid out TF's "div" way (the first rows % k shards get one extra
// row), each shard placed round-robin in turn.
//
// Partitioner formulas (TF's):
//   FixedShards(n)        k = min(n, rows)
//   MinSize(min_bytes, max_shards)
//                         k = max(1, min(rows, max_shards, ceil(bytes / min_bytes)))
//   MaxSize(max_bytes, max_shards)
//                         per_shard = max(1, floor(max_bytes / bytes_per_row));
//                         k = ceil(rows / per_shard), then min(k, max_shards) if set
// Pure functions and plain values; thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "services/tensor/tensor.h"

namespace tfjob::strategy {

struct Partitioner {
  enum class Kind { kNone, kFixedShards, kMinSize, kMaxSize };
  Kind kind = Kind::kNone;
  int64_t num_shards = 1;               // FixedShards
  int64_t min_shard_bytes = 256 << 10;  // MinSize
  int64_t max_shard_bytes = 0;          // MaxSize
  int64_t max_shards = 1;               // MinSize (default 1); MaxSize: 0 means unlimited

  static Partitioner None() { return {}; }
  static Partitioner FixedShards(int64_t n) { return {Kind::kFixedShards, n, 256 << 10, 0, 1}; }
  static Partitioner MinSize(int64_t min_shard_bytes = 256 << 10, int64_t max_shards = 1) {
    return {Kind::kMinSize, 1, min_shard_bytes, 0, max_shards};
  }
  static Partitioner MaxSize(int64_t max_shard_bytes, int64_t max_shards = 0) {
    return {Kind::kMaxSize, 1, 256 << 10, max_shard_bytes, max_shards};
  }

  // Number of shards along axis 0 for a variable of this shape and dtype.
  StatusOr<int64_t> NumShards(const Shape& shape, DType dtype) const;
};

// "none", "fixed:N", "min:BYTES[:MAX_SHARDS]", "max:BYTES[:MAX_SHARDS]".
StatusOr<Partitioner> ParsePartitioner(const std::string& text);
std::string PartitionerString(const Partitioner& p);

// Row counts per shard in TF's "div" layout.
std::vector<int64_t> DivRows(int64_t rows, int64_t shards);

struct ShardInfo {
  std::string name;  // "var" when unsharded, else "var/part_i"
  int64_t ps = 0;    // PS task index
  int64_t row_begin = 0;
  int64_t row_end = 0;  // exclusive
  Shape shape;
};

struct PlacedVariable {
  std::string name;
  Shape shape;
  DType dtype = DType::kFloat32;
  std::vector<ShardInfo> shards;
  bool sharded() const { return shards.size() > 1; }
};

// Places variables in order; `partitioner` applies to every variable of rank
// >= 1 (scalars are never sharded). Deterministic: the chief and every worker
// compute the same placement from the same inputs.
class Placement {
 public:
  Placement(int64_t num_ps, Partitioner partitioner) : num_ps_(num_ps), partitioner_(partitioner) {}

  StatusOr<const PlacedVariable*> Add(const std::string& name, const Shape& shape, DType dtype = DType::kFloat32);
  const std::deque<PlacedVariable>& variables() const { return vars_; }
  StatusOr<const PlacedVariable*> Find(const std::string& name) const;
  int64_t num_ps() const { return num_ps_; }

 private:
  int64_t num_ps_;
  Partitioner partitioner_;
  int64_t next_ps_ = 0;
  std::deque<PlacedVariable> vars_;  // deque: pointers returned by Add stay valid
};

}  // namespace tfjob::strategy

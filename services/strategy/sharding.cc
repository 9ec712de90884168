#include "services/strategy/sharding.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace tfjob::strategy {

StatusOr<int64_t> Partitioner::NumShards(const Shape& shape, DType dtype) const {
  if (shape.empty()) return int64_t{1};
  const int64_t rows = shape[0];
  if (rows <= 0) return int64_t{1};
  const double bytes = static_cast<double>(NumElements(shape)) * static_cast<double>(DTypeSize(dtype));
  switch (kind) {
    case Kind::kNone: return int64_t{1};
    case Kind::kFixedShards:
      if (num_shards < 1) return InvalidArgument("FixedShards: num_shards must be >= 1");
      return std::min(num_shards, rows);
    case Kind::kMinSize: {
      if (min_shard_bytes < 1 || max_shards < 1) {
        return InvalidArgument("MinSize: min_shard_bytes and max_shards must be >= 1");
      }
      const int64_t want = static_cast<int64_t>(std::ceil(bytes / static_cast<double>(min_shard_bytes)));
      return std::max<int64_t>(1, std::min({rows, max_shards, want}));
    }
    case Kind::kMaxSize: {
      if (max_shard_bytes < 1) return InvalidArgument("MaxSize: max_shard_bytes must be >= 1");
      if (max_shards < 0) return InvalidArgument("MaxSize: max_shards must be >= 0");
      const double bytes_per_row = bytes / static_cast<double>(rows);
      const double per_shard = std::max(1.0, std::floor(static_cast<double>(max_shard_bytes) / bytes_per_row));
      int64_t k = static_cast<int64_t>(std::ceil(static_cast<double>(rows) / per_shard));
      if (max_shards > 0) k = std::min(k, max_shards);
      return k;
    }
  }
  return int64_t{1};
}

StatusOr<Partitioner> ParsePartitioner(const std::string& text) {
  std::vector<int64_t> nums;
  const auto colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  std::string rest = colon == std::string::npos ? "" : text.substr(colon + 1);
  while (!rest.empty()) {
    const auto next = rest.find(':');
    const std::string item = rest.substr(0, next);
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1) {
      return InvalidArgument("partitioner \"" + text + "\": \"" + item + "\" is not a positive integer");
    }
    nums.push_back(v);
    rest = next == std::string::npos ? "" : rest.substr(next + 1);
  }
  const std::string usage = " (use none, fixed:N, min:BYTES[:MAX_SHARDS] or max:BYTES[:MAX_SHARDS])";
  if (kind == "none" && nums.empty()) return Partitioner::None();
  if (kind == "fixed" && nums.size() == 1) return Partitioner::FixedShards(nums[0]);
  if (kind == "min" && (nums.size() == 1 || nums.size() == 2))
    return Partitioner::MinSize(nums[0], nums.size() == 2 ? nums[1] : 1);
  if (kind == "max" && (nums.size() == 1 || nums.size() == 2))
    return Partitioner::MaxSize(nums[0], nums.size() == 2 ? nums[1] : 0);
  return InvalidArgument("bad partitioner \"" + text + "\"" + usage);
}

std::string PartitionerString(const Partitioner& p) {
  // Appends rather than operator+ chains: GCC 12 misreports those (-Wrestrict).
  std::string s;
  switch (p.kind) {
    case Partitioner::Kind::kNone: return "none";
    case Partitioner::Kind::kFixedShards:
      s = "fixed:";
      s += std::to_string(p.num_shards);
      return s;
    case Partitioner::Kind::kMinSize:
      s = "min:";
      s += std::to_string(p.min_shard_bytes);
      s += ':';
      s += std::to_string(p.max_shards);
      return s;
    case Partitioner::Kind::kMaxSize:
      s = "max:";
      s += std::to_string(p.max_shard_bytes);
      if (p.max_shards > 0) {
        s += ':';
        s += std::to_string(p.max_shards);
      }
      return s;
  }
  return "none";
}

std::vector<int64_t> DivRows(int64_t rows, int64_t shards) {
  std::vector<int64_t> out(static_cast<size_t>(shards), rows / shards);
  for (int64_t i = 0; i < rows % shards; ++i) out[static_cast<size_t>(i)] += 1;
  return out;
}

StatusOr<const PlacedVariable*> Placement::Add(const std::string& name, const Shape& shape, DType dtype) {
  if (num_ps_ < 1) return FailedPrecondition("no parameter servers to place \"" + name + "\" on");
  for (const auto& v : vars_) {
    if (v.name == name) return AlreadyExists("variable \"" + name + "\" is already placed");
  }
  if (NumElements(shape) < 0) return InvalidArgument("variable \"" + name + "\": invalid shape " + ShapeString(shape));
  ASSIGN_OR_RETURN(int64_t k, partitioner_.NumShards(shape, dtype));
  PlacedVariable v{name, shape, dtype, {}};
  const int64_t rows = shape.empty() ? 1 : shape[0];
  int64_t begin = 0;
  std::vector<int64_t> split = k > 1 ? DivRows(rows, k) : std::vector<int64_t>{rows};
  for (size_t i = 0; i < split.size(); ++i) {
    ShardInfo s;
    s.name = k > 1 ? name + "/part_" + std::to_string(i) : name;
    s.ps = next_ps_;
    next_ps_ = (next_ps_ + 1) % num_ps_;
    s.row_begin = begin;
    s.row_end = begin + split[i];
    s.shape = shape;
    if (!shape.empty()) s.shape[0] = split[i];
    begin = s.row_end;
    v.shards.push_back(std::move(s));
  }
  vars_.push_back(std::move(v));
  return &vars_.back();
}

StatusOr<const PlacedVariable*> Placement::Find(const std::string& name) const {
  for (const auto& v : vars_) {
    if (v.name == name) return &v;
  }
  return NotFound("no variable \"" + name + "\"");
}

}  // namespace tfjob::strategy

#include "services/data/example.h"

#include "proto/example.pb.h"

namespace tfjob::data {
namespace {

std::string_view ListName(tensorflow::Feature::KindCase k) {
  switch (k) {
    case tensorflow::Feature::kBytesList: return "bytes_list";
    case tensorflow::Feature::kFloatList: return "float_list";
    case tensorflow::Feature::kInt64List: return "int64_list";
    default: return "empty feature";
  }
}

tensorflow::Feature::KindCase KindOf(FeatureType t) {
  switch (t) {
    case FeatureType::kFloat32: return tensorflow::Feature::kFloatList;
    case FeatureType::kInt64: return tensorflow::Feature::kInt64List;
    case FeatureType::kString: return tensorflow::Feature::kBytesList;
  }
  return tensorflow::Feature::KIND_NOT_SET;
}

int64_t Count(const tensorflow::Feature& f) {
  switch (f.kind_case()) {
    case tensorflow::Feature::kBytesList: return f.bytes_list().value_size();
    case tensorflow::Feature::kFloatList: return f.float_list().value_size();
    case tensorflow::Feature::kInt64List: return f.int64_list().value_size();
    default: return 0;
  }
}

void Append(const tensorflow::Feature& f, Column& c) {
  switch (c.type) {
    case FeatureType::kFloat32:
      c.floats.insert(c.floats.end(), f.float_list().value().begin(), f.float_list().value().end());
      break;
    case FeatureType::kInt64:
      c.ints.insert(c.ints.end(), f.int64_list().value().begin(), f.int64_list().value().end());
      break;
    case FeatureType::kString:
      c.strings.insert(c.strings.end(), f.bytes_list().value().begin(), f.bytes_list().value().end());
      break;
  }
}

void AppendDefault(const FeatureSpec& s, Column& c, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    switch (c.type) {
      case FeatureType::kFloat32: c.floats.push_back(static_cast<float>(s.default_number)); break;
      case FeatureType::kInt64: c.ints.push_back(static_cast<int64_t>(s.default_number)); break;
      case FeatureType::kString: c.strings.push_back(s.default_string); break;
    }
  }
}

}  // namespace

std::string_view FeatureTypeName(FeatureType t) {
  switch (t) {
    case FeatureType::kFloat32: return "float32";
    case FeatureType::kInt64: return "int64";
    case FeatureType::kString: return "string";
  }
  return "?";
}

ExampleDecoder::ExampleDecoder(std::vector<FeatureSpec> specs) : specs_(std::move(specs)) {
  for (const auto& s : specs_) {
    Column c;
    c.type = s.type;
    c.shape = s.shape;
    columns_.push_back(std::move(c));
  }
  lengths_.resize(specs_.size());
}

Status ExampleDecoder::Add(std::string_view record, const std::string& where) {
  tensorflow::Example ex;
  if (!ex.ParseFromArray(record.data(), static_cast<int>(record.size()))) {
    return InvalidArgument(where + ": not a tf.Example (the protobuf does not parse)");
  }
  const auto& features = ex.features().feature();
  // Checked in full before any column grows, so a bad record adds nothing.
  std::vector<const tensorflow::Feature*> found(specs_.size(), nullptr);
  for (size_t i = 0; i < specs_.size(); ++i) {
    const FeatureSpec& s = specs_[i];
    auto it = features.find(s.name);
    const std::string feature = "feature \"" + s.name + "\"";
    if (it == features.end() || it->second.kind_case() == tensorflow::Feature::KIND_NOT_SET) {
      if (s.var_len || s.has_default) continue;
      return InvalidArgument(where + ": " + feature + " is missing (give it a default_value, or make it var_len)");
    }
    const tensorflow::Feature& f = it->second;
    if (f.kind_case() != KindOf(s.type)) {
      return InvalidArgument(where + ": " + feature + " is a " + std::string(ListName(f.kind_case())) +
                             ", the spec says " + std::string(FeatureTypeName(s.type)) + " (" +
                             std::string(ListName(KindOf(s.type))) + ")");
    }
    const int64_t n = Count(f);
    if (!s.var_len && n != NumElements(s.shape)) {
      return InvalidArgument(where + ": " + feature + " has " + std::to_string(n) + " values, its shape " +
                             ShapeString(s.shape) + " needs " + std::to_string(NumElements(s.shape)));
    }
    if (s.var_len && s.max_length >= 0 && n > s.max_length) {
      return InvalidArgument(where + ": " + feature + " has " + std::to_string(n) +
                             " values, more than its max_length " + std::to_string(s.max_length));
    }
    found[i] = &f;
  }
  for (size_t i = 0; i < specs_.size(); ++i) {
    const FeatureSpec& s = specs_[i];
    Column& c = columns_[i];
    if (found[i]) {
      Append(*found[i], c);
    } else if (!s.var_len) {
      AppendDefault(s, c, NumElements(s.shape));
    }
    if (s.var_len) lengths_[i].push_back(found[i] ? Count(*found[i]) : 0);
    ++c.rows;
  }
  ++rows_;
  return Status::Ok();
}

std::vector<Column> ExampleDecoder::Finish() && {
  for (size_t i = 0; i < specs_.size(); ++i) {
    const FeatureSpec& s = specs_[i];
    if (!s.var_len) continue;
    Column& c = columns_[i];
    int64_t width = s.max_length;
    if (width < 0) {
      width = 0;
      for (int64_t n : lengths_[i]) width = std::max(width, n);
    }
    Column padded;
    padded.type = c.type;
    padded.shape = {width};
    padded.rows = c.rows;
    int64_t at = 0;
    for (int64_t n : lengths_[i]) {
      switch (c.type) {
        case FeatureType::kFloat32:
          padded.floats.insert(padded.floats.end(), c.floats.begin() + at, c.floats.begin() + at + n);
          break;
        case FeatureType::kInt64:
          padded.ints.insert(padded.ints.end(), c.ints.begin() + at, c.ints.begin() + at + n);
          break;
        case FeatureType::kString:
          padded.strings.insert(padded.strings.end(), c.strings.begin() + at, c.strings.begin() + at + n);
          break;
      }
      AppendDefault(s, padded, width - n);
      at += n;
    }
    c = std::move(padded);
  }
  return std::move(columns_);
}

StatusOr<AutoShardPolicy> ParseAutoShardPolicy(std::string_view name) {
  if (name == "AUTO") return AutoShardPolicy::kAuto;
  if (name == "FILE") return AutoShardPolicy::kFile;
  if (name == "DATA") return AutoShardPolicy::kData;
  if (name == "OFF") return AutoShardPolicy::kOff;
  return InvalidArgument("unknown auto_shard_policy \"" + std::string(name) + "\" (known: AUTO, FILE, DATA, OFF)");
}

StatusOr<ShardPlan> PlanShard(const std::vector<std::string>& files, AutoShardPolicy policy, int64_t num_shards,
                              int64_t index) {
  if (num_shards < 1 || index < 0 || index >= num_shards) {
    return InvalidArgument("shard " + std::to_string(index) + " of " + std::to_string(num_shards) + " does not exist");
  }
  ShardPlan plan;
  if (num_shards == 1 || policy == AutoShardPolicy::kOff) {
    plan.files = files;
    return plan;
  }
  const int64_t n = static_cast<int64_t>(files.size());
  if (policy == AutoShardPolicy::kFile && n < num_shards) {
    return InvalidArgument("auto_shard_policy FILE: " + std::to_string(n) + " files cannot be split among " +
                           std::to_string(num_shards) + " workers (use DATA or AUTO, or write more files)");
  }
  if (policy == AutoShardPolicy::kFile || (policy == AutoShardPolicy::kAuto && n >= num_shards)) {
    for (int64_t i = index; i < n; i += num_shards) plan.files.push_back(files[static_cast<size_t>(i)]);
    plan.applied = AutoShardPolicy::kFile;
    return plan;
  }
  plan.files = files;
  plan.record_stride = num_shards;
  plan.record_offset = index;
  plan.applied = AutoShardPolicy::kData;
  return plan;
}

StatusOr<std::vector<Column>> ReadExamples(const ShardPlan& plan, Compression compression,
                                           const std::vector<FeatureSpec>& specs) {
  ExampleDecoder decoder(specs);
  int64_t position = 0;  // across the files, for DATA sharding
  for (const std::string& path : plan.files) {
    ASSIGN_OR_RETURN(std::unique_ptr<TfRecordReader> reader, TfRecordReader::Open(path, compression));
    for (int64_t record = 0;; ++record, ++position) {
      const uint64_t offset = reader->offset();
      ASSIGN_OR_RETURN(std::optional<std::string> data, reader->Next());
      if (!data) break;
      if (position % plan.record_stride != plan.record_offset) continue;
      RETURN_IF_ERROR(
          decoder.Add(*data, path + ": record " + std::to_string(record) + " at offset " + std::to_string(offset)));
    }
  }
  return std::move(decoder).Finish();
}

std::string EncodeExample(const std::vector<std::pair<std::string, Column>>& features) {
  tensorflow::Example ex;
  auto& map = *ex.mutable_features()->mutable_feature();
  for (const auto& [name, c] : features) {
    tensorflow::Feature& f = map[name];
    switch (c.type) {
      case FeatureType::kFloat32:
        for (float v : c.floats) f.mutable_float_list()->add_value(v);
        break;
      case FeatureType::kInt64:
        for (int64_t v : c.ints) f.mutable_int64_list()->add_value(v);
        break;
      case FeatureType::kString:
        for (const auto& v : c.strings) f.mutable_bytes_list()->add_value(v);
        break;
    }
  }
  return ex.SerializeAsString();
}

}  // namespace tfjob::data

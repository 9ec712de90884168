// tf.Example records (proto/example.proto, TensorFlow's schema) decoded
// with a feature spec, as tf.io.parse_example does with FixedLenFeature and
// VarLenFeature, into one column per feature; and TFRecord sources sharded
// the way tf.data's AutoShardPolicy shards a multi-worker input.
//
// Ownership: results are returned by value. Thread-safety: reentrant; a
// decoder is used by one thread. Failure: INVALID_ARGUMENT naming the file,
// record, offset and feature ("a.tfrecord: record 3 at offset 2412: feature
// \"image\" is an int64_list, the spec says float32"); reading errors are the
// TFRecord reader's (DATA_LOSS, NOT_FOUND).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "services/data/tfrecord.h"
#include "services/tensor/tensor.h"

namespace tfjob::data {

enum class FeatureType { kFloat32, kInt64, kString };  // float_list, int64_list, bytes_list

struct FeatureSpec {
  FeatureSpec() = default;
  FeatureSpec(std::string name, FeatureType type, bool var_len = false, Shape shape = {}, int64_t max_length = -1)
      : name(std::move(name)), type(type), var_len(var_len), shape(std::move(shape)), max_length(max_length) {}

  std::string name;
  FeatureType type = FeatureType::kFloat32;
  // FixedLenFeature: exactly NumElements(shape) values per record ([] is
  // one). VarLenFeature: any number, padded with the default value to
  // max_length (-1: the longest record's length).
  bool var_len = false;
  Shape shape;
  int64_t max_length = -1;
  // A fixed feature's value when a record lacks it (every element), and
  // the padding of a var-length one. Without one, a missing fixed feature
  // is an error; var-length features pad with 0 or "".
  bool has_default = false;
  double default_number = 0;
  std::string default_string;
};

std::string_view FeatureTypeName(FeatureType t);  // "float32", "int64", "string"

// One feature over every record, row-major; shape is per record.
struct Column {
  FeatureType type = FeatureType::kFloat32;
  Shape shape;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  int64_t rows = 0;
};

class ExampleDecoder {
 public:
  explicit ExampleDecoder(std::vector<FeatureSpec> specs);
  // Decodes one serialized tf.Example; `where` names it in errors.
  Status Add(std::string_view record, const std::string& where);
  int64_t rows() const { return rows_; }
  // The columns in spec order, var-length ones padded.
  std::vector<Column> Finish() &&;

 private:
  std::vector<FeatureSpec> specs_;
  std::vector<Column> columns_;
  std::vector<std::vector<int64_t>> lengths_;  // var-length features: values per record
  int64_t rows_ = 0;
};

// tf.data.experimental.AutoShardPolicy.
enum class AutoShardPolicy { kAuto, kFile, kData, kOff };
StatusOr<AutoShardPolicy> ParseAutoShardPolicy(std::string_view name);  // AUTO, FILE, DATA, OFF

// What shard `index` of `num_shards` reads: FILE gives it files index,
// index + n, ... (an error when there are fewer files than shards); DATA
// every file, keeping records index, index + n, ... of their concatenation;
// AUTO is FILE when there are at least as many files as shards, else DATA;
// OFF (or one shard) everything.
struct ShardPlan {
  std::vector<std::string> files;
  int64_t record_stride = 1;  // keep record k when k % stride == offset
  int64_t record_offset = 0;
  AutoShardPolicy applied = AutoShardPolicy::kOff;
};
StatusOr<ShardPlan> PlanShard(const std::vector<std::string>& files, AutoShardPolicy policy, int64_t num_shards,
                              int64_t index);

// Reads the records of `plan` from TFRecord files and decodes them.
StatusOr<std::vector<Column>> ReadExamples(const ShardPlan& plan, Compression compression,
                                           const std::vector<FeatureSpec>& specs);

// Serializes a tf.Example holding every value of each column as one
// feature (for tests and tools).
std::string EncodeExample(const std::vector<std::pair<std::string, Column>>& features);

}  // namespace tfjob::data

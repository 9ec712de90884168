// The JSON job description (Keras-Sequential-like) shared by single-process
// and distributed `fit`: model layers, loss, optimizer, metrics, data, batch
// size, epochs, seed. Parsed once into typed structs; every error names the
// file and the field ("mlp.json: optimizer.learning_rate: must be > 0") and
// unknown fields are rejected, so a typo never silently becomes a default.
//
// Example:
//   {"name": "mnist-mlp", "seed": 1,
//    "model": {"input_shape": [28, 28], "layers": [
//        {"type": "Flatten"}, {"type": "Dense", "units": 128, "activation": "relu"},
//        {"type": "Dense", "units": 10, "activation": "softmax"}]},
//    "loss": "sparse_categorical_crossentropy",
//    "optimizer": {"type": "Adam", "learning_rate": 0.001},
//    "metrics": ["accuracy"],
//    "data": {"train": {"source": "mnist", "images": "t10k-images-idx3-ubyte.gz",
//                       "labels": "t10k-labels-idx1-ubyte.gz", "begin": 0, "end": 8000},
//             "eval": {...}},
//    "batch_size": 64, "epochs": 5}
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "services/model/spec.h"

namespace tfjob::model {

enum class DataSourceKind { kMnist, kCsv, kSynthetic, kTfRecord };

// A tf.Example feature of a tfrecord source: tf.io.FixedLenFeature (shape,
// default_value) or VarLenFeature (var_len; padded to max_length, or the
// longest record, with default_value).
struct ExampleFeatureSpec {
  std::string field;  // "data.train.features[0]", for messages
  std::string name;
  std::string dtype;  // "float32" (float_list), "int64" (int64_list), "string" (bytes_list)
  Shape shape;        // fixed length: per example; [] is one value
  bool var_len = false;
  int64_t max_length = -1;
  bool has_default = false;
  double default_number = 0;
  std::string default_string;
};

struct DataSourceSpec {
  DataSourceKind kind = DataSourceKind::kSynthetic;
  std::string field;  // "data.train", for messages
  // mnist: IDX files, relative paths resolved against --data-dir
  std::string images, labels;
  // Rows [begin, end) of the source (end -1: to the end), for every kind.
  int64_t begin = 0, end = -1;
  // csv
  std::string path;
  std::string delimiter = ",";
  bool header = true;
  int64_t label_column = -1;  // -1: last column
  // csv: the feature columns by header name or index (default: all but
  // the label); label_name: the label column by name
  std::vector<std::string> feature_columns;
  std::string label_name;
  // tfrecord: files (relative to --data-dir), their compression ("", GZIP,
  // ZLIB), the features making up the model's input (several are flattened
  // and concatenated), the label, and how multi-worker training shards the
  // files (tf.data's AutoShardPolicy: AUTO, FILE, DATA, OFF)
  std::vector<std::string> files;
  std::string compression;
  std::vector<ExampleFeatureSpec> features;
  ExampleFeatureSpec label;
  std::string auto_shard_policy = "AUTO";
  // Any source: labels go through this lookup first (a StringLookup for
  // string labels, as the seeds' label_lookup_layer; or an IntegerLookup).
  std::optional<LayerSpec> label_lookup;
  // synthetic (Gaussian blobs)
  int64_t num_examples = 1000;
  Shape feature_shape{16};
  int64_t num_classes = 2;
  int64_t seed = 0;
  double noise = 0.5;
};

struct DataSpec {
  DataSourceSpec train;
  std::optional<DataSourceSpec> eval;
  bool shuffle = true;
  int64_t shuffle_buffer = 0;  // 0: the whole training set
};

struct JobConfig {
  std::string source;  // file the config came from
  std::string name = "job";
  int64_t seed = 0;
  ModelSpec model;
  LossSpec loss;
  OptimizerSpec optimizer;
  std::vector<MetricType> metrics;
  // As written in the job ("accuracy"), parallel to `metrics`: Keras names a
  // metric by the string it was asked for.
  std::vector<std::string> metric_names;
  DataSpec data;
  int64_t batch_size = 32;
  int64_t epochs = 1;
  int64_t steps_per_epoch = -1;  // -1: one pass over the training data
};

// With `model` (a Keras model JSON, fit --keras-model), the job gives
// everything but the model and must not have a "model" field.
StatusOr<JobConfig> ParseJobConfig(const nlohmann::json& doc, const std::string& source,
                                   const ModelSpec* model = nullptr);
StatusOr<JobConfig> LoadJobConfig(const std::string& path, const ModelSpec* model = nullptr);

}  // namespace tfjob::model

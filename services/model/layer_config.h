// The job JSON of the layers beyond Dense, Embedding, Activation and Flatten
// (job_config.cc parses those and calls here for the rest). Field names
// follow Keras' constructor arguments:
//
//   Conv2D                  filters, kernel_size (n or [h, w]), strides (1),
//                           padding ("valid" | "same"), activation, use_bias
//   MaxPooling2D,           pool_size (2), strides (pool_size), padding
//   AveragePooling2D
//   GlobalAveragePooling2D  keepdims (false)
//   Dropout                 rate, seed (0)
//   BatchNormalization      axis (-1, the last), momentum (0.99), epsilon (0.001),
//                           center, scale (true)
//   Reshape                 target_shape
//   Normalization           axis (-1, or null for one scalar mean and
//                           variance), mean, variance (a number or a list;
//                           both or neither: neither adapts to the training
//                           data), invert
//   StringLookup,           vocabulary (a list, or a file of one term per
//   IntegerLookup           line, relative to the job file), num_oov_indices
//                           (1), mask_token (null), oov_token ("[UNK]" / -1),
//                           invert
//
// Thread-safety: reentrant. Failure: INVALID_ARGUMENT naming the field;
// NOT_FOUND for a vocabulary file that is missing.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/json_reader.h"
#include "common/status.h"
#include "services/model/job_config.h"
#include "services/model/spec.h"

namespace tfjob::model {

// Fills `s` for layer `type` from `j` (read through `r`, which the caller
// finishes), `base` with the default name's stem ("conv2d") and
// `activation` with Conv2D's, as written. Returns false when `type` is none
// of these layers. `dir` is the job file's directory, for vocabulary files.
StatusOr<bool> ParseMoreLayers(const std::string& type, const nlohmann::json& j, JsonReader& r, const std::string& dir,
                               LayerSpec& s, std::string& base, std::string& activation);

// Every layer type a job may name, for messages.
std::string KnownLayerTypes();

// The tfrecord source's fields (files, compression, features, label,
// auto_shard_policy), read through `r`.
Status ParseTfRecordSource(const nlohmann::json& j, JsonReader& r, DataSourceSpec& s);
// What any source may add: csv's feature_columns and a label_column given
// by name (`j`'s raw label_column), and label_lookup (a StringLookup or
// IntegerLookup layer; vocabulary files relative to `dir`).
Status ParseSourceExtras(const nlohmann::json& j, JsonReader& r, const std::string& dir, DataSourceSpec& s);

// Keras' padding names.
StatusOr<Padding> ParsePadding(const std::string& name, const std::string& field);

}  // namespace tfjob::model

// Keras model JSON: what `model.to_json()` (or TensorFlow.js' toJSON())
// writes for a Sequential or a Functional model (keras_functional.cc), read
// into a ModelSpec. Both forms are accepted:
//
//   Keras 3   {"module": "keras", "class_name": "Sequential", "config":
//             {"layers": [{"module": "keras.layers", "class_name": "Conv2D",
//             "config": {...}, "registered_name": null, "build_config":
//             {...}}, ...]}, ...}; the input from the InputLayer's
//             "batch_shape" (or "build_input_shape"), dtypes as DTypePolicy
//             objects or names
//   Keras 2   {"class_name": "Sequential", "config": {"name": ...,
//             "layers": [...]}, "keras_version": "2.x", ...} (or "config" as
//             the list of layers, as Keras 2.2 wrote it); the input from the
//             InputLayer's or the first layer's "batch_input_shape"
//
// Layers: those of this file (Dense, Conv2D, ..., the merge layers) and of
// keras_layers.cc; docs/models-and-data.md lists them with their arguments.
// Every argument in a layer's config is either read, or checked to hold the
// value this runtime implements (channels_last, trainable, ...); anything
// else is an error naming the layer and the argument, so a model never
// trains as something other than what its JSON says.
//
// Thread-safety: reentrant. Failure: INVALID_ARGUMENT starting with the
// source ("model.json: layers[3] (ConvLSTM2D \"c\"): unsupported layer ...");
// NOT_FOUND for a missing file.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "services/model/spec.h"

namespace tfjob::model {

StatusOr<ModelSpec> ParseKerasModel(const nlohmann::json& doc, const std::string& source);
StatusOr<ModelSpec> LoadKerasModel(const std::string& path);

// Keras' snake_case of a class name ("MaxPooling2D" -> "max_pooling2d"),
// as keras.src.utils.naming.to_snake_case computes it.
std::string KerasSnakeCase(const std::string& class_name);

}  // namespace tfjob::model

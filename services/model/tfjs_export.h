// Trained models out to TensorFlow.js, and back in: the layers format that
// tf.LayersModel.save writes and tf.loadLayersModel reads (TF.js 4.22):
//
//   DIR/model.json            {"format": "layers-model", "generatedBy":
//                             "tfjob-runtime <version>", "convertedBy": null,
//                             "modelTopology": <Keras 2-form model JSON>,
//                             "weightsManifest": [{"paths":
//                             ["group1-shard1of1.bin"], "weights": [{"name":
//                             "dense/kernel", "shape": [784, 128], "dtype":
//                             "float32"}, ...]}]}
//   DIR/group1-shard1of1.bin  the weights' values, little-endian float32,
//                             concatenated in the manifest's order
//
// Weights are named as TF.js names a layer's variables, "<layer>/<weight>"
// (dense/kernel, batch_normalization/moving_mean, embedding/embeddings),
// which is how the runtime names them too; TF.js matches them to the
// topology's layers by name. Per layer: trainable weights, then the rest
// (TF.js' layer.weights order), layers in the model's order.
//
// The topology (tfjs_topology.cc) is the Keras JSON the model came from when
// that is Keras 2 form (what TF.js and tf.keras 2 write); otherwise (a job's
// own "model", Keras 3 JSON) it is generated from the ModelSpec, Sequential
// or Functional, for the layers TF.js has.
//
// Thread-safety: reentrant. Failure: INVALID_ARGUMENT for a model TF.js
// cannot express and for a directory whose weights do not fit the model
// (one line naming the weight); NOT_FOUND / DATA_LOSS naming the file for a
// missing or short one; write errors from the file system.
#pragma once

#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "services/model/model.h"
#include "services/model/spec.h"

namespace tfjob::model {

// The Keras 2-form topology TF.js loads for `spec`: `keras_model` (the
// --keras-model document, or nullptr) as given when it is Keras 2 form, else
// generated from `spec`. INVALID_ARGUMENT naming the first layer (or
// activation, or argument) TF.js 4.22 cannot express.
StatusOr<nlohmann::json> TfjsTopology(const ModelSpec& spec, const nlohmann::json* keras_model);

// Writes DIR/model.json and DIR/group1-shard1of1.bin (creating DIR) for `m`
// with trained `values` (host float32, in m's variable order). model.json
// is written last, so a reader never finds it naming a missing shard.
Status ExportTfjs(const Model& m, std::span<const Tensor> values, const nlohmann::json& topology,
                  const std::string& dir);

// Reads DIR/model.json and its shards: a value for every variable of `m`, in
// m's order. Every variable must be there by name with m's shape, and every
// weight in the directory must be one of m's variables.
StatusOr<std::vector<Tensor>> ImportTfjs(const Model& m, const std::string& dir);

// The first `n` examples of `features` (the model's packed input) with m's
// predictions for them, as JSON, for comparing with another implementation
// (tools/tfjs/predict.js):
//   {"inputs": [{"name": "image", "dtype": "float32", "shape": [n, 28, 28, 1],
//                "values": [...]}, ...],          (m.inputs() order)
//    "predictions": {"shape": [n, 10], "values": [...]}}
// int64 inputs are written as integers ("dtype": "int64").
Status WritePredictions(Model& m, std::span<const Tensor> values, const Tensor& features, int64_t n,
                        const std::string& path);

}  // namespace tfjob::model

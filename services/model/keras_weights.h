// Trained variables written as Keras 3's `.weights.h5` (what
// model.save_weights writes and model.load_weights reads), through Debian's
// HDF5 C library. The layout, from keras/src/saving/saving_lib.py
// (save_weights_only, _save_state, H5IOStore/H5Entry) and each layer's
// save_own_variables:
//
//   /vars                        the Sequential model's own variables: none
//   /layers/<name>/vars/0, 1 ... each layer's trainable then non-trainable
//                                variables, in creation order
//
// where <name> is the layer's class in snake_case, numbered "_1", "_2"...
// from its second occurrence (Keras addresses layers by class, not by their
// names): conv2d, max_pooling2d, flatten, dense, dense_1. Every layer has
// its group, empty when it holds no variables (pooling, lookups, ...).
// Variables are float32 in Keras' shapes: Dense kernel [in, units], Conv2D
// kernel [kh, kw, in, filters], BatchNormalization gamma, beta,
// moving_mean, moving_variance; an adapted Normalization holds mean,
// variance (scalars for axis None) and its int64 count. Optimizer state is
// not written (a model built from JSON has no optimizer to load it into).
//
// Thread-safety: reentrant (the HDF5 library serializes its own calls).
// Failure: INVALID_ARGUMENT when the values do not match the model;
// INTERNAL / PERMISSION_DENIED naming the path when HDF5 cannot write.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "services/model/model.h"

namespace tfjob::model {

// Writes `values` (in m's variable order) to `path`, replacing it. The path
// must end in ".weights.h5", as Keras requires.
Status ExportKerasWeights(const Model& m, const std::vector<Tensor>& values, const std::string& path);

}  // namespace tfjob::model

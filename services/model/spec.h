// Typed descriptions of a model, its loss and optimizer: what the job JSON
// says, after parsing and validation (job_config.h). Plain values.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "services/model/activation.h"
#include "services/tensor/tensor.h"

namespace tfjob::model {

enum class LayerType {
  kDense,
  kEmbedding,
  kActivation,
  kFlatten,
  // conv.cc, pooling.cc, normalization.cc, reshaping.cc, preprocessing.cc
  kConv2D,
  kMaxPooling2D,
  kAveragePooling2D,
  kGlobalAveragePooling2D,
  kDropout,
  kBatchNormalization,
  kReshape,
  kStringLookup,
  kIntegerLookup,
  kNormalization,
};
enum class Combiner { kNone, kSum, kMean };
enum class Padding { kValid, kSame };

// StringLookup / IntegerLookup (Keras' IndexLookup, output_mode "int"): index
// 0 is the mask token when there is one, then num_oov_indices OOV indices,
// then the vocabulary in order.
struct LookupSpec {
  std::vector<std::string> tokens;  // StringLookup's vocabulary
  std::vector<int64_t> int_tokens;  // IntegerLookup's
  std::string vocabulary_file;      // where the tokens came from, if a file
  int64_t num_oov_indices = 1;
  bool has_mask = false;            // mask_token is not null
  std::string mask_token;           // StringLookup
  int64_t int_mask_token = 0;       // IntegerLookup
  std::string oov_token = "[UNK]";  // returned by invert for OOV indices
  int64_t int_oov_token = -1;
  bool invert = false;  // indices -> vocabulary
};

struct LayerSpec {
  LayerType type = LayerType::kDense;
  std::string name;  // unique within the model; defaulted as Keras does ("dense_1")
  // Dense
  int64_t units = 0;
  bool use_bias = true;
  // Dense and Activation
  Activation activation = Activation::kLinear;
  // Embedding
  int64_t input_dim = 0;
  int64_t output_dim = 0;
  Combiner combiner = Combiner::kNone;
  // Conv2D (filters, kernel_size, strides, padding, activation, use_bias);
  // pooling layers (pool size in kernel_size, strides, padding);
  // GlobalAveragePooling2D (keepdims). NHWC ("channels_last") only.
  int64_t filters = 0;
  std::array<int64_t, 2> kernel_size{0, 0};
  std::array<int64_t, 2> strides{1, 1};
  Padding padding = Padding::kValid;
  bool keepdims = false;
  // Dropout: inverted, off at inference; its masks come from `seed`.
  double rate = 0;
  int64_t seed = 0;
  // BatchNormalization (Keras' defaults). Its axis must be the last one:
  // -1, or Keras' positive index of it (counting the batch axis).
  int64_t axis = -1;
  double momentum = 0.99;
  double epsilon = 1e-3;
  bool center = true;
  bool scale = true;
  // Normalization: per-feature statistics on the last axis, or one scalar
  // pair with axis_none. Given mean/variance are constants; without them
  // the layer is adapted to the training data (non-trainable variables).
  bool axis_none = false;
  std::vector<double> mean, variance;
  bool invert = false;
  // Reshape
  Shape target_shape;
  // StringLookup / IntegerLookup
  LookupSpec lookup;
  // Where the spec came from ("model.layers[2]"), for error messages.
  std::string path;
};

struct ModelSpec {
  Shape input_shape;  // per example, without the batch dimension
  // The dtype of the tensors the layers see. With string_input the data
  // holds strings, which the first layer (a StringLookup) turns into int64
  // ids as the data is read (model.input_dtype "string").
  DType input_dtype = DType::kFloat32;
  bool string_input = false;
  std::vector<LayerSpec> layers;
};

enum class LossType {
  kMeanSquaredError,
  kBinaryCrossentropy,
  kSparseCategoricalCrossentropy,
  kCategoricalCrossentropy
};

struct LossSpec {
  LossType type = LossType::kSparseCategoricalCrossentropy;
  bool from_logits = false;
};

enum class OptimizerType { kSGD, kAdagrad, kRMSprop, kAdam };

// Defaults are Keras' (keras.optimizers.*).
struct OptimizerSpec {
  OptimizerType type = OptimizerType::kSGD;
  double learning_rate = 0.01;             // SGD's; the parser applies 0.001 for the others
  double momentum = 0.0;                   // SGD, RMSprop
  bool nesterov = false;                   // SGD
  double rho = 0.9;                        // RMSprop
  bool centered = false;                   // RMSprop
  double epsilon = 1e-7;                   // Adagrad, RMSprop, Adam
  double initial_accumulator_value = 0.1;  // Adagrad
  double beta_1 = 0.9;                     // Adam
  double beta_2 = 0.999;                   // Adam
  bool amsgrad = false;                    // Adam
};

enum class MetricType { kAccuracy, kBinaryAccuracy, kSparseCategoricalAccuracy, kCategoricalAccuracy };

}  // namespace tfjob::model

// Typed descriptions of a model, its loss and optimizer: what the job JSON
// says, after parsing and validation (job_config.h). Plain values.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "services/model/activation.h"
#include "services/model/initializers.h"
#include "services/tensor/precision.h"
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
  // merge.cc: layers of several inputs
  kAdd,
  kSubtract,
  kMultiply,
  kAverage,
  kMaximum,
  kMinimum,
  kConcatenate,
  kDot,
  // Layers added for Functional models (keras_layers.cc parses them)
  kReLU,
  kLeakyReLU,
  kPReLU,
  kELU,
  kSoftmax,
  kThresholdedReLU,
  kRescaling,
  kLayerNormalization,
  kPermute,
  kRepeatVector,
  kSpatialDropout1D,
  kSpatialDropout2D,
  kGaussianNoise,
  kGaussianDropout,
  kGlobalMaxPooling1D,
  kGlobalMaxPooling2D,
  kGlobalAveragePooling1D,
  kMaxPooling1D,
  kAveragePooling1D,
  kConv1D,
  kZeroPadding1D,
  kZeroPadding2D,
  kCropping1D,
  kCropping2D,
  kUpSampling1D,
  kUpSampling2D,
  kDepthwiseConv2D,
  kSeparableConv2D,
  kConv2DTranspose,
  kCategoryEncoding,
  kHashing,
  // recurrent.cc
  kSimpleRNN,
  kLSTM,
  kGRU,
  // wrappers.cc: layers around other layers (LayerSpec::wrapped)
  kBidirectional,
  kTimeDistributed,
  // masking.cc
  kMasking,
  // text.cc
  kTextVectorization,
  // recurrent.cc: one output of a layer of several (return_state, or
  // Bidirectional with merge_mode null). Not a Keras class: the Functional
  // parser adds one per output a model takes (keras_functional.cc).
  kOutputPart,
};
// Keras' L1, L2 and L1L2 regularizers: l1 * sum|w| + l2 * sum w^2.
struct Regularizer {
  double l1 = 0, l2 = 0;
  bool active() const { return l1 != 0 || l2 != 0; }
  bool operator==(const Regularizer&) const = default;
};

// Keras' weight constraints, applied to a variable after each update:
// MaxNorm (max_value, axis), NonNeg, UnitNorm (axis), MinMaxNorm (min_value,
// max_value, rate, axis). Norms are over `axis` of the variable (Keras'
// default 0: per output unit of a Dense kernel); -1 is the last axis.
struct Constraint {
  enum class Kind { kNone, kMaxNorm, kNonNeg, kUnitNorm, kMinMaxNorm };
  Kind kind = Kind::kNone;
  double min_value = 0, max_value = 2, rate = 1;
  std::vector<int64_t> axis{0};
  bool operator==(const Constraint&) const = default;
};

enum class Combiner { kNone, kSum, kMean };
enum class Padding { kValid, kSame };
// CategoryEncoding's output_mode.
enum class EncodingMode { kOneHot, kMultiHot, kCount };
// Bidirectional's merge_mode.
enum class BidiMerge { kConcat, kSum, kMul, kAve };

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

// TextVectorization (Keras' arguments; text.h says what each does).
enum class TextStandardize { kLowerAndStripPunctuation, kLower, kStripPunctuation, kNone };
enum class TextSplit { kWhitespace, kCharacter, kNone };
enum class TextOutput { kInt, kMultiHot, kCount };
struct TextSpec {
  TextStandardize standardize = TextStandardize::kLowerAndStripPunctuation;
  TextSplit split = TextSplit::kWhitespace;
  int64_t max_tokens = 0;  // 0: no limit
  TextOutput output_mode = TextOutput::kInt;
  int64_t output_sequence_length = 0;  // 0: Keras' None
  bool pad_to_max_tokens = false;
  // The vocabulary, without the special tokens: given (has_vocabulary) or
  // adapted from the training data (AdaptText, text.h).
  bool has_vocabulary = false;
  std::vector<std::string> vocabulary;
  // Int output without output_sequence_length: the length the model is
  // built for, the longest text of the training data (AdaptText).
  int64_t build_length = 0;
  bool adapted = false;  // AdaptText has run (with or without a vocabulary to learn)
};

struct LayerSpec {
  LayerType type = LayerType::kDense;
  std::string name;  // unique within the model; defaulted as Keras does ("dense_1")
  // Keras' dtype policy: float32, or mixed_bfloat16 / mixed_float16 (the
  // layer computes in the low precision, its variables stay float32:
  // precision.h).
  Precision precision = Precision::kFloat32;
  // Dense
  int64_t units = 0;
  bool use_bias = true;
  // Dense and Activation
  Activation activation = Activation::kLinear;
  // Layers with weights: Keras' initializers, regularizers and constraints
  // (kernel_* also for Embedding's embeddings).
  Initializer kernel_initializer = Initializer::kGlorotUniform;
  Initializer bias_initializer = Initializer::kZeros;
  Initializer embeddings_initializer = Initializer::kUniform005;
  Regularizer kernel_regularizer, bias_regularizer, activity_regularizer;
  Constraint kernel_constraint, bias_constraint;
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
  // Concatenate (axis, counting the batch axis; -1 the last); Dot (axes:
  // one per input, counting the batch axis; normalize).
  int64_t merge_axis = -1;
  std::array<int64_t, 2> dot_axes{-1, -1};
  bool normalize = false;
  // StringLookup / IntegerLookup
  LookupSpec lookup;
  // Where the spec came from ("model.layers[2]"), for error messages.
  std::string path;

  // keras_layers.cc's layers. Defaults are Keras'; where one field serves
  // layers whose Keras defaults differ, the parser sets the layer's own.
  // ReLU: max_value (when has_max_value), negative_slope, threshold.
  // LeakyReLU: negative_slope (Keras 2's alpha, 0.3). ELU: alpha.
  // ThresholdedReLU: threshold (Keras' theta, 1.0). Softmax: axis (above).
  bool has_max_value = false;
  double max_value = 0, negative_slope = 0, threshold = 0, alpha = 1;
  // PReLU: alpha's initializer, regularizer, constraint; shared_axes as
  // Keras counts them (1 is the first axis after the batch).
  Initializer alpha_initializer = Initializer::kZeros;
  Regularizer alpha_regularizer;
  Constraint alpha_constraint;
  std::vector<int64_t> shared_axes;
  // Rescaling: y = x * rescale + offset.
  double rescale = 1, offset = 0;
  // LayerNormalization: the normalized axes (Keras' axis, counting the
  // batch axis; negative from the end), with epsilon, center and scale
  // above; gamma and beta's initializers, regularizers, constraints.
  std::vector<int64_t> norm_axes{-1};
  Initializer gamma_initializer = Initializer::kOnes, beta_initializer = Initializer::kZeros;
  Regularizer gamma_regularizer, beta_regularizer;
  Constraint gamma_constraint, beta_constraint;
  // Permute: Keras' dims (1-based, a permutation of the non-batch axes).
  std::vector<int64_t> permutation;
  // RepeatVector: n.
  int64_t repeats = 0;
  // GaussianNoise: stddev (GaussianDropout and SpatialDropout use rate and
  // seed above).
  double stddev = 0;
  // Conv1D, MaxPooling1D, AveragePooling1D: kernel_size[0], strides[0];
  // Conv1D's padding "causal" (left padding only).
  bool causal = false;
  // Conv1D, Conv2D, DepthwiseConv2D, SeparableConv2D, Conv2DTranspose.
  std::array<int64_t, 2> dilation_rate{1, 1};
  int64_t groups = 1;
  // DepthwiseConv2D, SeparableConv2D.
  int64_t depth_multiplier = 1;
  Initializer depthwise_initializer = Initializer::kGlorotUniform;
  Initializer pointwise_initializer = Initializer::kGlorotUniform;
  Regularizer depthwise_regularizer, pointwise_regularizer;
  Constraint depthwise_constraint, pointwise_constraint;
  // ZeroPadding1D/2D, Cropping1D/2D: {top, bottom, left, right} (1D: the
  // first two). UpSampling1D/2D: the factors in kernel_size.
  std::array<int64_t, 4> margins{0, 0, 0, 0};
  // CategoryEncoding.
  int64_t num_tokens = 0;
  EncodingMode encoding = EncodingMode::kMultiHot;
  // Hashing: num_bins; mask_value (when has_mask_value) hashes to bin 0.
  int64_t num_bins = 0;
  bool has_mask_value = false;
  int64_t mask_value = 0;
  // SimpleRNN, LSTM, GRU: units, activation (tanh), use_bias, kernel_* and
  // bias_* above; rate is Keras' dropout (on the inputs), seed its masks'.
  Activation recurrent_activation = Activation::kSigmoid;
  Initializer recurrent_initializer = Initializer::Of(Initializer::Kind::kOrthogonal);
  Regularizer recurrent_regularizer;
  Constraint recurrent_constraint;
  double recurrent_dropout = 0;
  bool return_sequences = false;
  bool go_backwards = false;
  // LSTM: the forget gate's bias starts at one (Keras' default true).
  bool unit_forget_bias = true;
  // GRU: Keras 3's default true (the reset gate applied after the recurrent
  // product, which has its own bias); TF.js and tf.keras 1 write false.
  bool reset_after = true;
  // SimpleRNN, LSTM, GRU: the final states are outputs too (Keras'
  // return_state: [output, h] or, for an LSTM, [output, h, c]). The layer
  // then computes them packed into one tensor that kOutputPart layers take
  // apart.
  bool return_state = false;
  // Bidirectional with merge_mode null: two outputs, the directions' (the
  // layer concatenates them, kOutputPart layers take them apart).
  bool bidi_split = false;
  // kOutputPart: output `output_index` of a layer of `units` units that
  // packs its outputs (part_of_states: return_state's [main | h (| c)]
  // flattened; else Bidirectional's halves of the last axis);
  // return_sequences says whether this output is a sequence, which then
  // keeps the input's time-step mask.
  int64_t output_index = 0;
  bool part_of_states = false;
  int64_t part_states = 0;  // part_of_states: 1 (h) or 2 (h, c)
  // Bidirectional: the forward and the backward layer; TimeDistributed:
  // the layer applied to every time step (named as the wrapper, so its
  // variables are "<wrapper>/kernel", as TF.js names them).
  std::vector<LayerSpec> wrapped;
  BidiMerge bidi_merge = BidiMerge::kConcat;
  // Embedding: id 0 is padding, masked for the layers after it.
  bool mask_zero = false;
  // Masking (Keras' mask_value): time steps whose every value equals this
  // are masked.
  double masking_value = 0;
  // TextVectorization.
  TextSpec text;
};

// A tensor of a Functional model: the model's input `input`, or the output
// of node `node` (one of them is -1).
struct TensorRef {
  int64_t node = -1;
  int64_t input = -1;
  bool operator==(const TensorRef&) const = default;
};

// One call of a layer (Keras' node): layers[layer] applied to `inputs` (one,
// or several for a merge layer). A layer called twice shares its variables.
struct NodeSpec {
  size_t layer = 0;
  std::vector<TensorRef> inputs;
  std::string path;  // "model.json: layers[4] (Dense \"d\") call 1", for messages
};

// A named input of a Functional model (Keras' Input(name=..., shape=...)):
// fed from the data's feature of the same name.
struct InputSpec {
  std::string name;
  Shape shape;
  DType dtype = DType::kFloat32;
  bool string_input = false;  // strings looked up by the StringLookup it feeds
};

struct ModelSpec {
  // Sequential: the one input. Functional with one input: that input's.
  // Functional with several: set by Model::Create to their packed form
  // (model.h).
  Shape input_shape;  // per example, without the batch dimension
  // The dtype of the tensors the layers see. With string_input the data
  // holds strings, which the first layer (a StringLookup) turns into int64
  // ids as the data is read (model.input_dtype "string").
  DType input_dtype = DType::kFloat32;
  bool string_input = false;
  std::vector<LayerSpec> layers;
  // A Functional model: its named inputs, the calls of `layers` in an order
  // where every call comes after the calls it takes inputs from, and the
  // output. `nodes` empty: Sequential (each layer once, in order, on the
  // one input).
  std::vector<InputSpec> inputs;
  std::vector<NodeSpec> nodes;
  TensorRef output;
  std::string name;  // the model's name, when the JSON gives one
  bool functional() const { return !nodes.empty(); }
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
  // Keras' LossScaleOptimizer (float16 layers only): "loss_scale":
  // {"initial_scale": ..., "dynamic_growth_steps": ...}.
  double initial_scale = 32768;  // 2^15
  int64_t dynamic_growth_steps = 2000;
};

enum class MetricType { kAccuracy, kBinaryAccuracy, kSparseCategoricalAccuracy, kCategoricalAccuracy };

}  // namespace tfjob::model

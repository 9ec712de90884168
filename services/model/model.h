// A model: layers built from a ModelSpec, Sequential (a chain) or Functional
// (a graph of layer calls: named inputs, shared layers, merges, one output),
// computing predictions, loss and gradients for parameter values supplied by
// the caller. Values live
// outside the model (trainer, or parameter servers), so the same Model serves
// single-process training and a worker computing gradients for pulled values.
//
// As Keras does, when the last layer ends in softmax (sigmoid) and the loss is
// categorical (binary) cross-entropy on probabilities, training computes the
// loss from the logits: same value, stable gradients. Predict still returns
// probabilities.
//
// A model of several inputs takes them packed into one tensor per batch
// (PackInputs), so the input pipelines and every strategy move one feature
// tensor as for a Sequential model: all float32 inputs pack as float32, all
// int64 as int64, a mix as int64 with each float32 value's bits in the low
// 32 bits of its slot (lossless; unpacked before the first layer).
//
// Keras' regularizers add their penalty to the loss (weights' L1/L2 as
// Keras does; activity regularizers divided by the batch size, as tf.keras
// 2 does). Constraints (VariableSpec::constraint) are applied after each
// update by the synchronous strategies; the parameter-server strategy
// refuses them for now.
//
// Thread-safety: one thread at a time (layers cache activations between
// forward and backward). Failure: bad shapes, dtypes, ids and labels return
// INVALID_ARGUMENT naming the layer or label; nothing is left half-updated.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <ostream>
#include <span>
#include <vector>

#include "common/status.h"
#include "services/model/layers.h"
#include "services/model/losses.h"
#include "services/model/metrics.h"
#include "services/model/spec.h"

namespace tfjob::model {

class TextVectorizer;  // text.h

class Model {
 public:
  static StatusOr<std::unique_ptr<Model>> Create(const ModelSpec& spec, const LossSpec& loss);

  const std::vector<VariableSpec>& variables() const { return variables_; }
  // Initial values for every variable, deterministic for a seed.
  std::vector<Tensor> InitialValues(uint64_t seed) const;
  int64_t ParameterCount() const;

  // The named inputs, in order (a Sequential model's one input is "input").
  const std::vector<InputSpec>& inputs() const { return spec_.inputs; }
  // Several inputs packed into input_shape() (see above).
  bool packed_input() const { return spec_.inputs.size() > 1; }
  // One batch of every input, in inputs() order, as one input tensor.
  StatusOr<Tensor> PackInputs(std::span<const Tensor> per_input) const;
  StatusOr<std::vector<Tensor>> UnpackInputs(const Tensor& x) const;
  bool functional() const { return !sequential_; }

  const Shape& input_shape() const { return spec_.input_shape; }
  DType input_dtype() const { return spec_.input_dtype; }
  const Shape& output_shape() const { return output_shape_; }
  // The loss actually used for training (from_logits after fusion).
  const LossSpec& training_loss() const { return training_loss_; }

  // Checks a batch of features against the input spec, naming both shapes.
  Status CheckInput(const Tensor& x) const;

  // model.input_dtype "string": the input StringLookup's ids for `terms`
  // (row-major, `shape` elements, batch first). FAILED_PRECONDITION for a
  // model without string input; INVALID_ARGUMENT for an unknown term with
  // no OOV index.
  bool string_input() const { return spec_.string_input; }
  StatusOr<Tensor> LookupStrings(const std::vector<std::string>& terms, const Shape& shape) const;

  // Keras' adapt(): layers whose state comes from the training data
  // (Normalization without mean and variance) compute it from `features`
  // (the whole training set, as the model's input), and InitialValues then
  // returns it. A no-op for a model without such layers.
  Status Adapt(const Tensor& features);

  // The layers, for exporters: spec (as written; a final activation fused
  // into the loss is still there), its variables [first, first + count),
  // and how many examples an adapted layer saw (0 otherwise).
  size_t num_layers() const { return layer_specs_.size(); }
  const LayerSpec& layer_spec(size_t l) const { return layer_specs_[l]; }
  std::pair<size_t, size_t> layer_variables(size_t l) const { return layer_vars_[l]; }
  int64_t adapt_count(size_t l) const;

  // Probabilities (or raw outputs when the model has no final activation).
  StatusOr<Tensor> Predict(std::span<const Tensor> values, const Tensor& x);

  struct Output {
    float loss = 0;
    Tensor predictions;           // what metrics see
    bool logits = false;          // predictions are pre-activation
    std::vector<Gradient> grads;  // one per variable; empty for Evaluate
  };
  // Forward, loss and backward for one batch.
  StatusOr<Output> ComputeGradients(std::span<const Tensor> values, const Tensor& x, const Tensor& y);
  // Forward and loss only.
  StatusOr<Output> Evaluate(std::span<const Tensor> values, const Tensor& x, const Tensor& y);

  // Forward, then backward from a given dL/d(output) (on the host): the
  // gradients of every variable and of every float32 input (empty for int64
  // inputs). What the TensorFlow.js goldens check, with any loss.
  struct Backprop {
    Tensor output;
    std::vector<Gradient> grads;
    std::vector<Tensor> input_grads;
  };
  StatusOr<Backprop> Differentiate(std::span<const Tensor> values, const Tensor& x, Tensor dy, bool training);

  // ---- on a device ----
  // Values (the variables) on a CUDA device make the model compute there:
  // every layer, the loss and the metrics run as queued device work, and
  // nothing waits for the device inside a step.
  //
  // OK when every layer has device kernels (all but Normalization and the
  // lookups); otherwise FAILED_PRECONDITION naming the first layer that
  // computes on the host only, and its type.
  Status CheckDeviceSupport() const;
  // Labels as the device uses them: float32 shaped like the predictions of
  // their batch (class ids one-hot), after the checks ComputeLoss makes
  // (INVALID_ARGUMENT naming the label). On the host; upload the result.
  StatusOr<Tensor> Targets(const Tensor& labels) const;
  // Features as a device step takes them: float32 copied to `device`; int64
  // ids stay on the host (the Embedding layer uploads them with the rows
  // its gradient needs).
  StatusOr<Tensor> PlaceFeatures(const Tensor& x, Device device) const;
  // Slots of the device stats tensor: loss (total, count), then (total,
  // count) for each metric, as BatchStats keeps them.
  static int64_t StatsSize(size_t metrics) { return 2 + 2 * static_cast<int64_t>(metrics); }
  // Forward, loss and backward on the device of `values`. `targets` is
  // Targets() on that device; the batch's loss and metric sums are added to
  // `stats` (float32 [StatsSize(metrics.size())] on the device). The
  // gradients stay on the device (sparse ones with device indices). A loss
  // that diverges shows in the stats, not here.
  StatusOr<std::vector<Gradient>> ComputeGradientsOnDevice(std::span<const Tensor> values, const Tensor& x,
                                                           const Tensor& targets,
                                                           const std::vector<MetricType>& metrics, Tensor& stats);
  // Forward, loss and metrics only.
  Status EvaluateOnDevice(std::span<const Tensor> values, const Tensor& x, const Tensor& targets,
                          const std::vector<MetricType>& metrics, Tensor& stats);

  // ---- mixed precision (precision.h) ----
  // The lowest compute precision among the layers' dtype policies
  // (float16 before bfloat16 before float32).
  Precision compute_precision() const;
  // Keras' loss scaling: ComputeGradients back-propagates the gradient of
  // loss x scale and divides the variables' gradients by it again (1: off).
  // A gradient that overflowed the layer's precision stays non-finite.
  void set_loss_scale(float scale) { loss_scale_ = scale; }
  float loss_scale() const { return loss_scale_; }

  // A Keras-like summary table.
  void Summary(std::ostream& os) const;

  // The matrix work of one example, per layer call, in FLOPs (a
  // multiply-add is 2), as a roofline counts it: every kernel product
  // (Dense, Conv1D/2D, depthwise, separable, transposed, and the input and
  // recurrent kernels of SimpleRNN, LSTM and GRU at every time step);
  // for Conv1D and Conv2D only the kernel taps inside the input ("same"
  // padding's zeros are not work).
  // Backward is the kernel's gradient plus its operand's where that is
  // needed (not for a layer reading the model's input directly; always for
  // a recurrent state). Elementwise work, pooling, normalization and
  // lookups are left out: they are bound by memory, not arithmetic.
  struct LayerFlops {
    std::string name, type;
    int64_t forward = 0, backward = 0;
    // A convolution's input channels (its kernel's second-to-last
    // dimension), 0 for other layers: rooflines judge convolutions by it.
    int64_t input_channels = 0;
  };
  std::vector<LayerFlops> Flops() const;

  // Where training's time went, per layer call, in the order of Flops():
  // the seconds of its forward (training steps only; evaluation and
  // prediction are not counted) and backward passes since the model was
  // made, and how many training steps they cover. Host time: for layers
  // computing on a device it is the time to queue the work.
  struct LayerTime {
    std::string name, type;
    double forward = 0, backward = 0;
    int64_t steps = 0;
    // A max pooling fused into the convolution before it (FusePooling):
    // that layer's name; its time is counted there.
    std::string fused_into;
    std::string cpu_kernel;  // Layer::cpu_kernel()
  };
  std::vector<LayerTime> LayerTimes() const;

 private:
  // One call of a layer: its own Layer instance (layers cache per call),
  // sharing the layer's variables with the layer's other calls.
  struct Node {
    size_t layer = 0;
    std::unique_ptr<Layer> impl;
    std::vector<TensorRef> inputs;
    Shape out_shape;
    DType out_dtype = DType::kFloat32;
    // The output is float32 and depends on some variable, so its gradient
    // is worth computing.
    bool needs_grad = false;
    // The output carries a mask (layers.h: Masking, Embedding(mask_zero),
    // and the layers that pass one on).
    bool masked = false;
    // A max pooling fused into the Conv2D call it reads (FusePooling): that
    // call's index, else -1. While that call's pooled() holds, this one
    // passes its input and gradient on untouched.
    int64_t pooled_by = -1;
    // A plain ReLU fused into the BatchNormalization or Add call it reads
    // (FuseRelus): that call's index, else -1; as pooled_by, while that
    // call's relu_fused() holds.
    int64_t relu_by = -1;
  };

  Model() = default;
  Status Build();
  Status BuildNode(size_t n, const NodeSpec& ns, const LayerSpec& ls);
  // Each max pooling whose windows tile a Conv2D's output, where nothing
  // else reads that output, goes into the convolution (Layer::FuseMaxPool).
  void FusePooling(std::vector<Node>& nodes) const;
  // The call whose output `consumer` alone reads, where that call may take
  // it as its epilogue (FusePooling, FuseRelus), else -1; `bfloat16`: two
  // mixed_bfloat16 layers may fuse too.
  int64_t FusableProducer(const std::vector<Node>& nodes, const Node& consumer, bool bfloat16) const;
  // Each plain ReLU that alone reads a BatchNormalization's or an Add's
  // output goes into that call (Layer::FuseRelu).
  void FuseRelus(std::vector<Node>& nodes) const;
  // Whether call n is a max pooling its convolution, or a ReLU the layer
  // before it, computed this pass (it then passes the value and the
  // gradient on untouched).
  bool PooledByProducer(const Node& node) const {
    return (node.pooled_by >= 0 && nodes_[static_cast<size_t>(node.pooled_by)].impl->pooled()) ||
           (node.relu_by >= 0 && nodes_[static_cast<size_t>(node.relu_by)].impl->relu_fused());
  }
  StatusOr<Tensor> Forward(std::span<const Tensor> values, const Tensor& x, bool training);
  // A loss over a masked output would need Keras' masked loss: refused.
  Status CheckOutputUnmasked() const;
  // Backward through the graph from dL/d(output); `input_grads` (when given)
  // receives dL/d(input) for every float32 input.
  Status Backward(std::span<const Tensor> values, Tensor dy, std::vector<Gradient>& grads,
                  std::vector<Tensor>* input_grads = nullptr);
  // Regularization penalties of the last Forward and the weights: added to
  // `loss`, and their gradients to `grads` (after Backward) when given.
  Status Regularize(std::span<const Tensor> values, float& loss, std::vector<Gradient>* grads);
  bool regularized() const;
  // Loss (with its gradient when `grad` is given) and metrics on the device.
  Status DeviceLossAndMetrics(const Tensor& pred, const Tensor& targets, Tensor* grad,
                              const std::vector<MetricType>& metrics, Tensor& stats);
  // The node outputs reaching node `n`, for Adapt.
  StatusOr<Tensor> RunTo(size_t n, const Tensor& features);
  // Per-batch padding (text.h): a TextVectorization of int output without
  // output_sequence_length pads each batch to its own longest text, as
  // Keras does. The data hold every text padded to the longest training
  // text; Forward cuts a batch's trailing all-padding steps and runs the
  // graph built for the length left (built once per length, then kept:
  // the weights do not depend on it). UseTime makes `steps` the current
  // graph; INVALID_ARGUMENT when the model's weights or output shape
  // depend on the length (Keras cannot build such a model either).
  Status UseTime(int64_t steps);
  // Build's last step: per-batch padding for a model that has it.
  Status SetUpBatchTime();
  static Tensor CutToLongest(const Tensor& ids);

  bool sequential_ = false;
  std::vector<LayerSpec> built_specs_;  // layer_specs_ with the output activation fused into the loss
  // The TextVectorization's table, one for every graph (UseTime's).
  std::shared_ptr<const TextVectorizer> text_;
  bool batch_time_ = false;
  int64_t time_ = 0;                                  // the length nodes_ is built for
  std::map<int64_t, std::vector<Node>> other_times_;  // the graphs of other lengths
  ModelSpec spec_;                                    // as a graph (a Sequential spec gets its chain of nodes)
  std::vector<LayerSpec> layer_specs_;                // as written
  LossSpec training_loss_;
  Activation output_activation_ = Activation::kLinear;  // applied after the layers when fused
  std::vector<Node> nodes_;
  struct NodeTime {
    double forward = 0, backward = 0;
    int64_t steps = 0;
  };
  std::vector<NodeTime> node_time_;                    // per node, written by training's Forward and Backward
  std::vector<size_t> first_node_;                     // per layer
  std::vector<std::pair<size_t, size_t>> layer_vars_;  // per layer: [first, count) into variables_
  std::vector<VariableSpec> variables_;
  std::vector<int64_t> input_offsets_;  // packed: where each input starts in an example
  // The outputs of the last Forward's nodes with an activity regularizer.
  std::vector<std::pair<size_t, Tensor>> activity_outputs_;
  Shape output_shape_;
  float loss_scale_ = 1.f;
};

// Whether every trainable gradient (dense, or a sparse one's rows) on the
// host is finite; deltas of non-trainable state are not looked at.
bool AllFinite(std::span<const Gradient> grads);
// Every layer's dtype policy set to `p` (fit --mixed-precision: Keras'
// set_global_policy before the model is built).
void SetPrecision(ModelSpec& spec, Precision p);
// The lowest compute precision among `layers`' dtype policies (float16
// before bfloat16 before float32): Model::compute_precision, and fit's
// summary before a model is built.
Precision LowestPrecision(std::span<const LayerSpec> layers);

}  // namespace tfjob::model

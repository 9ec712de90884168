// Model: running the graph (forward, backward, regularization) and the
// device step. model.cc builds it.
#include <chrono>
#include <cmath>
#include <map>

#include "services/model/model.h"
#include "services/tensor/backend.h"
#include "services/tensor/eigen.h"

namespace tfjob::model {
namespace {

// a += b, on the host or the device they share. `a` may be a view of
// something a layer still holds, so the sum goes to a fresh tensor.
Status AddInto(Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) {
    return Internal("gradient shapes differ: " + a.DebugString() + " and " + b.DebugString());
  }
  if (a.on_cpu() && b.on_cpu()) {
    Tensor sum = a.Clone();
    AsArray(sum) += AsArray(b);
    a = std::move(sum);
    return Status::Ok();
  }
  RETURN_IF_ERROR(device::CheckSameDevice("gradient sum", {&a, &b}));
  ASSIGN_OR_RETURN(device::Backend * be, device::BackendFor(a.device()));
  ASSIGN_OR_RETURN(Tensor sum, Tensor::CreateUninitialized(DType::kFloat32, a.shape(), a.device()));
  RETURN_IF_ERROR(be->BinaryOp(device::Binary::kAdd, a, b, sum));
  a = std::move(sum);
  return Status::Ok();
}

// `t` holding values of `p` (host float32 only). A layer may return a view
// of its input (Flatten, Reshape) and the input may be the caller's batch:
// such an output is copied before it is rounded.
void RoundOutput(Precision p, Tensor& t, std::span<const Tensor* const> inputs = {}) {
  if (t.size() == 0 || !t.on_cpu() || t.dtype() != DType::kFloat32) return;
  const float* begin = t.data<float>();
  const float* end = begin + t.size();
  for (const Tensor* in : inputs) {
    if (in->size() == 0 || !in->on_cpu() || in->dtype() != DType::kFloat32) continue;
    const float* b = in->data<float>();
    if (begin < b + in->size() && b < end) {
      t = t.Clone();
      break;
    }
  }
  RoundTo(p, t.data<float>(), t.size());
}

// A sparse gradient as dense rows of a [rows, ...] variable (host).
Tensor Densify(const Gradient& g, const Shape& shape) {
  Tensor d = Tensor::Zeros(DType::kFloat32, shape);
  const int64_t row = shape.empty() ? 1 : NumElements(shape) / std::max<int64_t>(shape[0], 1);
  for (int64_t i = 0; i < g.indices.size(); ++i) {
    const int64_t r = g.indices.data<int64_t>()[i];
    Eigen::Map<Eigen::ArrayXf>(d.data<float>() + r * row, row) +=
        Eigen::Map<const Eigen::ArrayXf>(g.values.data<float>() + i * row, row);
  }
  return d;
}

// Sums a second call's gradient of a shared variable into the first's.
Status Accumulate(Gradient& into, Gradient from, const Shape& shape) {
  if (!into.sparse && !from.sparse) return AddInto(into.dense, from.dense);
  if (!into.indices.on_cpu() || !from.indices.on_cpu() || !into.dense.on_cpu() || !from.dense.on_cpu()) {
    return FailedPrecondition("a shared layer's row gradients are summed on the host only");
  }
  if (into.sparse && from.sparse) {
    // Distinct ids in ascending order, as a single call gives them.
    const int64_t row = NumElements(shape) / std::max<int64_t>(shape[0], 1);
    std::map<int64_t, Eigen::ArrayXf> rows;
    for (const Gradient* g : {&into, &from}) {
      for (int64_t i = 0; i < g->indices.size(); ++i) {
        auto [it, fresh] = rows.try_emplace(g->indices.data<int64_t>()[i], Eigen::ArrayXf::Zero(row));
        it->second += Eigen::Map<const Eigen::ArrayXf>(g->values.data<float>() + i * row, row);
      }
    }
    Tensor idx = Tensor::Zeros(DType::kInt64, {static_cast<int64_t>(rows.size())});
    Tensor vals = Tensor::Zeros(DType::kFloat32, {static_cast<int64_t>(rows.size()), row});
    int64_t k = 0;
    for (const auto& [id, v] : rows) {
      idx.data<int64_t>()[k] = id;
      Eigen::Map<Eigen::ArrayXf>(vals.data<float>() + k * row, row) = v;
      ++k;
    }
    into = Gradient{true, {}, idx, vals, into.delta};
    return Status::Ok();
  }
  Tensor a = into.sparse ? Densify(into, shape) : into.dense;
  Tensor b = from.sparse ? Densify(from, shape) : from.dense;
  RETURN_IF_ERROR(AddInto(a, b));
  into = Gradient{false, a, {}, {}, into.delta};
  return Status::Ok();
}

// A merge's mask: the product of its inputs' masks (an input without one
// counts as all real), as Keras' merges combine them.
StatusOr<Tensor> ProductOfMasks(const std::string& layer, const std::vector<Tensor>& masks) {
  Tensor product;
  for (const Tensor& m : masks) {
    if (m.size() == 0) continue;
    if (product.size() == 0) {
      product = m.Clone();
    } else if (m.shape() != product.shape()) {
      return InvalidArgument("layer \"" + layer + "\": its inputs' masks differ in shape (" +
                             ShapeString(product.shape()) + " and " + ShapeString(m.shape()) + ")");
    } else {
      AsArray(product) *= AsArray(m);
    }
  }
  return product;
}

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

std::vector<Model::LayerTime> Model::LayerTimes() const {
  std::vector<LayerTime> out;
  for (size_t n = 0; n < nodes_.size(); ++n) {
    const LayerSpec& spec = layer_specs_[nodes_[n].layer];
    LayerTime t;
    t.name = spec.name;
    t.type = std::string(LayerTypeName(spec.type));
    if (nodes_[n].pooled_by >= 0) t.fused_into = layer_specs_[nodes_[nodes_[n].pooled_by].layer].name;
    if (nodes_[n].relu_by >= 0) t.fused_into = layer_specs_[nodes_[nodes_[n].relu_by].layer].name;
    t.cpu_kernel = nodes_[n].impl->cpu_kernel();
    if (n < node_time_.size()) {
      t.forward = node_time_[n].forward;
      t.backward = node_time_[n].backward;
      t.steps = node_time_[n].steps;
    }
    out.push_back(std::move(t));
  }
  return out;
}

// The call whose output `consumer` alone reads, where it may become that
// call's epilogue: its one input is a call's output that nothing else
// reads, and neither is anything the model looks at itself (the model's
// output, a regularized or masked activity); both float32, or both bfloat16
// where `bfloat16` allows it. Else -1.
int64_t Model::FusableProducer(const std::vector<Node>& nodes, const Node& consumer, bool bfloat16) const {
  if (consumer.inputs.size() != 1 || consumer.inputs[0].node < 0) return -1;
  const int64_t from = consumer.inputs[0].node;
  int readers = 0;
  for (const Node& node : nodes)
    for (const TensorRef& r : node.inputs) readers += r.node == from;
  const LayerSpec& f = layer_specs_[nodes[static_cast<size_t>(from)].layer];
  const LayerSpec& c = layer_specs_[consumer.layer];
  if (readers != 1 || from == spec_.output.node || f.activity_regularizer.active() || c.activity_regularizer.active() ||
      nodes[static_cast<size_t>(from)].masked || f.precision != c.precision ||
      (f.precision != Precision::kFloat32 && !(bfloat16 && f.precision == Precision::kBfloat16))) {
    return -1;
  }
  return from;
}

void Model::FusePooling(std::vector<Node>& nodes) const {
  for (Node& pool : nodes) {
    const auto size = pool.impl->TiledMaxPool();
    // In bfloat16 too: the convolution's output is rounded to it, and the
    // maximum of rounded values is the rounded maximum.
    const int64_t conv = size ? FusableProducer(nodes, pool, /*bfloat16=*/true) : -1;
    if (conv < 0 || layer_specs_[nodes[static_cast<size_t>(conv)].layer].type != LayerType::kConv2D) continue;
    if (nodes[static_cast<size_t>(conv)].impl->FuseMaxPool(*size, pool.out_shape)) pool.pooled_by = conv;
  }
}

void Model::FuseRelus(std::vector<Node>& nodes) const {
  for (Node& relu : nodes) {
    const int64_t from = relu.impl->PlainRelu() ? FusableProducer(nodes, relu, /*bfloat16=*/false) : -1;
    if (from < 0) continue;
    const LayerType t = layer_specs_[nodes[static_cast<size_t>(from)].layer].type;
    if (t != LayerType::kBatchNormalization && t != LayerType::kAdd) continue;
    if (nodes[static_cast<size_t>(from)].impl->FuseRelu()) relu.relu_by = from;
  }
}

StatusOr<Tensor> Model::Forward(std::span<const Tensor> values, const Tensor& x, bool training) {
  if (values.size() != variables_.size()) {
    return InvalidArgument("model has " + std::to_string(variables_.size()) + " variables, got " +
                           std::to_string(values.size()) + " values");
  }
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i].dtype() != DType::kFloat32 || values[i].shape() != variables_[i].shape) {
      return InvalidArgument("variable " + variables_[i].name + " should be float32" +
                             ShapeString(variables_[i].shape) + ", got " + values[i].DebugString());
    }
  }
  ASSIGN_OR_RETURN(std::vector<Tensor> inputs, UnpackInputs(x));
  if (batch_time_ && inputs[0].on_cpu()) {
    inputs[0] = CutToLongest(inputs[0]);
    RETURN_IF_ERROR(UseTime(inputs[0].dim(1)));
  }
  activity_outputs_.clear();
  std::vector<Tensor> outs(nodes_.size());
  std::vector<Tensor> masks(nodes_.size());  // of the calls whose outputs carry one (Node::masked)
  auto input_of = [&](const TensorRef& r) -> const Tensor& { return r.node >= 0 ? outs[r.node] : inputs[r.input]; };
  auto mask_of = [&](const TensorRef& r) { return r.node >= 0 && nodes_[r.node].masked ? masks[r.node] : Tensor(); };
  node_time_.resize(nodes_.size());
  for (size_t n = 0; n < nodes_.size(); ++n) {
    Node& node = nodes_[n];
    auto [first, count] = layer_vars_[node.layer];
    auto params = values.subspan(first, count);
    const auto started = std::chrono::steady_clock::now();
    if (PooledByProducer(node)) {
      outs[n] = outs[static_cast<size_t>(node.pooled_by >= 0 ? node.pooled_by : node.relu_by)];
      if (training) ++node_time_[n].steps;
      continue;
    }
    const Precision precision = layer_specs_[node.layer].precision;
    PrecisionScope scope(precision);
    if (node.impl->arity() == 1) {
      const Tensor& x = input_of(node.inputs[0]);
      node.impl->SetInputMask(mask_of(node.inputs[0]));
      ASSIGN_OR_RETURN(outs[n], node.impl->Forward(params, x, training));
      if (node.masked) {
        ASSIGN_OR_RETURN(masks[n], node.impl->OutputMask(x));
      }
    } else {
      std::vector<Tensor> xs;
      for (const TensorRef& r : node.inputs) xs.push_back(input_of(r));
      ASSIGN_OR_RETURN(outs[n], node.impl->ForwardMulti(params, xs, training));
      if (node.masked) {
        std::vector<Tensor> in_masks;
        for (const TensorRef& r : node.inputs) in_masks.push_back(mask_of(r));
        ASSIGN_OR_RETURN(masks[n], ProductOfMasks(node.impl->name(), in_masks));
      }
    }
    // A mixed layer's output is a value of its compute dtype, as in Keras.
    // Layers without weights (reshapes, activations, pooling) pass on
    // values the next layer's products round anyway: left as they are.
    if (precision != Precision::kFloat32 && count > 0) {
      std::vector<const Tensor*> ins;
      for (const TensorRef& r : node.inputs) ins.push_back(&input_of(r));
      RoundOutput(precision, outs[n], ins);
    }
    if (training) {
      node_time_[n].forward += SecondsSince(started);
      ++node_time_[n].steps;
    }
    if (layer_specs_[node.layer].activity_regularizer.active()) activity_outputs_.emplace_back(n, outs[n]);
  }
  return outs[static_cast<size_t>(spec_.output.node)];
}

Status Model::Backward(std::span<const Tensor> values, Tensor dy, std::vector<Gradient>& grads,
                       std::vector<Tensor>* input_grads) {
  grads.assign(variables_.size(), Gradient{});
  std::vector<bool> have_grad(variables_.size(), false);
  std::vector<Tensor> dys(nodes_.size());
  std::vector<bool> have(nodes_.size(), false);
  const size_t out = static_cast<size_t>(spec_.output.node);
  dys[out] = std::move(dy);
  have[out] = true;
  if (input_grads) input_grads->assign(spec_.inputs.size(), Tensor());
  // Activity regularizers: l1 sign(y) + 2 l2 y, over the batch.
  for (const auto& [n, y] : activity_outputs_) {
    if (!have[n] || !y.on_cpu()) continue;
    const Regularizer& r = layer_specs_[nodes_[n].layer].activity_regularizer;
    Tensor g = y.Clone();
    const float batch = static_cast<float>(std::max<int64_t>(y.dim(0), 1));
    auto Y = AsArray(y);
    AsArray(g) = (static_cast<float>(r.l1) * Y.sign() + static_cast<float>(2 * r.l2) * Y) / batch;
    RETURN_IF_ERROR(AddInto(dys[n], g));
  }
  // Which calls' outputs need a gradient: those depending on a variable,
  // and with input gradients asked for, those depending on a float input.
  std::vector<bool> needs(nodes_.size());
  for (size_t n = 0; n < nodes_.size(); ++n) {
    needs[n] = nodes_[n].needs_grad;
    if (!input_grads || nodes_[n].out_dtype != DType::kFloat32) continue;
    for (const TensorRef& r : nodes_[n].inputs) {
      needs[n] = needs[n] || (r.node >= 0 ? needs[r.node] : spec_.inputs[r.input].dtype == DType::kFloat32);
    }
  }
  for (size_t n = nodes_.size(); n-- > 0;) {
    if (!have[n]) continue;
    Node& node = nodes_[n];
    auto [first, count] = layer_vars_[node.layer];
    std::vector<bool> need(node.inputs.size(), false);
    bool any = false;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const TensorRef& r = node.inputs[i];
      need[i] = r.node >= 0 ? needs[r.node] : input_grads != nullptr && spec_.inputs[r.input].dtype == DType::kFloat32;
      any = any || need[i];
    }
    if (count == 0 && !any) continue;
    std::vector<Gradient> local(count);
    std::vector<Tensor> dxs;
    auto params = values.subspan(first, count);
    const auto started = std::chrono::steady_clock::now();
    const Precision precision = layer_specs_[node.layer].precision;
    PrecisionScope scope(precision);
    const bool pass = PooledByProducer(node);
    if (pass) {
      dxs.push_back(std::move(dys[n]));  // the convolution takes the pooled gradient
    } else if (node.impl->arity() == 1) {
      ASSIGN_OR_RETURN(Tensor dx, node.impl->Backward(params, std::move(dys[n]), need[0], local));
      dxs.push_back(std::move(dx));
    } else {
      ASSIGN_OR_RETURN(dxs, node.impl->BackwardMulti(params, std::move(dys[n]), need, local));
    }
    if (precision != Precision::kFloat32) {
      // Keras computes a mixed layer's gradients in its compute dtype and
      // casts the variables' to float32: values of the low precision (a
      // float16 gradient past 65504 is infinite, which loss scaling sees).
      for (Tensor& dx : dxs) RoundOutput(precision, dx);
      for (Gradient& g : local) {
        if (g.delta) continue;
        RoundOutput(precision, g.sparse ? g.values : g.dense);
      }
    }
    if (n < node_time_.size() && !pass) node_time_[n].backward += SecondsSince(started);
    for (size_t k = 0; k < count; ++k) {
      if (!have_grad[first + k]) {
        grads[first + k] = std::move(local[k]);
        have_grad[first + k] = true;
      } else {
        RETURN_IF_ERROR(Accumulate(grads[first + k], std::move(local[k]), variables_[first + k].shape));
      }
    }
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (!need[i] || dxs.size() <= i || dxs[i].size() == 0) continue;
      const TensorRef& r = node.inputs[i];
      Tensor& target = r.node >= 0 ? dys[r.node] : (*input_grads)[r.input];
      const bool had = r.node >= 0 ? have[r.node] : target.size() > 0;
      if (!had) {
        target = std::move(dxs[i]);
        if (r.node >= 0) have[r.node] = true;
      } else {
        RETURN_IF_ERROR(AddInto(target, dxs[i]));
      }
    }
  }
  // A variable no call reached (a branch that does not lead to the output)
  // gets a zero gradient, on the device of its value.
  for (size_t i = 0; i < grads.size(); ++i) {
    if (have_grad[i]) continue;
    ASSIGN_OR_RETURN(Tensor z, Tensor::Create(DType::kFloat32, variables_[i].shape, values[i].device()));
    grads[i] = Gradient{false, z, {}, {}, !variables_[i].trainable};
  }
  return Status::Ok();
}

Status Model::CheckOutputUnmasked() const {
  const Node& out = nodes_[static_cast<size_t>(spec_.output.node)];
  if (!out.masked) return Status::Ok();
  return InvalidArgument("the model's output carries a mask (layer \"" + layer_specs_[out.layer].name +
                         "\" passes on a Masking layer's or a mask_zero Embedding's): Keras would leave the padded "
                         "steps out of the loss, which is not supported; end the masked steps in a recurrent layer "
                         "without return_sequences or in GlobalAveragePooling1D");
}

bool Model::regularized() const {
  for (const VariableSpec& v : variables_) {
    if (v.regularizer.active()) return true;
  }
  return !activity_outputs_.empty();
}

Status Model::Regularize(std::span<const Tensor> values, float& loss, std::vector<Gradient>* grads) {
  double penalty = 0;
  for (size_t i = 0; i < variables_.size(); ++i) {
    const Regularizer& r = variables_[i].regularizer;
    if (!r.active()) continue;
    if (!values[i].on_cpu()) return FailedPrecondition("regularizers are computed on the host only");
    auto W = AsArray(values[i]);
    penalty += r.l1 * static_cast<double>(W.abs().sum()) + r.l2 * static_cast<double>(W.square().sum());
    if (!grads) continue;
    Gradient& g = (*grads)[i];
    if (g.sparse) g = Gradient{false, Densify(g, variables_[i].shape), {}, {}, g.delta};
    Tensor add = values[i].Clone();
    AsArray(add) = static_cast<float>(r.l1) * W.sign() + static_cast<float>(2 * r.l2) * W;
    RETURN_IF_ERROR(AddInto(g.dense, add));
  }
  for (const auto& [n, y] : activity_outputs_) {
    if (!y.on_cpu()) return FailedPrecondition("activity regularizers are computed on the host only");
    const Regularizer& r = layer_specs_[nodes_[n].layer].activity_regularizer;
    auto Y = AsArray(y);
    penalty += (r.l1 * static_cast<double>(Y.abs().sum()) + r.l2 * static_cast<double>(Y.square().sum())) /
               static_cast<double>(std::max<int64_t>(y.dim(0), 1));
  }
  loss += static_cast<float>(penalty);
  return Status::Ok();
}

StatusOr<Tensor> Model::Predict(std::span<const Tensor> values, const Tensor& x) {
  ASSIGN_OR_RETURN(Tensor y, Forward(values, x, false));
  RETURN_IF_ERROR(Activate(output_activation_, y));
  return y;
}

StatusOr<Model::Output> Model::Evaluate(std::span<const Tensor> values, const Tensor& x, const Tensor& y) {
  Output out;
  RETURN_IF_ERROR(CheckOutputUnmasked());
  ASSIGN_OR_RETURN(out.predictions, Forward(values, x, false));
  if (y.rank() < 1 || y.dim(0) != x.dim(0)) {
    return InvalidArgument("labels " + y.DebugString() + " do not match a batch of " + std::to_string(x.dim(0)));
  }
  ASSIGN_OR_RETURN(LossResult lr, ComputeLoss(training_loss_, out.predictions, y));
  out.loss = lr.loss;
  if (regularized()) RETURN_IF_ERROR(Regularize(values, out.loss, nullptr));
  out.logits = output_activation_ != Activation::kLinear || training_loss_.from_logits;
  return out;
}

StatusOr<Model::Output> Model::ComputeGradients(std::span<const Tensor> values, const Tensor& x, const Tensor& y) {
  Output out;
  RETURN_IF_ERROR(CheckOutputUnmasked());
  ASSIGN_OR_RETURN(out.predictions, Forward(values, x, true));
  if (y.rank() < 1 || y.dim(0) != x.dim(0)) {
    return InvalidArgument("labels " + y.DebugString() + " do not match a batch of " + std::to_string(x.dim(0)));
  }
  ASSIGN_OR_RETURN(LossResult lr, ComputeLoss(training_loss_, out.predictions, y));
  out.loss = lr.loss;
  out.logits = output_activation_ != Activation::kLinear || training_loss_.from_logits;
  if (!std::isfinite(lr.loss)) return InvalidArgument("loss is " + std::to_string(lr.loss) + " (diverged)");
  if (loss_scale_ != 1.f) {
    // Keras' LossScaleOptimizer: the gradient of (loss x scale) flows back,
    // so small float16 gradients do not vanish; the variables' gradients
    // are divided by the scale again. One that overflowed stays infinite
    // (AllFinite), and the strategy skips the step.
    AsArray(lr.grad) *= loss_scale_;
  }
  RETURN_IF_ERROR(Backward(values, std::move(lr.grad), out.grads));
  if (loss_scale_ != 1.f) {
    for (Gradient& g : out.grads) {
      if (g.delta) continue;
      Tensor& t = g.sparse ? g.values : g.dense;
      if (t.size() > 0) AsArray(t) *= 1.f / loss_scale_;
    }
  }
  if (regularized()) RETURN_IF_ERROR(Regularize(values, out.loss, &out.grads));
  return out;
}

StatusOr<Model::Backprop> Model::Differentiate(std::span<const Tensor> values, const Tensor& x, Tensor dy,
                                               bool training) {
  Backprop b;
  ASSIGN_OR_RETURN(b.output, Forward(values, x, training));
  if (dy.shape() != b.output.shape()) {
    return InvalidArgument("dL/d(output) " + dy.DebugString() + " does not match the output " + b.output.DebugString());
  }
  b.output = b.output.Clone();  // layers may keep and change what they returned
  RETURN_IF_ERROR(Backward(values, std::move(dy), b.grads, &b.input_grads));
  return b;
}

StatusOr<Tensor> Model::Targets(const Tensor& labels) const {
  if (!labels.on_cpu()) return InvalidArgument("labels must be on the host to be checked, got " + labels.DebugString());
  if (labels.rank() < 1) return InvalidArgument("labels " + labels.DebugString() + " have no batch axis");
  Shape pred{labels.dim(0)};
  pred.insert(pred.end(), output_shape_.begin(), output_shape_.end());
  RETURN_IF_ERROR(CheckLabels(training_loss_, pred, labels));
  ASSIGN_OR_RETURN(Tensor t, Tensor::Create(DType::kFloat32, pred));
  float* out = t.data<float>();
  if (training_loss_.type == LossType::kSparseCategoricalCrossentropy) {
    const int64_t classes = pred.back();
    for (int64_t b = 0; b < labels.dim(0); ++b) {
      const int64_t id =
          labels.dtype() == DType::kInt64 ? labels.data<int64_t>()[b] : static_cast<int64_t>(labels.data<float>()[b]);
      out[b * classes + id] = 1.f;
    }
    return t;
  }
  for (int64_t i = 0; i < t.size(); ++i) {
    out[i] = labels.dtype() == DType::kInt64 ? static_cast<float>(labels.data<int64_t>()[i]) : labels.data<float>()[i];
  }
  return t;
}

StatusOr<Tensor> Model::PlaceFeatures(const Tensor& x, Device device) const {
  if (x.dtype() == DType::kInt64) return x;
  return x.ToDevice(device);
}

Status Model::DeviceLossAndMetrics(const Tensor& pred, const Tensor& targets, Tensor* grad,
                                   const std::vector<MetricType>& metrics, Tensor& stats) {
  RETURN_IF_ERROR(device::CheckSameDevice("loss", {&pred, &targets, &stats}));
  if (targets.shape() != pred.shape() || targets.dtype() != DType::kFloat32) {
    return InvalidArgument("targets " + targets.DebugString() + " do not match predictions " + pred.DebugString());
  }
  if (stats.size() != StatsSize(metrics.size())) {
    return InvalidArgument("stats " + stats.DebugString() + " should have " +
                           std::to_string(StatsSize(metrics.size())) + " elements");
  }
  ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(pred.device()));
  const device::Loss kind = training_loss_.type == LossType::kMeanSquaredError ? device::Loss::kMeanSquaredError
                            : training_loss_.type == LossType::kBinaryCrossentropy
                                ? device::Loss::kBinaryCrossentropy
                                : device::Loss::kCategoricalCrossentropy;
  if (grad) {
    RETURN_IF_ERROR(b->LossAndGradient(kind, training_loss_.from_logits, pred, targets, *grad, stats, 0));
  } else {
    RETURN_IF_ERROR(b->LossValue(kind, training_loss_.from_logits, pred, targets, stats, 0));
  }
  const bool logits = output_activation_ != Activation::kLinear || training_loss_.from_logits;
  for (size_t i = 0; i < metrics.size(); ++i) {
    device::Metric m = device::Metric::kEqual;
    switch (metrics[i]) {
      case MetricType::kSparseCategoricalAccuracy:
      case MetricType::kCategoricalAccuracy:
        if (pred.rank() != 2) return InvalidArgument(MetricName(metrics[i]) + ": predictions must be [batch, classes]");
        m = device::Metric::kArgMaxMatch;
        break;
      case MetricType::kBinaryAccuracy: m = device::Metric::kBinary; break;
      case MetricType::kAccuracy: m = device::Metric::kEqual; break;
    }
    RETURN_IF_ERROR(b->MetricUpdate(m, logits, pred, targets, stats, 2 + 2 * static_cast<int64_t>(i)));
  }
  return Status::Ok();
}

StatusOr<std::vector<Gradient>> Model::ComputeGradientsOnDevice(std::span<const Tensor> values, const Tensor& x,
                                                                const Tensor& targets,
                                                                const std::vector<MetricType>& metrics, Tensor& stats) {
  ASSIGN_OR_RETURN(Tensor pred, Forward(values, x, true));
  ASSIGN_OR_RETURN(Tensor grad, Tensor::CreateUninitialized(DType::kFloat32, pred.shape(), pred.device()));
  RETURN_IF_ERROR(DeviceLossAndMetrics(pred, targets, &grad, metrics, stats));
  std::vector<Gradient> grads;
  RETURN_IF_ERROR(Backward(values, std::move(grad), grads));
  return grads;
}

Status Model::EvaluateOnDevice(std::span<const Tensor> values, const Tensor& x, const Tensor& targets,
                               const std::vector<MetricType>& metrics, Tensor& stats) {
  ASSIGN_OR_RETURN(Tensor pred, Forward(values, x, false));
  return DeviceLossAndMetrics(pred, targets, nullptr, metrics, stats);
}

Precision Model::compute_precision() const { return LowestPrecision(layer_specs_); }

Precision LowestPrecision(std::span<const LayerSpec> layers) {
  Precision p = Precision::kFloat32;
  for (const LayerSpec& l : layers) {
    if (l.precision == Precision::kFloat16) return Precision::kFloat16;
    if (l.precision == Precision::kBfloat16) p = Precision::kBfloat16;
  }
  return p;
}

bool AllFinite(std::span<const Gradient> grads) {
  for (const Gradient& g : grads) {
    if (g.delta) continue;
    const Tensor& t = g.sparse ? g.values : g.dense;
    if (t.size() == 0 || !t.on_cpu()) continue;
    if (!AsArray(t).isFinite().all()) return false;
  }
  return true;
}

void SetPrecision(ModelSpec& spec, Precision p) {
  for (LayerSpec& l : spec.layers) l.precision = p;
}

}  // namespace tfjob::model

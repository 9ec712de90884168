#include "services/model/model.h"

#include <cmath>
#include <iomanip>
#include <set>

#include "services/model/layers_internal.h"
#include "services/model/random.h"
#include "services/tensor/backend.h"
#include "services/tensor/eigen.h"

namespace tfjob::model {

StatusOr<std::unique_ptr<Model>> Model::Create(const ModelSpec& spec, const LossSpec& loss) {
  std::unique_ptr<Model> m(new Model());
  m->spec_ = spec;
  m->training_loss_ = loss;
  if (spec.layers.empty()) return InvalidArgument("model.layers: a model needs at least one layer");
  if (NumElements(spec.input_shape) <= 0) {
    return InvalidArgument("model.input_shape: invalid shape " + ShapeString(spec.input_shape));
  }

  // Fuse a final softmax/sigmoid into the loss (see header).
  LayerSpec* last = &m->spec_.layers.back();
  const bool probs = !loss.from_logits;
  if (probs && (last->type == LayerType::kDense || last->type == LayerType::kActivation)) {
    const bool cce =
        loss.type == LossType::kSparseCategoricalCrossentropy || loss.type == LossType::kCategoricalCrossentropy;
    if ((cce && last->activation == Activation::kSoftmax) ||
        (loss.type == LossType::kBinaryCrossentropy && last->activation == Activation::kSigmoid)) {
      m->output_activation_ = last->activation;
      last->activation = Activation::kLinear;
      m->training_loss_.from_logits = true;
    }
  }

  if (spec.string_input) {
    // Strings are looked up as the data is read (tensors hold no strings);
    // the StringLookup then passes the int64 ids on.
    const LayerSpec& first = spec.layers.front();
    if (first.type != LayerType::kStringLookup || first.lookup.invert) {
      return InvalidArgument(first.path +
                             ": model.input_dtype \"string\" needs a StringLookup (invert false) as the "
                             "first layer, got " +
                             std::string(LayerTypeName(first.type)));
    }
    m->spec_.input_dtype = DType::kInt64;
  }
  std::set<std::string> names;
  Shape shape = spec.input_shape;
  DType dtype = m->spec_.input_dtype;
  bool vars_before = false;
  for (size_t l = 0; l < m->spec_.layers.size(); ++l) {
    const LayerSpec& ls = m->spec_.layers[l];
    if (!names.insert(ls.name).second)
      return InvalidArgument(ls.path + ".name: duplicate layer name \"" + ls.name + "\"");
    if (ls.type == LayerType::kStringLookup && (l > 0 || !spec.string_input)) {
      return InvalidArgument(ls.path +
                             ": a StringLookup takes strings, which only the model's input holds: make it "
                             "the first layer and set model.input_dtype to \"string\"");
    }
    auto made = MakeLayer(ls);
    if (!made.ok()) return made.status().WithContext(ls.path);
    std::unique_ptr<Layer> layer = std::move(made).value();
    auto out = layer->Build(shape, dtype);
    if (!out.ok()) return out.status().WithContext(ls.path);
    m->input_float_.push_back(dtype == DType::kFloat32);
    m->vars_before_.push_back(vars_before);
    shape = *out;
    dtype = layer->output_dtype();
    auto vars = layer->Variables();
    vars_before = vars_before || !vars.empty();
    m->layer_vars_.emplace_back(m->variables_.size(), vars.size());
    m->variables_.insert(m->variables_.end(), vars.begin(), vars.end());
    m->layer_output_shapes_.push_back(shape);
    m->layers_.push_back(std::move(layer));
  }
  m->output_shape_ = shape;
  return m;
}

std::vector<Tensor> Model::InitialValues(uint64_t seed) const {
  std::vector<Tensor> values;
  for (size_t i = 0; i < variables_.size(); ++i) {
    const VariableSpec& v = variables_[i];
    Tensor t = Tensor::Zeros(DType::kFloat32, v.shape);
    Rng rng(MixSeed(seed, i));
    float* p = t.data<float>();
    switch (v.init) {
      case Initializer::kZeros: break;
      case Initializer::kOnes: AsArray(t).setOnes(); break;
      case Initializer::kValue: t = v.value.Clone(); break;
      case Initializer::kGlorotUniform: {
        // Keras' fans: a kernel of rank > 2 counts its receptive field.
        double receptive = 1;
        for (size_t d = 0; d + 2 < v.shape.size(); ++d) receptive *= static_cast<double>(v.shape[d]);
        const double fan_in =
            receptive * static_cast<double>(v.shape.size() >= 2 ? v.shape[v.shape.size() - 2] : v.shape[0]);
        const double fan_out = receptive * static_cast<double>(v.shape.back());
        const float limit = static_cast<float>(std::sqrt(6.0 / (fan_in + fan_out)));
        for (int64_t k = 0; k < t.size(); ++k) p[k] = rng.Uniform(-limit, limit);
        break;
      }
      case Initializer::kUniform005:
        for (int64_t k = 0; k < t.size(); ++k) p[k] = rng.Uniform(-0.05f, 0.05f);
        break;
    }
    values.push_back(std::move(t));
  }
  return values;
}

int64_t Model::ParameterCount() const {
  int64_t n = 0;
  for (const auto& v : variables_) n += NumElements(v.shape);
  return n;
}

Status Model::CheckInput(const Tensor& x) const {
  bool ok = x.dtype() == spec_.input_dtype && x.rank() == static_cast<int>(spec_.input_shape.size()) + 1 &&
            std::equal(spec_.input_shape.begin(), spec_.input_shape.end(), x.shape().begin() + 1);
  if (ok) return Status::Ok();
  Shape want{-1};
  want.insert(want.end(), spec_.input_shape.begin(), spec_.input_shape.end());
  return InvalidArgument("features " + x.DebugString() + " do not match model.input_shape: expected " +
                         std::string(DTypeName(spec_.input_dtype)) + ShapeString(want) + " (batch first)");
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
  RETURN_IF_ERROR(CheckInput(x));
  Tensor h = x;
  for (size_t l = 0; l < layers_.size(); ++l) {
    auto [first, count] = layer_vars_[l];
    ASSIGN_OR_RETURN(h, layers_[l]->Forward(values.subspan(first, count), h, training));
  }
  return h;
}

StatusOr<Tensor> Model::Predict(std::span<const Tensor> values, const Tensor& x) {
  ASSIGN_OR_RETURN(Tensor y, Forward(values, x, false));
  RETURN_IF_ERROR(Activate(output_activation_, y));
  return y;
}

StatusOr<Model::Output> Model::Evaluate(std::span<const Tensor> values, const Tensor& x, const Tensor& y) {
  Output out;
  ASSIGN_OR_RETURN(out.predictions, Forward(values, x, false));
  if (y.rank() < 1 || y.dim(0) != x.dim(0)) {
    return InvalidArgument("labels " + y.DebugString() + " do not match a batch of " + std::to_string(x.dim(0)));
  }
  ASSIGN_OR_RETURN(LossResult lr, ComputeLoss(training_loss_, out.predictions, y));
  out.loss = lr.loss;
  out.logits = output_activation_ != Activation::kLinear || training_loss_.from_logits;
  return out;
}

StatusOr<Model::Output> Model::ComputeGradients(std::span<const Tensor> values, const Tensor& x, const Tensor& y) {
  Output out;
  ASSIGN_OR_RETURN(out.predictions, Forward(values, x, true));
  if (y.rank() < 1 || y.dim(0) != x.dim(0)) {
    return InvalidArgument("labels " + y.DebugString() + " do not match a batch of " + std::to_string(x.dim(0)));
  }
  ASSIGN_OR_RETURN(LossResult lr, ComputeLoss(training_loss_, out.predictions, y));
  out.loss = lr.loss;
  out.logits = output_activation_ != Activation::kLinear || training_loss_.from_logits;
  if (!std::isfinite(lr.loss)) return InvalidArgument("loss is " + std::to_string(lr.loss) + " (diverged)");
  RETURN_IF_ERROR(Backward(values, std::move(lr.grad), out.grads));
  return out;
}

Status Model::Backward(std::span<const Tensor> values, Tensor dy, std::vector<Gradient>& grads) {
  grads.resize(variables_.size());
  for (size_t l = layers_.size(); l-- > 0;) {
    auto [first, count] = layer_vars_[l];
    // Below the first layer with variables no gradient is needed (a layer
    // there has none to write), and ids have none.
    if (!vars_before_[l] && count == 0) break;
    const bool need_dx = l > 0 && input_float_[l] && vars_before_[l];
    ASSIGN_OR_RETURN(dy, layers_[l]->Backward(values.subspan(first, count), std::move(dy), need_dx,
                                              std::span<Gradient>(grads).subspan(first, count)));
    if (!need_dx) break;
  }
  return Status::Ok();
}

Status Model::CheckDeviceSupport() const {
  for (const auto& layer : layers_) {
    switch (layer->spec().type) {
      case LayerType::kDense:
      case LayerType::kEmbedding:
      case LayerType::kActivation:
      case LayerType::kFlatten:
      case LayerType::kReshape:
      case LayerType::kConv2D:
      case LayerType::kMaxPooling2D:
      case LayerType::kAveragePooling2D:
      case LayerType::kGlobalAveragePooling2D:
      case LayerType::kBatchNormalization:
      case LayerType::kDropout: continue;
      case LayerType::kStringLookup:
      case LayerType::kIntegerLookup:
      case LayerType::kNormalization:
        return FailedPrecondition("layer \"" + layer->name() + "\" (" + layer->spec().path + ", " +
                                  std::string(LayerTypeName(layer->spec().type)) +
                                  ") has no GPU kernel yet; every other layer type has one");
    }
  }
  return Status::Ok();
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

StatusOr<Tensor> Model::LookupStrings(const std::vector<std::string>& terms, const Shape& shape) const {
  if (!spec_.string_input) return FailedPrecondition("the model's input is not strings (model.input_dtype)");
  const Lookup* table = internal::LookupTable(*layers_[0]);
  if (!table) return Internal("the model's first layer is no StringLookup");
  auto ids = table->LookupStrings(terms, shape);
  if (!ids.ok()) return ids.status().WithContext("layer \"" + layers_[0]->name() + "\"");
  return ids;
}

Status Model::Adapt(const Tensor& features) {
  for (size_t l = 0; l < layers_.size(); ++l) {
    auto* a = dynamic_cast<internal::AdaptableLayer*>(layers_[l].get());
    if (!a || !a->adaptable()) continue;
    // What reaches the layer, through layers that need no values.
    if (vars_before_[l]) {
      return InvalidArgument(layers_[l]->spec().path + ": layer \"" + layers_[l]->name() +
                             "\" adapts to the training data, which reaches it only through layers with weights; "
                             "move it before them or give its mean and variance");
    }
    RETURN_IF_ERROR(CheckInput(features));
    Tensor h = features;
    for (size_t k = 0; k < l; ++k) {
      ASSIGN_OR_RETURN(h, layers_[k]->Forward({}, h, false));
    }
    RETURN_IF_ERROR(a->Adapt(h).WithContext(layers_[l]->spec().path));
    auto vars = a->Variables();
    auto [first, count] = layer_vars_[l];
    if (vars.size() != count) return Internal("adapting changed a layer's variables");
    std::copy(vars.begin(), vars.end(), variables_.begin() + static_cast<std::ptrdiff_t>(first));
  }
  return Status::Ok();
}

int64_t Model::adapt_count(size_t l) const {
  const auto* a = dynamic_cast<const internal::AdaptableLayer*>(layers_[l].get());
  return a ? a->adapt_count() : 0;
}

void Model::Summary(std::ostream& os) const {
  os << "Model: sequential\n";
  os << std::left << std::setw(28) << "Layer (type)" << std::setw(22) << "Output Shape"
     << "Param #\n";
  for (size_t l = 0; l < layers_.size(); ++l) {
    int64_t params = 0;
    for (size_t i = 0; i < layer_vars_[l].second; ++i)
      params += NumElements(variables_[layer_vars_[l].first + i].shape);
    Shape s{-1};
    s.insert(s.end(), layer_output_shapes_[l].begin(), layer_output_shapes_[l].end());
    std::string shape = ShapeString(s);
    shape.replace(1, 2, "None");
    os << std::setw(28) << (layers_[l]->name() + " (" + std::string(LayerTypeName(layers_[l]->spec().type)) + ")")
       << std::setw(22) << shape << params << "\n";
  }
  os << "Total params: " << ParameterCount() << "\n";
}

}  // namespace tfjob::model

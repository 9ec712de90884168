#include "services/model/model.h"

#include <cmath>
#include <cstring>
#include <iomanip>
#include <map>
#include <set>

#include "services/model/adaptable_layer.h"
#include "services/model/layer_factories.h"
#include "services/model/layer_shapes.h"
#include "services/model/random.h"
#include "services/tensor/eigen.h"

namespace tfjob::model {
namespace {

// A Sequential spec as the graph it is: one input, each layer called once
// on the one before.
void ChainSequential(ModelSpec& m) {
  m.inputs = {InputSpec{"input", m.input_shape, m.input_dtype, m.string_input}};
  m.nodes.clear();
  for (size_t l = 0; l < m.layers.size(); ++l) {
    NodeSpec n;
    n.layer = l;
    n.inputs = {l == 0 ? TensorRef{-1, 0} : TensorRef{static_cast<int64_t>(l) - 1, -1}};
    n.path = m.layers[l].path;
    m.nodes.push_back(std::move(n));
  }
  m.output = TensorRef{static_cast<int64_t>(m.layers.size()) - 1, -1};
}

// Text is vectorized as the data is read: a string input that feeds a
// TextVectorization holds what the layer makes of it (its shape and dtype),
// and `text` the table that makes it.
Status TextInputShapes(ModelSpec& s, std::shared_ptr<const TextVectorizer>& text) {
  for (size_t k = 0; k < s.inputs.size(); ++k) {
    InputSpec& in = s.inputs[k];
    if (!in.string_input) continue;
    for (const NodeSpec& ns : s.nodes) {
      const LayerSpec& ls = s.layers[ns.layer];
      if (ls.type != LayerType::kTextVectorization || ns.inputs.size() != 1 ||
          ns.inputs[0] != TensorRef{-1, static_cast<int64_t>(k)}) {
        continue;
      }
      if (!in.shape.empty() && in.shape != Shape{1}) {
        return InvalidArgument(ls.path +
                               ": TextVectorization takes one string per example (an input of shape [1] "
                               "or []), got input \"" +
                               in.name + "\" of shape " + ShapeString(in.shape));
      }
      auto v = TextVectorizer::Create(ls.text);
      if (!v.ok()) return InvalidArgument(ls.path + ": layer \"" + ls.name + "\" " + v.status().message());
      in.shape = v->output_shape();
      in.dtype = v->output_dtype();
      text = std::make_shared<const TextVectorizer>(std::move(v).value());
    }
  }
  return Status::Ok();
}

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

StatusOr<std::unique_ptr<Model>> Model::Create(const ModelSpec& spec, const LossSpec& loss) {
  std::unique_ptr<Model> m(new Model());
  m->spec_ = spec;
  m->training_loss_ = loss;
  if (spec.layers.empty()) return InvalidArgument("model.layers: a model needs at least one layer");
  if (!spec.functional()) {
    if (NumElements(spec.input_shape) <= 0) {
      return InvalidArgument("model.input_shape: invalid shape " + ShapeString(spec.input_shape));
    }
    if (spec.string_input) {
      // Strings are looked up as the data is read (tensors hold no strings);
      // the StringLookup then passes the int64 ids on.
      const LayerSpec& first = spec.layers.front();
      const bool lookup = first.type == LayerType::kStringLookup && !first.lookup.invert;
      if (!lookup && first.type != LayerType::kTextVectorization) {
        return InvalidArgument(first.path +
                               ": model.input_dtype \"string\" needs a StringLookup (invert false) or a "
                               "TextVectorization as the first layer, got " +
                               std::string(LayerTypeName(first.type)));
      }
      m->spec_.input_dtype = DType::kInt64;
    }
    ChainSequential(m->spec_);
    m->sequential_ = true;
  }
  RETURN_IF_ERROR(m->Build());
  return m;
}

Status Model::Build() {
  ModelSpec& s = spec_;
  layer_specs_ = s.layers;
  std::set<std::string> names;
  for (const LayerSpec& ls : s.layers) {
    if (!names.insert(ls.name).second) {
      return InvalidArgument(ls.path + ".name: duplicate layer name \"" + ls.name + "\"");
    }
  }
  if (s.inputs.empty()) return InvalidArgument("the model has no input");
  for (InputSpec& in : s.inputs) {
    if (NumElements(in.shape) <= 0) {
      return InvalidArgument("input \"" + in.name + "\": invalid shape " + ShapeString(in.shape));
    }
    if (in.string_input) in.dtype = DType::kInt64;
  }
  RETURN_IF_ERROR(TextInputShapes(s, text_));
  if (s.output.node < 0) return InvalidArgument("the model's output is one of its inputs: it has no layer to train");

  // The packed input (model.h).
  if (s.inputs.size() > 1) {
    bool any_float = false, any_int = false;
    int64_t total = 0;
    for (const InputSpec& in : s.inputs) {
      if (in.string_input) {
        return InvalidArgument("input \"" + in.name +
                               "\": string inputs are supported in models of one input only (the data's strings "
                               "are looked up as they are read)");
      }
      (in.dtype == DType::kFloat32 ? any_float : any_int) = true;
      input_offsets_.push_back(total);
      total += NumElements(in.shape);
    }
    s.input_shape = {total};
    s.input_dtype = any_int ? DType::kInt64 : DType::kFloat32;
    (void)any_float;
  } else {
    s.input_shape = s.inputs[0].shape;
    s.input_dtype = s.inputs[0].dtype;
    s.string_input = s.inputs[0].string_input;
  }

  // Fuse a final softmax/sigmoid into the loss (see header), when the
  // output's layer is called only there.
  const size_t out_layer = s.nodes[static_cast<size_t>(s.output.node)].layer;
  size_t out_calls = 0;
  for (const NodeSpec& n : s.nodes) out_calls += n.layer == out_layer;
  std::vector<LayerSpec> built = s.layers;
  LayerSpec* last = &built[out_layer];
  if (!training_loss_.from_logits && out_calls == 1 &&
      (last->type == LayerType::kDense || last->type == LayerType::kActivation)) {
    const bool cce = training_loss_.type == LossType::kSparseCategoricalCrossentropy ||
                     training_loss_.type == LossType::kCategoricalCrossentropy;
    if ((cce && last->activation == Activation::kSoftmax) ||
        (training_loss_.type == LossType::kBinaryCrossentropy && last->activation == Activation::kSigmoid)) {
      output_activation_ = last->activation;
      last->activation = Activation::kLinear;
      training_loss_.from_logits = true;
    }
  }

  built_specs_ = built;
  first_node_.assign(s.layers.size(), SIZE_MAX);
  nodes_.resize(s.nodes.size());
  for (size_t n = 0; n < s.nodes.size(); ++n) {
    const NodeSpec& ns = s.nodes[n];
    if (ns.layer >= s.layers.size()) return Internal("node of a layer that does not exist");
    RETURN_IF_ERROR(BuildNode(n, ns, built[ns.layer]));
    if (first_node_[ns.layer] == SIZE_MAX) first_node_[ns.layer] = n;
  }

  // Variables, layer by layer in the order the model lists them.
  for (size_t l = 0; l < s.layers.size(); ++l) {
    if (first_node_[l] == SIZE_MAX) {
      return InvalidArgument(s.layers[l].path + ": layer \"" + s.layers[l].name + "\" is never called");
    }
    auto vars = nodes_[first_node_[l]].impl->Variables();
    for (VariableSpec& v : vars) {
      const LayerSpec& ls = s.layers[l];
      if (EndsWith(v.name, "/bias")) {
        v.regularizer = ls.bias_regularizer;
        v.constraint = ls.bias_constraint;
      } else if (EndsWith(v.name, "/kernel") || EndsWith(v.name, "/embeddings")) {
        v.regularizer = ls.kernel_regularizer;
        v.constraint = ls.kernel_constraint;
      }
    }
    for (size_t n = first_node_[l] + 1; n < nodes_.size(); ++n) {
      if (nodes_[n].layer != l) continue;
      auto again = nodes_[n].impl->Variables();
      bool same = again.size() == vars.size();
      for (size_t i = 0; same && i < vars.size(); ++i) same = again[i].shape == vars[i].shape;
      if (!same) {
        return InvalidArgument(s.nodes[n].path + ": layer \"" + s.layers[l].name +
                               "\" is called again on an input its weights do not fit");
      }
    }
    for (const VariableSpec& v : vars) {
      const bool two_d = v.init.kind == Initializer::Kind::kIdentity && v.shape.size() != 2;
      const bool orth = v.init.kind == Initializer::Kind::kOrthogonal && v.shape.size() < 2;
      if (two_d || orth) {
        return InvalidArgument(s.layers[l].path + ": initializer " + v.init.ToString() + " cannot fill weight " +
                               v.name + " of shape " + ShapeString(v.shape));
      }
    }
    layer_vars_.emplace_back(variables_.size(), vars.size());
    variables_.insert(variables_.end(), vars.begin(), vars.end());
  }

  for (Node& node : nodes_) {
    bool upstream = layer_vars_[node.layer].second > 0;
    for (const TensorRef& r : node.inputs) upstream = upstream || (r.node >= 0 && nodes_[r.node].needs_grad);
    node.needs_grad = node.out_dtype == DType::kFloat32 && upstream;
  }
  output_shape_ = nodes_[static_cast<size_t>(s.output.node)].out_shape;
  FusePooling(nodes_);
  FuseRelus(nodes_);

  return SetUpBatchTime();
}

Status Model::SetUpBatchTime() {
  // Checked now on the shortest length, so a model that cannot have it is
  // refused before any data is read.
  const LayerSpec* text = TextLayer(spec_);
  const std::vector<InputSpec>& in = spec_.inputs;
  if (!text || in.size() != 1 || !in[0].string_input || text->text.output_mode != TextOutput::kInt ||
      text->text.output_sequence_length != 0) {
    return Status::Ok();
  }
  batch_time_ = true;
  time_ = in[0].shape[0];
  if (time_ == 1) return Status::Ok();
  RETURN_IF_ERROR(UseTime(1));
  return UseTime(in[0].shape[0]);
}

Status Model::UseTime(int64_t steps) {
  if (!batch_time_ || steps == time_) return Status::Ok();
  std::vector<Node> next;
  if (auto it = other_times_.find(steps); it != other_times_.end()) {
    next = std::move(it->second);
    other_times_.erase(it);
  } else {
    std::vector<Node> current = std::move(nodes_);
    nodes_.clear();
    nodes_.resize(current.size());
    const Shape full = spec_.inputs[0].shape;
    spec_.inputs[0].shape = {steps};
    Status st = Status::Ok();
    for (size_t n = 0; n < spec_.nodes.size() && st.ok(); ++n) {
      st = BuildNode(n, spec_.nodes[n], built_specs_[spec_.nodes[n].layer]);
    }
    spec_.inputs[0].shape = full;
    std::string why;
    for (size_t n = 0; st.ok() && why.empty() && n < nodes_.size(); ++n) {
      nodes_[n].needs_grad = current[n].needs_grad;
      auto [first, count] = layer_vars_[nodes_[n].layer];
      const auto vars = nodes_[n].impl->Variables();
      bool same = vars.size() == count;
      for (size_t i = 0; same && i < count; ++i) same = vars[i].shape == variables_[first + i].shape;
      if (!same) why = "layer \"" + layer_specs_[nodes_[n].layer].name + "\"'s weights depend on it";
    }
    if (st.ok() && why.empty() && nodes_[static_cast<size_t>(spec_.output.node)].out_shape != output_shape_) {
      why = "the model's output shape depends on it";
    }
    if (st.ok() && why.empty()) {
      FusePooling(nodes_);
      FuseRelus(nodes_);
    }
    next = std::move(nodes_);
    nodes_ = std::move(current);
    if (!st.ok() || !why.empty()) {
      const LayerSpec* text = TextLayer(spec_);
      return InvalidArgument((text ? text->path + ": layer \"" + text->name + "\": " : std::string()) +
                             "output_sequence_length is null, so each batch is padded to its own longest text, as "
                             "Keras pads it, but " +
                             (why.empty() ? st.message() : why) + ": give output_sequence_length");
    }
  }
  other_times_[time_] = std::move(nodes_);
  nodes_ = std::move(next);
  time_ = steps;
  return Status::Ok();
}

Tensor Model::CutToLongest(const Tensor& ids) {
  const int64_t rows = ids.dim(0), width = ids.dim(1);
  const int64_t* p = ids.data<int64_t>();
  int64_t longest = 1;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t t = width; t > longest; --t) {
      if (p[r * width + t - 1] != 0) {
        longest = t;
        break;
      }
    }
  }
  if (longest == width) return ids;
  Tensor out = Tensor::Zeros(DType::kInt64, {rows, longest});
  for (int64_t r = 0; r < rows; ++r)
    std::copy(p + r * width, p + r * width + longest, out.data<int64_t>() + r * longest);
  return out;
}

Status Model::BuildNode(size_t n, const NodeSpec& ns, const LayerSpec& ls) {
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  for (const TensorRef& r : ns.inputs) {
    if (r.node >= static_cast<int64_t>(n) ||
        (r.node < 0 && (r.input < 0 || r.input >= static_cast<int64_t>(spec_.inputs.size())))) {
      return Internal(ns.path + ": a call's input comes after it");
    }
    if (r.node >= 0) {
      shapes.push_back(nodes_[r.node].out_shape);
      dtypes.push_back(nodes_[r.node].out_dtype);
    } else {
      shapes.push_back(spec_.inputs[r.input].shape);
      dtypes.push_back(spec_.inputs[r.input].dtype);
    }
  }
  if (ls.type == LayerType::kStringLookup || ls.type == LayerType::kTextVectorization) {
    const bool from_strings =
        ns.inputs.size() == 1 && ns.inputs[0].node < 0 && spec_.inputs[ns.inputs[0].input].string_input;
    if (!from_strings) {
      return InvalidArgument(ls.path + ": a " + std::string(LayerTypeName(ls.type)) +
                             " takes strings, which only the model's input holds: make it the first layer and "
                             "set model.input_dtype to \"string\"");
    }
  }
  auto made = MakeLayer(ls);
  if (!made.ok()) return made.status().WithContext(ls.path);
  Node& node = nodes_[n];
  node.layer = ns.layer;
  node.impl = std::move(made).value();
  node.inputs = ns.inputs;
  const int arity = node.impl->arity();
  StatusOr<Shape> out = Shape{};
  if (arity == 1) {
    if (ns.inputs.size() != 1) {
      return InvalidArgument(ns.path + ": layer \"" + ls.name + "\" takes one input, got " +
                             std::to_string(ns.inputs.size()));
    }
    out = node.impl->Build(shapes[0], dtypes[0]);
  } else {
    if ((arity == 0 && ns.inputs.size() < 2) || (arity > 0 && ns.inputs.size() != static_cast<size_t>(arity))) {
      return InvalidArgument(ns.path + ": layer \"" + ls.name + "\" takes " +
                             (arity == 0 ? std::string("two or more") : std::to_string(arity)) + " inputs, got " +
                             std::to_string(ns.inputs.size()));
    }
    out = node.impl->BuildMulti(shapes, dtypes);
  }
  if (!out.ok()) return out.status().WithContext(ns.path);
  node.out_shape = *out;
  node.out_dtype = node.impl->output_dtype();
  // Masks: a merge passes its inputs' (their product); any other layer
  // passes, consumes or makes one, or refuses a masked input, as Keras
  // refuses it when the model is built.
  bool in_masked = false;
  for (const TensorRef& r : ns.inputs) in_masked = in_masked || (r.node >= 0 && nodes_[r.node].masked);
  if (arity != 1) {
    node.masked = in_masked;
  } else {
    if (in_masked && node.impl->mask_use() == Layer::MaskUse::kRefuse && !node.impl->makes_mask()) {
      return InvalidArgument(ns.path + ": layer \"" + ls.name + "\" (" + std::string(LayerTypeName(ls.type)) +
                             ") does not support masking, but its input carries a mask (from a Masking layer or an "
                             "Embedding with mask_zero); Keras refuses that too");
    }
    node.masked = node.impl->output_masked(in_masked);
  }
  return Status::Ok();
}

std::vector<Tensor> Model::InitialValues(uint64_t seed) const {
  std::vector<Tensor> values;
  for (size_t i = 0; i < variables_.size(); ++i) {
    const VariableSpec& v = variables_[i];
    Tensor t = Tensor::Zeros(DType::kFloat32, v.shape);
    Rng rng(MixSeed(seed, i));
    if (v.init.kind == Initializer::Kind::kValue) {
      t = v.value.Clone();
    } else {
      // Build refused an Orthogonal or Identity initializer on a weight it
      // cannot fill, so this cannot fail.
      (void)FillInitializer(v.init, t, rng);
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

StatusOr<Tensor> Model::RunTo(size_t target, const Tensor& features) {
  // The calls `target` depends on, which must need no variables.
  std::vector<bool> needed(nodes_.size(), false);
  needed[target] = true;
  for (size_t n = target + 1; n-- > 0;) {
    if (!needed[n]) continue;
    if (n != target && layer_vars_[nodes_[n].layer].second > 0) {
      const LayerSpec& ls = layer_specs_[nodes_[target].layer];
      return InvalidArgument(ls.path + ": layer \"" + ls.name +
                             "\" adapts to the training data, which reaches it only through layers with weights; "
                             "move it before them or give its mean and variance");
    }
    for (const TensorRef& r : nodes_[n].inputs) {
      if (r.node >= 0) needed[r.node] = true;
    }
  }
  ASSIGN_OR_RETURN(std::vector<Tensor> inputs, UnpackInputs(features));
  std::vector<Tensor> outs(nodes_.size());
  auto input_of = [&](const TensorRef& r) -> const Tensor& { return r.node >= 0 ? outs[r.node] : inputs[r.input]; };
  for (size_t n = 0; n < target; ++n) {
    if (!needed[n]) continue;
    Node& node = nodes_[n];
    if (node.impl->arity() == 1) {
      ASSIGN_OR_RETURN(outs[n], node.impl->Forward({}, input_of(node.inputs[0]), false));
    } else {
      std::vector<Tensor> xs;
      for (const TensorRef& r : node.inputs) xs.push_back(input_of(r));
      ASSIGN_OR_RETURN(outs[n], node.impl->ForwardMulti({}, xs, false));
    }
  }
  return input_of(nodes_[target].inputs[0]);
}

Status Model::Adapt(const Tensor& features) {
  if (batch_time_) RETURN_IF_ERROR(UseTime(spec_.inputs[0].shape[0]));
  for (size_t n = 0; n < nodes_.size(); ++n) {
    auto* a = dynamic_cast<internal::AdaptableLayer*>(nodes_[n].impl.get());
    if (!a || !a->adaptable()) continue;
    const size_t l = nodes_[n].layer;
    if (first_node_[l] != n) {
      return InvalidArgument(layer_specs_[l].path + ": layer \"" + layer_specs_[l].name +
                             "\" adapts to the training data and is called more than once");
    }
    ASSIGN_OR_RETURN(Tensor h, RunTo(n, features));
    RETURN_IF_ERROR(a->Adapt(h).WithContext(layer_specs_[l].path));
    auto vars = a->Variables();
    auto [first, count] = layer_vars_[l];
    if (vars.size() != count) return Internal("adapting changed a layer's variables");
    std::copy(vars.begin(), vars.end(), variables_.begin() + static_cast<std::ptrdiff_t>(first));
  }
  return Status::Ok();
}

int64_t Model::adapt_count(size_t l) const {
  const auto* a = dynamic_cast<const internal::AdaptableLayer*>(nodes_[first_node_[l]].impl.get());
  return a ? a->adapt_count() : 0;
}

Status Model::CheckDeviceSupport() const {
  std::vector<size_t> calls(layer_specs_.size(), 0);
  for (const Node& node : nodes_) ++calls[node.layer];
  for (const Node& node : nodes_) {
    const LayerSpec& ls = layer_specs_[node.layer];
    std::string why;
    if (!node.impl->device_kernels()) {
      why = "has no GPU kernel yet";
    } else if (calls[node.layer] > 1 && ls.type == LayerType::kEmbedding) {
      why = "is shared by several calls, whose row gradients are summed on the host only";
    } else if (ls.activity_regularizer.active() || ls.kernel_regularizer.active() || ls.bias_regularizer.active()) {
      why = "has a regularizer, whose penalty is computed on the host only";
    } else if (ls.kernel_constraint.kind != Constraint::Kind::kNone ||
               ls.bias_constraint.kind != Constraint::Kind::kNone) {
      why = "has a weight constraint, which is applied on the host only";
    }
    if (!why.empty()) {
      return FailedPrecondition("layer \"" + ls.name + "\" (" + ls.path + ", " + std::string(LayerTypeName(ls.type)) +
                                ") " + why);
    }
  }
  if (packed_input()) {
    return FailedPrecondition("a model of several inputs computes on the host only (its inputs are unpacked there)");
  }
  return Status::Ok();
}

void Model::Summary(std::ostream& os) const {
  os << "Model: " << (spec_.name.empty() ? (functional() ? "functional" : "sequential") : spec_.name) << "\n";
  os << std::left << std::setw(28) << "Layer (type)" << std::setw(22) << "Output Shape"
     << (functional() ? "Param #   Connected to" : "Param #") << "\n";
  for (size_t n = 0; n < nodes_.size(); ++n) {
    const size_t l = nodes_[n].layer;
    int64_t params = 0;
    if (first_node_[l] == n) {
      for (size_t i = 0; i < layer_vars_[l].second; ++i)
        params += NumElements(variables_[layer_vars_[l].first + i].shape);
    }
    Shape s{-1};
    s.insert(s.end(), nodes_[n].out_shape.begin(), nodes_[n].out_shape.end());
    std::string shape = ShapeString(s);
    shape.replace(1, 2, "None");
    std::string from;
    if (functional()) {
      for (const TensorRef& r : nodes_[n].inputs) {
        from += (from.empty() ? "" : ", ") +
                (r.node >= 0 ? layer_specs_[nodes_[r.node].layer].name : spec_.inputs[r.input].name);
      }
    }
    os << std::setw(28) << (layer_specs_[l].name + " (" + std::string(LayerTypeName(layer_specs_[l].type)) + ")")
       << std::setw(22) << shape;
    if (functional()) {
      os << std::setw(10) << params << from << "\n";
    } else {
      os << params << "\n";
    }
  }
  os << "Total params: " << ParameterCount() << "\n";
}

}  // namespace tfjob::model

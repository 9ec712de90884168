// The model topology of a TF.js export (tfjs_export.h): the Keras JSON the
// model came from when it is Keras 2 form, else a Keras 2-form Sequential or
// Functional ("Model") JSON generated from the ModelSpec, as TF.js'
// model.toJSON() writes them: snake_case configs, the input in a
// batch_input_shape, inbound_nodes as nested lists.
//
// A generated layer config carries what the forward pass needs (units,
// activation, kernel size, strides, padding, rates, axes, ...) and the
// regularizers; initializers and constraints are left to TF.js' defaults
// (the weights come with the export).
#include <set>

#include "services/model/layers.h"
#include "services/model/tfjs_export.h"

namespace tfjob::model {
namespace {

using json = nlohmann::json;

// Keras 3 writes "module", "registered_name" and "build_config" beside
// class_name, and calls as {"args": [...], "kwargs": {...}}.
bool Keras3Form(const json& j) {
  if (j.is_object()) {
    for (const char* k : {"module", "registered_name", "build_config"}) {
      if (j.contains(k)) return true;
    }
    if (j.contains("inbound_nodes") && j["inbound_nodes"].is_array()) {
      for (const json& call : j["inbound_nodes"]) {
        if (call.is_object()) return true;
      }
    }
    for (const auto& [k, v] : j.items()) {
      if (Keras3Form(v)) return true;
    }
  } else if (j.is_array()) {
    for (const json& v : j) {
      if (Keras3Form(v)) return true;
    }
  }
  return false;
}

// Layers the runtime reads from Keras JSON that TF.js 4.22 has no class for.
const std::set<std::string>& NotInTfjs() {
  static const std::set<std::string> s{"Normalization", "StringLookup", "IntegerLookup", "Hashing", "Subtract"};
  return s;
}

Status Unsupported(const LayerSpec& s, const std::string& why) {
  return InvalidArgument("layer \"" + s.name + "\" (" + std::string(LayerTypeName(s.type)) + "): " + why);
}

StatusOr<json> ActivationJson(const LayerSpec& s, Activation a) {
  // TF.js registers neither name.
  if (a == Activation::kLeakyRelu || a == Activation::kExponential) {
    return Unsupported(s, "TF.js 4.22 has no activation \"" + std::string(ActivationName(a)) + "\"");
  }
  return json(std::string(ActivationName(a)));
}

json RegularizerJson(const Regularizer& r) {
  if (!r.active()) return nullptr;
  return {{"class_name", "L1L2"}, {"config", {{"l1", r.l1}, {"l2", r.l2}}}};
}

json Pair(const std::array<int64_t, 2>& a) { return json::array({a[0], a[1]}); }

// A generated layer's config, or an error naming what TF.js cannot express.
StatusOr<json> LayerConfigJson(const LayerSpec& s) {
  json c = {{"name", s.name}, {"trainable", true}, {"dtype", "float32"}};
  auto kernel = [&] {
    c["use_bias"] = s.use_bias;
    c["kernel_regularizer"] = RegularizerJson(s.kernel_regularizer);
    c["bias_regularizer"] = RegularizerJson(s.bias_regularizer);
    c["activity_regularizer"] = RegularizerJson(s.activity_regularizer);
  };
  switch (s.type) {
    case LayerType::kDense: {
      c["units"] = s.units;
      ASSIGN_OR_RETURN(c["activation"], ActivationJson(s, s.activation));
      kernel();
      break;
    }
    case LayerType::kActivation: {
      ASSIGN_OR_RETURN(c["activation"], ActivationJson(s, s.activation));
      break;
    }
    case LayerType::kEmbedding:
      if (s.combiner != Combiner::kNone) {
        return Unsupported(s, "TF.js' Embedding has no combiner (write the model with Keras JSON instead)");
      }
      c["input_dim"] = s.input_dim;
      c["output_dim"] = s.output_dim;
      c["embeddings_regularizer"] = RegularizerJson(s.kernel_regularizer);
      c["mask_zero"] = false;
      break;
    case LayerType::kConv2D: {
      if (s.groups != 1) return Unsupported(s, "TF.js' Conv2D has no groups");
      c["filters"] = s.filters;
      c["kernel_size"] = Pair(s.kernel_size);
      c["strides"] = Pair(s.strides);
      c["padding"] = s.padding == Padding::kSame ? "same" : "valid";
      c["data_format"] = "channels_last";
      c["dilation_rate"] = Pair(s.dilation_rate);
      ASSIGN_OR_RETURN(c["activation"], ActivationJson(s, s.activation));
      kernel();
      break;
    }
    case LayerType::kMaxPooling2D:
    case LayerType::kAveragePooling2D:
      c["pool_size"] = Pair(s.kernel_size);
      c["strides"] = Pair(s.strides);
      c["padding"] = s.padding == Padding::kSame ? "same" : "valid";
      c["data_format"] = "channels_last";
      break;
    case LayerType::kGlobalAveragePooling2D:
    case LayerType::kGlobalMaxPooling2D:
    case LayerType::kGlobalAveragePooling1D:
    case LayerType::kGlobalMaxPooling1D:
      if (s.keepdims) return Unsupported(s, "TF.js' global pooling layers have no keepdims");
      if (s.type == LayerType::kGlobalAveragePooling2D || s.type == LayerType::kGlobalMaxPooling2D) {
        c["data_format"] = "channels_last";
      }
      break;
    case LayerType::kFlatten:
    case LayerType::kAdd:
    case LayerType::kMultiply:
    case LayerType::kAverage:
    case LayerType::kMaximum:
    case LayerType::kMinimum: break;
    case LayerType::kConcatenate: c["axis"] = s.merge_axis; break;
    case LayerType::kDropout: c["rate"] = s.rate; break;
    case LayerType::kBatchNormalization:
      c["axis"] = s.axis;
      c["momentum"] = s.momentum;
      c["epsilon"] = s.epsilon;
      c["center"] = s.center;
      c["scale"] = s.scale;
      break;
    case LayerType::kReshape:
      c["target_shape"] = std::vector<int64_t>(s.target_shape.begin(), s.target_shape.end());
      break;
    case LayerType::kReLU:
      if (s.negative_slope != 0 || s.threshold != 0) {
        return Unsupported(s, "TF.js' ReLU has no negative_slope or threshold");
      }
      c["max_value"] = s.has_max_value ? json(s.max_value) : json(nullptr);
      break;
    case LayerType::kLeakyReLU: c["alpha"] = s.negative_slope; break;
    case LayerType::kSoftmax: c["axis"] = s.axis; break;
    case LayerType::kRescaling:
      c["scale"] = s.rescale;
      c["offset"] = s.offset;
      break;
    case LayerType::kLayerNormalization:
      c["axis"] = s.norm_axes;
      c["epsilon"] = s.epsilon;
      c["center"] = s.center;
      c["scale"] = s.scale;
      break;
    default:
      return Unsupported(s, NotInTfjs().count(std::string(LayerTypeName(s.type)))
                                ? "TF.js 4.22 has no such layer"
                                : "not written for TF.js from a job's model (give it as Keras 2 JSON, "
                                  "--keras-model, to export it)");
  }
  return json{{"class_name", std::string(LayerTypeName(s.type))}, {"config", c}};
}

json BatchShape(const Shape& s) {
  json b = json::array({nullptr});
  for (int64_t d : s) b.push_back(d);
  return b;
}

StatusOr<json> Sequential(const ModelSpec& spec) {
  if (spec.string_input) return InvalidArgument("a model of string input: TF.js has no StringLookup");
  json layers = json::array();
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    ASSIGN_OR_RETURN(json l, LayerConfigJson(spec.layers[i]));
    if (i == 0) {
      // As TF.js writes a Sequential model: the input on the first layer.
      // Ids stay float32 for an Embedding (TF.js casts them), so its
      // weights are float32 too.
      l["config"]["batch_input_shape"] = BatchShape(spec.input_shape);
    }
    layers.push_back(std::move(l));
  }
  return json{{"class_name", "Sequential"},
              {"config", {{"name", spec.name.empty() ? "sequential" : spec.name}, {"layers", layers}}}};
}

StatusOr<json> Functional(const ModelSpec& spec) {
  json layers = json::array();
  json input_layers = json::array();
  for (const InputSpec& in : spec.inputs) {
    if (in.string_input) return InvalidArgument("input \"" + in.name + "\" takes strings: TF.js has no StringLookup");
    json c = {{"batch_input_shape", BatchShape(in.shape)},
              {"dtype", in.dtype == DType::kInt64 ? "int32" : "float32"},
              {"sparse", false},
              {"name", in.name}};
    layers.push_back(
        {{"name", in.name}, {"class_name", "InputLayer"}, {"config", c}, {"inbound_nodes", json::array()}});
    input_layers.push_back({in.name, 0, 0});
  }
  // Each call's place among its layer's calls (Keras' node index), and each
  // layer's entry in `layers`, in the order of the layers' first calls.
  std::vector<int64_t> node_index(spec.nodes.size());
  std::vector<int64_t> calls(spec.layers.size(), 0);
  std::vector<int64_t> entry(spec.layers.size(), -1);
  auto ref = [&](const TensorRef& r) -> json {
    if (r.input >= 0) return {spec.inputs[static_cast<size_t>(r.input)].name, 0, 0, json::object()};
    const NodeSpec& n = spec.nodes[static_cast<size_t>(r.node)];
    return {spec.layers[n.layer].name, node_index[static_cast<size_t>(r.node)], 0, json::object()};
  };
  for (size_t n = 0; n < spec.nodes.size(); ++n) {
    const NodeSpec& ns = spec.nodes[n];
    node_index[n] = calls[ns.layer]++;
    if (entry[ns.layer] < 0) {
      ASSIGN_OR_RETURN(json l, LayerConfigJson(spec.layers[ns.layer]));
      l["name"] = spec.layers[ns.layer].name;
      l["inbound_nodes"] = json::array();
      entry[ns.layer] = static_cast<int64_t>(layers.size());
      layers.push_back(std::move(l));
    }
    json call = json::array();
    for (const TensorRef& r : ns.inputs) call.push_back(ref(r));
    layers[static_cast<size_t>(entry[ns.layer])]["inbound_nodes"].push_back(std::move(call));
  }
  json out = ref(spec.output);
  out.erase(out.size() - 1);  // output_layers are triples
  json config = {{"name", spec.name.empty() ? "model" : spec.name},
                 {"layers", layers},
                 {"input_layers", input_layers},
                 {"output_layers", json::array({out})}};
  return json{{"class_name", "Model"}, {"config", config}};
}

// A Keras 2-form document as given, checked for layers TF.js lacks; a
// Sequential layer without a name gets the runtime's (TF.js would make up
// another, and the weights would not find it).
StatusOr<json> Given(const json& doc, const ModelSpec& spec) {
  json out = doc;
  json* layers = nullptr;
  if (out.contains("config") && out["config"].is_array()) layers = &out["config"];
  if (out.contains("config") && out["config"].is_object() && out["config"].contains("layers")) {
    layers = &out["config"]["layers"];
  }
  if (!layers || !layers->is_array()) return InvalidArgument("the Keras model has no list of layers");
  size_t k = 0;
  for (json& l : *layers) {
    const std::string cls = l.value("class_name", "");
    if (NotInTfjs().count(cls)) {
      std::string name = l.contains("config") && l["config"].is_object() ? l["config"].value("name", "") : "";
      return InvalidArgument("layer \"" + name + "\" (" + cls + "): TF.js 4.22 has no such layer");
    }
    if (cls == "InputLayer" || spec.functional()) continue;
    if (k < spec.layers.size() && l.contains("config") && l["config"].is_object() && !l["config"].contains("name")) {
      l["config"]["name"] = spec.layers[k].name;
    }
    ++k;
  }
  return out;
}

}  // namespace

StatusOr<json> TfjsTopology(const ModelSpec& spec, const json* keras_model) {
  try {
    StatusOr<json> t = keras_model && !Keras3Form(*keras_model) ? Given(*keras_model, spec)
                       : spec.functional()                      ? Functional(spec)
                                                                : Sequential(spec);
    if (!t.ok()) return t.status().WithContext("--export-tfjs");
    return t;
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("--export-tfjs: cannot write the model's topology (") + e.what() + ")");
  }
}

}  // namespace tfjob::model

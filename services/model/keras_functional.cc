// Keras Functional models: the layer list with each layer's calls
// (inbound_nodes), the inputs and the output, into a ModelSpec graph.
//
//   Keras 2 (tf.keras 2, TF.js): {"class_name": "Model" | "Functional",
//     "config": {"layers": [{"name", "class_name", "config",
//     "inbound_nodes": [[["layer", node_index, tensor_index, {kwargs}], ...],
//     ...]}], "input_layers": [["name", 0, 0], ...], "output_layers": [...]}}
//   Keras 3: the same layer list, each call {"args": [tensor or [tensors]],
//     "kwargs": {...}} with tensors {"class_name": "__keras_tensor__",
//     "config": {"keras_history": ["layer", node_index, tensor_index]}};
//     input_layers / output_layers a list of triples, or one triple.
#include <map>
#include <tuple>

#include "services/model/keras_config.h"
#include "services/model/keras_model.h"

namespace tfjob::model::keras {
namespace {

struct History {
  std::string layer;
  int64_t node = 0, tensor = 0;
};

// ["name", node, tensor] or ["name", node, tensor, {kwargs}].
StatusOr<History> Triple(const json& v, const std::string& where) {
  if (!v.is_array() || v.size() < 3 || !v[0].is_string() || !v[1].is_number_integer() || !v[2].is_number_integer()) {
    return InvalidArgument(where + ": expected [\"layer\", node_index, tensor_index], got " + Dump(v));
  }
  if (v.size() > 3 && !(v[3].is_object() && v[3].empty()) && !v[3].is_null()) {
    for (auto it = v[3].begin(); v[3].is_object() && it != v[3].end(); ++it) {
      if (!it->is_null() && it.key() != "training") {
        return InvalidArgument(where + ": call argument " + it.key() + "=" + Dump(*it) + " is not supported");
      }
    }
  }
  return History{v[0].get<std::string>(), v[1].get<int64_t>(), v[2].get<int64_t>()};
}

// A Keras 3 tensor argument.
StatusOr<History> KerasTensor(const json& v, const std::string& where) {
  if (v.is_object() && StringOr(v, "class_name", "") == "__keras_tensor__" && v.contains("config") &&
      v["config"].is_object() && v["config"].contains("keras_history")) {
    return Triple(v["config"]["keras_history"], where);
  }
  return InvalidArgument(where + ": expected a Keras tensor, got " + Dump(v));
}

// One call's inputs, in either form.
StatusOr<std::vector<History>> CallInputs(const json& call, const std::string& where) {
  std::vector<History> out;
  if (call.is_array()) {  // Keras 2
    for (const json& t : call) {
      ASSIGN_OR_RETURN(History h, Triple(t, where));
      out.push_back(h);
    }
    return out;
  }
  if (!call.is_object() || !call.contains("args") || !call["args"].is_array()) {
    return InvalidArgument(where + ": expected a call (a list of inputs, or {\"args\": ..., \"kwargs\": ...}), got " +
                           Dump(call));
  }
  const json& args = call["args"];
  if (args.size() != 1) {
    return InvalidArgument(where + ": a call of " + std::to_string(args.size()) +
                           " positional arguments is not supported");
  }
  if (args[0].is_array()) {
    for (const json& t : args[0]) {
      ASSIGN_OR_RETURN(History h, KerasTensor(t, where));
      out.push_back(h);
    }
  } else {
    ASSIGN_OR_RETURN(History h, KerasTensor(args[0], where));
    out.push_back(h);
  }
  if (call.contains("kwargs") && call["kwargs"].is_object()) {
    for (auto it = call["kwargs"].begin(); it != call["kwargs"].end(); ++it) {
      if (!it->is_null() && it.key() != "training") {
        return InvalidArgument(where + ": call argument " + it.key() + "=" + Dump(*it) + " is not supported");
      }
    }
  }
  return out;
}

// input_layers / output_layers: a list of triples, or Keras 3's one triple.
StatusOr<std::vector<History>> Endpoints(const json& config, const char* key, const std::string& source) {
  const std::string where = source + ": config." + key;
  if (!config.contains(key)) return InvalidArgument(where + " is missing");
  const json& v = config[key];
  std::vector<History> out;
  if (v.is_array() && v.size() == 3 && v[0].is_string()) {
    ASSIGN_OR_RETURN(History h, Triple(v, where));
    out.push_back(h);
    return out;
  }
  if (!v.is_array() || v.empty()) return InvalidArgument(where + ": expected a list of [\"layer\", 0, 0]");
  for (const json& t : v) {
    ASSIGN_OR_RETURN(History h, Triple(t, where));
    out.push_back(h);
  }
  return out;
}

struct RawLayer {
  std::string cls, name, where, path;
  const json* config = nullptr;
  const json* inbound = nullptr;
  int64_t spec = -1;   // index into ModelSpec::layers
  int64_t input = -1;  // an InputLayer: index into ModelSpec::inputs
};

// (layer, call, output) to the tensor.
using Made = std::map<std::tuple<std::string, int64_t, int64_t>, TensorRef>;

// How many outputs a layer has (spec.h: return_state, bidi_split).
int64_t NumOutputs(const LayerSpec& s) {
  if (s.return_state) return s.type == LayerType::kLSTM ? 3 : 2;
  return s.bidi_split ? 2 : 1;
}

// The calls of every layer, each once its inputs exist (Keras' own
// deserialization order), into m.nodes; `made` maps (layer, call, output)
// to the tensor. A call of a layer of several outputs makes one node that
// computes them packed, and a kOutputPart node for each.
Status ResolveCalls(const std::vector<RawLayer>& raw, const std::map<std::string, size_t>& by_name, ModelSpec& m,
                    Made& made) {
  for (const RawLayer& r : raw) {
    if (r.input >= 0) made[{r.name, 0, 0}] = TensorRef{-1, r.input};
  }
  struct Pending {
    size_t raw;
    int64_t call;
    std::vector<History> from;
  };
  std::vector<Pending> pending;
  for (size_t i = 0; i < raw.size(); ++i) {
    const RawLayer& r = raw[i];
    if (r.input >= 0) continue;
    if (!r.inbound || !r.inbound->is_array() || r.inbound->empty()) {
      return InvalidArgument(r.where + ": the layer is never called (no inbound_nodes)");
    }
    for (size_t k = 0; k < r.inbound->size(); ++k) {
      const std::string where = r.where + ": inbound_nodes[" + std::to_string(k) + "]";
      ASSIGN_OR_RETURN(std::vector<History> from, CallInputs((*r.inbound)[k], where));
      for (const History& h : from) {
        if (!by_name.count(h.layer)) return InvalidArgument(where + ": no layer is named \"" + h.layer + "\"");
        const RawLayer& from_layer = raw[by_name.at(h.layer)];
        const int64_t outputs = from_layer.spec >= 0 ? NumOutputs(m.layers[from_layer.spec]) : 1;
        if (h.tensor < 0 || h.tensor >= outputs) {
          return InvalidArgument(where + ": output " + std::to_string(h.tensor) + " of layer \"" + h.layer +
                                 "\", which has " + std::to_string(outputs));
        }
      }
      if (from.empty()) return InvalidArgument(where + ": a call without inputs");
      pending.push_back(Pending{i, static_cast<int64_t>(k), std::move(from)});
    }
  }
  while (!pending.empty()) {
    bool progress = false;
    for (auto it = pending.begin(); it != pending.end();) {
      bool ready = true;
      for (const History& h : it->from) ready = ready && made.count({h.layer, h.node, h.tensor});
      if (!ready) {
        ++it;
        continue;
      }
      const RawLayer& r = raw[it->raw];
      NodeSpec n;
      n.layer = static_cast<size_t>(r.spec);
      for (const History& h : it->from) n.inputs.push_back(made[{h.layer, h.node, h.tensor}]);
      n.path = r.where + (r.inbound->size() > 1 ? " call " + std::to_string(it->call) : "");
      const TensorRef packed{static_cast<int64_t>(m.nodes.size()), -1};
      m.nodes.push_back(n);
      const LayerSpec src = m.layers[n.layer];
      const int64_t outputs = NumOutputs(src);
      if (outputs == 1) made[{r.name, it->call, 0}] = packed;
      for (int64_t k = 0; outputs > 1 && k < outputs; ++k) {
        LayerSpec part;
        part.type = LayerType::kOutputPart;
        part.name = src.name + (it->call ? "_call" + std::to_string(it->call) : "") + "/output_" + std::to_string(k);
        part.path = n.path + " output " + std::to_string(k);
        part.units = src.type == LayerType::kBidirectional ? src.wrapped[0].units : src.units;
        part.output_index = k;
        part.part_of_states = src.return_state;
        part.part_states = outputs - 1;
        // A sequence output keeps the time-step mask; the states do not.
        part.return_sequences =
            src.type == LayerType::kBidirectional ? src.return_sequences : k == 0 && src.return_sequences;
        NodeSpec pn;
        pn.layer = m.layers.size();
        pn.inputs = {packed};
        pn.path = part.path;
        m.layers.push_back(std::move(part));
        made[{r.name, it->call, k}] = TensorRef{static_cast<int64_t>(m.nodes.size()), -1};
        m.nodes.push_back(std::move(pn));
      }
      it = pending.erase(it);
      progress = true;
    }
    if (!progress) {
      const Pending& p = pending.front();
      std::string missing;
      for (const History& h : p.from) {
        if (!made.count({h.layer, h.node, h.tensor})) missing = h.layer + "[" + std::to_string(h.node) + "]";
      }
      return InvalidArgument(raw[p.raw].where + ": call " + std::to_string(p.call) + " takes " + missing +
                             ", which no call makes (a cycle, or a node index out of range)");
    }
  }

  return Status::Ok();
}

}  // namespace

StatusOr<ModelSpec> ParseFunctional(const json& doc, const std::string& source) {
  const json* config = doc.contains("config") ? &doc["config"] : nullptr;
  if (!config || !config->is_object() || !config->contains("layers") || !(*config)["layers"].is_array()) {
    return InvalidArgument(source + ": config.layers: expected the list of layers");
  }
  ModelSpec m;
  m.name = StringOr(*config, "name", "");
  const json& layers = (*config)["layers"];
  std::vector<RawLayer> raw;
  std::map<std::string, size_t> by_name;
  static const json kEmpty = json::object();
  for (size_t i = 0; i < layers.size(); ++i) {
    const json& l = layers[i];
    const std::string at = "layers[" + std::to_string(i) + "]";
    if (!l.is_object() || !l.contains("class_name") || !l["class_name"].is_string() ||
        (l.contains("config") && !l["config"].is_object())) {
      return InvalidArgument(source + ": " + at + ": expected {\"class_name\": ..., \"config\": {...}}");
    }
    RawLayer r;
    r.cls = l["class_name"].get<std::string>();
    r.config = l.contains("config") ? &l["config"] : &kEmpty;
    r.name = StringOr(l, "name", StringOr(*r.config, "name", ""));
    if (r.name.empty()) return InvalidArgument(source + ": " + at + " (" + r.cls + "): no name");
    r.path = source + ": " + at;
    r.where = r.path + " (" + r.cls + " \"" + r.name + "\")";
    r.inbound = l.contains("inbound_nodes") ? &l["inbound_nodes"] : nullptr;
    if (!by_name.emplace(r.name, raw.size()).second) {
      return InvalidArgument(r.where + ": duplicate layer name \"" + r.name + "\"");
    }
    raw.push_back(std::move(r));
  }

  // The inputs, in input_layers' order.
  ASSIGN_OR_RETURN(std::vector<History> ins, Endpoints(*config, "input_layers", source));
  for (const History& h : ins) {
    auto it = by_name.find(h.layer);
    if (it == by_name.end() || raw[it->second].cls != "InputLayer") {
      return InvalidArgument(source + ": config.input_layers names \"" + h.layer + "\", which is no InputLayer");
    }
    RawLayer& r = raw[it->second];
    const json& cfg = *r.config;
    const char* key = cfg.contains("batch_shape") ? "batch_shape" : "batch_input_shape";
    if (!cfg.contains(key)) return InvalidArgument(r.where + ": no batch_shape");
    ModelSpec probe;
    ASSIGN_OR_RETURN(Shape shape, ParseBatchShape(cfg[key], r.where + ": " + key));
    RETURN_IF_ERROR(ParseInputDType(cfg.contains("dtype") ? &cfg["dtype"] : nullptr, r.where, probe));
    for (const char* k : {"sparse", "ragged", "optional"}) {
      if (cfg.contains(k) && cfg[k] != false && !cfg[k].is_null()) {
        return InvalidArgument(r.where + ": argument " + std::string(k) + "=true is not supported");
      }
    }
    r.input = static_cast<int64_t>(m.inputs.size());
    m.inputs.push_back(InputSpec{r.name, shape, probe.input_dtype, probe.string_input});
  }

  // Every other layer's config.
  for (RawLayer& r : raw) {
    if (r.cls == "InputLayer") {
      if (r.input < 0) return InvalidArgument(r.where + ": an InputLayer that config.input_layers does not list");
      continue;
    }
    json rest = *r.config;
    // TF.js and Keras 2 may leave the shape a layer was first built with.
    rest.erase("batch_input_shape");
    rest.erase("input_shape");
    LayerSpec s;
    s.path = r.path;
    Config c(rest, r.where);
    RETURN_IF_ERROR(ParseLayerConfig(r.cls, c, s));
    if (s.name.empty()) s.name = r.name;
    r.spec = static_cast<int64_t>(m.layers.size());
    m.layers.push_back(std::move(s));
  }

  Made made;
  RETURN_IF_ERROR(ResolveCalls(raw, by_name, m, made));

  ASSIGN_OR_RETURN(std::vector<History> outs, Endpoints(*config, "output_layers", source));
  if (outs.size() != 1) {
    std::string names;
    for (const History& h : outs) names += (names.empty() ? "" : ", ") + h.layer;
    return InvalidArgument(source + ": the model has " + std::to_string(outs.size()) + " outputs (" + names +
                           "): only models of one output are supported (Keras' per-output losses are not)");
  }
  auto out = made.find({outs[0].layer, outs[0].node, outs[0].tensor});
  if (out == made.end()) {
    return InvalidArgument(source + ": config.output_layers names \"" + outs[0].layer + "\" call " +
                           std::to_string(outs[0].node) + ", which does not exist");
  }
  m.output = out->second;
  if (m.nodes.empty()) return InvalidArgument(source + ": the model has no layers");
  if (m.inputs.size() == 1) {
    m.input_shape = m.inputs[0].shape;
    m.input_dtype = m.inputs[0].dtype;
    m.string_input = m.inputs[0].string_input;
  }
  return m;
}

}  // namespace tfjob::model::keras

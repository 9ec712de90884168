// Reading one Keras layer config: the Config reader that takes every key of
// a layer's "config" (read, checked against what this runtime implements, or
// reported), shared by keras_model.cc (the model and the original layers)
// and keras_layers.cc (the layers added for Functional models).
//
// Thread-safety: a Config reads one layer's JSON, on one thread. Failure:
// every error is INVALID_ARGUMENT prefixed with the layer's place
// ("model.json: layers[3] (Conv1D \"c\"): argument ...").
#pragma once

#include <functional>
#include <initializer_list>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "services/model/spec.h"

namespace tfjob::model::keras {

using json = nlohmann::json;

inline std::string Dump(const json& v) {
  std::string s = v.dump();
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

// j[key] when j is an object holding a string (a number) there, else
// `fallback`: json::value() throws on a value of another kind, and a model
// file may hold anything.
inline std::string StringOr(const json& j, const char* key, const std::string& fallback) {
  auto it = j.is_object() ? j.find(key) : j.end();
  return j.is_object() && it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}
inline double NumberOr(const json& j, const char* key, double fallback) {
  auto it = j.is_object() ? j.find(key) : j.end();
  return j.is_object() && it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

// Reads a layer's config: every key is taken, checked against what this
// runtime implements, or reported.
class Config {
 public:
  Config(const json& cfg, std::string where) : cfg_(cfg), where_(std::move(where)) {}

  Status Error(const std::string& what) const { return InvalidArgument(where_ + ": " + what); }
  const std::string& where() const { return where_; }

  // The value, or nullptr when absent or null; the key is consumed.
  const json* Take(const std::string& key) {
    taken_.insert(key);
    auto it = cfg_.find(key);
    return it == cfg_.end() || it->is_null() ? nullptr : &*it;
  }

  // Whether the key is there at all (null included).
  bool Present(const std::string& key) const { return cfg_.contains(key); }

  Status Int(const std::string& key, int64_t& out, bool required = false) {
    const json* v = Take(key);
    if (!v) return required ? Error("argument " + key + " is missing") : Status::Ok();
    if (!v->is_number_integer()) return Error("argument " + key + "=" + Dump(*v) + " is not an integer");
    out = v->get<int64_t>();
    return Status::Ok();
  }
  Status Number(const std::string& key, double& out) {
    const json* v = Take(key);
    if (!v) return Status::Ok();
    if (!v->is_number()) return Error("argument " + key + "=" + Dump(*v) + " is not a number");
    out = v->get<double>();
    return Status::Ok();
  }
  Status Bool(const std::string& key, bool& out) {
    const json* v = Take(key);
    if (!v) return Status::Ok();
    if (!v->is_boolean()) return Error("argument " + key + "=" + Dump(*v) + " is not true or false");
    out = v->get<bool>();
    return Status::Ok();
  }
  Status String(const std::string& key, std::string& out) {
    const json* v = Take(key);
    if (!v) return Status::Ok();
    if (!v->is_string()) return Error("argument " + key + "=" + Dump(*v) + " is not a string");
    out = v->get<std::string>();
    return Status::Ok();
  }
  // n or [h, w].
  Status Pair(const std::string& key, std::array<int64_t, 2>& out, bool required = false) {
    const json* v = Take(key);
    if (!v) return required ? Error("argument " + key + " is missing") : Status::Ok();
    auto ok = [](const json& x) { return x.is_number_integer() && x.get<int64_t>() > 0; };
    if (ok(*v)) {
      out = {v->get<int64_t>(), v->get<int64_t>()};
    } else if (v->is_array() && v->size() == 2 && ok((*v)[0]) && ok((*v)[1])) {
      out = {(*v)[0].get<int64_t>(), (*v)[1].get<int64_t>()};
    } else {
      return Error("argument " + key + "=" + Dump(*v) + " is not a positive integer or a pair of them");
    }
    return Status::Ok();
  }
  // Absent, null, or one of `allowed` (what this runtime does).
  Status Only(const std::string& key, std::initializer_list<json> allowed, const std::string& meaning) {
    const json* v = Take(key);
    if (!v) return Status::Ok();
    for (const json& a : allowed) {
      if (*v == a) return Status::Ok();
    }
    return Error("argument " + key + "=" + Dump(*v) + " is not supported (" + meaning + ")");
  }
  Status Null(const std::string& key) {
    const json* v = Take(key);
    if (!v) return Status::Ok();
    return Error("argument " + key + "=" + Dump(*v) + " is not supported (only null)");
  }
  // An initializer of one of `classes` (Keras 3's object or Keras 2's name
  // or object); `check` may look at its config.
  Status Initializer(const std::string& key, std::initializer_list<const char*> classes,
                     const std::function<bool(const json&)>& check = nullptr) {
    const json* v = Take(key);
    if (!v) return Status::Ok();
    std::string name;
    json config = json::object();
    if (v->is_string()) {
      name = v->get<std::string>();
    } else if (v->is_object() && v->contains("class_name") && (*v)["class_name"].is_string()) {
      name = (*v)["class_name"].get<std::string>();
      if (v->contains("config") && (*v)["config"].is_object()) config = (*v)["config"];
    }
    for (const char* c : classes) {
      if (name == c && (!check || check(config))) return Status::Ok();
    }
    std::string known;
    for (const char* c : classes) known += (known.empty() ? "" : ", ") + std::string(c);
    return Error("argument " + key + "=" + Dump(*v) + " is not supported (only " + known + ")");
  }
  // The keys every layer has: name (read), trainable, dtype.
  Status Common(LayerSpec& s, bool lookup = false) {
    RETURN_IF_ERROR(String("name", s.name));
    RETURN_IF_ERROR(Only("trainable", {true}, "layers cannot be frozen"));
    const json* dtype = Take("dtype");
    if (dtype) {
      std::string name;
      if (dtype->is_string()) name = dtype->get<std::string>();
      if (dtype->is_object() && dtype->contains("config") && (*dtype)["config"].is_object() &&
          (*dtype)["config"].contains("name") && (*dtype)["config"]["name"].is_string()) {
        name = (*dtype)["config"]["name"].get<std::string>();
      }
      if (lookup && (name == "int64" || name == "int32" || name == "string")) return Status::Ok();
      // Keras 2's policy names and Policy objects, Keras 3's DTypePolicy.
      auto p = ParsePrecision(name);
      if (!p.ok()) return Error("argument dtype=" + Dump(*dtype) + ": " + p.status().message());
      s.precision = *p;
    }
    return Status::Ok();
  }

  // Keys the caller did not take.
  Status Finish() const {
    for (auto it = cfg_.begin(); it != cfg_.end(); ++it) {
      if (!taken_.count(it.key())) return Error("argument " + it.key() + " is not supported");
    }
    return Status::Ok();
  }

 private:
  const json& cfg_;
  std::string where_;
  std::set<std::string> taken_;
};

// Arguments many layers share, each read into `s` (errors name the layer
// and argument):
// kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer,
// activity_regularizer, kernel_constraint, bias_constraint (and Keras 3's
// lora_rank, lora_alpha, quantization_config, which must be null).
Status WeightArguments(Config& c, LayerSpec& s, bool bias);
Status InitializerArgument(Config& c, const std::string& key, Initializer& out);
Status RegularizerArgument(Config& c, const std::string& key, Regularizer& out);
Status ConstraintArgument(Config& c, const std::string& key, Constraint& out);
// activation (a Keras name).
Status ActivationArgument(Config& c, LayerSpec& s, bool required = false);
// padding (valid, same) and data_format (channels_last only).
Status PaddingArgument(Config& c, LayerSpec& s);

// keras_model.cc's readers, for keras_functional.cc: one layer's config by
// class name; an input's [null, dims...] (every dimension but the batch
// fixed); an input's dtype into `m`'s input_dtype / string_input.
Status ParseLayerConfig(const std::string& cls, Config& c, LayerSpec& s);
StatusOr<Shape> ParseBatchShape(const json& v, const std::string& where);
Status ParseInputDType(const json* dtype, const std::string& where, ModelSpec& m);
// A Functional model ("Model" or "Functional"), in Keras 2's or Keras 3's
// form (keras_model.h).
StatusOr<ModelSpec> ParseFunctional(const json& doc, const std::string& source);

// The layers beyond the original ones (keras_layers.cc): fills `s` from `c`
// for class `cls`; false when `cls` is none of them.
StatusOr<bool> ParseMoreLayer(const std::string& cls, Config& c, LayerSpec& s);
// Their class names, for the "supported:" list of an error.
std::string MoreLayerNames();

}  // namespace tfjob::model::keras

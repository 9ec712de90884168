#include "services/model/keras_model.h"

#include <cctype>
#include <functional>
#include <set>

#include "common/json_reader.h"
#include "services/model/keras_config.h"
#include "services/model/layers.h"
#include "services/model/preprocessing.h"

namespace tfjob::model {
namespace {

using json = nlohmann::json;
using keras::Config;
using keras::Dump;
using keras::NumberOr;
using keras::StringOr;

}  // namespace

namespace {

using keras::ActivationArgument;
using keras::WeightArguments;

Status Lookup(Config& c, LayerSpec& s, bool strings) {
  LookupSpec& l = s.lookup;
  if (!strings) l.oov_token.clear();
  RETURN_IF_ERROR(c.Bool("invert", l.invert));
  RETURN_IF_ERROR(c.Int("num_oov_indices", l.num_oov_indices));
  RETURN_IF_ERROR(c.Only("output_mode", {"int"}, "only \"int\""));
  RETURN_IF_ERROR(c.Only("sparse", {false}, "only false"));
  RETURN_IF_ERROR(c.Only("pad_to_max_tokens", {false}, "only false"));
  RETURN_IF_ERROR(c.Null("idf_weights"));
  RETURN_IF_ERROR(c.Only("encoding", {"utf-8"}, "only utf-8"));
  RETURN_IF_ERROR(c.Only("vocabulary_dtype", {"string", "int64"}, "string or int64"));
  RETURN_IF_ERROR(c.Only("oov_method", {"floormod"}, "only floormod"));
  (void)c.Take("vocabulary_size");  // what the vocabulary gives anyway
  (void)c.Take("has_input_vocabulary");
  const json* v = c.Take("vocabulary");
  if (!v || !v->is_array()) {
    return c.Error(
        "argument vocabulary must be a list of terms (a layer adapted in Keras keeps its vocabulary in "
        "assets, which to_json() does not write)");
  }
  for (const json& t : *v) {
    if (!AddVocabularyTerm(t, strings, l)) {
      return c.Error("argument vocabulary holds " + Dump(t) + ", not " + (strings ? "a string" : "an integer"));
    }
  }
  for (const char* key : {"mask_token", "oov_token"}) {
    const json* t = c.Take(key);
    if (!t) continue;
    const bool mask = std::string(key) == "mask_token";
    if (!SetSpecialToken(*t, strings, mask, l)) {
      return c.Error("argument " + std::string(key) + "=" + Dump(*t) + " is not " +
                     (strings ? "a string" : "an integer"));
    }
    if (mask) l.has_mask = true;
  }
  int64_t max_tokens = 0;
  RETURN_IF_ERROR(c.Int("max_tokens", max_tokens));
  auto table = Lookup::Create(l, strings);
  if (!table.ok()) return c.Error(table.status().message());
  if (max_tokens > 0 && table->vocabulary_size() > max_tokens) {
    return c.Error("the vocabulary has " + std::to_string(table->vocabulary_size()) +
                   " entries, more than max_tokens " + std::to_string(max_tokens));
  }
  return Status::Ok();
}

// Dropout: a rate in [0, 1) and an optional seed; noise_shape is not supported.
Status DropoutLayer(Config& c, LayerSpec& s) {
  s.type = LayerType::kDropout;
  RETURN_IF_ERROR(c.Common(s));
  const json* rate = c.Take("rate");
  if (!rate || !rate->is_number()) return c.Error("argument rate is missing");
  s.rate = rate->get<double>();
  if (!(s.rate >= 0 && s.rate < 1)) return c.Error("argument rate=" + Dump(*rate) + " must be in [0, 1)");
  RETURN_IF_ERROR(c.Int("seed", s.seed));
  RETURN_IF_ERROR(c.Null("noise_shape"));
  return Status::Ok();
}

// BatchNormalization over one axis with per-replica batch statistics: the
// default initializers only, no renormalization or regularizers.
Status BatchNormalizationLayer(Config& c, LayerSpec& s) {
  s.type = LayerType::kBatchNormalization;
  RETURN_IF_ERROR(c.Common(s));
  const json* axis = c.Take("axis");
  if (axis) {
    const json& a = axis->is_array() && axis->size() == 1 ? (*axis)[0] : *axis;
    if (!a.is_number_integer()) return c.Error("argument axis=" + Dump(*axis) + " is not supported (one axis)");
    s.axis = a.get<int64_t>();
  }
  RETURN_IF_ERROR(c.Number("momentum", s.momentum));
  RETURN_IF_ERROR(c.Number("epsilon", s.epsilon));
  RETURN_IF_ERROR(c.Bool("center", s.center));
  RETURN_IF_ERROR(c.Bool("scale", s.scale));
  RETURN_IF_ERROR(c.Initializer("beta_initializer", {"Zeros", "zeros"}));
  RETURN_IF_ERROR(c.Initializer("gamma_initializer", {"Ones", "ones"}));
  RETURN_IF_ERROR(c.Initializer("moving_mean_initializer", {"Zeros", "zeros"}));
  RETURN_IF_ERROR(c.Initializer("moving_variance_initializer", {"Ones", "ones"}));
  for (const char* k : {"beta_regularizer", "gamma_regularizer", "beta_constraint", "gamma_constraint",
                        "renorm_clipping", "virtual_batch_size", "adjustment"}) {
    RETURN_IF_ERROR(c.Null(k));
  }
  RETURN_IF_ERROR(c.Only("synchronized", {false}, "batch statistics are per replica"));
  RETURN_IF_ERROR(c.Only("renorm", {false}, "only false"));
  (void)c.Take("renorm_momentum");  // unused without renorm
  (void)c.Take("fused");            // an implementation choice, same result
  return Status::Ok();
}

// Reshape to a fixed target shape (without the batch dimension).
Status ReshapeLayer(Config& c, LayerSpec& s) {
  s.type = LayerType::kReshape;
  RETURN_IF_ERROR(c.Common(s));
  const json* t = c.Take("target_shape");
  if (!t || !t->is_array() || t->empty()) return c.Error("argument target_shape is missing");
  for (const json& d : *t) {
    // TF.js writes the inferred dimension, -1, as null.
    if (d.is_null()) {
      s.target_shape.push_back(-1);
      continue;
    }
    if (!d.is_number_integer()) return c.Error("argument target_shape=" + Dump(*t) + " is not a list of integers");
    s.target_shape.push_back(d.get<int64_t>());
  }
  return Status::Ok();
}

// Embedding with Keras' default uniform initializer; no masking, no sparse
// gradients, no regularizers.
Status EmbeddingLayer(Config& c, LayerSpec& s) {
  s.type = LayerType::kEmbedding;
  RETURN_IF_ERROR(c.Common(s));
  RETURN_IF_ERROR(c.Int("input_dim", s.input_dim, true));
  RETURN_IF_ERROR(c.Int("output_dim", s.output_dim, true));
  RETURN_IF_ERROR(keras::InitializerArgument(c, "embeddings_initializer", s.embeddings_initializer));
  RETURN_IF_ERROR(keras::RegularizerArgument(c, "embeddings_regularizer", s.kernel_regularizer));
  RETURN_IF_ERROR(keras::ConstraintArgument(c, "embeddings_constraint", s.kernel_constraint));
  RETURN_IF_ERROR(keras::RegularizerArgument(c, "activity_regularizer", s.activity_regularizer));
  for (const char* k : {"lora_rank", "lora_alpha", "quantization_config"}) RETURN_IF_ERROR(c.Null(k));
  RETURN_IF_ERROR(c.Bool("mask_zero", s.mask_zero));
  RETURN_IF_ERROR(c.Only("sparse", {false}, "only false"));
  (void)c.Take("input_length");  // Keras 2: the input shape says it
  return Status::Ok();
}

// Normalization over the last axis or over everything (axis=None), with the
// mean and variance given in the config (adapt() is not supported).
Status NormalizationLayer(Config& c, LayerSpec& s) {
  s.type = LayerType::kNormalization;
  RETURN_IF_ERROR(c.Common(s));
  auto it = c.Take("axis");
  if (!it) {
    // null: one scalar mean and variance (Keras' axis=None)
    s.axis_none = true;
  } else {
    const json& a = it->is_array() && it->size() == 1 ? (*it)[0] : *it;
    if (!(a.is_number_integer() && a.get<int64_t>() == -1)) {
      return c.Error("argument axis=" + Dump(*it) + " is not supported (-1 or null)");
    }
  }
  for (const char* k : {"mean", "variance"}) {
    const json* v = c.Take(k);
    if (!v) continue;
    std::vector<double>& out = std::string(k) == "mean" ? s.mean : s.variance;
    if (v->is_number()) {
      out = {v->get<double>()};
    } else if (v->is_array()) {
      for (const json& x : *v) {
        if (!x.is_number()) return c.Error("argument " + std::string(k) + "=" + Dump(*v) + " is not a list of numbers");
        out.push_back(x.get<double>());
      }
    } else {
      return c.Error("argument " + std::string(k) + "=" + Dump(*v) + " is not a number or a list of them");
    }
  }
  if (s.mean.size() != s.variance.size()) return c.Error("arguments mean and variance must be given together");
  RETURN_IF_ERROR(c.Bool("invert", s.invert));
  return Status::Ok();
}

// The merge layers: Concatenate's axis, Dot's axes and normalize.
Status MergeLayer(const std::string& cls, Config& c, LayerSpec& s) {
  static const std::pair<const char*, LayerType> kTypes[] = {{"Add", LayerType::kAdd},
                                                             {"Subtract", LayerType::kSubtract},
                                                             {"Multiply", LayerType::kMultiply},
                                                             {"Average", LayerType::kAverage},
                                                             {"Maximum", LayerType::kMaximum},
                                                             {"Minimum", LayerType::kMinimum},
                                                             {"Concatenate", LayerType::kConcatenate},
                                                             {"Dot", LayerType::kDot}};
  for (const auto& [name, type] : kTypes) {
    if (cls == name) s.type = type;
  }
  RETURN_IF_ERROR(c.Common(s));
  if (s.type == LayerType::kConcatenate) RETURN_IF_ERROR(c.Int("axis", s.merge_axis));
  if (s.type == LayerType::kDot) {
    const json* axes = c.Take("axes");
    if (!axes) return c.Error("argument axes is missing");
    auto ok = [](const json& a) { return a.is_number_integer(); };
    if (ok(*axes)) {
      s.dot_axes = {axes->get<int64_t>(), axes->get<int64_t>()};
    } else if (axes->is_array() && axes->size() == 2 && ok((*axes)[0]) && ok((*axes)[1])) {
      s.dot_axes = {(*axes)[0].get<int64_t>(), (*axes)[1].get<int64_t>()};
    } else {
      return c.Error("argument axes=" + Dump(*axes) + " is not an integer or a pair of them");
    }
    RETURN_IF_ERROR(c.Bool("normalize", s.normalize));
  }
  return Status::Ok();
}

// One layer's config into `s`.
Status LayerConfig(const std::string& cls, Config& c, LayerSpec& s) {
  if (cls == "Dense") {
    s.type = LayerType::kDense;
    RETURN_IF_ERROR(c.Common(s));
    RETURN_IF_ERROR(c.Int("units", s.units, true));
    RETURN_IF_ERROR(ActivationArgument(c, s));
    RETURN_IF_ERROR(c.Bool("use_bias", s.use_bias));
    RETURN_IF_ERROR(WeightArguments(c, s, true));
  } else if (cls == "Conv2D") {
    s.type = LayerType::kConv2D;
    RETURN_IF_ERROR(c.Common(s));
    RETURN_IF_ERROR(c.Int("filters", s.filters, true));
    RETURN_IF_ERROR(c.Pair("kernel_size", s.kernel_size, true));
    RETURN_IF_ERROR(c.Pair("strides", s.strides));
    RETURN_IF_ERROR(keras::PaddingArgument(c, s));
    RETURN_IF_ERROR(c.Pair("dilation_rate", s.dilation_rate));  // not 1: conv_more.cc
    RETURN_IF_ERROR(c.Int("groups", s.groups));
    RETURN_IF_ERROR(ActivationArgument(c, s));
    RETURN_IF_ERROR(c.Bool("use_bias", s.use_bias));
    RETURN_IF_ERROR(WeightArguments(c, s, true));
  } else if (cls == "MaxPooling2D" || cls == "AveragePooling2D") {
    s.type = cls == "MaxPooling2D" ? LayerType::kMaxPooling2D : LayerType::kAveragePooling2D;
    RETURN_IF_ERROR(c.Common(s));
    s.kernel_size = {2, 2};
    RETURN_IF_ERROR(c.Pair("pool_size", s.kernel_size));
    s.strides = s.kernel_size;
    RETURN_IF_ERROR(c.Pair("strides", s.strides));
    RETURN_IF_ERROR(keras::PaddingArgument(c, s));
  } else if (cls == "GlobalAveragePooling2D") {
    s.type = LayerType::kGlobalAveragePooling2D;
    RETURN_IF_ERROR(c.Common(s));
    RETURN_IF_ERROR(c.Only("data_format", {"channels_last"}, "only channels_last (NHWC)"));
    RETURN_IF_ERROR(c.Bool("keepdims", s.keepdims));
  } else if (cls == "Flatten") {
    s.type = LayerType::kFlatten;
    RETURN_IF_ERROR(c.Common(s));
    RETURN_IF_ERROR(c.Only("data_format", {"channels_last"}, "only channels_last (NHWC)"));
  } else if (cls == "Activation") {
    s.type = LayerType::kActivation;
    RETURN_IF_ERROR(c.Common(s));
    RETURN_IF_ERROR(ActivationArgument(c, s, true));
  } else if (cls == "Dropout") {
    RETURN_IF_ERROR(DropoutLayer(c, s));
  } else if (cls == "BatchNormalization") {
    RETURN_IF_ERROR(BatchNormalizationLayer(c, s));
  } else if (cls == "Reshape") {
    RETURN_IF_ERROR(ReshapeLayer(c, s));
  } else if (cls == "Embedding") {
    RETURN_IF_ERROR(EmbeddingLayer(c, s));
  } else if (cls == "Normalization") {
    RETURN_IF_ERROR(NormalizationLayer(c, s));
  } else if (cls == "StringLookup" || cls == "IntegerLookup") {
    const bool strings = cls == "StringLookup";
    s.type = strings ? LayerType::kStringLookup : LayerType::kIntegerLookup;
    RETURN_IF_ERROR(c.Common(s, /*lookup=*/true));
    RETURN_IF_ERROR(Lookup(c, s, strings));
  } else if (cls == "Add" || cls == "Subtract" || cls == "Multiply" || cls == "Average" || cls == "Maximum" ||
             cls == "Minimum" || cls == "Concatenate" || cls == "Dot") {
    RETURN_IF_ERROR(MergeLayer(cls, c, s));
  } else {
    auto more = keras::ParseMoreLayer(cls, c, s);
    if (!more.ok()) return more.status();
    if (*more) return c.Finish();
    return c.Error("unsupported layer " + cls +
                   " (supported: Dense, Embedding, Activation, Flatten, Conv2D, "
                   "MaxPooling2D, AveragePooling2D, GlobalAveragePooling2D, Dropout, BatchNormalization, Reshape, "
                   "Normalization, StringLookup, IntegerLookup, Add, Subtract, Multiply, Average, Maximum, Minimum, "
                   "Concatenate, Dot" +
                   keras::MoreLayerNames() + ")");
  }
  return c.Finish();
}

// [null, d1, d2, ...] without the batch dimension.
StatusOr<Shape> InputShape(const json& v, const std::string& where) {
  if (!v.is_array() || v.empty()) return InvalidArgument(where + ": expected [null, dims...], got " + Dump(v));
  Shape s;
  for (size_t i = 1; i < v.size(); ++i) {
    if (!v[i].is_number_integer() || v[i].get<int64_t>() <= 0) {
      return InvalidArgument(where + ": dimension " + std::to_string(i) + " of " + Dump(v) +
                             " is not a known size (every dimension but the batch must be fixed)");
    }
    s.push_back(v[i].get<int64_t>());
  }
  return s;
}

Status InputDType(const json* dtype, const std::string& where, ModelSpec& m) {
  if (!dtype) return Status::Ok();
  std::string name;
  if (dtype->is_string()) name = dtype->get<std::string>();
  if (dtype->is_object() && dtype->contains("config") && (*dtype)["config"].is_object()) {
    name = StringOr((*dtype)["config"], "name", "");
  }
  if (name == "float32") {
    m.input_dtype = DType::kFloat32;
  } else if (name == "int64" || name == "int32") {
    m.input_dtype = DType::kInt64;
  } else if (name == "string") {
    m.input_dtype = DType::kInt64;
    m.string_input = true;
  } else {
    return InvalidArgument(where + ": input dtype " + Dump(*dtype) +
                           " is not supported (float32, int64, int32, string)");
  }
  return Status::Ok();
}

StatusOr<ModelSpec> Parse(const json& doc, const std::string& source) {
  auto fail = [&](const std::string& what) { return InvalidArgument(source + ": " + what); };
  if (!doc.is_object()) return fail("expected a Keras model (a JSON object), got " + Dump(doc));
  const std::string cls = StringOr(doc, "class_name", "");
  if (cls == "Model" || cls == "Functional") return keras::ParseFunctional(doc, source);
  if (cls != "Sequential") {
    return fail("class_name \"" + cls + "\": not a Keras model (Sequential, Functional or Model)");
  }
  const json* layers = nullptr;
  const json* config = doc.contains("config") ? &doc["config"] : nullptr;
  if (config && config->is_array()) {
    layers = config;  // Keras 2.2
  } else if (config && config->is_object() && config->contains("layers")) {
    layers = &(*config)["layers"];
  }
  if (!layers || !layers->is_array()) return fail("config.layers: expected the list of layers");
  ModelSpec m;
  bool have_input = false;
  // Keras 3 keeps the input shape beside the layers too.
  if (config && config->is_object() && config->contains("build_input_shape") &&
      !(*config)["build_input_shape"].is_null()) {
    auto shape = InputShape((*config)["build_input_shape"], source + ": config.build_input_shape");
    if (shape.ok()) {
      m.input_shape = *shape;
      have_input = true;
    }
  }
  for (size_t i = 0; i < layers->size(); ++i) {
    const json& l = (*layers)[i];
    const std::string at = "layers[" + std::to_string(i) + "]";
    if (!l.is_object() || !l.contains("class_name") || !l["class_name"].is_string() ||
        (l.contains("config") && !l["config"].is_object())) {
      return fail(at + ": expected {\"class_name\": ..., \"config\": {...}}");
    }
    const std::string lcls = l["class_name"].get<std::string>();
    static const json kEmpty = json::object();
    const json& cfg = l.contains("config") ? l["config"] : kEmpty;
    const std::string name = StringOr(cfg, "name", "");
    const std::string where = source + ": " + at + " (" + lcls + (name.empty() ? "" : " \"" + name + "\"") + ")";
    if (lcls == "InputLayer") {
      const char* key = cfg.contains("batch_shape") ? "batch_shape" : "batch_input_shape";
      if (!cfg.contains(key)) return InvalidArgument(where + ": no batch_shape");
      ASSIGN_OR_RETURN(m.input_shape, InputShape(cfg[key], where + ": " + key));
      RETURN_IF_ERROR(InputDType(cfg.contains("dtype") ? &cfg["dtype"] : nullptr, where, m));
      for (const char* k : {"sparse", "ragged", "optional"}) {
        if (cfg.contains(k) && cfg[k] != false)
          return InvalidArgument(where + ": argument " + k + "=true is not supported");
      }
      have_input = true;
      continue;
    }
    // Keras 2 without an InputLayer: the first layer carries the input.
    json rest = cfg;
    if (rest.contains("batch_input_shape") && have_input) {
      // The input is known already: TF.js writes an Embedding's shape
      // ([null, null]) into its config wherever it stands.
      rest.erase("batch_input_shape");
    } else if (rest.contains("batch_input_shape")) {
      if (!m.layers.empty()) return InvalidArgument(where + ": only the first layer may give batch_input_shape");
      ASSIGN_OR_RETURN(m.input_shape, InputShape(rest["batch_input_shape"], where + ": batch_input_shape"));
      json dtype = rest.value("dtype", json("float32"));
      // The first layer's dtype is the input's for lookups and embeddings.
      if (lcls == "StringLookup" || lcls == "IntegerLookup" || lcls == "Embedding") {
        if (dtype.is_string() && dtype != "float32") RETURN_IF_ERROR(InputDType(&dtype, where, m));
      }
      rest.erase("batch_input_shape");
      have_input = true;
    } else if (m.layers.empty() && !have_input && l.contains("build_config") &&
               l["build_config"].contains("input_shape")) {
      ASSIGN_OR_RETURN(m.input_shape,
                       InputShape(l["build_config"]["input_shape"], where + ": build_config.input_shape"));
      have_input = true;
    }
    LayerSpec s;
    s.path = source + ": " + at;
    Config c(rest, where);
    RETURN_IF_ERROR(LayerConfig(lcls, c, s));
    if (s.name.empty()) s.name = KerasSnakeCase(lcls) + (i ? "_" + std::to_string(i) : "");
    if ((s.type == LayerType::kStringLookup || s.type == LayerType::kTextVectorization) && m.layers.empty()) {
      m.string_input = true, m.input_dtype = DType::kInt64;
    }
    if (s.type == LayerType::kIntegerLookup && m.layers.empty()) m.input_dtype = DType::kInt64;
    if (s.type == LayerType::kEmbedding && m.layers.empty()) m.input_dtype = DType::kInt64;
    if (s.return_state || s.bidi_split) {
      return fail(at + ": a layer of several outputs (" + (s.return_state ? "return_state" : "merge_mode null") +
                  ") in a Sequential model, which Keras refuses too: use a Functional model");
    }
    m.layers.push_back(std::move(s));
  }
  if (!have_input) return fail("no input shape (an InputLayer, or batch_input_shape on the first layer)");
  if (m.layers.empty()) return fail("the model has no layers");
  return m;
}

}  // namespace

namespace keras {
Status ParseLayerConfig(const std::string& cls, Config& c, LayerSpec& s) { return LayerConfig(cls, c, s); }
StatusOr<Shape> ParseBatchShape(const json& v, const std::string& where) { return InputShape(v, where); }
Status ParseInputDType(const json* dtype, const std::string& where, ModelSpec& m) {
  return InputDType(dtype, where, m);
}
}  // namespace keras

std::string KerasSnakeCase(const std::string& name) {
  // (.)([A-Z][a-z]+) -> \1_\2, then ([a-z])([A-Z]) -> \1_\2, lower-cased.
  std::string a;
  for (size_t i = 0; i < name.size(); ++i) {
    const bool starts_word = i > 0 && std::isupper(static_cast<unsigned char>(name[i])) && i + 1 < name.size() &&
                             std::islower(static_cast<unsigned char>(name[i + 1]));
    if (starts_word && a.back() != '_') a.push_back('_');
    a.push_back(name[i]);
  }
  std::string b;
  for (size_t i = 0; i < a.size(); ++i) {
    if (i > 0 && std::isupper(static_cast<unsigned char>(a[i])) && std::islower(static_cast<unsigned char>(a[i - 1]))) {
      b.push_back('_');
    }
    b.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(a[i]))));
  }
  return b;
}

StatusOr<ModelSpec> ParseKerasModel(const json& doc, const std::string& source) {
  // The checks above should leave nlohmann nothing to throw; should one be
  // missed, a model file still gets an error, never a crash.
  try {
    return Parse(doc, source);
  } catch (const json::exception& e) {
    return InvalidArgument(source + ": not a Keras model this runtime reads (" + e.what() + ")");
  }
}

StatusOr<ModelSpec> LoadKerasModel(const std::string& path) {
  ASSIGN_OR_RETURN(json doc, ReadJsonFile(path));
  return ParseKerasModel(doc, path);
}

}  // namespace tfjob::model

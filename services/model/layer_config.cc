#include "services/model/layer_config.h"

#include <filesystem>

#include "services/model/preprocessing.h"

namespace tfjob::model {
namespace {

// n, or [h, w]: one size for both spatial axes, or one each.
Status Pair(const nlohmann::json& j, const std::string& key, const std::string& field, std::array<int64_t, 2>& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  auto positive = [&](const nlohmann::json& v, int64_t& o) {
    if (!v.is_number_integer() || v.get<int64_t>() <= 0) return false;
    o = v.get<int64_t>();
    return true;
  };
  if (positive(*it, out[0])) {
    out[1] = out[0];
    return Status::Ok();
  }
  if (it->is_array() && it->size() == 2 && positive((*it)[0], out[0]) && positive((*it)[1], out[1])) {
    return Status::Ok();
  }
  return InvalidArgument(field + ": expected a positive integer or two of them, got " + it->dump());
}

// A number or a list of numbers.
Status Numbers(const nlohmann::json& j, const std::string& key, const std::string& field, std::vector<double>& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (it->is_number()) {
    out = {it->get<double>()};
    return Status::Ok();
  }
  if (it->is_array() && !it->empty()) {
    for (const auto& v : *it) {
      if (!v.is_number()) return InvalidArgument(field + ": expected numbers, got " + v.dump());
      out.push_back(v.get<double>());
    }
    return Status::Ok();
  }
  return InvalidArgument(field + ": expected a number or a non-empty list of numbers, got " + it->dump());
}

Status ParseLookup(const nlohmann::json& j, JsonReader& r, const std::string& dir, bool strings, LayerSpec& s) {
  LookupSpec& l = s.lookup;
  if (!strings) l.oov_token.clear();
  RETURN_IF_ERROR(r.Optional("num_oov_indices", l.num_oov_indices));
  if (l.num_oov_indices < 0) return InvalidArgument(r.FieldPath("num_oov_indices") + ": must be >= 0");
  RETURN_IF_ERROR(r.Optional("invert", l.invert));
  const std::string vocab_field = r.FieldPath("vocabulary");
  const nlohmann::json* vocab = r.Child("vocabulary");
  if (!vocab) {
    return InvalidArgument(vocab_field +
                           ": required field is missing (a list of terms, or a vocabulary file; "
                           "adapting a lookup to the data is not supported)");
  }
  if (vocab->is_string()) {
    std::filesystem::path p(vocab->get<std::string>());
    if (p.is_relative() && !dir.empty()) p = std::filesystem::path(dir) / p;
    if (Status st = ReadVocabularyFile(p.string(), strings, l); !st.ok()) return st.WithContext(vocab_field);
  } else if (vocab->is_array()) {
    for (const auto& t : *vocab) {
      if (!AddVocabularyTerm(t, strings, l)) {
        return InvalidArgument(vocab_field + ": expected " + (strings ? "strings" : "integers") + ", got " + t.dump());
      }
    }
  } else {
    return InvalidArgument(vocab_field + ": expected a list of terms or a file name, got " + vocab->dump());
  }
  for (const char* key : {"mask_token", "oov_token"}) {
    const nlohmann::json* t = r.Child(key);
    if (!t) continue;  // null: no mask token (the default); Keras' default OOV token
    const bool mask = std::string(key) == "mask_token";
    if (!SetSpecialToken(*t, strings, mask, l)) {
      return InvalidArgument(r.FieldPath(key) + ": expected " + (strings ? "a string" : "an integer") +
                             " or null, got " + t->dump());
    }
    if (mask) l.has_mask = true;
  }
  // Checked here so that the job file, not training, reports it.
  if (auto table = Lookup::Create(l, strings); !table.ok()) return table.status().WithContext(vocab_field);
  (void)j;
  return Status::Ok();
}

}  // namespace

StatusOr<Padding> ParsePadding(const std::string& name, const std::string& field) {
  if (name == "valid") return Padding::kValid;
  if (name == "same") return Padding::kSame;
  return InvalidArgument(field + ": unknown padding \"" + name + "\" (known: valid, same)");
}

std::string KnownLayerTypes() {
  return "Dense, Embedding, Activation, Flatten, Conv2D, MaxPooling2D, AveragePooling2D, GlobalAveragePooling2D, "
         "Dropout, BatchNormalization, Reshape, Normalization, StringLookup, IntegerLookup";
}

StatusOr<bool> ParseMoreLayers(const std::string& type, const nlohmann::json& j, JsonReader& r, const std::string& dir,
                               LayerSpec& s, std::string& base, std::string& activation) {
  std::string padding;
  if (type == "Conv2D") {
    s.type = LayerType::kConv2D;
    base = "conv2d";
    RETURN_IF_ERROR(r.Required("filters", s.filters));
    if (s.filters <= 0) return InvalidArgument(r.FieldPath("filters") + ": must be > 0");
    if (!r.Has("kernel_size")) return InvalidArgument(r.FieldPath("kernel_size") + ": required field is missing");
    RETURN_IF_ERROR(Pair(j, "kernel_size", r.FieldPath("kernel_size"), s.kernel_size));
    RETURN_IF_ERROR(Pair(j, "strides", r.FieldPath("strides"), s.strides));
    (void)r.Child("kernel_size");
    (void)r.Child("strides");
    RETURN_IF_ERROR(r.Optional("use_bias", s.use_bias));
    RETURN_IF_ERROR(r.Optional("padding", padding));
    RETURN_IF_ERROR(r.Optional("activation", activation));
  } else if (type == "MaxPooling2D" || type == "AveragePooling2D") {
    s.type = type == "MaxPooling2D" ? LayerType::kMaxPooling2D : LayerType::kAveragePooling2D;
    base = type == "MaxPooling2D" ? "max_pooling2d" : "average_pooling2d";
    s.kernel_size = {2, 2};
    RETURN_IF_ERROR(Pair(j, "pool_size", r.FieldPath("pool_size"), s.kernel_size));
    s.strides = s.kernel_size;  // Keras: strides default to the pool size
    RETURN_IF_ERROR(Pair(j, "strides", r.FieldPath("strides"), s.strides));
    (void)r.Child("pool_size");
    (void)r.Child("strides");
    RETURN_IF_ERROR(r.Optional("padding", padding));
  } else if (type == "GlobalAveragePooling2D") {
    s.type = LayerType::kGlobalAveragePooling2D;
    base = "global_average_pooling2d";
    RETURN_IF_ERROR(r.Optional("keepdims", s.keepdims));
  } else if (type == "Dropout") {
    s.type = LayerType::kDropout;
    base = "dropout";
    RETURN_IF_ERROR(r.Required("rate", s.rate));
    if (!(s.rate >= 0 && s.rate < 1)) return InvalidArgument(r.FieldPath("rate") + ": must be in [0, 1)");
    RETURN_IF_ERROR(r.Optional("seed", s.seed));
  } else if (type == "BatchNormalization") {
    s.type = LayerType::kBatchNormalization;
    base = "batch_normalization";
    RETURN_IF_ERROR(r.Optional("axis", s.axis));
    if (s.axis != -1 && s.axis < 1) {
      return InvalidArgument(r.FieldPath("axis") + ": must be -1 or the last axis' index (the batch axis is 0)");
    }
    RETURN_IF_ERROR(r.Optional("momentum", s.momentum));
    if (!(s.momentum >= 0 && s.momentum <= 1)) return InvalidArgument(r.FieldPath("momentum") + ": must be in [0, 1]");
    RETURN_IF_ERROR(r.Optional("epsilon", s.epsilon));
    if (!(s.epsilon > 0)) return InvalidArgument(r.FieldPath("epsilon") + ": must be > 0");
    RETURN_IF_ERROR(r.Optional("center", s.center));
    RETURN_IF_ERROR(r.Optional("scale", s.scale));
  } else if (type == "Reshape") {
    s.type = LayerType::kReshape;
    base = "reshape";
    if (!r.Has("target_shape")) return InvalidArgument(r.FieldPath("target_shape") + ": required field is missing");
    RETURN_IF_ERROR(r.Optional("target_shape", s.target_shape));
    if (s.target_shape.empty()) return InvalidArgument(r.FieldPath("target_shape") + ": must not be empty");
  } else if (type == "Normalization") {
    s.type = LayerType::kNormalization;
    base = "normalization";
    if (j.contains("axis") && j["axis"].is_null()) {
      s.axis_none = true;
      (void)r.Child("axis");
    } else {
      int64_t axis = -1;
      RETURN_IF_ERROR(r.Optional("axis", axis));
      if (axis != -1) return InvalidArgument(r.FieldPath("axis") + ": only -1 (per feature of the last axis) or null");
    }
    RETURN_IF_ERROR(Numbers(j, "mean", r.FieldPath("mean"), s.mean));
    RETURN_IF_ERROR(Numbers(j, "variance", r.FieldPath("variance"), s.variance));
    (void)r.Child("mean");
    (void)r.Child("variance");
    if (s.mean.size() != s.variance.size()) {
      return InvalidArgument(r.FieldPath("variance") +
                             ": mean and variance must be given together, with as many values");
    }
    for (double v : s.variance) {
      if (!(v >= 0)) return InvalidArgument(r.FieldPath("variance") + ": must be >= 0");
    }
    RETURN_IF_ERROR(r.Optional("invert", s.invert));
  } else if (type == "StringLookup" || type == "IntegerLookup") {
    const bool strings = type == "StringLookup";
    s.type = strings ? LayerType::kStringLookup : LayerType::kIntegerLookup;
    base = strings ? "string_lookup" : "integer_lookup";
    RETURN_IF_ERROR(ParseLookup(j, r, dir, strings, s));
  } else {
    return false;
  }
  if (!padding.empty()) {
    ASSIGN_OR_RETURN(s.padding, ParsePadding(padding, r.FieldPath("padding")));
  }
  return true;
}

namespace {

StatusOr<ExampleFeatureSpec> ParseFeature(const nlohmann::json& j, const std::string& path) {
  JsonReader r(j, path);
  RETURN_IF_ERROR(r.status());
  ExampleFeatureSpec f;
  f.field = path;
  RETURN_IF_ERROR(r.Required("name", f.name));
  RETURN_IF_ERROR(r.Required("dtype", f.dtype));
  if (f.dtype != "float32" && f.dtype != "int64" && f.dtype != "string") {
    return InvalidArgument(r.FieldPath("dtype") + ": unknown dtype \"" + f.dtype +
                           "\" (known: float32, int64, string)");
  }
  RETURN_IF_ERROR(r.Optional("shape", f.shape));
  for (int64_t d : f.shape) {
    if (d <= 0) return InvalidArgument(r.FieldPath("shape") + ": dimensions must be > 0, got " + ShapeString(f.shape));
  }
  RETURN_IF_ERROR(r.Optional("var_len", f.var_len));
  RETURN_IF_ERROR(r.Optional("max_length", f.max_length));
  if (f.var_len && !f.shape.empty()) {
    return InvalidArgument(r.FieldPath("shape") + ": a var_len feature has no fixed shape (use max_length)");
  }
  if (!f.var_len && r.Has("max_length")) {
    return InvalidArgument(r.FieldPath("max_length") + ": only a var_len feature has a max_length");
  }
  if (f.var_len && f.max_length != -1 && f.max_length < 1) {
    return InvalidArgument(r.FieldPath("max_length") + ": must be >= 1");
  }
  if (const nlohmann::json* d = r.Child("default_value")) {
    f.has_default = true;
    if (f.dtype == "string" && d->is_string()) {
      f.default_string = d->get<std::string>();
    } else if (f.dtype == "int64" && d->is_number_integer()) {
      f.default_number = static_cast<double>(d->get<int64_t>());
    } else if (f.dtype == "float32" && d->is_number()) {
      f.default_number = d->get<double>();
    } else {
      return InvalidArgument(r.FieldPath("default_value") + ": expected a " + f.dtype + " value, got " + d->dump());
    }
  }
  RETURN_IF_ERROR(r.Finish());
  return f;
}

}  // namespace

Status ParseTfRecordSource(const nlohmann::json& j, JsonReader& r, DataSourceSpec& s) {
  if (const nlohmann::json* f = r.Child("files"); f && f->is_string()) {
    s.files = {f->get<std::string>()};
  } else {
    RETURN_IF_ERROR(r.Optional("files", s.files));
  }
  if (s.files.empty()) return InvalidArgument(r.FieldPath("files") + ": required: one or more TFRecord files");
  RETURN_IF_ERROR(r.Optional("compression", s.compression));
  if (s.compression != "" && s.compression != "NONE" && s.compression != "GZIP" && s.compression != "ZLIB") {
    return InvalidArgument(r.FieldPath("compression") + ": unknown compression \"" + s.compression +
                           "\" (known: \"\", GZIP, ZLIB)");
  }
  const nlohmann::json* features = r.Child("features");
  if (!features || !features->is_array() || features->empty()) {
    return InvalidArgument(r.FieldPath("features") +
                           ": required: a list of the features that make up the model's input");
  }
  for (size_t i = 0; i < features->size(); ++i) {
    ASSIGN_OR_RETURN(ExampleFeatureSpec f,
                     ParseFeature((*features)[i], r.FieldPath("features") + "[" + std::to_string(i) + "]"));
    s.features.push_back(std::move(f));
  }
  const nlohmann::json* label = r.Child("label");
  if (!label) return InvalidArgument(r.FieldPath("label") + ": required field is missing");
  ASSIGN_OR_RETURN(s.label, ParseFeature(*label, r.FieldPath("label")));
  if (s.label.var_len) return InvalidArgument(r.FieldPath("label") + ": the label must have a fixed length");
  RETURN_IF_ERROR(r.Optional("auto_shard_policy", s.auto_shard_policy));
  if (s.auto_shard_policy != "AUTO" && s.auto_shard_policy != "FILE" && s.auto_shard_policy != "DATA" &&
      s.auto_shard_policy != "OFF") {
    return InvalidArgument(r.FieldPath("auto_shard_policy") + ": unknown policy \"" + s.auto_shard_policy +
                           "\" (known: AUTO, FILE, DATA, OFF)");
  }
  (void)j;
  return Status::Ok();
}

Status ParseSourceExtras(const nlohmann::json& j, JsonReader& r, const std::string& dir, DataSourceSpec& s) {
  if (s.kind == DataSourceKind::kCsv) {
    if (const nlohmann::json* cols = r.Child("feature_columns")) {
      if (!cols->is_array() || cols->empty()) {
        return InvalidArgument(r.FieldPath("feature_columns") +
                               ": expected a non-empty list of column names or indices");
      }
      for (const auto& c : *cols) {
        if (c.is_string()) {
          s.feature_columns.push_back(c.get<std::string>());
        } else if (c.is_number_integer() && c.get<int64_t>() >= 0) {
          s.feature_columns.push_back(std::to_string(c.get<int64_t>()));
        } else {
          return InvalidArgument(r.FieldPath("feature_columns") + ": expected column names or indices, got " +
                                 c.dump());
        }
      }
    }
    if (j.contains("label_column") && j["label_column"].is_string()) {
      RETURN_IF_ERROR(r.Optional("label_column", s.label_name));
      if (s.label_name.empty()) return InvalidArgument(r.FieldPath("label_column") + ": must not be empty");
    }
  }
  if (const nlohmann::json* l = r.Child("label_lookup")) {
    const std::string path = r.FieldPath("label_lookup");
    JsonReader lr(*l, path);
    RETURN_IF_ERROR(lr.status());
    std::string type, base, activation;
    RETURN_IF_ERROR(lr.Required("type", type));
    LayerSpec spec;
    spec.path = path;
    spec.name = "label_lookup";
    if (type != "StringLookup" && type != "IntegerLookup") {
      return InvalidArgument(lr.FieldPath("type") + ": a label lookup is a StringLookup or an IntegerLookup, got \"" +
                             type + "\"");
    }
    ASSIGN_OR_RETURN(bool known, ParseMoreLayers(type, *l, lr, dir, spec, base, activation));
    (void)known;
    if (spec.lookup.invert) return InvalidArgument(lr.FieldPath("invert") + ": a label lookup maps terms to indices");
    RETURN_IF_ERROR(lr.Finish());
    s.label_lookup = std::move(spec);
  }
  return Status::Ok();
}

}  // namespace tfjob::model

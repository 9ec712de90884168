#include "services/model/job_config.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>

#include "common/json_reader.h"
#include "services/model/layer_config.h"
#include "services/model/metrics.h"

namespace tfjob::model {
namespace {

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  return s;
}

Status Positive(const std::string& field, int64_t v) {
  if (v <= 0) return InvalidArgument(field + ": must be > 0, got " + std::to_string(v));
  return Status::Ok();
}

Status InRange(const std::string& field, double v, double lo, double hi, bool hi_inclusive = false) {
  if (!(v >= lo && (hi_inclusive ? v <= hi : v < hi))) {
    return InvalidArgument(field + ": must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                           (hi_inclusive ? "]" : ")") + ", got " + std::to_string(v));
  }
  return Status::Ok();
}

StatusOr<LayerSpec> ParseLayer(const nlohmann::json& j, const std::string& path, const std::string& dir,
                               std::map<std::string, int>& counts) {
  JsonReader r(j, path);
  LayerSpec s;
  s.path = path;
  std::string type;
  RETURN_IF_ERROR(r.Required("type", type));
  RETURN_IF_ERROR(r.Optional("name", s.name));
  std::string activation;
  std::string base;
  if (type == "Dense") {
    s.type = LayerType::kDense;
    base = "dense";
    RETURN_IF_ERROR(r.Required("units", s.units));
    RETURN_IF_ERROR(Positive(r.FieldPath("units"), s.units));
    RETURN_IF_ERROR(r.Optional("activation", activation));
    RETURN_IF_ERROR(r.Optional("use_bias", s.use_bias));
  } else if (type == "Embedding") {
    s.type = LayerType::kEmbedding;
    base = "embedding";
    RETURN_IF_ERROR(r.Required("input_dim", s.input_dim));
    RETURN_IF_ERROR(Positive(r.FieldPath("input_dim"), s.input_dim));
    RETURN_IF_ERROR(r.Required("output_dim", s.output_dim));
    RETURN_IF_ERROR(Positive(r.FieldPath("output_dim"), s.output_dim));
    std::string combiner;
    RETURN_IF_ERROR(r.Optional("combiner", combiner));
    if (combiner == "sum")
      s.combiner = Combiner::kSum;
    else if (combiner == "mean")
      s.combiner = Combiner::kMean;
    else if (!combiner.empty()) {
      return InvalidArgument(r.FieldPath("combiner") + ": unknown combiner \"" + combiner + "\" (known: sum, mean)");
    }
  } else if (type == "Activation") {
    s.type = LayerType::kActivation;
    base = "activation";
    RETURN_IF_ERROR(r.Required("activation", activation));
  } else if (type == "Flatten") {
    s.type = LayerType::kFlatten;
    base = "flatten";
  } else {
    ASSIGN_OR_RETURN(bool more, ParseMoreLayers(type, j, r, dir, s, base, activation));
    if (!more) {
      return InvalidArgument(r.FieldPath("type") + ": unknown layer type \"" + type +
                             "\" (known: " + KnownLayerTypes() + ")");
    }
  }
  auto act = ParseActivation(activation);
  if (!act.ok()) return act.status().WithContext(r.FieldPath("activation"));
  s.activation = *act;
  if (s.name.empty()) {
    int n = counts[base]++;
    s.name = n == 0 ? base : base + "_" + std::to_string(n);
  }
  RETURN_IF_ERROR(r.Finish());
  return s;
}

StatusOr<ModelSpec> ParseModel(const nlohmann::json& j, const std::string& path, const std::string& dir) {
  JsonReader r(j, path);
  RETURN_IF_ERROR(r.status());
  ModelSpec m;
  if (!r.Has("input_shape")) return InvalidArgument(r.FieldPath("input_shape") + ": required field is missing");
  RETURN_IF_ERROR(r.Optional("input_shape", m.input_shape));
  for (int64_t d : m.input_shape) {
    if (d <= 0)
      return InvalidArgument(r.FieldPath("input_shape") + ": dimensions must be > 0, got " +
                             ShapeString(m.input_shape));
  }
  std::string dtype = "float32";
  RETURN_IF_ERROR(r.Optional("input_dtype", dtype));
  if (dtype == "float32")
    m.input_dtype = DType::kFloat32;
  else if (dtype == "int64")
    m.input_dtype = DType::kInt64;
  else if (dtype == "string")
    m.input_dtype = DType::kInt64, m.string_input = true;
  else
    return InvalidArgument(r.FieldPath("input_dtype") + ": unknown dtype \"" + dtype +
                           "\" (known: float32, int64, string)");
  const nlohmann::json* layers = r.Child("layers");
  if (!layers) return InvalidArgument(r.FieldPath("layers") + ": required field is missing");
  if (!layers->is_array() || layers->empty()) {
    return InvalidArgument(r.FieldPath("layers") + ": expected a non-empty array of layers");
  }
  std::map<std::string, int> counts;
  for (size_t i = 0; i < layers->size(); ++i) {
    ASSIGN_OR_RETURN(LayerSpec l,
                     ParseLayer((*layers)[i], r.FieldPath("layers") + "[" + std::to_string(i) + "]", dir, counts));
    m.layers.push_back(std::move(l));
  }
  RETURN_IF_ERROR(r.Finish());
  return m;
}

StatusOr<LossType> LossTypeFromName(const std::string& name, const std::string& field) {
  const std::string n = Lower(name);
  if (n == "meansquarederror" || n == "mse") return LossType::kMeanSquaredError;
  if (n == "binarycrossentropy") return LossType::kBinaryCrossentropy;
  if (n == "sparsecategoricalcrossentropy") return LossType::kSparseCategoricalCrossentropy;
  if (n == "categoricalcrossentropy") return LossType::kCategoricalCrossentropy;
  return InvalidArgument(field + ": unknown loss \"" + name +
                         "\" (known: MeanSquaredError, BinaryCrossentropy, SparseCategoricalCrossentropy, "
                         "CategoricalCrossentropy)");
}

StatusOr<LossSpec> ParseLoss(const nlohmann::json& j, const std::string& path) {
  LossSpec s;
  if (j.is_string()) {
    ASSIGN_OR_RETURN(s.type, LossTypeFromName(j.get<std::string>(), path));
    return s;
  }
  JsonReader r(j, path);
  std::string type;
  RETURN_IF_ERROR(r.Required("type", type));
  ASSIGN_OR_RETURN(s.type, LossTypeFromName(type, r.FieldPath("type")));
  if (s.type != LossType::kMeanSquaredError) RETURN_IF_ERROR(r.Optional("from_logits", s.from_logits));
  RETURN_IF_ERROR(r.Finish());
  return s;
}

StatusOr<OptimizerSpec> ParseOptimizer(const nlohmann::json& j, const std::string& path) {
  OptimizerSpec s;
  std::string type;
  std::optional<JsonReader> r;
  if (j.is_string()) {
    type = j.get<std::string>();
  } else {
    r.emplace(j, path);
    RETURN_IF_ERROR(r->Required("type", type));
  }
  const std::string field = r ? r->FieldPath("type") : path;
  const std::string n = Lower(type);
  if (n == "sgd")
    s.type = OptimizerType::kSGD;
  else if (n == "adagrad")
    s.type = OptimizerType::kAdagrad;
  else if (n == "rmsprop")
    s.type = OptimizerType::kRMSprop;
  else if (n == "adam")
    s.type = OptimizerType::kAdam;
  else
    return InvalidArgument(field + ": unknown optimizer \"" + type + "\" (known: SGD, Adagrad, RMSprop, Adam)");
  if (s.type != OptimizerType::kSGD) s.learning_rate = 0.001;
  if (!r) return s;

  RETURN_IF_ERROR(r->Optional("learning_rate", s.learning_rate));
  if (!(s.learning_rate > 0)) return InvalidArgument(r->FieldPath("learning_rate") + ": must be > 0");
  switch (s.type) {
    case OptimizerType::kSGD:
      RETURN_IF_ERROR(r->Optional("momentum", s.momentum));
      RETURN_IF_ERROR(InRange(r->FieldPath("momentum"), s.momentum, 0, 1));
      RETURN_IF_ERROR(r->Optional("nesterov", s.nesterov));
      break;
    case OptimizerType::kAdagrad:
      RETURN_IF_ERROR(r->Optional("initial_accumulator_value", s.initial_accumulator_value));
      RETURN_IF_ERROR(InRange(r->FieldPath("initial_accumulator_value"), s.initial_accumulator_value, 0, 1e30));
      RETURN_IF_ERROR(r->Optional("epsilon", s.epsilon));
      break;
    case OptimizerType::kRMSprop:
      RETURN_IF_ERROR(r->Optional("rho", s.rho));
      RETURN_IF_ERROR(InRange(r->FieldPath("rho"), s.rho, 0, 1));
      RETURN_IF_ERROR(r->Optional("momentum", s.momentum));
      RETURN_IF_ERROR(InRange(r->FieldPath("momentum"), s.momentum, 0, 1));
      RETURN_IF_ERROR(r->Optional("epsilon", s.epsilon));
      RETURN_IF_ERROR(r->Optional("centered", s.centered));
      break;
    case OptimizerType::kAdam:
      RETURN_IF_ERROR(r->Optional("beta_1", s.beta_1));
      RETURN_IF_ERROR(InRange(r->FieldPath("beta_1"), s.beta_1, 0, 1));
      RETURN_IF_ERROR(r->Optional("beta_2", s.beta_2));
      RETURN_IF_ERROR(InRange(r->FieldPath("beta_2"), s.beta_2, 0, 1));
      RETURN_IF_ERROR(r->Optional("epsilon", s.epsilon));
      RETURN_IF_ERROR(r->Optional("amsgrad", s.amsgrad));
      break;
  }
  RETURN_IF_ERROR(InRange(r->FieldPath("epsilon"), s.epsilon, 0, 1e30));
  if (const nlohmann::json* ls = r->Child("loss_scale")) {
    // Keras' LossScaleOptimizer's own argument names.
    JsonReader l(*ls, r->FieldPath("loss_scale"));
    RETURN_IF_ERROR(l.Optional("initial_scale", s.initial_scale));
    RETURN_IF_ERROR(InRange(l.FieldPath("initial_scale"), s.initial_scale, 1, 1e30));
    RETURN_IF_ERROR(l.Optional("dynamic_growth_steps", s.dynamic_growth_steps));
    if (s.dynamic_growth_steps < 1) return InvalidArgument(l.FieldPath("dynamic_growth_steps") + ": must be >= 1");
    RETURN_IF_ERROR(l.Finish());
  }
  RETURN_IF_ERROR(r->Finish());
  return s;
}

StatusOr<std::vector<MetricType>> ParseMetrics(const nlohmann::json& j, const std::string& path, LossType loss) {
  if (!j.is_array()) return InvalidArgument(path + ": expected an array of metric names");
  std::vector<MetricType> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string field = path + "[" + std::to_string(i) + "]";
    if (!j[i].is_string()) return InvalidArgument(field + ": expected a metric name");
    const std::string n = Lower(j[i].get<std::string>());
    if (n == "accuracy" || n == "acc")
      out.push_back(AccuracyForLoss(loss));
    else if (n == "binaryaccuracy")
      out.push_back(MetricType::kBinaryAccuracy);
    else if (n == "sparsecategoricalaccuracy")
      out.push_back(MetricType::kSparseCategoricalAccuracy);
    else if (n == "categoricalaccuracy")
      out.push_back(MetricType::kCategoricalAccuracy);
    else {
      return InvalidArgument(
          field + ": unknown metric \"" + j[i].get<std::string>() +
          "\" (known: accuracy, binary_accuracy, sparse_categorical_accuracy, categorical_accuracy)");
    }
  }
  return out;
}

StatusOr<DataSourceSpec> ParseSource(const nlohmann::json& j, const std::string& path, const std::string& dir) {
  JsonReader r(j, path);
  DataSourceSpec s;
  s.field = path;
  std::string source;
  RETURN_IF_ERROR(r.Required("source", source));
  if (source == "mnist") {
    s.kind = DataSourceKind::kMnist;
    RETURN_IF_ERROR(r.Required("images", s.images));
    RETURN_IF_ERROR(r.Required("labels", s.labels));
  } else if (source == "csv") {
    s.kind = DataSourceKind::kCsv;
    RETURN_IF_ERROR(r.Required("path", s.path));
    RETURN_IF_ERROR(r.Optional("delimiter", s.delimiter));
    if (s.delimiter.size() != 1) return InvalidArgument(r.FieldPath("delimiter") + ": must be one character");
    RETURN_IF_ERROR(r.Optional("header", s.header));
    // A name is ParseSourceExtras' business.
    if (!(j.contains("label_column") && j["label_column"].is_string())) {
      RETURN_IF_ERROR(r.Optional("label_column", s.label_column));
    }
  } else if (source == "synthetic") {
    s.kind = DataSourceKind::kSynthetic;
    RETURN_IF_ERROR(r.Optional("num_examples", s.num_examples));
    RETURN_IF_ERROR(Positive(r.FieldPath("num_examples"), s.num_examples));
    RETURN_IF_ERROR(r.Optional("feature_shape", s.feature_shape));
    // Checked here, before any data set is built, so the error names the
    // file and field; the whole set must also be a size a tensor can have
    // (the element count overflowing int64 would otherwise reach the
    // allocator as a wrapped, negative or tiny size).
    if (s.feature_shape.empty()) return InvalidArgument(r.FieldPath("feature_shape") + ": must not be empty");
    for (int64_t d : s.feature_shape) {
      if (d <= 0) {
        return InvalidArgument(r.FieldPath("feature_shape") + ": dimensions must be > 0, got " +
                               ShapeString(s.feature_shape));
      }
    }
    Shape all = s.feature_shape;
    all.insert(all.begin(), s.num_examples);
    if (NumElements(all) < 0) {
      return InvalidArgument(r.FieldPath("num_examples") + ": " + std::to_string(s.num_examples) +
                             " examples of shape " + ShapeString(s.feature_shape) + " is too many values to hold");
    }
    RETURN_IF_ERROR(r.Optional("num_classes", s.num_classes));
    if (s.num_classes < 2) return InvalidArgument(r.FieldPath("num_classes") + ": must be >= 2");
    RETURN_IF_ERROR(r.Optional("seed", s.seed));
    RETURN_IF_ERROR(r.Optional("noise", s.noise));
  } else if (source == "tfrecord") {
    s.kind = DataSourceKind::kTfRecord;
    RETURN_IF_ERROR(ParseTfRecordSource(j, r, s));
  } else {
    return InvalidArgument(r.FieldPath("source") + ": unknown data source \"" + source +
                           "\" (known: mnist, csv, synthetic, tfrecord)");
  }
  RETURN_IF_ERROR(ParseSourceExtras(j, r, dir, s));
  RETURN_IF_ERROR(r.Optional("begin", s.begin));
  RETURN_IF_ERROR(r.Optional("end", s.end));
  if (s.begin < 0) return InvalidArgument(r.FieldPath("begin") + ": must be >= 0");
  if (s.end != -1 && s.end <= s.begin) return InvalidArgument(r.FieldPath("end") + ": must be > begin, or -1");
  RETURN_IF_ERROR(r.Finish());
  return s;
}

StatusOr<DataSpec> ParseData(const nlohmann::json& j, const std::string& path, const std::string& dir) {
  JsonReader r(j, path);
  RETURN_IF_ERROR(r.status());
  DataSpec d;
  const nlohmann::json* train = r.Child("train");
  if (!train) return InvalidArgument(r.FieldPath("train") + ": required field is missing");
  ASSIGN_OR_RETURN(d.train, ParseSource(*train, r.FieldPath("train"), dir));
  if (const nlohmann::json* ev = r.Child("eval")) {
    ASSIGN_OR_RETURN(d.eval, ParseSource(*ev, r.FieldPath("eval"), dir));
  }
  RETURN_IF_ERROR(r.Optional("shuffle", d.shuffle));
  RETURN_IF_ERROR(r.Optional("shuffle_buffer", d.shuffle_buffer));
  if (d.shuffle_buffer < 0) return InvalidArgument(r.FieldPath("shuffle_buffer") + ": must be >= 0");
  RETURN_IF_ERROR(r.Finish());
  return d;
}

StatusOr<JobConfig> Parse(const nlohmann::json& doc, const std::string& source, const ModelSpec* keras) {
  JobConfig c;
  c.source = source;
  JsonReader r(doc, "");
  RETURN_IF_ERROR(r.status());
  RETURN_IF_ERROR(r.Optional("name", c.name));
  RETURN_IF_ERROR(r.Optional("seed", c.seed));

  const nlohmann::json* model = r.Child("model");
  // Vocabulary files are relative to the job file.
  const std::string dir = std::filesystem::path(source).parent_path().string();
  if (keras) {
    if (model) return InvalidArgument("model: the job has a model and --keras-model gives one too; keep one");
    c.model = *keras;
  } else {
    if (!model) return InvalidArgument("model: required field is missing");
    ASSIGN_OR_RETURN(c.model, ParseModel(*model, "model", dir));
  }

  const nlohmann::json* loss = r.Child("loss");
  if (!loss) return InvalidArgument("loss: required field is missing");
  ASSIGN_OR_RETURN(c.loss, ParseLoss(*loss, "loss"));

  const nlohmann::json* opt = r.Child("optimizer");
  if (opt) {
    ASSIGN_OR_RETURN(c.optimizer, ParseOptimizer(*opt, "optimizer"));
  } else {
    c.optimizer.type = OptimizerType::kSGD;
  }
  if (const nlohmann::json* m = r.Child("metrics")) {
    ASSIGN_OR_RETURN(c.metrics, ParseMetrics(*m, "metrics", c.loss.type));
    for (const auto& name : *m) c.metric_names.push_back(name.get<std::string>());
  }
  const nlohmann::json* data = r.Child("data");
  if (!data) return InvalidArgument("data: required field is missing");
  ASSIGN_OR_RETURN(c.data, ParseData(*data, "data", dir));

  RETURN_IF_ERROR(r.Optional("batch_size", c.batch_size));
  RETURN_IF_ERROR(Positive("batch_size", c.batch_size));
  RETURN_IF_ERROR(r.Optional("epochs", c.epochs));
  RETURN_IF_ERROR(Positive("epochs", c.epochs));
  RETURN_IF_ERROR(r.Optional("steps_per_epoch", c.steps_per_epoch));
  if (c.steps_per_epoch == 0 || c.steps_per_epoch < -1) {
    return InvalidArgument("steps_per_epoch: must be > 0, or -1 for one pass over the data");
  }
  RETURN_IF_ERROR(r.Finish());
  return c;
}

}  // namespace

StatusOr<JobConfig> ParseJobConfig(const nlohmann::json& doc, const std::string& source, const ModelSpec* model) {
  auto c = Parse(doc, source, model);
  if (!c.ok()) return c.status().WithContext(source);
  return c;
}

StatusOr<JobConfig> LoadJobConfig(const std::string& path, const ModelSpec* model) {
  ASSIGN_OR_RETURN(nlohmann::json doc, ReadJsonFile(path));
  return ParseJobConfig(doc, path, model);
}

}  // namespace tfjob::model

#include "services/strategy/input.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "services/data/csv.h"
#include "services/data/example.h"
#include "services/data/mnist.h"
#include "services/data/synthetic.h"
#include "services/model/preprocessing.h"
#include "services/model/text.h"
#include "services/tensor/ops.h"

namespace tfjob::strategy {
namespace {

std::string Resolve(const std::string& data_dir, const std::string& p) {
  if (p.empty() || std::filesystem::path(p).is_absolute() || data_dir.empty()) return p;
  return (std::filesystem::path(data_dir) / p).string();
}

StatusOr<Tensor> ToDType(const Tensor& t, DType want, const std::string& field) {
  if (t.dtype() == want) return t;
  if (want == DType::kInt64) {
    for (float v : t.flat<float>()) {
      if (v != std::floor(v)) {
        return InvalidArgument(field + ": features hold non-integer value " + std::to_string(v) +
                               " but model.input_dtype is int64");
      }
    }
  }
  return ops::Cast(t, want);
}

}  // namespace

namespace {

// A source's contents before lookups: features and labels as tensors, or as
// strings (row-major, with the tensor shape they will have).
struct Raw {
  Tensor features;
  std::vector<std::string> feature_strings;
  Shape feature_shape;  // of the strings, batch first
  Tensor labels;
  std::vector<std::string> label_strings;
  int64_t rows() const { return feature_shape.empty() ? features.dim(0) : feature_shape[0]; }
};

data::FeatureType TypeOf(const std::string& dtype) {
  return dtype == "string"  ? data::FeatureType::kString
         : dtype == "int64" ? data::FeatureType::kInt64
                            : data::FeatureType::kFloat32;
}

data::FeatureSpec ToData(const model::ExampleFeatureSpec& f) {
  data::FeatureSpec d;
  d.name = f.name;
  d.type = TypeOf(f.dtype);
  d.var_len = f.var_len;
  d.shape = f.shape;
  d.max_length = f.max_length;
  d.has_default = f.has_default;
  d.default_number = f.default_number;
  d.default_string = f.default_string;
  return d;
}

// A numeric column as a tensor [rows, ...shape].
StatusOr<Tensor> ColumnTensor(const data::Column& c) {
  Shape shape{c.rows};
  shape.insert(shape.end(), c.shape.begin(), c.shape.end());
  if (c.type == data::FeatureType::kFloat32) return Tensor::FromVector(shape, c.floats);
  return Tensor::FromVector(shape, c.ints);
}

StatusOr<Raw> LoadCsvSource(const model::DataSourceSpec& spec, const std::string& path, bool strings) {
  ASSIGN_OR_RETURN(data::CsvTable t, data::ReadCsvTable(path, spec.delimiter[0], spec.header));
  int64_t label = t.num_columns - 1;
  if (!spec.label_name.empty()) {
    ASSIGN_OR_RETURN(label, data::CsvColumn(t, spec.label_name));
  } else if (spec.label_column >= 0) {
    if (spec.label_column >= t.num_columns) {
      return InvalidArgument(path + ": label_column " + std::to_string(spec.label_column) + " is outside [0, " +
                             std::to_string(t.num_columns) + ")");
    }
    label = spec.label_column;
  }
  std::vector<int64_t> cols;
  for (const std::string& c : spec.feature_columns) {
    ASSIGN_OR_RETURN(int64_t k, data::CsvColumn(t, c));
    cols.push_back(k);
  }
  if (spec.feature_columns.empty()) {
    for (int64_t c = 0; c < t.num_columns; ++c) {
      if (c != label) cols.push_back(c);
    }
  }
  if (cols.empty()) return InvalidArgument(path + ": no feature columns besides the label");
  Raw raw;
  const int64_t rows = static_cast<int64_t>(t.rows.size());
  if (strings) {
    raw.feature_strings = data::CsvStrings(t, cols);
    raw.feature_shape = {rows, static_cast<int64_t>(cols.size())};
  } else {
    ASSIGN_OR_RETURN(raw.features, data::CsvNumbers(t, cols, DType::kFloat32));
  }
  if (spec.label_lookup && spec.label_lookup->type == model::LayerType::kStringLookup) {
    raw.label_strings = data::CsvStrings(t, {label});
  } else {
    ASSIGN_OR_RETURN(Tensor labels, data::CsvNumbers(t, {label}, DType::kInt64));
    ASSIGN_OR_RETURN(raw.labels, labels.Reshape({rows}));
  }
  return raw;
}

StatusOr<Raw> LoadTfRecordSource(const model::DataSourceSpec& spec, const std::string& data_dir,
                                 const InputShard& shard) {
  ASSIGN_OR_RETURN(data::Compression compression, data::ParseCompression(spec.compression));
  ASSIGN_OR_RETURN(data::AutoShardPolicy policy, data::ParseAutoShardPolicy(spec.auto_shard_policy));
  std::vector<std::string> files;
  for (const auto& f : spec.files) files.push_back(Resolve(data_dir, f));
  ASSIGN_OR_RETURN(data::ShardPlan plan, data::PlanShard(files, policy, shard.num_shards, shard.index));
  std::vector<data::FeatureSpec> specs;
  for (const auto& f : spec.features) specs.push_back(ToData(f));
  specs.push_back(ToData(spec.label));
  ASSIGN_OR_RETURN(std::vector<data::Column> cols, data::ReadExamples(plan, compression, specs));
  const int64_t rows = cols.back().rows;
  if (rows == 0) return InvalidArgument("no records in " + std::to_string(plan.files.size()) + " TFRecord file(s)");
  Raw raw;
  // The model's input: one feature as it is, several flattened side by side.
  const data::FeatureType type = cols[0].type;
  for (size_t i = 1; i + 1 < cols.size(); ++i) {
    if (cols[i].type != type) {
      return InvalidArgument("features \"" + spec.features[0].name + "\" and \"" + spec.features[i].name +
                             "\" have different dtypes; the model's input is one tensor");
    }
  }
  const size_t n = cols.size() - 1;
  Shape per = cols[0].shape;
  if (n > 1) {
    int64_t width = 0;
    for (size_t i = 0; i < n; ++i) width += NumElements(cols[i].shape);
    per = {width};
  }
  data::Column merged;
  merged.type = type;
  merged.rows = rows;
  merged.shape = per;
  for (int64_t r = 0; r < rows; ++r) {
    for (size_t i = 0; i < n; ++i) {
      const int64_t w = NumElements(cols[i].shape);
      switch (type) {
        case data::FeatureType::kFloat32:
          merged.floats.insert(merged.floats.end(), cols[i].floats.begin() + r * w,
                               cols[i].floats.begin() + (r + 1) * w);
          break;
        case data::FeatureType::kInt64:
          merged.ints.insert(merged.ints.end(), cols[i].ints.begin() + r * w, cols[i].ints.begin() + (r + 1) * w);
          break;
        case data::FeatureType::kString:
          merged.strings.insert(merged.strings.end(), cols[i].strings.begin() + r * w,
                                cols[i].strings.begin() + (r + 1) * w);
          break;
      }
    }
  }
  if (type == data::FeatureType::kString) {
    raw.feature_strings = std::move(merged.strings);
    raw.feature_shape = {rows};
    raw.feature_shape.insert(raw.feature_shape.end(), per.begin(), per.end());
  } else {
    ASSIGN_OR_RETURN(raw.features, ColumnTensor(merged));
  }
  data::Column& label = cols.back();
  if (label.type == data::FeatureType::kString) {
    raw.label_strings = std::move(label.strings);
  } else {
    // One value per record: labels [n], as Keras reads a [n, 1] column.
    if (NumElements(label.shape) == 1) label.shape = {};
    ASSIGN_OR_RETURN(raw.labels, ColumnTensor(label));
  }
  return raw;
}

std::string Names(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? "(none)" : s;
}

// One named input's batch of examples from its column, in the input's dtype
// and shape.
StatusOr<Tensor> InputTensor(Tensor column, const model::InputSpec& in, const std::string& field) {
  const int64_t rows = column.dim(0);
  if (column.size() != rows * NumElements(in.shape)) {
    return InvalidArgument(field + ": input \"" + in.name + "\" takes " + std::string(DTypeName(in.dtype)) +
                           ShapeString(in.shape) + " per example, but its feature holds " +
                           std::to_string(rows ? column.size() / rows : 0) + " values per example");
  }
  ASSIGN_OR_RETURN(column, ToDType(column, in.dtype, field + " (input \"" + in.name + "\")"));
  Shape shape{rows};
  shape.insert(shape.end(), in.shape.begin(), in.shape.end());
  return column.Reshape(shape);
}

// A model of several named inputs, fed as Keras feeds a dict of inputs: each
// input from the feature of its name (a tfrecord feature key, a CSV column),
// packed into the one features tensor the pipelines carry (model.h).
StatusOr<Raw> LoadNamedInputs(const model::DataSourceSpec& spec, const std::string& data_dir, const model::Model& m,
                              const InputShard& shard) {
  std::vector<std::string> names;
  std::vector<Tensor> columns;
  Raw raw;
  if (spec.kind == model::DataSourceKind::kTfRecord) {
    for (const auto& f : spec.features) names.push_back(f.name);
    for (const model::InputSpec& in : m.inputs()) {
      if (std::find(names.begin(), names.end(), in.name) == names.end()) {
        return InvalidArgument(spec.field + ": input \"" + in.name +
                               "\" has no feature of that name; the features are " + Names(names));
      }
    }
    ASSIGN_OR_RETURN(data::Compression compression, data::ParseCompression(spec.compression));
    ASSIGN_OR_RETURN(data::AutoShardPolicy policy, data::ParseAutoShardPolicy(spec.auto_shard_policy));
    std::vector<std::string> files;
    for (const auto& f : spec.files) files.push_back(Resolve(data_dir, f));
    ASSIGN_OR_RETURN(data::ShardPlan plan, data::PlanShard(files, policy, shard.num_shards, shard.index));
    std::vector<data::FeatureSpec> specs;
    for (const auto& f : spec.features) specs.push_back(ToData(f));
    specs.push_back(ToData(spec.label));
    ASSIGN_OR_RETURN(std::vector<data::Column> cols, data::ReadExamples(plan, compression, specs));
    if (cols.back().rows == 0)
      return InvalidArgument("no records in " + std::to_string(plan.files.size()) + " TFRecord file(s)");
    for (size_t i = 0; i + 1 < cols.size(); ++i) {
      if (cols[i].type == data::FeatureType::kString) {
        columns.emplace_back();  // refused below if an input takes it
        continue;
      }
      ASSIGN_OR_RETURN(Tensor t, ColumnTensor(cols[i]));
      columns.push_back(std::move(t));
    }
    data::Column& label = cols.back();
    if (label.type == data::FeatureType::kString) {
      raw.label_strings = std::move(label.strings);
    } else {
      if (NumElements(label.shape) == 1) label.shape = {};
      ASSIGN_OR_RETURN(raw.labels, ColumnTensor(label));
    }
  } else if (spec.kind == model::DataSourceKind::kCsv) {
    ASSIGN_OR_RETURN(data::CsvTable t,
                     data::ReadCsvTable(Resolve(data_dir, spec.path), spec.delimiter[0], spec.header));
    names = t.column_names;
    int64_t label = t.num_columns - 1;
    if (!spec.label_name.empty()) {
      ASSIGN_OR_RETURN(label, data::CsvColumn(t, spec.label_name));
    } else if (spec.label_column >= 0) {
      label = spec.label_column;
    }
    for (const model::InputSpec& in : m.inputs()) {
      auto k = std::find(names.begin(), names.end(), in.name);
      if (k == names.end()) {
        return InvalidArgument(spec.field + ": input \"" + in.name + "\" has no column of that name; the columns are " +
                               Names(names));
      }
      ASSIGN_OR_RETURN(Tensor c, data::CsvNumbers(t, {k - names.begin()}, DType::kFloat32));
      columns.push_back(std::move(c));
    }
    names.assign(m.inputs().size(), "");
    for (size_t i = 0; i < m.inputs().size(); ++i) names[i] = m.inputs()[i].name;
    const int64_t rows = static_cast<int64_t>(t.rows.size());
    if (spec.label_lookup && spec.label_lookup->type == model::LayerType::kStringLookup) {
      raw.label_strings = data::CsvStrings(t, {label});
    } else {
      ASSIGN_OR_RETURN(Tensor labels, data::CsvNumbers(t, {label}, DType::kInt64));
      ASSIGN_OR_RETURN(raw.labels, labels.Reshape({rows}));
    }
  } else {
    std::vector<std::string> inputs;
    for (const model::InputSpec& in : m.inputs()) inputs.push_back(in.name);
    return InvalidArgument(spec.field + ": the model's inputs " + Names(inputs) +
                           " are fed by name, from a csv or tfrecord source");
  }
  std::vector<Tensor> parts;
  for (const model::InputSpec& in : m.inputs()) {
    const size_t k = static_cast<size_t>(std::find(names.begin(), names.end(), in.name) - names.begin());
    if (columns[k].size() == 0) {
      return InvalidArgument(spec.field + ": input \"" + in.name + "\": string features feed models of one input only");
    }
    ASSIGN_OR_RETURN(Tensor t, InputTensor(columns[k], in, spec.field));
    parts.push_back(std::move(t));
  }
  auto packed = m.PackInputs(parts);
  if (!packed.ok()) return packed.status().WithContext(spec.field);
  raw.features = std::move(packed).value();
  return raw;
}

// Rows [begin, end) of every part.
StatusOr<Raw> Slice(Raw raw, const model::DataSourceSpec& spec) {
  const int64_t n = raw.rows();
  const int64_t end = spec.end == -1 ? n : spec.end;
  if (spec.begin >= n || end > n) {
    return OutOfRange(spec.field + ": rows [" + std::to_string(spec.begin) + ", " + std::to_string(end) +
                      ") are outside the " + std::to_string(n) + " examples of the source");
  }
  auto strings = [&](std::vector<std::string>& v, int64_t per_row) {
    v = std::vector<std::string>(v.begin() + spec.begin * per_row, v.begin() + end * per_row);
  };
  if (!raw.feature_strings.empty()) {
    strings(raw.feature_strings, static_cast<int64_t>(raw.feature_strings.size()) / n);
    raw.feature_shape[0] = end - spec.begin;
  } else {
    ASSIGN_OR_RETURN(raw.features, raw.features.Rows(spec.begin, end));
  }
  if (!raw.label_strings.empty()) {
    strings(raw.label_strings, static_cast<int64_t>(raw.label_strings.size()) / n);
  } else {
    ASSIGN_OR_RETURN(raw.labels, raw.labels.Rows(spec.begin, end));
  }
  return raw;
}

}  // namespace

Status AdaptText(model::JobConfig& job, const std::string& data_dir) {
  const model::LayerSpec* layer = model::TextLayer(job.model);
  if (!layer || layer->text.adapted) return Status::Ok();
  const model::DataSourceSpec& spec = job.data.train;
  Raw raw;
  if (spec.kind == model::DataSourceKind::kCsv) {
    auto c = LoadCsvSource(spec, Resolve(data_dir, spec.path), true);
    if (!c.ok()) return c.status().WithContext(spec.field);
    raw = std::move(c).value();
  } else if (spec.kind == model::DataSourceKind::kTfRecord) {
    auto t = LoadTfRecordSource(spec, data_dir, {});
    if (!t.ok()) return t.status().WithContext(spec.field);
    raw = std::move(t).value();
  } else {
    return InvalidArgument(spec.field + ": layer \"" + layer->name +
                           "\" (TextVectorization) reads text: a csv column or a tfrecord bytes feature");
  }
  if (spec.begin != 0 || spec.end != -1) {
    ASSIGN_OR_RETURN(raw, Slice(std::move(raw), spec));
  }
  const int64_t rows = raw.feature_shape.empty() ? 0 : raw.feature_shape[0];
  if (raw.feature_strings.empty() || static_cast<int64_t>(raw.feature_strings.size()) != rows) {
    return InvalidArgument(spec.field + ": layer \"" + layer->name +
                           "\" (TextVectorization) takes one text per example; the source gives " +
                           (raw.feature_strings.empty() ? std::string("numbers")
                                                        : std::to_string(rows ? raw.feature_strings.size() / rows : 0) +
                                                              " strings per example"));
  }
  return model::AdaptText(job.model, raw.feature_strings).WithContext(spec.field);
}

namespace {

// Loads one source; `m` (when given) looks up string features.
StatusOr<Examples> Load(const model::DataSourceSpec& spec, const std::string& data_dir, const model::Model* m,
                        DType feature_dtype, const InputShard& shard) {
  const bool string_model = m && m->string_input();
  Raw raw;
  if (m && m->packed_input()) {
    ASSIGN_OR_RETURN(raw, LoadNamedInputs(spec, data_dir, *m, shard));
  } else {
    switch (spec.kind) {
      case model::DataSourceKind::kMnist: {
        auto mn = data::LoadMnist(Resolve(data_dir, spec.images), Resolve(data_dir, spec.labels), spec.begin, spec.end);
        if (!mn.ok()) return mn.status().WithContext(spec.field);
        raw.features = mn->images;
        raw.labels = mn->labels;
        break;
      }
      case model::DataSourceKind::kCsv: {
        // Columns by name, strings or a label lookup need the cells as text.
        if (spec.feature_columns.empty() && spec.label_name.empty() && !spec.label_lookup && !string_model) {
          data::CsvOptions o;
          o.delimiter = spec.delimiter[0];
          o.header = spec.header;
          o.label_column = spec.label_column;
          auto c = data::LoadCsv(Resolve(data_dir, spec.path), o);
          if (!c.ok()) return c.status().WithContext(spec.field);
          raw.features = c->features;
          raw.labels = c->labels;
        } else {
          auto c = LoadCsvSource(spec, Resolve(data_dir, spec.path), string_model);
          if (!c.ok()) return c.status().WithContext(spec.field);
          raw = std::move(c).value();
        }
        break;
      }
      case model::DataSourceKind::kSynthetic: {
        data::SyntheticOptions o;
        o.num_examples = spec.num_examples;
        o.feature_shape = spec.feature_shape;
        o.num_classes = spec.num_classes;
        o.seed = static_cast<uint64_t>(spec.seed);
        o.noise = spec.noise;
        auto syn = data::MakeSynthetic(o);
        if (!syn.ok()) return syn.status().WithContext(spec.field);
        raw.features = syn->features;
        raw.labels = syn->labels;
        break;
      }
      case model::DataSourceKind::kTfRecord: {
        auto t = LoadTfRecordSource(spec, data_dir, shard);
        if (!t.ok()) return t.status().WithContext(spec.field);
        raw = std::move(t).value();
        break;
      }
    }
  }
  if (spec.kind != model::DataSourceKind::kMnist && (spec.begin != 0 || spec.end != -1)) {
    ASSIGN_OR_RETURN(raw, Slice(std::move(raw), spec));
  }
  Examples ex;
  if (!raw.feature_strings.empty() || raw.feature_shape.size() > 0) {
    if (!string_model) {
      return InvalidArgument(spec.field +
                             ": the features are strings; a model takes them with model.input_dtype "
                             "\"string\" and a StringLookup as its first layer");
    }
    auto ids = m->LookupStrings(raw.feature_strings, raw.feature_shape);
    if (!ids.ok()) return ids.status().WithContext(spec.field);
    ex.features = *ids;
  } else {
    if (string_model) {
      return InvalidArgument(spec.field + ": model.input_dtype is \"string\" but the features are numbers");
    }
    ASSIGN_OR_RETURN(ex.features, ToDType(raw.features, feature_dtype, spec.field));
  }
  if (spec.label_lookup) {
    const bool strings = spec.label_lookup->type == model::LayerType::kStringLookup;
    auto table = model::Lookup::Create(spec.label_lookup->lookup, strings);
    if (!table.ok()) return table.status().WithContext(spec.field + ".label_lookup");
    StatusOr<Tensor> ids =
        strings ? (raw.label_strings.empty()
                       ? StatusOr<Tensor>(InvalidArgument("a StringLookup needs string labels"))
                       : table->LookupStrings(raw.label_strings, {static_cast<int64_t>(raw.label_strings.size())}))
                : (raw.labels.dtype() == DType::kInt64
                       ? table->LookupInts(raw.labels)
                       : StatusOr<Tensor>(InvalidArgument("an IntegerLookup needs int64 labels")));
    if (!ids.ok()) return ids.status().WithContext(spec.field + ".label_lookup");
    ex.labels = *ids;
  } else if (!raw.label_strings.empty()) {
    return InvalidArgument(spec.field +
                           ": the labels are strings; add a label_lookup (a StringLookup) to map them to "
                           "class ids");
  } else {
    ex.labels = raw.labels;
  }
  // An image source gives [h, w]; a model taking [h, w, 1] gets the channel
  // axis (what Keras users add with x[..., None]).
  if (m && ex.features.rank() >= 1) {
    Shape per(ex.features.shape().begin() + 1, ex.features.shape().end());
    per.push_back(1);
    if (per == m->input_shape()) {
      Shape with{ex.features.dim(0)};
      with.insert(with.end(), per.begin(), per.end());
      ASSIGN_OR_RETURN(ex.features, ex.features.Reshape(with));
    }
  }
  if (ex.size() == 0) return InvalidArgument(spec.field + ": no examples");
  return ex;
}

}  // namespace

StatusOr<Examples> LoadExamples(const model::DataSourceSpec& spec, const std::string& data_dir, DType feature_dtype) {
  return Load(spec, data_dir, nullptr, feature_dtype, {});
}

StatusOr<Examples> LoadExamples(const model::DataSourceSpec& spec, const std::string& data_dir, const model::Model& m,
                                const InputShard& shard) {
  return Load(spec, data_dir, &m, m.input_dtype(), shard);
}

Status CheckExamples(const Examples& ex, const std::string& field, const Shape& input_shape, DType input_dtype) {
  Shape per(ex.features.shape().begin() + 1, ex.features.shape().end());
  if (per != input_shape || ex.features.dtype() != input_dtype) {
    return InvalidArgument(field + ": examples have features " + std::string(DTypeName(ex.features.dtype())) +
                           ShapeString(per) + " but model.input_shape is " + std::string(DTypeName(input_dtype)) +
                           ShapeString(input_shape));
  }
  if (ex.labels.rank() < 1 || ex.labels.dim(0) != ex.size()) {
    return InvalidArgument(field + ": " + std::to_string(ex.size()) + " examples but labels " +
                           ex.labels.DebugString());
  }
  return Status::Ok();
}

StatusOr<JobData> LoadJobData(const model::JobConfig& job, const std::string& data_dir, const model::Model& m,
                              const InputShard& train_shard) {
  JobData d;
  ASSIGN_OR_RETURN(d.train, LoadExamples(job.data.train, data_dir, m, train_shard));
  RETURN_IF_ERROR(CheckExamples(d.train, job.data.train.field, m.input_shape(), m.input_dtype()));
  Shape probe = m.output_shape();
  probe.insert(probe.begin(), 1);
  ASSIGN_OR_RETURN(Tensor first_labels, d.train.labels.Rows(0, 1));
  RETURN_IF_ERROR(model::CheckLabels(m.training_loss(), probe, first_labels).WithContext(job.data.train.field));
  if (job.data.eval) {
    ASSIGN_OR_RETURN(Examples e, LoadExamples(*job.data.eval, data_dir, m));
    RETURN_IF_ERROR(CheckExamples(e, job.data.eval->field, m.input_shape(), m.input_dtype()));
    d.eval = std::move(e);
  }
  return d;
}

data::Dataset TrainingPipeline(const Examples& ex, const model::JobConfig& job, bool prefetch) {
  data::Dataset ds = data::Dataset::FromTensors({ex.features, ex.labels});
  if (job.data.shuffle) {
    const int64_t buffer = job.data.shuffle_buffer > 0 ? job.data.shuffle_buffer : ex.size();
    ds = ds.Shuffle(buffer, static_cast<uint64_t>(job.seed));
  }
  ds = ds.Batch(job.batch_size);
  return prefetch ? ds.Prefetch(2) : ds;
}

data::Dataset EvalPipeline(const Examples& ex, int64_t batch_size) {
  return data::Dataset::FromTensors({ex.features, ex.labels}).Batch(batch_size).Prefetch(2);
}

namespace {

// SplitMix64: distinct, well-mixed seeds for consecutive passes.
uint64_t PassSeed(int64_t seed, int64_t pass) {
  uint64_t z = static_cast<uint64_t>(seed) + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(pass + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

GlobalBatches::GlobalBatches(Examples examples, const model::JobConfig& job, int64_t batch_rows, uint64_t seed_salt,
                             bool prefetch)
    : examples_(std::move(examples)),
      job_(job),
      batch_rows_(batch_rows > 0 ? batch_rows : job.batch_size),
      seed_salt_(seed_salt),
      prefetch_(prefetch) {}

int64_t GlobalBatches::batches_per_pass() const { return (examples_.size() + batch_rows_ - 1) / batch_rows_; }

data::Dataset GlobalBatches::Pass(int64_t pass) const {
  data::Dataset ds = data::Dataset::FromTensors({examples_.features, examples_.labels});
  if (job_.data.shuffle) {
    const int64_t buffer = job_.data.shuffle_buffer > 0 ? job_.data.shuffle_buffer : examples_.size();
    ds = ds.Shuffle(buffer, PassSeed(job_.seed, pass) ^ seed_salt_, /*reshuffle_each_iteration=*/false);
  }
  ds = ds.Batch(batch_rows_);
  return prefetch_ ? ds.Prefetch(2) : ds;
}

StatusOr<data::Element> GlobalBatches::Get(int64_t step) {
  const int64_t per_pass = batches_per_pass();
  if (per_pass < 1) return InvalidArgument(job_.data.train.field + ": no examples");
  if (!it_ || step != next_ || step % per_pass == 0) {
    ASSIGN_OR_RETURN(it_, Pass(step / per_pass).MakeIterator());
    for (int64_t k = 0; k < step % per_pass; ++k) {
      ASSIGN_OR_RETURN(std::optional<data::Element> skipped, it_->Next());
      if (!skipped) return Internal("input pipeline ended early");
    }
  }
  ASSIGN_OR_RETURN(std::optional<data::Element> e, it_->Next());
  if (!e) return Internal("input pipeline ended early");
  if (e->size() != 2) return Internal("input pipeline produced " + std::to_string(e->size()) + " components");
  next_ = step + 1;
  return std::move(*e);
}

}  // namespace tfjob::strategy

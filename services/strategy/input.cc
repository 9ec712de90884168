#include "services/strategy/input.h"

#include <cmath>
#include <filesystem>

#include "services/data/csv.h"
#include "services/data/mnist.h"
#include "services/data/synthetic.h"
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

StatusOr<Examples> LoadExamples(const model::DataSourceSpec& spec, const std::string& data_dir, DType feature_dtype) {
  Examples ex;
  switch (spec.kind) {
    case model::DataSourceKind::kMnist: {
      auto m = data::LoadMnist(Resolve(data_dir, spec.images), Resolve(data_dir, spec.labels), spec.begin, spec.end);
      if (!m.ok()) return m.status().WithContext(spec.field);
      ex.features = m->images;
      ex.labels = m->labels;
      break;
    }
    case model::DataSourceKind::kCsv: {
      data::CsvOptions o;
      o.delimiter = spec.delimiter[0];
      o.header = spec.header;
      o.label_column = spec.label_column;
      auto c = data::LoadCsv(Resolve(data_dir, spec.path), o);
      if (!c.ok()) return c.status().WithContext(spec.field);
      ex.features = c->features;
      ex.labels = c->labels;
      break;
    }
    case model::DataSourceKind::kSynthetic: {
      data::SyntheticOptions o;
      o.num_examples = spec.num_examples;
      o.feature_shape = spec.feature_shape;
      o.num_classes = spec.num_classes;
      o.seed = static_cast<uint64_t>(spec.seed);
      o.noise = spec.noise;
      auto s = data::MakeSynthetic(o);
      if (!s.ok()) return s.status().WithContext(spec.field);
      ex.features = s->features;
      ex.labels = s->labels;
      break;
    }
  }
  if (spec.kind != model::DataSourceKind::kMnist && (spec.begin != 0 || spec.end != -1)) {
    const int64_t n = ex.features.dim(0);
    const int64_t end = spec.end == -1 ? n : spec.end;
    if (spec.begin >= n || end > n) {
      return OutOfRange(spec.field + ": rows [" + std::to_string(spec.begin) + ", " + std::to_string(end) +
                        ") are outside the " + std::to_string(n) + " examples of the source");
    }
    ex.features = *ex.features.Rows(spec.begin, end);
    ex.labels = *ex.labels.Rows(spec.begin, end);
  }
  ASSIGN_OR_RETURN(ex.features, ToDType(ex.features, feature_dtype, spec.field));
  if (ex.size() == 0) return InvalidArgument(spec.field + ": no examples");
  return ex;
}

Status CheckExamples(const Examples& ex, const std::string& field, const Shape& input_shape, DType input_dtype) {
  Shape per(ex.features.shape().begin() + 1, ex.features.shape().end());
  if (per != input_shape || ex.features.dtype() != input_dtype) {
    return InvalidArgument(field + ": examples have features " + std::string(DTypeName(ex.features.dtype())) +
                           ShapeString(per) + " but model.input_shape is " + std::string(DTypeName(input_dtype)) +
                           ShapeString(input_shape));
  }
  if (ex.labels.rank() < 1 || ex.labels.dim(0) != ex.size()) {
    return InvalidArgument(field + ": " + std::to_string(ex.size()) + " examples but labels " + ex.labels.DebugString());
  }
  return Status::Ok();
}

StatusOr<JobData> LoadJobData(const model::JobConfig& job, const std::string& data_dir, const model::Model& m) {
  JobData d;
  ASSIGN_OR_RETURN(d.train, LoadExamples(job.data.train, data_dir, m.input_dtype()));
  RETURN_IF_ERROR(CheckExamples(d.train, job.data.train.field, m.input_shape(), m.input_dtype()));
  Shape probe = m.output_shape();
  probe.insert(probe.begin(), 1);
  ASSIGN_OR_RETURN(Tensor first_labels, d.train.labels.Rows(0, 1));
  RETURN_IF_ERROR(model::CheckLabels(m.training_loss(), probe, first_labels).WithContext(job.data.train.field));
  if (job.data.eval) {
    ASSIGN_OR_RETURN(Examples e, LoadExamples(*job.data.eval, data_dir, m.input_dtype()));
    RETURN_IF_ERROR(CheckExamples(e, job.data.eval->field, m.input_shape(), m.input_dtype()));
    d.eval = std::move(e);
  }
  return d;
}

data::Dataset TrainingPipeline(const Examples& ex, const model::JobConfig& job) {
  data::Dataset ds = data::Dataset::FromTensors({ex.features, ex.labels});
  if (job.data.shuffle) {
    const int64_t buffer = job.data.shuffle_buffer > 0 ? job.data.shuffle_buffer : ex.size();
    ds = ds.Shuffle(buffer, static_cast<uint64_t>(job.seed));
  }
  return ds.Batch(job.batch_size).Prefetch(2);
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

GlobalBatches::GlobalBatches(Examples examples, const model::JobConfig& job)
    : examples_(std::move(examples)), job_(job) {}

int64_t GlobalBatches::batches_per_pass() const { return (examples_.size() + job_.batch_size - 1) / job_.batch_size; }

data::Dataset GlobalBatches::Pass(int64_t pass) const {
  data::Dataset ds = data::Dataset::FromTensors({examples_.features, examples_.labels});
  if (job_.data.shuffle) {
    const int64_t buffer = job_.data.shuffle_buffer > 0 ? job_.data.shuffle_buffer : examples_.size();
    ds = ds.Shuffle(buffer, PassSeed(job_.seed, pass), /*reshuffle_each_iteration=*/false);
  }
  return ds.Batch(job_.batch_size).Prefetch(2);
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

// Turns the data section of a job description into in-memory examples and
// input pipelines. Relative paths resolve against the data directory.
// Thread-safety: functions are reentrant. Failure: errors name the config
// field ("data.train") and the file at fault; exit code 2 territory.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "services/data/dataset.h"
#include "services/model/job_config.h"
#include "services/model/model.h"
#include "services/tensor/tensor.h"

namespace tfjob::strategy {

struct Examples {
  Tensor features;  // [n, ...]
  Tensor labels;    // [n] or [n, ...]
  int64_t size() const { return features.rank() ? features.dim(0) : 0; }
};

// Which part of a multi-file source a reader takes (tfrecord sources, per
// their auto_shard_policy); one shard is everything.
struct InputShard {
  int64_t num_shards = 1;
  int64_t index = 0;
};

// Loads one source for model `m`: string features (CSV cells, bytes_list
// features) go through the model's input StringLookup, labels through the
// source's label_lookup; numeric features are converted to the model's
// input dtype when every value is integral (CSV ids for embeddings); an
// image source's [h, w] gets a channel axis when the model takes [h, w, 1].
StatusOr<Examples> LoadExamples(const model::DataSourceSpec& spec, const std::string& data_dir, const model::Model& m,
                                const InputShard& shard = {});
// The same for numeric sources without a model: features as `feature_dtype`.
StatusOr<Examples> LoadExamples(const model::DataSourceSpec& spec, const std::string& data_dir, DType feature_dtype);

// Keras' adapt() for a model with a TextVectorization layer (model/text.h):
// its vocabulary (unless given) and padded length from the texts of the
// whole training source (every row in data.train's range, whatever shard a
// task reads), set in job.model. A no-op for other models and for one
// already adapted. Errors name data.train.
Status AdaptText(model::JobConfig& job, const std::string& data_dir);

// Checks the examples against the model's input and the loss's labels, naming
// the data field and both shapes.
Status CheckExamples(const Examples& ex, const std::string& field, const Shape& input_shape, DType input_dtype);

// A job's training data and, when it names one, its eval data, loaded and
// checked against the model and the loss (errors name the data field; the
// caller adds the job file).
struct JobData {
  Examples train;
  std::optional<Examples> eval;
};
// `train_shard` picks this reader's part of a sharded training source.
StatusOr<JobData> LoadJobData(const model::JobConfig& job, const std::string& data_dir, const model::Model& m,
                              const InputShard& train_shard = {});

// (features, label) batches: shuffled per epoch with the job seed, batched,
// and (`prefetch`) made ahead on a thread of their own. Keeps the last
// partial batch, as Keras does.
data::Dataset TrainingPipeline(const Examples& ex, const model::JobConfig& job, bool prefetch = true);
data::Dataset EvalPipeline(const Examples& ex, int64_t batch_size);

// The sequence of global batches of synchronous training: step s is batch
// s % P of pass s / P over the training data (P batches per pass), each pass
// shuffled with a seed derived from the job's seed and the pass number. So
// every replica, in any process, gets the same batch for the same step, and
// a member that joins a running group at step s starts exactly there.
// Thread-safety: one thread. Failure: pipeline errors from Get.
//
// Sharded input (multi_worker_mirrored over a sharded source): each member
// holds only its shard and takes `batch_rows` rows of it per step (its part
// of the global batch), shuffled with `seed_salt` mixed into the seed; the
// global batch of a step is then the members' parts together.
//
// `prefetch`: each batch is gathered on a thread of its own, ahead of the
// step. Worth it when the step's compute is elsewhere (a device); on the
// host the gather (a row copy from the in-memory examples) costs less than
// handing its 200 KB (MNIST, 64 rows) from one core's cache to another's,
// and the thread takes a core from the compute threads
// (docs/performance.md).
class GlobalBatches {
 public:
  GlobalBatches(Examples examples, const model::JobConfig& job, int64_t batch_rows = 0, uint64_t seed_salt = 0,
                bool prefetch = false);
  const Examples& examples() const { return examples_; }
  int64_t batches_per_pass() const;
  // The global batch of training step `step` (0-based, across epochs).
  // Sequential calls cost one batch each; any other step rebuilds the pass
  // and skips to it.
  StatusOr<data::Element> Get(int64_t step);

 private:
  data::Dataset Pass(int64_t pass) const;

  Examples examples_;
  model::JobConfig job_;
  int64_t batch_rows_;
  uint64_t seed_salt_;
  bool prefetch_;
  std::unique_ptr<data::Iterator> it_;
  int64_t next_ = -1;  // the step it_ yields next
};

}  // namespace tfjob::strategy

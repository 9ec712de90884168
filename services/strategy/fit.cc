#include "services/strategy/fit.h"

#include <chrono>
#include <ostream>

#include "services/model/keras_weights.h"
#include "services/strategy/sync.h"

namespace tfjob::strategy {

StatusOr<FitSummary> FitAndEvaluate(Strategy& strategy, const model::JobConfig& job, const JobData& data,
                                    const LoopOptions& loop, std::ostream* out) {
  // Errors from training name what failed themselves (a peer, a checkpoint,
  // a data field); the job file is added only to evaluation's.
  ASSIGN_OR_RETURN(FitSummary s, RunTrainingLoop(strategy, loop));
  StatusOr<FitSummary> summary = std::move(s);
  summary->name = job.name;
  if (data.eval && strategy.is_chief()) {
    ASSIGN_OR_RETURN(auto m, model::Model::Create(job.model, job.loss));
    ASSIGN_OR_RETURN(std::vector<Tensor> values, strategy.Values());
    const auto t0 = std::chrono::steady_clock::now();
    auto r = Evaluate(*m, job, *data.eval, values, strategy.eval_device());
    if (!r.ok()) return r.status().WithContext("evaluation").WithContext(job.source);
    summary->eval = r->second;
    if (out) {
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      *out << "Evaluation\n" << FormatProgress(r->first, r->first, secs, *summary->eval) << std::endl;
    }
  }
  return summary;
}

StatusOr<FitSummary> Fit(const model::JobConfig& job, const FitOptions& o, nlohmann::json* strategy_json) {
  auto with_source = [&](Status s) { return s.WithContext(job.source); };
  auto m = model::Model::Create(job.model, job.loss);
  if (!m.ok()) return with_source(m.status());
  // Multi-worker mirrored reads a sharded source's part per worker (tf.data's
  // auto-sharding) when the job fixes the steps per epoch, since the parts
  // differ in length; otherwise every worker reads everything and takes its
  // rows of each global batch.
  InputShard shard;
  const model::DataSourceSpec& train = job.data.train;
  const bool sharded = o.strategy == StrategyKind::kMultiWorkerMirrored && o.group && o.group->size() > 1 &&
                       train.kind == model::DataSourceKind::kTfRecord && train.auto_shard_policy != "OFF" &&
                       job.steps_per_epoch > 0;
  if (sharded) shard = {o.group->size(), o.group->rank()};
  auto data = LoadJobData(job, o.data_dir, **m, shard);
  if (!data.ok()) return with_source(data.status());
  if (sharded && o.out) {
    *o.out << "fit: " << train.field << ": auto_shard_policy " << train.auto_shard_policy
           << ", this worker reads shard " << shard.index << " of " << shard.num_shards << " (" << data->train.size()
           << " examples)" << std::endl;
  }
  SyncOptions so;
  so.kind = o.strategy;
  so.replicas = o.replicas;
  so.devices = o.devices;
  so.group = o.group;
  so.communication = o.communication;
  so.collective = o.collective;
  so.checkpoints = o.checkpoints;
  so.log = o.out;
  so.stop = o.stop;
  so.sharded_input = sharded;
  so.initial_values = o.initial_values;
  auto strategy = MakeSyncStrategy(job, data->train, so);
  if (!strategy.ok()) return with_source(strategy.status());
  LoopOptions lo;
  lo.epochs = o.epochs > 0 ? o.epochs : job.epochs;
  lo.steps_per_epoch = StepsPerEpoch(job, data->train.size());
  lo.checkpoints = o.checkpoints;
  lo.metric_names = job.metric_names;
  lo.out = o.out;
  lo.metrics = o.metrics;
  lo.stop = o.stop;
  auto summary = FitAndEvaluate(**strategy, job, *data, lo, o.out);
  if (strategy_json) *strategy_json = (*strategy)->SummaryJson();
  if (summary.ok() && (!o.export_weights.empty() || o.after_fit) && (*strategy)->is_chief()) {
    // The adapted count Keras keeps beside Normalization's statistics.
    RETURN_IF_ERROR((*m)->Adapt(data->train.features));
    ASSIGN_OR_RETURN(std::vector<Tensor> values, (*strategy)->Values());
    if (!o.export_weights.empty()) {
      RETURN_IF_ERROR(model::ExportKerasWeights(**m, values, o.export_weights));
      if (o.out) *o.out << "fit: wrote Keras weights to " << o.export_weights << std::endl;
    }
    if (o.after_fit) RETURN_IF_ERROR(o.after_fit(**m, values, *data));
  }
  return summary;
}

}  // namespace tfjob::strategy
